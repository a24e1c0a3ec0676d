//! Stream transfers across a real network cut: `sealink recv` in one network namespace, `sealink
//! send` in others, joined by veth pairs. The cut gives no FIN and no RST: either the sender's
//! link is deleted (its host vanished) or an nft rule drops every packet. Needs root (`ip netns
//! add`); skips with a printed reason where that fails. Namespaces and processes are removed by a
//! Drop guard, so a failing assertion leaves nothing behind.

mod common;
use common::netns::{ok, sh};
use common::{BIN, random_file};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Namespaces `b` (the receiver, 10.77.1.2 and 10.77.2.2), `a` (a sender at 10.77.1.1, its
/// link limited to 40 Mbit/s so a transfer takes long enough to cut) and `c` (another place
/// of the same sender, at 10.77.2.1).
struct Net {
    a: String,
    b: String,
    c: String,
    /// `a`'s end of its link to `b`.
    veth_a: String,
    dir: tempfile::TempDir,
    children: Vec<Child>,
}

impl Drop for Net {
    fn drop(&mut self) {
        common::netns::tear_down(&mut self.children, [&self.a, &self.b, &self.c]);
    }
}

impl Net {
    fn new(tag: &str) -> Option<Net> {
        let id = format!("{tag}{}", std::process::id() % 100_000);
        let (a, b, c) = (format!("{id}a"), format!("{id}b"), format!("{id}c"));
        let o = sh("ip", &["netns", "add", &a]);
        if !o.status.success() {
            println!(
                "SKIPPED: `ip netns add` failed (needs root): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let net = Net {
            veth_a: format!("{id}va"),
            a,
            b,
            c,
            dir,
            children: Vec::new(),
        };
        ok("ip", &["netns", "add", &net.b]);
        ok("ip", &["netns", "add", &net.c]);
        for (ns, peer, subnet) in [(&net.a, "a", 1), (&net.c, "c", 2)] {
            let (here, there) = (format!("{id}v{peer}"), format!("{id}w{peer}"));
            ok(
                "ip",
                &[
                    "link", "add", &here, "netns", ns, "type", "veth", "peer", "name", &there,
                    "netns", &net.b,
                ],
            );
            net.ip(
                ns,
                &["addr", "add", &format!("10.77.{subnet}.1/24"), "dev", &here],
            );
            net.ip(ns, &["link", "set", &here, "up"]);
            net.ip(ns, &["link", "set", "lo", "up"]);
            net.ip(
                &net.b,
                &[
                    "addr",
                    "add",
                    &format!("10.77.{subnet}.2/24"),
                    "dev",
                    &there,
                ],
            );
            net.ip(&net.b, &["link", "set", &there, "up"]);
        }
        net.ip(&net.b, &["link", "set", "lo", "up"]);
        ok(
            "ip",
            &[
                "netns",
                "exec",
                &net.a,
                "tc",
                "qdisc",
                "add",
                "dev",
                &net.veth_a,
                "root",
                "tbf",
                "rate",
                "40mbit",
                "burst",
                "64kbit",
                "latency",
                "200ms",
            ],
        );
        common::two_hosts(net.dir.path());
        Some(net)
    }

    fn ip(&self, ns: &str, args: &[&str]) {
        let mut a = vec!["netns", "exec", ns, "ip"];
        a.extend_from_slice(args);
        ok("ip", &a);
    }

    fn path(&self, n: &str) -> PathBuf {
        self.dir.path().join(n)
    }

    /// `sealink ARGS` in namespace `ns` as host `home` (`a` or `b`).
    fn sealink(&self, ns: &str, home: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, BIN])
            .args(args)
            .env("SEALINK_HOME", self.path(home))
            .env_remove("RUST_LOG");
        c
    }

    /// A serving receiver in `b` on every address; its port and its standard error so far.
    fn recv(&mut self) -> (u16, Arc<Mutex<String>>) {
        self.recv_with(&[])
    }

    /// `recv` with `extra` arguments; its process is the last of `children`.
    fn recv_with(&mut self, extra: &[&str]) -> (u16, Arc<Mutex<String>>) {
        let inbox = self.path("in");
        let mut child = self
            .sealink(&self.b, "b", &["recv", "--listen", "0.0.0.0:0", "--dir"])
            .arg(&inbox)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (addr, rest) = common::listening(&mut child);
        self.children.push(child);
        (addr.port(), common::gather(rest))
    }

    /// `sealink send FILE bob@TO --json ...` from namespace `ns`.
    fn send(&self, ns: &str, file: &Path, to: &str, extra: &[&str]) -> Command {
        let mut c = self.sealink(ns, "a", &["send"]);
        c.arg(file)
            .arg(format!("bob@{to}"))
            .args(["--quiet", "--json", "--streams", "2"])
            .args(extra);
        c
    }

    /// [`Net::send`] of `file` from a to the receiver on b's `port`, both outputs to `out()`;
    /// returns once the receiver has a checkpoint of it (`what`, should it time out).
    fn send_until_checkpoint(
        &self,
        file: &Path,
        port: u16,
        out: fn() -> Stdio,
        what: &str,
    ) -> Child {
        let child = self
            .send(&self.a, file, &format!("10.77.1.2:{port}"), &[])
            .stdout(out())
            .stderr(out())
            .spawn()
            .unwrap();
        wait_for(what, Duration::from_secs(60), || self.has_checkpoint());
        child
    }

    /// Whether the receiver has recorded durably part of a transfer (a record map).
    fn has_checkpoint(&self) -> bool {
        common::names_in(&self.path("in"))
            .iter()
            .any(|n| n.starts_with(".sealink-resume-") && n.ends_with(".map"))
    }
}

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The sender's host vanishes mid-transfer (its link deleted: no FIN, no RST reach the
/// receiver, whose session goes stale until its 60 s idle timeout). The same send from the
/// sender's new place takes over the stale session at once and resumes what it held.
#[test]
fn a_rerun_after_the_senders_host_vanished_takes_over_and_resumes() {
    rerun_takes_over("sct", false);
}

