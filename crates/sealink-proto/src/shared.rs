//! The types an endpoint and its channels share: peer and message names, deliveries and
//! events, transmits, and the host-wide state every channel reads. Kept apart from
//! [`crate::endpoint`] so that [`crate::channel`] does not depend on the module that owns it.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;

use sealink_crypto::Scope;

use crate::config::Config;
use crate::handshake::HostKey;
use crate::owner::{Directory, LocalOwner};
use crate::stats::Stats;

/// A peer host, by the order it was added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub(crate) usize);

impl PeerId {
    pub fn index(self) -> usize {
        self.0
    }
}

/// Names a sent message in [`Event::Undeliverable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub u64);

/// A message delivered to this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub peer: PeerId,
    /// The sending owner, authenticated on this channel.
    pub from: Arc<str>,
    /// The destination owner named by the sender, or `None` for the host itself.
    pub to: Option<Arc<str>>,
    /// The scope of the datagram that carried it.
    pub scope: Scope,
    /// A view of one copy of the datagram's body, shared by the messages it carried: no
    /// allocation per message.
    pub data: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A new channel with this peer is established (first contact, or after the peer restarted).
    ChannelUp {
        peer: PeerId,
    },
    Message(Delivery),
    /// A message was given up on (peer unreachable), or the peer refused it (its owner or
    /// destination is not accepted there). It may still have arrived if only the
    /// acknowledgements were lost; it is never sent again.
    Undeliverable {
        peer: PeerId,
        id: MessageId,
    },
    /// Every handshake attempt with this peer went unanswered.
    HandshakeFailed {
        peer: PeerId,
    },
}

/// A datagram ready to go to `peer`; its bytes are the first `len` of the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub peer: PeerId,
    pub len: usize,
}

/// State every channel reads: configuration, identity, owners, counters, events.
pub(crate) struct Shared {
    pub cfg: Config,
    pub host: HostKey,
    pub directory: Directory,
    pub owners: Vec<LocalOwner>,
    pub stats: Stats,
    pub events: VecDeque<Event>,
}
