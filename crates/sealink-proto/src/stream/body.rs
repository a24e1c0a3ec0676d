//! Bodies of the control records. All integers little-endian; every decoder checks lengths
//! and ranges and never panics.
//!
//! ```text
//! hello: owner public key (32) | owner signature (64) | record data size u32 | stripes u16
//!        | flags u16 (bit 0: fresh, do not resume) | file count u32 | files
//!   file: size u64 (u64::MAX: unknown, only for the last file) | mtime u64 (ns since the
//!         epoch, 0: unknown) | mode u32 | name length u16 | name
//! ready: file count u32 | held records u64 per file (a prefix the receiver keeps from an
//!        earlier session; the sender sends the rest)
//! end:   data records u64 | file count u32 | per file: final size u64 | hash flag u8 (0, 1)
//!        | SHA-256 of the whole file (32, when the flag is 1)
//! done:  bytes u64 | files u32
//! abort: code u8 | message length u16 | message (UTF-8)
//! ```

use sealink_crypto::sign::{PUBLIC_KEY_LEN, SIGNATURE_LEN};

use sealink_crypto::hash::SHA256_LEN;

use super::StreamError;
use super::record::{MAX_RECORD_DATA, MIN_RECORD_DATA};

/// Size of a file whose length is not known when the transfer starts (standard input).
pub const UNKNOWN_SIZE: u64 = u64::MAX;
/// Most files one session carries (bounds the receiver's open files and bookkeeping).
pub const MAX_FILES: usize = 4096;
/// Most stripes (TCP connections) one session uses.
pub const MAX_STRIPES: usize = 64;
/// Longest file name, in bytes (POSIX NAME_MAX).
pub const MAX_NAME_LEN: usize = 255;
const MAX_ABORT_MESSAGE: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    pub name: String,
    pub size: u64,
    /// Modification time in nanoseconds since the epoch (0: unknown; never resumed). Binds a
    /// receiver's resume state to this version of the file, with the size.
    pub mtime: u64,
    pub mode: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub owner_public: [u8; PUBLIC_KEY_LEN],
    pub owner_signature: [u8; SIGNATURE_LEN],
    pub record_data: u32,
    pub stripes: u16,
    /// Start every file over: the receiver discards what it kept from earlier sessions.
    pub fresh: bool,
    pub files: Vec<FileEntry>,
}

/// Hello flag: do not resume.
const FLAG_FRESH: u16 = 1;

fn bad(what: &'static str, why: impl Into<String>) -> StreamError {
    StreamError::MalformedBody {
        what,
        why: why.into(),
    }
}

/// A name a receiver may create in its directory: one path component, no control characters,
/// not `.` or `..`.
pub fn valid_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control())
}

