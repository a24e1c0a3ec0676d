//! Reliable delivery: acknowledgements, RTT, loss detection, retransmission, giving up.

use std::time::Duration;

use crate::inflight::OutRun;
use crate::shared::{Event, MessageId, Shared};
use crate::time::Time;
use crate::wire::{self, RefuseReason};

use super::{Channel, TxDest, TxOwner};

impl Channel {
    /// How long an initiation waits for its response: the configured timeout, or longer once
    /// the channel has measured a round trip that needs it. A rekey on a backlogged channel
    /// waits behind the queued datagrams on both hosts; with a fixed 1 s timeout each retry
    /// replaced the initiation whose response was on its way (refused as unexpected), and the
    /// rekey never completed (found by `sealink-lab bench adp` on the 1987 profile).
    pub(super) fn rtt_sample(&mut self, sample: Duration) {
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

    pub(super) fn on_ack(&mut self, sh: &mut Shared, now: Time, ack: wire::AckFrame<'_>) {
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
    pub(super) fn on_refused(&mut self, sh: &mut Shared, seq: u64, reason: RefuseReason) {
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

    pub(super) fn rto(&self, sh: &Shared) -> Duration {
        let srtt = self.srtt.unwrap_or(sh.cfg.initial_rtt);
        let base = (srtt + self.rttvar * 4 + sh.cfg.ack_delay).max(sh.cfg.min_rto);
        base * (1u32 << self.backoff.min(6))
    }

    /// Sent this long before something already acknowledged: lost. QUIC's 9/8·srtt, plus the
    /// peer's acknowledgement delay, which jitter can put between two acknowledgements. (Measured
    /// with `sealink demo`: without the added delay most retransmissions were spurious; acking
    /// every reordered arrival at once instead cost 1200 extra datagrams for the same result.)
    pub(super) fn reorder_threshold(&self, sh: &Shared) -> Duration {
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
    pub(super) fn detect_losses(&mut self, sh: &mut Shared, now: Time) {
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
    pub(super) fn probe(&mut self, sh: &mut Shared, now: Time, rto: Duration) {
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
    pub(super) fn declare_lost(
        &mut self,
        sh: &mut Shared,
        t: Time,
        first: u64,
        end: u64,
        give_up: bool,
    ) {
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

    /// Gives up on run `r`: its bytes are released and each of its messages is reported.
    pub(super) fn undeliverable(&mut self, sh: &mut Shared, r: OutRun) {
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
    pub(super) fn give_up(&mut self, sh: &mut Shared) {
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
pub(super) struct Acked {
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
