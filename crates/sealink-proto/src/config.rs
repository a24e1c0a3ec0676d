//! Endpoint configuration: suites, scopes, piggybacking, timers and limits.

use std::time::Duration;

use sealink_crypto::SuiteId;

use crate::error::Error;
use crate::session::Limits;
use crate::wire::{HEADER_LEN, MAX_NAME_LEN, SIGNATURE_LEN};

/// Worst-case bytes of framing around one message in a datagram: its owner introduction,
/// its destination declaration and the header of the MSG_RUN it starts (type, seq, owner,
/// destination, a 2-byte count and its length; varints at their widest; a MSG frame's header
/// is 2 bytes shorter).
pub const PER_MESSAGE_FRAMING: usize = (1 + 8 + 1 + MAX_NAME_LEN + SIGNATURE_LEN)
    + (1 + 8 + 1 + MAX_NAME_LEN)
    + (1 + 8 + 8 + 8 + 2 + 8);

/// How long a message may wait in the piggyback queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    /// Sent at once, taking every queued message along.
    Urgent,
    /// Sent no later than this long after it was queued.
    Deadline(Duration),
    /// Sent no later than the endpoint's default timeout M after it was queued.
    Default,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Suite proposed when this endpoint initiates.
    pub suite: SuiteId,
    /// Suites accepted when a peer initiates.
    pub accept_suites: Vec<SuiteId>,
    /// Permit the legacy DES/3DES/MD5 suites (lab only; insecure).
    pub allow_insecure_legacy: bool,
    /// Permit scope "none" (no authentication at all; the lab's baseline only).
    pub insecure_lab_plaintext: bool,
    /// Largest datagram this endpoint builds, header and tag included.
    pub max_datagram: usize,
    /// Piggybacking: the default maximum delay M of a non-urgent message.
    pub default_timeout: Duration,
    /// Piggybacking: queued bytes (encoded) that trigger a flush; at most one datagram's payload.
    pub queue_limit: usize,
    /// Piggybacking switched off: every message leaves in its own datagram at once (the lab's
    /// Q=OFF level).
    pub piggyback: bool,
    /// Longest an acknowledgement waits to ride on data before going alone.
    pub ack_delay: Duration,
    /// Acknowledge at once after this many datagrams carrying messages...
    pub ack_every: u32,
    /// ...or this many messages (large datagrams carry hundreds).
    pub ack_every_messages: usize,
    /// Retransmission interval of a handshake initiation.
    pub handshake_timeout: Duration,
    /// Initiations sent before giving up on a peer (its queued messages become undeliverable).
    pub handshake_attempts: u32,
    /// When a session is replaced (a new handshake after a count of datagrams or an age) and
    /// when it is never sent on again (a counter is never reused): the one limits type the
    /// tunnel's config uses too, checked by [`Limits::validate`].
    pub limits: Limits,
    /// How long the previous session keeps opening datagrams after a rekey.
    pub keep_previous: Duration,
    /// RTT assumed before the first sample.
    pub initial_rtt: Duration,
    /// Lower bound of the retransmission timeout.
    pub min_rto: Duration,
    /// Transmissions of one message before it is reported undeliverable.
    pub max_transmissions: u32,
    /// Messages in flight per channel (and the receiver's window over sequence numbers).
    pub message_window: u64,
    /// Messages that may wait per channel before `send` reports back-pressure.
    pub max_queued_messages: usize,
}

impl Default for Config {
    fn default() -> Self {
        let max_datagram = 1400;
        Config {
            suite: SuiteId::Aes128Gcm,
            accept_suites: SuiteId::MODERN.to_vec(),
            allow_insecure_legacy: false,
            insecure_lab_plaintext: false,
            max_datagram,
            default_timeout: Duration::from_millis(10),
            queue_limit: max_datagram - HEADER_LEN - 16,
            piggyback: true,
            ack_delay: Duration::from_millis(5),
            ack_every: 8,
            ack_every_messages: 256,
            handshake_timeout: Duration::from_secs(1),
            handshake_attempts: 20,
            limits: Limits {
                rekey_after_messages: 1 << 48,
                rekey_after_time: Duration::from_secs(120),
                reject_after_messages: u64::MAX - (1 << 16),
                reject_after_time: Duration::from_secs(180),
            },
            keep_previous: Duration::from_secs(10),
            initial_rtt: Duration::from_millis(100),
            min_rto: Duration::from_millis(20),
            max_transmissions: 12,
            message_window: 4096,
            max_queued_messages: 1 << 16,
        }
    }
}

impl Config {
    /// Room for frames in one datagram.
    pub fn max_body(&self) -> usize {
        self.max_datagram - HEADER_LEN - self.suite_overhead()
    }

    fn suite_overhead(&self) -> usize {
        self.accept_suites
            .iter()
            .chain(std::iter::once(&self.suite))
            .map(|s| s.max_overhead())
            .max()
            .unwrap_or(16)
    }

    /// Largest user message a datagram can always carry, whatever framing rides with it.
    pub fn max_message_len(&self) -> usize {
        self.max_body().saturating_sub(PER_MESSAGE_FRAMING)
    }

    /// Checks bounds and the legacy opt-in.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: &str| Err(Error::Config(m.to_owned()));
        if !(512..=65_535).contains(&self.max_datagram) {
            return bad("max_datagram must be within 512..=65535");
        }
        if self.queue_limit == 0 || self.queue_limit > self.max_body() {
            return bad("queue_limit must be within 1..=one datagram's payload");
        }
        if self.accept_suites.is_empty() {
            return bad("accept_suites is empty");
        }
        if !self.allow_insecure_legacy
            && (self.suite.is_legacy() || self.accept_suites.iter().any(|s| s.is_legacy()))
        {
            return Err(Error::Crypto(sealink_crypto::CryptoError::LegacyRefused(
                self.suite.name(),
            )));
        }
        if self.message_window < 16 || self.message_window > 1 << 20 {
            return bad("message_window must be within 16..=2^20");
        }
        self.limits.validate()?;
        if self.max_transmissions == 0
            || self.handshake_attempts == 0
            || self.ack_every == 0
            || self.ack_every_messages == 0
        {
            return bad(
                "max_transmissions, handshake_attempts, ack_every and ack_every_messages must be positive",
            );
        }
        Ok(())
    }
}
