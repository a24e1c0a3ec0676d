use super::*;
use proptest::prelude::*;

fn end() -> impl Strategy<Value = End> {
    (
        any::<u64>(),
        proptest::collection::vec(
            (
                any::<u64>(),
                proptest::option::of(any::<[u8; 32]>()),
                any::<bool>(),
            ),
            0..8,
        ),
    )
        .prop_map(|(data_records, f)| {
            // As decoded: the flags up to the last file left out.
            let mut left_out: Vec<bool> = f.iter().map(|x| x.2).collect();
            while left_out.last() == Some(&false) {
                left_out.pop();
            }
            End {
                data_records,
                sizes: f.iter().map(|x| x.0).collect(),
                hashes: f.iter().map(|x| x.1).collect(),
                left_out,
            }
        })
}

/// Entries from a small alphabet, so that `/`, `.`, `..`, duplicates, missing parents and
/// escaping links all come up.
fn entries() -> impl Strategy<Value = Vec<FileEntry>> {
    let path = proptest::collection::vec(
        prop_oneof![
            Just("a"),
            Just("b"),
            Just("."),
            Just(".."),
            Just(""),
            Just("x/y"),
            Just(".sealink-resume-x.part"),
            Just(".0.sealink-part-dir")
        ],
        1..5,
    )
    .prop_map(|c| c.join("/"));
    let kind = prop_oneof![
        Just(EntryKind::File),
        Just(EntryKind::Dir),
        path.clone().prop_map(EntryKind::Symlink),
        Just(EntryKind::Symlink("/abs".into())),
    ];
    proptest::collection::vec(
        (
            path,
            kind,
            prop_oneof![Just(0u64), Just(3), Just(UNKNOWN_SIZE)],
        ),
        0..8,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|(name, kind, size)| FileEntry {
                name,
                size,
                mtime: 1,
                mode: 0o644,
                kind,
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn hello_paths_decode_valid_or_fail_typed(files in entries(), update in any::<bool>()) {
        let h = Hello {
            owner_public: [1; 32],
            owner_signature: [2; 64],
            record_data: 4096,
            stripes: 1,
            fresh: false,
            update,
            more: false,
            delete: false,
            files,
        };
        let b = h.encode();
        match Hello::decode(&b) {
            Ok(d) => {
                prop_assert_eq!(&d, &h);
                for (i, f) in d.files.iter().enumerate() {
                    prop_assert!(valid_path(&f.name));
                    prop_assert!(!f.name.split('/').any(reserved_name));
                    if let Some((parent, _)) = f.name.rsplit_once('/') {
                        let dir = d.files[..i]
                            .iter()
                            .any(|p| p.name == parent && p.kind == EntryKind::Dir);
                        prop_assert!(dir);
                    }
                    if let EntryKind::Symlink(t) = &f.kind {
                        prop_assert!(!t.starts_with('/') && link_stays_inside(&f.name, t));
                    }
                }
            }
            Err(e) => prop_assert!(matches!(e, StreamError::MalformedBody { .. }), "{e:?}"),
        }
        for cut in 0..b.len() {
            prop_assert!(Hello::decode(&b[..cut]).is_err());
        }
    }

    #[test]
    fn end_and_ready_round_trip_and_every_cut_fails(
        e in end(),
        held in proptest::collection::vec(any::<u64>(), 0..8),
    ) {
        let b = e.encode();
        prop_assert_eq!(End::decode(&b).unwrap(), e);
        for cut in 0..b.len() {
            prop_assert!(End::decode(&b[..cut]).is_err());
        }
        let r = Ready { held };
        let b = r.encode();
        prop_assert_eq!(Ready::decode(&b).unwrap(), r);
        for cut in 0..b.len() {
            prop_assert!(Ready::decode(&b[..cut]).is_err());
        }
        let mut long = b.clone();
        long.push(0);
        prop_assert!(Ready::decode(&long).is_err());
    }

    #[test]
    fn bodies_never_panic_on_junk(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        for r in [End::decode(&b).map(|_| ()), Ready::decode(&b).map(|_| ()), Hello::decode(&b).map(|_| ())] {
            if let Err(e) = r {
                let typed = matches!(e, StreamError::MalformedBody { .. });
                prop_assert!(typed, "{e:?}");
            }
        }
    }
}

#[test]
fn bad_flags_and_hash_flags_are_refused() {
    let mut b = End {
        data_records: 1,
        sizes: vec![5],
        hashes: vec![None],
        left_out: vec![],
    }
    .encode();
    // Flag 2 (left out) is known; 4 and up are not.
    *b.last_mut().unwrap() = 2;
    assert_eq!(End::decode(&b).unwrap().left_out, vec![true]);
    *b.last_mut().unwrap() = 4;
    assert!(matches!(
        End::decode(&b),
        Err(StreamError::MalformedBody { what: "end", .. })
    ));
    let h = Hello {
        owner_public: [1; 32],
        owner_signature: [2; 64],
        record_data: 16384,
        stripes: 1,
        fresh: false,
        update: false,
        more: false,
        delete: false,
        files: vec![],
    };
    let mut b = h.encode();
    b[32 + 64 + 4 + 2] = 4 | 32; // flags: an unknown bit
    assert!(Hello::decode(&b).is_err());
    // A hello without the version marker comes from a sender of stream protocol 1.
    b[32 + 64 + 4 + 2] = 0;
    let e = Hello::decode(&b).unwrap_err();
    assert!(
        e.to_string()
            .contains("upgrade sealink on the sending host"),
        "{e}"
    );
    // A ready announcing more files than a session may have.
    let mut b = ((MAX_BATCH_ENTRIES + 1) as u32).to_le_bytes().to_vec();
    b.extend(std::iter::repeat_n(0u8, 8 * (MAX_BATCH_ENTRIES + 1)));
    assert!(Ready::decode(&b).is_err());
}
