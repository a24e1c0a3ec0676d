//! Time and resource limits of stream mode's connections: both sides' timeouts, and the
//! receiver's bounds on connections and handshakes.

use std::time::Duration;

pub use sealink_proto::ratelimit::LimiterConfig;

/// How long either side waits for its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Setting a session up: connecting, the handshake, the hello and the ready, the stripes
    /// joining. On the receiver it bounds the whole time from accept to authentication, so a
    /// connection that trickles bytes cannot stay unauthenticated longer.
    pub setup: Duration,
    /// Longest a transfer may go without progress: the receiver gets no data on any stripe, or
    /// the sender cannot hand the receiver a single byte; also the sender's wait for the final
    /// confirmation (which includes the receiver's fsync).
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            setup: Duration::from_secs(10),
            idle: Duration::from_secs(60),
        }
    }
}

/// The receiver's bounds on what peers can make it hold. Each connection holds a thread; an
/// authenticated stripe also holds a receive buffer of 4 MiB or more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections held at once, authenticated or not. When full, the oldest unauthenticated
    /// one is closed to make room; with none, the new connection is closed.
    pub max_conns: usize,
    /// Connections held at once that have not authenticated yet (a stripe authenticates with
    /// its join token, a session with its hello record). When full, the oldest is closed.
    pub max_pending: usize,
    /// The same, per source IP address (at most `max_pending`): one source that floods
    /// only evicts its own connections. The default is `MAX_STRIPES` (64), so a sender's
    /// stripes joining in a burst do not evict each other.
    pub max_pending_per_source: usize,
    /// Handshake initiations, through the same limiter as the datagram modes.
    pub handshake: LimiterConfig,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_conns: 256,
            max_pending: 128,
            max_pending_per_source: 64,
            handshake: LimiterConfig::default(),
        }
    }
}
