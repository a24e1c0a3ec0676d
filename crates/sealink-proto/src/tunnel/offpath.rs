//! Handshakes off the data path (issue 50): what a driver needs to answer handshake messages on
//! a thread of their own, with the public-key work done outside its lock on the core.
//!
//! A driver's receive path asks [`Tunnel::is_handshake`] (a look at the type byte) and puts
//! handshake messages on a bounded [`HandshakeQueue`] instead of handling them under its lock;
//! a full queue drops the message, counted as [`TunnelDrop::HandshakeQueueFull`]. A handshake
//! thread pops them with [`HandshakeQueue::pop`], which also says whether the queue is
//! **busy** (at least [`HandshakeQueue::busy_at`] waiting, or was within
//! [`UNDER_LOAD_AFTER`]: wireguard-go's `IsUnderLoad`), and for each:
//!
//! 1. [`Tunnel::handshake_begin`] under the lock: responses and cookie replies are handled
//!    whole (they are ours to expect, and few); an initiation gets the cheap checks only (mac1,
//!    the limiters, and, when busy, a cookie reply to every source whose mac2 does not prove
//!    its address, instead of any public-key work).
//! 2. [`Responder::read`] with no lock held: the Noise read of an admitted initiation (two
//!    X25519 operations), which needs nothing but the host key.
//! 3. [`Tunnel::handshake_prepare`] under the lock (the peer by its static key, the replay
//!    check, an index), [`Prepared::write`] with no lock held (the response: two more X25519
//!    operations, and the session's keys), [`Tunnel::handshake_commit`] under the lock (the
//!    session installed, the response queued); [`Tunnel::handshake_finish`] runs the three.
//!
//! [`Tunnel::decapsulate`] still handles a handshake whole (steps 1 to 3 back to back, never
//! busy): the serial reference.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use crate::error::DropReason;
use crate::handshake::{HostKey, InitPayload, TUNNEL_PROLOGUE};
use crate::time::Time;
use crate::wg::message::{self, Message};
use crate::wire::{Header, parse_header};

use super::handshake::{SealinkInit, SealinkPrepared, SealinkWritten, read_sealink_init};
use super::recv::Decap;
use super::stats::TunnelDrop;
use super::wg::{WgInit, WgPrepared, WgWritten, read_wg_init};
use super::{PeerIndex, Tunnel, Wire};

/// Messages a [`HandshakeQueue`] holds by default (wireguard-go's `QueueHandshakeSize`).
pub const HANDSHAKE_QUEUE: usize = 1024;
/// How long a queue stays busy after it was last seen busy (wireguard-go's
/// `UnderLoadAfterTime`).
pub const UNDER_LOAD_AFTER: Duration = Duration::from_secs(1);
/// Longest handshake message of either wire (sealink's initiation is the longest).
const MAX_HANDSHAKE: usize = 256;

/// A bounded FIFO of handshake messages (source, bytes) with wireguard-go's notion of load.
/// Plain data: the driver puts it behind its own mutex.
#[derive(Debug)]
pub struct HandshakeQueue {
    items: VecDeque<(SocketAddr, Vec<u8>)>,
    spare: Vec<Vec<u8>>,
    capacity: usize,
    under_load_until: Option<Time>,
}

