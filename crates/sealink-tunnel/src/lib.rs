//! sealink tunnel mode: the I/O driver around the sans-IO core [`sealink_proto::tunnel`].
//!
//! The data path is split the way the core splits each per-packet step: the serial half runs
//! under the core's one mutex, the cryptography (seal, open) runs with no lock held, and the
//! results leave in order ([`sealink_engine::Pipeline`]'s lanes).
//! - I/O threads (`sl-io-q`, `io_loop`), one per queue of a multi-queue TUN device and its
//!   `SO_REUSEPORT` socket: each reads a batch from whichever has packets.
//!   - From the TUN queue (with offloads, a TSO super-packet split into MTU-sized segments at a
//!     fixed stride, each after the wire's headroom bytes): reserve every packet under the lock
//!     (route, session, counter; small packets join the piggyback queue), seal every slot in
//!     place, send runs of full-size datagrams for one peer with one UDP GSO call straight from
//!     the batch buffer, and report the sends to the core (autocork).
//!   - From the UDP socket (GRO): reserve every datagram under the lock (header, index,
//!     session, replay check; handshakes are handled whole), open in place, finish them under
//!     the lock (replay accept, session confirmation, framing, source check) and write the
//!     packets to the TUN device straight from the receive buffers (with offloads, TCP segments
//!     coalesced back into one super-packet: the only copy).
//!
//!   The thread does all of it itself (run to completion: the batch stays in its core's
//!   cache, and nobody is woken), except the share of its batches that its [`Gauge`] hands to
//!   the engine's workers while the thread saturates its core and a core is idle (`handoff =
//!   "auto"`, issue 43). A handed-off batch is sealed or opened and released (sent, or written)
//!   on a worker, in order per lane with the ones kept.
//! - With `handoff = "always"` (every batch to the workers, the engine before issue 43) the
//!   shape is a TUN reader and a UDP reader per queue, and TUN writer threads (`tun_writers`,
//!   by default one per queue there): the release only plans the writes and hands each flow's
//!   to writer `hash(flow) % N`.
//! - timer: handshake retransmissions and piggyback deadlines.
//!
//! Batch buffers are owned by their reader and come back through the release, so the data
//! path allocates and copies nothing per packet. The calling thread serves the control socket `RUN_DIR/net-INODE/NAME.sock` (see
//! [`RunDir`]; `show`, `down`, `reload`, answered to root and the tunnel's own uid only) and
//! watches the stop flag (set by signals) and the reload flag (SIGHUP; see `reload.rs`); on stop, the threads are interrupted and joined and the TUN
//! device is closed, which removes the interface. Set-up ends by dropping every capability and
//! switching to the config's unprivileged `user` ([`privs`]).
//!
//! [`Gauge`]: sealink_engine::Gauge

pub mod config;
pub mod control;
mod datapath;
mod dns;
mod error;
pub mod helper;
pub mod helper_main;
pub mod hooks;
mod netconf;
pub mod policy;
mod privs;
mod reload;
pub mod route_rules;
mod rtnl;
pub mod rundir;
mod threads;
#[doc(hidden)]
pub mod tunread;
#[doc(hidden)]
pub mod tunwrite;
pub mod uapi;

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv6Addr, SocketAddr};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use sealink_engine::{Handoff, Pipeline};
use sealink_proto::Clock;
use sealink_proto::HostKey;
use sealink_proto::tunnel::{SealJob, TAILROOM, Tunnel, Wire};
use sealink_udp::{UdpIo, UdpOptions};
use tun_rs::{DeviceBuilder, InterruptEvent, SyncDevice};

pub use config::{Config, KeyFormat, wgquick};

/// The `tracing` target of lines meant for the person who started the tunnel as they are
/// (`[#] CMD` for each hook and what the hook printed, as wg-quick shows them): the `sealink`
/// binary prints them as plain lines unless -q, not in the log format.
pub const SAY_TARGET: &str = "sealink::say";
pub use error::TunnelError;
use error::io;
pub use reload::{Resolver, system_resolver};
pub use rundir::RunDir;

