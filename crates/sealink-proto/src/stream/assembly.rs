//! Where each data record belongs, and which have arrived.
//!
//! Sequence number 0 is the hello; data records follow from 1, file after file, each file cut
//! into records of `record_data` bytes (the last one shorter); the end record comes right after
//! the last data record. A file of unknown size (standard input) can only be the last one; its
//! end is the first short record, or the end record. So a record's sequence number alone fixes
//! its file and offset, stripes need no reordering before writing, and the receiver can tell
//! exactly which records are missing.

use super::StreamError;
use super::body::{End, UNKNOWN_SIZE};
use super::limits::RecordBound;

/// Sequence number of the first data record.
pub const FIRST_DATA_SEQ: u64 = 1;
/// How far past the lowest missing record an unknown-size file may run (bounds the bitmap).
const MAX_AHEAD: u64 = 1 << 24;

/// File index and byte offset of a data record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub file: usize,
    pub offset: u64,
}

/// The mapping from sequence numbers to file positions, shared by sender and receiver.
#[derive(Debug, Clone)]
pub struct Layout {
    record_data: u64,
    /// Sequence number of the first data record ([`FIRST_DATA_SEQ`] for the hello's batch;
    /// a later manifest batch's data follows its manifest record).
    first: u64,
    /// (first data seq, size) per file.
    files: Vec<(u64, u64)>,
}

/// A run of consecutive records of one file that the sender reads, seals and writes together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    pub file: usize,
    pub first_seq: u64,
    pub records: u64,
    pub offset: u64,
    pub bytes: u64,
}

impl Layout {
    pub fn new(record_data: u32, sizes: impl IntoIterator<Item = u64>) -> Self {
        Self::starting_at(FIRST_DATA_SEQ, record_data, sizes)
    }

    /// The layout of a batch whose first data record has sequence number `first`.
    pub fn starting_at(first: u64, record_data: u32, sizes: impl IntoIterator<Item = u64>) -> Self {
        let r = u64::from(record_data.max(1));
        let mut next = first;
        let files = sizes
            .into_iter()
            .map(|size| {
                let base = next;
                if size != UNKNOWN_SIZE {
                    next = next.saturating_add(size.div_ceil(r));
                }
                (base, size)
            })
            .collect();
        Self {
            record_data: r,
            first,
            files,
        }
    }

    pub fn record_data(&self) -> u64 {
        self.record_data
    }

    /// Sequence number of the first data record.
    pub fn first_seq(&self) -> u64 {
        self.first
    }

    /// Sequence number of the end record, given the data records the end says were sent.
    pub fn end_seq(&self, data_records: u64) -> u64 {
        self.first.saturating_add(data_records)
    }

    pub fn file_count(&self) -> usize {
        self.files.len()
    }

    /// Data records in all, if every size is known.
    pub fn known_data_records(&self) -> Option<u64> {
        let mut n = 0u64;
        for &(_, size) in &self.files {
            if size == UNKNOWN_SIZE {
                return None;
            }
            n = n.saturating_add(size.div_ceil(self.record_data));
        }
        Some(n)
    }

    /// The file and offset of data record `seq`, checking that `data_len` is what that record
    /// must hold (a full record, or the remainder for a file's last one; for a file of unknown
    /// size any length from 1 to a full record).
    pub fn place(&self, seq: u64, data_len: usize) -> Result<Placement, StreamError> {
        let i = self.files.partition_point(|&(base, _)| base <= seq);
        if seq < self.first || i == 0 {
            return Err(StreamError::OutOfRange {
                seq,
                why: "not a data sequence number",
            });
        }
        let file = i - 1;
        let (base, size) = self.files[file];
        let k = seq - base;
        let offset = k.saturating_mul(self.record_data);
        let len = data_len as u64;
        let ok = if size == UNKNOWN_SIZE {
            (1..=self.record_data).contains(&len)
        } else {
            if offset >= size {
                return Err(StreamError::OutOfRange {
                    seq,
                    why: "past the end of its file",
                });
            }
            len == self.record_data.min(size - offset)
        };
        if !ok {
            return Err(StreamError::BadLength {
                seq,
                got: data_len,
                expected: if size == UNKNOWN_SIZE {
                    self.record_data as usize
                } else {
                    self.record_data.min(size - offset) as usize
                },
            });
        }
        Ok(Placement { file, offset })
    }

    /// Data records of file `file`, if its size is known.
    pub fn file_records(&self, file: usize) -> Option<u64> {
        self.files
            .get(file)
            .filter(|f| f.1 != UNKNOWN_SIZE)
            .map(|f| f.1.div_ceil(self.record_data))
    }

