//! Handshakes off the data path (issue 50): the UDP readers put handshake messages on a bounded
//! queue ([`Handshakes::push`], under the core's lock they already hold for the batch, a copy
//! of at most 190 bytes), and handshake threads answer them ([`handshake_loop`]): the cheap
//! checks under the lock, the Noise read (public-key work) with no lock held, the peer and an
//! index under the lock, the response (public-key work) with no lock held, then the session
//! under the lock: the lock is held for microseconds per handshake, never for a batch. The TUN readers so never
//! wait behind a batch of handshakes' public-key work. When the queue is busy (an eighth full,
//! or within a second of it), every initiation whose mac2 does not prove its source gets a
//! cookie reply instead of that work; when it is full, messages are dropped and counted
//! (`handshake-queue-full`). See [`sealink_proto::tunnel::HandshakeQueue`].

use std::net::SocketAddr;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use sealink_proto::tunnel::{Begun, HANDSHAKE_QUEUE, HandshakeQueue, InitJob, Tunnel};

use crate::{QueuedTransmits, Shared};

/// Messages one wake-up takes off the queue; their cheap step runs under one lock.
const TAKE: usize = 32;
/// Longest a handshake thread sleeps before it looks at the stop flag again.
const IDLE_WAIT: Duration = Duration::from_millis(250);

/// The queue between the UDP readers and the handshake threads, and our own initiations the
/// core reserved, to build with no lock held.
pub(crate) struct Handshakes {
    q: Mutex<Queue>,
    ready: Condvar,
}

struct Queue {
    msgs: HandshakeQueue,
    inits: Vec<InitJob>,
}

impl Handshakes {
    pub(crate) fn new() -> Self {
        Self::with_capacity(HANDSHAKE_QUEUE)
    }

