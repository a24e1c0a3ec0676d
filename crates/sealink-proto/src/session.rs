//! The session layer shared by the ADP channel ([`crate::channel`]) and the tunnel
//! ([`crate::tunnel`]): one session's keys, counter, replay window and age; the limits that
//! decide when it is rekeyed and when it is dead; the receiver-index table; key derivation from
//! a handshake's split; and the two halves of the per-datagram work that may leave the owner's
//! lock ([`SealJob`], [`OpenJob`]).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use sealink_crypto::kdf::derive_packet_key;
use sealink_crypto::{PacketKey, Scope, SuiteId};

use crate::datapath::{SealError, open_in_place, seal_datagram};
use crate::error::DropReason;
use crate::replay::{ReplayVerdict, ReplayWindow};
use crate::time::Time;

/// AES blocks of the largest datagram a session may seal (a 64 KiB body and its tag).
const MAX_DATAGRAM_BLOCKS: u64 = (1 << 16) / 16 + 1;

/// When a session should be replaced, and when it must not be used any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub rekey_after_time: Duration,
    pub rekey_after_messages: u64,
    pub reject_after_time: Duration,
    pub reject_after_messages: u64,
}

impl Limits {
    /// Rekeying must come before rejection, or a session would die before it is replaced.
    pub fn validate(&self) -> Result<(), crate::Error> {
        let bad = |m: &str| Err(crate::Error::Config(m.to_owned()));
        if self.rekey_after_messages >= self.reject_after_messages {
            return bad("rekey_after_messages must be below reject_after_messages");
        }
        if self.rekey_after_time >= self.reject_after_time {
            return bad("rekey_after_time must be below reject_after_time");
        }
        Ok(())
    }
}

/// One session: the keys of both directions (shared with workers that seal and open outside
/// the owner's lock), the receiver indexes, the next send counter and the replay window.
#[derive(Debug)]
pub struct Session {
    pub(crate) local_index: u32,
    pub(crate) remote_index: u32,
    pub(crate) send: Arc<PacketKey>,
    pub(crate) recv: Arc<PacketKey>,
    pub(crate) next_counter: u64,
    /// AES blocks sealed under `send` (each datagram's body plus one for the tag), against the
    /// suite's usage limit ([`SuiteId::aead_block_limit`]).
    pub(crate) blocks_sealed: u64,
    /// Boxed: 1 KiB that only a live session needs, out of the three session slots that
    /// every configured peer holds inline (issue 50: memory per idle peer).
    pub(crate) replay: Box<ReplayWindow>,
    pub(crate) established: Time,
    /// When we know the peer holds these keys: at once for the initiator; for the responder,
    /// at the initiator's first datagram on it.
    pub(crate) confirmed_at: Option<Time>,
    pub(crate) suite: SuiteId,
    /// Datagrams carry WireGuard's transport header (type 4, little-endian index and counter)
    /// and seal with no associated data, instead of sealink's data header as AAD.
    pub(crate) wg: bool,
    /// We sent the initiation this session came from (WireGuard rekeys by time only from the
    /// initiator's side, [`Session::wants_rekey_wg`]).
    pub(crate) initiator: bool,
    /// Both ends said in the handshake that they accept a lane number in the data header's
    /// byte 3 ([`SealJob::seal_on_lane`]); without it that byte stays 0, as older receivers
    /// require.
    pub(crate) lanes: bool,
}

/// The keys a finished handshake yields, and its hash (the channel binding of a new channel):
/// what a session is made from.
pub(crate) struct Split {
    pub send: [u8; 32],
    pub recv: [u8; 32],
    pub hash: [u8; 32],
}

