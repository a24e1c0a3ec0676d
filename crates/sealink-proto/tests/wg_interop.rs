//! Interop of the sans-IO WireGuard core ([`sealink_proto::wg`]) with wireguard-go, between two
//! fresh network namespaces joined by a veth pair.
//!
//! ```text
//! ns A (this test, re-run inside it)                 ns W
//!   10.99.0.2 veth ------------------------------- veth 10.99.0.1
//!   UDP sockets driving WgPeer                       wireguard-go wgsN, 10.77.0.1/24, :51820
//!   tunnel addresses 10.77.0.2 (peer 1), .3 (peer 2)
//! ```
//!
//! 1. We initiate (peer 1): our initiation, wireguard-go's response, then a hand-built ICMP
//!    echo request 10.77.0.2 -> 10.77.0.1 sealed in a transport message; the kernel behind
//!    wireguard-go answers and we open and check its echo reply.
//! 2. wireguard-go initiates (peer 2, whose endpoint and a preshared key it is given): `ping 10.77.0.3` in ns W
//!    makes it send an initiation; we respond, open its echo requests and answer each with a
//!    sealed echo reply; ping must succeed.
//!
//! Skips, saying why, unless root with `ip`, `wg`, `ping`, /dev/net/tun and wireguard-go
//! (`$SEALINK_WIREGUARD_GO`, else `wireguard-go` on the PATH). The test re-runs its own binary
//! inside ns A (`ip netns exec`) for the client side, so the host's own namespace is untouched.

use std::net::{Ipv4Addr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use sealink_proto::HostKey;
use sealink_proto::time::Clock;
use sealink_proto::wg_reference::{WgEvent, WgPeer, WgPeerConfig};

const INNER: &str = "SEALINK_WG_INTEROP_INNER";
const WG_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const OUR_ADDR_1: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const OUR_ADDR_2: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 3);
const PEER2_PORT: u16 = 51999;
const WG_PORT: u16 = 51820;

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0")
    })
}

