//! The sender's messages in flight, tracked by run, not by message.
//!
//! A run ([`OutRun`]) is a block of consecutive sequence numbers and message ids from one owner
//! to one destination with one scope, its bytes already encoded as MSG_RUN items in one arena
//! slot: what one `send_batch` queued, or what one datagram carried of it. Queueing, sending,
//! acknowledging and loss detection cost per run; a run is split only where a datagram ends,
//! where an acknowledgement range cuts it, or where the peer refused one of its messages.
//! (Tracking each message, an entry moved from the queue to an in-flight ring and released one
//! by one by acknowledgements, framed and windowed one by one, was about a third of a 64-byte
//! message's 210 ns: `sealink-lab bench datagram --sizes 64` under `perf`, RESULTS §17a.)
//!
//! Runs leave the queue in sequence order and keep their numbers when sent again, so the
//! runs in flight are sorted by sequence number, with gaps where acknowledgements landed:
//! lookups are binary searches, and an acknowledgement's cumulative part pops runs off the
//! front.

use std::collections::VecDeque;
use std::ops::Range;

use sealink_crypto::Scope;

use crate::send_arena::{SendArena, Slot};
use crate::time::Time;
use crate::wire;

/// Consecutive messages of one owner to one destination, with one scope.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct OutRun {
    /// Sequence number and message id of the first message; the others follow by one.
    pub seq: u64,
    pub id: u64,
    pub count: u32,
    pub from: usize,
    /// Destination wire id (0: the peer host).
    pub dest: u64,
    pub scope: Scope,
    /// The messages as MSG_RUN items (varint length, bytes), back to back.
    pub data: Slot,
    /// The encoded size of each item when all are the same size, else 0: a datagram then
    /// takes as many as fit without reading their lengths (fixed-size messages, the common case
    /// at high rates).
    pub item: u32,
    pub last_sent: Time,
    pub transmissions: u32,
    /// Declared lost and not yet sent again.
    pub lost: bool,
}

/// [`OutRun::items_fitting`] from the run's fields.
pub(crate) fn items_fitting(
    arena: &SendArena,
    data: Slot,
    item: u32,
    count: u32,
    max: usize,
    cap: usize,
) -> (usize, usize) {
    match item as usize {
        0 => wire::run_items_fitting(arena.get(data), max, cap),
        item => {
            let k = max.min(count as usize).min(cap / item);
            (k, k * item)
        }
    }
}

impl OutRun {
    /// How many of the first messages (at most `max`) fit in `cap` bytes, and the bytes they
    /// take ([`wire::run_items_fitting`] on the run's items, by arithmetic when they are all
    /// the same size).
    pub fn items_fitting(&self, arena: &SendArena, max: usize, cap: usize) -> (usize, usize) {
        items_fitting(arena, self.data, self.item, self.count, max, cap)
    }

    /// One past the last sequence number.
    pub fn end(&self) -> u64 {
        self.seq + u64::from(self.count)
    }

    /// Returns the first `k` messages (`0 < k < count`), which take the first `at` bytes, as a
    /// run of their own with the same state, and keeps the others.
    pub fn split_head(&mut self, arena: &mut SendArena, k: u32, at: usize) -> OutRun {
        let mut head = self.split_off(arena, k, at);
        std::mem::swap(self, &mut head);
        head
    }

    /// Keeps the first `k` messages (`0 < k < count`), which take the first `at` bytes, and
    /// returns the others as a run of their own, with the same state.
    pub fn split_off(&mut self, arena: &mut SendArena, k: u32, at: usize) -> OutRun {
        debug_assert!(k > 0 && k < self.count, "split inside the run");
        debug_assert_eq!(
            at,
            wire::run_items_fitting(arena.get(self.data), k as usize, usize::MAX).1
        );
        debug_assert_eq!(self.items_fitting(arena, k as usize, usize::MAX).1, at);
        let (head, tail) = arena.split(self.data, at);
        self.data = head;
        let rest = OutRun {
            seq: self.seq + u64::from(k),
            id: self.id + u64::from(k),
            count: self.count - k,
            data: tail,
            ..*self
        };
        self.count = k;
        rest
    }
}

/// The runs in flight, sorted by sequence number.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    runs: VecDeque<OutRun>,
    /// Messages in all runs.
    msgs: usize,
    /// Runs marked lost.
    lost: usize,
}