/// What is up, as reported to the caller once the interface is configured.
#[derive(Debug, Clone)]
pub struct UpInfo {
    pub name: String,
    pub listen: SocketAddr,
    /// TUN offloads (TSO/GRO with the virtio header) are in use.
    pub tun_offload: bool,
    /// Segments one UDP GSO send may carry (1: no GSO).
    pub udp_gso_segments: usize,
    /// TUN queues (multi-queue device) and UDP sockets (`SO_REUSEPORT`), one reader each.
    pub queues: usize,
    pub udp_sockets: usize,
    /// The protocol on the wire.
    pub wire: Wire,
    /// The AEAD suite of the data path (its library: `sealink_crypto::backend::chosen_backend`).
    pub suite: sealink_crypto::SuiteId,
    /// Crypto worker threads of the engine (0: sealed and opened inline on the readers).
    pub workers: usize,
    /// Threads writing received packets to the TUN device, a flow always to the same one (0:
    /// the receive path's release writes).
    pub tun_writers: usize,
    /// When the readers hand batches to the workers (`interface.handoff`).
    pub handoff: Handoff,
    /// Lanes are offered to peers ([`sealink_proto::tunnel::TunnelConfig::lanes`]), and the
    /// UDP sockets' group steers received datagrams by lane (`sealink_udp::steer`).
    pub lanes: bool,
    pub lane_steering: bool,
    /// The mark on the tunnel's own datagrams when it is a full tunnel (`policy.rs`), else
    /// `None`.
    pub fwmark: Option<u32>,
}

pub(crate) struct Shared {
    core: Mutex<Tunnel>,
    timer: Condvar,
    stop: std::sync::Arc<AtomicBool>,
    /// `SO_REUSEPORT` sockets on the listen port; socket 0 also sends the timer's datagrams.
    udp: Vec<UdpIo>,
    /// Queues of the (multi-queue) TUN device.
    devs: Vec<SyncDevice>,
    /// The TUN writer threads' queues (empty: the receive path's release writes).
    writers: Vec<std::sync::mpsc::Sender<datapath::WriterJob>>,
    intr: InterruptEvent,
    clock: Clock,
    offload: bool,
    /// Where a packet starts in its slot: the wire's data header (and sealink's length field).
    headroom: usize,
    /// Stride of packet slots: header room, MTU, tag room.
    stride: usize,
    info: UpInfo,
    public_key: [u8; 32],
    /// The uid allowed on the control socket besides root: ours.
    owner_uid: u32,
    /// Control connections refused by their peer credentials.
    control_refused: AtomicU64,
    /// Endpoint names to resolve again, to the resolver thread ([`reload::resolver_loop`]).
    resolve_tx: std::sync::mpsc::Sender<([u8; 32], String)>,
    /// Per-thread counters of the data path (`show`).
    threads: threads::Registry,
    /// WireGuard UAPI requests refused, by reason (`show`).
    uapi_refused: uapi::Refusals,
    /// IPv6 endpoint zones as the last UAPI `set` gave them (`get` prints them back).
    uapi_zones: uapi::Zones,
}

