//! Sliding-window anti-replay protection (RFC 6479 block ring).
//!
//! The window is a ring of [`WINDOW_BITS`]` / 64` blocks of 64 bits each. Bit
//! `c % 64` of block `(c / 64) % RING_BLOCKS` records whether counter `c` has
//! been accepted. When the highest counter advances into a new block, the
//! blocks that were skipped over are cleared, so one block of the ring is
//! always "in progress" and the usable window is [`WINDOW_SIZE`] =
//! `WINDOW_BITS - 64` counters.
//!
//! # Guarantee
//!
//! Let `h` be the highest accepted counter. For any counter `c`:
//!
//! * no counter has been accepted yet, or `c > h`: [`ReplayVerdict::Fresh`];
//! * `h - c >= WINDOW_SIZE`: [`ReplayVerdict::TooOld`];
//! * otherwise (`h - WINDOW_SIZE < c <= h`) the window remembers exactly
//!   whether `c` was accepted: [`ReplayVerdict::Replayed`] if it was,
//!   [`ReplayVerdict::Fresh`] if not.
//!
//! Consequently a counter is never accepted twice. All counters from `0` to
//! `u64::MAX` inclusive are valid; no arithmetic can overflow.
//!
//! The state is a fixed-size array: checking and accepting never allocate.
//!
//! # Usage
//!
//! Call [`ReplayWindow::check`] before spending effort authenticating a
//! packet (it does not change state), and [`ReplayWindow::accept`] only after
//! the packet authenticated, so forged packets cannot advance the window.

/// Number of bits in the ring (counters kept behind the highest seen,
/// including the partially used current block).
pub const WINDOW_BITS: u64 = 8192;

/// Usable window: counters strictly less than `WINDOW_SIZE` below the highest
/// accepted counter are remembered exactly; older ones are
/// [`ReplayVerdict::TooOld`].
pub const WINDOW_SIZE: u64 = WINDOW_BITS - BLOCK_BITS;

const BLOCK_BITS: u64 = u64::BITS as u64;
const RING_BLOCKS: usize = (WINDOW_BITS / BLOCK_BITS) as usize;

// The ring index arithmetic below uses `% RING_BLOCKS`; keep it a power of two
// so that it stays a mask, and at least two blocks so the window is non-empty.
const _: () = assert!(RING_BLOCKS.is_power_of_two() && RING_BLOCKS >= 2);

/// Outcome of checking a counter against the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayVerdict {
    /// Not seen before (and within or ahead of the window).
    Fresh,
    /// Already accepted.
    Replayed,
    /// Too far behind the highest accepted counter to tell; must be dropped.
    TooOld,
}

/// RFC 6479 anti-replay window of sealink's own protocol: [`WINDOW_SIZE`] counters.
pub type ReplayWindow = RingWindow<RING_BLOCKS>;

/// RFC 6479 anti-replay window of `BLOCKS` 64-bit blocks: it remembers
/// [`RingWindow::SIZE`]` = (BLOCKS - 1) * 64` counters. [`ReplayWindow`] is the product's, on
/// both wires (128 blocks, a power of two, so the ring index is a mask); WireGuard's own
/// 2,048-counter size is `RingWindow<33>`. Each size is its own monomorphised type, so the
/// parameter costs the existing path nothing.
#[derive(Debug, Clone)]
pub struct RingWindow<const BLOCKS: usize> {
    ring: [u64; BLOCKS],
    highest: u64,
    any_seen: bool,
}

impl<const BLOCKS: usize> Default for RingWindow<BLOCKS> {
    fn default() -> Self {
        Self::new()
    }
}

#[inline]
fn block_index<const BLOCKS: usize>(counter: u64) -> usize {
    // Lossless: the result is < BLOCKS.
    ((counter / BLOCK_BITS) % BLOCKS as u64) as usize
}

#[inline]
fn bit_mask(counter: u64) -> u64 {
    1u64 << (counter % BLOCK_BITS)
}

impl<const BLOCKS: usize> RingWindow<BLOCKS> {
    /// Counters remembered exactly behind the highest accepted one.
    pub const SIZE: u64 = {
        assert!(BLOCKS >= 2, "a ring window needs at least two blocks");
        (BLOCKS as u64 - 1) * BLOCK_BITS
    };

    /// An empty window: every counter is fresh.
    pub const fn new() -> Self {
        Self {
            ring: [0; BLOCKS],
            highest: 0,
            any_seen: false,
        }
    }

