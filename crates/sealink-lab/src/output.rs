//! Writing results to stdout (a closed pipe is not an error) and progress bars on stderr.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::error::{Error, Result};

/// Writes `text` to stdout. A reader that went away (`sealink-lab bench seal | head`) ends the output
/// quietly rather than with an error.
pub fn print(text: &str) -> Result<()> {
    sealink_cmdline::print_stdout(text).map_err(Error::Stdout)
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
