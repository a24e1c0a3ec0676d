//! Bodies of the control records. All integers little-endian; every decoder checks lengths
//! and ranges and never panics.
//!
//! ```text
//! hello: owner public key (32) | owner signature (64) | record data size u32 | stripes u16
//!        | flags u16 (bit 0: fresh, do not resume; bit 1: update; bit 2: streamed manifest,
//!        always set: stream protocol 2; bit 3: more manifest batches follow; bit 4: delete)
//!        | entry count u32 | entries (the manifest's first batch)
//! manifest (a later batch, see `super::manifest`): flags u8 (bit 0: more follow)
//!        | entry count u32 | entries
//!   entry: size u64 (u64::MAX: unknown, only for the last file) | mtime u64 (ns since the
//!          epoch, 0: unknown) | mode u32 | kind u8 (0 file, 1 directory, 2 symbolic link)
//!          | path length u16 | path | (links only) target length u16 | target
//! ready: entry count u32 | held records u64 per entry (a prefix the receiver keeps from an
//!        earlier session; the sender sends the rest; `u64::MAX`: up to date, send nothing)
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
/// Most entries (files, directories and links together) in one manifest batch (the hello's,
/// or a later manifest record's): bounds the receiver's open files and bookkeeping per batch.
/// A transfer carries any number of batches (within the receiver's `TreeLimits`).
pub const MAX_BATCH_ENTRIES: usize = 4096;
/// Longest relative path of an entry, in bytes (Linux PATH_MAX).
pub const MAX_PATH_LEN: usize = 4096;
/// Most components of an entry's path.
pub const MAX_DEPTH: usize = 128;
/// Longest symbolic link target, in bytes (PATH_MAX less the NUL).
pub const MAX_LINK_LEN: usize = 4095;
/// A ready's held count for a file the receiver already has with the announced size and mtime
/// (asked for with the hello's update flag): none of its records are sent, nothing is stored.
pub const UP_TO_DATE: u64 = u64::MAX;
/// Most stripes (TCP connections) one session uses.
pub const MAX_STRIPES: usize = 64;
/// Longest file name, in bytes (POSIX NAME_MAX).
pub const MAX_NAME_LEN: usize = 255;
const MAX_ABORT_MESSAGE: usize = 1024;

/// What an entry of a hello is. Only regular files carry data records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum EntryKind {
    #[default]
    File,
    Dir,
    /// A symbolic link and its target (the link text, never followed by the sender).
    Symlink(String),
}