impl HandshakeQueue {
    /// A queue of at most `capacity` messages (at least 8).
    pub fn new(capacity: usize) -> Self {
        HandshakeQueue {
            items: VecDeque::new(),
            spare: Vec::new(),
            capacity: capacity.max(8),
            under_load_until: None,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
    pub fn len(&self) -> usize {
        self.items.len()
    }
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Waiting messages from which the queue is busy: an eighth of its capacity
    /// (wireguard-go's `QueueHandshakeBusySize`).
    pub fn busy_at(&self) -> usize {
        self.capacity / 8
    }

    /// Queues a copy of `msg` from `source`; false (and nothing queued) when the queue is full
    /// or the message is longer than any handshake message: the caller counts the drop
    /// ([`Tunnel::handshake_queue_full`]).
    pub fn push(&mut self, source: SocketAddr, msg: &[u8]) -> bool {
        if self.items.len() >= self.capacity || msg.len() > MAX_HANDSHAKE {
            return false;
        }
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(msg);
        self.items.push_back((source, b));
        true
    }

    /// Takes the oldest message, and whether the queue is busy at `now`: it held at least
    /// [`HandshakeQueue::busy_at`] messages (this one included), now or within the last
    /// [`UNDER_LOAD_AFTER`]. Give the buffer back with [`HandshakeQueue::recycle`].
    pub fn pop(&mut self, now: Time) -> Option<(SocketAddr, Vec<u8>, bool)> {
        let busy = self.busy(now);
        self.items.pop_front().map(|(s, b)| (s, b, busy))
    }

    /// Whether the queue is busy at `now` (see [`HandshakeQueue::pop`]); seeing it busy
    /// extends the busy time.
    pub fn busy(&mut self, now: Time) -> bool {
        if self.items.len() >= self.busy_at() {
            self.under_load_until = Some(now + UNDER_LOAD_AFTER);
            return true;
        }
        self.under_load_until.is_some_and(|t| now < t)
    }

    /// A popped message's buffer, for reuse.
    pub fn recycle(&mut self, b: Vec<u8>) {
        if self.spare.len() < 64 {
            self.spare.push(b);
        }
    }
}

/// What [`Tunnel::handshake_begin`] left to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begun {
    /// Handled whole (a response or a cookie reply); any answer is in
    /// [`Tunnel::poll_transmit`].
    Done(PeerIndex),
    /// An admitted initiation: read it with [`Responder::read`] (no lock needed), then hand
    /// the result to [`Tunnel::handshake_finish`].
    Read,
}

/// The read-only half of answering initiations: the host key and the wire. Cheap to clone; a
/// handshake thread keeps one.
#[derive(Clone)]
pub struct Responder {
    host: HostKey,
    wire: Wire,
}

sealink_crypto::debug_showing!(Responder { wire });

/// An initiation read by [`Responder::read`]: for [`Tunnel::handshake_finish`].
pub struct ReadInit(Result<ReadKind, TunnelDrop>);

enum ReadKind {
    Sealink(SealinkInit),
    Wg(WgInit),
}

impl std::fmt::Debug for ReadInit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ReadInit")
            .field(&self.0.as_ref().map(|_| "read"))
            .finish()
    }
}

impl Responder {
    /// The public-key work of an initiation that [`Tunnel::handshake_begin`] admitted (`msg`:
    /// the same bytes): the Noise read, with no access to the tunnel's state.
    pub fn read(&self, msg: &[u8]) -> ReadInit {
        ReadInit(read_init(&self.host, self.wire, msg))
    }
}

fn read_init(host: &HostKey, wire: Wire, msg: &[u8]) -> Result<ReadKind, TunnelDrop> {
    match wire {
        Wire::Sealink => read_sealink_init(host, msg).map(ReadKind::Sealink),
        Wire::WireGuard => match message::parse(msg) {
            Ok(Message::Initiation(m)) => read_wg_init(host, msg, m.sender).map(ReadKind::Wg),
            _ => Err(DropReason::MalformedHeader.into()),
        },
    }
}

impl Tunnel {
    /// Whether `msg` is a handshake message of this tunnel's wire (an initiation, a response
    /// or a cookie reply), by its type alone: nothing is checked or counted.
    pub fn is_handshake(&self, msg: &[u8]) -> bool {
        match self.cfg.wire {
            Wire::WireGuard => matches!(
                msg.first(),
                Some(
                    &(message::MSG_INITIATION | message::MSG_RESPONSE | message::MSG_COOKIE_REPLY)
                )
            ),
            Wire::Sealink => matches!(
                parse_header(msg),
                Ok(Header::Init { .. } | Header::Response { .. } | Header::CookieReply { .. })
            ),
        }
    }

    /// The read-only half of answering initiations, for a handshake thread.
    pub fn responder(&self) -> Responder {
        Responder {
            host: self.host.clone(),
            wire: self.cfg.wire,
        }
    }

