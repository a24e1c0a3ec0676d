//! The [`crate::Node`]'s I/O thread and its data path through [`sealink_engine::Pipeline`].
//!
//! Receive: one `recvmmsg` fills a batch's buffers; each datagram's serial first half
//! ([`Endpoint::handle_reserve_from`]: header, index, session, replay window; handshakes whole,
//! initiations through the handshake guard by source address) runs
//! under the state lock as it arrives. The batch's opens run on an engine worker with no lock
//! held, and its release finishes them in arrival order ([`Endpoint::handle_finish`]: replay
//! accept, acknowledgements, deliveries).
//!
//! Transmit ([`sealink_udp::Sending`], the tunnel's transmit half too): `poll_transmit_deferred`
//! writes unsealed datagrams straight into a batch's buffer under the lock; a worker seals them
//! in place and the release sends them, runs of equal-sized datagrams to one peer as one GSO
//! call (a datagram whose seal failed is left out).
//!
//! Both kinds of batch go down one ordered lane, so datagrams leave in the order the endpoint
//! made them. With zero workers (the default on two cores or fewer, where the I/O thread and
//! the application already fill the cores) everything runs inline on the I/O thread, with the
//! lock released around the crypto all the same. With workers, the I/O thread still runs a
//! batch itself unless its [`Gauge`] hands it off ([`NodeConfig::handoff`](crate::NodeConfig):
//! by default only the share it cannot carry while it saturates its core and a core is idle,
//! as the tunnel's I/O threads do; issue 43).
//!
//! [`Endpoint::handle_reserve_from`]: sealink_proto::Endpoint::handle_reserve_from
//! [`Endpoint::handle_finish`]: sealink_proto::Endpoint::handle_finish

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sealink_engine::{Duplex, Gauge, Half, Pipeline, Pool};
use sealink_proto::endpoint::Reserved;
use sealink_proto::session::{OpenJob, SealJob};
use sealink_proto::wire::{self, Header};
use sealink_proto::{DropReason, PeerId, Time};

use super::source::{After, run_source};
use super::{Arrival, Shared, State, drain_events, lock};
use sealink_udp::{Received, Segment, Sending};

/// Receive batch size (quinn-udp caps `recvmmsg` at its BATCH_SIZE anyway).
const RECV_BATCH: usize = 32;
/// Longest the I/O thread sleeps without a timer: it rechecks the stop flag this often.
const IDLE_WAIT: Duration = Duration::from_millis(250);
/// Batches of each kind in flight: enough to keep workers busy while the I/O thread goes on.
const BATCHES: usize = 4;
/// Datagrams one transmit batch holds (at most one GSO call's worth per run).
const TX_DATAGRAMS: usize = 64;

/// Received datagrams whose opens are deferred to the engine; each job with the peer the
/// reservation found.
pub(crate) struct RxBatch {
    rx: Received<(PeerId, OpenJob), DropReason>,
    events: Vec<Arrival>,
    pool: Arc<Pool<Box<RxBatch>>>,
}

impl Half for RxBatch {
    type Ctx = Shared;
    fn run(&mut self) {
        self.rx.open_all(|(_, job), d| job.open(d));
    }

    fn release(mut self: Box<Self>, sh: &Shared) {
        {
            let mut st = lock(&sh.state);
            let now = sh.clock.now();
            let RxBatch { rx, events, .. } = &mut *self;
            rx.finish_each(|seg, (peer, job), opened, dg| {
                if let Ok(peer) = st.ep.handle_finish(now, *peer, job, opened, dg) {
                    // Authenticated and not a replay: the peer is reachable here now (roaming).
                    if let Some(a) = st.addrs.get_mut(peer.index()) {
                        *a = Some(seg.source);
                    }
                }
            });
            drain_events(&mut st, &sh.names, events);
            st.rounds = st.rounds.wrapping_add(1);
        }
        sh.progress.notify_all();
        sh.deliver(&mut self.events);
        if sh.workers > 0 && !ON_IO_THREAD.get() {
            // Acknowledgements may be due; the I/O thread may be asleep in its receive (a
            // release the I/O thread ran itself needs no wake: it goes on to transmit).
            sh.wake();
        }
        let pool = Arc::clone(&self.pool);
        pool.put(self);
    }
}

