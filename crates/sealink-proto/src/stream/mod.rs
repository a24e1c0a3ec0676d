//! Stream mode (bulk transfer over TCP), sans-IO: the session handshake, the record format,
//! the control bodies (hello, end, done, abort) and the receiver's accounting of which records
//! arrived. The I/O side (sockets, files, threads) lives in the `sealink-stream` crate.
//!
//! A session is one Noise IK handshake on the first TCP connection (the control stripe); more
//! connections (stripes) join with a secret token derived from it. Records carry a 16-byte
//! header that is the AEAD's associated data and whose sequence number is the nonce: every
//! record of a session has a distinct sequence number whatever stripe carries it, so stripes
//! share one key per direction. Data records map to file offsets by sequence number alone
//! (see [`assembly::Layout`]), which lets each stripe write what it opens straight into place.

pub mod assembly;
pub mod body;
pub mod handshake;
pub mod limits;
pub mod manifest;
pub mod record;
pub mod resume;

pub use assembly::{Assembly, Layout, Placement};
pub use body::{Abort, AbortCode, Done, End, FileEntry, Hello, Ready};
pub use handshake::{Initiator, SessionKeys, accept};
pub use limits::{RecordBound, StreamLimits};
pub use manifest::{Manifest, TreeCheck, TreeLimits};
pub use record::{RECORD_HEADER_LEN, RecordHeader, RecordType};

/// Errors of stream mode's sans-IO core: what a peer sent that we refuse, or a local misuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    #[error("malformed record header ({0})")]
    MalformedHeader(&'static str),
    #[error("record {seq} failed authentication (forged, corrupted or under the wrong key)")]
    AuthFailed { seq: u64 },
    #[error("record {seq} arrived twice (replayed or duplicated)")]
    Replayed { seq: u64 },
    #[error("record {seq} is outside the stream ({why})")]
    OutOfRange { seq: u64, why: &'static str },
    #[error("record {seq} has {got} bytes of data where {expected} were due")]
    BadLength {
        seq: u64,
        got: usize,
        expected: usize,
    },
    #[error("malformed {what}: {why}")]
    MalformedBody { what: &'static str, why: String },
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// The initiation's mac1 is missing or wrong: its sender does not know our host key (or
    /// runs a sealink from before mac1).
    #[error("the initiation has no valid mac1 for this host's key")]
    BadMac1,
    #[error("the peer's host key is not trusted")]
    UnknownHost,
    #[error("the sending owner's key is not trusted")]
    UntrustedOwner,
    #[error("the sending owner's signature does not verify")]
    BadOwnerSignature,
    #[error("suite {0} is not accepted for stream mode")]
    SuiteRefused(String),
    #[error(
        "the stream ended early: {received} of {expected} records arrived before the authenticated end"
    )]
    Truncated { received: u64, expected: u64 },
    #[error(
        "the transfer needs {needed} records, more than the {limit} one session may carry ({why})"
    )]
    LimitExceeded {
        needed: u64,
        limit: u64,
        why: &'static str,
    },
    /// A manifest went past one of the receiver's limits on a whole transfer.
    #[error(
        "the transfer has more {what} than this receiver's limit of {limit} (raised with `sealink recv {flag}`)"
    )]
    TreeLimit {
        what: &'static str,
        limit: u64,
        flag: &'static str,
    },
    #[error(
        "{name} as assembled does not match the sender's SHA-256 of the file (data kept from an earlier session was altered, or the file changed)"
    )]
    HashMismatch { name: String },
    #[error("crypto: {0}")]
    Crypto(#[from] sealink_crypto::CryptoError),
}

/// Sequence number of the sender's abort record (data can never reach it).
pub const SENDER_ABORT_SEQ: u64 = u64::MAX;
/// Sequence number of the receiver's answer to the hello (ready, or abort when it refuses).
pub const READY_SEQ: u64 = 0;
/// Sequence number of the receiver's final reply (done or abort).
pub const REPLY_SEQ: u64 = 1;

/// Sequence number of the receiver's ready for manifest batch `batch` (0: the hello's): the
/// first uses [`READY_SEQ`], later ones follow [`REPLY_SEQ`], so no two records the receiver
/// seals share a nonce.
pub fn ready_seq(batch: u64) -> u64 {
    if batch == 0 {
        READY_SEQ
    } else {
        batch.saturating_add(1)
    }
}

/// What the sending owner signs: the core's owner introduction, bound to this session's
/// handshake and direction.
pub fn owner_intro(
    binding: &[u8; 32],
    sender_host: &[u8; 32],
    receiver_host: &[u8; 32],
) -> Vec<u8> {
    crate::owner::intro_message(binding, sender_host, receiver_host, 0, "stream")
}
