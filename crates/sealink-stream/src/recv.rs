//! The receiving side: a listener that serves transfer sessions.

use std::collections::{BTreeMap, HashMap};
use std::io::{IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sealink_crypto::Scope;
use sealink_proto::HostKey;
use sealink_proto::stream::body::UNKNOWN_SIZE;
use sealink_proto::stream::handshake::{INIT_MESSAGE_LEN, JOIN_TOKEN_LEN};
use sealink_proto::stream::record::{
    self, MAX_BODY_LEN, RECORD_HEADER_LEN, RecordHeader, RecordType,
};
use sealink_proto::stream::{
    Abort, AbortCode, Assembly, Done, End, Hello, Layout, READY_SEQ, REPLY_SEQ, SENDER_ABORT_SEQ,
    SessionKeys, StreamError, StreamLimits,
};

use crate::Progress;
use crate::conn::{self, JOIN_LEN, KIND_INIT, KIND_JOIN, MAGIC, SETUP_TIMEOUT};
use crate::error::{IoContext, TransferError};
use crate::files::{PartFile, process_umask, received_mode, write_all_at};

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
    pub dest: Dest,
    /// Replace existing files.
    pub overwrite: bool,
    /// Let received files keep group and other write permission when the sender's mode has
    /// it (and the umask allows it). Off: never granted, whatever the sender says.
    pub keep_group_other_write: bool,
    /// Bounds on what one session may carry (bitmap memory, key usage).
    pub limits: StreamLimits,
}

#[derive(Debug, Clone)]
pub struct RecvReport {
    pub peer: SocketAddr,
    pub host: String,
    pub owner: String,
    pub files: Vec<String>,
    pub bytes: u64,
    pub streams: usize,
    pub elapsed: Duration,
}

type JoinMap = HashMap<[u8; JOIN_TOKEN_LEN], mpsc::Sender<(u16, TcpStream)>>;

