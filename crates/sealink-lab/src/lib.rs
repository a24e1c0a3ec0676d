//! The papers' lab: the benches (`sealink bench
//! seal|crypto|stacks|socket|datagram|adp|tunnel-cores|gpu`), the
//! simulated demo (`sealink demo`) and the fault relay (`sealink relay`), with the report module
//! (tables, CSV, plots, run records) and the progress output they print through. Each entry
//! point takes a plain `Params` struct. The lab owns its command line too: `cli` holds the clap
//! arguments of these commands and fills the `Params` from them, so the `sealink` binary only
//! mounts them in its command tree and calls `cli::run_bench`, `run_demo` or `run_relay`.
//!
//! Every entry point returns the typed [`Error`] (the relay its own `RelayError`). `output`
//! and `error::chain` are shared with the binary, which uses them for its own commands too.

#![forbid(unsafe_code)]

pub mod bench;
pub mod cli;
pub mod demo;
pub mod error;
pub mod output;
pub mod relay;
pub mod report;

pub use error::Error;
