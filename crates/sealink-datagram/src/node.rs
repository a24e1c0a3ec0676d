//! [`Node`]: one [`Endpoint`] driven over a [`UdpIo`] socket by a background thread.
//!
//! The I/O thread loops: receive a batch (GRO + `recvmmsg`), reserve each datagram in the
//! endpoint, run due timers, drain `poll_transmit_deferred` into one contiguous buffer; the opens
//! and seals run on `sealink-engine`'s ordered pipeline outside the state lock, and runs of
//! equal-sized datagrams to one peer leave as one GSO call (see `node::path`). Application
//! threads call [`Node::send`] (which queues into the endpoint under a mutex and wakes the I/O
//! thread) and [`Node::recv`].
//!
//! Handshake initiations cost the endpoint two Diffie-Hellman operations, so the endpoint admits
//! them through its [`sealink_proto::cookie::HandshakeGuard`] first (mac1, flood limits keyed by
//! source IP, cookie replies under load), given each datagram's source address; data of
//! established channels never passes there (a flood delays new handshakes only). Cookie replies
//! leave with the node's other datagrams.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
pub use sealink_engine::Handoff;

use sealink_proto::channel::ChannelStats;
use sealink_proto::ratelimit::LimiterConfig;
use sealink_proto::{
    Clock, Config, Directory, DropReason, Endpoint, Event, HostKey, LocalOwner, MessageId,
    Messages, Outgoing, OwnerId, PeerId, Scope, Stats, Time, Urgency,
};

use sealink_udp::{UdpIo, UdpOptions};

use crate::signal::Signal;

// The node's two halves that share its state: the I/O thread and its data path through the
// engine (`path`), and the application-facing source of outgoing messages (`source`). Children,
// so that they reach the node's private state without an import circle between siblings.
mod path;
pub(crate) mod source;
use self::source::Source;

/// Errors of the [`Node`] API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Proto(#[from] sealink_proto::Error),
    #[error("no peer named {0:?}")]
    UnknownPeer(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("{0} message(s) could not be delivered")]
    Undeliverable(usize),
    #[error("the node's I/O thread has stopped")]
    Stopped,
    #[error(transparent)]
    Pin(#[from] sealink_engine::PinError),
}

/// A peer host the node trusts.
#[derive(Debug, Clone)]
pub struct PeerConfig {
    pub name: String,
    /// Its static X25519 public key.
    pub public_key: [u8; 32],
    /// Where to send until an authenticated datagram says otherwise (`None`: learn it when the
    /// peer contacts us first).
    pub addr: Option<SocketAddr>,
}

/// Everything [`Node::start`] needs.
#[derive(Debug)]
pub struct NodeConfig {
    pub listen: SocketAddr,
    pub host: HostKey,
    /// Owners whose messages this node believes (name → Ed25519 key).
    pub directory: Directory,
    pub peers: Vec<PeerConfig>,
    pub config: Config,
    pub limiter: LimiterConfig,
    pub udp: UdpOptions,
    /// Send runs of equal-sized datagrams to one peer with one GSO system call (default true;
    /// false sends one datagram per call, the classic per-packet cost).
    pub gso: bool,
    /// Engine worker threads that seal and open (`None`: [`sealink_engine::default_workers`];
    /// 0: inline on the I/O thread).
    pub workers: Option<usize>,
    /// When the I/O thread hands its batches to the workers ([`Handoff::Auto`], the default:
    /// only the share it cannot carry while it saturates its core and a core is idle;
    /// [`Handoff::Always`]: every batch).
    pub handoff: Handoff,
    /// Hand received messages to this function on the node's own threads instead of queueing
    /// them for [`Node::recv`] (`None`: queue them).
    pub on_arrival: Option<OnArrival>,
    /// Pin the I/O thread to this CPU (`None`: let the scheduler place it). An application
    /// that sends from a thread pinned to the same CPU hands its messages over through that
    /// CPU's cache instead of pulling them across to another core.
    pub io_cpu: Option<usize>,
}

/// A receive handler: the node's I/O thread (or an engine worker) calls it with each
/// [`Arrival`] as soon as the messages are authenticated and in order, so a receiver that keeps
/// up costs no hand-off to a thread of its own (no lock, no wake-up, no context switch).
///
/// It runs where the node's receive path runs, so it must return quickly and must not wait on
/// the node ([`Node::flush`], [`Node::wait_room`], [`Node::recv`]): the node makes no progress
/// while it runs. Sending from it is fine. If it panics, the node stops (as if shut down) and
/// says so in the log.
pub struct OnArrival(Box<dyn FnMut(Arrival) + Send>);

