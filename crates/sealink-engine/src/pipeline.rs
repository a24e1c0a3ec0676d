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
//! This is WireGuard's per-peer ordered queue over a device-wide work queue. A pipeline made
//! with [`Pipeline::bound`] instead binds each lane to one worker (lane `l` to worker
//! `l % workers`, each worker with its own queue): all of a lane's work then runs on one thread,
//! in order, as in paper 000's connection-level parallelism.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
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

/// How long an idle worker polls before it sleeps, unless [`Options::spin`] says otherwise: a
/// kernel wake-up costs more than sealing a small batch.
pub const SPIN: Duration = Duration::from_micros(30);

/// How a pipeline's workers take their work (see [`Pipeline::with_options`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Bind lane `l` to worker `l % workers` (see [`Pipeline::bound`]).
    pub bound: bool,
    /// How long an idle worker polls before it sleeps ([`SPIN`] by default). Zero sleeps at
    /// once: right when there are more threads than cores, where a polling worker takes the
    /// core from the thread that would give it work.
    pub spin: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            bound: false,
            spin: SPIN,
        }
    }
}

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
    spin: Duration,
    lanes: Vec<Mutex<Lane<W>>>,
    /// Items of a [`Pipeline::bound`] pipeline submitted and not yet released (they skip the
    /// lanes: see [`Pipeline::submit`]).
    bound_pending: AtomicUsize,
    /// The device-wide queue (empty for a [`Pipeline::bound`] pipeline, whose workers each
    /// have a channel of their own: see [`Pipeline`]'s `bound`).
    queues: Vec<Queue<W>>,
}

/// A queued item: lane, sequence number, the item.
type Job<W> = (usize, u64, W);

/// The ordered pipeline (see the module documentation).
pub struct Pipeline<W: Work> {
    inner: Arc<Inner<W>>,
    threads: Vec<JoinHandle<()>>,
    /// Bound pipelines: one channel per worker that started (a worker that failed to start
    /// has none), which the lanes are spread over. A channel rather than a locked queue: the
    /// submitter and the worker never wait on each other's lock, and an idle worker parks
    /// until its channel wakes it (the lab's connection-level engine measured the locked queue
    /// 0.6-0.8x as fast with two workers, docs/RESULTS.md §29).
    bound: Option<Vec<mpsc::Sender<Job<W>>>>,
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
    /// A pipeline with `lanes` ordered lanes and `workers` threads (0: everything inline); any
    /// worker runs any lane's items.
    pub fn new(ctx: Arc<W::Ctx>, lanes: usize, workers: usize) -> Self {
        Self::with_options(ctx, lanes, workers, Options::default())
    }

    /// A pipeline whose lanes are bound to workers: lane `l`'s items all run (and release) on
    /// worker `l % workers`, in submission order, so a lane's state is only ever touched by one
    /// thread. The submitting thread never runs them: [`help`](Pipeline::help) does nothing.
    /// `workers` is at least 1.
    pub fn bound(ctx: Arc<W::Ctx>, lanes: usize, workers: usize) -> Self {
        let bound = Options {
            bound: true,
            ..Options::default()
        };
        Self::with_options(ctx, lanes, workers, bound)
    }

