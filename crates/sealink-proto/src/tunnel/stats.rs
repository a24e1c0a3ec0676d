//! What a tunnel counts: drops by reason, and each peer's counters and status.

use std::net::SocketAddr;
use std::time::Duration;

use crate::error::DropReason;
use crate::session::Session;
use crate::time::Time;

use super::Tunnel;
use super::ip::IpNet;

/// Why a packet or datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TunnelDrop {
    /// A datagram refused by the protocol core (malformed, forged, replayed, unknown index, ...).
    Proto(DropReason),
    /// An outgoing packet to an address outside every peer's allowed IPs.
    NoRoute,
    /// An outgoing link-local, multicast or broadcast packet outside every peer's allowed IPs
    /// ([`ip::is_link_scoped`](super::ip::is_link_scoped)): the kernel's own traffic on the interface (router
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
    /// A handshake message dropped unread: the driver's handshake queue was full
    /// ([`HandshakeQueue`](super::HandshakeQueue)).
    HandshakeQueueFull,
}

pub(super) const EXTRA_DROPS: [TunnelDrop; 9] = [
    TunnelDrop::NoRoute,
    TunnelDrop::LinkLocal,
    TunnelDrop::SourceNotAllowed,
    TunnelDrop::MalformedPacket,
    TunnelDrop::NoEndpoint,
    TunnelDrop::StagingFull,
    TunnelDrop::HandshakeTimeout,
    TunnelDrop::SealFailed,
    TunnelDrop::HandshakeQueueFull,
];

pub(super) const N_DROPS: usize = DropReason::ALL.len() + EXTRA_DROPS.len();

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
            TunnelDrop::HandshakeQueueFull => "handshake-queue-full",
        }
    }
    pub(super) fn index(self) -> usize {
        match self {
            TunnelDrop::Proto(r) => r.index(),
            other => {
                DropReason::ALL.len() + EXTRA_DROPS.iter().position(|d| *d == other).unwrap_or(0)
            }
        }
    }
    pub(super) fn all() -> impl Iterator<Item = TunnelDrop> {
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
    /// The current session agreed on lanes ([`TunnelConfig::lanes`](super::TunnelConfig::lanes)).
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

impl Tunnel {
    pub(super) fn count(&mut self, d: TunnelDrop) -> TunnelDrop {
        self.drops[d.index()] += 1;
        d
    }

    /// Counts `n` datagrams the driver could not seal (a [`SealJob::seal`](crate::session::SealJob::seal) error: a local
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
}
