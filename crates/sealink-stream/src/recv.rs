//! The receiving side: a listener that serves transfer sessions.

use std::collections::{BTreeMap, HashMap};
use std::io::{IoSlice, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use sealink_crypto::{Scope, SuiteId};
use sealink_proto::HostKey;
use sealink_proto::cookie::UNTRUSTED_LOG_EVERY;
use sealink_proto::stream::assembly::FIRST_DATA_SEQ;
use sealink_proto::stream::body::{EntryKind, FileEntry, UNKNOWN_SIZE, UP_TO_DATE};
use sealink_proto::stream::handshake::{INIT_MESSAGE_LEN, JOIN_TOKEN_LEN, accept_fresh};
use sealink_proto::stream::record::{self, RecordType};
use sealink_proto::stream::resume::{held_records, resumable};
use sealink_proto::stream::{
    Abort, AbortCode, Assembly, Done, End, Hello, Layout, Manifest, READY_SEQ, REPLY_SEQ, Ready,
    SENDER_ABORT_SEQ, SessionKeys, StreamError, StreamLimits, TreeCheck, TreeLimits, ready_seq,
};

use crate::Progress;
use crate::admit::{Admission, ConnDrop, ConnGuard};
use crate::conn::{self, JOIN_LEN, KIND_INIT, KIND_JOIN, MAGIC, secs};
use crate::error::{IoContext, TransferError, is_timeout, socket_error};
use crate::files::{PartFile, process_umask, received_mode, write_all_at};
use crate::limits::{ConnLimits, Timeouts};
use crate::place::{Found, Slot, Tree};
use crate::records::RecordReader;
use crate::state::{ResumeLimits, clean_at_start, enforce_limits};

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
/// Longest a finished transfer waits to be reported by a serving receiver.
const REPORT_POLL: Duration = Duration::from_millis(100);
/// How often, at most, a receiver records durably how much of each resumable file it holds
/// (sync of the data, then a new record map); also once when a transfer fails.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

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
    /// Counts a stored batch (and lists its entries when asked to).
    fn add(&mut self, b: &Session<'_>, files: &[FileEntry], sizes: &[u64], cfg: &RecvConfig) {
        self.batches += 1;
        for (i, f) in files.iter().enumerate() {
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

/// A stripe handed to its session: index, socket, and its place in the connection table.
type Joiner = (u16, TcpStream, ConnGuard);
type JoinMap = HashMap<[u8; JOIN_TOKEN_LEN], mpsc::Sender<Joiner>>;

/// How long a session waits for an older session of the same owner, which it asked to stop, to
/// let go of the resume state of a file both send.
const TAKEOVER_WAIT: Duration = Duration::from_secs(5);

/// A session's stop switch. A sender whose host vanished (no FIN, no RST) leaves its session
/// holding its files' resume state until the idle timeout; the same owner's next session for
/// one of those files asks it to stop instead of waiting. Stopping shuts its connections down:
/// its workers end, it records what it holds and closes its files (letting go of their locks),
/// as after any failure. A session already verifying or storing its files is not interrupted.
#[derive(Debug, Default)]
struct Stop {
    requested: AtomicBool,
    /// The file the newer session asked for.
    by: Mutex<Option<String>>,
    /// Clones of the session's connections, shut down when it is asked to stop.
    socks: Mutex<Vec<TcpStream>>,
}

impl Stop {
    /// Shuts `s` down when the session is asked to stop (at once if it already was).
    fn watch(&self, s: &TcpStream) {
        let mut socks = lock(&self.socks);
        if self.requested() {
            let _ = s.shutdown(Shutdown::Both);
        } else if let Ok(c) = s.try_clone() {
            socks.push(c);
        }
    }

    fn request(&self, name: &str) {
        let mut socks = lock(&self.socks);
        if !self.requested.swap(true, Ordering::SeqCst) {
            *lock(&self.by) = Some(name.to_owned());
        }
        for s in socks.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// What a session that was asked to stop reports.
    fn superseded(&self) -> TransferError {
        TransferError::Superseded(lock(&self.by).clone().unwrap_or_default())
    }
}

/// Which session holds each resume state in use (by its part file's path), to ask it to stop.
type Holders = HashMap<PathBuf, Arc<Stop>>;

/// The entries of [`Holders`] one session made; removed when it is dropped (after the
/// session's files are closed), unless a newer session has taken them over since.
struct Holding<'a> {
    holders: &'a Mutex<Holders>,
    stop: Arc<Stop>,
    keys: Vec<PathBuf>,
}

impl Holding<'_> {
    /// Forgets the oldest `n` entries (a stored batch's files, whose state is gone): what a
    /// session holds stays bounded by the batches in flight, whatever the number of files.
    fn forget_oldest(&mut self, n: usize) {
        let mut h = lock(self.holders);
        for k in self.keys.drain(..n.min(self.keys.len())) {
            if h.get(&k).is_some_and(|s| Arc::ptr_eq(s, &self.stop)) {
                h.remove(&k);
            }
        }
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        let mut h = lock(self.holders);
        for k in &self.keys {
            if h.get(k).is_some_and(|s| Arc::ptr_eq(s, &self.stop)) {
                h.remove(k);
            }
        }
    }
}

/// Opens the resume state of the owner's file `f` in `dir` for the session of `holding`. If
/// another session of this receiver holds it, that session is of the same owner (the state's
/// name hashes the owner's key, which the hello's signature proved): it is asked to stop, and
/// the state is taken once it has let go (the lock on the part file passes from one to the
/// other, so the two never write it at once).
fn open_taking_over(
    dir: &std::path::Path,
    owner: &[u8; 32],
    f: &sealink_proto::stream::body::FileEntry,
    fresh: bool,
    holding: &mut Holding<'_>,
) -> std::io::Result<(PartFile, u64)> {
    let key = dir.join(sealink_proto::stream::resume::state_stem(
        owner, &f.name, f.size, f.mtime,
    ));
    let start = Instant::now();
    loop {
        if holding.stop.requested() {
            return Err(std::io::Error::other("asked to stop"));
        }
        let e = match PartFile::open_resumable(dir, owner, &f.name, f.size, f.mtime, fresh) {
            Ok(x) => {
                lock(holding.holders).insert(key.clone(), holding.stop.clone());
                holding.keys.push(key);
                return Ok(x);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => e,
            Err(e) => return Err(e),
        };
        let holder = lock(holding.holders).get(&key).cloned();
        match holder {
            Some(h) if !Arc::ptr_eq(&h, &holding.stop) => {
                if start.elapsed() >= TAKEOVER_WAIT {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!(
                            "{e}, and has not stopped within {} of being asked to (it may be \
                             storing its files): try again shortly",
                            secs(TAKEOVER_WAIT)
                        ),
                    ));
                }
                h.request(&f.name);
            }
            // A session registers just after taking the lock: a moment's grace.
            None if start.elapsed() < Duration::from_millis(200) => {}
            _ => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!(
                        "{e} (held by another receiver on this directory, which lets go once \
                         its sender has sent nothing for its idle timeout)"
                    ),
                ));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A listening receiver.
#[derive(Debug)]
pub struct Receiver {
    listener: TcpListener,
    cfg: Arc<RecvConfig>,
    joins: Arc<Mutex<JoinMap>>,
    holders: Arc<Mutex<Holders>>,
    admission: Arc<Admission>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Who holds a `--once` receiver's one transfer.
struct OnceSlot {
    owner: [u8; 32],
    names: Vec<String>,
}

impl OnceSlot {
    /// From a checked hello; a refused one takes the slot for no one (when no transfer is held,
    /// a refused session is the receiver's outcome, as it always was).
    fn of(checked: Option<&Checked>) -> OnceSlot {
        match checked {
            Some(c) => OnceSlot {
                owner: c.hello.owner_public,
                names: c.hello.files.iter().map(|f| f.name.clone()).collect(),
            },
            None => OnceSlot {
                owner: [0; 32],
                names: Vec::new(),
            },
        }
    }

    /// Whether the session of `new` may take over from this slot's session: the same owner
    /// (whose signature `new` has proven, and whom this receiver trusts) sending one of the
    /// same files.
    fn taken_over_by(&self, new: &Checked) -> bool {
        self.owner != [0; 32]
            && new.hello.owner_public == self.owner
            && new.hello.files.iter().any(|f| self.names.contains(&f.name))
    }
}

/// A hello that decoded, whose owner signature verifies, from an owner this receiver trusts.
struct Checked {
    hello: Hello,
    /// The owner's name in the trust file.
    owner: String,
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

/// What every connection thread of a receiver shares.
struct Ctx {
    cfg: Arc<RecvConfig>,
    /// The trusted hosts and owners now ([`RecvConfig::trust_file`] followed).
    trust: Arc<crate::live_trust::LiveTrust>,
    joins: Arc<Mutex<JoinMap>>,
    holders: Arc<Mutex<Holders>>,
    once: bool,
    /// Taken by the first session to authenticate when serving `once`: its owner's key and
    /// the names of its files (a newer session of that owner, proven by its signature and
    /// trusted, sending one of those files may take it over, as without `once`).
    slot: Arc<Mutex<Option<OnceSlot>>>,
    progress: Arc<Progress>,
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
        if let Dest::Dir(d) = &cfg.dest {
            let c = clean_at_start(d, cfg.resume_max_age, &cfg.resume_limits)
                .ctx(|| format!("cannot clean old resume state in {}", d.display()))?;
            if c.total() > 0 {
                tracing::info!(
                    "cleaned {}: {} expired resume state files, {} left by a crashed receiver, \
                     {} holding nothing, {} cut to what they hold, {} past the limits",
                    d.display(),
                    c.expired,
                    c.leftovers,
                    c.orphans,
                    c.trimmed,
                    c.evicted
                );
            }
        }
        let _ = crate::files::raise_open_files_limit();
        let listener = TcpListener::bind(addr).ctx(|| format!("cannot listen on {addr}"))?;
        Ok(Self {
            listener,
            admission: Arc::new(Admission::new(cfg.limits, cfg.host.public())),
            cfg: Arc::new(cfg),
            joins: Arc::default(),
            holders: Arc::default(),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Connections dropped so far, by reason (see [`crate::ConnDrop`]), every reason listed.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        self.admission.drops()
    }

    /// Serves sessions, each on its own threads, calling `on_report` as each ends. With
    /// `once`, serves one session only and returns its outcome: the first whose peer
    /// authenticates (connections that never do cannot end it; later sessions are refused on
    /// their own connections and end nothing, unless the same owner, its signature verified
    /// and trusted, takes the transfer over).
    pub fn serve(
        &self,
        once: bool,
        progress: Arc<Progress>,
        mut on_report: impl FnMut(&Result<RecvReport, TransferError>),
    ) -> Result<(), TransferError> {
        let (tx, rx) = mpsc::channel::<Result<RecvReport, TransferError>>();
        let slot = Arc::new(Mutex::new(None));
        let trust = Arc::new(crate::live_trust::LiveTrust::new(
            self.cfg.trust_file.clone(),
            crate::live_trust::Lists {
                hosts: self.cfg.trusted_hosts.clone(),
                owners: self.cfg.trusted_owners.clone(),
            },
        ));
        // The loop wakes at least this often to report transfers that ended, so a report
        // never waits for the next connection.
        self.listener
            .set_nonblocking(true)
            .ctx(|| "cannot poll the listening socket".into())?;
        let tick = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: REPORT_POLL.as_nanos() as _,
        };
        loop {
            while let Ok(r) = rx.try_recv() {
                on_report(&r);
                // A session a newer one took over is not the outcome: the newer one's is.
                if once && !matches!(r, Err(TransferError::Superseded(_))) {
                    return r.map(|_| ());
                }
            }
            let mut fds = [rustix::event::PollFd::new(
                &self.listener,
                rustix::event::PollFlags::IN,
            )];
            match rustix::event::poll(&mut fds, Some(&tick)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("poll failed: {e}");
                    std::thread::sleep(REPORT_POLL);
                    continue;
                }
            }
            let (sock, peer) = match self.listener.accept() {
                Ok(x) => x,
                // Gone before we took it (or taken by a concurrent accept).
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    // Out of descriptors, most likely: wait for connections to end.
                    tracing::warn!("accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            // Accepted sockets do not inherit O_NONBLOCK on Linux; be sure anyway.
            if let Err(e) = sock.set_nonblocking(false) {
                tracing::warn!("{peer}: closed, cannot make it blocking: {e}");
                continue;
            }
            let Some(guard) = self.admission.admit(&sock, peer) else {
                tracing::debug!("{peer}: closed, every connection slot is held");
                continue;
            };
            let ctx = Ctx {
                cfg: self.cfg.clone(),
                trust: trust.clone(),
                joins: self.joins.clone(),
                holders: self.holders.clone(),
                once,
                slot: slot.clone(),
                progress: progress.clone(),
            };
            let tx = tx.clone();
            let spawned = std::thread::Builder::new()
                .name("sealink-recv".into())
                .spawn(move || {
                    if let Some(r) = handle_conn(sock, peer, guard, &ctx) {
                        let _ = tx.send(r);
                    }
                });
            if let Err(e) = spawned {
                // The closure (socket and guard) is dropped: the connection is closed.
                self.admission.count(ConnDrop::NoThread);
                tracing::warn!("{peer}: closed, no thread for it: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Classifies a failed read before authentication (eviction is counted already).
fn early_drop(guard: &ConnGuard, peer: SocketAddr, r: &std::io::Result<bool>, what: &str) {
    let why = match r {
        Err(e) if crate::error::is_timeout(e) => ConnDrop::SetupTimeout,
        _ => ConnDrop::NotSealink,
    };
    tracing::debug!("{peer}: dropped while reading {what} ({})", why.name());
    guard.dropped(why);
}

/// Reads a new connection's preamble: a session start (served here, to the end) or a stripe
/// joining a session (handed over). Returns a session's outcome once its peer authenticated.
fn handle_conn(
    sock: TcpStream,
    peer: SocketAddr,
    mut guard: ConnGuard,
    ctx: &Ctx,
) -> Option<Result<RecvReport, TransferError>> {
    // The whole set-up, however the peer spreads its bytes, is bounded by one deadline.
    let deadline = Instant::now() + ctx.cfg.timeouts.setup;
    conn::tune(&sock);
    let _ = sock.set_write_timeout(Some(ctx.cfg.timeouts.setup));
    let mut pre = [0u8; 5];
    let r = conn::read_full(&sock, &mut pre, deadline);
    if !matches!(r, Ok(true)) {
        early_drop(&guard, peer, &r, "the preamble");
        return None;
    }
    if &pre[..4] != MAGIC || !matches!(pre[4], KIND_INIT | KIND_JOIN) {
        tracing::debug!("{peer}: not a sealink stream connection");
        guard.dropped(ConnDrop::NotSealink);
        return None;
    }
    if pre[4] == KIND_JOIN {
        let mut m = [0u8; JOIN_LEN - 5];
        let r = conn::read_full(&sock, &mut m, deadline);
        if !matches!(r, Ok(true)) {
            early_drop(&guard, peer, &r, "a join");
            return None;
        }
        let mut token = [0u8; JOIN_TOKEN_LEN];
        token.copy_from_slice(&m[..JOIN_TOKEN_LEN]);
        let stripe = u16::from_le_bytes([m[JOIN_TOKEN_LEN], m[JOIN_TOKEN_LEN + 1]]);
        let tx = lock(&ctx.joins).get(&token).cloned();
        match tx {
            // The token proves the peer holds the session's keys.
            Some(tx) if guard.authenticated() => {
                let _ = tx.send((stripe, sock, guard));
            }
            Some(_) => {}
            None => {
                tracing::debug!("{peer}: join for no session");
                guard.dropped(ConnDrop::UnknownJoin);
            }
        }
        return None;
    }
    let mut init = [0u8; INIT_MESSAGE_LEN];
    let r = conn::read_full(&sock, &mut init, deadline);
    if !matches!(r, Ok(true)) {
        early_drop(&guard, peer, &r, "the initiation");
        return None;
    }
    // Before any public-key work: mac1, then the rate limit.
    if !guard.admission().allow_initiation(peer.ip(), &init) {
        tracing::debug!("{peer}: initiation without a valid mac1, or rate-limited");
        return None;
    }
    Session::run(sock, peer, &init, guard, deadline, ctx)
}

/// Where opened data goes.
enum Out {
    /// One slot per entry of the batch.
    Files(Vec<Slot>),
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
/// How long an abort may wait for room on a connection after a failure.
const ABORT_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// One manifest batch being received (the session's state beyond it lives in
/// `after_hello`: the stripes, their readers, the tree, the manifest check).
struct Session<'a> {
    keys: &'a SessionKeys,
    assembly: Mutex<Assembly>,
    out: Out,
    /// The batch's entries, and what the receiver found at each one's place.
    files: Vec<FileEntry>,
    found: Vec<Found>,
    /// The manifest's last batch: the control stripe must end right after its end record.
    last: bool,
    /// How long verifying and storing the batch took (for the debug log).
    stored_in: Mutex<Duration>,
    end: Mutex<Option<End>>,
    failed: AtomicBool,
    progress: &'a Progress,
    record_cap: usize,
    modes: Vec<u32>,
    timeouts: Timeouts,
    /// When data last arrived or was stored, in nanoseconds since `t0`.
    last_progress: AtomicU64,
    t0: Instant,
    /// Per file: records held from an earlier session (as the ready said), their bytes, and
    /// the file's announced size.
    held: Vec<u64>,
    resumed: Vec<u64>,
    sizes: Vec<u64>,
    record_data: u64,
    /// Whether any file is resumable (then checkpoints are taken).
    resumable: bool,
    /// Held (shared) from accepting records to writing them; a checkpoint takes it alone to
    /// see only records that are written.
    writes: RwLock<()>,
    /// Per file: the lowest offset of data accepted but never written (a write failed, or the
    /// batch was refused before its turn came); `u64::MAX` if none. A checkpoint never claims
    /// bytes from there on.
    unwritten: Mutex<Vec<u64>>,
    /// The next checkpoint's time (ns since `t0`), and who takes it.
    next_checkpoint: AtomicU64,
    checkpointing: Mutex<()>,
}

/// What the handshake established, before the peer has proven it holds the keys.
struct Handshaken {
    keys: SessionKeys,
    initiator: [u8; 32],
    host: String,
}

impl<'a> Session<'a> {
    /// Runs the handshake and waits for the hello; only a peer whose hello opens under the new
    /// session's key is authenticated. Its session's outcome is returned; a connection that
    /// fails before is dropped and counted, and ends nothing.
    fn run(
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
        let r = Self::authenticate(&control, peer, &resp, &hs, &mut guard, deadline, ctx).map(
            |hello| {
                Self::after_hello(
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
            },
        );
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
            Ok(Some((hdr, body))) if hdr.kind == RecordType::Hello && hdr.seq == 0 => {
                (hdr.scope, body)
            }
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
            type Stored<'s> = (Session<'s>, Vec<u64>, Duration, Result<(), TransferError>);
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
                    Session::open(
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
                let next =
                    read_manifest(&control, &mut readers[0], &keys, end_seq + 1, cfg.timeouts)
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

    /// Opens one batch: bounds it, decides where each entry goes (refusing before anything is
    /// created), opens part files and resume state, counts what the receiver holds.
    #[allow(clippy::too_many_arguments)]
    fn open(
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
        let out = match (&cfg.dest, tree) {
            (Dest::Dir(dir), Some(tree)) => {
                // Every path was validated by the decoder; what is there decides the rest.
                found = tree.plan(files)?;
                tree.make_staged_dirs(files, &mut found)?;
                let mut slots: Vec<Slot> = Vec::with_capacity(files.len());
                for (i, f) in files.iter().enumerate() {
                    let path = dir.join(&f.name);
                    let made = match &f.kind {
                        EntryKind::Dir => Ok(Slot::Dir),
                        EntryKind::Symlink(t) => Ok(Slot::Link(t.clone())),
                        EntryKind::File if found[i] == Found::Same => {
                            held[i] = UP_TO_DATE;
                            Ok(Slot::Keep)
                        }
                        // A file of one record arrives whole or not at all: no resume state.
                        EntryKind::File
                            if resumable(f.size, f.mtime)
                                && f.size > u64::from(hello.record_data) =>
                        {
                            open_taking_over(dir, &hello.owner_public, f, hello.fresh, holding)
                                .map(|(p, bytes)| {
                                    held[i] = held_records(bytes, f.size, hello.record_data);
                                    Slot::Part(p)
                                })
                                .ctx(|| {
                                    format!("cannot open the resume state of {}", path.display())
                                })
                        }
                        EntryKind::File => match tree.direct_path(&f.name) {
                            Some(at) => PartFile::create_direct(
                                at,
                                (f.size != UNKNOWN_SIZE).then_some(f.size),
                            ),
                            None => PartFile::create_in(
                                &tree.part_dir(&f.name),
                                path.clone(),
                                (f.size != UNKNOWN_SIZE).then_some(f.size),
                            ),
                        }
                        .map(Slot::Part)
                        .ctx(|| format!("cannot create a file for {}", path.display())),
                    };
                    match made {
                        Ok(p) => slots.push(p),
                        Err(e) => {
                            slots
                                .iter()
                                .filter_map(Slot::part)
                                .for_each(PartFile::release);
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
        let mut resumed = vec![0u64; files.len()];
        for (i, &h) in held.iter().enumerate().filter(|x| *x.1 > 0) {
            let up_to_date = h == UP_TO_DATE;
            let records = if up_to_date {
                assembly.layout().file_records(i).unwrap_or(0)
            } else {
                h
            };
            match assembly.hold(i, records) {
                Ok(bytes) => {
                    progress.add_held(bytes);
                    if !up_to_date {
                        resumed[i] = bytes;
                    }
                }
                Err(e) => {
                    if let Out::Files(slots) = &out {
                        slots
                            .iter()
                            .filter_map(Slot::part)
                            .for_each(PartFile::release);
                    }
                    return Err(e.into());
                }
            }
        }
        progress.add_total(if files.iter().any(|f| f.size == UNKNOWN_SIZE) {
            u64::MAX
        } else {
            files.iter().map(|f| f.size).fold(0, u64::saturating_add)
        });
        let resumable = matches!(&out, Out::Files(s)
            if s.iter().filter_map(Slot::part).any(|p| p.resume.is_some()));
        Ok(Session {
            assembly: Mutex::new(assembly),
            out,
            found,
            files: files.to_vec(),
            last,
            stored_in: Mutex::new(Duration::ZERO),
            end: Mutex::new(None),
            failed: AtomicBool::new(false),
            progress,
            record_cap: record::wire_len(hello.record_data as usize).max(4096),
            modes: {
                let umask = process_umask();
                files
                    .iter()
                    .map(|f| received_mode(f.mode, umask, cfg.keep_group_other_write))
                    .collect()
            },
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
    fn release(&self) {
        if let Out::Files(slots) = &self.out {
            slots
                .iter()
                .filter_map(Slot::part)
                .for_each(PartFile::release);
        }
    }

    /// After a failure: keeps what arrived of resumable files for the next attempt, and
    /// closes the part files.
    fn keep_or_release(&self, peer: SocketAddr) {
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
    /// [`Session::store`]); returns the files' sizes (from the authenticated end) and the end
    /// record's seq.
    fn transfer(
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
        match &self.out {
            Out::Files(slots) => self.verify_hashes(slots, &end)?,
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
    fn store(&self, tree: &Mutex<Tree>, sync: bool) -> Result<(), TransferError> {
        let Out::Files(slots) = &self.out else {
            return Ok(());
        };
        let t = Instant::now();
        let synced = Tree::durable(sync, &self.files, slots, &self.modes)?;
        lock(tree).commit(&self.files, &self.found, slots, &self.modes, synced)?;
        *lock(&self.stored_in) = t.elapsed();
        Ok(())
    }

    /// Whether every record of the batch has arrived (once its end is known).
    fn complete(&self) -> bool {
        let expected = lock(&self.end).as_ref().map(|e| e.data_records);
        expected.is_some_and(|n| lock(&self.assembly).received() == n)
    }

    /// Receives one stripe to its end: read big chunks, open records where they lie, write
    /// their data straight into place.
    fn stripe(
        &self,
        mut sock: &TcpStream,
        reader: &mut RecordReader,
        control: bool,
    ) -> Result<(), TransferError> {
        // Reads wake up every tick to check the whole session's progress: one stripe may
        // idle while others carry the data, and a batch may be complete.
        let tick =
            (self.timeouts.idle / 4).clamp(Duration::from_millis(5), Duration::from_millis(50));
        sock.set_read_timeout(Some(tick))
            .ctx(|| "setting a receive timeout".into())?;
        let mut ended = false;
        let mut recs: Vec<(u64, usize, usize)> = Vec::new();
        loop {
            recs.clear();
            // The control stripe reads no further than a batch's end (the next batch's
            // manifest may follow it at once); after the last batch's, nothing may follow.
            while (!ended || self.last)
                && let Some(r) = reader.next_record(&self.keys.recv)?
            {
                let hdr = r.header;
                if ended {
                    return Err(StreamError::OutOfRange {
                        seq: hdr.seq,
                        why: "after the end record of the manifest's last batch",
                    }
                    .into());
                }
                match hdr.kind {
                    RecordType::Data => recs.push((hdr.seq, r.start, r.len)),
                    RecordType::End if control => {
                        let end = End::decode(reader.data(&r))?;
                        if hdr.seq != lock(&self.assembly).end_seq(&end) {
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
                        let a = Abort::decode(reader.data(&r))?;
                        return Err(TransferError::SenderAborted(a.message));
                    }
                    _ => {
                        return Err(StreamError::MalformedHeader("unexpected record type").into());
                    }
                }
            }
            if !recs.is_empty() {
                self.deliver(reader.buffer(), &recs)?;
            }
            if self.failed.load(Ordering::Relaxed)
                || (ended && !self.last)
                || (!control && self.complete())
            {
                return Ok(());
            }
            let n = loop {
                match reader.fill(&mut sock) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) if is_timeout(&e) => {
                        if self.failed.load(Ordering::Relaxed) || (!control && self.complete()) {
                            return Ok(());
                        }
                        // A stalled transfer still records what it holds, in case the
                        // receiver is killed before the sender comes back.
                        if self.resumable {
                            self.maybe_checkpoint()?;
                        }
                        if self.stalled() {
                            return Err(TransferError::TimedOut(format!(
                                "nothing received from the sender for {}",
                                secs(self.timeouts.idle)
                            )));
                        }
                    }
                    Err(e) => return Err(socket_error(e, "receiving", String::new)),
                }
            };
            if n == 0 {
                if self.failed.load(Ordering::Relaxed) {
                    return Ok(());
                }
                if reader.pending() != 0 {
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
            self.touch();
        }
    }

    /// Trusts nothing kept from an earlier session: every resumed file (and any other whose
    /// end carries a hash) must hash, as assembled, to the sender's SHA-256. One read of each
    /// such file. A mismatch deletes that file's resume state.
    fn verify_hashes(&self, slots: &[Slot], end: &End) -> Result<(), TransferError> {
        for (i, slot) in slots.iter().enumerate() {
            let Some(p) = slot.part() else { continue };
            let want = end.hashes.get(i).copied().flatten();
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
    fn maybe_checkpoint(&self) -> Result<(), TransferError> {
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
    fn checkpoint(&self) -> Result<(), TransferError> {
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
    fn touch(&self) {
        let now = self.t0.elapsed().as_nanos() as u64;
        self.last_progress.fetch_max(now, Ordering::Relaxed);
    }

    /// Whether the session has gone without progress for longer than the idle timeout.
    fn stalled(&self) -> bool {
        let last = Duration::from_nanos(self.last_progress.load(Ordering::Relaxed));
        self.t0.elapsed().saturating_sub(last) > self.timeouts.idle
    }

    /// Accepts a chunk's data records (each once) and writes them where they belong.
    fn deliver(&self, buf: &[u8], recs: &[(u64, usize, usize)]) -> Result<(), TransferError> {
        let writing = self.writes.read().unwrap_or_else(|p| p.into_inner());
        // Records up to the first refused one are accepted (and written below); the refusal
        // ends the session after that.
        let mut refused = None;
        let mut places = Vec::with_capacity(recs.len());
        {
            let mut a = lock(&self.assembly);
            for &(seq, _, len) in recs {
                match a.accept(seq, len) {
                    Ok(p) => places.push(p),
                    Err(e) => {
                        refused = Some(e);
                        break;
                    }
                }
            }
        }
        let recs = &recs[..places.len()];
        match &self.out {
            Out::Files(slots) => {
                // Whatever is accepted and not written by the end of this is noted, so no
                // checkpoint claims it.
                let mut i = 0;
                let not_written = |from: usize| {
                    let mut u = lock(&self.unwritten);
                    for p in &places[from..] {
                        if let Some(x) = u.get_mut(p.file) {
                            *x = (*x).min(p.offset);
                        }
                    }
                };
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
                    // Only files of known size have records; each has its part file.
                    let Some(p) = slots.get(file).and_then(Slot::part) else {
                        not_written(i);
                        return Err(StreamError::OutOfRange {
                            seq: recs[i].0,
                            why: "data for an entry that takes none",
                        }
                        .into());
                    };
                    if let Err(e) = write_all_at(&p.file, &mut iov, off) {
                        not_written(i);
                        return Err(TransferError::Io {
                            context: format!("cannot write {}", p.path.display()),
                            source: e,
                        });
                    }
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
        drop(writing);
        self.progress
            .add(recs.iter().map(|&(_, _, n)| n as u64).sum());
        if let Some(e) = refused {
            return Err(e.into());
        }
        self.touch();
        if self.resumable {
            self.maybe_checkpoint()?;
        }
        Ok(())
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

/// What an abort tells the sender of an error: its chain on one line, with every path in the
/// receiving directory made relative to it. The sender learns the names it sent, never where
/// the receiver keeps them.
fn for_sender(e: &(dyn std::error::Error + 'static), dest: &Dest) -> String {
    let mut msg = error_chain(e);
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

/// An error and its causes on one line.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_owner_takes_over_held_state_and_only_once_it_is_let_go() {
        use sealink_proto::stream::body::FileEntry;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let holders = Mutex::new(Holders::new());
        let holding = |stop: &Arc<Stop>| Holding {
            holders: &holders,
            stop: stop.clone(),
            keys: Vec::new(),
        };
        let f = FileEntry {
            name: "f".into(),
            size: 1 << 20,
            mtime: 1_700_000_000_000_000_000,
            mode: 0o644,
            kind: EntryKind::File,
        };
        let old_stop = Arc::new(Stop::default());
        let mut old = holding(&old_stop);
        let (part, held) = open_taking_over(dir, &[1; 32], &f, false, &mut old).unwrap();
        assert_eq!(held, 0);
        write_all_at(&part.file, &mut [IoSlice::new(&[7u8; 4096])], 0).unwrap();
        part.checkpoint(4096).unwrap();

        // Another owner's session for a file of the same name: its own state; the old session
        // is not disturbed.
        let other_stop = Arc::new(Stop::default());
        let mut other = holding(&other_stop);
        let (theirs, held) = open_taking_over(dir, &[2; 32], &f, false, &mut other).unwrap();
        assert_eq!(held, 0);
        assert!(!old_stop.requested());
        drop(theirs);

        // The same owner again: the old session is asked to stop, and the new one gets the
        // state only after the old one has let go of it.
        let let_go = AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                while !old_stop.requested() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                std::thread::sleep(Duration::from_millis(200));
                let_go.store(true, Ordering::SeqCst);
                part.release();
                drop(part);
                drop(old);
            });
            let new_stop = Arc::new(Stop::default());
            let mut new = holding(&new_stop);
            let (_p, held) = open_taking_over(dir, &[1; 32], &f, false, &mut new).unwrap();
            assert!(
                let_go.load(Ordering::SeqCst),
                "opened while the old session held it"
            );
            assert_eq!(held, 4096);
            assert!(matches!(old_stop.superseded(), TransferError::Superseded(n) if n == "f"));
            let key = dir.join(sealink_proto::stream::resume::state_stem(
                &[1; 32], "f", f.size, f.mtime,
            ));
            assert!(Arc::ptr_eq(&lock(&holders)[&key], &new_stop));
        });
    }

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
