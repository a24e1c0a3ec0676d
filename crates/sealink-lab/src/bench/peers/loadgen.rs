//! The load generator of `bench peers`: many simulated peers in one thread, each a
//! [`Tunnel`] core of its own (its own key, one configured peer: the hub) on a UDP socket of its
//! own (its own source port), all driven by one epoll loop. A peer's traffic is ICMP echo
//! requests to the hub's tunnel address, which the hub's kernel answers through the tunnel:
//! each request carries the peer, a sequence number, the phase it was sent in and the time it
//! was sent, so that the reply gives a round trip and losses are counted per phase.
//!
//! A flood thread ([`Flood`]) sends handshake initiations from unknown keys (valid mac1: the hub
//! must look at them) from many spoofed source addresses at a set rate.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::ops::Range;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, TryLockError, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use rustix::event::epoll;
use sealink_proto::tunnel::{Decap, Encap, IpNet, Tunnel, TunnelConfig, TunnelPeerConfig};
use sealink_proto::{Clock, HostKey, Time};

use crate::error::{Error, Result};

/// The protocol the simulated peers speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireKind {
    Sealink,
    WireGuard,
}

impl WireKind {
    pub fn name(self) -> &'static str {
        match self {
            WireKind::Sealink => "sealink",
            WireKind::WireGuard => "wg",
        }
    }

    fn config(self, seed: u32) -> TunnelConfig {
        let mut c = match self {
            WireKind::Sealink => TunnelConfig::default(),
            WireKind::WireGuard => TunnelConfig::wireguard(),
        };
        c.index_seed = seed;
        c
    }
}

/// Marks an echo payload as ours.
const MAGIC: u32 = 0x5EA1_50E0;
/// Bytes of an echo request: IPv4 (20) + ICMP (8) + 56 bytes of payload, as `ping` sends.
pub const ECHO_LEN: usize = 84;
const BUF: usize = 2048;

/// What one phase's echoes found.
#[derive(Debug, Clone, Default)]
pub struct PhaseEcho {
    pub sent: u64,
    pub received: u64,
    /// Requests the core could not send (no session, staging full): not on the wire.
    pub not_sent: u64,
    /// Round trips in microseconds.
    pub rtt_us: Vec<u32>,
    /// Microseconds the echo loop itself spent on handshake work (handshake messages read,
    /// initiations built) while this was the newest phase, and its longest single piece: time
    /// in which echo replies waited in their sockets. Zero with the handshake worker.
    pub loop_handshake_us: u64,
    pub loop_handshake_max_us: u64,
    /// Microseconds the handshake worker worked while this was the newest phase (filled in
    /// by [`Driver::finish_phases`]).
    pub worker_us: u64,
}

impl PhaseEcho {
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            return f64::NAN;
        }
        1.0 - self.received as f64 / self.sent as f64
    }

    /// The `q` quantile of the round trips, in milliseconds.
    pub fn rtt_ms(&self, q: f64) -> f64 {
        if self.rtt_us.is_empty() {
            return f64::NAN;
        }
        let mut v = self.rtt_us.clone();
        v.sort_unstable();
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        f64::from(v[i.min(v.len() - 1)]) / 1000.0
    }
}

/// A simulated peer's core, behind a lock of its own: the echo loop takes it for data, the
/// handshake worker for handshake messages, initiations and timers.
#[derive(Debug)]
struct Core {
    tunnel: Tunnel,
}

/// No deadline, in [`Shared::timeout_ns`].
const NO_TIMEOUT: u64 = u64::MAX;

/// The part of a simulated peer both threads reach.
#[derive(Debug)]
struct Shared {
    core: Mutex<Core>,
    sock: UdpSocket,
    /// The core's next deadline in nanoseconds ([`NO_TIMEOUT`]: none), readable without its
    /// lock: a pass of the timers locks only the peers that are due.
    timeout_ns: AtomicU64,
    /// When its first session came up (set once, by whichever thread saw it).
    established: OnceLock<Instant>,
    /// Handshakes completed and initiations sent, as last read: what a reader that finds the
    /// core busy gets.
    handshakes: AtomicU64,
    initiations: AtomicU64,
}

#[derive(Debug)]
struct SimPeer {
    shared: Arc<Shared>,
    inner: Ipv4Addr,
    seq: u32,
    kicked: Option<Instant>,
    /// Echo replies received.
    replies: u64,
}

/// Counters of the generator itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct GenCounters {
    /// Datagrams the generator's sockets would not take (send buffer full).
    pub send_errors: u64,
    /// Datagrams its peers' cores refused.
    pub refused: u64,
    pub datagrams_out: u64,
    pub datagrams_in: u64,
}

/// [`GenCounters`] that both the echo loop and the handshake worker count into.
#[derive(Debug, Default)]
struct Counters {
    send_errors: AtomicU64,
    refused: AtomicU64,
    datagrams_out: AtomicU64,
    datagrams_in: AtomicU64,
}

