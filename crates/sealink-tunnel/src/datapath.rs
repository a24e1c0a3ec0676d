//! The data path: TUN and UDP readers that reserve under the core's lock, batches sealed and
//! opened on the engine's workers, and in-order release (see the crate documentation).

use std::io::IoSlice;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use sealink_engine::{Duplex, Gauge, Half, Pipeline, Pool};
use sealink_proto::DropReason;
use sealink_proto::tunnel::{DecapJob, DecapReserve, PeerIndex, Reserve, TAILROOM};
use sealink_proto::wire::LANE_OFFSET;
use sealink_udp::{Received, Sending};
use tun_rs::{IDEAL_BATCH_SIZE, VIRTIO_NET_HDR_LEN, VirtioNetHdr};

use crate::threads::Count;
use crate::transmit::{self, SlotJob, TxJob, TxSending};
use crate::tunread::{self, Unfinished};
use crate::tunwrite;
use crate::{QueuedTransmits, Shared};

/// Batches each reader may have in flight (its buffers): enough to keep the workers busy while
/// it reads the next one.
const BATCHES_PER_READER: usize = 4;
/// Datagrams one `recvmmsg` may return (each up to a 64 KiB GRO super-buffer).
const RECV_BATCH: usize = 16;
/// Longest a reader blocks before it looks at the stop flag again (stop also wakes it).
const IDLE_WAIT: Duration = Duration::from_millis(250);

/// One unit of engine work.
pub(crate) type Batch = Duplex<RxBatch, TxBatch>;

/// The lane of what TUN queue `queue` reads (`sealink_proto::wire::LANE_OFFSET`): the kernel
/// keeps a flow on one queue, so a peer that steers by lane receives each flow on one socket,
/// and its flows spread over its sockets. Never 0, which means no lane.
pub(crate) fn lane_of(queue: usize) -> u8 {
    (queue % 255 + 1) as u8
}

// ------------------------------------------------------------------------------ TUN -> UDP

pub(crate) struct TxBatch {
    queue: usize,
    stride: usize,
    /// The datagrams, in send order: the packets read, each in its slot of the fixed area,
    /// and the datagrams the core queued ahead of them (piggyback flushes), appended after.
    tx: TxSending,
    sizes: Vec<usize>,
    unfinished: Vec<Unfinished>,
    /// The buffer of the TUN read (virtio header, then the super-packet): segments' payloads
    /// stay here until a worker finishes them.
    original: Vec<u8>,
    /// Seals that failed on the worker, reported at release.
    failed: u64,
    pool: Arc<Pool<Box<TxBatch>>>,
}

impl Half for TxBatch {
    type Ctx = Shared;
    fn run(&mut self) {
        let lane = lane_of(self.queue);
        let read = &self.original[VIRTIO_NET_HDR_LEN..];
        self.failed = transmit::seal_all(&mut self.tx, lane, read);
    }

    fn release(mut self: Box<Self>, sh: &Shared) {
        let sock = self.queue % sh.udp.len();
        transmit::send_all(&mut self.tx, sh, sock);
        // Report the sends (autocork) and send what that flushed.
        {
            let mut core = sh.lock();
            let now = sh.clock.now();
            // One report per run of slots for the same peer (a batch is usually one run).
            let mut run: Option<(PeerIndex, u64)> = None;
            for peer in self
                .tx
                .jobs()
                .filter_map(|(j, _)| j.slot.as_ref().map(|s| s.peer))
            {
                match &mut run {
                    Some((p, n)) if *p == peer => *n += 1,
                    _ => {
                        if let Some((p, n)) = run.replace((peer, 1)) {
                            core.sent(now, p, n);
                        }
                    }
                }
            }
            if let Some((p, n)) = run {
                core.sent(now, p, n);
            }
            if self.failed > 0 {
                core.seal_failed(self.failed);
            }
            self.tx.clear();
            transmit::take_queued(&mut self.tx, &mut core, self.stride);
        }
        if !self.tx.is_empty() {
            let failed = transmit::seal_all(&mut self.tx, lane_of(self.queue), &[]);
            if failed > 0 {
                sh.lock().seal_failed(failed);
            }
            transmit::send_all(&mut self.tx, sh, sock);
        }
        self.tx.clear();
        let pool = Arc::clone(&self.pool);
        pool.put(self);
    }
}

