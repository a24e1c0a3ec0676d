//! The sending side of a transfer.

use std::io::{IoSliceMut, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sealink_crypto::sign::OwnerSigningKey;
use sealink_crypto::{PacketKey, Scope, SuiteId};
use sealink_proto::HostKey;
use sealink_proto::stream::assembly::{Batch, FIRST_DATA_SEQ};
use sealink_proto::stream::body::{
    EntryKind, MAX_BATCH_ENTRIES, MAX_STRIPES, UNKNOWN_SIZE, UP_TO_DATE,
};
use sealink_proto::stream::handshake::{Initiator, RESPONSE_MESSAGE_LEN};
use sealink_proto::stream::record::{MAX_RECORD_DATA, MIN_RECORD_DATA, RecordType};
use sealink_proto::stream::{
    Abort, AbortCode, Done, End, Hello, Layout, Manifest, READY_SEQ, REPLY_SEQ, Ready, RecordBound,
    SENDER_ABORT_SEQ, SessionKeys, StreamError, ready_seq,
};

use crate::Progress;
use crate::conn::{self, KIND_INIT, MAGIC, secs};
use crate::error::{IoContext, TransferError, is_connection_timeout, is_timeout, socket_error};
use crate::files::{hash_file, read_exact_at, read_up_to};
use crate::limits::Timeouts;
use crate::records::RecordBatch;
pub use crate::tree::Source;
use crate::tree::{Input, Walk};

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
    /// What could not be sent (unreadable, vanished, a source that does not exist), one line
    /// each: the transfer is partial, the rest was sent.
    pub problems: Vec<String>,
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
}

fn connect(addr: SocketAddr, t: &Timeouts) -> Result<TcpStream, TransferError> {
    let s = TcpStream::connect_timeout(&addr, t.setup).map_err(|e| {
        socket_error(e, &format!("cannot connect to {addr}"), || {
            format!("cannot connect to {addr} within {}", secs(t.setup))
        })
    })?;
    conn::tune(&s);
    // A write that cannot hand the receiver a single byte for this long fails.
    s.set_write_timeout(Some(t.idle))
        .ctx(|| "setting a send timeout".into())?;
    Ok(s)
}

fn handshake(s: &TcpStream, cfg: &SendConfig) -> Result<SessionKeys, TransferError> {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let (init, msg) = Initiator::new(&cfg.host, &cfg.peer, cfg.suite, ts)?;
    let mut first = Vec::with_capacity(5 + msg.len());
    first.extend_from_slice(MAGIC);
    first.push(KIND_INIT);
    first.extend_from_slice(&msg);
    (&*s)
        .write_all(&first)
        .ctx(|| "sending the handshake".into())?;
    let mut resp = [0u8; RESPONSE_MESSAGE_LEN];
    let deadline = Instant::now() + cfg.timeouts.setup;
    match conn::read_full(s, &mut resp, deadline) {
        Ok(true) => {}
        Err(e) if is_connection_timeout(&e) => {
            return Err(TransferError::ConnectionTimedOut(
                "waiting for the answer to the handshake".into(),
            ));
        }
        Err(e) if is_timeout(&e) => {
            return Err(TransferError::TimedOut(format!(
                "no answer to the handshake within {}",
                secs(cfg.timeouts.setup)
            )));
        }
        Ok(false) | Err(_) => {
            return Err(TransferError::PeerClosed(
                "during the handshake (is this host in the receiver's trust file, and is the \
                 receiver's host key the one you gave? A busy receiver also closes new \
                 connections when it is flooded)"
                    .into(),
            ));
        }
    }
    Ok(init.finish(&resp)?)
}

