//! Data records on the wire: the sender's batch, sealed in place and sent in one write, and the
//! receiver's chunked reader, which opens records where they landed. `send` and the receiver
//! use these, and so does `sealink-lab bench socket`, so the bench measures this code.
//!
//! The record format itself (header, sealing, opening) is `sealink_proto::stream::record`.

use std::io::{self, Read};

use sealink_crypto::{PacketKey, Scope};
use sealink_proto::stream::StreamError;
use sealink_proto::stream::record::{
    self, MAX_BODY_LEN, RECORD_HEADER_LEN, RecordHeader, RecordType,
};

/// A batch of data records laid out as the wire wants them, `[header | data | tag]` per slot.
/// The caller puts data into the payload slots; [`RecordBatch::seal`] seals every record where
/// it lies and returns the bytes for one write. No record is copied.
#[derive(Debug)]
pub struct RecordBatch {
    buf: Vec<u8>,
    record_data: usize,
}

impl RecordBatch {
    /// Room for `records` (at least one) records of `record_data` data bytes each.
    pub fn new(record_data: usize, records: usize) -> Self {
        RecordBatch {
            buf: vec![0u8; record::wire_len(record_data) * records.max(1)],
            record_data,
        }
    }

    /// Records the batch holds.
    pub fn capacity(&self) -> usize {
        self.buf.len() / record::wire_len(self.record_data)
    }

    /// The payload slots, `record_data` bytes each, in record order.
    pub fn payloads_mut(&mut self) -> impl Iterator<Item = &mut [u8]> {
        let n = self.record_data;
        self.buf
            .chunks_mut(record::wire_len(n))
            .map(move |slot| &mut slot[RECORD_HEADER_LEN..][..n])
    }

    /// Seals data records `first_seq, first_seq + 1, ...` whose payload slots hold `lens[k]`
    /// bytes each, and returns them back to back, ready for one write. Only the last record
    /// may be short (a short one in the middle would leave a gap on the wire).
    pub fn seal(
        &mut self,
        key: &PacketKey,
        scope: Scope,
        first_seq: u64,
        lens: &[usize],
    ) -> Result<&[u8], StreamError> {
        let short_inside = lens.iter().rev().skip(1).any(|&n| n != self.record_data);
        let last_too_long = lens.last().is_some_and(|&n| n > self.record_data);
        if lens.len() > self.capacity() || short_inside || last_too_long {
            return Err(self.does_not_fit(lens));
        }
        let slot = record::wire_len(self.record_data);
        let mut total = 0;
        for (k, (s, &n)) in self.buf.chunks_mut(slot).zip(lens).enumerate() {
            total += record::seal_record(key, s, RecordType::Data, scope, first_seq + k as u64, n)?;
        }
        Ok(&self.buf[..total])
    }
}

impl RecordBatch {
    /// The refusal of records of `lens` bytes that this batch cannot seal.
    fn does_not_fit(&self, lens: &[usize]) -> StreamError {
        StreamError::MalformedBody {
            what: "batch to seal",
            why: format!(
                "{} records of {lens:?} bytes in a batch of {} records of {} bytes",
                lens.len(),
                self.capacity(),
                self.record_data
            ),
        }
    }

    /// As [`RecordBatch::seal`], for records of several files (a run of small files): any
    /// record may be short. Each is sealed in its slot, then moved down against the one before
    /// if a short one left a gap, so they still go back to back in one write; only the records
    /// after a short one are moved (small ones, of small files).
    pub fn seal_packed(
        &mut self,
        key: &PacketKey,
        scope: Scope,
        first_seq: u64,
        lens: &[usize],
    ) -> Result<&[u8], StreamError> {
        if lens.len() > self.capacity() || lens.iter().any(|&n| n > self.record_data) {
            return Err(self.does_not_fit(lens));
        }
        let slot = record::wire_len(self.record_data);
        let mut out = 0;
        for (k, &n) in lens.iter().enumerate() {
            let start = k * slot;
            let len = record::seal_record(
                key,
                &mut self.buf[start..start + slot],
                RecordType::Data,
                scope,
                first_seq + k as u64,
                n,
            )?;
            if out != start {
                self.buf.copy_within(start..start + len, out);
            }
            out += len;
        }
        Ok(&self.buf[..out])
    }
}

