//! Setting a tunnel up and tearing it down: the device, its addresses and routes, the sockets,
//! the hooks and helpers, dropping privileges, the threads, and undoing it all in order.

use std::io::Write;
use std::net::{Ipv6Addr, SocketAddr};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use sealink_engine::{Handoff, Pipeline};
use sealink_proto::tunnel::{TAILROOM, Tunnel, Wire};
use sealink_proto::{Clock, HostKey};
use sealink_udp::{UdpIo, UdpOptions};
use tun_rs::{DeviceBuilder, InterruptEvent, SyncDevice};

use crate::control::{self, bind_private};
use crate::error::io;
use crate::{
    Config, RunDir, RunOptions, Shared, TunnelError, UpInfo, datapath, dns, handshakes, helper,
    hooks, netconf, policy, prio, privs, reload, route_rules, rundir, system_resolver, threads,
    timer_loop, uapi,
};

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
/// link-local address either (else the kernel's router solicitations and MLD reports are
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
/// until it saturates. `handoff = "always"` keeps a reader per direction, every batch
/// sealed or opened on the workers.
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

/// What `up` checks and looks up before it changes anything.
struct Preflight {
    sock_path: PathBuf,
    /// The unprivileged user to become (`None`: stay who we are).
    account: Option<privs::Account>,
    /// Who started us: the control socket answers this uid (and root), not the user we become,
    /// which other daemons may share (nobody).
    started_as: u32,
    /// The config file, absolute.
    config_path: Option<PathBuf>,
}

/// The core, device and sockets, opened with the privileges of `up`.
struct Opened {
    core: Tunnel,
    public_key: [u8; 32],
    workers: usize,
    devs: Vec<SyncDevice>,
    offload: bool,
    full_v4: bool,
    full_v6: bool,
    udp: Vec<UdpIo>,
    lane_steering: bool,
    listen: SocketAddr,
    listener: UnixListener,
    uapi_sock: Option<uapi::Socket>,
    intr: InterruptEvent,
}

/// What runs or is undone at teardown: the undoers of the routing and DNS set-up, the down
/// hooks, and the helpers that keep root for the tunnel.
struct SetUp {
    cleanups: Vec<Cleanup>,
    pre_down: Vec<hooks::Armed>,
    post_down: Vec<hooks::Armed>,
    route_helper: Option<helper::RouteHelper>,
    privileged: Option<hooks::PrivHelper>,
}

pub(crate) fn run_prepared(
    cfg: Config,
    host: HostKey,
    run_dir: &RunDir,
    stop: std::sync::Arc<AtomicBool>,
    opts: RunOptions,
    on_up: impl FnOnce(&UpInfo),
) -> Result<(), TunnelError> {
    let pre = preflight(&cfg, run_dir, &opts)?;
    let opened = open(&cfg, host, run_dir, &pre.sock_path)?;
    let set_up = arm(&cfg, run_dir, &pre, &opened, opts.helper_exe.as_deref())?;
    if let Some(a) = &pre.account {
        tracing::info!(user = %a.name, uid = a.uid, gid = a.gid, "running as an unprivileged user");
    }
    let (resolve_tx, resolve_rx) = std::sync::mpsc::channel();
    let n_writers = tun_writers(&cfg, opened.devs.len(), opened.workers);
    let (writers, writer_rx): (Vec<_>, Vec<_>) =
        (0..n_writers).map(|_| std::sync::mpsc::channel()).unzip();
    let info = up_info(&cfg, &opened, n_writers);
    let Opened {
        core,
        public_key,
        workers,
        devs,
        offload,
        udp,
        listener,
        uapi_sock,
        intr,
        ..
    } = opened;
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
        owner_uid: pre.started_as,
        control_refused: AtomicU64::new(0),
        resolve_tx,
        threads: threads::Registry::new(),
        uapi_refused: uapi::Refusals::default(),
        uapi_zones: uapi::Zones::default(),
        handshakes: handshakes::Handshakes::new(),
    });
    {
        let weak = std::sync::Arc::downgrade(&sh);
        let resolver = opts.resolver.clone().unwrap_or_else(system_resolver);
        // Detached: a lookup may outlast the tunnel; it holds only a weak reference.
        let _ = std::thread::Builder::new()
            .name("sl-resolve".into())
            .spawn(move || {
                prio::off_path("resolver");
                reload::resolver_loop(weak, resolve_rx, resolver)
            });
    }
    let mut ctl = reload::Ctl {
        cfg: cfg.clone(),
        path: pre.config_path,
        routes: set_up.route_helper,
        privileged: set_up.privileged,
        started_as: pre.started_as,
        peers_generation: sh.lock().peers_generation(),
        // Started here, at the data path's priority, before the control thread lowers itself.
        applier: reload::Applier::start(std::sync::Arc::downgrade(&sh)),
    };
    let reload_flag = opts.reload.clone();
    let (nq, ns) = (sh.devs.len(), sh.udp.len());
    // Lanes: one per TUN queue, then one per UDP socket.
    let pipe = Pipeline::new(std::sync::Arc::clone(&sh), nq + ns, workers);
    let io_shape = io_threads(&cfg, nq, ns, workers);
    let mut waiters = Vec::new();
    run_threads(&sh, &pipe, io_shape, writer_rx, uapi_sock.as_ref(), || {
        on_up(&info);
        // The control thread parses a reload's config: off the data path's cores first. It
        // stays lowered through the teardown that follows.
        prio::off_path("control");
        control::control_loop(
            &sh,
            &listener,
            &mut waiters,
            &mut ctl,
            reload_flag.as_deref(),
        );
    });
    // The interface is still up: pre_down runs now.
    hooks::fire_all(set_up.pre_down);
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
    undo_all(set_up.cleanups);
    hooks::fire_all(set_up.post_down);
    drop(listener);
    remove_sockets(privileged, uapi_sock.as_ref(), &pre.sock_path, run_dir);
    for mut w in waiters {
        let _ = w.write_all(b"down\n");
    }
    Ok(())
}

