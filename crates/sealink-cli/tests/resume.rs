//! Resuming interrupted stream transfers, end to end: a real `sealink recv` (serving several
//! transfers) and real `sealink send` processes. The first attempt goes through a relay that
//! forwards only the first bytes of each stripe, and the sender is killed (SIGKILL) once they
//! are through; the same command run again must finish the file sending only the rest.

mod common;
use common::hosts::text;
use common::{BIN, random_file, send_cmd};

use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use sealink_stream::FileRecord;

const STATE: &str = ".sealink-resume-";

/// A receiver serving transfers into `dir/in` until dropped; its standard error is collected.
struct Recv {
    child: Child,
    addr: SocketAddr,
    err: Arc<Mutex<String>>,
    out: PathBuf,
}

impl Drop for Recv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        common::two_hosts(dir.path());
        Setup { dir }
    }
    /// The file `name` in the test directory, `len` random bytes from `seed`: its path and bytes.
    fn file(&self, name: &str, len: usize, seed: u64) -> (PathBuf, Vec<u8>) {
        let f = self.path(name);
        let data = random_file(&f, len, seed);
        (f, data)
    }

    /// A receiver, and a send of `file` to it cut after `budget` bytes.
    fn recv_interrupted(&self, file: &Path, budget: u64) -> Recv {
        let r = self.recv();
        self.interrupted_send(&r, file, budget);
        r
    }

    fn path(&self, n: &str) -> PathBuf {
        self.dir.path().join(n)
    }
    fn inbox(&self) -> PathBuf {
        self.path("in")
    }
    fn state_names(&self) -> Vec<String> {
        common::names_in(&self.inbox())
            .into_iter()
            .filter(|n| n.starts_with(STATE))
            .collect()
    }

    fn recv(&self) -> Recv {
        let out = self.path("recv.jsonl");
        let mut child = Command::new(BIN)
            .args(["recv", "--listen", "127.0.0.1:0", "--json", "--dir"])
            .arg(self.inbox())
            .env("SEALINK_HOME", self.path("b"))
            .env_remove("RUST_LOG")
            .stdout(fs::File::create(&out).unwrap())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (addr, rest) = common::listening(&mut child);
        let err = common::gather(rest);
        Recv {
            child,
            addr,
            err,
            out,
        }
    }

    fn send(&self, file: &Path, to: SocketAddr, extra: &[&str]) -> Output {
        let mut args = vec!["--json", "--streams", "2", "--record-size", "4096"];
        args.extend_from_slice(extra);
        send_cmd(&self.path("a"), &[file], to, &args)
            .output()
            .unwrap()
    }

    /// [`Setup::send`], which must succeed.
    fn send_ok(&self, file: &Path, to: SocketAddr, extra: &[&str]) -> Output {
        let o = self.send(file, to, extra);
        assert!(o.status.success(), "{}", text(&o));
        o
    }

    /// The inbox holds `name` with the bytes `data`.
    fn assert_in_inbox(&self, name: &str, data: &[u8]) {
        assert!(fs::read(self.inbox().join(name)).unwrap() == data);
    }

    /// First attempt: through a relay that passes `budget` bytes of each stripe; the sender is
    /// killed with SIGKILL once they have passed, and the receiver keeps what it got.
    fn interrupted_send(&self, r: &Recv, file: &Path, budget: u64) {
        let relay = relay(r.addr, budget);
        let mut s = send_cmd(
            &self.path("a"),
            &[file],
            relay.addr,
            &["--streams", "2", "--record-size", "4096"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        wait_for("the relay to pass its budget on both stripes", || {
            relay.passed.load(Ordering::SeqCst) >= 2 * budget
        });
        s.kill().unwrap();
        let _ = s.wait();
        relay.cut();
        let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_for("the receiver to give up and keep a record map", || {
                r.err.lock().unwrap().contains("transfer failed")
                    && self.state_names().iter().any(|n| n.ends_with(".map"))
            })
        }));
        if waited.is_err() {
            // What the receiver said, and what it kept, for the failure's diagnosis.
            panic!(
                "the receiver did not give up with a record map; it said:\n{}\nstate: {:?}",
                r.err.lock().unwrap(),
                self.state_names()
            );
        }
        assert!(
            !self.inbox().join(file.file_name().unwrap()).exists(),
            "a partial file under its final name"
        );
    }
}