impl Session {
    /// Derives both directions' keys from a handshake split under `label`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        suite: SuiteId,
        split: &Split,
        label: &[u8],
        allow_legacy: bool,
        local_index: u32,
        remote_index: u32,
        now: Time,
        initiator: bool,
    ) -> Result<Self, DropReason> {
        let key = |k: &[u8; 32]| {
            derive_packet_key(suite, k, label, allow_legacy)
                .map(Arc::new)
                .map_err(|_| DropReason::SuiteRefused)
        };
        let (send, recv) = (key(&split.send)?, key(&split.recv)?);
        Ok(Session::with_keys(
            (send, recv),
            suite,
            false,
            (local_index, remote_index),
            now,
            initiator,
        ))
    }

    /// A fresh session on ready keys (`indexes`: ours, the peer's).
    fn with_keys(
        (send, recv): (Arc<PacketKey>, Arc<PacketKey>),
        suite: SuiteId,
        wg: bool,
        (local_index, remote_index): (u32, u32),
        now: Time,
        initiator: bool,
    ) -> Self {
        Session {
            local_index,
            remote_index,
            send,
            recv,
            next_counter: 0,
            blocks_sealed: 0,
            replay: Box::new(ReplayWindow::new()),
            established: now,
            confirmed_at: initiator.then_some(now),
            suite,
            wg,
            initiator,
            lanes: false,
        }
    }

    /// A WireGuard session: the Noise split's two keys used as they are (ChaCha20-Poly1305,
    /// whitepaper §5.4.5), WireGuard's transport header on every datagram.
    pub(crate) fn wireguard(
        send: &[u8; 32],
        recv: &[u8; 32],
        local_index: u32,
        remote_index: u32,
        now: Time,
        initiator: bool,
    ) -> Result<Self, DropReason> {
        let key = |k: &[u8; 32]| {
            PacketKey::new(SuiteId::ChaCha20Poly1305, k, false)
                .map(Arc::new)
                .map_err(|_| DropReason::SuiteRefused)
        };
        let keys = (key(send)?, key(recv)?);
        Ok(Session::with_keys(
            keys,
            SuiteId::ChaCha20Poly1305,
            true,
            (local_index, remote_index),
            now,
            initiator,
        ))
    }

    /// May still be sent on.
    pub fn sendable(&self, l: &Limits, now: Time) -> bool {
        self.next_counter < l.reject_after_messages
            && now.saturating_since(self.established) < l.reject_after_time
            && self.suite.aead_block_limit().is_none_or(|max| {
                // One largest datagram (64 KiB) must still fit under the limit.
                self.blocks_sealed < max - MAX_DATAGRAM_BLOCKS
            })
    }

    /// Should be replaced by a new handshake: by the configured limits, or once the key has
    /// sealed 7/8 of what its suite allows (the rest covers the new handshake's round trip).
    pub fn wants_rekey(&self, l: &Limits, now: Time) -> bool {
        self.next_counter >= l.rekey_after_messages
            || now.saturating_since(self.established) >= l.rekey_after_time
            || self
                .suite
                .aead_block_limit()
                .is_some_and(|max| self.blocks_sealed >= max - max / 8)
    }

    /// [`Session::wants_rekey`] as WireGuard's implementations decide it (wireguard-go's
    /// `keepKeyFreshSending`, the kernel's `keep_key_fresh`): after REKEY_AFTER_MESSAGES on
    /// either side, after REKEY_AFTER_TIME only on the side that initiated the session, so that
    /// the two sides do not both start a handshake at the same moment.
    pub fn wants_rekey_wg(&self, l: &Limits, now: Time) -> bool {
        self.next_counter >= l.rekey_after_messages
            || (self.initiator && now.saturating_since(self.established) >= l.rekey_after_time)
    }

    /// [`Session::wants_rekey`] as sealink's tunnel wire decides it: by message count and by
    /// the suite's key usage from either end, but by time only from the end that initiated the
    /// session (at REKEY_AFTER_TIME); the responder rekeys by time only once the session is
    /// within `margin` of REJECT_AFTER_TIME (never before REKEY_AFTER_TIME). Sessions made
    /// together then reach their rekey point on one side only: a hub's thousand rekeys are a
    /// thousand handshakes, not two thousand crossing ones, while a flow that only the
    /// responder sends on still gets new keys before the old are refused.
    pub fn wants_rekey_one_sided(&self, l: &Limits, now: Time, margin: Duration) -> bool {
        let by_time = if self.initiator {
            l.rekey_after_time
        } else {
            l.reject_after_time
                .saturating_sub(margin)
                .max(l.rekey_after_time)
        };
        self.next_counter >= l.rekey_after_messages
            || now.saturating_since(self.established) >= by_time
            || self
                .suite
                .aead_block_limit()
                .is_some_and(|max| self.blocks_sealed >= max - max / 8)
    }

    /// Too old to open anything any more.
    pub fn expired(&self, l: &Limits, now: Time) -> bool {
        now.saturating_since(self.established) >= l.reject_after_time
    }

    /// Whether this session's handshake agreed on lane numbers.
    pub fn lanes(&self) -> bool {
        self.lanes
    }

    pub(crate) fn set_lanes(&mut self, lanes: bool) {
        self.lanes = lanes && !self.wg;
    }

    /// The serial step of sending: takes the next counter and returns the job that seals a
    /// body of `body_len` bytes under it.
    pub fn reserve_seal(&mut self, scope: Scope, body_len: usize) -> SealJob {
        let counter = self.next_counter;
        self.next_counter += 1;
        self.blocks_sealed = self
            .blocks_sealed
            .saturating_add(body_len.div_ceil(16) as u64 + 1);
        SealJob {
            key: Arc::clone(&self.send),
            receiver: self.remote_index,
            counter,
            scope,
            body_len,
            wg: self.wg,
            lanes: self.lanes,
        }
    }

    /// The serial first step of receiving: checks the replay window (without recording) and
    /// returns the key to open with.
    pub fn reserve_open(
        &self,
        scope: Scope,
        counter: u64,
        allow_plaintext: bool,
    ) -> Result<OpenJob, DropReason> {
        match self.replay.check(counter) {
            ReplayVerdict::Fresh => {}
            ReplayVerdict::Replayed => return Err(DropReason::Replayed),
            ReplayVerdict::TooOld => return Err(DropReason::TooOld),
        }
        Ok(OpenJob {
            key: Arc::clone(&self.recv),
            local_index: self.local_index,
            counter,
            scope,
            allow_plaintext,
            wg: self.wg,
        })
    }

    /// The serial last step of receiving, after authentication and in arrival order: records
    /// the counter, refusing a duplicate that was opened in parallel with its original.
    pub fn accept(&mut self, counter: u64) -> Result<(), DropReason> {
        match self.replay.accept(counter) {
            ReplayVerdict::Fresh => Ok(()),
            ReplayVerdict::Replayed => Err(DropReason::Replayed),
            ReplayVerdict::TooOld => Err(DropReason::TooOld),
        }
    }
}

