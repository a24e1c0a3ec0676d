//! Real project trees (issue 45): a tree of any size goes in manifest batches, resumes after
//! the sender is killed, and updates; what cannot be sent is reported, the rest goes, and the
//! exit status says "partial" (23); `--dry-run` changes nothing; `--delete` needs the
//! receiver's consent; a manifest batch that lies is refused and changes nothing.

mod common;

use common::BIN;
use common::hosts::{Hosts, finish, text};
use common::raw_sender::RawSender;

use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sealink_proto::stream::body::EntryKind;
use sealink_proto::stream::{FileEntry, Manifest, RecordType};

/// `sealink send FILES bob@TO EXTRA` from host `a`, with its summary (no `--quiet`).
fn send(h: &Hosts, files: &[&Path], to: SocketAddr, extra: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("send")
        .args(files)
        .arg(format!("bob@{to}"))
        .args(extra)
        .env("SEALINK_HOME", h.path("a"))
        .env_remove("RUST_LOG");
    c
}

fn run(mut c: Command) -> Output {
    c.output().unwrap()
}

/// Entries under `root`, recursively (directories too).
fn count(root: &Path) -> usize {
    let mut n = 0;
    for e in fs::read_dir(root).unwrap() {
        let e = e.unwrap();
        n += 1;
        if e.file_type().unwrap().is_dir() {
            n += count(&e.path());
        }
    }
    n
}

/// The receiver's staging directory in its inbox, if there is one.
fn staging_dir(h: &Hosts) -> Option<std::path::PathBuf> {
    fs::read_dir(h.inbox())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".sealink-part-dir"))
}