impl OnArrival {
    pub fn new(f: impl FnMut(Arrival) + Send + 'static) -> Self {
        OnArrival(Box::new(f))
    }
}

impl std::fmt::Debug for OnArrival {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnArrival(..)")
    }
}

impl NodeConfig {
    /// Defaults for everything but identity: listen on `listen`, default protocol config,
    /// limiter and socket options, no peers, empty directory.
    pub fn new(listen: SocketAddr, host: HostKey) -> Self {
        NodeConfig {
            listen,
            host,
            directory: Directory::new(),
            peers: Vec::new(),
            config: Config::default(),
            limiter: LimiterConfig::default(),
            udp: UdpOptions::default(),
            gso: true,
            workers: None,
            handoff: Handoff::Auto,
            on_arrival: None,
            io_cpu: None,
        }
    }
}

/// Names a peer in [`Node::send`]: by id or by configured name.
#[derive(Debug, Clone, Copy)]
pub enum PeerRef<'a> {
    Id(PeerId),
    Name(&'a str),
}

impl From<PeerId> for PeerRef<'_> {
    fn from(p: PeerId) -> Self {
        PeerRef::Id(p)
    }
}

impl<'a> From<&'a str> for PeerRef<'a> {
    fn from(n: &'a str) -> Self {
        PeerRef::Name(n)
    }
}

/// What [`Node::send_batch`] queued: `count` messages with consecutive ids from `first`
/// (`first` means nothing when `count` is 0: an empty batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queued {
    pub first: MessageId,
    pub count: usize,
}

impl Queued {
    /// The ids of the queued messages, in batch order.
    pub fn ids(&self) -> impl Iterator<Item = MessageId> + use<> {
        let first = self.first.0;
        (first..first + self.count as u64).map(MessageId)
    }
}

/// A message received by this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub peer: PeerId,
    /// Configured name of the peer host the channel authenticated.
    pub peer_name: Arc<str>,
    /// The sending owner, verified by its signature on this channel.
    pub from: Arc<str>,
    /// The destination owner the sender named (`None`: this host).
    pub to: Option<Arc<str>>,
    pub scope: Scope,
    /// A view of the datagram the message came in (shared with the other messages it carried;
    /// `Bytes` derefs to `[u8]`).
    pub data: Bytes,
    /// When the I/O thread handed it over.
    pub received_at: Instant,
}

/// Messages that arrived together: a run of one datagram's messages from one owner to one
/// destination ([`Messages`]), as [`Node::recv_arrivals`] hands them over. Taking messages this
/// way costs per datagram, not per message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// Configured name of the peer host the channel authenticated.
    pub peer_name: Arc<str>,
    /// When the I/O thread handed them over.
    pub received_at: Instant,
    /// The messages, their sending owner (verified by its signature on this channel), their
    /// destination and scope.
    pub messages: Messages,
}

impl Arrival {
    /// One [`Delivery`] per message.
    pub fn deliveries(&self) -> impl ExactSizeIterator<Item = Delivery> + '_ {
        self.messages.deliveries().map(|d| self.with_host(d))
    }

    /// Message `i` as a [`Delivery`] of its own.
    pub fn delivery(&self, i: usize) -> Option<Delivery> {
        self.messages.delivery(i).map(|d| self.with_host(d))
    }

    fn with_host(&self, d: sealink_proto::Delivery) -> Delivery {
        Delivery {
            peer: d.peer,
            peer_name: self.peer_name.clone(),
            from: d.from,
            to: d.to,
            scope: d.scope,
            data: d.data,
            received_at: self.received_at,
        }
    }
}

/// Arrivals not yet taken, and how many messages of the first [`Node::recv`] already took.
#[derive(Default)]
pub(crate) struct Inbox {
    arrivals: VecDeque<Arrival>,
    front_taken: usize,
}

impl Inbox {
    fn is_empty(&self) -> bool {
        self.arrivals.is_empty()
    }

    /// The next message, one at a time.
    fn pop_one(&mut self) -> Option<Delivery> {
        let front = self.arrivals.front()?;
        // Only the message taken is built (not the ones before it in the arrival).
        let d = front.delivery(self.front_taken)?;
        self.front_taken += 1;
        if self.front_taken >= front.messages.len() {
            self.arrivals.pop_front();
            self.front_taken = 0;
        }
        Some(d)
    }

