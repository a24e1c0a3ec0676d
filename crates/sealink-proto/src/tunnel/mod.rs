//! Tunnel mode, sans-IO: IP packets carried to peers over sealed datagrams, in the manner of
//! WireGuard but built from sealink's own pieces (the Noise IK handshake under
//! [`TUNNEL_PROLOGUE`], the 16-byte data header, in-place seal/open and the RFC 6479 replay
//! window of [`crate::datapath`]).
//!
//! A driver feeds the core packets read from a TUN device ([`Tunnel::encapsulate`]) and
//! datagrams read from UDP ([`Tunnel::decapsulate`]), sends what [`Tunnel::poll_transmit`]
//! yields, and calls [`Tunnel::handle_timeout`] at [`Tunnel::poll_timeout`]. Time is an
//! argument; the core reads no clock and does no I/O.
//!
//! # Data body
//! The sealed body of a data datagram holds zero or more IP packets, each preceded by its length
//! as a big-endian u16 (length 0 is refused). An empty body is a keepalive (it confirms a new
//! session to its responder).
//!
//! # Piggybacking policy (paper 002's ADP piggybacking, applied to IP packets)
//! With [`PiggybackPolicy::enabled`], a packet of at most [`PiggybackPolicy::small`] bytes (a
//! TCP ACK, a DNS query) may join its peer's queue, which leaves as one datagram. When it leaves
//! depends on [`PiggybackPolicy::mode`]:
//! * [`PiggybackMode::Autocork`] (the default, after TCP autocorking): the queue waits only
//!   while a datagram for that peer is in flight, i.e. reserved by [`Tunnel::encapsulate_reserve`]
//!   and not yet reported sent with [`Tunnel::sent`]. When a driver ends a batch
//!   ([`Tunnel::end_batch`]) the queues of idle peers leave at once, and a busy peer's queue
//!   leaves when its last send completes. An idle link so adds no latency at all; under load,
//!   small packets ride with the next datagram. [`PiggybackPolicy::max_delay`] stays as a
//!   backstop for drivers that never call `end_batch`.
//! * [`PiggybackMode::Timer`] (the paper's explicit policy): the queue leaves when its first
//!   packet has waited [`PiggybackPolicy::max_delay`].
//!
//! In both modes the queue also leaves when it holds [`PiggybackPolicy::queue_limit`] bytes, and
//! any larger packet is never delayed: it flushes the queue ahead of itself (order is kept) and
//! leaves at once. A small packet marked urgent by its sender (DSCP EF, CS6 or CS7: voice and
//! network control) is treated as large.
//!
//! # Serial and parallel halves
//! Each per-packet step is split so that the cryptography can run on any core with no lock
//! held: [`Tunnel::encapsulate_reserve`] (serial: route, session, counter, piggyback queue)
//! returns a [`SealJob`] whose [`SealJob::seal`] runs anywhere; [`Tunnel::decapsulate_reserve`]
//! (serial: header, index, session, replay check) returns an [`DecapJob`] whose
//! [`DecapJob::open`] runs anywhere, and [`Tunnel::decapsulate_finish`] (serial, in order: replay
//! accept, session confirmation, framing, source check) completes it. [`Tunnel::encapsulate`]
//! and [`Tunnel::decapsulate`] are the two halves run back to back: the serial reference.
//!
//! # Cryptokey routing
//! An outgoing packet goes to the peer whose allowed IPs contain its destination (longest
//! prefix); none: dropped as [`TunnelDrop::NoRoute`] (as [`TunnelDrop::LinkLocal`] when the
//! packet is link-local, multicast or broadcast: the kernel's own traffic on the interface).
//! An incoming packet must come from an address routed to the very peer whose keys opened it,
//! or it is dropped as [`TunnelDrop::SourceNotAllowed`]. Every refused datagram or packet is
//! counted by reason.
//!
//! # Sessions
//! Each peer holds up to three sessions, as WireGuard does: `current` (sent on), `previous`
//! (still opened after a rekey) and `next` (a responder's session, not sent on until the
//! initiator's first datagram on it proves the initiator holds the keys). A handshake starts on
//! the first packet for a peer without a usable session, is retried every
//! [`TunnelConfig::handshake_timeout`], and is repeated on the next packet sent when the current
//! session has sealed `rekey_after_messages` ([`TunnelConfig::limits`]), or when it is older than
//! `rekey_after_time` and we initiated it (the responder waits until it is within
//! [`RESPONDER_REKEY_MARGIN`] of `reject_after_time`, so the two ends do not both start one).
//! Handshake initiations pass the [`HandshakeGuard`] (mac1, flood limits, and under load a
//! cookie reply unless mac2 proves the source address) before any public-key work; see
//! [`crate::handshake::cookie`].
//!
//! # Persistent keepalive
//! A peer with [`TunnelPeerConfig::persistent_keepalive`] (WireGuard's `PersistentKeepalive`, for NAT
//! mappings and stateful firewalls) gets a keepalive (a data datagram with an empty body) once
//! nothing has been sent to it for that long: data, keepalives and handshake messages all
//! count as sent; what is received does not, so a mapping that only outgoing traffic refreshes
//! stays open too. Without a usable session the keepalive starts a handshake instead (so the
//! first one goes out as soon as the timer first runs, as WireGuard does on `up`), and none is
//! due while a handshake is under way or while the peer's endpoint is unknown.

