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
//! With workers, [`Pipeline::submit_from`] still runs a batch inline unless the submitter's
//! [`Gauge`] says the thread is saturated and a core is idle (issue 43: a hand-off costs a
//! queue operation, often a wake-up, and the worker's cache misses on the batch). When the
//! submitter finds no free buffer it helps with queued work instead of sleeping.
//!
//! Workers wait the way Go's and Tokio's schedulers do: at most one polls the queue, and only
//! while the machine has an idle core, for at most what a wake-up costs ([`SPIN`]); the rest
//! park. A push wakes a parked worker only when none polls, and the most recently parked one
//! (LIFO), so a light load keeps one warm worker and leaves the others asleep; a worker that
//! takes an item and still sees work queued wakes the next. Before, every worker polled for
//! 30 µs after each item and a push woke a sleeper even while others polled, which on the lent
//! 16-core machine cost about three cores of waiting at one flow (issue 43).
//!
//! This is WireGuard's per-peer ordered queue over a device-wide work queue. A pipeline made
//! with [`Pipeline::bound`] instead binds each lane to one worker (lane `l` to worker
//! `l % workers`, each worker with its own queue): all of a lane's work then runs on one thread,
//! in order, as in paper 000's connection-level parallelism.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use crate::handoff::Gauge;

/// One batch of work: a parallel part and an ordered release.
pub trait Work: Send + 'static {
    /// What every item may read while it runs and releases (sockets, the core behind its lock).
    type Ctx: Send + Sync + 'static;
    /// The parallel part (seal or open), on any thread, with no lock held.
    fn run(&mut self, ctx: &Self::Ctx);
    /// The serial part, in submission order within the item's lane.
    fn release(self, ctx: &Self::Ctx);
}

/// The longest an idle worker polls before it parks, unless [`Options::spin`] says otherwise:
/// about what the wake-up it may save costs in CPU (3.5-4.2 µs for the waker and the sleeper
/// together on the 2-core VM, `../shared/research/cpu-per-bit.md` §0). Polling longer spends
/// more than the wake it avoids (the ski-rental bound), and only one worker polls at a time.
pub const SPIN: Duration = Duration::from_micros(4);

/// How a pipeline's workers take their work (see [`Pipeline::with_options`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Bind lane `l` to worker `l % workers` (see [`Pipeline::bound`]).
    pub bound: bool,
    /// The longest an idle worker polls before it parks ([`SPIN`] by default; a worker polls
    /// only while no other does and an allowed CPU is idle, and shortens its window when work
    /// keeps arriving long after it, see [`SpinWindow`]). Zero parks at once: right when there
    /// are more threads than cores, where a polling worker takes the core from the thread that
    /// would give it work.
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

/// The device-wide queue and the workers waiting on it (see the module documentation).
struct Queue<W> {
    jobs: Mutex<VecDeque<(usize, u64, W)>>,
    /// Items in `jobs`, readable without its lock.
    queued: AtomicUsize,
    /// Workers polling `queued` (0 or 1).
    spinning: AtomicUsize,
    /// Parked workers, the most recently parked last, and their number readable without the
    /// lock.
    parked: Mutex<Vec<Thread>>,
    parked_n: AtomicUsize,
    stop: AtomicBool,
}

impl<W> Queue<W> {
    /// Wakes the most recently parked worker, if any.
    fn wake_one(&self) {
        if self.parked_n.load(Ordering::SeqCst) == 0 {
            return;
        }
        let t = {
            let mut p = lock(&self.parked);
            let t = p.pop();
            self.parked_n.store(p.len(), Ordering::SeqCst);
            t
        };
        if let Some(t) = t {
            t.unpark();
        }
    }

    /// Lists the calling worker as parked (before it looks at the queue one last time).
    fn list_me(&self) {
        let mut p = lock(&self.parked);
        p.push(std::thread::current());
        self.parked_n.store(p.len(), Ordering::SeqCst);
    }

    /// Takes the calling worker off the parked list, if a wake has not already.
    fn unlist_me(&self) {
        let me = std::thread::current().id();
        let mut p = lock(&self.parked);
        if let Some(i) = p.iter().rposition(|t| t.id() == me) {
            p.remove(i);
            self.parked_n.store(p.len(), Ordering::SeqCst);
        }
    }
}

/// A worker's polling window, adapted the way the kernel's guest halt-polling adapts its own
/// (docs.kernel.org, guest-halt-polling): doubled, up to the maximum, when work came soon
/// after the worker parked (polling a little longer would have caught it); halved when a park
/// outlasted eight maximum windows (polling was wasted).
#[derive(Debug, Clone, Copy)]
pub struct SpinWindow {
    now: Duration,
    max: Duration,
}

