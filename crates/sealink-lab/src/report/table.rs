//! [`Table`]: a header and rows of text cells, rendered as a markdown table or a borderless
//! terminal table (both through comfy-table) or written as CSV (through the csv crate).

use std::path::Path;

use comfy_table::{CellAlignment, ContentArrangement, presets};

use super::write_file;
use crate::error::{Error, Result};

/// A table of text cells. The first column (a label) and the columns named in [`Table::left`]
/// are left-aligned; every other column holds numbers and is right-aligned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
    left: Vec<usize>,
}

impl Table {
    pub fn new<S: Into<String>>(head: impl IntoIterator<Item = S>) -> Self {
        Table {
            head: head.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
            left: vec![0],
        }
    }

    /// Marks the columns `cols` as text (left-aligned) besides the first one.
    pub fn left(mut self, cols: &[usize]) -> Self {
        self.left.extend_from_slice(cols);
        self
    }

    /// Appends a row; a row shorter than the header is padded with empty cells.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut r: Vec<String> = cells.into_iter().map(Into::into).collect();
        r.resize(r.len().max(self.head.len()), String::new());
        self.rows.push(r);
    }

    /// The rows, as appended (padded to the header's width).
    pub fn rows(&self) -> &[Vec<String>] {
        &self.rows
    }

    /// One table from several with the same header, each part's rows after a leading `key`
    /// column holding the part's name (e.g. one CSV for several profiles).
    pub fn stacked(key: &str, parts: &[(&str, &Table)]) -> Table {
        let head = parts.first().map_or(&[][..], |(_, t)| &t.head[..]);
        let mut out = Table::new(std::iter::once(key).chain(head.iter().map(String::as_str)));
        for (name, t) in parts {
            for r in &t.rows {
                out.row(std::iter::once(*name).chain(r.iter().map(String::as_str)));
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn is_left(&self, col: usize) -> bool {
        self.left.contains(&col)
    }

    /// The comfy-table with this table's cells and alignment; cells never wrap (no width limit).
    fn comfy(&self, preset: &str, escape: fn(&str) -> String) -> comfy_table::Table {
        let mut t = comfy_table::Table::new();
        t.load_preset(preset)
            .set_content_arrangement(ContentArrangement::Disabled)
            .set_header(self.head.iter().map(|c| escape(c)))
            .add_rows(self.rows.iter().map(|r| r.iter().map(|c| escape(c))));
        for (i, col) in t.column_iter_mut().enumerate() {
            col.set_cell_alignment(if self.is_left(i) {
                CellAlignment::Left
            } else {
                CellAlignment::Right
            });
        }
        t
    }

    /// A GitHub markdown table: padded columns, and `---:` under the right-aligned ones.
    pub fn markdown(&self) -> String {
        let t = self.comfy(presets::ASCII_MARKDOWN, |c| c.replace('|', "\\|"));
        let mut out = String::new();
        for (i, line) in t.lines().enumerate() {
            if i == 1 {
                out.push_str(&self.mark_alignment(&line));
            } else {
                out.push_str(line.trim_end());
            }
            out.push('\n');
        }
        out
    }

    /// comfy-table's markdown separator is `|-----|-----|`; markdown states right alignment by
    /// a colon at the end of a column's dashes.
    fn mark_alignment(&self, sep: &str) -> String {
        let cols: Vec<&str> = sep.trim_matches('|').split('|').collect();
        let marked: Vec<String> = cols
            .iter()
            .enumerate()
            .map(|(i, dashes)| {
                if self.is_left(i) || dashes.len() < 2 {
                    (*dashes).to_owned()
                } else {
                    format!("{}:", &dashes[1..])
                }
            })
            .collect();
        format!("|{}|", marked.join("|"))
    }

    /// A borderless table for the terminal: the label column, then each column three spaces
    /// after the previous one; trailing blanks trimmed.
    pub fn terminal(&self) -> String {
        let mut t = self.comfy(presets::NOTHING, str::to_owned);
        for (i, col) in t.column_iter_mut().enumerate() {
            col.set_padding((if i == 0 { 0 } else { 3 }, 0));
        }
        let mut out = t.trim_fmt();
        out.push('\n');
        out
    }

    /// The table as CSV (RFC 4180 quoting): header line, then one line per row.
    pub fn csv(&self) -> Result<String> {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(&self.head)
            .map_err(|e| Error::bench_by("cannot write a CSV header", e))?;
        for r in &self.rows {
            w.write_record(r)
                .map_err(|e| Error::bench_by("cannot write a CSV row", e))?;
        }
        let bytes = w
            .into_inner()
            .map_err(|e| Error::bench_by("cannot finish the CSV", e.into_error()))?;
        String::from_utf8(bytes).map_err(|e| Error::bench_by("CSV is not UTF-8", e))
    }

    /// Writes [`Table::csv`] to `path`, creating its directory.
    pub fn write_csv(&self, path: &Path) -> Result<()> {
        write_file(path, &self.csv()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Table {
        let mut t = Table::new(["suite", "size", "note", "Gbit/s"]).left(&[2]);
        t.row(["aes128-gcm", "64", "short", "1.234"]);
        t.row(["chacha20-poly1305", "65000", "a | pipe", "12.5"]);
        t
    }

    #[test]
    fn markdown_shape_and_alignment() {
        let md = sample().markdown();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 4, "{md}");
        assert_eq!(
            lines[0],
            "| suite             |  size | note      | Gbit/s |"
        );
        assert_eq!(
            lines[1],
            "|-------------------|------:|-----------|-------:|"
        );
        assert_eq!(
            lines[2],
            "| aes128-gcm        |    64 | short     |  1.234 |"
        );
        assert_eq!(
            lines[3],
            "| chacha20-poly1305 | 65000 | a \\| pipe |   12.5 |"
        );
        // Every line has one more pipe than there are columns (escaped pipes aside).
        for l in &lines {
            assert_eq!(l.replace("\\|", "").matches('|').count(), 5, "{l}");
        }
    }

    #[test]
    fn terminal_is_borderless_and_aligned() {
        let mut t = Table::new(["", "A→B", "total"]);
        t.row(["messages sent", "5", "10"]);
        t.row(["  ack-only", "123", ""]);
        assert_eq!(
            t.terminal(),
            concat!(
                "                A→B   total\n",
                "messages sent     5      10\n",
                "  ack-only      123\n",
            )
        );
    }

    #[test]
    fn csv_quotes_commas_quotes_and_newlines() {
        let mut t = Table::new(["name", "value", "detail"]);
        t.row(["GHASH, this binary", "1.5", "say \"hi\""]);
        t.row(["plain", "2", "two\nlines"]);
        let csv = t.csv().unwrap();
        assert_eq!(
            csv,
            "name,value,detail\n\"GHASH, this binary\",1.5,\"say \"\"hi\"\"\"\nplain,2,\"two\nlines\"\n"
        );
        // And it reads back into the same cells.
        let mut r = csv::Reader::from_reader(csv.as_bytes());
        let rows: Vec<Vec<String>> = r
            .records()
            .map(|x| x.unwrap().iter().map(str::to_owned).collect())
            .collect();
        assert_eq!(rows, t.rows);
    }

    #[test]
    fn short_rows_are_padded() {
        let mut t = Table::new(["a", "b", "c"]);
        t.row(["x"]);
        assert_eq!(t.csv().unwrap(), "a,b,c\nx,,\n");
    }
}
