//! The set-up of `bench peers`: two network namespaces joined by a veth pair, the hub's config
//! and keys, and the hub process itself (`sealink up`, or wireguard-go configured by `wg`),
//! with what is measured of it from outside: the time to come up, to `show`, to reload, and
//! its resident memory.
//!
//! ```text
//! ns GEN (the generator's thread)               ns HUB
//!   10.250.0.2/24 veth ------------------------ veth 10.250.0.1/24
//!   local 10.252.0.0/16 (peers' sources)          hub :51820, tunnel 10.128.0.1/9
//!   local 10.251.0.0/16 (flood sources)           routes to both via 10.250.0.2
//! ```
//!
//! Peer `i` of the config has the tunnel address 10.128.0.0 + 2 + i (`/32`), inside the
//! interface's network, so that neither hub needs a route per peer. Each driven peer sends
//! from an address of its own in 10.252.0.0/16 (`--shared-source`: all from 10.250.0.2, each
//! from a port of its own), bound without being assigned: the generator's namespace routes the
//! /16 to itself as local (AnyIP).

use std::fmt::Write as _;
use std::fs;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

use crate::error::{Error, Result};

pub const HUB_PORT: u16 = 51820;
pub const HUB_VETH: Ipv4Addr = Ipv4Addr::new(10, 250, 0, 1);
pub const GEN_VETH: Ipv4Addr = Ipv4Addr::new(10, 250, 0, 2);
pub const HUB_INNER: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 1);
/// The flood's source addresses: 10.251.0.0/16.
pub const FLOOD_NET: [u8; 2] = [10, 251];
/// Peers' source addresses, one each: 10.252.0.0/16.
const PEER_NET: u32 = 0x0AFC_0000;
/// Peers that get an address of their own; the rest share them in turn.
pub const PEER_ADDRESSES: usize = 65_000;

/// The source address of driven peer `i`: one of its own in 10.252.0.0/16 (a handshake
/// limiter keys on the source address, as WireGuard's does), or [`GEN_VETH`] for all with
/// `shared`.
pub fn source_addr(i: usize, shared: bool) -> Ipv4Addr {
    if shared {
        return GEN_VETH;
    }
    Ipv4Addr::from(PEER_NET + 1 + (i % PEER_ADDRESSES) as u32)
}

/// The tunnel address of configured peer `i`.
pub fn inner_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(HUB_INNER) + 1 + i as u32)
}

pub fn b64(k: &[u8; 32]) -> String {
    B64.encode(k)
}

fn run(prog: &str, args: &[&str]) -> Result<Output> {
    Command::new(prog)
        .args(args)
        .output()
        .map_err(|e| Error::bench_by(format!("cannot run {prog}"), e))
}

fn ok(prog: &str, args: &[&str]) -> Result<Output> {
    let o = run(prog, args)?;
    if !o.status.success() {
        return Err(Error::bench(format!(
            "{prog} {}: {}: {}",
            args.join(" "),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )));
    }
    Ok(o)
}

/// The two namespaces and their veth pair, deleted on drop.
#[derive(Debug)]
pub struct Namespaces {
    pub hub: String,
    pub gen_ns: String,
}

