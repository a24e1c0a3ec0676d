//! The machine-readable outcome of a transfer: what `sealink send --json` and
//! `sealink recv --json` print, one [`FileRecord`] per file, each a JSON object on its own line.
//!
//! The files of one transfer travel striped together over the same connections and are
//! confirmed together, so they have no separate times: every record of a transfer carries the
//! transfer's `seconds`, `transfer_bytes` and `bytes_per_sec`, and its own file's `bytes`.
//!
//! Not every byte delivered travels: the receiver may hold part of a file from an interrupted
//! transfer (`resumed_bytes`), or have the whole file up to date (`bytes_skipped`, with
//! `--update`). `bytes_sent` is what travelled in this run, and `transfer_bytes_sent`,
//! `transfer_bytes_resumed`, `transfer_bytes_skipped` split the transfer's bytes the same way;
//! `sent_bytes_per_sec` is the rate of what travelled. `bytes_per_sec` keeps its old meaning
//! (`transfer_bytes / seconds`, held bytes included), which overstates the rate of a resumed
//! or updated transfer.
//!
//! A directory tree gives one record per entry (file, directory or link, `kind`), named by its
//! path (`dir/sub/file`).
//!
//! * The receiver prints a record for each entry it has stored (or written to standard output)
//!   once the transfer is verified and committed: `result` is `"ok"`, or `"skipped_up_to_date"`
//!   for a file it already had (`--update`). A failed transfer stores nothing, so it prints no
//!   record (the reason goes to standard error).
//! * The sender prints a record for each entry once the receiver has confirmed the transfer
//!   (`"ok"` or `"skipped_up_to_date"`), or, when the transfer fails, one `"failed"` record for each file with the
//!   reason in `error` (and the command exits 1). A failure before any connection is tried
//!   (arguments, keys, trust file) prints no record, only the error on standard error.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use sealink_crypto::{Scope, SuiteId};

use sealink_proto::stream::body::EntryKind;

use crate::{RecvReport, SendReport, Source};

/// Which side printed a [`FileRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    Sent,
    Received,
}

/// How the file's transfer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Delivered: the receiver holds it complete under its name (or wrote it to its standard
    /// output) and, on the sender, has confirmed so.
    Ok,
    /// The transfer failed (sender only); `error` says why.
    Failed,
    /// Not sent: the sender asked for an update (`--update`) and the receiver already had
    /// this file with the same size and mtime, which it kept as it was.
    SkippedUpToDate,
}

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    #[default]
    File,
    Dir,
    Symlink,
}

impl Kind {
    fn of(k: &EntryKind) -> (Self, Option<String>) {
        match k {
            EntryKind::File => (Kind::File, None),
            EntryKind::Dir => (Kind::Dir, None),
            EntryKind::Symlink(t) => (Kind::Symlink, Some(t.clone())),
        }
    }
}

/// One file of a transfer, as one JSON object on one line. Field names are the schema; sizes
/// in bytes, durations in seconds, keys in standard base64.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FileRecord {
    pub event: Event,
    pub result: Outcome,
    /// The name the file travels and is stored under: for an entry of a directory tree, its
    /// path from the receiver's directory (`dir/sub/file`).
    pub name: String,
    /// `file`, `dir` or `symlink` (directories and links carry no bytes).
    #[serde(default)]
    pub kind: Kind,
    /// A link's target as sent (`null` for anything else).
    #[serde(default)]
    pub link_target: Option<String>,
    /// Sender: the file read (`null` for standard input). Receiver: where the file now lies
    /// (`null` with `--stdout`).
    pub path: Option<String>,
    /// This file's size: as delivered when `result` is `ok`; when `failed`, its size on disk
    /// when the sender could tell (0 for standard input).
    pub bytes: u64,
    /// Of `bytes`, how many the receiver already held from an interrupted transfer and were
    /// not sent again (0 when the file was sent whole, or when `failed`).
    #[serde(default)]
    pub resumed_bytes: u64,
    /// Of `bytes`, how many travelled in this run (on the receiver: arrived): `bytes` less
    /// `resumed_bytes` and `bytes_skipped` (0 when `failed`).
    #[serde(default)]
    pub bytes_sent: u64,
    /// Of `bytes`, how many were not sent because the receiver had the file up to date: all of
    /// them when `result` is `skipped_up_to_date`, else 0.
    #[serde(default)]
    pub bytes_skipped: u64,
    /// The file's place in the transfer (from 0), and how many files the transfer has.
    pub index: usize,
    pub files: usize,
    /// All files of the transfer together.
    pub transfer_bytes: u64,
    /// Of `transfer_bytes`: what travelled in this run, what the receiver held from an
    /// interrupted transfer, and what it had up to date (the three add up to it; all 0 when
    /// `failed`).
    #[serde(default)]
    pub transfer_bytes_sent: u64,
    #[serde(default)]
    pub transfer_bytes_resumed: u64,
    #[serde(default)]
    pub transfer_bytes_skipped: u64,
    /// The transfer's duration: on the sender from the first byte to the receiver's
    /// confirmation (or to the failure), on the receiver from the connection's arrival to the
    /// files being stored.
    pub seconds: f64,
    /// `transfer_bytes / seconds` (0 for a failed transfer): bytes the receiver held count as
    /// if they had travelled; `sent_bytes_per_sec` is the rate of what did.
    pub bytes_per_sec: f64,
    /// `transfer_bytes_sent / seconds` (0 for a failed transfer).
    #[serde(default)]
    pub sent_bytes_per_sec: f64,
    /// TCP connections the transfer was striped over.
    pub streams: usize,
    /// The other side's address (`IP:PORT`).
    pub peer: String,
    /// The other side's host name in this side's trust file (the receiver's on the sender,
    /// the sender's on the receiver).
    pub host: String,
    /// The sending owner's name in this side's trust file (`null` on a sender whose trust
    /// file does not list its own owner key), and its Ed25519 public key.
    pub owner: Option<String>,
    pub owner_key: String,
    /// `owner_key`'s short fingerprint (`xxxx-xxxx-xxxx-xxxx`, `sealink_keys::fingerprint`),
    /// as both summaries print it.
    #[serde(default)]
    pub owner_fingerprint: String,
    /// The suite's name (`aes128-gcm`, `aes256-gcm`, `chacha20-poly1305`).
    pub suite: String,
    /// Whether the data travelled in clear (every record still authenticated).
    pub auth_only: bool,
    /// Why the transfer failed (`null` when `result` is `ok`).
    pub error: Option<String>,
}

