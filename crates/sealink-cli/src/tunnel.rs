//! `sealink up`, `sealink down`, `sealink show`: tunnel mode from the command line.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use sealink_tunnel::client::{self, ClientError};
use sealink_tunnel::{Notifier, RunDir, TunnelError, lookup};

use anyhow::{Context, Result, bail};

pub const UP_HELP: &str = r#"Runs in the foreground until SIGINT/SIGTERM or `sealink down NAME`, then removes the
interface. SIGHUP (or `sealink reload`) applies the config's peer changes. Prints `up: NAME` on stderr once the interface is up and configured; under systemd
(NOTIFY_SOCKET set, `Type=notify`) it also sends READY=1 then. CONFIG is a path, or a NAME (no
`/`, not ending in `.toml`) for $SEALINK_CONFIG_DIR/NAME.toml, by default /etc/sealink/NAME.toml
(contrib/systemd/sealink@.service runs `sealink up %i`).

A wg-quick config (CONFIG ending in .conf, or a NAME found as /etc/wireguard/NAME.conf) runs
WireGuard's protocol instead, interoperating with wireguard-go, boringtun and the kernel; the
interface is named after the file, and `wg show NAME` / `wg set NAME ...` work against it:
  [Interface]
  PrivateKey = <wg genkey>
  Address = 10.8.0.1/24
  ListenPort = 51820
  [Peer]
  PublicKey = <the peer's wg pubkey>
  AllowedIPs = 10.8.0.2/32
  Endpoint = 192.0.2.2:51820
(`protocol = "wireguard"` under [interface] asks for the same in TOML.)

Example CONFIG (TOML):
  [interface]
  name = "sl0"                    # TUN name (default sl0)
  private_key = "/etc/sealink/host.key"   # `sealink keygen host PATH`; relative to CONFIG
  address = "10.9.0.1/24"         # IPv4 or IPv6 CIDR given to the interface, or a list
                                  # (all assigned): ["10.9.0.1/24", "fd09::1/64"]
  listen_port = 51820             # optional: an ephemeral port if left out (`show` tells it)
  mtu = 1420                      # default 1420; 576 to 9000
  workers = 4                     # crypto threads; 0: inline (default: core count; 0 up to 2 cores)
  queues = 4                      # TUN queues and UDP sockets (default: core count; 1 up to 2)
  handoff = "auto"                # "auto" (default): a batch stays on the thread that read it
                                  # unless that thread saturates and a core is idle; "always"
                                  # hands every batch to the workers, for comparison
  post_up = "echo %i is up"        # hooks, as wg-quick's: pre_up, post_up, pre_down,
  post_down = ["logger %i down"]  # post_down; a command or a list, /bin/sh -c, %i: the name
  user = "sealink-tunnel"         # who the tunnel runs as once set up: a dedicated system
                                  # account (default sealink-tunnel, made by the Debian
                                  # package; `up` says how to create it if missing; "root"
                                  # keeps uid 0, with a warning)

  [interface.piggyback]           # optional: small packets ride together
  enabled = true                  # default true
  mode = "autocork"               # wait only while a send is in flight (default), or "timer"
  small = 256                     # packets up to this many bytes may wait...
  max_delay_us = 200              # ...at most this long (autocork: a backstop)...
  queue_limit = 1400              # ...or until this many bytes are queued (default
                                  # 1400, at most mtu + 2); a larger packet, or one
                                  # with DSCP EF/CS6/CS7, flushes the queue and leaves at once

  [[peer]]
  name = "b"
  public_key = "<base64 from the peer's host.key.pub, field 2>"
  endpoint = "10.0.0.2:51820"     # optional: learned from authenticated packets; a host
                                  # name is resolved again when handshakes go unanswered
  persistent_keepalive = 25       # optional: a keepalive after 25 s with nothing sent to the
                                  # peer, for NAT mappings (0 or absent: off)
  allowed_ips = ["10.9.0.2/32"]   # the peer's addresses inside the tunnel

Packets to addresses outside every peer's allowed_ips are dropped (no-route, or link-local for
link-local, multicast and broadcast packets: the kernel's own); packets from a peer with a
source outside its allowed_ips are dropped (source-not-allowed); `sealink show` counts them all.
An interface without an IPv6 address gets no IPv6 link-local address. Allowed IPs outside the interface's own networks (a site behind a peer) are routed
through the interface on `up` (a route PREFIX dev NAME, set through rtnetlink: no `ip` is
run); the routes go with the interface. A prefix containing a peer's endpoint is refused. A
full tunnel (0.0.0.0/0 or ::/0) is routed as wg-quick does: the tunnel's datagrams carry the
mark `fwmark` (default 51820), a default route goes into table 51820, and two rules send all
unmarked traffic there while the main table keeps its more specific routes; the rules are
removed at exit, also after a kill, and by the next `up` or `down` if even their helper was
killed.

