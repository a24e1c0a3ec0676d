//! Tunnel mode through a hostile path: two hosts in network namespaces A and B, each joined by a
//! veth pair to a third namespace R where `sealink-lab relay` sits between them losing, reordering,
//! duplicating, corrupting and replaying datagrams in both directions. A TCP transfer of several
//! MiB through the tunnel must still arrive intact, and the tunnels' drop counters must account
//! for every corrupted datagram the relay sent, and show replays refused.
//!
//! Needs root (`ip netns`, veth, TUN); skips with a printed reason where `ip netns add` fails.
//! Runs both binaries: the relay is the lab's, the tunnels (`sealink up`, `show`, `keygen`) the
//! product's, found beside `sealink-lab` (`common::sealink`: built by `cargo test --workspace`).
//! Namespaces and processes are removed by Drop guards, also when an assertion fails.

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

mod common;

use common::ip::{ip, ip_ok};

/// The relay's binary.
const LAB: &str = env!("CARGO_BIN_EXE_sealink-lab");
const TRANSFER: usize = 6 << 20;

fn in_ns(ns: &str, args: &[&str]) {
    let mut a = vec!["netns", "exec", ns];
    a.extend_from_slice(args);
    ip_ok(&a);
}

/// A background process, stopped with SIGTERM (then SIGKILL) and reaped on drop. Its stderr is
/// forwarded line by line to a channel; stdout is kept for `stop`.
struct Proc {
    name: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Proc {
    /// Runs `bin ARGS` in namespace `ns`.
    fn spawn(name: &str, ns: &str, bin: &Path, args: &[&str]) -> Proc {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(bin)
            .args(args)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc {
            name: name.into(),
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// Waits for a stderr line starting with `prefix`.
    fn wait_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with(prefix) => return l,
                Ok(l) => self.seen.push(l),
                Err(_) => panic!(
                    "{}: no `{prefix}` line within {timeout:?}; stderr so far: {:?}; exit: {:?}",
                    self.name,
                    self.seen,
                    self.child.try_wait()
                ),
            }
        }
    }

    fn terminate(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let end = Instant::now() + Duration::from_secs(3);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the process with SIGTERM and returns its standard output.
    fn stop(mut self) -> String {
        self.terminate();
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        out
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}

/// Network namespaces (and with them their veths and TUNs), deleted on drop.
struct Namespaces(Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// Runs `f` on a thread that has entered namespace `ns` (sockets it opens stay in `ns`).
fn in_namespace<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    thread::spawn(move || {
        let fd = fs::File::open(&path).expect("open netns");
        rustix::thread::move_into_link_name_space(
            fd.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .expect("setns");
        f()
    })
    .join()
    .expect("namespace thread")
}

fn sha256(data: &[u8]) -> Vec<u8> {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data)
        .as_ref()
        .to_vec()
}

/// Drop reasons of the tunnel itself, about IP packets rather than datagrams.
const PACKET_DROPS: [&str; 7] = [
    "no-route",
    "link-local",
    "source-not-allowed",
    "malformed-packet",
    "no-endpoint",
    "staging-full",
    "handshake-timeout",
];

/// What `sealink show NAME` says about received datagrams (one peer).
struct Shown {
    /// Datagrams accepted (authenticated and fresh), handshakes included.
    rx: u64,
    /// Drops by reason.
    drops: HashMap<String, u64>,
    text: String,
}

impl Shown {
    fn drop(&self, k: &str) -> u64 {
        self.drops.get(k).copied().unwrap_or(0)
    }
    fn datagram_drops(&self) -> u64 {
        self.drops
            .iter()
            .filter(|(k, _)| !PACKET_DROPS.contains(&k.as_str()))
            .map(|(_, v)| v)
            .sum()
    }
}

/// `sealink show NAME` in the tunnel's network namespace (control sockets are per namespace).
fn show(ns: &str, name: &str) -> Shown {
    let o = common::output_ok(
        Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(common::sealink())
            .args(["show", name]),
        &format!("sealink show {name}"),
    );
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("drops:"))
        .unwrap_or_else(|| panic!("no drops line in {text}"));
    let drops = line
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.parse().unwrap()))
        .collect();
    // The peer's "datagrams: rx=N tx=M ..." line.
    let rx = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("datagrams: rx="))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no datagrams line in {text}"));
    Shown { rx, drops, text }
}