/// `dirs` directories of `per` one-byte files each (each file its own content).
fn tree(root: &Path, dirs: usize, per: usize) {
    for d in 0..dirs {
        let dir = root.join(format!("d{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..per {
            fs::write(dir.join(format!("f{f:03}")), [(d * per + f) as u8]).unwrap();
        }
    }
}

#[test]
fn fifty_thousand_entries_transfer_resume_after_the_sender_is_killed_and_update() {
    let h = Hosts::new();
    let src = h.path("src/big");
    // 100 directories of 499 files, and the top: 50,001 entries, 13 manifest batches.
    tree(&src, 100, 499);
    let (mut c, addr, err) = h.recv_with(Some("022"), &["--update"], Stdio::null());

    // The first run is killed once a few batches are stored in the tree's staging directory.
    let mut first = send(&h, &[&src], addr, &["--quiet", "--streams", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let staged = loop {
        let staging = staging_dir(&h);
        if let Some(s) = staging
            && s.join("big").is_dir()
            && fs::read_dir(s.join("big")).unwrap().count() >= 20
        {
            break s;
        }
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first run ended before it could be killed"
        );
        assert!(Instant::now() < deadline, "no batch was stored in time");
        std::thread::sleep(Duration::from_millis(5));
    };
    first.kill().unwrap();
    first.wait().unwrap();
    // The receiver notices, keeps the staging directory, and no partial tree appears.
    let deadline = Instant::now() + Duration::from_secs(30);
    while fs::File::open(&staged).is_ok_and(|f| {
        rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared).is_err()
    }) {
        assert!(Instant::now() < deadline, "the receiver kept the lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!h.inbox().join("big").exists());
    let kept = count(&staged.join("big"));
    assert!((20..50_000).contains(&kept), "{kept} entries kept");

    // The rerun sends only what the interrupted one had not stored.
    let o = run(send(&h, &[&src], addr, &["--streams", "2"]));
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("files up to date"), "{out}");
    assert_eq!(count(&h.inbox().join("big")), 50_000);
    assert!(
        !staged.exists(),
        "the staging directory is gone once the tree is in place"
    );
    assert_eq!(
        fs::read(h.inbox().join("big/d042/f017")).unwrap(),
        [(42 * 499 + 17) as u8]
    );

    // An update: three files changed (content and mtime), one added.
    for f in ["d000/f000", "d050/f100", "d099/f498"] {
        fs::write(src.join(f), b"changed").unwrap();
    }
    fs::write(src.join("d007/new"), b"new").unwrap();
    let o = run(send(&h, &[&src], addr, &["--update"]));
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("in 4 files") && out.contains("49897 files up to date"),
        "{out}"
    );
    assert_eq!(
        fs::read(h.inbox().join("big/d050/f100")).unwrap(),
        b"changed"
    );
    assert_eq!(fs::read(h.inbox().join("big/d007/new")).unwrap(), b"new");
    assert_eq!(count(&h.inbox().join("big")), 50_001);
    c.kill().unwrap();
    let _ = finish(c, err);
}

#[test]
fn a_partial_send_reports_what_it_left_out_and_sends_the_rest() {
    let h = Hosts::new();
    let src = h.path("src");
    let t = src.join("t");
    fs::create_dir_all(t.join("sub")).unwrap();
    fs::write(t.join("a.txt"), b"a").unwrap();
    fs::write(t.join("sub/b.txt"), b"b").unwrap();
    fs::write(t.join("secret"), b"s").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", t.join("abs")).unwrap();
    std::os::unix::fs::symlink("b.txt", t.join("sub/rel")).unwrap();
    fs::write(src.join("single"), b"1").unwrap();
    let missing = src.join("no-such-file");
    // The sender runs as an unprivileged user (root reads any file), who cannot read
    // `secret`.
    let root = rustix::process::geteuid().is_root();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(t.join("secret"), fs::Permissions::from_mode(0o000)).unwrap();
    if root {
        let nobody = Some(rustix::process::Uid::from_raw(65534));
        let g = Some(rustix::process::Gid::from_raw(65534));
        for p in [h.path("a"), src.clone(), t.clone(), t.join("sub")]
            .into_iter()
            .chain(
                fs::read_dir(h.path("a"))
                    .unwrap()
                    .map(|e| e.unwrap().path()),
            )
        {
            rustix::fs::chown(&p, nobody, g).unwrap();
        }
        for p in [t.join("a.txt"), t.join("sub/b.txt"), src.join("single")] {
            rustix::fs::chown(&p, nobody, g).unwrap();
        }
        // The test's own temporary directory must be passable.
        let mut up = h.path("a");
        while let Some(p) = up.parent() {
            if p == Path::new("/") {
                break;
            }
            let mode = fs::metadata(p).unwrap().permissions().mode();
            if mode & 0o001 == 0 {
                fs::set_permissions(p, fs::Permissions::from_mode(mode | 0o001)).unwrap();
            }
            up = p.to_owned();
        }
    }
    let (mut c, addr, err) = h.recv_with(Some("022"), &[], Stdio::null());
    let sender = |files: &[&Path], to: SocketAddr| {
        let mut cmd = if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]);
            c
        } else {
            Command::new(BIN)
        };
        cmd.arg("send")
            .args(files)
            .arg(format!("bob@{to}"))
            .env("SEALINK_HOME", h.path("a"))
            .env_remove("RUST_LOG");
        cmd.output().unwrap()
    };
    let o = sender(&[&t, &missing, &src.join("single")], addr);
    assert_eq!(o.status.code(), Some(23), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("no-such-file"), "{e}");
    assert!(e.contains("secret"), "{e}");
    assert!(
        e.contains("abs -> /etc/passwd") && e.contains("--copy-links"),
        "{e}"
    );
    assert!(e.contains("partial transfer"), "{e}");
    // Everything else arrived.
    let inbox = h.inbox();
    assert_eq!(fs::read(inbox.join("t/a.txt")).unwrap(), b"a");
    assert_eq!(fs::read(inbox.join("t/sub/rel")).unwrap(), b"b");
    assert_eq!(fs::read(inbox.join("single")).unwrap(), b"1");
    assert!(!inbox.join("t/secret").exists() && inbox.join("t/abs").symlink_metadata().is_err());
    // The help documents the status.
    let help = Command::new(BIN).args(["send", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("23"));

    // Only bad arguments: checked before connecting (nothing listens there).
    let nowhere: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let o = sender(&[&missing], nowhere);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("nothing to send") && !e.contains("connect"),
        "{e}"
    );
    c.kill().unwrap();
    let _ = finish(c, err);
}