impl Counters {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    fn get(&self) -> GenCounters {
        GenCounters {
            send_errors: self.send_errors.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            datagrams_out: self.datagrams_out.load(Ordering::Relaxed),
            datagrams_in: self.datagrams_in.load(Ordering::Relaxed),
        }
    }
}

/// Sends what peer `s`'s core has to send and re-reads its next deadline.
fn flush(s: &Shared, core: &mut Core, out: &mut [u8], counters: &Counters) {
    while let Some((dest, n)) = core.tunnel.poll_transmit(out) {
        match s.sock.send_to(&out[..n], dest) {
            Ok(_) => Counters::add(&counters.datagrams_out, 1),
            Err(_) => Counters::add(&counters.send_errors, 1),
        }
    }
    let t = core
        .tunnel
        .poll_timeout()
        .map_or(NO_TIMEOUT, Time::as_nanos);
    s.timeout_ns.store(t, Ordering::Relaxed);
}

/// Whether peer `s`'s next deadline has come by `now`.
fn due(s: &Shared, now: Time) -> bool {
    s.timeout_ns.load(Ordering::Relaxed) <= now.as_nanos()
}

/// Notes peer `s`'s first session, once it is up.
fn note_established(s: &Shared, core: &Core, now: Time) {
    if s.established.get().is_none()
        && core
            .tunnel
            .peer_status(now)
            .first()
            .is_some_and(|st| st.session_up)
    {
        let _ = s.established.set(Instant::now());
    }
}

/// Builds and sends the initiations peer `s`'s core reserved: the public-key work with the
/// peer's lock not held (the echo loop may send on its current session meanwhile).
fn build_initiations(s: &Shared, clock: Clock, out: &mut [u8], counters: &Counters) {
    let mut jobs = Vec::new();
    let initiator = {
        let mut g = s.core.lock().unwrap_or_else(PoisonError::into_inner);
        g.tunnel.take_initiations(&mut jobs);
        g.tunnel.initiator()
    };
    if jobs.is_empty() {
        return;
    }
    let built: Vec<_> = jobs.into_iter().map(|j| initiator.build(j)).collect();
    let mut g = s.core.lock().unwrap_or_else(PoisonError::into_inner);
    let now = clock.now();
    for b in built {
        let _ = g.tunnel.initiation_commit(now, b);
    }
    flush(s, &mut g, out, counters);
}

/// The worker's end of using peer `s`'s core: what it has to send leaves, then the initiations
/// it reserved are built with its lock let go.
fn send_and_build(
    s: &Shared,
    mut g: MutexGuard<'_, Core>,
    clock: Clock,
    out: &mut [u8],
    counters: &Counters,
) {
    let more = g.tunnel.has_initiations();
    flush(s, &mut g, out, counters);
    drop(g);
    if more {
        build_initiations(s, clock, out, counters);
    }
}

/// Work for the handshake worker.
enum Job {
    Add(Arc<Shared>),
    /// A handshake message for peer `.0` from `.1`.
    Datagram(usize, SocketAddr, Vec<u8>),
    /// Peer `.0`'s core reserved initiations.
    Initiations(usize),
}

/// Nice increment of the handshake worker: its peers stand for other hosts, whose public-key
/// work would not take a core from this host's echo loop (as the storm's thread).
const WORKER_NICE: i32 = 10;

/// The thread that does the driven peers' handshake work (handshake messages read, their
/// initiations built, their timers), so that the echo loop reads and stamps echo replies on
/// time: measurement hygiene of the generator, not a part of the hub.
#[derive(Debug)]
struct Worker {
    tx: Option<mpsc::Sender<Job>>,
    handle: Option<thread::JoinHandle<()>>,
    /// Microseconds of work per phase (the phase current when the work was done).
    busy_us: Arc<Mutex<Vec<u64>>>,
    phase_now: Arc<AtomicU64>,
}

impl Worker {
    fn start(clock: Clock, counters: Arc<Counters>) -> Result<Worker> {
        let (tx, rx) = mpsc::channel::<Job>();
        let busy_us = Arc::new(Mutex::new(Vec::new()));
        let phase_now = Arc::new(AtomicU64::new(0));
        let (busy, ph) = (busy_us.clone(), phase_now.clone());
        let handle = thread::Builder::new()
            .name("gen-hs".into())
            .spawn(move || {
                super::lab::lower_this_thread(WORKER_NICE);
                worker_loop(&rx, clock, &counters, &busy, &ph);
            })
            .map_err(io_err("start the generator's handshake thread"))?;
        Ok(Worker {
            tx: Some(tx),
            handle: Some(handle),
            busy_us,
            phase_now,
        })
    }

