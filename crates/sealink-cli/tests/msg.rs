//! Datagram mode end to end: real `sealink msg listen` and `sealink msg send` processes over
//! loopback UDP, keys and trust from $SEALINK_HOME. (The datagram bench's smoke runs are the
//! lab's: crates/sealink-lab/tests/bench_datagram.rs.)

mod common;
use common::{BIN, public};

use std::fs;
use std::io::{BufReader, Read};
use std::net::SocketAddr;
use std::path::PathBuf;
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
    let (a_host, b_host) = (host_public(&dir, "a"), host_public(&dir, "b"));
    write_trust(
        &dir,
        "a",
        &format!("host bob {b_host}\nowner alice {alice}\n"),
    );
    // The listener must trust some owner to start; `mallory` is a stand-in when alice is not.
    let owner_line = if trust_owner {
        format!("owner alice {alice}\n")
    } else {
        format!("owner mallory {b_host}\n")
    };
    write_trust(&dir, "b", &format!("host alice {a_host}\n{owner_line}"));
    dir
}

/// Host `h`'s public host key.
fn host_public(dir: &tempfile::TempDir, h: &str) -> String {
    public(dir.path().join(h).join("host.key.pub"))
}

/// Writes host `h`'s trust file.
fn write_trust(dir: &tempfile::TempDir, h: &str, text: &str) {
    fs::write(dir.path().join(h).join("trust"), text).unwrap();
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

/// `sealink msg send` to bob at `to` with `args`, as host a (its home `home`).
fn send_cmd(home: PathBuf, to: SocketAddr, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(["msg", "send", &format!("bob@{to}")])
        .args(args)
        .env("SEALINK_HOME", home)
        .env_remove("RUST_LOG");
    c
}

fn send(dir: &tempfile::TempDir, to: SocketAddr, args: &[&str]) -> Output {
    send_cmd(dir.path().join("a"), to, args).output().unwrap()
}

/// [`send`], which must succeed.
fn send_ok(dir: &tempfile::TempDir, to: SocketAddr, args: &[&str]) -> Output {
    let out = send(dir, to, args);
    assert!(
        out.status.success(),
        "send failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What the listener `l` printed on its standard output (read to the end).
fn printed_by(l: &mut Child) -> String {
    let mut printed = String::new();
    l.stdout
        .take()
        .unwrap()
        .read_to_string(&mut printed)
        .unwrap();
    printed
}

#[test]
fn send_is_acknowledged_and_listen_prints_verified_owner() {
    let dir = hosts(true);
    let (mut l, addr, _err) = listen(&dir, &["--count", "3", "--json"]);
    let out = send_ok(
        &dir,
        addr,
        &["hello", "world \"quoted\"", "--to", "inbox", "--urgent"],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "delivered 2 messages from alice to bob (".to_owned() + &addr.to_string() + ")\n"
    );
    // A second process (a new channel from the same host) with a deadline, authenticate-only.
    let out = send_ok(
        &dir,
        addr,
        &["third", "--deadline", "5", "--auth-only", "--quiet"],
    );
    assert!(out.stdout.is_empty());
    let status = l.wait().unwrap();
    assert!(status.success());
    let printed = printed_by(&mut l);
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
    let printed = printed_by(&mut l);
    assert!(
        printed.is_empty(),
        "an untrusted owner's message was printed: {printed}"
    );

    // Text mode, with alice trusted.
    let dir = hosts(true);
    let (mut l, addr, _err) = listen(&dir, &["--count", "1"]);
    send_ok(&dir, addr, &["hi there", "--quiet"]);
    assert!(l.wait().unwrap().success());
    let printed = printed_by(&mut l);
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
    write_trust(&dir, "a", &format!("host bob {}\n", host_public(&dir, "b")));
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
            send_cmd(home, to, &["x", "-q", "--timeout", "25"])
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
