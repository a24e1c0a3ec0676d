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
//! (serial: header, index, session, replay check) returns an [`OpenJob`] whose
//! [`OpenJob::open`] runs anywhere, and [`Tunnel::decapsulate_finish`] (serial, in order: replay
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
//! [`TunnelConfig::handshake_timeout`], and is repeated when the current session is older than
//! `rekey_after_time` or has sealed `rekey_after_messages` ([`TunnelConfig::limits`]).
//! Handshake initiations pass the [`HandshakeGuard`] (mac1, flood limits, and under load a
//! cookie reply unless mac2 proves the source address) before any public-key work; see
//! [`crate::cookie`].
//!
//! # Persistent keepalive
//! A peer with [`PeerConfig::persistent_keepalive`] (WireGuard's `PersistentKeepalive`, for NAT
//! mappings and stateful firewalls) gets a keepalive (a data datagram with an empty body) once
//! nothing has been sent to it for that long: data, keepalives and handshake messages all
//! count as sent; what is received does not, so a mapping that only outgoing traffic refreshes
//! stays open too. Without a usable session the keepalive starts a handshake instead (so the
//! first one goes out as soon as the timer first runs, as WireGuard does on `up`), and none is
//! due while a handshake is under way or while the peer's endpoint is unknown.

pub mod ip;
mod reconfig;
pub mod uapi;
mod wg;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use sealink_crypto::{Scope, SuiteId};

use crate::cookie::{Admission, HandshakeGuard};
use crate::endpoint::MAX_PENDING_COOKIE_REPLIES;
use crate::error::DropReason;
pub use crate::handshake::TUNNEL_PROLOGUE;
use crate::handshake::{self, HostKey, INIT_FLAG_LANES, InitPayload};
use crate::lifecycle::{Handshake, InitiateError, Keys};
use crate::ratelimit::LimiterConfig;
pub use crate::session::SealJob;
use crate::session::{self, IndexTable, Limits, Session};
use crate::time::Time;
use crate::wire::{HEADER_LEN, Header, parse_header};

pub use ip::{AllowedIps, IpNet, IpNetError, packet_addrs};
use reconfig::check_peers;
pub use reconfig::{PeerChanges, RERESOLVE_AFTER_ATTEMPTS};
pub use wg::padded_len as wg_padded_len;

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

/// When a piggyback queue leaves (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PiggybackMode {
    /// Wait only while a datagram for the peer is in flight; never on a timer when idle.
    Autocork,
    /// Wait up to `max_delay` (paper 002's ADP policy).
    Timer,
}

/// When small packets ride together (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PiggybackPolicy {
    pub enabled: bool,
    pub mode: PiggybackMode,
    /// Packets of at most this many bytes may wait for company...
    pub small: usize,
    /// ...at most this long (in autocork mode: a backstop)...
    pub max_delay: Duration,
    /// ...or until this many bytes (packets plus their 2-byte length fields) are queued.
    pub queue_limit: usize,
}

impl Default for PiggybackPolicy {
    fn default() -> Self {
        PiggybackPolicy {
            enabled: true,
            mode: PiggybackMode::Autocork,
            small: 256,
            max_delay: Duration::from_micros(200),
            queue_limit: 1400,
        }
    }
}

/// Tunnel-wide settings.
#[derive(Debug, Clone)]
pub struct TunnelConfig {
    /// Suite proposed when initiating; any modern suite is accepted from an initiator.
    pub suite: SuiteId,
    /// MTU of the tunnel interface: the largest packet [`Tunnel::encapsulate`] accepts.
    pub mtu: usize,
    pub piggyback: PiggybackPolicy,
    /// Interval between retransmissions of a handshake initiation.
    pub handshake_timeout: Duration,
    /// Initiations sent before the packets waiting for that peer are dropped.
    pub handshake_attempts: u32,
    /// A random extra wait of up to this long before each handshake retry, drawn per
    /// initiation (WireGuard's REKEY_TIMEOUT jitter, 333 ms), so that peers that failed together
    /// do not retry together. Zero on sealink's wire.
    pub handshake_jitter: Duration,
    /// When a session is replaced, and past which age or count it is neither sent on nor
    /// opened (the channel's `Config` uses the same type).
    pub limits: Limits,
    /// Packets held per peer while its handshake is under way.
    pub staged_packets: usize,
    pub limiter: LimiterConfig,
    /// Seeds receiver index allocation (drivers pass a random value).
    pub index_seed: u32,
    /// The protocol on the wire: sealink's own, or WireGuard's (see the module documentation).
    pub wire: Wire,
    /// Wall-clock time since the Unix epoch at [`Time::ZERO`]: a WireGuard initiation carries
    /// the wall-clock time (TAI64N) of `unix_at_zero + now`. Zero for drivers on
    /// [`crate::Clock`], whose times already count from the Unix epoch.
    pub unix_at_zero: Duration,
    /// Offer and accept lanes in handshakes (sealink's wire only): a peer that agrees is sent
    /// data datagrams numbered by the driver's lane ([`SealJob::seal_on_lane`]), which its
    /// receive steering uses to spread one peer over several sockets. Initiations alternate
    /// with and without the offer until one is answered, so that a peer too old to know lanes
    /// (it refuses the offer) still answers the retry.
    pub lanes: bool,
}

/// The protocol a tunnel speaks on the wire. The core's routing, sessions, timers, roaming and
/// counters are the same for both; the handshake messages, the data header and the body differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wire {
    /// sealink's tunnel protocol (docs/PROTOCOL.md §12): length-framed bodies, piggybacking,
    /// any modern suite.
    #[default]
    Sealink,
    /// WireGuard's (docs/PROTOCOL.md §15): Noise_IKpsk2 with its identifier, message types 1-4,
    /// ChaCha20-Poly1305 on one IP packet per datagram padded to 16 bytes, no piggybacking.
    WireGuard,
}

impl Default for TunnelConfig {
    fn default() -> Self {
        TunnelConfig {
            suite: SuiteId::Aes128Gcm,
            mtu: 1420,
            piggyback: PiggybackPolicy::default(),
            handshake_timeout: Duration::from_secs(1),
            handshake_jitter: Duration::ZERO,
            handshake_attempts: 20,
            limits: Limits {
                rekey_after_time: Duration::from_secs(120),
                rekey_after_messages: 1 << 60,
                reject_after_time: Duration::from_secs(180),
                reject_after_messages: u64::MAX - (1 << 16),
            },
            staged_packets: 128,
            limiter: LimiterConfig::default(),
            index_seed: 0x5EA1_1CC5,
            wire: Wire::Sealink,
            unix_at_zero: Duration::ZERO,
            lanes: true,
        }
    }
}