/// Polls `cond` (every 20 ms, up to 120 s: generous for a loaded machine).
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// A relay to `to` that passes the first `budget` bytes the sender writes on each connection
/// and then stops reading it (the sender blocks once the socket buffers fill, so no stripe
/// runs far ahead of the others); [`Relay::cut`] closes the receiver's side.
struct Relay {
    addr: SocketAddr,
    passed: Arc<AtomicU64>,
    /// The relay's end of each connection to the receiver.
    to_receiver: Arc<Mutex<Vec<TcpStream>>>,
    /// The relay's end of each connection from the sender, once its budget has passed.
    to_sender: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    /// Ends every connection to the receiver once the bytes passed have reached it, as a
    /// network that is cut after them would: a FIN after them, never a reset. The sockets
    /// stay open (the relay is dropped with the test): closing one that holds unread bytes
    /// from the receiver would send a reset, which throws away whatever passed but is still
    /// queued on the relay's side. On a loaded machine that was every byte of a stripe, and
    /// the receiver then rightly kept no resume state, which failed the test now and then.
    /// A sender still running sees its connections end (reset once the receiver has closed).
    fn cut(&self) {
        for s in self.to_receiver.lock().unwrap().iter() {
            let _ = s.shutdown(Shutdown::Write);
        }
        for c in self.to_sender.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

fn relay(to: SocketAddr, budget: u64) -> Relay {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let passed = Arc::new(AtomicU64::new(0));
    let to_receiver: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
    let to_sender: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
    let (p, hr, hs) = (passed.clone(), to_receiver.clone(), to_sender.clone());
    thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            let Ok(mut s) = TcpStream::connect(to) else {
                return;
            };
            let (mut c2, mut s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
            hr.lock().unwrap().push(s.try_clone().unwrap());
            thread::spawn(move || {
                let _ = std::io::copy(&mut s2, &mut c2);
                let _ = c2.shutdown(Shutdown::Write);
            });
            let (p, hs) = (p.clone(), hs.clone());
            thread::spawn(move || {
                let mut left = budget;
                let mut buf = vec![0u8; 64 << 10];
                while left > 0 {
                    let want = (buf.len() as u64).min(left) as usize;
                    let n = match c.read(&mut buf[..want]) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    left -= n as u64;
                    p.fetch_add(n as u64, Ordering::SeqCst);
                }
                // Hold the sender's side open, unread, until the test is done with it.
                hs.lock().unwrap().push(c);
            });
        }
    });
    Relay {
        addr,
        passed,
        to_receiver,
        to_sender,
    }
}

fn records(out: &[u8]) -> Vec<FileRecord> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The receiver's JSON records, once there are `n` (a serving receiver reports each transfer
/// as soon as it ends).
fn received(r: &Recv, n: usize) -> Vec<FileRecord> {
    let mut got = Vec::new();
    wait_for("the receiver's JSON records", || {
        got = records(&fs::read(&r.out).unwrap());
        got.len() >= n
    });
    got
}

#[test]
fn killed_sender_resumes_and_the_rerun_sends_only_the_rest() {
    let h = Setup::new();
    let (f, data) = h.file("big.bin", 64 << 20, 11);
    let r = h.recv_interrupted(&f, 6 << 20);
    for n in h.state_names() {
        let mode = fs::metadata(h.inbox().join(&n)).unwrap().permissions();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.mode() & 0o777, 0o600, "{n} is not private");
    }

    // The same command again: it succeeds, and sends clearly less than the file.
    let o = h.send_ok(&f, r.addr, &[]);
    let sent = records(&o.stdout);
    assert_eq!(sent.len(), 1);
    let resumed = sent[0].resumed_bytes;
    assert_eq!(sent[0].bytes, 64 << 20);
    assert!(
        (2 << 20..=12 << 20).contains(&resumed),
        "resumed {resumed} bytes"
    );
    h.assert_in_inbox("big.bin", &data);
    // The receiver says the same, and keeps no state for a finished file.
    let got = received(&r, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].resumed_bytes, resumed);
    assert_eq!(h.state_names(), Vec::<String>::new());
}

#[test]
fn corrupted_held_data_fails_the_hash_check_and_a_rerun_starts_over() {
    let h = Setup::new();
    let (f, data) = h.file("f.bin", 48 << 20, 12);
    let r = h.recv_interrupted(&f, 3 << 20);
    // Flip a byte the receiver holds (and will not get again).
    let part = h
        .state_names()
        .into_iter()
        .find(|n| n.ends_with(".part"))
        .unwrap();
    let part = h.inbox().join(part);
    let mut b = fs::read(&part).unwrap();
    b[1000] ^= 0x40;
    fs::write(&part, &b).unwrap();

    let o = h.send(&f, r.addr, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("SHA-256"), "{}", text(&o));
    assert!(!h.inbox().join("f.bin").exists());
    assert_eq!(h.state_names(), Vec::<String>::new(), "state kept");

    // Again: from zero, and right.
    let o = h.send_ok(&f, r.addr, &[]);
    assert_eq!(records(&o.stdout)[0].resumed_bytes, 0);
    h.assert_in_inbox("f.bin", &data);
    assert_eq!(h.state_names(), Vec::<String>::new());
}