    /// Classify `counter` without changing any state.
    ///
    /// Call this before authenticating a packet.
    pub fn check(&self, counter: u64) -> ReplayVerdict {
        if !self.any_seen || counter > self.highest {
            return ReplayVerdict::Fresh;
        }
        // counter <= highest, so this cannot underflow.
        if self.highest - counter >= Self::SIZE {
            return ReplayVerdict::TooOld;
        }
        if self.ring[block_index::<BLOCKS>(counter)] & bit_mask(counter) != 0 {
            ReplayVerdict::Replayed
        } else {
            ReplayVerdict::Fresh
        }
    }

    /// Check `counter` and, if it is fresh, record it as accepted.
    ///
    /// Returns the verdict of [`check`](Self::check); the window only changes
    /// when that verdict is [`ReplayVerdict::Fresh`]. Call this only after the
    /// packet carrying `counter` has been authenticated.
    pub fn accept(&mut self, counter: u64) -> ReplayVerdict {
        let verdict = self.check(counter);
        if verdict != ReplayVerdict::Fresh {
            return verdict;
        }
        if !self.any_seen {
            // The ring is all zeroes until the first acceptance.
            self.any_seen = true;
            self.highest = counter;
        } else if counter > self.highest {
            let current_block = self.highest / BLOCK_BITS;
            let new_block = counter / BLOCK_BITS;
            let advance = new_block - current_block;
            if advance >= BLOCKS as u64 {
                self.ring = [0; BLOCKS];
            } else {
                // advance < BLOCKS, and current_block <= u64::MAX / 64,
                // so current_block + advance cannot overflow.
                for step in 1..=advance {
                    self.ring[block_index::<BLOCKS>((current_block + step) * BLOCK_BITS)] = 0;
                }
            }
            self.highest = counter;
        }
        self.ring[block_index::<BLOCKS>(counter)] |= bit_mask(counter);
        ReplayVerdict::Fresh
    }