impl TunnelConfig {
    /// WireGuard's settings (whitepaper §6.1): ChaCha20-Poly1305, an initiation retried every
    /// REKEY_TIMEOUT (5 s) until REKEY_ATTEMPT_TIME (90 s), rekey after 120 s or 2^60
    /// messages, nothing sent or opened after 180 s or 2^64 - 2^13 messages, no piggybacking.
    pub fn wireguard() -> Self {
        use crate::wg;
        TunnelConfig {
            suite: SuiteId::ChaCha20Poly1305,
            piggyback: PiggybackPolicy {
                enabled: false,
                ..PiggybackPolicy::default()
            },
            handshake_timeout: wg::REKEY_TIMEOUT,
            handshake_jitter: wg::REKEY_TIMEOUT_JITTER_MAX,
            handshake_attempts: (wg::REKEY_ATTEMPT_TIME.as_secs() / wg::REKEY_TIMEOUT.as_secs())
                as u32,
            limits: Limits {
                rekey_after_time: wg::REKEY_AFTER_TIME,
                rekey_after_messages: wg::REKEY_AFTER_MESSAGES,
                reject_after_time: wg::REJECT_AFTER_TIME,
                reject_after_messages: wg::REJECT_AFTER_MESSAGES,
            },
            wire: Wire::WireGuard,
            lanes: false,
            ..TunnelConfig::default()
        }
    }

    /// Bytes a driver leaves in front of each packet: the data header, and for sealink's wire
    /// the packet's length field ([`HEADROOM`], the largest).
    pub fn headroom(&self) -> usize {
        match self.wire {
            Wire::Sealink => HEADROOM,
            Wire::WireGuard => HEADER_LEN,
        }
    }

    /// Checks the bounds the core relies on.
    pub fn validate(&self) -> Result<(), crate::Error> {
        let bad = |m: &str| Err(crate::Error::Config(m.to_owned()));
        if self.suite.is_legacy() {
            return bad("tunnels use modern suites only");
        }
        if !(576..=MAX_PACKET - HEADROOM - TAILROOM).contains(&self.mtu) {
            return bad("mtu must be within 576..=65497");
        }
        let p = &self.piggyback;
        if p.enabled {
            if p.small == 0 || p.small + LEN_FIELD > p.queue_limit {
                return bad("piggyback: small must be positive and small + 2 <= queue_limit");
            }
            if p.queue_limit > self.mtu + LEN_FIELD {
                return bad("piggyback: queue_limit must be at most mtu + 2 (one datagram)");
            }
        }
        if self.handshake_attempts == 0 || self.handshake_timeout.is_zero() {
            return bad("handshake attempts and timeout must be positive");
        }
        if self.wire == Wire::WireGuard {
            if self.suite != SuiteId::ChaCha20Poly1305 {
                return bad("WireGuard's wire uses chacha20-poly1305 only");
            }
            if p.enabled {
                return bad("WireGuard's wire carries one packet per datagram: no piggybacking");
            }
        }
        self.limits.validate()
    }
}

/// One peer as configured. Its `Debug` leaves the preshared key out (configs get logged).
#[derive(Clone)]
pub struct PeerConfig {
    pub name: String,
    pub public_key: [u8; 32],
    /// Where to send until an authenticated datagram tells otherwise.
    pub endpoint: Option<SocketAddr>,
    pub allowed_ips: Vec<IpNet>,
    /// Send a keepalive when nothing was sent to the peer for this long (`None`: never); see
    /// the module documentation.
    pub persistent_keepalive: Option<Duration>,
    /// WireGuard's optional preshared key, mixed into the handshake ([`Wire::WireGuard`]
    /// only; `None` is WireGuard's 32 zero bytes).
    pub preshared_key: Option<[u8; 32]>,
}

impl std::fmt::Debug for PeerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerConfig")
            .field("name", &self.name)
            .field("public_key", &self.public_key)
            .field("endpoint", &self.endpoint)
            .field("allowed_ips", &self.allowed_ips)
            .field("persistent_keepalive", &self.persistent_keepalive)
            .field("preshared_key", &self.preshared_key.map(|_| "set"))
            .finish()
    }
}

/// A peer's position in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerIndex(pub usize);

/// Why a packet or datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TunnelDrop {
    /// A datagram refused by the protocol core (malformed, forged, replayed, unknown index, ...).
    Proto(DropReason),
    /// An outgoing packet to an address outside every peer's allowed IPs.
    NoRoute,
    /// An outgoing link-local, multicast or broadcast packet outside every peer's allowed IPs
    /// ([`ip::is_link_scoped`]): the kernel's own traffic on the interface (router
    /// solicitations, MLD reports), not a packet misrouted into the tunnel.
    LinkLocal,
    /// A packet from a peer with a source outside that peer's allowed IPs.
    SourceNotAllowed,
    /// Not a well-formed IPv4 or IPv6 packet (either direction), or larger than the MTU.
    MalformedPacket,
    /// The peer's endpoint is not known yet (no `endpoint` configured, nothing heard from it).
    NoEndpoint,
    /// Too many packets waiting for a handshake.
    StagingFull,
    /// Waiting packets dropped after the last handshake attempt went unanswered.
    HandshakeTimeout,
    /// A local failure to seal (a bug or a buffer too small), not something the network sent.
    SealFailed,
}

const EXTRA_DROPS: [TunnelDrop; 8] = [
    TunnelDrop::NoRoute,
    TunnelDrop::LinkLocal,
    TunnelDrop::SourceNotAllowed,
    TunnelDrop::MalformedPacket,
    TunnelDrop::NoEndpoint,
    TunnelDrop::StagingFull,
    TunnelDrop::HandshakeTimeout,
    TunnelDrop::SealFailed,
];
const N_DROPS: usize = DropReason::ALL.len() + EXTRA_DROPS.len();

impl TunnelDrop {
    pub fn name(self) -> &'static str {
        match self {
            TunnelDrop::Proto(r) => r.name(),
            TunnelDrop::NoRoute => "no-route",
            TunnelDrop::LinkLocal => "link-local",
            TunnelDrop::SourceNotAllowed => "source-not-allowed",
            TunnelDrop::MalformedPacket => "malformed-packet",
            TunnelDrop::NoEndpoint => "no-endpoint",
            TunnelDrop::StagingFull => "staging-full",
            TunnelDrop::HandshakeTimeout => "handshake-timeout",
            TunnelDrop::SealFailed => "seal-failed",
        }
    }
    fn index(self) -> usize {
        match self {
            TunnelDrop::Proto(r) => r.index(),
            other => {
                DropReason::ALL.len() + EXTRA_DROPS.iter().position(|d| *d == other).unwrap_or(0)
            }
        }
    }
    fn all() -> impl Iterator<Item = TunnelDrop> {
        DropReason::ALL
            .into_iter()
            .map(TunnelDrop::Proto)
            .chain(EXTRA_DROPS)
    }
}

