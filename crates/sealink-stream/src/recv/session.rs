//! One session, from its handshake to its reply: the hello's checks, then its manifest's
//! batches in order (each received while the one before is stored), then done or abort.

use std::cell::Cell;
use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

use sealink_crypto::Scope;
use sealink_proto::stream::assembly::FIRST_DATA_SEQ;
use sealink_proto::stream::body::{EntryKind, FileEntry};
use sealink_proto::stream::record::RecordType;
use sealink_proto::stream::{
    Abort, AbortCode, Done, Hello, Manifest, READY_SEQ, REPLY_SEQ, Ready, SENDER_ABORT_SEQ,
    SessionKeys, StreamError, TreeCheck, ready_seq,
};

use super::auth::{self, Checked, Handshaken, Refusal};
use super::batch::Batch;
use super::server::{Ctx, JoinMap, Joiner};
use super::takeover::{Holding, Stop};
use super::{Dest, RecvConfig, RecvReport, for_sender, lock};
use crate::Progress;
use crate::admit::ConnGuard;
use crate::conn::{self, secs};
use crate::error::{TransferError, is_timeout, socket_error};
use crate::limits::Timeouts;
use crate::place::Tree;
use crate::records::RecordReader;
use crate::state::enforce_limits;

/// How long an abort may wait for room on a connection after a failure.
const ABORT_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Runs the handshake and waits for the hello; only a peer whose hello opens under the new
/// session's key is authenticated. Its session's outcome is returned; a connection that
/// fails before is dropped and counted, and ends nothing.
pub(super) fn run(
    control: TcpStream,
    peer: SocketAddr,
    init: &[u8],
    mut guard: ConnGuard,
    deadline: Instant,
    ctx: &Ctx,
) -> Option<Result<RecvReport, TransferError>> {
    let start = Instant::now();
    let cfg = &*ctx.cfg;
    let (resp, hs) = auth::handshake(peer, init, &mut guard, ctx)?;
    // Register for joins before answering: the sender connects its stripes as soon as it
    // has the answer.
    let (jtx, jrx) = mpsc::channel();
    let token = hs.keys.join_token;
    lock(&ctx.joins).insert(token, jtx);
    let r = auth::authenticate(&control, peer, &resp, &hs, &mut guard, deadline, ctx)
        .map(|hello| after_hello(control, peer, hs, hello, &jrx, ctx));
    // Unregister in every case (the token is tied to this session's keys).
    lock(&ctx.joins).remove(&token);
    drop(guard);
    // A failed session may have kept resume state (its files are closed and unlocked
    // now): keep the directory's state within its bounds.
    if matches!(r, Some(Err(_)))
        && let Dest::Dir(d) = &cfg.dest
    {
        match enforce_limits(d, &cfg.resume_limits) {
            Ok(0) => {}
            Ok(n) => tracing::info!("{peer}: deleted the resume state of {n} files"),
            Err(e) => tracing::warn!("{peer}: cannot keep resume state in bounds: {e}"),
        }
    }
    let r = r?.map(|mut rep| {
        rep.elapsed = start.elapsed();
        rep
    });
    log_outcome(peer, &r);
    Some(r)
}

/// Logs how a session ended.
fn log_outcome(peer: SocketAddr, r: &Result<RecvReport, TransferError>) {
    match r {
        Ok(rep) => tracing::info!(
            "{peer}: received {} bytes in {} files from {}",
            rep.bytes,
            rep.entries,
            rep.owner
        ),
        // The caller gets the error in the report and says it (the `sealink` binary as one
        // `error:` line); a warning here would print every failure twice.
        // A takeover is expected: a plain line, at once (not an error).
        Err(e @ TransferError::Superseded(_)) => tracing::info!(
            target: crate::SAY_TARGET,
            "{e} (the earlier transfer had stalled)"
        ),
        Err(e) => tracing::info!("{peer}: transfer failed: {e}"),
    }
}

/// An authenticated session's control stripe, as the receiver answers on it.
struct Control<'a> {
    sock: &'a TcpStream,
    keys: &'a SessionKeys,
    scope: Scope,
    /// Aborts go at the ready's seq while the first batch is being answered, and at the
    /// reply's after (each seq is sealed once).
    abort_seq: Cell<u64>,
    dest: &'a Dest,
}