    /// The highest accepted counter, if any counter has been accepted.
    pub fn highest(&self) -> Option<u64> {
        self.any_seen.then_some(self.highest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    use ReplayVerdict::{Fresh, Replayed, TooOld};

    #[test]
    fn sizes() {
        assert_eq!(ReplayWindow::SIZE, WINDOW_SIZE);
        assert_eq!(RingWindow::<33>::SIZE, 2048);
    }

    /// The WireGuard size (not a power of two): exactly 2,048 counters remembered.
    #[test]
    fn wireguard_size_boundary() {
        let mut w = RingWindow::<33>::new();
        for c in 0..5000u64 {
            assert_eq!(w.accept(c), Fresh);
        }
        assert_eq!(w.check(4999 - 2047), Replayed);
        assert_eq!(w.check(4999 - 2048), TooOld);
        let mut w = RingWindow::<33>::new();
        assert_eq!(w.accept(10_000), Fresh);
        assert_eq!(w.accept(10_000 - 2047), Fresh);
        assert_eq!(w.accept(10_000 - 2048), TooOld);
        assert_eq!(w.accept(10_000 + 64 * 40), Fresh);
        assert_eq!(w.accept(10_000), TooOld);
    }

    #[test]
    fn empty_window() {
        let w = ReplayWindow::new();
        assert_eq!(w.highest(), None);
        assert_eq!(w.check(0), Fresh);
        assert_eq!(w.check(12345), Fresh);
        assert_eq!(w.check(u64::MAX), Fresh);
        let d = ReplayWindow::default();
        assert_eq!(d.highest(), None);
    }

    #[test]
    fn check_does_not_mutate() {
        let mut w = ReplayWindow::new();
        assert_eq!(w.check(5), Fresh);
        assert_eq!(w.check(5), Fresh);
        assert_eq!(w.highest(), None);
        assert_eq!(w.accept(5), Fresh);
        assert_eq!(w.check(5), Replayed);
        assert_eq!(w.check(5), Replayed);
        assert_eq!(w.check(6), Fresh);
        assert_eq!(w.highest(), Some(5));
    }

    #[test]
    fn counter_zero_is_valid() {
        let mut w = ReplayWindow::new();
        assert_eq!(w.accept(0), Fresh);
        assert_eq!(w.highest(), Some(0));
        assert_eq!(w.accept(0), Replayed);
        assert_eq!(w.accept(1), Fresh);
        assert_eq!(w.accept(0), Replayed);
    }

    #[test]
    fn in_order() {
        let mut w = ReplayWindow::new();
        for c in 0..3 * WINDOW_BITS {
            assert_eq!(w.accept(c), Fresh, "counter {c}");
            assert_eq!(w.highest(), Some(c));
        }
        let h = 3 * WINDOW_BITS - 1;
        for c in h + 1 - WINDOW_SIZE..=h {
            assert_eq!(w.check(c), Replayed, "counter {c}");
        }
        assert_eq!(w.check(h - WINDOW_SIZE), TooOld);
        assert_eq!(w.check(0), TooOld);
    }

    #[test]
    fn reordering_within_window() {
        let mut w = ReplayWindow::new();
        assert_eq!(w.accept(1000), Fresh);
        // Everything in the usable window below the highest is still fresh.
        for c in (1000 - 999..1000).rev().step_by(3) {
            assert_eq!(w.accept(c), Fresh, "counter {c}");
        }
        for c in (1000 - 999..1000).rev().step_by(3) {
            assert_eq!(w.accept(c), Replayed, "counter {c}");
        }
        assert_eq!(w.accept(999), Replayed);
        assert_eq!(w.accept(998), Fresh);
        assert_eq!(w.highest(), Some(1000));
        assert_eq!(w.accept(0), Fresh);
        assert_eq!(w.accept(0), Replayed);
    }

    #[test]
    fn oldest_and_newest_edge_of_window() {
        for h in [
            WINDOW_SIZE,
            WINDOW_SIZE + 1,
            WINDOW_BITS,
            WINDOW_BITS + 63,
            10 * WINDOW_BITS + 17,
        ] {
            let mut w = ReplayWindow::new();
            assert_eq!(w.accept(h), Fresh);
            let oldest = h - (WINDOW_SIZE - 1);
            assert_eq!(w.check(oldest), Fresh, "h {h}");
            assert_eq!(w.accept(oldest), Fresh, "h {h}");
            assert_eq!(w.accept(oldest), Replayed, "h {h}");
            assert_eq!(w.check(oldest - 1), TooOld, "h {h}");
            assert_eq!(w.accept(oldest - 1), TooOld, "h {h}");
        }
    }

    #[test]
    fn duplicates() {
        let mut w = ReplayWindow::new();
        for c in [7, 3, 7, 9, 3, 9, 8] {
            let _ = w.accept(c);
        }
        for c in [3, 7, 8, 9] {
            assert_eq!(w.accept(c), Replayed);
        }
        for c in [0, 1, 2, 4, 5, 6] {
            assert_eq!(w.check(c), Fresh);
        }
    }

    #[test]
    fn too_old() {
        let mut w = ReplayWindow::new();
        assert_eq!(w.accept(100_000), Fresh);
        assert_eq!(w.accept(100_000 - WINDOW_SIZE), TooOld);
        assert_eq!(w.accept(100_000 - WINDOW_BITS), TooOld);
        assert_eq!(w.accept(0), TooOld);
        // TooOld does not change state.
        assert_eq!(w.highest(), Some(100_000));
        assert_eq!(w.accept(100_000 - WINDOW_SIZE + 1), Fresh);
    }

    #[test]
    fn big_jump_clears_everything() {
        let mut w = ReplayWindow::new();
        for c in 0..200 {
            assert_eq!(w.accept(c), Fresh);
        }
        // Jump so far that the whole ring is stale.
        let far = 199 + 5 * WINDOW_BITS;
        assert_eq!(w.accept(far), Fresh);
        assert_eq!(w.highest(), Some(far));
        // Stale bits must not make fresh counters look replayed: the counters
        // that share ring slots with 0..200 are fresh.
        for c in far - WINDOW_SIZE + 1..far {
            assert_eq!(w.check(c), Fresh, "counter {c}");
        }
        assert_eq!(w.check(far), Replayed);
        assert_eq!(w.check(100), TooOld);
    }

    #[test]
    fn partial_jump_clears_skipped_blocks() {
        let mut w = ReplayWindow::new();
        for c in 0..WINDOW_BITS {
            assert_eq!(w.accept(c), Fresh);
        }
        // Advance by half the ring: counters in the blocks that were skipped
        // over alias the old (now too old) counters and must read fresh.
        let h = WINDOW_BITS - 1 + WINDOW_BITS / 2;
        assert_eq!(w.accept(h), Fresh);
        for c in h - WINDOW_SIZE + 1..WINDOW_BITS {
            assert_eq!(w.check(c), Replayed, "counter {c}");
        }
        for c in WINDOW_BITS..h {
            assert_eq!(w.check(c), Fresh, "counter {c}");
        }
    }

    #[test]
    fn near_u64_max() {
        let mut w = ReplayWindow::new();
        assert_eq!(w.accept(u64::MAX - 1), Fresh);
        assert_eq!(w.accept(u64::MAX), Fresh);
        assert_eq!(w.highest(), Some(u64::MAX));
        assert_eq!(w.accept(u64::MAX), Replayed);
        assert_eq!(w.accept(u64::MAX - 1), Replayed);
        assert_eq!(w.accept(u64::MAX - 2), Fresh);
        assert_eq!(w.accept(u64::MAX - (WINDOW_SIZE - 1)), Fresh);
        assert_eq!(w.accept(u64::MAX - WINDOW_SIZE), TooOld);
        assert_eq!(w.accept(0), TooOld);

        // From zero straight to the maximum.
        let mut w = ReplayWindow::new();
        assert_eq!(w.accept(0), Fresh);
        assert_eq!(w.accept(u64::MAX), Fresh);
        assert_eq!(w.check(u64::MAX - 64), Fresh);
        assert_eq!(w.check(0), TooOld);

        // Walk in order up to the maximum across block boundaries.
        let mut w = ReplayWindow::new();
        for c in u64::MAX - 3 * WINDOW_BITS..=u64::MAX {
            assert_eq!(w.accept(c), Fresh, "counter {c}");
        }
        for c in u64::MAX - WINDOW_SIZE + 1..=u64::MAX {
            assert_eq!(w.check(c), Replayed, "counter {c}");
        }
    }

    /// Reference model: remembers every accepted counter.
    #[derive(Default)]
    struct Model {
        accepted: HashSet<u64>,
        highest: Option<u64>,
    }

    impl Model {
        fn check(&self, c: u64) -> ReplayVerdict {
            match self.highest {
                None => Fresh,
                Some(h) if c > h => Fresh,
                Some(h) if h - c >= WINDOW_SIZE => TooOld,
                Some(_) if self.accepted.contains(&c) => Replayed,
                Some(_) => Fresh,
            }
        }

        fn accept(&mut self, c: u64) -> ReplayVerdict {
            let v = self.check(c);
            if v == Fresh {
                self.accepted.insert(c);
                self.highest = Some(self.highest.map_or(c, |h| h.max(c)));
            }
            v
        }
    }

    #[derive(Debug, Clone, Copy)]
    enum Op {
        Check(i64),
        Accept(i64),
        /// Jump to an arbitrary counter and accept it.
        Jump(u64),
    }

    fn delta() -> impl Strategy<Value = i64> {
        let w = WINDOW_BITS as i64;
        prop_oneof![
            4 => -100i64..100,
            4 => -(w + 200)..(w + 200),
            1 => -(4 * w)..(4 * w),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => delta().prop_map(Op::Accept),
            3 => delta().prop_map(Op::Check),
            1 => any::<u64>().prop_map(Op::Jump),
        ]
    }

    fn start() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            0u64..3 * WINDOW_BITS,
            (u64::MAX - 3 * WINDOW_BITS)..=u64::MAX,
            Just(u64::MAX),
            any::<u64>(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn matches_model(start in start(), ops in prop::collection::vec(op(), 1..400)) {
            let mut window = ReplayWindow::new();
            let mut model = Model::default();
            let mut cursor = start;
            for op in ops {
                match op {
                    Op::Check(d) => {
                        let c = cursor.saturating_add_signed(d);
                        prop_assert_eq!(window.check(c), model.check(c), "check {}", c);
                    }
                    Op::Accept(d) => {
                        let c = cursor.saturating_add_signed(d);
                        prop_assert_eq!(window.accept(c), model.accept(c), "accept {}", c);
                        cursor = c;
                    }
                    Op::Jump(c) => {
                        prop_assert_eq!(window.accept(c), model.accept(c), "jump {}", c);
                        cursor = c;
                    }
                }
                prop_assert_eq!(window.highest(), model.highest);
            }
            // Everything in the window must agree with the model afterwards.
            if let Some(h) = model.highest {
                let lo = h.saturating_sub(WINDOW_SIZE + 2);
                let hi = h.saturating_add(2);
                for c in lo..=hi {
                    prop_assert_eq!(window.check(c), model.check(c), "final check {}", c);
                }
            }
        }

        #[test]
        fn never_accepts_twice(
            start in start(),
            deltas in prop::collection::vec(delta(), 1..600),
        ) {
            let mut window = ReplayWindow::new();
            let mut accepted = HashSet::new();
            let mut cursor = start;
            for d in deltas {
                let c = cursor.saturating_add_signed(d);
                if window.accept(c) == Fresh {
                    prop_assert!(accepted.insert(c), "counter {} accepted twice", c);
                    cursor = c;
                }
            }
        }

        #[test]
        fn check_is_pure(
            start in start(),
            deltas in prop::collection::vec(delta(), 1..100),
            probe in delta(),
        ) {
            let mut window = ReplayWindow::new();
            let mut cursor = start;
            for d in deltas {
                cursor = cursor.saturating_add_signed(d);
                let _ = window.accept(cursor);
            }
            let before = window.clone();
            let c = cursor.saturating_add_signed(probe);
            let _ = window.check(c);
            prop_assert_eq!(before.ring, window.ring);
            prop_assert_eq!(before.highest(), window.highest());
        }
    }
}
