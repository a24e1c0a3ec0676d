//! What the `sealink` and `sealink-lab` binaries share on the command line: option values with
//! units ([`units`]: durations, rates, sizes, integers within a range), the log set-up from
//! `-v`/`-q` and `RUST_LOG` ([`init_logging`]), stdout that a closed pipe does not fail
//! ([`print_stdout`]), and the exit status of a usage error.
#![forbid(unsafe_code)]

pub mod units;

use std::io::Write;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

/// Exit status of a usage error (bad arguments), as clap and rsync use it.
pub const EXIT_USAGE: u8 = 2;

/// Writes `text` to stdout. A reader that went away (`sealink trust list | head`) ends the
/// output quietly rather than with an error.
pub fn print_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Logs to stderr: WARN by default, -v info, -vv debug, -vvv trace, -q errors only;
/// `RUST_LOG`, when set, decides instead. Escapes only for a person at a terminal (not into
/// the journal, a file or a pipe, and never with NO_COLOR set).
///
/// Events of target `plain` are lines meant for the person at the terminal as they are (as
/// wg-quick shows its hooks: `[#] post_up-command` and what it printed): no time, level or
/// module, at any log level, hidden only by -q.
pub fn init_logging(verbose: u8, quiet: bool, plain: Option<&'static str>) {
    let level = match verbose {
        _ if quiet => LevelFilter::ERROR,
        0 => LevelFilter::WARN,
        1 => LevelFilter::INFO,
        2 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    let filter = EnvFilter::builder()
        .with_default_directive(level.into())
        .from_env_lossy();
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let is_plain = move |target: &str| plain.is_some_and(|p| p == target);
    let plain_lines = tracing_subscriber::fmt::layer()
        .without_time()
        .with_level(false)
        .with_target(false)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .with_filter(tracing_subscriber::filter::filter_fn(move |m| {
            is_plain(m.target()) && !quiet
        }));
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .with_filter(filter)
        .with_filter(tracing_subscriber::filter::filter_fn(move |m| {
            !is_plain(m.target())
        }));
    // Fails only if a subscriber is already set, which a binary's `main` does not do.
    let _ = tracing_subscriber::registry()
        .with(plain_lines)
        .with(logs)
        .try_init();
}