impl Namespaces {
    pub fn new(tag: &str) -> Result<Namespaces> {
        let ns = Namespaces {
            hub: format!("slph{tag}"),
            gen_ns: format!("slpg{tag}"),
        };
        let o = run("ip", &["netns", "add", &ns.hub])?;
        if !o.status.success() {
            return Err(Error::bench(format!(
                "bench peers needs root and network namespaces: ip netns add failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )));
        }
        ok("ip", &["netns", "add", &ns.gen_ns])?;
        let (vh, vg) = (format!("slph{tag}v"), format!("slpg{tag}v"));
        ok(
            "ip",
            &[
                "link", "add", &vh, "netns", &ns.hub, "type", "veth", "peer", "name", &vg, "netns",
                &ns.gen_ns,
            ],
        )?;
        let h = ns.hub.clone();
        let g = ns.gen_ns.clone();
        for (n, dev, addr) in [(&h, &vh, "10.250.0.1/24"), (&g, &vg, "10.250.0.2/24")] {
            ns.exec(n, &["ip", "addr", "add", addr, "dev", dev])?;
            ns.exec(n, &["ip", "link", "set", dev, "up"])?;
            ns.exec(n, &["ip", "link", "set", "lo", "up"])?;
        }
        for net in ["10.251.0.0/16", "10.252.0.0/16"] {
            ns.exec(&g, &["ip", "route", "add", "local", net, "dev", "lo"])?;
            ns.exec(&h, &["ip", "route", "add", net, "via", "10.250.0.2"])?;
        }
        Ok(ns)
    }

    /// Runs `args` in namespace `ns`.
    pub fn exec(&self, ns: &str, args: &[&str]) -> Result<Output> {
        let mut a = vec!["netns", "exec", ns];
        a.extend_from_slice(args);
        ok("ip", &a)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in [&self.hub, &self.gen_ns] {
            let _ = run("ip", &["netns", "del", n]);
        }
    }
}

/// A UDP counter of namespace `ns`'s /proc/net/snmp (`RcvbufErrors`, `InErrors`...); 0 when
/// it cannot be read.
pub fn udp_counter(ns: &str, name: &str) -> u64 {
    let Ok(o) = run("ip", &["netns", "exec", ns, "cat", "/proc/net/snmp"]) else {
        return 0;
    };
    let text = String::from_utf8_lossy(&o.stdout);
    let mut udp = text.lines().filter(|l| l.starts_with("Udp: "));
    let (Some(head), Some(vals)) = (udp.next(), udp.next()) else {
        return 0;
    };
    head.split_whitespace()
        .zip(vals.split_whitespace())
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// Runs `f` on a thread that entered network namespace `ns` (what it opens stays there).
pub fn in_namespace<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let path = format!("/run/netns/{ns}");
    thread::Builder::new()
        .name("peers-gen".into())
        .spawn(move || {
            let fd = fs::File::open(&path).map_err(Error::io("open", &path))?;
            rustix::thread::move_into_link_name_space(
                fd.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .map_err(|e| Error::bench_by(format!("setns {path}"), std::io::Error::from(e)))?;
            f()
        })
        .map_err(|e| Error::bench_by("start the generator's thread", e))?
        .join()
        .map_err(|_| Error::bench("the generator's thread panicked"))?
}

/// Lowers the calling thread's scheduling priority by `nice` (at most to 19): the storm's
/// initiators, who stand for other machines, and whose public-key work must not delay the
/// loop that times the established peers' echoes (nor the hub's data path) on the same cores
/// more than another host's would. A failure leaves the thread as it was.
pub fn lower_this_thread(nice: i32) {
    let me = rustix::thread::gettid();
    let _ = rustix::process::getpriority_process(Some(me))
        .and_then(|n| rustix::process::setpriority_process(Some(me), (n + nice).min(19)));
}

/// Resident memory of process `pid`, in bytes.
pub fn rss(pid: u32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Which hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HubKind {
    /// `sealink up` on sealink's wire.
    Sealink,
    /// `sealink up` on WireGuard's wire.
    SealinkWg,
    /// wireguard-go, configured by `wg setconf`.
    WireGuardGo,
}

impl HubKind {
    pub fn name(self) -> &'static str {
        match self {
            HubKind::Sealink => "sealink",
            HubKind::SealinkWg => "sealink-wg",
            HubKind::WireGuardGo => "wireguard-go",
        }
    }
}

/// The programs the hubs run.
#[derive(Debug, Clone)]
pub struct Programs {
    pub sealink: PathBuf,
    pub wireguard_go: Option<PathBuf>,
    pub wg: Option<PathBuf>,
}

/// The peers a hub's config lists: public keys, in order (peer `i` gets [`inner_addr`]`(i)`).
pub struct HubFiles {
    pub dir: PathBuf,
    pub name: String,
    pub hub_private: [u8; 32],
    /// The hub's own REKEY_AFTER_TIME in seconds, for a rekey storm (sealink's hub built with
    /// the test-only feature `sealink-tunnel/test-timers` honours it; others ignore it).
    pub hub_rekey_after: Option<f64>,
}

sealink_crypto::debug_showing!(HubFiles { dir, name });

fn write_private(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).map_err(Error::io("write", path))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(Error::io("chmod", path))
}

impl HubFiles {
    /// The config of `kind` listing `peers` (public key, index for the address) at `path`.
    pub fn write_config(
        &self,
        kind: HubKind,
        path: &Path,
        peers: &[(usize, [u8; 32])],
    ) -> Result<()> {
        let mut s = String::with_capacity(peers.len() * 120 + 512);
        match kind {
            HubKind::Sealink | HubKind::SealinkWg => {
                let key = self.dir.join(match kind {
                    HubKind::Sealink => "hub.key",
                    _ => "hub-wg.key",
                });
                let _ = write!(
                    s,
                    "[interface]\nname = \"{}\"\nprivate_key = \"{}\"\naddress = \"{HUB_INNER}/9\"\n\
                     listen_port = {HUB_PORT}\nuser = \"root\"\n",
                    self.name,
                    key.display()
                );
                if kind == HubKind::SealinkWg {
                    s.push_str("protocol = \"wireguard\"\n");
                }
                for (i, k) in peers {
                    let _ = write!(
                        s,
                        "\n[[peer]]\nname = \"p{i}\"\npublic_key = \"{}\"\nallowed_ips = [\"{}/32\"]\n",
                        b64(k),
                        inner_addr(*i)
                    );
                }
            }
            HubKind::WireGuardGo => {
                let _ = write!(
                    s,
                    "[Interface]\nPrivateKey = {}\nListenPort = {HUB_PORT}\n",
                    b64(&self.hub_private)
                );
                for (i, k) in peers {
                    let _ = write!(
                        s,
                        "\n[Peer]\nPublicKey = {}\nAllowedIPs = {}/32\n",
                        b64(k),
                        inner_addr(*i)
                    );
                }
            }
        }
        write_private(path, &s)
    }
}

/// A running hub.
#[derive(Debug)]
pub struct Hub {
    pub kind: HubKind,
    child: Option<Child>,
    ns: String,
    name: String,
    run_dir: PathBuf,
    progs: Programs,
    log: PathBuf,
}

/// How long a hub may take to come up.
const UP_TIMEOUT: Duration = Duration::from_secs(300);

impl Hub {
    /// Starts the hub of `kind` in `ns` on config `conf`; returns it with the time until it
    /// answers `show` (sealink) or until `wg setconf` returned (wireguard-go).
    pub fn start(
        kind: HubKind,
        ns: &str,
        files: &HubFiles,
        conf: &Path,
        progs: &Programs,
    ) -> Result<(Hub, Duration)> {
        let run_dir = files.dir.join("run");
        // SEALINK_PEERS_HUB_LOG=FILTER: the hub logs at that level (its RUST_LOG) into
        // /tmp/sealink-peers-KIND.log, kept after the run.
        let hub_log = std::env::var("SEALINK_PEERS_HUB_LOG").ok();
        let log = match &hub_log {
            Some(_) => std::env::temp_dir().join(format!("sealink-peers-{}.log", kind.name())),
            None => files.dir.join(format!("{}.log", kind.name())),
        };
        let logf = fs::File::create(&log).map_err(Error::io("create", &log))?;
        let t0 = Instant::now();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns]);
        match kind {
            HubKind::Sealink | HubKind::SealinkWg => {
                cmd.arg(&progs.sealink).arg("up").arg(conf);
                if let Some(s) = files.hub_rekey_after {
                    cmd.env("SEALINK_TEST_REKEY_AFTER", s.to_string());
                }
            }
            HubKind::WireGuardGo => {
                let go = progs
                    .wireguard_go
                    .as_ref()
                    .ok_or_else(|| Error::bench("wireguard-go not found"))?;
                cmd.arg(go).args(["-f", &files.name]);
                cmd.env("WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD", "1");
            }
        }
        match &hub_log {
            Some(f) => cmd.env("RUST_LOG", f),
            None => cmd.env_remove("RUST_LOG"),
        };
        let child = cmd
            .env("SEALINK_RUN_DIR", &run_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf)
            .spawn()
            .map_err(|e| Error::bench_by(format!("cannot start the {} hub", kind.name()), e))?;
        let mut hub = Hub {
            kind,
            child: Some(child),
            ns: ns.to_owned(),
            name: files.name.clone(),
            run_dir,
            progs: progs.clone(),
            log,
        };
        match kind {
            HubKind::Sealink | HubKind::SealinkWg => {
                while hub.show().is_err() {
                    hub.check_alive(t0)?;
                    thread::sleep(Duration::from_millis(10));
                }
            }
            HubKind::WireGuardGo => {
                let sock = PathBuf::from(format!("/var/run/wireguard/{}.sock", files.name));
                while !sock.exists() {
                    hub.check_alive(t0)?;
                    thread::sleep(Duration::from_millis(10));
                }
                hub.wg(&["setconf", &files.name, &conf.to_string_lossy()])?;
                let dev = files.name.as_str();
                let exec = |args: &[&str]| -> Result<()> {
                    let mut a = vec!["netns", "exec", ns];
                    a.extend_from_slice(args);
                    ok("ip", &a).map(|_| ())
                };
                exec(&["ip", "addr", "add", &format!("{HUB_INNER}/9"), "dev", dev])?;
                exec(&["ip", "link", "set", dev, "mtu", "1420", "up"])?;
            }
        }
        Ok((hub, t0.elapsed()))
    }

    fn check_alive(&mut self, t0: Instant) -> Result<()> {
        let exited = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten());
        if let Some(st) = exited {
            let log = fs::read_to_string(&self.log).unwrap_or_default();
            return Err(Error::bench(format!(
                "the {} hub exited ({st}) before it came up: {}",
                self.kind.name(),
                log.trim()
            )));
        }
        if t0.elapsed() > UP_TIMEOUT {
            return Err(Error::bench(format!(
                "the {} hub is not up after {UP_TIMEOUT:?}",
                self.kind.name()
            )));
        }
        Ok(())
    }

