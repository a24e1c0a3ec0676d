//! The product data path's engine: an ordered pipeline over caller-owned work items.
//!
//! A driver reads a batch (from a TUN queue or a UDP socket) into a buffer it owns, runs the
//! serial reserve step under its core's lock (route, session, counter), and submits the batch
//! as one [`Work`] item on a *lane* (one lane per reading thread). The item's [`Work::run`]
//! (the seal or open itself) executes on any worker with no lock held; [`Work::release`] (send
//! the datagrams, or finish the receive and write to the TUN device) runs in submission order
//! per lane, on whichever thread completed the lane's head. The item carries its buffers and
//! is handed back through `release`, so the engine neither allocates nor copies per packet:
//! the only allocations are the queue nodes, one per batch.
//!
//! With zero worker threads the pipeline runs `run` and `release` inline on the submitting
//! thread: no hand-off at all, the right choice when other threads already occupy the cores.
//! When the submitter finds no free buffer it helps with queued work instead of sleeping.
//!
//! This is WireGuard's per-peer ordered queue over a device-wide work queue, as in
//! [`crate::Plp`], without the lab's owned packets.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One batch of work: a parallel part and an ordered release.
pub trait Work: Send + 'static {
    /// What every item may read while it runs and releases (sockets, the core behind its lock).
    type Ctx: Send + Sync + 'static;
    /// The parallel part (seal or open), on any thread, with no lock held.
    fn run(&mut self, ctx: &Self::Ctx);
    /// The serial part, in submission order within the item's lane.
    fn release(self, ctx: &Self::Ctx);
}

/// How long an idle worker polls before it sleeps: a kernel wake-up costs more than sealing a
/// small batch.
const SPIN: Duration = Duration::from_micros(30);

struct Lane<W> {
    /// Sequence number of `slots[0]`.
    head: u64,
    next: u64,
    /// Finished items waiting for the ones before them; `None`: still running.
    slots: VecDeque<Option<W>>,
    /// A thread is releasing this lane's head; others only fill their slot.
    releasing: bool,
}

/// Queued items (lane, sequence, item) and the shutdown flag.
type Jobs<W> = (VecDeque<(usize, u64, W)>, bool);

struct Queue<W> {
    jobs: Mutex<Jobs<W>>,
    queued: AtomicUsize,
    sleepers: AtomicUsize,
    ready: Condvar,
}

struct Inner<W: Work> {
    ctx: Arc<W::Ctx>,
    lanes: Vec<Mutex<Lane<W>>>,
    queue: Queue<W>,
}

/// The ordered pipeline (see the module documentation).
pub struct Pipeline<W: Work> {
    inner: Arc<Inner<W>>,
    threads: Vec<JoinHandle<()>>,
}

impl<W: Work> std::fmt::Debug for Pipeline<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("lanes", &self.inner.lanes.len())
            .field("workers", &self.threads.len())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Work items never panic while a lane or the queue is locked; keep going with the state.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<W: Work> Pipeline<W> {
    /// A pipeline with `lanes` ordered lanes and `workers` threads (0: everything inline).
    pub fn new(ctx: Arc<W::Ctx>, lanes: usize, workers: usize) -> Self {
        let inner = Arc::new(Inner {
            ctx,
            lanes: (0..lanes.max(1))
                .map(|_| {
                    Mutex::new(Lane {
                        head: 0,
                        next: 0,
                        slots: VecDeque::new(),
                        releasing: false,
                    })
                })
                .collect(),
            queue: Queue {
                jobs: Mutex::new((VecDeque::new(), false)),
                queued: AtomicUsize::new(0),
                sleepers: AtomicUsize::new(0),
                ready: Condvar::new(),
            },
        });
        let threads = (0..workers)
            .filter_map(|i| {
                let inner = Arc::clone(&inner);
                std::thread::Builder::new()
                    .name(format!("sl-crypto-{i}"))
                    .spawn(move || {
                        crate::maybe_pin(i + 1);
                        while let Some((lane, seq, w)) = inner.pop() {
                            inner.execute(lane, seq, w);
                        }
                    })
                    .map_err(|e| tracing::warn!(error = %e, "cannot start a crypto worker"))
                    .ok()
            })
            .collect();
        Pipeline { inner, threads }
    }

    /// Worker threads running (0: inline).
    pub fn workers(&self) -> usize {
        self.threads.len()
    }

    /// Submits `w` on `lane` (`lane < lanes`; out of range folds onto a lane). Items of one lane
    /// are released in the order they were submitted; submit a lane from one thread at a time.
    pub fn submit(&self, lane: usize, w: W) {
        let lane = lane % self.inner.lanes.len();
        let seq = {
            let mut l = lock(&self.inner.lanes[lane]);
            let s = l.next;
            l.next += 1;
            l.slots.push_back(None);
            s
        };
        if self.threads.is_empty() {
            self.inner.execute(lane, seq, w);
        } else {
            self.inner.push(lane, seq, w);
        }
    }

    /// Runs one queued item on the calling thread, if there is one; returns whether it did.
    /// A submitter that waits for a free buffer calls this instead of sleeping.
    pub fn help(&self) -> bool {
        match self.inner.try_pop() {
            Some((lane, seq, w)) => {
                self.inner.execute(lane, seq, w);
                true
            }
            None => false,
        }
    }

    /// Items submitted and not yet released, over all lanes.
    pub fn pending(&self) -> usize {
        self.inner.lanes.iter().map(|l| lock(l).slots.len()).sum()
    }
}

