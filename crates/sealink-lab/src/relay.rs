//! `sealink-lab relay`: a UDP relay that injects faults, to test how a tunnel or datagram channel copes
//! with a hostile path. Clients send to `--listen`; each client source address gets its own
//! upstream socket connected to `--to`, so replies find their way back to the client they belong
//! to. Both directions independently lose, hold back (reorder), duplicate, corrupt (one flipped
//! bit) and replay (a copy as forwarded, re-sent `--replay-delay-ms` later) datagrams with the given
//! probabilities, from a seeded RNG. Blocking std sockets: one thread for the client-to-server
//! direction, one per client for replies.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Longest a reordered datagram is held when no later datagram comes to release it, so the end
/// of a flow is never stalled for good.
const MAX_HOLD: Duration = Duration::from_millis(25);
/// Bound on captured datagrams waiting to be replayed (per direction and client), to keep memory
/// bounded under heavy traffic.
const MAX_REPLAY_QUEUE: usize = 4096;
/// Clients (source addresses) tracked at once; datagrams from further ones are refused.
const MAX_CLIENTS: usize = 1024;
/// Largest datagram received (the UDP maximum).
const BUF_LEN: usize = 65_536;
/// Longest a receive blocks when nothing is scheduled.
const IDLE_POLL: Duration = Duration::from_millis(50);

/// Why the relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("cannot resolve {addr}")]
    Resolve {
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("{0} has no address")]
    NoAddress(String),
    #[error("cannot bind {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("cannot install a handler for SIGINT/SIGTERM")]
    Signal(#[source] io::Error),
    #[error("cannot start the relay thread")]
    Spawn(#[source] io::Error),
}

/// Probabilities and timings of the injected faults.
#[derive(Debug, Clone)]
pub struct FaultConfig {
    pub loss: f64,
    pub reorder: f64,
    pub duplicate: f64,
    pub corrupt: f64,
    pub replay: f64,
    /// A reordered datagram is released after 1..=reorder_depth later datagrams.
    pub reorder_depth: u32,
    /// How long after capture a replayed copy is sent.
    pub replay_delay: Duration,
    /// Bandwidth limit per direction and client in bytes per second (None: unlimited).
    pub rate_limit: Option<f64>,
}

/// What `sealink-lab relay` was asked to do.
#[derive(Debug)]
pub struct Params {
    pub listen: String,
    pub to: String,
    pub faults: FaultConfig,
    pub seed: Option<u64>,
    pub stats_every: Option<Duration>,
}

/// Probability in [0, 1] (clap value parser).
pub fn parse_probability(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a probability in [0, 1]"))
    }
}

/// Bandwidth in Mbit/s (clap value parser).
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() && v > 0.0 && v <= 1e6 {
        Ok(v)
    } else {
        Err(format!("{v} is not a rate within (0, 1000000] Mbit/s"))
    }
}

/// Counters of one direction, shared between the threads that serve it.
#[derive(Debug, Default)]
struct DirStats {
    received: AtomicU64,
    sent: AtomicU64,
    lost: AtomicU64,
    reordered: AtomicU64,
    duplicated: AtomicU64,
    corrupted: AtomicU64,
    replayed: AtomicU64,
    rate_delayed: AtomicU64,
    errors: AtomicU64,
}

impl DirStats {
    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    fn line(&self, name: &str) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "relay {name}: received={} sent={} lost={} reordered={} duplicated={} corrupted={} replayed={} rate_delayed={} errors={}",
            g(&self.received),
            g(&self.sent),
            g(&self.lost),
            g(&self.reordered),
            g(&self.duplicated),
            g(&self.corrupted),
            g(&self.replayed),
            g(&self.rate_delayed),
            g(&self.errors),
        )
    }
}

#[derive(Debug, Default)]
struct Stats {
    to_server: DirStats,
    to_client: DirStats,
    clients: AtomicU64,
    refused: AtomicU64,
}

impl Stats {
    fn print(&self) {
        let mut out = io::stdout().lock();
        // Stats are best effort: a closed stdout must not kill the relay.
        let _ = writeln!(out, "{}", self.to_server.line("client->server"));
        let _ = writeln!(out, "{}", self.to_client.line("server->client"));
        let _ = writeln!(
            out,
            "relay clients: seen={} refused={}",
            self.clients.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed)
        );
        let _ = out.flush();
    }
}

/// Where a datagram goes: a connected upstream socket, or the listening socket and a client.
#[derive(Debug, Clone)]
struct Target {
    sock: Arc<UdpSocket>,
    addr: Option<SocketAddr>,
}

impl Target {
    fn send(&self, data: &[u8]) -> io::Result<usize> {
        match self.addr {
            Some(a) => self.sock.send_to(data, a),
            None => self.sock.send(data),
        }
    }
}

