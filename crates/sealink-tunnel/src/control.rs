//! The control socket: its text protocol (one request line: `show`, `show-json`, `reload` or
//! `down`), the server the tunnel's calling thread runs (`control_loop`), and the client
//! side. `show` output is line-oriented with `key=value` counters so scripts can grep
//! it, byte counts in binary units for people (exact ones in `show-json`); `show-json` answers the same facts as one JSON object ([`Status`], the schema of
//! `sealink show --json`).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine;
use sealink_engine::Handoff;
use sealink_proto::Time;
use sealink_proto::tunnel::{PeerStatus, Wire};

use crate::error::{TunnelError, io};
pub use crate::threads::ThreadStatus;
use crate::{RunDir, Shared, UMASK, UpInfo, reload};

fn b64(k: &[u8; 32]) -> String {
    base64::engine::general_purpose::STANDARD.encode(k)
}

/// One interface as `sealink show --json` prints it (an array of these). Field names are the
/// schema; keys are standard base64, durations in seconds.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Status {
    pub interface: String,
    pub public_key: String,
    pub listening: String,
    /// The UDP port actually bound (an ephemeral one when the config leaves `listen_port` out).
    pub listen_port: u16,
    /// TUN offloads (TSO/GRO) in use, and segments per UDP GSO send.
    pub tun_offload: bool,
    pub udp_gso_segments: usize,
    pub tun_queues: usize,
    pub udp_sockets: usize,
    pub crypto_workers: usize,
    /// Threads writing received packets to the TUN device (0: the receive path writes).
    /// Absent from the answers of older builds.
    #[serde(default)]
    pub tun_writers: usize,
    /// When the readers hand batches to the crypto workers: "auto" (inline until a reader
    /// saturates and a core is idle) or "always". Absent from older builds (which always did).
    #[serde(default = "always")]
    pub handoff: String,
    /// Lanes offered to peers (`interface.lanes`), and whether received datagrams are steered
    /// over the UDP sockets by lane. Absent from the answers of older builds.
    #[serde(default)]
    pub lanes: bool,
    #[serde(default)]
    pub lane_steering: bool,
    pub aead: String,
    /// The protocol on the wire: "sealink" or "wireguard" (older builds: absent, sealink's).
    #[serde(default = "sealink_wire")]
    pub protocol: String,
    /// A full tunnel's mark (and routing table), as `wg show` prints it; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fwmark: Option<u32>,
    /// Datagrams dropped, by reason (only reasons seen), in the core's order; a JSON object.
    #[serde(with = "ordered_map")]
    pub drops: Vec<(String, u64)>,
    /// Control requests refused (peers neither root nor the owner).
    pub control_refused: u64,
    /// WireGuard UAPI requests refused, by reason (WireGuard's wire only; absent if none).
    #[serde(default, with = "ordered_map", skip_serializing_if = "Vec::is_empty")]
    pub uapi_refused: Vec<(String, u64)>,
    pub peers: Vec<PeerJson>,
    /// The data path's threads: CPU time and what each one's system calls carried (see
    /// [`ThreadStatus`]). Absent from the answers of older builds.
    #[serde(default)]
    pub threads: Vec<ThreadStatus>,
}

fn sealink_wire() -> String {
    "sealink".into()
}

fn always() -> String {
    "always".into()
}

/// A list of (name, count) as a JSON object, keeping its order both ways.
mod ordered_map {
    use serde::de::{MapAccess, Visitor};
    use serde::ser::SerializeMap;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[(String, u64)], s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(v.len()))?;
        for (k, c) in v {
            m.serialize_entry(k, c)?;
        }
        m.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, u64)>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Vec<(String, u64)>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of counters")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some(e) = a.next_entry()? {
                    v.push(e);
                }
                Ok(v)
            }
        }
        d.deserialize_map(V)
    }
}

/// One peer of a [`Status`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PeerJson {
    pub name: String,
    pub public_key: String,
    /// `null` until the peer's address is known.
    pub endpoint: Option<String>,
    pub allowed_ips: Vec<String>,
    /// Seconds since the latest handshake; `null` if none yet.
    pub latest_handshake_secs: Option<f64>,
    pub session_up: bool,
    /// The current session agreed on lanes (absent from older builds' answers).
    #[serde(default)]
    pub lanes: bool,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_datagrams: u64,
    pub tx_datagrams: u64,
    pub piggybacked_packets: u64,
    pub handshakes_completed: u64,
    pub handshakes_initiated: u64,
    /// `persistent_keepalive` in seconds (`null`: off), and keepalives sent.
    pub persistent_keepalive_secs: Option<u64>,
    pub keepalives: u64,
}

