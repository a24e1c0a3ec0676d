//! The accept loop: admission, one thread per connection, joins routed to their session.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sealink_proto::stream::handshake::{INIT_MESSAGE_LEN, JOIN_TOKEN_LEN};

use super::session;
use super::takeover::{Holders, OnceSlot};
use super::{Dest, RecvConfig, RecvReport, lock};
use crate::Progress;
use crate::admit::{Admission, ConnDrop, ConnGuard};
use crate::conn::{self, JOIN_LEN, KIND_INIT, KIND_JOIN, MAGIC};
use crate::error::{IoContext, TransferError};
use crate::state::clean_at_start;

/// Longest a finished transfer waits to be reported by a serving receiver.
const REPORT_POLL: Duration = Duration::from_millis(100);

/// A stripe handed to its session: index, socket, and its place in the connection table.
pub(super) type Joiner = (u16, TcpStream, ConnGuard);
pub(super) type JoinMap = HashMap<[u8; JOIN_TOKEN_LEN], mpsc::Sender<Joiner>>;

/// A listening receiver.
#[derive(Debug)]
pub struct Receiver {
    listener: TcpListener,
    cfg: Arc<RecvConfig>,
    joins: Arc<Mutex<JoinMap>>,
    holders: Arc<Mutex<Holders>>,
    admission: Arc<Admission>,
}

/// What every connection thread of a receiver shares.
pub(super) struct Ctx {
    pub(super) cfg: Arc<RecvConfig>,
    /// The trusted hosts and owners now ([`RecvConfig::trust_file`] followed).
    pub(super) trust: Arc<crate::live_trust::LiveTrust>,
    pub(super) joins: Arc<Mutex<JoinMap>>,
    pub(super) holders: Arc<Mutex<Holders>>,
    pub(super) once: bool,
    /// Taken by the first session to authenticate when serving `once`: its owner's key and
    /// the names of its files (a newer session of that owner, proven by its signature and
    /// trusted, sending one of those files may take it over, as without `once`).
    pub(super) slot: Arc<Mutex<Option<OnceSlot>>>,
    pub(super) progress: Arc<Progress>,
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
    session::run(sock, peer, &init, guard, deadline, ctx)
}
