//! `sealink-lab`: the papers' lab as a binary of its own, apart from the product (`sealink`):
//! `sealink-lab bench ...` reruns the papers' measurements and `sealink-lab relay` puts a
//! fault-injecting UDP relay between two hosts. The commands, options and output are those of
//! the former `sealink bench` and `sealink relay`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sealink_cmdline::EXIT_USAGE;
use sealink_lab::cli::{BenchCommand, RELAY_HELP, RelayArgs};
use sealink_lab::error;

#[derive(Debug, Parser)]
#[command(
    name = "sealink-lab",
    version,
    about = "sealink-lab: the papers' benchmarks rerun on this machine, the simulated two-host demo, and a UDP fault relay",
    after_help = "Examples:\n  sealink-lab demo --seed 7\n  sealink-lab bench seal --sizes 1400 --suites aes128-gcm\n  sealink-lab bench stacks --quick\n  sealink-lab relay --listen 127.0.0.1:9000 --to 127.0.0.1:7878 --loss 0.05\n\nLogs go to stderr (colour only on a terminal, never with NO_COLOR set); -v, -vv, -vvv or RUST_LOG (e.g. RUST_LOG=debug) show more.\n\nExit status: 0 success; 1 the command failed; 2 usage error (bad arguments or options)."
)]
struct Cli {
    /// More log output: -v info, -vv debug, -vvv trace (RUST_LOG, when set, decides instead)
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Less log output: errors only (RUST_LOG, when set, decides instead)
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure performance
    #[command(
        subcommand,
        after_help = "Example:\n  sealink-lab bench seal --sizes 1400,8192 --runs 3"
    )]
    Bench(BenchCommand),
    /// Run two hosts over a simulated lossy link and check exactly-once delivery
    #[command(after_help = "Example:\n  sealink-lab demo --seed 7 --messages 500 --loss 0.05")]
    Demo(sealink_lab::demo::DemoArgs),
    /// Relay UDP both ways while injecting faults: loss, reordering, duplication, corruption, replay
    #[command(after_help = RELAY_HELP)]
    Relay(RelayArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and succeed; usage errors exit 2.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    sealink_cmdline::init_logging(cli.verbose, cli.quiet, None);
    let (message, usage) = match cli.command {
        Command::Bench(cmd) => match sealink_lab::cli::run_bench(cmd) {
            Ok(()) => return ExitCode::SUCCESS,
            // A bench's own argument checks (sizes, profiles) are usage errors too.
            Err(e) => (error::chain(&e), matches!(e, sealink_lab::Error::Usage(_))),
        },
        Command::Demo(a) => match sealink_lab::demo::run(&a.params()) {
            Ok(()) => return ExitCode::SUCCESS,
            Err(e) => (error::chain(&e), matches!(e, sealink_lab::Error::Usage(_))),
        },
        Command::Relay(a) => match sealink_lab::cli::run_relay(a) {
            Ok(()) => return ExitCode::SUCCESS,
            Err(e) => (error::chain(&e), false),
        },
    };
    eprintln!("error: {message}");
    ExitCode::from(if usage { EXIT_USAGE } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }
}

// The allocator `sealink` links, so that the benches measure what the product runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