/// The reader of TUN queue `q`, with the batches it owns.
pub(crate) struct TunReader {
    q: usize,
    pool: Arc<Pool<Box<TxBatch>>>,
}

impl TunReader {
    pub(crate) fn new(sh: &Shared, q: usize) -> Self {
        let stride = sh.stride;
        let batch = if sh.offload { IDEAL_BATCH_SIZE } else { 1 };
        let pool = Pool::new(Vec::new());
        for _ in 0..BATCHES_PER_READER {
            pool.put(Box::new(TxBatch {
                queue: q,
                stride,
                // No limit on a run: `UdpIo::send` splits long ones.
                tx: Sending::new(stride * batch, stride * 2, usize::MAX),
                sizes: vec![0usize; batch],
                unfinished: vec![Unfinished::default(); batch],
                original: vec![0u8; VIRTIO_NET_HDR_LEN + 65_535],
                failed: 0,
                pool: Arc::clone(&pool),
            }));
        }
        TunReader { q, pool }
    }

    /// Reads one batch (`wait`: blocking until there is one or the tunnel stops; else returning
    /// at once when the queue is empty, on a non-blocking device), reserves its packets and
    /// submits it, sealing it here unless `gauge` (this thread's) says to hand it off. Returns
    /// whether packets were read.
    pub(crate) fn step(
        &self,
        sh: &Shared,
        pipe: &Pipeline<Batch>,
        wait: bool,
        gauge: &mut Gauge,
    ) -> bool {
        let (q, stride, pool) = (self.q, sh.stride, &self.pool);
        let Some(mut b) = pool.take(pipe, || sh.stopping()) else {
            return false;
        };
        let dev = &sh.devs[q];
        let n = match read(sh, dev, &mut b, wait) {
            Ok(n) => {
                sh.threads
                    .call(Count::TunReads, Count::TunReadPackets, n as u64);
                n
            }
            Err(e) => {
                if !sh.stopping() && e.kind() != std::io::ErrorKind::WouldBlock {
                    tracing::debug!(error = %e, "TUN read failed");
                }
                pool.put(b);
                return false;
            }
        };
        b.tx.clear();
        let wake_timer;
        {
            let mut core = sh.lock();
            let now = sh.clock.now();
            let h = sh.headroom;
            let TxBatch {
                tx,
                sizes,
                unfinished,
                original,
                ..
            } = &mut *b;
            let read = &original[VIRTIO_NET_HDR_LEN..];
            for (i, (&size, &unfinished)) in sizes.iter().zip(unfinished.iter()).enumerate().take(n)
            {
                let slot = &mut tx.fixed_mut()[i * stride..(i + 1) * stride];
                // A packet the core keeps a copy of is finished now; one sealed at once is
                // finished on the worker.
                let r = core.encapsulate_reserve_with(now, slot, size, |pkt| {
                    tunread::finish(pkt, read, unfinished)
                });
                // Datagrams the core queued (a piggyback flush) go before this packet.
                transmit::take_queued(tx, &mut core, stride);
                match r {
                    Reserve::Seal { peer, dest, job } => {
                        let slot = SlotJob {
                            peer,
                            pkt: h..h + size,
                            unfinished,
                        };
                        let job = TxJob {
                            seal: job,
                            slot: Some(slot),
                        };
                        tx.push(dest, i * stride, stride, Some(job));
                    }
                    Reserve::Queued | Reserve::Dropped(_) => {}
                }
            }
            // Autocork: the queues of idle peers leave now, after this batch's packets.
            core.end_batch(now);
            transmit::take_queued(tx, &mut core, stride);
            // A rekey or a packet waiting for a session: its initiation goes to the handshake
            // threads, never built here.
            sh.handshakes.take_initiations(&mut core);
            // A small packet that end_batch already sent needs no timer: waking it for every
            // TCP ACK cost the receiving host 4% of a core (RESULTS §21).
            wake_timer = core.take_timer_hint();
        }
        if wake_timer {
            sh.timer.notify_one();
        }
        if b.tx.is_empty() {
            pool.put(b);
        } else {
            submit(sh, pipe, gauge, q, Duplex::Tx(b));
        }
        n > 0
    }
}