impl<W: Work> Drop for Pipeline<W> {
    fn drop(&mut self) {
        // Workers finish what is queued (so every buffer comes back), then exit.
        {
            let mut g = lock(&self.inner.queue.jobs);
            g.1 = true;
        }
        self.inner.queue.ready.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        while self.help() {}
    }
}

impl<W: Work> Inner<W> {
    fn push(&self, lane: usize, seq: u64, w: W) {
        let q = &self.queue;
        lock(&q.jobs).0.push_back((lane, seq, w));
        q.queued.fetch_add(1, Ordering::Release);
        if q.sleepers.load(Ordering::Acquire) > 0 {
            q.ready.notify_one();
        }
    }

    fn try_pop(&self) -> Option<(usize, u64, W)> {
        let q = &self.queue;
        if q.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        let j = lock(&q.jobs).0.pop_front();
        if j.is_some() {
            q.queued.fetch_sub(1, Ordering::Release);
        }
        j
    }

    /// A worker's wait: poll for a while, then sleep; `None` once stopped and drained.
    fn pop(&self) -> Option<(usize, u64, W)> {
        let start = Instant::now();
        while start.elapsed() < SPIN {
            if let Some(j) = self.try_pop() {
                return Some(j);
            }
            std::hint::spin_loop();
        }
        let q = &self.queue;
        let mut g = lock(&q.jobs);
        loop {
            if let Some(j) = g.0.pop_front() {
                q.queued.fetch_sub(1, Ordering::Release);
                return Some(j);
            }
            if g.1 {
                return None;
            }
            q.sleepers.fetch_add(1, Ordering::AcqRel);
            g = q.ready.wait(g).unwrap_or_else(|e| e.into_inner());
            q.sleepers.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Runs `w`, files it in its lane, and releases the lane's head run if nobody else is.
    fn execute(&self, lane: usize, seq: u64, mut w: W) {
        w.run(&self.ctx);
        let lane = &self.lanes[lane];
        let mut l = lock(lane);
        let idx = (seq - l.head) as usize;
        l.slots[idx] = Some(w);
        if l.releasing {
            return;
        }
        l.releasing = true;
        loop {
            let mut ready = Vec::new();
            while let Some(Some(_)) = l.slots.front() {
                if let Some(Some(w)) = l.slots.pop_front() {
                    l.head += 1;
                    ready.push(w);
                }
            }
            if ready.is_empty() {
                l.releasing = false;
                return;
            }
            // Release outside the lane lock: other workers keep filing their slots meanwhile.
            drop(l);
            for w in ready {
                w.release(&self.ctx);
            }
            l = lock(lane);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Records releases per lane; `spin` makes items finish out of order.
    struct Item {
        lane: usize,
        n: u64,
        spin: u32,
        ran: bool,
    }
    type Log = Mutex<Vec<Vec<(u64, bool)>>>;
    impl Work for Item {
        type Ctx = Log;
        fn run(&mut self, _: &Log) {
            for _ in 0..self.spin {
                std::hint::spin_loop();
            }
            self.ran = true;
        }
        fn release(self, log: &Log) {
            lock(log)[self.lane].push((self.n, self.ran));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn every_item_runs_once_and_leaves_in_order_per_lane(
            workers in 0usize..4,
            items in proptest::collection::vec((0usize..3, 0u32..20_000), 1..200),
        ) {
            let log = Arc::new(Mutex::new(vec![Vec::new(); 3]));
            let p = Pipeline::new(Arc::clone(&log), 3, workers);
            let mut next = [0u64; 3];
            for (lane, spin) in items.iter().copied() {
                p.submit(lane, Item { lane, n: next[lane], spin, ran: false });
                next[lane] += 1;
                if spin % 7 == 0 {
                    p.help();
                }
            }
            drop(p);
            let log = lock(&log);
            for lane in 0..3 {
                let want: Vec<(u64, bool)> = (0..next[lane]).map(|n| (n, true)).collect();
                prop_assert_eq!(&log[lane], &want);
            }
        }
    }
}
