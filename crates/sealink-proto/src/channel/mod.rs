//! One host-to-host channel: its sessions (current, previous, pending initiation), the
//! piggyback queue, reliable delivery (sequence numbers, acknowledgements, retransmission),
//! and the owner caches in both directions.

mod handshake;
mod recovery;
mod recv;
mod send;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use sealink_crypto::sign::SIGNATURE_LEN;

use crate::handshake::state::{Handshake, Initiation, Keys};
use crate::inflight::{Inflight, OutRun};
use crate::owner::RemoteOwner;
use crate::recv_window::RecvWindow;
use crate::send_arena::SendArena;
use crate::session::{IndexTable, Limits, Session};
use crate::shared::{PeerId, Shared};
use crate::time::Time;
use crate::wire::{MAX_ACK_RANGES, RefuseReason};

/// Refusal notices a receiver keeps for its next acknowledgement; more in one burst are not
/// announced (the messages are still settled and counted).
const MAX_REFUSED_NOTICES: usize = 32;
/// Destination names a receiver learns per channel: an authenticated peer must not grow the
/// table without bound. Messages to further names are refused one by one (`unknown-owner-id`).
pub const MAX_DESTINATIONS: usize = 4096;

/// Sending-side state of a local owner on this channel.
struct TxOwner {
    wire_id: u64,
    sig: Option<[u8; SIGNATURE_LEN]>,
    /// The peer acknowledged a message from this owner, so it holds the introduction.
    confirmed: bool,
}

struct TxDest {
    name: Arc<str>,
    confirmed: bool,
}

/// Per-channel counters (the endpoint keeps the totals).
#[derive(Debug, Clone, Default)]
pub struct ChannelStats {
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
    pub messages_sent: u64,
    pub messages_delivered: u64,
    pub messages_retransmitted: u64,
    pub handshakes: u64,
}

pub(crate) struct Channel {
    pub peer: PeerId,
    pub remote_static: [u8; 32],
    /// Hash of the handshake that started this channel; owners sign over it.
    binding: Option<[u8; 32]>,
    pub current: Option<Session>,
    pub previous: Option<Session>,
    /// A responder session that a newer handshake replaced before the peer's first datagram on
    /// it arrived. The peer (its initiator) may already be sending on it: keep it to receive,
    /// and follow the peer to it if the newer one is still unconfirmed. Without it a handshake
    /// answered twice (a retried or crossing initiation) lost everything the peer sent on the
    /// first session (`unknown-index`).
    superseded: Option<Session>,
    /// `superseded` was installed after `current` (we followed the peer back to an older one).
    superseded_is_newer: bool,
    /// The initiator and responder state shared with the tunnel; its initiation under way
    /// makes the channel tentative until the response arrives.
    pub handshake: Handshake,
    /// The rekey initiation the last timeout replaced: its response may still be on its way (a
    /// slow or backlogged path), and is accepted as the current one's would be. Without it a
    /// path slower than the timeout refused every response as unexpected, and the rekey never
    /// completed.
    stale_initiation: Option<Box<Initiation>>,
    /// The binding carried by the initiation that started this channel when we answered it
    /// (not a first contact): what the peer held before it learned of this channel.
    started_by: Option<[u8; 32]>,
    /// An authenticated datagram from the peer arrived on this channel: it knows the channel.
    peer_heard: bool,
    pending_tx: VecDeque<Vec<u8>>,
    /// Send a datagram (a PING if nothing else) to confirm a session we initiated.
    confirm_pending: bool,
    pub stats: ChannelStats,

    // Sending.
    next_seq: u64,
    /// Messages not yet sent, as runs ([`OutRun`]); a run's `dest` is a wire id, and
    /// `tx_dests[dest - 1]` describes it.
    queue: VecDeque<OutRun>,
    queued_msgs: usize,
    /// What the queue's runs take on the wire (MSG_RUN headers and items).
    queued_bytes: usize,
    earliest_deadline: Option<Time>,
    flush: bool,
    inflight: Inflight,
    /// Sequence ranges `[start, end)` holding runs declared lost, in the order they were:
    /// retransmissions go out in this order.
    retx: VecDeque<(u64, u64)>,
    /// Transmissions in time order for loss detection: (when, first seq, count), each entry a
    /// run of consecutive sequence numbers sent at the same instant (a datagram's new messages
    /// make one entry, not one each).
    sent_log: VecDeque<(Time, u64, u32)>,
    largest_acked_sent: Option<Time>,
    /// When the retransmission timer last fired: the next firing is a timeout after it.
    probe_at: Option<Time>,
    /// Indexed by local owner index (dense and small).
    tx_owners: Vec<Option<TxOwner>>,
    next_owner_id: u64,
    /// Destinations named by our messages, wire id `i + 1` at index `i`: a message keeps the
    /// id, so sending and acknowledging it hash no name.
    tx_dests: Vec<TxDest>,
    tx_dest_ids: HashMap<Arc<str>, u64>,
    /// The wire id of the destination named last (a batch names one).
    last_dest: u64,
    /// The bytes of queued and in-flight messages.
    arena: SendArena,
    srtt: Option<Duration>,
    rttvar: Duration,
    backoff: u32,
    /// Retransmission timeouts in a row since the last acknowledgement or handshake.
    timeouts_since_handshake: u32,
    /// Highest cumulative point the peer acknowledged. Its receive window starts at or above
    /// it, so nothing is sent at or past `peer_cum + message_window`.
    peer_cum: u64,
    /// Messages were given up on below our window base that the peer has not yet settled:
    /// send an ABANDON frame at the next opportunity...
    abandon_now: bool,
    /// ...and again at this time unless an acknowledgement shows it arrived.
    abandon_due: Option<Time>,

