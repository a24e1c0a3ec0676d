//! Datagram mode end to end: real `sealink msg listen` and `sealink msg send` processes over
//! loopback UDP, keys and trust from $SEALINK_HOME; and the datagram bench's smoke run.

mod common;
use common::{BIN, public};

use std::fs;
use std::io::{BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, ChildStderr, Command, Output, Stdio};

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sealink")
}

/// Host `a` (sender: host key, owner key `alice`) and host `b` (listener). `b` trusts host `a`
/// and, if `trust_owner`, owner alice; `a` trusts host `bob` and names its own owner.
fn hosts(trust_owner: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for h in ["a", "b"] {
        fs::create_dir_all(dir.path().join(h)).unwrap();
        let key = dir.path().join(h).join("host.key");
        assert!(
            run(&["keygen", "host", key.to_str().unwrap()])
                .status
                .success()
        );
    }
    let okey = dir.path().join("a").join("owner.key");
    assert!(
        run(&["keygen", "owner", okey.to_str().unwrap()])
            .status
            .success()
    );
    let alice = public(dir.path().join("a").join("owner.key.pub"));
    fs::write(
        dir.path().join("a").join("trust"),
        format!(
            "host bob {}\nowner alice {alice}\n",
            public(dir.path().join("b").join("host.key.pub"))
        ),
    )
    .unwrap();
    // The listener must trust some owner to start; `mallory` is a stand-in when alice is not.
    let owner_line = if trust_owner {
        format!("owner alice {alice}\n")
    } else {
        format!(
            "owner mallory {}\n",
            public(dir.path().join("b").join("host.key.pub"))
        )
    };
    fs::write(
        dir.path().join("b").join("trust"),
        format!(
            "host alice {}\n{owner_line}",
            public(dir.path().join("a").join("host.key.pub"))
        ),
    )
    .unwrap();
    dir
}

fn listen(dir: &tempfile::TempDir, extra: &[&str]) -> (Child, SocketAddr, BufReader<ChildStderr>) {
    let mut c = Command::new(BIN)
        .args(["msg", "listen", "--listen", "127.0.0.1:0"])
        .args(extra)
        .env("SEALINK_HOME", dir.path().join("b"))
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (addr, err) = common::listening(&mut c);
    (c, addr, err)
}

