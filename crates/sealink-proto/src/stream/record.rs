//! The record: a 16-byte header, then the sealed body (data and a 16-byte tag).
//!
//! ```text
//! 0  u8   version (1)
//! 1  u8   type (1 hello, 2 data, 3 end, 4 done, 5 abort, 6 ready, 7 manifest)
//! 2  u8   scope (1 authenticate only, 2 encrypt)
//! 3  u8   reserved, 0
//! 4  u32  body length, little-endian (data + tag)
//! 8  u64  sequence number, little-endian: the AEAD nonce, and for data the position in the stream
//! ```
//! The whole header is the AEAD's associated data, so neither the type, the length nor the
//! position of a record can be changed without the tag failing.

use sealink_crypto::{PacketKey, Scope};

use super::StreamError;

pub const RECORD_HEADER_LEN: usize = 16;
pub const VERSION: u8 = 1;
/// Tag bytes the stream suites (AEADs only) add to each body.
pub const TAG_LEN: usize = 16;
/// Most data bytes in one record (records are sized by the sender, default 16 KiB).
pub const MAX_RECORD_DATA: usize = 1 << 20;
/// Fewest data bytes in a full record. Tiny records would let a hello announce a bitmap bit
/// (and a record's 32 bytes of overhead) per byte of data.
pub const MIN_RECORD_DATA: usize = 512;
/// Longest body a receiver accepts: bounds the memory one record header can make us reserve.
pub const MAX_BODY_LEN: usize = MAX_RECORD_DATA + TAG_LEN;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordType {
    Hello = 1,
    Data = 2,
    End = 3,
    Done = 4,
    Abort = 5,
    /// The receiver accepted the hello: data may flow.
    Ready = 6,
    /// A later batch of the manifest (stream protocol 2).
    Manifest = 7,
}

impl RecordType {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Hello,
            2 => Self::Data,
            3 => Self::End,
            4 => Self::Done,
            5 => Self::Abort,
            6 => Self::Ready,
            7 => Self::Manifest,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub kind: RecordType,
    pub scope: Scope,
    /// Sealed body length (data + tag).
    pub body_len: u32,
    pub seq: u64,
}

impl RecordHeader {
    pub fn encode(&self, out: &mut [u8; RECORD_HEADER_LEN]) {
        out[0] = VERSION;
        out[1] = self.kind as u8;
        out[2] = self.scope as u8;
        out[3] = 0;
        out[4..8].copy_from_slice(&self.body_len.to_le_bytes());
        out[8..16].copy_from_slice(&self.seq.to_le_bytes());
    }