    /// Checks a ready's held prefixes: one per file, none past its file's records, none for a
    /// file of unknown size; [`UP_TO_DATE`](super::body::UP_TO_DATE) only for a file of known
    /// size (it stands for all of its records).
    pub fn check_held(&self, held: &[u64]) -> Result<(), StreamError> {
        let bad = |why: String| StreamError::MalformedBody { what: "ready", why };
        if held.len() != self.files.len() {
            return Err(bad(format!(
                "{} held counts for {} files",
                held.len(),
                self.files.len()
            )));
        }
        for (i, &h) in held.iter().enumerate() {
            if h == super::body::UP_TO_DATE && self.file_records(i).is_some() {
                continue;
            }
            if h > self.file_records(i).unwrap_or(0) {
                return Err(bad(format!("{h} held records is more than file {i} has")));
            }
        }
        Ok(())
    }

    /// The sender's batches for every file of known size: up to `per_batch` records each,
    /// never spanning two files.
    pub fn batches(&self, per_batch: u64) -> Vec<Batch> {
        self.batches_after(per_batch, &[])
    }

    /// As [`Layout::batches`], leaving out the first `held[i]` records of file `i` (what the
    /// receiver already holds; a missing entry is 0).
    pub fn batches_after(&self, per_batch: u64, held: &[u64]) -> Vec<Batch> {
        let per_batch = per_batch.max(1);
        let mut out = Vec::new();
        for (file, &(base, size)) in self.files.iter().enumerate() {
            if size == UNKNOWN_SIZE {
                continue;
            }
            let records = size.div_ceil(self.record_data);
            let mut k = held.get(file).copied().unwrap_or(0).min(records);
            while k < records {
                let n = per_batch.min(records - k);
                let offset = k * self.record_data;
                out.push(Batch {
                    file,
                    first_seq: base + k,
                    records: n,
                    offset,
                    bytes: (n * self.record_data).min(size - offset),
                });
                k += n;
            }
        }
        out
    }
}

/// The receiver's account of a session's data records.
#[derive(Debug)]
pub struct Assembly {
    layout: Layout,
    /// Most data records this session may carry (bounds `seen` and the key's use).
    bound: RecordBound,
    seen: Vec<u64>,
    /// Every data seq below this has arrived.
    low: u64,
    received: u64,
    bytes: Vec<u64>,
    /// For a last file of unknown size: the short record that ended it, and the highest seq.
    short_end: Option<u64>,
    highest: u64,
}