impl Control<'_> {
    fn write(&self, kind: RecordType, seq: u64, body: &[u8]) -> Result<(), TransferError> {
        conn::write_record(self.sock, &self.keys.send, kind, self.scope, seq, body)
    }

    /// Tells the sender why the session ends (best effort).
    fn abort(&self, code: AbortCode, e: &TransferError) {
        let abort = Abort {
            code,
            message: for_sender(e, self.dest),
        };
        let _ = self.write(RecordType::Abort, self.abort_seq.get(), &abort.encode());
    }

    /// Tells the sender why the session ends, and returns the error.
    fn answer(&self, code: AbortCode, e: TransferError) -> TransferError {
        self.abort(code, &e);
        e
    }
}

/// Serves an authenticated session: checks what its hello asks for, receives its batches,
/// finishes its tree, and answers done, or abort.
fn after_hello(
    control: TcpStream,
    peer: SocketAddr,
    hs: Handshaken,
    (scope, checked): (Scope, Result<Checked, Refusal>),
    joins: &mpsc::Receiver<Joiner>,
    ctx: &Ctx,
) -> Result<RecvReport, TransferError> {
    let cfg = &*ctx.cfg;
    let Handshaken { keys, host, .. } = hs;
    let ctl = Control {
        sock: &control,
        keys: &keys,
        scope,
        abort_seq: Cell::new(READY_SEQ),
        dest: &cfg.dest,
    };
    let Checked { hello, owner } = checked.map_err(|(code, e)| ctl.answer(code, e))?;
    let check = admit_hello(&hello, cfg).map_err(|e| ctl.answer(AbortCode::Refused, e))?;
    // Declared before the files: dropped after they are closed.
    let stop = Arc::new(Stop::default());
    stop.watch(&control);
    let mut holding = Holding {
        holders: &ctx.holders,
        stop: stop.clone(),
        keys: Vec::new(),
    };
    let tree = match &cfg.dest {
        Dest::Dir(dir) => Some(Tree::new(
            dir,
            hello.owner_public,
            cfg.overwrite,
            cfg.take_updates,
            hello.update,
            hello.delete,
            cfg.sync,
        )),
        Dest::Stdout => None,
    };
    let mut s = Batches {
        ctl: &ctl,
        peer,
        cfg,
        hello: &hello,
        joins,
        registry: &ctx.joins,
        progress: &ctx.progress,
        stop: &stop,
        check,
        rep: RecvReport::empty(peer, host, owner, &hello, keys.suite, scope),
        socks: Vec::new(),
        guards: Vec::new(),
        readers: Vec::new(),
        held_counts: VecDeque::new(),
        refused: false,
    };
    let tree = tree.map(Mutex::new);
    let result = s.receive_all(tree.as_ref(), &mut holding);
    let mut tree = tree.map(|t| t.into_inner().unwrap_or_else(|p| p.into_inner()));
    let result = result.and_then(|()| match &mut tree {
        Some(t) => {
            let r = t.finish();
            s.rep.deleted = t.deleted;
            r
        }
        None => Ok(()),
    });
    drop(std::mem::take(&mut s.guards));
    let reply = match &result {
        Ok(()) => ctl.write(
            RecordType::Done,
            REPLY_SEQ,
            &Done {
                bytes: s.rep.bytes,
                files: s.rep.entries.min(u64::from(u32::MAX)) as u32,
            }
            .encode(),
        ),
        Err(e) => {
            if let Some(t) = &mut tree {
                t.abandon();
            }
            // Best effort: a stalled sender may not take even this.
            let _ = control.set_write_timeout(Some(cfg.timeouts.idle.min(ABORT_WRITE_TIMEOUT)));
            ctl.abort(abort_code(e, s.refused), e);
            Ok(())
        }
    };
    // The files are complete and in place; a lost confirmation does not undo that.
    if let Err(e) = reply {
        tracing::warn!("{peer}: could not confirm the transfer: {e}");
    }
    result.map(|()| s.rep)
}

