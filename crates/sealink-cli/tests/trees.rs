//! Directory trees in stream mode, end to end: real `sealink send DIR` and `sealink recv`
//! processes over loopback. A tree arrives exactly (contents, empty directories, links as
//! links, modes, mtimes), less what `--exclude` leaves out; `--update` sends nothing for
//! unchanged files; a link leading out of the tree is refused, and a failed transfer leaves no
//! partial tree.

mod common;
use common::hosts::{Hosts, finish, ok_stderr, text};
use common::raw_sender::RawSender;
use common::{BIN, random_file};

use std::fs;
use std::io::Read;
use std::net::Shutdown;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sealink_proto::stream::body::EntryKind;
use sealink_proto::stream::{FileEntry, RecordType};
use sealink_stream::FileRecord;
use sealink_stream::report::{Event, Kind, Outcome};

fn records(out: &[u8]) -> Vec<FileRecord> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

fn sh(cmd: &str, dir: &Path) {
    let o = Command::new("sh")
        .args(["-c", cmd])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{cmd}: {}", text(&o));
}

/// (mode bits, mtime in ns) of `p` itself (a link is not followed).
fn stat(p: &Path) -> (u32, i128) {
    let m = fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (
        m.permissions().mode() & 0o777,
        i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    )
}

/// Every path under `root`, relative, sorted (directories with a trailing `/`).
fn listing(root: &Path) -> Vec<String> {
    fn go(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                out.push(format!("{rel}/"));
                go(root, &p, out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut v = Vec::new();
    go(root, root, &mut v);
    v.sort();
    v
}

/// `src/proj`: nested directories, an empty one, a 0755 script, links inside the tree, logs
/// and a build directory to exclude, a fifo; every entry with its own mtime.
fn make_tree(h: &Hosts) -> (PathBuf, Vec<u8>) {
    let src = h.path("src");
    fs::create_dir_all(src.join("proj/sub/deep")).unwrap();
    let p = src.join("proj");
    fs::create_dir_all(p.join("empty")).unwrap();
    fs::create_dir_all(p.join("bin")).unwrap();
    fs::create_dir_all(p.join("build/obj")).unwrap();
    fs::create_dir_all(p.join("sub/build")).unwrap();
    fs::write(p.join("a.txt"), b"alpha\n").unwrap();
    fs::write(p.join("bin/run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(p.join("bin/run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(p.join("a.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    let big = random_file(&p.join("sub/deep/x.bin"), 300_000, 7);
    fs::write(p.join("debug.log"), b"noise").unwrap();
    fs::write(p.join("sub/deep/trace.log"), b"noise").unwrap();
    fs::write(p.join("build/obj/out.o"), b"obj").unwrap();
    fs::write(p.join("sub/build/keep.txt"), b"nested build, also excluded").unwrap();
    std::os::unix::fs::symlink("sub/deep/x.bin", p.join("link")).unwrap();
    std::os::unix::fs::symlink("../a.txt", p.join("sub/up")).unwrap();
    std::os::unix::fs::symlink("nowhere", p.join("sub/dangling")).unwrap();
    sh("mkfifo proj/sub/pipe", &src);
    fs::set_permissions(p.join("sub"), fs::Permissions::from_mode(0o750)).unwrap();
    // Distinct mtimes, nanoseconds included; directories last (after their contents).
    sh(
        "touch -h -d @1600000001.123456789 proj/a.txt proj/link proj/sub/up && \
         touch -d @1600000002.5 proj/bin/run.sh proj/sub/deep/x.bin && \
         touch -h -d @1600000003 proj/sub/dangling && \
         touch -d @1500000000.25 proj/empty proj/sub/deep proj/bin && \
         touch -d @1500000001 proj/sub proj",
        &src,
    );
    (p, big)
}

#[test]
fn a_tree_arrives_exactly_less_what_is_excluded() {
    let h = Hosts::new();
    let (proj, big) = make_tree(&h);
    let extra = h.path("extra.txt");
    fs::write(&extra, b"beside the tree").unwrap();
    let (c, addr, err) = h.recv_with(Some("022"), &["--once", "--json"], Stdio::piped());
    // Not `--quiet` (which `send_cmd` passes and which keeps warnings off stderr, as `-q`
    // does): the skipped fifo must be reported.
    let o = Command::new(BIN)
        .arg("send")
        .args([&proj, &extra])
        .arg(format!("bob@{addr}"))
        .env("SEALINK_HOME", h.path("a"))
        .env_remove("RUST_LOG")
        .args([
            "--json",
            "--streams",
            "2",
            "--record-size",
            "4096",
            "--exclude",
            "*.log",
            "--exclude",
            "build/",
        ])
        .output()
        .unwrap();
    let stderr = ok_stderr(&o);
    assert!(
        stderr.contains("skipping") && stderr.contains("pipe"),
        "{stderr}"
    );
    let mut c = c;
    let mut out = Vec::new();
    c.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let (st, e) = finish(c, err);
    assert!(st.success(), "{e}");

    let got = h.inbox().join("proj");
    assert_eq!(
        listing(&got),
        [
            "a.txt",
            "bin/",
            "bin/run.sh",
            "empty/",
            "link",
            "sub/",
            "sub/dangling",
            "sub/deep/",
            "sub/deep/x.bin",
            "sub/up",
        ]
    );
    assert_eq!(
        h.inbox_names(),
        ["extra.txt", "proj"],
        "nothing hidden left"
    );
    assert_eq!(fs::read(got.join("a.txt")).unwrap(), b"alpha\n");
    assert!(fs::read(got.join("sub/deep/x.bin")).unwrap() == big);
    assert_eq!(
        fs::read(h.inbox().join("extra.txt")).unwrap(),
        b"beside the tree"
    );
    for (link, to) in [
        ("link", "sub/deep/x.bin"),
        ("sub/up", "../a.txt"),
        ("sub/dangling", "nowhere"),
    ] {
        assert_eq!(
            fs::read_link(got.join(link)).unwrap(),
            Path::new(to),
            "{link}"
        );
    }
    // Modes (less the receiver's umask 022) and mtimes of files, directories and links.
    for (rel, mode) in [
        ("a.txt", 0o640),
        ("bin/run.sh", 0o755),
        ("sub", 0o750),
        ("sub/deep", 0o755),
        ("empty", 0o755),
        ("", 0o755),
    ] {
        assert_eq!(stat(&got.join(rel)).0, mode, "mode of {rel:?}");
    }
    for rel in [
        "",
        "a.txt",
        "bin",
        "bin/run.sh",
        "empty",
        "sub",
        "sub/deep",
        "sub/deep/x.bin",
        "link",
        "sub/up",
        "sub/dangling",
    ] {
        assert_eq!(
            stat(&got.join(rel)).1,
            stat(&proj.join(rel)).1,
            "mtime of {rel:?}"
        );
    }
    assert_eq!(stat(&got.join("a.txt")).1, 1_600_000_001_123_456_789);

    // Both sides list every entry with its kind; the sender counted what it left out.
    let sent = records(&o.stdout);
    let recvd = records(&out);
    assert_eq!(sent.len(), 12, "{sent:?}");
    assert_eq!(recvd.len(), 12);
    for (s, r) in sent.iter().zip(&recvd) {
        assert_eq!((s.event, r.event), (Event::Sent, Event::Received));
        assert_eq!((&s.name, s.kind, s.result), (&r.name, r.kind, Outcome::Ok));
        assert_eq!(s.link_target, r.link_target);
    }
    let link = sent.iter().find(|r| r.name == "proj/link").unwrap();
    assert_eq!(
        (link.kind, link.link_target.as_deref()),
        (Kind::Symlink, Some("sub/deep/x.bin"))
    );
    // Top-level names go in name order (the manifest's order), each tree depth first.
    let top = sent.iter().position(|r| r.name == "proj").unwrap();
    assert_eq!(sent[top].kind, Kind::Dir);
    assert!(sent[top + 1].name.starts_with("proj/"));
    assert_eq!(
        r_path(&recvd, "proj/sub/deep/x.bin"),
        h.inbox().join("proj/sub/deep/x.bin").display().to_string()
    );

    let (c, addr, err) = h.recv_with(Some("022"), &["--once"], Stdio::null());
    let o = Command::new(BIN)
        .arg("send")
        .arg(&proj)
        .arg(format!("bob@{addr}"))
        .args(["--exclude", "*.log", "--exclude", "build/"])
        .env("SEALINK_HOME", h.path("a"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    // The tree exists now: refused without --force, and nothing changes.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already exists"),
        "{}",
        text(&o)
    );
    assert!(!finish(c, err).0.success());
    assert_eq!(h.inbox_names(), ["extra.txt", "proj"]);
}

fn r_path(recs: &[FileRecord], name: &str) -> String {
    recs.iter()
        .find(|r| r.name == name)
        .and_then(|r| r.path.clone())
        .unwrap_or_default()
}

#[test]
fn update_sends_nothing_for_unchanged_files_and_sends_a_changed_one() {
    let h = Hosts::new();
    let (proj, big) = make_tree(&h);
    fs::remove_file(proj.join("sub/pipe")).unwrap();
    let (mut c, addr, err) = h.recv_with(Some("022"), &["--force"], Stdio::null());
    let send = |extra: &[&str]| {
        let mut args = vec![
            "--json",
            "--update",
            "--record-size",
            "4096",
            "--exclude",
            "*.log",
            "--exclude",
            "build/",
        ];
        args.extend_from_slice(extra);
        let o = h.send(&[&proj], addr, &args);
        assert!(o.status.success(), "{}", text(&o));
        records(&o.stdout)
    };
    let first = send(&[]);
    assert!(first.iter().all(|r| r.result == Outcome::Ok), "{first:?}");
    let x = h.inbox().join("proj/sub/deep/x.bin");
    let ino = fs::metadata(&x).unwrap().ino();

    // Nothing changed: every file is skipped, none is replaced.
    let second = send(&[]);
    let files: Vec<&FileRecord> = second.iter().filter(|r| r.kind == Kind::File).collect();
    assert_eq!(files.len(), 3, "{second:?}");
    for r in &files {
        assert_eq!(r.result, Outcome::SkippedUpToDate, "{r:?}");
    }
    assert_eq!(
        fs::metadata(&x).unwrap().ino(),
        ino,
        "an unchanged file was replaced"
    );

    // One file changes (same size, new content and mtime): only it is sent.
    fs::write(proj.join("a.txt"), b"ALPHA\n").unwrap();
    let third = send(&[]);
    for r in third.iter().filter(|r| r.kind == Kind::File) {
        let want = if r.name == "proj/a.txt" {
            Outcome::Ok
        } else {
            Outcome::SkippedUpToDate
        };
        assert_eq!(r.result, want, "{r:?}");
    }
    assert_eq!(fs::read(h.inbox().join("proj/a.txt")).unwrap(), b"ALPHA\n");
    assert_eq!(fs::metadata(&x).unwrap().ino(), ino);
    assert!(fs::read(&x).unwrap() == big);
    // Excluded entries were never sent; nothing hidden is left.
    assert!(!h.inbox().join("proj/debug.log").exists());
    assert_eq!(h.inbox_names(), ["proj"]);
    c.kill().unwrap();
    let _ = finish(c, err);
}

// --- A sender of our own, to say what `sealink send` never would. ---

fn entry(name: &str, size: u64, kind: EntryKind) -> FileEntry {
    FileEntry {
        name: name.into(),
        size,
        mtime: 1_600_000_000_000_000_000,
        mode: 0o755,
        kind,
    }
}

#[test]
fn a_link_leading_out_of_the_tree_is_refused_and_nothing_is_created() {
    let h = Hosts::new();
    let (mut c, addr, err) = h.recv_with(Some("022"), &[], Stdio::null());
    let escaping = ["../../etc/passwd", "/etc/passwd", "../..", "sub/../../.."];
    for target in escaping {
        let mut raw = RawSender::connect(&h.path("a"), &h.path("b"), addr);
        let said = raw
            .offer(
                512,
                vec![
                    entry("t", 0, EntryKind::Dir),
                    entry("t/a", 3, EntryKind::File),
                    entry("t/sub", 0, EntryKind::Dir),
                    entry("t/sub/evil", 0, EntryKind::Symlink(target.into())),
                ],
            )
            .unwrap_or_else(|| panic!("ready for a link to {target}"));
        assert!(said.contains("outside the tree"), "{target}: {said}");
        assert!(c.try_wait().unwrap().is_none(), "the receiver died");
        assert_eq!(h.inbox_names(), Vec::<String>::new(), "{target}");
    }
    // Nor may a path climb out, or a file hang below a link or a file.
    for files in [
        vec![entry("t/../x", 3, EntryKind::File)],
        vec![
            entry("t", 3, EntryKind::File),
            entry("t/x", 3, EntryKind::File),
        ],
        vec![
            entry("t", 0, EntryKind::Dir),
            entry("t/l", 0, EntryKind::Symlink(".".into())),
            entry("t/l/x", 3, EntryKind::File),
        ],
    ] {
        let mut raw = RawSender::connect(&h.path("a"), &h.path("b"), addr);
        assert!(raw.offer(512, files).is_some());
        assert_eq!(h.inbox_names(), Vec::<String>::new());
    }

    // `sealink send` skips such a link with a warning naming it (as rsync --safe-links),
    // and the rest of the tree goes.
    let src = h.path("src");
    fs::create_dir_all(src.join("t/sub")).unwrap();
    std::os::unix::fs::symlink("../../etc/passwd", src.join("t/sub/evil")).unwrap();
    let o = Command::new(BIN)
        .arg("send")
        .arg(src.join("t"))
        .arg(format!("bob@{addr}"))
        .env("SEALINK_HOME", h.path("a"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let e = ok_stderr(&o);
    assert!(
        e.contains("t/sub/evil") && e.contains("--copy-links"),
        "{e}"
    );
    assert_eq!(listing(&h.inbox()), ["t/", "t/sub/"]);
    c.kill().unwrap();
    let _ = finish(c, err);
}

#[test]
fn a_tree_cut_off_mid_transfer_leaves_no_partial_tree_and_resumes() {
    use sealink_proto::stream::{Done, End, Ready};
    let h = Hosts::new();
    let (mut c, addr, mut err) = h.recv_with(Some("022"), &[], Stdio::null());
    let tree = || {
        vec![
            entry("t", 0, EntryKind::Dir),
            entry("t/b", 3, EntryKind::File),
            entry("t/d", 0, EntryKind::Dir),
            entry("t/d/a", A_LEN as u64, EntryKind::File),
            entry("t/l", 0, EntryKind::Symlink("d/a".into())),
        ]
    };
    let mut raw = RawSender::connect(&h.path("a"), &h.path("b"), addr);
    assert_eq!(raw.offer(512, tree()), None);
    // Half of t/d/a, then the sender goes: no end record. (A file of a tree keeps resume state
    // only from 256 records: a smaller one is sent again whole.)
    const A_LEN: usize = 256 * 512;
    let a: Vec<u8> = (0..A_LEN as u32).map(|i| (i % 251) as u8).collect();
    for (i, r) in a[..A_LEN / 2].chunks(512).enumerate() {
        raw.write(RecordType::Data, 2 + i as u64, r);
    }
    raw.sock.shutdown(Shutdown::Write).unwrap();
    assert!(raw.read().is_some_and(|r| r.0 == RecordType::Abort));
    {
        use std::io::BufRead;
        let mut line = String::new();
        while !line.contains("transfer failed") {
            line.clear();
            assert!(err.read_line(&mut line).unwrap() > 0);
        }
        assert!(line.contains("before the authenticated end"), "{line}");
    }
    // No tree, no staging directory, no part file: only hidden resume state.
    let names = h.inbox_names();
    assert!(!names.is_empty());
    for n in &names {
        assert!(n.starts_with(".sealink-resume-"), "{n} left behind");
    }

    // The same tree again: the receiver holds t/d/a (by its path) and says so.
    let mut raw = RawSender::connect(&h.path("a"), &h.path("b"), addr);
    let intro = sealink_proto::stream::owner_intro(&raw.keys.binding, &raw.host, &raw.peer);
    let hello = sealink_proto::stream::Hello {
        owner_public: raw.owner.public_key(),
        owner_signature: raw.owner.sign(&intro),
        record_data: 512,
        stripes: 1,
        fresh: false,
        update: false,
        more: false,
        delete: false,
        files: tree(),
    };
    raw.write(RecordType::Hello, 0, &hello.encode());
    let (kind, body) = raw.read().unwrap();
    assert_eq!(kind, RecordType::Ready);
    assert_eq!(Ready::decode(&body).unwrap().held, [0, 0, 0, 128, 0]);
    raw.write(RecordType::Data, 1, b"xyz");
    for (i, r) in a[A_LEN / 2..].chunks(512).enumerate() {
        raw.write(RecordType::Data, 2 + 128 + i as u64, r);
    }
    let end = End {
        data_records: 257,
        sizes: vec![0, 3, 0, A_LEN as u64, 0],
        hashes: vec![
            None,
            None,
            None,
            Some(sealink_crypto::hash::sha256(&a)),
            None,
        ],
        left_out: vec![],
    };
    raw.write(RecordType::End, 258, &end.encode());
    raw.sock.shutdown(Shutdown::Write).unwrap();
    let (kind, body) = raw.read().unwrap();
    assert_eq!(kind, RecordType::Done, "{}", String::from_utf8_lossy(&body));
    assert_eq!(Done::decode(&body).unwrap().bytes, 3 + A_LEN as u64);
    assert_eq!(listing(&h.inbox()), ["t/", "t/b", "t/d/", "t/d/a", "t/l"]);
    assert_eq!(fs::read(h.inbox().join("t/d/a")).unwrap(), a);
    assert_eq!(fs::read(h.inbox().join("t/l")).unwrap(), a);
    assert_eq!(h.inbox_names(), ["t"]);
    c.kill().unwrap();
    let _ = finish(c, err);
}

#[test]
fn a_tree_of_more_entries_than_a_batch_goes_in_several_batches() {
    let h = Hosts::new();
    let big = h.path("many");
    fs::create_dir_all(big.join("sub")).unwrap();
    for i in 0..5000 {
        fs::write(big.join(format!("f{i:04}")), b"x").unwrap();
    }
    fs::write(big.join("sub/last"), b"end").unwrap();
    let (mut c, addr, err) = h.recv_with(Some("022"), &[], Stdio::null());
    let o = h.send(&[&big], addr, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fs::read_dir(h.inbox().join("many")).unwrap().count(), 5001);
    assert_eq!(fs::read(h.inbox().join("many/sub/last")).unwrap(), b"end");
    c.kill().unwrap();
    let _ = finish(c, err);
}

/// A new tree's files are created with their final mode (no `fchmod` each), eagerly with the
/// flush and as their data arrives without it: every mode arrives as sent less the umask,
/// read-only ones too, with their contents and mtimes.
#[test]
fn modes_arrive_with_and_without_the_flush() {
    let h = Hosts::new();
    let src = h.path("modes");
    fs::create_dir_all(src.join("d")).unwrap();
    let modes = [
        ("d/ro", 0o444),
        ("d/private", 0o600),
        ("d/script", 0o755),
        ("d/group", 0o640),
        ("d/none", 0o000),
        ("plain", 0o644),
        ("d/world", 0o666),
    ];
    for (i, (rel, mode)) in modes.iter().enumerate() {
        let p = src.join(rel);
        fs::write(&p, vec![b'a' + i as u8; 100 + i]).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(*mode)).unwrap();
    }
    for flags in [&[][..], &["--no-fsync"][..]] {
        let (mut c, addr, err) = h.recv_with(Some("022"), flags, Stdio::null());
        let o = h.send(&[&src], addr, &[]);
        assert!(o.status.success(), "{flags:?}: {}", text(&o));
        c.kill().unwrap();
        let _ = finish(c, err);
        let got = h.inbox().join("modes");
        for (i, (rel, mode)) in modes.iter().enumerate() {
            // The umask 022 takes off group and other write.
            assert_eq!(
                stat(&got.join(rel)).0,
                mode & !0o022,
                "{flags:?}: mode of {rel}"
            );
            assert_eq!(
                stat(&got.join(rel)).1,
                stat(&src.join(rel)).1,
                "{flags:?}: {rel}"
            );
            assert_eq!(
                fs::read(got.join(rel)).unwrap(),
                vec![b'a' + i as u8; 100 + i],
                "{flags:?}: {rel}"
            );
        }
        fs::remove_dir_all(&got).unwrap();
    }
}
