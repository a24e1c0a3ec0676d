//! Receiving: opening data datagrams, their frames, and delivering messages in order.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use sealink_crypto::Scope;
use sealink_crypto::sign::{self, SIGNATURE_LEN};
use smallvec::SmallVec;

use crate::error::DropReason;
use crate::owner::{RemoteOwner, intro_message};
use crate::session::{OpenJob, Session};
use crate::shared::{Event, Messages, Shared};
use crate::time::Time;
use crate::wire::{self, Frame, Frames, RefuseReason};

use super::{Channel, MAX_DESTINATIONS, MAX_REFUSED_NOTICES, limits};

impl Channel {
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
    pub(super) fn follow_superseded(&mut self, local_index: u32) {
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

    pub(super) fn session_mut(&mut self, local_index: u32) -> Option<&mut Session> {
        [&mut self.current, &mut self.previous, &mut self.superseded]
            .into_iter()
            .flatten()
            .find(|s| s.local_index == local_index)
    }

    pub(super) fn process_frames(
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
    pub(super) fn open_run(
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
    pub(super) fn deliver<'d>(
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
    pub(super) fn take_msg(
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
    pub(super) fn take_run(
        &mut self,
        sh: &mut Shared,
        g: &mut Gather<'_>,
        run: wire::RunFrame<'_>,
    ) {
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
    pub(super) fn refuse(&mut self, sh: &mut Shared, seq: u64, reason: RefuseReason) {
        if self.recv.insert(seq) {
            sh.stats.drop(reason.drop_reason());
        } else {
            self.ack_now = true;
        }
        if self.refused_out.len() < MAX_REFUSED_NOTICES {
            self.refused_out.push((seq, reason));
        }
    }

    pub(super) fn learn_owner(
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
}

/// What pass 2 of `process_frames` carries from message to message: the body, the names that
/// were refused or looked up last, the body's one copy, and the run of messages being gathered
/// into one event (same owner and destination).
pub(super) struct Gather<'b> {
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
pub(super) fn flush_run(sh: &mut Shared, run: &mut Option<Messages>) {
    if let Some(r) = run.take().filter(|r| !r.is_empty()) {
        sh.events.push_back(Event::Messages(r));
    }
}
