//! The papers' lab: the benches (`sealink-lab bench
//! seal|crypto|stacks|socket|datagram|adp|tunnel-cores|gpu|peers`) and the fault relay
//! (`sealink-lab relay`), with the report module (tables, CSV, plots, run records) and the
//! progress output they print through. Each entry point takes a plain `Params` struct. The lab
//! owns its command line too: `cli` holds the clap arguments of these commands and fills the
//! `Params` from them; the `sealink-lab` binary (`src/main.rs`) mounts them in its command tree
//! and calls `cli::run_bench` or `cli::run_relay`.
//!
//! `sealink-lab demo` runs two hosts over sealink-proto's simulated link (its `sim` feature)
//! and checks exactly-once delivery.
//!
//! The lab is not part of the product: the `sealink` binary (sealink-cli) does not depend on
//! this crate, and links neither the simulator nor the legacy ciphers (sealink-crypto's
//! `legacy` feature), which this crate enables.
//!
//! Every entry point returns the typed [`Error`] (the relay its own `RelayError`);
//! `error::chain` renders one on the `error:` line the binary prints.

#![forbid(unsafe_code)]

pub mod bench;
pub mod cli;
pub mod demo;
pub mod engines;
pub mod error;
pub mod output;
pub mod projection;
pub mod relay;
pub mod report;

pub use error::Error;
