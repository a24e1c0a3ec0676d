//! `sealink-lab bench peers` (issue 50): a hub with many configured peers, driven by a load
//! generator of simulated peers over real UDP, side by side with wireguard-go on WireGuard's
//! wire.
//!
//! One process sets up two network namespaces ([`lab`]), writes a hub config listing `--peers`
//! peers (keys made here: real key pairs for the peers it drives, random public keys for the
//! rest) and starts the hub in one namespace: `sealink up`, and with `--wire wg` also
//! wireguard-go configured by `wg setconf` with the same peers, one after the other. In the
//! other namespace one thread ([`loadgen`]) drives `--active` peers, each a sans-IO [`Tunnel`] core
//! of its own (sealink's wire or WireGuard's, the product's own core) on a UDP socket of its
//! own, and measures, per hub:
//! - resident memory with no peer and with `--peers`, and the bytes per idle peer;
//! - the time to come up (until `show --json` answers; wireguard-go: until `wg setconf`
//!   returned), and one `show --json` (`wg show dump`);
//! - handshakes completed per second when the active peers all start at once;
//! - the active peers' echo loss and round trips (ICMP echo to the hub's tunnel address,
//!   answered by the hub's kernel through the tunnel) while quiet, during a storm of `--storm`
//!   more peers handshaking at once, during a flood of `--flood` initiations a second from
//!   spoofed sources (from keys the hub does not know, with valid mac1), and during a reload
//!   that removes `--reload` idle peers and adds as many new ones;
//! - UDP receive-buffer overflows in either namespace during each phase (a loss that is the
//!   link's or the generator's, not the hub's).
//!
//! [`Tunnel`]: sealink_proto::tunnel::Tunnel

pub mod lab;
pub mod loadgen;
mod probe;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use sealink_proto::HostKey;
use sealink_proto::sim::SimRng;

use crate::error::{Error, Result};
use crate::report::{RunRecord, Table};
use lab::{HubFiles, HubKind, Namespaces, Programs};
use loadgen::{Driver, EchoPlan, Flood, WireKind};
use probe::{NsRef, Probe, echo_result, echo_window, probe};

/// What `bench peers` is asked to do.
#[derive(Debug, Clone)]
pub struct Params {
    /// Peers in the hub's config.
    pub peers: usize,
    /// Peers the generator drives (the first of the config).
    pub active: usize,
    /// Echo requests a second per active peer.
    pub rate: f64,
    /// Seconds of each measured phase.
    pub duration: f64,
    pub wire: WireKind,
    /// Idle peers that handshake at once during the storm phase (0: none).
    pub storm: usize,
    /// Initiations a second from spoofed sources during the flood phase (0: none).
    pub flood: u64,
    /// Peers removed and as many added by the reload phase (0: none).
    pub reload: usize,
    /// Seconds after the bring-up at which every active peer rekeys (0: no rekey storm). The
    /// driven peers' REKEY_AFTER_TIME is set to it; their sessions, made together at the
    /// bring-up, then all start a new handshake within the same fraction of a second.
    pub rekey_storm: f64,
    /// Seconds the handshakes of a bring-up or storm may take.
    pub handshake_timeout: f64,
    /// The echo loop does the active peers' handshake work itself (as before the worker), to
    /// measure what that costs the echoes' timing.
    pub inline_handshakes: bool,
    /// Also run wireguard-go (with `--wire wg`).
    pub wireguard_go: bool,
    /// All driven peers send from one address (each from a port of its own).
    pub shared_source: bool,
    pub programs: Programs,
    /// Print the result as JSON on stdout instead of tables.
    pub json: bool,
    pub out: PathBuf,
}

/// One window of echoes from the established peers.
#[derive(Debug, Clone, Serialize)]
pub struct EchoResult {
    pub sent: u64,
    pub received: u64,
    pub not_sent: u64,
    pub loss_percent: f64,
    pub rtt_p50_ms: f64,
    pub rtt_p99_ms: f64,
    /// UDP receive-buffer overflows in the hub's namespace during the window.
    pub hub_rcvbuf_errors: u64,
    /// ...and in the generator's (its own sockets).
    pub gen_rcvbuf_errors: u64,
    /// CPU seconds the hub used during the window.
    pub hub_cpu_seconds: f64,
    /// Packets the kernel dropped on the hub's tunnel interface during the window: received
    /// from the hub (written to it), and to be sent (its transmit queue, which the hub reads,
    /// full).
    pub tun_rx_dropped: u64,
    pub tun_tx_dropped: u64,
    /// The hub's drop counters that grew during the window (sealink only).
    pub hub_drops: BTreeMap<String, u64>,
    /// Milliseconds the generator's echo loop spent on its peers' handshake work during the
    /// window (echo replies wait meanwhile), and its longest single piece; and the
    /// milliseconds its handshake worker worked (the work moved off the loop).
    pub gen_loop_handshake_ms: f64,
    pub gen_loop_handshake_max_ms: f64,
    pub gen_worker_ms: f64,
    /// CPU seconds of the generator's flood thread (the flood window only).
    pub gen_flood_cpu_seconds: f64,
}