mod config;
mod handshake;
pub mod ip;
mod offpath;
mod reconfig;
mod recv;
mod send;
mod stats;
pub mod uapi;
mod wg;

pub use config::{PiggybackMode, PiggybackPolicy, TunnelConfig, TunnelPeerConfig, Wire};
pub use ip::{AllowedIps, IpNet, IpNetError, packet_addrs};
pub use offpath::{
    Begun, BuiltInit, HANDSHAKE_QUEUE, HandshakeQueue, InitJob, Initiator, Prepared, ReadInit,
    Responder, UNDER_LOAD_AFTER, Written,
};
pub use reconfig::{Applied, PeerChanges, PeerPlan, RERESOLVE_AFTER_ATTEMPTS};
pub use recv::{Decap, DecapJob, DecapReserve};
pub use send::{Encap, Reserve};
pub use stats::{PeerStats, PeerStatus, TunnelDrop};
pub use wg::padded_len as wg_padded_len;

pub use crate::handshake::TUNNEL_PROLOGUE;
pub use crate::session::SealJob;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use reconfig::check_peers;
use recv::handshake_done;
use stats::N_DROPS;

use crate::handshake::HostKey;
use crate::handshake::cookie::HandshakeGuard;
use crate::handshake::state::{Handshake, Keys};
use crate::session::{IndexTable, Limits, Session};
use crate::time::Time;
use crate::wire::HEADER_LEN;

/// On sealink's wire the responder of a session rekeys by time only this close to
/// REJECT_AFTER_TIME (165 s of 180): WireGuard's KEEPALIVE_TIMEOUT + REKEY_TIMEOUT, the margin
/// its initiator keeps for a flow only the responder sends on. Fifteen of sealink's one-second
/// retries fit in it.
pub const RESPONDER_REKEY_MARGIN: Duration =
    crate::wg::KEEPALIVE_TIMEOUT.saturating_add(crate::wg::REKEY_TIMEOUT);

/// Bytes a driver leaves in front of a packet handed to [`Tunnel::encapsulate`]: the data
/// header and the packet's length field.
pub const HEADROOM: usize = HEADER_LEN + LEN_FIELD;
/// Bytes a driver leaves after the packet: the AEAD tag.
pub const TAILROOM: usize = 16;
const LEN_FIELD: usize = 2;
/// The tunnel's data keys: their label in the key derivation; modern suites only.
const TUNNEL_KEYS: Keys<'static> = Keys {
    label: b"tunnel data",
    allow_legacy: false,
};
/// Largest IP packet a body can frame.
pub const MAX_PACKET: usize = u16::MAX as usize;

/// A peer's position in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerIndex(pub usize);

struct Peer {
    cfg: TunnelPeerConfig,
    endpoint: Option<SocketAddr>,
    current: Option<Session>,
    previous: Option<Session>,
    next: Option<Session>,
    /// Initiator and responder state, shared with the datagram channel.
    handshake: Handshake,
    last_handshake: Option<Time>,
    /// Packets waiting for a session.
    staged: VecDeque<Vec<u8>>,
    /// Framed small packets waiting for company (the piggyback queue).
    queue: Vec<u8>,
    /// Bodies of flushed queues, back to back, from `flushed_at` on: their datagrams are
    /// reserved and wait in the tunnel's `outgoing` for the driver's buffer. Swapped with `queue`
    /// at a flush (no copy) whenever it is empty, which it is unless a driver lets flushes
    /// pile up between polls.
    flushed: Vec<u8>,
    flushed_at: usize,
    queue_packets: u64,
    queued_since: Option<Time>,
    /// Datagrams reserved and not yet reported sent (autocork).
    in_flight: u64,
    /// When a datagram (data, keepalive or handshake) last left for this peer.
    last_sent: Option<Time>,
    /// WireGuard's passive keepalive (whitepaper §6.5): due at this time, set when data (not a
    /// keepalive) arrives and cleared by anything sent.
    passive_keepalive_due: Option<Time>,
    /// Since when data sent has gone unanswered (nothing authenticated received since): after
    /// KEEPALIVE_TIMEOUT + REKEY_TIMEOUT a new handshake starts (WireGuard's wire).
    unanswered_since: Option<Time>,
    /// The extra wait before the current initiation's retry ([`TunnelConfig::handshake_jitter`]).
    retry_jitter: Duration,
    /// WireGuard's wire: the initiator already started a handshake because the current
    /// session neared REJECT_AFTER_TIME while data arrived on it (once per session).
    last_minute_handshake: bool,
    /// The initiation under way offers lanes ([`TunnelConfig::lanes`]).
    offered_lanes: bool,
    /// An initiation offering lanes went unanswered and the next one, without, was answered:
    /// the peer is taken for one too old to know lanes, and our initiations stop offering them
    /// (until it offers them itself).
    no_lanes: bool,
    stats: PeerStats,
    /// The host name the configured endpoint was resolved from (see [`Tunnel::poll_resolve`]).
    endpoint_name: Option<String>,
    /// A re-resolution of `endpoint_name` was handed to the driver and not answered yet.
    resolving: bool,
    /// Removed by [`Tunnel::reconfigure`]: no key, route, index or timer leads here any more.
    /// The slot stays so that a [`PeerIndex`] held by a driver in flight never names another
    /// peer.
    removed: bool,
}