    /// The arrivals whole, minus what `pop_one` already took of the first.
    fn take_all(&mut self) -> impl Iterator<Item = Arrival> + '_ {
        if let Some(f) = self.arrivals.front_mut() {
            f.messages.advance(self.front_taken);
        }
        self.front_taken = 0;
        self.arrivals.drain(..)
    }
}

/// Counters of a node: the endpoint's own plus the driver's.
#[derive(Debug, Clone, Default)]
pub struct NodeStats {
    /// Endpoint counters (public-key operations, datagrams, messages, drops by reason).
    pub endpoint: Stats,
    /// Initiations refused by the flood limits before any public-key work: rate-limited, or
    /// answered with a cookie under load (both also counted by reason in `endpoint`).
    pub rate_limited: u64,
    /// Source addresses the flood limits track now (at most twice `max_sources`: one table for
    /// sources proven by a cookie, one for the others).
    pub limiter_sources: usize,
    /// Datagrams the endpoint produced for a peer whose address is not known yet.
    pub no_address: u64,
    /// `sendmsg` failures (the protocol retransmits).
    pub send_errors: u64,
    /// Send system calls and the datagrams they carried (GSO puts several in one).
    pub send_calls: u64,
    pub datagrams_out: u64,
    /// Receive batches and datagrams received in them.
    pub recv_batches: u64,
    pub datagrams_in: u64,
    /// Datagrams not sent because sealing them failed locally (never a network drop).
    pub seal_failures: u64,
}

impl NodeStats {
    /// Drops of every kind, limiter refusals included.
    pub fn total_drops(&self) -> u64 {
        self.endpoint.total_drops()
    }
}

/// Most undeliverable message ids remembered for [`Node::take_undeliverable`].
const UNDELIVERABLE_KEEP: usize = 1 << 16;

pub(crate) struct State {
    pub(crate) ep: Endpoint,
    pub(crate) addrs: Vec<Option<SocketAddr>>,
    pub(crate) stats: NodeStats,
    pub(crate) undeliverable: VecDeque<(PeerId, MessageId)>,
    /// Bumped by the I/O thread after each round, so waiters see progress.
    pub(crate) rounds: u64,
    /// When the I/O thread's current wait ends (it sleeps until the earliest timer).
    pub(crate) io_sleep_until: Time,
}

pub(crate) struct Shared {
    pub(crate) io: UdpIo,
    pub(crate) state: Mutex<State>,
    /// Signalled after each I/O round (waiters for acknowledgements).
    pub(crate) progress: Signal,
    pub(crate) deliveries: Mutex<Inbox>,
    pub(crate) delivered: Signal,
    /// Takes arrivals instead of `deliveries` when set.
    pub(crate) on_arrival: Option<Mutex<OnArrival>>,
    /// The application's sender run on the I/O thread ([`Node::set_source`]).
    pub(crate) source: Mutex<Option<Source>>,
    pub(crate) stop: AtomicBool,
    /// A wake-up is already pending: later senders skip the eventfd write.
    pub(crate) wake_pending: AtomicBool,
    pub(crate) clock: Clock,
    /// Configured peer names, by id.
    pub(crate) names: Mutex<Vec<Arc<str>>>,
    /// Engine worker threads (0: seal and open inline on the I/O thread).
    pub(crate) workers: usize,
    pub(crate) handoff: Handoff,
    /// What the transmit path counts (outside the state lock).
    pub(crate) tx_counts: TxCounts,
}

/// The send counters of [`NodeStats`], kept as atomics.
#[derive(Debug, Default)]
pub(crate) struct TxCounts {
    pub(crate) send_calls: AtomicU64,
    pub(crate) send_errors: AtomicU64,
    pub(crate) datagrams_out: AtomicU64,
    pub(crate) seal_failures: AtomicU64,
}

