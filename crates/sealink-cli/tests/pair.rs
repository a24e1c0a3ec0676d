//! `sealink pair` run as a user runs it: a listener prints a code, the other side types it, and
//! both trust files gain the peer's host and owner keys, which a real `sealink send` then uses.
//! A wrong code and a replayed exchange fail on both sides and write nothing; a code works
//! once. The namespace test needs root (`ip netns add`) and skips with a printed reason
//! elsewhere.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use common::BIN;

/// A home with `sealink init`'s host key, owner key and trust file (listing its own owner).
fn init(dir: &Path, host: &str, owner: &str) -> PathBuf {
    let home = dir.join(host);
    let o = common::run_in(&home, &["init", "--host-name", host, "--owner-name", owner]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    home
}

fn trust_text(home: &Path) -> String {
    std::fs::read_to_string(home.join("trust")).unwrap()
}

/// `prefix... sealink ARGS` with `$SEALINK_HOME` = `home` (`prefix`: e.g. `ip netns exec NS`).
fn cmd(prefix: &[&str], home: &Path, args: &[&str]) -> Command {
    let mut c = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(BIN);
            c
        }
        None => Command::new(BIN),
    };
    c.args(args)
        .env("SEALINK_HOME", home)
        .env_remove("RUST_LOG");
    c
}

/// A running `sealink pair` listener: its code, address and standard error.
struct Listener {
    child: Child,
    code: String,
    addr: SocketAddr,
    err: BufReader<ChildStderr>,
}

impl Listener {
    fn start(prefix: &[&str], home: &Path, listen: &str, extra: &[&str]) -> Listener {
        let mut args = vec!["pair", "--listen", listen, "--timeout", "60", "--name"];
        args.push(home.file_name().unwrap().to_str().unwrap());
        args.extend_from_slice(extra);
        let mut child = cmd(prefix, home, &args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (addr, err) = common::listening(&mut child);
        let mut code = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut code)
            .unwrap();
        Listener {
            child,
            code: code.trim().to_owned(),
            addr,
            err,
        }
    }

