//! [`Chart`]: line charts of named series, drawn as SVG by plotters (its SVG backend only: text
//! stays `<text>` elements, so no font is needed to draw, and any viewer renders them).

use std::ops::Range;
use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::write_file;
use crate::error::{Error, Result};

const SIZE: (u32, u32) = (720, 440);

/// One line: a name for the legend and its (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart: every series as a line with dots at its points, a legend, and optionally a
/// logarithmic y axis and the dashed ideal line y = x (for speedups).
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_y: bool,
    pub ideal: bool,
    pub series: Vec<Series>,
}

impl Chart {
    pub fn new(title: impl Into<String>, x_label: &str, y_label: &str) -> Self {
        Chart {
            title: title.into(),
            x_label: x_label.to_owned(),
            y_label: y_label.to_owned(),
            log_y: false,
            ideal: false,
            series: Vec::new(),
        }
    }

    pub fn log_y(mut self) -> Self {
        self.log_y = true;
        self
    }

    /// Adds the dashed line y = x, "ideal (linear)".
    pub fn ideal(mut self) -> Self {
        self.ideal = true;
        self
    }

    pub fn series(mut self, name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        self.series.push(Series {
            name: name.into(),
            points,
        });
        self
    }

    /// Points that can be drawn: finite, and positive (a log axis has no zero; nor does a
    /// throughput or a speedup).
    fn drawable(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(|p| p.0.is_finite() && p.1.is_finite() && p.1 > 0.0)
    }

    /// The axes' ranges: x over the points, y from the lowest to the highest point (from 0 on
    /// a linear axis, with 10% room on top), widened to hold the ideal line.
    fn ranges(&self) -> (Range<f64>, Range<f64>) {
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for (x, y) in self.drawable() {
            (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
        }
        if x0 > x1 {
            (x0, x1, y0, y1) = (1.0, 2.0, 1.0, 2.0);
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        if self.ideal {
            (y0, y1) = (y0.min(x0), y1.max(x1));
        }
        let y = if self.log_y {
            10f64.powf(y0.log10().floor())
                ..10f64.powf(y1.log10().ceil().max(y0.log10().floor() + 1.0))
        } else {
            0.0..y1 * 1.1
        };
        (x0..x1, y)
    }

    /// As many x labels as distinct x values (workers 1..N, connection counts), within reason.
    fn x_ticks(&self) -> usize {
        let mut xs: Vec<f64> = self.drawable().map(|p| p.0).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        xs.len().clamp(2, 12)
    }

    /// The chart as an SVG document.
    pub fn svg(&self) -> Result<String> {
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
            let (x, y) = self.ranges();
            if self.log_y {
                self.draw(&root, x, y.log_scale())
            } else {
                self.draw(&root, x, y)
            }
            .map_err(|e| Error::bench(format!("cannot draw the chart {:?}: {e}", self.title)))?;
        }
        Ok(svg)
    }

    fn draw<Y>(
        &self,
        root: &DrawingArea<SVGBackend<'_>, Shift>,
        x: Range<f64>,
        y: Y,
    ) -> std::result::Result<(), DrawingAreaErrorKind<std::io::Error>>
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        root.fill(&WHITE)?;
        let (x0, x1) = (x.start, x.end);
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", 14))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x, y)?;
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .disable_x_mesh()
            .max_light_lines(0)
            .x_labels(self.x_ticks())
            .x_label_formatter(&|x| format!("{x}"))
            .y_label_formatter(&|y| {
                if self.log_y {
                    format!("{y}")
                } else {
                    format!("{y:.1}")
                }
            })
            .draw()?;
        if self.ideal {
            let gray = RGBColor(128, 128, 128);
            chart
                .draw_series(DashedLineSeries::new(
                    [(x0, x0), (x1, x1)],
                    6,
                    4,
                    gray.stroke_width(1),
                ))?
                .label("ideal (linear)")
                .legend(move |(px, py)| PathElement::new([(px, py), (px + 20, py)], gray));
        }
        for (i, s) in self.series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|p| p.0.is_finite() && p.1.is_finite() && p.1 > 0.0)
                .collect();
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
                .label(&s.name)
                .legend(move |(px, py)| {
                    PathElement::new([(px, py), (px + 20, py)], color.stroke_width(2))
                });
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()
    }

    /// Writes [`Chart::svg`] to `path`, creating its directory.
    pub fn write_svg(&self, path: &Path) -> Result<()> {
        write_file(path, &self.svg()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_title_axes_and_every_series_name() {
        let c = Chart::new("PLP <send> throughput", "workers", "Mbit/s (log)")
            .log_y()
            .series("aes128-gcm", vec![(1.0, 900.0), (2.0, 1700.0)])
            .series("baseline", vec![(1.0, 5000.0), (2.0, f64::NAN)]);
        let svg = c.svg().unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{svg}"
        );
        for text in [
            "PLP &lt;send&gt; throughput",
            "workers",
            "Mbit/s (log)",
            "aes128-gcm",
            "baseline",
        ] {
            assert!(svg.contains(text), "missing {text:?} in {svg}");
        }
        // A line per series and its legend entry, and a dot per drawable point (not the NaN).
        let lines = svg
            .lines()
            .filter(|l| l.starts_with("<polyline") && l.contains(r#"stroke-width="2""#));
        assert_eq!(lines.count(), 2 + 2, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 3, "{svg}");
    }

    #[test]
    fn ideal_line_and_linear_axis() {
        let c = Chart::new("speedup", "workers", "speedup")
            .ideal()
            .series("md5", vec![(1.0, 1.0), (2.0, 1.8), (4.0, 3.1)]);
        let (x, y) = c.ranges();
        assert_eq!((x.start, x.end), (1.0, 4.0));
        // The ideal line reaches 4; 10% room on top.
        assert!((y.end - 4.4).abs() < 1e-9 && y.start == 0.0, "{y:?}");
        let svg = c.svg().unwrap();
        assert!(
            svg.contains("ideal (linear)") && svg.contains("md5"),
            "{svg}"
        );
        assert!(svg.contains("stroke-dasharray") || svg.matches("<polyline").count() > 3);
    }

    #[test]
    fn write_svg_creates_the_file() {
        let dir = std::env::temp_dir().join(format!("sealink-report-plot-{}", std::process::id()));
        let path = dir.join("sub").join("c.svg");
        Chart::new("t", "x", "y")
            .series("only", vec![(1.0, 2.0)])
            .write_svg(&path)
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("only"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