/// A sealink datagram-mode node: one UDP socket, one endpoint, one I/O thread.
pub struct Node {
    sh: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("local_addr", &self.sh.io.local_addr().ok())
            .finish_non_exhaustive()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves consistent-enough counters; keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Node {
    /// Binds the socket, builds the endpoint with the configured peers, starts the I/O thread.
    pub fn start(cfg: NodeConfig) -> Result<Node, NodeError> {
        let io = UdpIo::bind(cfg.listen, &cfg.udp)?;
        let io_cpu = cfg.io_cpu;
        let mut ep = Endpoint::new(cfg.config, cfg.host, cfg.directory)?;
        ep.set_handshake_limits(cfg.limiter);
        let mut addrs = Vec::new();
        let mut names = Vec::new();
        for p in &cfg.peers {
            let id = ep.add_peer(&p.name, p.public_key);
            if id.index() == addrs.len() {
                addrs.push(p.addr);
                names.push(Arc::from(p.name.as_str()));
            }
        }
        let sh = Arc::new(Shared {
            io,
            state: Mutex::new(State {
                ep,
                addrs,
                stats: NodeStats::default(),
                undeliverable: VecDeque::new(),
                rounds: 0,
                io_sleep_until: Time::ZERO,
            }),
            progress: Signal::default(),
            deliveries: Mutex::new(Inbox::default()),
            delivered: Signal::default(),
            on_arrival: cfg.on_arrival.map(Mutex::new),
            source: Mutex::new(None),
            stop: AtomicBool::new(false),
            wake_pending: AtomicBool::new(false),
            clock: Clock::new(),
            names: Mutex::new(names),
            workers: cfg.workers.unwrap_or_else(sealink_engine::default_workers),
            handoff: cfg.handoff,
            tx_counts: TxCounts::default(),
        });
        let sh2 = Arc::clone(&sh);
        // The thread pins itself and says whether it could before it starts its loop.
        let (pinned_tx, pinned) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("sealink-node".into())
            .spawn(move || {
                let pin = io_cpu.map_or(Ok(()), sealink_engine::pin_current_thread);
                let ok = pin.is_ok();
                let _ = pinned_tx.send(pin);
                if ok {
                    path::io_thread(sh2, cfg.gso);
                }
            })?;
        let mut node = Node {
            sh,
            thread: Some(thread),
        };
        match pinned.recv() {
            Ok(Ok(())) => Ok(node),
            Ok(Err(e)) => {
                node.stop_thread();
                Err(e.into())
            }
            Err(_) => {
                node.stop_thread();
                Err(NodeError::Stopped)
            }
        }
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.sh.io.local_addr()
    }

    /// This node's static X25519 public key (what peers trust it by).
    pub fn host_public(&self) -> [u8; 32] {
        *lock(&self.sh.state).ep.host_public()
    }

    /// Registers a local owner that may send.
    pub fn add_owner(&self, owner: LocalOwner) -> OwnerId {
        lock(&self.sh.state).ep.add_owner(owner)
    }

    /// Trusts another peer host (or returns the id it already has).
    pub fn add_peer(&self, p: PeerConfig) -> PeerId {
        let mut st = lock(&self.sh.state);
        let id = st.ep.add_peer(&p.name, p.public_key);
        if id.index() == st.addrs.len() {
            st.addrs.push(p.addr);
            lock(&self.sh.names).push(Arc::from(p.name.as_str()));
        } else if p.addr.is_some() {
            st.addrs[id.index()] = p.addr;
        }
        id
    }

    /// The id of the peer configured under `name`.
    pub fn peer_id(&self, name: &str) -> Option<PeerId> {
        let st = lock(&self.sh.state);
        st.ep.peers().find(|&p| st.ep.peer_name(p) == Some(name))
    }

    /// Where datagrams to `peer` go now (configured, or learned from its authenticated datagrams).
    pub fn peer_addr(&self, peer: PeerId) -> Option<SocketAddr> {
        lock(&self.sh.state)
            .addrs
            .get(peer.index())
            .copied()
            .flatten()
    }

    /// Installs `source` (replacing any other): the I/O thread calls it each round to queue
    /// messages itself, with no hand-off between threads (see [`Source`]). It may be installed
    /// at any time, typically once the channel is up.
    pub fn set_source(&self, source: Source) {
        *lock(&self.sh.source) = Some(source);
        self.sh.wake();
    }

    /// Calls the installed [`Source`] again soon, after it said [`crate::Supply::Idle`] and has
    /// something to send now.
    pub fn wake_source(&self) {
        self.sh.wake();
    }

    /// Queues `data` from local owner `from` to owner `to` (`None`: the peer host itself) on the
    /// channel to `peer`, opening it if needed. Thread-safe; wakes the I/O thread. Delivery is
    /// reliable and exactly once, or the id shows up in [`Node::take_undeliverable`].
    #[allow(clippy::too_many_arguments)]
    pub fn send<'a>(
        &self,
        peer: impl Into<PeerRef<'a>>,
        from: OwnerId,
        to: Option<&str>,
        data: &[u8],
        urgency: Urgency,
        scope: Scope,
    ) -> Result<MessageId, NodeError> {
        let q = self.send_batch(
            peer,
            from,
            to,
            &[Outgoing {
                data,
                urgency,
                scope,
            }],
        )?;
        Ok(q.first)
    }

