//! The sender's messages in flight, by sequence number.
//!
//! Messages leave the queue in sequence order and the sender keeps at most a window of them
//! outstanding, so the in-flight set is a range `[base, base + slots)` with holes where
//! acknowledgements landed. A ring indexed by `seq - base` does in O(1), without allocating
//! per message, what an ordered map does in O(log n) with a node allocation (measured with
//! `sealink bench datagram`: the map was the largest single cost of a piggybacked message).

use std::collections::VecDeque;

#[derive(Debug)]
pub(crate) struct Inflight<T> {
    base: u64,
    /// `slots[i]` holds seq `base + i`; the front slot is occupied whenever any is.
    slots: VecDeque<Option<T>>,
    live: usize,
}

impl<T> Default for Inflight<T> {
    fn default() -> Self {
        Inflight {
            base: 0,
            slots: VecDeque::new(),
            live: 0,
        }
    }
}

impl<T> Inflight<T> {
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The lowest sequence number in flight.
    pub fn first_seq(&self) -> Option<u64> {
        (self.live > 0).then_some(self.base)
    }

    fn slot(&self, seq: u64) -> Option<usize> {
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        (i < self.slots.len()).then_some(i)
    }

    pub fn contains(&self, seq: u64) -> bool {
        self.get(seq).is_some()
    }

    pub fn get(&self, seq: u64) -> Option<&T> {
        self.slots.get(self.slot(seq)?)?.as_ref()
    }

    pub fn get_mut(&mut self, seq: u64) -> Option<&mut T> {
        let i = self.slot(seq)?;
        self.slots.get_mut(i)?.as_mut()
    }

    /// Puts `v` at `seq` unless something is there already; returns what is there. `seq` must
    /// not be below the lowest sequence number in flight (the sender only appends, and
    /// re-inserts nothing it removed); gaps up to it become holes.
    pub fn insert(&mut self, seq: u64, v: T) -> &mut T {
        if self.live == 0 {
            self.slots.clear();
            self.base = seq;
        }
        debug_assert!(seq >= self.base, "inflight insert below its base");
        let i = usize::try_from(seq.saturating_sub(self.base)).unwrap_or(usize::MAX);
        if i >= self.slots.len() {
            // Holes up to `seq` (none in the sender's case: it appends the next number).
            self.slots.resize_with(i, || None);
            self.slots.push_back(None);
        }
        let slot = &mut self.slots[i];
        if slot.is_none() {
            self.live += 1;
        }
        slot.get_or_insert(v)
    }

    pub fn remove(&mut self, seq: u64) -> Option<T> {
        let i = self.slot(seq)?;
        let v = self.slots[i].take()?;
        self.live -= 1;
        self.trim();
        Some(v)
    }

    /// Removes every entry in `[start, end)`, passing each to `f` in order. Costs at most the
    /// span in flight, whatever the range (ranges come from the peer).
    pub fn remove_range(&mut self, start: u64, end: u64, mut f: impl FnMut(u64, T)) {
        let lo = start.max(self.base);
        let hi = end.min(self.base.saturating_add(self.slots.len() as u64));
        let mut seq = lo;
        while seq < hi {
            let i = (seq - self.base) as usize;
            if let Some(v) = self.slots.get_mut(i).and_then(Option::take) {
                self.live -= 1;
                f(seq, v);
            }
            seq += 1;
        }
        self.trim();
    }

    /// Empties the set, yielding the entries in sequence order.
    pub fn take_all(&mut self) -> impl Iterator<Item = T> + use<T> {
        self.live = 0;
        std::mem::take(&mut self.slots).into_iter().flatten()
    }

    /// Drops leading holes so the front slot is occupied (or the ring is empty).
    fn trim(&mut self) {
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Append(u8),
        Remove(u8),
        RemoveRange(u8, u8),
        TakeAll,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..4).prop_map(Op::Append),
            3 => any::<u8>().prop_map(Op::Remove),
            2 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::RemoveRange(a, b)),
            1 => Just(Op::TakeAll),
        ]
    }

    proptest! {
        /// Behaves as an ordered map under the sender's use: appends at or past the end.
        #[test]
        fn matches_btreemap(ops in proptest::collection::vec(op(), 0..300)) {
            let mut ring: Inflight<u64> = Inflight::default();
            let mut model: BTreeMap<u64, u64> = BTreeMap::new();
            let mut next = 0u64;
            for o in ops {
                match o {
                    Op::Append(gap) => {
                        next += u64::from(gap);
                        prop_assert_eq!(*ring.insert(next, next * 10), next * 10);
                        model.insert(next, next * 10);
                        next += 1;
                    }
                    Op::Remove(s) => {
                        let s = u64::from(s) % (next + 1);
                        prop_assert_eq!(ring.remove(s), model.remove(&s));
                    }
                    Op::RemoveRange(a, b) => {
                        let (a, b) = (u64::from(a.min(b)), u64::from(a.max(b)));
                        let mut got = Vec::new();
                        ring.remove_range(a, b, |k, v| got.push((k, v)));
                        let want: Vec<(u64, u64)> = model.range(a..b).map(|(k, v)| (*k, *v)).collect();
                        for (k, _) in &want { model.remove(k); }
                        prop_assert_eq!(got, want);
                    }
                    Op::TakeAll => {
                        let got: Vec<u64> = ring.take_all().collect();
                        let want: Vec<u64> = std::mem::take(&mut model).into_values().collect();
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(ring.len(), model.len());
                prop_assert_eq!(ring.is_empty(), model.is_empty());
                prop_assert_eq!(ring.first_seq(), model.keys().next().copied());
                for s in 0..next + 2 {
                    prop_assert_eq!(ring.get(s), model.get(&s));
                    prop_assert_eq!(ring.contains(s), model.contains_key(&s));
                }
            }
        }
    }

    #[test]
    fn insert_keeps_an_existing_entry() {
        let mut r = Inflight::default();
        r.insert(5, 'a');
        assert_eq!(*r.insert(5, 'b'), 'a');
        assert_eq!(r.len(), 1);
        r.remove_range(0, u64::MAX, |_, _| {});
        assert!(r.is_empty());
    }
}