impl Inflight {
    /// Messages in flight.
    pub fn len(&self) -> usize {
        self.msgs
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The lowest sequence number in flight.
    pub fn first_seq(&self) -> Option<u64> {
        self.runs.front().map(|r| r.seq)
    }

    /// Some run waits to be sent again.
    pub fn has_lost(&self) -> bool {
        self.lost > 0
    }

    pub fn run(&self, i: usize) -> &OutRun {
        &self.runs[i]
    }

    /// Appends a run sent for the first time (numbered past every run in flight).
    pub fn push(&mut self, r: OutRun) {
        debug_assert!(self.runs.back().is_none_or(|b| b.end() <= r.seq));
        self.msgs += r.count as usize;
        self.lost += usize::from(r.lost);
        self.runs.push_back(r);
    }

    /// The lowest-numbered run not already waiting to be sent again.
    pub fn oldest_waiting(&self) -> Option<usize> {
        self.runs.iter().position(|r| !r.lost)
    }

    /// Indices of the runs holding some sequence number in `[start, end)`.
    pub fn overlapping(&self, start: u64, end: u64) -> Range<usize> {
        let lo = self.runs.partition_point(|r| r.end() <= start);
        let hi = lo + self.runs.range(lo..).take_while(|r| r.seq < end).count();
        lo..hi
    }

    /// The first run marked lost holding a sequence number in `[start, end)`.
    pub fn first_lost_in(&self, start: u64, end: u64) -> Option<usize> {
        self.overlapping(start, end).find(|&i| self.runs[i].lost)
    }

    /// Whether a run holding a sequence number in `[start, end)` was last sent at `t` and not
    /// declared lost since: that transmission is still waiting for its acknowledgement.
    pub fn live_in(&self, start: u64, end: u64, t: Time) -> bool {
        self.overlapping(start, end).any(|i| {
            let r = &self.runs[i];
            r.last_sent == t && !r.lost
        })
    }

    /// Splits run `i` after `k` messages; the rest becomes run `i + 1`.
    pub fn split(&mut self, arena: &mut SendArena, i: usize, k: u32) {
        let at = self.runs[i].items_fitting(arena, k as usize, usize::MAX).1;
        self.split_at(arena, i, k, at);
    }

    /// [`Inflight::split`] where the first `k` messages are known to take `at` bytes.
    pub fn split_at(&mut self, arena: &mut SendArena, i: usize, k: u32, at: usize) {
        let rest = self.runs[i].split_off(arena, k, at);
        self.lost += usize::from(rest.lost);
        self.runs.insert(i + 1, rest);
    }

    pub fn mark_lost(&mut self, i: usize) {
        let r = &mut self.runs[i];
        if !r.lost {
            r.lost = true;
            self.lost += 1;
        }
    }

    /// Run `i` was just sent (again).
    pub fn sent(&mut self, i: usize, now: Time) {
        let r = &mut self.runs[i];
        if r.lost {
            r.lost = false;
            self.lost -= 1;
        }
        r.last_sent = now;
        r.transmissions += 1;
    }

    /// Takes run `i` out (its slot is the caller's to release).
    pub fn remove(&mut self, i: usize) -> OutRun {
        let r = self.runs.remove(i).expect("index of a run in flight");
        self.msgs -= r.count as usize;
        self.lost -= usize::from(r.lost);
        r
    }

    /// Removes every message in `[start, end)`, splitting the runs the bounds cut; passes each
    /// removed piece to `f`, in order, and releases its bytes. Costs the runs it touches plus a
    /// binary search, whatever the range (ranges come from the peer).
    pub fn remove_range(
        &mut self,
        arena: &mut SendArena,
        start: u64,
        end: u64,
        mut f: impl FnMut(&OutRun),
    ) {
        let mut i = self.runs.partition_point(|r| r.end() <= start);
        while i < self.runs.len() && self.runs[i].seq < end {
            let (seq, run_end) = (self.runs[i].seq, self.runs[i].end());
            if seq < start {
                // Keep the part below the range.
                self.split(arena, i, (start - seq) as u32);
                i += 1;
                continue;
            }
            if run_end > end {
                // Keep the part above the range.
                self.split(arena, i, (end - seq) as u32);
            }
            let r = self.remove(i);
            f(&r);
            arena.release(r.data);
        }
    }

    /// Empties the set, yielding the runs in sequence order.
    pub fn take_all(&mut self) -> impl Iterator<Item = OutRun> + use<> {
        self.msgs = 0;
        self.lost = 0;
        std::mem::take(&mut self.runs).into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn run(arena: &mut SendArena, seq: u64, msgs: &[Vec<u8>]) -> OutRun {
        let mut data = arena.push_item(&msgs[0]);
        for m in &msgs[1..] {
            if !arena.extend_item(&mut data, m) {
                panic!("test runs fit a chunk");
            }
        }
        OutRun {
            seq,
            id: seq + 1000,
            count: msgs.len() as u32,
            from: 0,
            dest: 0,
            scope: Scope::Encrypt,
            data,
            // As the channel keeps it: the item size when all are alike, so both ways of
            // counting what fits are exercised.
            item: if msgs.iter().all(|m| m.len() == msgs[0].len()) {
                wire::run_item_len(msgs[0].len()) as u32
            } else {
                0
            },
            last_sent: Time::ZERO,
            transmissions: 1,
            lost: false,
        }
    }

    /// Every message still held, by seq: (id, bytes), read back from the arena.
    fn contents(set: &Inflight, arena: &SendArena) -> BTreeMap<u64, (u64, Vec<u8>)> {
        let mut out = BTreeMap::new();
        for r in &set.runs {
            let mut rd = wire::Reader::new(arena.get(r.data));
            for k in 0..u64::from(r.count) {
                let len = rd.varint().unwrap() as usize;
                out.insert(r.seq + k, (r.id + k, rd.bytes(len).unwrap().to_vec()));
            }
            assert!(rd.is_empty(), "a run's bytes hold exactly its messages");
        }
        out
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(Vec<Vec<u8>>),
        RemoveRange(u8, u8),
        Split(u8, u8),
        Lost(u8),
        TakeAll,
    }

    fn op() -> impl Strategy<Value = Op> {
        let msg = proptest::collection::vec(any::<u8>(), 0..70);
        prop_oneof![
            4 => proptest::collection::vec(msg, 1..8).prop_map(Op::Push),
            4 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::RemoveRange(a, b)),
            2 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::Split(a, b)),
            1 => any::<u8>().prop_map(Op::Lost),
            1 => Just(Op::TakeAll),
        ]
    }

