//! The names a stream receiver takes: whatever a hello announces, every path that decodes is
//! relative, made of plain names, and never one of the receiver's own (its resume state, part
//! files and staging directories), at any depth; a record map read from disk never names one
//! either. The name checks agree with each other on any string.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealink_proto::stream::body::{
    EntryKind, RESERVED_PREFIX, RESERVED_SUFFIXES, reserved_name, valid_file_name, valid_path,
};
use sealink_proto::stream::resume::RecordMap;
use sealink_proto::stream::{FileEntry, Hello};

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    // The checks on a string of its own.
    for c in text.split('/') {
        if valid_file_name(c) {
            assert!(!reserved_name(c), "{c:?} is valid and reserved");
        }
        if c.starts_with(RESERVED_PREFIX) {
            assert!(!valid_file_name(c), "{c:?} takes the reserved prefix");
        }
    }
    if valid_path(&text) {
        assert!(!text.split('/').any(reserved_name), "{text:?}");
    }
    // The same text as a tree's entries, some dressed as the receiver's own names (which a
    // sender can compute: resume state names are a hash of public facts).
    let mut files = Vec::new();
    for (i, part) in text.split('\0').take(16).enumerate() {
        let dressed = match (shape >> (i % 4)) & 3 {
            0 => part.to_owned(),
            1 => format!("{RESERVED_PREFIX}resume-{part}.part"),
            2 => format!(".{part}{}", RESERVED_SUFFIXES[i % RESERVED_SUFFIXES.len()]),
            _ => format!("t/{part}"),
        };
        let kind = match part.len() % 3 {
            0 => EntryKind::Dir,
            1 => EntryKind::File,
            _ => EntryKind::Symlink("x".into()),
        };
        files.push(FileEntry {
            name: dressed,
            size: if kind == EntryKind::File { 3 } else { 0 },
            mtime: 1,
            mode: 0o644,
            kind,
        });
    }
    if shape & 0x80 != 0 {
        files.insert(0, FileEntry {
            name: "t".into(),
            size: 0,
            mtime: 1,
            mode: 0o755,
            kind: EntryKind::Dir,
        });
    }
    let hello = Hello {
        owner_public: [1; 32],
        owner_signature: [2; 64],
        record_data: 4096,
        stripes: 1,
        fresh: false,
        update: shape & 0x40 != 0,
        more: false,
        delete: false,
        files,
    };
    if let Ok(h) = Hello::decode(&hello.encode()) {
        for f in &h.files {
            assert!(valid_path(&f.name), "{:?}", f.name);
            assert!(!f.name.split('/').any(reserved_name), "{:?} decoded", f.name);
        }
    }
    // A record map naming the text: decodes only for a name a transfer could have had.
    for f in &hello.files {
        let m = RecordMap {
            owner: [3; 32],
            name: f.name.clone(),
            size: 10,
            mtime: 1,
            held: 5,
        };
        if let Ok(d) = RecordMap::decode(&m.encode()) {
            assert!(!d.name.split('/').any(reserved_name), "{:?} in a map", d.name);
        }
    }
});