/// Checks that the tunnel is not running and can run, and looks up what set-up needs, before
/// anything is set up: an error here leaves nothing to undo.
fn preflight(cfg: &Config, run_dir: &RunDir, opts: &RunOptions) -> Result<Preflight, TunnelError> {
    let sock_path = run_dir.prepare()?.join(format!("{}.sock", cfg.name));
    if UnixStream::connect(&sock_path).is_ok() {
        return Err(TunnelError::AlreadyRunning(cfg.name.clone()));
    }
    // Looked up now, before anything is set up: an unknown user ends `up` with nothing to undo.
    let account = privs::account_for(&cfg.user)?;
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
    if opts.helper_exe.is_none() && cfg.full_tunnel() != (false, false) {
        return Err(TunnelError::Config {
            key: "peer.allowed_ips".into(),
            msg: "a full tunnel (0.0.0.0/0 or ::/0) needs the root helper that undoes its \
                  rules (RunOptions::helper_exe)"
                .into(),
        });
    }
    Ok(Preflight {
        sock_path,
        account,
        started_as,
        config_path,
    })
}

/// Test builds only (feature `test-timers`, which the lab's benchmark builds enable and the
/// product's do not): `SEALINK_TEST_REKEY_AFTER=SECS` shortens the hub's REKEY_AFTER_TIME, so
/// that every session a hub made at once reaches it together within seconds: a real rekey
/// storm, in which the hub rekeys by time only the sessions it initiated (and those it
/// answered only near REJECT_AFTER_TIME, which this leaves as it is).
#[cfg(feature = "test-timers")]
fn test_timers(core: &mut sealink_proto::tunnel::TunnelConfig) {
    let secs = std::env::var("SEALINK_TEST_REKEY_AFTER")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| *s >= 1.0 && *s < core.limits.reject_after_time.as_secs_f64());
    if let Some(s) = secs {
        core.limits.rekey_after_time = Duration::from_secs_f64(s);
        tracing::warn!(seconds = s, "test build: REKEY_AFTER_TIME shortened");
    }
}