/// Who and how, common to every file of one transfer.
#[derive(Debug, Clone)]
pub struct TransferMeta {
    pub peer: SocketAddr,
    pub host: String,
    pub owner: Option<String>,
    pub owner_key: [u8; 32],
    pub suite: SuiteId,
    pub scope: Scope,
}

fn rate(bytes: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { bytes as f64 / secs } else { 0.0 }
}

/// Splits the bytes of a delivered transfer's records into sent, resumed and skipped, per file
/// and for the transfer, and sets the rate of what was sent.
fn split_bytes(mut records: Vec<FileRecord>, elapsed: Duration) -> Vec<FileRecord> {
    for r in &mut records {
        r.bytes_skipped = if r.result == Outcome::SkippedUpToDate {
            r.bytes
        } else {
            0
        };
        r.bytes_sent = r
            .bytes
            .saturating_sub(r.resumed_bytes.saturating_add(r.bytes_skipped));
    }
    let sum = |f: fn(&FileRecord) -> u64| records.iter().map(f).fold(0, u64::saturating_add);
    let sent = sum(|r| r.bytes_sent);
    let resumed = sum(|r| r.resumed_bytes);
    let skipped = sum(|r| r.bytes_skipped);
    for r in &mut records {
        r.transfer_bytes_sent = sent;
        r.transfer_bytes_resumed = resumed;
        r.transfer_bytes_skipped = skipped;
        r.sent_bytes_per_sec = rate(sent, elapsed);
    }
    records
}

fn b64(k: &[u8; 32]) -> String {
    base64::engine::general_purpose::STANDARD.encode(k)
}

/// [`Entries`] of a report whose names are in field `$names` (the two sides name them apart).
macro_rules! entries {
    ($rep:expr, $names:ident) => {
        Entries {
            names: &$rep.$names,
            paths: &$rep.paths,
            sizes: &$rep.sizes,
            resumed: &$rep.resumed,
            kinds: &$rep.kinds,
            up_to_date: &$rep.up_to_date,
            bytes: $rep.bytes,
            elapsed: $rep.elapsed,
            streams: $rep.streams,
        }
    };
}

/// What a report holds of each entry of a finished transfer, on either side.
struct Entries<'a> {
    names: &'a [String],
    paths: &'a [Option<std::path::PathBuf>],
    sizes: &'a [u64],
    resumed: &'a [u64],
    kinds: &'a [EntryKind],
    up_to_date: &'a [bool],
    bytes: u64,
    elapsed: Duration,
    streams: usize,
}

impl Entries<'_> {
    /// One record per entry, in order.
    fn records(&self, event: Event, meta: &TransferMeta) -> Vec<FileRecord> {
        let n = self.names.len();
        let records = self
            .names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                FileRecord::new(
                    event,
                    meta,
                    name,
                    self.paths.get(i).and_then(|p| p.as_deref()),
                    self.sizes.get(i).copied().unwrap_or(0),
                    (i, n),
                    self.bytes,
                    self.elapsed,
                    self.streams,
                    None,
                )
                .resumed(self.resumed.get(i).copied().unwrap_or(0))
                .entry(self.kinds.get(i), self.up_to_date.get(i).copied())
            })
            .collect();
        split_bytes(records, self.elapsed)
    }
}

