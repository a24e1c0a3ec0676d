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

/// One message of [`crate::Endpoint::send_batch`].
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    pub data: &'a [u8],
    pub urgency: crate::config::Urgency,
    pub scope: Scope,
}

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

/// Messages delivered together: consecutive messages of one datagram from one owner to one
/// destination, in the order they were sent. One event (and one copy of the datagram's body)
/// carries them all, so a host receiving many small messages pays per datagram, not per
/// message, to hand them over: the owner names are shared, not cloned per message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Messages {
    pub peer: PeerId,
    /// The sending owner, authenticated on this channel.
    pub from: Arc<str>,
    /// The destination owner named by the sender, or `None` for the host itself.
    pub to: Option<Arc<str>>,
    /// The scope of the datagram that carried them.
    pub scope: Scope,
    /// One copy of the datagram's body (or of the message, when it came alone).
    body: Bytes,
    /// Each message's (start, length) in `body`.
    spans: Vec<(u32, u32)>,
}

impl Messages {
    pub(crate) fn new(
        peer: PeerId,
        from: Arc<str>,
        to: Option<Arc<str>>,
        scope: Scope,
        body: Bytes,
    ) -> Self {
        Messages {
            peer,
            from,
            to,
            scope,
            body,
            spans: Vec::new(),
        }
    }

    /// Adds the message at `start..start + len` of the body (the caller checks the bounds).
    pub(crate) fn push(&mut self, start: usize, len: usize) {
        debug_assert!(start + len <= self.body.len());
        self.spans.push((start as u32, len as u32));
    }

    /// Room for `n` more messages (a run read whole: one allocation).
    pub(crate) fn reserve(&mut self, n: usize) {
        self.spans.reserve(n);
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The messages' bytes, in order, borrowed: no reference count is touched.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.spans
            .iter()
            .map(|&(s, l)| &self.body[s as usize..(s + l) as usize])
    }

    /// Message `i` as an owned view of the shared body.
    pub fn get(&self, i: usize) -> Option<Bytes> {
        let &(s, l) = self.spans.get(i)?;
        Some(self.body.slice(s as usize..(s + l) as usize))
    }

    /// Drops the first `n` messages (a consumer that took them one at a time).
    pub fn advance(&mut self, n: usize) {
        self.spans.drain(..n.min(self.spans.len()));
    }

    /// Total bytes of the messages.
    pub fn bytes(&self) -> usize {
        self.spans.iter().map(|&(_, l)| l as usize).sum()
    }

    /// One [`Delivery`] per message, for consumers that want them one at a time (each clones
    /// the names and a view of the body).
    pub fn deliveries(&self) -> impl ExactSizeIterator<Item = Delivery> + '_ {
        (0..self.len()).map(|i| self.with_names(self.get(i).unwrap_or_default()))
    }

    /// Message `i` as a [`Delivery`] of its own.
    pub fn delivery(&self, i: usize) -> Option<Delivery> {
        self.get(i).map(|data| self.with_names(data))
    }

    fn with_names(&self, data: Bytes) -> Delivery {
        Delivery {
            peer: self.peer,
            from: self.from.clone(),
            to: self.to.clone(),
            scope: self.scope,
            data,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A new channel with this peer is established (first contact, or after the peer restarted).
    ChannelUp { peer: PeerId },
    /// Messages received: see [`Messages`] (one event per run of messages in a datagram).
    Messages(Messages),
    /// A message was given up on (peer unreachable), or the peer refused it (its owner or
    /// destination is not accepted there). It may still have arrived if only the
    /// acknowledgements were lost; it is never sent again.
    Undeliverable { peer: PeerId, id: MessageId },
    /// Every handshake attempt with this peer went unanswered.
    HandshakeFailed { peer: PeerId },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_views_agree_and_advance_drops_the_front() {
        let body = Bytes::from_static(b"..abc.de.f");
        let mut m = Messages::new(PeerId(0), Arc::from("o"), None, Scope::Encrypt, body);
        for (s, l) in [(2, 3), (6, 2), (9, 1), (9, 0)] {
            m.push(s, l);
        }
        let parts: Vec<&[u8]> = m.iter().collect();
        assert_eq!(parts, [&b"abc"[..], b"de", b"f", b""]);
        assert_eq!((m.len(), m.bytes()), (4, 6));
        assert_eq!(m.get(1).as_deref(), Some(&b"de"[..]));
        assert_eq!(m.get(4), None);
        let d: Vec<Bytes> = m.deliveries().map(|d| d.data).collect();
        assert_eq!(d, parts);
        assert_eq!(m.delivery(1).map(|d| d.data), m.get(1));
        assert!(m.delivery(4).is_none());
        m.advance(2);
        assert_eq!(m.iter().collect::<Vec<_>>(), [&b"f"[..], b""]);
        m.advance(9);
        assert!(m.is_empty());
    }
}