/// Peers that started their handshakes at once.
#[derive(Debug, Clone, Serialize)]
pub struct HandshakeResult {
    pub peers: usize,
    pub completed: usize,
    /// From the first initiation to the last session up.
    pub seconds: f64,
    pub per_second: f64,
    /// Each peer's time from its first packet to its session, median and 99th percentile.
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    /// Peers that sent more than one initiation (a retry: an initiation or its answer lost,
    /// or late past the retry timeout: 1 s on sealink's wire, 5 s on WireGuard's).
    pub retried: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct HubResult {
    pub hub: String,
    pub rss_empty_bytes: u64,
    pub rss_configured_bytes: u64,
    pub bytes_per_idle_peer: f64,
    pub up_empty_seconds: f64,
    pub up_seconds: f64,
    pub show_seconds: f64,
    pub bringup: HandshakeResult,
    pub quiet: EchoResult,
    pub storm: Option<(HandshakeResult, EchoResult)>,
    /// Initiations sent, and the window's echoes.
    pub flood: Option<(u64, EchoResult)>,
    /// Seconds the reload took, the window's echoes, and the active peers that handshook
    /// again during it (a dropped session shows here or as loss).
    pub reload: Option<(f64, EchoResult, usize)>,
    /// The rekey storm's window: its echoes, the active peers that rekeyed in it, and the
    /// seconds from the first new session to the last.
    pub rekey: Option<(EchoResult, usize, f64)>,
    pub rss_after_bytes: u64,
    /// Active peers that got at least one echo reply over the whole run.
    pub active_with_replies: usize,
    pub hub_cpu_seconds: f64,
    pub gen_send_errors: u64,
    pub gen_refused: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PeersResult {
    pub wire: String,
    pub shared_source: bool,
    pub peers: usize,
    pub active: usize,
    pub rate: f64,
    pub duration: f64,
    pub storm: usize,
    pub flood: u64,
    pub reload: usize,
    pub rekey_storm: f64,
    pub load_before: String,
    pub load_after: String,
    pub hubs: Vec<HubResult>,
    /// Hubs that could not be measured, and why.
    pub not_measured: Vec<String>,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn check(p: &Params) -> Result<()> {
    let bad = |m: String| Err(Error::Usage(m));
    if p.peers == 0 || p.peers > 1_000_000 {
        return bad(format!(
            "--peers must be within 1..=1000000, got {}",
            p.peers
        ));
    }
    if p.active == 0 || p.active > p.peers {
        return bad(format!(
            "--active must be within 1..=--peers ({}), got {}",
            p.peers, p.active
        ));
    }
    if p.active + p.storm > p.peers {
        return bad(format!(
            "--active + --storm ({}) exceed --peers ({})",
            p.active + p.storm,
            p.peers
        ));
    }
    if p.reload > p.peers - p.active - p.storm {
        return bad(format!(
            "--reload ({}) exceeds the idle peers ({}: --peers less --active and --storm)",
            p.reload,
            p.peers - p.active - p.storm
        ));
    }
    if p.rekey_storm != 0.0 && !(p.rekey_storm >= p.duration + 2.0 && p.rekey_storm < 170.0) {
        return bad(format!(
            "--rekey-storm must be 0 (none) or within [--duration + 2, 170) seconds (after the \
             quiet window, before REJECT_AFTER_TIME), got {}",
            p.rekey_storm
        ));
    }
    if !(p.rate > 0.0 && p.rate <= 10_000.0) {
        return bad(format!("--rate must be within (0, 10000], got {}", p.rate));
    }
    if !(p.duration > 0.0 && p.duration <= 600.0) {
        return bad(format!(
            "--duration must be within (0, 600], got {}",
            p.duration
        ));
    }
    if p.wireguard_go && p.wire == WireKind::Sealink {
        return bad("wireguard-go speaks WireGuard's wire only: use --wire wg".into());
    }
    Ok(())
}

/// The keys of a run: real pairs for the peers driven, random public keys for the rest.
struct Keys {
    driven: Vec<HostKey>,
    /// Public keys of configured peers 0..peers, then of the peers a reload adds.
    public: Vec<[u8; 32]>,
}

fn make_keys(p: &Params) -> Result<Keys> {
    let driven_n = p.active + p.storm;
    let mut driven = Vec::with_capacity(driven_n);
    for _ in 0..driven_n {
        driven.push(HostKey::generate()?);
    }
    let mut rng = SimRng::new(super::random_seed()?);
    let mut public: Vec<[u8; 32]> = driven.iter().map(|k| *k.public()).collect();
    while public.len() < p.peers + p.reload {
        let mut k = [0u8; 32];
        super::fill(&mut rng, &mut k);
        public.push(k);
    }
    Ok(Keys { driven, public })
}

/// Runs `sealink-lab bench peers`.
pub fn run(p: &Params) -> Result<()> {
    check(p)?;
    let load_before = loadavg();
    let tag = format!("{}", std::process::id() % 100_000);
    let scratch = tempdir()?;
    let dir = scratch.0.clone();
    let hub_key = HostKey::generate()?;
    let sealink_public = lab::write_hub_keys(&dir, &p.programs.sealink, hub_key.private())?;
    let files = Arc::new(HubFiles {
        dir: dir.clone(),
        name: format!("slp{tag}"),
        hub_private: *hub_key.private(),
        hub_rekey_after: (p.rekey_storm > 0.0).then_some(p.rekey_storm),
    });
    let keys = Arc::new(make_keys(p)?);
    let ns = Namespaces::new(&tag)?;
    let hubs: Vec<HubKind> = match p.wire {
        WireKind::Sealink => vec![HubKind::Sealink],
        WireKind::WireGuard if p.wireguard_go => vec![HubKind::SealinkWg, HubKind::WireGuardGo],
        WireKind::WireGuard => vec![HubKind::SealinkWg],
    };
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    for kind in hubs {
        let hub_public = match kind {
            HubKind::Sealink => sealink_public,
            _ => *hub_key.public(),
        };
        tracing::info!(hub = kind.name(), "measuring");
        let (p2, files2, keys2) = (p.clone(), files.clone(), keys.clone());
        let (hub_ns, gen_ns) = (ns.hub.clone(), ns.gen_ns.clone());
        let r = lab::in_namespace(&ns.gen_ns, move || {
            let nsr = NsRef {
                hub: hub_ns,
                gen_ns,
                dev: files2.name.clone(),
            };
            measure_hub(&p2, kind, &nsr, &files2, &keys2, hub_public)
        });
        match r {
            Ok(r) => results.push(r),
            // wireguard-go failing (it holds at most 65,536 peers) leaves sealink's figures.
            Err(e) if kind == HubKind::WireGuardGo && !results.is_empty() => {
                let msg = crate::error::chain(&e);
                tracing::warn!("wireguard-go not measured: {msg}");
                skipped.push(format!("{}: {msg}", kind.name()));
            }
            Err(e) => return Err(e),
        }
    }
    drop(ns);
    let result = PeersResult {
        wire: p.wire.name().into(),
        shared_source: p.shared_source,
        peers: p.peers,
        active: p.active,
        rate: p.rate,
        duration: p.duration,
        storm: p.storm,
        flood: p.flood,
        reload: p.reload,
        rekey_storm: p.rekey_storm,
        load_before,
        load_after: loadavg(),
        hubs: results,
        not_measured: skipped,
    };
    report(p, &result)
}

/// A private scratch directory, removed on drop.
struct TempDir(PathBuf);

fn tempdir() -> Result<TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let d = std::env::temp_dir().join(format!("sealink-peers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).map_err(Error::io("create", &d))?;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700))
        .map_err(Error::io("chmod", &d))?;
    Ok(TempDir(d))
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts the handshakes of `peers` at once (one echo each, into phase `phase`) and runs until
/// they are all up, or `timeout`, sending the echoes of `plan` meanwhile.
fn handshake_all(
    d: &mut Driver,
    peers: &[usize],
    phase: usize,
    plan: Option<&EchoPlan>,
    min: Duration,
    timeout: Duration,
) -> Result<HandshakeResult> {
    let t0 = Instant::now();
    for &i in peers {
        d.send_echo(i, phase);
    }
    let list = peers.to_vec();
    d.run(t0 + timeout, plan, |d| {
        t0.elapsed() >= min && list.iter().all(|&i| d.established(i))
    })?;
    let mut lat = Vec::new();
    let mut last = t0;
    for &i in peers {
        if let (Some(k), Some(e)) = d.handshake_times(i) {
            lat.push(e.duration_since(k).as_secs_f64() * 1000.0);
            last = last.max(e);
        }
    }
    let seconds = last.duration_since(t0).as_secs_f64();
    let q = |v: &[f64], q: f64| {
        if v.is_empty() {
            return f64::NAN;
        }
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[((v.len() as f64 - 1.0) * q).round() as usize]
    };
    Ok(HandshakeResult {
        peers: peers.len(),
        completed: lat.len(),
        seconds,
        per_second: lat.len() as f64 / seconds,
        latency_p50_ms: q(&lat, 0.5),
        latency_p99_ms: q(&lat, 0.99),
        retried: peers.iter().filter(|&&i| d.initiations(i) > 1).count(),
    })
}

/// Nice increment of the storm's generator thread (its peers stand for other hosts).
const STORM_NICE: i32 = 10;

/// What every phase of one hub's measurement needs.
struct Phase<'a> {
    p: &'a Params,
    nsr: &'a NsRef,
    hub: &'a lab::Hub,
    active: &'a [usize],
    window: Duration,
    hs_timeout: Duration,
}

impl Phase<'_> {
    fn plan(&self, phase: usize) -> EchoPlan {
        EchoPlan {
            peers: self.active.to_vec(),
            rate: self.p.rate,
            phase,
        }
    }

    /// Active peers whose completed handshakes grew past `before`.
    fn redone(&self, d: &Driver, before: &[u64]) -> usize {
        self.active
            .iter()
            .zip(before)
            .filter(|(i, b)| d.handshakes(**i) > **b)
            .count()
    }
}

/// Starts the hub of `kind` with no peer (its own memory), then with the `--peers` of the
/// run: the hub, its config file, and (RSS empty, up empty, RSS configured, up, show).
fn start_hub(
    p: &Params,
    kind: HubKind,
    nsr: &NsRef,
    files: &HubFiles,
    keys: &Keys,
) -> Result<(lab::Hub, PathBuf, [f64; 5])> {
    let dir = &files.dir;
    let ext = match kind {
        HubKind::WireGuardGo => "conf",
        _ => "toml",
    };
    let empty = dir.join(format!("{}-empty.{ext}", kind.name()));
    files.write_config(kind, &empty, &[])?;
    let (mut h0, up_empty) = lab::Hub::start(kind, &nsr.hub, files, &empty, &p.programs)?;
    std::thread::sleep(Duration::from_millis(300));
    let rss_empty = h0.rss().unwrap_or(0);
    h0.stop();
    drop(h0);

    let conf = dir.join(format!("{}.{ext}", kind.name()));
    let listed: Vec<(usize, [u8; 32])> =
        keys.public[..p.peers].iter().copied().enumerate().collect();
    files.write_config(kind, &conf, &listed)?;
    let (hub, up) = lab::Hub::start(kind, &nsr.hub, files, &conf, &p.programs)?;
    std::thread::sleep(Duration::from_millis(300));
    let rss_configured = hub.rss().unwrap_or(0);
    let t = Instant::now();
    hub.show()?;
    let show = t.elapsed();
    let figures = [
        rss_empty as f64,
        up_empty.as_secs_f64(),
        rss_configured as f64,
        up.as_secs_f64(),
        show.as_secs_f64(),
    ];
    Ok((hub, conf, figures))
}

/// The generator's two drivers: the active peers', and the storm peers' (a thread of their
/// own, so that their handshakes' public-key work in the generator does not hold up the loop
/// that times the echoes).
fn drivers(
    p: &Params,
    kind: HubKind,
    keys: &Keys,
    hub_public: [u8; 32],
) -> Result<(Driver, Driver)> {
    let hub_addr = std::net::SocketAddr::from((lab::HUB_VETH, lab::HUB_PORT));
    let wire = match kind {
        HubKind::Sealink => WireKind::Sealink,
        _ => WireKind::WireGuard,
    };
    let seed = super::random_seed()? as u32;
    // The active peers' handshake work goes to a worker thread (unless asked not to), so that
    // the echo loop stamps their echoes on time; the storm's driver is a thread of its own.
    let worker = !p.inline_handshakes;
    let mut d = Driver::new(wire, hub_addr, hub_public, lab::HUB_INNER, seed, worker)?;
    let mut ds = Driver::new(
        wire,
        hub_addr,
        hub_public,
        lab::HUB_INNER,
        seed ^ 0x5707,
        false,
    )?;
    if p.rekey_storm > 0.0 {
        d.set_rekey_after(Duration::from_secs_f64(p.rekey_storm));
    }
    for (i, k) in keys.driven.iter().enumerate() {
        let at = (lab::inner_addr(i), lab::source_addr(i, p.shared_source));
        if i < p.active {
            d.add_peer(k.clone(), at.0, at.1)?;
        } else {
            ds.add_peer(k.clone(), at.0, at.1)?;
        }
    }
    Ok((d, ds))
}

/// The rekey storm's window: echoes go on (not counted) until half a second before the first
/// session reaches its rekey time; the window then runs until every active peer rekeyed and at
/// least `--duration` (at most the handshake timeout). Its phase, probe, the peers that
/// rekeyed, and the seconds from the first new session to the last.
fn rekey_phase(
    ph: &Phase<'_>,
    d: &mut Driver,
    bringup_at: Instant,
) -> Result<(usize, Probe, usize, f64)> {
    let rekey_after = Duration::from_secs_f64(ph.p.rekey_storm);
    let warm = ph.plan(d.phase());
    d.run(
        bringup_at + rekey_after - Duration::from_millis(500),
        Some(&warm),
        |_| false,
    )?;
    let before_hs: Vec<u64> = ph.active.iter().map(|&i| d.handshakes(i)).collect();
    let phase = d.phase();
    let before = probe(ph.nsr, ph.hub);
    let plan = ph.plan(phase);
    let t0 = Instant::now();
    let (mut first, mut last) = (None, None);
    let n = ph.active.len();
    d.run(t0 + ph.window.max(ph.hs_timeout), Some(&plan), |d| {
        let done = ph.redone(d, &before_hs);
        if done > 0 && first.is_none() {
            first = Some(t0.elapsed());
        }
        if done == n && last.is_none() {
            last = Some(t0.elapsed());
        }
        done == n && t0.elapsed() >= ph.window
    })?;
    let after = probe(ph.nsr, ph.hub);
    let spread = match (first, last) {
        (Some(f), Some(l)) => (l - f).as_secs_f64(),
        _ => f64::NAN,
    };
    Ok((
        phase,
        after.since(&before),
        ph.redone(d, &before_hs),
        spread,
    ))
}

/// `--storm` more peers (driver `ds`) handshake at once while the active peers echo.
fn storm_phase(
    ph: &Phase<'_>,
    d: &mut Driver,
    ds: &mut Driver,
) -> Result<(HandshakeResult, usize, Probe)> {
    let storm_peers: Vec<usize> = (0..ph.p.storm).collect();
    let phase = d.phase();
    let setup = ds.phase();
    let before = probe(ph.nsr, ph.hub);
    let plan = ph.plan(phase);
    let t0 = Instant::now();
    let hs_timeout = ph.hs_timeout;
    let hs = std::thread::scope(|s| -> Result<HandshakeResult> {
        let storm = s.spawn(move || {
            // The storm's peers stand for other hosts: their public-key work yields the cores
            // to the echo loop, which times the established peers, and to the hub's data path.
            lab::lower_this_thread(STORM_NICE);
            handshake_all(ds, &storm_peers, setup, None, Duration::ZERO, hs_timeout)
        });
        d.run(t0 + ph.window, Some(&plan), |_| false)?;
        storm
            .join()
            .map_err(|_| Error::bench("the storm's thread panicked"))?
    })?;
    let after = probe(ph.nsr, ph.hub);
    Ok((hs, phase, after.since(&before)))
}

/// `--flood` initiations a second from spoofed sources while the active peers echo.
fn flood_phase(ph: &Phase<'_>, d: &mut Driver) -> Result<(u64, usize, Probe)> {
    let hub_addr = std::net::SocketAddr::from((lab::HUB_VETH, lab::HUB_PORT));
    let msgs = d.foreign_initiations(64)?;
    let sources = 1024.min(ph.p.flood as usize).max(16);
    let f = Flood::start(hub_addr, lab::FLOOD_NET, sources, ph.p.flood, msgs)?;
    let r = echo_window(d, ph.nsr, ph.hub, ph.active, ph.p.rate, ph.window);
    let (sent, cpu) = f.stop();
    let (phase, mut rcv) = r?;
    rcv.gen_flood_cpu = cpu;
    Ok((sent, phase, rcv))
}

/// A reload that removes the last `--reload` idle peers and adds as many new ones, on a thread
/// of its own while the active peers echo: its seconds, phase, probe, and the active peers
/// that handshook again.
fn reload_phase(
    ph: &Phase<'_>,
    d: &mut Driver,
    kind: HubKind,
    files: &HubFiles,
    keys: &Keys,
    conf: &std::path::Path,
) -> Result<(f64, usize, Probe, usize)> {
    let p = ph.p;
    let keep = p.peers - p.reload;
    let mut listed: Vec<(usize, [u8; 32])> =
        keys.public[..keep].iter().copied().enumerate().collect();
    listed.extend((p.peers..p.peers + p.reload).map(|i| (i, keys.public[i])));
    // `sealink reload` reads the file the tunnel came up from: rewritten in place.
    files.write_config(kind, conf, &listed)?;
    let before_hs: Vec<u64> = ph.active.iter().map(|&i| d.handshakes(i)).collect();
    let phase = d.phase();
    let before = probe(ph.nsr, ph.hub);
    let plan = ph.plan(phase);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| -> Result<(f64, usize, Probe, usize)> {
        let hub = ph.hub;
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let _ = tx.send(hub.reload(conf));
        });
        let t0 = Instant::now();
        let mut got = None;
        d.run(
            t0 + ph.window.max(Duration::from_secs(1)) * 4,
            Some(&plan),
            |_| {
                if got.is_none() {
                    got = rx.try_recv().ok();
                }
                got.is_some() && t0.elapsed() >= ph.window
            },
        )?;
        if got.is_none() {
            got = rx.recv().ok();
        }
        let took = got.ok_or_else(|| Error::bench("the reload thread went away"))??;
        let after = probe(ph.nsr, hub);
        Ok((
            took.as_secs_f64(),
            phase,
            after.since(&before),
            ph.redone(d, &before_hs),
        ))
    })
}

