//! The product's data-path engine (issue 3, after paper 000; issue 31 made it the only one).
//!
//! * [`Pipeline`]: caller-owned work items on ordered lanes; the parallel part (seal or open)
//!   runs on any worker with no lock held, the release in submission order per lane. The tunnel
//!   (sealink-tunnel) and datagram (sealink-datagram) modes run on it; [`Pipeline::bound`]
//!   binds each lane to one worker instead.
//! * [`Duplex`]/[`Half`]: received batches and batches to send sharing one pipeline.
//! * [`Pool`]: a reader's free batches, with back-pressure that helps the workers.
//! * [`Gauge`]/[`Handoff`]: a submitting thread's load, which keeps its batches inline until it
//!   saturates and a core is idle ([`spare`]: the idle CPUs this process may use).
//! * Worker counts and pinning: [`default_workers`], [`set_pin_workers`], [`cpus`],
//!   [`pin_current_thread`].
//!
//! Paper 000's packet-level, connection-level and layered engines are the lab's
//! (`sealink_lab::engines`), thin drivers over [`Pipeline`].
#![forbid(unsafe_code)]

mod duplex;
pub mod handoff;
pub mod pipeline;
mod pool;
pub mod spare;

pub use duplex::{Duplex, Half};
pub use handoff::{Gauge, Handoff};
pub use pipeline::{Pipeline, Work};
pub use pool::Pool;

/// Crypto workers a product data path starts when its config names none: none on two cores or
/// fewer (the reading threads and the application already fill them, and inline was measured
/// faster there: docs/RESULTS.md §10c), else one per core.
pub fn default_workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores <= 2 { 0 } else { cores }
}

static PIN_WORKERS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Pins the worker threads of pipelines created from now on to cores (worker `i` of a pipeline
/// on core `(i + 1) mod cores`: the submitting thread counts as worker 0 and stays where it is). Off by
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
