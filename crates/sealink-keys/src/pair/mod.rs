//! Pairing (`sealink pair`, PROTOCOL §14): two hosts trust each other's host and owner keys
//! after one short code is read from one screen and typed on the other, as magic-wormhole and
//! croc pair. This module is the protocol, with no sockets, files or clocks: the [`Code`]
//! ([`code`], [`words`]) and the exchange over any byte stream ([`proto`]: SPAKE2 on the code,
//! key confirmation, sealed payloads, verdicts), and what the peer's keys do to a trust file
//! ([`plan`]). The command around it (TCP, prompts, the trust
//! file) is sealink-cli's.

pub mod code;
pub mod plan;
pub mod proto;
pub mod words;

use std::io;

pub use code::Code;
pub use plan::{NameTaken, Plan, Planned, plan};
pub use proto::{Payload, initiate, respond};

/// Why a pairing failed.
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    #[error("bad pairing code: {0}")]
    BadCode(String),
    #[error(
        "the code did not match: nothing was exchanged (a code works once: run `sealink pair` again for a new one)"
    )]
    CodeMismatch,
    #[error(
        "the peer closed the connection {0} (a wrong code or an interrupted pairing): nothing was exchanged"
    )]
    Closed(&'static str),
    #[error("timed out {0}")]
    Timeout(&'static str),
    #[error("network error {stage}: {error}")]
    Io {
        stage: &'static str,
        error: io::Error,
    },
    #[error("the peer sent a bad pairing message {stage}: {problem}")]
    Malformed {
        stage: &'static str,
        problem: String,
    },
    #[error("the peer speaks pairing protocol version {0}; this sealink speaks version {v}", v = proto::VERSION)]
    Version(u8),
    #[error("the peer's keys did not authenticate (altered in transit?): nothing was added")]
    Tampered,
    #[error("{0}; the peer was told, and added nothing either")]
    Refused(String),
    #[error("the peer refused this host's keys (its own message says why): nothing was added")]
    PeerRefused,
    #[error("the system's random generator failed")]
    Random,
    #[error("key derivation or encryption failed")]
    Crypto,
}