impl EntryKind {
    fn code(&self) -> u8 {
        match self {
            EntryKind::File => 0,
            EntryKind::Dir => 1,
            EntryKind::Symlink(_) => 2,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// A relative path: components separated by `/`, each a valid file name
    /// ([`valid_path`]); a file given alone has one component.
    pub name: String,
    /// Bytes of data (0 for directories and links).
    pub size: u64,
    /// Modification time in nanoseconds since the epoch (0: unknown; never resumed). Binds a
    /// receiver's resume state to this version of the file, with the size; set on the
    /// received entry.
    pub mtime: u64,
    pub mode: u32,
    pub kind: EntryKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub owner_public: [u8; PUBLIC_KEY_LEN],
    pub owner_signature: [u8; SIGNATURE_LEN],
    pub record_data: u32,
    pub stripes: u16,
    /// Start every file over: the receiver discards what it kept from earlier sessions.
    pub fresh: bool,
    /// Ask the receiver which files it already has with the same size and mtime (its ready
    /// says [`UP_TO_DATE`] for them); those are not sent.
    pub update: bool,
    /// More manifest batches follow this one (each in a manifest record after the previous
    /// batch's end record).
    pub more: bool,
    /// Ask the receiver to delete, in the directories this transfer merges into, what the
    /// sender no longer has (only a receiver run with `recv --delete` does).
    pub delete: bool,
    /// The manifest's first batch.
    pub files: Vec<FileEntry>,
}

/// Hello flags: do not resume; report up-to-date files; the version marker of stream
/// protocol 2 (streamed manifests); more batches follow; delete what the sender lacks.
const FLAG_FRESH: u16 = 1;
const FLAG_UPDATE: u16 = 2;
const FLAG_STREAMED: u16 = 4;
const FLAG_MORE: u16 = 8;
const FLAG_DELETE: u16 = 16;
const HELLO_FLAGS: u16 = FLAG_FRESH | FLAG_UPDATE | FLAG_STREAMED | FLAG_MORE | FLAG_DELETE;

/// Why a receiver refuses a hello from a sender of stream protocol 1 (the whole manifest in
/// the hello, no version marker): said in its abort, so the sender's user knows what to do.
pub const OLD_SENDER: &str = "the sender runs an older sealink (stream protocol 1: the whole \
    manifest in one hello); this receiver speaks stream protocol 2 (manifests in batches): \
    upgrade sealink on the sending host";

pub(crate) fn bad(what: &'static str, why: impl Into<String>) -> StreamError {
    StreamError::MalformedBody {
        what,
        why: why.into(),
    }
}

/// Prefix of the names a receiver keeps its own state under in the directory it receives
/// into (resume state `.sealink-resume-*`, and any later internal name).
pub const RESERVED_PREFIX: &str = ".sealink-";
/// Suffixes of a receiver's temporary files and staging directories
/// (`.<32 hex digits>.sealink-part`, `.<32 hex digits>.sealink-part-dir`).
pub const RESERVED_SUFFIXES: [&str; 2] = [".sealink-part", ".sealink-part-dir"];

/// Whether `name` (one path component) is one a receiver uses for its own files: a received
/// entry may never take it, or it could replace the receiver's state (a part file it is
/// writing, a record map) or block it for good.
pub fn reserved_name(name: &str) -> bool {
    name.starts_with(RESERVED_PREFIX)
        || (name.starts_with('.') && RESERVED_SUFFIXES.iter().any(|s| name.ends_with(s)))
}

/// A name a receiver may create in its directory: one path component, no control characters,
/// not `.` or `..`, not one of the receiver's own ([`reserved_name`]).
pub fn valid_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name != "."
        && name != ".."
        && !reserved_name(name)
        && !name
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control())
}

/// A relative path a receiver may create under its directory: 1 to [`MAX_DEPTH`] components
/// separated by `/`, each a [`valid_file_name`], at most [`MAX_PATH_LEN`] bytes in all.
pub fn valid_path(path: &str) -> bool {
    path.len() <= MAX_PATH_LEN
        && path.split('/').count() <= MAX_DEPTH
        && path.split('/').all(valid_file_name)
}

/// Whether the link at `path` with this target stays inside the directory tree its path starts
/// with: a relative target, no NUL or control characters, made of `..` components first and
/// names after (no `..` after a name, so no link met on the way can lead a `..` astray), that
/// never climbs above the link's top-level directory. A link at the top level has no tree to
/// point into and is refused. Every directory a link's path goes through is a directory of the
/// tree (never a link: see [`Hello::decode`]), so `..` resolves there as it reads.
pub fn link_stays_inside(path: &str, target: &str) -> bool {
    if target.is_empty()
        || target.len() > MAX_LINK_LEN
        || target.starts_with('/')
        || target.chars().any(|c| c.is_control())
    {
        return false;
    }
    // Directories above the link, within its tree (the top-level directory counts as 1).
    let mut depth = path.split('/').count() - 1;
    let mut named = false;
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." if named => return false,
            ".." => {
                // Climbing to the top (or from a top-level link) leaves the tree.
                if depth <= 1 {
                    return false;
                }
                depth -= 1;
            }
            _ => named = true,
        }
    }
    depth > 0
}