    fn send(&self, job: Job) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(job);
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// How often the worker runs its peers' timers.
const WORKER_TIMERS: Duration = Duration::from_millis(2);

fn worker_loop(
    rx: &mpsc::Receiver<Job>,
    clock: Clock,
    counters: &Counters,
    busy_us: &Mutex<Vec<u64>>,
    phase_now: &AtomicU64,
) {
    let mut peers: Vec<Arc<Shared>> = Vec::new();
    let mut out = vec![0u8; BUF];
    let mut packets = Vec::new();
    let mut next_timers = Instant::now();
    loop {
        let job = match rx.recv_timeout(next_timers.saturating_duration_since(Instant::now())) {
            Ok(j) => Some(j),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let t0 = Instant::now();
        match job {
            Some(Job::Add(s)) => peers.push(s),
            Some(Job::Datagram(i, from, mut d)) => {
                let s = &peers[i];
                let mut g = s.core.lock().unwrap_or_else(PoisonError::into_inner);
                let now = clock.now();
                if g.tunnel
                    .decapsulate(now, from, &mut d, &mut packets)
                    .is_err()
                {
                    Counters::add(&counters.refused, 1);
                }
                note_established(s, &g, now);
                send_and_build(s, g, clock, &mut out, counters);
            }
            Some(Job::Initiations(i)) => build_initiations(&peers[i], clock, &mut out, counters),
            None => {}
        }
        if Instant::now() >= next_timers {
            let now = clock.now();
            for s in peers.iter().filter(|s| due(s, now)) {
                let mut g = s.core.lock().unwrap_or_else(PoisonError::into_inner);
                g.tunnel.handle_timeout(now);
                send_and_build(s, g, clock, &mut out, counters);
            }
            next_timers = Instant::now() + WORKER_TIMERS;
        }
        let us = t0.elapsed().as_micros() as u64;
        if us > 0 {
            let ph = phase_now.load(Ordering::Relaxed) as usize;
            let mut b = busy_us.lock().unwrap_or_else(PoisonError::into_inner);
            if b.len() <= ph {
                b.resize(ph + 1, 0);
            }
            b[ph] += us;
        }
    }
}

/// The simulated peers and their loop.
#[derive(Debug)]
pub struct Driver {
    clock: Clock,
    epoll: OwnedFd,
    peers: Vec<SimPeer>,
    wire: WireKind,
    hub: SocketAddr,
    hub_public: [u8; 32],
    hub_inner: Ipv4Addr,
    buf: Vec<u8>,
    out: Vec<u8>,
    packets: Vec<Range<usize>>,
    pub phases: Vec<PhaseEcho>,
    counters: Arc<Counters>,
    seed: u32,
    /// The driven peers' REKEY_AFTER_TIME, when shortened for a rekey storm (the lab's own
    /// cores; the hub runs unchanged).
    rekey_after: Option<Duration>,
    /// Datagrams read and stamped with their arrival, not yet handled: (peer, source, when
    /// read, bytes in `rx_data`).
    rx: Vec<(usize, SocketAddr, Time, Range<usize>)>,
    rx_data: Vec<u8>,
    /// Datagrams read whose peer the worker held: handled at the next turn, with the time
    /// they were read.
    rx_later: Vec<(usize, SocketAddr, Time, Vec<u8>)>,
    /// Echo requests whose peer the worker held: (peer, phase, sequence, time due), sent at
    /// the next turn and timed from when they were due.
    tx_later: Vec<(usize, usize, u32, u64)>,
    /// The peer the timers' next slice starts at (`None`: no pass under way).
    timer_cursor: Option<usize>,
    /// The handshake worker (`None`: the loop does the handshake work itself).
    worker: Option<Worker>,
}

/// Longest run of the generator's timers before it reads its sockets again: a rekey storm
/// makes 1,000 initiations (public-key work) in one pass, and an echo reply that waited behind
/// all of them would time the generator, not the hub.
const TIMER_SLICE: Duration = Duration::from_micros(200);

/// Which peers send echoes, how often, and into which phase they count.
#[derive(Debug, Clone)]
pub struct EchoPlan {
    pub peers: Vec<usize>,
    /// Requests per second per peer.
    pub rate: f64,
    pub phase: usize,
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |e| Error::bench_by(what, e)
}

impl Driver {
    /// A driver whose loop does its peers' handshake work itself (`worker` false: a thread of
    /// its own already, as the storm's), or hands it to a worker thread at nice +10 (true).
    pub fn new(
        wire: WireKind,
        hub: SocketAddr,
        hub_public: [u8; 32],
        hub_inner: Ipv4Addr,
        seed: u32,
        worker: bool,
    ) -> Result<Self> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)
            .map_err(|e| Error::bench_by("epoll_create", std::io::Error::from(e)))?;
        let clock = Clock::new();
        let counters = Arc::new(Counters::default());
        let worker = if worker {
            Some(Worker::start(clock, counters.clone())?)
        } else {
            None
        };
        Ok(Driver {
            clock,
            epoll,
            peers: Vec::new(),
            wire,
            hub,
            hub_public,
            hub_inner,
            buf: vec![0; BUF],
            out: vec![0; BUF],
            packets: Vec::new(),
            phases: Vec::new(),
            counters,
            seed,
            rekey_after: None,
            rx: Vec::new(),
            rx_data: Vec::new(),
            rx_later: Vec::new(),
            tx_later: Vec::new(),
            timer_cursor: None,
            worker,
        })
    }