impl SpinWindow {
    pub fn new(max: Duration) -> Self {
        SpinWindow { now: max, max }
    }

    /// The current window.
    pub fn get(&self) -> Duration {
        self.now
    }

    /// Adapts the window to a park that lasted `parked`.
    pub fn after_park(&mut self, parked: Duration) {
        if self.max.is_zero() {
            return;
        }
        if parked < self.max {
            let grown = if self.now.is_zero() {
                self.max / 8
            } else {
                self.now * 2
            };
            self.now = grown.min(self.max);
        } else if parked > self.max * 8 {
            self.now /= 2;
            if self.now < Duration::from_nanos(250) {
                self.now = Duration::ZERO;
            }
        }
    }
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
                    jobs: Mutex::new(VecDeque::new()),
                    queued: AtomicUsize::new(0),
                    spinning: AtomicUsize::new(0),
                    parked: Mutex::new(Vec::new()),
                    parked_n: AtomicUsize::new(0),
                    stop: AtomicBool::new(false),
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
                            let mut spin = SpinWindow::new(inner.spin);
                            while let Some((lane, seq, w)) = inner.pop(0, &mut spin) {
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

    /// Submits `w` on `lane` (`lane < lanes`; out of range folds onto a lane), to the workers
    /// if there are any. Items of one lane are released in the order they were submitted;
    /// submit a lane from one thread at a time.
    pub fn submit(&self, lane: usize, w: W) {
        let lane = lane % self.inner.lanes.len();
        if let Some(b) = &self.bound {
            // A bound lane's items all go down one worker's channel, in order: the channel is
            // the lane. A worker only stops when its sender is dropped, with the pipeline.
            self.inner.bound_pending.fetch_add(1, Ordering::Release);
            let _ = b[lane % b.len()].send((lane, 0, w));
            return;
        }
        let seq = self.inner.sequence(lane);
        if self.threads.is_empty() {
            self.inner.execute(lane, seq, w);
        } else {
            self.inner.push(0, lane, seq, w);
        }
    }

    /// [`submit`](Pipeline::submit), from a thread that measures its own load with `gauge`:
    /// the item runs (and, if it is its lane's head, releases) here, unless the gauge says
    /// this thread is saturated and a core is idle, in which case it goes to the workers.
    /// Order per lane holds either way: an item run here waits in its lane for the ones
    /// before it. Returns whether the item was handed off.
    pub fn submit_from(&self, gauge: &mut Gauge, lane: usize, w: W) -> bool {
        if self.threads.is_empty() || self.bound.is_some() {
            self.submit(lane, w);
            return false;
        }
        let lane = lane % self.inner.lanes.len();
        let seq = self.inner.sequence(lane);
        if gauge.hand_off() {
            self.inner.push(0, lane, seq, w);
            true
        } else {
            let t0 = Instant::now();
            self.inner.execute(lane, seq, w);
            gauge.ran(t0.elapsed());
            false
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
            q.stop.store(true, Ordering::SeqCst);
            let parked = std::mem::take(&mut *lock(&q.parked));
            q.parked_n.store(0, Ordering::SeqCst);
            for t in parked {
                t.unpark();
            }
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

    /// The next sequence number of `lane`, with its slot.
    fn sequence(&self, lane: usize) -> u64 {
        let mut l = lock(&self.lanes[lane]);
        let s = l.next;
        l.next += 1;
        l.slots.push_back(None);
        s
    }

    fn push(&self, q: usize, lane: usize, seq: u64, w: W) {
        let q = &self.queues[q];
        lock(&q.jobs).push_back((lane, seq, w));
        // SeqCst with the workers' side (`spinning` dropped, then `queued` read; listed as
        // parked, then `queued` read): either this push sees a poller or a parked worker to
        // wake, or that worker sees the item. No wake is lost.
        q.queued.fetch_add(1, Ordering::SeqCst);
        if q.spinning.load(Ordering::SeqCst) == 0 {
            q.wake_one();
        }
    }

    fn try_pop(&self, q: usize) -> Option<(usize, u64, W)> {
        let q = &self.queues[q];
        if q.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        let j = lock(&q.jobs).pop_front();
        if j.is_some() {
            q.queued.fetch_sub(1, Ordering::SeqCst);
        }
        j
    }

    /// A worker's wait: poll for at most its window while it is the only poller and a core is
    /// idle, then park; `None` once stopped and drained.
    fn pop(&self, qi: usize, spin: &mut SpinWindow) -> Option<(usize, u64, W)> {
        let q = &self.queues[qi];
        loop {
            if let Some(j) = self.try_pop(qi) {
                // More queued and nobody polling: wake the next worker (the last one to find
                // work wakes one more, as Go's scheduler does).
                if q.queued.load(Ordering::SeqCst) > 0 && q.spinning.load(Ordering::SeqCst) == 0 {
                    q.wake_one();
                }
                return Some(j);
            }
            if q.stop.load(Ordering::SeqCst) {
                return None;
            }
            let window = spin.get();
            if !window.is_zero()
                && crate::spare::has_idle_core()
                && q.spinning
                    .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                let start = Instant::now();
                let mut found = false;
                while start.elapsed() < window {
                    if q.queued.load(Ordering::Acquire) > 0 || q.stop.load(Ordering::Relaxed) {
                        found = true;
                        break;
                    }
                    std::hint::spin_loop();
                }
                q.spinning.fetch_sub(1, Ordering::SeqCst);
                if found {
                    continue;
                }
            }
            q.list_me();
            if q.queued.load(Ordering::SeqCst) > 0 || q.stop.load(Ordering::SeqCst) {
                q.unlist_me();
                continue;
            }
            let parked = Instant::now();
            std::thread::park();
            spin.after_park(parked.elapsed());
            // A spurious return (or a wake meant for the list we were just taken off) leaves
            // us listed; the loop looks at the queue again either way.
            q.unlist_me();
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

    /// Every item finishes without the pipeline being dropped (a drop drains the queue on the
    /// dropping thread, which would hide a lost wake-up): bursts with pauses between them, so
    /// that workers park, poll and are woken in every order.
    #[test]
    fn no_wake_up_is_lost() {
        for workers in [1usize, 2, 4] {
            let log = Arc::new(Log {
                released: Mutex::new(vec![Vec::new(); 3]),
                threads: Mutex::new(vec![Vec::new(); 3]),
            });
            let p = Pipeline::new(Arc::clone(&log), 3, workers);
            let mut next = [0u64; 3];
            for burst in 0..300u32 {
                for k in 0..(burst % 5 + 1) {
                    let lane = (burst + k) as usize % 3;
                    let spin = (burst * 7 + k * 13) % 3000;
                    p.submit(
                        lane,
                        Item {
                            lane,
                            n: next[lane],
                            spin,
                            ran: None,
                        },
                    );
                    next[lane] += 1;
                }
                // Pauses around the polling window and well past it.
                if burst % 3 == 0 {
                    std::thread::sleep(Duration::from_micros(u64::from(burst % 40)));
                }
                let deadline = Instant::now() + Duration::from_secs(5);
                while p.pending() > 0 {
                    assert!(
                        Instant::now() < deadline,
                        "{workers} workers: items left queued"
                    );
                    std::thread::yield_now();
                }
            }
            let released = lock(&log.released);
            for lane in 0..3 {
                assert_eq!(released[lane].len() as u64, next[lane]);
            }
        }
    }

    #[test]
    fn the_spin_window_grows_and_shrinks() {
        let max = Duration::from_micros(4);
        let mut w = SpinWindow::new(max);
        w.after_park(Duration::from_millis(1));
        assert_eq!(w.get(), max / 2);
        for _ in 0..20 {
            w.after_park(Duration::from_millis(1));
        }
        assert_eq!(w.get(), Duration::ZERO);
        w.after_park(Duration::from_micros(1));
        assert_eq!(w.get(), max / 8);
        for _ in 0..5 {
            w.after_park(Duration::from_micros(1));
        }
        assert_eq!(w.get(), max);
        let mut off = SpinWindow::new(Duration::ZERO);
        off.after_park(Duration::from_nanos(1));
        assert_eq!(off.get(), Duration::ZERO);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn every_item_runs_once_and_leaves_in_order_per_lane(
            workers in 0usize..4,
            bound in any::<bool>(),
            via_gauge in any::<bool>(),
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
            let mut gauge = Gauge::new(crate::Handoff::Auto);
            for (lane, spin) in items.iter().copied() {
                let item = Item { lane, n: next[lane], spin, ran: None };
                if via_gauge {
                    // Inline and handed-off items mixed in one lane, as a gauge that changes
                    // its mind makes them.
                    gauge.fraction = f64::from(spin % 3) / 2.0;
                    let handed = p.submit_from(&mut gauge, lane, item);
                    prop_assert!(!handed || (workers > 0 && !bound));
                } else {
                    p.submit(lane, item);
                }
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
