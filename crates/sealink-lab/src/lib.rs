//! The papers' lab: the benches (`sealink bench seal|crypto|stacks|datagram|socket`), the
//! simulated demo (`sealink demo`) and the fault relay (`sealink relay`), with the report module
//! (tables, CSV, plots, run records) and the progress output they print through. The `sealink` binary only parses arguments and calls in
//! here; each entry point takes a plain `Params` struct.
//!
//! Every entry point returns the typed [`Error`] (the relay its own `RelayError`). `output`
//! and `error::chain` are shared with the binary, which uses them for its own commands too.

#![forbid(unsafe_code)]

pub mod bench;
pub mod demo;
pub mod error;
pub mod output;
pub mod relay;
pub mod report;

pub use error::Error;