#[derive(Debug)]
struct Held {
    /// Fresh datagrams still to pass before this one is released.
    after: u32,
    deadline: Instant,
    target: Target,
    data: Vec<u8>,
    copies: u8,
}

/// Token bucket: blocks the sending thread until the datagram fits the rate.
#[derive(Debug)]
struct Shaper {
    bytes_per_sec: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Shaper {
    fn new(bytes_per_sec: f64) -> Self {
        // About 2 ms worth of traffic, but at least a few full-size datagrams.
        let burst = (bytes_per_sec * 0.002).max(4.0 * 1500.0);
        Shaper {
            bytes_per_sec,
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    /// Waits until `len` bytes may go; returns whether it had to wait.
    fn wait(&mut self, len: usize) -> bool {
        let now = Instant::now();
        let dt = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.bytes_per_sec).min(self.burst);
        self.tokens -= len as f64;
        if self.tokens >= 0.0 {
            return false;
        }
        thread::sleep(Duration::from_secs_f64(-self.tokens / self.bytes_per_sec));
        true
    }
}

/// Fault injection for one direction (of one client, for replies).
#[derive(Debug)]
struct Faults {
    cfg: FaultConfig,
    rng: StdRng,
    held: Vec<Held>,
    replays: VecDeque<(Instant, Target, Vec<u8>)>,
    shaper: Option<Shaper>,
    stats: Arc<Stats>,
    to_server: bool,
}

impl Faults {
    fn new(cfg: FaultConfig, seed: u64, stats: Arc<Stats>, to_server: bool) -> Self {
        let shaper = cfg.rate_limit.map(Shaper::new);
        Faults {
            cfg,
            rng: StdRng::seed_from_u64(seed),
            held: Vec::new(),
            replays: VecDeque::new(),
            shaper,
            stats,
            to_server,
        }
    }

    fn dir(&self) -> &DirStats {
        if self.to_server {
            &self.stats.to_server
        } else {
            &self.stats.to_client
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        // random() is in [0, 1), so p = 1 always hits and p = 0 never does.
        p > 0.0 && self.rng.random::<f64>() < p
    }

    fn emit(&mut self, target: &Target, data: &[u8], copies: u8) {
        for _ in 0..copies {
            if let Some(s) = self.shaper.as_mut()
                && s.wait(data.len())
            {
                DirStats::bump(&self.dir().rate_delayed);
            }
            match target.send(data) {
                Ok(_) => DirStats::bump(&self.dir().sent),
                Err(_) => DirStats::bump(&self.dir().errors),
            }
        }
    }

    /// One datagram arrived for `target`.
    fn on_datagram(&mut self, now: Instant, target: &Target, data: &[u8]) {
        DirStats::bump(&self.dir().received);
        if self.chance(self.cfg.loss) {
            DirStats::bump(&self.dir().lost);
            return;
        }
        let mut buf = data.to_vec();
        if !buf.is_empty() && self.chance(self.cfg.corrupt) {
            let bit = self.rng.random_range(0..buf.len() * 8);
            buf[bit / 8] ^= 1 << (bit % 8);
            DirStats::bump(&self.dir().corrupted);
        }
        if self.chance(self.cfg.replay) && self.replays.len() < MAX_REPLAY_QUEUE {
            // An eavesdropper's copy of the datagram as it goes out, sent again later. Copying
            // after corruption keeps the accounting exact: only datagrams the relay forwarded
            // unchanged, once each, may ever be accepted.
            self.replays
                .push_back((now + self.cfg.replay_delay, target.clone(), buf.clone()));
        }
        let copies = if self.chance(self.cfg.duplicate) {
            DirStats::bump(&self.dir().duplicated);
            2
        } else {
            1
        };
        if self.chance(self.cfg.reorder) {
            DirStats::bump(&self.dir().reordered);
            let after = self.rng.random_range(1..=self.cfg.reorder_depth.max(1));
            self.held.push(Held {
                after,
                deadline: now + MAX_HOLD,
                target: target.clone(),
                data: buf,
                copies,
            });
            return;
        }
        self.emit(target, &buf, copies);
        // Datagrams held back go out once enough later ones have overtaken them.
        let mut i = 0;
        while i < self.held.len() {
            self.held[i].after -= 1;
            if self.held[i].after == 0 {
                let h = self.held.swap_remove(i);
                self.emit(&h.target, &h.data, h.copies);
            } else {
                i += 1;
            }
        }
    }

    /// Sends what is due: held datagrams past their deadline and replays.
    fn on_tick(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.held.len() {
            if self.held[i].deadline <= now {
                let h = self.held.swap_remove(i);
                self.emit(&h.target, &h.data, h.copies);
            } else {
                i += 1;
            }
        }
        while self.replays.front().is_some_and(|(t, _, _)| *t <= now) {
            let Some((_, target, data)) = self.replays.pop_front() else {
                break;
            };
            DirStats::bump(&self.dir().replayed);
            self.emit(&target, &data, 1);
        }
    }

    /// How long the next receive may block before something is due.
    fn wait_time(&self, now: Instant) -> Duration {
        let next = self
            .held
            .iter()
            .map(|h| h.deadline)
            .chain(self.replays.front().map(|(t, _, _)| *t))
            .min();
        match next {
            Some(t) => t
                .saturating_duration_since(now)
                .clamp(Duration::from_millis(1), IDLE_POLL),
            None => IDLE_POLL,
        }
    }
}

fn resolve(s: &str) -> Result<SocketAddr, RelayError> {
    s.to_socket_addrs()
        .map_err(|source| RelayError::Resolve {
            addr: s.to_owned(),
            source,
        })?
        .next()
        .ok_or_else(|| RelayError::NoAddress(s.to_owned()))
}

fn recv_timed(
    sock: &UdpSocket,
    buf: &mut [u8],
    wait: Duration,
    connected: bool,
) -> Option<(usize, Option<SocketAddr>)> {
    // Errors (timeouts, ICMP-reported refusals on a connected socket) are not fatal: the caller
    // just runs its timers and tries again.
    sock.set_read_timeout(Some(wait)).ok()?;
    if connected {
        sock.recv(buf).ok().map(|n| (n, None))
    } else {
        sock.recv_from(buf).ok().map(|(n, a)| (n, Some(a)))
    }
}

fn client_seed(seed: u64, index: u64) -> u64 {
    seed ^ (index + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Replies from the server to one client.
fn serve_replies(up: Arc<UdpSocket>, listen: Arc<UdpSocket>, client: SocketAddr, mut f: Faults) {
    let target = Target {
        sock: listen,
        addr: Some(client),
    };
    let mut buf = vec![0u8; BUF_LEN];
    loop {
        let wait = f.wait_time(Instant::now());
        if let Some((n, _)) = recv_timed(&up, &mut buf, wait, true) {
            f.on_datagram(Instant::now(), &target, &buf[..n]);
        }
        f.on_tick(Instant::now());
    }
}

/// Datagrams from every client to the server; starts a reply thread per new client.
fn serve_clients(
    listen: Arc<UdpSocket>,
    to: SocketAddr,
    cfg: FaultConfig,
    seed: u64,
    stats: Arc<Stats>,
) {
    let mut clients: HashMap<SocketAddr, Target> = HashMap::new();
    let mut f = Faults::new(cfg.clone(), seed, Arc::clone(&stats), true);
    let mut buf = vec![0u8; BUF_LEN];
    loop {
        let wait = f.wait_time(Instant::now());
        if let Some((n, Some(src))) = recv_timed(&listen, &mut buf, wait, false) {
            let target = match clients.get(&src) {
                Some(t) => Some(t.clone()),
                None if clients.len() >= MAX_CLIENTS => {
                    DirStats::bump(&stats.refused);
                    None
                }
                None => match new_client(&listen, src, to, &cfg, seed, &stats, clients.len()) {
                    Ok(t) => {
                        clients.insert(src, t.clone());
                        Some(t)
                    }
                    Err(e) => {
                        tracing::warn!("relay: cannot serve client {src}: {e}");
                        DirStats::bump(&stats.refused);
                        None
                    }
                },
            };
            if let Some(t) = target {
                f.on_datagram(Instant::now(), &t, &buf[..n]);
            }
        }
        f.on_tick(Instant::now());
    }
}

fn new_client(
    listen: &Arc<UdpSocket>,
    client: SocketAddr,
    to: SocketAddr,
    cfg: &FaultConfig,
    seed: u64,
    stats: &Arc<Stats>,
    index: usize,
) -> io::Result<Target> {
    let any: SocketAddr = if to.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let up = UdpSocket::bind(any)?;
    up.connect(to)?;
    let up = Arc::new(up);
    let f = Faults::new(
        cfg.clone(),
        client_seed(seed, index as u64),
        Arc::clone(stats),
        false,
    );
    let (u, l) = (Arc::clone(&up), Arc::clone(listen));
    thread::Builder::new()
        .name(format!("relay-{client}"))
        .spawn(move || serve_replies(u, l, client, f))?;
    DirStats::bump(&stats.clients);
    tracing::info!("relay: new client {client} via {}", up.local_addr()?);
    Ok(Target {
        sock: up,
        addr: None,
    })
}

/// Runs the relay until SIGINT or SIGTERM, then prints its counters on stdout.
pub fn run(p: Params) -> Result<(), RelayError> {
    let listen_addr = resolve(&p.listen)?;
    let to = resolve(&p.to)?;
    let listen = UdpSocket::bind(listen_addr).map_err(|source| RelayError::Bind {
        addr: listen_addr,
        source,
    })?;
    let bound = listen.local_addr().map_err(|source| RelayError::Bind {
        addr: listen_addr,
        source,
    })?;
    let seed = p.seed.unwrap_or_else(rand::random);

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(RelayError::Signal)?;
    }

    let stats = Arc::new(Stats::default());
    let listen = Arc::new(listen);
    {
        let (l, s, cfg) = (Arc::clone(&listen), Arc::clone(&stats), p.faults.clone());
        thread::Builder::new()
            .name("relay-clients".into())
            .spawn(move || serve_clients(l, to, cfg, seed, s))
            .map_err(RelayError::Spawn)?;
    }
    let c = &p.faults;
    eprintln!(
        "relay: listening on {bound}, relaying to {to} (seed {seed}; loss {} reorder {} duplicate {} corrupt {} replay {})",
        c.loss, c.reorder, c.duplicate, c.corrupt, c.replay
    );

    let mut next_stats = p.stats_every.map(|d| Instant::now() + d);
    while !stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(20));
        if let (Some(t), Some(every)) = (next_stats, p.stats_every)
            && Instant::now() >= t
        {
            stats.print();
            next_stats = Some(t + every);
        }
    }
    // The relay threads die with the process; only the counters matter now.
    stats.print();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> FaultConfig {
        FaultConfig {
            loss: 0.0,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            replay: 0.0,
            reorder_depth: 3,
            replay_delay: Duration::from_millis(0),
            rate_limit: None,
        }
    }

    fn pair() -> (UdpSocket, Target) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        (
            rx,
            Target {
                sock: Arc::new(tx),
                addr: None,
            },
        )
    }

    fn recv(rx: &UdpSocket) -> Vec<u8> {
        let mut b = [0u8; 2048];
        let n = rx.recv(&mut b).unwrap();
        b[..n].to_vec()
    }

    #[test]
    fn probabilities_parse() {
        assert_eq!(parse_probability("1"), Ok(1.0));
        assert_eq!(parse_probability("0"), Ok(0.0));
        assert!(parse_probability("1.01").is_err());
        assert!(parse_probability("-0.1").is_err());
        assert!(parse_probability("nan").is_err());
        assert!(parse_rate("0").is_err());
        assert_eq!(parse_rate("100"), Ok(100.0));
    }

    #[test]
    fn reordered_datagram_comes_after_the_next_ones() {
        let (rx, t) = pair();
        let stats = Arc::new(Stats::default());
        let mut f = Faults::new(
            FaultConfig {
                reorder_depth: 1,
                ..cfg()
            },
            1,
            stats,
            true,
        );
        let now = Instant::now();
        f.cfg.reorder = 1.0;
        f.on_datagram(now, &t, b"first");
        f.cfg.reorder = 0.0;
        f.on_datagram(now, &t, b"second");
        assert_eq!(recv(&rx), b"second");
        assert_eq!(recv(&rx), b"first");
        assert_eq!(f.stats.to_server.reordered.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn held_datagram_is_released_by_its_deadline() {
        let (rx, t) = pair();
        let mut f = Faults::new(
            FaultConfig {
                reorder: 1.0,
                ..cfg()
            },
            2,
            Arc::default(),
            true,
        );
        let now = Instant::now();
        f.on_datagram(now, &t, b"alone");
        assert!(f.wait_time(now) <= MAX_HOLD);
        f.on_tick(now + MAX_HOLD);
        assert_eq!(recv(&rx), b"alone");
    }

    #[test]
    fn replay_waits_for_its_delay() {
        let (rx, t) = pair();
        let delay = Duration::from_secs(3);
        let mut f = Faults::new(
            FaultConfig {
                replay: 1.0,
                replay_delay: delay,
                ..cfg()
            },
            3,
            Arc::default(),
            true,
        );
        let now = Instant::now();
        f.on_datagram(now, &t, b"x");
        assert_eq!(recv(&rx), b"x");
        f.on_tick(now + delay - Duration::from_millis(1));
        assert_eq!(f.replays.len(), 1);
        f.on_tick(now + delay);
        assert_eq!(recv(&rx), b"x");
        assert!(f.replays.is_empty());
    }

    #[test]
    fn shaper_limits_the_rate() {
        // 8 Mbit/s = 1 MB/s: 50 datagrams of 1000 bytes past the 6000-byte burst take ~44 ms.
        let mut s = Shaper::new(1e6);
        let t0 = Instant::now();
        for _ in 0..50 {
            s.wait(1000);
        }
        assert!(
            t0.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t0.elapsed()
        );
    }
}