/// The relay's `key=value` counters, keyed `direction.key`.
fn relay_stats(out: &str) -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for line in out.lines() {
        let Some((dir, fields)) = line.strip_prefix("relay ").and_then(|r| r.split_once(": "))
        else {
            continue;
        };
        for (k, v) in fields
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
        {
            m.insert(format!("{dir}.{k}"), v.parse().unwrap());
        }
    }
    m
}

fn write_config(dir: &Path, side: &str, addr: &str, peer_key: &str, peer: (&str, Option<&str>)) {
    let (peer_ip, endpoint) = peer;
    let endpoint = endpoint.map_or(String::new(), |e| format!("endpoint = \"{e}\"\n"));
    let cfg = format!(
        "[interface]\nname = \"{side}\"\nprivate_key = \"{key}\"\naddress = \"{addr}/24\"\n\
         listen_port = 51820\nmtu = 1420\n\n[[peer]]\nname = \"peer\"\npublic_key = \"{peer_key}\"\n\
         {endpoint}allowed_ips = [\"{peer_ip}/32\"]\n",
        key = dir.join(format!("{side}.key")).display(),
    );
    fs::write(dir.join(format!("{side}.toml")), cfg).unwrap();
}

fn keygen(dir: &Path, side: &str) -> String {
    let path = dir.join(format!("{side}.key"));
    common::output_ok(
        Command::new(common::sealink()).args(["keygen", "host", path.to_str().unwrap()]),
        "sealink keygen",
    );
    let public = fs::read_to_string(path.with_extension("key.pub")).unwrap();
    public
        .split_whitespace()
        .nth(1)
        .expect("public key field")
        .to_owned()
}

