//! sealink tunnel mode: the I/O driver around the sans-IO core [`sealink_proto::tunnel`].
//!
//! Three threads share the core behind one mutex, held only for the core's bookkeeping and the
//! in-place seal/open of a batch, never across a system call:
//! - TUN reader: reads a batch of packets from the TUN device (with offloads: one TSO super-packet
//!   split into MTU-sized segments, placed at a fixed stride in one buffer so that each lands
//!   after [`HEADROOM`] bytes), seals each in place, and sends runs of full-size datagrams for
//!   one peer with one UDP GSO call straight from that buffer (no copy).
//! - UDP reader: receives a batch of datagrams (GRO), opens each in place, and writes the packets
//!   to the TUN device (with offloads: TCP segments coalesced back into one super-packet).
//! - timer: handshake retransmissions and piggyback deadlines (woken early when a small packet
//!   starts a queue).
//!
//! The calling thread serves the control socket `/run/sealink/NAME.sock` (`show`, `down`) and
//! watches the stop flag (set by signals); on stop, the threads are interrupted and joined and
//! the TUN device is closed, which removes the interface.

pub mod config;
pub mod control;
mod error;

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv6Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use sealink_proto::HostKey;
use sealink_proto::Time;
use sealink_proto::tunnel::{Encap, HEADROOM, TAILROOM, Tunnel};
use sealink_udp::{RecvBuffers, UdpIo, UdpOptions};
use tun_rs::{
    DeviceBuilder, GROTable, IDEAL_BATCH_SIZE, InterruptEvent, SyncDevice, VIRTIO_NET_HDR_LEN,
};

pub use config::Config;
pub use error::TunnelError;
use error::io;

/// Directory of the control sockets.
pub const RUN_DIR: &str = "/run/sealink";

/// Control socket of the tunnel `name`.
pub fn socket_path(name: &str) -> PathBuf {
    PathBuf::from(RUN_DIR).join(format!("{name}.sock"))
}

/// What is up, as reported to the caller once the interface is configured.
#[derive(Debug, Clone)]
pub struct UpInfo {
    pub name: String,
    pub listen: SocketAddr,
    /// TUN offloads (TSO/GRO with the virtio header) are in use.
    pub tun_offload: bool,
    /// Segments one UDP GSO send may carry (1: no GSO).
    pub udp_gso_segments: usize,
}

/// Monotonic time on a wall-clock origin: deadlines never jump, and handshake timestamps keep
/// increasing across restarts.
struct Clock {
    wall0: u64,
    start: Instant,
}

impl Clock {
    fn new() -> Self {
        let wall0 = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Clock {
            wall0,
            start: Instant::now(),
        }
    }
    fn now(&self) -> Time {
        Time::from_nanos(self.wall0) + self.start.elapsed()
    }
}

