//! The channel's handshakes: initiating, answering, installing sessions, and a new channel's reset.

use std::time::Duration;

use crate::error::DropReason;
use crate::handshake::state::{Handshake, InitiateError};
use crate::handshake::{self, InitPayload};
use crate::inflight::OutRun;
use crate::recv_window::RecvWindow;
use crate::session::{IndexTable, Session};
use crate::shared::{Event, Shared};
use crate::time::Time;
use crate::wire;

use super::{Channel, keys, wants_rekey};

impl Channel {
    pub(super) fn drop_stale_initiation(&mut self, idx: &mut IndexTable) {
        if let Some(old) = self.stale_initiation.take() {
            idx.free(old.local_index);
        }
    }

    pub(super) fn handshake_timeout(&self, sh: &Shared) -> Duration {
        let fixed = sh.cfg.handshake_timeout;
        self.srtt
            .map_or(fixed, |srtt| fixed.max(srtt * 2 + self.rttvar * 4))
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

    pub(super) fn start_handshake(
        &mut self,
        sh: &mut Shared,
        idx: &mut IndexTable,
        now: Time,
        attempt: u32,
    ) {
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

    pub(super) fn install(
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
    pub(super) fn reset_for_new_channel(&mut self) {
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
}