/// Shared state of the stripe workers.
struct Work<'a> {
    keys: &'a SessionKeys,
    scope: Scope,
    inputs: &'a [Input],
    batches: Vec<Batch>,
    /// The batches claimed together (see [`groups`]), by index range into `batches`.
    groups: Vec<std::ops::Range<usize>>,
    /// Record slots of a worker's buffer.
    slots: usize,
    next: AtomicUsize,
    stdin: Option<Mutex<StdinState>>,
    per_batch: usize,
    record_data: usize,
    /// The key's usage limit, in data records (standard input is checked as it is read).
    bound: RecordBound,
    failed: AtomicBool,
    progress: &'a Progress,
    pacer: Option<Pacer>,
}

/// `rate_limit`: every stripe takes its turn before a write, so all of them together keep to
/// the rate. Time not used (a slow disk, a slow receiver) is not saved up for a burst later.
struct Pacer {
    bytes_per_sec: f64,
    /// When the bytes granted so far have been paid for at the rate.
    paid_until: Mutex<Option<Instant>>,
}

impl Pacer {
    /// Waits for the turn of `bytes` about to be written.
    fn wait(&self, bytes: usize) {
        let now = Instant::now();
        let start = {
            // A poisoned lock only means another stripe panicked: its time is still valid.
            let mut paid = self.paid_until.lock().unwrap_or_else(|e| e.into_inner());
            let start = paid.map_or(now, |t| t.max(now));
            *paid = Some(start + Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec));
            start
        };
        if start > now {
            std::thread::sleep(start - now);
        }
    }
}

struct StdinState {
    next_seq: u64,
    size: u64,
    eof: bool,
    input: std::io::Stdin,
}

impl Work<'_> {
    /// One stripe: claim a group of batches (one batch of a large file, or the batches of a
    /// run of small files), read them into the record slots, seal in place, one write.
    fn run(&self, mut sock: &TcpStream, idle: Duration) -> Result<(), TransferError> {
        let mut batch = RecordBatch::new(self.record_data, self.slots);
        while !self.failed.load(Ordering::Relaxed) {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let (first_seq, lens) = if let Some(g) = self.groups.get(i) {
                let group = &self.batches[g.clone()];
                let mut lens = Vec::new();
                let mut slots = batch.payloads_mut();
                for b in group {
                    let input = &self.inputs[b.file];
                    let file = input.file.as_ref().expect("batches cover files only");
                    let blens = self.file_lens(b);
                    let mut iov: Vec<IoSliceMut<'_>> = blens
                        .iter()
                        .map(|&n| {
                            IoSliceMut::new(&mut slots.next().expect("room in the group")[..n])
                        })
                        .collect();
                    read_exact_at(file, &mut iov, b.offset)
                        .ctx(|| format!("cannot read {}", input.entry.name))?;
                    lens.extend(blens);
                }
                (group[0].first_seq, lens)
            } else if let Some(stdin) = &self.stdin {
                match self.read_stdin(stdin, &mut batch)? {
                    Some(x) => x,
                    None => break,
                }
            } else {
                break;
            };
            // The group's records have consecutive seqs: one write sends them all.
            let wire = batch.seal_packed(&self.keys.send, self.scope, first_seq, &lens)?;
            if let Some(p) = &self.pacer {
                p.wait(wire.len());
            }
            sock.write_all(wire).map_err(|e| {
                socket_error(e, "sending data", || {
                    format!("the receiver took no data for {}", secs(idle))
                })
            })?;
            self.progress.add(lens.iter().sum::<usize>() as u64);
        }
        Ok(())
    }

    fn file_lens(&self, b: &Batch) -> Vec<usize> {
        let r = self.record_data as u64;
        (0..b.records)
            .map(|k| (b.bytes - k * r).min(r) as usize)
            .collect()
    }

    /// Reads the next batch of standard input under the lock (input order is stream order).
    fn read_stdin(
        &self,
        stdin: &Mutex<StdinState>,
        batch: &mut RecordBatch,
    ) -> Result<Option<(u64, Vec<usize>)>, TransferError> {
        let mut st = stdin.lock().unwrap_or_else(|p| p.into_inner());
        if st.eof {
            return Ok(None);
        }
        let mut lens = Vec::with_capacity(self.per_batch);
        let mut lock = st.input.lock();
        for p in batch.payloads_mut().take(self.per_batch) {
            let n = read_up_to(&mut lock, p).ctx(|| "cannot read standard input".into())?;
            if n > 0 {
                lens.push(n);
            }
            if n < self.record_data {
                drop(lock);
                st.eof = true;
                return self.take_stdin(&mut st, lens);
            }
        }
        drop(lock);
        self.take_stdin(&mut st, lens)
    }

    /// Numbers the records just read; refuses to go past the key's usage limit.
    fn take_stdin(
        &self,
        st: &mut StdinState,
        lens: Vec<usize>,
    ) -> Result<Option<(u64, Vec<usize>)>, TransferError> {
        if lens.is_empty() {
            return Ok(None);
        }
        self.bound.check(st.next_seq - 1 + lens.len() as u64)?;
        let first = st.next_seq;
        st.next_seq += lens.len() as u64;
        st.size += lens.iter().sum::<usize>() as u64;
        Ok(Some((first, lens)))
    }
}

