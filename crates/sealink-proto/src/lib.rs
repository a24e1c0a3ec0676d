//! sans-IO sealink protocol core: wire format, Noise IK channel establishment, owners
//! authenticated once per channel, per-message scope, anti-replay, piggybacking, reliable
//! exactly-once delivery. No sockets and no clock reads: time is an argument.
//! See docs/PROTOCOL.md for the byte layout and state machine.
#![forbid(unsafe_code)]

pub mod channel;
pub mod config;
pub mod datapath;
pub mod endpoint;
pub mod error;
pub mod handshake;
mod inflight;
pub mod owner;
mod recv_window;
pub mod replay;
mod send_arena;
pub mod session;
mod shared;
#[cfg(feature = "sim")]
pub mod sim;
pub mod stats;
pub mod stream;
pub mod time;
pub mod tunnel;
pub mod wg;
/// WgPeer, a second and independent WireGuard peer: an oracle for tests (feature
/// `reference-peer`), not product code.
#[cfg(any(test, feature = "reference-peer"))]
pub mod wg_reference;
pub mod wire;

pub use config::{Config, Urgency};
pub use endpoint::{Delivery, Endpoint, Event, MessageId, Messages, Outgoing, PeerId, Transmit};
pub use error::{DropReason, Error};
pub use handshake::HostKey;
/// Where they were before the handshake had one folder: other crates name them here.
pub use handshake::{cookie, ratelimit};
pub use owner::{Directory, LocalOwner, OwnerId};
pub use sealink_crypto::{Scope, SuiteId};
pub use stats::{PkOps, Stats};
pub use time::{Clock, Time};