struct Shared {
    core: Mutex<Tunnel>,
    timer: Condvar,
    stop: std::sync::Arc<AtomicBool>,
    udp: UdpIo,
    dev: SyncDevice,
    intr: InterruptEvent,
    clock: Clock,
    offload: bool,
    /// Stride of packet slots: header room, MTU, tag room.
    stride: usize,
    info: UpInfo,
    public_key: [u8; 32],
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Tunnel> {
        // A panic while holding the lock is a bug in the core; keep serving with its state.
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    fn send(&self, dest: SocketAddr, data: &[u8], segment: usize) {
        if let Err(e) = self.udp.send(dest, data, segment) {
            tracing::debug!(%dest, error = %e, "udp send failed");
        }
    }
}

/// Pooled copies of datagrams the core queued (handshakes, piggyback flushes, staged packets).
struct Outbox {
    bufs: Vec<Vec<u8>>,
    items: Vec<(SocketAddr, usize)>,
    size: usize,
}

impl Outbox {
    fn new(size: usize) -> Self {
        Outbox {
            bufs: Vec::new(),
            items: Vec::new(),
            size,
        }
    }
    fn clear(&mut self) {
        self.items.clear();
    }
    /// Drains the core's transmit queue; returns how many were taken.
    fn drain(&mut self, core: &mut Tunnel) -> usize {
        let mut n = 0;
        while core.has_transmit() {
            let k = self.items.len();
            if k == self.bufs.len() {
                self.bufs.push(vec![0u8; self.size]);
            }
            match core.poll_transmit(&mut self.bufs[k]) {
                Some((d, len)) => {
                    self.items.push((d, len));
                    n += 1;
                }
                None => break,
            }
        }
        n
    }
    fn get(&self, k: usize) -> (SocketAddr, &[u8]) {
        let (d, len) = self.items[k];
        (d, &self.bufs[k][..len])
    }
}

/// Creates the TUN device, trying offloads first.
fn create_device(cfg: &Config) -> Result<(SyncDevice, bool), TunnelError> {
    let build = |offload: bool| {
        let mut b = DeviceBuilder::new()
            .name(&cfg.name)
            .mtu(cfg.core.mtu as u16)
            .offload(offload);
        b = match cfg.address {
            std::net::IpAddr::V4(a) => b.ipv4(a, cfg.prefix, None),
            std::net::IpAddr::V6(a) => b.ipv6(a, cfg.prefix),
        };
        b.build_sync()
    };
    match build(true) {
        Ok(d) => {
            let on = d.tcp_gso();
            Ok((d, on))
        }
        Err(e) => {
            tracing::info!(error = %e, "TUN offloads unavailable; using plain reads and writes");
            let d = build(false).map_err(io(format!("create TUN device {}", cfg.name)))?;
            Ok((d, false))
        }
    }
}

/// Runs the tunnel in the calling thread until `stop` is set (by a signal handler, or by
/// `sealink down` through the control socket). `on_up` is called once the interface is up and
/// configured. The interface is removed before this returns.
pub fn run(
    cfg: Config,
    host: HostKey,
    stop: std::sync::Arc<AtomicBool>,
    on_up: impl FnOnce(&UpInfo),
) -> Result<(), TunnelError> {
    let sock_path = socket_path(&cfg.name);
    std::fs::create_dir_all(RUN_DIR).map_err(io(format!("create {RUN_DIR}")))?;
    if UnixStream::connect(&sock_path).is_ok() {
        return Err(TunnelError::AlreadyRunning(cfg.name.clone()));
    }
    // Left behind by a process that did not exit cleanly.
    let _ = std::fs::remove_file(&sock_path);

    let mut core_cfg = cfg.core.clone();
    core_cfg.index_seed = rand_seed();
    let public_key = *host.public();
    let core = Tunnel::new(host, core_cfg, cfg.peers.clone())?;
    let (dev, offload) = create_device(&cfg)?;
    let listen = SocketAddr::from((Ipv6Addr::UNSPECIFIED, cfg.listen_port));
    let udp = UdpIo::bind(listen, &UdpOptions::default())
        .or_else(|_| {
            UdpIo::bind(
                SocketAddr::from(([0, 0, 0, 0], cfg.listen_port)),
                &UdpOptions::default(),
            )
        })
        .map_err(io(format!("bind UDP port {}", cfg.listen_port)))?;
    let listener = UnixListener::bind(&sock_path)
        .map_err(io(format!("bind control socket {}", sock_path.display())))?;
    // Only root may stop the tunnel or read its peers.
    std::fs::set_permissions(&sock_path, std::fs::Permissions::from_mode(0o600))
        .map_err(io("control socket permissions"))?;
    listener
        .set_nonblocking(true)
        .map_err(io("control socket"))?;
    let intr = InterruptEvent::new().map_err(io("interrupt event"))?;
    let info = UpInfo {
        name: cfg.name.clone(),
        listen: udp.local_addr().unwrap_or(listen),
        tun_offload: offload,
        udp_gso_segments: udp.max_gso_segments(),
    };
    let sh = Shared {
        core: Mutex::new(core),
        timer: Condvar::new(),
        stop,
        udp,
        dev,
        intr,
        clock: Clock::new(),
        offload,
        stride: HEADROOM + cfg.core.mtu + TAILROOM,
        info: info.clone(),
        public_key,
    };
    let mut waiters = Vec::new();
    std::thread::scope(|s| {
        let spawn = |name: &str, f: fn(&Shared)| {
            let sh = &sh;
            std::thread::Builder::new()
                .name(name.into())
                .spawn_scoped(s, move || f(sh))
        };
        let threads = [
            spawn("sl-tun", tun_loop),
            spawn("sl-udp", udp_loop),
            spawn("sl-timer", timer_loop),
        ];
        if threads.iter().all(|t| t.is_ok()) {
            on_up(&info);
            control_loop(&sh, &listener, &mut waiters);
        } else {
            tracing::error!("cannot start the tunnel threads");
        }
        sh.stop.store(true, Ordering::SeqCst);
        sh.udp.wake();
        let _ = sh.intr.trigger();
        sh.timer.notify_all();
    });
    // Closing the (non-persistent) TUN device removes the interface.
    drop(sh);
    // The kernel unregisters the device shortly after the close: wait, so that `down` and
    // exit mean the interface is gone.
    let sys = PathBuf::from("/sys/class/net").join(&info.name);
    let deadline = Instant::now() + Duration::from_secs(3);
    while sys.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(listener);
    let _ = std::fs::remove_file(&sock_path);
    for mut w in waiters {
        let _ = w.write_all(b"down\n");
    }
    Ok(())
}

fn rand_seed() -> u32 {
    // Receiver indexes need not be secret, only hard to guess in sequence: the clock suffices.
    let n = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() ^ (d.as_secs() as u32));
    n ^ std::process::id().rotate_left(16)
}