/// One TUN read into the batch's slots: with offloads, the super-packet the kernel handed over,
/// split by `tunread` (checksums left partial); without, one packet into the first slot.
fn read(
    sh: &Shared,
    dev: &tun_rs::SyncDevice,
    b: &mut TxBatch,
    wait: bool,
) -> std::io::Result<usize> {
    let TxBatch {
        stride,
        tx,
        sizes,
        unfinished,
        original,
        ..
    } = b;
    let (stride, h) = (*stride, sh.headroom);
    let slots = tx.fixed_mut();
    let max_len = stride - h - TAILROOM;
    if !sh.offload {
        // The whole slot past the headroom: a packet over the MTU reads longer than the MTU
        // (the core drops it as malformed) instead of being cut to fit.
        let buf = &mut slots[h..stride];
        let n = if wait {
            dev.recv_intr(buf, &sh.intr)?
        } else {
            dev.recv(buf)?
        };
        sizes[0] = n;
        unfinished[0] = Unfinished::default();
        return Ok(1);
    }
    let len = if wait {
        dev.recv_intr(original, &sh.intr)?
    } else {
        dev.recv(original)?
    };
    if len <= VIRTIO_NET_HDR_LEN {
        return Err(std::io::Error::other(
            "TUN read shorter than its virtio header",
        ));
    }
    let (hdr, input) = original[..len].split_at_mut(VIRTIO_NET_HDR_LEN);
    let hdr = VirtioNetHdr::decode(hdr)?;
    tunread::split(
        &hdr,
        input,
        &mut tunread::Out {
            slots,
            stride,
            offset: h,
            max_len,
            sizes,
            unfinished,
        },
    )
}

/// Submits a batch through this thread's gauge, and counts it (and whether it left).
fn submit(sh: &Shared, pipe: &Pipeline<Batch>, gauge: &mut Gauge, lane: usize, b: Batch) {
    sh.threads.count(Count::BatchesSubmitted, 1);
    if pipe.submit_from(gauge, lane, b) {
        sh.threads.count(Count::Handoffs, 1);
    }
}

/// Reads TUN queue `q` until stopped.
pub(crate) fn tun_loop(sh: &Shared, pipe: &Pipeline<Batch>, q: usize) {
    let r = TunReader::new(sh, q);
    let mut gauge = Gauge::new(sh.info.handoff);
    while !sh.stopping() {
        r.step(sh, pipe, true, &mut gauge);
    }
}