impl FileRecord {
    #[allow(clippy::too_many_arguments)]
    fn new(
        event: Event,
        meta: &TransferMeta,
        name: &str,
        path: Option<&Path>,
        bytes: u64,
        (index, files): (usize, usize),
        transfer_bytes: u64,
        elapsed: Duration,
        streams: usize,
        error: Option<String>,
    ) -> Self {
        FileRecord {
            event,
            result: if error.is_none() {
                Outcome::Ok
            } else {
                Outcome::Failed
            },
            name: name.to_owned(),
            kind: Kind::File,
            link_target: None,
            path: path.map(|p| p.display().to_string()),
            bytes,
            resumed_bytes: 0,
            bytes_sent: 0,
            bytes_skipped: 0,
            index,
            files,
            transfer_bytes,
            transfer_bytes_sent: 0,
            transfer_bytes_resumed: 0,
            transfer_bytes_skipped: 0,
            seconds: elapsed.as_secs_f64(),
            bytes_per_sec: if error.is_none() {
                rate(transfer_bytes, elapsed)
            } else {
                0.0
            },
            sent_bytes_per_sec: 0.0,
            streams,
            peer: meta.peer.to_string(),
            host: meta.host.clone(),
            owner: meta.owner.clone(),
            owner_key: b64(&meta.owner_key),
            owner_fingerprint: sealink_keys::fingerprint(&meta.owner_key),
            suite: meta.suite.name().to_owned(),
            auth_only: meta.scope == Scope::AuthOnly,
            error,
        }
    }

    /// The receiver's records of a stored transfer, one per file.
    pub fn received(rep: &RecvReport) -> Vec<FileRecord> {
        let meta = TransferMeta {
            peer: rep.peer,
            host: rep.host.clone(),
            owner: Some(rep.owner.clone()),
            owner_key: rep.owner_key,
            suite: rep.suite,
            scope: rep.scope,
        };
        entries!(rep, files).records(Event::Received, &meta)
    }

    fn resumed(self, resumed_bytes: u64) -> Self {
        Self {
            resumed_bytes,
            ..self
        }
    }

    /// Sets what the entry is, and marks a file kept up to date.
    fn entry(self, kind: Option<&EntryKind>, up_to_date: Option<bool>) -> Self {
        let (kind, link_target) = kind.map_or((Kind::File, None), Kind::of);
        Self {
            kind,
            link_target,
            result: if up_to_date == Some(true) {
                Outcome::SkippedUpToDate
            } else {
                self.result
            },
            ..self
        }
    }

    /// The sender's records of a confirmed transfer, one per entry in the order sent.
    pub fn sent(meta: &TransferMeta, rep: &SendReport) -> Vec<FileRecord> {
        entries!(rep, names).records(Event::Sent, meta)
    }

    /// The sender's records of a failed transfer: one for each of `sources`, with the size on
    /// disk of a plain file (0 for standard input, a directory or anything unreadable), after
    /// `elapsed`, for `error`.
    pub fn send_failed(
        meta: &TransferMeta,
        sources: &[Source],
        streams: usize,
        elapsed: Duration,
        error: &str,
    ) -> Vec<FileRecord> {
        let files: Vec<(&str, Option<&Path>, u64)> = sources
            .iter()
            .map(|s| match s {
                Source::File { path, name } => {
                    let size = std::fs::metadata(path)
                        .ok()
                        .filter(std::fs::Metadata::is_file)
                        .map_or(0, |m| m.len());
                    (name.as_str(), Some(path.as_path()), size)
                }
                Source::Stdin { name } => (name.as_str(), None, 0),
            })
            .collect();
        let n = files.len();
        let total = files.iter().map(|f| f.2).fold(0, u64::saturating_add);
        files
            .iter()
            .enumerate()
            .map(|(i, (name, path, size))| {
                FileRecord::new(
                    Event::Sent,
                    meta,
                    name,
                    *path,
                    *size,
                    (i, n),
                    total,
                    elapsed,
                    streams,
                    Some(error.to_owned()),
                )
            })
            .collect()
    }

    /// The record as one line of JSON (no newline).
    pub fn to_json_line(&self) -> String {
        // Strings, numbers, booleans and null: serializing these cannot fail (serde_json writes
        // a non-finite float as null; none arises: seconds come from a Duration, rates are
        // divided by a positive time).
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_send_sizes_its_files_on_disk() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("a.bin");
        std::fs::write(&file, [0u8; 10]).unwrap();
        let meta = TransferMeta {
            peer: "127.0.0.1:7878".parse().unwrap(),
            host: "b".into(),
            owner: None,
            owner_key: [0; 32],
            suite: SuiteId::Aes128Gcm,
            scope: Scope::Encrypt,
        };
        let sources = [
            Source::File {
                path: file,
                name: "a.bin".into(),
            },
            Source::File {
                path: d.path().into(),
                name: "dir".into(),
            },
            Source::Stdin {
                name: "stdin".into(),
            },
        ];
        let recs = FileRecord::send_failed(&meta, &sources, 1, Duration::from_secs(1), "cut");
        let sizes: Vec<u64> = recs.iter().map(|r| r.bytes).collect();
        assert_eq!(sizes, [10, 0, 0]);
        assert!(recs[2].path.is_none());
        assert!(recs.iter().all(|r| r.error.as_deref() == Some("cut")));
    }
}