    /// Counts `n` handshake messages dropped because the driver's [`HandshakeQueue`] was full.
    pub fn handshake_queue_full(&mut self, n: u64) {
        self.drops[TunnelDrop::HandshakeQueueFull.index()] += n;
    }

    /// Step 1 of a queued handshake message from `source` (see the module documentation);
    /// `busy`: the queue's load ([`HandshakeQueue::pop`]). Every refusal is counted, the
    /// cookie replies of a busy queue as [`DropReason::CookieRequired`].
    pub fn handshake_begin(
        &mut self,
        now: Time,
        source: SocketAddr,
        msg: &[u8],
        busy: bool,
    ) -> Result<Begun, TunnelDrop> {
        let r = match self.cfg.wire {
            Wire::WireGuard => match message::parse(msg) {
                Ok(Message::Initiation(_)) => self
                    .wg_init_admit(now, source, msg, busy)
                    .map(|()| Begun::Read),
                Ok(Message::Response(_) | Message::CookieReply(_)) => {
                    return self
                        .wg_decapsulate_reserve(now, source, msg)
                        .map(begun)
                        .map_err(|d| self.count(d));
                }
                Ok(Message::Transport(_)) | Err(_) => Err(DropReason::MalformedHeader.into()),
            },
            Wire::Sealink => match parse_header(msg) {
                Ok(Header::Init { .. }) => self
                    .init_admit(now, source, msg, busy)
                    .map(|()| Begun::Read),
                Ok(Header::Response { receiver, sender }) => self
                    .on_response(now, source, receiver, sender, msg)
                    .map(done),
                Ok(Header::CookieReply { receiver }) => {
                    self.on_cookie(now, receiver, msg).map(done)
                }
                Ok(Header::Data { .. }) => Err(DropReason::MalformedHeader.into()),
                Err(e) => Err(e.into()),
            },
        };
        r.map_err(|d| self.count(d))
    }

    /// Step 3: an initiation read by [`Responder::read`] from `source` is answered (the
    /// response queued for [`Tunnel::poll_transmit`], a new session made). Counted on refusal.
    /// The same as [`Tunnel::handshake_prepare`], [`Prepared::write`] and
    /// [`Tunnel::handshake_commit`] back to back; a driver runs the write with no lock held.
    pub fn handshake_finish(
        &mut self,
        now: Time,
        source: SocketAddr,
        read: ReadInit,
    ) -> Result<PeerIndex, TunnelDrop> {
        let prepared = self.handshake_prepare(now, source, read)?;
        let written = prepared.write(now);
        self.handshake_commit(now, source, written)
    }

    /// Step 3a (under the lock): the peer of a read initiation by its static key, the replay
    /// check, and an index for the response. Counted on refusal.
    pub fn handshake_prepare(
        &mut self,
        now: Time,
        source: SocketAddr,
        read: ReadInit,
    ) -> Result<Prepared, TunnelDrop> {
        let r = read.0.and_then(|k| match k {
            ReadKind::Sealink(r) if self.cfg.wire == Wire::Sealink => {
                self.init_prepare(now, source, r).map(PreparedKind::Sealink)
            }
            ReadKind::Wg(r) if self.cfg.wire == Wire::WireGuard => {
                self.wg_init_prepare(now, source, r).map(PreparedKind::Wg)
            }
            _ => Err(DropReason::MalformedHeader.into()),
        });
        r.map(Prepared).map_err(|d| self.count(d))
    }

    /// Step 3c (under the lock): the response written by [`Prepared::write`] queued and the
    /// new session installed (refused, and its index freed, if the peer was removed or a newer
    /// initiation of its answered meanwhile). Counted on refusal.
    pub fn handshake_commit(
        &mut self,
        now: Time,
        source: SocketAddr,
        written: Written,
    ) -> Result<PeerIndex, TunnelDrop> {
        let r = match written.0 {
            WrittenKind::Sealink(w) => self.init_commit(now, source, w),
            WrittenKind::Wg(w) => self.wg_init_commit(now, source, w),
        };
        r.map(|d| match d {
            Decap::Handshake(p) | Decap::Data(p) => p,
        })
        .map_err(|d| self.count(d))
    }
}