/// The parallel half of sending one datagram: everything it needs, nothing shared but the key.
#[derive(Debug, Clone)]
pub struct SealJob {
    key: Arc<PacketKey>,
    receiver: u32,
    counter: u64,
    scope: Scope,
    body_len: usize,
    wg: bool,
    /// The session agreed on lane numbers.
    lanes: bool,
}

impl SealJob {
    /// Writes the header and seals `buf[HEADER_LEN..HEADER_LEN + body_len]` in place; returns
    /// the datagram's length.
    pub fn seal(&self, buf: &mut [u8]) -> Result<usize, SealError> {
        self.seal_on_lane(buf, 0)
    }

    /// [`SealJob::seal`] with `lane` in the header's byte 3, which a receiver's socket steering
    /// reads (`docs/PROTOCOL.md`, lanes); written only if the session agreed on lanes, else 0.
    pub fn seal_on_lane(&self, buf: &mut [u8], lane: u8) -> Result<usize, SealError> {
        if self.wg {
            return crate::wg::transport::seal(
                &self.key,
                self.receiver,
                self.counter,
                buf,
                self.body_len,
            );
        }
        seal_datagram(
            &self.key,
            self.receiver,
            self.counter,
            self.scope,
            buf,
            self.body_len,
            if self.lanes { lane } else { 0 },
        )
    }

    /// The datagram's counter.
    pub fn counter(&self) -> u64 {
        self.counter
    }
}

/// The parallel half of receiving one data datagram.
#[derive(Debug, Clone)]
pub struct OpenJob {
    key: Arc<PacketKey>,
    local_index: u32,
    counter: u64,
    scope: Scope,
    allow_plaintext: bool,
    wg: bool,
}

impl OpenJob {
    /// Authenticates and decrypts `buf` (the whole datagram) in place; returns the body's
    /// range. Touches no replay window: the owner records the counter ([`Session::accept`]).
    pub fn open(&self, buf: &mut [u8]) -> Result<Range<usize>, DropReason> {
        if self.wg {
            return crate::wg::transport::open(&self.key, self.counter, buf);
        }
        open_in_place(
            &self.key,
            self.scope,
            self.counter,
            self.allow_plaintext,
            buf,
        )
    }
    /// The receiver index the datagram named (to find the session again at finish).
    pub fn local_index(&self) -> u32 {
        self.local_index
    }
    pub fn counter(&self) -> u64 {
        self.counter
    }
    pub fn scope(&self) -> Scope {
        self.scope
    }
}