impl Assembly {
    /// Checks the layout's records against `bound` before allocating anything for them, then
    /// allocates the bitmap for the files of known size (failing cleanly if memory is short).
    pub fn new(layout: Layout, bound: RecordBound) -> Result<Self, StreamError> {
        let known = match layout.known_data_records() {
            Some(n) => n,
            // The records before the last file (of unknown size).
            None => layout
                .files
                .last()
                .map_or(0, |&(base, _)| base - layout.first),
        };
        // The bound counts every data record of the session, earlier batches' included.
        bound.check(layout.first - FIRST_DATA_SEQ + known)?;
        let mut seen = Vec::new();
        reserve_words(&mut seen, bound, known)?;
        seen.resize(known.div_ceil(64) as usize, 0);
        Ok(Self {
            bytes: vec![0; layout.file_count()],
            bound,
            seen,
            low: layout.first,
            layout,
            received: 0,
            short_end: None,
            highest: 0,
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Data records accepted so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Data bytes accepted so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.iter().sum()
    }

    /// Accepts data record `seq` (already authenticated) once; says where to write it.
    pub fn accept(&mut self, seq: u64, data_len: usize) -> Result<Placement, StreamError> {
        let p = self.layout.place(seq, data_len)?;
        let unknown = self.layout.files[p.file].1 == UNKNOWN_SIZE;
        if unknown {
            // Data record `seq` is the session's seq-th: past the bound, the bitmap would grow
            // beyond its memory limit or the key beyond its usage limit.
            self.bound.check(seq)?;
            if seq >= self.low.saturating_add(MAX_AHEAD) {
                return Err(StreamError::OutOfRange {
                    seq,
                    why: "too far ahead of the missing records",
                });
            }
            let short = (data_len as u64) < self.layout.record_data;
            if self.short_end.is_some_and(|s| seq > s) || (short && seq < self.highest) {
                return Err(StreamError::OutOfRange {
                    seq,
                    why: "after the short record that ended the input",
                });
            }
            if short {
                self.short_end = Some(seq);
            }
        }
        let bit = (seq - self.layout.first) as usize;
        let (w, m) = (bit / 64, 1u64 << (bit % 64));
        if w >= self.seen.len() {
            reserve_words(&mut self.seen, self.bound, seq - self.layout.first + 1)?;
            self.seen.resize(w + 1, 0);
        }
        if self.seen[w] & m != 0 {
            return Err(StreamError::Replayed { seq });
        }
        self.seen[w] |= m;
        self.received += 1;
        self.highest = self.highest.max(seq);
        self.bytes[p.file] += data_len as u64;
        while self.is_seen(self.low) {
            self.low += 1;
        }
        Ok(p)
    }

    /// Counts the first `records` data records of file `file` (of known size) as arrived:
    /// what the receiver kept from an earlier session. Returns their bytes.
    pub fn hold(&mut self, file: usize, records: u64) -> Result<u64, StreamError> {
        let total = self.layout.file_records(file).unwrap_or(0);
        if records > total {
            return Err(StreamError::OutOfRange {
                seq: records,
                why: "more held records than the file has",
            });
        }
        let (base, size) = self.layout.files[file];
        // Check first, so that a refusal changes nothing.
        if let Some(seq) = (base..base + records).find(|&s| self.is_seen(s)) {
            return Err(StreamError::Replayed { seq });
        }
        for seq in base..base + records {
            let bit = (seq - self.layout.first) as usize;
            self.seen[bit / 64] |= 1u64 << (bit % 64);
        }
        let bytes = (records * self.layout.record_data).min(size);
        self.received += records;
        self.bytes[file] += bytes;
        while self.is_seen(self.low) {
            self.low += 1;
        }
        Ok(bytes)
    }

    /// How many of file `file`'s records, from its first, have all arrived (0 for a file of
    /// unknown size).
    pub fn held_prefix(&self, file: usize) -> u64 {
        let Some(total) = self.layout.file_records(file) else {
            return 0;
        };
        let base = self.layout.files[file].0;
        // Everything below `low` has arrived; scan on from there a word at a time.
        let mut seq = self.low.max(base);
        while seq < base + total {
            let bit = (seq - self.layout.first) as usize;
            let word = self.seen.get(bit / 64).copied().unwrap_or(0) >> (bit % 64);
            let run = u64::from(word.trailing_ones()).min(64 - (bit % 64) as u64);
            seq += run;
            if run < 64 - (bit % 64) as u64 {
                break;
            }
        }
        seq.min(base + total) - base
    }

    fn is_seen(&self, seq: u64) -> bool {
        let bit = (seq - self.layout.first) as usize;
        self.seen
            .get(bit / 64)
            .is_some_and(|w| w & (1 << (bit % 64)) != 0)
    }

    /// The sequence number an end record must carry, given its body.
    pub fn end_seq(&self, end: &End) -> u64 {
        self.layout.end_seq(end.data_records)
    }

    /// Checks an authenticated end against what arrived: every record present, every file's
    /// size as announced. Call once all stripes have closed.
    pub fn finish(&self, end: &End) -> Result<(), StreamError> {
        let bad = |why: String| StreamError::MalformedBody { what: "end", why };
        if end.sizes.len() != self.layout.file_count() {
            return Err(bad(format!(
                "{} sizes for {} files",
                end.sizes.len(),
                self.layout.file_count()
            )));
        }
        for (i, (&(_, announced), &size)) in self.layout.files.iter().zip(&end.sizes).enumerate() {
            if announced != UNKNOWN_SIZE && announced != size {
                return Err(bad(format!(
                    "file {i} is {size} bytes, announced {announced}"
                )));
            }
        }
        let expected = match self.layout.known_data_records() {
            Some(n) => n,
            None => {
                let last = self.layout.file_count() - 1;
                let base = self.layout.files[last].0 - self.layout.first;
                base + end.sizes[last].div_ceil(self.layout.record_data)
            }
        };
        if end.data_records != expected {
            return Err(bad(format!(
                "{} data records for {expected} announced",
                end.data_records
            )));
        }
        if self.received != expected || self.low != self.layout.first + expected {
            return Err(StreamError::Truncated {
                received: self.received,
                expected,
            });
        }
        if self.bytes != end.sizes {
            return Err(bad("file sizes differ from the data received".into()));
        }
        Ok(())
    }
}

/// Makes room in `seen` for `records` bits, or says the receiver has no memory for them.
fn reserve_words(seen: &mut Vec<u64>, bound: RecordBound, records: u64) -> Result<(), StreamError> {
    let words = usize::try_from(records.div_ceil(64)).unwrap_or(usize::MAX);
    seen.try_reserve_exact(words.saturating_sub(seen.len()))
        .map_err(|_| StreamError::LimitExceeded {
            needed: records,
            limit: bound.max,
            why: "the receiver is short of memory for its record bitmap",
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::limits::StreamLimits;
    use sealink_crypto::SuiteId;

    fn new(layout: Layout) -> Assembly {
        Assembly::new(
            layout,
            RecordBound {
                max: 1 << 20,
                why: "test",
            },
        )
        .unwrap()
    }

    #[test]
    fn layout_places_records_and_checks_lengths() {
        let l = Layout::new(10, [25, 0, 10]);
        assert_eq!(l.known_data_records(), Some(4));
        assert_eq!(l.place(1, 10).unwrap(), Placement { file: 0, offset: 0 });
        assert_eq!(
            l.place(3, 5).unwrap(),
            Placement {
                file: 0,
                offset: 20
            }
        );
        assert!(l.place(3, 10).is_err());
        assert_eq!(l.place(4, 10).unwrap(), Placement { file: 2, offset: 0 });
        assert!(l.place(0, 10).is_err());
        assert!(l.place(5, 10).is_err());
        let b = l.batches(2);
        assert_eq!(b.len(), 3);
        assert_eq!((b[1].first_seq, b[1].records, b[1].bytes), (3, 1, 5));
        assert_eq!((b[2].file, b[2].first_seq), (2, 4));
    }

    #[test]
    fn assembly_detects_duplicates_gaps_and_truncation() {
        let mut a = new(Layout::new(10, [25]));
        let end = End {
            data_records: 3,
            sizes: vec![25],
            hashes: vec![],
            left_out: vec![],
        };
        a.accept(3, 5).unwrap();
        a.accept(1, 10).unwrap();
        assert_eq!(a.accept(1, 10), Err(StreamError::Replayed { seq: 1 }));
        assert!(matches!(a.finish(&end), Err(StreamError::Truncated { .. })));
        a.accept(2, 10).unwrap();
        a.finish(&end).unwrap();
        assert_eq!(a.end_seq(&end), 4);
    }

    #[test]
    fn a_later_batch_starts_where_the_previous_ended() {
        // Batch 0's end was seq 4, batch 1's manifest seq 5: its data starts at 6.
        let mut a = new(Layout::starting_at(6, 10, [15, 0, 10]));
        assert!(a.accept(5, 10).is_err(), "the manifest's seq is no data");
        assert_eq!(
            a.accept(7, 5).unwrap(),
            Placement {
                file: 0,
                offset: 10
            }
        );
        a.accept(6, 10).unwrap();
        a.accept(8, 10).unwrap();
        let end = End {
            data_records: 3,
            sizes: vec![15, 0, 10],
            hashes: vec![],
            left_out: vec![],
        };
        assert_eq!(a.end_seq(&end), 9);
        a.finish(&end).unwrap();
        assert_eq!(a.held_prefix(0), 2);
    }

    #[test]
    fn unknown_size_ends_at_the_short_record() {
        let mut a = new(Layout::new(10, [UNKNOWN_SIZE]));
        a.accept(2, 10).unwrap();
        a.accept(3, 4).unwrap();
        assert!(a.accept(4, 10).is_err(), "nothing after the short record");
        assert!(a.accept(1, 3).is_err(), "a second short record before it");
        a.accept(1, 10).unwrap();
        a.finish(&End {
            data_records: 3,
            sizes: vec![24],
            hashes: vec![],
            left_out: vec![],
        })
        .unwrap();
        // An end that claims more than arrived is a truncation.
        let mut b = new(Layout::new(10, [UNKNOWN_SIZE]));
        b.accept(1, 10).unwrap();
        assert!(
            b.finish(&End {
                data_records: 2,
                sizes: vec![20],
                hashes: vec![],
                left_out: vec![],
            })
            .is_err()
        );
    }

    #[test]
    fn held_prefixes_are_skipped_counted_and_measured() {
        let l = Layout::new(10, [25, 200, UNKNOWN_SIZE]);
        assert_eq!(l.file_records(1), Some(20));
        assert_eq!(l.file_records(2), None);
        l.check_held(&[3, 20, 0]).unwrap();
        for bad in [&[3u64, 20][..], &[4, 0, 0], &[0, 21, 0], &[0, 0, 1]] {
            assert!(l.check_held(bad).is_err(), "{bad:?}");
        }
        let b = l.batches_after(8, &[3, 5]);
        assert!(b.iter().all(|b| b.file == 1));
        assert_eq!((b[0].first_seq, b[0].offset, b[0].records), (4 + 5, 50, 8));
        assert_eq!(b.iter().map(|b| b.records).sum::<u64>(), 15);

        let mut a = new(Layout::new(10, [25, 2000]));
        assert_eq!(a.hold(1, 5).unwrap(), 50);
        assert!(a.hold(0, 4).is_err(), "more than the file has");
        assert_eq!(a.held_prefix(0), 0);
        assert_eq!(a.held_prefix(1), 5);
        // A held record sent again is a replay.
        assert_eq!(a.accept(4, 10), Err(StreamError::Replayed { seq: 4 }));
        a.accept(1, 10).unwrap();
        a.accept(3, 5).unwrap();
        assert_eq!(a.held_prefix(0), 1);
        a.accept(2, 10).unwrap();
        assert_eq!(a.held_prefix(0), 3);
        // Past a word boundary, and stopping at the first gap.
        for seq in 9..4 + 100 {
            a.accept(seq, 10).unwrap();
        }
        assert_eq!(a.held_prefix(1), 100);
        for seq in 4 + 101..4 + 200 {
            a.accept(seq, 10).unwrap();
        }
        assert_eq!(a.held_prefix(1), 100);
        a.accept(4 + 100, 10).unwrap();
        assert_eq!(a.held_prefix(1), 200);
        a.finish(&End {
            data_records: 203,
            sizes: vec![25, 2000],
            hashes: vec![],
            left_out: vec![],
        })
        .unwrap();
    }

    #[test]
    fn huge_announcements_are_refused_before_any_allocation() {
        let limits = StreamLimits::default();
        for (record_data, sizes) in [
            (512u32, vec![1u64 << 62]),
            (512, vec![1 << 20, 1 << 60, 7]),
            (1 << 20, vec![u64::MAX - 1]),
            (512, vec![u64::MAX - 1, u64::MAX - 1, UNKNOWN_SIZE]),
            // Even the smallest records cannot reach the limit through the layout's
            // arithmetic (it saturates rather than wraps).
            (1, vec![u64::MAX - 1; 3]),
        ] {
            let layout = Layout::new(record_data, sizes.iter().copied());
            let bound = limits.bound(SuiteId::Aes128Gcm, record_data);
            match Assembly::new(layout, bound) {
                Err(StreamError::LimitExceeded { needed, limit, .. }) => {
                    assert!(needed > limit && limit <= 1 << 28, "{needed} {limit}")
                }
                other => panic!("{record_data} {sizes:?}: {other:?}"),
            }
        }
        // Just within the bitmap limit: accepted, and the bitmap is the limit's size.
        let bound = limits.bound(SuiteId::ChaCha20Poly1305, 512);
        let a = Assembly::new(Layout::new(512, [512 << 28]), bound).unwrap();
        assert_eq!(a.seen.len() * 8, limits.max_bitmap_bytes as usize);
        assert!(Assembly::new(Layout::new(512, [(512 << 28) + 1]), bound).is_err());
    }

    #[test]
    fn key_limit_is_enforced_for_known_and_unknown_sizes() {
        let limits = StreamLimits {
            key_data_records: Some(4),
            ..StreamLimits::default()
        };
        let bound = limits.bound(SuiteId::Aes128Gcm, 10);
        assert_eq!(bound.max, 4);
        // Known sizes: four records fit, five are refused at once.
        assert!(Assembly::new(Layout::new(10, [40]), bound).is_ok());
        assert!(matches!(
            Assembly::new(Layout::new(10, [30, 11]), bound),
            Err(StreamError::LimitExceeded {
                needed: 5,
                limit: 4,
                ..
            })
        ));
        // Unknown size: refused at the first record past the limit, wherever it comes from.
        let mut a = Assembly::new(Layout::new(10, [20, UNKNOWN_SIZE]), bound).unwrap();
        for seq in [1, 2, 3, 4] {
            a.accept(seq, 10).unwrap();
        }
        assert!(matches!(
            a.accept(5, 10),
            Err(StreamError::LimitExceeded {
                needed: 5,
                limit: 4,
                ..
            })
        ));
        assert!(matches!(
            a.accept(1 << 40, 3),
            Err(StreamError::LimitExceeded { .. })
        ));
        assert_eq!(a.received(), 4);
        // Known files before an unknown one count too.
        assert!(Assembly::new(Layout::new(10, [50, UNKNOWN_SIZE]), bound).is_err());
    }
}
