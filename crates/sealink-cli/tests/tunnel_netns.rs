//! `sealink up` between two network namespaces joined by veth: ping and a TCP transfer of several
//! MiB through the tunnel arrive intact; `show` reports the peer, counters and a no-route drop;
//! `sealink down` and SIGTERM both remove the interface. Needs root (`ip netns add`); skips with a
//! printed reason where that fails. Namespaces, processes and sockets are removed by a Drop guard,
//! so a failing assertion leaves nothing behind.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;

use common::BIN;

#[path = "../../sealink-tunnel/tests/common/tunnel_user.rs"]
mod tunnel_user;

use common::netns::{ok, sh};

/// Two namespaces, their tunnels and a scratch directory; all removed on drop.
struct Lab {
    ns: [String; 2],
    ifname: [String; 2],
    dir: tempfile::TempDir,
    /// `SEALINK_RUN_DIR` of every command run here (inside `dir`), so tests do not share
    /// `/run/sealink`.
    run_dir: PathBuf,
    /// `sealink up` of each side.
    children: [Option<Child>; 2],
}

impl Drop for Lab {
    fn drop(&mut self) {
        common::netns::tear_down(self.children.iter_mut().flatten(), &self.ns);
    }
}

impl Lab {
    /// None (after printing why) where network namespaces cannot be created.
    fn new(tag: &str) -> Option<Lab> {
        Self::named(tag, false)
    }

