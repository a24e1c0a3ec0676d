//! The endpoint: one host's protocol state over all its channels. Driven as
//! `handle(now, datagram)` / `poll_transmit(now, buf)` / `poll_timeout()` / `handle_timeout(now)`,
//! with `send` for outgoing messages and `poll_event` for deliveries. No I/O, no clock reads.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;

use sealink_crypto::Scope;

use crate::channel::{Channel, ChannelStats};
use crate::config::{Config, Urgency};
use crate::error::{DropReason, Error};
use crate::handshake::cookie::{Admission, COOKIE_REPLY_LEN, HandshakeGuard};
use crate::handshake::ratelimit::LimiterConfig;
use crate::handshake::{self, HostKey};
use crate::owner::{Directory, LocalOwner, OwnerId};
use crate::session::IndexTable;
use crate::stats::Stats;
use crate::time::Time;
use crate::wire::{self, HEADER_LEN, Header};

pub use crate::session::{OpenJob, SealJob};
use crate::shared::Shared;
pub use crate::shared::{Delivery, Event, MessageId, Messages, Outgoing, PeerId, Transmit};

/// Outcome of [`Endpoint::handle_reserve`].
#[derive(Debug, Clone)]
pub enum Reserved {
    /// A handshake message, handled whole.
    Done(PeerId),
    /// A data datagram to open with `job`, then finish with [`Endpoint::handle_finish`].
    Open { peer: PeerId, job: OpenJob },
}

/// Cookie replies waiting for the driver; beyond this many, initiations that would get one
/// are refused as rate-limited (the driver drains them after every receive batch).
pub const MAX_PENDING_COOKIE_REPLIES: usize = 256;

/// One host's sealink endpoint.
pub struct Endpoint {
    sh: Shared,
    /// mac1, mac2 and the flood limiters in front of every initiation.
    guard: HandshakeGuard,
    cookie_replies: VecDeque<(SocketAddr, Box<[u8; COOKIE_REPLY_LEN]>)>,
    channels: Vec<Channel>,
    by_static: HashMap<[u8; 32], usize>,
    names: Vec<Arc<str>>,
    idx: IndexTable,
    next_msg: u64,
    rr: usize,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("host", &self.sh.host)
            .field("peers", &self.names)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    pub fn new(cfg: Config, host: HostKey, directory: Directory) -> Result<Self, Error> {
        cfg.validate()?;
        let mut seed = [0u8; 4];
        sealink_crypto::sign::random_bytes(&mut seed)?;
        Ok(Endpoint {
            guard: HandshakeGuard::new(host.public(), LimiterConfig::default()),
            cookie_replies: VecDeque::new(),
            sh: Shared {
                cfg,
                host,
                directory,
                owners: Vec::new(),
                stats: Stats::default(),
                events: VecDeque::new(),
            },
            channels: Vec::new(),
            by_static: HashMap::new(),
            names: Vec::new(),
            idx: IndexTable::with_seed(u32::from_le_bytes(seed)),
            next_msg: 0,
            rr: 0,
        })
    }

    pub fn config(&self) -> &Config {
        &self.sh.cfg
    }
    pub fn host_public(&self) -> &[u8; 32] {
        self.sh.host.public()
    }
    pub fn stats(&self) -> &Stats {
        &self.sh.stats
    }
    pub fn directory(&self) -> &Directory {
        &self.sh.directory
    }

    /// Replaces the handshake flood limits (and forgets the buckets filled so far).
    pub fn set_handshake_limits(&mut self, cfg: LimiterConfig) {
        self.guard = HandshakeGuard::new(self.sh.host.public(), cfg);
    }

    /// The admission step in front of initiations (limits, tracked sources).
    pub fn handshake_guard(&self) -> &HandshakeGuard {
        &self.guard
    }

    /// The next cookie reply to send (to the returned address, `buf[..len]`): the answer to an
    /// initiation refused under load ([`crate::handshake::cookie`]). Drivers that feed datagrams with
    /// [`Endpoint::handle_from`] send these after each batch.
    pub fn poll_cookie_reply(&mut self, buf: &mut [u8]) -> Option<(SocketAddr, usize)> {
        loop {
            let (dest, reply) = self.cookie_replies.pop_front()?;
            if let Some(out) = buf.get_mut(..COOKIE_REPLY_LEN) {
                out.copy_from_slice(&reply[..]);
                self.sh.stats.datagrams_sent += 1;
                self.sh.stats.bytes_sent += COOKIE_REPLY_LEN as u64;
                return Some((dest, COOKIE_REPLY_LEN));
            }
        }
    }

