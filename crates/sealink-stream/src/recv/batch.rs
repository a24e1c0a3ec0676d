//! One manifest batch: its part files, resume state and checkpoints, verified and stored.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use sealink_proto::stream::body::{EntryKind, FileEntry, UNKNOWN_SIZE, UP_TO_DATE};
use sealink_proto::stream::record;
use sealink_proto::stream::resume::{held_records, resumable};
use sealink_proto::stream::{Assembly, End, Hello, Layout, SessionKeys, StreamError};

use super::takeover::{Holding, Stop, open_taking_over};
use super::{Dest, RecvConfig, lock};
use crate::Progress;
use crate::error::{IoContext, TransferError};
use crate::files::{PartFile, process_umask, received_mode};
use crate::limits::Timeouts;
use crate::place::{Found, Slot, Tree};
use crate::records::RecordReader;

/// How often, at most, a receiver records durably how much of each resumable file it holds
/// (sync of the data, then a new record map); also once when a transfer fails.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// A file of a tree keeps resume state (a record map, checkpointed) only from this many
/// records (4 MiB at the default record size).
const TREE_RESUME_RECORDS: u64 = 256;

/// Where opened data goes.
pub(super) enum Out {
    /// One slot per entry of the batch.
    Files(Vec<Slot>),
    Stdout(Mutex<Reorder>),
}

/// Restores stream order for standard output: in-order data is written at once, the rest
/// waits (bounded).
pub(super) struct Reorder {
    pub(super) next: u64,
    pub(super) pending: BTreeMap<u64, Vec<u8>>,
    pub(super) pending_bytes: usize,
    pub(super) out: std::io::Stdout,
}

/// One manifest batch being received (the session's state beyond it lives in
/// `session::Batches`: the stripes, their readers, the manifest check; and the tree).
pub(super) struct Batch<'a> {
    pub(super) keys: &'a SessionKeys,
    pub(super) assembly: Mutex<Assembly>,
    pub(super) out: Out,
    /// The batch's entries, and what the receiver found at each one's place.
    pub(super) files: Vec<FileEntry>,
    pub(super) found: Vec<Found>,
    /// The manifest's last batch: the control stripe must end right after its end record.
    pub(super) last: bool,
    /// How long verifying and storing the batch took (for the debug log).
    pub(super) stored_in: Mutex<Duration>,
    pub(super) end: Mutex<Option<End>>,
    /// Per file, from the end: the sender left it out (it vanished or changed there); nothing
    /// of it is stored.
    pub(super) left_out: std::sync::OnceLock<Vec<bool>>,
    pub(super) failed: AtomicBool,
    /// Readable once every record of the batch is in: the stripes that wait for data wake at
    /// once rather than at their next tick (a batch of small files takes a few ms, a tick
    /// 50 ms).
    pub(super) done: Done,
    pub(super) progress: &'a Progress,
    pub(super) record_cap: usize,
    pub(super) modes: Vec<u32>,
    pub(super) timeouts: Timeouts,
    /// When data last arrived or was stored, in nanoseconds since `t0`.
    pub(super) last_progress: AtomicU64,
    pub(super) t0: Instant,
    /// Per file: records held from an earlier session (as the ready said), their bytes, and
    /// the file's announced size.
    pub(super) held: Vec<u64>,
    pub(super) resumed: Vec<u64>,
    pub(super) sizes: Vec<u64>,
    pub(super) record_data: u64,
    /// Whether any file is resumable (then checkpoints are taken).
    pub(super) resumable: bool,
    /// Held (shared) from accepting records to writing them; a checkpoint takes it alone to
    /// see only records that are written.
    pub(super) writes: RwLock<()>,
    /// Per file: the lowest offset of data accepted but never written (a write failed, or the
    /// batch was refused before its turn came); `u64::MAX` if none. A checkpoint never claims
    /// bytes from there on.
    pub(super) unwritten: Mutex<Vec<u64>>,
    /// The next checkpoint's time (ns since `t0`), and who takes it.
    pub(super) next_checkpoint: AtomicU64,
    pub(super) checkpointing: Mutex<()>,
}