#[test]
fn tcp_through_a_hostile_relay_arrives_intact_and_forgeries_are_dropped() {
    let tag = std::process::id() % 100_000;
    let (na, nb, nr) = (
        format!("slfa{tag}"),
        format!("slfb{tag}"),
        format!("slfr{tag}"),
    );
    let probe = ip(&["netns", "add", &na]);
    if !probe.status.success() {
        eprintln!(
            "skipping: `ip netns add` failed (needs root): {}",
            String::from_utf8_lossy(&probe.stderr).trim()
        );
        return;
    }
    // Root: `up` switches to the default user, which must exist.
    common::tunnel_user::ensure();
    let mut spaces = Namespaces(vec![na.clone()]);
    for ns in [&nb, &nr] {
        ip_ok(&["netns", "add", ns]);
        spaces.0.push(ns.clone());
    }
    // A (10.61.1.2) -- R (10.61.1.1 | 10.61.2.1) -- B (10.61.2.2); R does not forward: the only
    // way between A and B is the relay.
    let (va, vra, vb, vrb) = (
        format!("sfa{tag}"),
        format!("sfra{tag}"),
        format!("sfb{tag}"),
        format!("sfrb{tag}"),
    );
    ip_ok(&[
        "link", "add", &va, "netns", &na, "type", "veth", "peer", "name", &vra, "netns", &nr,
    ]);
    ip_ok(&[
        "link", "add", &vb, "netns", &nb, "type", "veth", "peer", "name", &vrb, "netns", &nr,
    ]);
    for (ns, dev, addr) in [
        (&na, &va, "10.61.1.2/24"),
        (&nr, &vra, "10.61.1.1/24"),
        (&nb, &vb, "10.61.2.2/24"),
        (&nr, &vrb, "10.61.2.1/24"),
    ] {
        in_ns(ns, &["ip", "addr", "add", addr, "dev", dev]);
        in_ns(ns, &["ip", "link", "set", dev, "up"]);
        in_ns(ns, &["ip", "link", "set", "lo", "up"]);
    }

    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().to_owned();
    // Interface names double as control socket names (RUN_DIR/net-INODE/NAME.sock): unique per run.
    let (ta, tb) = (format!("sla{tag}"), format!("slb{tag}"));
    let (pa, pb) = (keygen(&dir, &ta), keygen(&dir, &tb));
    // A knows B only by the relay's address; B learns A's (the relay's upstream socket) from
    // A's authenticated handshake.
    write_config(
        &dir,
        &ta,
        "10.62.0.1",
        &pb,
        ("10.62.0.2", Some("10.61.1.1:40000")),
    );
    write_config(&dir, &tb, "10.62.0.2", &pa, ("10.62.0.1", None));

    let mut relay = Proc::spawn(
        "relay",
        &nr,
        Path::new(LAB),
        &[
            "relay",
            "--listen",
            "10.61.1.1:40000",
            "--to",
            "10.61.2.2:51820",
            "--loss",
            "0.05",
            "--reorder",
            "0.05",
            "--duplicate",
            "0.05",
            "--corrupt",
            "0.02",
            "--replay",
            "0.02",
            "--replay-delay-ms",
            "300",
            "--seed",
            "5",
        ],
    );
    relay.wait_line("relay: listening on", Duration::from_secs(10));
    let sealink = common::sealink();
    // `sealink up` of tunnel `tun` in namespace `ns`, once it says it is up.
    let up = |name: &str, ns: &str, tun: &str| {
        let config = dir.join(format!("{tun}.toml"));
        let mut p = Proc::spawn(name, ns, &sealink, &["up", config.to_str().unwrap()]);
        p.wait_line("up: ", Duration::from_secs(10));
        p
    };
    let up_b = up("up b", &nb, &tb);
    let up_a = up("up a", &na, &ta);

    // A deterministic, incompressible-looking payload.
    let mut data = vec![0u8; TRANSFER];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for b in data.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let want = sha256(&data);

    let listener = in_namespace(&nb, || {
        TcpListener::bind("10.62.0.2:5001").expect("bind in B")
    });
    let receiver = thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut got = Vec::with_capacity(TRANSFER);
        s.read_to_end(&mut got).map(|_| got)
    });
    let t0 = Instant::now();
    let dest: SocketAddr = "10.62.0.2:5001".parse().unwrap();
    // The first SYNs may be lost with the handshake; connect retries for a while.
    let mut stream = in_namespace(&na, move || {
        let end = Instant::now() + Duration::from_secs(15);
        loop {
            match TcpStream::connect_timeout(&dest, Duration::from_secs(5)) {
                Ok(s) => return s,
                Err(e) if Instant::now() < end => {
                    eprintln!("connect: {e}; retrying");
                    thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("cannot connect through the tunnel: {e}"),
            }
        }
    });
    stream
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(&data).expect("send through the tunnel");
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let got = receiver
        .join()
        .unwrap()
        .expect("receive through the tunnel");
    let took = t0.elapsed();
    assert_eq!(got.len(), data.len(), "transfer incomplete");
    assert!(sha256(&got) == want, "transfer corrupted");
    eprintln!(
        "{} MiB through the faulty relay in {took:.2?}",
        TRANSFER >> 20
    );

    // Let the last replays (300 ms after capture) reach the tunnels before reading counters.
    thread::sleep(Duration::from_millis(500));
    let (sa, sb) = (show(&na, &ta), show(&nb, &tb));
    let r = relay_stats(&relay.stop());
    eprintln!("relay: {r:?}\n{}\n{}", sa.text, sb.text);
    let rs = |dir: &str, k: &str| r[&format!("{dir}.{k}")];

    // The relay really did all of it, toward B (the bulk of the traffic) at least.
    for k in ["lost", "reordered", "duplicated", "corrupted", "replayed"] {
        assert!(
            rs("client->server", k) > 0,
            "relay did not inject {k}: {r:?}"
        );
    }
    // Corrupted datagrams fail authentication; replayed and duplicated copies hit the window.
    assert!(
        sb.drop("auth-failed") > 0,
        "no auth-failed drops:\n{}",
        sb.text
    );
    assert!(
        sb.drop("replayed") + sb.drop("too-old") > 0,
        "no replay drops:\n{}",
        sb.text
    );
    for (dir, s) in [("client->server", &sb), ("server->client", &sa)] {
        // Every datagram the relay delivered was either accepted or dropped and counted...
        assert!(
            s.rx + s.datagram_drops() <= rs(dir, "sent"),
            "{dir}: {} accepted + {} dropped > {} sent",
            s.rx,
            s.datagram_drops(),
            rs(dir, "sent")
        );
        // ...and only distinct datagrams forwarded unchanged were accepted: no corrupted one, no
        // duplicate, no replayed copy (the relay replays what it sent, corrupted or not).
        let pristine = rs(dir, "received") - rs(dir, "lost") - rs(dir, "corrupted");
        assert!(
            s.rx <= pristine,
            "{dir}: {} datagrams accepted, only {pristine} went out unchanged once",
            s.rx
        );
    }

    drop(up_a);
    drop(up_b);
    drop(spaces);
    drop(scratch);
}
