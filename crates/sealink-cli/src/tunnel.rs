//! `sealink up`, `sealink down`, `sealink show`: tunnel mode from the command line.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use sealink_tunnel::{Config, RunDir, TunnelError, control};

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

/// Where configs named by NAME live unless $SEALINK_CONFIG_DIR says otherwise.
const CONFIG_DIR: &str = "/etc/sealink";

/// Where wg-quick keeps its configs: `sealink up wg0` finds /etc/wireguard/wg0.conf when there
/// is no sealink config of that name.
const WG_CONFIG_DIR: &str = "/etc/wireguard";

/// The config file `sealink up ARG` reads: ARG itself when it looks like a path (it has a `/`
/// or ends in `.toml` or `.conf`), else `DIR/ARG.toml` (DIR: $SEALINK_CONFIG_DIR, else
/// /etc/sealink) or, when that does not exist, wg-quick's `/etc/wireguard/ARG.conf` (as
/// wg-quick resolves `wg-quick up wg0`).
fn resolve_config(arg: &Path, dir: Option<PathBuf>) -> PathBuf {
    resolve_config_in(arg, dir, Path::new(WG_CONFIG_DIR))
}

/// The config `up`/`reload ARG` reads ([`resolve_config`]), read and parsed. A bare name
/// with neither file says both places looked in; an error names the file once.
fn load_config(arg: &Path) -> Result<(PathBuf, Config)> {
    let dir = std::env::var_os("SEALINK_CONFIG_DIR").map(PathBuf::from);
    let path = resolve_config(arg, dir.clone());
    if path != arg && !path.exists() {
        let mut wg = arg.as_os_str().to_owned();
        wg.push(".conf");
        bail!(
            "no config for {name}: neither {ours} nor {wg} exists (or name the file: sealink up PATH)",
            name = arg.display(),
            ours = path.display(),
            wg = Path::new(WG_CONFIG_DIR).join(wg).display()
        );
    }
    match Config::from_file(&path) {
        Ok(cfg) => Ok((path, cfg)),
        // Reading it failed: the error names the file already.
        Err(e @ TunnelError::Io { .. }) => Err(e.into()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("config {}", path.display()))),
    }
}

fn resolve_config_in(arg: &Path, dir: Option<PathBuf>, wg_dir: &Path) -> PathBuf {
    let text = arg.as_os_str().as_encoded_bytes();
    if text.contains(&b'/')
        || text.ends_with(b".toml")
        || text.ends_with(b".conf")
        || text.is_empty()
    {
        return arg.to_path_buf();
    }
    let mut name = arg.as_os_str().to_owned();
    name.push(".toml");
    let ours = dir.unwrap_or_else(|| PathBuf::from(CONFIG_DIR)).join(name);
    let mut wg = arg.as_os_str().to_owned();
    wg.push(".conf");
    let wg = wg_dir.join(wg);
    if !ours.exists() && wg.exists() {
        wg
    } else {
        ours
    }
}

/// systemd's notify socket (when it started us with `Type=notify`: NOTIFY_SOCKET is set),
/// connected while `up` still runs as the user that started it: READY=1 is sent once the
/// tunnel runs as its unprivileged `user`, who may not be allowed to write the socket (the
/// permission is checked at connect). `None` without NOTIFY_SOCKET, or if it cannot be reached
/// now (then [`notify_ready`] tries again the ordinary way).
fn connect_notify() -> Option<std::os::unix::net::UnixDatagram> {
    use std::os::unix::net::UnixDatagram;
    let path = std::env::var_os("NOTIFY_SOCKET")?;
    let connect = || -> std::io::Result<UnixDatagram> {
        let sock = UnixDatagram::unbound()?;
        match path.as_encoded_bytes().strip_prefix(b"@") {
            // An abstract socket (systemd may name one so).
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                sock.connect_addr(&std::os::unix::net::SocketAddr::from_abstract_name(name)?)?
            }
            None => sock.connect(&path)?,
        }
        Ok(sock)
    };
    connect()
        .inspect_err(
            |e| tracing::warn!(error = %e, "cannot connect to NOTIFY_SOCKET during set-up"),
        )
        .ok()
}