    /// Queues several messages from `from` to `to` on the channel to `peer` under one lock, one
    /// clock read and at most one wake-up of the I/O thread: the per-message cost of a
    /// high-rate sender. Messages are queued in order until one is refused; if the first is
    /// refused the error is returned, otherwise the count queued (fewer than given when the
    /// channel pushed back or a later message is invalid: resubmit the rest to see why).
    pub fn send_batch<'a>(
        &self,
        peer: impl Into<PeerRef<'a>>,
        from: OwnerId,
        to: Option<&str>,
        msgs: &[Outgoing<'_>],
    ) -> Result<Queued, NodeError> {
        if self.sh.stop.load(Ordering::Relaxed) {
            return Err(NodeError::Stopped);
        }
        let (queued, wake) = {
            let mut st = lock(&self.sh.state);
            let p = resolve(&st, peer.into())?;
            let now = self.sh.clock.now();
            let (first, count) = st.ep.send_batch(now, p, from, to, msgs)?;
            if count == 0 {
                return Ok(Queued {
                    first: MessageId(0),
                    count: 0,
                });
            }
            let urgent = msgs[..count]
                .iter()
                .any(|m| matches!(m.urgency, Urgency::Urgent));
            // Wake the I/O thread only if these messages change its plan: something must leave
            // now, a handshake must start, or a deadline falls before the time it sleeps until.
            // Non-urgent messages that will wait anyway cost no system call and no context
            // switch (the per-message cost piggybacking exists to avoid).
            let wake = urgent
                || st.ep.flush_pending(p)
                || !st.ep.is_established(p, now)
                || st.ep.poll_timeout().is_none_or(|t| t < st.io_sleep_until);
            (Queued { first, count }, wake)
        };
        if wake {
            self.sh.wake();
        }
        Ok(queued)
    }

    /// Largest message [`Node::send`] accepts.
    pub fn max_message_len(&self) -> usize {
        lock(&self.sh.state).ep.max_message_len()
    }

    /// The next received message, waiting up to `timeout` (`None`: until one arrives or the node
    /// stops). A node with a receive handler ([`NodeConfig::on_arrival`]) queues nothing here.
    pub fn recv(&self, timeout: Option<Duration>) -> Option<Delivery> {
        let mut q = self.wait_deliveries(timeout)?;
        q.pop_one()
    }

    /// Moves every message received so far into `out`, first waiting up to `timeout` (`None`:
    /// until one arrives or the node stops) if there is none. Returns how many were added: one
    /// lock per batch instead of one per message.
    pub fn recv_batch(&self, out: &mut Vec<Delivery>, timeout: Option<Duration>) -> usize {
        let Some(mut q) = self.wait_deliveries(timeout) else {
            return 0;
        };
        let before = out.len();
        for a in q.take_all() {
            out.extend(a.deliveries());
        }
        out.len() - before
    }

    /// Moves everything received so far into `out` as [`Arrival`]s, first waiting up to
    /// `timeout` (`None`: until one arrives or the node stops) if there is nothing. Returns how
    /// many messages were added. The high-rate receive path: one lock per batch and no work
    /// per message at all (read them with [`Messages::iter`]).
    pub fn recv_arrivals(&self, out: &mut Vec<Arrival>, timeout: Option<Duration>) -> usize {
        let Some(mut q) = self.wait_deliveries(timeout) else {
            return 0;
        };
        let mut n = 0;
        for a in q.take_all() {
            n += a.messages.len();
            out.push(a);
        }
        n
    }