    /// [`new`](Pipeline::new) or [`bound`](Pipeline::bound), with the workers' polling chosen.
    pub fn with_options(ctx: Arc<W::Ctx>, lanes: usize, workers: usize, opts: Options) -> Self {
        let bound = opts.bound;
        let workers = if bound { workers.max(1) } else { workers };
        let inner = Arc::new(Inner {
            ctx,
            spin: opts.spin,
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
            bound_pending: AtomicUsize::new(0),
            queues: (0..usize::from(!bound))
                .map(|_| Queue {
                    jobs: Mutex::new((VecDeque::new(), false)),
                    queued: AtomicUsize::new(0),
                    sleepers: AtomicUsize::new(0),
                    ready: Condvar::new(),
                })
                .collect(),
        });
        let mut senders = Vec::new();
        let threads = (0..workers)
            .filter_map(|i| {
                let inner = Arc::clone(&inner);
                let builder = std::thread::Builder::new().name(format!("sl-crypto-{i}"));
                let spawned = if bound {
                    let (tx, rx) = mpsc::channel::<Job<W>>();
                    builder
                        .spawn(move || {
                            crate::maybe_pin(i + 1);
                            // One thread takes a lane's items in submission order: run and
                            // release each at once, with no lane to keep.
                            while let Some((_, _, mut w)) = inner.recv(&rx) {
                                w.run(&inner.ctx);
                                w.release(&inner.ctx);
                                inner.bound_pending.fetch_sub(1, Ordering::Release);
                            }
                        })
                        .map(|t| (t, Some(tx)))
                } else {
                    builder
                        .spawn(move || {
                            crate::maybe_pin(i + 1);
                            while let Some((lane, seq, w)) = inner.pop(0) {
                                inner.execute(lane, seq, w);
                            }
                        })
                        .map(|t| (t, None))
                };
                spawned
                    .map_err(|e| tracing::warn!(error = %e, "cannot start a crypto worker"))
                    .ok()
                    .map(|(t, tx)| {
                        senders.extend(tx);
                        t
                    })
            })
            .collect();
        // With no worker at all a bound pipeline runs inline, like `new(.., 0)`.
        let bound = (bound && !senders.is_empty()).then_some(senders);
        Pipeline {
            inner,
            threads,
            bound,
        }
    }

    /// Worker threads running (0: inline).
    pub fn workers(&self) -> usize {
        self.threads.len()
    }

    /// Submits `w` on `lane` (`lane < lanes`; out of range folds onto a lane). Items of one lane
    /// are released in the order they were submitted; submit a lane from one thread at a time.
    pub fn submit(&self, lane: usize, w: W) {
        let lane = lane % self.inner.lanes.len();
        if let Some(b) = &self.bound {
            // A bound lane's items all go down one worker's channel, in order: the channel is
            // the lane. A worker only stops when its sender is dropped, with the pipeline.
            self.inner.bound_pending.fetch_add(1, Ordering::Release);
            let _ = b[lane % b.len()].send((lane, 0, w));
            return;
        }
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
            self.inner.push(0, lane, seq, w);
        }
    }

    /// Runs one queued item on the calling thread, if there is one; returns whether it did.
    /// A submitter that waits for a free buffer calls this instead of sleeping. A
    /// [`bound`](Pipeline::bound) pipeline's items only run on their workers: `false`.
    pub fn help(&self) -> bool {
        if self.bound.is_some() || self.inner.queues.is_empty() {
            return false;
        }
        self.help_from(0)
    }

    fn help_from(&self, q: usize) -> bool {
        match self.inner.try_pop(q) {
            Some((lane, seq, w)) => {
                self.inner.execute(lane, seq, w);
                true
            }
            None => false,
        }
    }

    /// Items submitted and not yet released, over all lanes.
    pub fn pending(&self) -> usize {
        let bound = self.inner.bound_pending.load(Ordering::Acquire);
        bound
            + self
                .inner
                .lanes
                .iter()
                .map(|l| lock(l).slots.len())
                .sum::<usize>()
    }
}