struct Reader<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StreamError> {
        if self.b.len() < n {
            return Err(bad(self.what, "truncated"));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], StreamError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u16(&mut self) -> Result<u16, StreamError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, StreamError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, StreamError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn finish(self) -> Result<(), StreamError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(bad(self.what, "trailing bytes"))
        }
    }
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(108 + self.files.len() * 32);
        v.extend_from_slice(&self.owner_public);
        v.extend_from_slice(&self.owner_signature);
        v.extend_from_slice(&self.record_data.to_le_bytes());
        v.extend_from_slice(&self.stripes.to_le_bytes());
        let flags = if self.fresh { FLAG_FRESH } else { 0 };
        v.extend_from_slice(&flags.to_le_bytes());
        v.extend_from_slice(&(self.files.len() as u32).to_le_bytes());
        for f in &self.files {
            v.extend_from_slice(&f.size.to_le_bytes());
            v.extend_from_slice(&f.mtime.to_le_bytes());
            v.extend_from_slice(&f.mode.to_le_bytes());
            v.extend_from_slice(&(f.name.len() as u16).to_le_bytes());
            v.extend_from_slice(f.name.as_bytes());
        }
        v
    }

    /// Decodes and validates: record size, stripe count, file count, names (valid, distinct),
    /// and that only the last file may have an unknown size.
    pub fn decode(b: &[u8]) -> Result<Self, StreamError> {
        const W: &str = "hello";
        let mut r = Reader { b, what: W };
        let owner_public = r.array()?;
        let owner_signature = r.array()?;
        let record_data = r.u32()?;
        if !(MIN_RECORD_DATA..=MAX_RECORD_DATA).contains(&(record_data as usize)) {
            return Err(bad(
                W,
                format!(
                    "record size {record_data} is not within {MIN_RECORD_DATA}..={MAX_RECORD_DATA}"
                ),
            ));
        }
        let stripes = r.u16()?;
        if stripes == 0 || stripes as usize > MAX_STRIPES {
            return Err(bad(W, format!("{stripes} stripes")));
        }
        let flags = r.u16()?;
        if flags & !FLAG_FRESH != 0 {
            return Err(bad(W, format!("unknown flags {flags:#x}")));
        }
        let n = r.u32()? as usize;
        if n > MAX_FILES {
            return Err(bad(W, format!("{n} files (at most {MAX_FILES})")));
        }
        let mut files: Vec<FileEntry> = Vec::with_capacity(n);
        for i in 0..n {
            let size = r.u64()?;
            let mtime = r.u64()?;
            let mode = r.u32()?;
            let len = r.u16()? as usize;
            let name = std::str::from_utf8(r.take(len)?)
                .map_err(|_| bad(W, "file name is not UTF-8"))?
                .to_owned();
            if !valid_file_name(&name) {
                return Err(bad(
                    W,
                    format!("file name {name:?} is not a plain file name"),
                ));
            }
            if size == UNKNOWN_SIZE && i + 1 != n {
                return Err(bad(W, "only the last file may have an unknown size"));
            }
            if files.iter().any(|f| f.name == name) {
                return Err(bad(W, format!("file name {name:?} appears twice")));
            }
            files.push(FileEntry {
                name,
                size,
                mtime,
                mode,
            });
        }
        r.finish()?;
        Ok(Self {
            owner_public,
            owner_signature,
            record_data,
            stripes,
            fresh: flags & FLAG_FRESH != 0,
            files,
        })
    }
}

/// The receiver's answer to the hello: per file, how many of its first data records it already
/// holds (from an interrupted session), so the sender starts after them. Checked against the
/// session's layout by [`super::Layout::check_held`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    pub held: Vec<u64>,
}

impl Ready {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(4 + 8 * self.held.len());
        v.extend_from_slice(&(self.held.len() as u32).to_le_bytes());
        for h in &self.held {
            v.extend_from_slice(&h.to_le_bytes());
        }
        v
    }
    pub fn decode(b: &[u8]) -> Result<Self, StreamError> {
        let mut r = Reader { b, what: "ready" };
        let n = r.u32()? as usize;
        if n > MAX_FILES {
            return Err(bad("ready", format!("{n} files")));
        }
        let held = (0..n).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
        r.finish()?;
        Ok(Self { held })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    pub data_records: u64,
    pub sizes: Vec<u64>,
    /// Per file (as many as `sizes`; missing ones encode as absent): SHA-256 of the whole
    /// file, present for every file the receiver resumed (it checks the file it assembled).
    pub hashes: Vec<Option<[u8; SHA256_LEN]>>,
}