#[test]
fn no_resume_sends_everything_and_drops_the_state() {
    let h = Setup::new();
    let (f, data) = h.file("f.bin", 48 << 20, 13);
    let r = h.recv_interrupted(&f, 3 << 20);
    let o = h.send_ok(&f, r.addr, &["--no-resume"]);
    let sent = records(&o.stdout);
    assert_eq!((sent[0].bytes, sent[0].resumed_bytes), (48 << 20, 0));
    assert_eq!(received(&r, 1)[0].resumed_bytes, 0);
    h.assert_in_inbox("f.bin", &data);
    assert_eq!(h.state_names(), Vec::<String>::new());
}

#[test]
fn a_changed_file_is_not_resumed_and_old_state_expires() {
    let h = Setup::new();
    let (f, _) = h.file("f.bin", 48 << 20, 14);
    let r = h.recv_interrupted(&f, 3 << 20);
    // A new version of the file (other content, other mtime): nothing is resumed.
    let data = random_file(&f, 48 << 20, 15);
    let later = std::time::SystemTime::now() + Duration::from_secs(5);
    fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(later)
        .unwrap();
    let o = h.send_ok(&f, r.addr, &[]);
    assert_eq!(records(&o.stdout)[0].resumed_bytes, 0);
    h.assert_in_inbox("f.bin", &data);
    // The old version's state stays until it is older than --resume-max-age.
    assert_eq!(h.state_names().len(), 2, "{:?}", h.state_names());
    drop(r);
    let recv_with_age = |age: &str| {
        let mut c = Command::new(BIN)
            .args([
                "recv",
                "--listen",
                "127.0.0.1:0",
                "--resume-max-age",
                age,
                "--dir",
            ])
            .arg(h.inbox())
            .env("SEALINK_HOME", h.path("b"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let _ = common::listening(&mut c);
        c.kill().unwrap();
        c.wait().unwrap();
    };
    recv_with_age("7d");
    assert_eq!(h.state_names().len(), 2);
    recv_with_age("0");
    assert_eq!(h.state_names(), Vec::<String>::new());
    let _ = std::io::stderr().flush();
}

#[test]
fn killed_receiver_keeps_its_last_checkpoint_and_a_new_one_resumes() {
    let h = Setup::new();
    let (f, data) = h.file("f.bin", 48 << 20, 16);
    let mut r = h.recv();
    let relay = relay(r.addr, 3 << 20);
    let mut s = send_cmd(
        &h.path("a"),
        &[&f],
        relay.addr,
        &["--streams", "2", "--record-size", "4096"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // The transfer stalls after the budget; the receiver checkpoints while it waits.
    wait_for("a checkpoint of the stalled transfer", || {
        relay.passed.load(Ordering::SeqCst) >= 2 * (3 << 20)
            && h.state_names().iter().any(|n| n.ends_with(".map"))
    });
    r.child.kill().unwrap();
    r.child.wait().unwrap();
    s.kill().unwrap();
    let _ = s.wait();
    relay.cut();
    assert!(!h.inbox().join("f.bin").exists());
    let r = h.recv();
    let o = h.send_ok(&f, r.addr, &[]);
    let resumed = records(&o.stdout)[0].resumed_bytes;
    assert!(resumed >= 1 << 20, "resumed {resumed} bytes");
    h.assert_in_inbox("f.bin", &data);
    assert_eq!(h.state_names(), Vec::<String>::new());
}

/// The JSON lines of `out` as values (not [`FileRecord`]: a field missing must fail here).
fn json_lines(out: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn num(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

/// Both sides' records of a resumed transfer: the bytes that travelled and the bytes held add
/// up to the file, and the rate is over what travelled.
fn check_split(r: &serde_json::Value, size: u64) {
    let (sent, resumed) = (num(r, "bytes_sent"), num(r, "resumed_bytes"));
    assert!(resumed > 0 && sent > 0, "{r}");
    assert_eq!(sent + resumed, size, "{r}");
    assert_eq!(num(r, "bytes_skipped"), 0, "{r}");
    assert_eq!(num(r, "transfer_bytes_sent"), sent, "{r}");
    assert_eq!(num(r, "transfer_bytes_resumed"), resumed, "{r}");
    assert_eq!(num(r, "transfer_bytes_skipped"), 0, "{r}");
    let secs = r["seconds"].as_f64().unwrap();
    let rate = r["sent_bytes_per_sec"].as_f64().unwrap();
    assert!(
        (rate * secs - sent as f64).abs() < 1.0 + sent as f64 * 1e-6,
        "{r}"
    );
    assert!(rate < r["bytes_per_sec"].as_f64().unwrap(), "{r}");
}

#[test]
fn a_resumed_transfer_reports_what_travelled_apart_from_what_was_held() {
    let h = Setup::new();
    let (f, _) = h.file("big.bin", 48 << 20, 17);
    let r = h.recv_interrupted(&f, 3 << 20);
    let o = h.send_ok(&f, r.addr, &[]);
    let sent = json_lines(&o.stdout);
    check_split(&sent[0], 48 << 20);
    let mut got = Vec::new();
    wait_for("the receiver's JSON record", || {
        got = json_lines(&fs::read(&r.out).unwrap());
        !got.is_empty()
    });
    check_split(&got[0], 48 << 20);
    assert_eq!(num(&got[0], "bytes_sent"), num(&sent[0], "bytes_sent"));
}

#[test]
fn files_up_to_date_are_not_counted_as_sent() {
    let h = common::hosts::Hosts::new();
    let f = h.path("six.txt");
    fs::write(&f, b"hello\n").unwrap();
    let (mut c, addr, err) = h.recv_with(None, &["--update"], Stdio::null());
    let o = h.send(&[&f], addr, &["--update"]);
    assert!(o.status.success(), "{}", text(&o));
    // Again: the receiver has it up to date. `send_cmd` is --quiet: run it without.
    let again = |extra: &[&str]| {
        let o = Command::new(BIN)
            .arg("send")
            .arg(&f)
            .arg(format!("bob@{addr}"))
            .arg("--update")
            .args(extra)
            .env("SEALINK_HOME", h.a())
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let line = again(&[]);
    assert!(line.starts_with("sent 0 B in 0 files over "), "{line}");
    assert!(
        line.trim_end()
            .ends_with("; 1 file up to date (6 B), not sent"),
        "{line}"
    );
    let r = &json_lines(again(&["--json"]).as_bytes())[0];
    assert_eq!(r["result"], "skipped_up_to_date", "{r}");
    assert_eq!(
        [
            num(r, "bytes"),
            num(r, "bytes_sent"),
            num(r, "bytes_skipped"),
            num(r, "transfer_bytes_sent"),
            num(r, "transfer_bytes_skipped"),
        ],
        [6, 0, 6, 0, 6],
        "{r}"
    );
    assert_eq!(r["sent_bytes_per_sec"].as_f64(), Some(0.0), "{r}");
    c.kill().unwrap();
    let _ = common::hosts::finish(c, err);
}

/// A send of `f` to the relay (two stripes, 4 KiB records, `extra` flags), started once the
/// relay is up; waits until the relay has passed `budget` bytes on both stripes.
fn send_until_budget(h: &Setup, f: &Path, relay: &Relay, budget: u64, extra: &[&str]) -> Child {
    let mut args = vec!["--streams", "2", "--record-size", "4096"];
    args.extend_from_slice(extra);
    let s = send_cmd(&h.path("a"), &[f], relay.addr, &args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the relay to pass its budget on both stripes", || {
        relay.passed.load(Ordering::SeqCst) >= 2 * budget
    });
    s
}

/// An interrupted send says how to go on (issue 46): Ctrl-C (SIGINT) exits 130 with the hint,
/// and the same command then resumes.
#[test]
fn an_interrupted_send_says_to_run_it_again_and_that_resumes() {
    let h = Setup::new();
    let (f, data) = h.file("i.bin", 32 << 20, 21);
    let r = h.recv();
    let relay = relay(r.addr, 3 << 20);
    let s = send_until_budget(&h, &f, &relay, 3 << 20, &[]);
    let k = Command::new("kill")
        .args(["-INT", &s.id().to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let o = s.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    assert!(
        text(&o).contains(
            "interrupted; the receiver keeps what arrived; run the same command again to resume"
        ),
        "{}",
        text(&o)
    );
    relay.cut();
    wait_for("the receiver to keep a record map", || {
        r.err.lock().unwrap().contains("transfer failed")
            && h.state_names().iter().any(|n| n.ends_with(".map"))
    });
    let o = h.send_ok(&f, r.addr, &[]);
    assert!(records(&o.stdout)[0].resumed_bytes > 0, "{}", text(&o));
    h.assert_in_inbox("i.bin", &data);
}

/// A connection cut under a running send fails it with the hint line after the error.
#[test]
fn a_cut_connection_ends_the_send_with_the_resume_hint() {
    let h = Setup::new();
    let (f, _) = h.file("c.bin", 32 << 20, 22);
    let r = h.recv();
    let relay = relay(r.addr, 3 << 20);
    let s = send_until_budget(&h, &f, &relay, 3 << 20, &["--idle-timeout", "60"]);
    // The receiver's side goes away (as a killed receiver's would).
    relay.cut();
    let o = s.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("hint: the receiver keeps what arrived")),
        "{err}"
    );
    drop(r);
}
