//! How much one stream session may carry: the receiver's record bitmap is bounded in memory,
//! and the sender's record key is bounded by its AEAD's usage limit. A session that would pass
//! either is refused before the first data record (known sizes) or aborted when it gets there
//! (standard input); stream mode never rekeys within a session.

use sealink_crypto::SuiteId;

use super::StreamError;

/// Default cap on the receiver's record bitmap (one bit per data record): 32 MiB, so 2^28
/// records, 4 TiB at the default 16 KiB records and 128 GiB at the smallest.
pub const DEFAULT_MAX_BITMAP_BYTES: u64 = 32 << 20;

/// AES-GCM: at most 2^36 AES blocks under one key, counting each record's data blocks plus one
/// for its tag ([`SuiteId::aead_block_limit`]).
const AES_GCM_MAX_BLOCKS: u64 = match SuiteId::Aes128Gcm.aead_block_limit() {
    Some(b) => b,
    None => 0,
};
/// Blocks set aside for the records a sender seals besides data: the hello, the end and an
/// abort, each at most a largest body.
const CONTROL_BLOCKS: u64 = 3 * ((super::record::MAX_BODY_LEN as u64).div_ceil(16) + 1);
/// ChaCha20-Poly1305's confidentiality bound does not depend on the amount sealed; its limit is
/// the nonce space. Stay far inside the 64-bit sequence numbers (the top one is the sender's
/// abort).
const CHACHA20_POLY1305_MAX_RECORDS: u64 = 1 << 62;

const KEY_WHY: &str = "the usage limit of the AEAD key for this suite and record size; send \
    less per session, use larger records or chacha20-poly1305";
const BITMAP_WHY: &str = "the receiver's memory limit for its record bitmap; use larger \
    records or send less per session";

/// The most data records a session may carry, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordBound {
    pub max: u64,
    pub why: &'static str,
}

impl RecordBound {
    /// Most data records one key may seal for `suite` with records of `record_data` bytes, or
    /// `key_data_records` if given (a tighter value, for tests and cautious callers).
    pub fn key(suite: SuiteId, record_data: u32, key_data_records: Option<u64>) -> Self {
        let aead = match suite {
            SuiteId::ChaCha20Poly1305 => CHACHA20_POLY1305_MAX_RECORDS,
            // AES-GCM, and (conservatively) anything else.
            _ => (AES_GCM_MAX_BLOCKS - CONTROL_BLOCKS) / (u64::from(record_data).div_ceil(16) + 1),
        };
        Self {
            max: key_data_records.map_or(aead, |k| k.min(aead)),
            why: KEY_WHY,
        }
    }

    /// `Ok` if `needed` data records fit.
    pub fn check(&self, needed: u64) -> Result<(), StreamError> {
        if needed <= self.max {
            Ok(())
        } else {
            Err(self.exceeded(needed))
        }
    }

    pub fn exceeded(&self, needed: u64) -> StreamError {
        StreamError::LimitExceeded {
            needed,
            limit: self.max,
            why: self.why,
        }
    }
}

/// What a receiver accepts from one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Most bytes of record bitmap one session may make the receiver hold.
    pub max_bitmap_bytes: u64,
    /// Most data records one key may seal; `None`: the suite's AEAD limit (see
    /// [`RecordBound::key`]).
    pub key_data_records: Option<u64>,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            max_bitmap_bytes: DEFAULT_MAX_BITMAP_BYTES,
            key_data_records: None,
        }
    }
}

impl StreamLimits {
    /// The tighter of the key's limit and the bitmap's for a session with `suite` and records
    /// of `record_data` bytes.
    pub fn bound(&self, suite: SuiteId, record_data: u32) -> RecordBound {
        let key = RecordBound::key(suite, record_data, self.key_data_records);
        let bitmap = self.max_bitmap_bytes.saturating_mul(8);
        if key.max <= bitmap {
            key
        } else {
            RecordBound {
                max: bitmap,
                why: BITMAP_WHY,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::record::{MAX_RECORD_DATA, MIN_RECORD_DATA};

    #[test]
    fn aes_gcm_key_limit_counts_blocks() {
        // 16 KiB records: 1024 data blocks + 1 each, about 2^26 records (1 TiB).
        let b = RecordBound::key(SuiteId::Aes128Gcm, 16384, None);
        assert!(b.max > 65_000_000 && b.max < 1 << 26, "{}", b.max);
        // Whatever the record size, the blocks sealed stay within 2^36.
        for r in [MIN_RECORD_DATA as u32, 1000, 16384, MAX_RECORD_DATA as u32] {
            let b = RecordBound::key(SuiteId::Aes256Gcm, r, None);
            let blocks = b.max * (u64::from(r).div_ceil(16) + 1) + CONTROL_BLOCKS;
            assert!(blocks <= AES_GCM_MAX_BLOCKS, "{r}: {blocks}");
        }
        assert_eq!(
            RecordBound::key(SuiteId::ChaCha20Poly1305, 16384, None).max,
            CHACHA20_POLY1305_MAX_RECORDS
        );
        // An override can only tighten.
        assert_eq!(
            RecordBound::key(SuiteId::Aes128Gcm, 16384, Some(10)).max,
            10
        );
        assert_eq!(
            RecordBound::key(SuiteId::Aes128Gcm, 16384, Some(u64::MAX)),
            RecordBound::key(SuiteId::Aes128Gcm, 16384, None)
        );
    }

    #[test]
    fn the_tighter_limit_wins_and_says_so() {
        let l = StreamLimits::default();
        // ChaCha: the bitmap (2^28 records) is the limit.
        let b = l.bound(SuiteId::ChaCha20Poly1305, 16384);
        assert_eq!((b.max, b.why), (1 << 28, BITMAP_WHY));
        // AES-GCM with 512-byte records: the key allows ~2^31, the bitmap 2^28.
        assert_eq!(l.bound(SuiteId::Aes128Gcm, 512).why, BITMAP_WHY);
        // AES-GCM with 16 KiB records: the key (~2^26) is tighter.
        assert_eq!(l.bound(SuiteId::Aes128Gcm, 16384).why, KEY_WHY);
        let b = StreamLimits {
            key_data_records: Some(5),
            ..l
        }
        .bound(SuiteId::ChaCha20Poly1305, 512);
        assert_eq!(b.max, 5);
        assert!(b.check(5).is_ok());
        assert!(matches!(
            b.check(6),
            Err(StreamError::LimitExceeded {
                needed: 6,
                limit: 5,
                ..
            })
        ));
    }
}
