//! The receiving side: a listener that serves transfer sessions.
//!
//! - `server`: the [`Receiver`], its accept loop and admission, one thread per connection;
//! - `auth`: who the peer is: the handshake, the hello's owner, `--once`'s one transfer;
//! - `session`: one session from its handshake to its reply, its manifest's batches in order;
//! - `batch`: one manifest batch: its part files and resume state, verified, then stored;
//! - `deliver`: a batch's stripes read, their records opened and written into place;
//! - `takeover`: a newer session of the same owner taking over from a stalled one.

mod auth;
mod batch;
mod deliver;
mod server;
mod session;
mod takeover;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use sealink_crypto::{Scope, SuiteId};
use sealink_proto::HostKey;
use sealink_proto::stream::body::{EntryKind, FileEntry, UP_TO_DATE};
use sealink_proto::stream::{Hello, StreamLimits, TreeLimits};

use crate::limits::{ConnLimits, Timeouts};
use crate::state::ResumeLimits;
use batch::Batch;

pub use server::Receiver;

/// Where received files go.
#[derive(Debug, Clone)]
pub enum Dest {
    /// Into this directory, each under its own name, all-or-nothing per file.
    Dir(PathBuf),
    /// Concatenated, in order, to standard output (what was written stays written on error).
    Stdout,
}

#[derive(Debug)]
pub struct RecvConfig {
    pub host: HostKey,
    /// Hosts allowed to connect: name, X25519 public key.
    pub trusted_hosts: Vec<(String, [u8; 32])>,
    /// Owners allowed to send: name, Ed25519 public key.
    pub trusted_owners: Vec<(String, [u8; 32])>,
    /// The trust file the two lists were read from: read again before a connection's checks
    /// whenever it changed (`None`: the lists stay as given).
    pub trust_file: Option<std::path::PathBuf>,
    pub dest: Dest,
    /// Replace existing files and links, and merge into existing directories (setting their
    /// modes and mtimes).
    pub overwrite: bool,
    /// Take updates: a sender that asks for one (`send --update`) may merge into existing
    /// directories (which keep their modes and mtimes), add entries there, and replace files
    /// and links that differ by ones of the same kind. Off: an existing entry is changed only
    /// with `overwrite`.
    pub take_updates: bool,
    pub timeouts: Timeouts,
    pub limits: ConnLimits,
    /// Let received files keep group and other write permission when the sender's mode has
    /// it (and the umask allows it). Off: never granted, whatever the sender says.
    pub keep_group_other_write: bool,
    /// Bounds on what one session may carry (bitmap memory, key usage).
    pub session_limits: StreamLimits,
    /// Resume state (the hidden part file and record map of an interrupted transfer) older
    /// than this is deleted when the receiver starts.
    pub resume_max_age: Duration,
    /// Bounds on the resume state kept, per owner and in total.
    pub resume_limits: ResumeLimits,
    /// Bounds on one transfer's manifest: entries, bytes, depth (`recv --max-entries`,
    /// `--max-bytes`, `--max-depth`).
    pub tree_limits: TreeLimits,
    /// Let a sender that asks (`send --delete`) delete, in directories it merges into, what it
    /// does not have (`recv --delete`). Off: such a transfer is refused.
    pub allow_delete: bool,
    /// Keep one line per entry in the report (`files` ... `resumed`); off, the report holds
    /// only counts, whatever the number of entries.
    pub list_entries: bool,
    /// `fsync` every file of a tree before it takes its name (off, `recv --no-fsync`, as
    /// rsync's default: faster for many small files, but a crash of the receiving host can
    /// leave a file under its name without all of its data).
    pub sync: bool,
}

/// Default for [`RecvConfig::resume_max_age`]: 7 days.
pub const DEFAULT_RESUME_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

impl RecvConfig {
    /// Trusting nobody yet, keeping existing files, default timeouts and limits.
    pub fn new(host: HostKey, dest: Dest) -> Self {
        RecvConfig {
            host,
            trusted_hosts: Vec::new(),
            trusted_owners: Vec::new(),
            trust_file: None,
            dest,
            overwrite: false,
            take_updates: false,
            timeouts: Timeouts::default(),
            limits: ConnLimits::default(),
            keep_group_other_write: false,
            session_limits: StreamLimits::default(),
            resume_max_age: DEFAULT_RESUME_MAX_AGE,
            resume_limits: ResumeLimits::default(),
            tree_limits: TreeLimits::default(),
            allow_delete: false,
            list_entries: true,
            sync: true,
        }
    }
}

#[derive(Debug, Clone)]
pub struct RecvReport {
    pub peer: SocketAddr,
    /// The sending host's name in the trust file.
    pub host: String,
    /// The sending owner's name in the trust file, and its Ed25519 public key.
    pub owner: String,
    pub owner_key: [u8; 32],
    /// The entries' paths (a file given alone: its name), in the sender's order.
    pub files: Vec<String>,
    /// What each entry is.
    pub kinds: Vec<EntryKind>,
    /// Each entry's size as stored (standard input's as it turned out), in the same order.
    pub sizes: Vec<u64>,
    /// Files this receiver already had with the same size and mtime (the sender asked for an
    /// update): kept as they were, not sent.
    pub up_to_date: Vec<bool>,
    /// Where each file now lies; `None` with [`Dest::Stdout`].
    pub paths: Vec<Option<PathBuf>>,
    pub suite: SuiteId,
    pub scope: Scope,
    pub bytes: u64,
    /// Bytes of each file kept from an earlier, interrupted session (not sent again).
    pub resumed: Vec<u64>,
    pub streams: usize,
    pub elapsed: Duration,
    /// Entries received (files, directories, links), and of them directories and links.
    pub entries: u64,
    pub dirs: u64,
    pub links: u64,
    /// Files the sender left out (they vanished or changed there while being sent): nothing
    /// of them stored.
    pub left_out: u64,
    /// Files already up to date (not sent), and their bytes.
    pub up_to_date_files: u64,
    pub up_to_date_bytes: u64,
    /// Bytes held from an interrupted transfer (not sent again).
    pub resumed_bytes: u64,
    /// Entries deleted because the sender no longer has them (`--delete`).
    pub deleted: u64,
    /// Manifest batches the transfer took.
    pub batches: u64,
}

