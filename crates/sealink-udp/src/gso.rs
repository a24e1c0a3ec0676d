//! Grouping of datagrams into GSO runs for [`crate::UdpIo::send`]: datagrams laid back to back
//! in one buffer, to one destination, of one size (the last may be shorter) leave in one
//! `sendmsg`. The datagram node and the tunnel both build their sends with [`GsoRuns`].

use std::net::SocketAddr;

/// A run of datagrams for one [`crate::UdpIo::send`] call: `buf[start..start + len]` holds
/// datagrams of `segment` bytes each to `dest`, the last possibly shorter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub dest: SocketAddr,
    pub start: usize,
    pub len: usize,
    pub segment: usize,
    /// No datagram may join: it ended on a shorter one, or was pushed alone.
    closed: bool,
}

impl Run {
    /// Datagrams in the run.
    pub fn datagrams(&self) -> usize {
        self.len.div_ceil(self.segment)
    }

    /// The run's bytes in the buffer its offsets refer to.
    pub fn bytes<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.start..self.start + self.len]
    }
}

/// Runs built from datagrams in send order. A datagram joins the last run when it is to the
/// same destination, starts where the run ends, is no longer than the run's segment, the run
/// has not ended on a shorter datagram, and the run holds fewer than `max_segments`.
#[derive(Debug, Clone)]
pub struct GsoRuns {
    runs: Vec<Run>,
    max_segments: usize,
}

impl GsoRuns {
    /// At most `max_segments` datagrams per run (at least 1; 1 turns grouping off).
    pub fn new(max_segments: usize) -> Self {
        GsoRuns {
            runs: Vec::new(),
            max_segments: max_segments.max(1),
        }
    }

    /// Adds the datagram `buf[start..start + len]` to `dest`; returns the index of its run.
    /// Empty datagrams (`len == 0`) are not allowed.
    pub fn push(&mut self, dest: SocketAddr, start: usize, len: usize) -> usize {
        debug_assert!(len > 0, "empty datagram");
        let max = self.max_segments;
        let joins = |r: &Run| {
            r.dest == dest
                && !r.closed
                && start == r.start + r.len
                && len <= r.segment
                && r.datagrams() < max
        };
        if let Some(r) = self.runs.last_mut().filter(|r| joins(r)) {
            r.len += len;
            r.closed = len < r.segment;
            return self.runs.len() - 1;
        }
        self.start_run(dest, start, len, false)
    }

    /// Adds a datagram in a run of its own that nothing joins (a cookie reply, a copy from
    /// another buffer); returns the index of its run.
    pub fn push_alone(&mut self, dest: SocketAddr, start: usize, len: usize) -> usize {
        self.start_run(dest, start, len, true)
    }

    fn start_run(&mut self, dest: SocketAddr, start: usize, len: usize, closed: bool) -> usize {
        self.runs.push(Run {
            dest,
            start,
            len,
            segment: len.max(1),
            closed,
        });
        self.runs.len() - 1
    }

    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Takes the runs out in order, leaving none (the allocation is kept).
    pub fn drain(&mut self) -> std::vec::Drain<'_, Run> {
        self.runs.drain(..)
    }

    pub fn clear(&mut self) {
        self.runs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn addr(k: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, k], 4000))
    }

    #[test]
    fn equal_datagrams_to_one_peer_form_one_run() {
        let mut g = GsoRuns::new(64);
        let mut off = 0;
        for len in [100, 100, 100, 40] {
            assert_eq!(g.push(addr(1), off, len), 0);
            off += len;
        }
        // After the shorter one the run is closed.
        assert_eq!(g.push(addr(1), off, 40), 1);
        assert_eq!(g.runs()[0].datagrams(), 4);
        assert_eq!(g.runs()[0].segment, 100);
        assert_eq!(g.runs()[0].len, 340);
    }

    #[test]
    fn destination_gap_size_limit_and_alone_break_runs() {
        let mut g = GsoRuns::new(2);
        assert_eq!(g.push(addr(1), 0, 100), 0);
        assert_eq!(g.push(addr(1), 100, 100), 0);
        // Limit of 2 reached.
        assert_eq!(g.push(addr(1), 200, 100), 1);
        // Other destination.
        assert_eq!(g.push(addr(2), 300, 100), 2);
        // Not contiguous.
        assert_eq!(g.push(addr(2), 500, 100), 3);
        // Larger than the segment.
        assert_eq!(g.push(addr(2), 600, 120), 4);
        assert_eq!(g.push_alone(addr(2), 720, 120), 5);
        assert_eq!(g.push(addr(2), 840, 120), 6);
        assert_eq!(g.drain().count(), 7);
        assert!(g.is_empty());
    }

    proptest! {
        /// The runs cover every datagram in order, each run has one destination and equal
        /// segments but a possibly shorter last one, and no run exceeds the limit.
        #[test]
        fn runs_cover_every_datagram_in_order(
            max in 1usize..8,
            dgs in proptest::collection::vec((0u8..3, 1usize..6, any::<bool>(), any::<bool>()), 0..60),
        ) {
            let mut g = GsoRuns::new(max);
            // Datagrams: (dest, start, len), back to back unless `gap`.
            let mut want = Vec::new();
            let mut off = 0;
            for (d, len, gap, alone) in dgs {
                off += usize::from(gap);
                let run = if alone {
                    g.push_alone(addr(d), off, len)
                } else {
                    g.push(addr(d), off, len)
                };
                prop_assert_eq!(run, g.runs().len() - 1);
                want.push((addr(d), off, len));
                off += len;
            }
            let mut got = Vec::new();
            for r in g.runs() {
                prop_assert!(r.datagrams() <= max);
                prop_assert!(r.len > 0);
                let mut at = r.start;
                let end = r.start + r.len;
                while at < end {
                    let len = r.segment.min(end - at);
                    // Only the last may be shorter.
                    prop_assert!(len == r.segment || at + len == end);
                    got.push((r.dest, at, len));
                    at += len;
                }
            }
            prop_assert_eq!(got, want);
        }
    }
}