    /// The delivery queue, locked, once it holds something; `None` on timeout or stop.
    fn wait_deliveries(&self, timeout: Option<Duration>) -> Option<MutexGuard<'_, Inbox>> {
        let mut q = lock(&self.sh.deliveries);
        // The clock is read only if there is something to wait for.
        let mut deadline = None;
        loop {
            if !q.is_empty() {
                return Some(q);
            }
            if self.sh.stop.load(Ordering::Relaxed) {
                return None;
            }
            if let (None, Some(t)) = (deadline, timeout) {
                deadline = Some(Instant::now() + t);
            }
            q = match deadline {
                None => self.sh.delivered.wait(q),
                Some(d) => {
                    let left = d
                        .checked_duration_since(Instant::now())
                        .filter(|l| !l.is_zero())?;
                    self.sh.delivered.wait_timeout(q, left)
                }
            };
        }
    }

    /// Every message received so far, without waiting.
    pub fn drain(&self) -> Vec<Delivery> {
        let mut q = lock(&self.sh.deliveries);
        let mut out = Vec::new();
        for a in q.take_all() {
            out.extend(a.deliveries());
        }
        out
    }

    /// Waits until every message sent to `peer` has been acknowledged or given up on. Errors with
    /// [`NodeError::Undeliverable`] if any was given up on since the last call (their ids are
    /// consumed), with [`NodeError::Timeout`] if some are still pending after `timeout`.
    pub fn flush<'a>(
        &self,
        peer: impl Into<PeerRef<'a>>,
        timeout: Duration,
    ) -> Result<(), NodeError> {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.sh.state);
        let p = resolve(&st, peer.into())?;
        loop {
            if st.ep.pending_messages(p) == 0 {
                let before = st.undeliverable.len();
                st.undeliverable.retain(|(q, _)| *q != p);
                let lost = before - st.undeliverable.len();
                return if lost == 0 {
                    Ok(())
                } else {
                    Err(NodeError::Undeliverable(lost))
                };
            }
            st = self.wait_progress(st, deadline, timeout)?;
        }
    }

    /// Waits until the channel to `peer` has room for `count` more messages under the
    /// configured `max_queued_messages` (queued plus unacknowledged), so a sender that met
    /// back-pressure resumes as soon as acknowledgements free the room, rather than polling.
    /// Returns the room there is then, or [`NodeError::Timeout`] if there is still not enough
    /// after `timeout`.
    pub fn wait_room<'a>(
        &self,
        peer: impl Into<PeerRef<'a>>,
        count: usize,
        timeout: Duration,
    ) -> Result<usize, NodeError> {
        let mut st = lock(&self.sh.state);
        let p = resolve(&st, peer.into())?;
        let want = count.min(st.ep.config().max_queued_messages);
        let mut deadline = None;
        loop {
            let room = room(&st, p);
            if room >= want {
                return Ok(room);
            }
            let d = *deadline.get_or_insert_with(|| Instant::now() + timeout);
            st = self.wait_progress(st, d, timeout)?;
        }
    }

    /// Sleeps until the I/O thread's next round or `deadline`; an error once the node stopped
    /// or the deadline passed (`timeout` is what the caller was given, for the error).
    fn wait_progress<'g>(
        &self,
        st: MutexGuard<'g, State>,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<MutexGuard<'g, State>, NodeError> {
        if self.sh.stop.load(Ordering::Relaxed) {
            return Err(NodeError::Stopped);
        }
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|l| !l.is_zero())
            .ok_or(NodeError::Timeout(timeout))?;
        Ok(self.sh.progress.wait_timeout(st, left))
    }

    /// Messages sent to `peer` that are queued or not yet acknowledged.
    pub fn pending(&self, peer: PeerId) -> usize {
        lock(&self.sh.state).ep.pending_messages(peer)
    }

    /// Messages given up on (peer unreachable, owner refused) since the last call.
    pub fn take_undeliverable(&self) -> Vec<(PeerId, MessageId)> {
        lock(&self.sh.state).undeliverable.drain(..).collect()
    }

    /// True once a channel with `peer` is established.
    pub fn is_established(&self, peer: PeerId) -> bool {
        let st = lock(&self.sh.state);
        st.ep.is_established(peer, self.sh.clock.now())
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> NodeStats {
        let st = lock(&self.sh.state);
        let mut s = st.stats.clone();
        let c = &self.sh.tx_counts;
        s.send_calls = c.send_calls.load(Ordering::Relaxed);
        s.send_errors = c.send_errors.load(Ordering::Relaxed);
        s.datagrams_out = c.datagrams_out.load(Ordering::Relaxed);
        s.seal_failures = c.seal_failures.load(Ordering::Relaxed);
        s.endpoint = st.ep.stats().clone();
        s.rate_limited = s.endpoint.drops(DropReason::RateLimited)
            + s.endpoint.drops(DropReason::CookieRequired);
        s.limiter_sources = st.ep.handshake_guard().tracked_sources();
        s
    }

    /// A snapshot of one channel's counters.
    pub fn channel_stats(&self, peer: PeerId) -> Option<ChannelStats> {
        lock(&self.sh.state).ep.channel_stats(peer).cloned()
    }

    /// Configured peers, by id order, with their names.
    pub fn peers(&self) -> Vec<(PeerId, Arc<str>)> {
        let st = lock(&self.sh.state);
        let names = lock(&self.sh.names);
        st.ep.peers().zip(names.iter().cloned()).collect()
    }

    /// Stops the I/O thread (pending messages are abandoned) and waits for it.
    pub fn shutdown(mut self) {
        self.stop_thread();
    }

    fn stop_thread(&mut self) {
        self.sh.stop.store(true, Ordering::Relaxed);
        self.sh.io.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Through each mutex first: a waiter that saw no stop flag is asleep by then, and
        // counted (`Signal`).
        drop(lock(&self.sh.deliveries));
        self.sh.delivered.notify_all();
        drop(lock(&self.sh.state));
        self.sh.progress.notify_all();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

impl Shared {
    /// Hands received messages to the receive handler, or to [`Node::recv`] waiters.
    pub(crate) fn deliver(&self, events: &mut Vec<Arrival>) {
        if events.is_empty() {
            return;
        }
        let Some(h) = &self.on_arrival else {
            lock(&self.deliveries).arrivals.extend(events.drain(..));
            self.delivered.notify_all();
            return;
        };
        let handled = {
            let mut h = lock(h);
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                events.drain(..).for_each(|a| (h.0)(a));
            }))
        };
        if handled.is_err() {
            events.clear();
            self.fail("the receive handler panicked");
        }
    }

    /// The application's code run by the node failed, not the node's: stop as a shutdown
    /// would, so senders and waiters see `Stopped` instead of a node that silently went deaf.
    pub(crate) fn fail(&self, what: &str) {
        tracing::error!("{what}; the node stops");
        self.stop.store(true, Ordering::Relaxed);
        self.io.wake();
        drop(lock(&self.deliveries));
        self.delivered.notify_all();
        drop(lock(&self.state));
        self.progress.notify_all();
    }

    pub(crate) fn wake(&self) {
        if !self.wake_pending.swap(true, Ordering::AcqRel) {
            self.io.wake();
        }
    }
}