impl<'a> Batch<'a> {
    /// Opens one batch: bounds it, decides where each entry goes (refusing before anything is
    /// created), opens part files and resume state, counts what the receiver holds.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn open(
        keys: &'a SessionKeys,
        hello: &Hello,
        cfg: &RecvConfig,
        files: &[FileEntry],
        last: bool,
        first_seq: u64,
        tree: Option<&mut Tree>,
        holding: &mut Holding<'_>,
        stop: &Arc<Stop>,
        progress: &'a Progress,
    ) -> Result<Self, TransferError> {
        // Bound what the batch announces before anything is allocated or created for it.
        let layout =
            Layout::starting_at(first_seq, hello.record_data, files.iter().map(|f| f.size));
        let bound = cfg.session_limits.bound(keys.suite, hello.record_data);
        let mut assembly = Assembly::new(layout, bound)?;
        // Records of each file kept from an interrupted session (never for standard output).
        let mut held = vec![0u64; files.len()];
        if matches!(cfg.dest, Dest::Stdout) && files.iter().any(|f| f.kind != EntryKind::File) {
            return Err(TransferError::Usage(
                "a directory tree cannot be written to standard output".into(),
            ));
        }
        let mut found = Vec::new();
        let modes: Vec<u32> = {
            let umask = process_umask();
            files
                .iter()
                .map(|f| received_mode(f.mode, umask, cfg.keep_group_other_write))
                .collect()
        };
        let out = match (&cfg.dest, tree) {
            (Dest::Dir(dir), Some(tree)) => {
                // Every path was validated by the decoder; what is there decides the rest.
                found = tree.plan(files)?;
                tree.make_staged_dirs(files, &mut found)?;
                let mut slots: Vec<Slot> = Vec::with_capacity(files.len());
                for (i, f) in files.iter().enumerate() {
                    let same = found[i] == Found::Same;
                    match open_slot(dir, tree, hello, f, modes[i], same, &mut held[i], holding) {
                        Ok(p) => slots.push(p),
                        Err(e) => {
                            release_parts(&slots);
                            // Asked to stop while waiting for another session to let go.
                            let e = if stop.requested() {
                                stop.superseded()
                            } else {
                                e
                            };
                            return Err(e);
                        }
                    }
                }
                Out::Files(slots)
            }
            _ => Out::Stdout(Mutex::new(Reorder {
                next: first_seq,
                pending: BTreeMap::new(),
                pending_bytes: 0,
                out: std::io::stdout(),
            })),
        };
        let resumed = match hold(&mut assembly, &held, progress) {
            Ok(r) => r,
            Err(e) => {
                if let Out::Files(slots) = &out {
                    release_parts(slots);
                }
                return Err(e.into());
            }
        };
        progress.add_total(if files.iter().any(|f| f.size == UNKNOWN_SIZE) {
            u64::MAX
        } else {
            files.iter().map(|f| f.size).fold(0, u64::saturating_add)
        });
        let resumable = matches!(&out, Out::Files(s)
            if s.iter().filter_map(Slot::part).any(|p| p.resume.is_some()));
        Ok(Batch {
            assembly: Mutex::new(assembly),
            out,
            found,
            files: files.to_vec(),
            last,
            stored_in: Mutex::new(Duration::ZERO),
            end: Mutex::new(None),
            left_out: std::sync::OnceLock::new(),
            failed: AtomicBool::new(false),
            done: Done::new()?,
            progress,
            record_cap: record::wire_len(hello.record_data as usize).max(4096),
            modes,
            keys,
            timeouts: cfg.timeouts,
            last_progress: AtomicU64::new(0),
            t0: Instant::now(),
            resumable,
            held,
            resumed,
            sizes: files.iter().map(|f| f.size).collect(),
            record_data: u64::from(hello.record_data),
            writes: RwLock::new(()),
            unwritten: Mutex::new(vec![u64::MAX; files.len()]),
            next_checkpoint: AtomicU64::new(CHECKPOINT_INTERVAL.as_nanos() as u64),
            checkpointing: Mutex::new(()),
        })
    }

    /// Closes the batch's part files (they stay on disk only as resume state).
    pub(super) fn release(&self) {
        if let Out::Files(slots) = &self.out {
            release_parts(slots);
        }
    }

    /// After a failure: keeps what arrived of resumable files for the next attempt, and
    /// closes the part files.
    pub(super) fn keep_or_release(&self, peer: SocketAddr) {
        if let Out::Files(slots) = &self.out {
            let parts = || slots.iter().filter_map(Slot::part);
            if self.resumable
                && let Err(c) = self.checkpoint()
            {
                tracing::warn!("{peer}: cannot keep the resume state: {c}");
                parts().for_each(PartFile::discard);
            }
            parts().for_each(PartFile::release);
        }
    }

    /// Receives the batch on every stripe and verifies it (not stored yet: see
    /// [`Batch::store`]); returns the files' sizes (from the authenticated end) and the end
    /// record's seq.
    pub(super) fn transfer(
        &self,
        all: &[&TcpStream],
        readers: &mut [RecordReader],
    ) -> Result<(Vec<u64>, u64), TransferError> {
        self.touch();
        let stop_all = || {
            // Unblock the other stripes' reads.
            for o in all {
                let _ = o.shutdown(Shutdown::Read);
            }
        };
        let result = std::thread::scope(|sc| {
            let mut hs = Vec::with_capacity(all.len());
            let mut first = None;
            for (i, (s, reader)) in all.iter().zip(readers.iter_mut()).enumerate() {
                let stop_all = &stop_all;
                let spawned = std::thread::Builder::new()
                    .name("sealink-stripe".into())
                    .spawn_scoped(sc, move || {
                        let r = self.stripe(s, reader, i == 0);
                        if r.is_err() && !self.failed.swap(true, Ordering::SeqCst) {
                            stop_all();
                        }
                        r
                    });
                match spawned {
                    Ok(h) => hs.push(h),
                    Err(e) => {
                        if !self.failed.swap(true, Ordering::SeqCst) {
                            stop_all();
                        }
                        first = Some(TransferError::Io {
                            context: "cannot start a receive worker".into(),
                            source: e,
                        });
                        break;
                    }
                }
            }
            for h in hs {
                let r = crate::error::joined(h.join(), "receive");
                if let Err(e) = r {
                    first.get_or_insert(e);
                }
            }
            first.map_or(Ok(()), Err)
        });
        result?;
        let end = lock(&self.end).take().ok_or_else(|| {
            TransferError::PeerClosed("before the authenticated end of the stream".into())
        })?;
        let end_seq = {
            let a = lock(&self.assembly);
            a.finish(&end)?;
            a.end_seq(&end)
        };
        let mut left_out = end.left_out.clone();
        left_out.resize(self.files.len(), false);
        let _ = self.left_out.set(left_out);
        match &self.out {
            Out::Files(slots) => self.verify_hashes(slots, &end)?,
            Out::Stdout(_) if end.left_out.contains(&true) => {
                return Err(TransferError::SenderAborted(
                    "the file changed or vanished on the sender while being sent".into(),
                ));
            }
            Out::Stdout(r) => {
                let mut r = lock(r);
                if !r.pending.is_empty() {
                    return Err(StreamError::MalformedBody {
                        what: "stream",
                        why: "data left out of order".into(),
                    }
                    .into());
                }
                r.out
                    .flush()
                    .ctx(|| "cannot write standard output".into())?;
            }
        }
        Ok((end.sizes, end_seq))
    }

    /// Stores a received and verified batch: its files made durable (without the tree: the
    /// next batch is planned meanwhile), then everything put in place in order.
    pub(super) fn store(&self, tree: &Mutex<Tree>, sync: bool) -> Result<(), TransferError> {
        let Out::Files(slots) = &self.out else {
            return Ok(());
        };
        let t = Instant::now();
        let left_out = self.left_out.get().map_or(&[][..], Vec::as_slice);
        for (i, s) in slots.iter().enumerate() {
            if left_out.get(i) == Some(&true) {
                // What arrived of it is zeros: the receiver keeps what it had there.
                tracing::warn!(
                    "{}: left out by the sender (it vanished or changed there while being \
                     sent); not stored",
                    self.files[i].name
                );
                if let Some(p) = s.part() {
                    p.discard();
                }
                continue;
            }
            // Files that took no data are created now, on the storing thread.
            s.make().ctx(|| {
                format!(
                    "cannot create {}",
                    s.path().unwrap_or(Path::new("?")).display()
                )
            })?;
        }
        let synced = Tree::durable(sync, &self.files, slots, &self.modes, left_out)?;
        lock(tree).commit(
            &self.files,
            &self.found,
            slots,
            &self.modes,
            synced,
            left_out,
        )?;
        *lock(&self.stored_in) = t.elapsed();
        Ok(())
    }

    /// Whether every record of the batch has arrived (once its end is known); the first to
    /// see it wakes the stripes still waiting.
    pub(super) fn complete(&self) -> bool {
        let expected = lock(&self.end).as_ref().map(|e| e.data_records);
        let complete = expected.is_some_and(|n| lock(&self.assembly).received() == n);
        if complete {
            self.done.signal();
        }
        complete
    }

    /// Trusts nothing kept from an earlier session: every resumed file (and any other whose
    /// end carries a hash) must hash, as assembled, to the sender's SHA-256. One read of each
    /// such file. A mismatch deletes that file's resume state.
    pub(super) fn verify_hashes(&self, slots: &[Slot], end: &End) -> Result<(), TransferError> {
        for (i, slot) in slots.iter().enumerate() {
            if end.left_out.get(i) == Some(&true) {
                continue;
            }
            let want = end.hashes.get(i).copied().flatten();
            // A lazy file that took no data is created for the check.
            let made = if want.is_some() {
                slot.make()
                    .ctx(|| format!("cannot create a file for entry {i}"))?
            } else {
                slot.part()
            };
            let Some(p) = made else { continue };
            if self.held.get(i).is_some_and(|&h| h > 0 && h != UP_TO_DATE) && want.is_none() {
                return Err(StreamError::MalformedBody {
                    what: "end",
                    why: format!("no SHA-256 for resumed file {i}"),
                }
                .into());
            }
            let Some(want) = want else { continue };
            let got = p
                .sha256(end.sizes[i])
                .ctx(|| format!("cannot read back {}", p.path.display()))?;
            if got != want {
                p.discard();
                return Err(StreamError::HashMismatch {
                    name: p
                        .path
                        .file_name()
                        .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                }
                .into());
            }
        }
        Ok(())
    }

    /// Takes a checkpoint if one is due and no other stripe is taking one.
    pub(super) fn maybe_checkpoint(&self) -> Result<(), TransferError> {
        let now = self.t0.elapsed().as_nanos() as u64;
        if now < self.next_checkpoint.load(Ordering::Relaxed) {
            return Ok(());
        }
        let Ok(_one) = self.checkpointing.try_lock() else {
            return Ok(());
        };
        self.next_checkpoint.store(
            now + CHECKPOINT_INTERVAL.as_nanos() as u64,
            Ordering::Relaxed,
        );
        self.checkpoint()
    }

    /// Records durably, for each resumable file, the prefix of it that has arrived and been
    /// written (the part file's data is synced before its map claims it).
    pub(super) fn checkpoint(&self) -> Result<(), TransferError> {
        let Out::Files(slots) = &self.out else {
            return Ok(());
        };
        let (prefixes, unwritten): (Vec<u64>, Vec<u64>) = {
            // No record is between being accepted and being written while this is held.
            let _quiet = self.writes.write().unwrap_or_else(|p| p.into_inner());
            let a = lock(&self.assembly);
            (
                (0..slots.len()).map(|i| a.held_prefix(i)).collect(),
                lock(&self.unwritten).clone(),
            )
        };
        for (((slot, &records), &size), &gap) in
            slots.iter().zip(&prefixes).zip(&self.sizes).zip(&unwritten)
        {
            let Some(p) = slot.part() else { continue };
            // Accepted is not written: the map claims only what reached the part file.
            let bytes = records.saturating_mul(self.record_data).min(size).min(gap);
            p.checkpoint(bytes)
                .ctx(|| format!("cannot record the resume state of {}", p.path.display()))?;
        }
        Ok(())
    }

    /// Notes progress: data arrived or was stored.
    pub(super) fn touch(&self) {
        let now = self.t0.elapsed().as_nanos() as u64;
        self.last_progress.fetch_max(now, Ordering::Relaxed);
    }

    /// Whether the session has gone without progress for longer than the idle timeout.
    pub(super) fn stalled(&self) -> bool {
        let last = Duration::from_nanos(self.last_progress.load(Ordering::Relaxed));
        self.t0.elapsed().saturating_sub(last) > self.timeouts.idle
    }
}