/// What [`run_with`] takes besides the config.
#[derive(Default, Clone)]
pub struct RunOptions {
    /// The file the config came from: `sealink reload` and SIGHUP read it again.
    pub config_path: Option<PathBuf>,
    /// Set by a SIGHUP handler: reload the config file.
    pub reload: Option<std::sync::Arc<AtomicBool>>,
    /// Resolves endpoint names again (default: [`system_resolver`]).
    pub resolver: Option<Resolver>,
    /// An executable that runs [`helper_main::main`] when given [`helper::SUBCOMMAND`] (the
    /// `sealink` binary: `/proc/self/exe`), for the root helpers that undo a full tunnel's
    /// rules and change routes on a reload. Without one, a full tunnel is refused and a
    /// reload cannot change routes.
    pub helper_exe: Option<PathBuf>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("config_path", &self.config_path)
            .field("reload", &self.reload)
            .field("resolver", &self.resolver.as_ref().map(|_| "custom"))
            .field("helper_exe", &self.helper_exe)
            .finish()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Tunnel> {
        // A panic while holding the lock is a bug in the core; keep serving with its state.
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    fn send(&self, sock: usize, dest: SocketAddr, data: &[u8], segment: usize) {
        let u = &self.udp[sock];
        match u.send(dest, data, segment) {
            Ok(calls) => {
                let seg = segment.min(data.len()).max(1);
                self.threads.call_n(
                    threads::Count::UdpSends,
                    calls as u64,
                    threads::Count::UdpSendDatagrams,
                    data.len().div_ceil(seg) as u64,
                );
            }
            Err(e) => tracing::debug!(%dest, error = %e, "udp send failed"),
        }
    }
}

/// Pooled copies of datagrams the core queued (handshakes, piggyback flushes, staged packets),
/// taken under the core's lock ([`Outbox::drain`]) and sealed outside it ([`Outbox::seal`]): the
/// lock is held for the copy only, as for the packets read from the TUN device.
pub(crate) struct Outbox {
    bufs: Vec<Vec<u8>>,
    /// Destination, length (final once sealed; 0 after a failed seal) and the seal still to run.
    items: Vec<(SocketAddr, usize, Option<SealJob>)>,
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
    fn len(&self) -> usize {
        self.items.len()
    }
    /// Drains the core's transmit queue; returns how many were taken.
    fn drain(&mut self, core: &mut Tunnel) -> usize {
        let mut n = 0;
        while core.has_transmit() {
            let k = self.items.len();
            if k == self.bufs.len() {
                self.bufs.push(vec![0u8; self.size]);
            }
            match core.poll_transmit_deferred(&mut self.bufs[k]) {
                Some((d, len, job)) => {
                    self.items.push((d, len, job));
                    n += 1;
                }
                None => break,
            }
        }
        n
    }
    /// Seals the data datagrams drained unsealed (no lock needed) on `lane` (0: none; see
    /// [`datapath::lane_of`]); returns how many seals failed, for [`Tunnel::seal_failed`].
    fn seal(&mut self, lane: u8) -> u64 {
        let mut failed = 0;
        for (k, (_, len, job)) in self.items.iter_mut().enumerate() {
            if let Some(job) = job.take() {
                let buf = &mut self.bufs[k][..*len];
                *len = job.seal_on_lane(buf, lane).unwrap_or_else(|_| {
                    failed += 1;
                    0
                });
            }
        }
        failed
    }
    /// Datagram `k`, once sealed; `None` after a failed seal.
    fn get(&self, k: usize) -> Option<(SocketAddr, &[u8])> {
        let (d, len, ref job) = self.items[k];
        debug_assert!(job.is_none(), "an Outbox datagram sent before its seal");
        (len > 0 && job.is_none()).then(|| (d, &self.bufs[k][..len]))
    }
    /// Seals everything drained (on `lane`), then sends it on socket `sock` (the lock not
    /// held); a failed seal is counted.
    fn seal_and_send(&mut self, sh: &Shared, sock: usize, lane: u8) {
        let failed = self.seal(lane);
        if failed > 0 {
            sh.lock().seal_failed(failed);
        }
        for k in 0..self.len() {
            if let Some((d, b)) = self.get(k) {
                sh.send(sock, d, b, b.len());
            }
        }
    }
}

/// Creates the TUN device with `queues` queues (multi-queue when more than one), trying
/// offloads first; fewer queues when the kernel refuses more.
fn create_device(cfg: &Config, queues: usize) -> Result<(Vec<SyncDevice>, bool), TunnelError> {
    let build = |offload: bool, multi: bool| {
        let mut b = DeviceBuilder::new()
            .name(&cfg.name)
            .mtu(cfg.core.mtu as u16)
            // Up only once `up` has configured IPv6 link-local addressing (`bring_up`).
            .enable(false)
            .offload(offload)
            .multi_queue(multi);
        // The first address here; the others through `netconf` once the device exists.
        let first = cfg.addresses[0];
        b = match first.addr {
            std::net::IpAddr::V4(a) => b.ipv4(a, first.prefix, None),
            std::net::IpAddr::V6(a) => b.ipv6(a, first.prefix),
        };
        b.build_sync()
    };
    let multi = queues > 1;
    let (first, offload) = match build(true, multi) {
        Ok(d) => {
            let on = d.tcp_gso();
            (d, on)
        }
        Err(e) => {
            tracing::info!(error = %e, "TUN offloads unavailable; using plain reads and writes");
            let d = build(false, multi).map_err(io(format!("create TUN device {}", cfg.name)))?;
            (d, false)
        }
    };
    let mut devs = vec![first];
    while devs.len() < queues {
        match devs[0].try_clone() {
            Ok(d) => devs.push(d),
            Err(e) => {
                tracing::info!(error = %e, queues = devs.len(), "cannot open another TUN queue");
                break;
            }
        }
    }
    Ok((devs, offload))
}

/// Brings the interface up. Without an IPv6 address of its own, it first gets no IPv6
/// link-local address either (issue 30: the kernel's router solicitations and MLD reports were
/// counted as no-route drops of an idle tunnel). Where that fails (a kernel without IPv6), the
/// tunnel still comes up: what the kernel sends is then counted as `link-local` drops.
fn bring_up(cfg: &Config, dev: &SyncDevice) -> Result<(), TunnelError> {
    if !cfg.addresses.iter().any(|a| a.addr.is_ipv6()) {
        if let Err(e) = netconf::no_ipv6_link_local(&cfg.name) {
            tracing::debug!(error = %e, "IPv6 link-local addressing left on");
        }
    }
    dev.enabled(true)
        .map_err(io(format!("bring TUN device {} up", cfg.name)))
}

/// TUN queues and crypto workers: the config's, else by core count. Up to two cores, the
/// I/O threads and the application already keep both busy, and hand-offs to workers only cost:
/// on the 2-core bench inline sealing and opening beat two workers and two queues in every test
/// (docs/RESULTS.md §10). Beyond two cores: a queue and a worker per core; the workers stay
/// parked unless an I/O thread saturates with a core idle (its gauge), so their number bounds
/// the spread and does not set the CPU spent.
fn data_path_shape(cfg: &Config) -> (usize, usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let q = if cores <= 2 { 1 } else { cores };
    (
        cfg.queues.unwrap_or(q).max(1),
        cfg.workers.unwrap_or_else(sealink_engine::default_workers),
    )
}

/// TUN writer threads: the config's, else none, except with `handoff = "always"` and several
/// queues and crypto workers, one per TUN queue. In that shape the receive path's in-order
/// release would make every flow's TUN write (and the inner TCP receive the kernel runs in it)
/// one after another, on one lane per UDP socket; writers keyed by flow let several flows write
/// at once. With `handoff = "auto"` each queue's one I/O thread writes what it received (run to
/// completion: a flow's packets never change threads), and while it hands off, the release on
/// the worker writes: a writer thread would only add a hand-off.
fn tun_writers(cfg: &Config, queues: usize, workers: usize) -> usize {
    cfg.tun_writers.unwrap_or(
        if cfg.handoff == Handoff::Always && queues > 1 && workers > 0 {
            queues
        } else {
            0
        },
    )
}

/// Whether one thread per queue pair serves both its TUN queue and its UDP socket (`io_loop`):
/// inline, and with `handoff = "auto"` (the default), where the thread keeps a flow's work
/// until it saturates. `handoff = "always"` keeps the reader-per-direction shape of the engine
/// before issue 43.
fn io_threads(cfg: &Config, queues: usize, sockets: usize, workers: usize) -> bool {
    queues == sockets && (workers == 0 || cfg.handoff == Handoff::Auto)
}

/// What undoes a part of the set-up at exit, and also when the tunnel dies.
enum Cleanup {
    /// A full tunnel's rules (`policy.rs`).
    Policy(helper::UndoHelper),
    /// A shell (`dns.rs`).
    Shell(hooks::Armed),
}

/// Fires the cleanups, the last set up first.
fn undo_all(mut cleanups: Vec<Cleanup>) {
    while let Some(c) = cleanups.pop() {
        match c {
            Cleanup::Policy(u) => u.fire(),
            Cleanup::Shell(s) => s.fire(),
        }
    }
}

/// Binds `n` UDP sockets on the listen port (dual-stack first, else IPv4), `SO_REUSEPORT` when
/// more than one; the kernel spreads peers over them by address, or with `lanes` by the lane
/// each data datagram carries. Returns the sockets and whether lane steering is on.
fn bind_udp(
    port: u16,
    n: usize,
    mark: Option<u32>,
    lanes: bool,
) -> Result<(Vec<UdpIo>, bool), TunnelError> {
    let opts = UdpOptions {
        reuse_port: n > 1,
        mark,
        ..UdpOptions::default()
    };
    let first = UdpIo::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)), &opts)
        .or_else(|_| UdpIo::bind(SocketAddr::from(([0, 0, 0, 0], port)), &opts))
        .map_err(io(format!("bind UDP port {port}")))?;
    let local = first.local_addr().map_err(io("UDP local address"))?;
    let mut socks = vec![first];
    while socks.len() < n {
        // The same address and port the first one got (also when port 0 picked one).
        let addr = SocketAddr::new(
            if local.is_ipv6() {
                Ipv6Addr::UNSPECIFIED.into()
            } else {
                std::net::Ipv4Addr::UNSPECIFIED.into()
            },
            local.port(),
        );
        match UdpIo::bind(addr, &opts) {
            Ok(s) => socks.push(s),
            Err(e) => {
                tracing::info!(error = %e, "cannot bind another UDP socket");
                break;
            }
        }
    }
    let steering = lanes
        && socks.len() > 1
        && socks[0]
            .steer_by_lane(sealink_proto::wire::LANE_OFFSET as u32, socks.len())
            .inspect_err(|e| {
                tracing::warn!(error = %e, "cannot steer datagrams by lane: by address instead");
            })
            .is_ok();
    Ok((socks, steering))
}