/// The same with `recv --once`: the rerun is not turned away as "busy with another transfer"
/// (the same owner sends the same file), and the receiver exits with the rerun's outcome, not
/// with the stale session's.
#[test]
fn a_once_receiver_lets_the_rerun_take_over_and_exits_with_its_outcome() {
    rerun_takes_over("sco", true);
}

fn rerun_takes_over(tag: &str, once: bool) {
    let Some(mut net) = Net::new(tag) else {
        return;
    };
    let f = net.path("big.bin");
    let data = random_file(&f, 48 << 20, 21);
    let (port, recv_err) = net.recv_with(if once { &["--once"] } else { &[] });
    let mut first =
        net.send_until_checkpoint(&f, port, Stdio::null, "a checkpoint of the first transfer");
    // The host vanishes: its link goes, then the sender dies with nothing able to leave.
    net.ip(&net.a, &["link", "del", &net.veth_a]);
    first.kill().unwrap();
    let _ = first.wait();

    let t0 = Instant::now();
    let o = net
        .send(&net.c, &f, &format!("10.77.2.2:{port}"), &[])
        .output()
        .unwrap();
    let took = t0.elapsed();
    assert!(
        o.status.success(),
        "{}\nreceiver: {}",
        text(&o),
        recv_err.lock().unwrap()
    );
    // Well before the stale session's idle timeout (60 s).
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let rec: serde_json::Value =
        serde_json::from_slice(o.stdout.split(|&b| b == b'\n').next().unwrap()).unwrap();
    assert!(rec["resumed_bytes"].as_u64().unwrap() > 0, "{rec}");
    assert!(std::fs::read(net.path("in").join("big.bin")).unwrap() == data);
    // The stale session says why it ended.
    wait_for(
        "the stale session's report",
        Duration::from_secs(10),
        || recv_err.lock().unwrap().contains("took over"),
    );
    if once {
        let receiver = net.children.last_mut().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(st) = receiver.try_wait().unwrap() {
                break st;
            }
            assert!(
                Instant::now() < deadline,
                "the --once receiver did not exit"
            );
            thread::sleep(Duration::from_millis(50));
        };
        assert!(status.success(), "{}", recv_err.lock().unwrap());
    }
}

/// The kernel gives up on a connection (ETIMEDOUT, its retransmissions unanswered after
/// `tcp_retries2`) long before the sender's own 60 s idle timeout: the sender says the
/// connection timed out, not that the receiver took no data for 60 s.
#[test]
fn the_kernels_connection_timeout_is_reported_as_such() {
    let Some(mut net) = Net::new("sck") else {
        return;
    };
    let f = net.path("big.bin");
    random_file(&f, 48 << 20, 22);
    // Give up after 3 retransmissions (a few seconds) in the sender's namespace.
    ok(
        "ip",
        &[
            "netns",
            "exec",
            &net.a,
            "sh",
            "-c",
            "echo 3 > /proc/sys/net/ipv4/tcp_retries2",
        ],
    );
    let (port, _) = net.recv();
    let sender = net.send_until_checkpoint(&f, port, Stdio::piped, "a checkpoint of the transfer");
    // Every packet to the receiver's host is dropped from now on.
    let t0 = Instant::now();
    ok(
        "ip",
        &["netns", "exec", &net.b, "nft", "add table inet cut"],
    );
    ok(
        "ip",
        &[
            "netns",
            "exec",
            &net.b,
            "nft",
            "add chain inet cut in { type filter hook input priority 0; policy drop; }",
        ],
    );
    let o = sender.wait_with_output().unwrap();
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        err.contains("the connection timed out (no answer from the peer's host)"),
        "{}",
        text(&o)
    );
    assert!(!err.contains("took no data"), "{}", text(&o));
    assert!(took < Duration::from_secs(50), "took {took:?}");
}
