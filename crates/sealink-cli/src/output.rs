//! The product's output: results on stdout, where a closed pipe is not an error.

use anyhow::{Context, Result};

/// Writes `text` to stdout. A reader that went away (`sealink trust list | head`) ends the
/// output quietly rather than with an error.
pub fn print(text: &str) -> Result<()> {
    sealink_cmdline::print_stdout(text).context("cannot write to standard output")
}