    /// The generator's counters so far.
    pub fn counters(&self) -> GenCounters {
        self.counters.get()
    }

    /// Microseconds the handshake worker worked during phase `phase` (0 without a worker).
    pub fn worker_us(&self, phase: usize) -> u64 {
        self.worker.as_ref().map_or(0, |w| {
            w.busy_us
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(phase)
                .copied()
                .unwrap_or(0)
        })
    }

    /// Fills in each phase's [`PhaseEcho::worker_us`].
    pub fn finish_phases(&mut self) {
        let w: Vec<u64> = (0..self.phases.len()).map(|k| self.worker_us(k)).collect();
        for (ph, us) in self.phases.iter_mut().zip(w) {
            ph.worker_us = us;
        }
    }

    /// Peers added from now on rekey after `after` rather than WireGuard's 120 s: as
    /// initiators they start the rekey (on both wires only the initiator rekeys by time), so
    /// peers whose sessions were made together all rekey together.
    pub fn set_rekey_after(&mut self, after: Duration) {
        self.rekey_after = Some(after);
    }

    /// A new phase's counters; its number.
    pub fn phase(&mut self) -> usize {
        self.phases.push(PhaseEcho::default());
        let n = self.phases.len() - 1;
        if let Some(w) = &self.worker {
            w.phase_now.store(n as u64, Ordering::Relaxed);
        }
        n
    }

    fn peer_config(&self) -> Result<TunnelPeerConfig> {
        let hub_net: IpNet = format!("{}/32", self.hub_inner)
            .parse()
            .map_err(|e| Error::bench_by("the hub's tunnel address", e))?;
        Ok(TunnelPeerConfig {
            name: "hub".into(),
            public_key: self.hub_public,
            endpoint: Some(self.hub),
            allowed_ips: vec![hub_net],
            persistent_keepalive: None,
            preshared_key: None,
        })
    }

    /// Adds a peer with key `key` and tunnel address `inner`, on a socket of its own bound to
    /// `source` (port 0: any); its index.
    pub fn add_peer(&mut self, key: HostKey, inner: Ipv4Addr, source: Ipv4Addr) -> Result<usize> {
        let i = self.peers.len();
        let seed = self.seed.wrapping_add((i as u32).wrapping_mul(0x9E37_79B9));
        let mut cfg = self.wire.config(seed);
        if let Some(r) = self.rekey_after {
            cfg.limits.rekey_after_time = r;
        }
        let mut tunnel = Tunnel::new(key, cfg, vec![self.peer_config()?])?;
        // Initiations are only reserved by the core, and built by the worker (or by the loop,
        // timed, when there is none).
        tunnel.build_initiations_offpath(true);
        let sock = UdpSocket::bind((source, 0))
            .map_err(io_err(format!("bind a peer's socket to {source}")))?;
        sock.set_nonblocking(true)
            .map_err(io_err("make a peer's socket non-blocking"))?;
        epoll::add(
            &self.epoll,
            &sock,
            epoll::EventData::new_u64(i as u64),
            epoll::EventFlags::IN,
        )
        .map_err(|e| Error::bench_by("epoll_ctl", std::io::Error::from(e)))?;
        let shared = Arc::new(Shared {
            core: Mutex::new(Core { tunnel }),
            sock,
            timeout_ns: AtomicU64::new(NO_TIMEOUT),
            established: OnceLock::new(),
            handshakes: AtomicU64::new(0),
            initiations: AtomicU64::new(0),
        });
        if let Some(w) = &self.worker {
            w.send(Job::Add(shared.clone()));
        }
        self.peers.push(SimPeer {
            shared,
            inner,
            seq: 0,
            kicked: None,
            replies: 0,
        });
        Ok(i)
    }

