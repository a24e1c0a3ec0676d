//! The manifest in batches (stream protocol 2): the hello carries the first batch of entries,
//! and a sender with more sends each further batch in a manifest record once the previous
//! batch's end record is out. So neither side ever holds a whole tree's entries.
//!
//! ```text
//! manifest: flags u8 (bit 0: more batches follow) | entry count u32 | entries (as the hello's)
//! ```
//!
//! Entries come in one order over the whole transfer: depth first, a directory before what it
//! holds, and the entries of each directory (and the top-level entries) in byte order of their
//! names. Paths then increase strictly, component by component, so [`TreeCheck`] refuses a
//! duplicate, an entry whose directory is not announced (or already closed), and an overlap
//! (an entry below a file or a link) with a stack of open directories, in memory bounded by the
//! depth, whatever the number of entries.

use super::StreamError;
use super::body::{EntryKind, FileEntry, MAX_DEPTH, Reader, UNKNOWN_SIZE, bad, decode_entries};

/// A later batch of the manifest (the first travels in the hello).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// More batches follow this one.
    pub more: bool,
    pub files: Vec<FileEntry>,
}

const MORE: u8 = 1;

impl Manifest {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(5 + self.files.len() * 48);
        v.push(if self.more { MORE } else { 0 });
        super::body::encode_entries(&mut v, &self.files);
        v
    }

    /// Decodes a batch and checks each entry on its own (paths, names, link targets); how it
    /// fits the batches before it is [`TreeCheck::admit`]'s to say.
    pub fn decode(b: &[u8]) -> Result<Self, StreamError> {
        let mut r = Reader {
            b,
            what: "manifest",
        };
        let flags = r.array::<1>()?[0];
        if flags & !MORE != 0 {
            return Err(bad("manifest", format!("unknown flags {flags:#x}")));
        }
        let files = decode_entries(&mut r)?;
        r.finish()?;
        Ok(Self {
            more: flags & MORE != 0,
            files,
        })
    }
}

/// What a receiver accepts in one transfer, over all its batches. Past a bound the transfer
/// is refused with [`StreamError::TreeLimit`], which names the `sealink recv` flag that raises
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLimits {
    /// Entries (files, directories and links) in all.
    pub max_entries: u64,
    /// Bytes of all files together, as announced.
    pub max_bytes: u64,
    /// Components of a path (at most [`MAX_DEPTH`] whatever this says).
    pub max_depth: usize,
}

impl TreeLimits {
    /// No bounds but the protocol's own (depth [`MAX_DEPTH`]).
    pub const NONE: TreeLimits = TreeLimits {
        max_entries: u64::MAX,
        max_bytes: u64::MAX,
        max_depth: MAX_DEPTH,
    };
}

impl Default for TreeLimits {
    /// Room for real trees: 16 Mi entries (a checkout of every package of a distribution),
    /// 64 TiB, the protocol's depth.
    fn default() -> Self {
        TreeLimits {
            max_entries: 1 << 24,
            max_bytes: 1 << 46,
            max_depth: MAX_DEPTH,
        }
    }
}

/// The receiver's check of the manifest's batches, in order. Holds the previous path and the
/// lengths of its open directories (at most [`MAX_DEPTH`]), two counters and whether the
/// manifest has ended: a few KiB at most, whatever the number of entries.
#[derive(Debug, Clone)]
pub struct TreeCheck {
    limits: TreeLimits,
    /// The previous entry's path ("" before the first).
    last: String,
    /// Byte lengths of the prefixes of `last` that are open directories (ancestors of the
    /// next entries), shortest first.
    open: Vec<usize>,
    entries: u64,
    bytes: u64,
    /// The batch that said no more follow has been admitted.
    ended: bool,
}

/// Orders paths component by component (`a/b` before `a.x`), as a sorted depth-first walk
/// lists them.
fn path_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    a.split('/').cmp(b.split('/'))
}

impl TreeCheck {
    pub fn new(limits: TreeLimits) -> Self {
        TreeCheck {
            limits,
            last: String::new(),
            open: Vec::new(),
            entries: 0,
            bytes: 0,
            ended: false,
        }
    }