impl RecvReport {
    /// Nothing received yet, from the session of `hello`.
    fn empty(
        peer: SocketAddr,
        host: String,
        owner: String,
        hello: &Hello,
        suite: SuiteId,
        scope: Scope,
    ) -> Self {
        RecvReport {
            peer,
            host,
            owner,
            owner_key: hello.owner_public,
            files: Vec::new(),
            kinds: Vec::new(),
            sizes: Vec::new(),
            up_to_date: Vec::new(),
            paths: Vec::new(),
            suite,
            scope,
            bytes: 0,
            resumed: Vec::new(),
            streams: hello.stripes as usize,
            elapsed: Duration::ZERO,
            entries: 0,
            dirs: 0,
            links: 0,
            left_out: 0,
            up_to_date_files: 0,
            up_to_date_bytes: 0,
            resumed_bytes: 0,
            deleted: 0,
            batches: 0,
        }
    }

    /// Counts a stored batch (and lists its entries when asked to).
    fn add(&mut self, b: &Batch<'_>, files: &[FileEntry], sizes: &[u64], cfg: &RecvConfig) {
        self.batches += 1;
        let left_out = b.left_out.get().map_or(&[][..], Vec::as_slice);
        for (i, f) in files.iter().enumerate() {
            if left_out.get(i) == Some(&true) {
                self.left_out += 1;
                continue;
            }
            let size = sizes.get(i).copied().unwrap_or(0);
            let up = b.held.get(i) == Some(&UP_TO_DATE);
            let resumed = b.resumed.get(i).copied().unwrap_or(0);
            self.entries += 1;
            self.bytes += size;
            match f.kind {
                EntryKind::Dir => self.dirs += 1,
                EntryKind::Symlink(_) => self.links += 1,
                EntryKind::File => {}
            }
            if up {
                self.up_to_date_files += 1;
                self.up_to_date_bytes += size;
            }
            self.resumed_bytes += resumed;
            if cfg.list_entries {
                self.files.push(f.name.clone());
                self.kinds.push(f.kind.clone());
                self.sizes.push(size);
                self.up_to_date.push(up);
                self.resumed.push(resumed);
                self.paths.push(match &cfg.dest {
                    Dest::Dir(dir) => Some(dir.join(&f.name)),
                    Dest::Stdout => None,
                });
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What an abort tells the sender of an error: its chain on one line, with every path in the
/// receiving directory made relative to it. The sender learns the names it sent, never where
/// the receiver keeps them.
fn for_sender(e: &(dyn std::error::Error + 'static), dest: &Dest) -> String {
    let mut msg = sealink_crypto::error::chain(e);
    let Dest::Dir(d) = dest else { return msg };
    let given = d.to_string_lossy().trim_end_matches('/').to_owned();
    let canonical = d
        .canonicalize()
        .map(|c| c.to_string_lossy().trim_end_matches('/').to_owned())
        .unwrap_or_default();
    for dir in [given, canonical] {
        if !dir.is_empty() {
            msg = relative_to(&msg, &dir);
        }
    }
    msg
}

/// `msg` with each path that starts with `dir/` (at the start of a word) cut to what follows.
fn relative_to(msg: &str, dir: &str) -> String {
    let prefix = format!("{dir}/");
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(i) = rest.find(&prefix) {
        let word_start = rest[..i]
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || "([{\"'`:=,".contains(c));
        out.push_str(&rest[..i]);
        if !word_start {
            out.push_str(&prefix);
        }
        rest = &rest[i + prefix.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TransferError;

    #[test]
    fn the_sender_is_told_names_relative_to_the_receiving_directory() {
        let dest = Dest::Dir("/srv/in".into());
        let e = TransferError::Io {
            context: "cannot write /srv/in/t/a.bin".into(),
            source: std::io::Error::other("disk full at /srv/in/.x (\"/srv/in/y\")"),
        };
        assert_eq!(
            for_sender(&e, &dest),
            "cannot write t/a.bin: disk full at .x (\"y\")"
        );
        // Only whole path prefixes: a longer directory name or a path that merely ends the
        // same is left alone.
        assert_eq!(
            relative_to("/srv/in2/x /a/srv/in/x", "/srv/in"),
            "/srv/in2/x /a/srv/in/x"
        );
        assert_eq!(relative_to("at ./x", "."), "at x");
        assert_eq!(
            for_sender(&e, &Dest::Stdout),
            "cannot write /srv/in/t/a.bin: disk full at /srv/in/.x (\"/srv/in/y\")"
        );
    }
}