impl std::fmt::Display for TunnelDrop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl From<DropReason> for TunnelDrop {
    fn from(r: DropReason) -> Self {
        TunnelDrop::Proto(r)
    }
}

/// Per-peer counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// IP packets and their bytes sent to / received from the peer.
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Datagrams (data and handshake) sent / accepted.
    pub tx_datagrams: u64,
    pub rx_datagrams: u64,
    /// Packets that left sharing a datagram with others (piggybacked).
    pub piggybacked: u64,
    pub handshakes_initiated: u64,
    pub handshakes_completed: u64,
    /// Persistent keepalives sent (each an empty data datagram).
    pub keepalives: u64,
}

/// What `show` prints about a peer (its `Debug` leaves the preshared key out).
#[derive(Clone)]
pub struct PeerStatus {
    pub name: String,
    pub public_key: [u8; 32],
    pub endpoint: Option<SocketAddr>,
    pub allowed_ips: Vec<IpNet>,
    pub last_handshake: Option<Time>,
    pub session_up: bool,
    pub persistent_keepalive: Option<Duration>,
    pub preshared_key: Option<[u8; 32]>,
    /// The current session agreed on lanes ([`TunnelConfig::lanes`]).
    pub lanes: bool,
    pub stats: PeerStats,
}

impl std::fmt::Debug for PeerStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerStatus")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .field("session_up", &self.session_up)
            .field("lanes", &self.lanes)
            .field("preshared_key", &self.preshared_key.map(|_| "set"))
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Outcome of [`Tunnel::encapsulate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encap {
    /// Sealed in place: send `buf[..len]` to `dest`, after anything [`Tunnel::poll_transmit`]
    /// now yields (queued small packets were flushed ahead of this one).
    Sealed {
        peer: PeerIndex,
        dest: SocketAddr,
        len: usize,
    },
    /// Copied into the core (piggyback queue, or waiting for a handshake).
    Queued,
    Dropped(TunnelDrop),
}

/// Outcome of [`Tunnel::encapsulate_reserve`]: the serial half of sending a packet.
#[derive(Debug, Clone)]
pub enum Reserve {
    /// Routed, counter taken, length field written: seal the buffer with `job` (on any thread,
    /// no lock held), send `buf[..len]` to `dest` after anything [`Tunnel::poll_transmit`] now
    /// yields, then report it with [`Tunnel::sent`].
    Seal {
        peer: PeerIndex,
        dest: SocketAddr,
        job: SealJob,
    },
    /// Copied into the core (piggyback queue, or waiting for a handshake).
    Queued,
    Dropped(TunnelDrop),
}

/// Outcome of [`Tunnel::decapsulate_reserve`].
#[derive(Debug, Clone)]
pub enum DecapReserve {
    /// A handshake message, fully handled; any answer is in [`Tunnel::poll_transmit`].
    Handshake(PeerIndex),
    /// A data datagram that passed the cheap checks: open it with the job (on any thread, no
    /// lock held), then hand the result to [`Tunnel::decapsulate_finish`].
    Open(OpenJob),
}

/// The parallel half of receiving one data datagram, with the peer it belongs to.
#[derive(Debug, Clone)]
pub struct OpenJob {
    peer: usize,
    job: session::OpenJob,
}

impl OpenJob {
    /// Authenticates and decrypts `buf` (the whole datagram) in place; returns the body's range.
    /// Touches no replay window: [`Tunnel::decapsulate_finish`] records the counter.
    pub fn open(&self, buf: &mut [u8]) -> Result<Range<usize>, DropReason> {
        self.job.open(buf)
    }
    pub fn peer(&self) -> PeerIndex {
        PeerIndex(self.peer)
    }
    pub fn counter(&self) -> u64 {
        self.job.counter()
    }
}

/// What an accepted datagram was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decap {
    /// A handshake message; any answer is in [`Tunnel::poll_transmit`].
    Handshake(PeerIndex),
    /// Data: the ranges of the IP packets to deliver were pushed to the caller's vector.
    Data(PeerIndex),
}

struct Peer {
    cfg: PeerConfig,
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
    /// Datagrams to send, in order: final bytes (handshakes), or a data datagram's header room
    /// and plaintext body with the tail room for its tag and the seal reserved for it.
    transmits: VecDeque<(SocketAddr, Vec<u8>, Option<SealJob>)>,
    spare: Vec<Vec<u8>>,
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
}

impl std::fmt::Debug for Tunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnel")
            .field("peers", &self.peers.len())
            .field("transmits", &self.transmits.len())
            .finish_non_exhaustive()
    }
}

impl Peer {
    fn new(cfg: PeerConfig) -> Self {
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
        peers: Vec<PeerConfig>,
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
            transmits: VecDeque::new(),
            spare: Vec::new(),
            corked: Vec::new(),
            hint_queue: false,
            hint_handshake: false,
            resolve_requests: VecDeque::new(),
            drops: [0; N_DROPS],
            jitter_state: u64::from(cfg_seed) ^ 0x9E37_79B9_7F4A_7C15,
        })
    }

    pub fn config(&self) -> &TunnelConfig {
        &self.cfg
    }

    fn count(&mut self, d: TunnelDrop) -> TunnelDrop {
        self.drops[d.index()] += 1;
        d
    }

    /// Counts `n` datagrams the driver could not seal (a [`SealJob::seal`] error: a local
    /// fault, counted as `seal-failed`, never as a network drop reason).
    pub fn seal_failed(&mut self, n: u64) {
        self.drops[TunnelDrop::SealFailed.index()] += n;
    }

    /// Drop counters by reason name, zero ones left out.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        TunnelDrop::all()
            .map(|d| (d.name(), self.drops[d.index()]))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// How many times `d` happened.
    pub fn drop_count(&self, d: TunnelDrop) -> u64 {
        self.drops[d.index()]
    }

    pub fn peer_status(&self, now: Time) -> Vec<PeerStatus> {
        self.peers
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.removed)
            .map(|(i, p)| PeerStatus {
                name: p.cfg.name.clone(),
                public_key: p.cfg.public_key,
                endpoint: p.endpoint,
                allowed_ips: self.routes.of_peer(i).collect(),
                last_handshake: p.last_handshake,
                session_up: p.current.as_ref().is_some_and(|s| self.sendable(s, now)),
                persistent_keepalive: p.cfg.persistent_keepalive,
                preshared_key: p.cfg.preshared_key,
                lanes: p.current.as_ref().is_some_and(Session::lanes),
                stats: p.stats,
            })
            .collect()
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
            Wire::Sealink => s.wants_rekey(&self.limits(), now),
            Wire::WireGuard => s.wants_rekey_wg(&self.limits(), now),
        }
    }

    /// The sealed body's length for one packet of `pkt_len` bytes: sealink's length field and
    /// the packet, or WireGuard's packet padded to a multiple of 16 bytes (never past the MTU).
    fn body_len(&self, pkt_len: usize) -> usize {
        match self.cfg.wire {
            Wire::Sealink => LEN_FIELD + pkt_len,
            Wire::WireGuard => wg::padded_len(pkt_len, self.cfg.mtu),
        }
    }

    fn take_spare(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }

    // ------------------------------------------------------------------ sending

    /// Routes and seals the IP packet at `buf[HEADROOM..HEADROOM + pkt_len]`; `buf` must extend
    /// [`TAILROOM`] bytes past it. Sealed in place when it can leave at once (see [`Encap`]).
    /// The serial reference: [`Tunnel::encapsulate_reserve`] and [`SealJob::seal`] back to back.
    /// The datagram counts as sent at once (no autocork wait behind it).
    pub fn encapsulate(&mut self, now: Time, buf: &mut [u8], pkt_len: usize) -> Encap {
        match self.encapsulate_reserve(now, buf, pkt_len) {
            Reserve::Seal { peer, dest, job } => {
                let r = job.seal(buf);
                self.sent(now, peer, 1);
                match r {
                    Ok(len) => Encap::Sealed { peer, dest, len },
                    Err(_) => Encap::Dropped(self.count(TunnelDrop::SealFailed)),
                }
            }
            Reserve::Queued => Encap::Queued,
            Reserve::Dropped(d) => Encap::Dropped(d),
        }
    }

    /// The serial half of [`Tunnel::encapsulate`]: routes the packet at
    /// `buf[HEADROOM..HEADROOM + pkt_len]`, queues it or takes the next counter of the peer's
    /// session and writes the length field. The caller seals with the returned [`SealJob`]
    /// (anywhere, no lock held), sends, and reports the send with [`Tunnel::sent`].
    pub fn encapsulate_reserve(&mut self, now: Time, buf: &mut [u8], pkt_len: usize) -> Reserve {
        self.encapsulate_reserve_with(now, buf, pkt_len, |_| {})
    }

    /// [`Tunnel::encapsulate_reserve`] for a packet the driver has not finished: `finish` runs
    /// on the packet's bytes before the core keeps a copy of it (staged for a handshake, or
    /// queued to ride along), and only then. A packet returned as [`Reserve::Seal`] is the
    /// caller's to finish before it seals it. The TUN reader uses this to leave a TCP
    /// segment's checksum to the worker that seals it (`sealink-tunnel`'s `tunread.rs`):
    /// routing and the checks here read only the IP header and the length.
    pub fn encapsulate_reserve_with(
        &mut self,
        now: Time,
        buf: &mut [u8],
        pkt_len: usize,
        finish: impl FnOnce(&mut [u8]),
    ) -> Reserve {
        let h = self.cfg.headroom();
        let Some(pkt) = buf.get(h..h + pkt_len) else {
            return Reserve::Dropped(self.count(TunnelDrop::MalformedPacket));
        };
        if pkt_len > self.cfg.mtu || buf.len() < HEADER_LEN + self.body_len(pkt_len) + TAILROOM {
            return Reserve::Dropped(self.count(TunnelDrop::MalformedPacket));
        }
        let Some((src, dst)) = packet_addrs(pkt) else {
            return Reserve::Dropped(self.count(TunnelDrop::MalformedPacket));
        };
        let Some(pi) = self.routes.lookup(dst) else {
            let why = if ip::is_link_scoped(src, dst) {
                TunnelDrop::LinkLocal
            } else {
                TunnelDrop::NoRoute
            };
            return Reserve::Dropped(self.count(why));
        };
        let usable = self.usable(pi, now);
        match usable {
            Some((true, rekey)) => {
                if rekey && self.peers[pi].handshake.initiation.is_none() {
                    self.start_handshake(pi, now, 1);
                }
            }
            _ => {
                // No session to send on: hold the packet and make sure a handshake is under way.
                let staged = &mut self.peers[pi].staged;
                if staged.len() >= self.cfg.staged_packets {
                    return Reserve::Dropped(self.count(TunnelDrop::StagingFull));
                }
                let mut copy = pkt.to_vec();
                finish(&mut copy);
                staged.push_back(copy);
                if self.peers[pi].handshake.initiation.is_none() {
                    self.start_handshake(pi, now, 1);
                }
                return Reserve::Queued;
            }
        }
        let pb = self.cfg.piggyback;
        if pb.enabled && pkt_len <= pb.small && !ip::is_urgent(&buf[h..h + pkt_len]) {
            // Small: joins the queue; leaves with company, at the queue limit, when the peer's
            // sends complete (autocork) or at the deadline.
            if self.peers[pi].queue.len() + LEN_FIELD + pkt_len > pb.queue_limit {
                self.flush_queue(pi, now);
            }
            let p = &mut self.peers[pi];
            if p.queue.is_empty() {
                self.corked.push(pi);
                self.hint_queue = true;
            }
            p.queue.extend_from_slice(&(pkt_len as u16).to_be_bytes());
            let at = p.queue.len();
            p.queue
                .extend_from_slice(&buf[HEADROOM..HEADROOM + pkt_len]);
            finish(&mut p.queue[at..]);
            p.queue_packets += 1;
            p.queued_since.get_or_insert(now);
            if p.queue.len() >= pb.queue_limit {
                self.flush_queue(pi, now);
            }
            return Reserve::Queued;
        }
        // Large (or piggybacking off): never waits; what is queued goes first, keeping order.
        self.flush_queue(pi, now);
        let Some(dest) = self.peers[pi].endpoint else {
            return Reserve::Dropped(self.count(TunnelDrop::NoEndpoint));
        };
        let body_len = self.body_len(pkt_len);
        match self.cfg.wire {
            Wire::Sealink => {
                buf[HEADER_LEN..HEADROOM].copy_from_slice(&(pkt_len as u16).to_be_bytes());
            }
            // WireGuard's zero padding (up to 15 bytes, within the MTU).
            Wire::WireGuard => buf[h + pkt_len..h + body_len].fill(0),
        }
        let Some(job) = self.reserve_on_current(pi, body_len) else {
            return Reserve::Dropped(self.count(TunnelDrop::SealFailed));
        };
        let p = &mut self.peers[pi];
        p.in_flight += 1;
        p.note_sent(now);
        p.unanswered_since.get_or_insert(now);
        let st = &mut p.stats;
        st.tx_packets += 1;
        st.tx_bytes += pkt_len as u64;
        Reserve::Seal {
            peer: PeerIndex(pi),
            dest,
            job,
        }
    }

    /// Reports that `n` datagrams reserved for `peer` were sent (or given up). In autocork mode
    /// the peer's piggyback queue leaves once nothing is in flight any more.
    pub fn sent(&mut self, now: Time, peer: PeerIndex, n: u64) {
        let Some(p) = self.peers.get_mut(peer.0) else {
            return;
        };
        p.in_flight = p.in_flight.saturating_sub(n);
        if p.in_flight == 0 && !p.queue.is_empty() && self.autocork() {
            self.flush_queue(peer.0, now);
        }
    }

    /// Whether a deadline was armed since the last call that a driver's timer, asleep until
    /// the [`Tunnel::poll_timeout`] it last saw, must wake up for: a handshake started, or a
    /// piggyback queue started and is still waiting (under autocork, [`Tunnel::end_batch`]
    /// usually sends it at once, and then no wake-up is needed). Clears the hint.
    pub fn take_timer_hint(&mut self) -> bool {
        let h = self.hint_handshake || (self.hint_queue && !self.corked.is_empty());
        self.hint_handshake = false;
        self.hint_queue = false;
        h
    }

    /// Ends a batch of packets from the TUN device: in autocork mode the piggyback queues of
    /// peers with nothing in flight leave now (an idle link adds no delay).
    pub fn end_batch(&mut self, now: Time) {
        if !self.autocork() {
            return;
        }
        let mut k = 0;
        while k < self.corked.len() {
            let pi = self.corked[k];
            if self.peers[pi].in_flight == 0 {
                // flush_queue removes pi from `corked`.
                self.flush_queue(pi, now);
            } else {
                k += 1;
            }
        }
    }

    fn autocork(&self) -> bool {
        self.cfg.piggyback.enabled && self.cfg.piggyback.mode == PiggybackMode::Autocork
    }

    /// Takes the next counter on the peer's current session: the serial step of sealing.
    fn reserve_on_current(&mut self, pi: usize, body_len: usize) -> Option<SealJob> {
        let s = self.peers[pi].current.as_mut()?;
        Some(s.reserve_seal(Scope::Encrypt, body_len))
    }

    /// Sends the piggyback queue as one datagram (through the transmit queue).
    fn flush_queue(&mut self, pi: usize, now: Time) {
        if self.peers[pi].queue.is_empty() {
            return;
        }
        if let Some(k) = self.corked.iter().position(|&c| c == pi) {
            self.corked.swap_remove(k);
        }
        let n = self.peers[pi].queue_packets;
        let body = std::mem::take(&mut self.peers[pi].queue);
        self.send_body(pi, now, &body, n);
        let p = &mut self.peers[pi];
        p.queue = body;
        p.queue.clear();
        p.queue_packets = 0;
        p.queued_since = None;
    }

    /// Seals a framed body (`packets` packets; 0 = keepalive) into a transmit.
    fn send_body(&mut self, pi: usize, now: Time, body: &[u8], packets: u64) {
        let usable = self.peers[pi]
            .current
            .as_ref()
            .is_some_and(|s| self.sendable(s, now));
        let Some(dest) = self.peers[pi].endpoint.filter(|_| usable) else {
            let d = self.count(TunnelDrop::NoEndpoint);
            self.drops[d.index()] += packets.saturating_sub(1);
            return;
        };
        // Reserved here (the counter is serial); sealed by whoever sends it, outside the lock
        // (`poll_transmit_deferred`).
        // sealink's body is framed already; WireGuard's is one packet (or none), padded here.
        let (sealed_len, framing) = match self.cfg.wire {
            Wire::Sealink => (body.len(), LEN_FIELD as u64 * packets),
            Wire::WireGuard => (wg::padded_len(body.len(), self.cfg.mtu), 0),
        };
        match self.reserve_on_current(pi, sealed_len) {
            Some(job) => {
                let mut out = self.take_spare();
                out.clear();
                out.resize(HEADER_LEN + sealed_len + TAILROOM, 0);
                out[HEADER_LEN..HEADER_LEN + body.len()].copy_from_slice(body);
                self.peers[pi].note_sent(now);
                if packets > 0 {
                    self.peers[pi].unanswered_since.get_or_insert(now);
                }
                let st = &mut self.peers[pi].stats;
                st.tx_packets += packets;
                st.tx_bytes += (body.len() as u64).saturating_sub(framing);
                if packets > 1 {
                    st.piggybacked += packets;
                }
                self.transmits.push_back((dest, out, Some(job)));
            }
            None => {
                // Every packet the datagram carried is lost to a local fault.
                self.drops[TunnelDrop::SealFailed.index()] += packets.max(1);
            }
        }
    }

    /// Sends the packets that waited for a session, one per datagram.
    fn release_staged(&mut self, pi: usize, now: Time) {
        let mut body = self.take_spare();
        while let Some(pkt) = self.peers[pi].staged.pop_front() {
            if self.cfg.wire == Wire::WireGuard {
                self.send_body(pi, now, &pkt, 1);
                continue;
            }
            body.clear();
            body.extend_from_slice(&(pkt.len() as u16).to_be_bytes());
            body.extend_from_slice(&pkt);
            self.send_body(pi, now, &body, 1);
        }
        self.spare.push(body);
    }

    fn start_handshake(&mut self, pi: usize, now: Time, attempt: u32) {
        self.hint_handshake = true;
        let Some(dest) = self.peers[pi].endpoint else {
            // Nowhere to send it; the packets that wait are dropped at the timeout.
            self.count(TunnelDrop::NoEndpoint);
            return;
        };
        // Odd attempts offer lanes, even ones do not: an older peer refuses the offer
        // silently, and answers the retry.
        let offer = self.cfg.wire == Wire::Sealink
            && self.cfg.lanes
            && !self.peers[pi].no_lanes
            && attempt % 2 == 1;
        let payload = InitPayload {
            suite: self.cfg.suite as u8,
            flags: if offer { INIT_FLAG_LANES } else { 0 },
            timestamp: 0,
            binding: [0; 32],
        };
        let unix = self.cfg.unix_at_zero + Duration::from_nanos(now.as_nanos());
        let jitter = self.next_jitter();
        let p = &mut self.peers[pi];
        let built = match self.cfg.wire {
            Wire::Sealink => p.handshake.initiate(
                &self.host,
                TUNNEL_PROLOGUE,
                &p.cfg.public_key,
                payload,
                &mut self.indexes,
                pi,
                now,
                attempt,
            ),
            Wire::WireGuard => p.handshake.initiate_wg(
                &self.host,
                &p.cfg.public_key,
                &p.cfg.preshared_key.unwrap_or(crate::wg::NO_PSK),
                &mut self.indexes,
                pi,
                now,
                crate::wg::whitened_nanos(unix),
                attempt,
            ),
        };
        match built {
            Ok(pkt) => {
                let pkt = pkt.to_vec();
                p.offered_lanes = offer;
                p.retry_jitter = jitter;
                p.stats.handshakes_initiated += 1;
                p.note_sent(now);
                self.transmits.push_back((dest, pkt, None));
            }
            Err(InitiateError::DegenerateKey) => {
                // A configuration fault no retry can fix (the configuration refuses such keys;
                // this is the core's own guard): give up at once, as the channel does.
                tracing::warn!(peer = %p.cfg.name, "peer's public key is a small-order point");
                self.give_up(pi);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot build tunnel handshake initiation");
            }
        }
    }

    /// A uniform draw from `0..=handshake_jitter` (SplitMix64), in whole milliseconds as
    /// WireGuard's implementations draw it; zero when the jitter is off.
    fn next_jitter(&mut self) -> Duration {
        let max = self.cfg.handshake_jitter.as_millis() as u64;
        if max == 0 {
            return Duration::ZERO;
        }
        self.jitter_state = self.jitter_state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.jitter_state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Duration::from_millis(z % (max + 1))
    }

    /// The handshake with peer `pi` failed for good: the packets that waited are dropped.
    fn give_up(&mut self, pi: usize) {
        self.peers[pi].handshake.abandon(&mut self.indexes);
        let n = self.peers[pi].staged.len() as u64;
        self.peers[pi].staged.clear();
        self.drops[TunnelDrop::HandshakeTimeout.index()] += n;
    }

    /// Next datagram to send (handshakes, flushed piggyback queues, staged packets): copied into
    /// `out`, which should hold [`TunnelConfig::mtu`] + [`HEADROOM`] + [`TAILROOM`] bytes; one
    /// that does not fit is dropped.
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> Option<(SocketAddr, usize)> {
        loop {
            let (dest, n, job) = self.poll_transmit_deferred(out)?;
            let Some(job) = job else {
                return Some((dest, n));
            };
            match job.seal(&mut out[..n]) {
                Ok(len) => return Some((dest, len)),
                Err(_) => {
                    self.seal_failed(1);
                }
            }
        }
    }

    /// [`Tunnel::poll_transmit`] without the seal, the datagram mode's contract: the next datagram
    /// is copied into `out[..n]` and, for a data datagram, comes with the [`SealJob`] reserved for
    /// it, which the caller runs on `out[..n]` (anywhere, no lock held) for the final length; a
    /// handshake or cookie reply comes final (`None`). A seal that fails is the caller's to
    /// report ([`Tunnel::seal_failed`]).
    pub fn poll_transmit_deferred(
        &mut self,
        out: &mut [u8],
    ) -> Option<(SocketAddr, usize, Option<SealJob>)> {
        if let Some((dest, reply)) = self.cookie_replies.pop_front() {
            if let Some(o) = out.get_mut(..reply.len()) {
                o.copy_from_slice(&reply);
                return Some((dest, reply.len(), None));
            }
        }
        loop {
            let (dest, d, job) = self.transmits.pop_front()?;
            let n = d.len();
            let fits = out.len() >= n;
            if fits {
                out[..n].copy_from_slice(&d);
            }
            self.spare.push(d);
            if fits {
                return Some((dest, n, job));
            }
            tracing::warn!(len = n, "transmit buffer too small; datagram dropped");
            if job.is_some() {
                self.seal_failed(1);
            }
        }
    }

    /// Whether [`Tunnel::poll_transmit`] has something.
    pub fn has_transmit(&self) -> bool {
        !self.transmits.is_empty() || !self.cookie_replies.is_empty()
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

    /// Retries or abandons peer `pi`'s handshake if its retransmission is due.
    fn retry_handshake(&mut self, pi: usize, now: Time) {
        let due = self.peers[pi]
            .handshake
            .initiation
            .as_ref()
            .filter(|i| i.sent_at + self.cfg.handshake_timeout + self.peers[pi].retry_jitter <= now)
            .map(|i| i.attempts);
        let Some(attempts) = due else { return };
        let fresh = self.peers[pi]
            .current
            .as_ref()
            .is_some_and(|s| self.sendable(s, now) && !self.wants_rekey(s, now));
        if fresh && self.peers[pi].staged.is_empty() {
            // The peer's own handshake gave us a session meanwhile: stop asking.
            self.peers[pi].handshake.abandon(&mut self.indexes);
        } else if attempts >= self.cfg.handshake_attempts {
            self.give_up(pi);
        } else {
            self.start_handshake(pi, now, attempts + 1);
            self.want_resolve(pi, attempts + 1);
        }
    }

    /// A persistent keepalive: an empty body on the current session, or a handshake where
    /// there is none to send on (or it wants a rekey).
    fn send_keepalive(&mut self, pi: usize, now: Time) {
        // Counts as an attempt whatever happens below, so a failure cannot make it due again
        // at once (the timer would spin).
        self.peers[pi].last_sent = Some(now);
        let usable = self.usable(pi, now);
        match usable {
            Some((true, rekey)) => {
                let before = self.peers[pi].stats.tx_datagrams;
                self.send_body(pi, now, &[], 0);
                if self.peers[pi].stats.tx_datagrams > before {
                    self.peers[pi].stats.keepalives += 1;
                }
                if rekey {
                    self.start_handshake(pi, now, 1);
                }
            }
            _ => self.start_handshake(pi, now, 1),
        }
    }

    // ---------------------------------------------------------------- receiving

    /// Authenticates and opens a datagram from `source` in place. For data, the ranges (in
    /// `buf`) of the IP packets to deliver are pushed to `packets` (cleared first). Every
    /// refusal is counted and returned; nothing from the network can make this panic. The serial
    /// reference: [`Tunnel::decapsulate_reserve`], [`OpenJob::open`] and
    /// [`Tunnel::decapsulate_finish`] back to back.
    pub fn decapsulate(
        &mut self,
        now: Time,
        source: SocketAddr,
        buf: &mut [u8],
        packets: &mut Vec<Range<usize>>,
    ) -> Result<Decap, TunnelDrop> {
        packets.clear();
        match self.decapsulate_reserve(now, source, buf)? {
            DecapReserve::Handshake(p) => Ok(Decap::Handshake(p)),
            DecapReserve::Open(job) => {
                let opened = job.open(buf);
                self.decapsulate_finish(now, source, &job, opened, buf, packets)
            }
        }
    }

    /// The serial first half of receiving: parses the header and handles handshakes whole; for
    /// data, finds the session and checks scope, age and the replay window (without recording
    /// the counter), and returns the [`OpenJob`]. Every refusal is counted.
    pub fn decapsulate_reserve(
        &mut self,
        now: Time,
        source: SocketAddr,
        buf: &[u8],
    ) -> Result<DecapReserve, TunnelDrop> {
        if self.cfg.wire == Wire::WireGuard {
            let r = self.wg_decapsulate_reserve(now, source, buf);
            return r.map_err(|d| self.count(d));
        }
        let r = match parse_header(buf) {
            Ok(Header::Init { .. }) => self.on_init(now, source, buf).map(handshake_done),
            Ok(Header::Response { receiver, sender }) => self
                .on_response(now, source, receiver, sender, buf)
                .map(handshake_done),
            Ok(Header::CookieReply { receiver }) => {
                self.on_cookie(now, receiver, buf).map(handshake_done)
            }
            Ok(Header::Data {
                scope,
                receiver,
                counter,
            }) => self.reserve_data(now, scope, receiver, counter),
            Err(e) => Err(e.into()),
        };
        r.map_err(|d| self.count(d))
    }

    fn reserve_data(
        &mut self,
        now: Time,
        scope: Scope,
        receiver: u32,
        counter: u64,
    ) -> Result<DecapReserve, TunnelDrop> {
        if scope != Scope::Encrypt {
            return Err(DropReason::ScopeRefused.into());
        }
        let pi = self
            .indexes
            .owner(receiver)
            .ok_or(DropReason::UnknownIndex)?;
        let session = self.peers[pi]
            .session(receiver)
            // The index belongs to an initiation, not a session.
            .ok_or(DropReason::UnknownIndex)?;
        if session.expired(&self.limits(), now) {
            return Err(DropReason::SessionExpired.into());
        }
        let job = session.reserve_open(Scope::Encrypt, counter, false)?;
        Ok(DecapReserve::Open(OpenJob { peer: pi, job }))
    }

    /// The serial second half of receiving a data datagram, in the order the datagrams arrived
    /// for that session: takes the result of [`OpenJob::open`] on `buf`, records the counter in
    /// the replay window (refusing a duplicate that was opened in parallel), confirms a new
    /// session, learns the endpoint, and pushes the ranges of the IP packets to deliver onto
    /// `packets` (appended, not cleared). Every refusal is counted.
    pub fn decapsulate_finish(
        &mut self,
        now: Time,
        source: SocketAddr,
        job: &OpenJob,
        opened: Result<Range<usize>, DropReason>,
        buf: &[u8],
        packets: &mut Vec<Range<usize>>,
    ) -> Result<Decap, TunnelDrop> {
        let r = opened.map_err(TunnelDrop::from).and_then(|body| {
            self.accept_data(now, source, job)?;
            match self.cfg.wire {
                Wire::Sealink => self.push_packets(job.peer, body, buf, packets),
                Wire::WireGuard => {
                    let r = self.wg_push_packet(now, job.peer, body, buf, packets);
                    self.wg_keep_fresh_receiving(job.peer, now);
                    r
                }
            }
        });
        r.map_err(|d| self.count(d))
    }

    /// Records an opened datagram's counter in its session's replay window, confirms the
    /// session (and promotes `next`), and learns the peer's endpoint.
    fn accept_data(
        &mut self,
        now: Time,
        source: SocketAddr,
        job: &OpenJob,
    ) -> Result<(), TunnelDrop> {
        let pi = job.peer;
        let p = self.peers.get_mut(pi).ok_or(DropReason::UnknownIndex)?;
        // The session may have been retired while the datagram was being opened.
        let local_index = job.job.local_index();
        let session = p.session_mut(local_index).ok_or(DropReason::UnknownIndex)?;
        session.accept(job.job.counter())?;
        session.confirmed_at.get_or_insert(now);
        let is_next = p
            .next
            .as_ref()
            .is_some_and(|s| s.local_index == local_index);
        p.endpoint = Some(source);
        p.stats.rx_datagrams += 1;
        p.unanswered_since = None;
        if is_next {
            // The initiator used the new keys: it holds them, so they become ours to send on.
            p.last_minute_handshake = false;
            let old_prev = p.previous.take();
            p.previous = p.current.take();
            p.current = p.next.take();
            self.free_session(old_prev);
            if !self.peers[pi].staged.is_empty() {
                self.release_staged(pi, now);
            }
        }
        Ok(())
    }

    /// Pushes the IP packets framed in `buf[body]` (u16 length, packet) onto `packets`; each
    /// packet's source must route back to peer `pi`.
    fn push_packets(
        &mut self,
        pi: usize,
        body: Range<usize>,
        buf: &[u8],
        packets: &mut Vec<Range<usize>>,
    ) -> Result<Decap, TunnelDrop> {
        let first = packets.len();
        let mut at = body.start;
        let mut bad_source = 0;
        let mut malformed = 0;
        while at < body.end {
            let len = match buf.get(at..at + LEN_FIELD) {
                Some(b) => usize::from(u16::from_be_bytes([b[0], b[1]])),
                None => {
                    packets.truncate(first);
                    return Err(DropReason::MalformedFrame.into());
                }
            };
            let start = at + LEN_FIELD;
            let end = start + len;
            if len == 0 || end > body.end {
                packets.truncate(first);
                return Err(DropReason::MalformedFrame.into());
            }
            match packet_addrs(&buf[start..end]) {
                None => malformed += 1,
                Some((src, _)) if self.routes.lookup(src) != Some(pi) => bad_source += 1,
                Some(_) => packets.push(start..end),
            }
            at = end;
        }
        self.drops[TunnelDrop::SourceNotAllowed.index()] += bad_source;
        self.drops[TunnelDrop::MalformedPacket.index()] += malformed;
        let st = &mut self.peers[pi].stats;
        st.rx_packets += (packets.len() - first) as u64;
        st.rx_bytes += packets[first..].iter().map(|r| r.len() as u64).sum::<u64>();
        Ok(Decap::Data(PeerIndex(pi)))
    }

    fn on_init(&mut self, now: Time, source: SocketAddr, buf: &[u8]) -> Result<Decap, TunnelDrop> {
        if buf.len() != handshake::INIT_LEN {
            return Err(DropReason::MalformedHeader.into());
        }
        // Before any public-key work: mac1, then the limits (and mac2 under load).
        let room = self.cookie_replies.len() < MAX_PENDING_COOKIE_REPLIES;
        let admitted = self.guard.admit(now, Some(source), buf, room);
        self.admitted(source, admitted, |r| r.to_vec())?;
        let (hs, remote, payload) = handshake::read_init(
            &self.host,
            TUNNEL_PROLOGUE,
            &buf[..handshake::NOISE_INIT_LEN],
        )?;
        let sender = match parse_header(buf)? {
            Header::Init { sender } => sender,
            _ => return Err(DropReason::MalformedHeader.into()),
        };
        let Some(&pi) = self.by_key.get(&remote) else {
            self.guard.untrusted(now, Some(source), &remote);
            return Err(DropReason::UnknownHost.into());
        };
        // Authentic; a fresh one's timestamp is recorded so a replay is refused whatever
        // happens next.
        let p = &mut self.peers[pi];
        let suite = p
            .handshake
            .check_init(&payload, |s| SuiteId::MODERN.contains(&s))?;
        let offered = payload.flags & INIT_FLAG_LANES != 0;
        if offered {
            // It knows lanes after all (upgraded, or our offer was merely lost).
            p.no_lanes = false;
        }
        let answered = p.handshake.respond(
            hs,
            &mut self.indexes,
            pi,
            sender,
            suite,
            false,
            offered && self.cfg.lanes,
            TUNNEL_KEYS,
            now,
        )?;
        let pkt = answered.packet;
        let old = self.peers[pi].next.replace(answered.session);
        self.free_session(old);
        let p = &mut self.peers[pi];
        p.endpoint = Some(source);
        p.last_handshake = Some(now);
        p.stats.handshakes_completed += 1;
        p.stats.rx_datagrams += 1;
        p.note_sent(now);
        self.transmits.push_back((source, pkt, None));
        Ok(Decap::Handshake(PeerIndex(pi)))
    }

    fn on_response(
        &mut self,
        now: Time,
        source: SocketAddr,
        receiver: u32,
        sender: u32,
        buf: &[u8],
    ) -> Result<Decap, TunnelDrop> {
        let pi = self
            .indexes
            .owner(receiver)
            .ok_or(DropReason::UnexpectedResponse)?;
        let hsk = &mut self.peers[pi].handshake;
        let init = match &mut hsk.initiation {
            Some(i) if i.local_index == receiver => i,
            _ => return Err(DropReason::UnexpectedResponse.into()),
        };
        let attempts = init.attempts;
        let done = Handshake::complete(
            &mut hsk.last_ts_accepted,
            init,
            buf,
            self.cfg.suite,
            TUNNEL_KEYS,
            sender,
            now,
        )?;
        let p = &mut self.peers[pi];
        let mut session = done.session;
        session.set_lanes(p.offered_lanes && done.lanes);
        if !p.offered_lanes && attempts > 1 && self.cfg.lanes && self.cfg.wire == Wire::Sealink {
            // The attempt before this one offered lanes and was not answered.
            p.no_lanes = true;
        }
        self.install_initiated(now, source, pi, session);
        Ok(Decap::Handshake(PeerIndex(pi)))
    }

    /// Our initiation to peer `pi` was answered with `session`: it becomes current (the old
    /// one previous), and what waited leaves on it (else a keepalive confirms it).
    fn install_initiated(&mut self, now: Time, source: SocketAddr, pi: usize, session: Session) {
        let p = &mut self.peers[pi];
        // Its index is now the session's.
        p.handshake.initiation = None;
        p.unanswered_since = None;
        p.last_minute_handshake = false;
        let old_prev = p.previous.take();
        p.previous = p.current.replace(session);
        p.endpoint = Some(source);
        p.last_handshake = Some(now);
        p.stats.handshakes_completed += 1;
        p.stats.rx_datagrams += 1;
        self.free_session(old_prev);
        if self.peers[pi].staged.is_empty() {
            // Nothing to send: a keepalive confirms the session to the responder now.
            self.send_body(pi, now, &[], 0);
        } else {
            self.release_staged(pi, now);
        }
    }
}

impl Tunnel {
    /// A cookie reply to our initiation `receiver`: keep the cookie and, once per initiation,
    /// send the same initiation again with mac2. It proves nothing about the peer's endpoint,
    /// which stays as it was.
    fn on_cookie(&mut self, now: Time, receiver: u32, buf: &[u8]) -> Result<Decap, TunnelDrop> {
        let pi = self
            .indexes
            .owner(receiver)
            .ok_or(DropReason::BadCookieReply)?;
        let resend = self.peers[pi]
            .handshake
            .accept_cookie(now, receiver, buf)?
            .map(<[u8]>::to_vec);
        self.resend_initiation(pi, now, resend);
        Ok(Decap::Handshake(PeerIndex(pi)))
    }

    /// Acts on the guard's decision about a handshake message from `source` (either wire): a
    /// cookie reply (its bytes from `bytes`) is queued and the message refused as
    /// `cookie-required`.
    fn admitted<R>(
        &mut self,
        source: SocketAddr,
        a: Admission<R>,
        bytes: impl FnOnce(R) -> Vec<u8>,
    ) -> Result<(), TunnelDrop> {
        match a {
            Admission::Process => Ok(()),
            Admission::Drop(r) => Err(r.into()),
            Admission::Cookie(reply) => {
                self.cookie_replies.push_back((source, bytes(reply)));
                Err(DropReason::CookieRequired.into())
            }
        }
    }

    /// Sends our initiation again (with mac2 now) after a cookie reply, if there is one to send.
    fn resend_initiation(&mut self, pi: usize, now: Time, resend: Option<Vec<u8>>) {
        let p = &mut self.peers[pi];
        if let (Some(resend), Some(dest)) = (resend, p.endpoint) {
            p.note_sent(now);
            self.transmits.push_back((dest, resend, None));
        }
    }
}

fn handshake_done(d: Decap) -> DecapReserve {
    match d {
        Decap::Handshake(p) | Decap::Data(p) => DecapReserve::Handshake(p),
    }
}

#[cfg(test)]
mod tests;