    /// Initiations of `count` fresh keys the hub does not know, with valid mac1 (the hub's
    /// public key is all mac1 needs): what a flood that the hub cannot refuse on sight sends.
    pub fn foreign_initiations(&mut self, count: usize) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::with_capacity(count);
        let cfg = self.peer_config()?;
        for k in 0..count {
            let mut t = Tunnel::new(
                HostKey::generate()?,
                self.wire.config(self.seed ^ k as u32),
                vec![cfg.clone()],
            )?;
            let now = self.clock.now();
            let src = Ipv4Addr::new(10, 255, 255, 254);
            let n = echo_request(&mut self.buf, self.wire, src, self.hub_inner, 0, 0, 0, 0);
            let _ = t.encapsulate(now, &mut self.buf, n);
            t.end_batch(now);
            if let Some((_, len)) = t.poll_transmit(&mut self.out) {
                out.push(self.out[..len].to_vec());
            }
        }
        Ok(out)
    }

    /// Sends one echo request from peer `i` into phase `phase` (the first starts its handshake).
    pub fn send_echo(&mut self, i: usize, phase: usize) {
        let p = &mut self.peers[i];
        if p.kicked.is_none() {
            p.kicked = Some(Instant::now());
        }
        p.seq = p.seq.wrapping_add(1);
        let seq = p.seq;
        let t_ns = self.clock_ns();
        if !self.try_send_echo(i, phase, seq, t_ns) {
            self.tx_later.push((i, phase, seq, t_ns));
        }
    }

    /// Sends echo request `seq` of peer `i`, stamped `t_ns` (when it was due): false if the
    /// worker holds the peer (try again later).
    fn try_send_echo(&mut self, i: usize, phase: usize, seq: u32, t_ns: u64) -> bool {
        let shared = self.peers[i].shared.clone();
        let mut g = match shared.core.try_lock() {
            Ok(g) => g,
            Err(TryLockError::WouldBlock) => return false,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
        };
        let now = self.clock.now();
        let n = echo_request(
            &mut self.buf,
            self.wire,
            self.peers[i].inner,
            self.hub_inner,
            i as u32,
            seq,
            phase as u32,
            t_ns,
        );
        let r = g.tunnel.encapsulate(now, &mut self.buf, n);
        match r {
            Encap::Sealed { dest, len, .. } => {
                self.phases[phase].sent += 1;
                match shared.sock.send_to(&self.buf[..len], dest) {
                    Ok(_) => Counters::add(&self.counters.datagrams_out, 1),
                    Err(_) => Counters::add(&self.counters.send_errors, 1),
                }
            }
            // Waiting for a handshake, or on the piggyback queue: it leaves below.
            Encap::Queued => self.phases[phase].sent += 1,
            Encap::Dropped(_) => self.phases[phase].not_sent += 1,
        }
        g.tunnel.end_batch(now);
        self.after(i, &shared, g, now);
        true
    }

    /// After the loop used peer `i`'s core: what it has to send leaves, and the initiations it
    /// reserved go to the worker, or are built here (timed as the loop's handshake work).
    fn after(&mut self, i: usize, shared: &Shared, mut g: MutexGuard<'_, Core>, now: Time) {
        let more = g.tunnel.has_initiations();
        if more && self.worker.is_none() {
            let t0 = Instant::now();
            g.tunnel.finish_initiations(now);
            self.note_loop_handshake(t0);
        }
        flush(shared, &mut g, &mut self.out, &self.counters);
        drop(g);
        if more && let Some(w) = &self.worker {
            w.send(Job::Initiations(i));
        }
    }

    /// Counts the loop's own handshake work since `t0` into the newest phase.
    fn note_loop_handshake(&mut self, t0: Instant) {
        let us = t0.elapsed().as_micros() as u64;
        if let Some(ph) = self.phases.last_mut() {
            ph.loop_handshake_us += us;
            ph.loop_handshake_max_us = ph.loop_handshake_max_us.max(us);
        }
    }

    fn clock_ns(&self) -> u64 {
        self.clock.now().as_nanos()
    }

    /// Whether peer `i` has a session it can send on.
    pub fn established(&self, i: usize) -> bool {
        self.peers[i].shared.established.get().is_some()
    }

    /// When peer `i` first sent, and when its first session came up.
    pub fn handshake_times(&self, i: usize) -> (Option<Instant>, Option<Instant>) {
        (
            self.peers[i].kicked,
            self.peers[i].shared.established.get().copied(),
        )
    }

    /// Echo replies peer `i` received.
    pub fn replies(&self, i: usize) -> u64 {
        self.peers[i].replies
    }

    /// Reads peer `i`'s handshake counters (as last read if the worker holds it now).
    fn peer_stats(&self, i: usize) -> &Shared {
        let s = &self.peers[i].shared;
        if let Ok(g) = s.core.try_lock()
            && let Some(st) = g.tunnel.peer_status(self.clock.now()).first()
        {
            s.handshakes
                .store(st.stats.handshakes_completed, Ordering::Relaxed);
            s.initiations
                .store(st.stats.handshakes_initiated, Ordering::Relaxed);
        }
        s
    }

    /// Initiations peer `i` sent (retries included).
    pub fn initiations(&self, i: usize) -> u64 {
        self.peer_stats(i).initiations.load(Ordering::Relaxed)
    }

    /// Handshakes peer `i` completed (as initiator or responder).
    pub fn handshakes(&self, i: usize) -> u64 {
        self.peer_stats(i).handshakes.load(Ordering::Relaxed)
    }

    /// Runs the loop until `until`, or until `done` says so (checked every few milliseconds),
    /// sending the echoes of `plan` (evenly spread: each peer `rate` a second).
    pub fn run(
        &mut self,
        until: Instant,
        plan: Option<&EchoPlan>,
        mut done: impl FnMut(&Driver) -> bool,
    ) -> Result<()> {
        // The echo loop stands for the established peers' own machines: woken by an echo, it
        // takes its core back from the generator's niced handshake work at once (RESULTS §54;
        // `SEALINK_TEST_GEN_NO_SLICE` turns that off, for the A/B).
        if std::env::var_os("SEALINK_TEST_GEN_NO_SLICE").is_none() {
            let _ = sealink_udp::sched::prefer_short_slice(sealink_udp::sched::DATA_PATH_SLICE);
        }
        let start = Instant::now();
        let mut sent_total: u64 = 0;
        let mut cursor = 0usize;
        let mut events: Vec<epoll::Event> = Vec::with_capacity(256);
        let mut next_check = Instant::now();
        let mut next_timers = Instant::now();
        loop {
            let t = Instant::now();
            if t >= until {
                return Ok(());
            }
            if t >= next_check {
                if done(self) {
                    return Ok(());
                }
                next_check = t + Duration::from_millis(5);
            }
            self.send_later();
            if let Some(plan) = plan.filter(|p| !p.peers.is_empty()) {
                let due = (t.duration_since(start).as_secs_f64()
                    * plan.rate
                    * plan.peers.len() as f64) as u64;
                while sent_total < due {
                    let i = plan.peers[cursor % plan.peers.len()];
                    cursor += 1;
                    sent_total += 1;
                    self.send_echo(i, plan.phase);
                }
            }
            // With a worker, the timers are its work.
            if self.worker.is_none()
                && (t >= next_timers || self.timer_cursor.is_some())
                && self.timers()
            {
                next_timers = t + Duration::from_millis(2);
            }
            events.clear();
            // A pass of the timers unfinished: only look at the sockets; work the worker held
            // up: look again soon.
            let wait_ns = if self.timer_cursor.is_some() {
                0
            } else if !self.rx_later.is_empty() || !self.tx_later.is_empty() {
                100_000
            } else {
                1_000_000
            };
            let wait = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: wait_ns,
            };
            match epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut events),
                Some(&wait),
            ) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(Error::bench_by("epoll_wait", std::io::Error::from(e))),
            }
            // Every ready socket is read (and each datagram stamped) before any is handled:
            // handshake responses cost public-key work, and an echo reply read after them
            // would be timed late by the generator's own work.
            for ev in &events {
                self.read(ev.data.u64() as usize);
            }
            self.handle_read(&mut events);
        }
    }

    /// Sends the echo requests the worker held up, if it has let go of their peers.
    fn send_later(&mut self) {
        if self.tx_later.is_empty() {
            return;
        }
        for (i, phase, seq, t_ns) in std::mem::take(&mut self.tx_later) {
            if !self.try_send_echo(i, phase, seq, t_ns) {
                self.tx_later.push((i, phase, seq, t_ns));
            }
        }
    }

    /// Runs the timers that are due, from where the last slice stopped, for at most
    /// [`TIMER_SLICE`]; whether the pass is complete.
    fn timers(&mut self) -> bool {
        let t0 = Instant::now();
        let now = self.clock.now();
        let mut i = self.timer_cursor.take().unwrap_or(0);
        while i < self.peers.len() {
            let shared = self.peers[i].shared.clone();
            if due(&shared, now) {
                let mut g = shared.core.lock().unwrap_or_else(PoisonError::into_inner);
                g.tunnel.handle_timeout(now);
                self.after(i, &shared, g, now);
            }
            i += 1;
            if t0.elapsed() >= TIMER_SLICE && i < self.peers.len() {
                self.timer_cursor = Some(i);
                return false;
            }
        }
        true
    }

    /// Reads everything waiting on peer `i`'s socket into `rx`, each datagram stamped.
    fn read(&mut self, i: usize) {
        while let Ok((n, from)) = self.peers[i].shared.sock.recv_from(&mut self.buf) {
            let at = self.rx_data.len();
            self.rx_data.extend_from_slice(&self.buf[..n]);
            self.rx.push((i, from, self.clock.now(), at..at + n));
        }
    }

    /// Handles the datagrams read: echo replies are timed from when they were read. Handshake
    /// messages go to the worker; without one, every [`TIMER_SLICE`] of handling (handshake
    /// responses cost public-key work) the ready sockets are read again, so that what arrives
    /// meanwhile is stamped on time too.
    fn handle_read(&mut self, events: &mut Vec<epoll::Event>) {
        for (i, from, at, d) in std::mem::take(&mut self.rx_later) {
            let k = self.rx_data.len();
            self.rx_data.extend_from_slice(&d);
            self.rx.push((i, from, at, k..k + d.len()));
        }
        let mut k = 0;
        let mut polled = Instant::now();
        while k < self.rx.len() {
            let (i, from, read_at, range) = self.rx[k].clone();
            k += 1;
            let shared = self.peers[i].shared.clone();
            let mut g = match shared.core.try_lock() {
                Ok(g) => g,
                Err(TryLockError::WouldBlock) => {
                    let d = self.rx_data[range].to_vec();
                    self.rx_later.push((i, from, read_at, d));
                    continue;
                }
                Err(TryLockError::Poisoned(e)) => e.into_inner(),
            };
            Counters::add(&self.counters.datagrams_in, 1);
            let handshake = g.tunnel.is_handshake(&self.rx_data[range.clone()]);
            if handshake && let Some(w) = &self.worker {
                drop(g);
                w.send(Job::Datagram(i, from, self.rx_data[range].to_vec()));
                continue;
            }
            let t0 = Instant::now();
            let now = self.clock.now();
            let dgram = &mut self.rx_data[range];
            let r = g.tunnel.decapsulate(now, from, dgram, &mut self.packets);
            match r {
                Ok(Decap::Data(_)) => {
                    let t_read = read_at.as_nanos();
                    for range in &self.packets {
                        if let Some((phase, t_sent)) = echo_reply(&dgram[range.clone()]) {
                            self.peers[i].replies += 1;
                            if let Some(ph) = self.phases.get_mut(phase) {
                                ph.received += 1;
                                let us = t_read.saturating_sub(t_sent) / 1000;
                                ph.rtt_us.push(us.min(u64::from(u32::MAX)) as u32);
                            }
                        }
                    }
                }
                Ok(Decap::Handshake(_)) => {}
                Err(_) => Counters::add(&self.counters.refused, 1),
            }
            note_established(&shared, &g, now);
            if handshake {
                self.note_loop_handshake(t0);
            }
            self.after(i, &shared, g, now);
            if polled.elapsed() >= TIMER_SLICE {
                self.read_ready(events);
                polled = Instant::now();
            }
        }
        self.rx.clear();
        self.rx_data.clear();
    }

    /// Reads the sockets that are ready now (no wait); `events` is scratch.
    fn read_ready(&mut self, events: &mut Vec<epoll::Event>) {
        events.clear();
        let zero = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if epoll::wait(
            &self.epoll,
            rustix::buffer::spare_capacity(&mut *events),
            Some(&zero),
        )
        .is_ok()
        {
            for ev in events.iter() {
                self.read(ev.data.u64() as usize);
            }
        }
    }
}