/// Checks what a hello asks of this receiver beyond its owner: deleting (`--delete`), and
/// the manifest's limits over its first batch; returns the check kept for later batches.
fn admit_hello(hello: &Hello, cfg: &RecvConfig) -> Result<TreeCheck, TransferError> {
    if hello.delete && !cfg.allow_delete {
        return Err(TransferError::Usage(
            "the sender asked to delete what it does not have (send --delete), and this \
             receiver does not allow deleting: it must run `sealink recv --delete` to let it"
                .into(),
        ));
    }
    // The manifest's limits over the whole transfer, batch after batch.
    let mut check = TreeCheck::new(cfg.tree_limits);
    check.admit(&hello.files, hello.more)?;
    Ok(check)
}

/// What the sender of a failed session is told it failed of (`refused`: its batch was refused
/// before anything of it was created).
fn abort_code(e: &TransferError, refused: bool) -> AbortCode {
    match e {
        _ if refused => AbortCode::Refused,
        TransferError::Io { .. } => AbortCode::LocalIo,
        TransferError::Exists { .. } | TransferError::Usage(_) => AbortCode::Refused,
        TransferError::Protocol(StreamError::TreeLimit { .. }) => AbortCode::Refused,
        TransferError::TimedOut(_)
        | TransferError::ConnectionTimedOut(_)
        | TransferError::Superseded(_) => AbortCode::Other,
        _ => AbortCode::Protocol,
    }
}

/// A batch stored on a thread of its own: the batch, its files' sizes, how long it took to
/// be ready, and how storing it went.
type Stored<'a> = (Batch<'a>, Vec<u64>, Duration, Result<(), TransferError>);

/// A session's state across its manifest's batches (each batch's own is a [`Batch`]).
struct Batches<'a> {
    ctl: &'a Control<'a>,
    peer: SocketAddr,
    cfg: &'a RecvConfig,
    hello: &'a Hello,
    /// Where the session's other stripes arrive, and the receiver's table of sessions waiting
    /// for theirs.
    joins: &'a mpsc::Receiver<Joiner>,
    registry: &'a Mutex<JoinMap>,
    progress: &'a Progress,
    stop: &'a Arc<Stop>,
    /// The manifest's limits over the whole transfer, batch after batch.
    check: TreeCheck,
    rep: RecvReport,
    /// The stripes beside the control stripe and their places in the connection table (from
    /// the first batch on), and every stripe's reader (the control stripe's first).
    socks: Vec<TcpStream>,
    guards: Vec<ConnGuard>,
    readers: Vec<RecordReader>,
    /// Holder entries each batch added, oldest first (forgotten once the batch is stored).
    held_counts: VecDeque<usize>,
    /// A batch was refused before anything of it was created.
    refused: bool,
}

impl<'a> Batches<'a> {
    /// Receives the manifest's batches. A batch is stored (made durable, put in place) on a
    /// thread of its own while the next one is planned and received; batches are stored one
    /// at a time, in order.
    fn receive_all(
        &mut self,
        tree: Option<&Mutex<Tree>>,
        holding: &mut Holding<'_>,
    ) -> Result<(), TransferError> {
        let peer = self.peer;
        let sync = tree.is_some_and(|t| lock(t).sync());
        let (mut files, mut more, mut first_seq, mut batch) = (
            self.hello.files.clone(),
            self.hello.more,
            FIRST_DATA_SEQ,
            0u64,
        );
        std::thread::scope(|sc| {
            let mut pending = None;
            let r = loop {
                let opened = Instant::now();
                let b = match self.open(batch, &files, !more, first_seq, tree, holding) {
                    Ok(b) => b,
                    Err(e) => break Err(e),
                };
                let ready = opened.elapsed();
                let t_transfer = Instant::now();
                let r = self.receive(&b);
                let transferred = t_transfer.elapsed();
                // The batch before must be stored before this one is.
                let t_wait = Instant::now();
                let before = self.finish_pending(&mut pending, holding);
                tracing::debug!(
                    "{peer}: batch {batch}: ready after {:.1} ms, received in {:.1} ms, then \
                     waited {:.1} ms for the batch before to be stored",
                    ready.as_secs_f64() * 1e3,
                    transferred.as_secs_f64() * 1e3,
                    t_wait.elapsed().as_secs_f64() * 1e3,
                );
                let (sizes, end_seq) = match (r, before) {
                    (Ok(x), Ok(())) => x,
                    (Err(e), _) | (Ok(_), Err(e)) => {
                        b.keep_or_release(peer);
                        break Err(e);
                    }
                };
                match tree {
                    Some(t) => {
                        pending = Some(sc.spawn(move || {
                            let r = b.store(t, sync);
                            (b, sizes, ready, r)
                        }));
                    }
                    None => self.count(b, &sizes, holding),
                }
                if !more {
                    break Ok(());
                }
                match self.next_manifest(end_seq, batch) {
                    Ok(m) => {
                        files = m.files;
                        more = m.more;
                        first_seq = end_seq + 2;
                        batch += 1;
                    }
                    Err(e) => break Err(e),
                }
            };
            // The last batch stored (or, after a failure, let go of).
            let last = self.finish_pending(&mut pending, holding);
            r.and(last)
        })
    }

