//! The product's output: results on stdout, where a closed pipe is not an error.

use std::io::Write;

use anyhow::{Context, Result};

/// Writes `text` to stdout. A reader that went away (`sealink trust list | head`) ends the
/// output quietly rather than with an error.
pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("cannot write to standard output"),
    }
}