/// Tells systemd that the tunnel is up and serving, through the socket connected during
/// set-up if there is one. Without NOTIFY_SOCKET this does nothing.
fn notify_ready(
    connected: Option<&std::os::unix::net::UnixDatagram>,
    name: &str,
    listen: std::net::SocketAddr,
) {
    let status = format!("up: {name}, listening on {listen}");
    let sent = match connected {
        Some(sock) => sock
            .send(format!("READY=1\nSTATUS={status}\n").as_bytes())
            .map(drop),
        None => sd_notify::notify(&[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status(&status),
        ]),
    };
    if let Err(e) = sent {
        tracing::warn!(error = %e, "cannot notify the service manager (NOTIFY_SOCKET)");
    }
}

/// Whether this process may create a TUN device and configure the network: root, or
/// CAP_NET_ADMIN in its effective set (`CapEff` in /proc/self/status).
fn may_admin_network() -> bool {
    const CAP_NET_ADMIN: u32 = 12;
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return true; // no /proc: let `up` try, and fail with its own reason
    };
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    // Uid: real, effective, saved, filesystem.
    let euid_root = field("Uid:").and_then(|v| v.split_whitespace().nth(1)) == Some("0");
    let net_admin = field("CapEff:")
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_NET_ADMIN) != 0);
    euid_root || net_admin
}

pub fn up(config: &Path, run_dir: Option<PathBuf>) -> Result<()> {
    if !may_admin_network() {
        // As wg-quick says it, before any file is read or made.
        bail!(
            "sealink up must be run as root (or with CAP_NET_ADMIN): it creates the TUN device, \
             addresses and routes, then runs as its unprivileged user; try sudo"
        );
    }
    let (config, cfg) = load_config(config)?;
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
    let notify = connect_notify();
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
        notify_ready(notify.as_ref(), &info.name, info.listen);
    })?;
    Ok(())
}

/// `sealink reload CONFIG`: the tunnel started from CONFIG (resolved as `up` does) reads it
/// again and applies its peer changes; prints the tunnel's summary, or fails with its reason.
pub fn reload(config: &Path, run_dir: Option<PathBuf>) -> Result<()> {
    let run_dir = RunDir::new(run_dir);
    let dir = std::env::var_os("SEALINK_CONFIG_DIR").map(PathBuf::from);
    let resolved = resolve_config(config, dir);
    if resolved != config && !resolved.exists() {
        // A bare name with no file where `up NAME` looks: the tunnel of that name, started
        // from a path, reads the file it was started from again.
        let name = config.to_string_lossy();
        match control::request(&run_dir, &name, "reload", Duration::from_secs(30)) {
            Ok(answer) => return reload_answer(&name, &answer),
            Err(TunnelError::NotRunning(_)) => {} // say where no config was found
            Err(e) => return Err(e.into()),
        }
    }
    // Parsed here first: a config that does not parse never reaches the tunnel, and names it.
    let (config, cfg) = &load_config(config)?;
    let abs = std::fs::canonicalize(config).unwrap_or_else(|_| config.clone());
    let answer = control::request(
        &run_dir,
        &cfg.name,
        &format!("reload {}", abs.display()),
        Duration::from_secs(30),
    )?;
    reload_answer(&cfg.name, &answer)
}

/// The tunnel's answer to `reload`: its summary on stderr, or its refusal as the error.
fn reload_answer(name: &str, answer: &str) -> Result<()> {
    let answer = answer.trim();
    match answer.strip_prefix("ok: ") {
        Some(msg) => {
            eprintln!("{msg}");
            Ok(())
        }
        None => bail!(
            "tunnel {name}: {}",
            answer.strip_prefix("error: ").unwrap_or(answer)
        ),
    }
}