/// Runs the tunnel in the calling thread until `stop` is set (by a signal handler, or by
/// `sealink down` through the control socket). `on_up` is called once the interface is up and
/// configured. The interface is removed before this returns.
pub fn run(
    cfg: Config,
    host: HostKey,
    run_dir: &RunDir,
    stop: std::sync::Arc<AtomicBool>,
    on_up: impl FnOnce(&UpInfo),
) -> Result<(), TunnelError> {
    run_with(cfg, host, run_dir, stop, RunOptions::default(), on_up)
}

/// [`run`] with hooks' config path for reloads, a SIGHUP flag and a resolver. Hooks: `pre_up`
/// before the device is created, `post_up` once addresses and routes are set (before `on_up`,
/// so before READY=1), `pre_down` before teardown and `post_down` after it (see [`hooks`]).
pub fn run_with(
    cfg: Config,
    host: HostKey,
    run_dir: &RunDir,
    stop: std::sync::Arc<AtomicBool>,
    opts: RunOptions,
    on_up: impl FnOnce(&UpInfo),
) -> Result<(), TunnelError> {
    let r = run_prepared(cfg, host, run_dir, stop, opts, on_up);
    // After a failed start too (a pre_up hook, the device, ...): `prepare` may have created
    // the namespace's directory for nothing.
    rundir::remove_if_empty(&run_dir.dir());
    r
}