    /// Entries admitted so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Whether the batch that ends the manifest has been admitted.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Admits the next batch (`more`: others follow), or says why the manifest lies: entries
    /// after its end, an empty batch that does not end it, a path out of order (a duplicate,
    /// or a sibling listed twice), an entry whose directory is not the open directory above
    /// it (not announced, closed, or a file or link), a file of unknown size that is not the
    /// transfer's last entry, or more than the limits allow. Entries are valid one by one
    /// already ([`Manifest::decode`]).
    pub fn admit(&mut self, files: &[FileEntry], more: bool) -> Result<(), StreamError> {
        const W: &str = "manifest";
        if self.ended {
            return Err(bad(W, "entries after the batch that ended the manifest"));
        }
        if files.is_empty() && more {
            return Err(bad(W, "an empty batch that does not end the manifest"));
        }
        for (i, f) in files.iter().enumerate() {
            let name = f.name.as_str();
            if self.entries > 0 && path_cmp(&self.last, name) != std::cmp::Ordering::Less {
                return Err(bad(
                    W,
                    if self.last == name {
                        format!("path {name:?} appears twice")
                    } else {
                        format!(
                            "path {name:?} comes after {:?}: entries must come depth first, \
                             each directory's in name order (a duplicate, or out of order)",
                            self.last
                        )
                    },
                ));
            }
            let depth = name.split('/').count();
            if depth > self.limits.max_depth.min(MAX_DEPTH) {
                return Err(StreamError::TreeLimit {
                    what: "path components",
                    limit: self.limits.max_depth.min(MAX_DEPTH) as u64,
                    flag: "--max-depth",
                });
            }
            // The open directories are prefixes of `last`, so of every later path up to its
            // parent: close those the entry is not in, then its parent must be the innermost.
            let parent = name.rsplit_once('/').map_or(0, |(p, _)| p.len());
            let inside = |len: usize| len <= parent && name.as_bytes().get(len) == Some(&b'/');
            while self.open.last().is_some_and(|&l| !inside(l)) {
                self.open.pop();
            }
            if parent > 0 && self.open.last() != Some(&parent) {
                return Err(bad(
                    W,
                    format!(
                        "{name:?} comes without its directory {:?} open before it",
                        &name[..parent]
                    ),
                ));
            }
            if self.entries >= self.limits.max_entries {
                return Err(StreamError::TreeLimit {
                    what: "entries",
                    limit: self.limits.max_entries,
                    flag: "--max-entries",
                });
            }
            if f.size == UNKNOWN_SIZE {
                if more || i + 1 != files.len() || f.kind != EntryKind::File {
                    return Err(bad(W, "only the last file may have an unknown size"));
                }
            } else {
                self.bytes = self.bytes.saturating_add(f.size);
                if self.bytes > self.limits.max_bytes {
                    return Err(StreamError::TreeLimit {
                        what: "bytes",
                        limit: self.limits.max_bytes,
                        flag: "--max-bytes",
                    });
                }
            }
            self.entries += 1;
            self.last.clear();
            self.last.push_str(name);
            if f.kind == EntryKind::Dir {
                self.open.push(name.len());
            }
        }
        self.ended = !more;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(name: &str, kind: EntryKind) -> FileEntry {
        FileEntry {
            name: name.into(),
            size: if kind == EntryKind::File { 3 } else { 0 },
            mtime: 1,
            mode: 0o644,
            kind,
        }
    }
    fn d(n: &str) -> FileEntry {
        e(n, EntryKind::Dir)
    }
    fn f(n: &str) -> FileEntry {
        e(n, EntryKind::File)
    }

    fn why(r: Result<(), StreamError>) -> String {
        match r {
            Err(StreamError::MalformedBody { why, .. }) => why,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn batches_continue_the_walk() {
        let mut c = TreeCheck::new(TreeLimits::default());
        c.admit(&[d("a"), d("a/b"), f("a/b/x")], true).unwrap();
        c.admit(&[f("a/b/y"), f("a/c"), d("a.x"), f("a.x/z")], true)
            .unwrap();
        c.admit(&[f("b")], false).unwrap();
        assert!(c.ended());
        assert_eq!(c.entries(), 8);
        assert!(why(c.admit(&[f("c")], false)).contains("after the batch that ended"));
    }

    #[test]
    fn lies_across_batches_are_refused() {
        let mut c = TreeCheck::new(TreeLimits::default());
        c.admit(&[d("a"), f("a/x")], true).unwrap();
        // The same path again in a later batch, an earlier sibling, a closed directory.
        assert!(why(c.clone().admit(&[f("a/x")], true)).contains("twice"));
        assert!(why(c.clone().admit(&[f("a/w")], true)).contains("comes after"));
        let mut c2 = c.clone();
        c2.admit(&[f("b")], true).unwrap();
        assert!(why(c2.admit(&[f("a/y")], true)).contains("comes after"));
        // Below a file, below a directory never announced.
        assert!(why(c.clone().admit(&[f("a/x/y")], true)).contains("without its directory"));
        assert!(why(c.clone().admit(&[f("a/y/z")], true)).contains("without its directory"));
        // Empty batches that do not end it; unknown sizes before the end.
        assert!(why(c.clone().admit(&[], true)).contains("empty batch"));
        let mut u = f("a/y");
        u.size = UNKNOWN_SIZE;
        assert!(why(c.clone().admit(&[u.clone()], true)).contains("unknown size"));
        assert!(why(c.clone().admit(&[u.clone(), f("a/z")], false)).contains("unknown size"));
        c.admit(&[u], false).unwrap();
    }

    #[test]
    fn limits_name_their_flag() {
        let lim = TreeLimits {
            max_entries: 3,
            max_bytes: 5,
            max_depth: 2,
        };
        let mut c = TreeCheck::new(lim);
        let r = c.clone().admit(&[d("a"), f("a/x"), f("a/y")], true);
        assert!(
            matches!(
                r,
                Err(StreamError::TreeLimit {
                    flag: "--max-bytes",
                    ..
                })
            ),
            "{r:?}"
        );
        let r = c.clone().admit(&[d("a"), d("a/b"), d("a/b/c")], true);
        assert!(matches!(
            r,
            Err(StreamError::TreeLimit {
                flag: "--max-depth",
                ..
            })
        ));
        c.admit(&[d("a"), d("a/b"), d("a/c")], true).unwrap();
        let r = c.admit(&[d("b")], true);
        let Err(e) = r else { panic!() };
        assert!(e.to_string().contains("--max-entries"), "{e}");
    }

    #[test]
    fn manifest_round_trips_and_cuts_fail() {
        let m = Manifest {
            more: true,
            files: vec![d("t"), f("t/a"), e("t/l", EntryKind::Symlink("a".into()))],
        };
        let b = m.encode();
        assert_eq!(Manifest::decode(&b).unwrap(), m);
        for cut in 0..b.len() {
            assert!(Manifest::decode(&b[..cut]).is_err());
        }
        let mut b2 = b.clone();
        b2[0] = 2;
        assert!(Manifest::decode(&b2).is_err());
        b2 = b;
        b2.push(0);
        assert!(Manifest::decode(&b2).is_err());
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    /// A random tree, listed as a sorted depth-first walk lists it.
    fn tree() -> impl Strategy<Value = Vec<FileEntry>> {
        proptest::collection::btree_set(
            proptest::collection::vec(
                prop_oneof![Just("a"), Just("b"), Just("a.b"), Just("c")],
                1..5,
            ),
            0..40,
        )
        .prop_map(|paths| {
            // Every prefix of a path is a directory; the rest are files.
            let mut all = std::collections::BTreeMap::new();
            for p in &paths {
                for k in 1..p.len() {
                    all.insert(p[..k].to_vec(), true);
                }
                all.entry(p.clone()).or_insert(false);
            }
            let mut v: Vec<(Vec<&str>, bool)> = all.into_iter().collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v.into_iter()
                .map(|(p, dir)| FileEntry {
                    name: p.join("/"),
                    size: if dir { 0 } else { p.len() as u64 },
                    mtime: 7,
                    mode: 0o640,
                    kind: if dir { EntryKind::Dir } else { EntryKind::File },
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn any_cut_into_batches_is_admitted_and_round_trips(files in tree(), cut in 1usize..7) {
            let mut c = TreeCheck::new(TreeLimits::default());
            let chunks: Vec<&[FileEntry]> = files.chunks(cut).collect();
            for (i, ch) in chunks.iter().enumerate() {
                let m = Manifest { more: i + 1 < chunks.len(), files: ch.to_vec() };
                let d = Manifest::decode(&m.encode()).unwrap();
                prop_assert_eq!(&d, &m);
                c.admit(&d.files, d.more).unwrap();
            }
            prop_assert_eq!(c.entries(), files.len() as u64);
        }

        #[test]
        fn a_repeated_or_swapped_entry_is_refused(files in tree(), i in any::<prop::sample::Index>(), j in any::<prop::sample::Index>(), cut in 1usize..7) {
            prop_assume!(files.len() >= 2);
            let (i, j) = (i.index(files.len()), j.index(files.len()));
            let mut lie = files.clone();
            if i == j {
                lie.insert(i, files[i].clone());
            } else {
                lie.swap(i, j);
            }
            let mut c = TreeCheck::new(TreeLimits::default());
            let chunks: Vec<&[FileEntry]> = lie.chunks(cut).collect();
            let mut refused = false;
            for (k, ch) in chunks.iter().enumerate() {
                if c.admit(ch, k + 1 < chunks.len()).is_err() {
                    refused = true;
                    break;
                }
            }
            prop_assert!(refused);
        }

        #[test]
        fn manifest_never_panics_on_junk(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(m) = Manifest::decode(&b) {
                prop_assert_eq!(Manifest::decode(&m.encode()).unwrap(), m.clone());
                let _ = TreeCheck::new(TreeLimits::default()).admit(&m.files, m.more);
            }
        }
    }
}
