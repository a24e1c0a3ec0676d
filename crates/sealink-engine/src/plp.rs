//! Packet-level parallelism: per-channel ordered queues over one device-wide work queue.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sealink_crypto::{PacketKey, Scope};

use crate::packet::{Channel, Op, Packet, open_one, seal_one};
use crate::{Batch, Engine};

/// A batch on its way through the workers.
#[derive(Debug)]
struct Job {
    channel: usize,
    /// Position in the channel's ordered queue.
    seq: u64,
    op: Op,
    key: Arc<PacketKey>,
    receiver: u32,
    scope: Scope,
    allow_plaintext: bool,
    restart_window: bool,
    packets: Vec<Packet>,
}

impl Job {
    fn run(&mut self) {
        match self.op {
            Op::Seal => {
                for p in &mut self.packets {
                    seal_one(&self.key, self.receiver, self.scope, p);
                }
            }
            Op::Open => {
                for p in &mut self.packets {
                    open_one(&self.key, self.receiver, self.allow_plaintext, p);
                }
            }
        }
    }
}

/// How long a worker (or the waiting caller) polls for work before it sleeps: a wake-up through
/// the kernel costs more than a small batch of fast-cipher packets takes to seal.
const SPIN: Duration = Duration::from_micros(50);

#[derive(Debug, Default)]
struct QueueState {
    jobs: VecDeque<Job>,
    shutdown: bool,
    sleepers: usize,
}

#[derive(Debug, Default)]
struct Queue {
    state: Mutex<QueueState>,
    /// Jobs queued, readable without the lock (for polling).
    queued: AtomicUsize,
    ready: Condvar,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn push(&self, job: Job) {
        let mut g = self.lock();
        g.jobs.push_back(job);
        self.queued.fetch_add(1, Ordering::Release);
        let wake = g.sleepers > 0;
        drop(g);
        if wake {
            self.ready.notify_one();
        }
    }
    fn try_pop(&self) -> Option<Job> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut g = self.lock();
        let j = g.jobs.pop_front();
        if j.is_some() {
            self.queued.fetch_sub(1, Ordering::Release);
        }
        j
    }
    /// Waits for a job (polling for a short while, then sleeping); `None` on shutdown.
    fn pop(&self) -> Option<Job> {
        let start = Instant::now();
        loop {
            if let Some(j) = self.try_pop() {
                return Some(j);
            }
            if start.elapsed() >= SPIN {
                break;
            }
            std::hint::spin_loop();
        }
        let mut g = self.lock();
        loop {
            if let Some(j) = g.jobs.pop_front() {
                self.queued.fetch_sub(1, Ordering::Release);
                return Some(j);
            }
            if g.shutdown {
                return None;
            }
            g.sleepers += 1;
            g = self.ready.wait(g).unwrap_or_else(|e| e.into_inner());
            g.sleepers -= 1;
        }
    }
    fn shutdown(&self) {
        self.lock().shutdown = true;
        self.ready.notify_all();
    }
}

#[derive(Debug)]
struct ChanState {
    ch: Channel,
    next_seq: u64,
    head_seq: u64,
    slots: VecDeque<Option<Job>>,
    restart_window: bool,
}

/// Packet-level parallel engine. `workers` counts the calling thread, which helps with the
/// work while it waits in [`recv`](Engine::recv): one worker spawns no thread at all.
#[derive(Debug)]
pub struct Plp {
    chans: Vec<ChanState>,
    queue: Arc<Queue>,
    done_tx: mpsc::Sender<Job>,
    done_rx: mpsc::Receiver<Job>,
    threads: Vec<JoinHandle<()>>,
    ready: VecDeque<Batch>,
    in_flight: usize,
}

