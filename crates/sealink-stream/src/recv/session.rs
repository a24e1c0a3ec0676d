//! One session from its handshake to its reply: hello, owner checks, then its batches.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sealink_crypto::Scope;
use sealink_proto::cookie::UNTRUSTED_LOG_EVERY;
use sealink_proto::stream::assembly::FIRST_DATA_SEQ;
use sealink_proto::stream::body::EntryKind;
use sealink_proto::stream::handshake::accept_fresh;
use sealink_proto::stream::record::RecordType;
use sealink_proto::stream::{
    Abort, AbortCode, Done, Hello, Manifest, READY_SEQ, REPLY_SEQ, Ready, SENDER_ABORT_SEQ,
    SessionKeys, StreamError, TreeCheck, ready_seq,
};

use super::batch::Batch;
use super::server::{Ctx, JoinMap, Joiner};
use super::takeover::{Holders, Holding, OnceSlot, Stop};
use super::{Dest, RecvConfig, RecvReport, for_sender, lock};
use crate::Progress;
use crate::admit::{ConnDrop, ConnGuard};
use crate::conn::{self, secs};
use crate::error::{TransferError, is_timeout, socket_error};
use crate::limits::Timeouts;
use crate::place::Tree;
use crate::records::RecordReader;
use crate::state::enforce_limits;

/// How long an abort may wait for room on a connection after a failure.
const ABORT_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// What the handshake established, before the peer has proven it holds the keys.
struct Handshaken {
    keys: SessionKeys,
    initiator: [u8; 32],
    host: String,
}

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
    let mut host = String::new();
    let mut replayed = false;
    let mut untrusted = None;
    let trust = ctx.trust.current();
    let accepted = accept_fresh(
        &cfg.host,
        init,
        |k| {
            let found = trust.hosts.iter().find(|(_, h)| h == k);
            match found {
                Some((n, _)) => host = n.clone(),
                None => untrusted = Some(*k),
            }
            found.is_some()
        },
        |k, ts| {
            replayed = !guard.admission().fresh_initiation(k, ts);
            !replayed
        },
    );
    let (resp, keys, initiator) = match accepted {
        Ok(x) => x,
        Err(e) => {
            match untrusted {
                Some(key) if matches!(e, StreamError::UnknownHost) => log_untrusted(peer, &key),
                _ => tracing::debug!("{peer}: handshake refused: {e}"),
            }
            guard.dropped(if replayed {
                ConnDrop::ReplayedInitiation
            } else {
                ConnDrop::HandshakeFailed
            });
            return None;
        }
    };
    // Register for joins before answering: the sender connects its stripes as soon as it
    // has the answer.
    let (jtx, jrx) = mpsc::channel();
    let token = keys.join_token;
    lock(&ctx.joins).insert(token, jtx);
    let hs = Handshaken {
        keys,
        initiator,
        host,
    };
    let r = authenticate(&control, peer, &resp, &hs, &mut guard, deadline, ctx).map(|hello| {
        after_hello(
            control,
            peer,
            hs,
            hello,
            cfg,
            &jrx,
            &ctx.joins,
            &ctx.holders,
            &ctx.progress,
        )
    });
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
    match &r {
        Ok(rep) => tracing::info!(
            "{peer}: received {} bytes in {} files from {}",
            rep.bytes,
            rep.entries,
            rep.owner
        ),
        // The caller gets the error in the report and says it (the `sealink` binary as one
        // `error:` line); a warning here printed every failure twice (issue 46).
        // A takeover is expected: a plain line, at once (not an error).
        Err(e @ TransferError::Superseded(_)) => tracing::info!(
            target: crate::SAY_TARGET,
            "{e} (the earlier transfer had stalled)"
        ),
        Err(e) => tracing::info!("{peer}: transfer failed: {e}"),
    }
    Some(r)
}