fn run_prepared(
    cfg: Config,
    host: HostKey,
    run_dir: &RunDir,
    stop: std::sync::Arc<AtomicBool>,
    opts: RunOptions,
    on_up: impl FnOnce(&UpInfo),
) -> Result<(), TunnelError> {
    let sock_path = run_dir.prepare()?.join(format!("{}.sock", cfg.name));
    if UnixStream::connect(&sock_path).is_ok() {
        return Err(TunnelError::AlreadyRunning(cfg.name.clone()));
    }
    // Looked up now, before anything is set up: an unknown user ends `up` with nothing to undo.
    let account = privs::account_for(&cfg.user)?;
    // Who started us: the control socket answers this uid (and root), not the user we become,
    // which other daemons may share (nobody).
    let started_as = sealink_keys::secure_file::my_uid();
    // Absolute while we may still search every directory on the way: `sealink reload PATH`
    // names it canonically, and the user we become may not be able to resolve it.
    let config_path = opts
        .config_path
        .clone()
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p));
    // Left behind by a process that did not exit cleanly.
    let _ = std::fs::remove_file(&sock_path);
    policy::clean_stale(&run_dir.dir(), &cfg.name)?;
    let helper_exe = opts.helper_exe.as_deref();
    if helper_exe.is_none() && cfg.full_tunnel() != (false, false) {
        return Err(TunnelError::Config {
            key: "peer.allowed_ips".into(),
            msg: "a full tunnel (0.0.0.0/0 or ::/0) needs the root helper that undoes its \
                  rules (RunOptions::helper_exe)"
                .into(),
        });
    }

    let mut core_cfg = cfg.core.clone();
    core_cfg.index_seed = rand_seed();
    let public_key = *host.public();
    let mut core = Tunnel::new(host, core_cfg, cfg.peers.clone())?;
    for (p, n) in cfg.peers.iter().zip(&cfg.endpoint_names) {
        core.set_endpoint_name(&p.public_key, n.clone());
    }
    let (queues, workers) = data_path_shape(&cfg);
    hooks::run_now(hooks::HookKind::PreUp, &cfg.hooks.pre_up, &cfg.name)?;
    let (devs, offload) = create_device(&cfg, queues)?;
    bring_up(&cfg, &devs[0])?;
    // The other addresses, then allowed IPs outside the interface's own networks (a site behind
    // a peer) need a route into the tunnel; on an error the device closes on return, taking
    // what was added with it.
    for a in &cfg.addresses[1..] {
        netconf::add_address(&cfg.name, a)?;
    }
    for net in cfg.routes() {
        netconf::change_route(true, &cfg.name, net, cfg.table.id())?;
    }
    let (full_v4, full_v6) = cfg.full_tunnel();
    let full = full_v4 || full_v6;
    let (udp, lane_steering) = bind_udp(
        cfg.listen_port,
        queues,
        full.then_some(cfg.fwmark),
        cfg.core.lanes,
    )?;
    let listen = udp[0]
        .local_addr()
        .unwrap_or(SocketAddr::from((Ipv6Addr::UNSPECIFIED, cfg.listen_port)));
    let listener = match bind_private(&sock_path, "control socket") {
        // The last tunnel of this namespace, stopping, removed the empty directory since
        // `prepare`: make it again, once.
        Err(TunnelError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            run_dir.prepare()?;
            bind_private(&sock_path, "control socket")?
        }
        r => r?,
    };
    listener
        .set_nonblocking(true)
        .map_err(io("control socket"))?;
    // WireGuard's wire: `wg` talks to the tunnel on /var/run/wireguard/NAME.sock.
    let uapi_sock = match cfg.core.wire {
        Wire::WireGuard => match uapi::bind(&cfg.name) {
            Ok(u) => Some(u),
            Err(e) => {
                let _ = std::fs::remove_file(&sock_path);
                return Err(e);
            }
        },
        Wire::Sealink => None,
    };
    let intr = InterruptEvent::new().map_err(io("interrupt event"))?;
    // Before post_up, as wg-quick: hooks see the tunnel's routing and DNS in place. Each
    // returns the helper or shell that undoes it (fired at exit, or run when the tunnel dies).
    let mut cleanups: Vec<Cleanup> = Vec::new();
    let set_up = (|| {
        if let (true, Some(exe)) = (full, helper_exe) {
            cleanups.push(Cleanup::Policy(policy::install(
                exe,
                &run_dir.dir(),
                &cfg.name,
                cfg.fwmark,
                full_v4,
                full_v6,
            )?));
        }
        if !cfg.dns.is_empty() {
            cleanups.push(Cleanup::Shell(dns::apply(&cfg.name, &cfg.dns)?));
        }
        Ok(())
    })();
    if let Err(e) = set_up {
        let _ = std::fs::remove_file(&sock_path);
        uapi::remove(uapi_sock.as_ref());
        undo_all(cleanups);
        return Err(e);
    }
    // With the privileges of `up`: post_up, and the down hooks and helpers started now
    // (they run later, when the tunnel itself holds none).
    let armed =
        hooks::run_now(hooks::HookKind::PostUp, &cfg.hooks.post_up, &cfg.name).and_then(|()| {
            Ok((
                hooks::Armed::arm(hooks::HookKind::PreDown, &cfg.hooks.pre_down, &cfg.name)?,
                hooks::Armed::arm(hooks::HookKind::PostDown, &cfg.hooks.post_down, &cfg.name)?,
            ))
        });
    let (pre_down, post_down) = match armed {
        Ok(a) => a,
        Err(e) => {
            let _ = std::fs::remove_file(&sock_path);
            uapi::remove(uapi_sock.as_ref());
            undo_all(cleanups);
            return Err(e);
        }
    };
    let route_helper = match helper_exe {
        Some(exe) => helper::RouteHelper::start(
            exe,
            &route_rules::RouteArgs {
                ifname: cfg.name.clone(),
                config: config_path.clone(),
                routes: cfg.routes(),
                table: cfg.table.id(),
            },
        )
            .inspect_err(|e| tracing::warn!(error = %e, "route helper did not start: reloads cannot change routes"))
            .ok(),
        None => None,
    };
    // Once we are another user, reading the config and key again and removing the socket
    // need root: a helper started now does them.
    let privileged = match &account {
        Some(_) => hooks::PrivHelper::start(
            &sock_path,
            config_path.as_deref(),
            &cfg.private_key,
            uapi_sock.as_ref().map(|u| (u.path.as_path(), u.id_arg())),
        )
            .inspect_err(|e| {
                tracing::warn!(error = %e, "privileged helper did not start: reloads may not read the config, and the control socket stays at exit")
            })
            .ok(),
        None => None,
    };
    // Everything that needs a privilege is done; the threads below start without any, as
    // the configured user.
    if let Err(e) = privs::drop_all(account.as_ref()) {
        let _ = std::fs::remove_file(&sock_path);
        uapi::remove(uapi_sock.as_ref());
        undo_all(cleanups);
        return Err(e);
    }
    if let Some(a) = &account {
        tracing::info!(user = %a.name, uid = a.uid, gid = a.gid, "running as an unprivileged user");
    }
    let (resolve_tx, resolve_rx) = std::sync::mpsc::channel();
    let n_writers = tun_writers(&cfg, devs.len(), workers);
    let (writers, writer_rx): (Vec<_>, Vec<_>) =
        (0..n_writers).map(|_| std::sync::mpsc::channel()).unzip();
    let info = UpInfo {
        name: cfg.name.clone(),
        listen,
        tun_offload: offload,
        udp_gso_segments: udp[0].max_gso_segments(),
        queues: devs.len(),
        udp_sockets: udp.len(),
        wire: cfg.core.wire,
        suite: cfg.core.suite,
        workers,
        tun_writers: n_writers,
        handoff: cfg.handoff,
        lanes: cfg.core.lanes,
        lane_steering,
        fwmark: full.then_some(cfg.fwmark),
    };
    let sh = std::sync::Arc::new(Shared {
        core: Mutex::new(core),
        timer: Condvar::new(),
        stop,
        udp,
        devs,
        writers,
        intr,
        clock: Clock::new(),
        offload,
        headroom: cfg.core.headroom(),
        stride: cfg.core.headroom() + cfg.core.mtu + TAILROOM,
        info: info.clone(),
        public_key,
        owner_uid: started_as,
        control_refused: AtomicU64::new(0),
        resolve_tx,
        threads: threads::Registry::new(),
        uapi_refused: uapi::Refusals::default(),
        uapi_zones: uapi::Zones::default(),
    });
    {
        let weak = std::sync::Arc::downgrade(&sh);
        let resolver = opts.resolver.clone().unwrap_or_else(system_resolver);
        // Detached: a lookup may outlast the tunnel; it holds only a weak reference.
        let _ = std::thread::Builder::new()
            .name("sl-resolve".into())
            .spawn(move || reload::resolver_loop(weak, resolve_rx, resolver));
    }
    let mut ctl = reload::Ctl {
        cfg: cfg.clone(),
        path: config_path,
        routes: route_helper,
        privileged,
        started_as,
    };
    let reload_flag = opts.reload.clone();
    let (nq, ns) = (sh.devs.len(), sh.udp.len());
    // Lanes: one per TUN queue, then one per UDP socket.
    let pipe = Pipeline::new(std::sync::Arc::clone(&sh), nq + ns, workers);
    let io_shape = io_threads(&cfg, nq, ns, workers);
    let mut waiters = Vec::new();
    std::thread::scope(|s| {
        let (sh, pipe) = (&*sh, &pipe);
        let mut ok = true;
        if io_shape {
            // One thread per TUN queue and UDP socket pair serves both directions, and seals
            // and opens inline unless it saturates (handoff = "auto").
            for q in 0..nq {
                ok &= std::thread::Builder::new()
                    .name(format!("sl-io-{q}"))
                    .spawn_scoped(s, move || datapath::io_loop(sh, pipe, q, nq + q))
                    .is_ok();
            }
        } else {
            for q in 0..nq {
                ok &= std::thread::Builder::new()
                    .name(format!("sl-tun-{q}"))
                    .spawn_scoped(s, move || datapath::tun_loop(sh, pipe, q))
                    .is_ok();
            }
            for k in 0..ns {
                ok &= std::thread::Builder::new()
                    .name(format!("sl-udp-{k}"))
                    .spawn_scoped(s, move || datapath::udp_loop(sh, pipe, k, nq + k))
                    .is_ok();
            }
        }
        for (k, jobs) in writer_rx.into_iter().enumerate() {
            ok &= std::thread::Builder::new()
                .name(format!("sl-write-{k}"))
                .spawn_scoped(s, move || datapath::writer_loop(sh, k, jobs))
                .is_ok();
        }
        ok &= std::thread::Builder::new()
            .name("sl-timer".into())
            .spawn_scoped(s, move || timer_loop(sh))
            .is_ok();
        if let Some(u) = &uapi_sock {
            ok &= std::thread::Builder::new()
                .name("sl-uapi".into())
                .spawn_scoped(s, move || uapi::serve_loop(sh, u))
                .is_ok();
        }
        if ok {
            on_up(&info);
            control_loop(
                sh,
                &listener,
                &mut waiters,
                &mut ctl,
                reload_flag.as_deref(),
            );
        } else {
            tracing::error!("cannot start the tunnel threads");
        }
        sh.stop.store(true, Ordering::SeqCst);
        for u in &sh.udp {
            u.wake();
        }
        for w in &sh.writers {
            let _ = w.send(None);
        }
        let _ = sh.intr.trigger();
        sh.timer.notify_all();
    });
    // The interface is still up: pre_down runs now.
    hooks::fire_all(pre_down);
    // Workers finish what is queued and hand the last reference to the shared state back.
    drop(pipe);
    // Closing the (non-persistent) TUN device removes the interface.
    drop(sh);
    // The kernel unregisters the device shortly after the close: wait, so that `down` and
    // exit mean the interface is gone.
    let sys = PathBuf::from("/sys/class/net").join(&info.name);
    let deadline = Instant::now() + Duration::from_secs(3);
    while sys.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let reload::Ctl {
        routes, privileged, ..
    } = ctl;
    drop(routes);
    undo_all(cleanups);
    hooks::fire_all(post_down);
    drop(listener);
    // A socket left behind lists the tunnel as running (`control::running`) until the next
    // `up` of that name removes it: say why, if it happens. As another user we may not write
    // its root-owned directory: the helper removes it.
    let removed = match privileged {
        Some(mut h) => h.unlink(),
        None => {
            uapi::remove(uapi_sock.as_ref());
            std::fs::remove_file(&sock_path)
                .map_err(|e| e.to_string())
                .map(|()| {
                    // Before `down` hears back: an empty directory is gone once `down` returns.
                    rundir::remove_if_empty(&run_dir.dir());
                })
        }
    };
    if let Err(e) = removed {
        tracing::warn!(error = %e, path = %sock_path.display(), "cannot remove the control socket");
    }
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