#[test]
fn files_that_vanish_or_shrink_while_being_sent_are_left_out_and_exit_24() {
    let h = Hosts::new();
    let t = h.path("src/t");
    fs::create_dir_all(&t).unwrap();
    // Sent in name order at 1 MB/s: `a-big` takes about two seconds, so `a-big` is cut short
    // and `z-gone` deleted while the transfer runs, after the walk looked at both.
    fs::write(t.join("a-big"), vec![7u8; 2 << 20]).unwrap();
    fs::write(t.join("m-kept"), b"kept").unwrap();
    fs::write(t.join("z-gone"), b"gone").unwrap();
    let (mut c, addr, err) = h.recv_with(Some("022"), &[], Stdio::null());
    let child = send(&h, &[&t], addr, &["--limit", "1MB", "--streams", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the tree's staging directory exists the receiver has the manifest: the walk has
    // looked at both files, and `a-big` has most of its two seconds to go (its first read may
    // not have happened yet).
    let t0 = Instant::now();
    while staging_dir(&h).is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the transfer never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    fs::remove_file(t.join("z-gone")).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(t.join("a-big"))
        .unwrap()
        .set_len(1000)
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(24), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("z-gone vanished"), "{e}");
    // Cut before its first read or during the reads: either way it is left out.
    assert!(
        e.contains("a-big got shorter while being sent")
            || e.contains("a-big changed after it was listed"),
        "{e}"
    );
    assert!(e.contains("vanished or changed"), "{e}");
    let inbox = h.inbox();
    assert_eq!(fs::read(inbox.join("t/m-kept")).unwrap(), b"kept");
    assert!(!inbox.join("t/a-big").exists() && !inbox.join("t/z-gone").exists());
    c.kill().unwrap();
    let (_, log) = finish(c, err);
    assert!(log.contains("left out by the sender"), "{log}");
    // Nothing of the staging directory is left behind.
    assert!(staging_dir(&h).is_none());
}

#[test]
fn copy_links_sends_what_absolute_links_point_to() {
    let h = Hosts::new();
    let src = h.path("src");
    fs::create_dir_all(src.join("t")).unwrap();
    fs::write(src.join("outside"), b"target").unwrap();
    std::os::unix::fs::symlink(src.join("outside"), src.join("t/abs")).unwrap();
    let (mut c, addr, err) = h.recv_with(Some("022"), &[], Stdio::null());
    let o = run(send(&h, &[&src.join("t")], addr, &["--copy-links"]));
    assert!(o.status.success(), "{}", text(&o));
    let got = h.inbox().join("t/abs");
    assert!(got.symlink_metadata().unwrap().is_file());
    assert_eq!(fs::read(got).unwrap(), b"target");
    c.kill().unwrap();
    let _ = finish(c, err);
}

#[test]
fn dry_run_lists_and_changes_nothing() {
    let h = Hosts::new();
    let src = h.path("src/t");
    tree(&src, 2, 3);
    // Nothing listens there: a dry run connects to nothing.
    let nowhere: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let o = run(send(&h, &[&src], nowhere, &["--dry-run"]));
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("t/d001/f002") && out.contains("would send 9 entries"),
        "{out}"
    );
    // Against a live receiver too: nothing arrives.
    let (mut c, addr, err) = h.recv_with(Some("022"), &[], Stdio::null());
    let o = run(send(&h, &[&src], addr, &["-n"]));
    assert!(o.status.success(), "{}", text(&o));
    assert!(h.inbox_names().is_empty());
    c.kill().unwrap();
    let (_, log) = finish(c, err);
    assert!(!log.contains("received"), "{log}");
}