fn control_loop(sh: &Shared, listener: &UnixListener, waiters: &mut Vec<UnixStream>) {
    while !sh.stopping() {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Some(w) = serve(sh, stream) {
                    waiters.push(w);
                    sh.stop.store(true, Ordering::SeqCst);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                tracing::warn!(error = %e, "control socket accept failed");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Answers one control request; returns the stream of a `down` request, answered after teardown.
fn serve(sh: &Shared, stream: UnixStream) -> Option<UnixStream> {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut line = String::new();
    let mut r = BufReader::new(&stream);
    if r.read_line(&mut line).is_err() {
        return None;
    }
    let mut w = &stream;
    match line.trim() {
        "show" => {
            let text = {
                let core = sh.lock();
                let now = sh.clock.now();
                control::format_status(
                    &sh.info,
                    &sh.public_key,
                    now,
                    &core.peer_status(now),
                    &core.drops(),
                )
            };
            let _ = w.write_all(text.as_bytes());
            None
        }
        "down" => Some(stream),
        other => {
            let _ = writeln!(w, "error: unknown request {other:?}");
            None
        }
    }
}

/// A datagram to send from the TUN thread: a slot of the packet buffer, or an outbox copy.
#[derive(Clone, Copy)]
enum Item {
    Slot {
        i: usize,
        dest: SocketAddr,
        len: usize,
    },
    Out(usize),
}

fn tun_loop(sh: &Shared) {
    let stride = sh.stride;
    let batch = if sh.offload { IDEAL_BATCH_SIZE } else { 1 };
    let mut slots = vec![0u8; stride * batch];
    let mut original = vec![0u8; VIRTIO_NET_HDR_LEN + 65_535];
    let mut sizes = vec![0usize; batch];
    let mut items: Vec<Item> = Vec::with_capacity(batch * 2);
    let mut out = Outbox::new(stride);
    while !sh.stopping() {
        let n = {
            let mut bufs: Vec<&mut [u8]> = slots.chunks_mut(stride).collect();
            match sh.dev.recv_multiple_intr(
                &mut original,
                &mut bufs,
                &mut sizes,
                HEADROOM,
                &sh.intr,
            ) {
                Ok(n) => n,
                Err(_) if sh.stopping() => break,
                Err(e) => {
                    tracing::debug!(error = %e, "TUN read failed");
                    continue;
                }
            }
        };
        items.clear();
        out.clear();
        let mut queued = false;
        {
            let mut core = sh.lock();
            let now = sh.clock.now();
            for (i, &size) in sizes.iter().enumerate().take(n) {
                let slot = &mut slots[i * stride..(i + 1) * stride];
                let r = core.encapsulate(now, slot, size);
                // Datagrams the core queued (a piggyback flush) go before this packet.
                let first = out.items.len();
                let k = out.drain(&mut core);
                items.extend((first..first + k).map(Item::Out));
                match r {
                    Encap::Sealed { dest, len, .. } => items.push(Item::Slot { i, dest, len }),
                    Encap::Queued => queued = true,
                    Encap::Dropped(_) => {}
                }
            }
        }
        if queued {
            sh.timer.notify_one();
        }
        send_items(sh, &slots, &items, &out);
    }
}

/// Sends in order; consecutive full-stride slots to one destination leave in one GSO call.
fn send_items(sh: &Shared, slots: &[u8], items: &[Item], out: &Outbox) {
    let stride = sh.stride;
    let mut k = 0;
    while k < items.len() {
        match items[k] {
            Item::Out(o) => {
                let (d, b) = out.get(o);
                sh.send(d, b, b.len());
                k += 1;
            }
            Item::Slot { i, dest, len } => {
                let (mut last_i, mut last_len, mut j) = (i, len, k);
                while last_len == stride {
                    match items.get(j + 1) {
                        Some(&Item::Slot {
                            i: i2,
                            dest: d2,
                            len: l2,
                        }) if d2 == dest && i2 == last_i + 1 => {
                            j += 1;
                            last_i = i2;
                            last_len = l2;
                        }
                        _ => break,
                    }
                }
                let seg = if j > k { stride } else { len };
                sh.send(dest, &slots[i * stride..last_i * stride + last_len], seg);
                k = j + 1;
            }
        }
    }
}

fn udp_loop(sh: &Shared) {
    let off = if sh.offload { VIRTIO_NET_HDR_LEN } else { 0 };
    let mut rb = RecvBuffers::new(64);
    let mut ranges = Vec::new();
    let mut pkts: Vec<Vec<u8>> = Vec::new();
    let mut out = Outbox::new(sh.stride);
    let mut gro = GROTable::default();
    let _ = sh.udp.set_read_timeout(Some(Duration::from_millis(250)));
    while !sh.stopping() {
        let mut npk = 0;
        out.clear();
        // The lock is taken at the batch's first datagram and held until the batch is opened:
        // the callbacks run back to back after the receive system call returns.
        let mut held: Option<(MutexGuard<'_, Tunnel>, Time)> = None;
        let r = sh.udp.recv(&mut rb, |src, dgram| {
            let (core, now) = held.get_or_insert_with(|| (sh.lock(), sh.clock.now()));
            if core.decapsulate(*now, src, dgram, &mut ranges).is_ok() {
                for r in &ranges {
                    if npk == pkts.len() {
                        pkts.push(Vec::with_capacity(off + 65_535));
                    }
                    let b = &mut pkts[npk];
                    b.clear();
                    b.resize(off, 0);
                    b.extend_from_slice(&dgram[r.clone()]);
                    npk += 1;
                }
            }
            out.drain(core);
        });
        drop(held);
        if let Err(e) = r {
            tracing::debug!(error = %e, "UDP receive failed");
            continue;
        }
        if npk > 0 {
            if sh.offload {
                if let Err(e) = sh.dev.send_multiple(&mut gro, &mut pkts[..npk], off) {
                    tracing::debug!(error = %e, "TUN write failed");
                }
            } else {
                for p in &pkts[..npk] {
                    if let Err(e) = sh.dev.send(p) {
                        tracing::debug!(error = %e, "TUN write failed");
                    }
                }
            }
        }
        for k in 0..out.items.len() {
            let (d, b) = out.get(k);
            sh.send(d, b, b.len());
        }
    }
}

fn timer_loop(sh: &Shared) {
    let mut out = Outbox::new(sh.stride);
    let mut core = sh.lock();
    while !sh.stopping() {
        let now = sh.clock.now();
        core.handle_timeout(now);
        out.clear();
        if out.drain(&mut core) > 0 {
            drop(core);
            for k in 0..out.items.len() {
                let (d, b) = out.get(k);
                sh.send(d, b, b.len());
            }
            core = sh.lock();
            continue;
        }
        let wait = core
            .poll_timeout()
            .map_or(Duration::from_millis(250), |t| t.saturating_since(now))
            .min(Duration::from_millis(250));
        core = sh
            .timer
            .wait_timeout(core, wait)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}