/// Messages the channel to `peer` takes before it pushes back (under `max_queued_messages`,
/// queued plus unacknowledged).
pub(crate) fn room(st: &State, peer: PeerId) -> usize {
    let max = st.ep.config().max_queued_messages;
    max.saturating_sub(st.ep.pending_messages(peer))
}

/// The id of `peer` among the configured peers.
pub(crate) fn resolve(st: &State, peer: PeerRef<'_>) -> Result<PeerId, NodeError> {
    match peer {
        PeerRef::Id(p) if p.index() < st.addrs.len() => Ok(p),
        PeerRef::Id(p) => Err(NodeError::UnknownPeer(format!("#{}", p.index()))),
        PeerRef::Name(n) => st
            .ep
            .peers()
            .find(|&p| st.ep.peer_name(p) == Some(n))
            .ok_or_else(|| NodeError::UnknownPeer(n.to_owned())),
    }
}

/// Moves the endpoint's events out: messages into `out`, given-up ids into the state.
pub(crate) fn drain_events(st: &mut State, names: &Mutex<Vec<Arc<str>>>, out: &mut Vec<Arrival>) {
    let at = Instant::now();
    let names = lock(names);
    while let Some(ev) = st.ep.poll_event() {
        match ev {
            Event::Messages(m) => {
                let peer_name = names
                    .get(m.peer.index())
                    .cloned()
                    .unwrap_or_else(|| Arc::from("?"));
                out.push(Arrival {
                    peer_name,
                    received_at: at,
                    messages: m,
                });
            }
            Event::Undeliverable { peer, id } => {
                if st.undeliverable.len() == UNDELIVERABLE_KEEP {
                    st.undeliverable.pop_front();
                }
                st.undeliverable.push_back((peer, id));
            }
            Event::HandshakeFailed { peer } => {
                tracing::info!(peer = peer.index(), "handshake with peer failed");
            }
            Event::ChannelUp { peer } => {
                tracing::debug!(peer = peer.index(), "channel up");
            }
            _ => {}
        }
    }
}