    // Receiving.
    rx_owners: HashMap<u64, RemoteOwner>,
    rx_dests: HashMap<u64, Arc<str>>,
    recv: RecvWindow,
    ack_pending: bool,
    ack_now: bool,
    ack_deadline: Option<Time>,
    eliciting_since_ack: u32,
    /// Messages received since our last ACK: big piggybacked datagrams must not hold the
    /// acknowledgement of a sender's whole window until the delay timer.
    messages_since_ack: usize,
    ack_scratch: Vec<(u64, u64)>,
    /// Messages refused since our last acknowledgement, announced with it.
    refused_out: Vec<(u64, RefuseReason)>,
}

impl Channel {
    pub fn new(peer: PeerId, remote_static: [u8; 32]) -> Self {
        Channel {
            peer,
            remote_static,
            binding: None,
            current: None,
            previous: None,
            superseded: None,
            superseded_is_newer: false,
            handshake: Handshake::new(&remote_static),
            stale_initiation: None,
            started_by: None,
            peer_heard: false,
            pending_tx: VecDeque::new(),
            confirm_pending: false,
            stats: ChannelStats::default(),
            next_seq: 0,
            queue: VecDeque::new(),
            queued_msgs: 0,
            queued_bytes: 0,
            earliest_deadline: None,
            flush: false,
            inflight: Inflight::default(),
            retx: VecDeque::new(),
            sent_log: VecDeque::new(),
            largest_acked_sent: None,
            probe_at: None,
            tx_owners: Vec::new(),
            next_owner_id: 1,
            tx_dests: Vec::new(),
            tx_dest_ids: HashMap::new(),
            last_dest: 0,
            arena: SendArena::default(),
            srtt: None,
            rttvar: Duration::ZERO,
            backoff: 0,
            timeouts_since_handshake: 0,
            peer_cum: 0,
            abandon_now: false,
            abandon_due: None,
            rx_owners: HashMap::new(),
            rx_dests: HashMap::new(),
            recv: RecvWindow::default(),
            ack_pending: false,
            ack_now: false,
            ack_deadline: None,
            eliciting_since_ack: 0,
            messages_since_ack: 0,
            ack_scratch: Vec::with_capacity(MAX_ACK_RANGES),
            refused_out: Vec::new(),
        }
    }

    /// Established with a session we may still send on.
    pub fn is_established(&self, sh: &Shared, now: Time) -> bool {
        self.send_session_index(sh, now).is_some()
    }

    /// Which session to send on: the current one once confirmed, else the previous one.
    /// `Some(true)` = current, `Some(false)` = previous.
    fn send_session_index(&self, sh: &Shared, now: Time) -> Option<bool> {
        let ok = |s: &Option<Session>| {
            s.as_ref()
                .is_some_and(|s| s.confirmed_at.is_some() && sendable(s, sh, now))
        };
        if ok(&self.current) {
            Some(true)
        } else if ok(&self.previous) {
            Some(false)
        } else {
            None
        }
    }

    fn send_session(&mut self, sh: &Shared, now: Time) -> Option<&mut Session> {
        match self.send_session_index(sh, now)? {
            true => self.current.as_mut(),
            false => self.previous.as_mut(),
        }
    }

    /// A responder session not yet confirmed, younger than a handshake timeout: wait for it.
    fn awaiting_confirmation(&self, sh: &Shared, now: Time) -> bool {
        self.current.as_ref().is_some_and(|s| {
            s.confirmed_at.is_none()
                && now.saturating_since(s.established) < self.handshake_timeout(sh)
        })
    }

    pub fn queued_messages(&self) -> usize {
        self.queued_msgs
    }
    pub fn inflight_messages(&self) -> usize {
        self.inflight.len()
    }
    pub fn send_buffer_bytes(&self) -> usize {
        self.arena.bytes_reserved()
    }

    // ---------------------------------------------------------------- sending