fn measure_hub(
    p: &Params,
    kind: HubKind,
    nsr: &NsRef,
    files: &HubFiles,
    keys: &Keys,
    hub_public: [u8; 32],
) -> Result<HubResult> {
    let name = kind.name();
    let pb = crate::output::progress(7, "peers");
    pb.set_message(format!("{name}: up empty, then {}", p.peers));
    let (hub, conf, [rss_empty, up_empty, rss_configured, up, show]) =
        start_hub(p, kind, nsr, files, keys)?;
    pb.inc(2);
    let (mut d, mut ds) = drivers(p, kind, keys, hub_public)?;
    let active: Vec<usize> = (0..p.active).collect();
    let ph = Phase {
        p,
        nsr,
        hub: &hub,
        active: &active,
        window: Duration::from_secs_f64(p.duration),
        hs_timeout: Duration::from_secs_f64(p.handshake_timeout),
    };

    // Resolve the veth's neighbours both ways first (a ping from the generator's side: the
    // hub learns its neighbour from the ARP request): a burst of first datagrams to an
    // unresolved neighbour overflows the kernel's queue for it (unres_qlen_bytes), and the
    // handshakes it carries wait for their retry (1 s, or WireGuard's 5 s).
    let _ = std::process::Command::new("ip")
        .args(["netns", "exec", &nsr.hub, "ping", "-c", "1", "-W", "1"])
        .arg(lab::GEN_VETH.to_string())
        .output();
    pb.set_message(format!("{name}: {} handshakes", p.active));
    let phase = d.phase();
    let bringup_at = Instant::now();
    let bringup = handshake_all(&mut d, &active, phase, None, Duration::ZERO, ph.hs_timeout)?;
    // Let the first echoes come back and the hub settle.
    d.run(Instant::now() + Duration::from_millis(500), None, |_| false)?;
    tracing::info!(counters = ?d.counters(), "after the bring-up");
    pb.inc(1);

    pb.set_message(format!("{name}: quiet"));
    let (q_phase, q_rcv) = echo_window(&mut d, nsr, &hub, &active, p.rate, ph.window)?;
    pb.inc(1);
    pb.set_message(format!("{name}: rekey storm of {}", p.active));
    let rekey = (p.rekey_storm > 0.0)
        .then(|| rekey_phase(&ph, &mut d, bringup_at))
        .transpose()?;
    pb.set_message(format!("{name}: storm of {}", p.storm));
    let storm = (p.storm > 0)
        .then(|| storm_phase(&ph, &mut d, &mut ds))
        .transpose()?;
    pb.inc(1);
    pb.set_message(format!("{name}: flood {}/s", p.flood));
    let flood = (p.flood > 0)
        .then(|| flood_phase(&ph, &mut d))
        .transpose()?;
    pb.inc(1);
    pb.set_message(format!("{name}: reload ±{}", p.reload));
    let reload = (p.reload > 0)
        .then(|| reload_phase(&ph, &mut d, kind, files, keys, &conf))
        .transpose()?;
    pb.inc(1);
    // Late replies of the last window.
    d.run(Instant::now() + Duration::from_secs(1), None, |_| false)?;
    let rss_after = hub.rss().unwrap_or(0);
    let cpu = hub.cpu_seconds().unwrap_or(f64::NAN);
    drop(hub);
    pb.finish_and_clear();

    d.finish_phases();
    let phases = &d.phases;
    Ok(HubResult {
        hub: name.into(),
        rss_empty_bytes: rss_empty as u64,
        rss_configured_bytes: rss_configured as u64,
        bytes_per_idle_peer: (rss_configured - rss_empty) / p.peers as f64,
        up_empty_seconds: up_empty,
        up_seconds: up,
        show_seconds: show,
        bringup,
        quiet: echo_result(&phases[q_phase], q_rcv),
        storm: storm.map(|(hs, ph, rcv)| (hs, echo_result(&phases[ph], rcv))),
        flood: flood.map(|(sent, ph, rcv)| (sent, echo_result(&phases[ph], rcv))),
        reload: reload.map(|(took, ph, rcv, redone)| (took, echo_result(&phases[ph], rcv), redone)),
        rekey: rekey
            .map(|(ph, rcv, redone, spread)| (echo_result(&phases[ph], rcv), redone, spread)),
        rss_after_bytes: rss_after,
        active_with_replies: active.iter().filter(|&&i| d.replies(i) > 0).count(),
        hub_cpu_seconds: cpu,
        gen_send_errors: d.counters().send_errors,
        gen_refused: d.counters().refused,
    })
}