/// Datagrams to send, sealed by the engine.
pub(crate) struct TxBatch {
    /// Written by the endpoint back to back in the append area (up to `cap` bytes).
    tx: Sending<SealJob>,
    cap: usize,
    /// Seals that failed on the worker: those datagrams are never sent.
    failed: u64,
    pool: Arc<Pool<Box<TxBatch>>>,
}

impl Half for TxBatch {
    type Ctx = Shared;
    fn run(&mut self) {
        self.failed = self.tx.seal_all(|job, d| job.seal(d));
    }

    fn release(mut self: Box<Self>, sh: &Shared) {
        let (mut calls, mut errors, mut dgrams) = (0u64, 0u64, 0u64);
        // A datagram whose seal failed is never put on the wire; the protocol retransmits.
        self.tx.send_runs(|r, bytes| {
            calls += 1;
            dgrams += r.datagrams() as u64;
            if let Err(e) = sh.io.send(r.dest, bytes, r.segment) {
                errors += 1;
                tracing::debug!(error = %e, dest = %r.dest, "UDP send failed");
            }
        });
        // Counted without the state lock: a sender holding it would make this wait.
        let c = &sh.tx_counts;
        c.send_calls.fetch_add(calls, Ordering::Relaxed);
        c.send_errors.fetch_add(errors, Ordering::Relaxed);
        c.datagrams_out.fetch_add(dgrams, Ordering::Relaxed);
        c.seal_failures.fetch_add(self.failed, Ordering::Relaxed);
        self.tx.clear();
        self.failed = 0;
        let pool = Arc::clone(&self.pool);
        pool.put(self);
    }
}

impl TxBatch {
    /// Has the endpoint write its transmits into the batch buffer back to back (runs of them
    /// leave as GSO calls). Returns true when the buffer filled up before the endpoint ran dry.
    fn gather(&mut self, st: &mut State, now: Time, max_datagram: usize) -> bool {
        let cap = self.cap;
        let room = |tx: &Sending<SealJob>| tx.appended() + max_datagram <= cap;
        // Cookie replies first: each to the address the initiation came from, on its own.
        while room(&self.tx)
            && self.tx.append_alone(max_datagram, |b| {
                st.ep.poll_cookie_reply(b).map(|(dest, n)| (dest, n, None))
            })
        {}
        loop {
            if !room(&self.tx) {
                return true;
            }
            let more = self.tx.append(max_datagram, |b| {
                loop {
                    let (t, job) = st.ep.poll_transmit_deferred(now, b)?;
                    if let Some(dest) = st.addrs.get(t.peer.index()).copied().flatten() {
                        return Some((dest, t.len, job));
                    }
                    // Nowhere to send yet; the protocol retransmits once the address is learned.
                    st.stats.no_address += 1;
                }
            });
            if !more {
                return false;
            }
        }
    }
}