/// Where entry `f` of a batch goes in `dir`: a directory or a link made when stored, a file
/// kept as it is (`same`: up to date), or a part file, new or resumed (then `held` is set to
/// the records it holds, or [`UP_TO_DATE`]). `mode` is the mode it will have.
#[allow(clippy::too_many_arguments)]
fn open_slot(
    dir: &Path,
    tree: &Tree,
    hello: &Hello,
    f: &FileEntry,
    mode: u32,
    same: bool,
    held: &mut u64,
    holding: &mut Holding<'_>,
) -> Result<Slot, TransferError> {
    let path = dir.join(&f.name);
    match &f.kind {
        EntryKind::Dir => Ok(Slot::Dir),
        EntryKind::Symlink(t) => Ok(Slot::Link(t.clone())),
        EntryKind::File if same => {
            *held = UP_TO_DATE;
            Ok(Slot::Keep)
        }
        // A file of one record arrives whole or not at all: no resume state. Nor has a small
        // file of a tree (a rerun keeps its batches' files already stored and sends it again
        // whole, which costs less than the fsyncs its record map takes every second).
        EntryKind::File
            if resumable(f.size, f.mtime)
                && f.size > u64::from(hello.record_data)
                && (!f.name.contains('/')
                    || f.size >= TREE_RESUME_RECORDS * u64::from(hello.record_data)) =>
        {
            open_taking_over(dir, &hello.owner_public, f, hello.fresh, holding)
                .map(|(p, bytes)| {
                    *held = held_records(bytes, f.size, hello.record_data);
                    Slot::Part(p)
                })
                .ctx(|| format!("cannot open the resume state of {}", path.display()))
        }
        EntryKind::File => {
            let size = (f.size != UNKNOWN_SIZE).then_some(f.size);
            // Created with its final mode where nothing can change it on the way.
            let mode = tree.modes_kept_at_creation(&f.name).then_some(mode);
            match tree.direct_path(&f.name) {
                // Without the flush, created as data arrives (the ready goes at once); with
                // it, created here: the A/B of RESULTS §48 measured 10% faster without the
                // flush and 5% slower with it.
                Some(at) if !tree.sync() => Ok(Slot::lazy(at, size, mode)),
                Some(at) => PartFile::create_direct(at, size, mode)
                    .map(Slot::Part)
                    .ctx(|| format!("cannot create a file for {}", path.display())),
                None => PartFile::create_in(&tree.part_dir(&f.name), path.clone(), size)
                    .map(Slot::Part)
                    .ctx(|| format!("cannot create a file for {}", path.display())),
            }
        }
    }
}