    pub fn poll_timeout(&self, sh: &Shared) -> Option<Time> {
        let mut t: Option<Time> = None;
        let mut at = |x: Time| t = Some(t.map_or(x, |y| y.min(x)));
        if let Some(i) = &self.handshake.initiation {
            at(i.sent_at + self.handshake_timeout(sh));
        }
        if !self.flush {
            if let Some(d) = self.earliest_deadline {
                at(d);
            }
        }
        if self.ack_pending && !self.ack_now {
            if let Some(d) = self.ack_deadline {
                at(d);
            }
        }
        if let Some(d) = self.abandon_due {
            at(d);
        }
        if let Some(&(ts, _, _)) = self.sent_log.front() {
            at(self.probe_at.map_or(ts, |p| p.max(ts)) + self.rto(sh));
            if self.largest_acked_sent.is_some_and(|la| ts < la) {
                at(ts + self.reorder_threshold(sh));
            }
        }
        if let Some(cur) = &self.current {
            if let Some(c) = cur.confirmed_at {
                if self.previous.is_some() || self.superseded.is_some() {
                    at(c + sh.cfg.keep_previous);
                }
            }
        }
        // Waiting for a responder session's confirmation with nothing else to send on: if it
        // does not come within a handshake timeout, we initiate ourselves.
        let previous_usable = self
            .previous
            .as_ref()
            .is_some_and(|p| p.confirmed_at.is_some());
        if let Some(cur) = &self.current {
            if cur.confirmed_at.is_none()
                && !previous_usable
                && self.handshake.initiation.is_none()
                && (!self.queue.is_empty() || !self.retx.is_empty())
            {
                at(cur.established + self.handshake_timeout(sh));
            }
        }
        t
    }

    pub fn handle_timeout(&mut self, sh: &mut Shared, idx: &mut IndexTable, now: Time) {
        if let Some(i) = &self.handshake.initiation {
            if now >= i.sent_at + self.handshake_timeout(sh) {
                let attempts = i.attempts;
                // A rekey keeps it for a late response (the one it replaces is given up). Not
                // a first contact: the responder starts a new channel for each fresh
                // initiation, and answering an older one would leave the two on different ones.
                self.drop_stale_initiation(idx);
                let replaced = self.handshake.initiation.take();
                if self.binding.is_some() {
                    self.stale_initiation = replaced;
                } else if let Some(i) = replaced {
                    idx.free(i.local_index);
                }
                if attempts >= sh.cfg.handshake_attempts {
                    self.drop_stale_initiation(idx);
                    self.give_up(sh);
                } else {
                    self.start_handshake(sh, idx, now, attempts + 1);
                }
            }
        }
        if self
            .current
            .as_ref()
            .and_then(|c| c.confirmed_at)
            .is_some_and(|c| now >= c + sh.cfg.keep_previous)
        {
            for old in [self.previous.take(), self.superseded.take()]
                .into_iter()
                .flatten()
            {
                idx.free(old.local_index);
            }
        }
        self.detect_losses(sh, now);
        if self.abandon_due.is_some_and(|d| d <= now) {
            // The ABANDON (or its acknowledgement) was lost: send it again, backing off as a
            // retransmission does. It counts as one: with the window held, it may be the only
            // thing that can notice that the peer lost our session.
            self.abandon_due = None;
            if self.abandon_needed() {
                self.abandon_now = true;
                self.backoff = self.backoff.saturating_add(1);
                self.timeouts_since_handshake += 1;
            }
        }
        // Several timeouts in a row with nothing acknowledged: the peer may have lost our
        // session (a restart). A fresh handshake either continues the channel or, if the peer
        // no longer knows it, starts a new one and everything pending is sent again.
        // (The retransmission backoff is kept: the peer may simply be on a lossy path.)
        if self.timeouts_since_handshake >= 3
            && (!self.inflight.is_empty() || self.abandon_needed())
            && self.handshake.initiation.is_none()
        {
            self.timeouts_since_handshake = 0;
            self.start_handshake(sh, idx, now, 1);
        }
        if !self.flush && self.earliest_deadline.is_some_and(|d| d <= now) {
            self.flush = true;
        }
        if self.ack_pending && self.ack_deadline.is_some_and(|d| d <= now) {
            self.ack_now = true;
        }
        if !self.queue.is_empty() || !self.retx.is_empty() {
            self.ensure_session(sh, idx, now);
        }
    }
}

fn limits(sh: &Shared) -> Limits {
    sh.cfg.limits
}

fn sendable(s: &Session, sh: &Shared, now: Time) -> bool {
    s.sendable(&limits(sh), now)
}

fn wants_rekey(s: &Session, sh: &Shared, now: Time) -> bool {
    s.wants_rekey(&limits(sh), now)
}

fn keys(sh: &Shared) -> Keys<'static> {
    Keys {
        label: b"data",
        allow_legacy: sh.cfg.allow_insecure_legacy,
    }
}