    /// Waits for the listener to exit: (success, its standard error after `listening on`).
    fn finish(mut self) -> (bool, String) {
        let mut rest = String::new();
        self.err.read_to_string(&mut rest).unwrap();
        (self.child.wait().unwrap().success(), rest)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn join(prefix: &[&str], home: &Path, code: &str, to: &str) -> Output {
    let name = home.file_name().unwrap().to_str().unwrap().to_owned();
    cmd(prefix, home, &["pair", code, to, "--name", &name])
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `o` failed, and its standard error says `says`.
fn assert_fails_saying(o: &Output, says: &str) {
    assert!(!o.status.success());
    assert!(stderr(o).contains(says), "{}", stderr(o));
}

/// A sends a file to B with `sealink send b@ADDR` (B: `recv --once`), both trust files being
/// what pairing left; the file arrives intact.
fn send_works(prefix: [&[&str]; 2], a: &Path, b: &Path, recv_listen: &str) {
    let inbox = b.join("in");
    std::fs::create_dir_all(&inbox).unwrap();
    let mut recv = cmd(
        prefix[1],
        b,
        &[
            "recv",
            "--listen",
            recv_listen,
            "--once",
            "--dir",
            inbox.to_str().unwrap(),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let (addr, mut err) = common::listening(&mut recv);
    let file = a.join("hello.bin");
    let data = common::random_file(&file, 100_000, 7);
    let o = cmd(
        prefix[0],
        a,
        &[
            "send",
            file.to_str().unwrap(),
            &format!("b@{addr}"),
            "--quiet",
        ],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "send failed: {}", stderr(&o));
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(recv.wait().unwrap().success(), "recv failed: {rest}");
    assert_eq!(std::fs::read(inbox.join("hello.bin")).unwrap(), data);
}

/// Pairs `a` (joining) with `b` (listening) and checks what both printed and wrote.
fn pair_and_check(prefix: [&[&str]; 2], a: &Path, b: &Path, listen: &str, connect: &str) {
    let l = Listener::start(prefix[1], b, listen, &[]);
    // `7-guitar-ocean`: a number and two words of the list.
    let parts: Vec<&str> = l.code.split('-').collect();
    assert_eq!(parts.len(), 3, "code {:?}", l.code);
    assert!(parts[0].parse::<u8>().is_ok_and(|n| (1..=99).contains(&n)));
    let to = connect.replace("PORT", &l.addr.port().to_string());
    let o = join(prefix[0], a, &l.code, &to);
    let (ok, b_err) = l.finish();
    let a_err = stderr(&o);
    assert!(o.status.success(), "join failed: {a_err}");
    assert!(ok, "listener failed: {b_err}");
    let fp = |home: &Path, kind: &str| {
        let o = common::run_in(
            home,
            &[
                "pubkey",
                "--fingerprint",
                home.join(format!("{kind}.key")).to_str().unwrap(),
            ],
        );
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    };
    // Both sides show all four fingerprints.
    for text in [&a_err, &b_err] {
        for (home, kind) in [(a, "host"), (a, "owner"), (b, "host"), (b, "owner")] {
            let f = fp(home, kind);
            assert!(
                text.contains(&f),
                "{kind} fingerprint {f} of {home:?} missing: {text}"
            );
        }
    }
    // The host under the peer's --name, the owner under the name its `init` gave it.
    assert!(
        a_err.contains("now trusts host b") && a_err.contains("now trusts owner bob"),
        "{a_err}"
    );
    assert!(
        b_err.contains("now trusts host a") && b_err.contains("now trusts owner alice"),
        "{b_err}"
    );
    let key = |home: &Path, kind: &str| common::public(home.join(format!("{kind}.key.pub")));
    let (ta, tb) = (trust_text(a), trust_text(b));
    assert!(ta.contains(&format!("host b {}", key(b, "host"))), "{ta}");
    assert!(
        ta.contains(&format!("owner bob {}", key(b, "owner"))),
        "{ta}"
    );
    assert!(tb.contains(&format!("host a {}", key(a, "host"))), "{tb}");
    assert!(
        tb.contains(&format!("owner alice {}", key(a, "owner"))),
        "{tb}"
    );
    for t in [&ta, &tb] {
        sealink_keys::trust::parse_trust(t).unwrap();
    }
}

/// (1) Two processes on 127.0.0.1 pair; a real `sealink send` from A to B then succeeds
/// through the new trust entries alone; and (4) the code works once: the listener has exited,
/// so the same code again is refused.
#[test]
fn pairing_on_loopback_lets_send_work_and_the_code_works_once() {
    let dir = tempfile::tempdir().unwrap();
    let a = init(dir.path(), "a", "alice");
    let b = init(dir.path(), "b", "bob");
    let l = Listener::start(&[], &b, "127.0.0.1:0", &[]);
    let (code, addr) = (l.code.clone(), l.addr);
    let o = join(&[], &a, &code, &addr.to_string());
    assert!(o.status.success(), "{}", stderr(&o));
    let (ok, err) = l.finish();
    assert!(ok, "{err}");
    // The same code again: nobody listens any more.
    let before = (trust_text(&a), trust_text(&b));
    let again = join(&[], &a, &code, &addr.to_string());
    assert_fails_saying(&again, "a code works once");
    assert_eq!(before, (trust_text(&a), trust_text(&b)));
    send_works([&[], &[]], &a, &b, "127.0.0.1:0");

    // The full check (fingerprints, lines written) on a fresh pair of homes.
    let dir = tempfile::tempdir().unwrap();
    let a = init(dir.path(), "a", "alice");
    let b = init(dir.path(), "b", "bob");
    pair_and_check([&[], &[]], &a, &b, "127.0.0.1:0", "127.0.0.1:PORT");
    // Pairing again (a new code) finds everything trusted and changes nothing.
    let before = (trust_text(&a), trust_text(&b));
    let l = Listener::start(&[], &b, "127.0.0.1:0", &[]);
    let o = join(&[], &a, &l.code, &l.addr.to_string());
    let (ok, err) = l.finish();
    assert!(o.status.success() && ok, "{}{err}", stderr(&o));
    assert!(err.contains("already trusts host a with this key"), "{err}");
    assert_eq!(before, (trust_text(&a), trust_text(&b)));
}

/// (2) A wrong code fails on both sides with the same clear message, before any key is sent,
/// and writes nothing to either trust file; the listener has exited (one guess only), so even
/// the right code is refused afterwards.
#[test]
fn wrong_code_fails_on_both_sides_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = init(dir.path(), "a", "alice");
    let b = init(dir.path(), "b", "bob");
    let before = (trust_text(&a), trust_text(&b));
    let l = Listener::start(&[], &b, "127.0.0.1:0", &["--with-code", "7-guitar-ocean"]);
    let addr = l.addr.to_string();
    let o = join(&[], &a, "8-guitar-ocean", &addr);
    let (ok, err) = l.finish();
    assert!(!o.status.success() && !ok);
    for text in [stderr(&o), err] {
        assert!(
            text.contains("the code did not match: nothing was exchanged"),
            "{text}"
        );
        assert!(!text.contains("now trusts"), "{text}");
    }
    assert_eq!(before, (trust_text(&a), trust_text(&b)));
    let right = join(&[], &a, "7-guitar-ocean", &addr);
    assert_fails_saying(&right, "cannot connect");
    assert_eq!(before, (trust_text(&a), trust_text(&b)));
    // A malformed code is refused before any connection.
    let o = join(&[], &a, "7-guitar-oceans", &addr);
    assert_fails_saying(&o, "bad pairing code");
}

/// Issue 30: with no final word, a side that refused the peer's keys (its trust file lists the
/// peer's name with another key) left the other side trusting it alone. Now each side says
/// whether it accepts before either writes: a refusal on one side adds nothing on both.
#[test]
fn a_refusal_on_one_side_writes_nothing_on_either() {
    let dir = tempfile::tempdir().unwrap();
    let a = init(dir.path(), "a", "alice");
    let b = init(dir.path(), "b", "bob");
    // B already trusts another host under A's name.
    let other = dir.path().join("other.key");
    let o = common::run_in(&b, &["keygen", "host", other.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pubtext = std::fs::read_to_string(dir.path().join("other.key.pub")).unwrap();
    let key = pubtext.split_whitespace().nth(1).unwrap();
    let mut t = trust_text(&b);
    t.push_str(&format!("host a {key}\n"));
    std::fs::write(b.join("trust"), t).unwrap();
    let before = (trust_text(&a), trust_text(&b));
    let l = Listener::start(&[], &b, "127.0.0.1:0", &[]);
    let o = join(&[], &a, &l.code.clone(), &l.addr.to_string());
    let (ok, err) = l.finish();
    assert!(!o.status.success() && !ok, "{}\n{err}", stderr(&o));
    assert!(
        err.contains("host a is already listed with another key"),
        "{err}"
    );
    assert!(err.contains("the peer was told"), "{err}");
    assert!(
        stderr(&o).contains("the peer refused this host's keys"),
        "{}",
        stderr(&o)
    );
    for text in [stderr(&o), err] {
        assert!(!text.contains("now trusts"), "{text}");
    }
    assert_eq!(before, (trust_text(&a), trust_text(&b)));
}

/// Forwards one connection from `front` to `to` both ways, recording what the client sent.
fn proxy_once(front: TcpListener, to: SocketAddr) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let (mut client, _) = front.accept().unwrap();
        let mut server = TcpStream::connect(to).unwrap();
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        let rec = Arc::clone(&recorded);
        let up = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = c2.read(&mut buf) {
                rec.lock().unwrap().extend_from_slice(&buf[..n]);
                if s2.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = s2.shutdown(std::net::Shutdown::Write);
        });
        let _ = std::io::copy(&mut server, &mut client);
        let _ = client.shutdown(std::net::Shutdown::Write);
        up.join().unwrap();
        recorded.lock().unwrap().clone()
    })
}

/// (3) An exchange recorded by a proxy between A and B, replayed byte for byte to a fresh
/// listener with the same code, fails ("the code did not match": the new listener's SPAKE2
/// secret is fresh) and writes nothing to its trust file.
#[test]
fn replayed_exchange_fails_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = init(dir.path(), "a", "alice");
    let b = init(dir.path(), "b", "bob");
    let code = "42-otter-violin";
    let l = Listener::start(&[], &b, "127.0.0.1:0", &["--with-code", code]);
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let front_addr = front.local_addr().unwrap();
    let proxy = proxy_once(front, l.addr);
    let o = join(&[], &a, code, &front_addr.to_string());
    assert!(o.status.success(), "{}", stderr(&o));
    let (ok, err) = l.finish();
    assert!(ok, "{err}");
    let recorded = proxy.join().unwrap();
    assert!(recorded.len() > 100, "recorded {} bytes", recorded.len());

    // A fresh listener with the same code, on a host that never paired.
    let c = init(dir.path(), "c", "carol");
    let before = trust_text(&c);
    let l = Listener::start(&[], &c, "127.0.0.1:0", &["--with-code", code]);
    let mut s = TcpStream::connect(l.addr).unwrap();
    // The listener may close before everything is written: errors are expected here.
    let _ = s.write_all(&recorded);
    let mut back = Vec::new();
    let _ = s.read_to_end(&mut back);
    let (ok, err) = l.finish();
    assert!(!ok, "a replay was accepted: {err}");
    assert!(err.contains("the code did not match"), "{err}");
    assert!(!err.contains("now trusts"), "{err}");
    assert_eq!(before, trust_text(&c));
}

fn sh(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd).args(args).output().unwrap()
}

