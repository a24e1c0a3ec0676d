//! The receiver's own files against its senders, end to end: real `sealink recv` processes on
//! 127.0.0.1, real `sealink send` processes, and a sender of our own for what `sealink send`
//! never sends. A trusted owner's names never take the receiver's resume state; a part file
//! swapped under the receiver is never stored; merging into what the receiver has needs its
//! consent; kept resume state takes only what it holds, on disk and in its map; abort
//! messages never show the receiver's paths; a crashed receiver's leftovers are cleaned.

mod common;
use common::hosts::{Hosts, finish, text};
use common::raw_sender::{RawSender, key_file};
use common::{random_file, run_in};

use std::fs;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use sealink_proto::stream::body::EntryKind;
use sealink_proto::stream::resume::{RecordMap, state_stem};
use sealink_proto::stream::{Abort, End, FileEntry, Ready, RecordType};

const MTIME: u64 = 1_600_000_000_000_000_000;

fn entry(name: &str, size: u64, kind: EntryKind) -> FileEntry {
    FileEntry {
        name: name.into(),
        size,
        mtime: MTIME,
        mode: 0o644,
        kind,
    }
}

/// Polls `cond` (every 20 ms, up to 60 s).
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The owner key of host `a` (the victim's, in the attacks below).
fn alice(h: &Hosts) -> [u8; 32] {
    key_file(&h.path("a/owner.key.pub"))
}

/// The resume state names `.sealink-resume-<stem>.part` and `.map` of `owner`'s file.
fn state_paths(
    h: &Hosts,
    owner: &[u8; 32],
    name: &str,
    size: u64,
    mtime: u64,
) -> (PathBuf, PathBuf) {
    let stem = state_stem(owner, name, size, mtime);
    (
        h.inbox().join(format!("{stem}.part")),
        h.inbox().join(format!("{stem}.map")),
    )
}

/// A second trusted owner on its own host, `m` (keys in `m/`), trusted by the receiver.
fn add_mallory(h: &Hosts) {
    let m = h.path("m");
    fs::create_dir_all(&m).unwrap();
    for (kind, file) in [("host", "host.key"), ("owner", "owner.key")] {
        let p = m.join(file);
        assert!(
            run_in(h.dir.path(), &["keygen", kind, p.to_str().unwrap()])
                .status
                .success()
        );
    }
    let mut t = fs::OpenOptions::new()
        .append(true)
        .open(h.path("b/trust"))
        .unwrap();
    writeln!(
        t,
        "host mallory {}\nowner mallory {}",
        common::public(m.join("host.key.pub")),
        common::public(m.join("owner.key.pub"))
    )
    .unwrap();
}

/// Seals `(kind, seq, body)` records into one buffer and writes it at once, so the receiver
/// reads them as one chunk.
fn write_at_once(raw: &mut RawSender, recs: &[(RecordType, u64, Vec<u8>)]) {
    use sealink_proto::stream::record;
    let mut out = Vec::new();
    for (kind, seq, body) in recs {
        let mut buf = vec![0u8; record::wire_len(body.len())];
        buf[record::RECORD_HEADER_LEN..][..body.len()].copy_from_slice(body);
        let n = record::seal_record(
            &raw.keys.send,
            &mut buf,
            *kind,
            sealink_crypto::Scope::Encrypt,
            *seq,
            body.len(),
        )
        .unwrap();
        out.extend_from_slice(&buf[..n]);
    }
    raw.sock.write_all(&out).unwrap();
}

/// The receiver's answer after the sender is done: `Ok(())` for done, `Err(message)` for an
/// abort.
fn outcome(raw: &mut RawSender) -> Result<(), String> {
    match raw.read() {
        Some((RecordType::Done, _)) => Ok(()),
        Some((RecordType::Abort, b)) => Err(Abort::decode(&b).unwrap().message),
        other => panic!("unexpected answer: {other:?}"),
    }
}

#[test]
fn received_names_never_take_the_receivers_own() {
    let h = Hosts::new();
    add_mallory(&h);
    let f = h.path("big.bin");
    let data = random_file(&f, 3 << 20, 5);
    let meta = fs::metadata(&f).unwrap();
    let mtime = (meta.mtime() as u64) * 1_000_000_000 + meta.mtime_nsec() as u64;
    // The victim's resume state names are public facts: its owner key, the name, size, mtime.
    let (part, map) = state_paths(&h, &alice(&h), "big.bin", meta.len(), mtime);
    let part_name = part.file_name().unwrap().to_str().unwrap().to_owned();
    let map_name = map.file_name().unwrap().to_str().unwrap().to_owned();
    // The worst case: a receiver that replaces what exists.
    let (mut c, addr, err) = h.recv_with(None, &["--force"], Stdio::null());
    let plants = [
        vec![entry(&part_name, 0, EntryKind::Dir)],
        vec![entry(&part_name, 4, EntryKind::File)],
        vec![entry(&map_name, 4, EntryKind::File)],
        vec![entry(".sealink-resume-x", 4, EntryKind::File)],
        vec![entry(
            &format!(".{}.sealink-part-dir", "0".repeat(32)),
            0,
            EntryKind::Dir,
        )],
        vec![
            entry("t", 0, EntryKind::Dir),
            entry(
                &format!("t/.{}.sealink-part", "1".repeat(32)),
                4,
                EntryKind::File,
            ),
        ],
    ];
    for files in plants {
        let mut raw = RawSender::connect(&h.path("m"), &h.path("b"), addr);
        let said = raw.offer(512, files.clone());
        let said = said.unwrap_or_else(|| panic!("ready for {files:?}"));
        assert!(said.contains("reserved"), "{said}");
        assert!(c.try_wait().unwrap().is_none(), "the receiver died");
        assert_eq!(h.inbox_names(), Vec::<String>::new());
    }
    // The victim's transfer goes through, untouched.
    let o = h.send(&[&f], addr, &["--streams", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(fs::read(h.inbox().join("big.bin")).unwrap() == data);
    assert_eq!(h.inbox_names(), ["big.bin"]);

    // `sealink send` leaves such a name out, says so, sends the rest and exits with the
    // partial code (23); --exclude leaves it out quietly.
    let src = h.path("src");
    fs::create_dir_all(src.join("t")).unwrap();
    fs::write(src.join("t/.sealink-resume-x.part"), b"x").unwrap();
    fs::write(src.join("t/ok"), b"x").unwrap();
    let o = h.send(&[&src.join("t")], addr, &[]);
    assert_eq!(o.status.code(), Some(23), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("receiver's own"),
        "{}",
        text(&o)
    );
    assert_eq!(common::names_in(&h.inbox().join("t")), ["ok"]);
    fs::remove_dir_all(h.inbox().join("t")).unwrap();
    let o = h.send(&[&src.join("t")], addr, &["--exclude", ".sealink-*"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(common::names_in(&h.inbox().join("t")), ["ok"]);
    c.kill().unwrap();
    let _ = finish(c, err);
}

#[test]
fn a_part_file_swapped_while_receiving_is_never_stored() {
    let h = Hosts::new();
    let (mut c, addr, err) = h.recv_with(None, &["--force"], Stdio::null());
    let data: Vec<u8> = (0..1024u32).map(|i| i as u8).collect();
    let mut raw = RawSender::connect(&h.path("a"), &h.path("b"), addr);
    assert_eq!(
        raw.offer(512, vec![entry("v.bin", 1024, EntryKind::File)]),
        None
    );
    raw.write(RecordType::Data, 1, &data[..512]);
    let (part, _) = state_paths(&h, &alice(&h), "v.bin", 1024, MTIME);
    wait_for("the part file", || part.exists());
    // Someone who can reach the name puts another file there while the transfer runs.
    let evil = h.inbox().join("evil");
    fs::write(&evil, vec![b'E'; 1024]).unwrap();
    fs::rename(&evil, &part).unwrap();
    raw.write(RecordType::Data, 2, &data[512..]);
    let end = End {
        data_records: 2,
        sizes: vec![1024],
        hashes: vec![Some(sealink_crypto::hash::sha256(&data))],
        left_out: vec![],
    };
    raw.write(RecordType::End, 3, &end.encode());
    raw.sock.shutdown(Shutdown::Write).unwrap();
    let said = outcome(&mut raw).expect_err("the receiver confirmed a swapped file");
    assert!(said.contains("replaced"), "{said}");
    let stored = h.inbox().join("v.bin");
    assert!(
        !stored.exists() || fs::read(&stored).unwrap() == data,
        "the other file was stored under the victim's name"
    );
    assert!(!stored.exists());
    assert!(c.try_wait().unwrap().is_none(), "the receiver died");
    c.kill().unwrap();
    let _ = finish(c, err);
}

/// (length, bytes allocated) of `p`.
fn usage(p: &Path) -> (u64, u64) {
    let m = fs::metadata(p).unwrap();
    (m.len(), m.blocks() * 512)
}

#[test]
fn kept_resume_state_takes_only_what_it_holds() {
    const SIZE: u64 = 256 << 20;
    const REC: usize = 16384;
    let h = Hosts::new();
    let (mut c, addr, err) = h.recv_with(None, &[], Stdio::null());
    let big = vec![entry("big.bin", SIZE, EntryKind::File)];
    let chunk = |seq: u64| vec![(seq % 251) as u8; REC];
    let (part, map) = state_paths(&h, &alice(&h), "big.bin", SIZE, MTIME);

    // About 1 MiB of a 256 MiB file, then the sender goes.
    let mut raw = RawSender::connect(&h.path("a"), &h.path("b"), addr);
    assert_eq!(raw.offer(REC as u32, big.clone()), None);
    let recs: Vec<_> = (1..=64).map(|s| (RecordType::Data, s, chunk(s))).collect();
    write_at_once(&mut raw, &recs);
    raw.sock.shutdown(Shutdown::Write).unwrap();
    assert!(outcome(&mut raw).is_err());
    wait_for("the kept state", || map.exists());
    let (len, allocated) = usage(&part);
    assert_eq!(len, 1 << 20, "the part file is not cut to what is held");
    assert!(
        allocated <= 2 << 20,
        "{allocated} bytes allocated for 1 MiB held"
    );
    // Still resumable from there.
    let mut raw = RawSender::connect(&h.path("a"), &h.path("b"), addr);
    let hello = raw.hello(REC as u32, big.clone());
    raw.write(RecordType::Hello, 0, &hello);
    let (kind, body) = raw.read().unwrap();
    assert_eq!(kind, RecordType::Ready);
    assert_eq!(Ready::decode(&body).unwrap().held, [64]);
    // This session holds the whole size again; more arrives, a checkpoint records it, and the
    // receiver is killed.
    let recs: Vec<_> = (65..=128)
        .map(|s| (RecordType::Data, s, chunk(s)))
        .collect();
    write_at_once(&mut raw, &recs);
    wait_for("a checkpoint past the first", || {
        fs::read(&map)
            .ok()
            .and_then(|b| RecordMap::decode(&b).ok())
            .is_some_and(|m| m.held == 2 << 20)
    });
    assert!(usage(&part).1 > 64 << 20, "reserved while receiving");
    c.kill().unwrap();
    let _ = finish(c, err);
    // A new receiver cuts the crashed one's part file down to what its map claims.
    let (mut c, _, err) = h.recv_with(None, &[], Stdio::null());
    let (len, allocated) = usage(&part);
    assert_eq!(len, 2 << 20);
    assert!(
        allocated <= 3 << 20,
        "{allocated} bytes allocated for 2 MiB held"
    );
    c.kill().unwrap();
    let _ = finish(c, err);
}

#[test]
fn the_map_claims_only_data_that_was_written() {
    let h = Hosts::new();
    let (mut c, addr, err) = h.recv_with(None, &[], Stdio::null());
    let mut raw = RawSender::connect(&h.path("a"), &h.path("b"), addr);
    assert_eq!(
        raw.offer(512, vec![entry("f.bin", 64 << 10, EntryKind::File)]),
        None
    );
    let chunk = |seq: u64| vec![seq as u8 | 0x80; 512];
    // Twenty good records, then one again: the batch is refused after them.
    let mut recs: Vec<_> = (1..=20).map(|s| (RecordType::Data, s, chunk(s))).collect();
    recs.push((RecordType::Data, 5, chunk(5)));
    write_at_once(&mut raw, &recs);
    raw.sock.shutdown(Shutdown::Write).unwrap();
    assert!(outcome(&mut raw).is_err());
    let (part, map) = state_paths(&h, &alice(&h), "f.bin", 64 << 10, MTIME);
    // Whatever the map claims is on disk, as sent.
    let held = RecordMap::decode(&fs::read(&map).unwrap()).unwrap().held as usize;
    let got = fs::read(&part).unwrap();
    let want: Vec<u8> = (1..=20).flat_map(chunk).collect();
    assert!(
        held <= want.len() && got.len() >= held,
        "the map claims {held} bytes"
    );
    assert!(
        got[..held] == want[..held],
        "the map claims {held} bytes that were never written"
    );
    c.kill().unwrap();
    let _ = finish(c, err);
}

#[test]
fn the_sender_never_sees_the_receivers_paths() {
    let h = Hosts::new();
    let small = h.path("small.txt");
    fs::write(&small, b"hello").unwrap();
    fs::write(h.inbox().join("small.txt"), b"mine").unwrap();
    let big = h.path("big.bin");
    random_file(&big, 1 << 20, 3);
    let meta = fs::metadata(&big).unwrap();
    let mtime = (meta.mtime() as u64) * 1_000_000_000 + meta.mtime_nsec() as u64;
    // Something in the way of the resume state (a local mishap): an I/O error on the receiver.
    let (part, _) = state_paths(&h, &alice(&h), "big.bin", meta.len(), mtime);
    fs::create_dir(&part).unwrap();
    let (mut c, addr, err) = h.recv_with(None, &[], Stdio::null());
    let inbox = h.inbox().display().to_string();
    for (file, expect) in [
        (&small, "small.txt already exists at the receiver"),
        (&big, "big.bin"),
    ] {
        for json in [false, true] {
            let o = h.send(&[file], addr, if json { &["--json"][..] } else { &[] });
            assert_eq!(o.status.code(), Some(1), "{}", text(&o));
            let all = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(all.contains(expect), "{all}");
            assert!(
                !all.contains(&inbox),
                "the receiver's directory shown: {all}"
            );
        }
    }
    // The plain refusal says who can do what: `send` has no --force.
    let o = h.send(&[&small], addr, &[]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("the receiver can allow replacing it with `sealink recv --force`"),
        "{e}"
    );
    assert!(c.try_wait().unwrap().is_none());
    c.kill().unwrap();
    let _ = finish(c, err);
}

/// (mode bits, mtime in seconds) of `p`.
fn mode_mtime(p: &Path) -> (u32, i64) {
    let m = fs::symlink_metadata(p).unwrap();
    (m.permissions().mode() & 0o777, m.mtime())
}

fn touch(p: &Path, secs: i64) {
    let t = std::time::UNIX_EPOCH + Duration::from_secs(secs as u64);
    fs::File::open(p).unwrap().set_modified(t).unwrap();
}

#[test]
fn updates_need_the_receivers_consent_and_keep_its_directories() {
    let h = Hosts::new();
    let proj = h.path("src/proj");
    fs::create_dir_all(proj.join("sub")).unwrap();
    fs::write(proj.join("a.txt"), b"alpha\n").unwrap();
    fs::write(proj.join("sub/b.txt"), b"beta\n").unwrap();
    let (mut c, addr, err) = h.recv_with(Some("022"), &[], Stdio::null());
    let o = h.send(&[&proj], addr, &[]);
    assert!(o.status.success(), "{}", text(&o));
    // The receiver's own choices for its copy.
    let got = h.inbox().join("proj");
    fs::set_permissions(&got, fs::Permissions::from_mode(0o700)).unwrap();
    touch(&got, 1_700_000_000);
    let b_ino = fs::metadata(got.join("sub/b.txt")).unwrap().ino();

    // Another owner's sender adds a file (a hook, say) and asks for an update, with a new
    // mode and mtime for the directory: without the receiver's consent, nothing changes.
    fs::create_dir_all(proj.join("hooks")).unwrap();
    fs::write(proj.join("hooks/post-checkout"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(&proj, fs::Permissions::from_mode(0o777)).unwrap();
    touch(&proj, 1_500_000_000);
    let o = h.send(&[&proj], addr, &["--update"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "merged without consent: {}",
        text(&o)
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("proj already exists") && e.contains("sealink recv --update"),
        "{e}"
    );
    assert!(!e.contains("(use --force"), "{e}");
    assert!(!got.join("hooks").exists());
    assert_eq!(mode_mtime(&got), (0o700, 1_700_000_000));
    // Without --update the sender is told how to ask.
    let o = h.send(&[&proj], addr, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("sealink send --update"),
        "{}",
        text(&o)
    );
    c.kill().unwrap();
    let _ = finish(c, err);

    // A receiver that takes updates: a changed file, a new directory and file; the unchanged
    // file is skipped; the directory that was there keeps the receiver's mode and is not
    // given the sender's mtime.
    fs::write(proj.join("a.txt"), b"ALPHA, longer\n").unwrap();
    touch(&proj, 1_500_000_000);
    let (mut c, addr, err) = h.recv_with(Some("022"), &["--update"], Stdio::null());
    let o = h.send(&[&proj], addr, &["--update"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fs::read(got.join("a.txt")).unwrap(), b"ALPHA, longer\n");
    assert_eq!(
        fs::read(got.join("hooks/post-checkout")).unwrap(),
        b"#!/bin/sh\n"
    );
    assert_eq!(fs::metadata(got.join("sub/b.txt")).unwrap().ino(), b_ino);
    let (mode, mtime) = mode_mtime(&got);
    assert_eq!(mode, 0o700);
    assert_ne!(mtime, 1_500_000_000);
    // A plain send (no --update) still changes nothing there.
    let o = h.send(&[&proj], addr, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    c.kill().unwrap();
    let _ = finish(c, err);
    // Only --force gives the directory the sender's mode (less group/other write) and mtime.
    let (mut c, addr, err) = h.recv_with(Some("022"), &["--force"], Stdio::null());
    let o = h.send(&[&proj], addr, &["--update"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(mode_mtime(&got), (0o755, 1_500_000_000));
    c.kill().unwrap();
    let _ = finish(c, err);
}

#[test]
fn a_crashed_receivers_leftovers_are_cleaned_at_start_up() {
    let h = Hosts::new();
    let (mut c, addr, err) = h.recv_with(None, &[], Stdio::null());
    // Standard input into a directory: a plain part file (not resumable).
    let mut s = h
        .send_cmd(&[Path::new("-")], addr, &["--as", "piped.bin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = s.stdin.take().unwrap();
    input.write_all(&vec![7u8; 1 << 20]).unwrap();
    let is_part = |n: &String| n.starts_with('.') && n.ends_with(".sealink-part");
    wait_for("a part file", || h.inbox_names().iter().any(is_part));
    c.kill().unwrap();
    let _ = finish(c, err);
    drop(input);
    s.kill().unwrap();
    let _ = s.wait();
    // And a staging directory, as a receiver killed while storing a tree leaves it.
    let staging = h
        .inbox()
        .join(format!(".{}.sealink-part-dir", "ab".repeat(16)));
    fs::create_dir_all(staging.join("t/d")).unwrap();
    fs::write(staging.join("t/d/f"), b"x").unwrap();
    std::os::unix::fs::symlink("/etc", staging.join("t/l")).unwrap();
    // Ordinary names are the owner's files, whatever they look like.
    fs::write(h.inbox().join("notes.sealink-part"), b"mine").unwrap();
    let before = h.inbox_names();
    assert_eq!(before.len(), 3, "{before:?}");

    let start = |age: &str| {
        let (mut c, _, mut err) =
            h.recv_with(None, &["--resume-max-age", age, "-v"], Stdio::null());
        c.kill().unwrap();
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        c.wait().unwrap();
        rest
    };
    start("7d");
    assert_eq!(h.inbox_names(), before, "young leftovers deleted");
    start("0");
    assert_eq!(h.inbox_names(), ["notes.sealink-part"]);
    assert!(Path::new("/etc/passwd").exists());
}

#[test]
fn only_the_same_owner_takes_over_a_stalled_transfer() {
    let h = Hosts::new();
    add_mallory(&h);
    let (mut c, addr, err) = h.recv_with(None, &[], Stdio::null());
    let files = || vec![entry("f.bin", 64 << 10, EntryKind::File)];
    // Alice's first session: some data, then silence on an open connection (her host
    // vanished, as the receiver sees it: no FIN, no RST).
    let mut first = RawSender::connect(&h.path("a"), &h.path("b"), addr);
    assert_eq!(first.offer(512, files()), None);
    let recs: Vec<_> = (1..=8)
        .map(|s| (RecordType::Data, s, vec![s as u8; 512]))
        .collect();
    write_at_once(&mut first, &recs);
    let (_, map) = state_paths(&h, &alice(&h), "f.bin", 64 << 10, MTIME);
    wait_for("a checkpoint of the stalled session", || map.exists());
    let alive = |raw: &RawSender| {
        raw.sock
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let r = raw.sock.peek(&mut [0u8; 1]);
        matches!(r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    };
    assert!(alive(&first));

    // Another owner sending a file of the same name, size and mtime: its own state, and
    // Alice's session is left alone.
    let mut m = RawSender::connect(&h.path("m"), &h.path("b"), addr);
    assert_eq!(m.offer(512, files()), None);
    assert!(alive(&first), "another owner stopped Alice's session");
    drop(m);

    // Alice again: her stalled session is stopped at once and the new one resumes its state.
    let t0 = Instant::now();
    let mut second = RawSender::connect(&h.path("a"), &h.path("b"), addr);
    let hello = second.hello(512, files());
    second.write(RecordType::Hello, 0, &hello);
    let ready = match second.read() {
        Some((RecordType::Ready, b)) => Ready::decode(&b).unwrap(),
        other => panic!("no ready: {other:?}"),
    };
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert!(ready.held[0] > 0, "nothing resumed: {:?}", ready.held);
    assert!(!alive(&first), "the stalled session still runs");
    c.kill().unwrap();
    let (_, log) = finish(c, err);
    assert!(
        log.contains("a newer transfer of f.bin from the same owner took over"),
        "{log}"
    );
}