    /// Opens batch number `batch` and sends its ready; with the first, gathers the session's
    /// other stripes. A batch refused before anything of it was created is not answered here
    /// (its one abort is sent at the end: each seq is sealed once).
    fn open(
        &mut self,
        batch: u64,
        files: &[FileEntry],
        last: bool,
        first_seq: u64,
        tree: Option<&Mutex<Tree>>,
        holding: &mut Holding<'_>,
    ) -> Result<Batch<'a>, TransferError> {
        let held_mark = holding.keys.len();
        let b = {
            let mut guard = tree.map(lock);
            Batch::open(
                self.ctl.keys,
                self.hello,
                self.cfg,
                files,
                last,
                first_seq,
                guard.as_deref_mut(),
                holding,
                self.stop,
                self.progress,
            )
        };
        self.held_counts.push_back(holding.keys.len() - held_mark);
        let b = match b {
            Ok(b) => b,
            Err(e) => {
                self.refused = true;
                return Err(e);
            }
        };
        let ready = Ready {
            held: b.held.clone(),
        };
        if let Err(e) = self
            .ctl
            .write(RecordType::Ready, ready_seq(batch), &ready.encode())
        {
            b.release();
            return Err(e);
        }
        self.ctl.abort_seq.set(REPLY_SEQ);
        if batch == 0
            && let Err(e) = self.join_stripes(b.record_cap)
        {
            b.release();
            return Err(e);
        }
        Ok(b)
    }

    /// Waits for the session's other stripes, and makes every stripe's reader (for records
    /// of up to `record_cap` bytes).
    fn join_stripes(&mut self, record_cap: usize) -> Result<(), TransferError> {
        let gathered = gather(self.hello.stripes as usize, self.joins, self.stop, self.cfg);
        // No more joins for this session: later ones are closed as unknown.
        lock(self.registry).remove(&self.ctl.keys.join_token);
        let (socks, guards) = gathered?;
        self.socks = socks;
        self.guards = guards;
        let cap = (4 << 20).max(4 * record_cap);
        self.readers = (0..=self.socks.len())
            .map(|_| RecordReader::new(cap, cap / 2))
            .collect();
        Ok(())
    }

    /// Receives batch `b` on every stripe (see [`Batch::transfer`]); a session asked to stop
    /// fails as superseded.
    fn receive(&mut self, b: &Batch<'_>) -> Result<(Vec<u64>, u64), TransferError> {
        let stop = self.stop;
        let all: Vec<&TcpStream> = std::iter::once(self.ctl.sock)
            .chain(self.socks.iter())
            .collect();
        b.transfer(&all, &mut self.readers).map_err(|e| {
            if stop.requested() {
                stop.superseded()
            } else {
                e
            }
        })
    }

    /// Waits for the batch being stored, if any, and counts it.
    fn finish_pending(
        &mut self,
        pending: &mut Option<ScopedJoinHandle<'_, Stored<'a>>>,
        holding: &mut Holding<'_>,
    ) -> Result<(), TransferError> {
        let Some(h) = pending.take() else {
            return Ok(());
        };
        let (b, sizes, ready, r) = h
            .join()
            .map_err(|_| TransferError::WorkerPanicked("store"))?;
        if let Err(e) = r {
            b.keep_or_release(self.peer);
            return Err(e);
        }
        tracing::debug!(
            "{}: batch of {} entries: planned and opened in {:.1} ms, stored in {:.1} ms",
            self.peer,
            b.files.len(),
            ready.as_secs_f64() * 1e3,
            lock(&b.stored_in).as_secs_f64() * 1e3,
        );
        self.count(b, &sizes, holding);
        Ok(())
    }

    /// Counts a stored batch in the report, then closes its files: their holder entries go
    /// (the state is gone).
    fn count(&mut self, b: Batch<'_>, sizes: &[u64], holding: &mut Holding<'_>) {
        self.rep.add(&b, &b.files, sizes, self.cfg);
        drop(b);
        let n = self.held_counts.pop_front().unwrap_or(0);
        holding.forget_oldest(n);
    }

    /// Reads and admits the manifest of the batch after batch number `batch`, whose end
    /// record came at `end_seq`.
    fn next_manifest(&mut self, end_seq: u64, batch: u64) -> Result<Manifest, TransferError> {
        let t_manifest = Instant::now();
        let (sock, keys, t) = (self.ctl.sock, self.ctl.keys, self.cfg.timeouts);
        let next = read_manifest(sock, &mut self.readers[0], keys, end_seq + 1, t).and_then(|m| {
            self.check.admit(&m.files, m.more)?;
            if matches!(self.cfg.dest, Dest::Stdout)
                && m.files.iter().any(|f| f.kind != EntryKind::File)
            {
                return Err(TransferError::Usage(
                    "a directory tree cannot be written to standard output".into(),
                ));
            }
            Ok(m)
        });
        tracing::debug!(
            "{}: manifest {} read in {:.1} ms",
            self.peer,
            batch + 1,
            t_manifest.elapsed().as_secs_f64() * 1e3
        );
        next
    }
}