/// Receiver indexes in use, each mapped to its owner (a peer's position).
#[derive(Debug, Default)]
pub struct IndexTable {
    next: u32,
    map: HashMap<u32, usize>,
}

impl IndexTable {
    /// A table whose allocation sequence starts from `seed` (drivers pass a random value).
    pub fn with_seed(seed: u32) -> Self {
        IndexTable {
            next: seed,
            map: HashMap::new(),
        }
    }
    /// A fresh non-zero index for `owner`.
    pub fn alloc(&mut self, owner: usize) -> u32 {
        loop {
            // A multiplicative step spreads indexes so they are not trivially guessable in
            // sequence; uniqueness comes from the map.
            self.next = self.next.wrapping_add(0x9E37_79B9);
            if self.next != 0 && !self.map.contains_key(&self.next) {
                self.map.insert(self.next, owner);
                return self.next;
            }
        }
    }
    pub fn free(&mut self, index: u32) {
        self.map.remove(&index);
    }
    pub fn owner(&self, index: u32) -> Option<usize> {
        self.map.get(&index).copied()
    }
    /// Indexes in use (tests check that none leak).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_are_unique_nonzero_and_freed() {
        let mut t = IndexTable::with_seed(0u32.wrapping_sub(0x9E37_79B9));
        let a = t.alloc(1);
        assert_ne!(a, 0, "zero is never handed out");
        let b = t.alloc(2);
        assert_ne!(a, b);
        assert_eq!(t.owner(a), Some(1));
        t.free(a);
        assert_eq!(t.owner(a), None);
        assert_eq!(t.owner(b), Some(2));
    }

    fn test_split() -> Split {
        Split {
            send: [1; 32],
            recv: [2; 32],
            hash: [0; 32],
        }
    }

    fn limits(rekey_after_messages: u64, reject_after_messages: u64) -> Limits {
        Limits {
            rekey_after_time: Duration::from_secs(120),
            rekey_after_messages,
            reject_after_time: Duration::from_secs(180),
            reject_after_messages,
        }
    }

    /// An AES-GCM key is rekeyed at 7/8 of its 2^36-block budget and refused before a largest
    /// datagram could pass it, however high the configured message limits; ChaCha20-Poly1305
    /// keys are not bounded by volume.
    #[test]
    fn aes_gcm_usage_limit_forces_rekey_then_refusal() {
        let split = test_split();
        let l = limits(u64::MAX, u64::MAX);
        let t0 = Time::from_millis(1000);
        let max = 1u64 << 36;
        for suite in [
            SuiteId::Aes128Gcm,
            SuiteId::Aes256Gcm,
            SuiteId::ChaCha20Poly1305,
        ] {
            let mut s = Session::new(suite, &split, b"t", false, 5, 6, t0, true).unwrap();
            // A 1400-byte body costs 88 blocks and the tag one more.
            s.reserve_seal(Scope::Encrypt, 1400);
            assert_eq!(s.blocks_sealed, 89);
            s.blocks_sealed = max - max / 8 - 1;
            assert!(!s.wants_rekey(&l, t0) && s.sendable(&l, t0));
            s.reserve_seal(Scope::Encrypt, 0);
            let gcm = suite != SuiteId::ChaCha20Poly1305;
            assert_eq!(s.wants_rekey(&l, t0), gcm, "{suite:?}");
            assert!(s.sendable(&l, t0));
            s.blocks_sealed = max - MAX_DATAGRAM_BLOCKS;
            assert_eq!(s.sendable(&l, t0), !gcm, "{suite:?}");
        }
    }

    #[test]
    fn limits_decide_rekey_and_rejection() {
        let split = test_split();
        let l = limits(10, 20);
        let t0 = Time::from_millis(1000);
        let mut s = Session::new(SuiteId::Aes128Gcm, &split, b"t", false, 5, 6, t0, true)
            .expect("modern suite");
        assert!(s.sendable(&l, t0) && !s.wants_rekey(&l, t0));
        s.next_counter = 10;
        assert!(s.wants_rekey(&l, t0) && s.sendable(&l, t0));
        s.next_counter = 20;
        assert!(!s.sendable(&l, t0));
        s.next_counter = 0;
        let late = t0 + Duration::from_secs(180);
        assert!(s.expired(&l, late) && !s.sendable(&l, late));
        assert!(s.accept(3).is_ok());
        assert_eq!(s.accept(3), Err(DropReason::Replayed));
    }
}