/// Makes the core, runs pre_up, and creates and configures the device, the UDP sockets, the
/// control socket (and WireGuard's UAPI socket); on an error the device closes on return,
/// taking what was added to it with it.
fn open(
    cfg: &Config,
    host: HostKey,
    run_dir: &RunDir,
    sock_path: &Path,
) -> Result<Opened, TunnelError> {
    let mut core_cfg = cfg.core.clone();
    core_cfg.index_seed = rand_seed();
    #[cfg(feature = "test-timers")]
    test_timers(&mut core_cfg);
    let public_key = *host.public();
    let mut core = Tunnel::new(host, core_cfg, cfg.peers.clone())?;
    // The handshake threads build our initiations, off the lock the data path takes.
    core.build_initiations_offpath(true);
    for (p, n) in cfg.peers.iter().zip(&cfg.endpoint_names) {
        core.set_endpoint_name(&p.public_key, n.clone());
    }
    let (queues, workers) = data_path_shape(cfg);
    hooks::run_now(hooks::HookKind::PreUp, &cfg.hooks.pre_up, &cfg.name)?;
    let (devs, offload) = create_device(cfg, queues)?;
    bring_up(cfg, &devs[0])?;
    // The other addresses, then allowed IPs outside the interface's own networks (a site behind
    // a peer) need a route into the tunnel.
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
    let listener = match bind_private(sock_path, "control socket") {
        // The last tunnel of this namespace, stopping, removed the empty directory since
        // `prepare`: make it again, once.
        Err(TunnelError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            run_dir.prepare()?;
            bind_private(sock_path, "control socket")?
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
                let _ = std::fs::remove_file(sock_path);
                return Err(e);
            }
        },
        Wire::Sealink => None,
    };
    let intr = InterruptEvent::new().map_err(io("interrupt event"))?;
    Ok(Opened {
        core,
        public_key,
        workers,
        devs,
        offload,
        full_v4,
        full_v6,
        udp,
        lane_steering,
        listen,
        listener,
        uapi_sock,
        intr,
    })
}