    fn with_capacity(n: usize) -> Self {
        Handshakes {
            q: Mutex::new(Queue {
                msgs: HandshakeQueue::new(n),
                inits: Vec::new(),
            }),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues handshake message `msg` from `source` (the caller holds the core, `core`); a
    /// full queue drops it, counted.
    pub(crate) fn push(&self, core: &mut Tunnel, source: SocketAddr, msg: &[u8]) {
        let ok = self.lock().msgs.push(source, msg);
        if ok {
            self.ready.notify_one();
        } else {
            core.handshake_queue_full(1);
        }
    }

    /// Moves the initiations `core` reserved (the caller holds it) to the handshake threads,
    /// which build them with no lock held.
    pub(crate) fn take_initiations(&self, core: &mut Tunnel) {
        if core.has_initiations() {
            core.take_initiations(&mut self.lock().inits);
            self.ready.notify_one();
        }
    }

    /// Wakes every handshake thread (the tunnel stops).
    pub(crate) fn wake_all(&self) {
        self.ready.notify_all();
    }

    /// Waits for work (up to [`IDLE_WAIT`]) and moves up to [`TAKE`] messages into `into`, each
    /// with whether the queue was busy, and up to [`TAKE`] initiations into `inits`.
    fn take(
        &self,
        sh: &Shared,
        into: &mut Vec<(SocketAddr, Vec<u8>, bool)>,
        inits: &mut Vec<InitJob>,
    ) {
        let mut q = self.lock();
        if q.msgs.is_empty() && q.inits.is_empty() && !sh.stopping() {
            q = self
                .ready
                .wait_timeout(q, IDLE_WAIT)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let now = sh.clock.now();
        while into.len() < TAKE {
            match q.msgs.pop(now) {
                Some(m) => into.push(m),
                None => break,
            }
        }
        let n = q.inits.len().min(TAKE);
        inits.extend(q.inits.drain(..n));
        if !q.inits.is_empty() {
            // More for another thread.
            self.ready.notify_one();
        }
    }

    fn recycle(&self, bufs: impl Iterator<Item = Vec<u8>>) {
        let mut q = self.lock();
        for b in bufs {
            q.msgs.recycle(b);
        }
    }
}

/// Handshake threads for `cpus` CPUs: one per CPU, at most four. Their public-key work runs
/// with no lock held, so they answer a storm on every core, as wireguard-go's handshake
/// workers do; they hold the lock only for the short steps.
pub(crate) fn threads_for(cpus: usize) -> usize {
    cpus.clamp(1, 4)
}

/// A handshake thread: answers queued handshake messages until the tunnel stops.
pub(crate) fn handshake_loop(sh: &Shared) {
    let (responder, initiator) = {
        let core = sh.lock();
        (core.responder(), core.initiator())
    };
    let mut inits: Vec<InitJob> = Vec::with_capacity(TAKE);
    let mut built = Vec::with_capacity(TAKE);
    let mut out = QueuedTransmits::new(sh.stride);
    let mut batch: Vec<(SocketAddr, Vec<u8>, bool)> = Vec::with_capacity(TAKE);
    let mut admitted: Vec<usize> = Vec::with_capacity(TAKE);
    while !sh.stopping() {
        batch.clear();
        sh.handshakes.take(sh, &mut batch, &mut inits);
        if !inits.is_empty() {
            // Our own initiations (a rekey, a packet waiting for a session): their public-key
            // work with no lock held, then all of them sent under one lock.
            built.clear();
            built.extend(inits.drain(..).map(|j| initiator.build(j)));
            out.clear();
            let wake = {
                let mut core = sh.lock();
                let now = sh.clock.now();
                for b in built.drain(..) {
                    let _ = core.initiation_commit(now, b);
                }
                out.drain(&mut core);
                sh.handshakes.take_initiations(&mut core);
                core.take_timer_hint()
            };
            out.seal_and_send(sh, 0, 0);
            if wake {
                sh.timer.notify_one();
            }
        }
        if batch.is_empty() {
            continue;
        }
        // The cheap step of every message under one lock: responses and cookie replies whole,
        // initiations up to their admission (or a cookie reply).
        admitted.clear();
        out.clear();
        let mut wake = false;
        {
            let mut core = sh.lock();
            let now = sh.clock.now();
            for (i, (src, msg, busy)) in batch.iter().enumerate() {
                if let Ok(Begun::Read) = core.handshake_begin(now, *src, msg, *busy) {
                    admitted.push(i);
                }
            }
            out.drain(&mut core);
            sh.handshakes.take_initiations(&mut core);
            wake |= core.take_timer_hint();
        }
        out.seal_and_send(sh, 0, 0);
        // The public-key work of each admitted initiation with no lock held, then its answer
        // under the lock.
        for &i in &admitted {
            let (src, msg, _) = &batch[i];
            let read = responder.read(msg);
            let Ok(prepared) = sh.lock().handshake_prepare(sh.clock.now(), *src, read) else {
                continue;
            };
            let written = prepared.write(sh.clock.now());
            out.clear();
            {
                let mut core = sh.lock();
                let _ = core.handshake_commit(sh.clock.now(), *src, written);
                out.drain(&mut core);
                wake |= core.take_timer_hint();
            }
            out.seal_and_send(sh, 0, 0);
        }
        if wake {
            sh.timer.notify_one();
        }
        sh.handshakes.recycle(batch.drain(..).map(|(_, b, _)| b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sealink_proto::HostKey;
    use sealink_proto::tunnel::{TunnelConfig, TunnelDrop};

    #[test]
    fn a_full_queue_drops_and_counts_them_by_reason() {
        let host = HostKey::generate().unwrap();
        let mut core = Tunnel::new(host, TunnelConfig::default(), Vec::new()).unwrap();
        let hs = Handshakes::with_capacity(8);
        let src: SocketAddr = "192.0.2.9:51820".parse().unwrap();
        for _ in 0..11 {
            hs.push(&mut core, src, &[1u8; 148]);
        }
        assert_eq!(hs.lock().msgs.len(), 8);
        assert_eq!(core.drop_count(TunnelDrop::HandshakeQueueFull), 3);
        // What `show --json` lists.
        assert!(core.drops().contains(&("handshake-queue-full", 3)));
    }

    #[test]
    fn handshake_threads_are_one_per_core_up_to_four() {
        assert_eq!(threads_for(1), 1);
        assert_eq!(threads_for(2), 2);
        assert_eq!(threads_for(8), 4);
        assert_eq!(threads_for(64), 4);
    }
}