impl<W: Work> Drop for Pipeline<W> {
    fn drop(&mut self) {
        // Workers finish what is queued (so every buffer comes back), then exit: a bound
        // worker once its channel is empty and its sender gone.
        self.bound = None;
        for q in &self.inner.queues {
            lock(&q.jobs).1 = true;
            q.ready.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for q in 0..self.inner.queues.len() {
            while self.help_from(q) {}
        }
    }
}

impl<W: Work> Inner<W> {
    /// A bound worker's wait: poll its channel for a while, then park; `None` once the
    /// pipeline is dropped and the channel drained.
    fn recv(&self, rx: &mpsc::Receiver<Job<W>>) -> Option<Job<W>> {
        if !self.spin.is_zero() {
            let start = Instant::now();
            while start.elapsed() < self.spin {
                match rx.try_recv() {
                    Ok(j) => return Some(j),
                    Err(mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
                    Err(mpsc::TryRecvError::Disconnected) => return None,
                }
            }
        }
        rx.recv().ok()
    }

    fn push(&self, q: usize, lane: usize, seq: u64, w: W) {
        let q = &self.queues[q];
        lock(&q.jobs).0.push_back((lane, seq, w));
        q.queued.fetch_add(1, Ordering::Release);
        if q.sleepers.load(Ordering::Acquire) > 0 {
            q.ready.notify_one();
        }
    }

    fn try_pop(&self, q: usize) -> Option<(usize, u64, W)> {
        let q = &self.queues[q];
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
    fn pop(&self, qi: usize) -> Option<(usize, u64, W)> {
        let start = Instant::now();
        while start.elapsed() < self.spin {
            if let Some(j) = self.try_pop(qi) {
                return Some(j);
            }
            std::hint::spin_loop();
        }
        let q = &self.queues[qi];
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

    /// Records releases per lane, and which threads ran each lane's items; `spin` makes items
    /// finish out of order.
    struct Item {
        lane: usize,
        n: u64,
        spin: u32,
        ran: Option<std::thread::ThreadId>,
    }
    #[derive(Default)]
    struct Log {
        released: Mutex<Vec<Vec<(u64, bool)>>>,
        threads: Mutex<Vec<Vec<std::thread::ThreadId>>>,
    }
    impl Work for Item {
        type Ctx = Log;
        fn run(&mut self, log: &Log) {
            for _ in 0..self.spin {
                std::hint::spin_loop();
            }
            let me = std::thread::current().id();
            self.ran = Some(me);
            let mut t = lock(&log.threads);
            if !t[self.lane].contains(&me) {
                t[self.lane].push(me);
            }
        }
        fn release(self, log: &Log) {
            lock(&log.released)[self.lane].push((self.n, self.ran.is_some()));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn every_item_runs_once_and_leaves_in_order_per_lane(
            workers in 0usize..4,
            bound in any::<bool>(),
            items in proptest::collection::vec((0usize..3, 0u32..20_000), 1..200),
        ) {
            let log = Arc::new(Log {
                released: Mutex::new(vec![Vec::new(); 3]),
                threads: Mutex::new(vec![Vec::new(); 3]),
            });
            let p = if bound {
                Pipeline::bound(Arc::clone(&log), 3, workers)
            } else {
                Pipeline::new(Arc::clone(&log), 3, workers)
            };
            let submitter = std::thread::current().id();
            let mut next = [0u64; 3];
            for (lane, spin) in items.iter().copied() {
                p.submit(lane, Item { lane, n: next[lane], spin, ran: None });
                next[lane] += 1;
                if spin % 7 == 0 {
                    // A bound pipeline never runs a lane's items on the submitter.
                    let helped = p.help();
                    prop_assert!(!(bound && helped));
                }
            }
            drop(p);
            let released = lock(&log.released);
            let threads = lock(&log.threads);
            for lane in 0..3 {
                let want: Vec<(u64, bool)> = (0..next[lane]).map(|n| (n, true)).collect();
                prop_assert_eq!(&released[lane], &want);
                if bound && next[lane] > 0 {
                    // One thread ran all of the lane's items, and not the submitter.
                    prop_assert_eq!(threads[lane].len(), 1);
                    prop_assert_ne!(threads[lane][0], submitter);
                }
            }
            if bound {
                // Lanes l and l + workers share a worker: with 3 lanes and 1 or 2 workers, lane
                // 0 and lane `workers` ran on the same thread.
                let w = workers.max(1);
                if w < 3 && next[0] > 0 && next[w] > 0 {
                    prop_assert_eq!(threads[0][0], threads[w][0]);
                }
            }
        }
    }
}
