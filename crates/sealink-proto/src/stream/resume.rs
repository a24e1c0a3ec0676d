//! The receiver's record map of an interrupted transfer: which prefix of a file it holds in its
//! hidden part file, and which file (owner, name, size, mtime) that prefix belongs to.
//!
//! ```text
//! magic "SLRMAP01" (8) | owner public key (32) | size u64 | mtime u64 | held bytes u64
//! | name length u16 | name | SHA-256 of everything before (32)
//! ```
//!
//! Nothing in a map is trusted: a map that does not parse, whose checksum or binding does not
//! match, or that claims more than the file holds is ignored (the file starts over), and the
//! held data is covered by the sender's whole-file SHA-256 before the file is committed.

use sealink_crypto::hash::{SHA256_LEN, Sha256, sha256};

use super::body::{UNKNOWN_SIZE, valid_path};

const MAGIC: &[u8; 8] = b"SLRMAP01";
/// Longest map: fixed fields, the longest path, the checksum.
pub const MAX_MAP_LEN: usize = 8 + 32 + 24 + 2 + super::body::MAX_PATH_LEN + SHA256_LEN;
/// Prefix of resume state file names (hidden; never a name a transfer can store under, as
/// every name is stored under its own final name only on commit).
pub const STATE_PREFIX: &str = ".sealink-resume-";

/// Why a record map was ignored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MapError {
    #[error("record map is truncated")]
    Truncated,
    #[error("record map is too long")]
    TooLong,
    #[error("not a sealink record map")]
    BadMagic,
    #[error("record map checksum does not match")]
    BadChecksum,
    #[error("record map names an invalid file name")]
    BadName,
    #[error("record map claims {held} bytes of a {size}-byte file")]
    HeldPastSize { held: u64, size: u64 },
    #[error("record map belongs to another transfer")]
    Mismatch,
}

/// What a receiver knows about one file of an interrupted transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMap {
    pub owner: [u8; 32],
    pub name: String,
    pub size: u64,
    pub mtime: u64,
    /// Bytes from the start of the file that are on disk (synced) in the part file.
    pub held: u64,
}

impl RecordMap {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(MAX_MAP_LEN);
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&self.owner);
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.mtime.to_le_bytes());
        v.extend_from_slice(&self.held.to_le_bytes());
        v.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        v.extend_from_slice(self.name.as_bytes());
        let sum = sha256(&v);
        v.extend_from_slice(&sum);
        v
    }

    pub fn decode(b: &[u8]) -> Result<Self, MapError> {
        if b.len() > MAX_MAP_LEN {
            return Err(MapError::TooLong);
        }
        let fixed = 8 + 32 + 24 + 2;
        if b.len() < fixed + SHA256_LEN {
            return Err(MapError::Truncated);
        }
        if &b[..8] != MAGIC {
            return Err(MapError::BadMagic);
        }
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let name_len = usize::from(u16::from_le_bytes([b[fixed - 2], b[fixed - 1]]));
        if b.len() != fixed + name_len + SHA256_LEN {
            return Err(MapError::Truncated);
        }
        let (body, sum) = b.split_at(fixed + name_len);
        if sha256(body)[..] != sum[..] {
            return Err(MapError::BadChecksum);
        }
        let name = std::str::from_utf8(&body[fixed..])
            .ok()
            .filter(|n| valid_path(n))
            .ok_or(MapError::BadName)?
            .to_owned();
        let mut owner = [0u8; 32];
        owner.copy_from_slice(&b[8..40]);
        let (size, mtime, held) = (u64_at(40), u64_at(48), u64_at(56));
        if size == UNKNOWN_SIZE || held > size {
            return Err(MapError::HeldPastSize { held, size });
        }
        Ok(Self {
            owner,
            name,
            size,
            mtime,
            held,
        })
    }

    /// Decodes and checks that the map belongs to this owner's file of this size and mtime.
    pub fn decode_for(
        b: &[u8],
        owner: &[u8; 32],
        name: &str,
        size: u64,
        mtime: u64,
    ) -> Result<Self, MapError> {
        let m = Self::decode(b)?;
        if &m.owner != owner || m.name != name || m.size != size || m.mtime != mtime {
            return Err(MapError::Mismatch);
        }
        Ok(m)
    }
}

/// Whether a file of a hello may be resumed: a known, non-zero size and a known mtime.
pub fn resumable(size: u64, mtime: u64) -> bool {
    size != UNKNOWN_SIZE && size > 0 && mtime != 0
}