/// The tunnel core: peers, sessions, routing, piggyback queues and counters.
pub struct Tunnel {
    host: HostKey,
    cfg: TunnelConfig,
    peers: Vec<Peer>,
    by_key: HashMap<[u8; 32], usize>,
    indexes: IndexTable,
    routes: AllowedIps,
    guard: HandshakeGuard,
    /// Cookie replies to send (ahead of other transmits), at most
    /// [`MAX_PENDING_COOKIE_REPLIES`].
    cookie_replies: VecDeque<(SocketAddr, Vec<u8>)>,
    /// What leaves next, in order ([`Tunnel::poll_transmit_deferred`] writes each into the
    /// caller's buffer): handshake messages, and data datagrams whose bodies still lie where
    /// they were queued (a peer's `flushed` bytes, a staged packet).
    outgoing: VecDeque<send::Outgoing>,
    /// Peers with a non-empty piggyback queue (autocork's end-of-batch check).
    corked: Vec<usize>,
    /// A deadline was armed since [`Tunnel::take_timer_hint`] last looked: a piggyback queue
    /// started, or a handshake.
    hint_queue: bool,
    hint_handshake: bool,
    /// Peers whose endpoint name should be resolved again ([`Tunnel::poll_resolve`]).
    resolve_requests: VecDeque<usize>,
    drops: [u64; N_DROPS],
    /// SplitMix64 state for the retry jitter (not a secret: it only spreads retries in time).
    jitter_state: u64,
    /// Bumped by every change of the peer list ([`Tunnel::reconfigure`],
    /// [`Tunnel::apply_peer_plan`]): a [`PeerPlan`] made against another list is refused.
    peers_generation: u64,
    /// Initiations are built by the driver with no lock held ([`Tunnel::build_initiations_offpath`]):
    /// [`Tunnel::start_handshake`] only reserves them, here, for [`Tunnel::take_initiations`].
    offpath_inits: bool,
    initiations: Vec<offpath::InitJob>,
}

impl std::fmt::Debug for Tunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnel")
            .field("peers", &self.peers.len())
            .field("outgoing", &self.outgoing.len())
            .finish_non_exhaustive()
    }
}

impl Peer {
    fn new(cfg: TunnelPeerConfig) -> Self {
        Peer {
            handshake: Handshake::new(&cfg.public_key),
            endpoint: cfg.endpoint,
            cfg,
            current: None,
            previous: None,
            next: None,
            last_handshake: None,
            staged: VecDeque::new(),
            queue: Vec::new(),
            flushed: Vec::new(),
            flushed_at: 0,
            queue_packets: 0,
            queued_since: None,
            in_flight: 0,
            last_sent: None,
            passive_keepalive_due: None,
            unanswered_since: None,
            retry_jitter: Duration::ZERO,
            last_minute_handshake: false,
            offered_lanes: false,
            no_lanes: false,
            stats: PeerStats::default(),
            endpoint_name: None,
            resolving: false,
            removed: false,
        }
    }
    fn session(&self, local_index: u32) -> Option<&Session> {
        [&self.current, &self.previous, &self.next]
            .into_iter()
            .flatten()
            .find(|s| s.local_index == local_index)
    }
    fn session_mut(&mut self, local_index: u32) -> Option<&mut Session> {
        [&mut self.current, &mut self.previous, &mut self.next]
            .into_iter()
            .flatten()
            .find(|s| s.local_index == local_index)
    }
    /// Counts a datagram sent to this peer (it also restarts the keepalive interval).
    fn note_sent(&mut self, now: Time) {
        self.stats.tx_datagrams += 1;
        self.last_sent = Some(now);
        self.passive_keepalive_due = None;
    }
    /// When a persistent keepalive is next due: none while off, while a handshake is under way
    /// (its retransmissions run on their own timer) or while there is nowhere to send.
    fn keepalive_due(&self) -> Option<Time> {
        let every = self.cfg.persistent_keepalive?;
        if self.handshake.initiation.is_some() || self.endpoint.is_none() {
            return None;
        }
        Some(self.last_sent.map_or(Time::ZERO, |t| t + every))
    }
}