thread_local! {
    /// Whether this thread is a node's I/O thread (whose own releases need not wake it).
    static ON_IO_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The I/O thread: receive, timers, transmit, until stopped.
pub(crate) fn io_thread(sh: Arc<Shared>, gso: bool) {
    ON_IO_THREAD.set(true);
    let pipe: Pipeline<Duplex<RxBatch, TxBatch>> = Pipeline::new(Arc::clone(&sh), 1, sh.workers);
    let mut gauge = Gauge::new(sh.handoff);
    let max_datagram = lock(&sh.state).ep.config().max_datagram;
    let max_segs = if gso {
        sh.io.max_gso_segments().clamp(1, 64)
    } else {
        1
    };
    let rx_pool = Pool::new(Vec::new());
    let tx_pool = Pool::new(Vec::new());
    let batches = if sh.workers == 0 { 1 } else { BATCHES };
    for _ in 0..batches {
        rx_pool.put(Box::new(RxBatch {
            rx: Received::new(RECV_BATCH),
            events: Vec::new(),
            pool: Arc::clone(&rx_pool),
        }));
        tx_pool.put(Box::new(TxBatch {
            tx: Sending::new(0, max_datagram * TX_DATAGRAMS, max_segs),
            cap: max_datagram * TX_DATAGRAMS,
            failed: 0,
            pool: Arc::clone(&tx_pool),
        }));
    }
    let stopping = || sh.stop.load(Ordering::Relaxed);
    let mut events: Vec<Arrival> = Vec::new();
    let mut after = After::Sleep;
    while !stopping() {
        // Work queued by `send` before this point is seen below; later sends wake us again.
        sh.wake_pending.store(false, Ordering::Release);
        let timeout = {
            let mut st = lock(&sh.state);
            let now = sh.clock.now();
            let t = match st.ep.poll_timeout() {
                _ if after == After::Spin => Duration::ZERO,
                Some(t) if t <= now => Duration::ZERO,
                Some(t) => t.saturating_since(now).min(IDLE_WAIT),
                None => IDLE_WAIT,
            };
            // Published under the lock `send` takes: it wakes us only for earlier deadlines.
            st.io_sleep_until = now + t;
            Some(t)
        };
        let Some(mut rx) = rx_pool.take(&pipe, stopping) else {
            break;
        };
        let r = {
            let (r, held) = rx.rx.recv_reserving(
                &sh.io,
                timeout,
                || (lock(&sh.state), sh.clock.now()),
                |(st, now), seg, d| reserve(st, *now, seg, d),
            );
            let mut st = held.map_or_else(|| lock(&sh.state), |(st, _)| st);
            if let Ok(n @ 1..) = r {
                st.stats.recv_batches += 1;
                st.stats.datagrams_in += n as u64;
            }
            r
        };
        if rx.rx.is_empty() {
            rx_pool.put(rx);
        } else {
            pipe.submit_from(&mut gauge, 0, Duplex::Rx(rx));
        }
        if let Err(e) = r {
            tracing::warn!(error = %e, "UDP receive failed");
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        {
            let mut st = lock(&sh.state);
            let now = sh.clock.now();
            if st.ep.poll_timeout().is_some_and(|t| t <= now) {
                st.ep.handle_timeout(now);
            }
            drain_events(&mut st, &sh.names, &mut events);
        }
        // The application's source queues what leaves in this round (room freed by the
        // acknowledgements just received included).
        after = run_source(&sh);
        // Transmit until the endpoint has nothing more; the lock is held only while gathering.
        while let Some(mut tx) = tx_pool.take(&pipe, stopping) {
            let more = {
                let mut st = lock(&sh.state);
                let now = sh.clock.now();
                tx.gather(&mut st, now, max_datagram)
            };
            if tx.tx.is_empty() {
                tx_pool.put(tx);
            } else {
                pipe.submit_from(&mut gauge, 0, Duplex::Tx(tx));
            }
            if !more {
                break;
            }
        }
        {
            let mut st = lock(&sh.state);
            st.rounds = st.rounds.wrapping_add(1);
        }
        sh.progress.notify_all();
        sh.deliver(&mut events);
    }
    // Dropping the pipeline finishes what is queued, so every batch is released.
    drop(pipe);
}

/// The serial first half for one datagram, with its source (the endpoint's handshake guard
/// admits initiations by it): handshakes whole; a data datagram gives the job that opens it.
fn reserve(st: &mut State, now: Time, seg: &Segment, d: &[u8]) -> Option<(PeerId, OpenJob)> {
    match st.ep.handle_reserve_from(now, seg.source, d) {
        Ok(Reserved::Done(peer)) => {
            // A cookie reply is bound to our initiation but not to the peer's key: no roaming
            // on it. Other handshakes are authenticated: the peer is reachable here now.
            let cookie = matches!(wire::parse_header(d), Ok(Header::CookieReply { .. }));
            if let Some(a) = st.addrs.get_mut(peer.index()).filter(|_| !cookie) {
                *a = Some(seg.source);
            }
            None
        }
        Ok(Reserved::Open { peer, job }) => Some((peer, job)),
        Err(_) => None,
    }
}