/// One record opened in a [`RecordReader`]'s buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    pub header: RecordHeader,
    /// Where its data lies in [`RecordReader::buffer`], valid until the next `fill`.
    pub start: usize,
    pub len: usize,
}

/// Reads records from a byte stream in large chunks and opens each in place.
#[derive(Debug)]
pub struct RecordReader {
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    max_record: usize,
}

impl RecordReader {
    /// Buffers `capacity` bytes; refuses records longer than `max_record` bytes on the wire,
    /// which is capped at half the buffer (so that a partial record and a whole one always fit)
    /// and at the format's longest record.
    pub fn new(capacity: usize, max_record: usize) -> Self {
        let capacity = capacity.max(2 * record::wire_len(0));
        RecordReader {
            buf: vec![0u8; capacity],
            lo: 0,
            hi: 0,
            max_record: max_record
                .min(capacity / 2)
                .min(RECORD_HEADER_LEN + MAX_BODY_LEN),
        }
    }

    /// The next whole record in the buffer, opened in place with `key`; `None` when no whole
    /// record is buffered (call [`RecordReader::fill`]). A bad header, a record longer than
    /// allowed or a failed tag is an error.
    pub fn next_record(&mut self, key: &PacketKey) -> Result<Option<Opened>, StreamError> {
        if self.hi - self.lo < RECORD_HEADER_LEN {
            return Ok(None);
        }
        let header = RecordHeader::parse(&self.buf[self.lo..self.hi])?;
        let n = header.record_len();
        if n > self.max_record {
            return Err(StreamError::MalformedHeader("record longer than allowed"));
        }
        if self.hi - self.lo < n {
            return Ok(None);
        }
        let len = record::open_record(key, &header, &mut self.buf[self.lo..self.lo + n])?;
        let start = self.lo + RECORD_HEADER_LEN;
        self.lo += n;
        Ok(Some(Opened { header, start, len }))
    }

    /// The buffer that [`Opened`] positions refer to.
    pub fn buffer(&self) -> &[u8] {
        &self.buf
    }

    /// The data of a record just opened.
    pub fn data(&self, r: &Opened) -> &[u8] {
        &self.buf[r.start..r.start + r.len]
    }

    /// Bytes of an incomplete record held: at the end of the stream, a record was cut short.
    pub fn pending(&self) -> usize {
        self.hi - self.lo
    }

    /// One `read` into the free part of the buffer; `Ok(0)` is the end of the stream. First
    /// moves a partial record to the front, but only when the rest of the buffer cannot hold a
    /// whole record: at most one record is copied per buffer's worth read. Records opened
    /// before are no longer valid afterwards.
    pub fn fill<R: Read + ?Sized>(&mut self, r: &mut R) -> io::Result<usize> {
        if self.lo == self.hi {
            (self.lo, self.hi) = (0, 0);
        } else if self.buf.len() - self.hi < self.max_record {
            self.buf.copy_within(self.lo..self.hi, 0);
            (self.lo, self.hi) = (0, self.hi - self.lo);
        }
        let n = r.read(&mut self.buf[self.hi..])?;
        self.hi += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sealink_crypto::SuiteId;

    fn key() -> PacketKey {
        PacketKey::new(SuiteId::Aes128Gcm, &[7u8; 16], false).unwrap()
    }

    /// Hands out at most `step` bytes per read, as a slow socket does.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn packed_records_of_small_files_go_back_to_back_and_open() {
        let lens = [3usize, 512, 0, 7, 512, 1];
        let mut b = RecordBatch::new(512, 8);
        for (i, p) in b.payloads_mut().enumerate() {
            p.fill(i as u8);
        }
        let wire = b
            .seal_packed(&key(), Scope::Encrypt, 40, &lens)
            .unwrap()
            .to_vec();
        let want: usize = lens.iter().map(|&n| record::wire_len(n)).sum();
        assert_eq!(wire.len(), want);
        let mut r = RecordReader::new(1 << 16, 1 << 15);
        let mut src = &wire[..];
        r.fill(&mut src).unwrap();
        for (i, &n) in lens.iter().enumerate() {
            let o = r.next_record(&key()).unwrap().unwrap();
            assert_eq!((o.header.seq, o.len), (40 + i as u64, n));
            assert!(r.data(&o).iter().all(|&x| x == i as u8));
        }
        assert!(b.seal_packed(&key(), Scope::Encrypt, 1, &[513]).is_err());
        assert!(b.seal_packed(&key(), Scope::Encrypt, 1, &[1; 9]).is_err());
    }