impl End {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(12 + 9 * self.sizes.len());
        v.extend_from_slice(&self.data_records.to_le_bytes());
        v.extend_from_slice(&(self.sizes.len() as u32).to_le_bytes());
        for (i, s) in self.sizes.iter().enumerate() {
            v.extend_from_slice(&s.to_le_bytes());
            match self.hashes.get(i).copied().flatten() {
                Some(h) => {
                    v.push(1);
                    v.extend_from_slice(&h);
                }
                None => v.push(0),
            }
        }
        v
    }
    pub fn decode(b: &[u8]) -> Result<Self, StreamError> {
        let mut r = Reader { b, what: "end" };
        let data_records = r.u64()?;
        let n = r.u32()? as usize;
        if n > MAX_FILES {
            return Err(bad("end", format!("{n} files")));
        }
        let mut sizes = Vec::with_capacity(n);
        let mut hashes = Vec::with_capacity(n);
        for _ in 0..n {
            sizes.push(r.u64()?);
            hashes.push(match r.array::<1>()?[0] {
                0 => None,
                1 => Some(r.array()?),
                f => return Err(bad("end", format!("hash flag {f}"))),
            });
        }
        r.finish()?;
        Ok(Self {
            data_records,
            sizes,
            hashes,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub bytes: u64,
    pub files: u32,
}

impl Done {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = self.bytes.to_le_bytes().to_vec();
        v.extend_from_slice(&self.files.to_le_bytes());
        v
    }
    pub fn decode(b: &[u8]) -> Result<Self, StreamError> {
        let mut r = Reader { b, what: "done" };
        let d = Self {
            bytes: r.u64()?,
            files: r.u32()?,
        };
        r.finish()?;
        Ok(d)
    }
}

/// Why a receiver gave up, as it tells the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AbortCode {
    Other = 0,
    /// The sender broke the protocol (bad record, replay, truncation).
    Protocol = 1,
    /// The receiver refused the transfer (untrusted owner, file exists).
    Refused = 2,
    /// The receiver could not store the data (disk full, permissions).
    LocalIo = 3,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abort {
    pub code: AbortCode,
    pub message: String,
}

impl Abort {
    pub fn encode(&self) -> Vec<u8> {
        let mut m = self.message.as_bytes();
        if m.len() > MAX_ABORT_MESSAGE {
            let mut cut = MAX_ABORT_MESSAGE;
            while !self.message.is_char_boundary(cut) {
                cut -= 1;
            }
            m = &m[..cut];
        }
        let mut v = vec![self.code as u8];
        v.extend_from_slice(&(m.len() as u16).to_le_bytes());
        v.extend_from_slice(m);
        v
    }
    pub fn decode(b: &[u8]) -> Result<Self, StreamError> {
        let mut r = Reader { b, what: "abort" };
        let code = match r.array::<1>()?[0] {
            1 => AbortCode::Protocol,
            2 => AbortCode::Refused,
            3 => AbortCode::LocalIo,
            _ => AbortCode::Other,
        };
        let len = r.u16()? as usize;
        if len > MAX_ABORT_MESSAGE {
            return Err(bad("abort", "message too long"));
        }
        let mut message: String = String::from_utf8_lossy(r.take(len)?)
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        // Each invalid byte became a 3-byte replacement character: cap the text again, so
        // that what decodes also encodes unchanged.
        if message.len() > MAX_ABORT_MESSAGE {
            let mut cut = MAX_ABORT_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        r.finish()?;
        Ok(Self { code, message })
    }
}

#[cfg(test)]
mod tests {
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
            files: vec![
                FileEntry {
                    name: "a.bin".into(),
                    size: 5,
                    mtime: 1_700_000_000_123_456_789,
                    mode: 0o644,
                },
                FileEntry {
                    name: "stdin".into(),
                    size: UNKNOWN_SIZE,
                    mtime: 0,
                    mode: 0o600,
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
        let e = End {
            data_records: 9,
            sizes: vec![1, 2],
            hashes: vec![None, Some([7; 32])],
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

    #[test]
    fn hello_rejects_bad_names_and_layouts() {
        for name in ["", ".", "..", "a/b", "../x", "x\n", &"n".repeat(256)] {
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
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    fn end() -> impl Strategy<Value = End> {
        (
            any::<u64>(),
            proptest::collection::vec(
                (any::<u64>(), proptest::option::of(any::<[u8; 32]>())),
                0..8,
            ),
        )
            .prop_map(|(data_records, f)| End {
                data_records,
                sizes: f.iter().map(|x| x.0).collect(),
                hashes: f.iter().map(|x| x.1).collect(),
            })
    }

    proptest! {
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
        }
        .encode();
        *b.last_mut().unwrap() = 2;
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
            files: vec![],
        };
        let mut b = h.encode();
        b[32 + 64 + 4 + 2] = 2; // flags: an unknown bit
        assert!(Hello::decode(&b).is_err());
        // A ready announcing more files than a session may have.
        let mut b = ((MAX_FILES + 1) as u32).to_le_bytes().to_vec();
        b.extend(std::iter::repeat_n(0u8, 8 * (MAX_FILES + 1)));
        assert!(Ready::decode(&b).is_err());
    }
}