The config and the key file must not be writable by other users (nor the key readable by
them). The control socket is RUN_DIR/net-INODE/NAME.sock (RUN_DIR: --run-dir, else
$SEALINK_RUN_DIR, else /run/sealink; INODE names the network namespace, so `show` and `down`
must run in the tunnel's namespace); only root and the uid that started the tunnel may use
it. Once set up, the tunnel drops every capability and, when started as root, switches to
`user` (its group alone); the down hooks, route changes on a reload, reading the config and key
again on a reload, and removing the control socket are done by helpers started before that."#;

pub fn up(config: &Path, run_dir: Option<PathBuf>) -> Result<()> {
    if !sealink_tunnel::may_admin_network() {
        // As wg-quick says it, before any file is read or made.
        bail!(
            "sealink up must be run as root (or with CAP_NET_ADMIN): it creates the TUN device, \
             addresses and routes, then runs as its unprivileged user; try sudo"
        );
    }
    let (config, cfg) = lookup::load(config)?;
    let config = &config;
    let host = cfg.host_key()?;
    let run_dir = RunDir::new(run_dir);
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("install signal handler")?;
    }
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&reload))
        .context("install signal handler")?;
    let notify = Notifier::connect();
    let opts = sealink_tunnel::RunOptions {
        config_path: Some(config.clone()),
        reload: Some(reload),
        resolver: None,
        // The binary that is running, even if a package upgrade replaced its file since.
        helper_exe: Some(PathBuf::from("/proc/self/exe")),
    };
    sealink_tunnel::run_with(cfg, host, &run_dir, stop, opts, |info| {
        tracing::info!(
            listen = %info.listen,
            tun_offload = info.tun_offload,
            udp_gso_segments = info.udp_gso_segments,
            queues = info.queues,
            udp_sockets = info.udp_sockets,
            workers = info.workers,
            handoff = ?info.handoff,
            "tunnel up"
        );
        eprintln!("up: {}", info.name);
        // After every thread started; the control socket is served right after this returns.
        notify.ready(&info.name, info.listen);
    })?;
    Ok(())
}

/// `sealink reload CONFIG`: the tunnel started from CONFIG (resolved as `up` does) reads it
/// again and applies its peer changes; prints the tunnel's summary, or fails with its reason.
pub fn reload(config: &Path, run_dir: Option<PathBuf>) -> Result<()> {
    let run_dir = RunDir::new(run_dir);
    let resolved = lookup::resolve(config);
    if resolved != config && !resolved.exists() {
        // A bare name with no file where `up NAME` looks: the tunnel of that name, started
        // from a path, reads the file it was started from again.
        match client::reload(&run_dir, &config.to_string_lossy(), None) {
            Ok(summary) => {
                eprintln!("{summary}");
                return Ok(());
            }
            Err(ClientError::Tunnel(TunnelError::NotRunning(_))) => {} // say where no config was found
            Err(e) => return Err(e.into()),
        }
    }
    // Parsed here first: a config that does not parse never reaches the tunnel, and names it.
    let (config, cfg) = &lookup::load(config)?;
    let abs = std::fs::canonicalize(config).unwrap_or_else(|_| config.clone());
    eprintln!("{}", client::reload(&run_dir, &cfg.name, Some(&abs))?);
    Ok(())
}

pub fn down(name: &str, run_dir: Option<PathBuf>) -> Result<()> {
    match client::down(&RunDir::new(run_dir), name)? {
        client::Down::Stopped => eprintln!("down: {name}"),
        client::Down::CleanedStale => {
            eprintln!("down: {name} was not running; removed the full-tunnel rules it left")
        }
    }
    Ok(())
}

pub fn show(name: Option<&str>, run_dir: Option<PathBuf>, json: bool) -> Result<()> {
    let run_dir = RunDir::new(run_dir);
    if json {
        // One array whatever the count, each element checked against the schema.
        let all = client::show_json(&run_dir, name)?;
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        print!("{}", client::show(&run_dir, name, false)?.join("\n"));
    }
    Ok(())
}
