//! Paper 000's three ways of parallelising a protocol stack (Nahum et al. 1996), as thin drivers
//! over the product's engine, [`sealink_engine::Pipeline`]: what `sealink-lab bench stacks`
//! measures. All three share one interface ([`Engine`]): submit a batch of packets of one
//! channel, receive batches back, in order per channel.
//!
//! * [`Plp`] (packet-level parallelism): one ordered lane per channel over the pipeline's
//!   device-wide queue. The serial step (counters) runs on the submitting thread, the crypto on
//!   any worker with no lock held, and the replay `accept` in the lane's ordered release. The
//!   submitting thread is worker 0: it helps with queued work while it waits in
//!   [`recv`](Engine::recv). This is WireGuard's per-peer ordered queue over a device-wide ring.
//! * [`Clp`] (connection-level parallelism): one lane per channel, each lane bound to one worker
//!   (`channel % workers`, [`Pipeline::bound`]), so all of a channel's work, serial step
//!   included, runs on its worker. Thread-per-connection and processor-per-connection are the
//!   two [`ClpPolicy`]s of paper 000.
//! * [`Layered`]: one single-worker pipeline per layer (framing, then crypto) handing batches
//!   on, then the output (replay, delivery) on the caller: only a point of comparison.
//!
//! Every packet goes through [`sealink_proto::datapath`] or the same calls it makes, so the bytes
//! are exactly what the protocol puts on the wire; [`seal_serial`] and [`open_serial`] are the
//! single-threaded reference.

use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

use sealink_crypto::Scope;
use sealink_engine::pipeline::Options;
use sealink_engine::{Pipeline, Work};
use sealink_proto::DropReason;
use sealink_proto::wire::{self, HEADER_LEN, Header};

mod packet;

pub use packet::{
    Channel, HEADER_ROOM, Op, Packet, PacketError, open_one, open_serial, seal_one, seal_serial,
};

/// A batch of packets of one channel, as submitted and as released.
#[derive(Debug)]
pub struct Batch {
    pub channel: usize,
    pub op: Op,
    pub packets: Vec<Packet>,
}

/// The common interface of the drivers.
pub trait Engine {
    /// Hands a batch of packets of `channel` to the engine.
    fn submit(&mut self, op: Op, channel: usize, packets: Vec<Packet>);
    /// The next released batch, waiting (and, for [`Plp`], helping with the work) until one is
    /// ready; `None` when nothing is in flight.
    fn recv(&mut self) -> Option<Batch>;
    /// Batches submitted and not yet returned by [`recv`](Engine::recv).
    fn in_flight(&self) -> usize;
    /// The lab's hook, which breaks the protocol's guarantees on purpose so that a bench can open
    /// the same packets again and again (never on a real channel): the next open batch submitted
    /// for `channel` starts from an empty replay window, as if the sender had restarted its
    /// counters under the same key.
    fn restart_replay_window(&mut self, channel: usize);
}

/// Runs batches through an engine and returns them in release order (per channel in order): a
/// helper for tests and simple callers.
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

/// A receive slot that the worker first fills by copying `src` (the in-memory device's receive
/// DMA), so that a pool of sealed datagrams can be opened repeatedly without skipping work.
pub fn from_device(src: Arc<[u8]>) -> Packet {
    let mut p = Packet::new(vec![0; src.len()], 0);
    p.device = Some(src);
    p
}

/// Points an existing packet at a new device datagram (see [`from_device`]).
pub fn set_device(p: &mut Packet, src: Arc<[u8]>) {
    p.device = Some(src);
}

/// How long [`Plp`]'s workers and waiting caller poll for work or a released batch before they
/// sleep (the engine's own figure before issue 31). [`Clp`]'s and [`Layered`]'s threads sleep at
/// once, as they did: they outnumber the cores.
const SPIN: Duration = Duration::from_micros(50);