/// Answers the handshake, reads the hello and checks its owner: `Some((scope, checked))`
/// once the peer has authenticated and holds the `--once` slot (a refused hello holds it
/// only when no transfer was held); `None` (counted) otherwise.
fn authenticate(
    control: &TcpStream,
    peer: SocketAddr,
    resp: &[u8],
    hs: &Handshaken,
    guard: &mut ConnGuard,
    deadline: Instant,
    ctx: &Ctx,
) -> Option<(Scope, Result<Checked, Refusal>)> {
    let mut c = control;
    if let Err(e) = c.write_all(resp) {
        tracing::debug!("{peer}: cannot answer the handshake: {e}");
        guard.dropped(ConnDrop::HandshakeFailed);
        return None;
    }
    let hello = match conn::read_record(control, &hs.keys.recv, deadline, "hello") {
        Ok(Some((hdr, body))) if hdr.kind == RecordType::Hello && hdr.seq == 0 => (hdr.scope, body),
        r => {
            let why = match r {
                Err(TransferError::TimedOut(_)) => ConnDrop::SetupTimeout,
                _ => ConnDrop::HandshakeFailed,
            };
            tracing::debug!("{peer}: no valid hello ({})", why.name());
            guard.dropped(why);
            return None;
        }
    };
    if !guard.authenticated() {
        return None;
    }
    let (scope, body) = hello;
    // The owner is checked before the slot is looked at: a hello that merely names the
    // holder's owner key takes nothing over, and its refusal is not the receiver's outcome.
    let checked = check_hello(&body, hs, &ctx.cfg, &ctx.trust.current());
    let turned_away = ctx.once && {
        let mut slot = lock(&ctx.slot);
        match &*slot {
            None => {
                *slot = Some(OnceSlot::of(checked.as_ref().ok()));
                false
            }
            Some(held) => match &checked {
                Ok(c) if held.taken_over_by(c) => {
                    tracing::info!(
                        "{peer}: a newer session of the owner holding the one transfer \
                         (its signature verified), sending the same files: it may take over"
                    );
                    *slot = Some(OnceSlot::of(Some(c)));
                    false
                }
                _ => true,
            },
        }
    };
    if turned_away {
        let message = match &checked {
            // Refused on its own merits; only the sender is told why.
            Err((_, e)) => {
                tracing::info!(
                    "{peer}: refused ({e}); serving one transfer, held by another session"
                );
                for_sender(e, &ctx.cfg.dest)
            }
            Ok(_) => {
                tracing::info!("{peer}: turned away, serving one transfer only");
                "the receiver serves one transfer only and is busy with another".into()
            }
        };
        guard.dropped(ConnDrop::TurnedAway);
        let _ = conn::write_record(
            control,
            &hs.keys.send,
            RecordType::Abort,
            scope,
            READY_SEQ,
            &Abort {
                code: AbortCode::Refused,
                message,
            }
            .encode(),
        );
        return None;
    }
    let _ = control.set_write_timeout(Some(ctx.cfg.timeouts.idle));
    Some((scope, checked))
}