/// Waits for the session's other stripes to join (bounded by the set-up timeout).
fn gather(
    stripes: usize,
    joins: &mpsc::Receiver<Joiner>,
    stop: &Stop,
    cfg: &RecvConfig,
) -> Result<(Vec<TcpStream>, Vec<ConnGuard>), TransferError> {
    let mut others: Vec<Option<(TcpStream, ConnGuard)>> = (1..stripes).map(|_| None).collect();
    let deadline = Instant::now() + cfg.timeouts.setup;
    while others.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        if stop.requested() {
            return Err(stop.superseded());
        }
        // Woken often enough to stop when asked to.
        let (i, s, g) = match joins.recv_timeout(left.min(Duration::from_millis(100))) {
            Ok(x) => x,
            Err(mpsc::RecvTimeoutError::Timeout) if !left.is_zero() => continue,
            Err(_) => {
                return Err(TransferError::TimedOut(format!(
                    "not all {stripes} stripes joined within {}",
                    secs(cfg.timeouts.setup)
                )));
            }
        };
        stop.watch(&s);
        match others.get_mut((i as usize).wrapping_sub(1)) {
            Some(slot @ None) => *slot = Some((s, g)),
            _ => tracing::debug!("ignoring a duplicate or out-of-range stripe {i}"),
        }
    }
    Ok(others.into_iter().flatten().unzip())
}

/// Reads the next batch's manifest from the control stripe: it must come at `seq`, right
/// after the previous batch's end (or the sender's abort).
fn read_manifest(
    mut sock: &TcpStream,
    reader: &mut RecordReader,
    keys: &SessionKeys,
    seq: u64,
    t: Timeouts,
) -> Result<Manifest, TransferError> {
    let deadline = Instant::now() + t.idle;
    loop {
        if let Some(r) = reader.next_record(&keys.recv)? {
            let hdr = r.header;
            return match hdr.kind {
                RecordType::Manifest if hdr.seq == seq => Ok(Manifest::decode(reader.data(&r))?),
                RecordType::Abort if hdr.seq == SENDER_ABORT_SEQ => Err(
                    TransferError::SenderAborted(Abort::decode(reader.data(&r))?.message),
                ),
                RecordType::Manifest => Err(StreamError::OutOfRange {
                    seq: hdr.seq,
                    why: "manifest out of place",
                }
                .into()),
                _ => Err(StreamError::MalformedHeader(
                    "expected the next manifest batch (a record after the batch's end)",
                )
                .into()),
            };
        }
        match reader.fill(&mut sock) {
            Ok(0) => {
                return Err(TransferError::PeerClosed(
                    "before the manifest's last batch".into(),
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => {
                if Instant::now() >= deadline {
                    return Err(TransferError::TimedOut(format!(
                        "no manifest batch from the sender for {}",
                        secs(t.idle)
                    )));
                }
            }
            Err(e) => return Err(socket_error(e, "receiving", String::new)),
        }
    }
}
