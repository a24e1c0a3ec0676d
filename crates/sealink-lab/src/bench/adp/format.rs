//! The adp tables: a title over a [`report::Table`](crate::report::Table), which renders the
//! markdown and CSV as every bench does; and the number formats the tables share.

use crate::report;

/// A table under a `###` title.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub title: String,
    pub table: report::Table,
    /// Headline figures for the run record: (name, value, unit).
    pub figures: Vec<(String, f64, &'static str)>,
}

/// The columns of the tables that set latency and throughput beside the paper's: each
/// measured figure, the paper's, and their ratio.
pub const L_AND_T: [&str; 6] = ["L ms", "paper", "ratio", "T kB/s", "paper", "ratio"];

impl Table {
    pub fn new(title: impl Into<String>, headers: &[&str]) -> Self {
        Table {
            title: title.into(),
            table: report::Table::new(headers.iter().copied()),
            figures: Vec::new(),
        }
    }

    /// Notes a headline figure for the run record.
    pub fn figure(&mut self, name: impl Into<String>, value: f64, unit: &'static str) {
        self.figures.push((name.into(), value, unit));
    }

    pub fn push(&mut self, row: Vec<String>) {
        self.table.row(row);
    }

    /// The markdown table under its `###` title, then a blank line.
    pub fn markdown(&self) -> String {
        format!("### {}\n\n{}\n", self.title, self.table.markdown())
    }
}

/// A number with `d` decimals; "n/a" when not finite.
pub fn num(x: f64, d: usize) -> String {
    if x.is_finite() {
        format!("{x:.d$}")
    } else {
        "n/a".to_owned()
    }
}

/// ours / paper with two decimals.
pub fn ratio(ours: f64, paper: f64) -> String {
    num(ours / paper, 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titled_markdown_and_numbers() {
        let mut t = Table::new("T", &["a", "b"]);
        t.push(vec!["1|2".into(), "3".into()]);
        let md = t.markdown();
        assert!(md.starts_with("### T\n\n| a "), "{md}");
        assert!(md.contains("1\\|2"), "{md}");
        assert_eq!(num(f64::NAN, 1), "n/a");
        assert_eq!(ratio(3.0, 2.0), "1.50");
    }
}