/// The internet checksum of `data` (RFC 1071).
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        sum += u32::from(w);
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// Writes an ICMP echo request from `src` to `dst` at the wire's headroom in `buf`; its length.
#[allow(clippy::too_many_arguments)]
fn echo_request(
    buf: &mut [u8],
    wire: WireKind,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    peer: u32,
    seq: u32,
    phase: u32,
    t_ns: u64,
) -> usize {
    let h = wire.config(0).headroom();
    let p = &mut buf[h..h + ECHO_LEN];
    p.fill(0);
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(ECHO_LEN as u16).to_be_bytes());
    p[6] = 0x40; // DF
    p[8] = 64;
    p[9] = 1; // ICMP
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let icmp = &mut p[20..];
    icmp[0] = 8;
    icmp[4..6].copy_from_slice(&(peer as u16).to_be_bytes());
    icmp[6..8].copy_from_slice(&(seq as u16).to_be_bytes());
    icmp[8..12].copy_from_slice(&MAGIC.to_be_bytes());
    icmp[12..16].copy_from_slice(&peer.to_be_bytes());
    icmp[16..20].copy_from_slice(&seq.to_be_bytes());
    icmp[20..24].copy_from_slice(&phase.to_be_bytes());
    icmp[24..32].copy_from_slice(&t_ns.to_be_bytes());
    let c = checksum(icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    ECHO_LEN
}