impl Tunnel {
    pub fn new(
        host: HostKey,
        cfg: TunnelConfig,
        peers: Vec<TunnelPeerConfig>,
    ) -> Result<Self, crate::Error> {
        cfg.validate()?;
        if cfg.wire == Wire::Sealink && peers.iter().any(|p| p.preshared_key.is_some()) {
            return Err(crate::Error::Config(
                "preshared keys belong to WireGuard's wire; sealink's handshake has none".into(),
            ));
        }
        let routes = check_peers(host.public(), &peers)?;
        let by_key = peers
            .iter()
            .enumerate()
            .map(|(i, p)| (p.public_key, i))
            .collect();
        let guard = HandshakeGuard::new(host.public(), cfg.limiter);
        let indexes = IndexTable::with_seed(cfg.index_seed);
        let cfg_seed = cfg.index_seed;
        Ok(Tunnel {
            host,
            peers: peers.into_iter().map(Peer::new).collect(),
            cfg,
            by_key,
            indexes,
            routes,
            guard,
            cookie_replies: VecDeque::new(),
            outgoing: VecDeque::new(),
            corked: Vec::new(),
            hint_queue: false,
            hint_handshake: false,
            resolve_requests: VecDeque::new(),
            drops: [0; N_DROPS],
            jitter_state: u64::from(cfg_seed) ^ 0x9E37_79B9_7F4A_7C15,
            peers_generation: 0,
            offpath_inits: false,
            initiations: Vec::new(),
        })
    }

    pub fn config(&self) -> &TunnelConfig {
        &self.cfg
    }

    fn free_session(&mut self, s: Option<Session>) {
        if let Some(s) = s {
            self.indexes.free(s.local_index);
        }
    }

    fn limits(&self) -> Limits {
        self.cfg.limits
    }

    fn sendable(&self, s: &Session, now: Time) -> bool {
        s.sendable(&self.limits(), now)
    }

    /// Whether peer `pi`'s current session can carry data, and whether it wants a rekey
    /// (`None`: no session).
    fn usable(&self, pi: usize, now: Time) -> Option<(bool, bool)> {
        self.peers[pi]
            .current
            .as_ref()
            .map(|s| (self.sendable(s, now), self.wants_rekey(s, now)))
    }

    fn wants_rekey(&self, s: &Session, now: Time) -> bool {
        match self.cfg.wire {
            Wire::Sealink => s.wants_rekey_one_sided(&self.limits(), now, RESPONDER_REKEY_MARGIN),
            Wire::WireGuard => s.wants_rekey_wg(&self.limits(), now),
        }
    }

    /// When [`Tunnel::handle_timeout`] should next run: a piggyback deadline, a handshake
    /// retransmission or a persistent keepalive.
    pub fn poll_timeout(&self) -> Option<Time> {
        let delay = self.cfg.piggyback.max_delay;
        let wg = self.cfg.wire == Wire::WireGuard;
        self.peers
            .iter()
            .flat_map(|p| {
                [
                    p.queued_since.map(|t| t + delay),
                    p.handshake
                        .initiation
                        .as_ref()
                        .map(|i| i.sent_at + self.cfg.handshake_timeout + p.retry_jitter),
                    p.keepalive_due(),
                    wg.then(|| p.wg_timer_due(self.cfg.limits.reject_after_time))
                        .flatten(),
                ]
            })
            .flatten()
            .min()
    }

    /// Flushes piggyback queues whose deadline passed, sends due keepalives, and retries or
    /// abandons handshakes.
    pub fn handle_timeout(&mut self, now: Time) {
        let delay = self.cfg.piggyback.max_delay;
        for pi in 0..self.peers.len() {
            if self.peers[pi]
                .queued_since
                .is_some_and(|t| t + delay <= now)
            {
                self.flush_queue(pi, now);
            }
            if self.peers[pi].keepalive_due().is_some_and(|t| t <= now) {
                self.send_keepalive(pi, now);
            }
            self.retry_handshake(pi, now);
            // After the retries: one abandoned there may make "data unanswered" due now.
            if self.cfg.wire == Wire::WireGuard {
                self.wg_timers(pi, now);
            }
        }
    }
}

#[cfg(test)]
mod tests;