#[allow(clippy::too_many_arguments)]
fn after_hello(
    control: TcpStream,
    peer: SocketAddr,
    hs: Handshaken,
    (scope, checked): (Scope, Result<Checked, Refusal>),
    cfg: &RecvConfig,
    joins: &mpsc::Receiver<Joiner>,
    registry: &Mutex<JoinMap>,
    holders: &Mutex<Holders>,
    progress: &Progress,
) -> Result<RecvReport, TransferError> {
    let Handshaken { keys, host, .. } = hs;
    // Aborts go at the ready's seq while the first batch is being answered, and at the
    // reply's after (each seq is sealed once).
    let abort_seq = std::cell::Cell::new(READY_SEQ);
    let answer = |code: AbortCode, e: TransferError| {
        let _ = conn::write_record(
            &control,
            &keys.send,
            RecordType::Abort,
            scope,
            abort_seq.get(),
            &Abort {
                code,
                message: for_sender(&e, &cfg.dest),
            }
            .encode(),
        );
        e
    };
    let refuse = |e: TransferError| answer(AbortCode::Refused, e);
    let Checked { hello, owner } = checked.map_err(|(code, e)| answer(code, e))?;
    if hello.delete && !cfg.allow_delete {
        return Err(refuse(TransferError::Usage(
            "the sender asked to delete what it does not have (send --delete), and this \
             receiver does not allow deleting: it must run `sealink recv --delete` to let it"
                .into(),
        )));
    }
    // The manifest's limits over the whole transfer, batch after batch.
    let mut check = TreeCheck::new(cfg.tree_limits);
    check
        .admit(&hello.files, hello.more)
        .map_err(|e| refuse(e.into()))?;
    // Declared before the files: dropped after they are closed.
    let stop = Arc::new(Stop::default());
    stop.watch(&control);
    let mut holding = Holding {
        holders,
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
    let mut rep = RecvReport {
        peer,
        host,
        owner,
        owner_key: hello.owner_public,
        files: Vec::new(),
        kinds: Vec::new(),
        sizes: Vec::new(),
        up_to_date: Vec::new(),
        paths: Vec::new(),
        suite: keys.suite,
        scope,
        bytes: 0,
        resumed: Vec::new(),
        streams: hello.stripes as usize,
        elapsed: Duration::ZERO,
        entries: 0,
        dirs: 0,
        links: 0,
        up_to_date_files: 0,
        up_to_date_bytes: 0,
        resumed_bytes: 0,
        deleted: 0,
        batches: 0,
    };
    let mut socks: Vec<TcpStream> = Vec::new();
    let mut guards: Vec<ConnGuard> = Vec::new();
    let mut readers: Vec<RecordReader> = Vec::new();
    let (mut files, mut more, mut first_seq, mut batch) =
        (hello.files.clone(), hello.more, FIRST_DATA_SEQ, 0u64);
    let mut refused = false;
    let tree = tree.map(Mutex::new);
    let sync = tree.as_ref().is_some_and(|t| lock(t).sync());
    // Holder entries each batch added, oldest first (forgotten once the batch is stored).
    let mut held_counts: std::collections::VecDeque<usize> = Default::default();
    // A batch is stored (made durable, put in place) on a thread of its own while the next
    // one is planned and received; batches are stored one at a time, in order.
    let result = std::thread::scope(|sc| {
        type Stored<'s> = (Batch<'s>, Vec<u64>, Duration, Result<(), TransferError>);
        let mut pending: Option<std::thread::ScopedJoinHandle<'_, Stored<'_>>> = None;
        // Waits for the batch being stored and counts it.
        let finish_pending =
            |pending: &mut Option<std::thread::ScopedJoinHandle<'_, Stored<'_>>>,
             rep: &mut RecvReport,
             holding: &mut Holding<'_>,
             held_counts: &mut std::collections::VecDeque<usize>|
             -> Result<(), TransferError> {
                let Some(h) = pending.take() else {
                    return Ok(());
                };
                let (b, sizes, ready, r) = h
                    .join()
                    .map_err(|_| TransferError::WorkerPanicked("store"))?;
                if let Err(e) = r {
                    b.keep_or_release(peer);
                    return Err(e);
                }
                rep.add(&b, &b.files, &sizes, cfg);
                tracing::debug!(
                    "{peer}: batch of {} entries: planned and opened in {:.1} ms, stored in \
                 {:.1} ms",
                    b.files.len(),
                    ready.as_secs_f64() * 1e3,
                    lock(&b.stored_in).as_secs_f64() * 1e3,
                );
                // The batch's files are closed: their holder entries go (the state is gone).
                drop(b);
                let n = held_counts.pop_front().unwrap_or(0);
                holding.forget_oldest(n);
                Ok(())
            };
        let r = loop {
            let opened = Instant::now();
            let held_mark = holding.keys.len();
            let b = {
                let mut guard = tree.as_ref().map(lock);
                Batch::open(
                    &keys,
                    &hello,
                    cfg,
                    &files,
                    !more,
                    first_seq,
                    guard.as_deref_mut(),
                    &mut holding,
                    &stop,
                    progress,
                )
            };
            held_counts.push_back(holding.keys.len() - held_mark);
            let b = match b {
                Ok(b) => b,
                // Refused before anything of the batch was created (its one abort is sent
                // below: each seq is sealed once).
                Err(e) => {
                    refused = true;
                    break Err(e);
                }
            };
            if let Err(e) = conn::write_record(
                &control,
                &keys.send,
                RecordType::Ready,
                scope,
                ready_seq(batch),
                &Ready {
                    held: b.held.clone(),
                }
                .encode(),
            ) {
                b.release();
                break Err(e);
            }
            abort_seq.set(REPLY_SEQ);
            if batch == 0 {
                let gathered = gather(hello.stripes as usize, joins, &stop, cfg);
                // No more joins for this session: later ones are closed as unknown.
                lock(registry).remove(&keys.join_token);
                match gathered {
                    Ok((s, g)) => {
                        socks = s;
                        guards = g;
                        let cap = (4 << 20).max(4 * b.record_cap);
                        readers = (0..=socks.len())
                            .map(|_| RecordReader::new(cap, cap / 2))
                            .collect();
                    }
                    Err(e) => {
                        b.release();
                        break Err(e);
                    }
                }
            }
            let all: Vec<&TcpStream> = std::iter::once(&control).chain(socks.iter()).collect();
            let ready = opened.elapsed();
            let t_transfer = Instant::now();
            let r = b.transfer(&all, &mut readers).map_err(|e| {
                if stop.requested() {
                    stop.superseded()
                } else {
                    e
                }
            });
            let transferred = t_transfer.elapsed();
            // The batch before must be stored before this one is.
            let t_wait = Instant::now();
            let before = finish_pending(&mut pending, &mut rep, &mut holding, &mut held_counts);
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
            match &tree {
                Some(t) => {
                    pending = Some(sc.spawn(move || {
                        let r = b.store(t, sync);
                        (b, sizes, ready, r)
                    }));
                }
                None => {
                    rep.add(&b, &files, &sizes, cfg);
                    drop(b);
                    let n = held_counts.pop_front().unwrap_or(0);
                    holding.forget_oldest(n);
                }
            }
            if !more {
                break Ok(());
            }
            // The next batch's manifest, right after this batch's end on the control stripe.
            let t_manifest = Instant::now();
            let next = read_manifest(&control, &mut readers[0], &keys, end_seq + 1, cfg.timeouts)
                .and_then(|m| {
                    check.admit(&m.files, m.more)?;
                    if matches!(cfg.dest, Dest::Stdout)
                        && m.files.iter().any(|f| f.kind != EntryKind::File)
                    {
                        return Err(TransferError::Usage(
                            "a directory tree cannot be written to standard output".into(),
                        ));
                    }
                    Ok(m)
                });
            tracing::debug!(
                "{peer}: manifest {} read in {:.1} ms",
                batch + 1,
                t_manifest.elapsed().as_secs_f64() * 1e3
            );
            match next {
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
        let last = finish_pending(&mut pending, &mut rep, &mut holding, &mut held_counts);
        r.and(last)
    });
    let mut tree = tree.map(|t| t.into_inner().unwrap_or_else(|p| p.into_inner()));
    let result = result.and_then(|()| match &mut tree {
        Some(t) => {
            let r = t.finish();
            rep.deleted = t.deleted;
            r
        }
        None => Ok(()),
    });
    drop(guards);
    let reply = match &result {
        Ok(()) => conn::write_record(
            &control,
            &keys.send,
            RecordType::Done,
            scope,
            REPLY_SEQ,
            &Done {
                bytes: rep.bytes,
                files: rep.entries.min(u64::from(u32::MAX)) as u32,
            }
            .encode(),
        ),
        Err(e) => {
            if let Some(t) = &mut tree {
                t.abandon();
            }
            let code = match e {
                _ if refused => AbortCode::Refused,
                TransferError::Io { .. } => AbortCode::LocalIo,
                TransferError::Exists { .. } | TransferError::Usage(_) => AbortCode::Refused,
                TransferError::Protocol(StreamError::TreeLimit { .. }) => AbortCode::Refused,
                TransferError::TimedOut(_)
                | TransferError::ConnectionTimedOut(_)
                | TransferError::Superseded(_) => AbortCode::Other,
                _ => AbortCode::Protocol,
            };
            // Best effort: a stalled sender may not take even this.
            let _ = control.set_write_timeout(Some(cfg.timeouts.idle.min(ABORT_WRITE_TIMEOUT)));
            let _ = conn::write_record(
                &control,
                &keys.send,
                RecordType::Abort,
                scope,
                abort_seq.get(),
                &Abort {
                    code,
                    message: for_sender(e, &cfg.dest),
                }
                .encode(),
            );
            Ok(())
        }
    };
    // The files are complete and in place; a lost confirmation does not undo that.
    if let Err(e) = reply {
        tracing::warn!("{peer}: could not confirm the transfer: {e}");
    }
    result.map(|()| rep)
}

/// A hello that decoded, whose owner signature verifies, from an owner this receiver trusts.
pub(super) struct Checked {
    pub(super) hello: Hello,
    /// The owner's name in the trust file.
    pub(super) owner: String,
}

/// Why a hello was refused: the abort code the sender is told, and the error.
type Refusal = (AbortCode, TransferError);

/// Decodes the hello and checks its owner: the signature over this session's binding, then
/// trust. Nothing about the session (the `--once` slot included) may depend on the owner a
/// hello names before this has passed.
fn check_hello(
    body: &[u8],
    hs: &Handshaken,
    cfg: &RecvConfig,
    trust: &crate::live_trust::Lists,
) -> Result<Checked, Refusal> {
    let hello = Hello::decode(body).map_err(|e| (AbortCode::Protocol, e.into()))?;
    let intro =
        sealink_proto::stream::owner_intro(&hs.keys.binding, &hs.initiator, cfg.host.public());
    if !sealink_crypto::sign::verify(&hello.owner_public, &intro, &hello.owner_signature) {
        return Err((AbortCode::Refused, StreamError::BadOwnerSignature.into()));
    }
    let Some(owner) = trust
        .owners
        .iter()
        .find(|(_, k)| *k == hello.owner_public)
        .map(|(n, _)| n.clone())
    else {
        // The key and its fingerprint in the log, as for an untrusted host (issue 46): the
        // receiver's user can check it with the sender and trust it from this line.
        use base64::Engine as _;
        let key = base64::engine::general_purpose::STANDARD.encode(hello.owner_public);
        tracing::info!(
            target: crate::SAY_TARGET,
            "refused a transfer from host {}: owner key {key} (fingerprint {}) is not trusted; \
             to trust it: sealink trust add owner NAME {key}",
            hs.host,
            sealink_keys::fingerprint(&hello.owner_public)
        );
        return Err((AbortCode::Refused, StreamError::UntrustedOwner.into()));
    };
    Ok(Checked { hello, owner })
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

/// A refused handshake from a host key we do not trust, logged at info as sshd logs a refused
/// key, with the (public) key so that it can be trusted if it should be. At most one line per
/// `UNTRUSTED_LOG_EVERY` for the whole receiver: only someone who knows our public key gets
/// past mac1 this far, but they could have every initiation the limiter admits refused. The
/// next line counts those left out (all are counted as `handshake-failed`).
fn log_untrusted(peer: SocketAddr, key: &[u8; 32]) {
    use base64::Engine as _;
    static LAST: Mutex<(Option<Instant>, u64)> = Mutex::new((None, 0));
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    if last.0.is_some_and(|t| now < t + UNTRUSTED_LOG_EVERY) {
        last.1 += 1;
        return;
    }
    let more = std::mem::take(&mut last.1);
    last.0 = Some(now);
    let key = base64::engine::general_purpose::STANDARD.encode(key);
    if more > 0 {
        tracing::warn!(
            "refused a transfer from {peer}: host key {key} is not trusted ({more} more refused \
             since the last such line)"
        );
    } else {
        tracing::warn!("refused a transfer from {peer}: host key {key} is not trusted");
    }
}