/// The facts of one interface (what `show` and `show-json` both print).
pub fn status(
    info: &UpInfo,
    public_key: &[u8; 32],
    now: Time,
    peers: &[PeerStatus],
    drops: &[(&'static str, u64)],
    control_refused: u64,
    threads: Vec<ThreadStatus>,
) -> Status {
    Status {
        interface: info.name.clone(),
        public_key: b64(public_key),
        listening: info.listen.to_string(),
        listen_port: info.listen.port(),
        tun_offload: info.tun_offload,
        udp_gso_segments: info.udp_gso_segments,
        tun_queues: info.queues,
        udp_sockets: info.udp_sockets,
        crypto_workers: info.workers,
        tun_writers: info.tun_writers,
        handoff: match info.handoff {
            Handoff::Auto => "auto",
            Handoff::Always => "always",
        }
        .to_string(),
        lanes: info.lanes,
        lane_steering: info.lane_steering,
        aead: sealink_crypto::suite::chosen_backend(info.suite)
            .0
            .name()
            .to_string(),
        protocol: match info.wire {
            Wire::Sealink => "sealink",
            Wire::WireGuard => "wireguard",
        }
        .into(),
        fwmark: info.fwmark,
        drops: drops.iter().map(|(n, c)| ((*n).to_string(), *c)).collect(),
        control_refused,
        uapi_refused: Vec::new(),
        peers: peers
            .iter()
            .map(|p| PeerJson {
                name: p.name.to_string(),
                public_key: b64(&p.public_key),
                endpoint: p.endpoint.map(|e| e.to_string()),
                allowed_ips: p.allowed_ips.iter().map(|n| n.to_string()).collect(),
                latest_handshake_secs: p
                    .last_handshake
                    .map(|t| now.saturating_since(t).as_secs_f64()),
                session_up: p.session_up,
                lanes: p.lanes,
                rx_bytes: p.stats.rx_bytes,
                tx_bytes: p.stats.tx_bytes,
                rx_packets: p.stats.rx_packets,
                tx_packets: p.stats.tx_packets,
                rx_datagrams: p.stats.rx_datagrams,
                tx_datagrams: p.stats.tx_datagrams,
                piggybacked_packets: p.stats.piggybacked,
                handshakes_completed: p.stats.handshakes_completed,
                handshakes_initiated: p.stats.handshakes_initiated,
                persistent_keepalive_secs: p.persistent_keepalive.map(|d| d.as_secs()),
                keepalives: p.stats.keepalives,
            })
            .collect(),
        threads,
    }
}

/// `show-json`'s answer: [`status`] as one JSON object.
pub fn format_status_json(st: &Status) -> String {
    // Serializing plain strings and numbers cannot fail.
    serde_json::to_string(st).unwrap_or_default()
}

/// The text `sealink show` prints for one interface: the same facts as [`Status`].
pub fn format_status(st: &Status) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "interface: {}", st.interface);
    let _ = writeln!(s, "  public key: {}", st.public_key);
    let _ = writeln!(s, "  listening: {}", st.listening);
    if st.protocol != "sealink" {
        let _ = writeln!(s, "  protocol: {}", st.protocol);
    }
    if let Some(m) = st.fwmark {
        let _ = writeln!(s, "  fwmark: {m:#x} (full tunnel: table {m})");
    }
    let _ = writeln!(
        s,
        "  offload: tun={} udp_gso_segments={}",
        if st.tun_offload { "tso+gro" } else { "off" },
        st.udp_gso_segments
    );
    let _ = writeln!(
        s,
        "  data path: tun_queues={} udp_sockets={} crypto_workers={} handoff={} tun_writers={} lanes={} aead={}",
        st.tun_queues,
        st.udp_sockets,
        st.crypto_workers,
        st.handoff,
        st.tun_writers,
        match (st.lanes, st.lane_steering) {
            (false, _) => "off",
            (true, false) => "on",
            (true, true) => "steered",
        },
        st.aead
    );
    if st.drops.is_empty() {
        let _ = writeln!(s, "  drops: none");
    } else {
        let list: Vec<String> = st.drops.iter().map(|(n, c)| format!("{n}={c}")).collect();
        let _ = writeln!(s, "  drops: {}", list.join(" "));
    }
    if !st.uapi_refused.is_empty() {
        let list: Vec<String> = st
            .uapi_refused
            .iter()
            .map(|(n, c)| format!("{n}={c}"))
            .collect();
        let _ = writeln!(s, "  uapi: refused {}", list.join(" "));
    }
    if st.control_refused > 0 {
        let _ = writeln!(
            s,
            "  control: refused={} (peers neither root nor the owner)",
            st.control_refused
        );
    }
    format_threads(&mut s, &st.threads);
    for p in &st.peers {
        format_peer(&mut s, p);
    }
    s
}

/// `show`'s per-thread lines (none without threads).
fn format_threads(s: &mut String, threads: &[ThreadStatus]) {
    use std::fmt::Write as _;
    if threads.is_empty() {
        return;
    }
    let _ = writeln!(s, "  threads (cpu seconds; system calls/items carried):");
    for t in threads {
        let mut parts = vec![format!("    {} busy={:.3}s", t.name, t.busy_s)];
        for (what, calls, items) in [
            ("tun_read", t.tun_reads, t.tun_read_packets),
            ("udp_send", t.udp_sends, t.udp_send_datagrams),
            ("udp_recv", t.udp_receives, t.udp_receive_datagrams),
            ("tun_write", t.tun_writes, t.tun_write_packets),
        ] {
            if calls > 0 {
                parts.push(format!("{what}={calls}/{items}"));
            }
        }
        if t.batches_submitted > 0 {
            parts.push(format!("batches={}", t.batches_submitted));
        }
        if t.handoffs > 0 {
            parts.push(format!("handed_off={}", t.handoffs));
        }
        if t.lane_strays > 0 {
            parts.push(format!("lane_strays={}", t.lane_strays));
        }
        let _ = writeln!(s, "{}", parts.join(" "));
    }
}