fn mb(b: u64) -> String {
    format!("{:.1}", b as f64 / 1e6)
}

fn f2(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}")
    } else {
        "-".into()
    }
}

fn f3(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3}")
    } else {
        "-".into()
    }
}

fn echo_row(t: &mut Table, hub: &str, what: &str, e: &EchoResult) {
    t.row([
        hub.to_owned(),
        what.to_owned(),
        e.sent.to_string(),
        e.received.to_string(),
        f3(e.loss_percent),
        f3(e.rtt_p50_ms),
        f3(e.rtt_p99_ms),
        format!("{}/{}", e.hub_rcvbuf_errors, e.gen_rcvbuf_errors),
        format!("{}/{}", e.tun_rx_dropped, e.tun_tx_dropped),
        f2(e.hub_cpu_seconds),
        e.hub_drops
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
    ]);
}

/// The two tables of a run: one row per hub, and one per hub and echo window.
fn tables() -> (Table, Table) {
    let hubs = Table::new([
        "hub",
        "peers",
        "up s",
        "show s",
        "RSS empty MB",
        "RSS MB",
        "B/idle peer",
        "hs/s",
        "hs done",
        "hs p99 ms",
        "hs retried",
        "RSS active MB",
        "hub CPU s",
    ])
    .left(&[0]);
    let echo = Table::new([
        "hub",
        "window",
        "sent",
        "received",
        "loss %",
        "p50 ms",
        "p99 ms",
        "rcvbuf drops hub/gen",
        "TUN drops rx/tx",
        "hub CPU s",
        "hub drops",
    ])
    .left(&[0, 1, 10]);
    (hubs, echo)
}