/// Most bytes a manifest batch takes (a record holds 1 MiB; the hello's fixed part aside).
const MAX_BATCH_BYTES: usize = MAX_RECORD_DATA - 4096;

/// The walk's next batch and whether more follow (or why it could not be walked).
type NextBatch = Result<(Vec<Input>, bool), TransferError>;

/// What the sender knows of one batch once the receiver has answered it.
struct Sent {
    held: Vec<u64>,
    hashes: Vec<Option<[u8; 32]>>,
    sizes: Vec<u64>,
    data_records: u64,
}

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
    // Two batches' files are open at once (one sent while the next is walked): batches are
    // smaller where the open-files limit cannot take two of the largest.
    let fds = crate::files::raise_open_files_limit();
    let per_batch = usize::try_from(fds.saturating_sub(256) / 2)
        .unwrap_or(usize::MAX)
        .clamp(16, MAX_BATCH_ENTRIES);
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
    let t = &cfg.timeouts;
    let control = connect(addr, t)?;
    let keys = handshake(&control, cfg)?;
    // The hello first: it authenticates this session to the receiver before the stripes
    // connect (until then they are connections it may evict under load).
    let intro = sealink_proto::stream::owner_intro(&keys.binding, cfg.host.public(), &cfg.peer);
    let hello = Hello {
        owner_public: cfg.owner.public_key(),
        owner_signature: cfg.owner.sign(&intro),
        record_data: cfg.record_data as u32,
        stripes: cfg.streams as u16,
        fresh: !cfg.resume,
        update: cfg.update,
        more,
        delete: cfg.delete,
        files: inputs.iter().map(|i| i.entry.clone()).collect(),
    };
    conn::write_record(
        &control,
        &keys.send,
        RecordType::Hello,
        cfg.scope,
        0,
        &hello.encode(),
    )?;
    drop(hello);
    let mut socks = vec![control];
    for stripe in 1..cfg.streams {
        let joined = connect(addr, t).and_then(|s| {
            (&s).write_all(&conn::join_message(&keys.join_token, stripe as u16))
                .ctx(|| "joining a stripe".into())?;
            Ok(s)
        });
        match joined {
            Ok(s) => socks.push(s),
            Err(e) => {
                // The receiver may have refused the hello and gone (`--once`): its abort on
                // the control stripe says why, which the failed connect does not.
                let answer = Instant::now() + Duration::from_secs(1);
                return Err(
                    match read_reply(&socks[0], &keys.recv, READY_SEQ, answer, "") {
                        Err(
                            a @ (TransferError::Refused(_) | TransferError::ReceiverAborted(_)),
                        ) => a,
                        _ => e,
                    },
                );
            }
        }
    }
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
        let before_last = || {
            Layout::starting_at(
                first_seq,
                cfg.record_data as u32,
                inputs[..inputs.len() - 1].iter().map(|i| i.entry.size),
            )
            .known_data_records()
            .unwrap_or(0)
        };
        let records = layout.known_data_records().unwrap_or_else(before_last);
        if let Err(e) = bound.check(first_seq - FIRST_DATA_SEQ + records) {
            return Err(abort_with(e.into(), &socks[0], &keys, cfg));
        }
        progress.add_total(if inputs.iter().any(|i| i.entry.size == UNKNOWN_SIZE) {
            u64::MAX
        } else {
            inputs.iter().map(|i| i.entry.size).sum()
        });
        let walk_next = || {
            if more {
                walk.next_batch(per_batch, MAX_BATCH_BYTES)
            } else {
                Ok((Vec::new(), false))
            }
        };
        let (sent, walked) = send_batch(
            cfg, &keys, &socks, &inputs, &layout, batch, bound, progress, walk_next,
        )?;
        let end = End {
            data_records: sent.data_records,
            sizes: sent.sizes.clone(),
            hashes: sent.hashes,
        };
        let end_seq = layout.end_seq(sent.data_records);
        if let Err(e) = conn::write_record(
            &socks[0],
            &keys.send,
            RecordType::End,
            cfg.scope,
            end_seq,
            &end.encode(),
        ) {
            // The receiver may have failed after the last data left (a full disk): its reason
            // is already on the way, and its close reset the connection under this write.
            return Err(receivers_reason(&e, &socks[0], &keys.recv).unwrap_or(e));
        }
        for ((i, size), h) in inputs.iter().zip(&sent.sizes).zip(&sent.held) {
            report.bytes += size;
            report.files += 1;
            if cfg.list_entries {
                report.names.push(i.entry.name.clone());
                report.paths.push(i.path.clone());
                report.kinds.push(i.entry.kind.clone());
                report.sizes.push(*size);
                report.resumed.push(match *h {
                    UP_TO_DATE => 0,
                    h => h.saturating_mul(cfg.record_data as u64).min(*size),
                });
                report.up_to_date.push(*h == UP_TO_DATE);
            }
            report.count(&i.entry.kind, *size, *h, cfg.record_data as u64);
        }
        report.batches += 1;
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
        if let Err(e) = conn::write_record(
            &socks[0],
            &keys.send,
            RecordType::Manifest,
            cfg.scope,
            m_seq,
            &manifest.encode(),
        ) {
            return Err(receivers_reason(&e, &socks[0], &keys.recv).unwrap_or(e));
        }
        inputs = next;
        more = next_more;
        first_seq = m_seq + 1;
        batch += 1;
    }
    for s in &socks {
        let _ = s.shutdown(Shutdown::Write);
    }
    let deadline = Instant::now() + t.idle;
    wait_for_done(&socks[0], &keys.recv, report.bytes, report.files, deadline)?;
    report.special = std::mem::take(&mut walk.special);
    report.excluded = walk.excluded;
    report.problems = std::mem::take(&mut walk.problems);
    report.skipped_links = std::mem::take(&mut walk.skipped_links);
    report.elapsed = start.elapsed();
    Ok(report)
}

