use super::*;

#[test]
fn abort_with_invalid_utf8_round_trips() {
    // Found by the stream_parser fuzz target: invalid bytes grow threefold when replaced.
    let mut b = vec![4u8];
    b.extend_from_slice(&(MAX_ABORT_MESSAGE as u16).to_le_bytes());
    b.extend(std::iter::repeat_n(0xFFu8, MAX_ABORT_MESSAGE));
    let a = Abort::decode(&b).unwrap();
    assert!(a.message.len() <= MAX_ABORT_MESSAGE);
    assert_eq!(Abort::decode(&a.encode()).unwrap(), a);
}

fn hello() -> Hello {
    Hello {
        owner_public: [1; 32],
        owner_signature: [2; 64],
        record_data: 16384,
        stripes: 2,
        fresh: false,
        update: false,
        more: false,
        delete: false,
        files: vec![
            FileEntry {
                name: "a.bin".into(),
                size: 5,
                mtime: 1_700_000_000_123_456_789,
                mode: 0o644,
                kind: EntryKind::File,
            },
            FileEntry {
                name: "stdin".into(),
                size: UNKNOWN_SIZE,
                mtime: 0,
                mode: 0o600,
                kind: EntryKind::File,
            },
        ],
    }
}

#[test]
fn bodies_round_trip() {
    let h = hello();
    assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
    let h = Hello { fresh: true, ..h };
    assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
    let h = Hello { update: true, ..h };
    assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
    // A file of unknown size only ends the whole manifest, not a batch with more after it.
    assert!(
        Hello::decode(
            &Hello {
                more: true,
                ..h.clone()
            }
            .encode()
        )
        .is_err()
    );
    let h = Hello {
        more: true,
        delete: true,
        files: h.files[..1].to_vec(),
        ..h
    };
    assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
    let t = tree(&[("t", D), ("t/l", L("sub/x")), ("t/sub", D), ("t/sub/x", F)]);
    assert_eq!(Hello::decode(&t.encode()).unwrap(), t);
    let e = End {
        data_records: 9,
        sizes: vec![1, 2],
        hashes: vec![None, Some([7; 32])],
        left_out: vec![],
    };
    assert_eq!(End::decode(&e.encode()).unwrap(), e);
    let r = Ready { held: vec![0, 3] };
    assert_eq!(Ready::decode(&r.encode()).unwrap(), r);
    let d = Done { bytes: 7, files: 1 };
    assert_eq!(Done::decode(&d.encode()).unwrap(), d);
    let a = Abort {
        code: AbortCode::LocalIo,
        message: "no space left on device".into(),
    };
    assert_eq!(Abort::decode(&a.encode()).unwrap(), a);
}

const F: Kind = Kind::F;
const D: Kind = Kind::D;
use Kind::L;
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    F,
    D,
    L(&'static str),
}

/// A hello announcing these entries (files of 3 bytes).
fn tree(entries: &[(&str, Kind)]) -> Hello {
    let mut h = hello();
    h.files = entries
        .iter()
        .map(|&(name, k)| FileEntry {
            name: name.into(),
            size: if matches!(k, F) { 3 } else { 0 },
            mtime: 1,
            mode: 0o755,
            kind: match k {
                F => EntryKind::File,
                D => EntryKind::Dir,
                L(t) => EntryKind::Symlink(t.into()),
            },
        })
        .collect();
    h
}

