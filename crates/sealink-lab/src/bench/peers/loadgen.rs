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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

#[derive(Debug)]
struct SimPeer {
    tunnel: Tunnel,
    sock: UdpSocket,
    inner: Ipv4Addr,
    timeout: Option<Time>,
    seq: u32,
    kicked: Option<Instant>,
    established: Option<Instant>,
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
    pub counters: GenCounters,
    seed: u32,
    /// The driven peers' REKEY_AFTER_TIME, when shortened for a rekey storm (the lab's own
    /// cores; the hub runs unchanged).
    rekey_after: Option<Duration>,
    /// Datagrams read and stamped with their arrival, not yet handled: (peer, source, when
    /// read, bytes in `rx_data`).
    rx: Vec<(usize, SocketAddr, Time, Range<usize>)>,
    rx_data: Vec<u8>,
    /// The peer the timers' next slice starts at (`None`: no pass under way).
    timer_cursor: Option<usize>,
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
    pub fn new(
        wire: WireKind,
        hub: SocketAddr,
        hub_public: [u8; 32],
        hub_inner: Ipv4Addr,
        seed: u32,
    ) -> Result<Self> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)
            .map_err(|e| Error::bench_by("epoll_create", std::io::Error::from(e)))?;
        Ok(Driver {
            clock: Clock::new(),
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
            counters: GenCounters::default(),
            seed,
            rekey_after: None,
            rx: Vec::new(),
            rx_data: Vec::new(),
            timer_cursor: None,
        })
    }

    /// Peers added from now on rekey after `after` rather than WireGuard's 120 s: as
    /// initiators they start the rekey (on WireGuard's wire only the initiator rekeys by
    /// time), so peers whose sessions were made together all rekey together.
    pub fn set_rekey_after(&mut self, after: Duration) {
        self.rekey_after = Some(after);
    }

    /// A new phase's counters; its number.
    pub fn phase(&mut self) -> usize {
        self.phases.push(PhaseEcho::default());
        self.phases.len() - 1
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
        let tunnel = Tunnel::new(key, cfg, vec![self.peer_config()?])?;
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
        self.peers.push(SimPeer {
            tunnel,
            sock,
            inner,
            timeout: None,
            seq: 0,
            kicked: None,
            established: None,
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
        let now = self.clock.now();
        let p = &mut self.peers[i];
        if p.kicked.is_none() {
            p.kicked = Some(Instant::now());
        }
        p.seq = p.seq.wrapping_add(1);
        let t_ns = self.clock_ns();
        let p = &mut self.peers[i];
        let n = echo_request(
            &mut self.buf,
            self.wire,
            p.inner,
            self.hub_inner,
            i as u32,
            p.seq,
            phase as u32,
            t_ns,
        );
        let r = p.tunnel.encapsulate(now, &mut self.buf, n);
        match r {
            Encap::Sealed { dest, len, .. } => {
                self.phases[phase].sent += 1;
                match p.sock.send_to(&self.buf[..len], dest) {
                    Ok(_) => self.counters.datagrams_out += 1,
                    Err(_) => self.counters.send_errors += 1,
                }
            }
            // Waiting for a handshake, or on the piggyback queue: it leaves below.
            Encap::Queued => self.phases[phase].sent += 1,
            Encap::Dropped(_) => self.phases[phase].not_sent += 1,
        }
        p.tunnel.end_batch(now);
        self.flush(i, now);
    }

    fn clock_ns(&self) -> u64 {
        self.clock.now().as_nanos()
    }

    /// Sends what peer `i`'s core has to send and re-reads its next deadline.
    fn flush(&mut self, i: usize, now: Time) {
        let p = &mut self.peers[i];
        while let Some((dest, n)) = p.tunnel.poll_transmit(&mut self.out) {
            match p.sock.send_to(&self.out[..n], dest) {
                Ok(_) => self.counters.datagrams_out += 1,
                Err(_) => self.counters.send_errors += 1,
            }
        }
        let _ = now;
        p.timeout = p.tunnel.poll_timeout();
    }

    /// Whether peer `i` has a session it can send on.
    pub fn established(&self, i: usize) -> bool {
        self.peers[i].established.is_some()
    }

    /// When peer `i` first sent, and when its first session came up.
    pub fn handshake_times(&self, i: usize) -> (Option<Instant>, Option<Instant>) {
        (self.peers[i].kicked, self.peers[i].established)
    }

    /// Echo replies peer `i` received.
    pub fn replies(&self, i: usize) -> u64 {
        self.peers[i].replies
    }

    /// Initiations peer `i` sent (retries included).
    pub fn initiations(&self, i: usize) -> u64 {
        let now = self.clock.now();
        self.peers[i]
            .tunnel
            .peer_status(now)
            .first()
            .map_or(0, |s| s.stats.handshakes_initiated)
    }

    /// Handshakes peer `i` completed (as initiator or responder).
    pub fn handshakes(&self, i: usize) -> u64 {
        let now = self.clock.now();
        self.peers[i]
            .tunnel
            .peer_status(now)
            .first()
            .map_or(0, |s| s.stats.handshakes_completed)
    }

    /// Runs the loop until `until`, or until `done` says so (checked every few milliseconds),
    /// sending the echoes of `plan` (evenly spread: each peer `rate` a second).
    pub fn run(
        &mut self,
        until: Instant,
        plan: Option<&EchoPlan>,
        mut done: impl FnMut(&Driver) -> bool,
    ) -> Result<()> {
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
            if (t >= next_timers || self.timer_cursor.is_some()) && self.timers() {
                next_timers = t + Duration::from_millis(2);
            }
            events.clear();
            // A pass of the timers unfinished: only look at the sockets.
            let wait = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: if self.timer_cursor.is_some() {
                    0
                } else {
                    1_000_000
                },
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

    /// Runs the timers that are due, from where the last slice stopped, for at most
    /// [`TIMER_SLICE`]; whether the pass is complete.
    fn timers(&mut self) -> bool {
        let t0 = Instant::now();
        let now = self.clock.now();
        let mut i = self.timer_cursor.take().unwrap_or(0);
        while i < self.peers.len() {
            if self.peers[i].timeout.is_some_and(|t| t <= now) {
                self.peers[i].tunnel.handle_timeout(now);
                self.flush(i, now);
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
        while let Ok((n, from)) = self.peers[i].sock.recv_from(&mut self.buf) {
            let at = self.rx_data.len();
            self.rx_data.extend_from_slice(&self.buf[..n]);
            self.rx.push((i, from, self.clock.now(), at..at + n));
        }
    }

    /// Handles the datagrams read: echo replies are timed from when they were read. Every
    /// [`TIMER_SLICE`] of handling (handshake responses cost public-key work) the ready
    /// sockets are read again, so that what arrives meanwhile is stamped on time too.
    fn handle_read(&mut self, events: &mut Vec<epoll::Event>) {
        let mut k = 0;
        let mut polled = Instant::now();
        while k < self.rx.len() {
            let (i, from, read_at, range) = self.rx[k].clone();
            k += 1;
            self.counters.datagrams_in += 1;
            let now = self.clock.now();
            let dgram = &mut self.rx_data[range];
            let r = self.peers[i]
                .tunnel
                .decapsulate(now, from, dgram, &mut self.packets);
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
                Err(_) => self.counters.refused += 1,
            }
            let p = &mut self.peers[i];
            if p.established.is_none()
                && p.tunnel
                    .peer_status(now)
                    .first()
                    .is_some_and(|s| s.session_up)
            {
                p.established = Some(Instant::now());
            }
            self.flush(i, now);
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

/// A flood of handshake initiations from spoofed sources, on a thread of its own.
#[derive(Debug)]
pub struct Flood {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
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
        let (st, se) = (stop.clone(), sent.clone());
        let handle = thread::Builder::new()
            .name("flood".into())
            .spawn(move || {
                let start = Instant::now();
                let mut n: u64 = 0;
                let mut junk = [0u8; 512];
                while !st.load(Ordering::Relaxed) {
                    let due = (start.elapsed().as_secs_f64() * pps as f64) as u64;
                    while n < due {
                        let s = &socks[(n as usize) % socks.len()];
                        let m = &messages[(n as usize) % messages.len()];
                        let _ = s.send_to(m, hub);
                        n += 1;
                    }
                    // Drain the cookie replies that come back, so the buffers stay small.
                    for s in &socks {
                        while s.recv_from(&mut junk).is_ok() {}
                    }
                    se.store(n, Ordering::Relaxed);
                    thread::sleep(Duration::from_millis(1));
                }
            })
            .map_err(io_err("start the flood thread"))?;
        Ok(Flood {
            stop,
            sent,
            handle: Some(handle),
        })
    }

    /// Stops the flood; the datagrams it sent.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.sent.load(Ordering::Relaxed)
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
        };
        assert!((e.loss() - 0.1).abs() < 1e-9);
        assert_eq!(e.rtt_ms(0.99), 0.099);
        assert!(PhaseEcho::default().rtt_ms(0.5).is_nan());
    }
}