    fn wg(&self, args: &[&str]) -> Result<Output> {
        let wg = self
            .progs
            .wg
            .as_ref()
            .ok_or_else(|| Error::bench("wg not found"))?;
        let mut a = vec!["netns", "exec", &self.ns];
        let w = wg.to_string_lossy();
        a.push(&w);
        a.extend_from_slice(args);
        ok("ip", &a)
    }

    /// One `sealink show NAME --json` or `wg show NAME dump`; its output.
    pub fn show(&self) -> Result<Output> {
        match self.kind {
            HubKind::Sealink | HubKind::SealinkWg => {
                let o = Command::new("ip")
                    .args(["netns", "exec", &self.ns])
                    .arg(&self.progs.sealink)
                    .args(["show", &self.name, "--json"])
                    .env("SEALINK_RUN_DIR", &self.run_dir)
                    .output()
                    .map_err(|e| Error::bench_by("cannot run sealink show", e))?;
                if o.status.success() {
                    Ok(o)
                } else {
                    Err(Error::bench(format!(
                        "sealink show: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    )))
                }
            }
            HubKind::WireGuardGo => self.wg(&["show", &self.name, "dump"]),
        }
    }

    /// Loads `conf` into the running hub (`sealink reload`, `wg syncconf`); the time it took.
    pub fn reload(&self, conf: &Path) -> Result<Duration> {
        let t0 = Instant::now();
        match self.kind {
            HubKind::Sealink | HubKind::SealinkWg => {
                let o = Command::new("ip")
                    .args(["netns", "exec", &self.ns])
                    .arg(&self.progs.sealink)
                    .arg("reload")
                    .arg(conf)
                    .env("SEALINK_RUN_DIR", &self.run_dir)
                    .output()
                    .map_err(|e| Error::bench_by("cannot run sealink reload", e))?;
                if !o.status.success() {
                    return Err(Error::bench(format!(
                        "sealink reload: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    )));
                }
            }
            HubKind::WireGuardGo => {
                self.wg(&["syncconf", &self.name, &conf.to_string_lossy()])?;
            }
        }
        Ok(t0.elapsed())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn rss(&self) -> Option<u64> {
        rss(self.pid()?)
    }

    /// CPU seconds (user + system) the hub has used so far.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let s = fs::read_to_string(format!("/proc/{}/stat", self.pid()?)).ok()?;
        let rest = s.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
        Some(ticks / 100.0)
    }

    /// Stops the hub (SIGTERM, then SIGKILL after 5 s).
    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let t0 = Instant::now();
        while c.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(5) {
            thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
        if self.kind == HubKind::WireGuardGo {
            let _ = fs::remove_file(format!("/var/run/wireguard/{}.sock", self.name));
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `name` on the PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The hub's key files: a sealink host key file (`sealink keygen host`) for sealink's wire, and
/// `private` as base64 (as `wg genkey` writes it) for WireGuard's; the public key of the first.
pub fn write_hub_keys(dir: &Path, sealink: &Path, private: &[u8; 32]) -> Result<[u8; 32]> {
    let key = dir.join("hub.key");
    let o = Command::new(sealink)
        .args(["keygen", "host"])
        .arg(&key)
        .output()
        .map_err(|e| Error::bench_by(format!("cannot run {}", sealink.display()), e))?;
    if !o.status.success() {
        return Err(Error::bench(format!(
            "sealink keygen host: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )));
    }
    let pub_path = dir.join("hub.key.pub");
    let text = fs::read_to_string(&pub_path).map_err(Error::io("read", &pub_path))?;
    let field = text
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| Error::bench(format!("no key in {}", pub_path.display())))?;
    let bytes = B64
        .decode(field)
        .map_err(|e| Error::bench_by(format!("the key in {}", pub_path.display()), e))?;
    let public: [u8; 32] = bytes
        .try_into()
        .map_err(|_| Error::bench(format!("the key in {} is not 32 bytes", pub_path.display())))?;
    write_private(&dir.join("hub-wg.key"), &format!("{}\n", b64(private)))?;
    Ok(public)
}