    proptest! {
        /// Behaves as a map from seq to message under the sender's use (appends past the end,
        /// removals of any range, splits anywhere): every message kept reads back whole, with
        /// its id, and the counters agree.
        #[test]
        fn matches_a_map_of_messages(ops in proptest::collection::vec(op(), 0..120)) {
            let mut arena = SendArena::default();
            let mut set = Inflight::default();
            let mut model: BTreeMap<u64, (u64, Vec<u8>)> = BTreeMap::new();
            let mut next = 0u64;
            for o in ops {
                match o {
                    Op::Push(msgs) => {
                        let r = run(&mut arena, next, &msgs);
                        for (k, m) in msgs.iter().enumerate() {
                            model.insert(next + k as u64, (next + k as u64 + 1000, m.clone()));
                        }
                        next += msgs.len() as u64 + 1;
                        set.push(r);
                    }
                    Op::RemoveRange(a, b) => {
                        let (a, b) = (u64::from(a.min(b)), u64::from(a.max(b)));
                        let mut got = Vec::new();
                        set.remove_range(&mut arena, a, b, |r| got.push((r.seq, r.count)));
                        let want: Vec<u64> = model.range(a..b).map(|(k, _)| *k).collect();
                        for k in &want { model.remove(k); }
                        let flat: Vec<u64> = got.iter()
                            .flat_map(|&(s, n)| s..s + u64::from(n)).collect();
                        prop_assert_eq!(flat, want);
                    }
                    Op::Split(i, k) if !set.runs.is_empty() => {
                        let i = i as usize % set.runs.len();
                        let n = set.runs[i].count;
                        if n > 1 {
                            set.split(&mut arena, i, 1 + u32::from(k) % (n - 1));
                        }
                    }
                    Op::Lost(i) if !set.runs.is_empty() => {
                        let i = i as usize % set.runs.len();
                        set.mark_lost(i);
                    }
                    Op::TakeAll => {
                        for r in set.take_all() { arena.release(r.data); }
                        model.clear();
                    }
                    _ => {}
                }
                prop_assert_eq!(&contents(&set, &arena), &model);
                prop_assert_eq!(set.len(), model.len());
                prop_assert_eq!(set.first_seq(), model.keys().next().copied());
                prop_assert_eq!(set.lost, set.runs.iter().filter(|r| r.lost).count());
                for w in set.runs.make_contiguous().windows(2) {
                    prop_assert!(w[0].end() <= w[1].seq);
                }
            }
        }
    }

    #[test]
    fn overlapping_finds_the_runs_a_range_touches() {
        let mut arena = SendArena::default();
        let mut set = Inflight::default();
        let m = vec![vec![1u8; 3]; 4];
        set.push(run(&mut arena, 0, &m)); // 0..4
        set.push(run(&mut arena, 10, &m)); // 10..14
        assert_eq!(set.overlapping(0, 1), 0..1);
        assert_eq!(set.overlapping(4, 10), 1..1);
        assert_eq!(set.overlapping(3, 11), 0..2);
        assert_eq!(set.overlapping(14, 99), 2..2);
        set.mark_lost(1);
        assert_eq!(set.first_lost_in(0, 99), Some(1));
        assert!(set.live_in(0, 4, Time::ZERO));
        assert!(!set.live_in(10, 14, Time::ZERO));
        set.sent(1, Time::ZERO);
        assert!(!set.has_lost());
    }
}