/// An initiation checked against its peer, with an index for its response
/// ([`Tunnel::handshake_prepare`]).
pub struct Prepared(PreparedKind);

enum PreparedKind {
    Sealink(SealinkPrepared),
    Wg(WgPrepared),
}

/// A response written by [`Prepared::write`], for [`Tunnel::handshake_commit`].
pub struct Written(WrittenKind);

enum WrittenKind {
    Sealink(SealinkWritten),
    Wg(WgWritten),
}

impl Prepared {
    /// Step 3b (no lock needed): the response's public-key work and the session's keys.
    pub fn write(self, now: Time) -> Written {
        Written(match self.0 {
            PreparedKind::Sealink(p) => WrittenKind::Sealink(p.write(now)),
            PreparedKind::Wg(p) => WrittenKind::Wg(p.write(now)),
        })
    }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Written").finish_non_exhaustive()
    }
}

fn done(d: Decap) -> Begun {
    match d {
        Decap::Handshake(p) | Decap::Data(p) => Begun::Done(p),
    }
}

fn begun(d: super::DecapReserve) -> Begun {
    match d {
        super::DecapReserve::Handshake(p) => Begun::Done(p),
        // Not reached: only responses and cookie replies come here.
        super::DecapReserve::Open(j) => Begun::Done(j.peer()),
    }
}

// ------------------------------------------------------------------ our own initiations

/// An initiation [`Tunnel::start_handshake`] reserved (index and timestamp taken, the peer's
/// handshake under way) but did not build: the driver builds it with [`Initiator::build`],
/// no lock held, and hands the result to [`Tunnel::initiation_commit`]. See
/// [`Tunnel::build_initiations_offpath`].
pub struct InitJob {
    pub(super) pi: usize,
    pub(super) remote: [u8; 32],
    pub(super) local: u32,
    pub(super) kind: InitKind,
}

pub(super) enum InitKind {
    Sealink(InitPayload),
    Wg { psk: [u8; 32], ts: u64 },
}

impl std::fmt::Debug for InitJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InitJob")
            .field("peer", &self.pi)
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

/// An initiation built by [`Initiator::build`] (its MACs not yet added), for
/// [`Tunnel::initiation_commit`].
pub struct BuiltInit {
    pi: usize,
    remote: [u8; 32],
    local: u32,
    built: Result<(snow::HandshakeState, Vec<u8>), String>,
}

impl std::fmt::Debug for BuiltInit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltInit")
            .field("peer", &self.pi)
            .field("local", &self.local)
            .field("ok", &self.built.is_ok())
            .finish_non_exhaustive()
    }
}

/// The read-only half of building our initiations: the host key and the wire. Cheap to clone;
/// a handshake thread keeps one.
#[derive(Clone)]
pub struct Initiator {
    host: HostKey,
    wire: Wire,
}

sealink_crypto::debug_showing!(Initiator { wire });

impl Initiator {
    /// The public-key work of a reserved initiation (an ephemeral key and two X25519
    /// operations), with no access to the tunnel's state.
    pub fn build(&self, job: InitJob) -> BuiltInit {
        let InitJob {
            pi,
            remote,
            local,
            kind,
        } = job;
        let built = match (kind, self.wire) {
            (InitKind::Sealink(payload), Wire::Sealink) => {
                crate::handshake::write_init(&self.host, TUNNEL_PROLOGUE, &remote, local, &payload)
                    .map(|(hs, mut pkt)| {
                        // Zeroed room for the MACs, which the commit fills in.
                        pkt.resize(crate::handshake::INIT_LEN, 0);
                        (hs, pkt)
                    })
                    .map_err(|e| e.to_string())
            }
            (InitKind::Wg { psk, ts }, Wire::WireGuard) => {
                crate::handshake::wg::write_initiation_unmacked(
                    &self.host,
                    &remote,
                    &psk,
                    local,
                    &crate::handshake::wg::tai64n_of_nanos(ts),
                )
                .map(|(hs, m)| (hs, m.to_vec()))
            }
            _ => Err("initiation of the other wire".into()),
        };
        BuiltInit {
            pi,
            remote,
            local,
            built,
        }
    }
}