/// Marks what the receiver holds of each file (`held`: records kept from an interrupted
/// session, or [`UP_TO_DATE`]) as received; returns the bytes resumed of each.
fn hold(
    assembly: &mut Assembly,
    held: &[u64],
    progress: &Progress,
) -> Result<Vec<u64>, StreamError> {
    let mut resumed = vec![0u64; held.len()];
    for (i, &h) in held.iter().enumerate().filter(|x| *x.1 > 0) {
        let up_to_date = h == UP_TO_DATE;
        let records = if up_to_date {
            assembly.layout().file_records(i).unwrap_or(0)
        } else {
            h
        };
        let bytes = assembly.hold(i, records)?;
        progress.add_held(bytes);
        if !up_to_date {
            resumed[i] = bytes;
        }
    }
    Ok(resumed)
}

/// Closes the part files among `slots` (they stay on disk only as resume state).
fn release_parts(slots: &[Slot]) {
    slots
        .iter()
        .filter_map(Slot::part)
        .for_each(PartFile::release);
}

/// A batch's "all records are in", as an eventfd a stripe can wait on beside its socket.
#[derive(Debug)]
pub(super) struct Done {
    fd: rustix::fd::OwnedFd,
    signalled: AtomicBool,
}

impl Done {
    fn new() -> Result<Self, TransferError> {
        let fd = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )
        .map_err(std::io::Error::from)
        .ctx(|| "cannot make an eventfd".into())?;
        Ok(Done {
            fd,
            signalled: AtomicBool::new(false),
        })
    }

    /// Makes the eventfd readable for good (nothing reads it: it stays readable).
    pub(super) fn signal(&self) {
        if !self.signalled.swap(true, Ordering::AcqRel) {
            let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
        }
    }

    /// Waits up to `tick` for `sock` to be readable or the batch to be complete; says whether
    /// the batch is (then the caller need not read).
    pub(super) fn wait(&self, sock: &std::net::TcpStream, tick: Duration) -> bool {
        use rustix::event::{PollFd, PollFlags};
        let mut fds = [
            PollFd::new(sock, PollFlags::IN),
            PollFd::new(&self.fd, PollFlags::IN),
        ];
        let t = rustix::time::Timespec {
            tv_sec: tick.as_secs() as _,
            tv_nsec: tick.subsec_nanos() as _,
        };
        let _ = rustix::event::poll(&mut fds, Some(&t));
        !fds[1].revents().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_complete_batch_wakes_a_stripe_waiting_for_data() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (sock, _) = l.accept().unwrap();
        let done = Done::new().unwrap();
        // Nothing to read and not complete: the wait times out.
        assert!(!done.wait(&sock, Duration::from_millis(10)));
        done.signal();
        // Once signalled it stays signalled for every stripe that waits.
        assert!(done.wait(&sock, Duration::from_secs(60)));
        assert!(done.wait(&sock, Duration::from_secs(60)));
    }
}