/// Hub `h`'s row, its echo windows' rows and its figures in the run record.
fn record_hub(
    r: &PeersResult,
    h: &HubResult,
    hubs: &mut Table,
    echo: &mut Table,
    rec: &mut RunRecord,
) {
    hubs.row([
        h.hub.clone(),
        r.peers.to_string(),
        f3(h.up_seconds),
        f3(h.show_seconds),
        mb(h.rss_empty_bytes),
        mb(h.rss_configured_bytes),
        format!("{:.0}", h.bytes_per_idle_peer),
        format!("{:.0}", h.bringup.per_second),
        format!("{}/{}", h.bringup.completed, h.bringup.peers),
        f2(h.bringup.latency_p99_ms),
        h.bringup.retried.to_string(),
        mb(h.rss_after_bytes),
        f2(h.hub_cpu_seconds),
    ]);
    echo_row(echo, &h.hub, "quiet", &h.quiet);
    rec.figure(format!("{} up", h.hub), h.up_seconds, "s");
    rec.figure(format!("{} show", h.hub), h.show_seconds, "s");
    rec.figure(
        format!("{} bytes per idle peer", h.hub),
        h.bytes_per_idle_peer,
        "B",
    );
    rec.figure(format!("{} handshakes", h.hub), h.bringup.per_second, "/s");
    rec.figure(format!("{} quiet loss", h.hub), h.quiet.loss_percent, "%");
    rec.figure(format!("{} quiet p99", h.hub), h.quiet.rtt_p99_ms, "ms");
    if let Some((e, redone, spread)) = &h.rekey {
        echo_row(
            echo,
            &h.hub,
            &format!(
                "rekey storm at {} s ({redone}/{} rekeyed within {spread:.2} s)",
                r.rekey_storm, r.active
            ),
            e,
        );
        rec.figure(format!("{} rekey storm loss", h.hub), e.loss_percent, "%");
        rec.figure(format!("{} rekey storm p99", h.hub), e.rtt_p99_ms, "ms");
    }
    if let Some((hs, e)) = &h.storm {
        echo_row(
            echo,
            &h.hub,
            &format!(
                "storm {} ({}/{} up in {:.2} s, {:.0}/s, p99 {:.0} ms, {} retried)",
                hs.peers,
                hs.completed,
                hs.peers,
                hs.seconds,
                hs.per_second,
                hs.latency_p99_ms,
                hs.retried
            ),
            e,
        );
        rec.figure(format!("{} storm handshakes", h.hub), hs.per_second, "/s");
        rec.figure(format!("{} storm loss", h.hub), e.loss_percent, "%");
        rec.figure(format!("{} storm p99", h.hub), e.rtt_p99_ms, "ms");
    }
    if let Some((sent, e)) = &h.flood {
        echo_row(
            echo,
            &h.hub,
            &format!("flood {}/s ({sent} sent)", r.flood),
            e,
        );
        rec.figure(format!("{} flood loss", h.hub), e.loss_percent, "%");
        rec.figure(format!("{} flood p99", h.hub), e.rtt_p99_ms, "ms");
    }
    if let Some((took, e, redone)) = &h.reload {
        echo_row(
            echo,
            &h.hub,
            &format!(
                "reload ±{} ({took:.2} s, {redone} sessions redone)",
                r.reload
            ),
            e,
        );
        rec.figure(format!("{} reload", h.hub), *took, "s");
        rec.figure(format!("{} reload loss", h.hub), e.loss_percent, "%");
    }
}