    /// A batch of `lens` records from `first_seq`, payload byte `k` of record `i` = `i + k`.
    fn sealed(record_data: usize, first_seq: u64, lens: &[usize]) -> Vec<u8> {
        let mut b = RecordBatch::new(record_data, lens.len());
        for (i, p) in b.payloads_mut().enumerate() {
            for (k, x) in p.iter_mut().enumerate() {
                *x = (i + k) as u8;
            }
        }
        b.seal(&key(), Scope::Encrypt, first_seq, lens)
            .unwrap()
            .to_vec()
    }

    #[test]
    fn batch_is_the_records_sealed_one_by_one() {
        let lens = [600, 600, 100];
        let got = sealed(600, 5, &lens);
        let mut want = Vec::new();
        for (i, &n) in lens.iter().enumerate() {
            let mut rec = vec![0u8; record::wire_len(n)];
            for k in 0..n {
                rec[RECORD_HEADER_LEN + k] = (i + k) as u8;
            }
            let m = record::seal_record(
                &key(),
                &mut rec,
                RecordType::Data,
                Scope::Encrypt,
                5 + i as u64,
                n,
            )
            .unwrap();
            want.extend_from_slice(&rec[..m]);
        }
        assert_eq!(got, want);
    }

    #[test]
    fn batch_refuses_gaps_and_overflow() {
        let mut b = RecordBatch::new(600, 2);
        for lens in [&[100, 600][..], &[600, 601], &[600, 600, 600]] {
            assert!(
                matches!(
                    b.seal(&key(), Scope::Encrypt, 0, lens),
                    Err(StreamError::MalformedBody { .. })
                ),
                "{lens:?}"
            );
        }
    }

    #[test]
    fn reader_opens_records_however_the_bytes_arrive() {
        let wire = sealed(600, 0, &[600, 600, 600, 7]);
        for step in [1, 17, 600, 1 << 20] {
            let mut r = RecordReader::new(2048, usize::MAX);
            let mut src = Trickle { data: &wire, step };
            let mut got = Vec::new();
            loop {
                while let Some(o) = r.next_record(&key()).unwrap() {
                    assert_eq!(o.header.kind, RecordType::Data);
                    got.push((o.header.seq, r.data(&o).to_vec()));
                }
                if r.fill(&mut src).unwrap() == 0 {
                    break;
                }
            }
            assert_eq!(r.pending(), 0);
            let seqs: Vec<u64> = got.iter().map(|g| g.0).collect();
            assert_eq!(seqs, [0, 1, 2, 3], "step {step}");
            assert_eq!(got[3].1, (3..10).map(|k| k as u8).collect::<Vec<_>>());
        }
    }

    #[test]
    fn reader_refuses_long_forged_and_cut_records() {
        let wire = sealed(600, 0, &[600]);
        // Longer than the caller allows.
        let mut r = RecordReader::new(1 << 16, record::wire_len(599));
        r.fill(&mut &wire[..]).unwrap();
        assert!(matches!(
            r.next_record(&key()),
            Err(StreamError::MalformedHeader(_))
        ));
        // A flipped tag bit.
        let mut bad = wire.clone();
        *bad.last_mut().unwrap() ^= 1;
        let mut r = RecordReader::new(1 << 16, usize::MAX);
        r.fill(&mut &bad[..]).unwrap();
        assert!(matches!(
            r.next_record(&key()),
            Err(StreamError::AuthFailed { seq: 0 })
        ));
        // Cut short: no record, bytes left over at the end of the stream.
        let mut r = RecordReader::new(1 << 16, usize::MAX);
        let mut src = &wire[..wire.len() - 1];
        while r.fill(&mut src).unwrap() > 0 {}
        assert_eq!(r.next_record(&key()).unwrap(), None);
        assert_eq!(r.pending(), wire.len() - 1);
    }
}