impl Plp {
    pub fn new(channels: Vec<Channel>, workers: usize) -> Self {
        let queue = Arc::new(Queue::default());
        let (done_tx, done_rx) = mpsc::channel::<Job>();
        let threads = (1..workers.max(1))
            .map(|i| {
                let q = Arc::clone(&queue);
                let tx = done_tx.clone();
                std::thread::spawn(move || {
                    // The submitting thread is worker 0.
                    crate::maybe_pin(i);
                    while let Some(mut job) = q.pop() {
                        job.run();
                        if tx.send(job).is_err() {
                            break;
                        }
                    }
                })
            })
            .collect();
        Plp {
            chans: channels
                .into_iter()
                .map(|ch| ChanState {
                    ch,
                    next_seq: 0,
                    head_seq: 0,
                    slots: VecDeque::new(),
                    restart_window: false,
                })
                .collect(),
            queue,
            done_tx,
            done_rx,
            threads,
            ready: VecDeque::new(),
            in_flight: 0,
        }
    }

    /// The channels' state (counters, replay windows).
    pub fn channels(&self) -> impl Iterator<Item = &Channel> {
        self.chans.iter().map(|c| &c.ch)
    }

    /// Puts a finished job in its slot and releases the channel's queue head in order.
    fn complete(&mut self, job: Job) {
        let cs = &mut self.chans[job.channel];
        let idx = (job.seq - cs.head_seq) as usize;
        cs.slots[idx] = Some(job);
        while let Some(Some(_)) = cs.slots.front() {
            let Some(Some(mut job)) = cs.slots.pop_front() else {
                break;
            };
            cs.head_seq += 1;
            self.in_flight -= 1;
            if job.op == Op::Open {
                if job.restart_window {
                    cs.ch.replay = Default::default();
                }
                for p in &mut job.packets {
                    cs.ch.accept(p);
                }
            }
            self.ready.push_back(Batch {
                channel: job.channel,
                op: job.op,
                packets: job.packets,
            });
        }
    }
}

impl Engine for Plp {
    fn submit(&mut self, op: Op, channel: usize, mut packets: Vec<Packet>) {
        // The serial step: counters and a slot in the channel's ordered queue.
        let cs = &mut self.chans[channel];
        if op == Op::Seal {
            for p in &mut packets {
                p.counter = cs.ch.take_counter();
            }
        }
        let restart_window = op == Op::Open && std::mem::take(&mut cs.restart_window);
        let job = Job {
            channel,
            seq: cs.next_seq,
            op,
            key: Arc::clone(if op == Op::Seal { &cs.ch.tx } else { &cs.ch.rx }),
            receiver: cs.ch.receiver,
            scope: cs.ch.scope,
            allow_plaintext: cs.ch.allow_plaintext,
            restart_window,
            packets,
        };
        cs.next_seq += 1;
        cs.slots.push_back(None);
        self.in_flight += 1;
        self.queue.push(job);
    }

    fn recv(&mut self) -> Option<Batch> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Some(b);
            }
            if self.in_flight == 0 {
                return None;
            }
            if let Ok(job) = self.done_rx.try_recv() {
                self.complete(job);
            } else if let Some(mut job) = self.queue.try_pop() {
                job.run();
                self.complete(job);
            } else {
                // Poll briefly for a worker's result, then sleep until one arrives.
                let start = Instant::now();
                let job = loop {
                    match self.done_rx.try_recv() {
                        Ok(job) => break Some(job),
                        Err(mpsc::TryRecvError::Empty) if start.elapsed() < SPIN => {
                            std::hint::spin_loop()
                        }
                        Err(_) => break None,
                    }
                };
                match job.map_or_else(|| self.done_rx.recv().ok(), Some) {
                    Some(job) => self.complete(job),
                    None => unreachable!("the engine holds a sender"),
                }
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.in_flight + self.ready.len()
    }
}

impl Drop for Plp {
    fn drop(&mut self) {
        self.queue.shutdown();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = &self.done_tx;
    }
}

impl crate::lab::LabEngine for Plp {
    fn restart_replay_window(&mut self, channel: usize) {
        self.chans[channel].restart_window = true;
    }
}