/// Held while the process-wide umask is changed ([`bind_private`]) and by whatever creates
/// files or starts processes during set-up that must not inherit that umask (run directories,
/// hooks): a process running several tunnels (the library's tests) sets them up at once.
pub(crate) static UMASK: Mutex<()> = Mutex::new(());

/// Binds the control socket with umask 0177, so that it is created 0600 and never briefly
/// wider; it also lies in a 0700 directory ([`RunDir`]). The umask is process-wide: this runs
/// during set-up, before the data path threads exist.
fn bind_private(path: &Path, what: &str) -> Result<UnixListener, TunnelError> {
    use rustix::fs::Mode;
    let _umask = UMASK.lock().unwrap_or_else(|e| e.into_inner());
    let old = rustix::process::umask(Mode::from_raw_mode(0o177));
    let r = UnixListener::bind(path);
    rustix::process::umask(old);
    r.map_err(io(format!("bind {what} {}", path.display())))
}

/// Whether the connected peer may use the control socket (its `SO_PEERCRED` uid is root or
/// the tunnel's own); if not, the refusal line to send it. The 0700 directory already keeps
/// other users out; this holds even if that directory's mode is widened by hand.
fn authorize(sh: &Shared, stream: &UnixStream) -> Result<(), String> {
    match rustix::net::sockopt::socket_peercred(stream) {
        Ok(cred) => {
            let uid = cred.uid.as_raw();
            if uid == 0 || uid == sh.owner_uid {
                Ok(())
            } else {
                Err(format!(
                    "error: permission denied: uid {uid} is neither root nor the tunnel's owner (uid {})",
                    sh.owner_uid
                ))
            }
        }
        Err(e) => Err(format!(
            "error: permission denied: cannot read peer credentials ({e})"
        )),
    }
}