/// Options for pipelines whose workers sleep as soon as they are idle.
fn sleepy(bound: bool) -> Options {
    Options {
        bound,
        spin: Duration::ZERO,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while a channel is locked; keep its state if something did.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A batch on its way through a pipeline.
#[derive(Debug)]
struct Item {
    channel: usize,
    op: Op,
    /// Restart the channel's replay window before accepting this (open) batch.
    restart: bool,
    packets: Vec<Packet>,
}

impl Item {
    fn batch(self) -> Batch {
        Batch {
            channel: self.channel,
            op: self.op,
            packets: self.packets,
        }
    }
}

/// The receive side's serial step, in order: the replay window.
fn accept(ch: &mut Channel, item: &mut Item) {
    if item.op == Op::Open {
        if item.restart {
            ch.replay = Default::default();
        }
        for p in &mut item.packets {
            ch.accept(p);
        }
    }
}

/// What the workers of [`Plp`] and [`Clp`] share: the channels and the way out.
#[derive(Debug)]
struct Shared {
    /// Keys and addressing, fixed for the channels' life: read by the workers without a lock.
    keys: Vec<Channel>,
    /// Counters and replay windows, locked by the serial steps only: for PLP the submitter's
    /// counters and the ordered release (one thread at a time releases a lane, so the lock is
    /// not contended), for CLP the channel's worker.
    chans: Vec<Mutex<Channel>>,
    /// The serial step runs on the worker (CLP) rather than around it (PLP).
    serial_on_worker: bool,
    done: mpsc::Sender<Item>,
}

impl Work for Item {
    type Ctx = Shared;
    fn run(&mut self, ctx: &Shared) {
        if ctx.serial_on_worker {
            let mut ch = lock(&ctx.chans[self.channel]);
            match self.op {
                Op::Seal => {
                    for p in &mut self.packets {
                        p.counter = ch.take_counter();
                        seal_one(&ch.tx, ch.receiver, ch.scope, p);
                    }
                }
                Op::Open => {
                    for p in &mut self.packets {
                        open_one(&ch.rx, ch.receiver, ch.allow_plaintext, p);
                    }
                    accept(&mut ch, self);
                }
            }
            return;
        }
        let ch = &ctx.keys[self.channel];
        match self.op {
            Op::Seal => {
                for p in &mut self.packets {
                    seal_one(&ch.tx, ch.receiver, ch.scope, p);
                }
            }
            Op::Open => {
                for p in &mut self.packets {
                    open_one(&ch.rx, ch.receiver, ch.allow_plaintext, p);
                }
            }
        }
    }
    fn release(mut self, ctx: &Shared) {
        if !ctx.serial_on_worker && self.op == Op::Open {
            accept(&mut lock(&ctx.chans[self.channel]), &mut self);
        }
        // The receiver only goes away with the engine, after the pipeline has drained.
        let _ = ctx.done.send(self);
    }
}

/// The state common to the drivers: the pipeline, its output and the lab's restart flags.
struct Driver<W: Work> {
    pipe: Pipeline<W>,
    done: mpsc::Receiver<Item>,
    restart_next: Vec<bool>,
    in_flight: usize,
}

impl<W: Work> std::fmt::Debug for Driver<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("pipe", &self.pipe)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl<W: Work> Driver<W> {
    fn new(pipe: Pipeline<W>, done: mpsc::Receiver<Item>, channels: usize) -> Self {
        Driver {
            pipe,
            done,
            restart_next: vec![false; channels],
            in_flight: 0,
        }
    }

    fn item(&mut self, op: Op, channel: usize, packets: Vec<Packet>) -> Item {
        let restart = op == Op::Open && std::mem::take(&mut self.restart_next[channel]);
        self.in_flight += 1;
        Item {
            channel,
            op,
            restart,
            packets,
        }
    }

    /// The next released item; `help`: run queued work on this thread while waiting.
    fn next(&mut self, help: bool) -> Option<Item> {
        if self.in_flight == 0 {
            return None;
        }
        let item = loop {
            if let Ok(item) = self.done.try_recv() {
                break item;
            }
            if help && self.pipe.help() {
                continue;
            }
            // PLP polls briefly for a worker's release; then sleep until one arrives.
            let start = Instant::now();
            let polled = loop {
                match self.done.try_recv() {
                    Ok(item) => break Some(item),
                    Err(mpsc::TryRecvError::Empty) if help && start.elapsed() < SPIN => {
                        std::hint::spin_loop()
                    }
                    Err(_) => break None,
                }
            };
            match polled.or_else(|| self.done.recv().ok()) {
                Some(item) => break item,
                None => unreachable!("the pipeline's context holds a sender"),
            }
        };
        self.in_flight -= 1;
        Some(item)
    }
}

fn share(channels: Vec<Channel>, serial_on_worker: bool) -> (Arc<Shared>, mpsc::Receiver<Item>) {
    let (done, rx) = mpsc::channel();
    let shared = Shared {
        keys: channels.clone(),
        chans: channels.into_iter().map(Mutex::new).collect(),
        serial_on_worker,
        done,
    };
    (Arc::new(shared), rx)
}

/// Packet-level parallel driver (see the module documentation). `workers` counts the calling
/// thread: one worker spawns no thread and runs everything inline.
#[derive(Debug)]
pub struct Plp {
    d: Driver<Item>,
    shared: Arc<Shared>,
}

impl Plp {
    pub fn new(channels: Vec<Channel>, workers: usize) -> Self {
        let n = channels.len();
        let (shared, done) = share(channels, false);
        // The submitting thread is worker 0 (it helps in `recv`).
        let opts = Options {
            bound: false,
            spin: SPIN,
        };
        let pipe = Pipeline::with_options(Arc::clone(&shared), n, workers.max(1) - 1, opts);
        Plp {
            d: Driver::new(pipe, done, n),
            shared,
        }
    }
}

impl Engine for Plp {
    fn submit(&mut self, op: Op, channel: usize, mut packets: Vec<Packet>) {
        // The serial step: counters, then a slot in the channel's lane.
        if op == Op::Seal {
            let mut ch = lock(&self.shared.chans[channel]);
            for p in &mut packets {
                p.counter = ch.take_counter();
            }
        }
        let item = self.d.item(op, channel, packets);
        self.d.pipe.submit(channel, item);
    }
    fn recv(&mut self) -> Option<Batch> {
        self.d.next(true).map(Item::batch)
    }
    fn in_flight(&self) -> usize {
        self.d.in_flight
    }
    fn restart_replay_window(&mut self, channel: usize) {
        self.d.restart_next[channel] = true;
    }
}

/// How many threads serve the channels (paper 000 section 4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClpPolicy {
    /// One thread per channel.
    ThreadPerConnection,
    /// `n` threads (one per processor); channel `c` goes to thread `c % n`.
    ProcessorPerConnection(usize),
}

/// Connection-level parallel driver (see the module documentation): every packet of a channel
/// is handled, serial step included, by that channel's worker; the caller only waits.
#[derive(Debug)]
pub struct Clp {
    d: Driver<Item>,
}

impl Clp {
    pub fn new(channels: Vec<Channel>, policy: ClpPolicy) -> Self {
        let n = channels.len();
        let workers = match policy {
            ClpPolicy::ThreadPerConnection => n,
            ClpPolicy::ProcessorPerConnection(w) => w,
        }
        .max(1);
        let (shared, done) = share(channels, true);
        let pipe = Pipeline::with_options(shared, n, workers, sleepy(true));
        Clp {
            d: Driver::new(pipe, done, n),
        }
    }

    /// Number of worker threads.
    pub fn workers(&self) -> usize {
        self.d.pipe.workers()
    }
}

impl Engine for Clp {
    fn submit(&mut self, op: Op, channel: usize, packets: Vec<Packet>) {
        let item = self.d.item(op, channel, packets);
        self.d.pipe.submit(channel, item);
    }
    fn recv(&mut self) -> Option<Batch> {
        self.d.next(false).map(Item::batch)
    }
    fn in_flight(&self) -> usize {
        self.d.in_flight
    }
    fn restart_replay_window(&mut self, channel: usize) {
        self.d.restart_next[channel] = true;
    }
}

/// A batch in the crypto layer of [`Layered`].
struct Crypto(Item);

/// The crypto layer's context: the keys and the way out to the caller.
struct CryptoCtx {
    keys: Arc<[Channel]>,
    done: mpsc::Sender<Item>,
}

impl Work for Crypto {
    type Ctx = CryptoCtx;
    fn run(&mut self, ctx: &CryptoCtx) {
        let b = &mut self.0;
        let ch = &ctx.keys[b.channel];
        for p in &mut b.packets {
            if p.status.is_err() {
                continue;
            }
            let (scope, _, _) = match b.op {
                Op::Seal => (ch.scope, 0, 0),
                Op::Open => match sealink_proto::datapath::parse_data_header(&p.buf) {
                    Ok(h) => h,
                    Err(e) => {
                        p.status = Err(e.into());
                        continue;
                    }
                },
            };
            let r = match b.op {
                Op::Seal => ch
                    .tx
                    .seal_contiguous(p.counter, scope, &mut p.buf, HEADER_LEN, p.len)
                    .map(|n| HEADER_LEN + n)
                    .map_err(|_| PacketError::SealFailed),
                Op::Open => ch
                    .rx
                    .open_contiguous(
                        p.counter,
                        scope,
                        &mut p.buf[..p.len],
                        HEADER_LEN,
                        p.len - HEADER_LEN,
                    )
                    .map_err(|_| PacketError::Dropped(DropReason::AuthFailed)),
            };
            match r {
                Ok(n) => p.len = n,
                Err(e) => p.status = Err(e),
            }
        }
    }
    fn release(self, ctx: &CryptoCtx) {
        // The receiver only goes away with the engine, after the pipelines have drained.
        let _ = ctx.done.send(self.0);
    }
}

/// A batch in the framing layer of [`Layered`].
struct Framing(Item);

/// The framing layer's context: the keys and the next layer.
struct FramingCtx {
    keys: Arc<[Channel]>,
    crypto: Pipeline<Crypto>,
}

impl Work for Framing {
    type Ctx = FramingCtx;
    fn run(&mut self, ctx: &FramingCtx) {
        let b = &mut self.0;
        let ch = &ctx.keys[b.channel];
        for p in &mut b.packets {
            match b.op {
                Op::Seal => {
                    let hdr = Header::Data {
                        scope: ch.scope,
                        receiver: ch.receiver,
                        counter: p.counter,
                    };
                    match p.buf.get_mut(..HEADER_LEN).and_then(|h| h.try_into().ok()) {
                        Some(h) => wire::write_header(&hdr, h),
                        None => p.status = Err(PacketError::SealFailed),
                    }
                }
                Op::Open => {
                    if let Some(src) = &p.device {
                        if p.buf.len() < src.len() {
                            p.buf.resize(src.len(), 0);
                        }
                        p.buf[..src.len()].copy_from_slice(src);
                        p.len = src.len();
                    }
                    p.status = check_header(ch, p).map_err(PacketError::from);
                }
            }
        }
    }
    fn release(self, ctx: &FramingCtx) {
        // One framing worker releases, so the crypto lanes are submitted from one thread.
        ctx.crypto.submit(self.0.channel, Crypto(self.0));
    }
}

fn check_header(ch: &Channel, p: &mut Packet) -> Result<(), DropReason> {
    let (scope, index, counter) =
        sealink_proto::datapath::parse_data_header(p.buf.get(..p.len).unwrap_or(&[]))?;
    if index != ch.receiver {
        return Err(DropReason::UnknownIndex);
    }
    if scope == Scope::None && !ch.allow_plaintext {
        return Err(DropReason::ScopeRefused);
    }
    p.counter = counter;
    Ok(())
}

/// The layered driver: one pipeline of one worker per layer; every channel goes through the same
/// two threads. Send: framing (the header; the counter is taken on submit) -> crypto (seal) ->
/// caller. Receive: framing (device copy, parse and check the header) -> crypto (open) -> caller
/// (in-order replay accept and delivery). The bytes are the same as [`seal_serial`]'s.
#[derive(Debug)]
pub struct Layered {
    channels: Vec<Channel>,
    d: Driver<Framing>,
}

impl Layered {
    pub fn new(channels: Vec<Channel>) -> Self {
        let n = channels.len();
        let keys: Arc<[Channel]> = channels.iter().cloned().collect();
        let (tx, done) = mpsc::channel();
        let crypto = Arc::new(CryptoCtx {
            keys: Arc::clone(&keys),
            done: tx,
        });
        let crypto = Pipeline::with_options(crypto, n, 1, sleepy(false));
        let framing = Arc::new(FramingCtx { keys, crypto });
        let framing = Pipeline::with_options(framing, n, 1, sleepy(false));
        Layered {
            channels,
            d: Driver::new(framing, done, n),
        }
    }
}

impl Engine for Layered {
    fn submit(&mut self, op: Op, channel: usize, mut packets: Vec<Packet>) {
        if op == Op::Seal {
            let ch = &mut self.channels[channel];
            for p in &mut packets {
                p.counter = ch.take_counter();
                p.status = Ok(());
            }
        }
        let item = self.d.item(op, channel, packets);
        self.d.pipe.submit(channel, Framing(item));
    }
    fn recv(&mut self) -> Option<Batch> {
        let mut item = self.d.next(false)?;
        accept(&mut self.channels[item.channel], &mut item);
        Some(item.batch())
    }
    fn in_flight(&self) -> usize {
        self.d.in_flight
    }
    fn restart_replay_window(&mut self, channel: usize) {
        self.d.restart_next[channel] = true;
    }
}
