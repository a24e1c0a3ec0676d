//! The manifest's later batches (stream protocol 2): whatever bytes arrive as manifest records,
//! the parser and the receiver's cross-batch check never panic; what decodes re-encodes the
//! same; and whatever the check admits is a sorted depth-first listing without duplicates,
//! every entry below an announced directory, within the limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealink_proto::stream::body::{EntryKind, valid_path};
use sealink_proto::stream::{Manifest, StreamError, TreeCheck, TreeLimits};

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    let limits = TreeLimits {
        max_entries: u64::from(shape & 0x3f) + 1,
        max_bytes: if shape & 0x40 != 0 { 1 << 20 } else { u64::MAX },
        max_depth: if shape & 0x80 != 0 { 3 } else { 128 },
    };
    let mut check = TreeCheck::new(limits);
    // Batches separated by a 2-byte little-endian length.
    let mut admitted: Vec<(String, bool)> = Vec::new();
    let mut rest = rest;
    while rest.len() >= 2 {
        let n = (usize::from(rest[0]) | usize::from(rest[1]) << 8).min(rest.len() - 2);
        let (batch, tail) = rest[2..].split_at(n);
        rest = tail;
        let Ok(m) = Manifest::decode(batch) else {
            continue;
        };
        assert_eq!(Manifest::decode(&m.encode()).unwrap(), m);
        match check.admit(&m.files, m.more) {
            Ok(()) => {
                for f in &m.files {
                    assert!(valid_path(&f.name), "{:?}", f.name);
                    if let Some((parent, _)) = f.name.rsplit_once('/') {
                        assert!(
                            admitted.iter().any(|(p, dir)| *dir && p == parent),
                            "{:?} without its directory",
                            f.name
                        );
                    }
                    assert!(!admitted.iter().any(|(p, _)| *p == f.name), "{:?} twice", f.name);
                    admitted.push((f.name.clone(), f.kind == EntryKind::Dir));
                }
                assert!(admitted.len() as u64 <= limits.max_entries);
            }
            Err(e) => {
                assert!(
                    matches!(e, StreamError::MalformedBody { .. } | StreamError::TreeLimit { .. }),
                    "{e:?}"
                );
                return;
            }
        }
    }
});
