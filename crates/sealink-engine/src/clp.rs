//! Connection-level parallelism: each channel pinned to one worker that owns all its state.

use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::packet::{Channel, Op, Packet, open_one, seal_one};
use crate::{Batch, Engine};

/// How many threads serve the channels (paper 000 section 4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClpPolicy {
    /// One thread per channel.
    ThreadPerConnection,
    /// `n` threads (one per processor); channel `c` goes to thread `c % n`.
    ProcessorPerConnection(usize),
}

enum Msg {
    Work(Op, usize, Vec<Packet>),
    Restart(usize),
}

/// Connection-level parallel engine: no lock and no shared state on the fast path; every
/// packet of a channel is handled, serial step included, by that channel's worker.
#[derive(Debug)]
pub struct Clp {
    to_workers: Vec<mpsc::Sender<Msg>>,
    done_rx: mpsc::Receiver<Batch>,
    threads: Vec<JoinHandle<()>>,
    in_flight: usize,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Msg")
    }
}

impl Clp {
    pub fn new(channels: Vec<Channel>, policy: ClpPolicy) -> Self {
        let n = match policy {
            ClpPolicy::ThreadPerConnection => channels.len(),
            ClpPolicy::ProcessorPerConnection(n) => n,
        }
        .max(1);
        let mut owned: Vec<Vec<(usize, Channel)>> = (0..n).map(|_| Vec::new()).collect();
        for (i, ch) in channels.into_iter().enumerate() {
            owned[i % n].push((i, ch));
        }
        let (done_tx, done_rx) = mpsc::channel::<Batch>();
        let mut to_workers = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        for (i, mine) in owned.into_iter().enumerate() {
            let (tx, rx) = mpsc::channel::<Msg>();
            let done = done_tx.clone();
            to_workers.push(tx);
            threads.push(std::thread::spawn(move || {
                crate::maybe_pin(i);
                worker(mine, n, rx, done)
            }));
        }
        Clp {
            to_workers,
            done_rx,
            threads,
            in_flight: 0,
        }
    }

    /// Number of worker threads.
    pub fn workers(&self) -> usize {
        self.to_workers.len()
    }
}

fn worker(
    mut mine: Vec<(usize, Channel)>,
    n: usize,
    rx: mpsc::Receiver<Msg>,
    done: mpsc::Sender<Batch>,
) {
    let mut restart = vec![false; mine.len()];
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Restart(c) => restart[c / n] = true,
            Msg::Work(op, c, mut packets) => {
                let slot = c / n;
                let ch = &mut mine[slot].1;
                match op {
                    Op::Seal => {
                        for p in &mut packets {
                            p.counter = ch.take_counter();
                            seal_one(&ch.tx, ch.receiver, ch.scope, p);
                        }
                    }
                    Op::Open => {
                        if std::mem::take(&mut restart[slot]) {
                            ch.replay = Default::default();
                        }
                        for p in &mut packets {
                            open_one(&ch.rx, ch.receiver, ch.allow_plaintext, p);
                            ch.accept(p);
                        }
                    }
                }
                let b = Batch {
                    channel: c,
                    op,
                    packets,
                };
                if done.send(b).is_err() {
                    return;
                }
            }
        }
    }
}

impl Engine for Clp {
    fn submit(&mut self, op: Op, channel: usize, packets: Vec<Packet>) {
        let n = self.to_workers.len();
        self.in_flight += 1;
        // A worker only stops when the engine is dropped.
        let _ = self.to_workers[channel % n].send(Msg::Work(op, channel, packets));
    }

    fn recv(&mut self) -> Option<Batch> {
        if self.in_flight == 0 {
            return None;
        }
        let b = self.done_rx.recv().ok()?;
        self.in_flight -= 1;
        Some(b)
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }
}

impl Drop for Clp {
    fn drop(&mut self) {
        self.to_workers.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl crate::lab::LabEngine for Clp {
    fn restart_replay_window(&mut self, channel: usize) {
        let n = self.to_workers.len();
        let _ = self.to_workers[channel % n].send(Msg::Restart(channel));
    }
}
