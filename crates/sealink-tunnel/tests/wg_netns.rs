//! sealink's tunnel on WireGuard's wire against the real peers, between two network
//! namespaces:
//!
//! ```text
//! ns S (a thread of this test, setns)            ns W
//!   10.205.0.1 veth -------------------------- veth 10.205.0.2
//!   sealink_tunnel::run_with, Wire::WireGuard     wireguard-go or boringtun-cli, wgpN
//!   tunnel 10.206.0.1/24, :51851                  tunnel 10.206.0.2/24, :51852
//! ```
//!
//! For each peer implementation found (`wireguard-go`, `boringtun-cli`; `$SEALINK_WIREGUARD_GO`
//! and `$SEALINK_BORINGTUN` name them elsewhere), with a preshared key:
//! 1. sealink initiates: a ping from ns S;
//! 2. a TCP transfer of 8 MiB from ns W to ns S, compared byte for byte;
//! 3. the peer initiates: the peer is removed and added again (`wg set`), so it has no session,
//!    and a ping from ns W makes it initiate;
//! 4. a rekey: sealink's REKEY_AFTER_TIME is scaled down to 3 s for this test only; traffic
//!    keeps flowing across it and sealink counts a second completed handshake it initiated;
//! 5. a roam: a NAT in ns W moves the peer's source port (a NAT rebinding); sealink learns the
//!    new endpoint from authenticated datagrams and its replies follow;
//! 6. a cookie exchange: sealink's handshake limiter admits one unproven initiation per second
//!    per source (as under load) and a junk initiation takes it, so the peer's initiation gets
//!    a cookie reply and its retry with mac2 gets in.
//!
//! Skips, saying why, unless root with `ip`, `wg`, `ping`, /dev/net/tun and a peer.

mod common;

use common::{cmd, in_ns, is_root, which};

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use sealink_proto::HostKey;
use sealink_proto::ratelimit::LimiterConfig;
use sealink_proto::tunnel::TunnelConfig;
use sealink_tunnel::{Config, RunDir, RunOptions, UpInfo, control};

const S_PORT: u16 = 51851;
const W_PORT: u16 = 51852;

