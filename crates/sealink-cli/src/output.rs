//! The product's output: results on stdout (a closed pipe is not an error), a progress bar on
//! stderr, and borderless terminal tables (`sealink demo`'s report).

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, Result};
use comfy_table::{CellAlignment, ContentArrangement, presets};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Writes `text` to stdout. A reader that went away (`sealink demo | head`) ends the output
/// quietly rather than with an error.
pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("cannot write to standard output"),
    }
}

/// A progress bar on stderr when stderr is a terminal; a hidden one otherwise.
pub fn progress(len: u64, message: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let style =
        ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} ({elapsed}, eta {eta})")
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
    pb.set_style(style);
    pb.set_message(message);
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// A table of text cells for the terminal. The first column (a label) and the columns named
/// in [`Table::left`] are left-aligned; every other column holds numbers and is right-aligned.
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

    /// A borderless table: the label column, then each column three spaces after the previous
    /// one; cells never wrap; trailing blanks trimmed.
    pub fn terminal(&self) -> String {
        let mut t = comfy_table::Table::new();
        t.load_preset(presets::NOTHING)
            .set_content_arrangement(ContentArrangement::Disabled)
            .set_header(&self.head)
            .add_rows(&self.rows);
        for (i, col) in t.column_iter_mut().enumerate() {
            col.set_cell_alignment(if self.left.contains(&i) {
                CellAlignment::Left
            } else {
                CellAlignment::Right
            });
            col.set_padding((if i == 0 { 0 } else { 3 }, 0));
        }
        let mut out = t.trim_fmt();
        out.push('\n');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut t = Table::new(["op", "count", "expected"]).left(&[2]);
        t.row(["signs", "2", "2 each"]);
        t.row(["dh", "10"]);
        assert_eq!(
            t.terminal(),
            concat!(
                "op      count   expected\n",
                "signs       2   2 each\n",
                "dh         10\n",
            )
        );
    }
}