/// A listening receiver.
#[derive(Debug)]
pub struct Receiver {
    listener: TcpListener,
    cfg: Arc<RecvConfig>,
    joins: Arc<Mutex<JoinMap>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Receiver {
    pub fn bind(addr: SocketAddr, cfg: RecvConfig) -> Result<Self, TransferError> {
        if let Dest::Dir(d) = &cfg.dest
            && !d.is_dir()
        {
            return Err(TransferError::Usage(format!(
                "{} is not a directory",
                d.display()
            )));
        }
        let listener = TcpListener::bind(addr).ctx(|| format!("cannot listen on {addr}"))?;
        Ok(Self {
            listener,
            cfg: Arc::new(cfg),
            joins: Arc::default(),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Serves sessions, each on its own threads, calling `on_report` as each ends. With
    /// `once`, serves one session only (others are turned away) and returns its outcome.
    pub fn serve(
        &self,
        once: bool,
        progress: Arc<Progress>,
        mut on_report: impl FnMut(&Result<RecvReport, TransferError>),
    ) -> Result<(), TransferError> {
        let (tx, rx) = mpsc::channel::<Result<RecvReport, TransferError>>();
        let started = Arc::new(AtomicBool::new(false));
        let mut wake = self.local_addr();
        if wake.ip().is_unspecified() {
            wake.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        loop {
            let (sock, peer) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            while let Ok(r) = rx.try_recv() {
                on_report(&r);
                if once {
                    return r.map(|_| ());
                }
            }
            let (cfg, joins, tx, started, progress) = (
                self.cfg.clone(),
                self.joins.clone(),
                tx.clone(),
                started.clone(),
                progress.clone(),
            );
            std::thread::spawn(move || {
                if let Some(r) = handle_conn(sock, peer, &cfg, &joins, once, &started, &progress) {
                    let _ = tx.send(r);
                    if once {
                        // Wake the accept loop so it sees the outcome.
                        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
                    }
                }
            });
        }
    }
}

/// Reads a new connection's preamble: a session start (served here, to the end) or a stripe
/// joining a session (handed over). Returns a session's outcome.
fn handle_conn(
    sock: TcpStream,
    peer: SocketAddr,
    cfg: &RecvConfig,
    joins: &Mutex<JoinMap>,
    once: bool,
    started: &AtomicBool,
    progress: &Progress,
) -> Option<Result<RecvReport, TransferError>> {
    conn::tune(&sock);
    let _ = sock.set_read_timeout(Some(SETUP_TIMEOUT));
    let mut pre = [0u8; 5];
    if !matches!(conn::read_full(&sock, &mut pre), Ok(true)) || &pre[..4] != MAGIC {
        tracing::debug!("{peer}: not a sealink stream connection");
        return None;
    }
    match pre[4] {
        KIND_JOIN => {
            let mut m = [0u8; JOIN_LEN - 5];
            if !matches!(conn::read_full(&sock, &mut m), Ok(true)) {
                return None;
            }
            let token: [u8; JOIN_TOKEN_LEN] = m[..JOIN_TOKEN_LEN].try_into().ok()?;
            let stripe = u16::from_le_bytes(m[JOIN_TOKEN_LEN..].try_into().ok()?);
            let tx = lock(joins).get(&token).cloned();
            match tx {
                Some(tx) => {
                    let _ = tx.send((stripe, sock));
                }
                None => tracing::debug!("{peer}: join for no session"),
            }
            None
        }
        KIND_INIT => {
            if once && started.swap(true, Ordering::SeqCst) {
                tracing::info!("{peer}: turned away, serving one transfer only");
                return None;
            }
            let mut init = [0u8; INIT_MESSAGE_LEN];
            if !matches!(conn::read_full(&sock, &mut init), Ok(true)) {
                return None;
            }
            let r = Session::run(sock, peer, &init, cfg, joins, progress);
            match &r {
                Ok(rep) => tracing::info!(
                    "{peer}: received {} bytes in {} files from {}",
                    rep.bytes,
                    rep.files.len(),
                    rep.owner
                ),
                Err(e) => tracing::warn!("{peer}: transfer failed: {e}"),
            }
            Some(r)
        }
        _ => None,
    }
}

/// Where opened data goes.
enum Out {
    Files(Vec<PartFile>),
    Stdout(Mutex<Reorder>),
}

/// Restores stream order for standard output: in-order data is written at once, the rest
/// waits (bounded).
struct Reorder {
    next: u64,
    pending: BTreeMap<u64, Vec<u8>>,
    pending_bytes: usize,
    out: std::io::Stdout,
}

const MAX_REORDER_BYTES: usize = 256 << 20;

struct Session<'a> {
    keys: SessionKeys,
    scope: Scope,
    assembly: Mutex<Assembly>,
    out: Out,
    end: Mutex<Option<End>>,
    failed: AtomicBool,
    progress: &'a Progress,
    record_cap: usize,
    modes: Vec<u32>,
    overwrite: bool,
}

impl Session<'_> {
    fn run(
        control: TcpStream,
        peer: SocketAddr,
        init: &[u8],
        cfg: &RecvConfig,
        joins: &Mutex<JoinMap>,
        progress: &Progress,
    ) -> Result<RecvReport, TransferError> {
        let start = Instant::now();
        let mut host_name = String::new();
        let (resp, keys, initiator) = sealink_proto::stream::accept(&cfg.host, init, |k| {
            cfg.trusted_hosts.iter().any(|(n, h)| {
                let ok = h == k;
                if ok {
                    host_name = n.clone();
                }
                ok
            })
        })?;
        // Register for joins before answering: the sender connects its stripes as soon as it
        // has the answer.
        let (jtx, jrx) = mpsc::channel();
        let token = keys.join_token;
        lock(joins).insert(token, jtx);
        let r = (&control)
            .write_all(&resp)
            .ctx(|| "answering the handshake".into())
            .and_then(|()| {
                Self::after_handshake(
                    control, peer, keys, initiator, host_name, cfg, &jrx, progress,
                )
            });
        // Unregister in every case (the token is tied to this session's keys).
        lock(joins).remove(&token);
        r.map(|mut rep| {
            rep.elapsed = start.elapsed();
            rep
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn after_handshake(
        control: TcpStream,
        peer: SocketAddr,
        keys: SessionKeys,
        initiator: [u8; 32],
        host: String,
        cfg: &RecvConfig,
        joins: &mpsc::Receiver<(u16, TcpStream)>,
        progress: &Progress,
    ) -> Result<RecvReport, TransferError> {
        let Some((hdr, body)) = conn::read_record(&control, &keys.recv)? else {
            return Err(TransferError::PeerClosed(
                "before saying what it sends".into(),
            ));
        };
        if hdr.kind != RecordType::Hello || hdr.seq != 0 {
            return Err(StreamError::MalformedHeader("the first record must be the hello").into());
        }
        let scope = hdr.scope;
        let answer = |code: AbortCode, e: TransferError| {
            let _ = conn::write_record(
                &control,
                &keys.send,
                RecordType::Abort,
                scope,
                READY_SEQ,
                &Abort {
                    code,
                    message: error_chain(&e),
                }
                .encode(),
            );
            e
        };
        let refuse = |e: TransferError| answer(AbortCode::Refused, e);
        let hello = Hello::decode(&body).map_err(|e| answer(AbortCode::Protocol, e.into()))?;
        let intro =
            sealink_proto::stream::owner_intro(&keys.binding, &initiator, cfg.host.public());
        if !sealink_crypto::sign::verify(&hello.owner_public, &intro, &hello.owner_signature) {
            return Err(refuse(StreamError::BadOwnerSignature.into()));
        }
        let Some(owner) = cfg
            .trusted_owners
            .iter()
            .find(|(_, k)| *k == hello.owner_public)
            .map(|(n, _)| n.clone())
        else {
            return Err(refuse(StreamError::UntrustedOwner.into()));
        };
        // Bound what the hello announces before anything is allocated or created for it.
        let layout = Layout::new(hello.record_data, hello.files.iter().map(|f| f.size));
        let bound = cfg.limits.bound(keys.suite, hello.record_data);
        let assembly = Assembly::new(layout, bound).map_err(|e| refuse(e.into()))?;
        let out = match &cfg.dest {
            Dest::Stdout => Out::Stdout(Mutex::new(Reorder {
                next: sealink_proto::stream::assembly::FIRST_DATA_SEQ,
                pending: BTreeMap::new(),
                pending_bytes: 0,
                out: std::io::stdout(),
            })),
            Dest::Dir(dir) => {
                let mut parts: Vec<PartFile> = Vec::with_capacity(hello.files.len());
                for f in &hello.files {
                    let path = dir.join(&f.name);
                    let made = if !cfg.overwrite && path.symlink_metadata().is_ok() {
                        Err(TransferError::Exists(path))
                    } else {
                        PartFile::create(dir, &f.name, (f.size != UNKNOWN_SIZE).then_some(f.size))
                            .ctx(|| format!("cannot create a file for {}", path.display()))
                    };
                    match made {
                        Ok(p) => parts.push(p),
                        Err(e) => {
                            parts.iter().for_each(PartFile::discard);
                            return Err(refuse(e));
                        }
                    }
                }
                Out::Files(parts)
            }
        };
        progress.set_total(if hello.files.iter().any(|f| f.size == UNKNOWN_SIZE) {
            u64::MAX
        } else {
            hello
                .files
                .iter()
                .map(|f| f.size)
                .fold(0, u64::saturating_add)
        });
        let session = Session {
            scope,
            assembly: Mutex::new(assembly),
            out,
            end: Mutex::new(None),
            failed: AtomicBool::new(false),
            progress,
            record_cap: record::wire_len(hello.record_data as usize).max(4096),
            modes: {
                let umask = process_umask();
                hello
                    .files
                    .iter()
                    .map(|f| received_mode(f.mode, umask, cfg.keep_group_other_write))
                    .collect()
            },
            overwrite: cfg.overwrite,
            keys,
        };
        let r = session.transfer(&control, hello.stripes as usize, joins);
        let reply = match &r {
            Ok(()) => conn::write_record(
                &control,
                &session.keys.send,
                RecordType::Done,
                scope,
                REPLY_SEQ,
                &Done {
                    bytes: lock(&session.assembly).bytes(),
                    files: hello.files.len() as u32,
                }
                .encode(),
            ),
            Err(e) => {
                if let Out::Files(parts) = &session.out {
                    parts.iter().for_each(PartFile::discard);
                }
                let code = match e {
                    TransferError::Io { .. } => AbortCode::LocalIo,
                    TransferError::Exists(_) => AbortCode::Refused,
                    _ => AbortCode::Protocol,
                };
                let _ = conn::write_record(
                    &control,
                    &session.keys.send,
                    RecordType::Abort,
                    scope,
                    REPLY_SEQ,
                    &Abort {
                        code,
                        message: error_chain(e),
                    }
                    .encode(),
                );
                Ok(())
            }
        };
        r?;
        // The files are complete and in place; a lost confirmation does not undo that.
        if let Err(e) = reply {
            tracing::warn!("{peer}: could not confirm the transfer: {e}");
        }
        Ok(RecvReport {
            peer,
            host,
            owner,
            files: hello.files.iter().map(|f| f.name.clone()).collect(),
            bytes: lock(&session.assembly).bytes(),
            streams: hello.stripes as usize,
            elapsed: Duration::ZERO,
        })
    }

    /// Answers the hello, gathers the stripes, receives on all of them, then verifies and
    /// stores.
    fn transfer(
        &self,
        control: &TcpStream,
        stripes: usize,
        joins: &mpsc::Receiver<(u16, TcpStream)>,
    ) -> Result<(), TransferError> {
        conn::write_record(
            control,
            &self.keys.send,
            RecordType::Ready,
            self.scope,
            READY_SEQ,
            &[],
        )?;
        let _ = control.set_read_timeout(None);
        let mut others: Vec<Option<TcpStream>> = (1..stripes).map(|_| None).collect();
        let deadline = Instant::now() + SETUP_TIMEOUT;
        while others.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(Instant::now());
            let (i, s) = joins
                .recv_timeout(left)
                .map_err(|_| TransferError::PeerClosed("before all its stripes joined".into()))?;
            match others.get_mut((i as usize).wrapping_sub(1)) {
                Some(slot @ None) => {
                    let _ = s.set_read_timeout(None);
                    *slot = Some(s);
                }
                _ => tracing::debug!("ignoring a duplicate or out-of-range stripe {i}"),
            }
        }
        let others: Vec<TcpStream> = others.into_iter().flatten().collect();
        let all: Vec<&TcpStream> = std::iter::once(control).chain(others.iter()).collect();
        let result = std::thread::scope(|sc| {
            let hs: Vec<_> = all
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let all = &all;
                    sc.spawn(move || {
                        let r = self.stripe(s, i == 0);
                        if r.is_err() && !self.failed.swap(true, Ordering::SeqCst) {
                            // Unblock the other stripes' reads.
                            for o in all.iter() {
                                let _ = o.shutdown(Shutdown::Read);
                            }
                        }
                        r
                    })
                })
                .collect();
            let mut first = None;
            for h in hs {
                let r = h.join().unwrap_or_else(|_| {
                    Err(TransferError::Usage("a receive worker panicked".into()))
                });
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
        lock(&self.assembly).finish(&end)?;
        match &self.out {
            Out::Files(parts) => {
                for (p, &mode) in parts.iter().zip(&self.modes) {
                    p.commit(mode, self.overwrite).map_err(|e| {
                        if e.kind() == std::io::ErrorKind::AlreadyExists {
                            TransferError::Exists(p.path.clone())
                        } else {
                            TransferError::Io {
                                context: format!("cannot store {}", p.path.display()),
                                source: e,
                            }
                        }
                    })?;
                }
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
        Ok(())
    }

    /// Receives one stripe to its end: read big chunks, open records where they lie, write
    /// their data straight into place.
    fn stripe(&self, mut sock: &TcpStream, control: bool) -> Result<(), TransferError> {
        let cap = (4 << 20).max(4 * self.record_cap);
        let mut buf = vec![0u8; cap];
        let (mut lo, mut hi) = (0usize, 0usize);
        let mut ended = false;
        let mut recs: Vec<(u64, usize, usize)> = Vec::new();
        loop {
            recs.clear();
            while hi - lo >= RECORD_HEADER_LEN {
                let hdr = RecordHeader::parse(&buf[lo..hi])?;
                let n = hdr.record_len();
                if n > cap / 2 {
                    return Err(StreamError::MalformedHeader("record longer than allowed").into());
                }
                if hi - lo < n {
                    break;
                }
                if ended {
                    return Err(StreamError::OutOfRange {
                        seq: hdr.seq,
                        why: "after the end record",
                    }
                    .into());
                }
                let len = record::open_record(&self.keys.recv, &hdr, &mut buf[lo..lo + n])?;
                match hdr.kind {
                    RecordType::Data => recs.push((hdr.seq, lo + RECORD_HEADER_LEN, len)),
                    RecordType::End if control => {
                        let body = &buf[lo + RECORD_HEADER_LEN..][..len];
                        let end = End::decode(body)?;
                        if hdr.seq != Assembly::end_seq(&end) {
                            return Err(StreamError::OutOfRange {
                                seq: hdr.seq,
                                why: "end record out of place",
                            }
                            .into());
                        }
                        *lock(&self.end) = Some(end);
                        ended = true;
                    }
                    RecordType::Abort if control && hdr.seq == SENDER_ABORT_SEQ => {
                        let a = Abort::decode(&buf[lo + RECORD_HEADER_LEN..][..len])?;
                        return Err(TransferError::SenderAborted(a.message));
                    }
                    _ => {
                        return Err(StreamError::MalformedHeader("unexpected record type").into());
                    }
                }
                lo += n;
            }
            if !recs.is_empty() {
                self.deliver(&buf, &recs)?;
            }
            if lo == hi {
                (lo, hi) = (0, 0);
            } else if cap - hi < MAX_BODY_LEN + RECORD_HEADER_LEN {
                buf.copy_within(lo..hi, 0);
                (lo, hi) = (0, hi - lo);
            }
            if self.failed.load(Ordering::Relaxed) {
                return Ok(());
            }
            let n = loop {
                match sock.read(&mut buf[hi..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        return Err(TransferError::Io {
                            context: "receiving".into(),
                            source: e,
                        });
                    }
                }
            };
            if n == 0 {
                if self.failed.load(Ordering::Relaxed) {
                    return Ok(());
                }
                if lo != hi {
                    return Err(TransferError::PeerClosed(
                        "in the middle of a record".into(),
                    ));
                }
                if control && !ended {
                    let got = lock(&self.assembly).bytes();
                    return Err(TransferError::PeerClosed(format!(
                        "after {got} bytes, before the authenticated end of the stream"
                    )));
                }
                return Ok(());
            }
            hi += n;
        }
    }

    /// Accepts a chunk's data records (each once) and writes them where they belong.
    fn deliver(&self, buf: &[u8], recs: &[(u64, usize, usize)]) -> Result<(), TransferError> {
        let places = {
            let mut a = lock(&self.assembly);
            recs.iter()
                .map(|&(seq, _, len)| a.accept(seq, len))
                .collect::<Result<Vec<_>, _>>()?
        };
        match &self.out {
            Out::Files(parts) => {
                let mut i = 0;
                while i < recs.len() {
                    // A run: consecutive records of one file at consecutive offsets.
                    let (file, off) = (places[i].file, places[i].offset);
                    let mut j = i + 1;
                    let mut next = off + recs[i].2 as u64;
                    while j < recs.len()
                        && places[j].file == file
                        && places[j].offset == next
                        && j - i < 1024
                    {
                        next += recs[j].2 as u64;
                        j += 1;
                    }
                    let mut iov: Vec<IoSlice<'_>> = recs[i..j]
                        .iter()
                        .map(|&(_, s, n)| IoSlice::new(&buf[s..s + n]))
                        .collect();
                    let p = &parts[file];
                    write_all_at(&p.file, &mut iov, off)
                        .ctx(|| format!("cannot write {}", p.path.display()))?;
                    i = j;
                }
            }
            Out::Stdout(r) => {
                let mut guard = lock(r);
                let r = &mut *guard;
                for &(seq, s, n) in recs {
                    let data = &buf[s..s + n];
                    if seq == r.next {
                        r.out
                            .write_all(data)
                            .ctx(|| "cannot write standard output".into())?;
                        r.next += 1;
                        while let Some(d) = r.pending.remove(&r.next) {
                            r.pending_bytes -= d.len();
                            r.out
                                .write_all(&d)
                                .ctx(|| "cannot write standard output".into())?;
                            r.next += 1;
                        }
                    } else {
                        r.pending_bytes += n;
                        if r.pending_bytes > MAX_REORDER_BYTES {
                            return Err(StreamError::OutOfRange {
                                seq,
                                why: "too far ahead of the output",
                            }
                            .into());
                        }
                        r.pending.insert(seq, data.to_vec());
                    }
                }
            }
        }
        self.progress
            .add(recs.iter().map(|&(_, _, n)| n as u64).sum());
        Ok(())
    }
}

/// An error and its causes on one line (what the abort record tells the sender).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !out.contains(&t) {
            out = format!("{out}: {t}");
        }
        cur = s.source();
    }
    out
}