impl Tunnel {
    /// Whether [`Tunnel::start_handshake`] (reached from a data packet that needs a session or
    /// a rekey, a keepalive, a retry) builds the initiation at once, or only reserves it for
    /// the driver to build with no lock held ([`Tunnel::take_initiations`],
    /// [`Initiator::build`], [`Tunnel::initiation_commit`]): a hub whose sessions rekey
    /// together so never holds its lock for their public-key work. Off by default; a driver
    /// that turns it off runs [`Tunnel::finish_initiations`] for any still reserved.
    pub fn build_initiations_offpath(&mut self, on: bool) {
        self.offpath_inits = on;
    }

    /// The read-only half of building initiations, for a handshake thread.
    pub fn initiator(&self) -> Initiator {
        Initiator {
            host: self.host.clone(),
            wire: self.cfg.wire,
        }
    }

    /// Whether initiations wait to be built ([`Tunnel::take_initiations`]).
    pub fn has_initiations(&self) -> bool {
        !self.initiations.is_empty()
    }

    /// Moves the reserved initiations into `into`, oldest first.
    pub fn take_initiations(&mut self, into: &mut Vec<InitJob>) {
        into.append(&mut self.initiations);
    }

    /// Builds and commits every reserved initiation here, under whatever lock the caller holds:
    /// the serial reference of [`Initiator::build`] and [`Tunnel::initiation_commit`].
    pub fn finish_initiations(&mut self, now: Time) {
        let initiator = self.initiator();
        for job in std::mem::take(&mut self.initiations) {
            let built = initiator.build(job);
            let _ = self.initiation_commit(now, built);
        }
    }

    /// An initiation built by [`Initiator::build`] is sent (its MACs added with the cookie as
    /// it is now, queued for [`Tunnel::poll_transmit`]), unless it went stale meanwhile: the
    /// peer was removed, its reservation replaced or abandoned (a retry, a response), or a
    /// session arrived that needs no rekey while nothing waits for one. A stale one is dropped,
    /// its index freed, counted as `stale-handshake`.
    pub fn initiation_commit(&mut self, now: Time, b: BuiltInit) -> Result<PeerIndex, TunnelDrop> {
        let BuiltInit {
            pi,
            remote,
            local,
            built,
        } = b;
        let live = self.peers.get(pi).is_some_and(|p| {
            !p.removed
                && p.cfg.public_key == remote
                && p.handshake
                    .initiation
                    .as_ref()
                    .is_some_and(|i| i.local_index == local && i.hs.is_none())
        });
        if !live {
            return Err(self.count(DropReason::StaleHandshake.into()));
        }
        if self.needs_no_handshake(pi, now) {
            // The peer's own handshake gave us a session meanwhile: nothing to ask for.
            self.peers[pi].handshake.abandon(&mut self.indexes);
            return Err(self.count(DropReason::StaleHandshake.into()));
        }
        let (hs, pkt) = match built {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "cannot build tunnel handshake initiation");
                self.peers[pi].handshake.abandon(&mut self.indexes);
                return Err(self.count(DropReason::HandshakeFailed.into()));
            }
        };
        let Some(dest) = self.peers[pi].endpoint else {
            self.peers[pi].handshake.abandon(&mut self.indexes);
            return Err(self.count(TunnelDrop::NoEndpoint));
        };
        let p = &mut self.peers[pi];
        let Some(pkt) = p.handshake.fill(local, hs, pkt, now).map(<[u8]>::to_vec) else {
            // Not reached: checked above.
            return Err(self.count(DropReason::StaleHandshake.into()));
        };
        p.stats.handshakes_initiated += 1;
        p.note_sent(now);
        self.push_message(dest, pkt);
        // Its retry now counts from the send.
        self.hint_handshake = true;
        Ok(PeerIndex(pi))
    }
}
