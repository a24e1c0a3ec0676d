//! Receive-side message bookkeeping: which sequence numbers have been delivered, so that each
//! message is delivered exactly once however often it arrives, and what to acknowledge.

use std::collections::BTreeMap;

/// Every seq below `cumulative` was delivered; `above` holds delivered ranges `[start, end)`
/// above it, disjoint and non-adjacent. Bounded by the message window.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecvWindow {
    cumulative: u64,
    above: BTreeMap<u64, u64>,
}

impl RecvWindow {
    pub fn cumulative(&self) -> u64 {
        self.cumulative
    }

    /// Nothing was received above the cumulative point.
    pub fn nothing_above(&self) -> bool {
        self.above.is_empty()
    }

    pub fn contains(&self, seq: u64) -> bool {
        if seq < self.cumulative {
            return true;
        }
        self.above
            .range(..=seq)
            .next_back()
            .is_some_and(|(_, &end)| seq < end)
    }

    /// Records `seq`; returns false if it was already there.
    pub fn insert(&mut self, seq: u64) -> bool {
        if seq == self.cumulative && self.above.is_empty() {
            // In order with nothing ahead: the common case on a lossless path.
            self.cumulative += 1;
            return true;
        }
        if self.contains(seq) {
            return false;
        }
        let mut start = seq;
        let mut end = seq + 1;
        if let Some((&s, &e)) = self.above.range(..seq).next_back() {
            if e == seq {
                start = s;
                self.above.remove(&s);
            }
        }
        if let Some(&e) = self.above.get(&end) {
            self.above.remove(&end);
            end = e;
        }
        if start == self.cumulative {
            self.cumulative = end;
        } else {
            self.above.insert(start, end);
        }
        true
    }

    /// Settles every seq below `below` (the sender abandoned what it had not had
    /// acknowledged), joining the ranges it reaches. Returns true if the cumulative point moved.
    /// Costs at most the ranges it removes, whatever `below` is.
    pub fn advance_to(&mut self, below: u64) -> bool {
        if below <= self.cumulative {
            return false;
        }
        self.cumulative = below;
        while let Some((&s, &e)) = self.above.first_key_value() {
            if s > self.cumulative {
                break;
            }
            self.above.remove(&s);
            self.cumulative = self.cumulative.max(e);
        }
        true
    }

    /// The newest `max` ranges above the cumulative point, ascending.
    pub fn newest_ranges(&self, max: usize, out: &mut Vec<(u64, u64)>) {
        out.clear();
        out.extend(self.above.iter().rev().take(max).map(|(&s, &e)| (s, e)));
        out.reverse();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        #[test]
        fn matches_model(ops in proptest::collection::vec((0u64..200, any::<bool>()), 0..400)) {
            let mut w = RecvWindow::default();
            let mut model = BTreeSet::new();
            for (s, abandon) in ops {
                if abandon && s % 8 == 0 {
                    // Everything below `s` settles.
                    let before = w.cumulative();
                    prop_assert_eq!(w.advance_to(s), s > before);
                    model.extend(0..s);
                } else {
                    prop_assert_eq!(w.insert(s), model.insert(s));
                }
                let mut cum = 0;
                while model.contains(&cum) { cum += 1; }
                prop_assert_eq!(w.cumulative(), cum);
                let mut ranges = Vec::new();
                w.newest_ranges(usize::MAX, &mut ranges);
                let mut flat = BTreeSet::new();
                for (s, e) in &ranges { prop_assert!(s < e); flat.extend(*s..*e); }
                for w2 in ranges.windows(2) { prop_assert!(w2[0].1 < w2[1].0); }
                let expect: BTreeSet<u64> = model.iter().copied().filter(|&x| x >= cum).collect();
                prop_assert_eq!(flat, expect);
            }
        }
    }
}
