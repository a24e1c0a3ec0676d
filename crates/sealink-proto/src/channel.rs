//! One host-to-host channel: its sessions (current, previous, pending initiation), the
//! piggyback queue, reliable delivery (sequence numbers, acknowledgements, retransmission),
//! and the owner caches in both directions.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use smallvec::SmallVec;

use sealink_crypto::Scope;
use sealink_crypto::sign::{self, SIGNATURE_LEN};
use sealink_crypto::suite::TAG_LEN;

use crate::config::Urgency;
use crate::error::DropReason;
use crate::handshake::{self, InitPayload};
use crate::inflight::{Inflight, OutRun};
use crate::lifecycle::{Handshake, InitiateError, Initiation, Keys};
use crate::owner::{RemoteOwner, intro_message};
use crate::recv_window::RecvWindow;
use crate::send_arena::{SendArena, Slot};
use crate::session::{IndexTable, Limits, OpenJob, SealJob, Session};
use crate::shared::{Event, MessageId, Messages, Outgoing, PeerId, Shared};
use crate::time::Time;
use crate::wire::{self, Frame, Frames, HEADER_LEN, MAX_ACK_RANGES, RefuseReason, Writer};

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
    stale_initiation: Option<Initiation>,
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

    /// How long an initiation waits for its response: the configured timeout, or longer once
    /// the channel has measured a round trip that needs it. A rekey on a backlogged channel
    /// waits behind the queued datagrams on both hosts; with a fixed 1 s timeout each retry
    /// replaced the initiation whose response was on its way (refused as unexpected), and the
    /// rekey never completed (found by `sealink-lab bench adp` on the 1987 profile).
    fn rtt_sample(&mut self, sample: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(sample);
                self.rttvar = sample / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(sample);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((srtt * 7 + sample) / 8);
            }
        }
    }

    fn drop_stale_initiation(&mut self, idx: &mut IndexTable) {
        if let Some(old) = self.stale_initiation.take() {
            idx.free(old.local_index);
        }
    }

    fn handshake_timeout(&self, sh: &Shared) -> Duration {
        let fixed = sh.cfg.handshake_timeout;
        self.srtt
            .map_or(fixed, |srtt| fixed.max(srtt * 2 + self.rttvar * 4))
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

    /// The wire ids of owner `from` and destination `to` (numbered on first use): looked up
    /// once for a batch of messages that share them.
    pub fn wire_ids(&mut self, from: usize, to: Option<&str>) -> (u64, u64) {
        let owner_wire = self.tx_owner(from).wire_id;
        (owner_wire, to.map_or(0, |d| self.tx_dest(d)))
    }

    /// Queues a batch of checked messages from local owner `from` (wire id `owner_wire`) to
    /// destination wire id `dest`, numbered from `first`; the caller runs
    /// [`Channel::ensure_session`] once after. A message that continues the queue's last run
    /// (same scope, next id, bytes adjacent in the arena) joins it, so a batch is one run and
    /// costs its bytes plus a few comparisons per message; deadlines and the flush decision
    /// are settled once per batch.
    #[allow(clippy::too_many_arguments)]
    pub fn push_batch(
        &mut self,
        sh: &Shared,
        now: Time,
        first: MessageId,
        from: usize,
        owner_wire: u64,
        dest: u64,
        msgs: &[Outgoing<'_>],
    ) {
        // The batch's soonest deadline decides both: an urgent message is one due now.
        let default = now + sh.cfg.default_timeout;
        let soonest = msgs
            .iter()
            .map(|m| match m.urgency {
                Urgency::Urgent => now,
                Urgency::Deadline(d) => now + d,
                Urgency::Default => default,
            })
            .min();
        let urgent = soonest.is_some_and(|d| d <= now);
        let earliest = match (self.earliest_deadline, soonest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut k = 0;
        while k < msgs.len() {
            let id = first.0 + k as u64;
            let n = self.extend_last_run(id, from, dest, &msgs[k..]);
            if n > 0 {
                k += n;
                continue;
            }
            let m = &msgs[k];
            self.start_run(now, id, from, owner_wire, dest, m.data, m.scope);
            k += 1;
        }
        self.earliest_deadline = earliest;
        if urgent || !sh.cfg.piggyback || self.queued_bytes >= sh.cfg.queue_limit {
            self.flush = true;
        }
    }

    /// Appends the leading messages of `msgs` (ids from `id`) that continue the queue's last run
    /// (same owner, destination and scope, consecutive ids) to it, as many as its chunk takes;
    /// returns how many.
    fn extend_last_run(&mut self, id: u64, from: usize, dest: u64, msgs: &[Outgoing<'_>]) -> usize {
        let seq = self.next_seq;
        let Some(r) = self.queue.back_mut() else {
            return 0;
        };
        let scope = msgs[0].scope;
        if (r.from, r.dest, r.scope) != (from, dest, scope)
            || r.id + u64::from(r.count) != id
            || r.end() != seq
        {
            return 0;
        }
        let most = (u32::from(u16::MAX) - r.count.min(u32::from(u16::MAX))) as usize;
        let before = r.data.len();
        let same = msgs.iter().take(most).take_while(|m| m.scope == scope);
        let n = self.arena.extend_items(&mut r.data, same.map(|m| m.data));
        // Still equal-sized: every message has the one length whose item is `r.item` bytes.
        if r.item != 0
            && wire::run_item_data_len(r.item as usize)
                .is_none_or(|l| msgs[..n].iter().any(|m| m.data.len() != l))
        {
            r.item = 0;
        }
        r.count += n as u32;
        self.queued_bytes += r.data.len() - before;
        self.next_seq += n as u64;
        self.queued_msgs += n;
        n
    }

    /// Starts a run with one message (the queue's last run could not take it:
    /// [`Channel::extend_last_run`] tried first).
    #[allow(clippy::too_many_arguments)]
    fn start_run(
        &mut self,
        now: Time,
        id: u64,
        from: usize,
        owner_wire: u64,
        dest: u64,
        data: &[u8],
        scope: Scope,
    ) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queued_msgs += 1;
        let data = self.arena.push_item(data);
        self.queued_bytes += wire::msg_run_header_len(seq, owner_wire, dest) + data.len();
        self.queue.push_back(OutRun {
            seq,
            id,
            count: 1,
            from,
            dest,
            scope,
            data,
            item: data.len() as u32,
            last_sent: now,
            transmissions: 0,
            lost: false,
        });
    }

    fn tx_owner(&mut self, from: usize) -> &mut TxOwner {
        if from >= self.tx_owners.len() {
            self.tx_owners.resize_with(from + 1, || None);
        }
        let next = &mut self.next_owner_id;
        self.tx_owners[from].get_or_insert_with(|| {
            let wire_id = *next;
            *next += 1;
            TxOwner {
                wire_id,
                sig: None,
                confirmed: false,
            }
        })
    }

    /// The wire id of destination `name`, numbered on first use.
    fn tx_dest(&mut self, name: &str) -> u64 {
        if self.last_dest != 0 && *self.tx_dests[self.last_dest as usize - 1].name == *name {
            return self.last_dest;
        }
        let id = match self.tx_dest_ids.get(name) {
            Some(&id) => id,
            None => {
                let name: Arc<str> = Arc::from(name);
                self.tx_dests.push(TxDest {
                    name: name.clone(),
                    confirmed: false,
                });
                let id = self.tx_dests.len() as u64;
                self.tx_dest_ids.insert(name, id);
                id
            }
        };
        self.last_dest = id;
        id
    }

    /// The destination with wire id `id` (0: none).
    fn dest_mut(dests: &mut [TxDest], id: u64) -> Option<&mut TxDest> {
        dests.get_mut(usize::try_from(id).ok()?.checked_sub(1)?)
    }

    /// Starts a handshake if we have nothing to send on and none is under way.
    pub fn ensure_session(&mut self, sh: &mut Shared, idx: &mut IndexTable, now: Time) {
        let needs = match self.send_session_index(sh, now) {
            None => !self.awaiting_confirmation(sh, now),
            Some(cur) => {
                let s = if cur { &self.current } else { &self.previous };
                s.as_ref().is_some_and(|s| wants_rekey(s, sh, now))
                    && !self.awaiting_confirmation(sh, now)
            }
        };
        if needs && self.handshake.initiation.is_none() {
            self.start_handshake(sh, idx, now, 1);
        }
    }

    fn start_handshake(&mut self, sh: &mut Shared, idx: &mut IndexTable, now: Time, attempt: u32) {
        let payload = InitPayload {
            suite: sh.cfg.suite as u8,
            flags: 0,
            timestamp: 0,
            binding: self.binding.unwrap_or([0; 32]),
        };
        match self.handshake.initiate(
            &sh.host,
            handshake::PROLOGUE,
            &self.remote_static,
            payload,
            idx,
            self.peer.0,
            now,
            attempt,
        ) {
            Ok(pkt) => {
                sh.stats.pk.dh += 2;
                sh.stats.handshakes_initiated += 1;
                self.pending_tx.push_back(pkt.to_vec());
            }
            Err(InitiateError::DegenerateKey) => {
                // No handshake can ever succeed with this key: fail now, not after every retry.
                tracing::warn!(
                    peer = self.peer.0,
                    "peer's public key is a small-order point"
                );
                self.give_up(sh);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot build handshake initiation");
            }
        }
    }

    /// Next datagram for this channel, written into `out`.
    pub fn poll_transmit(
        &mut self,
        sh: &mut Shared,
        idx: &mut IndexTable,
        now: Time,
        out: &mut [u8],
        defer: bool,
    ) -> Option<(usize, Option<SealJob>)> {
        while let Some(pkt) = self.pending_tx.pop_front() {
            if let Some(dst) = out.get_mut(..pkt.len()) {
                dst.copy_from_slice(&pkt);
                self.count_sent(sh, pkt.len());
                return Some((pkt.len(), None));
            }
            tracing::warn!("transmit buffer too small for a handshake datagram");
        }
        if !self.is_established(sh, now) {
            return None;
        }
        let want_data = self.flush && self.has_sendable_messages(sh);
        let want_ack = self.ack_pending && self.ack_now;
        if self.abandon_now && !self.abandon_needed() {
            self.abandon_now = false;
        }
        if !want_data && !want_ack && !self.confirm_pending && !self.abandon_wanted() {
            if self.flush && self.queue.is_empty() && self.retx.is_empty() {
                self.flush = false;
                self.earliest_deadline = None;
            }
            return None;
        }
        let (n, job) = self.build_data(sh, now, out, defer)?;
        self.count_sent(sh, n);
        self.ensure_session(sh, idx, now);
        Some((n, job))
    }

    fn count_sent(&mut self, sh: &mut Shared, n: usize) {
        sh.stats.datagrams_sent += 1;
        sh.stats.bytes_sent += n as u64;
        self.stats.datagrams_sent += 1;
    }

    fn window_base(&self) -> u64 {
        self.inflight
            .first_seq()
            .or_else(|| self.queue.front().map(|r| r.seq))
            .unwrap_or(self.next_seq)
    }

    /// Where the peer's receive window starts at the least: its acknowledged cumulative point.
    /// (Below our base once we gave messages up that it has not yet settled.)
    fn window_anchor(&self) -> u64 {
        self.window_base().min(self.peer_cum)
    }

    /// Messages we gave up on lie between the peer's cumulative point and our base: it must
    /// be told (ABANDON), or its window would stay at the hole.
    fn abandon_needed(&self) -> bool {
        self.window_base() > self.peer_cum
    }

    /// An ABANDON must leave now: the peer is owed one, no retransmission timer runs for it,
    /// and there is a reason to send (just given up on something, or messages wait, perhaps
    /// for the very window that the ABANDON frees).
    fn abandon_wanted(&self) -> bool {
        self.abandon_needed()
            && self.abandon_due.is_none()
            && (self.abandon_now || !self.queue.is_empty())
    }

    /// The sender keeps at most `message_window` sequence numbers outstanding counted from the
    /// peer's acknowledged cumulative point, so whatever it sends falls inside the receiver's
    /// window (anchored at its own cumulative point, which is never below the acknowledged
    /// one). A message given up on holds the window until the peer acknowledges the ABANDON
    /// that settles it.
    fn queue_front_in_window(&self, sh: &Shared) -> bool {
        self.window_room(sh) > 0
    }

    /// How many of the queue's first messages the window lets us send now.
    fn window_room(&self, sh: &Shared) -> u64 {
        self.queue.front().map_or(0, |r| {
            (self.window_anchor() + sh.cfg.message_window).saturating_sub(r.seq)
        })
    }

    fn has_sendable_messages(&self, sh: &Shared) -> bool {
        self.inflight.has_lost() || self.queue_front_in_window(sh)
    }

    /// Builds and seals one data datagram: a pending ACK, then retransmissions, then queued
    /// messages in order, each preceded by the owner introduction and destination declaration
    /// the peer may still lack. One seal, however many messages ride in it.
    ///
    /// With `defer`, an AEAD datagram is left unsealed (header room and body written, counter
    /// taken) and its [`SealJob`] returned with the length it will have once sealed, so that the
    /// caller can seal it outside its lock; legacy suites are always sealed here.
    fn build_data(
        &mut self,
        sh: &mut Shared,
        now: Time,
        out: &mut [u8],
        defer: bool,
    ) -> Option<(usize, Option<SealJob>)> {
        let max_len = sh.cfg.max_datagram.min(out.len());
        let overhead = self.send_session(sh, now)?.suite.max_overhead();
        let body_cap = max_len.checked_sub(HEADER_LEN + overhead)?;
        let mut scope: Option<Scope> = None;
        let mut messages = 0u64;
        let mut wrote = false;
        let body_len;
        {
            let mut w = Writer::new(&mut out[HEADER_LEN..HEADER_LEN + body_cap]);
            if self.ack_pending {
                self.recv
                    .newest_ranges(MAX_ACK_RANGES, &mut self.ack_scratch);
                let cum = self.recv.cumulative();
                let ack_len = wire::ack_len(cum, &self.ack_scratch);
                // Refusal notices go before the acknowledgement that settles their messages,
                // so the sender reads them first. Best effort: one that does not fit, or whose
                // datagram is lost, leaves the sender counting the message as delivered (a
                // duplicate of it is refused and announced again).
                for (seq, reason) in self.refused_out.drain(..) {
                    if wire::refused_len(seq) + ack_len <= w.remaining() {
                        wire::write_refused(&mut w, seq, reason)?;
                    }
                }
                if ack_len <= w.remaining() {
                    wire::write_ack(&mut w, cum, &self.ack_scratch)?;
                    self.ack_pending = false;
                    self.ack_now = false;
                    self.ack_deadline = None;
                    self.eliciting_since_ack = 0;
                    self.messages_since_ack = 0;
                    wrote = true;
                }
            }
            // Before any message, so the receiver moves its window first. Carried by every
            // datagram until acknowledged, and alone on its own timer.
            if self.abandon_needed() {
                let below = self.window_base();
                if wire::abandon_len(below) <= w.remaining() {
                    wire::write_abandon(&mut w, below)?;
                    self.abandon_now = false;
                    self.abandon_due = Some(now + self.rto(sh));
                    wrote = true;
                }
            }
            if self.flush {
                let mut intros: Vec<u64> = Vec::new();
                let mut dests: Vec<u64> = Vec::new();
                // Each pass writes as much of a run as fits (the rest stays, split off),
                // retransmissions first. A run's messages are already encoded as MSG_RUN items,
                // so its bytes go in with one copy; a run that continues the MSG_RUN just
                // written (same owner and destination, next seq) extends it, so that a
                // datagram of one owner's traffic has one header, and equal-sized datagrams
                // (one GSO call) whatever batches their messages were queued in.
                // The open MSG_RUN: where its count lies, owner, destination, next seq, count.
                let mut open: Option<(usize, usize, u64, u64, u16)> = None;
                // The last MSG_RUN begun: where it starts, its first seq, owner and destination
                // wire ids, and its items in the arena (a datagram with one message is
                // rewritten as MSG_FIXED below).
                let mut last_run: Option<(usize, u64, u64, u64, Slot, usize)> = None;
                loop {
                    // Retransmissions first: the first run still lost in the oldest range.
                    let mut lost = None;
                    while let Some(&(s, e)) = self.retx.front() {
                        match self.inflight.first_lost_in(s, e) {
                            Some(i) => {
                                lost = Some(i);
                                break;
                            }
                            None => {
                                self.retx.pop_front();
                            }
                        }
                    }
                    let room = match lost {
                        Some(_) => u64::MAX,
                        None => self.window_room(sh),
                    };
                    let r = match lost {
                        Some(i) => self.inflight.run(i),
                        None if room > 0 => match self.queue.front() {
                            Some(r) => r,
                            None => break,
                        },
                        None => break,
                    };
                    let (seq, count, from, dest_wire, rscope, slot, item) =
                        (r.seq, r.count, r.from, r.dest, r.scope, r.data, r.item);
                    let owner = self.tx_owners.get(from)?.as_ref()?;
                    let owner_wire = owner.wire_id;
                    let need_intro = !owner.confirmed && !intros.contains(&owner_wire);
                    let to = match dest_wire {
                        0 => None,
                        d => Some(
                            self.tx_dests
                                .get(usize::try_from(d).ok()?.checked_sub(1)?)?,
                        ),
                    };
                    let need_dest = to.is_some_and(|t| !t.confirmed && !dests.contains(&dest_wire));
                    // The name only when this datagram declares it.
                    let to = if need_dest {
                        to.map(|t| t.name.clone())
                    } else {
                        None
                    };
                    // (Never with an introduction or declaration to write first: those
                    // were written before the open run's first message, which shares them.)
                    let continues = !need_intro
                        && to.is_none()
                        && open.is_some_and(|(_, f, d, next, n)| {
                            (f, d, next) == (from, dest_wire, seq) && n < u16::MAX
                        });
                    let mut fixed = if continues {
                        0
                    } else {
                        wire::msg_run_header_len(seq, owner_wire, dest_wire)
                    };
                    if need_intro {
                        fixed += wire::owner_intro_len(owner_wire, &sh.owners.get(from)?.name);
                    }
                    if let Some(d) = &to {
                        fixed += wire::dest_len(dest_wire, d);
                    }
                    // Without piggybacking each message has a datagram of its own.
                    let in_frame = open.filter(|_| continues).map_or(0, |(.., n)| n);
                    let most = if sh.cfg.piggyback {
                        u64::from(count)
                            .min(room)
                            .min(u64::from(u16::MAX - in_frame))
                    } else {
                        1
                    };
                    let (k, nbytes) = match w.remaining().checked_sub(fixed) {
                        // The whole run fits: no need to walk its messages.
                        Some(cap) if slot.len() <= cap && most == u64::from(count) => {
                            (count as usize, slot.len())
                        }
                        Some(cap) => crate::inflight::items_fitting(
                            &self.arena,
                            slot,
                            item,
                            count,
                            most as usize,
                            cap,
                        ),
                        None => (0, 0),
                    };
                    if k == 0 {
                        break;
                    }
                    let k32 = k as u32;
                    if !continues {
                        if let Some((at, .., n)) = open.take() {
                            wire::set_run_count(&mut w, at, n)?;
                        }
                    }
                    if need_intro {
                        let sig = self.owner_signature(sh, from)?;
                        let owner_name = &sh.owners.get(from)?.name;
                        wire::write_owner_intro(&mut w, owner_wire, owner_name, &sig)?;
                        intros.push(owner_wire);
                    }
                    if let Some(d) = &to {
                        wire::write_dest(&mut w, dest_wire, d)?;
                        dests.push(dest_wire);
                    }
                    if !continues {
                        last_run = Some((w.pos(), seq, owner_wire, dest_wire, slot, nbytes));
                        let at = wire::write_msg_run_header(&mut w, seq, owner_wire, dest_wire)?;
                        open = Some((at, from, dest_wire, seq, 0));
                    }
                    w.bytes(&self.arena.get(slot)[..nbytes])?;
                    if let Some((_, _, _, next, n)) = &mut open {
                        *next += k as u64;
                        *n += k as u16;
                    }
                    match lost {
                        Some(i) => {
                            if k32 < count {
                                self.inflight.split_at(&mut self.arena, i, k32, nbytes);
                            }
                            self.inflight.sent(i, now);
                            sh.stats.messages_retransmitted += k as u64;
                            self.stats.messages_retransmitted += k as u64;
                        }
                        None => {
                            self.queued_bytes = self.queued_bytes.saturating_sub(
                                wire::msg_run_header_len(seq, owner_wire, dest_wire) + slot.len(),
                            );
                            let mut r = if k32 < count {
                                // The rest stays in place, at the queue's front.
                                let front = self.queue.front_mut()?;
                                let head = front.split_head(&mut self.arena, k32, nbytes);
                                self.queued_bytes +=
                                    wire::msg_run_header_len(front.seq, owner_wire, dest_wire)
                                        + front.data.len();
                                head
                            } else {
                                self.queue.pop_front()?
                            };
                            self.queued_msgs -= k;
                            r.last_sent = now;
                            r.transmissions = 1;
                            self.inflight.push(r);
                            sh.stats.messages_sent += k as u64;
                            self.stats.messages_sent += k as u64;
                        }
                    }
                    match self.sent_log.back_mut() {
                        Some((t, first, n)) if *t == now && *first + u64::from(*n) == seq => {
                            *n += k32;
                        }
                        _ => self.sent_log.push_back((now, seq, k32)),
                    }
                    scope = Some(scope.map_or(rscope, |s| s.max(rscope)));
                    messages += k as u64;
                    wrote = true;
                    if !sh.cfg.piggyback {
                        break;
                    }
                }
                if let Some((at, .., n)) = open {
                    wire::set_run_count(&mut w, at, n)?;
                }
                // A datagram's only message leaves as MSG_FIXED when its fields fit (and the
                // datagram has room for its header): the receiver reads it with no varint and
                // without a PADDING frame after it (RESULTS §34). Any other datagram keeps its
                // MSG_RUNs. Its run, the last thing written, is rewritten in place, the
                // message copied again from the arena, which still holds it.
                if messages == 1 {
                    if let Some((start, seq, from, to, slot, nbytes)) = last_run {
                        let item = &self.arena.get(slot)[..nbytes];
                        if let Some(data) = wire::run_item_message(item) {
                            wire::one_run_as_fixed(&mut w, start, seq, from, to, data);
                        }
                    }
                }
                if self.queue.is_empty() && self.retx.is_empty() {
                    self.flush = false;
                    self.earliest_deadline = None;
                }
            }
            if self.confirm_pending && !wrote {
                w.u8(wire::FRAME_PING)?;
                wrote = true;
            }
            self.confirm_pending = false;
            if !wrote {
                return None;
            }
            if scope == Some(Scope::Encrypt) {
                wire::pad_to_block(&mut w);
            }
            body_len = w.pos();
        }
        // Datagrams with only acknowledgements are authenticated, not encrypted: they carry
        // sequence numbers only.
        let scope = scope.unwrap_or(Scope::AuthOnly);
        let s = self.send_session(sh, now)?;
        let job = s.reserve_seal(scope, body_len);
        let deferred = (defer && !s.suite.is_legacy()).then(|| {
            let tag = if scope == Scope::None { 0 } else { TAG_LEN };
            HEADER_LEN + body_len + tag
        });
        let (len, job) = match deferred {
            Some(len) => (len, Some(job)),
            None => match job.seal(&mut out[..max_len]) {
                Ok(n) => (n, None),
                Err(e) => {
                    tracing::error!(reason = %e, "seal failed");
                    return None;
                }
            },
        };
        if messages > 0 {
            sh.stats.data_datagrams_sent += 1;
        } else {
            sh.stats.ack_only_datagrams_sent += 1;
        }
        Some((len, job))
    }

    /// The owner's signature over this channel's binding, made once per channel.
    fn owner_signature(&mut self, sh: &mut Shared, from: usize) -> Option<[u8; SIGNATURE_LEN]> {
        let binding = self.binding?;
        let owner = self.tx_owners.get_mut(from)?.as_mut()?;
        if let Some(sig) = owner.sig {
            return Some(sig);
        }
        let local = sh.owners.get(from)?;
        let msg = intro_message(
            &binding,
            sh.host.public(),
            &self.remote_static,
            owner.wire_id,
            &local.name,
        );
        let sig = local.key.sign(&msg);
        sh.stats.pk.signs += 1;
        owner.sig = Some(sig);
        Some(sig)
    }

    // ---------------------------------------------------------------- handshakes

    /// A peer's initiation, already decrypted and attributed to this channel.
    pub fn accept_init(
        &mut self,
        sh: &mut Shared,
        idx: &mut IndexTable,
        now: Time,
        hs: snow::HandshakeState,
        sender_index: u32,
        payload: InitPayload,
    ) -> Result<(), DropReason> {
        // The initiation is authentic (Noise IK authenticates the initiator's static key); a
        // fresh one's timestamp is recorded now, so a replay of it is refused whatever we decide.
        let cfg = &sh.cfg;
        let suite = self.handshake.check_init(&payload, |s| {
            cfg.accept_suites.contains(&s) && (!s.is_legacy() || cfg.allow_insecure_legacy)
        })?;
        // An initiation carrying the binding the peer held before this channel started, from a
        // peer that has since sent on this channel, was made before the peer learned of it (a
        // crossing handshake outdated it; no restart gives an old binding back, a restart
        // gives zeros). Answering it would start a spurious new channel and renumber, and what
        // was delivered but not yet acknowledged would be delivered again.
        if self.peer_heard
            && self.started_by == Some(payload.binding)
            && self.binding != Some(payload.binding)
        {
            return Err(DropReason::StaleHandshake);
        }
        if let Some(init) = &self.handshake.initiation {
            // Both sides opened at once: the greater static key wins, as ADP's greater name
            // chooses the key. The winner ignores the other's initiation; the loser abandons its
            // own and answers.
            if sh.host.public() > &self.remote_static {
                // The loser answers ours only if it arrives: it may have been lost, or never
                // sent (a driver that did not know the peer's address yet). Send it again now;
                // `Ok` lets the driver learn the address this authentic initiation came from.
                // Costs nothing when ours did arrive: the loser refuses the copy as stale.
                sh.stats.drop(DropReason::HandshakeCollision);
                self.pending_tx.push_back(init.packet.clone());
                return Ok(());
            }
            self.handshake.abandon(idx);
        }
        self.drop_stale_initiation(idx);
        let continues = self.binding.is_some_and(|b| b == payload.binding);
        let answered = self.handshake.respond(
            hs,
            idx,
            self.peer.0,
            sender_index,
            suite,
            continues,
            false,
            keys(sh),
            now,
        );
        let answered = answered?;
        sh.stats.pk.dh += 2;
        self.pending_tx.push_back(answered.packet);
        self.install(sh, idx, answered.session, continues, answered.hash);
        if !continues {
            self.started_by = (payload.binding != [0; 32]).then_some(payload.binding);
        }
        Ok(())
    }

    /// The response to our initiation.
    pub fn accept_response(
        &mut self,
        sh: &mut Shared,
        idx: &mut IndexTable,
        now: Time,
        local_index: u32,
        sender_index: u32,
        pkt: &[u8],
    ) -> Result<(), DropReason> {
        let init = match (&mut self.handshake.initiation, &mut self.stale_initiation) {
            (Some(i), _) | (_, Some(i)) if i.local_index == local_index => i,
            _ => return Err(DropReason::UnexpectedResponse),
        };
        // Each initiation is sent once (a retry is a new one): an unambiguous RTT sample, the
        // only one a path that grew slower than every retransmission timeout can give.
        let handshake_rtt = now.saturating_since(init.sent_at);
        let done = Handshake::complete(
            &mut self.handshake.last_ts_accepted,
            init,
            pkt,
            sh.cfg.suite,
            keys(sh),
            sender_index,
            now,
        )?;
        sh.stats.pk.dh += 2;
        let (continues, session, hash) = (done.continues, done.session, done.hash);
        // Whichever initiation this answered, the other is moot: free its index.
        for i in [
            self.handshake.initiation.take(),
            self.stale_initiation.take(),
        ]
        .into_iter()
        .flatten()
        {
            if i.local_index != local_index {
                idx.free(i.local_index);
            }
        }
        let continues = continues && self.binding.is_some();
        self.install(sh, idx, session, continues, hash);
        self.rtt_sample(handshake_rtt);
        Ok(())
    }

    /// A cookie reply to our initiation `local_index`: keep the cookie and, once per
    /// initiation, send the same initiation again with mac2 (the responder did not process it).
    pub fn accept_cookie(
        &mut self,
        now: Time,
        local_index: u32,
        pkt: &[u8],
    ) -> Result<(), DropReason> {
        if let Some(resend) = self.handshake.accept_cookie(now, local_index, pkt)? {
            self.pending_tx.push_back(resend.to_vec());
        }
        Ok(())
    }

    fn install(
        &mut self,
        sh: &mut Shared,
        idx: &mut IndexTable,
        session: Session,
        continues: bool,
        hash: [u8; 32],
    ) {
        sh.stats.handshakes_completed += 1;
        self.stats.handshakes += 1;
        if continues {
            // Keep one confirmed session to send on while the new one awaits confirmation; an
            // unconfirmed current one is superseded (kept to receive on).
            if self
                .current
                .as_ref()
                .is_some_and(|c| c.confirmed_at.is_none())
            {
                if let Some(old) = self.superseded.take() {
                    idx.free(old.local_index);
                }
                self.superseded = self.current.take();
                self.superseded_is_newer = false;
            } else {
                if let Some(old) = self.previous.take() {
                    idx.free(old.local_index);
                }
                self.previous = self.current.take();
            }
        } else {
            for old in [
                self.previous.take(),
                self.current.take(),
                self.superseded.take(),
            ]
            .into_iter()
            .flatten()
            {
                idx.free(old.local_index);
            }
            self.reset_for_new_channel();
            self.binding = Some(hash);
            sh.stats.channels_established += 1;
            sh.events.push_back(Event::ChannelUp { peer: self.peer });
        }
        if session.confirmed_at.is_some() {
            self.confirm_pending = true;
        }
        self.current = Some(session);
        if !self.queue.is_empty() || !self.retx.is_empty() {
            self.flush = true;
        }
    }

    /// The peer holds no state of this channel (first contact, or it restarted): forget what
    /// it was told and renumber what is still to be delivered.
    fn reset_for_new_channel(&mut self) {
        self.rx_owners.clear();
        self.rx_dests.clear();
        self.started_by = None;
        self.peer_heard = false;
        self.recv = RecvWindow::default();
        self.ack_pending = false;
        self.ack_now = false;
        self.ack_deadline = None;
        self.eliciting_since_ack = 0;
        self.messages_since_ack = 0;
        for o in self.tx_owners.iter_mut().flatten() {
            o.sig = None;
            o.confirmed = false;
        }
        for d in &mut self.tx_dests {
            d.confirmed = false;
        }
        let mut pending: Vec<OutRun> = self.inflight.take_all().collect();
        pending.extend(self.queue.drain(..));
        self.retx.clear();
        self.sent_log.clear();
        self.largest_acked_sent = None;
        self.probe_at = None;
        self.queued_bytes = 0;
        self.queued_msgs = 0;
        self.next_seq = 0;
        self.peer_cum = 0;
        self.abandon_now = false;
        self.abandon_due = None;
        self.refused_out.clear();
        for mut r in pending {
            // New channel, new messages: earlier attempts went to keys the peer no longer has.
            r.transmissions = 0;
            r.lost = false;
            r.seq = self.next_seq;
            self.next_seq += u64::from(r.count);
            let ow = self
                .tx_owners
                .get(r.from)
                .and_then(Option::as_ref)
                .map_or(1, |o| o.wire_id);
            self.queued_bytes += wire::msg_run_header_len(r.seq, ow, r.dest) + r.data.len();
            self.queued_msgs += r.count as usize;
            self.queue.push_back(r);
        }
    }

    // ---------------------------------------------------------------- receiving

    /// The serial first half of receiving: session, age and replay check (nothing recorded).
    pub fn reserve_data(
        &mut self,
        sh: &Shared,
        now: Time,
        scope: Scope,
        receiver: u32,
        counter: u64,
    ) -> Result<OpenJob, DropReason> {
        let session = self.session_mut(receiver).ok_or(DropReason::UnknownIndex)?;
        if session.expired(&limits(sh), now) {
            return Err(DropReason::SessionExpired);
        }
        session.reserve_open(scope, counter, sh.cfg.insecure_lab_plaintext)
    }

    /// The serial second half, in arrival order: records the counter (refusing a duplicate
    /// opened in parallel), confirms the session, and processes the frames.
    pub fn finish_data(
        &mut self,
        sh: &mut Shared,
        now: Time,
        job: &OpenJob,
        opened: Result<Range<usize>, DropReason>,
        buf: &[u8],
    ) -> Result<(), DropReason> {
        let body = opened?;
        let session = self
            .session_mut(job.local_index())
            .ok_or(DropReason::UnknownIndex)?;
        let was_confirmed = session.confirmed_at.is_some();
        session.accept(job.counter())?;
        if !was_confirmed {
            session.confirmed_at = Some(now);
            if !self.queue.is_empty() || !self.retx.is_empty() {
                self.flush = true;
            }
        }
        self.follow_superseded(job.local_index());
        self.stats.datagrams_received += 1;
        self.peer_heard = true;
        // An authenticated datagram from the peer shows the path carries traffic again: our
        // timer must not stay backed off to a minute (6 doublings) because of an outage that
        // is over. Without this a sender whose window was full when the link healed sent
        // nothing for up to a minute (found by the wedge proptest). While the path is dark
        // nothing arrives, so the backoff still grows; on a one-way path retransmissions are
        // clocked by the peer's datagrams, one round per retransmission timeout at most.
        self.backoff = 0;
        self.process_frames(sh, now, job.scope(), &buf[body])
    }

    /// The peer sent on the superseded session. The peer initiated it, and sends on the newest
    /// session it completed: if that is this one (the current one is unconfirmed: the peer
    /// never completed it, or has not yet sent on it; or this one is the newer), send where the
    /// peer sends. The other stays receivable, and wins in turn if the peer moves to it.
    fn follow_superseded(&mut self, local_index: u32) {
        let heard_on_superseded = self
            .superseded
            .as_ref()
            .is_some_and(|s| s.local_index == local_index);
        let current_unconfirmed = self
            .current
            .as_ref()
            .is_some_and(|c| c.confirmed_at.is_none());
        if heard_on_superseded && (current_unconfirmed || self.superseded_is_newer) {
            std::mem::swap(&mut self.current, &mut self.superseded);
            self.superseded_is_newer = !self.superseded_is_newer;
        }
    }

    fn session_mut(&mut self, local_index: u32) -> Option<&mut Session> {
        [&mut self.current, &mut self.previous, &mut self.superseded]
            .into_iter()
            .flatten()
            .find(|s| s.local_index == local_index)
    }

    fn process_frames(
        &mut self,
        sh: &mut Shared,
        now: Time,
        scope: Scope,
        body: &[u8],
    ) -> Result<(), DropReason> {
        // Pass 1: parse everything (a frame that does not parse refuses the whole datagram: no
        // correct peer sends one) and learn the owner introductions (verified once, then
        // cached) and destinations. An introduction or declaration that is not accepted
        // refuses only the messages that use it, in pass 2: the other owners' messages, the
        // acknowledgements and the rest of the datagram still count.
        let mut eliciting = false;
        // Parsed once; pass 2 walks the frames kept here (a MSG_RUN is one frame, so a
        // datagram has a few: no allocation).
        let mut frames: SmallVec<[Frame<'_>; 8]> = SmallVec::new();
        let mut g = Gather {
            body,
            scope,
            msgs: 0,
            bad_owners: Vec::new(),
            bad_dests: Vec::new(),
            last_from: None,
            last_to: None,
            shared: None,
            run: None,
            run_ids: None,
        };
        for f in Frames::with_runs(body) {
            let f = f?;
            frames.push(f);
            match f {
                Frame::Msg { .. } => g.msgs += 1,
                Frame::MsgRun(r) => g.msgs += usize::from(r.count),
                Frame::OwnerIntro { id, name, sig } => {
                    if let Err(r) = self.learn_owner(sh, id, name, sig) {
                        let reason =
                            RefuseReason::from_drop(r).unwrap_or(RefuseReason::UnknownOwner);
                        g.bad_owners.push((id, reason));
                    }
                }
                Frame::Dest { id, name } => match self.rx_dests.get(&id) {
                    Some(n) if &**n != name => g.bad_dests.push(id),
                    Some(_) => {}
                    None if self.rx_dests.len() < MAX_DESTINATIONS => {
                        self.rx_dests.insert(id, Arc::from(name));
                    }
                    None => {}
                },
                _ => {}
            }
        }
        // Pass 2: apply, in order (an ABANDON moves the window before the messages after it).
        for f in frames {
            match f {
                Frame::Ack(ack) => {
                    // Events keep the order of the frames that caused them.
                    flush_run(sh, &mut g.run);
                    self.on_ack(sh, now, ack)
                }
                Frame::Refused { seq, reason } => {
                    flush_run(sh, &mut g.run);
                    self.on_refused(sh, seq, reason)
                }
                Frame::Abandon { below } => {
                    self.recv.advance_to(below);
                    eliciting = true;
                    // The sender's window waits for this acknowledgement.
                    self.ack_now = true;
                }
                Frame::Ping => eliciting = true,
                Frame::Msg {
                    seq,
                    from,
                    to,
                    data,
                } => {
                    eliciting = true;
                    self.take_msg(sh, &mut g, seq, from, to, data);
                }
                Frame::MsgRun(run) => {
                    eliciting = true;
                    self.take_run(sh, &mut g, run);
                }
                Frame::OwnerIntro { .. } | Frame::Dest { .. } | Frame::Padding => {}
            }
        }
        flush_run(sh, &mut g.run);
        if eliciting {
            self.ack_pending = true;
            self.eliciting_since_ack += 1;
            if self.eliciting_since_ack >= sh.cfg.ack_every
                || self.messages_since_ack >= sh.cfg.ack_every_messages
            {
                self.ack_now = true;
            }
            if self.ack_deadline.is_none() {
                self.ack_deadline = Some(now + sh.cfg.ack_delay);
            }
        }
        Ok(())
    }

    /// Makes `g.run` the event for messages from owner `from` to destination `to`: the one
    /// being gathered if it is theirs (no lookup), else a new one once both names are accepted.
    fn open_run(
        &mut self,
        sh: &mut Shared,
        g: &mut Gather<'_>,
        from: u64,
        to: u64,
        data: &[u8],
    ) -> Result<(), RefuseReason> {
        if g.run.is_some() && g.run_ids == Some((from, to)) {
            return Ok(());
        }
        let from_name = match &g.last_from {
            Some((id, name)) if *id == from => name.clone(),
            _ => match g.bad_owners.iter().find(|(id, _)| *id == from) {
                Some((_, r)) => return Err(*r),
                None => match self.rx_owners.get(&from) {
                    Some(o) => {
                        g.last_from = Some((from, o.name.clone()));
                        o.name.clone()
                    }
                    None => return Err(RefuseReason::UnknownOwnerId),
                },
            },
        };
        let to_name = match (to, &g.last_to) {
            (0, _) => None,
            (_, Some((id, name))) if *id == to => Some(name.clone()),
            _ if g.bad_dests.contains(&to) => return Err(RefuseReason::OwnerConflict),
            _ => match self.rx_dests.get(&to) {
                Some(d) => {
                    g.last_to = Some((to, d.clone()));
                    Some(d.clone())
                }
                None => return Err(RefuseReason::UnknownOwnerId),
            },
        };
        flush_run(sh, &mut g.run);
        let copy = if g.msgs == 1 {
            // Alone in its datagram: one allocation of just the message.
            Bytes::copy_from_slice(data)
        } else {
            g.shared
                .get_or_insert_with(|| Bytes::copy_from_slice(g.body))
                .clone()
        };
        g.run = Some(Messages::new(self.peer, from_name, to_name, g.scope, copy));
        g.run_ids = Some((from, to));
        Ok(())
    }

    /// Adds delivered messages (`count` of them, borrowed from `g.body`) to the run being
    /// gathered, the counters added once for them all: per message, only its span is recorded.
    fn deliver<'d>(
        &mut self,
        sh: &mut Shared,
        g: &mut Gather<'_>,
        msgs: impl Iterator<Item = &'d [u8]>,
        count: usize,
    ) {
        let (mut n, mut bytes) = (0u64, 0u64);
        let alone = g.msgs == 1;
        let base = g.body.as_ptr() as usize;
        let mut run = g.run.as_mut();
        if let Some(r) = &mut run {
            r.reserve(count);
        }
        for data in msgs {
            if let Some(r) = &mut run {
                // `data` lies inside `body` (the frame parser borrows from it).
                let start = if alone {
                    0
                } else {
                    data.as_ptr() as usize - base
                };
                r.push(start, data.len());
            }
            n += 1;
            bytes += data.len() as u64;
        }
        sh.stats.messages_delivered += n;
        sh.stats.message_bytes_delivered += bytes;
        self.stats.messages_delivered += n;
    }

    /// One received message: delivered once, refused, or counted as a duplicate.
    fn take_msg(
        &mut self,
        sh: &mut Shared,
        g: &mut Gather<'_>,
        seq: u64,
        from: u64,
        to: u64,
        data: &[u8],
    ) {
        self.messages_since_ack += 1;
        if seq >= self.recv.cumulative().saturating_add(sh.cfg.message_window) {
            // Not settled: the sender keeps it and sends it again.
            sh.stats.drop(DropReason::OutsideWindow);
            return;
        }
        if let Err(r) = self.open_run(sh, g, from, to, data) {
            self.refuse(sh, seq, r);
            return;
        }
        if self.recv.insert(seq) {
            self.deliver(sh, g, std::iter::once(data), 1);
        } else {
            // Our acknowledgement was lost: say it again at once.
            sh.stats.duplicates_suppressed += 1;
            self.ack_now = true;
        }
    }

    /// A received MSG_RUN. The common case (it continues exactly where the receive window
    /// stands, with nothing received above it, from accepted names) moves the window once for
    /// the whole run; any other takes its messages one by one.
    fn take_run(&mut self, sh: &mut Shared, g: &mut Gather<'_>, run: wire::RunFrame<'_>) {
        let n = u64::from(run.count);
        let first = run.iter().next().map_or(&[][..], |(_, d)| d);
        let in_order = run.seq == self.recv.cumulative()
            && self.recv.nothing_above()
            && n <= sh.cfg.message_window;
        if in_order && self.open_run(sh, g, run.from, run.to, first).is_ok() {
            self.recv.advance_to(run.seq + n);
            self.messages_since_ack += usize::from(run.count);
            let count = usize::from(run.count);
            self.deliver(sh, g, run.iter().map(|(_, data)| data), count);
            return;
        }
        for (seq, data) in run.iter() {
            self.take_msg(sh, g, seq, run.from, run.to, data);
        }
    }

    /// A message we will not deliver (its owner or destination is not accepted): settle it,
    /// so the sender does not retransmit it until it gives up and no hole holds our window;
    /// count it by reason (once); and tell the sender with the next acknowledgement.
    fn refuse(&mut self, sh: &mut Shared, seq: u64, reason: RefuseReason) {
        if self.recv.insert(seq) {
            sh.stats.drop(reason.drop_reason());
        } else {
            self.ack_now = true;
        }
        if self.refused_out.len() < MAX_REFUSED_NOTICES {
            self.refused_out.push((seq, reason));
        }
    }

    fn learn_owner(
        &mut self,
        sh: &mut Shared,
        id: u64,
        name: &str,
        sig: &[u8; SIGNATURE_LEN],
    ) -> Result<(), DropReason> {
        if let Some(known) = self.rx_owners.get(&id) {
            if &*known.name != name {
                return Err(DropReason::OwnerConflict);
            }
            if &known.sig == sig {
                // Cached: no public-key operation.
                return Ok(());
            }
        }
        let binding = self.binding.ok_or(DropReason::UnknownOwner)?;
        let pk = sh.directory.get(name).ok_or(DropReason::UnknownOwner)?;
        let msg = intro_message(&binding, &self.remote_static, sh.host.public(), id, name);
        sh.stats.pk.verifies += 1;
        if !sign::verify(pk, &msg, sig) {
            return Err(DropReason::BadOwnerSignature);
        }
        self.rx_owners.insert(
            id,
            RemoteOwner {
                name: Arc::from(name),
                sig: *sig,
            },
        );
        Ok(())
    }

    fn on_ack(&mut self, sh: &mut Shared, now: Time, ack: wire::AckFrame<'_>) {
        let cum = ack.cumulative.min(self.next_seq);
        if cum > self.peer_cum {
            self.peer_cum = cum;
            if !self.abandon_needed() {
                self.abandon_now = false;
                self.abandon_due = None;
            }
        }
        let mut acc = Acked::default();
        // Everything below the cumulative point, then each range: one pass over the ring each.
        for (s, e) in std::iter::once((0, ack.cumulative)).chain(ack.ranges()) {
            let (owners, dests) = (&mut self.tx_owners, &mut self.tx_dests);
            self.inflight
                .remove_range(&mut self.arena, s, e, |r| acc.note(owners, dests, r));
        }
        if !acc.any {
            return;
        }
        // One RTT sample per acknowledgement, from the newest message it covers that was sent
        // once (QUIC's rule): messages that shared a datagram would otherwise count many times.
        if let Some(sent) = acc.newest_first_tx {
            self.rtt_sample(now.saturating_since(sent));
        }
        if let Some(t) = acc.newest_sent {
            self.largest_acked_sent = Some(self.largest_acked_sent.map_or(t, |la| la.max(t)));
        }
        // Any acknowledgement resets the backoff, not only one that gives a sample (Karn's
        // rule): on a lossy path nearly every acknowledgement covers a retransmission, and
        // the backoff kept growing (the wedge proptest). A path whose round trip outgrew
        // every timeout gets its sample from the next handshake instead (`accept_response`).
        self.backoff = 0;
        self.timeouts_since_handshake = 0;
        self.detect_losses(sh, now);
    }

    /// The peer refused message `seq` (its owner or destination is not accepted there) and
    /// settled it: report it undeliverable now instead of retransmitting it, and introduce its
    /// owner and destination again with the next messages that use them.
    fn on_refused(&mut self, sh: &mut Shared, seq: u64, reason: RefuseReason) {
        let mut refused = None;
        self.inflight
            .remove_range(&mut self.arena, seq, seq + 1, |r| {
                refused = Some((r.id, r.from, r.dest))
            });
        let Some((id, from, dest)) = refused else {
            return;
        };
        tracing::debug!(seq, ?reason, "peer refused a message");
        if let Some(Some(o)) = self.tx_owners.get_mut(from) {
            o.confirmed = false;
        }
        if let Some(d) = Self::dest_mut(&mut self.tx_dests, dest) {
            d.confirmed = false;
        }
        sh.stats.messages_refused += 1;
        sh.stats.messages_undeliverable += 1;
        sh.events.push_back(Event::Undeliverable {
            peer: self.peer,
            id: MessageId(id),
        });
    }

    fn rto(&self, sh: &Shared) -> Duration {
        let srtt = self.srtt.unwrap_or(sh.cfg.initial_rtt);
        let base = (srtt + self.rttvar * 4 + sh.cfg.ack_delay).max(sh.cfg.min_rto);
        base * (1u32 << self.backoff.min(6))
    }

    /// Sent this long before something already acknowledged: lost. QUIC's 9/8·srtt, plus the
    /// peer's acknowledgement delay, which jitter can put between two acknowledgements. (Measured
    /// with `sealink demo`: without the added delay most retransmissions were spurious; acking
    /// every reordered arrival at once instead cost 1200 extra datagrams for the same result.)
    fn reorder_threshold(&self, sh: &Shared) -> Duration {
        self.srtt.unwrap_or(sh.cfg.initial_rtt) * 9 / 8 + sh.cfg.ack_delay
    }

    /// Marks messages lost. Sent well before something already acknowledged: lost, all of
    /// them (evidence, clocked by acknowledgements). Unacknowledged for a retransmission
    /// timeout with no such evidence: the oldest run goes again as a probe, and the timer
    /// backs off (QUIC's probe timeout, TCP's RTO). Sending the whole window again on every
    /// timeout, as this did before, turned a delay into a storm: a peer whose acknowledgements
    /// were late behind a busy host got thousands of duplicates, which made them later still,
    /// until every message was given up (`engine_workers_carry_both_directions_in_order`,
    /// about one run in ten under parallel tests). Lost messages go to the front of the next
    /// flush.
    fn detect_losses(&mut self, sh: &mut Shared, now: Time) {
        let rto = self.rto(sh);
        let thresh = self.reorder_threshold(sh);
        while let Some(&(t, first, n)) = self.sent_log.front() {
            // Every seq of an entry was sent at `t`: one decision for the entry. Runs
            // acknowledged or sent again since are not live; an entry with none is dropped.
            let end = first + u64::from(n);
            if !self.inflight.live_in(first, end, t) {
                self.sent_log.pop_front();
                continue;
            }
            if self.largest_acked_sent.is_some_and(|la| t < la) && t + thresh <= now {
                self.sent_log.pop_front();
                self.declare_lost(sh, t, first, end, false);
                continue;
            }
            // Entries are in time order: none after this one has evidence either.
            if self.probe_at.map_or(t, |p| p.max(t)) + rto <= now {
                self.probe(sh, now, rto);
            }
            break;
        }
    }

    /// The retransmission timer fired: the oldest unacknowledged run goes again (TCP's
    /// retransmission from `snd_una`), so timeouts in a row probe with the same run until it is
    /// acknowledged. Once it was sent `max_transmissions` times the path has been dark through
    /// every backed-off timeout: it and every run waiting a timeout or more are given up.
    fn probe(&mut self, sh: &mut Shared, now: Time, rto: Duration) {
        self.probe_at = Some(now);
        self.backoff += 1;
        self.timeouts_since_handshake += 1;
        let Some(i) = self.inflight.oldest_waiting() else {
            return;
        };
        let r = self.inflight.run(i);
        if r.transmissions < sh.cfg.max_transmissions {
            let (seq, run_end) = (r.seq, r.end());
            self.inflight.mark_lost(i);
            self.retx.push_back((seq, run_end));
            self.flush = true;
            return;
        }
        let r = self.inflight.remove(i);
        self.undeliverable(sh, r);
        self.abandon_now = true;
        while let Some(&(t, first, n)) = self.sent_log.front() {
            if t + rto > now {
                break;
            }
            self.sent_log.pop_front();
            self.declare_lost(sh, t, first, first + u64::from(n), true);
        }
    }

    /// The runs of `first..end` still waiting on their transmission at `t` are lost: each goes
    /// again, or is given up (reported undeliverable, and the peer told to stop waiting) if it
    /// was sent `max_transmissions` times already, or if `give_up`.
    fn declare_lost(&mut self, sh: &mut Shared, t: Time, first: u64, end: u64, give_up: bool) {
        let mut i = self.inflight.overlapping(first, end).start;
        let mut retransmit = false;
        while i < self.inflight.overlapping(first, end).end {
            let r = self.inflight.run(i);
            if r.last_sent != t || r.lost {
                i += 1;
            } else if give_up || r.transmissions >= sh.cfg.max_transmissions {
                let r = self.inflight.remove(i);
                self.undeliverable(sh, r);
                // The peer may still wait for them: tell it to stop.
                self.abandon_now = true;
            } else {
                self.inflight.mark_lost(i);
                retransmit = true;
                i += 1;
            }
        }
        if retransmit {
            self.retx.push_back((first, end));
            self.flush = true;
        }
    }

    // ---------------------------------------------------------------- timers

    /// Queued messages must leave now (an urgent one, a full queue or a due deadline): no
    /// timer stands for this, so a driver that sleeps until `poll_timeout` must be woken.
    pub fn flush_pending(&self) -> bool {
        self.flush || self.abandon_wanted()
    }

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

    /// Gives up on run `r`: its bytes are released and each of its messages is reported.
    fn undeliverable(&mut self, sh: &mut Shared, r: OutRun) {
        self.arena.release(r.data);
        sh.stats.messages_undeliverable += u64::from(r.count);
        for k in 0..u64::from(r.count) {
            sh.events.push_back(Event::Undeliverable {
                peer: self.peer,
                id: MessageId(r.id + k),
            });
        }
    }

    /// The handshake failed for good: everything waiting for this peer is undeliverable.
    fn give_up(&mut self, sh: &mut Shared) {
        sh.events
            .push_back(Event::HandshakeFailed { peer: self.peer });
        let runs: Vec<OutRun> = self
            .queue
            .drain(..)
            .chain(self.inflight.take_all())
            .collect();
        for r in runs {
            self.undeliverable(sh, r);
        }
        self.retx.clear();
        self.sent_log.clear();
        self.queued_bytes = 0;
        self.queued_msgs = 0;
        self.flush = false;
        self.earliest_deadline = None;
        // Their numbers are settled for us; the peer learns it from the ABANDON that the next
        // datagram we send carries (a rekey continues the channel, and with it this debt).
        // Not before: nothing probes an unreachable peer until there is something to send
        // (`abandon_wanted`).
        self.abandon_now = false;
        self.abandon_due = None;
    }
}

/// What one ACK frame released, gathered run by run.
#[derive(Default)]
struct Acked {
    any: bool,
    /// The owner and destination last confirmed (messages of a run share them).
    confirmed: Option<(usize, u64)>,
    /// Latest send time of an acknowledged message (loss detection by reordering).
    newest_sent: Option<Time>,
    /// Latest send time of an acknowledged message sent only once (an unambiguous RTT sample).
    newest_first_tx: Option<Time>,
}

impl Acked {
    fn note(&mut self, owners: &mut [Option<TxOwner>], dests: &mut [TxDest], m: &OutRun) {
        self.any = true;
        let max = |t: Option<Time>| Some(t.map_or(m.last_sent, |t| t.max(m.last_sent)));
        self.newest_sent = max(self.newest_sent);
        if m.transmissions == 1 {
            self.newest_first_tx = max(self.newest_first_tx);
        }
        // The peer holds whatever introduced this message's owner and destination.
        if self.confirmed != Some((m.from, m.dest)) {
            self.confirmed = Some((m.from, m.dest));
            if let Some(Some(o)) = owners.get_mut(m.from) {
                o.confirmed = true;
            }
            if let Some(d) = Channel::dest_mut(dests, m.dest) {
                d.confirmed = true;
            }
        }
    }
}

/// What pass 2 of `process_frames` carries from message to message: the body, the names that
/// were refused or looked up last, the body's one copy, and the run of messages being gathered
/// into one event (same owner and destination).
struct Gather<'b> {
    body: &'b [u8],
    scope: Scope,
    /// Messages in the datagram.
    msgs: usize,
    /// Ids refused in this datagram and why (one entry per bad introduction: few).
    bad_owners: Vec<(u64, RefuseReason)>,
    bad_dests: Vec<u64>,
    last_from: Option<(u64, Arc<str>)>,
    last_to: Option<(u64, Arc<str>)>,
    /// One copy of the body for every message delivered from it, made at the first.
    shared: Option<Bytes>,
    run: Option<Messages>,
    /// The wire ids (owner, destination) of `run`'s messages.
    run_ids: Option<(u64, u64)>,
}

/// Ends the run of messages being gathered, as one event (none if every message of it was a
/// duplicate).
fn flush_run(sh: &mut Shared, run: &mut Option<Messages>) {
    if let Some(r) = run.take().filter(|r| !r.is_empty()) {
        sh.events.push_back(Event::Messages(r));
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