pub(crate) struct Reader<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], StreamError> {
        if self.b.len() < n {
            return Err(bad(self.what, "truncated"));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], StreamError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    pub(crate) fn u16(&mut self) -> Result<u16, StreamError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, StreamError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, StreamError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub(crate) fn finish(self) -> Result<(), StreamError> {
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
        let flags = FLAG_STREAMED
            | if self.fresh { FLAG_FRESH } else { 0 }
            | if self.update { FLAG_UPDATE } else { 0 }
            | if self.more { FLAG_MORE } else { 0 }
            | if self.delete { FLAG_DELETE } else { 0 };
        v.extend_from_slice(&flags.to_le_bytes());
        encode_entries(&mut v, &self.files);
        v
    }

    /// Decodes and validates: record size, stripes, flags, entry count, paths (valid,
    /// distinct, each one's parent directory announced before it as a directory), link
    /// targets ([`link_stays_inside`]), and that only the last entry, a file, may have an
    /// unknown size. Nothing of a hello that fails here is ever created.
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
        if flags & FLAG_STREAMED == 0 {
            return Err(bad(W, OLD_SENDER));
        }
        if flags & !HELLO_FLAGS != 0 {
            return Err(bad(W, format!("unknown flags {flags:#x}")));
        }
        let more = flags & FLAG_MORE != 0;
        let files = decode_entries(&mut r)?;
        r.finish()?;
        // The first batch stands alone: its order, parents and names are checked here (a
        // receiver checks every batch again, with its limits, in a `TreeCheck`).
        super::manifest::TreeCheck::new(super::manifest::TreeLimits::NONE)
            .admit(&files, more)
            .map_err(|e| match e {
                StreamError::MalformedBody { why, .. } => bad(W, why),
                e => e,
            })?;
        Ok(Self {
            owner_public,
            owner_signature,
            record_data,
            stripes,
            fresh: flags & FLAG_FRESH != 0,
            update: flags & FLAG_UPDATE != 0,
            more,
            delete: flags & FLAG_DELETE != 0,
            files,
        })
    }
}

/// Writes an entry count and the entries (hello and manifest bodies).
pub(crate) fn encode_entries(v: &mut Vec<u8>, files: &[FileEntry]) {
    v.extend_from_slice(&(files.len() as u32).to_le_bytes());
    for f in files {
        v.extend_from_slice(&f.size.to_le_bytes());
        v.extend_from_slice(&f.mtime.to_le_bytes());
        v.extend_from_slice(&f.mode.to_le_bytes());
        v.push(f.kind.code());
        v.extend_from_slice(&(f.name.len() as u16).to_le_bytes());
        v.extend_from_slice(f.name.as_bytes());
        if let EntryKind::Symlink(t) = &f.kind {
            v.extend_from_slice(&(t.len() as u16).to_le_bytes());
            v.extend_from_slice(t.as_bytes());
        }
    }
}

/// Reads an entry count and the entries, each checked on its own: a valid path of names
/// that are not the receiver's own, a link target that stays in its tree, no data for a
/// directory or link. How entries relate (order, parents, limits) is [`TreeCheck`]'s.
///
/// [`TreeCheck`]: super::manifest::TreeCheck
pub(crate) fn decode_entries(r: &mut Reader<'_>) -> Result<Vec<FileEntry>, StreamError> {
    let what = r.what;
    let n = r.u32()? as usize;
    if n > MAX_BATCH_ENTRIES {
        return Err(bad(
            what,
            format!("{n} entries in one batch (at most {MAX_BATCH_ENTRIES})"),
        ));
    }
    let mut files: Vec<FileEntry> = Vec::with_capacity(n);
    for _ in 0..n {
        let size = r.u64()?;
        let mtime = r.u64()?;
        let mode = r.u32()?;
        let kind = r.array::<1>()?[0];
        let len = r.u16()? as usize;
        let name = std::str::from_utf8(r.take(len)?)
            .map_err(|_| bad(what, "path is not UTF-8"))?
            .to_owned();
        if name.split('/').any(reserved_name) {
            return Err(bad(
                what,
                format!(
                    "path {name:?} takes a name reserved for the receiver's own files \
                         ({RESERVED_PREFIX}*, .*.sealink-part, .*.sealink-part-dir)"
                ),
            ));
        }
        if !valid_path(&name) {
            return Err(bad(
                what,
                format!(
                    "path {name:?} is not a relative path of plain names (at most \
                         {MAX_DEPTH} of them, {MAX_PATH_LEN} bytes)"
                ),
            ));
        }
        let kind = match kind {
            0 => EntryKind::File,
            1 => EntryKind::Dir,
            2 => {
                let len = r.u16()? as usize;
                let target = std::str::from_utf8(r.take(len)?)
                    .map_err(|_| bad(what, "link target is not UTF-8"))?
                    .to_owned();
                if !link_stays_inside(&name, &target) {
                    return Err(bad(
                        what,
                        format!("link {name:?} points to {target:?}, outside the tree it is in"),
                    ));
                }
                EntryKind::Symlink(target)
            }
            k => return Err(bad(what, format!("entry kind {k}"))),
        };
        if kind != EntryKind::File && size != 0 {
            return Err(bad(
                what,
                format!("{name:?} is not a file but has {size} bytes"),
            ));
        }
        files.push(FileEntry {
            name,
            size,
            mtime,
            mode,
            kind,
        });
    }
    Ok(files)
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
        if n > MAX_BATCH_ENTRIES {
            return Err(bad("ready", format!("{n} files")));
        }
        let held = (0..n).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
        r.finish()?;
        Ok(Self { held })
    }
}