    /// Trusts a peer host by its static public key.
    pub fn add_peer(&mut self, name: &str, static_public: [u8; 32]) -> PeerId {
        if let Some(&i) = self.by_static.get(&static_public) {
            return PeerId(i);
        }
        let id = self.channels.len();
        self.channels.push(Channel::new(PeerId(id), static_public));
        self.by_static.insert(static_public, id);
        self.names.push(Arc::from(name));
        PeerId(id)
    }

    pub fn peer_name(&self, p: PeerId) -> Option<&str> {
        self.names.get(p.0).map(|n| &**n)
    }

    pub fn peers(&self) -> impl Iterator<Item = PeerId> + '_ {
        (0..self.channels.len()).map(PeerId)
    }

    /// Registers a local owner that may send.
    pub fn add_owner(&mut self, owner: LocalOwner) -> OwnerId {
        self.sh.owners.push(owner);
        OwnerId(self.sh.owners.len() - 1)
    }

    /// Largest message `send` accepts.
    pub fn max_message_len(&self) -> usize {
        self.sh.cfg.max_message_len()
    }

    /// True once a channel with `peer` is established and usable.
    pub fn is_established(&self, peer: PeerId, now: Time) -> bool {
        self.channels
            .get(peer.0)
            .is_some_and(|c| c.is_established(&self.sh, now))
    }

    /// Whether the channel to `peer` has messages that must leave now, beyond what
    /// `poll_timeout` says (a driver uses it to decide whether a sleeping I/O loop needs waking).
    pub fn flush_pending(&self, peer: PeerId) -> bool {
        self.channels.get(peer.0).is_some_and(|c| c.flush_pending())
    }

    pub fn channel_stats(&self, peer: PeerId) -> Option<&ChannelStats> {
        self.channels.get(peer.0).map(|c| &c.stats)
    }

    /// Messages waiting in the piggyback queue or unacknowledged for `peer`.
    pub fn pending_messages(&self, peer: PeerId) -> usize {
        self.channels
            .get(peer.0)
            .map_or(0, |c| c.queued_messages() + c.inflight_messages())
    }

    /// Bytes the channel to `peer` holds for the data of queued and unacknowledged messages
    /// (shared chunks, so at least one chunk once anything was sent).
    pub fn send_buffer_bytes(&self, peer: PeerId) -> usize {
        self.channels
            .get(peer.0)
            .map_or(0, |c| c.send_buffer_bytes())
    }

    /// Queues a message from local owner `from` to owner `to` (or the host, `None`) on `peer`.
    /// Opens the channel if needed. Delivery is reliable and exactly once while the peer is
    /// reachable; otherwise an [`Event::Undeliverable`] names it.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        now: Time,
        peer: PeerId,
        from: OwnerId,
        to: Option<&str>,
        data: &[u8],
        urgency: Urgency,
        scope: Scope,
    ) -> Result<MessageId, Error> {
        let msg = Outgoing {
            data,
            urgency,
            scope,
        };
        self.send_batch(now, peer, from, to, &[msg])
            .map(|(id, _)| id)
    }

    /// Queues several messages from `from` to `to` on `peer`, in order, as [`Endpoint::send`]
    /// would one by one, but with the checks shared by the batch (peer, owner, destination, the
    /// size limit, the handshake) made once. Stops at the first message refused: if it is the
    /// first, its error is returned; otherwise the messages queued so far, with consecutive ids
    /// from the first id returned.
    pub fn send_batch(
        &mut self,
        now: Time,
        peer: PeerId,
        from: OwnerId,
        to: Option<&str>,
        msgs: &[Outgoing<'_>],
    ) -> Result<(MessageId, usize), Error> {
        let ch = self.channels.get_mut(peer.0).ok_or(Error::UnknownPeer)?;
        if from.0 >= self.sh.owners.len() {
            return Err(Error::UnknownOwner);
        }
        if let Some(t) = to {
            if !wire::valid_name(t) {
                return Err(Error::InvalidName(t.to_owned()));
            }
        }
        let max = self.sh.cfg.max_message_len();
        let limit = self.sh.cfg.max_queued_messages;
        let pending0 = ch.queued_messages() + ch.inflight_messages();
        let first = MessageId(self.next_msg);
        // The messages accepted: a prefix of the batch, up to the first refused.
        let mut count = 0;
        for m in msgs {
            let pending = pending0 + count;
            let refused = if m.scope == Scope::None && !self.sh.cfg.insecure_lab_plaintext {
                Some(Error::ScopeRefused)
            } else if m.data.len() > max {
                Some(Error::MessageTooLarge {
                    len: m.data.len(),
                    max,
                })
            } else if pending >= limit {
                Some(Error::QueueFull(pending))
            } else {
                None
            };
            if let Some(e) = refused {
                if count == 0 {
                    return Err(e);
                }
                break;
            }
            count += 1;
        }
        if count > 0 {
            let (owner_wire, dest) = ch.wire_ids(from.0, to);
            ch.push_batch(
                &self.sh,
                now,
                first,
                from.0,
                owner_wire,
                dest,
                &msgs[..count],
            );
            self.next_msg += count as u64;
        }
        if count > 0 {
            ch.ensure_session(&mut self.sh, &mut self.idx, now);
        }
        Ok((first, count))
    }

    /// Processes one datagram from the network without knowing where it came from: as
    /// [`Endpoint::handle_from`], except that initiations are checked for mac1 only (no flood
    /// limits, no cookies). For the simulator and tests; drivers facing a network use
    /// `handle_from`.
    pub fn handle(&mut self, now: Time, datagram: &mut [u8]) -> Result<PeerId, DropReason> {
        self.handle_inner(now, None, datagram)
    }

    /// Processes one datagram from `src`. The buffer is decrypted in place. Returns the peer it
    /// came from, or why it was dropped (already counted in the stats). An initiation passes
    /// the [`HandshakeGuard`] first (mac1, limits, mac2 under load; a cookie reply may be left
    /// for [`Endpoint::poll_cookie_reply`]). A cookie reply returns its peer too, but proves
    /// nothing about the peer's address: learn addresses from data and handshakes only. The
    /// serial reference: [`Endpoint::handle_reserve_from`], [`OpenJob::open`] and
    /// [`Endpoint::handle_finish`] back to back.
    pub fn handle_from(
        &mut self,
        now: Time,
        src: SocketAddr,
        datagram: &mut [u8],
    ) -> Result<PeerId, DropReason> {
        self.handle_inner(now, Some(src), datagram)
    }

    fn handle_inner(
        &mut self,
        now: Time,
        src: Option<SocketAddr>,
        datagram: &mut [u8],
    ) -> Result<PeerId, DropReason> {
        match self.reserve(now, src, datagram)? {
            Reserved::Done(p) => Ok(p),
            Reserved::Open { peer, job } => {
                let opened = job.open(datagram);
                self.handle_finish(now, peer, &job, opened, datagram)
            }
        }
    }

    /// The serial first half of [`Endpoint::handle`] (no source address: see there).
    pub fn handle_reserve(&mut self, now: Time, datagram: &[u8]) -> Result<Reserved, DropReason> {
        self.reserve(now, None, datagram)
    }

    /// The serial first half of [`Endpoint::handle_from`]: handshakes are handled whole; a data
    /// datagram is checked (header, index, session, age, replay window) and its [`OpenJob`]
    /// returned, to be opened anywhere and finished with [`Endpoint::handle_finish`].
    pub fn handle_reserve_from(
        &mut self,
        now: Time,
        src: SocketAddr,
        datagram: &[u8],
    ) -> Result<Reserved, DropReason> {
        self.reserve(now, Some(src), datagram)
    }

    fn reserve(
        &mut self,
        now: Time,
        src: Option<SocketAddr>,
        datagram: &[u8],
    ) -> Result<Reserved, DropReason> {
        self.sh.stats.datagrams_received += 1;
        self.sh.stats.bytes_received += datagram.len() as u64;
        let r = self.reserve_inner(now, src, datagram);
        if let Err(reason) = r {
            self.count_drop(reason);
        }
        r
    }

    /// The serial second half of [`Endpoint::handle`], in arrival order per peer: records the
    /// counter, then acknowledgements, owners and deliveries (see [`Endpoint::poll_event`]).
    pub fn handle_finish(
        &mut self,
        now: Time,
        peer: PeerId,
        job: &OpenJob,
        opened: Result<Range<usize>, DropReason>,
        datagram: &[u8],
    ) -> Result<PeerId, DropReason> {
        let r = match self.channels.get_mut(peer.0) {
            Some(c) => c.finish_data(&mut self.sh, now, job, opened, datagram),
            None => Err(DropReason::UnknownIndex),
        };
        match r {
            Ok(()) => Ok(peer),
            Err(reason) => {
                self.count_drop(reason);
                Err(reason)
            }
        }
    }

    fn count_drop(&mut self, reason: DropReason) {
        self.sh.stats.drop(reason);
        tracing::trace!(%reason, "datagram dropped");
    }

    fn reserve_inner(
        &mut self,
        now: Time,
        src: Option<SocketAddr>,
        buf: &[u8],
    ) -> Result<Reserved, DropReason> {
        match wire::parse_header(buf)? {
            Header::Init { sender } => {
                if buf.len() != handshake::INIT_LEN {
                    return Err(DropReason::MalformedHeader);
                }
                // Before any public-key work: mac1, then the limits (and mac2 under load).
                let room = self.cookie_replies.len() < MAX_PENDING_COOKIE_REPLIES;
                match (self.guard.admit(now, src, buf, room), src) {
                    (Admission::Process, _) => {}
                    (Admission::Drop(r), _) => return Err(r),
                    (Admission::Cookie(reply), Some(src)) => {
                        self.cookie_replies.push_back((src, reply));
                        return Err(DropReason::CookieRequired);
                    }
                    // Without a source the guard never asks for a cookie.
                    (Admission::Cookie(_), None) => return Err(DropReason::RateLimited),
                }
                let (hs, rs, payload) = handshake::read_init(
                    &self.sh.host,
                    handshake::PROLOGUE,
                    &buf[..handshake::NOISE_INIT_LEN],
                )?;
                self.sh.stats.pk.dh += 2;
                let Some(&i) = self.by_static.get(&rs) else {
                    self.guard.untrusted(now, src, &rs);
                    return Err(DropReason::UnknownHost);
                };
                self.channels[i].accept_init(
                    &mut self.sh,
                    &mut self.idx,
                    now,
                    hs,
                    sender,
                    payload,
                )?;
                Ok(Reserved::Done(PeerId(i)))
            }
            Header::Response { receiver, sender } => {
                let i = self
                    .idx
                    .owner(receiver)
                    .ok_or(DropReason::UnexpectedResponse)?;
                self.channels[i].accept_response(
                    &mut self.sh,
                    &mut self.idx,
                    now,
                    receiver,
                    sender,
                    buf,
                )?;
                Ok(Reserved::Done(PeerId(i)))
            }
            Header::CookieReply { receiver } => {
                let i = self.idx.owner(receiver).ok_or(DropReason::BadCookieReply)?;
                self.channels[i].accept_cookie(now, receiver, buf)?;
                Ok(Reserved::Done(PeerId(i)))
            }
            Header::Data {
                scope,
                receiver,
                counter,
            } => {
                if buf.len() < HEADER_LEN {
                    return Err(DropReason::MalformedHeader);
                }
                let i = self.idx.owner(receiver).ok_or(DropReason::UnknownIndex)?;
                let job = self.channels[i].reserve_data(&self.sh, now, scope, receiver, counter)?;
                Ok(Reserved::Open {
                    peer: PeerId(i),
                    job,
                })
            }
        }
    }

    /// Writes the next datagram to send into `buf` (give it at least `max_datagram` bytes).
    pub fn poll_transmit(&mut self, now: Time, buf: &mut [u8]) -> Option<Transmit> {
        self.poll_transmit_inner(now, buf, false).map(|(t, _)| t)
    }

    /// [`Endpoint::poll_transmit`] that leaves an AEAD data datagram unsealed: `buf[..len]` is
    /// final once the returned [`SealJob`] has sealed it (anywhere, no lock needed). Handshakes
    /// and legacy suites come back sealed, with no job.
    pub fn poll_transmit_deferred(
        &mut self,
        now: Time,
        buf: &mut [u8],
    ) -> Option<(Transmit, Option<SealJob>)> {
        self.poll_transmit_inner(now, buf, true)
    }

    fn poll_transmit_inner(
        &mut self,
        now: Time,
        buf: &mut [u8],
        defer: bool,
    ) -> Option<(Transmit, Option<SealJob>)> {
        let n = self.channels.len();
        for k in 0..n {
            let i = (self.rr + k) % n;
            if let Some((len, job)) =
                self.channels[i].poll_transmit(&mut self.sh, &mut self.idx, now, buf, defer)
            {
                self.rr = i;
                return Some((
                    Transmit {
                        peer: PeerId(i),
                        len,
                    },
                    job,
                ));
            }
        }
        None
    }

    /// When `handle_timeout` next has work.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.channels
            .iter()
            .filter_map(|c| c.poll_timeout(&self.sh))
            .min()
    }

    pub fn handle_timeout(&mut self, now: Time) {
        for c in &mut self.channels {
            c.handle_timeout(&mut self.sh, &mut self.idx, now);
        }
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.sh.events.pop_front()
    }
}

impl Endpoint {
    /// The host's private key, for tests that restart an endpoint with the same identity.
    #[doc(hidden)]
    pub fn host_private_for_tests(&self) -> [u8; 32] {
        self.sh.host.private
    }

    /// Messages waiting or unacknowledged on every channel.
    pub fn pending_messages_all(&self) -> usize {
        self.channels
            .iter()
            .map(|c| c.queued_messages() + c.inflight_messages())
            .sum()
    }
}

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