/// Namespaces, wireguard-go and files, removed on drop.
struct Lab {
    ns_a: String,
    ns_w: String,
    wg: Option<Child>,
    files: Vec<PathBuf>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut c) = self.wg.take() {
            // SIGTERM first, so that wireguard-go removes its UAPI socket; SIGKILL if it hangs.
            let _ = run("kill", &["-TERM", &c.id().to_string()]);
            let t0 = Instant::now();
            while c.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(3) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.ns_a, &self.ns_w] {
            let _ = run("ip", &["netns", "del", ns]);
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

fn b64(k: &[u8; 32]) -> String {
    B64.encode(k)
}

#[test]
fn wireguard_go_interop() {
    if let Ok(spec) = std::env::var(INNER) {
        inner(&spec);
        return;
    }
    if !is_root() {
        eprintln!("skipped: wg_interop needs root (network namespaces)");
        return;
    }
    let wg_go = std::env::var_os("SEALINK_WIREGUARD_GO")
        .map(PathBuf::from)
        .or_else(|| which("wireguard-go"));
    let Some(wg_go) = wg_go else {
        eprintln!("skipped: wireguard-go not found (apt-get install wireguard-go)");
        return;
    };
    for tool in ["ip", "wg", "ping"] {
        if which(tool).is_none() {
            eprintln!("skipped: {tool} not found (iproute2, wireguard-tools, iputils-ping)");
            return;
        }
    }
    if !Path::new("/dev/net/tun").exists() {
        eprintln!("skipped: no /dev/net/tun for wireguard-go");
        return;
    }
    let id = std::process::id() % 100_000;
    let mut lab = Lab {
        ns_a: format!("slwg{id}a"),
        ns_w: format!("slwg{id}w"),
        wg: None,
        files: Vec::new(),
    };
    if let Err(e) = run("ip", &["netns", "add", &lab.ns_a]) {
        eprintln!("skipped: cannot make a network namespace: {e}");
        return;
    }
    run("ip", &["netns", "add", &lab.ns_w]).expect("netns");
    let (ns_a, ns_w) = (lab.ns_a.clone(), lab.ns_w.clone());
    let (va, vw, wgif) = (format!("slwa{id}"), format!("slww{id}"), format!("wgs{id}"));
    run(
        "ip",
        &[
            "link", "add", &va, "netns", &ns_a, "type", "veth", "peer", "name", &vw, "netns", &ns_w,
        ],
    )
    .expect("veth");
    for (ns, dev, addr) in [(&ns_a, &va, "10.99.0.2/24"), (&ns_w, &vw, "10.99.0.1/24")] {
        run("ip", &["-n", ns, "addr", "add", addr, "dev", dev]).expect("addr");
        run("ip", &["-n", ns, "link", "set", dev, "up"]).expect("up");
        run("ip", &["-n", ns, "link", "set", "lo", "up"]).expect("lo");
    }

    // Keys: wireguard-go's and our two peers', all X25519, in wg's base64.
    // Peer 2 also has a preshared key (peer 1 has none: 32 zero bytes).
    let [wg_priv, ours1, ours2, psk2]: [[u8; 32]; 4] = std::array::from_fn(|_| rand::random());
    let public = |k: &[u8; 32]| *HostKey::from_private(*k).expect("key").public();
    let key_file = std::env::temp_dir().join(format!("sealink-wg-interop-{id}.key"));
    lab.files.push(key_file.clone());
    std::fs::write(&key_file, b64(&wg_priv)).expect("key file");
    let psk_file = std::env::temp_dir().join(format!("sealink-wg-interop-{id}.psk"));
    lab.files.push(psk_file.clone());
    std::fs::write(&psk_file, b64(&psk2)).expect("psk file");
    let psk_path = psk_file.to_string_lossy().into_owned();

    let log = std::env::temp_dir().join(format!("sealink-wg-interop-{id}.log"));
    lab.files.push(log.clone());
    lab.files
        .push(PathBuf::from(format!("/var/run/wireguard/{wgif}.sock")));
    let log_file = std::fs::File::create(&log).expect("log");
    lab.wg = Some(
        Command::new("ip")
            .args(["netns", "exec", &ns_w])
            .arg(&wg_go)
            .args(["-f", &wgif])
            .env("WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD", "1")
            .env("LOG_LEVEL", "verbose")
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .spawn()
            .expect("wireguard-go"),
    );
    let sock = PathBuf::from(format!("/var/run/wireguard/{wgif}.sock"));
    let t0 = Instant::now();
    while !sock.exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        sock.exists(),
        "wireguard-go made no UAPI socket: {}",
        read(&log)
    );
    let key_path = key_file.to_string_lossy().into_owned();
    let port = WG_PORT.to_string();
    let (p1, p2) = (b64(&public(&ours1)), b64(&public(&ours2)));
    let ep2 = format!("10.99.0.2:{PEER2_PORT}");
    run(
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
            &port,
            "peer",
            &p1,
            "allowed-ips",
            "10.77.0.2/32",
            "peer",
            &p2,
            "preshared-key",
            &psk_path,
            "allowed-ips",
            "10.77.0.3/32",
            "endpoint",
            &ep2,
        ],
    )
    .expect("wg set");
    run(
        "ip",
        &["-n", &ns_w, "addr", "add", "10.77.0.1/24", "dev", &wgif],
    )
    .expect("wg addr");
    run("ip", &["-n", &ns_w, "link", "set", &wgif, "up"]).expect("wg up");

    // The client side, in ns A: this very test binary, told what to do by the environment.
    let spec = [
        b64(&ours1),
        b64(&ours2),
        b64(&public(&wg_priv)),
        ns_w.clone(),
        b64(&psk2),
    ]
    .join(" ");
    let exe = std::env::current_exe().expect("exe");
    let status = Command::new("ip")
        .args(["netns", "exec", &ns_a])
        .arg(exe)
        .args([
            "--exact",
            "wireguard_go_interop",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(INNER, spec)
        .status()
        .expect("inner run");
    let shown = Command::new("ip")
        .args(["netns", "exec", &ns_w, "wg", "show", &wgif])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    eprintln!(
        "wg show {wgif} (wireguard-go {}):\n{shown}",
        wg_go.display()
    );
    assert!(
        status.success(),
        "client side failed; wireguard-go log:\n{}",
        read(&log)
    );
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn key32(s: &str) -> [u8; 32] {
    B64.decode(s)
        .ok()
        .and_then(|v| v.try_into().ok())
        .expect("32-byte base64 key")
}

/// RFC 1071 checksum.
fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4 packet carrying an ICMP echo (`kind` 8 request, 0 reply), both checksums set.
fn icmp_echo(src: Ipv4Addr, dst: Ipv4Addr, kind: u8, id: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    let mut icmp = vec![kind, 0, 0, 0];
    icmp.extend_from_slice(&id.to_be_bytes());
    icmp.extend_from_slice(&seq.to_be_bytes());
    icmp.extend_from_slice(data);
    let c = checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let total = (20 + icmp.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0x5e, 0xa1, 0x40, 0, 64, 1, 0, 0]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(&icmp);
    ip
}

/// An ICMP echo in an IPv4 packet, checked: (src, dst, type, id, seq, data).
struct Echo {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    kind: u8,
    id: u16,
    seq: u16,
    data: Vec<u8>,
}

fn parse_echo(p: &[u8]) -> Result<Echo, String> {
    if p.len() < 28 || p[0] != 0x45 || p[9] != 1 {
        return Err(format!("not IPv4/ICMP: {p:02x?}"));
    }
    if usize::from(u16::from_be_bytes([p[2], p[3]])) != p.len() {
        return Err("IP length does not match the packet".into());
    }
    if checksum(&p[..20]) != 0 {
        return Err("bad IP header checksum".into());
    }
    let icmp = &p[20..];
    if checksum(icmp) != 0 {
        return Err("bad ICMP checksum".into());
    }
    Ok(Echo {
        src: Ipv4Addr::new(p[12], p[13], p[14], p[15]),
        dst: Ipv4Addr::new(p[16], p[17], p[18], p[19]),
        kind: icmp[0],
        id: u16::from_be_bytes([icmp[4], icmp[5]]),
        seq: u16::from_be_bytes([icmp[6], icmp[7]]),
        data: icmp[8..].to_vec(),
    })
}

fn unix() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
}

/// The client side, run inside ns A.
fn inner(spec: &str) {
    let parts: Vec<&str> = spec.split(' ').collect();
    let [k1, k2, wg_pub, ns_w, psk2] = parts[..] else {
        panic!("bad spec");
    };
    let wg_pub = key32(wg_pub);
    let clock = Clock::new();
    let mut buf = [0u8; 2048];

    // 1. We initiate.
    let mut peer = WgPeer::new(
        HostKey::from_private(key32(k1)).expect("key"),
        WgPeerConfig {
            public_key: wg_pub,
            preshared_key: None,
        },
    )
    .expect("peer");
    let sock = UdpSocket::bind("10.99.0.2:0").expect("bind");
    sock.connect(("10.99.0.1", WG_PORT)).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut done = false;
    for attempt in 1..=5 {
        let init = peer.initiate(clock.now(), unix()).expect("initiate");
        sock.send(&init).expect("send");
        eprintln!(
            "[1] sent our initiation ({} bytes), attempt {attempt}",
            init.len()
        );
        let Ok(n) = sock.recv(&mut buf) else {
            continue;
        };
        match peer.receive(clock.now(), None, &buf[..n]) {
            WgEvent::HandshakeComplete => {
                eprintln!("[1] wireguard-go's response ({n} bytes) completes the handshake");
                done = true;
                break;
            }
            e => eprintln!("[1] unexpected: {e:?}"),
        }
    }
    assert!(done, "no handshake with wireguard-go");
    let payload = b"sealink speaks WireGuard";
    let req = icmp_echo(OUR_ADDR_1, WG_ADDR, 8, 0x5ea1, 1, payload);
    let msg = peer.encapsulate(clock.now(), &req).expect("seal");
    sock.send(&msg).expect("send");
    eprintln!(
        "[1] sent an ICMP echo request {OUR_ADDR_1} -> {WG_ADDR} ({} bytes, {} sealed)",
        req.len(),
        msg.len()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let reply = loop {
        assert!(Instant::now() < deadline, "no echo reply from wireguard-go");
        let Ok(n) = sock.recv(&mut buf) else {
            continue;
        };
        match peer.receive(clock.now(), None, &buf[..n]) {
            WgEvent::Packet(p) => break p,
            e => eprintln!("[1] meanwhile: {e:?}"),
        }
    };
    let echo = parse_echo(&reply).expect("echo reply");
    assert_eq!(
        (echo.src, echo.dst, echo.kind, echo.id, echo.seq),
        (WG_ADDR, OUR_ADDR_1, 0, 0x5ea1, 1)
    );
    assert_eq!(echo.data, payload);
    eprintln!(
        "[1] opened the echo reply {WG_ADDR} -> {OUR_ADDR_1} ({} bytes): checksums, id, seq \
         and data match",
        reply.len()
    );

    // 2. wireguard-go initiates, made to by a ping from its namespace.
    let mut peer2 = WgPeer::new(
        HostKey::from_private(key32(k2)).expect("key"),
        WgPeerConfig {
            public_key: wg_pub,
            preshared_key: Some(key32(psk2)),
        },
    )
    .expect("peer");
    let sock2 = UdpSocket::bind(("10.99.0.2", PEER2_PORT)).expect("bind");
    sock2
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let target = OUR_ADDR_2.to_string();
    let mut ping = Command::new("ip")
        .args([
            "netns", "exec", ns_w, "ping", "-c", "3", "-i", "0.3", "-W", "5", &target,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("ping");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut answered = 0;
    let status = loop {
        if let Some(s) = ping.try_wait().expect("ping") {
            break s;
        }
        assert!(Instant::now() < deadline, "ping did not finish");
        let Ok((n, from)) = sock2.recv_from(&mut buf) else {
            continue;
        };
        match peer2.receive(clock.now(), Some(from), &buf[..n]) {
            WgEvent::Send(resp) => {
                eprintln!(
                    "[2] wireguard-go's initiation ({n} bytes) from {from}: sent our response ({} bytes)",
                    resp.len()
                );
                sock2.send_to(&resp, from).expect("send");
            }
            WgEvent::Packet(p) => {
                let e = parse_echo(&p).expect("echo request");
                assert_eq!((e.src, e.dst, e.kind), (WG_ADDR, OUR_ADDR_2, 8));
                let r = icmp_echo(OUR_ADDR_2, WG_ADDR, 0, e.id, e.seq, &e.data);
                let m = peer2.encapsulate(clock.now(), &r).expect("seal");
                sock2.send_to(&m, from).expect("send");
                answered += 1;
                eprintln!(
                    "[2] opened echo request seq {} and sent the sealed reply",
                    e.seq
                );
            }
            e => eprintln!("[2] meanwhile: {e:?}"),
        }
    };
    let out = ping.wait_with_output().expect("ping output");
    eprintln!("[2] ping: {}", String::from_utf8_lossy(&out.stdout).trim());
    assert!(status.success(), "ping through wireguard-go to us failed");
    assert!(answered >= 1);
    assert_eq!(peer2.stats().handshakes_completed, 1);
    assert_eq!(
        peer.stats().dropped_total() + peer2.stats().dropped_total(),
        0
    );
}
