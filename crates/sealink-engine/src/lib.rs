//! Parallel seal/open engine for many sealink channels (issue 3, after paper 000).
//!
//! Three pipelines share one interface ([`Engine`]): submit a batch of packets for one channel,
//! receive batches back, in order per channel.
//!
//! * [`Plp`] (packet-level parallelism): a short serial step per channel on the submitting
//!   thread (assign counters, take the next slot of the channel's ordered queue), the crypto on
//!   any worker of a device-wide queue outside any lock, and release in order per channel. On
//!   receive the workers open in parallel without touching the replay window; the replay
//!   `accept` happens serially, in order, when a batch is released. This is WireGuard's
//!   per-peer ordered queue over a device-wide ring.
//! * [`Clp`] (connection-level parallelism): channels pinned to workers (`channel % workers`),
//!   all channel state owned by its worker, nothing shared on the fast path. Thread-per-
//!   connection and processor-per-connection are the two [`ClpPolicy`]s of paper 000.
//! * [`Layered`]: one thread per layer (framing, crypto) handing packets on, then the output
//!   (replay, delivery) on the caller: only a point of comparison.
//!
//! Every packet goes through [`sealink_proto::datapath`] or the same calls it makes, so the bytes
//! are exactly what the protocol puts on the wire; [`seal_serial`] and [`open_serial`] are the
//! single-threaded reference.
#![forbid(unsafe_code)]

mod clp;
mod duplex;
pub mod lab;
mod layered;
mod packet;
pub mod pipeline;
mod plp;
mod pool;

pub use clp::{Clp, ClpPolicy};
pub use duplex::{Duplex, Half};
pub use layered::Layered;
pub use packet::{
    Channel, HEADER_ROOM, Op, Packet, PacketError, open_one, open_serial, seal_one, seal_serial,
};
pub use pipeline::{Pipeline, Work};
pub use plp::Plp;
pub use pool::Pool;

/// Crypto workers a product data path starts when its config names none: none on two cores or
/// fewer (the reading threads and the application already fill them, and inline was measured
/// faster there: docs/RESULTS.md §10c), else one per core.
pub fn default_workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores <= 2 { 0 } else { cores }
}

static PIN_WORKERS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Pins the worker threads of engines created from now on to cores (worker `i` on core
/// `i mod cores`; for [`Plp`] the submitting thread is worker 0 and stays where it is). Off by
/// default: the scheduler usually does as well, and pinning hurts when other work shares the
/// machine.
pub fn set_pin_workers(on: bool) {
    PIN_WORKERS.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Pins the calling worker thread if pinning is on; a failure to pin is not an error.
pub(crate) fn maybe_pin(i: usize) {
    if PIN_WORKERS.load(std::sync::atomic::Ordering::Relaxed) {
        let cpus = cpus();
        if !cpus.is_empty() {
            // A failure to pin is not an error here (see above).
            let _ = pin_current_thread(cpus[i % cpus.len()]);
        }
    }
}

/// A batch of packets of one channel, as submitted and as released.
#[derive(Debug)]
pub struct Batch {
    pub channel: usize,
    pub op: Op,
    pub packets: Vec<Packet>,
}

/// The common interface of the pipelines.
pub trait Engine {
    /// Hands a batch of packets of `channel` to the engine (the serial step runs here or, for
    /// [`Clp`], on the channel's worker).
    fn submit(&mut self, op: Op, channel: usize, packets: Vec<Packet>);
    /// The next released batch, waiting (and, for [`Plp`], helping with the work) until one is
    /// ready; `None` when nothing is in flight.
    fn recv(&mut self) -> Option<Batch>;
    /// Batches submitted and not yet returned by [`recv`](Engine::recv).
    fn in_flight(&self) -> usize;
}

/// Runs batches through an engine and returns them per channel in release order: a helper
/// for tests and simple callers.
pub fn run_all<E: Engine + ?Sized>(
    engine: &mut E,
    op: Op,
    batches: Vec<(usize, Vec<Packet>)>,
) -> Vec<Batch> {
    for (c, p) in batches {
        engine.submit(op, c, p);
    }
    let mut out = Vec::new();
    while let Some(b) = engine.recv() {
        out.push(b);
    }
    out
}

/// The CPUs this process may run on, by number.
pub fn cpus() -> Vec<usize> {
    core_affinity::get_core_ids()
        .map(|ids| ids.into_iter().map(|c| c.id).collect())
        .unwrap_or_default()
}

/// Why [`pin_current_thread`] failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot pin a thread to CPU {cpu}: this process may run on CPUs {allowed:?}")]
pub struct PinError {
    pub cpu: usize,
    pub allowed: Vec<usize>,
}

/// Pins the calling thread to CPU `cpu` (one of [`cpus`]).
pub fn pin_current_thread(cpu: usize) -> Result<(), PinError> {
    let allowed = cpus();
    if allowed.contains(&cpu) && core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
        Ok(())
    } else {
        Err(PinError { cpu, allowed })
    }
}
