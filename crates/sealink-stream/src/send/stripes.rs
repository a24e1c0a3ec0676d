//! One manifest batch on the sending side: its ready, then its data over every stripe, each
//! stripe claiming groups of records (and the SHA-256 of each file the receiver resumes).

use std::io::{IoSliceMut, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sealink_crypto::Scope;
use sealink_proto::stream::assembly::Batch;
use sealink_proto::stream::body::{UNKNOWN_SIZE, UP_TO_DATE};
use sealink_proto::stream::record::RecordType;
use sealink_proto::stream::{Layout, Ready, RecordBound, SessionKeys, StreamError, ready_seq};

use super::session::{abort_with, read_reply};
use super::{NextBatch, SendConfig};
use crate::Progress;
use crate::conn::secs;
use crate::error::{IoContext, TransferError, socket_error};
use crate::files::{hash_file, read_exact_at, read_up_to};
use crate::records::RecordBatch;
use crate::tree::{Gone, Input};

/// What the sender knows of one batch once the receiver has answered it.
pub(super) struct Sent {
    pub(super) held: Vec<u64>,
    pub(super) hashes: Vec<Option<[u8; 32]>>,
    pub(super) sizes: Vec<u64>,
    pub(super) data_records: u64,
    /// Per file: left out (see [`End::left_out`](sealink_proto::stream::End::left_out)), and
    /// why, by batch index.
    pub(super) left_out: Vec<bool>,
    pub(super) gone: Vec<(usize, Gone)>,
}

/// One batch: waits for its ready, sends what the receiver does not hold over every stripe
/// (and the SHA-256 of each file it resumed), and returns what the end record says.
/// `meanwhile` (walking the next batch) runs while the stripes send; its result comes back
/// unless starting them failed.
#[allow(clippy::too_many_arguments)]
pub(super) fn send_batch(
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
    let held = wait_ready(cfg, keys, socks, batch)?;
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
    let work = Work::new(cfg, keys, inputs, layout, &held, bound, progress);
    let mut hashes: Vec<Option<[u8; 32]>> = vec![None; inputs.len()];
    let (result, walked) = work.send(socks, &held, &mut hashes, cfg.timeouts.idle, meanwhile);
    if let Err(e) = result {
        return Err(abort_with(e, &socks[0], keys, cfg));
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
    let mut gone = work.gone.into_inner().unwrap_or_else(|p| p.into_inner());
    gone.sort_by_key(|g| g.0);
    let mut left_out = vec![false; inputs.len()];
    for g in &gone {
        left_out[g.0] = true;
        // The hash of a file left out means nothing.
        hashes[g.0] = None;
    }
    Ok((
        Sent {
            held,
            hashes,
            sizes,
            data_records,
            left_out,
            gone,
        },
        walked,
    ))
}

/// Why reading `input` failed: it got shorter (changed, as rsync's "vanished"), or a read
/// error.
fn read_failed(input: &Input, e: &std::io::Error) -> Gone {
    let at = input
        .path
        .as_deref()
        .map_or_else(|| input.entry.name.clone(), |p| p.display().to_string());
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        Gone::Vanished(format!("{at} got shorter while being sent"))
    } else {
        Gone::Unreadable(format!("cannot read {at}: {e}"))
    }
}

/// Waits for the receiver's ready for batch number `batch`: what it holds of each file.
fn wait_ready(
    cfg: &SendConfig,
    keys: &SessionKeys,
    socks: &[TcpStream],
    batch: u64,
) -> Result<Vec<u64>, TransferError> {
    let t = &cfg.timeouts;
    // The first ready covers the stripes joining; a later one, the receiver storing the
    // batch before.
    let deadline = Instant::now() + if batch == 0 { t.setup * 2 } else { t.idle };
    match read_reply(
        &socks[0],
        &keys.recv,
        ready_seq(batch),
        deadline,
        "ready from the receiver",
    ) {
        Ok((RecordType::Ready, body)) => Ok(Ready::decode(&body)?.held),
        Ok(_) => Err(StreamError::MalformedHeader("expected the receiver's ready").into()),
        Err(TransferError::ReceiverAborted(m)) if batch == 0 && m.contains("unknown flags") => {
            Err(TransferError::Refused(format!(
                "the receiver runs an older sealink (stream protocol 1, which takes the whole \
                 manifest in one hello; this sender speaks protocol 2): upgrade sealink on the \
                 receiving host ({m})"
            )))
        }
        Err(e) => Err(e),
    }
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
    /// Files that could not be sent as announced (their records go as zeros), by index.
    gone: Mutex<Vec<(usize, Gone)>>,
    left_out: Vec<AtomicBool>,
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

impl<'a> Work<'a> {
    /// The stripes' shared state for a batch of `inputs` laid out in `layout`, of which the
    /// receiver holds `held`.
    fn new(
        cfg: &SendConfig,
        keys: &'a SessionKeys,
        inputs: &'a [Input],
        layout: &Layout,
        held: &[u64],
        bound: RecordBound,
        progress: &'a Progress,
    ) -> Self {
        // Under a rate limit a batch is at most a twentieth of a second of it, so the stripes
        // take turns in small steps instead of a 1 MiB burst each.
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
        let batches = layout.batches_after(per_batch as u64, held);
        let slots = per_batch.max(SMALL_FILE_RECORDS);
        let groups = groups(&batches, slots, batch_data);
        Work {
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
            gone: Mutex::new(Vec::new()),
            left_out: inputs.iter().map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Sends the batch: one thread per stripe, and one hashing the files the receiver resumed
    /// (`held`) into `hashes`; `meanwhile` runs on this thread as they do (unless starting
    /// them failed), and its result is returned beside theirs.
    fn send(
        &self,
        socks: &[TcpStream],
        held: &[u64],
        hashes: &mut [Option<[u8; 32]>],
        idle: Duration,
        meanwhile: impl FnOnce() -> NextBatch,
    ) -> (Result<(), TransferError>, Option<NextBatch>) {
        let mut walked = None;
        let result = std::thread::scope(|sc| {
            let mut handles = Vec::with_capacity(socks.len());
            let mut first_err = None;
            // The receiver checks each file it resumed against the whole file's SHA-256, held
            // part included: one read of such files, beside the stripes.
            let hasher = held.iter().any(|&h| resumed(h)).then(|| {
                std::thread::Builder::new()
                    .name("sealink-hash".into())
                    .spawn_scoped(sc, move || self.hash_resumed(held, hashes))
            });
            match hasher {
                Some(Ok(h)) => handles.push(h),
                Some(Err(e)) => {
                    self.failed.store(true, Ordering::Relaxed);
                    first_err = Some(TransferError::Io {
                        context: "cannot start the hash worker".into(),
                        source: e,
                    });
                }
                None => {}
            }
            // A batch with no data to send needs no workers.
            let stripes = if self.groups.is_empty() && self.stdin.is_none() {
                &socks[..0]
            } else {
                socks
            };
            for s in stripes {
                let spawned = std::thread::Builder::new()
                    .name("sealink-send".into())
                    .spawn_scoped(sc, move || {
                        let r = self.run(s, idle);
                        if r.is_err() {
                            self.failed.store(true, Ordering::Relaxed);
                        }
                        r
                    });
                match spawned {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        self.failed.store(true, Ordering::Relaxed);
                        first_err = Some(TransferError::Io {
                            context: "cannot start a send worker".into(),
                            source: e,
                        });
                        break;
                    }
                }
            }
            // While the stripes send this batch, the next one is walked (its files opened):
            // the walk and the sending overlap.
            if first_err.is_none() {
                walked = Some(meanwhile());
            }
            for h in handles {
                let r = crate::error::joined(h.join(), "send");
                if let Err(e) = r {
                    first_err.get_or_insert(e);
                }
            }
            first_err.map_or(Ok(()), Err)
        });
        (result, walked)
    }

    /// Hashes each file the receiver resumed (`held`) into `hashes`; stops early once the
    /// batch has failed.
    fn hash_resumed(
        &self,
        held: &[u64],
        hashes: &mut [Option<[u8; 32]>],
    ) -> Result<(), TransferError> {
        for (i, input) in self.inputs.iter().enumerate() {
            if !resumed(held[i]) {
                continue;
            }
            if self.failed.load(Ordering::Relaxed) {
                break;
            }
            let h = match input.open() {
                Ok(file) => hash_file(file, input.entry.size),
                Err(g) => {
                    self.leave_out(i, g);
                    continue;
                }
            };
            match h {
                Ok(h) => hashes[i] = Some(h),
                Err(e) => self.leave_out(i, read_failed(input, &e)),
            }
        }
        Ok(())
    }

    /// Notes that file `i` cannot be sent as announced (the first reason only).
    fn leave_out(&self, i: usize, why: Gone) {
        if !self.left_out[i].swap(true, Ordering::Relaxed) {
            self.gone
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((i, why));
        }
    }

    /// Reads a run of file `i`'s records at `offset` into `iov`; a file that cannot be read
    /// as announced (gone, changed, shorter, unreadable) is left out and its records are sent
    /// as zeros, so that the batch's layout stands and the rest of it arrives.
    fn read_file(&self, i: usize, iov: &mut [IoSliceMut<'_>], offset: u64) {
        let input = &self.inputs[i];
        if !self.left_out[i].load(Ordering::Relaxed) {
            let r = match input.open() {
                Ok(file) => read_exact_at(file, iov, offset).map_err(|e| read_failed(input, &e)),
                Err(g) => Err(g),
            };
            match r {
                Ok(()) => return,
                Err(g) => self.leave_out(i, g),
            }
        }
        for b in iov.iter_mut() {
            b.fill(0);
        }
    }

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
                    let blens = self.file_lens(b);
                    let mut iov: Vec<IoSliceMut<'_>> = blens
                        .iter()
                        .map(|&n| {
                            IoSliceMut::new(&mut slots.next().expect("room in the group")[..n])
                        })
                        .collect();
                    self.read_file(b.file, &mut iov, b.offset);
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

/// Whether the receiver resumes a file it holds `held` records of (then it checks the whole
/// file's SHA-256).
fn resumed(held: u64) -> bool {
    held > 0 && held != UP_TO_DATE
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