#[test]
fn delete_needs_the_receivers_consent_and_stays_inside_the_tree() {
    let h = Hosts::new();
    let src = h.path("src/t");
    tree(&src, 2, 2);
    let (mut c, addr, err) = h.recv_with(Some("022"), &["--update"], Stdio::null());
    assert!(run(send(&h, &[&src], addr, &[])).status.success());
    // The receiver has more than the sender now has.
    fs::remove_file(src.join("d001/f000")).unwrap();
    fs::write(h.inbox().join("beside"), b"not in the tree").unwrap();
    let o = run(send(&h, &[&src], addr, &["--update", "--delete"]));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("recv --delete"), "{e}");
    assert!(h.inbox().join("t/d001/f000").exists());
    c.kill().unwrap();
    let _ = finish(c, err);

    let (mut c, addr, err) = h.recv_with(Some("022"), &["--update", "--delete"], Stdio::null());
    let o = run(send(&h, &[&src], addr, &["--update", "--delete"]));
    assert!(o.status.success(), "{}", text(&o));
    assert!(!h.inbox().join("t/d001/f000").exists());
    assert!(h.inbox().join("t/d001/f001").exists());
    assert!(
        h.inbox().join("beside").exists(),
        "outside the tree sent: never touched"
    );
    c.kill().unwrap();
    let _ = finish(c, err);
}

#[test]
fn the_receivers_limits_name_their_flag() {
    let h = Hosts::new();
    let src = h.path("src/t");
    tree(&src, 2, 9);
    let (mut c, addr, err) = h.recv_with(Some("022"), &["--max-entries", "10"], Stdio::null());
    let o = run(send(&h, &[&src], addr, &[]));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("limit of 10") && e.contains("--max-entries"),
        "{e}"
    );
    assert!(!h.inbox().join("t").exists());
    c.kill().unwrap();
    let _ = finish(c, err);
}

fn entry(name: &str, kind: EntryKind) -> FileEntry {
    FileEntry {
        name: name.into(),
        size: if kind == EntryKind::File { 1 } else { 0 },
        mtime: 1_600_000_000_000_000_000,
        mode: 0o755,
        kind,
    }
}

#[test]
fn a_manifest_batch_that_lies_is_refused_and_changes_nothing() {
    let h = Hosts::new();
    let (mut c, addr, err) = h.recv_with(Some("022"), &[], Stdio::null());
    // Each lie after a first batch of `tN` (a directory and a file `a`), under its own name.
    // What the lie is, the second batch (names under `tN`), whether the first said more follow.
    type Lie<'a> = (&'a str, &'a [(&'a str, EntryKind)], bool);
    let lies: [Lie<'_>; 5] = [
        ("duplicate", &[("a", EntryKind::File)], true),
        ("out of order", &[("0", EntryKind::File)], true),
        ("traversal", &[("../../etc/x", EntryKind::File)], true),
        ("below a file", &[("a/x", EntryKind::File)], true),
        ("after the end", &[("z", EntryKind::File)], false),
    ];
    for (i, (what, batch, first_more)) in lies.into_iter().enumerate() {
        let top = format!("t{i}");
        let mut raw = RawSender::connect(&h.path("a"), &h.path("b"), addr);
        let intro = sealink_proto::stream::owner_intro(&raw.keys.binding, &raw.host, &raw.peer);
        let hello = sealink_proto::stream::Hello {
            owner_public: raw.owner.public_key(),
            owner_signature: raw.owner.sign(&intro),
            record_data: 512,
            stripes: 1,
            fresh: false,
            update: false,
            more: first_more,
            delete: false,
            files: vec![
                entry(&top, EntryKind::Dir),
                entry(&format!("{top}/a"), EntryKind::File),
            ],
        };
        raw.write(RecordType::Hello, 0, &hello.encode());
        assert_eq!(raw.read().unwrap().0, RecordType::Ready, "{what}");
        raw.write(RecordType::Data, 1, b"x");
        let end = sealink_proto::stream::End {
            data_records: 1,
            sizes: vec![0, 1],
            hashes: vec![None, None],
            left_out: vec![],
        };
        raw.write(RecordType::End, 2, &end.encode());
        let m = Manifest {
            more: false,
            files: batch
                .iter()
                .map(|(n, k)| entry(&format!("{top}/{n}"), k.clone()))
                .collect(),
        };
        raw.write(RecordType::Manifest, 3, &m.encode());
        let (kind, body) = raw.read().unwrap();
        let said = String::from_utf8_lossy(&body).into_owned();
        assert_eq!(kind, RecordType::Abort, "{what}: {said}");
        assert!(
            c.try_wait().unwrap().is_none(),
            "the receiver died ({what})"
        );
        // No tree under its name (the first batch waits in its staging directory).
        assert!(!h.inbox().join(&top).exists(), "{what}");
        assert!(!h.inbox().join(format!("{top}/a")).exists(), "{what}");
    }
    c.kill().unwrap();
    let _ = finish(c, err);
}

