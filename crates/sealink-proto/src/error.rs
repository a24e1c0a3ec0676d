//! Typed errors: [`Error`] for what a local caller did wrong, [`DropReason`] for every way a
//! datagram from the network is refused. Drops are counted, never panic, and tell the peer nothing.

use sealink_crypto::CryptoError;

/// Errors returned to the local caller of the endpoint API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("message of {len} bytes exceeds the limit of {max} bytes for this channel")]
    MessageTooLarge { len: usize, max: usize },
    #[error("unknown peer")]
    UnknownPeer,
    #[error("unknown local owner")]
    UnknownOwner,
    #[error("invalid owner name {0:?}: 1 to 64 bytes of [A-Za-z0-9._@+-]")]
    InvalidName(String),
    #[error("scope 'none' is refused unless the endpoint opts in with insecure_lab_plaintext")]
    ScopeRefused,
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("handshake setup failed: {0}")]
    Handshake(String),
    #[error("the peer's public key is a small-order point (no private key stands behind it)")]
    DegenerateKey,
    #[error("too many messages waiting for this channel ({0}); back off")]
    QueueFull(usize),
    #[error(transparent)]
    Crypto(#[from] CryptoError),
}

/// Why a datagram was dropped, or (the owner reasons and `OutsideWindow`) why one message inside
/// an otherwise accepted datagram was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DropReason {
    /// Shorter than a header plus tag, or a header field out of range.
    MalformedHeader,
    /// Unsupported protocol version.
    BadVersion,
    /// Data for a receiver index we do not hold (stale, forged or from before a restart).
    UnknownIndex,
    /// Counter already seen inside the replay window.
    Replayed,
    /// Counter older than the replay window.
    TooOld,
    /// Tag or MAC did not verify (tampered, forged, or wrong key).
    AuthFailed,
    /// Session past its hard message-count or age limit.
    SessionExpired,
    /// A handshake message that did not decrypt or parse.
    HandshakeFailed,
    /// A handshake from a static key that is not in our trust set.
    UnknownHost,
    /// A handshake initiation whose timestamp is not newer than the last one accepted (replay).
    StaleHandshake,
    /// A handshake response that matches no initiation of ours.
    UnexpectedResponse,
    /// A simultaneous initiation we lose to by rule (the peer will answer ours instead).
    HandshakeCollision,
    /// The peer proposed a suite we do not accept.
    SuiteRefused,
    /// A datagram in scope "none" without the insecure lab opt-in.
    ScopeRefused,
    /// Authenticated but the frames inside did not parse.
    MalformedFrame,
    /// An owner introduction naming an owner missing from our directory.
    UnknownOwner,
    /// An owner introduction whose signature did not verify.
    BadOwnerSignature,
    /// An owner id reused for a different name.
    OwnerConflict,
    /// A message referring to an owner or destination id never introduced.
    UnknownOwnerId,
    /// A message sequence number beyond the receive window (that message only, not settled).
    OutsideWindow,
    /// A handshake initiation refused by the flood limiter before any public-key work.
    RateLimited,
    /// A handshake initiation whose mac1 does not verify (junk, or meant for another host key):
    /// refused before the limiter and any public-key work.
    BadMac1,
    /// A handshake initiation without a valid mac2 while its source (or the host) is under
    /// load: answered with a cookie reply instead of being processed.
    CookieRequired,
    /// A cookie reply that matches no initiation of ours or does not decrypt.
    BadCookieReply,
    /// A handshake with a small-order public key: a Diffie-Hellman result was all zeros.
    DegenerateKey,
}

impl DropReason {
    pub const ALL: [DropReason; 25] = [
        DropReason::MalformedHeader,
        DropReason::BadVersion,
        DropReason::UnknownIndex,
        DropReason::Replayed,
        DropReason::TooOld,
        DropReason::AuthFailed,
        DropReason::SessionExpired,
        DropReason::HandshakeFailed,
        DropReason::UnknownHost,
        DropReason::StaleHandshake,
        DropReason::UnexpectedResponse,
        DropReason::HandshakeCollision,
        DropReason::SuiteRefused,
        DropReason::ScopeRefused,
        DropReason::MalformedFrame,
        DropReason::UnknownOwner,
        DropReason::BadOwnerSignature,
        DropReason::OwnerConflict,
        DropReason::UnknownOwnerId,
        DropReason::OutsideWindow,
        DropReason::RateLimited,
        DropReason::BadMac1,
        DropReason::CookieRequired,
        DropReason::BadCookieReply,
        DropReason::DegenerateKey,
    ];

    pub fn index(self) -> usize {
        DropReason::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }

    pub fn name(self) -> &'static str {
        match self {
            DropReason::MalformedHeader => "malformed-header",
            DropReason::BadVersion => "bad-version",
            DropReason::UnknownIndex => "unknown-index",
            DropReason::Replayed => "replayed",
            DropReason::TooOld => "too-old",
            DropReason::AuthFailed => "auth-failed",
            DropReason::SessionExpired => "session-expired",
            DropReason::HandshakeFailed => "handshake-failed",
            DropReason::UnknownHost => "unknown-host",
            DropReason::StaleHandshake => "stale-handshake",
            DropReason::UnexpectedResponse => "unexpected-response",
            DropReason::HandshakeCollision => "handshake-collision",
            DropReason::SuiteRefused => "suite-refused",
            DropReason::ScopeRefused => "scope-refused",
            DropReason::MalformedFrame => "malformed-frame",
            DropReason::UnknownOwner => "unknown-owner",
            DropReason::BadOwnerSignature => "bad-owner-signature",
            DropReason::OwnerConflict => "owner-conflict",
            DropReason::UnknownOwnerId => "unknown-owner-id",
            DropReason::OutsideWindow => "outside-window",
            DropReason::RateLimited => "rate-limited",
            DropReason::BadMac1 => "bad-mac1",
            DropReason::CookieRequired => "cookie-required",
            DropReason::BadCookieReply => "bad-cookie-reply",
            DropReason::DegenerateKey => "degenerate-key",
        }
    }
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