/// With the privileges of `up`: a full tunnel's policy rules and DNS, post_up, the down hooks
/// and the helpers that keep root (they run later, when the tunnel itself holds none); then
/// drops every privilege. On an error, what was set up is undone and the sockets removed.
fn arm(
    cfg: &Config,
    run_dir: &RunDir,
    pre: &Preflight,
    opened: &Opened,
    helper_exe: Option<&Path>,
) -> Result<SetUp, TunnelError> {
    let (sock_path, uapi_sock) = (&pre.sock_path, opened.uapi_sock.as_ref());
    let fail = |cleanups: Vec<Cleanup>, e: TunnelError| {
        let _ = std::fs::remove_file(sock_path);
        uapi::remove(uapi_sock);
        undo_all(cleanups);
        Err(e)
    };
    // Before post_up, as wg-quick: hooks see the tunnel's routing and DNS in place. Each
    // returns the helper or shell that undoes it (fired at exit, or run when the tunnel dies).
    let mut cleanups: Vec<Cleanup> = Vec::new();
    let set_up = (|| {
        if let (true, Some(exe)) = (opened.full_v4 || opened.full_v6, helper_exe) {
            cleanups.push(Cleanup::Policy(policy::install(
                exe,
                &run_dir.dir(),
                &cfg.name,
                cfg.fwmark,
                opened.full_v4,
                opened.full_v6,
            )?));
        }
        if !cfg.dns.is_empty() {
            cleanups.push(Cleanup::Shell(dns::apply(&cfg.name, &cfg.dns)?));
        }
        Ok(())
    })();
    if let Err(e) = set_up {
        return fail(cleanups, e);
    }
    let armed =
        hooks::run_now(hooks::HookKind::PostUp, &cfg.hooks.post_up, &cfg.name).and_then(|()| {
            Ok((
                hooks::Armed::arm(hooks::HookKind::PreDown, &cfg.hooks.pre_down, &cfg.name)?,
                hooks::Armed::arm(hooks::HookKind::PostDown, &cfg.hooks.post_down, &cfg.name)?,
            ))
        });
    let (pre_down, post_down) = match armed {
        Ok(a) => a,
        Err(e) => return fail(cleanups, e),
    };
    let route_helper = match helper_exe {
        Some(exe) => helper::RouteHelper::start(
            exe,
            &route_rules::RouteArgs {
                ifname: cfg.name.clone(),
                config: pre.config_path.clone(),
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
    let privileged = match &pre.account {
        Some(_) => hooks::PrivHelper::start(
            sock_path,
            pre.config_path.as_deref(),
            &cfg.private_key,
            uapi_sock.map(|u| (u.path.as_path(), u.id_arg())),
        )
            .inspect_err(|e| {
                tracing::warn!(error = %e, "privileged helper did not start: reloads may not read the config, and the control socket stays at exit")
            })
            .ok(),
        None => None,
    };
    // Everything that needs a privilege is done; the threads start without any, as the
    // configured user.
    if let Err(e) = privs::drop_all(pre.account.as_ref()) {
        return fail(cleanups, e);
    }
    Ok(SetUp {
        cleanups,
        pre_down,
        post_down,
        route_helper,
        privileged,
    })
}

/// What is up, for the caller and `show`.
fn up_info(cfg: &Config, opened: &Opened, tun_writers: usize) -> UpInfo {
    let full = opened.full_v4 || opened.full_v6;
    UpInfo {
        name: cfg.name.clone(),
        listen: opened.listen,
        tun_offload: opened.offload,
        udp_gso_segments: opened.udp[0].max_gso_segments(),
        queues: opened.devs.len(),
        udp_sockets: opened.udp.len(),
        wire: cfg.core.wire,
        suite: cfg.core.suite,
        workers: opened.workers,
        tun_writers,
        handoff: cfg.handoff,
        lanes: cfg.core.lanes,
        lane_steering: opened.lane_steering,
        fwmark: full.then_some(cfg.fwmark),
    }
}

/// Starts the data path, TUN writer, timer and UAPI threads, runs `serve` (the control socket)
/// in the calling thread until the tunnel stops, then stops and joins them all.
fn run_threads(
    sh: &Shared,
    pipe: &Pipeline<datapath::Batch>,
    io_shape: bool,
    writer_rx: Vec<std::sync::mpsc::Receiver<datapath::WriterJob>>,
    uapi_sock: Option<&uapi::Socket>,
    serve: impl FnOnce(),
) {
    let (nq, ns) = (sh.devs.len(), sh.udp.len());
    std::thread::scope(|s| {
        let mut ok = true;
        if io_shape {
            // One thread per TUN queue and UDP socket pair serves both directions, and seals
            // and opens inline unless it saturates (handoff = "auto").
            for q in 0..nq {
                ok &= std::thread::Builder::new()
                    .name(format!("sl-io-{q}"))
                    .spawn_scoped(s, move || {
                        prio::data_path("sl-io");
                        datapath::io_loop(sh, pipe, q, nq + q)
                    })
                    .is_ok();
            }
        } else {
            for q in 0..nq {
                ok &= std::thread::Builder::new()
                    .name(format!("sl-tun-{q}"))
                    .spawn_scoped(s, move || {
                        prio::data_path("sl-tun");
                        datapath::tun_loop(sh, pipe, q)
                    })
                    .is_ok();
            }
            for k in 0..ns {
                ok &= std::thread::Builder::new()
                    .name(format!("sl-udp-{k}"))
                    .spawn_scoped(s, move || {
                        prio::data_path("sl-udp");
                        datapath::udp_loop(sh, pipe, k, nq + k)
                    })
                    .is_ok();
            }
        }
        for (k, jobs) in writer_rx.into_iter().enumerate() {
            ok &= std::thread::Builder::new()
                .name(format!("sl-write-{k}"))
                .spawn_scoped(s, move || {
                    prio::data_path("sl-write");
                    datapath::writer_loop(sh, k, jobs)
                })
                .is_ok();
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        for k in 0..handshakes::threads_for(cpus) {
            ok &= std::thread::Builder::new()
                .name(format!("sl-hs-{k}"))
                .spawn_scoped(s, move || {
                    prio::off_path("handshake");
                    handshakes::handshake_loop(sh)
                })
                .is_ok();
        }
        ok &= std::thread::Builder::new()
            .name("sl-timer".into())
            .spawn_scoped(s, move || {
                prio::off_path("timer");
                timer_loop(sh)
            })
            .is_ok();
        if let Some(u) = uapi_sock {
            ok &= std::thread::Builder::new()
                .name("sl-uapi".into())
                .spawn_scoped(s, move || {
                    prio::off_path("uapi");
                    uapi::serve_loop(sh, u)
                })
                .is_ok();
        }
        if ok {
            serve();
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
        sh.handshakes.wake_all();
    });
}

/// Removes the control socket (and WireGuard's UAPI socket) at exit. A socket left behind
/// lists the tunnel as running (`control::running`) until the next `up` of that name removes
/// it: say why, if it happens. As another user we may not write its root-owned directory: the
/// helper removes it.
fn remove_sockets(
    privileged: Option<hooks::PrivHelper>,
    uapi_sock: Option<&uapi::Socket>,
    sock_path: &Path,
    run_dir: &RunDir,
) {
    let removed = match privileged {
        Some(mut h) => h.unlink(),
        None => {
            uapi::remove(uapi_sock);
            std::fs::remove_file(sock_path)
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
}

fn rand_seed() -> u32 {
    // Receiver indexes need not be secret, only hard to guess in sequence: the clock suffices.
    let n = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() ^ (d.as_secs() as u32));
    n ^ std::process::id().rotate_left(16)
}