/// Two namespaces joined by a veth pair; deleted on drop.
struct Netns([String; 2]);

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = sh("ip", &["netns", "del", n]);
        }
    }
}

/// (1) Pairing between two network namespaces (A at 10.203.0.1, B at 10.203.0.2, B on the
/// default port 7879), then `sealink send` from A to B with the trust pairing wrote.
#[test]
fn pairing_between_namespaces_then_send() {
    let id = std::process::id() % 100_000;
    let ns = [format!("slp{id}a"), format!("slp{id}b")];
    if !common::netns::add_or_skip(&ns[0]) {
        return;
    }
    let lab = Netns(ns.clone());
    let ok = |args: &[&str]| {
        let o = sh("ip", args);
        assert!(
            o.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    ok(&["netns", "add", &ns[1]]);
    let (va, vb) = (format!("vp{id}a"), format!("vp{id}b"));
    ok(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
    ok(&["link", "set", &va, "netns", &ns[0]]);
    ok(&["link", "set", &vb, "netns", &ns[1]]);
    for (n, v, addr) in [
        (&ns[0], &va, "10.203.0.1/24"),
        (&ns[1], &vb, "10.203.0.2/24"),
    ] {
        ok(&["-n", n, "addr", "add", addr, "dev", v]);
        ok(&["-n", n, "link", "set", v, "up"]);
        ok(&["-n", n, "link", "set", "lo", "up"]);
    }
    let dir = tempfile::tempdir().unwrap();
    let a = init(dir.path(), "a", "alice");
    let b = init(dir.path(), "b", "bob");
    let pa = ["ip", "netns", "exec", ns[0].as_str()];
    let pb = ["ip", "netns", "exec", ns[1].as_str()];
    // B listens on all addresses of its namespace, on the default port; A names the host alone.
    pair_and_check([&pa, &pb], &a, &b, "0.0.0.0", "10.203.0.2");
    send_works([&pa, &pb], &a, &b, "10.203.0.2:0");
    drop(lab);
}

/// Without `--name`, each side files itself under the host name its `init --host-name` was
/// given, not the system's host name (both sides here share one: issue 46 had both trust files
/// say `host vm`), and `send b@ADDR` then finds host b.
#[test]
fn pairing_without_name_uses_the_names_given_to_init() {
    let dir = tempfile::tempdir().unwrap();
    let a = init(dir.path(), "a", "alice");
    let b = init(dir.path(), "b", "bob");
    assert_eq!(std::fs::read_to_string(b.join("host-name")).unwrap(), "b\n");
    let mut child = cmd(
        &[],
        &b,
        &["pair", "--listen", "127.0.0.1:0", "--timeout", "60"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let (addr, mut err) = common::listening(&mut child);
    let mut code = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut code)
        .unwrap();
    let o = cmd(&[], &a, &["pair", code.trim(), &addr.to_string()])
        .output()
        .unwrap();
    let mut b_err = String::new();
    err.read_to_string(&mut b_err).unwrap();
    assert!(o.status.success(), "join: {}", stderr(&o));
    assert!(child.wait().unwrap().success(), "listener: {b_err}");
    let key = |home: &Path, kind: &str| common::public(home.join(format!("{kind}.key.pub")));
    let (ta, tb) = (trust_text(&a), trust_text(&b));
    assert!(ta.contains(&format!("host b {}", key(&b, "host"))), "{ta}");
    assert!(tb.contains(&format!("host a {}", key(&a, "host"))), "{tb}");
    // And each owner under the name its `init --owner-name` gave it.
    assert!(
        ta.contains(&format!("owner bob {}", key(&b, "owner"))),
        "{ta}"
    );
    assert!(
        tb.contains(&format!("owner alice {}", key(&a, "owner"))),
        "{tb}"
    );
    send_works([&[], &[]], &a, &b, "127.0.0.1:0");
}