fn refused(entries: &[(&str, Kind)]) -> String {
    match Hello::decode(&tree(entries).encode()) {
        Err(StreamError::MalformedBody { what: "hello", why }) => why,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_receivers_own_names_are_reserved_at_every_depth() {
    for name in [
        ".sealink-resume-0123456789abcdef0123456789abcdef.part",
        ".sealink-resume-0123456789abcdef0123456789abcdef.map",
        ".sealink-anything",
        ".0123456789abcdef0123456789abcdef.sealink-part",
        ".x.sealink-part-dir",
    ] {
        assert!(reserved_name(name) && !valid_file_name(name), "{name}");
        assert!(refused(&[(name, F)]).contains("reserved"), "{name}");
        assert!(refused(&[(name, D)]).contains("reserved"), "{name}");
        let nested = format!("t/{name}");
        assert!(
            refused(&[("t", D), (&nested, F)]).contains("reserved"),
            "{nested}"
        );
        assert!(!valid_path(&nested));
    }
    // Names that only look alike are ordinary names.
    for name in [
        "sealink-resume",
        "a.sealink-part",
        ".sealink",
        "x.sealink-part-dir",
    ] {
        assert!(!reserved_name(name) && valid_file_name(name), "{name}");
    }
}

#[test]
fn trees_need_their_directories_first_and_distinct_paths() {
    let ok = tree(&[("g", F), ("t", D), ("t/a", D), ("t/a/f", F), ("t/e", D)]);
    assert!(Hello::decode(&ok.encode()).is_ok());
    // Depth first, each directory's entries in name order (so a duplicate shows).
    assert!(refused(&[("t", D), ("g", F)]).contains("comes after"));
    assert!(refused(&[("t", D), ("t/b", F), ("t/a", F)]).contains("comes after"));
    assert!(refused(&[("t/a", F)]).contains("without its directory"));
    assert!(refused(&[("t/a", F), ("t", D)]).contains("without its directory"));
    // A file (or a link) is never a directory of another entry.
    assert!(refused(&[("t", F), ("t/a", F)]).contains("without its directory"));
    assert!(refused(&[("t", D), ("t/l", L(".")), ("t/l/a", F)]).contains("without"));
    assert!(refused(&[("t", D), ("t/a", F), ("t/a", D)]).contains("twice"));
    assert!(refused(&[("t", D), ("t/a", D), ("t/b", F), ("t/a/c", F)]).contains("after"));
    assert!(refused(&[("t", D), ("t", D)]).contains("twice"));
    for p in [
        "t//a", "t/./a", "t/../a", "/t/a", "t/a/", "t/a\\b", "t/\u{0}",
    ] {
        assert!(
            refused(&[("t", D), (p, F)]).contains("not a relative path"),
            "{p:?}"
        );
    }
    // Depth and length bounds.
    let deep: Vec<String> = (1..=MAX_DEPTH + 1)
        .map(|n| vec!["d"; n].join("/"))
        .collect();
    let mut es: Vec<(&str, Kind)> = deep.iter().map(|p| (p.as_str(), D)).collect();
    assert!(refused(&es).contains("not a relative path"));
    es.pop();
    assert!(Hello::decode(&tree(&es).encode()).is_ok());
    let long = format!("t/{}", vec!["n".repeat(200); 21].join("/"));
    assert!(long.len() > MAX_PATH_LEN);
    assert!(refused(&[("t", D), (&long, F)]).contains("not a relative path"));
    // Directories and links carry no data.
    let mut h = tree(&[("t", D)]);
    h.files[0].size = 1;
    assert!(Hello::decode(&h.encode()).is_err());
    let mut b = tree(&[("t", F)]).encode();
    let kind_at = b.len() - 1 - 2 - 1;
    b[kind_at] = 3;
    assert!(Hello::decode(&b).is_err());
}

#[test]
fn links_that_leave_their_tree_are_refused() {
    for t in ["sub/x", "x", ".", "./x", "..", "../b", "../.", "a/./b"] {
        let h = tree(&[("t", D), ("t/a", D), ("t/a/l", L(t))]);
        assert!(Hello::decode(&h.encode()).is_ok(), "{t:?}");
    }
    for t in [
        "../../etc/passwd",
        "../../t/x",
        "/etc/passwd",
        "../..",
        "../../..",
        "up/../..",
        "x/..",
        "",
        "a\nb",
        "a\u{0}b",
    ] {
        let why = refused(&[("t", D), ("t/a", D), ("t/a/l", L(t))]);
        assert!(why.contains("outside the tree"), "{t:?}: {why}");
    }
    // A link at the top level points into the receiver's directory itself.
    assert!(refused(&[("l", L("x"))]).contains("outside the tree"));
    assert!(refused(&[("t", D), ("t/l", L(".."))]).contains("outside the tree"));
    assert!(!link_stays_inside("t/l", &"x".repeat(MAX_LINK_LEN + 1)));
}

#[test]
fn hello_rejects_bad_names_and_layouts() {
    for name in [
        "",
        ".",
        "..",
        "a/b",
        "../x",
        "x\n",
        &"n".repeat(256),
        "a/",
        "/a",
        ".sealink-resume-0123456789abcdef0123456789abcdef.part",
        ".sealink-resume-0123456789abcdef0123456789abcdef.map",
        ".sealink-x",
        ".0123456789abcdef0123456789abcdef.sealink-part",
        ".0123456789abcdef0123456789abcdef.sealink-part-dir",
    ] {
        let mut h = hello();
        h.files[0].name = name.into();
        assert!(Hello::decode(&h.encode()).is_err(), "{name:?}");
    }
    let mut h = hello();
    h.files[1].name = "a.bin".into();
    assert!(Hello::decode(&h.encode()).is_err(), "duplicate names");
    let mut h = hello();
    h.files.swap(0, 1);
    assert!(Hello::decode(&h.encode()).is_err(), "unknown size not last");
    for record_data in [0, 1, MIN_RECORD_DATA as u32 - 1, MAX_RECORD_DATA as u32 + 1] {
        let mut h = hello();
        h.record_data = record_data;
        assert!(
            Hello::decode(&h.encode()).is_err(),
            "record size {record_data}"
        );
    }
    for record_data in [MIN_RECORD_DATA as u32, MAX_RECORD_DATA as u32] {
        let mut h = hello();
        h.record_data = record_data;
        assert!(
            Hello::decode(&h.encode()).is_ok(),
            "record size {record_data}"
        );
    }
    let b = hello().encode();
    for cut in 0..b.len() {
        assert!(Hello::decode(&b[..cut]).is_err());
    }
}
