//! Counters. Public-key operations are counted separately so that owner caching is observable.

use crate::error::DropReason;

/// Public-key operations done by this endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PkOps {
    /// Ed25519 signatures made (owner introductions).
    pub signs: u64,
    /// Ed25519 signatures verified (owner introductions received).
    pub verifies: u64,
    /// X25519 operations inside handshakes.
    pub dh: u64,
}

impl PkOps {
    pub fn total(&self) -> u64 {
        self.signs + self.verifies + self.dh
    }
}

/// Endpoint-wide counters.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub pk: PkOps,
    pub handshakes_initiated: u64,
    pub handshakes_completed: u64,
    /// Channels started (first contact, or the peer had lost the previous one); owners sign
    /// once per channel.
    pub channels_established: u64,
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Datagrams that carried at least one message.
    pub data_datagrams_sent: u64,
    /// Datagrams carrying only acknowledgements.
    pub ack_only_datagrams_sent: u64,
    /// First transmissions of messages.
    pub messages_sent: u64,
    pub messages_retransmitted: u64,
    pub messages_delivered: u64,
    pub message_bytes_delivered: u64,
    /// Messages that arrived again after delivery and were suppressed.
    pub duplicates_suppressed: u64,
    /// Messages given up on (included: those the peer refused).
    pub messages_undeliverable: u64,
    /// Messages the peer acknowledged as refused (their owner is not trusted there).
    pub messages_refused: u64,
    drops: [u64; DropReason::ALL.len()],
}

impl Stats {
    pub(crate) fn drop(&mut self, r: DropReason) {
        self.drops[r.index()] += 1;
    }
    pub fn drops(&self, r: DropReason) -> u64 {
        self.drops[r.index()]
    }
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
    /// Non-zero drop counters, by reason.
    pub fn drops_by_reason(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .iter()
            .map(|r| (*r, self.drops(*r)))
            .filter(|(_, n)| *n > 0)
    }
}
