//! The sending side of a transfer.
//!
//! - `mod.rs`: [`send`] batch after batch (the manifest walked as it is sent), and [`list`];
//! - `session`: the connections: connect, handshake, hello, joins, the receiver's replies;
//! - `stripes`: one batch: its ready, then its data over every stripe (and the hashes of the
//!   files the receiver resumes).

mod session;
mod stripes;

use std::net::{Shutdown, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use sealink_crypto::sign::OwnerSigningKey;
use sealink_crypto::{Scope, SuiteId};
use sealink_proto::HostKey;
use sealink_proto::stream::assembly::FIRST_DATA_SEQ;
use sealink_proto::stream::body::{
    EntryKind, MAX_BATCH_ENTRIES, MAX_STRIPES, UNKNOWN_SIZE, UP_TO_DATE,
};
use sealink_proto::stream::record::{MAX_RECORD_DATA, MIN_RECORD_DATA, RecordType};
use sealink_proto::stream::{End, Layout, Manifest, RecordBound};

use crate::Progress;
use crate::error::TransferError;
use crate::limits::Timeouts;
pub use crate::tree::Source;
use crate::tree::{Gone, Input, Walk};
use session::abort_with;
use stripes::Sent;

/// How to send.
#[derive(Debug)]
pub struct SendConfig {
    pub host: HostKey,
    /// The receiving host's static public key.
    pub peer: [u8; 32],
    pub owner: OwnerSigningKey,
    pub suite: SuiteId,
    /// Encrypt (default) or authenticate only.
    pub scope: Scope,
    /// TCP connections to stripe over (1..=64).
    pub streams: usize,
    /// Data bytes per record.
    pub record_data: usize,
    /// Bytes of data per batch (one read, one write system call).
    pub batch_data: usize,
    pub timeouts: Timeouts,
    /// Most data records to seal under the session's key; `None`: the suite's AEAD usage
    /// limit for the record size (see `RecordBound::key`). Only ever tightens that limit.
    pub key_data_records: Option<u64>,
    /// Let the receiver resume files it holds part of from an interrupted session (off: it
    /// discards what it kept and every file starts over).
    pub resume: bool,
    /// Gitignore-style patterns of entries to leave out of directory trees, matched against
    /// paths relative to each top directory.
    pub exclude: Vec<String>,
    /// Send no data for files the receiver already has with the same size and mtime.
    pub update: bool,
    /// Most bytes of sealed data records written per second over all stripes together
    /// (`None`: as fast as the network takes them).
    pub rate_limit: Option<u64>,
    /// Send what absolute links, and links that lead out of their tree, point to (off: such
    /// links are skipped with a warning).
    pub copy_links: bool,
    /// Ask the receiver to delete, in directories the transfer merges into, what the sender
    /// does not have (it does so only when run with `recv --delete`).
    pub delete: bool,
    /// Keep one line per entry in the report (`names` ... `up_to_date`); off, the report
    /// holds only counts, whatever the number of entries.
    pub list_entries: bool,
}

#[derive(Debug, Clone, Default)]
pub struct SendReport {
    pub bytes: u64,
    /// Entries sent (files, directories and links of the trees, and the files given).
    pub files: usize,
    /// Counts by kind, and what travelled (without [`SendConfig::list_entries`] they are all
    /// the report says of the entries).
    pub dirs: u64,
    pub links: u64,
    /// Files the receiver already had (`update`), and their bytes.
    pub up_to_date_files: u64,
    pub up_to_date_bytes: u64,
    /// Bytes the receiver held from an interrupted session.
    pub resumed_bytes: u64,
    /// Manifest batches the transfer took.
    pub batches: u64,
    /// What could not be sent (unreadable, a source that does not exist), one line each: the
    /// transfer is partial, the rest was sent.
    pub problems: Vec<String>,
    /// Files that vanished or changed between being listed and being read, one line each:
    /// not sent (the receiver kept what it had), the rest was. A transfer whose only problems
    /// are these is partial the way rsync's exit 24 says.
    pub vanished: Vec<String>,
    /// Absolute links, and links leading out of their tree, skipped (see `copy_links`).
    pub skipped_links: Vec<String>,
    /// Per entry, in the order sent (only with [`SendConfig::list_entries`]): its path as
    /// sent, where it was read (`None` for standard input), and what it is.
    pub names: Vec<String>,
    pub paths: Vec<Option<PathBuf>>,
    pub kinds: Vec<EntryKind>,
    /// Each entry's size as sent (standard input's as it turned out; 0 for a directory or link).
    pub sizes: Vec<u64>,
    /// Bytes of each file the receiver already held from an interrupted session (not sent).
    pub resumed: Vec<u64>,
    /// Files the receiver already had with the same size and mtime (`update`): not sent.
    pub up_to_date: Vec<bool>,
    /// Entries of the trees that are not regular files, directories or links: not sent.
    pub special: Vec<PathBuf>,
    /// Entries left out by the exclude patterns.
    pub excluded: u64,
    pub streams: usize,
    /// From the first byte sent to the receiver's confirmation.
    pub elapsed: Duration,
}

impl SendReport {
    fn count(&mut self, kind: &EntryKind, size: u64, held: u64, record_data: u64) {
        match kind {
            EntryKind::Dir => self.dirs += 1,
            EntryKind::Symlink(_) => self.links += 1,
            EntryKind::File => {}
        }
        match held {
            0 => {}
            UP_TO_DATE => {
                self.up_to_date_files += 1;
                self.up_to_date_bytes += size;
            }
            h => self.resumed_bytes += h.saturating_mul(record_data).min(size),
        }
    }
    /// Counts a batch the receiver has (and lists its entries when asked to): `inputs` with
    /// their sizes as sent and what the receiver held of each.
    fn add_batch(&mut self, inputs: &[Input], sent: &Sent, cfg: &SendConfig) {
        for (_, why) in &sent.gone {
            match why {
                Gone::Vanished(l) => {
                    tracing::warn!("{l} (not sent)");
                    crate::tree::keep(&mut self.vanished, l.clone());
                }
                Gone::Unreadable(l) => {
                    tracing::warn!("{l} (not sent)");
                    crate::tree::keep(&mut self.problems, l.clone());
                }
            }
        }
        let left_out = |k: usize| sent.left_out.get(k).copied().unwrap_or(false);
        for (k, ((i, size), h)) in inputs.iter().zip(&sent.sizes).zip(&sent.held).enumerate() {
            if left_out(k) {
                continue;
            }
            self.bytes += size;
            self.files += 1;
            if cfg.list_entries {
                self.names.push(i.entry.name.clone());
                self.paths.push(i.path.clone());
                self.kinds.push(i.entry.kind.clone());
                self.sizes.push(*size);
                self.resumed.push(match *h {
                    UP_TO_DATE => 0,
                    h => h.saturating_mul(cfg.record_data as u64).min(*size),
                });
                self.up_to_date.push(*h == UP_TO_DATE);
            }
            self.count(&i.entry.kind, *size, *h, cfg.record_data as u64);
        }
        self.batches += 1;
    }
}

/// Most bytes a manifest batch takes (a record holds 1 MiB; the hello's fixed part aside).
const MAX_BATCH_BYTES: usize = MAX_RECORD_DATA - 4096;

/// The walk's next batch and whether more follow (or why it could not be walked).
type NextBatch = Result<(Vec<Input>, bool), TransferError>;

/// Sends `sources` to the receiver at `addr`; returns once the receiver has confirmed that it
/// holds every file complete under its final name. The tree is walked as it is sent, one
/// manifest batch at a time. What could not be read is reported in
/// [`SendReport::problems`] (the rest is sent: a partial transfer).
pub fn send(
    addr: SocketAddr,
    cfg: &SendConfig,
    sources: &[Source],
    progress: &Progress,
) -> Result<SendReport, TransferError> {
    check_config(cfg)?;
    let per_batch = entries_per_batch();
    // Every argument is checked, and the first batch walked, before connecting.
    let mut walk = Walk::new(sources, &cfg.exclude, cfg.copy_links)?;
    let (mut inputs, mut more) = walk.next_batch(per_batch, MAX_BATCH_BYTES)?;
    if inputs.is_empty() {
        return Err(TransferError::Usage(format!(
            "nothing to send: {}",
            walk.problems.join("; ")
        )));
    }
    let bound = RecordBound::key(cfg.suite, cfg.record_data as u32, cfg.key_data_records);
    // The first batch is known before connecting: past the key's limit, refuse it now.
    bound.check(batch_records(cfg, FIRST_DATA_SEQ, &inputs))?;

    let start = Instant::now();
    let (socks, keys) = session::open(addr, cfg, &inputs, more)?;
    let mut report = SendReport {
        streams: socks.len(),
        ..SendReport::default()
    };
    // Batch after batch: the ready, the data, the end; then the next batch's manifest.
    let mut first_seq = FIRST_DATA_SEQ;
    let mut batch = 0u64;
    loop {
        let layout = Layout::starting_at(
            first_seq,
            cfg.record_data as u32,
            inputs.iter().map(|i| i.entry.size),
        );
        // Never seal past the key's usage limit (standard input is checked as it is read).
        let records = known_records(cfg, &layout, &inputs);
        if let Err(e) = bound.check(first_seq - FIRST_DATA_SEQ + records) {
            return Err(abort_with(e.into(), &socks[0], &keys, cfg));
        }
        progress.add_total(total_bytes(&inputs));
        let walk_next = || {
            if more {
                walk.next_batch(per_batch, MAX_BATCH_BYTES)
            } else {
                Ok((Vec::new(), false))
            }
        };
        let (sent, walked) = stripes::send_batch(
            cfg, &keys, &socks, &inputs, &layout, batch, bound, progress, walk_next,
        )?;
        let end = End {
            data_records: sent.data_records,
            sizes: sent.sizes.clone(),
            hashes: sent.hashes.clone(),
            left_out: sent.left_out.clone(),
        };
        let end_seq = layout.end_seq(sent.data_records);
        // The receiver may have failed after the last data left (a full disk): its reason is
        // already on the way, and its close reset the connection under this write.
        session::write_control(
            &socks[0],
            &keys,
            cfg.scope,
            RecordType::End,
            end_seq,
            &end.encode(),
        )?;
        report.add_batch(&inputs, &sent, cfg);
        if !more {
            break;
        }
        // The next batch, walked while this one was sent (or now, if this one had nothing to
        // send); its files are opened as it is announced.
        drop(inputs);
        let next = match walked {
            Some(w) => w,
            None => walk.next_batch(per_batch, MAX_BATCH_BYTES),
        };
        let (next, next_more) = match next {
            Ok(x) => x,
            Err(e) => return Err(abort_with(e, &socks[0], &keys, cfg)),
        };
        let manifest = Manifest {
            more: next_more,
            files: next.iter().map(|i| i.entry.clone()).collect(),
        };
        let m_seq = end_seq + 1;
        let manifest = manifest.encode();
        session::write_control(
            &socks[0],
            &keys,
            cfg.scope,
            RecordType::Manifest,
            m_seq,
            &manifest,
        )?;
        inputs = next;
        more = next_more;
        first_seq = m_seq + 1;
        batch += 1;
    }
    for s in &socks {
        let _ = s.shutdown(Shutdown::Write);
    }
    let deadline = Instant::now() + cfg.timeouts.idle;
    session::wait_for_done(&socks[0], &keys.recv, report.bytes, report.files, deadline)?;
    report.special = std::mem::take(&mut walk.special);
    report.excluded = walk.excluded;
    report.problems.append(&mut walk.problems);
    report.vanished.append(&mut walk.vanished);
    report.skipped_links = std::mem::take(&mut walk.skipped_links);
    report.elapsed = start.elapsed();
    Ok(report)
}

/// Entries per manifest batch. Two batches' files are open at once (one sent while the next
/// is walked): batches are smaller where the open-files limit cannot take two of the largest.
fn entries_per_batch() -> usize {
    let fds = crate::files::raise_open_files_limit();
    usize::try_from(fds.saturating_sub(256) / 2)
        .unwrap_or(usize::MAX)
        .clamp(16, MAX_BATCH_ENTRIES)
}

/// A batch's bytes (`u64::MAX`: unknown, standard input among them).
fn total_bytes(inputs: &[Input]) -> u64 {
    if inputs.iter().any(|i| i.entry.size == UNKNOWN_SIZE) {
        u64::MAX
    } else {
        inputs.iter().map(|i| i.entry.size).sum()
    }
}

/// Refuses settings no transfer can run with.
fn check_config(cfg: &SendConfig) -> Result<(), TransferError> {
    if !(1..=MAX_STRIPES).contains(&cfg.streams) {
        return Err(TransferError::Usage(format!(
            "streams must be within 1..={MAX_STRIPES}"
        )));
    }
    if !(MIN_RECORD_DATA..=MAX_RECORD_DATA).contains(&cfg.record_data) {
        return Err(TransferError::Usage(format!(
            "record size must be within {MIN_RECORD_DATA}..={MAX_RECORD_DATA}"
        )));
    }
    if cfg.scope == Scope::None {
        return Err(TransferError::Usage(
            "stream mode always authenticates".into(),
        ));
    }
    Ok(())
}

/// Data records of the batch laid out in `layout` whose sizes are known (standard input, last
/// and of unknown size, is checked as it is read).
fn known_records(cfg: &SendConfig, layout: &Layout, inputs: &[Input]) -> u64 {
    let before_last = || {
        Layout::starting_at(
            layout.first_seq(),
            cfg.record_data as u32,
            inputs[..inputs.len() - 1].iter().map(|i| i.entry.size),
        )
        .known_data_records()
        .unwrap_or(0)
    };
    layout.known_data_records().unwrap_or_else(before_last)
}

/// What a dry run found beside the entries it listed.
#[derive(Debug, Clone, Default)]
pub struct Listed {
    /// What could not be sent (as [`SendReport::problems`]).
    pub problems: Vec<String>,
    /// Files that vanished while being listed (as [`SendReport::vanished`]).
    pub vanished: Vec<String>,
    pub skipped_links: Vec<String>,
    pub excluded: u64,
    pub special: Vec<PathBuf>,
}

/// Walks `sources` as [`send`] would, calling `each` for every entry it would announce, in
/// order; connects to nothing and changes nothing (`send --dry-run`).
pub fn list(
    sources: &[Source],
    exclude: &[String],
    copy_links: bool,
    mut each: impl FnMut(&sealink_proto::stream::FileEntry),
) -> Result<Listed, TransferError> {
    let mut walk = Walk::new(sources, exclude, copy_links)?;
    loop {
        let (batch, more) = walk.next_batch(MAX_BATCH_ENTRIES, MAX_BATCH_BYTES)?;
        batch.iter().for_each(|i| each(&i.entry));
        if !more {
            break;
        }
    }
    Ok(Listed {
        problems: walk.problems,
        vanished: walk.vanished,
        skipped_links: walk.skipped_links,
        excluded: walk.excluded,
        special: walk.special,
    })
}

/// Data records of the session up to the end of the batch of `inputs` whose data starts at
/// `first_seq` (standard input, last and of unknown size, not counted: it is checked as it is
/// read).
fn batch_records(cfg: &SendConfig, first_seq: u64, inputs: &[Input]) -> u64 {
    let known = inputs
        .iter()
        .filter(|i| i.entry.size != UNKNOWN_SIZE)
        .map(|i| i.entry.size);
    first_seq - FIRST_DATA_SEQ
        + Layout::starting_at(first_seq, cfg.record_data as u32, known)
            .known_data_records()
            .unwrap_or(0)
}