/// An end record's per-file flags: a SHA-256 follows.
const END_HASH: u8 = 1;
/// An end record's per-file flags: the file is left out ([`End::left_out`]).
const END_LEFT_OUT: u8 = 2;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    pub data_records: u64,
    pub sizes: Vec<u64>,
    /// Per file (as many as `sizes`; missing ones encode as absent): SHA-256 of the whole
    /// file, present for every file the receiver resumed (it checks the file it assembled).
    pub hashes: Vec<Option<[u8; SHA256_LEN]>>,
    /// Per file (missing ones: false): the sender could not send it as announced (it vanished,
    /// changed or became unreadable after the manifest named it). Its records were sent
    /// (zeros, for the layout's sake); the receiver stores nothing of it and keeps what it
    /// had there. The transfer is partial.
    pub left_out: Vec<bool>,
}

impl End {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(12 + 9 * self.sizes.len());
        v.extend_from_slice(&self.data_records.to_le_bytes());
        v.extend_from_slice(&(self.sizes.len() as u32).to_le_bytes());
        for (i, s) in self.sizes.iter().enumerate() {
            v.extend_from_slice(&s.to_le_bytes());
            let left_out = self.left_out.get(i).copied().unwrap_or(false);
            let hash = self.hashes.get(i).copied().flatten();
            v.push(u8::from(hash.is_some()) | if left_out { END_LEFT_OUT } else { 0 });
            if let Some(h) = hash {
                v.extend_from_slice(&h);
            }
        }
        v
    }
    pub fn decode(b: &[u8]) -> Result<Self, StreamError> {
        let mut r = Reader { b, what: "end" };
        let data_records = r.u64()?;
        let n = r.u32()? as usize;
        if n > MAX_BATCH_ENTRIES {
            return Err(bad("end", format!("{n} files")));
        }
        let mut sizes = Vec::with_capacity(n);
        let mut hashes = Vec::with_capacity(n);
        let mut left_out = Vec::new();
        for i in 0..n {
            sizes.push(r.u64()?);
            let flags = r.array::<1>()?[0];
            if flags & !(END_HASH | END_LEFT_OUT) != 0 {
                return Err(bad("end", format!("file flags {flags:#x}")));
            }
            hashes.push(if flags & END_HASH != 0 {
                Some(r.array()?)
            } else {
                None
            });
            if flags & END_LEFT_OUT != 0 {
                left_out.resize(i, false);
                left_out.push(true);
            }
        }
        r.finish()?;
        Ok(Self {
            data_records,
            sizes,
            hashes,
            left_out,
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
#[path = "body_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "body_props.rs"]
mod props;