fn ok(prog: &str, args: &[&str]) {
    let o = cmd(prog, args);
    assert!(
        o.status.success(),
        "{prog} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn b64(k: &[u8; 32]) -> String {
    B64.encode(k)
}

/// The peer implementations to test against: (name, binary).
fn peers() -> Vec<(&'static str, PathBuf)> {
    let mut v = Vec::new();
    let go = std::env::var_os("SEALINK_WIREGUARD_GO")
        .map(PathBuf::from)
        .or_else(|| which("wireguard-go"));
    match go {
        Some(p) => v.push(("wireguard-go", p)),
        None => eprintln!("wireguard-go not found (apt-get install wireguard-go): not tested"),
    }
    let bt = std::env::var_os("SEALINK_BORINGTUN")
        .map(PathBuf::from)
        .or_else(|| which("boringtun-cli"))
        .or_else(|| {
            let p = PathBuf::from(std::env::var_os("HOME")?).join(".cargo/bin/boringtun-cli");
            p.is_file().then_some(p)
        });
    match bt {
        Some(p) => v.push(("boringtun", p)),
        None => eprintln!("boringtun-cli not found (cargo install boringtun-cli): not tested"),
    }
    v
}

/// Namespaces and the peer process, removed on drop.
struct Lab {
    ns: [String; 2],
    peer: Option<Child>,
    files: Vec<PathBuf>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut c) = self.peer.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let t0 = Instant::now();
            while c.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(3) {
                thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        for n in &self.ns {
            let _ = cmd("ip", &["netns", "del", n]);
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

fn ping(ns: &str, to: &str) -> Output {
    cmd(
        "ip",
        &[
            "netns", "exec", ns, "ping", "-c", "3", "-i", "0.2", "-W", "3", to,
        ],
    )
}

fn must_ping(ns: &str, to: &str, what: &str, log: &Path) {
    let o = ping(ns, to);
    assert!(
        o.status.success(),
        "{what}: ping {to} from {ns} failed: {}{}\npeer log:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// `sealink show` of the tunnel, as text.
fn show(run_dir: &RunDir, name: &str) -> String {
    control::request(run_dir, name, "show", Duration::from_secs(5)).unwrap_or_default()
}

/// Handshakes completed, from `show`'s `handshakes=COMPLETED/INITIATED` (0 if absent).
fn handshakes(text: &str) -> u64 {
    text.split("handshakes=")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// One request written to the tunnel's UAPI socket as is; the answer.
fn uapi_raw(name: &str, req: &str) -> String {
    let sock = sealink_tunnel::uapi::socket_path(name);
    let mut c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    c.write_all(req.as_bytes()).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    answer
}

/// `wg show`, `wg set` and `wg showconf` against the tunnel's UAPI socket, what newer
/// wireguard-tools send (an allowed-IP removal, a scoped link-local endpoint), and garbage
/// written to it: answered with an errno, counted, and the socket still serves.
fn uapi_checks(name: &str, peer_pub: &[u8; 32], psk: &[u8; 32], run_dir: &RunDir) {
    let wg = |args: &[&str]| {
        let o = cmd("wg", args);
        assert!(
            o.status.success(),
            "wg {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let dump = wg(&["show", name, "dump"]);
    let lines: Vec<Vec<&str>> = dump.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(lines.len(), 2, "{dump}");
    assert_eq!(lines[0][2], S_PORT.to_string(), "listen port: {dump}");
    let peer = &lines[1];
    assert_eq!(peer[0], b64(peer_pub), "{dump}");
    assert_eq!(peer[1], b64(psk), "{dump}");
    assert_eq!(peer[2], format!("10.205.0.2:{W_PORT}"), "{dump}");
    assert_eq!(peer[3], "10.206.0.2/32", "{dump}");
    assert_ne!(peer[4], "0", "a latest handshake: {dump}");
    assert!(
        peer[5].parse::<u64>().unwrap() > 8 << 20,
        "rx bytes: {dump}"
    );
    // wg set: another allowed prefix and a keepalive; read back through wg and sealink show.
    let pk = b64(peer_pub);
    let set_peer = |settings: &[&str]| {
        let mut args = vec!["set", name, "peer", &pk];
        args.extend_from_slice(settings);
        wg(&args)
    };
    set_peer(&[
        "allowed-ips",
        "10.206.0.2/32,10.207.0.0/24",
        "persistent-keepalive",
        "21",
    ]);
    let dump = wg(&["show", name, "dump"]);
    assert!(dump.contains("10.206.0.2/32,10.207.0.0/24\t"), "{dump}");
    assert!(dump.trim_end().ends_with("\t21"), "{dump}");
    let conf = wg(&["showconf", name]);
    assert!(conf.contains(&format!("ListenPort = {S_PORT}")), "{conf}");
    assert!(conf.contains("PersistentKeepalive = 21"), "{conf}");
    // `wg set NAME peer K allowed-ips -10.207.0.0/24` of wireguard-tools >= 1.0.20250521 (the
    // installed wg may predate it: its request, written as is). A prefix the peer does not
    // have is no error.
    let hex: String = peer_pub.iter().map(|b| format!("{b:02x}")).collect();
    let answer = uapi_raw(
        name,
        &format!(
            "set=1\npublic_key={hex}\nallowed_ip=-10.207.0.0/24\nallowed_ip=-10.99.0.0/16\n\n"
        ),
    );
    assert_eq!(answer, "errno=0\n\n");
    let ips = wg(&["show", name, "allowed-ips"]);
    assert_eq!(ips.trim_end(), format!("{pk}\t10.206.0.2/32"), "{ips}");
    // A link-local endpoint with its zone an interface name: printed back as given; an
    // unknown interface is refused (nothing changed) and counted.
    let lo_ep = format!("[fe80::1%lo]:{W_PORT}");
    let answer = uapi_raw(
        name,
        &format!("set=1\npublic_key={hex}\nendpoint={lo_ep}\n\n"),
    );
    assert_eq!(answer, "errno=0\n\n");
    let eps = wg(&["show", name, "endpoints"]);
    assert_eq!(eps.trim_end(), format!("{pk}\t{lo_ep}"), "{eps}");
    let answer = uapi_raw(
        name,
        &format!("set=1\npublic_key={hex}\nendpoint=[fe80::1%nosuchif9]:{W_PORT}\n\n"),
    );
    assert_eq!(answer, "errno=-22\n\n");
    assert!(wg(&["show", name, "endpoints"]).contains(&lo_ep));
    assert!(
        show(run_dir, name).contains("unknown-interface=1"),
        "{}",
        show(run_dir, name)
    );
    // Back as it was (the rest of the test expects no keepalive).
    set_peer(&[
        "allowed-ips",
        "10.206.0.2/32",
        "persistent-keepalive",
        "off",
        "endpoint",
        &format!("10.205.0.2:{W_PORT}"),
    ]);
    assert!(wg(&["show", name, "dump"]).contains(&format!("\t10.205.0.2:{W_PORT}\t")));
    // A different private key cannot be set on the running tunnel: refused, nothing changed.
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("wg genkey | wg set {name} private-key /dev/stdin"))
        .output()
        .unwrap();
    assert!(!o.status.success(), "a new private key was taken");
    // `wg` reads the negated errno as wireguard-go sends it: EOPNOTSUPP's message, not "-95"
    // or "Invalid argument", for the key and for the listen port.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("Operation not supported"), "wg said: {err}");
    let port_before = wg(&["show", name, "listen-port"]);
    let o = Command::new("wg")
        .args(["set", name, "listen-port", "51999"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "the listen port changed");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("Operation not supported"), "wg said: {err}");
    assert_eq!(wg(&["show", name, "listen-port"]), port_before);
    // Garbage on the socket: an errno back, counted, and the socket still answers.
    let sock = sealink_tunnel::uapi::socket_path(name);
    let mut c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    c.write_all(b"frobnicate=1\n\n").unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, "errno=-22\n\n");
    let show = show(run_dir, name);
    assert!(show.contains("uapi: refused"), "{show}");
    assert!(show.contains("unknown-operation=1"), "{show}");
    assert!(wg(&["show", name, "dump"]).contains(&pk));
}

#[test]
fn sealink_speaks_wireguard_with_the_reference_peers() {
    if !is_root() {
        eprintln!("skipped: wg_netns needs root (network namespaces, TUN)");
        return;
    }
    for tool in ["ip", "wg", "ping"] {
        if which(tool).is_none() {
            eprintln!("skipped: {tool} not found (iproute2, wireguard-tools, iputils-ping)");
            return;
        }
    }
    if !Path::new("/dev/net/tun").exists() {
        eprintln!("skipped: no /dev/net/tun");
        return;
    }
    for (k, (kind, exe)) in peers().into_iter().enumerate() {
        eprintln!("--- against {kind} ({})", exe.display());
        against(kind, &exe, k);
    }
}

fn against(kind: &str, exe: &Path, k: usize) {
    let id = format!("{}{k}", std::process::id() % 10_000);
    let mut lab = Lab {
        ns: [format!("slwS{id}"), format!("slwW{id}")],
        peer: None,
        files: Vec::new(),
    };
    if !common::add_netns_or_skip(&lab.ns[0]) {
        return;
    }
    ok("ip", &["netns", "add", &lab.ns[1]]);
    let [ns_s, ns_w] = lab.ns.clone();
    let (vs, vw, wgif) = (format!("slvs{id}"), format!("slvw{id}"), format!("wgp{id}"));
    ok(
        "ip",
        &[
            "link", "add", &vs, "netns", &ns_s, "type", "veth", "peer", "name", &vw, "netns", &ns_w,
        ],
    );
    for (ns, dev, addr) in [(&ns_s, &vs, "10.205.0.1/24"), (&ns_w, &vw, "10.205.0.2/24")] {
        ok("ip", &["-n", ns, "addr", "add", addr, "dev", dev]);
        ok("ip", &["-n", ns, "link", "set", dev, "up"]);
        ok("ip", &["-n", ns, "link", "set", "lo", "up"]);
    }

    // Keys: ours (a sealink HostKey is an X25519 key, in wg's base64 too), the peer's, a psk.
    let ours = HostKey::generate().unwrap();
    let [peer_priv, psk]: [[u8; 32]; 2] = std::array::from_fn(|_| rand::random());
    let peer_pub = *HostKey::from_private(peer_priv).unwrap().public();
    let tmp = std::env::temp_dir();
    let key_file = tmp.join(format!("sealink-wgnetns-{id}.key"));
    let psk_file = tmp.join(format!("sealink-wgnetns-{id}.psk"));
    let log = tmp.join(format!("sealink-wgnetns-{id}.log"));
    std::fs::write(&key_file, b64(&peer_priv)).unwrap();
    std::fs::write(&psk_file, b64(&psk)).unwrap();
    lab.files
        .extend([key_file.clone(), psk_file.clone(), log.clone()]);
    lab.files
        .push(PathBuf::from(format!("/var/run/wireguard/{wgif}.sock")));

    // The peer, in the foreground inside ns W.
    let log_file = std::fs::File::create(&log).unwrap();
    lab.peer = Some(
        Command::new("ip")
            .args(["netns", "exec", &ns_w])
            .arg(exe)
            .args(match kind {
                // It would drop to nobody, whom `wg` (root) then cannot reach over the socket.
                "boringtun" => &["-f", "--disable-drop-privileges", "-v", "debug"][..],
                _ => &["-f"][..],
            })
            .arg(&wgif)
            .env("WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD", "1")
            .env("LOG_LEVEL", "verbose")
            .env("WG_LOG_LEVEL", "debug")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap(),
    );
    let sock = PathBuf::from(format!("/var/run/wireguard/{wgif}.sock"));
    let t0 = Instant::now();
    while !sock.exists() && t0.elapsed() < Duration::from_secs(10) {
        thread::sleep(Duration::from_millis(50));
    }
    assert!(
        sock.exists(),
        "{kind} made no UAPI socket: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let our_pub = b64(ours.public());
    let wg_set_peer = |extra: &[&str]| {
        let mut args = vec!["netns", "exec", &ns_w, "wg", "set", &wgif, "peer", &our_pub];
        args.extend_from_slice(extra);
        ok("ip", &args);
    };
    let (key_path, psk_path) = (
        key_file.to_string_lossy().into_owned(),
        psk_file.to_string_lossy().into_owned(),
    );
    let w_port = W_PORT.to_string();
    ok(
        "ip",
        &[
            "netns",
            "exec",
            &ns_w,
            "wg",
            "set",
            &wgif,
            "private-key",
            &key_path,
            "listen-port",
            &w_port,
        ],
    );
    let s_endpoint = format!("10.205.0.1:{S_PORT}");
    let add_peer = || {
        wg_set_peer(&[
            "preshared-key",
            &psk_path,
            "allowed-ips",
            "10.206.0.1/32",
            "endpoint",
            &s_endpoint,
        ])
    };
    // The peer forgets its session: removed and added again.
    let reset_peer = || {
        wg_set_peer(&["remove"]);
        add_peer();
    };
    add_peer();
    ok(
        "ip",
        &["-n", &ns_w, "addr", "add", "10.206.0.2/24", "dev", &wgif],
    );
    ok("ip", &["-n", &ns_w, "link", "set", &wgif, "up"]);

    // sealink, WireGuard's wire, REKEY_AFTER_TIME scaled down to 3 s for this test. Against
    // the second peer every received batch is opened by one of two workers and put back in
    // order before the TUN write (`handoff = "always"`): WireGuard's wire has no lane byte, so
    // this is its receive spread, which the 8 MB transfer below checks byte for byte.
    let name = format!("slwg{id}");
    let spread = k % 2 == 1;
    let (workers, handoff) = if spread { (2, "always") } else { (1, "auto") };
    let mut cfg = Config::parse(&format!(
        r#"[interface]
name = "{name}"
private_key = "unused"
address = "10.206.0.1/24"
listen_port = {S_PORT}
workers = {workers}
handoff = "{handoff}"
queues = 1

[[peer]]
name = "{kind}"
public_key = "{key}"
endpoint = "10.205.0.2:{W_PORT}"
allowed_ips = ["10.206.0.2/32"]
"#,
        key = b64(&peer_pub),
    ))
    .unwrap();
    let mut core = TunnelConfig::wireguard();
    core.mtu = cfg.core.mtu;
    core.limits.rekey_after_time = Duration::from_secs(3);
    cfg.core = core;
    cfg.peers[0].preshared_key = Some(psk);
    let d = common::private_dir();
    let run_dir = RunDir::new(Some(d.path().join("run")));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<UpInfo>();
    let run = {
        let (cfg, ours, run_dir, stop) = (cfg.clone(), ours.clone(), run_dir.clone(), stop.clone());
        in_ns(&ns_s, move || {
            sealink_tunnel::run_with(cfg, ours, &run_dir, stop, RunOptions::default(), |i| {
                let _ = tx.send(i.clone());
            })
        })
    };
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the sealink tunnel did not come up");

    // 1. sealink initiates.
    must_ping(&ns_s, "10.206.0.2", "sealink initiating", &log);
    let s = show(&run_dir, &name);
    assert!(s.contains("(session up)"), "{s}");

    // 2. A TCP transfer from ns W to ns S, checked end to end.
    let data: Arc<Vec<u8>> = Arc::new(
        (0..8u32 << 20)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect(),
    );
    let server = in_ns(&ns_s, || {
        let l = TcpListener::bind("10.206.0.1:5201").unwrap();
        let (mut c, _) = l.accept().unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        got
    });
    thread::sleep(Duration::from_millis(200));
    let client = {
        let data = Arc::clone(&data);
        in_ns(&ns_w, move || {
            let mut c = TcpStream::connect("10.206.0.1:5201").unwrap();
            c.write_all(&data).unwrap();
        })
    };
    client.join().expect("TCP sender");
    let got = server.join().expect("TCP receiver");
    assert_eq!(got.len(), data.len(), "TCP transfer length");
    assert!(got == *data, "TCP transfer: the bytes differ");
    if spread {
        // The transfer's datagrams were opened on the workers, not on the reader.
        let s = show(&run_dir, &name);
        let handed: u64 = s
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("handed_off="))
            .filter_map(|n| n.parse::<u64>().ok())
            .sum();
        assert!(s.contains("handoff=always"), "{s}");
        assert!(handed > 100, "batches handed to the workers: {handed}\n{s}");
    }

    // The UAPI: the real `wg` reads and changes the running tunnel.
    uapi_checks(&name, &peer_pub, &psk, &run_dir);

    // 3. Rekey after 3 s (ours: sealink initiated this session), with traffic across it.
    let before = handshakes(&show(&run_dir, &name));
    thread::sleep(Duration::from_secs(4));
    must_ping(&ns_s, "10.206.0.2", "after the rekey time", &log);
    must_ping(&ns_s, "10.206.0.2", "across the rekey", &log);
    let s = show(&run_dir, &name);
    let rekeyed = handshakes(&s);
    assert!(rekeyed > before, "no rekey after REKEY_AFTER_TIME: {s}");

    // 3b. The peer initiates: without its session (removed, added again), a ping from ns W.
    let before = handshakes(&show(&run_dir, &name));
    reset_peer();
    must_ping(&ns_w, "10.206.0.1", "the peer initiating", &log);
    let after = handshakes(&show(&run_dir, &name));
    assert!(
        after > before,
        "no new handshake answered: {before} -> {after}"
    );

    // 4. As the responder of the session, sealink does not rekey by time (only the initiator
    //    does, as in wireguard-go and the kernel): 4 s on, with traffic, no new handshake.
    thread::sleep(Duration::from_secs(4));
    must_ping(
        &ns_s,
        "10.206.0.2",
        "as the responder past the rekey time",
        &log,
    );
    must_ping(&ns_s, "10.206.0.2", "as the responder, again", &log);
    let s = show(&run_dir, &name);
    assert_eq!(handshakes(&s), after, "the responder rekeyed by time: {s}");

    // 5. The peer roams: a NAT in ns W rewrites its datagrams' source port to 40000 (a NAT
    //    rebinding, the common roam); sealink learns the new endpoint from them and replies
    //    there. (Moving the peer's address instead would test the peer's sticky sockets.)
    if which("nft").is_some() {
        for rule in [
            "add table ip slroam",
            "add chain ip slroam post { type nat hook postrouting priority 100 ; }",
        ] {
            ok(
                "ip",
                &["netns", "exec", &ns_w, "sh", "-c", &format!("nft '{rule}'")],
            );
        }
        ok(
            "ip",
            &[
                "netns",
                "exec",
                &ns_w,
                "nft",
                "add",
                "rule",
                "ip",
                "slroam",
                "post",
                "udp",
                "sport",
                &w_port,
                "snat",
                "to",
                "10.205.0.2:40000",
            ],
        );
        must_ping(&ns_w, "10.206.0.1", "after the peer roamed", &log);
        must_ping(&ns_s, "10.206.0.2", "to the roamed peer", &log);
        let s = show(&run_dir, &name);
        assert!(
            s.contains("endpoint: 10.205.0.2:40000"),
            "endpoint not learned: {s}"
        );
    } else {
        eprintln!("nft not found (apt-get install nftables): the roam is not tested");
    }

    stop.store(true, Ordering::SeqCst);
    let r = run.join().unwrap();
    assert!(r.is_ok(), "{r:?}");

    // 6. Cookies: a new sealink tunnel whose limiter admits one unproven initiation per second
    //    per source. A junk initiation with a valid mac1 from the peer's address takes that
    //    token; the peer's own initiation right after is answered with a cookie reply, and its
    //    retry (REKEY_TIMEOUT later) carries mac2 and is answered.
    cfg.core.limiter = LimiterConfig {
        per_source_per_sec: 1,
        per_source_burst: 1,
        ..LimiterConfig::default()
    };
    cfg.peers[0].endpoint = None;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<UpInfo>();
    let our_key = *ours.public();
    let run = {
        let (cfg, run_dir, stop) = (cfg, run_dir.clone(), stop.clone());
        in_ns(&ns_s, move || {
            sealink_tunnel::run_with(cfg, ours, &run_dir, stop, RunOptions::default(), |i| {
                let _ = tx.send(i.clone());
            })
        })
    };
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the second sealink tunnel did not come up");
    // Its session died with the old tunnel: forgotten, so its next packet initiates.
    reset_peer();
    in_ns(&ns_w, move || {
        let mut junk: [u8; 148] = std::array::from_fn(|_| rand::random());
        junk[..4].copy_from_slice(&[1, 0, 0, 0]);
        let mac1 = sealink_proto::cookie::Mac1::new(&our_key).compute(&junk[..116]);
        junk[116..132].copy_from_slice(&mac1);
        junk[132..].fill(0);
        let u = std::net::UdpSocket::bind("10.205.0.2:0").unwrap();
        u.send_to(&junk, ("10.205.0.1", S_PORT)).unwrap();
    })
    .join()
    .unwrap();
    let o = cmd(
        "ip",
        &[
            "netns",
            "exec",
            &ns_w,
            "ping",
            "-c",
            "1",
            "-w",
            "20",
            "10.206.0.1",
        ],
    );
    let s = show(&run_dir, &name);
    assert!(
        o.status.success(),
        "no session after the cookie exchange: {}\n{s}\npeer log:\n{}",
        String::from_utf8_lossy(&o.stdout),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(
        s.contains("cookie-required=1"),
        "one cookie reply was to be sent: {s}"
    );
    if kind == "wireguard-go" {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            log.contains("cookie response"),
            "wireguard-go took no cookie: {log}"
        );
    }
    stop.store(true, Ordering::SeqCst);
    let r = run.join().unwrap();
    assert!(r.is_ok(), "{r:?}");
}
