//! Stream mode's I/O: `send` files (or standard input) to a `Receiver` over TCP.
//!
//! The crypto-aware send path (paper 003's SO_CRYPT, in user space): each worker reads file data
//! straight into the payload slots of its batch buffer (one positional vectored read), seals
//! every record in place around it, and hands the whole batch to the socket in one write. The
//! receiver reads large chunks, opens records where they landed, and writes their data straight
//! into place in a temporary file (one positional vectored write per run of records). No record
//! is copied in user space on either side.
//!
//! Parallelism is per connection (paper 000's processor-per-connection): a session is striped
//! over several TCP connections, each served by its own thread on both sides, sharing nothing
//! on the fast path but an atomic batch counter (sender) and the record bitmap (receiver).
#![forbid(unsafe_code)]

pub mod addr;
mod admit;
pub mod bar;
mod conn;
pub mod error;
mod files;
pub mod limits;
mod live_trust;
mod place;
pub mod records;
pub mod recv;
pub mod report;
pub mod send;
pub mod state;
pub mod summary;
mod tree;

use std::sync::atomic::{AtomicU64, Ordering};

pub use addr::{AddrError, Destination, resolve_listen};
pub use admit::ConnDrop;
pub use bar::BarThread;
pub use error::{TransferError, is_resumable_cut};
pub use limits::{ConnLimits, LimiterConfig, Timeouts};
pub use records::{Opened, RecordBatch, RecordReader};
pub use recv::{DEFAULT_RESUME_MAX_AGE, Dest, Receiver, RecvConfig, RecvReport};
pub use report::{FileRecord, TransferMeta};
pub use send::{SendConfig, SendReport, Source, send};
pub use state::{ResumeLimits, clean_at_start};

/// Default TCP port of `sealink recv`.
pub const DEFAULT_PORT: u16 = 7878;

/// The `tracing` target of lines meant for the person running the receiver, as they are (an
/// untrusted owner's key and how to trust it): the `sealink` binary prints them as plain lines
/// unless -q. The same value as `sealink_tunnel::SAY_TARGET`.
pub const SAY_TARGET: &str = "sealink::say";
/// Default data bytes per record (TLS's largest record).
pub const DEFAULT_RECORD_DATA: usize = 16 * 1024;

/// Byte counters a caller can poll for a progress display. `done` counts only what travels in
/// this run; what the receiver already holds (resumed from an interrupted transfer, or files
/// up to date) is `held`, so a rate or an estimate over `done` is true.
#[derive(Debug, Default)]
pub struct Progress {
    total: AtomicU64,
    done: AtomicU64,
    held: AtomicU64,
}

impl Progress {
    /// Total bytes of the transfer: 0 before it is known, `u64::MAX` if unknown (stdin).
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
    /// Bytes sent (or received) in this run.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }
    /// Bytes of the total the receiver already holds and that are not sent: known once the
    /// receiver has answered.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
    fn add_held(&self, v: u64) {
        self.held.fetch_add(v, Ordering::Relaxed);
    }
    /// Adds a manifest batch's bytes to the total (`u64::MAX`: unknown from now on).
    fn add_total(&self, v: u64) {
        let _ = self
            .total
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(if v == u64::MAX || t == u64::MAX {
                    u64::MAX
                } else {
                    t.saturating_add(v)
                })
            });
    }
    fn add(&self, v: u64) {
        self.done.fetch_add(v, Ordering::Relaxed);
    }
}

/// Default number of stripes: one per core, at most 8 (more connections than cores only adds
/// scheduling on loopback; across a network, more may help, hence `--streams`).
pub fn default_streams() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}