/// `show`'s lines for one peer.
fn format_peer(s: &mut String, p: &PeerJson) {
    use std::fmt::Write as _;
    let _ = writeln!(s, "\npeer: {}", p.name);
    let _ = writeln!(s, "  public key: {}", p.public_key);
    let _ = writeln!(
        s,
        "  endpoint: {}",
        p.endpoint.as_deref().unwrap_or("(unknown)")
    );
    let _ = writeln!(s, "  allowed ips: {}", p.allowed_ips.join(", "));
    let hs = match p.latest_handshake_secs {
        None => "never".to_string(),
        Some(secs) => format!("{secs:.1} s ago"),
    };
    let _ = writeln!(
        s,
        "  latest handshake: {hs} (session {}{})",
        if p.session_up { "up" } else { "down" },
        if p.lanes { ", lanes" } else { "" }
    );
    let _ = writeln!(
        s,
        "  transfer: {} received, {} sent, rx_packets={} tx_packets={}",
        human_bytes(p.rx_bytes),
        human_bytes(p.tx_bytes),
        p.rx_packets,
        p.tx_packets
    );
    let _ = writeln!(
        s,
        "  datagrams: rx={} tx={} piggybacked_packets={} handshakes={}/{}",
        p.rx_datagrams,
        p.tx_datagrams,
        p.piggybacked_packets,
        p.handshakes_completed,
        p.handshakes_initiated
    );
    if let Some(every) = p.persistent_keepalive_secs {
        let _ = writeln!(
            s,
            "  persistent keepalive: every {every} s keepalives={}",
            p.keepalives
        );
    }
}

/// A byte count for people, in binary units as `sealink send` prints them (`1000 B`,
/// `1.95 KiB`, `8.00 MiB`). The exact counts stay in `show --json`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    // f64 loses precision above 2^53, far below what two decimals show.
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2} {}", UNITS[unit])
}

/// Sends `request` to the tunnel `name` of this network namespace and returns its whole answer
/// (for `down`: once the tunnel has stopped and removed its interface).
pub fn request(
    run_dir: &RunDir,
    name: &str,
    request: &str,
    timeout: Duration,
) -> Result<String, TunnelError> {
    let path = run_dir.socket_path(name);
    let mut s = UnixStream::connect(&path).map_err(|e| match e.kind() {
        // The socket and its directory are root's (0600 in 0700): a user's `show` must not
        // read "not running" while the tunnel runs.
        std::io::ErrorKind::PermissionDenied => TunnelError::ControlDenied {
            name: name.into(),
            path: path.display().to_string(),
        },
        _ => TunnelError::NotRunning(name.into()),
    })?;
    s.set_read_timeout(Some(timeout))
        .map_err(io("control socket"))?;
    writeln!(s, "{request}").map_err(io(format!("write to {}", path.display())))?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)
        .map_err(io(format!("read from {}", path.display())))?;
    Ok(answer)
}

/// Names of the tunnels of this network namespace with a control socket (none when the
/// directory does not exist); [`TunnelError::RunDirDenied`] when it is not ours to list.
pub fn running(run_dir: &RunDir) -> Result<Vec<String>, TunnelError> {
    let dir = run_dir.dir();
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(TunnelError::RunDirDenied {
                path: dir.display().to_string(),
            });
        }
        Err(_) => return Ok(Vec::new()),
    };
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".sock"))
                .map(str::to_owned)
        })
        .collect();
    names.sort();
    Ok(names)
}

/// Binds the control socket with umask 0177, so that it is created 0600 and never briefly
/// wider; it also lies in a 0700 directory ([`RunDir`]). The umask is process-wide: this runs
/// during set-up, before the data path threads exist.
pub(crate) fn bind_private(path: &Path, what: &str) -> Result<UnixListener, TunnelError> {
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
pub(crate) fn authorize(sh: &Shared, stream: &UnixStream) -> Result<(), String> {
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

pub(crate) fn control_loop(
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
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
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
                // Only the snapshot under the core's lock: at 10,000 peers, building the
                // status and its JSON under it held the data path for tens of milliseconds.
                let (now, peers, drops) = {
                    let core = sh.lock();
                    let now = sh.clock.now();
                    (now, core.peer_status(now), core.drops())
                };
                let mut st = status(
                    &sh.info,
                    &sh.public_key,
                    now,
                    &peers,
                    &drops,
                    sh.control_refused.load(Ordering::Relaxed),
                    sh.threads.snapshot(),
                );
                st.uapi_refused = sh.uapi_refused.snapshot();
                if req == "show" {
                    format_status(&st)
                } else {
                    format_status_json(&st)
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