/// Files of `root` (recursively) whose name ends in `suffix`.
fn named(root: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(root).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(named(&p, suffix));
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_receiver_killed_mid_tree_resumes_and_leaves_nothing_of_its_own_in_the_tree() {
    let h = Hosts::new();
    let src = h.path("src/big");
    // 12,000 one-byte files: three manifest batches, written straight into the tree's
    // staging directory.
    tree(&src, 24, 500);
    let (mut c, addr, err) = h.recv_with(Some("022"), &[], Stdio::null());
    let mut first = send(&h, &[&src], addr, &["--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The receiver dies (no clean-up of its own) once part of the tree is there.
    let deadline = Instant::now() + Duration::from_secs(120);
    let staged = loop {
        let staging = staging_dir(&h);
        if let Some(s) = staging
            && s.join("big/d001").is_dir()
            && fs::read_dir(s.join("big/d001")).unwrap().count() > 0
        {
            break s;
        }
        assert!(
            c.try_wait().unwrap().is_none() && first.try_wait().unwrap().is_none(),
            "the transfer ended before the receiver could be killed"
        );
        assert!(Instant::now() < deadline, "nothing was written in time");
        std::thread::sleep(Duration::from_millis(2));
    };
    c.kill().unwrap();
    c.wait().unwrap();
    let _ = first.wait();
    drop(err);
    assert!(!h.inbox().join("big").exists());
    // As a receiver that crashed while resuming would have left it: a part file in the kept
    // tree, beside a file it was replacing.
    let stale = staged.join(format!("big/d000/.{}.sealink-part", "ab".repeat(16)));
    fs::write(&stale, b"stale").unwrap();

    // A new receiver takes the kept staging directory; the rerun completes the tree with
    // every file whole (a short one the dead receiver left is sent again: its mtime is not
    // the sender's), and nothing of the receiver's own comes with it.
    let (mut c, addr, err) = h.recv_with(Some("022"), &[], Stdio::null());
    let o = run(send(&h, &[&src], addr, &[]));
    assert!(o.status.success(), "{}", text(&o));
    let done = h.inbox().join("big");
    assert_eq!(count(&done), 24 + 24 * 500);
    assert_eq!(
        named(&done, ".sealink-part"),
        Vec::<std::path::PathBuf>::new()
    );
    assert!(!staged.exists());
    for d in 0..24 {
        for f in 0..500 {
            let p = done.join(format!("d{d:03}/f{f:03}"));
            assert_eq!(
                fs::read(&p).unwrap(),
                [(d * 500 + f) as u8],
                "{}",
                p.display()
            );
        }
    }
    c.kill().unwrap();
    let _ = finish(c, err);
}
