//! How every bench reports: one renderer for its tables, CSV files, plots and run record.
//!
//! - [`Table`]: header and rows of text cells; [`Table::markdown`] (the benches' tables on
//!   stdout), [`Table::terminal`] (borderless, for `bench datagram`), and
//!   [`Table::csv`] (RFC 4180 quoting through the csv crate), all from the same cells.
//! - [`Chart`]: line charts of named series as SVG (plotters, SVG backend only).
//! - [`RunRecord`]: the JSON record each bench writes beside its CSV, `<out>/<bench>.json`.
//! - [`PointLog`]: a CSV that gets each point as it is measured, so a stopped run keeps them.
//!
//! # The run record (schema 1)
//!
//! ```json
//! {
//!   "schema": 1,
//!   "bench": "socket",
//!   "git_commit": "cd38fa9",
//!   "cpu_model": "Intel(R) Xeon(R) CPU @ 2.20GHz",
//!   "cores": 2,
//!   "date": "2026-11-23T18:16:26Z",
//!   "command_line": ["sealink", "bench", "socket", "--quick"],
//!   "files": ["socket.csv"],
//!   "summary": [
//!     { "name": "integrated 16k Gbit/s", "value": 12.5, "unit": "Gbit/s" },
//!     { "name": "integrated vs library 4k improvement", "value": null, "unit": "%" }
//!   ]
//! }
//! ```
//!
//! - `schema`: this layout's version ([`record::SCHEMA`]).
//! - `bench`: the bench's name (`seal`, `crypto`, `stacks`, `socket`, `datagram`); the record
//!   is `<bench>.json` in the bench's output directory.
//! - `git_commit`: `git rev-parse --short HEAD` where the bench ran, or `"unknown"`.
//! - `cpu_model`: the first "model name" of /proc/cpuinfo, or `"unknown"`.
//! - `cores`: the cores the process could use (`available_parallelism`; 0 if unknown).
//! - `date`: when the run ended, UTC, RFC 3339 to the second.
//! - `command_line`: the process's arguments, the program first.
//! - `files`: the files the run wrote in the same directory (CSV, SVG), by name.
//! - `summary`: the run's headline figures, each a name, a value (`null` when not finite) and
//!   a unit; the CSV files hold every measurement.

mod plot;
mod points;
pub mod record;
mod table;

use std::path::Path;

pub use plot::{Chart, Series};
pub use points::PointLog;
pub use record::{Figure, RunRecord};
pub use table::Table;

use crate::error::{Error, Result};

/// A figure to about three significant digits, as the tables print measured values and
/// ratios: `123`, `12.3`, `1.23`.
pub fn fmt_sig(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Writes `text` to `path`, creating the directory it goes in.
pub fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(Error::io("create", dir))?;
    }
    std::fs::write(path, text).map_err(Error::io("write", path))
}