fn control_loop(
    sh: &Shared,
    listener: &UnixListener,
    waiters: &mut Vec<UnixStream>,
    ctl: &mut reload::Ctl,
    reload_flag: Option<&AtomicBool>,
) {
    while !sh.stopping() {
        if reload_flag.is_some_and(|f| f.swap(false, Ordering::SeqCst)) {
            match reload::reload(sh, ctl, None) {
                Ok(msg) => tracing::info!("SIGHUP: {msg}"),
                Err(e) => tracing::error!("SIGHUP: reload refused: {e}"),
            }
        }
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(refusal) = authorize(sh, &stream) {
                    sh.control_refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("control socket: {refusal}");
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                    let _ = writeln!(&stream, "{refusal}");
                    continue;
                }
                if let Some(w) = serve(sh, stream, ctl) {
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
fn serve(sh: &Shared, stream: UnixStream, ctl: &mut reload::Ctl) -> Option<UnixStream> {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut line = String::new();
    let mut r = BufReader::new(&stream);
    if r.read_line(&mut line).is_err() {
        return None;
    }
    let mut w = &stream;
    match line.trim() {
        req @ ("show" | "show-json") => {
            let text = {
                let core = sh.lock();
                let now = sh.clock.now();
                let mut st = control::status(
                    &sh.info,
                    &sh.public_key,
                    now,
                    &core.peer_status(now),
                    &core.drops(),
                    sh.control_refused.load(Ordering::Relaxed),
                    sh.threads.snapshot(),
                );
                st.uapi_refused = sh.uapi_refused.snapshot();
                if req == "show" {
                    control::format_status(&st)
                } else {
                    control::format_status_json(&st)
                }
            };
            let _ = w.write_all(text.as_bytes());
            None
        }
        "down" => Some(stream),
        req if req == "reload" || req.starts_with("reload ") => {
            let asked = req.strip_prefix("reload ").map(|p| Path::new(p.trim()));
            match reload::reload(sh, ctl, asked) {
                Ok(msg) => {
                    tracing::info!("{msg}");
                    let _ = writeln!(w, "ok: {msg}");
                }
                Err(e) => {
                    tracing::warn!("reload refused: {e}");
                    let _ = writeln!(w, "error: {e}");
                }
            }
            None
        }
        other => {
            let _ = writeln!(w, "error: unknown request {other:?}");
            None
        }
    }
}

fn timer_loop(sh: &Shared) {
    let mut out = Outbox::new(sh.stride);
    let mut core = sh.lock();
    while !sh.stopping() {
        let now = sh.clock.now();
        core.handle_timeout(now);
        while let Some(req) = core.poll_resolve() {
            let _ = sh.resolve_tx.send(req);
        }
        out.clear();
        if out.drain(&mut core) > 0 {
            drop(core);
            out.seal_and_send(sh, 0, 0);
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