/// The stem of a file's resume state names (`.sealink-resume-<32 hex>`; `.part` and `.map`
/// follow): a hash of the owner key, name, size and mtime, so one owner's state is never found
/// by another's session (and the name reveals nothing about the file).
pub fn state_stem(owner: &[u8; 32], name: &str, size: u64, mtime: u64) -> String {
    let mut h = Sha256::new();
    h.update(b"sealink resume state");
    h.update(owner);
    h.update(&size.to_le_bytes());
    h.update(&mtime.to_le_bytes());
    h.update(name.as_bytes());
    let d = h.finish();
    let hex: String = d[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{STATE_PREFIX}{hex}")
}

/// Whole records of `record_data` bytes within a held prefix of `held` bytes of a `size`-byte
/// file (the whole file's records when all of it is held).
pub fn held_records(held: u64, size: u64, record_data: u32) -> u64 {
    let r = u64::from(record_data.max(1));
    if held >= size {
        size.div_ceil(r)
    } else {
        held / r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn map() -> RecordMap {
        RecordMap {
            owner: [9; 32],
            name: "big.bin".into(),
            size: 64 << 20,
            mtime: 1_700_000_000_000_000_001,
            held: 5 << 20,
        }
    }

    #[test]
    fn maps_round_trip_and_bind_their_file() {
        let m = map();
        let b = m.encode();
        assert_eq!(RecordMap::decode(&b).unwrap(), m);
        assert_eq!(
            RecordMap::decode_for(&b, &m.owner, &m.name, m.size, m.mtime).unwrap(),
            m
        );
        for (owner, name, size, mtime) in [
            ([8; 32], "big.bin", m.size, m.mtime),
            (m.owner, "other", m.size, m.mtime),
            (m.owner, "big.bin", m.size + 1, m.mtime),
            (m.owner, "big.bin", m.size, m.mtime + 1),
        ] {
            assert_eq!(
                RecordMap::decode_for(&b, &owner, name, size, mtime),
                Err(MapError::Mismatch)
            );
        }
    }

    #[test]
    fn malformed_maps_are_typed_errors() {
        let b = map().encode();
        assert_eq!(RecordMap::decode(&[]), Err(MapError::Truncated));
        let mut x = b.clone();
        x[0] ^= 1;
        assert_eq!(RecordMap::decode(&x), Err(MapError::BadMagic));
        let mut x = b.clone();
        x[60] ^= 1; // the held count
        assert_eq!(RecordMap::decode(&x), Err(MapError::BadChecksum));
        let mut x = b.clone();
        x.push(0);
        assert_eq!(RecordMap::decode(&x), Err(MapError::Truncated));
        assert_eq!(
            RecordMap::decode(&vec![0; MAX_MAP_LEN + 1]),
            Err(MapError::TooLong)
        );
        // Claims past the size, and bad names, even with a good checksum.
        let m = RecordMap {
            held: map().size + 1,
            ..map()
        };
        assert!(matches!(
            RecordMap::decode(&m.encode()),
            Err(MapError::HeldPastSize { .. })
        ));
        for name in ["", "..", "a//b", "/a", "a/../b"] {
            let m = RecordMap {
                name: name.into(),
                ..map()
            };
            assert_eq!(RecordMap::decode(&m.encode()), Err(MapError::BadName));
        }
    }

    #[test]
    fn stems_are_hidden_and_differ_by_owner_and_version() {
        let s = state_stem(&[1; 32], "f", 10, 20);
        assert!(s.starts_with(".sealink-resume-") && s.len() == STATE_PREFIX.len() + 32);
        assert_ne!(s, state_stem(&[2; 32], "f", 10, 20));
        assert_ne!(s, state_stem(&[1; 32], "f", 10, 21));
        assert_ne!(s, state_stem(&[1; 32], "g", 10, 20));
        assert_eq!(held_records(0, 100, 10), 0);
        assert_eq!(held_records(35, 100, 10), 3);
        assert_eq!(held_records(95, 95, 10), 10);
        assert!(!resumable(UNKNOWN_SIZE, 5) && !resumable(0, 5) && !resumable(5, 0));
        assert!(resumable(5, 5));
    }

    proptest! {
        #[test]
        fn junk_never_panics(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = RecordMap::decode(&b);
        }

        #[test]
        fn any_flipped_bit_is_caught(bit in 0usize..(8 * (66 + 7 + 32))) {
            let mut b = map().encode();
            b[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(RecordMap::decode(&b).is_err());
        }
    }
}