/// Serves TUN queue `q` and UDP socket `q` from one thread (run to completion): each wake-up
/// reads whichever has packets, so the reply a write provokes (a TCP ACK after a TUN write) is
/// picked up by the same thread without waking another. The thread seals and opens its
/// batches itself unless its gauge says it saturates (then the workers take them).
pub(crate) fn io_loop(sh: &Shared, pipe: &Pipeline<Batch>, q: usize, lane: usize) {
    use std::os::fd::AsFd;
    if let Err(e) = sh.devs[q].set_nonblocking(true) {
        tracing::warn!(error = %e, "TUN queue cannot be non-blocking; one thread per direction");
        std::thread::scope(|s| {
            s.spawn(|| udp_loop(sh, pipe, q, lane));
            tun_loop(sh, pipe, q);
        });
        return;
    }
    let tun = TunReader::new(sh, q);
    let udp = UdpReader::new(sh, q, lane);
    let mut gauge = Gauge::new(sh.info.handoff);
    while !sh.stopping() {
        // As many TUN reads as one UDP receive may take datagrams: a burst of requests (up to
        // RECV_BATCH a receive) is answered by the kernel into the TUN queue (500 packets) at
        // the same pace, and one TUN read per round let that queue overflow (issue 50: the
        // echoes a starved load generator sent at once, replies dropped by the kernel).
        let mut t = false;
        for _ in 0..RECV_BATCH {
            if !tun.step(sh, pipe, false, &mut gauge) {
                break;
            }
            t = true;
        }
        let u = udp.step(sh, pipe, Some(Duration::ZERO), &mut gauge);
        if !t && !u {
            let r = sh.udp[q].wait_readable_with(sh.devs[q].as_fd(), Some(IDLE_WAIT));
            if let Err(e) = r {
                tracing::debug!(error = %e, "poll failed");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

// ------------------------------------------------------------------------------ UDP -> TUN

pub(crate) struct RxBatch {
    sock: usize,
    rx: Received<DecapJob, DropReason>,
    out: QueuedTransmits,
    ranges: Vec<Range<usize>>,
    /// Packets to write: (receive buffer, range in it).
    pkts: Vec<(usize, Range<usize>)>,
    /// The TUN writes of `pkts` (super-packets and single packets), and each one's virtio
    /// header (with offloads) and last segment's TCP flags.
    runs: Vec<tunwrite::Run>,
    hdrs: Vec<[u8; VIRTIO_NET_HDR_LEN]>,
    last_flags: Vec<u8>,
    /// With TUN writer threads: the writes (indexes into `runs`) each writer makes, a flow
    /// always on the same writer ([`tunwrite::flow_hash`]), so its packets stay in order.
    by_writer: Vec<Vec<usize>>,
    pool: Arc<Pool<Box<RxBatch>>>,
}

impl Half for RxBatch {
    type Ctx = Shared;
    fn run(&mut self) {
        self.rx.open_all(DecapJob::open);
    }

    fn release(mut self: Box<Self>, sh: &Shared) {
        self.pkts.clear();
        // `out` already holds what the core queued while the batch was reserved (the answers
        // to handshakes that arrived in it beside data, in `UdpReader::step`): kept, and sent
        // below with what the finish queues. Clearing it here lost those answers, and their
        // initiators waited for a retry (issue 50).
        {
            let mut core = sh.lock();
            let now = sh.clock.now();
            let RxBatch {
                rx,
                ranges,
                pkts,
                out,
                ..
            } = &mut *self;
            rx.finish_each(|seg, job, opened, dg| {
                ranges.clear();
                if core
                    .decapsulate_finish(now, seg.source, job, opened, dg, ranges)
                    .is_ok()
                {
                    let base = seg.range.start;
                    for r in ranges.iter() {
                        pkts.push((seg.buf, base + r.start..base + r.end));
                    }
                }
            });
            out.drain(&mut core);
        }
        let mut lend = false;
        if !self.pkts.is_empty() {
            self.plan_writes(sh);
            if sh.writers.is_empty() {
                let dev = &sh.devs[self.sock % sh.devs.len()];
                self.write_runs(sh, dev, 0..self.runs.len());
            } else {
                self.assign_writers(sh.writers.len());
                lend = true;
            }
        }
        self.out.seal_and_send(sh, self.sock, 0);
        if lend {
            // The writers share the batch; the last one done hands it back to the pool.
            let lent = Arc::new(Lent(Some(self)));
            for (k, w) in sh.writers.iter().enumerate() {
                if lent.batch().by_writer[k].is_empty() {
                    continue;
                }
                // A writer gone (the tunnel stopping) drops its share: the batch still returns.
                let _ = w.send(Some(Arc::clone(&lent)));
            }
            return;
        }
        let pool = Arc::clone(&self.pool);
        pool.put(self);
    }
}

/// A received batch shared by the TUN writers its packets went to; it returns to its reader's
/// pool when the last of them drops it.
pub(crate) struct Lent(Option<Box<RxBatch>>);

impl Lent {
    fn batch(&self) -> &RxBatch {
        self.0
            .as_deref()
            .expect("a lent batch is only taken back on drop")
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            let pool = Arc::clone(&b.pool);
            pool.put(b);
        }
    }
}

/// What a TUN writer thread is sent: a batch to write its share of, or `None` to stop.
pub(crate) type WriterJob = Option<Arc<Lent>>;

/// TUN writer `k`: writes its share of each batch (its flows) to TUN queue `k`, in the order
/// the batches were released, until told to stop.
pub(crate) fn writer_loop(sh: &Shared, k: usize, jobs: std::sync::mpsc::Receiver<WriterJob>) {
    let dev = &sh.devs[k % sh.devs.len()];
    while let Ok(Some(lent)) = jobs.recv() {
        let b = lent.batch();
        b.write_runs(sh, dev, b.by_writer[k].iter().copied());
    }
}

impl RxBatch {
    /// Groups the opened packets into TUN writes: with offloads, TCP segments of a flow
    /// coalesced into super-packets whose first segment is rewritten in place to head them
    /// (see [`tunwrite`]); without, one write per packet.
    fn plan_writes(&mut self, sh: &Shared) {
        let RxBatch {
            rx,
            pkts,
            runs,
            hdrs,
            last_flags,
            ..
        } = self;
        let rb = rx.buffers_mut();
        hdrs.clear();
        if !sh.offload {
            runs.clear();
            runs.extend(
                pkts.iter()
                    .enumerate()
                    .map(|(i, (_, r))| tunwrite::Run::single(i, r.len())),
            );
            return;
        }
        {
            let bufs = &*rb.bufs_mut();
            let slices: Vec<&[u8]> = pkts.iter().map(|(b, r)| &bufs[*b][r.clone()]).collect();
            tunwrite::plan(&slices, runs);
            last_flags.clear();
            last_flags.extend(
                runs.iter()
                    .map(|r| tunwrite::tcp_flags(slices[r.first + r.n - 1])),
            );
        }
        let bufs = rb.bufs_mut();
        for (run, &lf) in runs.iter().zip(last_flags.iter()) {
            let (b, r) = &pkts[run.first];
            hdrs.push(tunwrite::finish(run, &mut bufs[*b][r.clone()], lf));
        }
    }

    /// Gives each write to writer `hash(flow) % writers`.
    fn assign_writers(&mut self, writers: usize) {
        let RxBatch {
            rx,
            pkts,
            runs,
            by_writer,
            ..
        } = self;
        by_writer.resize_with(writers, Vec::new);
        for w in by_writer.iter_mut() {
            w.clear();
        }
        let bufs = rx.buffers().bufs();
        for (i, run) in runs.iter().enumerate() {
            let (b, r) = &pkts[run.first];
            let k = (tunwrite::flow_hash(&bufs[*b][r.clone()]) % writers as u64) as usize;
            by_writer[k].push(i);
        }
    }

    /// Makes the planned writes `which` to `dev`, straight from the receive buffers (with
    /// offloads, each one `writev` gathered from them).
    fn write_runs(
        &self,
        sh: &Shared,
        dev: &tun_rs::SyncDevice,
        which: impl Iterator<Item = usize>,
    ) {
        let bufs = self.rx.buffers().bufs();
        let pkt = |i: usize| {
            let (b, r) = &self.pkts[i];
            &bufs[*b][r.clone()]
        };
        if !sh.offload {
            for i in which {
                match dev.send(pkt(self.runs[i].first)) {
                    Ok(_) => sh.threads.call(Count::TunWrites, Count::TunWritePackets, 1),
                    Err(e) => tracing::debug!(error = %e, "TUN write failed"),
                }
            }
            return;
        }
        let mut iov = [IoSlice::new(&[]); tunwrite::MAX_RUN + 1];
        for i in which {
            let run = &self.runs[i];
            let n = tunwrite::gather(run, &self.hdrs[i], pkt, &mut iov);
            match rustix::io::writev(dev, &iov[..n]) {
                Ok(_) => sh
                    .threads
                    .call(Count::TunWrites, Count::TunWritePackets, run.n as u64),
                Err(e) => tracing::debug!(error = %e, packets = run.n, "TUN write failed"),
            }
        }
    }
}

/// The reader of UDP socket `s`, with the batches it owns; its batches go on `lane`.
pub(crate) struct UdpReader {
    s: usize,
    lane: usize,
    pool: Arc<Pool<Box<RxBatch>>>,
}

impl UdpReader {
    pub(crate) fn new(sh: &Shared, s: usize, lane: usize) -> Self {
        let pool = Pool::new(Vec::new());
        for _ in 0..BATCHES_PER_READER {
            pool.put(Box::new(RxBatch {
                sock: s,
                rx: Received::new(RECV_BATCH),
                out: QueuedTransmits::new(sh.stride),
                ranges: Vec::new(),
                pkts: Vec::new(),
                runs: Vec::new(),
                hdrs: Vec::new(),
                last_flags: Vec::new(),
                by_writer: Vec::new(),
                pool: Arc::clone(&pool),
            }));
        }
        UdpReader { s, lane, pool }
    }

    /// Receives one batch (waiting up to `timeout`), reserves its datagrams and submits it
    /// through `gauge` (this thread's), or answers handshakes here. Returns whether datagrams
    /// were received.
    pub(crate) fn step(
        &self,
        sh: &Shared,
        pipe: &Pipeline<Batch>,
        timeout: Option<Duration>,
        gauge: &mut Gauge,
    ) -> bool {
        let (s, pool) = (self.s, &self.pool);
        let Some(mut b) = pool.take(pipe, || sh.stopping()) else {
            return false;
        };
        let udp = &sh.udp[s];
        b.rx.clear();
        b.out.clear();
        // Datagrams that the steering program sends to another socket (GRO mixed two lanes).
        let steered = sh.info.lane_steering.then_some(sh.udp.len());
        let mut strays = 0;
        let r = {
            let RxBatch { rx, out, .. } = &mut *b;
            let (r, _held) = rx.recv_reserving(
                udp,
                timeout,
                || (sh.lock(), sh.clock.now()),
                |(core, now), seg, d| {
                    if let Some(n) = steered {
                        let want = sealink_udp::steer::lane_socket(d, LANE_OFFSET, n);
                        strays += u64::from(want.is_some_and(|w| w != s));
                    }
                    if core.is_handshake(d) {
                        // Off the data path: a handshake thread answers it (`handshakes.rs`).
                        sh.handshakes.push(core, seg.source, d);
                        return None;
                    }
                    let job = match core.decapsulate_reserve(*now, seg.source, d) {
                        Ok(DecapReserve::Open(job)) => Some(job),
                        _ => None,
                    };
                    out.drain(core);
                    job
                },
            );
            r
        };
        if strays > 0 {
            sh.threads.count(Count::LaneStrays, strays);
        }
        let got = match r {
            Ok(n) => {
                if n > 0 {
                    sh.threads
                        .call(Count::UdpReceives, Count::UdpReceiveDatagrams, n as u64);
                }
                n > 0
            }
            Err(e) => {
                tracing::debug!(error = %e, "UDP receive failed");
                false
            }
        };
        if b.rx.is_empty() {
            // Handshakes only (or nothing): answer here.
            b.out.seal_and_send(sh, s, 0);
            pool.put(b);
        } else {
            submit(sh, pipe, gauge, self.lane, Duplex::Rx(b));
        }
        got
    }
}

/// Reads UDP socket `s` until stopped.
pub(crate) fn udp_loop(sh: &Shared, pipe: &Pipeline<Batch>, s: usize, lane: usize) {
    let r = UdpReader::new(sh, s, lane);
    let mut gauge = Gauge::new(sh.info.handoff);
    while !sh.stopping() {
        r.step(sh, pipe, Some(IDLE_WAIT), &mut gauge);
    }
}
