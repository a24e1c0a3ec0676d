//! [`Source`]: an application's sender run on the node's own I/O thread.
//!
//! The send-side mirror of [`crate::OnArrival`]. A sender on a thread of its own hands every
//! batch across: the state lock, a wake-up of the I/O thread, and a wait for room when the
//! window is full; on a host with one CPU per side, the two threads take turns on it, and at
//! 64-byte messages about 15% of that CPU went to switching between them and waking each other
//! (RESULTS §19a). A source is called by the I/O thread between receiving and transmitting, with
//! the endpoint in hand: what it queues leaves in the same round, acknowledgements that free
//! room call it again, and no other thread is involved (as quinn's sender task runs on the
//! connection's own single-threaded runtime).

use sealink_proto::{Clock, Error as ProtoError, Outgoing, OwnerId, PeerId};

use super::{NodeError, PeerRef, Queued, State, resolve, room};

/// What a [`Source`] says after a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Supply {
    /// More to send: call again as soon as there is room (at once, unless the channel pushed
    /// back during this call; then when acknowledgements arrive).
    More,
    /// Nothing to send now: call again at the node's next round (a datagram, a timer, a
    /// [`crate::Node::send`], or [`crate::Node::wake_source`]).
    Idle,
    /// Finished for good: the node drops the source.
    Done,
}

/// A sender run by the node's I/O thread (see [`crate::Node::set_source`]). It is called with
/// an [`Outbox`] each round and queues what it has, and returns quickly: the node receives and
/// transmits nothing while it runs. It must not call the [`crate::Node`] (the node's state is
/// locked while it runs, so that would wait forever). If it panics, the node stops (as if shut
/// down) and says so in the log.
pub struct Source(pub(crate) Box<dyn FnMut(&mut Outbox<'_>) -> Supply + Send>);

impl Source {
    pub fn new(f: impl FnMut(&mut Outbox<'_>) -> Supply + Send + 'static) -> Self {
        Source(Box::new(f))
    }
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Source(..)")
    }
}

/// What a [`Source`] queues messages through: [`crate::Node::send_batch`] without the lock and
/// the wake-up, since the caller is the I/O thread itself.
pub struct Outbox<'a> {
    st: &'a mut State,
    clock: &'a Clock,
    /// A `send_batch` in this call queued less than it was given.
    pushed_back: bool,
}

impl std::fmt::Debug for Outbox<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("pushed_back", &self.pushed_back)
            .finish_non_exhaustive()
    }
}

impl Outbox<'_> {
    /// As [`crate::Node::send_batch`]: queues `msgs` in order until one is refused, returning
    /// how many were queued (fewer than given when the channel's window is full).
    pub fn send_batch<'p>(
        &mut self,
        peer: impl Into<PeerRef<'p>>,
        from: OwnerId,
        to: Option<&str>,
        msgs: &[Outgoing<'_>],
    ) -> Result<Queued, NodeError> {
        let p = resolve(self.st, peer.into())?;
        let now = self.clock.now();
        match self.st.ep.send_batch(now, p, from, to, msgs) {
            Ok((first, count)) => {
                self.pushed_back |= count < msgs.len();
                Ok(Queued { first, count })
            }
            Err(e) => {
                self.pushed_back |= matches!(e, ProtoError::QueueFull(_));
                Err(e.into())
            }
        }
    }

    /// Messages the channel to `peer` takes before it pushes back (under the configured
    /// `max_queued_messages`, queued plus unacknowledged).
    pub fn room(&self, peer: PeerId) -> usize {
        room(self.st, peer)
    }
}

/// What the I/O thread does after calling the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    /// Go round again without sleeping: the source has more and the channel has room.
    Spin,
    /// Sleep until a datagram, a timer or a wake-up.
    Sleep,
}

/// Calls the installed source once, if there is one. Lock order: the source, then the state.
pub(crate) fn run_source(sh: &super::Shared) -> After {
    let mut slot = super::lock(&sh.source);
    let Some(src) = slot.as_mut() else {
        return After::Sleep;
    };
    let mut st = super::lock(&sh.state);
    let mut out = Outbox {
        st: &mut st,
        clock: &sh.clock,
        pushed_back: false,
    };
    let supplied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (src.0)(&mut out)));
    let pushed_back = out.pushed_back;
    drop(st);
    match supplied {
        Ok(Supply::More) if !pushed_back => After::Spin,
        Ok(Supply::More | Supply::Idle) => After::Sleep,
        Ok(Supply::Done) => {
            *slot = None;
            After::Sleep
        }
        Err(_) => {
            *slot = None;
            drop(slot);
            sh.fail("the send source panicked");
            After::Sleep
        }
    }
}