fn report(p: &Params, r: &PeersResult) -> Result<()> {
    let json = serde_json::to_string_pretty(r)
        .map_err(|e| Error::bench_by("cannot encode the result", e))?;
    let (mut hubs, mut echo) = tables();
    let mut rec = RunRecord::new("peers");
    for h in &r.hubs {
        record_hub(r, h, &mut hubs, &mut echo, &mut rec);
    }
    std::fs::create_dir_all(&p.out).map_err(Error::io("create", &p.out))?;
    let csv = rec.write_csv(&p.out, "peers.csv", &hubs)?;
    rec.write_csv(&p.out, "peers-echo.csv", &echo)?;
    rec.write_text(&p.out, "peers-result.json", &json)?;
    let record = rec.write(&p.out)?;
    if p.json {
        return crate::output::print(&format!("{json}\n"));
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "bench peers: {} configured, {} active at {}/s each, {} s windows, wire {}; load {} before, {} after\n",
        r.peers, r.active, r.rate, r.duration, r.wire, r.load_before, r.load_after
    );
    out.push_str(&hubs.terminal());
    out.push('\n');
    for m in &r.not_measured {
        let _ = writeln!(out, "not measured: {m}");
    }
    out.push_str(&echo.terminal());
    super::print_with_files(out, &csv, &record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            peers: 100,
            active: 10,
            rate: 10.0,
            duration: 1.0,
            wire: WireKind::Sealink,
            storm: 10,
            flood: 0,
            reload: 10,
            rekey_storm: 0.0,
            handshake_timeout: 30.0,
            inline_handshakes: false,
            wireguard_go: false,
            shared_source: false,
            programs: Programs {
                sealink: "sealink".into(),
                wireguard_go: None,
                wg: None,
            },
            json: false,
            out: "x".into(),
        }
    }

    #[test]
    fn the_peer_counts_must_fit() {
        assert!(check(&params()).is_ok());
        let mut p = params();
        p.active = 0;
        assert!(matches!(check(&p), Err(Error::Usage(_))));
        let mut p = params();
        p.storm = 91;
        assert!(check(&p).is_err());
        let mut p = params();
        p.reload = 81;
        assert!(check(&p).is_err());
        let mut p = params();
        p.wireguard_go = true;
        assert!(check(&p).is_err(), "wireguard-go needs --wire wg");
    }
}