/// What a dry run found beside the entries it listed.
#[derive(Debug, Clone, Default)]
pub struct Listed {
    /// What could not be sent (as [`SendReport::problems`]).
    pub problems: Vec<String>,
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
        skipped_links: walk.skipped_links,
        excluded: walk.excluded,
        special: walk.special,
    })
}

/// Most records one worker sends in one write when they are small files' (each its own
/// record): a run of small files goes in one write, not one write each.
const SMALL_FILE_RECORDS: usize = 256;

/// Cuts `batches` into the groups a worker claims at once: consecutive batches whose records
/// follow each other (no held records between them), at most `slots` records and about
/// `bytes` of data together. A large file's batch is a group of its own.
fn groups(batches: &[Batch], slots: usize, bytes: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let (mut records, mut data) = (0u64, 0u64);
    for (i, b) in batches.iter().enumerate() {
        let follows = i > start && {
            let p = &batches[i - 1];
            p.first_seq + p.records == b.first_seq
        };
        let fits = records + b.records <= slots as u64 && data + b.bytes <= bytes as u64;
        if i > start && !(follows && fits) {
            out.push(start..i);
            start = i;
            (records, data) = (0, 0);
        }
        records += b.records;
        data += b.bytes;
    }
    if start < batches.len() {
        out.push(start..batches.len());
    }
    out
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

/// Tells the receiver (best effort) why the sender gives up, and returns that error.
fn abort_with(
    e: TransferError,
    control: &TcpStream,
    keys: &SessionKeys,
    cfg: &SendConfig,
) -> TransferError {
    if let Some(why) = receivers_reason(&e, control, &keys.recv) {
        return why;
    }
    // A stalled receiver may not take even this.
    let _ = control.set_write_timeout(Some(cfg.timeouts.idle.min(Duration::from_secs(1))));
    let abort = Abort {
        code: AbortCode::Other,
        message: e.to_string(),
    };
    let _ = conn::write_record(
        control,
        &keys.send,
        RecordType::Abort,
        cfg.scope,
        SENDER_ABORT_SEQ,
        &abort.encode(),
    );
    e
}

/// One batch: waits for its ready, sends what the receiver does not hold over every stripe
/// (and the SHA-256 of each file it resumed), and returns what the end record says.
#[allow(clippy::too_many_arguments)]
fn send_batch(
    cfg: &SendConfig,
    keys: &SessionKeys,
    socks: &[TcpStream],
    inputs: &[Input],
    layout: &Layout,
    batch: u64,
    bound: RecordBound,
    progress: &Progress,
    meanwhile: impl FnOnce() -> NextBatch,
) -> Result<(Sent, Option<NextBatch>), TransferError> {
    let mut meanwhile = Some(meanwhile);
    let mut walked = None;
    let t = &cfg.timeouts;
    // The first ready covers the stripes joining; a later one, the receiver storing the
    // batch before.
    let deadline = Instant::now() + if batch == 0 { t.setup * 2 } else { t.idle };
    let held = match read_reply(
        &socks[0],
        &keys.recv,
        ready_seq(batch),
        deadline,
        "ready from the receiver",
    ) {
        Ok((RecordType::Ready, body)) => Ready::decode(&body)?.held,
        Ok(_) => return Err(StreamError::MalformedHeader("expected the receiver's ready").into()),
        Err(TransferError::ReceiverAborted(m)) if batch == 0 && m.contains("unknown flags") => {
            return Err(TransferError::Refused(format!(
                "the receiver runs an older sealink (stream protocol 1, which takes the whole \
                 manifest in one hello; this sender speaks protocol 2): upgrade sealink on the \
                 receiving host ({m})"
            )));
        }
        Err(e) => return Err(e),
    };
    // What the receiver keeps from an interrupted session: a prefix of each file, not sent;
    // and, when asked, which files it already has (none of theirs is sent).
    // (Up to date without `update` too: a file the receiver holds complete in the staging
    // directory of an interrupted transfer of the same tree.)
    layout.check_held(&held)?;
    for (i, &h) in inputs.iter().zip(&held) {
        progress.add_held(match h {
            0 => 0,
            UP_TO_DATE => i.entry.size,
            h => h.saturating_mul(cfg.record_data as u64).min(i.entry.size),
        });
    }

    // Under a rate limit a batch is at most a twentieth of a second of it, so the stripes take
    // turns in small steps instead of a 1 MiB burst each.
    let batch_data = cfg
        .rate_limit
        .map_or(cfg.batch_data, |r| cfg.batch_data.min((r / 20) as usize));
    let per_batch = (batch_data / cfg.record_data).clamp(1, 1024);
    let stdin_base = layout.known_data_records().map_or_else(
        || {
            // The last file's first seq: the known files' records come before it.
            layout.first_seq()
                + Layout::new(
                    cfg.record_data as u32,
                    inputs[..inputs.len() - 1].iter().map(|i| i.entry.size),
                )
                .known_data_records()
                .unwrap_or(0)
        },
        |_| 0,
    );
    let batches = layout.batches_after(per_batch as u64, &held);
    let slots = per_batch.max(SMALL_FILE_RECORDS);
    let groups = groups(&batches, slots, batch_data);
    let work = Work {
        keys,
        scope: cfg.scope,
        inputs,
        batches,
        groups,
        slots,
        next: AtomicUsize::new(0),
        stdin: inputs
            .last()
            .filter(|i| i.entry.size == UNKNOWN_SIZE)
            .map(|_| {
                Mutex::new(StdinState {
                    next_seq: stdin_base,
                    size: 0,
                    eof: false,
                    input: std::io::stdin(),
                })
            }),
        per_batch,
        record_data: cfg.record_data,
        bound,
        failed: AtomicBool::new(false),
        progress,
        pacer: cfg.rate_limit.map(|r| Pacer {
            // At least a byte a second: a zero rate would never send.
            bytes_per_sec: r.max(1) as f64,
            paid_until: Mutex::new(None),
        }),
    };
    let mut hashes: Vec<Option<[u8; 32]>> = vec![None; inputs.len()];
    let result = std::thread::scope(|sc| {
        let mut handles = Vec::with_capacity(socks.len());
        let mut first_err = None;
        // The receiver checks each file it resumed against the whole file's SHA-256, held
        // part included: one read of such files, beside the stripes.
        let hashed = |h: u64| h > 0 && h != UP_TO_DATE;
        let hasher = held.iter().any(|&h| hashed(h)).then(|| {
            let (work, held, hashes) = (&work, &held, &mut hashes);
            std::thread::Builder::new()
                .name("sealink-hash".into())
                .spawn_scoped(sc, move || {
                    for (i, input) in inputs.iter().enumerate() {
                        let Some(file) = input.file.as_ref().filter(|_| hashed(held[i])) else {
                            continue;
                        };
                        if work.failed.load(Ordering::Relaxed) {
                            break;
                        }
                        let h = hash_file(file, input.entry.size)
                            .ctx(|| format!("cannot read {}", input.entry.name));
                        match h {
                            Ok(h) => hashes[i] = Some(h),
                            Err(e) => {
                                work.failed.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                    }
                    Ok(())
                })
        });
        match hasher {
            Some(Ok(h)) => handles.push(h),
            Some(Err(e)) => {
                work.failed.store(true, Ordering::Relaxed);
                first_err = Some(TransferError::Io {
                    context: "cannot start the hash worker".into(),
                    source: e,
                });
            }
            None => {}
        }
        // A batch with no data to send needs no workers.
        let stripes = if work.groups.is_empty() && work.stdin.is_none() {
            &socks[..0]
        } else {
            socks
        };
        for s in stripes {
            let work = &work;
            let spawned = std::thread::Builder::new()
                .name("sealink-send".into())
                .spawn_scoped(sc, move || {
                    let r = work.run(s, t.idle);
                    if r.is_err() {
                        work.failed.store(true, Ordering::Relaxed);
                    }
                    r
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    work.failed.store(true, Ordering::Relaxed);
                    first_err = Some(TransferError::Io {
                        context: "cannot start a send worker".into(),
                        source: e,
                    });
                    break;
                }
            }
        }
        // While the stripes send this batch, the next one is walked (its files opened): the
        // walk and the sending overlap.
        if first_err.is_none()
            && let Some(f) = meanwhile.take()
        {
            walked = Some(f());
        }
        for h in handles {
            let r = crate::error::joined(h.join(), "send");
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    });
    if let Err(e) = result {
        let keys_ = keys;
        return Err(abort_with(e, &socks[0], keys_, cfg));
    }
    let mut sizes: Vec<u64> = inputs.iter().map(|i| i.entry.size).collect();
    let mut data_records = layout.known_data_records().unwrap_or(0);
    if let Some(st) = &work.stdin {
        let st = st.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(last) = sizes.last_mut() {
            *last = st.size;
        }
        data_records = st.next_seq - layout.first_seq();
    }
    Ok((
        Sent {
            held,
            hashes,
            sizes,
            data_records,
        },
        walked,
    ))
}

/// After a write failed (`e`), the receiver's own reason if it sent one: a receiver that gives
/// up says why on the control connection before closing, and closing with our data unread
/// resets the connection, so our next write fails with a bare reset.
fn receivers_reason(e: &TransferError, s: &TcpStream, key: &PacketKey) -> Option<TransferError> {
    if !matches!(e, TransferError::Io { .. }) {
        return None;
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    match read_reply(s, key, REPLY_SEQ, deadline, "the reason") {
        Err(why @ (TransferError::ReceiverAborted(_) | TransferError::Refused(_))) => Some(why),
        _ => None,
    }
}

/// Reads the receiver's reply with sequence number `seq`: `Ok` with its type and body, or
/// the receiver's abort as an error.
fn read_reply(
    s: &TcpStream,
    key: &PacketKey,
    seq: u64,
    deadline: Instant,
    waiting_for: &str,
) -> Result<(RecordType, Vec<u8>), TransferError> {
    let closed = || {
        TransferError::PeerClosed(
            "before confirming the transfer; the receiver has not kept the files".into(),
        )
    };
    let (hdr, body) = match conn::read_record(s, key, deadline, waiting_for) {
        Ok(Some(r)) => r,
        Ok(None) => return Err(closed()),
        Err(TransferError::Io { source, .. })
            if matches!(
                source.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            return Err(closed());
        }
        Err(e) => return Err(e),
    };
    if hdr.kind == RecordType::Abort {
        let a = Abort::decode(&body)?;
        return Err(match a.code {
            AbortCode::Refused => TransferError::Refused(a.message),
            _ => TransferError::ReceiverAborted(a.message),
        });
    }
    if hdr.seq != seq {
        return Err(StreamError::OutOfRange {
            seq: hdr.seq,
            why: "not the receiver's reply",
        }
        .into());
    }
    Ok((hdr.kind, body))
}

/// The receiver answers once at the end, after it has verified and stored everything.
fn wait_for_done(
    s: &TcpStream,
    key: &PacketKey,
    bytes: u64,
    files: usize,
    deadline: Instant,
) -> Result<(), TransferError> {
    match read_reply(s, key, REPLY_SEQ, deadline, "the receiver's confirmation")? {
        (RecordType::Done, body) => {
            let d = Done::decode(&body)?;
            if d.bytes != bytes || d.files as usize != files {
                return Err(TransferError::ReceiverAborted(format!(
                    "it confirmed {} bytes in {} files, {bytes} in {files} were sent",
                    d.bytes, d.files
                )));
            }
            Ok(())
        }
        _ => Err(StreamError::MalformedHeader("unexpected reply type").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(first_seq: u64, records: u64, bytes: u64) -> Batch {
        Batch {
            file: 0,
            first_seq,
            records,
            offset: 0,
            bytes,
        }
    }

    #[test]
    fn small_files_are_grouped_large_ones_and_gaps_are_not() {
        let batches = [
            b(1, 1, 10),
            b(2, 1, 10),
            b(3, 64, 1 << 20), // a large file's batch
            b(67, 1, 10),
            b(69, 1, 10), // a gap: seq 68 is held by the receiver
            b(70, 1, 10),
            b(71, 1, 10),
        ];
        assert_eq!(groups(&batches, 256, 1 << 20), [0..2, 2..3, 3..4, 4..7]);
        // The record bound holds too.
        assert_eq!(groups(&batches[4..], 2, 1 << 20), [0..2, 2..3]);
        assert!(groups(&[], 256, 1 << 20).is_empty());
    }
}
