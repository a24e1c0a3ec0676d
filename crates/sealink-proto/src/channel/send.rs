//! Sending: queueing messages as runs, the window, and building and sealing data datagrams.

use std::sync::Arc;

use sealink_crypto::Scope;
use sealink_crypto::sign::SIGNATURE_LEN;
use sealink_crypto::suite::TAG_LEN;

use crate::config::Urgency;
use crate::inflight::OutRun;
use crate::owner::intro_message;
use crate::send_arena::Slot;
use crate::session::{IndexTable, SealJob};
use crate::shared::{MessageId, Outgoing, Shared};
use crate::time::Time;
use crate::wire::{self, HEADER_LEN, MAX_ACK_RANGES, Writer};

use super::{Channel, TxDest, TxOwner};

impl Channel {
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
    pub(super) fn extend_last_run(
        &mut self,
        id: u64,
        from: usize,
        dest: u64,
        msgs: &[Outgoing<'_>],
    ) -> usize {
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
    pub(super) fn start_run(
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

    pub(super) fn tx_owner(&mut self, from: usize) -> &mut TxOwner {
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
    pub(super) fn tx_dest(&mut self, name: &str) -> u64 {
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
    pub(super) fn dest_mut(dests: &mut [TxDest], id: u64) -> Option<&mut TxDest> {
        dests.get_mut(usize::try_from(id).ok()?.checked_sub(1)?)
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

    pub(super) fn count_sent(&mut self, sh: &mut Shared, n: usize) {
        sh.stats.datagrams_sent += 1;
        sh.stats.bytes_sent += n as u64;
        self.stats.datagrams_sent += 1;
    }

    pub(super) fn window_base(&self) -> u64 {
        self.inflight
            .first_seq()
            .or_else(|| self.queue.front().map(|r| r.seq))
            .unwrap_or(self.next_seq)
    }

    /// Where the peer's receive window starts at the least: its acknowledged cumulative point.
    /// (Below our base once we gave messages up that it has not yet settled.)
    pub(super) fn window_anchor(&self) -> u64 {
        self.window_base().min(self.peer_cum)
    }

    /// Messages we gave up on lie between the peer's cumulative point and our base: it must
    /// be told (ABANDON), or its window would stay at the hole.
    pub(super) fn abandon_needed(&self) -> bool {
        self.window_base() > self.peer_cum
    }

    /// An ABANDON must leave now: the peer is owed one, no retransmission timer runs for it,
    /// and there is a reason to send (just given up on something, or messages wait, perhaps
    /// for the very window that the ABANDON frees).
    pub(super) fn abandon_wanted(&self) -> bool {
        self.abandon_needed()
            && self.abandon_due.is_none()
            && (self.abandon_now || !self.queue.is_empty())
    }

    /// The sender keeps at most `message_window` sequence numbers outstanding counted from the
    /// peer's acknowledged cumulative point, so whatever it sends falls inside the receiver's
    /// window (anchored at its own cumulative point, which is never below the acknowledged
    /// one). A message given up on holds the window until the peer acknowledges the ABANDON
    /// that settles it.
    pub(super) fn queue_front_in_window(&self, sh: &Shared) -> bool {
        self.window_room(sh) > 0
    }

    /// How many of the queue's first messages the window lets us send now.
    pub(super) fn window_room(&self, sh: &Shared) -> u64 {
        self.queue.front().map_or(0, |r| {
            (self.window_anchor() + sh.cfg.message_window).saturating_sub(r.seq)
        })
    }

    pub(super) fn has_sendable_messages(&self, sh: &Shared) -> bool {
        self.inflight.has_lost() || self.queue_front_in_window(sh)
    }

    /// Builds and seals one data datagram: a pending ACK, then retransmissions, then queued
    /// messages in order, each preceded by the owner introduction and destination declaration
    /// the peer may still lack. One seal, however many messages ride in it.
    ///
    /// With `defer`, an AEAD datagram is left unsealed (header room and body written, counter
    /// taken) and its [`SealJob`] returned with the length it will have once sealed, so that the
    /// caller can seal it outside its lock; legacy suites are always sealed here.
    pub(super) fn build_data(
        &mut self,
        sh: &mut Shared,
        now: Time,
        out: &mut [u8],
        defer: bool,
    ) -> Option<(usize, Option<SealJob>)> {
        let max_len = sh.cfg.max_datagram.min(out.len());
        let overhead = self.send_session(sh, now)?.suite.max_overhead();
        let body_cap = max_len.checked_sub(HEADER_LEN + overhead)?;
        let mut body = DataBody::default();
        let body_len;
        {
            let mut w = Writer::new(&mut out[HEADER_LEN..HEADER_LEN + body_cap]);
            body.wrote |= self.write_ack(&mut w)?;
            body.wrote |= self.write_abandon(sh, now, &mut w)?;
            if self.flush {
                self.write_messages(sh, now, &mut w, &mut body)?;
            }
            if self.confirm_pending && !body.wrote {
                w.u8(wire::FRAME_PING)?;
                body.wrote = true;
            }
            self.confirm_pending = false;
            if !body.wrote {
                return None;
            }
            if body.scope == Some(Scope::Encrypt) {
                wire::pad_to_block(&mut w);
            }
            body_len = w.pos();
        }
        self.seal_data(sh, now, &mut out[..max_len], body_len, &body, defer)
    }

    /// Writes the pending acknowledgement, with the refusal notices it carries; true if it
    /// fitted (nothing pending: false).
    fn write_ack(&mut self, w: &mut Writer<'_>) -> Option<bool> {
        if !self.ack_pending {
            return Some(false);
        }
        self.recv
            .newest_ranges(MAX_ACK_RANGES, &mut self.ack_scratch);
        let cum = self.recv.cumulative();
        let ack_len = wire::ack_len(cum, &self.ack_scratch);
        // Refusal notices go before the acknowledgement that settles their messages, so the
        // sender reads them first. Best effort: one that does not fit, or whose datagram is
        // lost, leaves the sender counting the message as delivered (a duplicate of it is
        // refused and announced again).
        for (seq, reason) in self.refused_out.drain(..) {
            if wire::refused_len(seq) + ack_len <= w.remaining() {
                wire::write_refused(w, seq, reason)?;
            }
        }
        if ack_len > w.remaining() {
            return Some(false);
        }
        wire::write_ack(w, cum, &self.ack_scratch)?;
        self.ack_pending = false;
        self.ack_now = false;
        self.ack_deadline = None;
        self.eliciting_since_ack = 0;
        self.messages_since_ack = 0;
        Some(true)
    }

    /// Writes an ABANDON frame if one is owed; true if it did. Before any message, so the
    /// receiver moves its window first. Carried by every datagram until acknowledged, and alone
    /// on its own timer.
    fn write_abandon(&mut self, sh: &Shared, now: Time, w: &mut Writer<'_>) -> Option<bool> {
        if !self.abandon_needed() {
            return Some(false);
        }
        let below = self.window_base();
        if wire::abandon_len(below) > w.remaining() {
            return Some(false);
        }
        wire::write_abandon(w, below)?;
        self.abandon_now = false;
        self.abandon_due = Some(now + self.rto(sh));
        Some(true)
    }

    /// Writes as many runs as fit, retransmissions first; each pass writes as much of a run as
    /// fits (the rest stays, split off). A run's messages are already encoded as MSG_RUN
    /// items, so its bytes go in with one copy; a run that continues the MSG_RUN just written
    /// (same owner and destination, next seq) extends it, so that a datagram of one owner's
    /// traffic has one header, and equal-sized datagrams (one GSO call) whatever batches their
    /// messages were queued in.
    fn write_messages(
        &mut self,
        sh: &mut Shared,
        now: Time,
        w: &mut Writer<'_>,
        body: &mut DataBody,
    ) -> Option<()> {
        let mut runs = RunFrames::default();
        while let Some(next) = self.next_run(sh) {
            let (k, nbytes) = self.write_run(sh, w, &mut runs, &next)?;
            if k == 0 {
                break;
            }
            self.mark_sent(sh, now, &next, k, nbytes)?;
            body.scope = Some(body.scope.map_or(next.scope, |s| s.max(next.scope)));
            body.messages += k as u64;
            body.wrote = true;
            if !sh.cfg.piggyback {
                break;
            }
        }
        if let Some((at, .., n)) = runs.open {
            wire::set_run_count(w, at, n)?;
        }
        // A datagram's only message leaves as MSG_FIXED when its fields fit (and the datagram
        // has room for its header): the receiver reads it with no varint and without a PADDING
        // frame after it (RESULTS §34). Any other datagram keeps its MSG_RUNs. Its run, the
        // last thing written, is rewritten in place, the message copied again from the arena,
        // which still holds it.
        if body.messages == 1 {
            if let Some((start, seq, from, to, slot, nbytes)) = runs.last_run {
                let item = &self.arena.get(slot)[..nbytes];
                if let Some(data) = wire::run_item_message(item) {
                    wire::one_run_as_fixed(w, start, seq, from, to, data);
                }
            }
        }
        if self.queue.is_empty() && self.retx.is_empty() {
            self.flush = false;
            self.earliest_deadline = None;
        }
        Some(())
    }

    /// The run to send next: the first run still lost in the oldest retransmission range, else
    /// the queue's front if the window has room for it. None: nothing to send.
    fn next_run(&mut self, sh: &Shared) -> Option<NextRun> {
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
            None if room > 0 => self.queue.front()?,
            None => return None,
        };
        Some(NextRun {
            lost,
            room,
            seq: r.seq,
            count: r.count,
            from: r.from,
            dest: r.dest,
            scope: r.scope,
            slot: r.data,
            item: r.item,
        })
    }

    /// Writes as many of run `r`'s messages as fit, after the owner introduction and
    /// destination declaration they need; returns how many and their bytes ((0, 0): none fit).
    fn write_run(
        &mut self,
        sh: &mut Shared,
        w: &mut Writer<'_>,
        runs: &mut RunFrames,
        r: &NextRun,
    ) -> Option<(usize, usize)> {
        let (seq, count, from, dest_wire) = (r.seq, r.count, r.from, r.dest);
        let owner = self.tx_owners.get(from)?.as_ref()?;
        let owner_wire = owner.wire_id;
        let need_intro = !owner.confirmed && !runs.intros.contains(&owner_wire);
        let to = match dest_wire {
            0 => None,
            d => Some(
                self.tx_dests
                    .get(usize::try_from(d).ok()?.checked_sub(1)?)?,
            ),
        };
        let need_dest = to.is_some_and(|t| !t.confirmed && !runs.dests.contains(&dest_wire));
        // The name only when this datagram declares it.
        let to = if need_dest {
            to.map(|t| t.name.clone())
        } else {
            None
        };
        // (Never with an introduction or declaration to write first: those were written before
        // the open run's first message, which shares them.)
        let continues = !need_intro
            && to.is_none()
            && runs.open.is_some_and(|(_, f, d, next, n)| {
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
        let in_frame = runs.open.filter(|_| continues).map_or(0, |(.., n)| n);
        let most = if sh.cfg.piggyback {
            u64::from(count)
                .min(r.room)
                .min(u64::from(u16::MAX - in_frame))
        } else {
            1
        };
        let (k, nbytes) = match w.remaining().checked_sub(fixed) {
            // The whole run fits: no need to walk its messages.
            Some(cap) if r.slot.len() <= cap && most == u64::from(count) => {
                (count as usize, r.slot.len())
            }
            Some(cap) => crate::inflight::items_fitting(
                &self.arena,
                r.slot,
                r.item,
                count,
                most as usize,
                cap,
            ),
            None => (0, 0),
        };
        if k == 0 {
            return Some((0, 0));
        }
        if !continues {
            if let Some((at, .., n)) = runs.open.take() {
                wire::set_run_count(w, at, n)?;
            }
        }
        if need_intro {
            let sig = self.owner_signature(sh, from)?;
            let owner_name = &sh.owners.get(from)?.name;
            wire::write_owner_intro(w, owner_wire, owner_name, &sig)?;
            runs.intros.push(owner_wire);
        }
        if let Some(d) = &to {
            wire::write_dest(w, dest_wire, d)?;
            runs.dests.push(dest_wire);
        }
        if !continues {
            runs.last_run = Some((w.pos(), seq, owner_wire, dest_wire, r.slot, nbytes));
            let at = wire::write_msg_run_header(w, seq, owner_wire, dest_wire)?;
            runs.open = Some((at, from, dest_wire, seq, 0));
        }
        w.bytes(&self.arena.get(r.slot)[..nbytes])?;
        if let Some((_, _, _, next, n)) = &mut runs.open {
            *next += k as u64;
            *n += k as u16;
        }
        Some((k, nbytes))
    }

    /// Accounts the first `k` messages of run `r` (`nbytes` of it) as sent at `now`: a lost
    /// run's are retransmitted, a queued run's move to the in-flight set (the rest of either
    /// is split off and stays).
    fn mark_sent(
        &mut self,
        sh: &mut Shared,
        now: Time,
        r: &NextRun,
        k: usize,
        nbytes: usize,
    ) -> Option<()> {
        let (seq, count, k32) = (r.seq, r.count, k as u32);
        match r.lost {
            Some(i) => {
                if k32 < count {
                    self.inflight.split_at(&mut self.arena, i, k32, nbytes);
                }
                self.inflight.sent(i, now);
                sh.stats.messages_retransmitted += k as u64;
                self.stats.messages_retransmitted += k as u64;
            }
            None => {
                let owner_wire = self.tx_owners.get(r.from)?.as_ref()?.wire_id;
                self.queued_bytes = self.queued_bytes.saturating_sub(
                    wire::msg_run_header_len(seq, owner_wire, r.dest) + r.slot.len(),
                );
                let mut run = if k32 < count {
                    // The rest stays in place, at the queue's front.
                    let front = self.queue.front_mut()?;
                    let head = front.split_head(&mut self.arena, k32, nbytes);
                    self.queued_bytes +=
                        wire::msg_run_header_len(front.seq, owner_wire, r.dest) + front.data.len();
                    head
                } else {
                    self.queue.pop_front()?
                };
                self.queued_msgs -= k;
                run.last_sent = now;
                run.transmissions = 1;
                self.inflight.push(run);
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
        Some(())
    }

    /// Seals the datagram whose body (`body_len` bytes) `build_data` wrote into `out`, or with
    /// `defer` takes its counter and returns the [`SealJob`] with the sealed length.
    fn seal_data(
        &mut self,
        sh: &mut Shared,
        now: Time,
        out: &mut [u8],
        body_len: usize,
        body: &DataBody,
        defer: bool,
    ) -> Option<(usize, Option<SealJob>)> {
        // Datagrams with only acknowledgements are authenticated, not encrypted: they carry
        // sequence numbers only.
        let scope = body.scope.unwrap_or(Scope::AuthOnly);
        let s = self.send_session(sh, now)?;
        let job = s.reserve_seal(scope, body_len);
        let deferred = (defer && !s.suite.is_legacy()).then(|| {
            let tag = if scope == Scope::None { 0 } else { TAG_LEN };
            HEADER_LEN + body_len + tag
        });
        let (len, job) = match deferred {
            Some(len) => (len, Some(job)),
            None => match job.seal(out) {
                Ok(n) => (n, None),
                Err(e) => {
                    tracing::error!(reason = %e, "seal failed");
                    return None;
                }
            },
        };
        if body.messages > 0 {
            sh.stats.data_datagrams_sent += 1;
        } else {
            sh.stats.ack_only_datagrams_sent += 1;
        }
        Some((len, job))
    }

    /// The owner's signature over this channel's binding, made once per channel.
    pub(super) fn owner_signature(
        &mut self,
        sh: &mut Shared,
        from: usize,
    ) -> Option<[u8; SIGNATURE_LEN]> {
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

    /// Queued messages must leave now (an urgent one, a full queue or a due deadline): no
    /// timer stands for this, so a driver that sleeps until `poll_timeout` must be woken.
    pub fn flush_pending(&self) -> bool {
        self.flush || self.abandon_wanted()
    }
}

/// What a data datagram's body holds so far.
#[derive(Default)]
struct DataBody {
    /// The widest scope of the messages written (none: acknowledgements only).
    scope: Option<Scope>,
    messages: u64,
    /// Any frame was written.
    wrote: bool,
}

/// The MSG_RUN frames written into one datagram so far.
#[derive(Default)]
struct RunFrames {
    /// Owners introduced and destinations declared in this datagram (wire ids).
    intros: Vec<u64>,
    dests: Vec<u64>,
    /// The open MSG_RUN: where its count lies, owner, destination, next seq, count.
    open: Option<(usize, usize, u64, u64, u16)>,
    /// The last MSG_RUN begun: where it starts, its first seq, owner and destination wire ids,
    /// and its items in the arena (a datagram with one message is rewritten as MSG_FIXED).
    last_run: Option<(usize, u64, u64, u64, Slot, usize)>,
}

/// The run `build_data` sends from next, its fields copied out of the queue or in-flight set.
struct NextRun {
    /// Its index in the in-flight set if it is a retransmission, else it is the queue's front.
    lost: Option<usize>,
    /// Messages the window has room for.
    room: u64,
    seq: u64,
    count: u32,
    from: usize,
    dest: u64,
    scope: Scope,
    slot: Slot,
    item: u32,
}