/// The phase and send time of an echo reply of ours.
fn echo_reply(pkt: &[u8]) -> Option<(usize, u64)> {
    if pkt.len() < ECHO_LEN || pkt[0] != 0x45 || pkt[9] != 1 {
        return None;
    }
    let icmp = &pkt[20..];
    if icmp[0] != 0 || icmp[8..12] != MAGIC.to_be_bytes() {
        return None;
    }
    let phase = u32::from_be_bytes(icmp[20..24].try_into().ok()?) as usize;
    let t = u64::from_be_bytes(icmp[24..32].try_into().ok()?);
    Some((phase, t))
}

/// Nice increment of the flood's thread.
const FLOOD_NICE: i32 = 10;
/// How often the flood's thread reads the cookie replies its sockets received.
const FLOOD_DRAIN: Duration = Duration::from_millis(100);

/// A flood of handshake initiations from spoofed sources, on a thread of its own.
#[derive(Debug)]
pub struct Flood {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    /// The flood thread's CPU time when it ended.
    cpu_ns: Arc<AtomicU64>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Flood {
    /// Sends `messages` in turn to `hub` at `pps` a second from `sources` sockets bound to
    /// addresses of `net` (a /16 routed to this namespace as local: AnyIP). Call from a thread
    /// in the generator's namespace (the flood thread inherits it).
    pub fn start(
        hub: SocketAddr,
        net: [u8; 2],
        sources: usize,
        pps: u64,
        messages: Vec<Vec<u8>>,
    ) -> Result<Flood> {
        let mut socks = Vec::with_capacity(sources);
        for k in 0..sources {
            let a = Ipv4Addr::new(net[0], net[1], (k >> 8) as u8, (k & 255) as u8 | 1);
            let s =
                UdpSocket::bind((a, 0)).map_err(io_err(format!("bind a flood socket to {a}")))?;
            s.set_nonblocking(true)
                .map_err(io_err("make a flood socket non-blocking"))?;
            socks.push(s);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let cpu_ns = Arc::new(AtomicU64::new(0));
        let (st, se, cpu) = (stop.clone(), sent.clone(), cpu_ns.clone());
        let handle = thread::Builder::new()
            .name("flood".into())
            .spawn(move || {
                // The flood stands for other hosts: its sends (and its draining of the hub's
                // cookie replies) yield the cores to the echo loop and the hub.
                super::lab::lower_this_thread(FLOOD_NICE);
                let start = Instant::now();
                let mut n: u64 = 0;
                let mut junk = [0u8; 512];
                let mut next_drain = start;
                while !st.load(Ordering::Relaxed) {
                    let due = (start.elapsed().as_secs_f64() * pps as f64) as u64;
                    while n < due {
                        let s = &socks[(n as usize) % socks.len()];
                        let m = &messages[(n as usize) % messages.len()];
                        let _ = s.send_to(m, hub);
                        n += 1;
                    }
                    // Drain the cookie replies that come back, so the buffers stay small: the
                    // hub answers each of the 1,024 sources about ten times a second, so a
                    // drain every FLOOD_DRAIN finds a few, where one every millisecond made
                    // 1,024 receive calls that found none.
                    if Instant::now() >= next_drain {
                        for s in &socks {
                            while s.recv_from(&mut junk).is_ok() {}
                        }
                        next_drain = Instant::now() + FLOOD_DRAIN;
                    }
                    se.store(n, Ordering::Relaxed);
                    thread::sleep(Duration::from_millis(1));
                }
                let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
                cpu.store(
                    (t.tv_sec as u64) * 1_000_000_000 + t.tv_nsec as u64,
                    Ordering::Relaxed,
                );
            })
            .map_err(io_err("start the flood thread"))?;
        Ok(Flood {
            stop,
            sent,
            cpu_ns,
            handle: Some(handle),
        })
    }

    /// Stops the flood; the datagrams it sent, and the CPU seconds its thread used.
    pub fn stop(mut self) -> (u64, f64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        (
            self.sent.load(Ordering::Relaxed),
            self.cpu_ns.load(Ordering::Relaxed) as f64 / 1e9,
        )
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_echo_request_is_a_valid_ipv4_icmp_packet_and_its_reply_parses() {
        let mut buf = vec![0u8; 256];
        let n = echo_request(
            &mut buf,
            WireKind::WireGuard,
            Ipv4Addr::new(10, 128, 0, 2),
            Ipv4Addr::new(10, 128, 0, 1),
            7,
            9,
            3,
            12345,
        );
        let h = WireKind::WireGuard.config(0).headroom();
        let pkt = &mut buf[h..h + n];
        assert_eq!(checksum(&pkt[..20]), 0, "IP header checksum");
        assert_eq!(checksum(&pkt[20..]), 0, "ICMP checksum");
        // The kernel's reply: addresses swapped, type 0, payload as sent.
        pkt[20] = 0;
        assert_eq!(echo_reply(pkt), Some((3, 12345)));
    }

    #[test]
    fn quantiles_and_loss() {
        let e = PhaseEcho {
            sent: 10,
            received: 9,
            not_sent: 0,
            rtt_us: (1..=100).collect(),
            ..PhaseEcho::default()
        };
        assert!((e.loss() - 0.1).abs() < 1e-9);
        assert_eq!(e.rtt_ms(0.99), 0.099);
        assert!(PhaseEcho::default().rtt_ms(0.5).is_nan());
    }
}