fn send(dir: &tempfile::TempDir, to: SocketAddr, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(["msg", "send", &format!("bob@{to}")])
        .args(args)
        .env("SEALINK_HOME", dir.path().join("a"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

#[test]
fn send_is_acknowledged_and_listen_prints_verified_owner() {
    let dir = hosts(true);
    let (mut l, addr, _err) = listen(&dir, &["--count", "3", "--json"]);
    let out = send(
        &dir,
        addr,
        &["hello", "world \"quoted\"", "--to", "inbox", "--urgent"],
    );
    assert!(
        out.status.success(),
        "send failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "delivered 2 messages from alice to bob (".to_owned() + &addr.to_string() + ")\n"
    );
    // A second process (a new channel from the same host) with a deadline, authenticate-only.
    let out = send(
        &dir,
        addr,
        &["third", "--deadline", "5", "--auth-only", "--quiet"],
    );
    assert!(
        out.status.success(),
        "send failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let status = l.wait().unwrap();
    assert!(status.success());
    let mut printed = String::new();
    l.stdout
        .take()
        .unwrap()
        .read_to_string(&mut printed)
        .unwrap();
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(
        lines,
        [
            r#"{"from":"alice","peer":"alice","to":"inbox","scope":"encrypt","bytes":5,"text":"hello"}"#,
            r#"{"from":"alice","peer":"alice","to":"inbox","scope":"encrypt","bytes":14,"text":"world \"quoted\""}"#,
            r#"{"from":"alice","peer":"alice","to":null,"scope":"auth-only","bytes":5,"text":"third"}"#,
        ]
    );
}

#[test]
fn text_output_and_untrusted_owner_is_refused() {
    let dir = hosts(false);
    let (mut l, addr, _err) = listen(&dir, &[]);
    // b does not trust owner alice: it refuses the message and says so, and send fails at once
    // with that reason (not after its timeout).
    let started = std::time::Instant::now();
    let out = send(&dir, addr, &["secret", "--urgent", "--timeout", "5"]);
    assert!(!out.status.success());
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refused by") && err.contains("does not trust owner alice"),
        "{err}"
    );
    l.kill().unwrap();
    let _ = l.wait();
    let mut printed = String::new();
    l.stdout
        .take()
        .unwrap()
        .read_to_string(&mut printed)
        .unwrap();
    assert!(
        printed.is_empty(),
        "an untrusted owner's message was printed: {printed}"
    );

    // Text mode, with alice trusted.
    let dir = hosts(true);
    let (mut l, addr, _err) = listen(&dir, &["--count", "1"]);
    let out = send(&dir, addr, &["hi there", "--quiet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(l.wait().unwrap().success());
    let mut printed = String::new();
    l.stdout
        .take()
        .unwrap()
        .read_to_string(&mut printed)
        .unwrap();
    assert_eq!(printed, "alice@alice [encrypt, 8 bytes]: hi there\n");
}

#[test]
fn send_without_listener_fails() {
    let dir = hosts(true);
    // A bound but silent UDP port: datagrams go nowhere useful.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let out = send(
        &dir,
        silent.local_addr().unwrap(),
        &["x", "--timeout", "0.5"],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not acknowledged"));
    // No trusted owner matches and no --from: a clear error before anything is sent.
    fs::write(
        dir.path().join("a").join("trust"),
        "host bob ".to_owned() + &public(dir.path().join("b").join("host.key.pub")) + "\n",
    )
    .unwrap();
    let out = send(&dir, silent.local_addr().unwrap(), &["x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--from"));
}

#[test]
fn help_has_examples() {
    for sub in ["listen", "send"] {
        let out = run(&["msg", sub, "--help"]);
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("Examples:"));
    }
}

#[test]
fn datagram_bench_quick_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bench-datagram");
    let out = run(&[
        "bench",
        "datagram",
        "--quick",
        "--sizes",
        "64",
        "--seconds",
        "0.1",
        "--receiver",
        "thread",
        "--sender",
        "thread",
        "--placement",
        "shared",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("receiver: a thread in recv_arrivals"), "{s}");
    assert!(s.contains("sender: a thread in send_batch"), "{s}");
    assert!(s.contains("64 B, shared: throughput on/off = "), "{s}");
    let on = s
        .lines()
        .find(|l| l.trim_start().starts_with("64") && l.contains(" on "))
        .unwrap();
    let msgs: f64 = on.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(msgs > 0.0, "{s}");
    // datagram.csv: one line per mode, the figures at full precision.
    let csv = fs::read_to_string(dir.join("datagram.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert!(
        lines[0].starts_with("size_bytes,placement,piggyback,msgs_per_s,"),
        "{csv}"
    );
    assert_eq!(lines.len(), 3, "{csv}");
    let on_csv: f64 = lines[1]
        .strip_prefix("64,shared,on,")
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(format!("{on_csv:.0}"), format!("{msgs:.0}"), "{csv}");
    let rec = common::run_record(&dir, "datagram", &["datagram.csv"]);
    let fig = common::figure(&rec, "64 B shared piggyback on");
    assert_eq!(fig, (Some(on_csv), "msgs/s".into()));
}

#[test]
fn datagram_bench_quick_runs_against_quic() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(&[
        "bench",
        "datagram",
        "--quick",
        "--peer",
        "quic",
        "--sizes",
        "64,1024",
        "--seconds",
        "0.1",
        // Both nodes' receives spin before they sleep: the same workload arrives whole.
        "--busy-poll-us",
        "50",
        "--out",
        tmp.path().to_str().unwrap(),
    ]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("busy poll 50 us"), "{s}");
    // A QUIC stream message lost, reordered or resized fails the run.
    assert!(
        out.status.success(),
        "{s}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(s.contains("TLS13_AES_128_GCM_SHA256"), "{s}");
    assert!(s.contains("receiver: handler on the node's thread"), "{s}");
    assert!(s.contains("sender: source on the node's thread"), "{s}");
    // Both placements by default where there are two CPUs (CI has two).
    let two = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    let placements: &[&str] = if two {
        &["shared", "split"]
    } else {
        &["shared"]
    };
    for size in ["64", "1024"] {
        for placement in placements {
            for mode in ["on", "off", "quic-strm", "quic-dgrm"] {
                let row: Vec<&str> = s
                    .lines()
                    .map(|l| l.split_whitespace().collect::<Vec<_>>())
                    .find(|f| f.len() == 11 && f[0] == size && f[1] == *placement && f[2] == mode)
                    .unwrap_or_else(|| panic!("no {size} B {placement} {mode} row in:\n{s}"));
                let num = |i: usize| -> f64 { row[i].trim_end_matches('%').parse().unwrap() };
                let (msgs, p50, p99, cpu, lost) = (num(3), num(6), num(7), num(9), num(10));
                assert!(msgs > 0.0 && cpu > 0.0, "{size} B {mode}: {row:?}");
                assert!(p50 >= 0.0 && p99 >= p50, "{size} B {mode}: {row:?}");
                if mode != "quic-dgrm" {
                    assert_eq!(lost, 0.0, "{size} B {mode}: reliable mode lost messages");
                }
            }
            assert!(
                s.contains(&format!(
                    "{size:>4} B, {placement}: sealink (piggyback on) / quic-strm: msgs/s = "
                )),
                "{s}"
            );
        }
        if two {
            assert!(
                s.contains(&format!("{size:>4} B, best placement of each: sealink (")),
                "{s}"
            );
        }
    }
    let bad = run(&["bench", "datagram", "--quick", "--peer", "tcp"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown peer"));
}

/// `--timeout` is honoured in full past the node's 20 handshake attempts (one a second), and
/// the wait says how long it has lasted, except under `-q`.
#[test]
fn send_waits_its_whole_timeout_and_says_so() {
    let dir = hosts(true);
    // A bound but silent UDP port: no handshake is ever answered.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = silent.local_addr().unwrap();
    let start = std::time::Instant::now();
    // Both at once: the test takes one timeout.
    let quiet = std::thread::spawn({
        let home = dir.path().join("a");
        move || {
            Command::new(BIN)
                .args(["msg", "send", &format!("bob@{to}"), "x", "-q"])
                .args(["--timeout", "25"])
                .env("SEALINK_HOME", home)
                .env_remove("RUST_LOG")
                .output()
                .unwrap()
        }
    });
    let out = send(&dir, to, &["x", "--timeout", "25"]);
    let took = start.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("not acknowledged by bob"), "{err}");
    assert!(
        took >= std::time::Duration::from_secs(24) && took < std::time::Duration::from_secs(40),
        "gave up after {took:?}: {err}"
    );
    for s in [5, 10, 15, 20] {
        let line = format!("waiting for an acknowledgement from bob ({s} s of 25 s)");
        assert!(err.contains(&line), "no {line:?} in {err}");
    }
    let q = quiet.join().unwrap();
    let qerr = String::from_utf8_lossy(&q.stderr);
    assert!(!q.status.success());
    assert!(!qerr.contains("waiting"), "{qerr}");
    assert!(qerr.contains("not acknowledged by bob"), "{qerr}");
}