pub fn down(name: &str, run_dir: Option<PathBuf>) -> Result<()> {
    let run_dir = RunDir::new(run_dir);
    let answer = match control::request(&run_dir, name, "down", Duration::from_secs(30)) {
        Ok(a) => a,
        // Killed together with its cleanup helper: what a full tunnel left in the routing
        // policy is undone here.
        Err(e @ TunnelError::NotRunning(_)) => {
            if sealink_tunnel::policy::clean_stale(&run_dir.dir(), name)? {
                eprintln!("down: {name} was not running; removed the full-tunnel rules it left");
                return Ok(());
            }
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
    if answer.trim() != "down" {
        bail!("tunnel {name} did not confirm it stopped: {answer:?}");
    }
    eprintln!("down: {name}");
    Ok(())
}

pub fn show(name: Option<&str>, run_dir: Option<PathBuf>, json: bool) -> Result<()> {
    let run_dir = RunDir::new(run_dir);
    let names = match name {
        Some(n) => vec![n.to_owned()],
        None => control::running(&run_dir)?,
    };
    let request = if json { "show-json" } else { "show" };
    let mut texts = Vec::new();
    for n in names {
        match control::request(&run_dir, &n, request, Duration::from_secs(5)) {
            // Refused (e.g. by peer credentials): an error, not a status.
            Ok(text) if text.starts_with("error: ") => {
                bail!("tunnel {n}: {}", text.trim_start_matches("error: ").trim());
            }
            Ok(text) => texts.push(text),
            // A socket left behind by a killed process: skip it when listing all.
            Err(TunnelError::NotRunning(_)) if name.is_none() => {}
            Err(e) => return Err(e.into()),
        }
    }
    if json {
        // One array whatever the count, each element checked against the schema.
        let all = texts
            .iter()
            .map(|t| serde_json::from_str::<control::Status>(t))
            .collect::<Result<Vec<_>, _>>()
            .context("the tunnel answered show-json with something else")?;
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        print!("{}", texts.join("\n"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_resolves_a_name_to_the_config_directory() {
        let dir = Some(PathBuf::from("/x/conf"));
        let r = |a: &str| resolve_config(Path::new(a), dir.clone());
        assert_eq!(r("sl0"), Path::new("/x/conf/sl0.toml"));
        assert_eq!(r("wg.office"), Path::new("/x/conf/wg.office.toml"));
        // Paths stay paths.
        assert_eq!(r("./sl0"), Path::new("./sl0"));
        assert_eq!(
            r("/etc/sealink/sl0.toml"),
            Path::new("/etc/sealink/sl0.toml")
        );
        assert_eq!(r("sl0.toml"), Path::new("sl0.toml"));
        assert_eq!(r("conf/sl0"), Path::new("conf/sl0"));
        assert_eq!(
            resolve_config(Path::new("sl0"), None),
            Path::new("/etc/sealink/sl0.toml")
        );
        assert_eq!(r("wg0.conf"), Path::new("wg0.conf"));
    }

    #[test]
    fn up_falls_back_to_wg_quicks_directory() {
        let d = tempfile::tempdir().unwrap();
        let (ours, wg) = (d.path().join("sealink"), d.path().join("wireguard"));
        std::fs::create_dir_all(&ours).unwrap();
        std::fs::create_dir_all(&wg).unwrap();
        std::fs::write(wg.join("wg0.conf"), "").unwrap();
        let r = |a: &str| resolve_config_in(Path::new(a), Some(ours.clone()), &wg);
        assert_eq!(r("wg0"), wg.join("wg0.conf"), "only wg-quick's exists");
        std::fs::write(ours.join("wg0.toml"), "").unwrap();
        assert_eq!(r("wg0"), ours.join("wg0.toml"), "sealink's comes first");
        assert_eq!(
            r("wg1"),
            ours.join("wg1.toml"),
            "neither: sealink's is named"
        );
    }
}
