//! The tunnel's transmit half, on [`sealink_udp::Sending`]: every datagram the tunnel sends is
//! written unsealed into a batch buffer under the core's lock (a packet read from the TUN
//! device into its slot, or a datagram the core queued, written by
//! [`Tunnel::poll_transmit_deferred`] straight into the buffer), sealed in place with no lock
//! held, and sent from there in order.

use std::ops::Range;

use sealink_proto::tunnel::{PeerIndex, SealJob, Tunnel};
use sealink_udp::Sending;

use crate::Shared;
use crate::tunread::{self, Unfinished};

/// The seal of one datagram, and for a packet read from the TUN device what its reader left to
/// do.
pub(crate) struct TxJob {
    pub(crate) seal: SealJob,
    /// `None`: a datagram the core queued (a piggyback flush, a staged packet, a keepalive).
    pub(crate) slot: Option<SlotJob>,
}

/// A packet read into a slot of the batch buffer.
pub(crate) struct SlotJob {
    pub(crate) peer: PeerIndex,
    /// Where the packet lies in its datagram.
    pub(crate) pkt: Range<usize>,
    /// What the reader left undone in the packet (payload copy, checksum): done just before
    /// sealing.
    pub(crate) unfinished: Unfinished,
}

/// A transmit batch of the tunnel.
pub(crate) type TxSending = Sending<TxJob>;

/// Takes the core's queued datagrams (handshakes, flushed piggyback queues, staged packets)
/// into `tx`'s append area, in order, each written by the core straight into it (up to `room`
/// bytes); returns how many.
pub(crate) fn take_queued(tx: &mut TxSending, core: &mut Tunnel, room: usize) -> usize {
    let mut n = 0;
    while core.has_transmit()
        && tx.append(room, |out| {
            core.poll_transmit_deferred(out)
                .map(|(dest, len, seal)| (dest, len, seal.map(|seal| TxJob { seal, slot: None })))
        })
    {
        n += 1;
    }
    n
}

/// Seals every datagram of `tx` in place on `lane` (0: none; see `datapath::lane_of`), first
/// finishing the packets read from the TUN device (`read`: the buffer their payloads may still
/// lie in). Returns how many seals failed, for [`Tunnel::seal_failed`].
pub(crate) fn seal_all(tx: &mut TxSending, lane: u8, read: &[u8]) -> u64 {
    tx.seal_all(|j, d| {
        if let Some(s) = &j.slot {
            if !s.unfinished.is_done() {
                tunread::finish(&mut d[s.pkt.clone()], read, s.unfinished);
            }
        }
        j.seal.seal_on_lane(d, lane)
    })
}

/// Sends what `tx` holds on socket `sock`, in order, runs of full-size datagrams to one peer
/// in one GSO call.
pub(crate) fn send_all(tx: &mut TxSending, sh: &Shared, sock: usize) {
    tx.send_runs(|r, bytes| sh.send(sock, r.dest, bytes, r.segment));
}

/// The core's queued datagrams for a thread off the data path (the timer, the handshake
/// threads, a reload): taken under the core's lock, sealed and sent outside it.
pub(crate) struct QueuedTransmits {
    tx: TxSending,
    room: usize,
}

impl QueuedTransmits {
    /// Datagrams of up to `room` bytes (the slot stride).
    pub(crate) fn new(room: usize) -> Self {
        QueuedTransmits {
            tx: Sending::new(0, room, usize::MAX),
            room,
        }
    }
    pub(crate) fn clear(&mut self) {
        self.tx.clear();
    }
    /// Takes the core's queued datagrams; returns how many.
    pub(crate) fn drain(&mut self, core: &mut Tunnel) -> usize {
        take_queued(&mut self.tx, core, self.room)
    }
    /// Seals everything taken (on `lane`), then sends it on socket `sock` (the lock not held);
    /// a failed seal is counted.
    pub(crate) fn seal_and_send(&mut self, sh: &Shared, sock: usize, lane: u8) {
        let failed = seal_all(&mut self.tx, lane, &[]);
        if failed > 0 {
            sh.lock().seal_failed(failed);
        }
        send_all(&mut self.tx, sh, sock);
    }
}
