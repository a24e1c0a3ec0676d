//! A tunnel's configuration: the piggybacking policy, the tunnel's settings and each peer's.

use std::net::SocketAddr;
use std::time::Duration;

use sealink_crypto::SuiteId;

use crate::handshake::ratelimit::LimiterConfig;
use crate::session::Limits;
use crate::wire::HEADER_LEN;

use super::ip::IpNet;
use super::{HEADROOM, LEN_FIELD, MAX_PACKET, TAILROOM};

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
    /// MTU of the tunnel interface: the largest packet [`Tunnel::encapsulate`](super::Tunnel::encapsulate) accepts.
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
    /// Wall-clock time since the Unix epoch at [`Time::ZERO`](crate::Time::ZERO): a WireGuard initiation carries
    /// the wall-clock time (TAI64N) of `unix_at_zero + now`. Zero for drivers on
    /// [`crate::Clock`], whose times already count from the Unix epoch.
    pub unix_at_zero: Duration,
    /// Offer and accept lanes in handshakes (sealink's wire only): a peer that agrees is sent
    /// data datagrams numbered by the driver's lane ([`SealJob::seal_on_lane`](crate::session::SealJob::seal_on_lane)), which its
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
pub struct TunnelPeerConfig {
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

impl std::fmt::Debug for TunnelPeerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunnelPeerConfig")
            .field("name", &self.name)
            .field("public_key", &self.public_key)
            .field("endpoint", &self.endpoint)
            .field("allowed_ips", &self.allowed_ips)
            .field("persistent_keepalive", &self.persistent_keepalive)
            .field("preshared_key", &self.preshared_key.map(|_| "set"))
            .finish()
    }
}