    /// Parses and range-checks a header; never panics on any input.
    pub fn parse(b: &[u8]) -> Result<Self, StreamError> {
        let b: &[u8; RECORD_HEADER_LEN] = b
            .get(..RECORD_HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or(StreamError::MalformedHeader("short header"))?;
        if b[0] != VERSION {
            return Err(StreamError::MalformedHeader("unsupported version"));
        }
        let kind =
            RecordType::from_u8(b[1]).ok_or(StreamError::MalformedHeader("unknown record type"))?;
        let scope = match Scope::from_u8(b[2]) {
            Some(s @ (Scope::AuthOnly | Scope::Encrypt)) => s,
            _ => return Err(StreamError::MalformedHeader("scope")),
        };
        if b[3] != 0 {
            return Err(StreamError::MalformedHeader("reserved byte set"));
        }
        let body_len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        if (body_len as usize) < TAG_LEN || body_len as usize > MAX_BODY_LEN {
            return Err(StreamError::MalformedHeader("body length out of range"));
        }
        let seq = u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
        Ok(Self {
            kind,
            scope,
            body_len,
            seq,
        })
    }

    /// Header plus body.
    pub fn record_len(&self) -> usize {
        RECORD_HEADER_LEN + self.body_len as usize
    }

    /// Data bytes in the body.
    pub fn data_len(&self) -> usize {
        self.body_len as usize - TAG_LEN
    }
}

/// Bytes a record with `data_len` data bytes takes on the wire.
pub const fn wire_len(data_len: usize) -> usize {
    RECORD_HEADER_LEN + data_len + TAG_LEN
}

/// Seals a record in place: `buf[RECORD_HEADER_LEN..][..data_len]` holds the data; writes the
/// header in front and the tag behind. Returns the record's wire length. `buf` must hold
/// [`wire_len`]`(data_len)` bytes.
pub fn seal_record(
    key: &PacketKey,
    buf: &mut [u8],
    kind: RecordType,
    scope: Scope,
    seq: u64,
    data_len: usize,
) -> Result<usize, StreamError> {
    if data_len > MAX_RECORD_DATA || buf.len() < wire_len(data_len) {
        return Err(StreamError::MalformedBody {
            what: "record to seal",
            why: format!("{data_len} data bytes in a {} byte buffer", buf.len()),
        });
    }
    let hdr = RecordHeader {
        kind,
        scope,
        body_len: (data_len + TAG_LEN) as u32,
        seq,
    };
    let mut h = [0u8; RECORD_HEADER_LEN];
    hdr.encode(&mut h);
    buf[..RECORD_HEADER_LEN].copy_from_slice(&h);
    let n = key.seal_contiguous(seq, scope, buf, RECORD_HEADER_LEN, data_len)?;
    Ok(RECORD_HEADER_LEN + n)
}

/// Opens the record `buf` (exactly `hdr.record_len()` bytes, header first) in place; the data
/// is then at `buf[RECORD_HEADER_LEN..][..hdr.data_len()]`.
pub fn open_record(
    key: &PacketKey,
    hdr: &RecordHeader,
    buf: &mut [u8],
) -> Result<usize, StreamError> {
    if buf.len() != hdr.record_len() {
        return Err(StreamError::MalformedHeader("record length"));
    }
    key.open_contiguous(
        hdr.seq,
        hdr.scope,
        buf,
        RECORD_HEADER_LEN,
        hdr.body_len as usize,
    )
    .map_err(|_| StreamError::AuthFailed { seq: hdr.seq })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sealink_crypto::SuiteId;

    fn key() -> PacketKey {
        PacketKey::new(SuiteId::Aes128Gcm, &[7u8; 16], false).unwrap()
    }

    #[test]
    fn seal_open_round_trip_both_scopes() {
        for scope in [Scope::Encrypt, Scope::AuthOnly] {
            let data = b"hello, stream".to_vec();
            let mut buf = vec![0u8; wire_len(data.len())];
            buf[RECORD_HEADER_LEN..][..data.len()].copy_from_slice(&data);
            let n = seal_record(&key(), &mut buf, RecordType::Data, scope, 9, data.len()).unwrap();
            assert_eq!(n, buf.len());
            let enc = buf[RECORD_HEADER_LEN..][..data.len()] != data[..];
            assert_eq!(enc, scope == Scope::Encrypt);
            let hdr = RecordHeader::parse(&buf).unwrap();
            assert_eq!(
                (hdr.seq, hdr.kind, hdr.data_len()),
                (9, RecordType::Data, data.len())
            );
            let m = open_record(&key(), &hdr, &mut buf).unwrap();
            assert_eq!(&buf[RECORD_HEADER_LEN..][..m], &data[..]);
        }
    }

    #[test]
    fn header_fields_are_authenticated() {
        let mut buf = vec![0u8; wire_len(100)];
        seal_record(&key(), &mut buf, RecordType::Data, Scope::Encrypt, 3, 100).unwrap();
        // Flip the type (data -> end), and separately the sequence number.
        for (i, x) in [(1usize, 1u8), (8, 1)] {
            let mut b = buf.clone();
            b[i] ^= x;
            if let Ok(h) = RecordHeader::parse(&b) {
                assert!(open_record(&key(), &h, &mut b).is_err());
            }
        }
    }

    #[test]
    fn parse_rejects_bad_headers() {
        let mut h = [0u8; RECORD_HEADER_LEN];
        RecordHeader {
            kind: RecordType::Data,
            scope: Scope::Encrypt,
            body_len: 32,
            seq: 1,
        }
        .encode(&mut h);
        assert!(RecordHeader::parse(&h).is_ok());
        assert!(RecordHeader::parse(&h[..15]).is_err());
        for (i, v) in [(0, 2u8), (1, 9), (2, 0), (2, 3), (3, 1), (4, 1), (7, 0x80)] {
            let mut b = h;
            b[i] = v;
            assert!(RecordHeader::parse(&b).is_err(), "byte {i} = {v}");
        }
    }
}