    /// With `same_name`, both tunnels get one interface name (each in its own namespace).
    fn named(tag: &str, same_name: bool) -> Option<Lab> {
        let id = format!("{}{}", tag, std::process::id() % 100_000);
        let ns = [format!("sl{id}a"), format!("sl{id}b")];
        if !common::netns::add_or_skip(&ns[0]) {
            return None;
        }
        // Root from here on: `up` switches to the default user, which must exist.
        tunnel_user::ensure();
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // 0755 whatever the umask: user nobody must reach the control socket below it for
        // the peer-credential check to be what refuses it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let ifname = if same_name {
            [format!("t{id}"), format!("t{id}")]
        } else {
            [format!("t{id}a"), format!("t{id}b")]
        };
        let lab = Lab {
            ifname,
            ns: ns.clone(),
            run_dir: dir.path().join("run"),
            dir,
            children: [None, None],
        };
        ok("ip", &["netns", "add", &ns[1]]);
        common::netns::join(&ns, &format!("v{id}"), "10.201.0");
        Some(lab)
    }

    fn exec(&self, side: usize, args: &[&str]) -> Output {
        let mut a = vec!["netns", "exec", &self.ns[side]];
        a.extend_from_slice(args);
        Command::new("ip")
            .args(&a)
            .env("SEALINK_RUN_DIR", &self.run_dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run ip {a:?}: {e}"))
    }

    fn public_key(&self, side: usize) -> String {
        let key = self.dir.path().join(format!("host{side}.key"));
        ok(BIN, &["keygen", "host", key.to_str().unwrap()]);
        let text =
            std::fs::read_to_string(self.dir.path().join(format!("host{side}.key.pub"))).unwrap();
        text.split_whitespace().nth(1).unwrap().to_owned()
    }

    fn write_configs(&self) -> [PathBuf; 2] {
        self.write_configs_with("")
    }

    /// Configs with `extra` lines added to `[interface]`.
    fn write_configs_with(&self, extra: &str) -> [PathBuf; 2] {
        self.write_configs_full(extra, ["", ""])
    }

    /// Configs with `extra` lines added to `[interface]` and, on each side, `allowed[side]`
    /// (`, "PREFIX", ...`) appended to that side's peer's allowed_ips.
    fn write_configs_full(&self, extra: &str, allowed: [&str; 2]) -> [PathBuf; 2] {
        let keys = [self.public_key(0), self.public_key(1)];
        [0usize, 1].map(|side| {
            let other = 1 - side;
            // Side 0 knows side 1's endpoint; side 1 learns side 0's from its handshake.
            let endpoint = if side == 0 {
                "endpoint = \"10.201.0.2:51820\"\n"
            } else {
                ""
            };
            let cfg = format!(
                "[interface]\nname = \"{}\"\nprivate_key = \"host{side}.key\"\naddress = \"10.202.0.{}/24\"\nlisten_port = 51820\n{extra}\n[[peer]]\nname = \"peer{other}\"\npublic_key = \"{}\"\n{endpoint}allowed_ips = [\"10.202.0.{}/32\"{}]\n",
                self.ifname[side],
                side + 1,
                keys[other],
                other + 1,
                allowed[side]
            );
            let path = self.dir.path().join(format!("tunnel{side}.toml"));
            std::fs::write(&path, cfg).unwrap();
            path
        })
    }

    /// Starts `sealink up` in a namespace and waits for its `up:` line.
    fn up(&mut self, side: usize, cfg: &Path) {
        let rx = self.spawn_up(side, cfg.as_os_str(), &[]);
        self.wait_up(side, rx);
    }

    /// Starts `sealink up ARG` in a namespace with `envs` added; its stderr lines arrive on the
    /// returned channel.
    fn spawn_up(
        &mut self,
        side: usize,
        arg: &std::ffi::OsStr,
        envs: &[(&str, &std::ffi::OsStr)],
    ) -> mpsc::Receiver<String> {
        // By its full path: a PATH in `envs` would also be used to find it.
        let mut child = Command::new(ip_bin())
            .args(["netns", "exec", &self.ns[side], BIN, "up"])
            .arg(arg)
            .env("SEALINK_RUN_DIR", &self.run_dir)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        self.children[side] = Some(child);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        rx
    }

    /// Waits for the `up:` line of side `side` on `rx`.
    fn wait_up(&self, side: usize, rx: mpsc::Receiver<String>) {
        let want = format!("up: {}", self.ifname[side]);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l == want => return,
                Ok(l) => seen.push(l),
                Err(_) => panic!("no {want:?} from sealink up; stderr: {seen:#?}"),
            }
        }
    }

    fn show(&self, side: usize) -> String {
        let o = self.exec(side, &[BIN, "show", &self.ifname[side]]);
        assert!(
            o.status.success(),
            "show failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// The first peer's byte counter `name` (`rx_bytes`, `tx_bytes`) from `show --json`: the
    /// text form gives bytes in human units.
    fn peer_bytes(&self, side: usize, name: &str) -> u64 {
        let o = self.exec(side, &[BIN, "show", "--json", &self.ifname[side]]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("show --json parses");
        v[0]["peers"][0][name]
            .as_u64()
            .unwrap_or_else(|| panic!("no {name} in {v}"))
    }

    /// Writes both configurations and brings both tunnels up (the responder first).
    fn up_both(&mut self) {
        let cfgs = self.write_configs();
        self.up(1, &cfgs[1]);
        self.up(0, &cfgs[0]);
        assert!(self.has_link(0) && self.has_link(1));
    }

    /// Pings the far end of the tunnel from namespace 0 `count` times; all must answer.
    fn ping_through(&self, count: u32) {
        let o = self.exec(
            0,
            &[
                "ping",
                "-c",
                &count.to_string(),
                "-i",
                "0.2",
                "-W",
                "5",
                "10.202.0.2",
            ],
        );
        assert!(
            o.status.success(),
            "ping through the tunnel failed: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }

    fn has_link(&self, side: usize) -> bool {
        sh(
            "ip",
            &["-n", &self.ns[side], "link", "show", &self.ifname[side]],
        )
        .status
        .success()
    }
}

/// `name=N` from a show output, 0 if absent.
fn counter(show: &str, name: &str) -> u64 {
    show.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .map_or(0, |v| v.parse().unwrap())
}

/// Where `cmd` is on the test's PATH.
fn which(cmd: &str) -> PathBuf {
    let o = sh("sh", &["-c", &format!("command -v {cmd}")]);
    assert!(o.status.success(), "{cmd} not found");
    PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())
}

fn ip_bin() -> PathBuf {
    which("ip")
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

const SINK: &str = r#"
import socket, hashlib, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.202.0.2", 7000)); s.listen(1); s.settimeout(30)
print("listening", flush=True)
c, _ = s.accept(); c.settimeout(30); h = hashlib.sha256(); n = 0
while True:
    d = c.recv(1 << 16)
    if not d: break
    h.update(d); n += len(d)
print(n, h.hexdigest(), flush=True)
"#;

const SOURCE: &str = r#"
import socket, hashlib, os, sys
data = os.urandom(int(sys.argv[1]))
s = socket.create_connection(("10.202.0.2", 7000), timeout=30)
s.sendall(data); s.close()
print(len(data), hashlib.sha256(data).hexdigest(), flush=True)
"#;

/// `SINK_MANY K`: accepts K connections at once; each starts with its index byte. Prints one
/// line per connection, by index: the index, the bytes after it and their SHA-256.
const SINK_MANY: &str = r#"
import socket, hashlib, sys, threading
k = int(sys.argv[1]); res = {}
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.202.0.2", 7001)); s.listen(k); s.settimeout(30)
print("listening", flush=True)
def serve(c):
    c.settimeout(30); h = hashlib.sha256(); n = 0; idx = None
    while True:
        d = c.recv(1 << 16)
        if not d: break
        if idx is None: idx, d = d[0], d[1:]
        h.update(d); n += len(d)
    res[idx] = (n, h.hexdigest())
ts = []
for _ in range(k):
    c, _ = s.accept(); t = threading.Thread(target=serve, args=(c,)); t.start(); ts.append(t)
for t in ts: t.join()
for i in sorted(res): print(i, *res[i], flush=True)
"#;

/// `SOURCE_MANY K N`: K connections at once, each its index byte then N random bytes; prints
/// what `SINK_MANY` should.
const SOURCE_MANY: &str = r#"
import socket, hashlib, os, sys, threading
k, n = int(sys.argv[1]), int(sys.argv[2]); res = {}
def send(i):
    data = os.urandom(n)
    s = socket.create_connection(("10.202.0.2", 7001), timeout=30)
    s.sendall(bytes([i]) + data); s.close()
    res[i] = (n, hashlib.sha256(data).hexdigest())
ts = [threading.Thread(target=send, args=(i,)) for i in range(k)]
for t in ts: t.start()
for t in ts: t.join()
for i in sorted(res): print(i, *res[i], flush=True)
"#;

const NO_ROUTE: &str = r#"
import socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3): u.sendto(b"x" * 100, ("10.202.0.77", 9))
"#;

#[test]
fn tunnel_between_namespaces() {
    let Some(mut lab) = Lab::new("u") else { return };
    lab.up_both();

    if have("ping") {
        lab.ping_through(3);
    } else {
        println!("ping not installed: ping step skipped (TCP transfer below still runs)");
    }

    transfer(&lab, 8 << 20);

    // show: the peer, a live session, counters.
    let s0 = lab.show(0);
    assert!(s0.contains("peer: peer1"), "{s0}");
    assert!(s0.contains("session up"), "{s0}");
    assert!(s0.contains("endpoint: 10.201.0.2:51820"), "{s0}");
    assert!(lab.peer_bytes(0, "tx_bytes") >= 8 << 20, "{s0}");
    let s1 = lab.show(1);
    assert!(lab.peer_bytes(1, "rx_bytes") >= 8 << 20, "{s1}");
    assert!(
        s1.contains("endpoint: 10.201.0.1:51820"),
        "learned from the handshake: {s1}"
    );
    assert_eq!(counter(&s1, "auth-failed"), 0, "{s1}");

    // A packet to an address inside the interface's subnet but outside every allowed IP.
    let before = counter(&lab.show(0), "no-route");
    let o = lab.exec(0, &["python3", "-c", NO_ROUTE]);
    assert!(o.status.success());
    let after = counter(&lab.show(0), "no-route");
    assert!(after >= before + 3, "no-route {before} -> {after}");

    // `sealink down` waits until the interface is gone; SIGTERM removes the other one.
    let o = lab.exec(0, &[BIN, "down", &lab.ifname[0]]);
    assert!(
        o.status.success(),
        "down: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!lab.has_link(0), "interface still there after down");
    let pid = lab.children[1].as_ref().unwrap().id().to_string();
    ok("kill", &["-TERM", &pid]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = lab.children[1].as_mut().unwrap().try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "sealink up ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status after SIGTERM: {status}");
    assert!(!lab.has_link(1), "interface still there after SIGTERM");
    let status = lab.children[0].as_mut().unwrap().wait().unwrap();
    assert!(status.success(), "exit status after down: {status}");
    assert!(
        sockets(&lab.run_dir).is_empty(),
        "control sockets left behind: {:?}",
        sockets(&lab.run_dir)
    );
}

/// Control sockets under a run directory (one level of per-namespace directories).
fn sockets(run_dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut out = Vec::new();
    let mut dirs = vec![run_dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                dirs.push(e.path());
            } else if t.is_socket() {
                out.push(e.path());
            }
        }
    }
    out
}

/// Starts the Python sink `script` (with `args`) in side 1's namespace and waits until it
/// listens; returns the process and its output.
fn listening_sink(
    lab: &Lab,
    script: &str,
    args: &[&str],
) -> (std::process::Child, BufReader<std::process::ChildStdout>) {
    let mut sink = Command::new("ip")
        .args(["netns", "exec", &lab.ns[1], "python3", "-c", script])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(sink.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "listening");
    (sink, out)
}

/// A TCP transfer of `n` random bytes from side 0 to side 1, checked by SHA-256 on both ends.
fn transfer(lab: &Lab, n: usize) {
    assert!(have("python3"), "python3 is needed for the TCP transfer");
    let (mut sink, mut out) = listening_sink(lab, SINK, &[]);
    let sent = lab.exec(0, &["python3", "-c", SOURCE, &n.to_string()]);
    assert!(
        sent.status.success(),
        "sender: {}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let mut got = String::new();
    out.read_line(&mut got).unwrap();
    let _ = sink.wait();
    let sent = String::from_utf8_lossy(&sent.stdout);
    assert_eq!(got.trim(), sent.trim(), "bytes and SHA-256 must match");
    assert!(got.starts_with(&n.to_string()));
}

/// `k` TCP connections at once from side 0 to side 1, `n` random bytes each, every one checked
/// by SHA-256 on both ends.
fn transfer_many(lab: &Lab, k: usize, n: usize) {
    assert!(have("python3"), "python3 is needed for the TCP transfers");
    let (mut sink, mut out) = listening_sink(lab, SINK_MANY, &[&k.to_string()]);
    let sent = lab.exec(
        0,
        &["python3", "-c", SOURCE_MANY, &k.to_string(), &n.to_string()],
    );
    assert!(
        sent.status.success(),
        "senders: {}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let mut got = String::new();
    std::io::Read::read_to_string(&mut out, &mut got).unwrap();
    let _ = sink.wait();
    let sent = String::from_utf8_lossy(&sent.stdout);
    assert_eq!(got.lines().count(), k, "{got}");
    assert_eq!(
        got.trim(),
        sent.trim(),
        "bytes and SHA-256 of every connection must match"
    );
}

/// The data path's threads from `show --json`: (name, its counter `field`).
fn by_thread(lab: &Lab, side: usize, field: &str) -> Vec<(String, u64)> {
    let o = lab.exec(side, &[BIN, "show", "--json", &lab.ifname[side]]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("show --json parses");
    v[0]["threads"]
        .as_array()
        .expect("threads in show --json")
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or("").to_owned(),
                t[field]
                    .as_u64()
                    .unwrap_or_else(|| panic!("no counter {field} in {t}")),
            )
        })
        .collect()
}

/// The engine-threaded data path as it was before issue 43 (`handoff = "always"`): several
/// crypto workers taking every batch, a multi-queue TUN device, `SO_REUSEPORT` sockets steered
/// by lane, a reader per direction and TUN writer threads, across real namespaces: ping, a
/// checked TCP transfer, twelve checked connections at once, and `show` reporting the shape.
/// The peers agree on lanes, so one peer's connections arrive on more than one socket, each
/// datagram on its lane's; every TUN write is a writer's, and the twelve connections use more
/// than one of them.
#[test]
fn parallel_data_path_between_namespaces() {
    let Some(mut lab) = Lab::new("p") else { return };
    let cfgs = lab.write_configs_with("workers = 3\nqueues = 3\nhandoff = \"always\"\n");
    lab.up(1, &cfgs[1]);
    lab.up(0, &cfgs[0]);
    if have("ping") {
        lab.ping_through(3);
    }
    transfer(&lab, 16 << 20);
    transfer_many(&lab, 12, 2 << 20);
    for side in 0..2 {
        let s = lab.show(side);
        assert!(s.contains("crypto_workers=3"), "{s}");
        assert!(s.contains("tun_queues=3"), "{s}");
        assert!(s.contains("udp_sockets=3"), "{s}");
        assert!(s.contains("handoff=always tun_writers=3"), "{s}");
        assert!(s.contains("lanes=steered"), "{s}");
        assert!(s.contains("(session up, lanes)"), "{s}");
        assert_eq!(counter(&s, "auth-failed"), 0, "{s}");
        assert_eq!(counter(&s, "replayed"), 0, "{s}");
    }
    assert!(lab.peer_bytes(1, "rx_bytes") >= (16 << 20) + 12 * (2 << 20));
    // Twelve connections all on one of three lanes: a chance of 3 in 3^12.
    let receivers = by_thread(&lab, 1, "udp_receive_datagrams");
    let busy: Vec<_> = receivers
        .iter()
        .filter(|(name, n)| name.starts_with("sl-udp-") && *n > 100)
        .collect();
    assert!(
        busy.len() >= 2,
        "one peer's datagrams spread over the sockets by lane: {receivers:?}"
    );
    // Each datagram reached the socket its lane names (veth keeps GSO batches whole, so no
    // receive GRO batch mixes lanes here).
    let strays = by_thread(&lab, 1, "lane_strays");
    assert!(
        strays.iter().all(|(_, n)| *n == 0),
        "datagrams on another lane's socket: {strays:?}"
    );
    let threads = by_thread(&lab, 1, "tun_write_packets");
    let writers: Vec<_> = threads
        .iter()
        .filter(|(name, n)| name.starts_with("sl-write-") && *n > 0)
        .collect();
    let others: u64 = threads
        .iter()
        .filter(|(name, _)| !name.starts_with("sl-write-"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(
        others, 0,
        "only writers write to the TUN device: {threads:?}"
    );
    // Twelve connections all on one of three writers: a chance of 3 in 3^12.
    assert!(
        writers.len() >= 2,
        "the connections spread over writers: {threads:?}"
    );
    // Every batch went to the workers.
    let (submitted, handed) = batches_handed_off(&lab, 1);
    assert!(
        submitted > 0 && handed == submitted,
        "{submitted} submitted, {handed} handed off"
    );
}

/// Batches submitted and batches handed to the crypto workers, over every thread of `side`.
fn batches_handed_off(lab: &Lab, side: usize) -> (u64, u64) {
    let total = |field| -> u64 { by_thread(lab, side, field).iter().map(|(_, n)| n).sum() };
    (total("batches_submitted"), total("handoffs"))
}

/// The default shape above two cores (issue 43), forced here with `workers = 3`, `queues = 3`:
/// one thread per TUN queue and UDP socket pair (`sl-io-q`) reads, seals or opens and writes a
/// flow's packets itself, handing batches to the crypto workers only while it saturates its
/// core with a core idle; no TUN writer threads. Checked transfers arrive intact, one peer's
/// connections spread over the I/O threads by lane, and the I/O threads write to the TUN device.
#[test]
fn run_to_completion_data_path_between_namespaces() {
    let Some(mut lab) = Lab::new("r") else { return };
    let cfgs = lab.write_configs_with("workers = 3\nqueues = 3\n");
    lab.up(1, &cfgs[1]);
    lab.up(0, &cfgs[0]);
    transfer(&lab, 16 << 20);
    transfer_many(&lab, 12, 2 << 20);
    for side in 0..2 {
        let s = lab.show(side);
        assert!(
            s.contains("crypto_workers=3 handoff=auto tun_writers=0"),
            "{s}"
        );
        assert!(s.contains("lanes=steered"), "{s}");
        assert_eq!(counter(&s, "auth-failed"), 0, "{s}");
        assert_eq!(counter(&s, "replayed"), 0, "{s}");
    }
    let receivers = by_thread(&lab, 1, "udp_receive_datagrams");
    let busy: Vec<_> = receivers
        .iter()
        .filter(|(name, n)| name.starts_with("sl-io-") && *n > 100)
        .collect();
    assert!(
        busy.len() >= 2,
        "one peer's datagrams spread over the I/O threads by lane: {receivers:?}"
    );
    assert!(
        receivers
            .iter()
            .all(|(name, _)| !name.starts_with("sl-udp-") && !name.starts_with("sl-tun-")),
        "one thread per queue pair, not a reader per direction: {receivers:?}"
    );
    let writes = by_thread(&lab, 1, "tun_write_packets");
    assert!(
        writes
            .iter()
            .all(|(name, _)| !name.starts_with("sl-write-")),
        "no writer threads: {writes:?}"
    );
    // Whatever the gauges chose, each batch was either run where it was read or handed off,
    // and the batches were counted.
    let (submitted, handed) = batches_handed_off(&lab, 1);
    assert!(
        submitted > 0 && handed <= submitted,
        "{submitted} submitted, {handed} handed off"
    );
}

/// The same engine-threaded shape with `tun_writers = 0` and `lanes = false`: the receive
/// path's release writes, as before the writers, and one peer's datagrams all arrive on one
/// socket, as before lanes; checked connections still arrive intact.
#[test]
fn parallel_data_path_without_writers_or_lanes() {
    let Some(mut lab) = Lab::new("q") else { return };
    let cfgs = lab.write_configs_with("workers = 2\nqueues = 2\ntun_writers = 0\nlanes = false\n");
    lab.up(1, &cfgs[1]);
    lab.up(0, &cfgs[0]);
    transfer_many(&lab, 4, 2 << 20);
    let s = lab.show(1);
    assert!(s.contains("tun_writers=0"), "{s}");
    assert!(s.contains("lanes=off"), "{s}");
    assert!(s.contains("(session up)"), "{s}");
    let receivers = by_thread(&lab, 1, "udp_receive_datagrams");
    let busy = receivers.iter().filter(|(_, n)| *n > 0).count();
    assert_eq!(busy, 1, "by address: one socket per peer: {receivers:?}");
    let threads = by_thread(&lab, 1, "tun_write_packets");
    assert!(
        threads
            .iter()
            .all(|(name, _)| !name.starts_with("sl-write-")),
        "{threads:?}"
    );
    assert!(
        threads.iter().map(|(_, n)| n).sum::<u64>() > 0,
        "{threads:?}"
    );
}

/// Mode bits of `p` (permissions only).
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Connects to a control socket as user nobody (uid 65534) and sends `request`; prints
/// `connect-error ERRNO` or `reply TEXT`.
const AS_NOBODY: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect-error", e.errno); sys.exit(0)
s.settimeout(5)
s.sendall((sys.argv[2] + "\n").encode())
data = b""
while True:
    try:
        d = s.recv(4096)
    except OSError:
        break
    if not d:
        break
    data += d
print("reply", data.decode(errors="replace").strip())
"#;

fn as_nobody(sock: &Path, request: &str) -> String {
    use std::os::unix::process::CommandExt;
    let o = Command::new("python3")
        .args(["-c", AS_NOBODY])
        .arg(sock)
        .arg(request)
        .uid(65534)
        .gid(65534)
        .output()
        .expect("python3 as nobody");
    assert!(
        o.status.success(),
        "client: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// The control socket lives in a 0700 directory per network namespace under the run
/// directory, is created 0600, and another uid can neither connect nor, with the directories
/// opened up by hand, get an answer (the tunnel checks SO_PEERCRED). Once up, the tunnel holds
/// no capabilities in any thread.
#[test]
fn control_socket_is_private_and_capabilities_dropped() {
    let Some(mut lab) = Lab::new("c") else { return };
    assert!(
        have("python3"),
        "python3 is needed for the client as nobody"
    );
    let cfgs = lab.write_configs();
    lab.up(0, &cfgs[0]);
    let run = lab.run_dir.clone();
    assert!(run.is_dir(), "SEALINK_RUN_DIR {} not used", run.display());
    assert_eq!(mode(&run), 0o700, "run directory mode");
    let socks = sockets(&run);
    assert_eq!(socks.len(), 1, "{socks:?}");
    let sock = &socks[0];
    let nsdir = sock.parent().unwrap();
    assert_ne!(nsdir, run, "socket not keyed by network namespace");
    assert!(
        nsdir
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("net-"),
        "{}",
        nsdir.display()
    );
    assert_eq!(mode(nsdir), 0o700, "namespace directory mode");
    assert_eq!(mode(sock), 0o600, "socket mode");

    // Found from the same namespace; not from another one.
    assert!(
        lab.show(0)
            .contains(&format!("interface: {}", lab.ifname[0]))
    );
    // The same facts as JSON: an array with this interface and its peer.
    let o = lab.exec(0, &[BIN, "show", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("show --json parses");
    assert_eq!(v[0]["interface"], lab.ifname[0].as_str(), "{v}");
    assert_eq!(v[0]["peers"].as_array().map(Vec::len), Some(1), "{v}");
    assert!(v[0]["peers"][0]["rx_bytes"].is_u64(), "{v}");
    let o = lab.exec(1, &[BIN, "show", &lab.ifname[0]]);
    assert!(!o.status.success(), "found from another namespace");

    // Another uid cannot reach the socket.
    let r = as_nobody(sock, "show");
    assert_eq!(r, "connect-error 13", "nobody got: {r}");
    // With the directories and the socket opened up, the tunnel still refuses it.
    use std::os::unix::fs::PermissionsExt;
    for (p, m) in [(&run, 0o755), (&nsdir.to_path_buf(), 0o755), (sock, 0o666)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }
    let r = as_nobody(sock, "show");
    assert!(r.starts_with("reply"), "nobody: {r}");
    assert!(!r.contains("interface:"), "nobody read the status: {r}");
    assert!(r.contains("permission denied"), "{r}");
    let r = as_nobody(sock, "down");
    assert!(r.contains("permission denied"), "{r}");
    assert!(lab.has_link(0), "nobody stopped the tunnel");
    assert!(lab.show(0).contains("peer: peer1"));

    // No capabilities left in any thread of the running tunnel.
    let pid = lab.children[0].as_ref().unwrap().id();
    // `ip netns exec` execs the command in place: this is sealink itself.
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    assert_eq!(comm.trim(), "sealink");
    let tasks: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .collect();
    assert!(tasks.len() > 1, "expected the data path threads");
    for t in tasks {
        let status = std::fs::read_to_string(t.path().join("status")).unwrap();
        for key in ["CapEff:", "CapPrm:", "CapInh:", "CapAmb:"] {
            let v = status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap()
                .trim();
            assert_eq!(v, "0000000000000000", "{key} of {:?}", t.path());
        }
    }

    // Root still stops it, and the socket is removed.
    let o = lab.exec(0, &[BIN, "down", &lab.ifname[0]]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!lab.has_link(0));
    assert!(sockets(&run).is_empty());
}

/// The four ids of a `Uid:` or `Gid:` line of a /proc status file.
fn ids(status: &str, key: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {status}"))
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

/// Issue 29 item 6: the running tunnel dropped its capabilities but stayed uid 0, so a
/// compromised tunnel still owned every root-owned file. Once up, every thread runs as the
/// configured user (default `sealink-tunnel`, issue 47: its uid and gid in all four fields,
/// that group alone)
/// with no capabilities, yet the data path, `sealink reload`, SIGHUP and `down` (which must
/// remove the root-owned control socket) all still work, with the config and key readable by
/// root alone. `user = "root"` keeps uid 0, capabilities still gone.
#[test]
fn running_tunnel_switches_to_an_unprivileged_user() {
    let Some(mut lab) = Lab::new("w") else { return };
    let cfgs = lab.write_configs();
    // Side 1 opts out; side 0 takes the default.
    let c1 = std::fs::read_to_string(&cfgs[1]).unwrap();
    std::fs::write(
        &cfgs[1],
        c1.replace("[interface]\n", "[interface]\nuser = \"root\"\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    for c in &cfgs {
        std::fs::set_permissions(c, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    lab.up(1, &cfgs[1]);
    lab.up(0, &cfgs[0]);
    let pids = [0, 1].map(|side| lab.children[side].as_ref().unwrap().id());
    let (uid, gid) = tunnel_user::ensure();
    for (side, want, want_gid) in [(0, uid, gid), (1, 0, 0)] {
        let tasks: Vec<_> = std::fs::read_dir(format!("/proc/{}/task", pids[side]))
            .unwrap()
            .flatten()
            .collect();
        assert!(tasks.len() > 1, "expected the data path threads");
        for t in tasks {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap();
            let at = t.path();
            assert_eq!(ids(&status, "Uid:"), [want; 4], "side {side} {at:?}");
            assert_eq!(ids(&status, "Gid:"), [want_gid; 4], "side {side} {at:?}");
            if want != 0 {
                assert_eq!(ids(&status, "Groups:"), [want_gid], "side {side} {at:?}");
            }
            for key in ["CapEff:", "CapPrm:", "CapInh:", "CapAmb:", "CapBnd:"] {
                let v = status
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .unwrap()
                    .trim();
                assert_eq!(v, "0000000000000000", "{key} of side {side} {at:?}");
            }
        }
    }
    lab.ping_through(3);

    // `sealink reload` (as root) adds a peer: the tunnel, as its user, cannot read the 0600
    // config or key itself.
    let extra =
        "\n[[peer]]\nname = \"late\"\npublic_key = \"LATE\"\nallowed_ips = [\"10.202.0.9/32\"]\n";
    let late = lab.public_key(9);
    let base = std::fs::read_to_string(&cfgs[0]).unwrap();
    std::fs::write(&cfgs[0], format!("{base}{}", extra.replace("LATE", &late))).unwrap();
    let o = lab.exec(0, &[BIN, "reload", cfgs[0].to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("added=late"),
        "{o:?}"
    );
    assert!(lab.show(0).contains("peer: late"));
    // SIGHUP removes it again.
    std::fs::write(&cfgs[0], &base).unwrap();
    ok("kill", &["-HUP", &pids[0].to_string()]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while lab.show(0).contains("peer: late") {
        assert!(Instant::now() < deadline, "SIGHUP did not remove the peer");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A config others may write is still refused on reload (judged for root, who started it).
    std::fs::set_permissions(&cfgs[0], std::fs::Permissions::from_mode(0o666)).unwrap();
    let o = lab.exec(0, &[BIN, "reload", cfgs[0].to_str().unwrap()]);
    assert!(!o.status.success());
    std::fs::set_permissions(&cfgs[0], std::fs::Permissions::from_mode(0o600)).unwrap();
    lab.ping_through(2);

    // `down` removes the interface and the root-owned control socket.
    for side in [0, 1] {
        let o = lab.exec(side, &[BIN, "down", &lab.ifname[side]]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(!lab.has_link(side));
    }
    assert!(
        sockets(&lab.run_dir).is_empty(),
        "{:?}",
        sockets(&lab.run_dir)
    );
}

/// Two tunnels with the same interface name, each in its own network namespace, run at once;
/// `show` and `down` in each namespace reach that namespace's tunnel.
#[test]
fn same_interface_name_in_two_namespaces() {
    let Some(mut lab) = Lab::named("s", true) else {
        return;
    };
    assert_eq!(lab.ifname[0], lab.ifname[1]);
    let name = lab.ifname[0].clone();
    lab.up_both();
    if have("ping") {
        lab.ping_through(2);
    }
    assert!(lab.show(0).contains("peer: peer1"));
    assert!(lab.show(1).contains("peer: peer0"));
    // `show` without a name lists the tunnel of its own namespace only.
    let o = lab.exec(0, &[BIN, "show"]);
    let all = String::from_utf8_lossy(&o.stdout);
    assert_eq!(all.matches("interface:").count(), 1, "{all}");
    assert!(all.contains("peer: peer1"), "{all}");

    let o = lab.exec(0, &[BIN, "down", &name]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!lab.has_link(0));
    assert!(
        lab.has_link(1),
        "down in one namespace stopped the other tunnel"
    );
    assert!(lab.show(1).contains("peer: peer0"));
    let o = lab.exec(1, &[BIN, "down", &name]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!lab.has_link(1));
}

/// allowed_ips outside the interface's own subnet are routed through the tunnel (as wg-quick
/// does): a network behind peer B (10.77.0.0/24) is
/// reachable from A (an extra address of B's), `ip route` in A shows it on the TUN device, and the route goes with the
/// interface.
#[test]
fn allowed_ips_behind_the_peer_are_routed() {
    let Some(mut lab) = Lab::new("r") else { return };
    // The site behind B: an address on B's loopback (no dummy module needed).
    ok(
        "ip",
        &["-n", &lab.ns[1], "addr", "add", "10.77.0.1/24", "dev", "lo"],
    );
    // A routes 10.77.0.0/24 to B; B's reply comes from 10.77.0.1, which A must accept from B.
    let cfgs = lab.write_configs_full("", [", \"10.77.0.0/24\"", ""]);
    lab.up(1, &cfgs[1]);
    lab.up(0, &cfgs[0]);
    assert!(have("ping"), "ping is needed for this test");
    let o = lab.exec(0, &["ping", "-c", "2", "-i", "0.2", "-W", "5", "10.77.0.1"]);
    assert!(
        o.status.success(),
        "ping to the network behind the peer failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let routes = ok(
        "ip",
        &["-n", &lab.ns[0], "route", "show", "dev", &lab.ifname[0]],
    );
    assert!(
        routes.lines().any(|l| l.starts_with("10.77.0.0/24")),
        "no route to 10.77.0.0/24 via {}: {routes}",
        lab.ifname[0]
    );
    // The peer's own /32 lies inside the interface's subnet: no extra route for it.
    assert!(!routes.contains("10.202.0.2"), "{routes}");
    let s1 = lab.show(1);
    assert_eq!(counter(&s1, "source-not-allowed"), 0, "{s1}");
    assert!(counter(&lab.show(0), "rx_packets") >= 2);
    // Down removes the interface, and the route with it.
    let o = lab.exec(0, &[BIN, "down", &lab.ifname[0]]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let routes = ok("ip", &["-n", &lab.ns[0], "route", "show"]);
    assert!(!routes.contains("10.77.0.0"), "route left behind: {routes}");
}

/// `listen_port` left out: A listens on an ephemeral port and `show --json` reports it;
/// `persistent_keepalive = 1` on A's peer: with no traffic at all, A's first keepalive starts
/// the handshake at `up` (B learns A's endpoint, ephemeral port included) and keepalives keep
/// leaving every second.
#[test]
fn ephemeral_listen_port_and_persistent_keepalive() {
    let Some(mut lab) = Lab::new("k") else { return };
    let cfgs = lab.write_configs();
    let text = std::fs::read_to_string(&cfgs[0]).unwrap();
    let text = text
        .replace("listen_port = 51820\n", "")
        .replace("allowed_ips", "persistent_keepalive = 1\nallowed_ips");
    std::fs::write(&cfgs[0], text).unwrap();
    lab.up(1, &cfgs[1]);
    lab.up(0, &cfgs[0]);
    let o = lab.exec(0, &[BIN, "show", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let port = v[0]["listen_port"]
        .as_u64()
        .expect("listen_port in show --json");
    assert!(port != 0 && port != 51820, "ephemeral port expected: {v}");
    assert!(
        v[0]["listening"]
            .as_str()
            .unwrap()
            .ends_with(&format!(":{port}")),
        "{v}"
    );
    assert_eq!(v[0]["peers"][0]["persistent_keepalive_secs"], 1, "{v}");
    // Nothing was sent through the tunnel, yet B knows A (ephemeral port included) and more
    // keepalives arrive.
    let want = format!("endpoint: 10.201.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let s1 = loop {
        let s1 = lab.show(1);
        // The initiation, the keepalive confirming the session, then two persistent ones.
        if s1.contains(&want) && counter(&s1, "rx") >= 4 {
            break s1;
        }
        assert!(Instant::now() < deadline, "no keepalives from A: {s1}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(s1.contains("session up"), "{s1}");
    let s0 = lab.show(0);
    assert!(counter(&s0, "keepalives") >= 2, "{s0}");
    assert_eq!(counter(&s0, "tx_packets"), 0, "{s0}");
    assert!(s0.contains("persistent keepalive: every 1 s"), "{s0}");
    assert!(
        lab.show(1)
            .lines()
            .all(|l| !l.contains("persistent keepalive")),
        "B has none configured"
    );
}

/// `address` as a list: an IPv4 and an IPv6 address on each side, both assigned; IPv6 pings
/// cross the tunnel as IPv4 ones do.
#[test]
fn several_addresses_ipv4_and_ipv6() {
    let Some(mut lab) = Lab::new("m") else { return };
    let cfgs = lab.write_configs_full("", [", \"fd77::2/128\"", ", \"fd77::1/128\""]);
    for (side, path) in cfgs.iter().enumerate() {
        let n = side + 1;
        let text = std::fs::read_to_string(path).unwrap().replace(
            &format!("address = \"10.202.0.{n}/24\""),
            &format!("address = [\"10.202.0.{n}/24\", \"fd77::{n}/64\"]"),
        );
        std::fs::write(path, text).unwrap();
    }
    lab.up(1, &cfgs[1]);
    lab.up(0, &cfgs[0]);
    for side in 0..2 {
        let addrs = ok(
            "ip",
            &[
                "-n",
                &lab.ns[side],
                "addr",
                "show",
                "dev",
                &lab.ifname[side],
            ],
        );
        let n = side + 1;
        assert!(addrs.contains(&format!("inet 10.202.0.{n}/24")), "{addrs}");
        assert!(addrs.contains(&format!("inet6 fd77::{n}/64")), "{addrs}");
    }
    assert!(have("ping"), "ping is needed for this test");
    lab.ping_through(2);
    let o = lab.exec(
        0,
        &["ping", "-6", "-c", "2", "-i", "0.2", "-W", "5", "fd77::2"],
    );
    assert!(
        o.status.success(),
        "IPv6 ping through the tunnel failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `sealink up NAME` reads CONFIG_DIR/NAME.toml ($SEALINK_CONFIG_DIR standing in for
/// /etc/sealink), and with NOTIFY_SOCKET set (systemd's `Type=notify`) sends READY=1 once the
/// interface is up and the control socket answers.
#[test]
fn up_by_name_notifies_systemd_when_ready() {
    use std::os::unix::net::UnixDatagram;
    let Some(mut lab) = Lab::new("n") else { return };
    let cfgs = lab.write_configs();
    let confdir = lab.dir.path().join("etc-sealink");
    std::fs::create_dir(&confdir).unwrap();
    let name = lab.ifname[0].clone();
    // The key path is relative to the config: keep the key beside it.
    for f in ["host0.key", "host0.key.pub"] {
        std::fs::copy(lab.dir.path().join(f), confdir.join(f)).unwrap();
    }
    std::fs::copy(&cfgs[0], confdir.join(format!("{name}.toml"))).unwrap();

    // A name with no config behind it: the error names the file it looked for.
    let o = Command::new(BIN)
        .args(["up", "nosuch"])
        .env("SEALINK_CONFIG_DIR", &confdir)
        .env("SEALINK_RUN_DIR", &lab.run_dir)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("{}/nosuch.toml", confdir.display())),
        "{err}"
    );

    let notify = lab.dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&notify).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let rx = lab.spawn_up(
        0,
        std::ffi::OsStr::new(&name),
        &[
            ("SEALINK_CONFIG_DIR", confdir.as_os_str()),
            ("NOTIFY_SOCKET", notify.as_os_str()),
        ],
    );
    let mut buf = [0u8; 4096];
    let n = sock
        .recv(&mut buf)
        .expect("no notification from sealink up");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg:?}");
    assert!(msg.contains(&format!("STATUS=up: {name}")), "{msg:?}");
    // Ready means ready: the interface exists and `show` is answered at once.
    assert!(lab.has_link(0), "READY=1 before the interface exists");
    assert!(lab.show(0).contains(&format!("interface: {name}")));
    lab.wait_up(0, rx);
}

/// Issue 30: `mtu = 1280` (IPv6's minimum) was refused, blaming a piggyback queue_limit default
/// the user never wrote. Both tunnels come up with it, a ping of exactly 1280 bytes with DF set
/// crosses and one byte more is refused at the interface; a reload to another MTU says it needs
/// a restart, and the tunnel goes on.
#[test]
fn mtu_1280_carries_full_size_packets() {
    let Some(mut lab) = Lab::new("x") else { return };
    let cfgs = lab.write_configs_with("mtu = 1280");
    lab.up(1, &cfgs[1]);
    lab.up(0, &cfgs[0]);
    let link = ok(
        "ip",
        &["-n", &lab.ns[0], "link", "show", "dev", &lab.ifname[0]],
    );
    assert!(link.contains("mtu 1280"), "{link}");
    assert!(have("ping"), "ping is needed for this test");
    lab.ping_through(2);
    // 1252 bytes of payload + 8 (ICMP) + 20 (IPv4) = 1280, never fragmented.
    let df = |size: &str| {
        lab.exec(
            0,
            &[
                "ping",
                "-M",
                "do",
                "-s",
                size,
                "-c",
                "2",
                "-i",
                "0.2",
                "-W",
                "5",
                "10.202.0.2",
            ],
        )
    };
    let o = df("1252");
    assert!(
        o.status.success(),
        "a 1280-byte ping with DF set failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !df("1253").status.success(),
        "1281 bytes passed an MTU of 1280"
    );
    assert_eq!(counter(&lab.show(1), "malformed-packet"), 0);

    let text = std::fs::read_to_string(&cfgs[0]).unwrap();
    std::fs::write(&cfgs[0], text.replace("mtu = 1280", "mtu = 1420")).unwrap();
    let o = lab.exec(0, &[BIN, "reload", cfgs[0].to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("interface.mtu changed"), "{err}");
    assert!(err.contains("needs a restart"), "{err}");
    assert!(!err.contains("queue_limit"), "{err}");
    lab.ping_through(1);
}

/// `name`'s count among the drops of one tunnel's `show --json` (an object), 0 if absent.
fn json_drop(v: &serde_json::Value, name: &str) -> u64 {
    assert!(v["drops"].is_object(), "{v}");
    v["drops"][name].as_u64().unwrap_or(0)
}

/// Issue 30 item 8: an idle tunnel with IPv4 addresses only counted `no-route` drops: the
/// kernel's own IPv6 traffic on the TUN (router solicitations and MLD reports from its
/// link-local address). The interface now gets no IPv6 link-local address, and after a few idle
/// seconds neither side has dropped anything as `no-route` (nor as `link-local`, the reason such
/// packets are counted under now).
#[test]
fn idle_ipv4_only_tunnel_drops_nothing() {
    let Some(mut lab) = Lab::new("i") else { return };
    lab.up_both();
    // Router solicitations leave about a second after the link-local address passes DAD.
    std::thread::sleep(Duration::from_millis(3500));
    for side in 0..2 {
        let o = lab.exec(side, &[BIN, "show", "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(json_drop(&v[0], "no-route"), 0, "side {side}: {v}");
        // Without a link-local address the kernel has nothing of its own to send.
        assert_eq!(json_drop(&v[0], "link-local"), 0, "side {side}: {v}");
        let addrs = ok(
            "ip",
            &[
                "-n",
                &lab.ns[side],
                "-6",
                "addr",
                "show",
                "dev",
                &lab.ifname[side],
            ],
        );
        assert!(!addrs.contains("inet6"), "side {side}: {addrs}");
    }
    // A real no-route packet is still counted as one.
    let o = lab.exec(0, &["python3", "-c", NO_ROUTE]);
    assert!(o.status.success());
    assert!(counter(&lab.show(0), "no-route") >= 3);
}

/// Issue 30: the per-namespace run directories (`RUN_DIR/net-INODE`) stayed, empty, after
/// `down`. Now the last tunnel of a namespace removes its directory: side 0 as its default user
/// (through its privileged helper), side 1 as root; a start that fails leaves none either.
#[test]
fn down_leaves_no_empty_run_directory() {
    let Some(mut lab) = Lab::new("d") else { return };
    let cfgs = lab.write_configs();
    let text = std::fs::read_to_string(&cfgs[1]).unwrap();
    std::fs::write(
        &cfgs[1],
        text.replace("[interface]\n", "[interface]\nuser = \"root\"\n"),
    )
    .unwrap();
    lab.up(1, &cfgs[1]);
    lab.up(0, &cfgs[0]);
    let dirs = |lab: &Lab| -> Vec<String> {
        std::fs::read_dir(&lab.run_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(dirs(&lab).len(), 2, "{:?}", dirs(&lab));
    for side in [0, 1] {
        let o = lab.exec(side, &[BIN, "down", &lab.ifname[side]]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let status = lab.children[side].as_mut().unwrap().wait().unwrap();
        assert!(status.success(), "side {side}: {status}");
    }
    assert_eq!(dirs(&lab), Vec::<String>::new(), "left after down");

    let failing = lab.dir.path().join("failing.toml");
    let text = std::fs::read_to_string(&cfgs[0]).unwrap();
    std::fs::write(
        &failing,
        text.replace("[interface]\n", "[interface]\npre_up = \"false\"\n"),
    )
    .unwrap();
    let o = lab.exec(0, &[BIN, "up", failing.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("pre_up"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(dirs(&lab), Vec::<String>::new(), "left after a failed up");
}

/// Issue 30: a handshake from an untrusted host key was logged only at debug level (-vv).
/// B lists another key for its peer: A's initiations (retried every second) are refused, and
/// B logs one warning naming A's address and key (rate-limited), at the default log level,
/// counting the rest as `unknown-host` drops.
#[test]
fn untrusted_handshake_is_logged_once_at_the_default_level() {
    let Some(mut lab) = Lab::new("t") else { return };
    let cfgs = lab.write_configs();
    // Side 1's peer gets a third key instead of side 0's.
    let old = std::fs::read_to_string(&cfgs[1]).unwrap();
    let trusted = old
        .lines()
        .find_map(|l| l.strip_prefix("public_key = \""))
        .unwrap()
        .trim_end_matches('"')
        .to_owned();
    let stranger = lab.public_key(7);
    std::fs::write(&cfgs[1], old.replace(&trusted, &stranger)).unwrap();
    // No -v and no RUST_LOG: what a user sees by default.
    let rx = lab.spawn_up(1, cfgs[1].as_os_str(), &[]);
    lab.up(0, &cfgs[0]);
    // Ping to start A's handshake; it cannot complete.
    let _ = lab.exec(0, &["ping", "-c", "1", "-W", "3", "10.202.0.2"]);
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut lines = Vec::new();
    while let Ok(l) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        lines.push(l);
    }
    let refused: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("refused a handshake from 10.201.0.1:51820"))
        .collect();
    assert_eq!(refused.len(), 1, "{lines:#?}");
    assert!(refused[0].contains("WARN"), "{}", refused[0]);
    assert!(
        refused[0].contains(&format!("host key {trusted} is not trusted")),
        "{}",
        refused[0]
    );
    assert!(
        counter(&lab.show(1), "unknown-host") >= 2,
        "{}",
        lab.show(1)
    );
}

/// The full-tunnel rules in namespace `side` (those naming table 51820, and main's suppressing
/// rule).
fn full_tunnel_rules(lab: &Lab, side: usize) -> Vec<String> {
    ok("ip", &["-n", &lab.ns[side], "-4", "rule", "show"])
        .lines()
        .filter(|l| l.contains("lookup 51820") || l.contains("suppress_prefixlength"))
        .map(str::to_owned)
        .collect()
}

/// Waits up to 5 s for the full-tunnel rules of `side` to go.
fn rules_go(lab: &Lab, side: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = full_tunnel_rules(lab, side);
        if r.is_empty() || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `allowed_ips = ["0.0.0.0/0"]` on A: everything A sends goes through the tunnel, its own
/// datagrams to B excepted (fwmark policy routing), and the LAN's own routes stay. The rules are
/// undone on `down`, when the tunnel is killed, and by `down` after both the tunnel and its
/// cleanup helper were killed.
#[test]
fn full_tunnel_routes_everything_but_its_own_datagrams() {
    let Some(mut lab) = Lab::new("f") else { return };
    assert!(have("ping"), "ping is needed for this test");
    // "The internet" behind B: an address A has no route to except through the tunnel.
    ok(
        "ip",
        &[
            "-n",
            &lab.ns[1],
            "addr",
            "add",
            "198.18.0.1/32",
            "dev",
            "lo",
        ],
    );
    let ping = |lab: &Lab, to: &str| lab.exec(0, &["ping", "-c", "2", "-i", "0.2", "-W", "5", to]);
    assert!(
        !ping(&lab, "198.18.0.1").status.success(),
        "reachable before the tunnel"
    );
    let cfgs = lab.write_configs_full("", [", \"0.0.0.0/0\"", ""]);
    lab.up(1, &cfgs[1]);
    lab.up(0, &cfgs[0]);
    let rules = full_tunnel_rules(&lab, 0);
    assert_eq!(rules.len(), 2, "{rules:?}");
    assert!(
        rules
            .iter()
            .any(|r| r.contains("not from all fwmark 0xca6c lookup 51820")),
        "{rules:?}"
    );
    let before = lab.peer_bytes(0, "tx_bytes");
    let o = ping(&lab, "198.18.0.1");
    assert!(
        o.status.success(),
        "ping through the full tunnel failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        lab.peer_bytes(0, "tx_bytes") > before,
        "the pings did not go through the tunnel"
    );
    // `show` says it is a full tunnel (as `wg show` prints the fwmark); a split tunnel's does
    // not (side 1).
    let shown = lab.show(0);
    assert!(
        shown.contains("fwmark: 0xca6c (full tunnel: table 51820)"),
        "{shown}"
    );
    assert!(!lab.show(1).contains("fwmark"), "{}", lab.show(1));
    // The LAN keeps its route (main's /24 is not suppressed), and the tunnel's own datagrams
    // kept theirs: the handshake and the pings above crossed the veth.
    assert!(
        ping(&lab, "10.201.0.2").status.success(),
        "the LAN is unreachable"
    );
    let record = lab.run_dir.read_dir().unwrap().flatten().find_map(|d| {
        let p = d.path().join(format!("{}.policy", lab.ifname[0]));
        p.exists().then_some(p)
    });
    let record = record.expect("the rules are recorded in the run directory");

    // Killed: the cleanup helper undoes the rules and removes the record.
    let mut child = lab.children[0].take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        rules_go(&lab, 0),
        Vec::<String>::new(),
        "rules left after a kill"
    );
    assert!(!record.exists(), "record left after a kill");
    assert!(
        !ping(&lab, "198.18.0.1").status.success(),
        "still routed after a kill"
    );

    // Up again, then a clean down.
    lab.up(0, &cfgs[0]);
    assert_eq!(full_tunnel_rules(&lab, 0).len(), 2);
    let o = lab.exec(0, &[BIN, "down", &lab.ifname[0]]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        full_tunnel_rules(&lab, 0),
        Vec::<String>::new(),
        "rules left after down"
    );
    assert!(!record.exists(), "record left after down");

    // Both the tunnel and its helper gone without a trace but the record (SIGKILL to the whole
    // service): `down` undoes what the record lists; then the rules are gone.
    std::fs::create_dir_all(record.parent().unwrap()).unwrap();
    for args in [
        "rule add table main suppress_prefixlength 0 priority 32760",
        "rule add not fwmark 51820 table 51820 priority 32761",
    ] {
        let mut a = vec!["-n", &lab.ns[0], "-4"];
        a.extend(args.split(' '));
        ok("ip", &a);
    }
    std::fs::write(
        &record,
        "-4 rule del not fwmark 51820 table 51820 priority 32761\n\
         -4 rule del table main suppress_prefixlength 0 priority 32760\n",
    )
    .unwrap();
    let o = lab.exec(0, &[BIN, "down", &lab.ifname[0]]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("removed the full-tunnel rules"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(full_tunnel_rules(&lab, 0), Vec::<String>::new());
    assert!(!record.exists());
}

/// `dns = [...]`: `up` hands the servers and search domains to `resolvconf -a IFNAME -m 0 -x`
/// (wg-quick's call) and `down` removes them with `resolvconf -d IFNAME -f`; so does the
/// cleanup shell when the tunnel is killed. The `resolvconf` here is a stand-in on PATH that
/// records its calls: CI has neither openresolv nor systemd-resolved, and installing one would
/// rewrite the machine's own resolver configuration.
#[test]
fn dns_is_set_with_resolvconf_and_removed_on_down_and_on_a_kill() {
    let Some(mut lab) = Lab::new("d") else { return };
    use std::os::unix::fs::PermissionsExt;
    let bin = lab.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = lab.dir.path().join("resolvconf.log");
    let fake = bin.join("resolvconf");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\n{{ echo \"call: $*\"; if [ \"$1\" = -a ]; then cat; fi; }} >> '{}'\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let cfgs = lab.write_configs_with("dns = [\"10.202.0.2\", \"corp.example\"]");
    // Without resolvconf, `up` stops with an error that says what to install (checked where
    // this machine has none of its own).
    let plain = "/usr/sbin:/usr/bin:/sbin:/bin";
    if plain
        .split(':')
        .any(|d| Path::new(d).join("resolvconf").exists())
    {
        println!("this machine has a resolvconf: the error without one is not checked");
    } else {
        let rx = lab.spawn_up(1, cfgs[1].as_os_str(), &[("PATH", plain.as_ref())]);
        let mut child = lab.children[1].take().unwrap();
        assert!(!child.wait().unwrap().success());
        let lines: Vec<String> = rx.iter().collect();
        assert!(
            lines.iter().any(|l| l.contains("install openresolv")),
            "{lines:#?}"
        );
        assert!(!lines.iter().any(|l| l.contains("ERROR")), "{lines:#?}");
        assert!(!lab.has_link(1), "the interface outlived the failed up");
    }
    let rx = lab.spawn_up(
        1,
        cfgs[1].as_os_str(),
        &[("PATH", std::ffi::OsStr::new(&path))],
    );
    lab.wait_up(1, rx);
    let ifname = lab.ifname[0].clone();
    for round in 0..2 {
        let rx = lab.spawn_up(
            0,
            cfgs[0].as_os_str(),
            &[("PATH", std::ffi::OsStr::new(&path))],
        );
        lab.wait_up(0, rx);
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.ends_with(&format!(
                "call: -a {ifname} -m 0 -x\nnameserver 10.202.0.2\nsearch corp.example\n"
            )),
            "round {round}: {text}"
        );
        if round == 0 {
            let o = lab.exec(0, &[BIN, "down", &ifname]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        } else {
            let mut child = lab.children[0].take().unwrap();
            child.kill().unwrap();
            child.wait().unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let want = format!("call: -d {ifname} -f\n");
        while !std::fs::read_to_string(&log).unwrap().ends_with(&want) {
            assert!(
                Instant::now() < deadline,
                "round {round}: no {want:?} in {}",
                std::fs::read_to_string(&log).unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Issue 30: `up` runs no `ip`. With a PATH holding only a stand-in `ip` that records being run
/// (and fails) and the coreutils the privileged shell helper uses, side A comes up with a second
/// address, a route to a site outside its networks and a full tunnel (IPv4 and IPv6); a reload
/// adds another route (the route helper); `ip` from the test's side sees all of it. A route
/// that already exists fails `up` with the operation named. The rules and their record go at
/// `down` and after a SIGKILL of the tunnel, and the stand-in was never run.
#[test]
fn up_sets_addresses_routes_and_rules_without_ip() {
    let Some(mut lab) = Lab::new("p") else { return };
    let ip = ip_bin();
    let bin = lab.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let ran = lab.dir.path().join("ip-ran");
    {
        use std::os::unix::fs::PermissionsExt;
        let fake = bin.join("ip");
        std::fs::write(
            &fake,
            format!("#!/bin/sh\necho \"$@\" >> '{}'\nexit 1\n", ran.display()),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // What `hooks::PrivHelper`'s shell runs (coreutils, Essential in Debian).
    for cmd in ["stat", "base64", "rm", "rmdir", "dirname", "tr"] {
        std::os::unix::fs::symlink(which(cmd), bin.join(cmd)).unwrap();
    }
    let path = bin.as_os_str().to_owned();
    // The tunnel's command line with the bare PATH; `ip netns exec` is named by its full path
    // (a changed PATH would also be used to find it).
    let bare = |lab: &Lab, args: &[&str]| {
        let mut a = vec!["netns", "exec", &lab.ns[0], BIN];
        a.extend_from_slice(args);
        Command::new(&ip)
            .args(&a)
            .env("SEALINK_RUN_DIR", &lab.run_dir)
            .env("PATH", &path)
            .output()
            .unwrap()
    };

    // The full tunnel's records in the run directory (`net-INODE/NAME.policy`).
    let records = |lab: &Lab| -> Vec<PathBuf> {
        let dirs = std::fs::read_dir(&lab.run_dir)
            .into_iter()
            .flatten()
            .flatten();
        dirs.flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "policy"))
            .collect()
    };
    let cfgs = lab.write_configs_full("", [", \"10.77.0.0/24\", \"0.0.0.0/0\", \"::/0\"", ""]);
    // The IPv6 rules (the full tunnel covers both families).
    let rules6 = |lab: &Lab| -> Vec<String> {
        ok("ip", &["-n", &lab.ns[0], "-6", "rule", "show"])
            .lines()
            .filter(|l| l.contains("lookup 51820") || l.contains("suppress_prefixlength"))
            .map(str::to_owned)
            .collect()
    };
    let text = std::fs::read_to_string(&cfgs[0]).unwrap().replace(
        "address = \"10.202.0.1/24\"",
        "address = [\"10.202.0.1/24\", \"10.203.0.1/24\"]",
    );
    std::fs::write(&cfgs[0], &text).unwrap();
    lab.up(1, &cfgs[1]);
    // A refusal names the operation, as `ip` did: the site's prefix is already routed.
    ok(
        "ip",
        &[
            "-n",
            &lab.ns[0],
            "route",
            "add",
            "10.77.0.0/24",
            "dev",
            "lo",
        ],
    );
    let o = bare(&lab, &["up", cfgs[0].to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains(&format!(
                "add route 10.77.0.0/24 dev {}: File exists",
                lab.ifname[0]
            )),
        "{err}"
    );
    assert!(!lab.has_link(0));
    ok(
        "ip",
        &[
            "-n",
            &lab.ns[0],
            "route",
            "del",
            "10.77.0.0/24",
            "dev",
            "lo",
        ],
    );
    let up_bare = |lab: &mut Lab| {
        let rx = lab.spawn_up(0, cfgs[0].as_os_str(), &[("PATH", &path)]);
        lab.wait_up(0, rx);
    };
    up_bare(&mut lab);
    let ifname = lab.ifname[0].clone();
    let ns = lab.ns[0].clone();
    let addrs = ok("ip", &["-n", &ns, "address", "show", "dev", &ifname]);
    assert!(addrs.contains("inet 10.202.0.1/24"), "{addrs}");
    assert!(addrs.contains("inet 10.203.0.1/24"), "{addrs}");
    // No IPv6 address configured: no link-local one either (addrgenmode none).
    assert!(!addrs.contains("inet6"), "{addrs}");
    let routes = ok("ip", &["-n", &ns, "route", "show"]);
    assert!(
        routes.contains(&format!("10.77.0.0/24 dev {ifname}")),
        "{routes}"
    );
    for fam in ["-4", "-6"] {
        let table = ok("ip", &["-n", &ns, fam, "route", "show", "table", "51820"]);
        assert!(
            table.contains(&format!("default dev {ifname}")),
            "{fam} {table}"
        );
    }
    assert_eq!(rules6(&lab).len(), 2, "{:?}", rules6(&lab));
    let rules = full_tunnel_rules(&lab, 0);
    assert_eq!(rules.len(), 2, "{rules:?}");
    lab.ping_through(2);
    assert_eq!(records(&lab).len(), 1);

    // A reload adds a route through the route helper.
    std::fs::write(
        &cfgs[0],
        text.replace("\"10.77.0.0/24\"", "\"10.77.0.0/24\", \"10.78.0.0/24\""),
    )
    .unwrap();
    let o = bare(&lab, &["reload", cfgs[0].to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let routes = ok("ip", &["-n", &ns, "route", "show"]);
    assert!(
        routes.contains(&format!("10.78.0.0/24 dev {ifname}")),
        "{routes}"
    );

    let o = bare(&lab, &["down", &ifname]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    lab.children[0].take().unwrap().wait().unwrap();
    assert_eq!(
        full_tunnel_rules(&lab, 0),
        Vec::<String>::new(),
        "after down"
    );
    assert_eq!(records(&lab), Vec::<PathBuf>::new(), "after down");
    assert_eq!(rules6(&lab), Vec::<String>::new(), "after down");
    assert!(!lab.has_link(0));

    // Up again, then SIGKILL: the cleanup helper removes the rules.
    up_bare(&mut lab);
    assert_eq!(full_tunnel_rules(&lab, 0).len(), 2);
    let mut child = lab.children[0].take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(rules_go(&lab, 0), Vec::<String>::new(), "after a kill");
    // Removed just after the rules: give it a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !records(&lab).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(records(&lab), Vec::<PathBuf>::new(), "after a kill");
    assert_eq!(rules6(&lab), Vec::<String>::new(), "after a kill");
    assert!(
        !ran.exists(),
        "ip was run: {}",
        std::fs::read_to_string(&ran).unwrap_or_default()
    );
}

/// `sealink up NAME.conf` on both sides with wg-quick configs (keys from `wg genkey`, a
/// preshared key): the interfaces are named after the files, ping and a checked TCP transfer
/// cross, `sealink show` says the protocol, and `wg show` reads each side through its UAPI
/// socket. Skips where `wg` is missing.
#[test]
fn wg_quick_configs_between_namespaces() {
    if !have("wg") {
        println!("SKIPPED: wg (wireguard-tools) not installed");
        return;
    }
    let Some(mut lab) = Lab::new("w") else { return };
    let genkey = || ok("wg", &["genkey"]).trim().to_owned();
    let pubkey = |k: &str| {
        let mut c = Command::new("wg")
            .arg("pubkey")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        c.stdin.take().unwrap().write_all(k.as_bytes()).unwrap();
        String::from_utf8(c.wait_with_output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_owned()
    };
    let keys = [genkey(), genkey()];
    let pubs = [pubkey(&keys[0]), pubkey(&keys[1])];
    let psk = ok("wg", &["genpsk"]).trim().to_owned();
    let cfgs = [0usize, 1].map(|side| {
        let other = 1 - side;
        let endpoint = if side == 0 {
            "Endpoint = 10.201.0.2:51820\n"
        } else {
            ""
        };
        let text = format!(
            "[Interface]\nPrivateKey = {}\nAddress = 10.202.0.{}/24\nListenPort = 51820\n\n[Peer]\nPublicKey = {}\nPresharedKey = {psk}\nAllowedIPs = 10.202.0.{}/32\n{endpoint}",
            keys[side],
            side + 1,
            pubs[other],
            other + 1
        );
        let path = lab.dir.path().join(format!("{}.conf", lab.ifname[side]));
        std::fs::write(&path, text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    });
    lab.up(1, &cfgs[1]);
    lab.up(0, &cfgs[0]);
    assert!(lab.has_link(0) && lab.has_link(1), "named after the files");
    if have("ping") {
        lab.ping_through(3);
    }
    transfer(&lab, 4 << 20);
    let s0 = lab.show(0);
    assert!(s0.contains("protocol: wireguard"), "{s0}");
    assert!(s0.contains("session up"), "{s0}");
    for side in 0..2 {
        let dump = ok("wg", &["show", &lab.ifname[side], "dump"]);
        assert!(dump.contains(&pubs[1 - side]), "{dump}");
        assert!(dump.contains(&psk), "{dump}");
        assert!(
            dump.lines().next().unwrap().starts_with(&keys[side]),
            "{dump}"
        );
    }
    let o = lab.exec(0, &[BIN, "down", &lab.ifname[0]]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !Path::new(&format!("/var/run/wireguard/{}.sock", lab.ifname[0])).exists(),
        "the UAPI socket is removed at exit"
    );
}

/// Tries, as the process's own uid, what another account's process could do to the tunnel
/// `PID`: lower its file limit (prlimit), renice it, stop it and end it. Prints
/// `NAME=ok|ERRNO` for each.
const MEDDLE: &str = r#"
import os, resource, signal, sys
pid = int(sys.argv[1]); out = []
def attempt(name, f):
    try:
        f(); out.append(name + "=ok")
    except OSError as e:
        out.append(name + "=" + str(e.errno))
attempt("prlimit", lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (64, 64)))
attempt("renice", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))
attempt("stop", lambda: os.kill(pid, signal.SIGSTOP))
attempt("term", lambda: os.kill(pid, signal.SIGTERM))
print(" ".join(out))
"#;

/// One line of /proc/PID/limits (`Max open files  1024  4096  files`): soft and hard.
fn limit(pid: u32, what: &str) -> (String, String) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = text.lines().find(|l| l.starts_with(what)).unwrap();
    let f: Vec<&str> = line[what.len()..].split_whitespace().collect();
    (f[0].to_owned(), f[1].to_owned())
}

/// Issue 47 defect 2: the tunnel ran as the shared `nobody` account by default, so any other
/// process running as `nobody` could SIGTERM it (its down hooks run, a full tunnel's rules go:
/// traffic leaves outside the tunnel), SIGSTOP it, lower its file limit for good, or renice it.
/// Now it runs as a dedicated account (`sealink-tunnel`), its limits set while it was root:
/// a process of another service's account (`daemon`) and one of `nobody` get EPERM for each,
/// and the tunnel goes on, its limits and niceness as they were.
#[test]
fn other_accounts_cannot_signal_stop_limit_or_renice_the_tunnel() {
    use std::os::unix::process::CommandExt;
    let Some(mut lab) = Lab::new("k") else { return };
    assert!(have("python3"), "python3 is needed for the other accounts");
    lab.up_both();
    let pid = lab.children[0].as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let (uid, _) = tunnel_user::ids(tunnel_user::NAME).unwrap();
    assert_eq!(ids(&status, "Uid:"), [uid; 4], "not the default user");
    assert_ne!(uid, 65534, "the default user is nobody");
    // Set before the switch: no core files (the key is in memory), all the files it may open.
    assert_eq!(limit(pid, "Max core file size"), ("0".into(), "0".into()));
    let files = limit(pid, "Max open files");
    assert_eq!(
        files.0, files.1,
        "open files: soft limit not raised to the hard one"
    );
    let nice = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // After the command name (which may hold spaces): field 19 is the nice value.
        stat.rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .nth(16)
            .unwrap()
            .to_owned()
    };
    let nice_before = nice(pid);

    // Another service's account (daemon: uid 1 on Debian), then nobody.
    let others = [tunnel_user::ids("daemon").unwrap_or((1, 1)), (65534, 65534)];
    for (ouid, ogid) in others {
        let o = Command::new("python3")
            .args(["-c", MEDDLE, &pid.to_string()])
            .uid(ouid)
            .gid(ogid)
            .output()
            .expect("python3 as another account");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got = String::from_utf8_lossy(&o.stdout).trim().to_owned();
        assert_eq!(
            got, "prlimit=1 renice=1 stop=1 term=1",
            "uid {ouid} against the tunnel (uid {uid})"
        );
    }
    // Still running, not stopped, as it was.
    let state = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let state = state.lines().find(|l| l.starts_with("State:")).unwrap();
    assert!(!state.contains("stopped"), "{state}");
    assert!(
        lab.children[0]
            .as_mut()
            .unwrap()
            .try_wait()
            .unwrap()
            .is_none()
    );
    assert_eq!(limit(pid, "Max open files"), files);
    assert_eq!(nice(pid), nice_before);
    lab.ping_through(2);
}

/// The data path keeps its core against the tunnel's own off-path work: its threads (`sl-io`,
/// or `sl-tun`/`sl-udp`, and `sl-write`) ask the scheduler for short slices, so a woken one
/// preempts a handshake in progress, and the handshake threads run 10 nice levels lower; the
/// thread that applies a reload under the core's lock (`sl-apply`) runs at the data path's.
#[test]
fn data_path_threads_take_short_slices_and_only_off_path_threads_are_niced() {
    let Some(mut lab) = Lab::new("s") else { return };
    lab.up_both();
    let pid = lab.children[0].as_ref().unwrap().id();
    let field = |text: &str, key: &str| -> Option<i64> {
        let l = text.lines().find(|l| l.starts_with(key))?;
        l.rsplit(':').next()?.trim().parse().ok()
    };
    // Custom slices came with Linux 6.12; before, the request is refused and ignored.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|x| x.parse::<u32>().unwrap_or(0));
    let slices = (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 12);
    // `prio` is 120 + nice.
    let (mut data, mut hs, mut apply) = (Vec::new(), Vec::new(), Vec::new());
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let sched = std::fs::read_to_string(t.path().join("sched")).unwrap_or_default();
        let name = comm.trim().to_owned();
        let Some(prio) = field(&sched, "prio") else {
            continue; // a thread that ended meanwhile
        };
        if ["sl-io-", "sl-tun-", "sl-udp-", "sl-write-"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            if slices && let Some(ns) = field(&sched, "se.slice") {
                assert_eq!(ns, 100_000, "{name}: slice");
            }
            data.push((name, prio));
        } else if name.starts_with("sl-hs-") {
            hs.push((name, prio));
        } else if name == "sl-apply" {
            apply.push(prio);
        }
    }
    // A reload's peer changes are applied under the core's lock at the data path's priority.
    let base = data.first().map(|d| d.1);
    assert_eq!(apply, base.into_iter().collect::<Vec<_>>(), "sl-apply");
    assert!(!data.is_empty() && !hs.is_empty(), "{data:?} {hs:?}");
    let base = data[0].1;
    assert!(data.iter().all(|d| d.1 == base), "{data:?}");
    assert!(
        hs.iter().all(|h| h.1 == (base + 10).min(139)),
        "{hs:?} against {base}"
    );
    lab.ping_through(2);
}

/// The process whose parent is `parent` and whose command line holds `words`, in order.
fn child_with(parent: u32, words: &[&str]) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        let ppid: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let has = args
            .windows(words.len())
            .any(|w| w.iter().zip(words).all(|(a, b)| *a == b.as_bytes()));
        (ppid == parent && has).then_some(pid)
    })
}

/// Issue 47 defect 3: the root route helper kept after the privilege drop added any prefix
/// through the tunnel: a compromised tunnel wrote `add 0.0.0.0/1` and `add 128.0.0.0/1`, both
/// installed, capturing the host's traffic. Talking to the real helper of a running tunnel as
/// a compromised tunnel would (on its pipes), every request outside the routes of the config
/// read as root is refused (and logged) and installs nothing; the configured ones still work,
/// and a reload that adds a route (read again by the helper, as root) still adds it.
#[test]
fn the_route_helper_serves_only_the_configs_routes() {
    use std::io::Write as _;
    let Some(mut lab) = Lab::new("h") else { return };
    let cfgs = lab.write_configs_full("", [", \"10.77.0.0/24\"", ""]);
    lab.up(1, &cfgs[1]);
    let rx = lab.spawn_up(0, cfgs[0].as_os_str(), &[]);
    let ifname = lab.ifname[0].clone();
    // Its standard error stays ours to read: the helper logs there.
    wait_for_line(&rx, "up: ", &ifname);
    let pid = lab.children[0].as_ref().unwrap().id();
    let helper = child_with(pid, &["tunnel-helper", "routes"]).expect("no route helper");
    // Its stdin and stdout, as the tunnel holds them.
    let mut to = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{helper}/fd/0"))
        .unwrap();
    let mut from = BufReader::new(std::fs::File::open(format!("/proc/{helper}/fd/1")).unwrap());
    let mut ask = |req: &str| {
        writeln!(to, "{req}").unwrap();
        let mut line = String::new();
        from.read_line(&mut line).unwrap();
        line.trim_end().to_owned()
    };
    let routes = |lab: &Lab| ok("ip", &["-n", &lab.ns[0], "route", "show"]);
    for req in [
        "add 0.0.0.0/1",
        "add 128.0.0.0/1",
        "add 10.77.0.0/23",
        "add 10.77.0.0/25",
        "add 10.78.0.0/24",
        "del 10.201.0.0/24",
        "add ::/1",
    ] {
        let a = ask(req);
        assert!(
            a.starts_with("error ") && a.contains("not a route of"),
            "{req}: {a}"
        );
    }
    let r = routes(&lab);
    assert!(
        !r.contains("0.0.0.0/1") && !r.contains("128.0.0.0/1"),
        "{r}"
    );
    assert!(!r.contains("10.78.0.0"), "{r}");
    // Logged by the helper, on the tunnel's standard error.
    wait_for_line(&rx, "refused", "add 0.0.0.0/1");
    // The config's own route: taken away and given back.
    assert_eq!(ask("del 10.77.0.0/24"), "ok");
    assert!(!routes(&lab).contains("10.77.0.0/24"));
    assert_eq!(ask("add 10.77.0.0/24"), "ok");
    assert!(routes(&lab).contains(&format!("10.77.0.0/24 dev {ifname}")));

    // A reload adds a route: the helper reads the config again, as root.
    let text = std::fs::read_to_string(&cfgs[0]).unwrap();
    std::fs::write(
        &cfgs[0],
        text.replace("\"10.77.0.0/24\"", "\"10.77.0.0/24\", \"10.78.0.0/24\""),
    )
    .unwrap();
    let o = lab.exec(0, &[BIN, "reload", cfgs[0].to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(routes(&lab).contains(&format!("10.78.0.0/24 dev {ifname}")));
    // Still nothing else.
    let a = ask("add 0.0.0.0/1");
    assert!(a.contains("not a route of"), "{a}");
    assert!(!routes(&lab).contains("0.0.0.0/1"));
    lab.ping_through(1);
}

/// Waits (at most 20 s) for a line on `rx` holding both `a` and `b`.
fn wait_for_line(rx: &mpsc::Receiver<String>, a: &str, b: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(a) && l.contains(b) => return,
            Ok(l) => seen.push(l),
            Err(_) => panic!("no line with {a:?} and {b:?}; saw {seen:#?}"),
        }
    }
}

/// Issue 47: `up` warns when the tunnel's user is `nobody`, and when other processes already
/// run as its uid (each could stop, kill, renice or limit the tunnel).
#[test]
fn a_shared_user_is_warned_about() {
    use std::os::unix::process::CommandExt;
    let Some(mut lab) = Lab::new("n") else { return };
    let cfgs = lab.write_configs_with("user = \"nobody\"");
    // Another program running as nobody, for the length of the test.
    let mut other = Command::new("sleep")
        .arg("600")
        .uid(65534)
        .gid(65534)
        .spawn()
        .unwrap();
    let rx = lab.spawn_up(0, cfgs[0].as_os_str(), &[]);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let up = format!("up: {}", lab.ifname[0]);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l == up => break,
            Ok(l) => seen.push(l),
            Err(_) => panic!("no {up:?}; saw {seen:#?}"),
        }
    }
    let _ = other.kill();
    let _ = other.wait();
    let all = seen.join("\n");
    assert!(
        all.contains("user = \"nobody\" (uid 65534): an account shared"),
        "{all}"
    );
    assert!(
        all.contains("is shared") && all.contains(&format!("{} (sleep)", other.id())),
        "{all}"
    );
}
