//! Stream mode end to end: real `sealink recv` and `sealink send` processes over loopback TCP,
//! with a relay of our own in between for the failure cases (truncation, forged and replayed
//! records, dying peers). Every failure must end with a non-zero exit and no file under its
//! final name (and no temporary file left behind).

mod common;
use common::hosts::{Hosts, finish, text};
use common::raw_sender::RawSender;
use common::{BIN, random_file, run_in as run};

use std::fs;
use std::io::{BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::Duration;

#[test]
fn files_arrive_identical_over_several_stripes() {
    let h = Hosts::new();
    let big = h.path("big.bin");
    let data = random_file(&big, 24 << 20 | 12345, 1);
    let small = h.path("small.txt");
    fs::write(&small, b"hello").unwrap();
    let empty = h.path("empty");
    fs::write(&empty, b"").unwrap();
    let (c, addr, err) = h.recv(&[], Stdio::piped());
    let o = h.send(&[&big, &small, &empty], addr, &["--streams", "3"]);
    assert!(o.status.success(), "{}", text(&o));
    let (st, e) = finish(c, err);
    assert!(st.success(), "{e}");
    assert!(fs::read(h.inbox().join("big.bin")).unwrap() == data);
    assert_eq!(fs::read(h.inbox().join("small.txt")).unwrap(), b"hello");
    assert_eq!(fs::read(h.inbox().join("empty")).unwrap(), b"");
    assert_eq!(h.inbox_names(), ["big.bin", "empty", "small.txt"]);

    // Existing files are kept (and the transfer refused) unless --force.
    fs::write(h.inbox().join("small.txt"), b"mine").unwrap();
    let (c, addr, err) = h.recv(&[], Stdio::piped());
    let o = h.send(&[&small], addr, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already exists"),
        "{}",
        text(&o)
    );
    let (st, _) = finish(c, err);
    assert!(!st.success());
    assert_eq!(fs::read(h.inbox().join("small.txt")).unwrap(), b"mine");
    let (c, addr, err) = h.recv(&["--force"], Stdio::piped());
    let o = h.send(
        &[&small],
        addr,
        &["--suite", "chacha20-poly1305", "--auth-only"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(finish(c, err).0.success());
    assert_eq!(fs::read(h.inbox().join("small.txt")).unwrap(), b"hello");
}

#[test]
fn stdin_to_stdout_keeps_order_across_stripes() {
    let h = Hosts::new();
    let src = h.path("src");
    let data = random_file(&src, 9 << 20 | 77, 2);
    // Into a file, not a pipe: nobody drains a pipe while `send` runs.
    let out_path = h.path("out");
    let (c, addr, err) = h.recv(
        &["--stdout"],
        Stdio::from(fs::File::create(&out_path).unwrap()),
    );
    let o = h
        .send_cmd(
            &[Path::new("-")],
            addr,
            &["--streams", "4", "--record-size", "4096"],
        )
        .stdin(fs::File::open(&src).unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let (status, _) = finish(c, err);
    assert!(status.success());
    let got = fs::read(&out_path).unwrap();
    assert!(got == data, "stdout differs ({} bytes)", got.len());
}

#[test]
fn untrusted_owner_is_refused() {
    let h = Hosts::new();
    let other = h.a().join("other.key");
    assert!(
        run(&h.a(), &["keygen", "owner", other.to_str().unwrap()])
            .status
            .success()
    );
    let f = h.path("f");
    fs::write(&f, b"data").unwrap();
    let (c, addr, err) = h.recv(&[], Stdio::piped());
    let o = h.send(&[&f], addr, &["--owner", other.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("owner"),
        "{}",
        text(&o)
    );
    let (status, log) = finish(c, err);
    assert!(!status.success());
    assert!(h.inbox_names().is_empty());
    // The receiver's log names the refused owner's key and fingerprint, and how to trust it
    // (issue 46: an owner refusal showed neither).
    let key = common::public(PathBuf::from(format!("{}.pub", other.display())));
    assert!(
        log.contains(&format!("owner key {key} (fingerprint "))
            && log.contains(&format!("sealink trust add owner NAME {key}")),
        "{log}"
    );
}

#[test]
fn an_untrusted_host_is_logged_once_at_the_default_level_with_its_key() {
    let h = Hosts::new();
    let stranger = h.a().join("stranger.key");
    assert!(
        run(&h.a(), &["keygen", "host", stranger.to_str().unwrap()])
            .status
            .success()
    );
    let stranger_pub = fs::read_to_string(h.a().join("stranger.key.pub")).unwrap();
    let stranger_pub = stranger_pub.split_whitespace().nth(1).unwrap().to_owned();
    let f = h.path("f");
    fs::write(&f, b"data").unwrap();
    let (c, addr, err) = h.recv(&[], Stdio::null());
    for _ in 0..3 {
        let o = h.send(&[&f], addr, &["--key", stranger.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    }
    // The trusted host's transfer ends the --once receiver.
    let o = h.send(&[&f], addr, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let (st, log) = finish(c, err);
    assert!(st.success(), "{log}");
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("is not trusted"))
        .collect();
    assert_eq!(lines.len(), 1, "one line per 10 s: {log}");
    assert!(
        lines[0].contains("WARN")
            && lines[0].contains("127.0.0.1")
            && lines[0].contains(&stranger_pub),
        "{log}"
    );
}

/// What the relay does to the sender's bytes after the handshake.
#[derive(Clone, Copy)]
enum Fault {
    /// Forward this many record bytes, then close both sides.
    Truncate(usize),
    /// Flip one bit this many record bytes in.
    Flip(usize),
    /// Send data record number `n` twice.
    Replay(usize),
}

const PREAMBLE: usize = 5 + sealink_proto::stream::handshake::INIT_MESSAGE_LEN;

/// A one-connection TCP relay to `to` that applies `fault` to the sender's record stream.
fn relay(to: SocketAddr, fault: Fault) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut s = TcpStream::connect(to).unwrap();
        let (mut c2, mut s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
        thread::spawn(move || {
            let _ = std::io::copy(&mut s2, &mut c2);
            let _ = c2.shutdown(Shutdown::Write);
        });
        let mut pre = vec![0u8; PREAMBLE];
        c.read_exact(&mut pre).unwrap();
        s.write_all(&pre).unwrap();
        let mut pos = 0usize;
        let mut record = 0usize;
        loop {
            let mut h = [0u8; 16];
            if c.read_exact(&mut h).is_err() {
                break;
            }
            let len = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
            let mut rec = h.to_vec();
            rec.resize(16 + len, 0);
            if c.read_exact(&mut rec[16..]).is_err() {
                break;
            }
            match fault {
                Fault::Truncate(n) if pos + rec.len() > n => {
                    let _ = s.write_all(&rec[..n - pos]);
                    let _ = s.shutdown(Shutdown::Both);
                    let _ = c.shutdown(Shutdown::Both);
                    return;
                }
                Fault::Flip(n) if (pos..pos + rec.len()).contains(&n) => rec[n - pos] ^= 4,
                Fault::Replay(k) if h[1] == 2 && record == k => {
                    let _ = s.write_all(&rec);
                }
                _ => {}
            }
            if h[1] == 2 {
                record += 1;
            }
            pos += rec.len();
            if s.write_all(&rec).is_err() {
                break;
            }
        }
        let _ = s.shutdown(Shutdown::Write);
    });
    addr
}

fn faulty_transfer(fault: Fault, expect: &str) {
    let h = Hosts::new();
    let f = h.path("f.bin");
    random_file(&f, 3 << 20, 3);
    let (c, addr, err) = h.recv(&[], Stdio::piped());
    let via = relay(addr, fault);
    let o = h.send(&[&f], via, &["--streams", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let (st, e) = finish(c, err);
    assert_eq!(st.code(), Some(1), "{e}");
    assert!(e.contains(expect), "receiver said: {e}");
    // Nothing under the file's name: at most the private, hidden state for resuming it.
    let names = h.inbox_names();
    assert!(
        names.iter().all(|n| n.starts_with(".sealink-resume-")),
        "{names:?}"
    );
    for n in &names {
        assert_eq!(mode_of(&h.inbox().join(n)), 0o600, "{n}");
    }
}

#[test]
fn truncated_stream_leaves_no_file() {
    faulty_transfer(Fault::Truncate(1 << 20), "closed the connection");
}

#[test]
fn forged_record_is_rejected() {
    faulty_transfer(Fault::Flip(500_000), "failed authentication");
}

#[test]
fn replayed_record_is_rejected() {
    faulty_transfer(Fault::Replay(5), "arrived twice");
}

#[test]
fn sender_dying_mid_transfer_leaves_no_file() {
    let h = Hosts::new();
    let (c, addr, err) = h.recv(&[], Stdio::piped());
    let (mut s, input) =
        common::send_started_with_a_mib(h.send_cmd(&[Path::new("-")], addr, &["--as", "piped"]));
    s.kill().unwrap();
    let _ = s.wait();
    drop(input);
    let (st, e) = finish(c, err);
    assert_eq!(st.code(), Some(1), "{e}");
    assert!(e.contains("before the authenticated end"), "{e}");
    assert!(h.inbox_names().is_empty(), "{:?}", h.inbox_names());
}

#[test]
fn receiver_dying_mid_transfer_fails_the_sender() {
    let h = Hosts::new();
    let (mut c, addr, _err) = h.recv(&[], Stdio::piped());
    let mut s = h
        .send_cmd(&[Path::new("-")], addr, &[])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = s.stdin.take().unwrap();
    input.write_all(&vec![7u8; 1 << 20]).unwrap();
    thread::sleep(Duration::from_millis(300));
    c.kill().unwrap();
    let _ = c.wait();
    // Keep feeding until the sender notices.
    for _ in 0..200 {
        if input.write_all(&[1u8; 1 << 16]).is_err() {
            break;
        }
    }
    drop(input);
    let o = s.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let names = h.inbox_names();
    assert!(names.iter().all(|n| n.starts_with('.')), "{names:?}");
}

/// Unmounts what a test mounted at its path, before the temporary directory is removed.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
    }
}

#[test]
fn full_disk_is_reported_and_leaves_no_file() {
    let h = Hosts::new();
    let small = h.inbox().join("small");
    fs::create_dir_all(&small).unwrap();
    let _unmount = Unmount(small.clone());
    let m = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&small)
        .output();
    if !m.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: cannot mount a small tmpfs here (not root?)");
        return;
    }
    let f = h.path("f.bin");
    random_file(&f, 4 << 20, 4);
    // `sealink recv --once` into the small tmpfs.
    let recv_small = || {
        let mut c = Command::new(BIN)
            .args(["recv", "--once", "--listen", "127.0.0.1:0", "--dir"])
            .arg(&small)
            .env("SEALINK_HOME", h.path("b"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (addr, err) = common::listening(&mut c);
        (c, addr, err)
    };
    let (c, addr, err) = recv_small();
    let o = h.send(&[&f], addr, &[]);
    // Both sides fail on the full disk and nothing is left in it.
    let both_failed = |o: Output, c, err| {
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("No space left"),
            "{}",
            text(&o)
        );
        let (st, e) = finish(c, err);
        assert_eq!(st.code(), Some(1), "{e}");
        assert_eq!(fs::read_dir(&small).unwrap().count(), 0);
    };
    both_failed(o, c, err);

    // Standard input has no size to reserve: the disk fills in the middle of the stream.
    let (c, addr, err) = recv_small();
    let o = h
        .send_cmd(&[Path::new("-")], addr, &[])
        .stdin(fs::File::open(&f).unwrap())
        .output()
        .unwrap();
    both_failed(o, c, err);
}

fn mode_of(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// One `sealink send` of `files` to a receiver started under `umask` with `extra` flags.
fn send_under_umask(h: &Hosts, umask: &str, extra: &[&str], files: &[&Path]) {
    let mut args = vec!["--once", "--force"];
    args.extend_from_slice(extra);
    let (c, addr, err) = h.recv_with(Some(umask), &args, Stdio::piped());
    let o = h.send(files, addr, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let (st, e) = finish(c, err);
    assert!(st.success(), "{e}");
}

#[test]
fn received_modes_follow_the_receivers_umask_and_drop_group_other_write() {
    let h = Hosts::new();
    let open = h.path("open.sh");
    fs::write(&open, b"#!/bin/sh\n").unwrap();
    chmod(&open, 0o777);
    let private = h.path("private");
    fs::write(&private, b"mine").unwrap();
    chmod(&private, 0o640);
    let got = |n: &str| mode_of(&h.inbox().join(n));

    send_under_umask(&h, "022", &[], &[&open, &private]);
    assert_eq!((got("open.sh"), got("private")), (0o755, 0o640));
    send_under_umask(&h, "077", &[], &[&open, &private]);
    assert_eq!((got("open.sh"), got("private")), (0o700, 0o600));
    // A permissive umask still never lets the sender grant group or other write...
    send_under_umask(&h, "000", &[], &[&open]);
    assert_eq!(got("open.sh"), 0o755);
    // ...unless the receiver asks for it, and then within its umask.
    send_under_umask(&h, "002", &["--keep-group-other-write"], &[&open]);
    assert_eq!(got("open.sh"), 0o775);
    send_under_umask(&h, "000", &["--keep-group-other-write"], &[&open]);
    assert_eq!(got("open.sh"), 0o777);
}

#[test]
fn names_of_255_bytes_arrive() {
    let h = Hosts::new();
    // 255 bytes of ASCII, and 255 bytes that end in multi-byte characters.
    let names = [
        "n".repeat(255),
        format!("{}{}", "m".repeat(255 - 2 * 60), "é".repeat(60)),
    ];
    assert!(
        names.iter().all(|n| n.len() == 255),
        "{:?}",
        names.map(|n| n.len())
    );
    let paths: Vec<PathBuf> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let p = h.path(n);
            fs::write(&p, format!("file {i}")).unwrap();
            p
        })
        .collect();
    let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let (c, addr, err) = h.recv(&[], Stdio::piped());
    let o = h.send(&refs, addr, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let (st, e) = finish(c, err);
    assert!(st.success(), "{e}");
    for (i, n) in names.iter().enumerate() {
        assert_eq!(
            fs::read(h.inbox().join(n)).unwrap(),
            format!("file {i}").as_bytes()
        );
    }
    let mut want: Vec<String> = names.to_vec();
    want.sort();
    assert_eq!(h.inbox_names(), want, "no part file left behind");
}

fn entry(name: &str, size: u64, mode: u32) -> sealink_proto::stream::FileEntry {
    sealink_proto::stream::FileEntry {
        name: name.into(),
        size,
        mtime: 0,
        mode,
        kind: sealink_proto::stream::body::EntryKind::File,
    }
}

#[test]
fn huge_announcements_are_refused_with_the_reason_and_the_receiver_survives() {
    let h = Hosts::new();
    // Standard output has no file to reserve space for: the bitmap is the first allocation.
    // (The tree limit on bytes, 64 TiB by default, is lifted: the record bounds are tested.)
    let unbounded = ["--max-bytes", "18446744073709551615"];
    let (c, addr, err) = h.recv_with(
        None,
        &["--stdout", unbounded[0], unbounded[1]],
        Stdio::null(),
    );
    let mut raw = RawSender::connect(&h.a(), &h.path("b"), addr);
    let said = raw
        .offer(512, vec![entry("a", 1 << 62, 0o644)])
        .expect("an abort");
    assert!(said.contains("records"), "{said}");
    let (st, e) = finish(c, err);
    assert_eq!(st.code(), Some(1), "{e}");
    assert!(e.contains("records"), "{e}");

    // Serving many transfers: one refused hello must not end the process.
    let (mut c, addr, err) = h.recv_with(None, &unbounded, Stdio::piped());
    let cases: [(u32, Vec<sealink_proto::stream::FileEntry>, &str); 4] = [
        (1, vec![entry("a", 1 << 40, 0o644)], "record size"),
        (512, vec![entry("a", 1 << 50, 0o644)], "records"),
        (
            512,
            vec![entry("a", 1 << 20, 0o644), entry("b", 1 << 60, 0o644)],
            "records",
        ),
        (1 << 20, vec![entry("a", u64::MAX - 1, 0o644)], "records"),
    ];
    for (record_data, files, why) in cases {
        let mut raw = RawSender::connect(&h.a(), &h.path("b"), addr);
        let said = raw.offer(record_data, files.clone());
        let said =
            said.unwrap_or_else(|| panic!("ready for {record_data}-byte records of {files:?}"));
        assert!(said.contains(why), "abort says {said:?}, expected {why:?}");
        assert!(c.try_wait().unwrap().is_none(), "the receiver died");
    }
    assert!(h.inbox_names().is_empty(), "{:?}", h.inbox_names());
    // Still serving: a real transfer goes through.
    let f = h.path("after");
    fs::write(&f, b"still here").unwrap();
    let o = h.send(&[&f], addr, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fs::read(h.inbox().join("after")).unwrap(), b"still here");
    c.kill().unwrap();
    let _ = finish(c, err);
}

#[test]
fn sender_chosen_mode_bits_never_pass_the_receivers_policy() {
    use sealink_proto::stream::{Done, End, RecordType};
    let h = Hosts::new();
    let (c, addr, err) = h.recv_with(Some("022"), &["--once"], Stdio::piped());
    let mut raw = RawSender::connect(&h.a(), &h.path("b"), addr);
    assert_eq!(raw.offer(512, vec![entry("x", 3, 0o7777)]), None);
    raw.write(RecordType::Data, 1, b"abc");
    raw.write(
        RecordType::End,
        2,
        &End {
            data_records: 1,
            sizes: vec![3],
            hashes: vec![None],
            left_out: vec![],
        }
        .encode(),
    );
    raw.sock.shutdown(Shutdown::Write).unwrap();
    let (kind, body) = raw.read().expect("a reply");
    assert_eq!(kind, RecordType::Done, "{}", String::from_utf8_lossy(&body));
    assert_eq!(Done::decode(&body).unwrap().bytes, 3);
    let (st, e) = finish(c, err);
    assert!(st.success(), "{e}");
    assert_eq!(fs::read(h.inbox().join("x")).unwrap(), b"abc");
    assert_eq!(mode_of(&h.inbox().join("x")), 0o755);
}

#[test]
fn verbose_logs_are_plain_text_off_a_terminal() {
    // stderr is a pipe (as under systemd): `-v` logs the transfer, without colour escapes.
    let h = Hosts::new();
    let f = h.path("note.txt");
    fs::write(&f, b"hello").unwrap();
    let (c, addr, err) = h.recv(&["-v"], Stdio::piped());
    let o = h.send(&[&f], addr, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let (st, log) = finish(c, err);
    assert!(st.success(), "{log}");
    assert!(log.contains("received 5 bytes in 1 files"), "{log}");
    assert!(!log.contains('\x1b'), "{log:?}");
}

/// Runs sealink with `SEALINK_HOME=home`.
fn at(home: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("SEALINK_HOME", home)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

#[test]
fn two_hosts_set_up_with_init_and_trust_add_transfer_a_file() {
    // The README's set-up: `init` on each side, then each runs the lines the other printed.
    let dir = tempfile::tempdir().unwrap();
    let (ha, hb) = (dir.path().join("a"), dir.path().join("b"));
    let a = at(&ha, &["init", "--host-name", "a", "--owner-name", "alice"]);
    let b = at(&hb, &["init", "--host-name", "b", "--owner-name", "bob"]);
    for (o, to) in [(&a, &hb), (&b, &ha)] {
        assert!(o.status.success(), "{}", text(o));
        let lines = String::from_utf8_lossy(&o.stdout).into_owned();
        let cmds: Vec<&str> = lines
            .lines()
            .filter(|l| l.starts_with("sealink "))
            .collect();
        assert_eq!(cmds.len(), 2, "{lines}");
        for c in cmds {
            let args: Vec<&str> = c.split_whitespace().skip(1).collect();
            let r = at(to, &args);
            assert!(r.status.success(), "{c}: {}", text(&r));
        }
    }
    assert_eq!(
        std::fs::metadata(&ha).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // Again: keys kept, nothing duplicated.
    let again = at(&ha, &["init", "--host-name", "a", "--owner-name", "alice"]);
    assert_eq!(again.stdout, a.stdout, "the same keys are printed");
    let check = at(&ha, &["trust", "check", ha.join("trust").to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&check.stdout).contains("2 owners, 1 host"),
        "{}",
        text(&check)
    );

    let f = dir.path().join("hello.txt");
    fs::write(&f, b"hello over a one-step set-up").unwrap();
    let inbox = dir.path().join("in");
    fs::create_dir(&inbox).unwrap();
    let mut recv = Command::new(BIN)
        .args(["recv", "--once", "--listen", "127.0.0.1:0", "--dir"])
        .arg(&inbox)
        .env("SEALINK_HOME", &hb)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (addr, err) = common::listening(&mut recv);
    let o = at(
        &ha,
        &["send", f.to_str().unwrap(), &addr.to_string(), "--quiet"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let (st, log) = finish(recv, err);
    assert!(st.success(), "{log}");
    assert_eq!(
        fs::read(inbox.join("hello.txt")).unwrap(),
        b"hello over a one-step set-up"
    );

    // pubkey --trust-line, and removal.
    let line = at(
        &ha,
        &[
            "pubkey",
            ha.join("host.key").to_str().unwrap(),
            "--trust-line",
            "a",
        ],
    );
    let want = format!(
        "host a {}",
        String::from_utf8_lossy(&a.stdout)
            .lines()
            .nth(1)
            .unwrap()
            .rsplit(' ')
            .next()
            .unwrap()
    );
    assert_eq!(String::from_utf8_lossy(&line.stdout).trim(), want);
    assert!(at(&hb, &["trust", "remove", "alice"]).status.success());
    let gone = at(&hb, &["trust", "remove", "alice"]);
    assert_eq!(gone.status.code(), Some(1), "{}", text(&gone));
}

/// Parses every line of `out` as a `--json` record: nothing else may be on stdout.
fn records(out: &[u8]) -> Vec<sealink_stream::FileRecord> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

#[test]
fn json_records_on_both_sides_match_the_files() {
    use sealink_stream::report::{Event, Outcome};
    let h = Hosts::new();
    let big = h.path("big.bin");
    let big_len = random_file(&big, 3 << 20 | 4321, 5).len() as u64;
    let small = h.path("small.txt");
    fs::write(&small, b"hello").unwrap();
    let (mut c, addr, err) = h.recv(&["--json"], Stdio::piped());
    let o = h.send(
        &[&big, &small],
        addr,
        &["--json", "--streams", "2", "--suite", "chacha20-poly1305"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let mut recv_out = Vec::new();
    c.stdout.take().unwrap().read_to_end(&mut recv_out).unwrap();
    let (st, log) = finish(c, err);
    assert!(st.success(), "{log}");

    let owner_key = common::public(h.a().join("owner.key.pub"));
    // The records carry the owner's fingerprint as `pubkey --fingerprint` prints it.
    let fp = Command::new(env!("CARGO_BIN_EXE_sealink"))
        .arg("pubkey")
        .arg(h.a().join("owner.key"))
        .arg("--fingerprint")
        .output()
        .unwrap();
    assert!(fp.status.success(), "{}", text(&fp));
    let fingerprint = String::from_utf8(fp.stdout).unwrap().trim().to_owned();
    assert_eq!(fingerprint.len(), 19, "{fingerprint}");
    let sizes = [("big.bin", big_len), ("small.txt", 5)];
    let sent = records(&o.stdout);
    let received = records(&recv_out);
    assert_eq!((sent.len(), received.len()), (2, 2), "{}", text(&o));
    for (side, recs) in [(Event::Sent, &sent), (Event::Received, &received)] {
        for (i, r) in recs.iter().enumerate() {
            let (name, size) = sizes[i];
            assert_eq!((r.event, r.result), (side, Outcome::Ok), "{r:?}");
            assert_eq!((r.name.as_str(), r.bytes), (name, size), "{r:?}");
            assert_eq!((r.index, r.files, r.streams), (i, 2, 2), "{r:?}");
            assert_eq!(r.transfer_bytes, big_len + 5, "{r:?}");
            assert!(r.seconds > 0.0, "{r:?}");
            let rate = r.transfer_bytes as f64 / r.seconds;
            assert!((r.bytes_per_sec - rate).abs() <= rate * 1e-9, "{r:?}");
            assert_eq!(r.owner_key, owner_key, "{r:?}");
            assert_eq!(r.owner_fingerprint, fingerprint, "{r:?}");
            assert_eq!(
                (r.suite.as_str(), r.auth_only),
                ("chacha20-poly1305", false)
            );
            assert_eq!(r.error, None);
        }
    }
    for (r, src) in sent.iter().zip([&big, &small]) {
        assert_eq!(r.path.as_deref(), src.to_str(), "{r:?}");
        assert_eq!(
            (r.peer.as_str(), r.host.as_str()),
            (&*addr.to_string(), "bob")
        );
        // a's trust file does not list its own owner.
        assert_eq!(r.owner, None, "{r:?}");
    }
    for r in &received {
        let stored = h.inbox().join(&r.name);
        assert_eq!(r.path.as_deref(), stored.to_str(), "{r:?}");
        assert_eq!(fs::metadata(&stored).unwrap().len(), r.bytes);
        assert_eq!(
            (r.host.as_str(), r.owner.as_deref()),
            ("alice", Some("alice"))
        );
        assert!(r.peer.starts_with("127.0.0.1:"), "{r:?}");
    }

    // Standard input, authenticated only: its size is known only once it has been sent.
    let (mut c, addr, err) = h.recv(&["--json", "--force"], Stdio::piped());
    let o = h
        .send_cmd(
            &[Path::new("-")],
            addr,
            &["--json", "--auth-only", "--as", "piped"],
        )
        .stdin(fs::File::open(&small).unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let mut recv_out = Vec::new();
    c.stdout.take().unwrap().read_to_end(&mut recv_out).unwrap();
    assert!(finish(c, err).0.success());
    for r in records(&o.stdout).iter().chain(&records(&recv_out)) {
        assert_eq!(
            (r.name.as_str(), r.bytes, r.auth_only),
            ("piped", 5, true),
            "{r:?}"
        );
    }
    assert_eq!(records(&o.stdout)[0].path, None);

    // A failed transfer: one `failed` record per file, with the reason, and exit 1.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = closed.local_addr().unwrap();
    drop(closed);
    let o = h.send(&[&big, &small], gone, &["--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let failed = records(&o.stdout);
    assert_eq!(failed.len(), 2, "{}", text(&o));
    for (r, (name, size)) in failed.iter().zip(sizes) {
        assert_eq!(
            (r.result, r.name.as_str(), r.bytes),
            (Outcome::Failed, name, size)
        );
        assert!(r.error.as_deref().is_some_and(|e| !e.is_empty()), "{r:?}");
    }
}

#[test]
fn recv_json_and_stdout_are_refused_together() {
    let o = Command::new(BIN)
        .args(["recv", "--stdout", "--json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn summaries_give_sizes_in_binary_units() {
    let h = Hosts::new();
    let f = h.path("three.bin");
    random_file(&f, 3 << 20, 9);
    let (mut c, addr, err) = h.recv(&[], Stdio::piped());
    // Not `send_cmd`: that one is --quiet.
    let o = Command::new(BIN)
        .arg("send")
        .arg(&f)
        .arg(format!("bob@{addr}"))
        .args(["--streams", "2"])
        .env("SEALINK_HOME", h.a())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let mut recv_out = String::new();
    c.stdout
        .take()
        .unwrap()
        .read_to_string(&mut recv_out)
        .unwrap();
    assert!(finish(c, err).0.success());
    let sent = String::from_utf8_lossy(&o.stdout);
    for (line, verb) in [(sent.trim_end(), "sent"), (recv_out.trim_end(), "received")] {
        let head = format!("{verb} 3.00 MiB in 1 file over 2 streams in ");
        assert!(line.starts_with(&head), "{line}");
        assert!(!line.contains('\n'), "{line}");
        // `(12.34 MiB/s, 0.10 Gbit/s)`: a binary-unit rate, then bits.
        let rate = line.split_once(" s (").map(|(_, r)| r).unwrap_or("");
        assert!(rate.contains("iB/s, ") || rate.contains(" B/s, "), "{line}");
        assert!(rate.contains(" Gbit/s)"), "{line}");
    }
    // Fingerprints at first contact: the sender names the receiving host's key and its own
    // owner key; the receiver prints the same owner fingerprint.
    let sender_err = String::from_utf8_lossy(&o.stderr);
    let owner_fp = sender_err
        .split_once("as owner key ")
        .map(|(_, r)| r.trim_end().to_owned())
        .unwrap_or_default();
    assert_eq!(owner_fp.len(), 19, "{sender_err}");
    assert!(sender_err.contains("(host key "), "{sender_err}");
    assert!(
        recv_out.contains(&format!("(host alice, owner alice, owner key {owner_fp})")),
        "{recv_out} / {sender_err}"
    );
}

/// The first line `child` writes on stdout within `secs`, read by a thread (`None` if none).
fn first_line_within(child: &mut Child, secs: u64) -> Option<String> {
    use std::io::BufRead;
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let mut line = String::new();
        if BufReader::new(out).read_line(&mut line).is_ok() {
            let _ = tx.send(line);
        }
    });
    rx.recv_timeout(Duration::from_secs(secs)).ok()
}

#[test]
fn a_serving_receiver_reports_each_transfer_as_soon_as_it_ends() {
    let h = Hosts::new();
    let f = h.path("one.txt");
    fs::write(&f, b"report me").unwrap();
    for (json, name) in [(false, "first.txt"), (true, "second.txt")] {
        let g = h.path(name);
        fs::copy(&f, &g).unwrap();
        // No --once: the receiver serves on, and no other connection arrives after this one.
        let args: &[&str] = if json { &["--json"] } else { &[] };
        let (mut c, addr, err) = h.recv_with(None, args, Stdio::piped());
        let o = h.send(&[&g], addr, &[]);
        assert!(o.status.success(), "{}", text(&o));
        let line = first_line_within(&mut c, 5);
        c.kill().unwrap();
        let (_, e) = finish(c, err);
        let line = line.unwrap_or_else(|| panic!("no report within 5 s; stderr: {e}"));
        if json {
            let r = &records(line.as_bytes())[0];
            assert_eq!((r.name.as_str(), r.bytes), (name, 9));
        } else {
            assert!(line.starts_with("received 9 B in 1 file"), "{line}");
        }
    }
}

/// Issue 30: `send --limit RATE` paces the data over all stripes together: 3 MB at 1 MB/s take
/// close to 3 s (the first twentieth of a second is not waited for), and the file arrives.
#[test]
fn send_limit_paces_the_transfer_over_all_stripes() {
    let h = Hosts::new();
    let f = h.path("paced.bin");
    let data = random_file(&f, 3_000_000, 11);
    let (c, addr, err) = h.recv(&[], Stdio::piped());
    let t0 = std::time::Instant::now();
    let o = h.send(&[&f], addr, &["--limit", "1M", "--streams", "3"]);
    let took = t0.elapsed();
    assert!(o.status.success(), "{}", text(&o));
    assert!(finish(c, err).0.success());
    assert!(fs::read(h.inbox().join("paced.bin")).unwrap() == data);
    assert!(took >= Duration::from_millis(2500), "took only {took:?}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
}

/// A malformed `--limit` is a usage error naming the forms it takes; durations take humantime
/// units as well as bare seconds.
#[test]
fn malformed_limits_and_durations_are_usage_errors() {
    let usage = |args: &[&str]| {
        let o = Command::new(BIN)
            .arg("send")
            .args(args)
            .args(["x", "bob@127.0.0.1:9"])
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    for bad in ["10X", "fast", "100", "-1M"] {
        let e = usage(&[&format!("--limit={bad}")]);
        assert!(e.contains("--limit"), "{e}");
        assert!(e.contains("10MiB") || e.contains("least rate"), "{e}");
    }
    let e = usage(&["--idle-timeout", "5 parsecs"]);
    assert!(e.contains("is not a duration"), "{e}");
    let e = usage(&["--idle-timeout", "2days"]);
    assert!(e.contains("not within"), "{e}");
}

/// `--idle-timeout 2m` and `--setup-timeout 30s` work as `120` and `30` do.
#[test]
fn timeouts_take_humantime_units() {
    let h = Hosts::new();
    let f = h.path("t.txt");
    fs::write(&f, b"on time").unwrap();
    let (c, addr, err) = h.recv(
        &["--idle-timeout", "2m", "--resume-max-age", "7days"],
        Stdio::piped(),
    );
    let o = h.send(
        &[&f],
        addr,
        &["--idle-timeout", "90", "--setup-timeout", "30s"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(finish(c, err).0.success());
    assert_eq!(fs::read(h.inbox().join("t.txt")).unwrap(), b"on time");
}

/// A running receiver reads its trust file again when it changes (issue 46; sshd reads
/// authorized_keys at each connection): carol is refused, trusted with `trust add` while the
/// receiver runs, and her next send is taken; removed again, she is refused again.
#[test]
fn a_running_receiver_follows_its_trust_file() {
    let h = Hosts::new();
    let carol = h.a().join("carol.key");
    assert!(
        run(&h.a(), &["keygen", "owner", carol.to_str().unwrap()])
            .status
            .success()
    );
    let f = h.path("c.txt");
    fs::write(&f, b"from carol\n").unwrap();
    let (c, addr, err) = h.recv_with(None, &[], Stdio::null());
    let o = h.send(&[&f], addr, &["--owner", carol.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("owner"), "{}", text(&o));
    let key = common::public(PathBuf::from(format!("{}.pub", carol.display())));
    let o = run(&h.path("b"), &["trust", "add", "owner", "carol", &key]);
    assert!(o.status.success(), "{}", text(&o));
    let o = h.send(&[&f], addr, &["--owner", carol.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fs::read(h.inbox().join("c.txt")).unwrap(), b"from carol\n");
    let o = run(&h.path("b"), &["trust", "remove", "carol"]);
    assert!(o.status.success(), "{}", text(&o));
    fs::remove_file(h.inbox().join("c.txt")).unwrap();
    let o = h.send(&[&f], addr, &["--owner", carol.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let mut c = c;
    c.kill().unwrap();
    let _ = finish(c, err);
}

/// A serving receiver says a refused transfer once, as plain lines: the refused owner's key
/// and how to trust it, then one `error:` line; no log-format warning beside them (issue 46).
#[test]
fn a_refusal_is_said_once_in_plain_lines() {
    let h = Hosts::new();
    let other = h.a().join("o2.key");
    assert!(
        run(&h.a(), &["keygen", "owner", other.to_str().unwrap()])
            .status
            .success()
    );
    let f = h.path("f");
    fs::write(&f, b"data").unwrap();
    let (mut c, addr, err) = h.recv_with(None, &[], Stdio::null());
    let o = h.send(&[&f], addr, &["--owner", other.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // The report reaches the serving loop within its poll; then stop the receiver.
    std::thread::sleep(std::time::Duration::from_millis(500));
    c.kill().unwrap();
    let (_, log) = finish(c, err);
    assert!(!log.contains("WARN"), "{log}");
    assert_eq!(log.matches("transfer failed").count(), 1, "{log}");
    assert!(
        log.lines()
            .any(|l| l.starts_with("refused a transfer from host alice: owner key ")),
        "{log}"
    );
}
