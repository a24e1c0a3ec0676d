//! Urgency policies U1-U5 (paper 002, Table 2), applied to a trace before it is sent.
//!
//! The paper names each policy's parameter (K, A, n) but gives no value for it; it reports only
//! the share of urgent messages each produced on the ALL trace (Table 7: 0.08, 3, 10, 19, 27 %).
//! We choose K and A as the quantiles of the trace that give those shares (so U1 and U3 reproduce
//! the paper's urgent fraction by construction, and what is compared is T and L), and n = 4
//! (25 %, the nearest to 27 %). U2 and U4 have no free parameter.
//!
//! U2's "time to next timeout expiration" needs the sender's queue: we follow a shadow queue
//! that the timeout M and urgent messages empty (the 64 KB limit is ignored here); an empty
//! queue has no timeout pending, so the condition is false and the message starts one.

use super::trace::Msg;

/// Table 7's urgent shares on ALL (fractions).
pub const PAPER_SHARE: [f64; 5] = [0.0008, 0.03, 0.10, 0.19, 0.27];

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    /// Messages larger than `k` bytes are urgent.
    U1 { k: usize },
    /// Urgent if the next timeout expiration is more than M/2 away and not low priority.
    U2 { timeout: f64 },
    /// Urgent if the next message arrives more than `a` seconds later and not low priority.
    U3 { a: f64 },
    /// Urgent if smaller than 1 KB and the previous message was larger than 1 KB.
    U4,
    /// Every `n`-th message is urgent.
    U5 { n: usize },
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::U1 { .. } => "U1",
            Policy::U2 { .. } => "U2",
            Policy::U3 { .. } => "U3",
            Policy::U4 => "U4",
            Policy::U5 { .. } => "U5",
        }
    }

    /// The parameter as text, for the tables.
    pub fn parameter(self) -> String {
        match self {
            Policy::U1 { k } => format!("K = {k} B"),
            Policy::U2 { timeout } => format!("M/2 = {:.1} ms", timeout * 500.0),
            Policy::U3 { a } => format!("A = {:.2} ms", a * 1000.0),
            Policy::U4 => "1 KB".to_owned(),
            Policy::U5 { n } => format!("n = {n}"),
        }
    }

    /// Which messages of `msgs` are urgent.
    pub fn classify(self, msgs: &[Msg]) -> Vec<bool> {
        const KB: usize = 1024;
        match self {
            Policy::U1 { k } => msgs.iter().map(|m| m.size > k).collect(),
            Policy::U2 { timeout } => shadow_queue(msgs, timeout),
            Policy::U3 { a } => msgs
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    // The last message has no successor: the wait is unbounded.
                    let gap = msgs.get(i + 1).map_or(f64::INFINITY, |n| n.at - m.at);
                    gap > a && !m.low_priority
                })
                .collect(),
            Policy::U4 => msgs
                .iter()
                .enumerate()
                .map(|(i, m)| m.size < KB && i > 0 && msgs[i - 1].size > KB)
                .collect(),
            Policy::U5 { n } => (0..msgs.len()).map(|i| n > 0 && (i + 1) % n == 0).collect(),
        }
    }

    /// Policy `which` (1..=5) with its parameter chosen for `msgs` as the module says.
    pub fn calibrated(which: usize, msgs: &[Msg], timeout: f64) -> Option<Policy> {
        let share = *PAPER_SHARE.get(which.checked_sub(1)?)?;
        Some(match which {
            1 => {
                let mut sizes: Vec<usize> = msgs.iter().map(|m| m.size).collect();
                sizes.sort_unstable();
                Policy::U1 {
                    k: quantile_above(&sizes, share).unwrap_or(usize::MAX),
                }
            }
            2 => Policy::U2 { timeout },
            3 => {
                // Among messages that may be urgent, the gap that leaves `share` of all above it.
                let mut gaps: Vec<f64> = msgs
                    .windows(2)
                    .filter(|w| !w[0].low_priority)
                    .map(|w| w[1].at - w[0].at)
                    .collect();
                gaps.sort_by(f64::total_cmp);
                let want = (share * msgs.len() as f64).round() as usize;
                let a = match gaps.len().checked_sub(want + 1) {
                    Some(i) => gaps[i],
                    None => 0.0,
                };
                Policy::U3 { a }
            }
            4 => Policy::U4,
            _ => Policy::U5 { n: 4 },
        })
    }
}

/// The value `v` of sorted `values` such that about `share` of them are strictly greater.
fn quantile_above<T: Copy>(sorted: &[T], share: f64) -> Option<T> {
    let want = (share * sorted.len() as f64).round() as usize;
    sorted.len().checked_sub(want + 1).map(|i| sorted[i])
}

fn shadow_queue(msgs: &[Msg], timeout: f64) -> Vec<bool> {
    let mut expiry: Option<f64> = None;
    msgs.iter()
        .map(|m| {
            if expiry.is_some_and(|e| e <= m.at) {
                expiry = None; // the timeout fired and emptied the queue
            }
            let urgent = expiry.is_some_and(|e| e - m.at > timeout / 2.0) && !m.low_priority;
            if urgent {
                expiry = None;
            } else if expiry.is_none() {
                expiry = Some(m.at + timeout);
            }
            urgent
        })
        .collect()
}

/// Share of `true` in `flags`.
pub fn share(flags: &[bool]) -> f64 {
    flags.iter().filter(|u| **u).count() as f64 / flags.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::super::trace::{Proto, TraceKind, generate};
    use super::*;

    fn msg(at_ms: f64, size: usize, low_priority: bool) -> Msg {
        Msg {
            at: at_ms / 1000.0,
            size,
            proto: Proto::Tcp,
            low_priority,
        }
    }

    #[test]
    fn u1_size_threshold() {
        let m = [
            msg(0.0, 10, false),
            msg(1.0, 100, true),
            msg(2.0, 101, false),
        ];
        assert_eq!(Policy::U1 { k: 100 }.classify(&m), [false, false, true]);
    }

    #[test]
    fn u2_half_timeout_rule() {
        // M = 40 ms. 0: empty queue, starts a timeout at 40. 10: 30 ms left > 20: urgent, and
        // empties the queue. 12: starts a timeout at 52. 35: 17 ms left: not urgent. 45: 7 ms
        // left, low priority anyway. 60: the timeout fired at 52, queue empty: starts one at 100.
        // 70: 30 ms left but low priority. 75: 25 ms left: urgent.
        let m = [
            msg(0.0, 1, false),
            msg(10.0, 1, false),
            msg(12.0, 1, false),
            msg(35.0, 1, false),
            msg(45.0, 1, true),
            msg(60.0, 1, false),
            msg(70.0, 1, true),
            msg(75.0, 1, false),
        ];
        assert_eq!(
            Policy::U2 { timeout: 0.040 }.classify(&m),
            [false, true, false, false, false, false, false, true]
        );
    }

    #[test]
    fn u3_lookahead_gap() {
        let m = [
            msg(0.0, 1, false),
            msg(1.0, 1, false),
            msg(5.0, 1, true),
            msg(10.0, 1, false),
            msg(10.5, 1, false),
        ];
        // Gaps 1, 4, 5, 0.5, infinite; A = 2 ms; the third is low priority.
        assert_eq!(
            Policy::U3 { a: 0.002 }.classify(&m),
            [false, true, false, false, true]
        );
    }

    #[test]
    fn u4_small_after_large() {
        let m = [
            msg(0.0, 100, false),
            msg(1.0, 2000, false),
            msg(2.0, 100, false),
            msg(3.0, 100, false),
            msg(4.0, 1024, false),
            msg(5.0, 1025, false),
            msg(6.0, 1023, false),
        ];
        assert_eq!(
            Policy::U4.classify(&m),
            [false, false, true, false, false, false, true]
        );
    }

    #[test]
    fn u5_every_nth() {
        let m: Vec<Msg> = (0..9).map(|i| msg(i as f64, 1, false)).collect();
        let u = Policy::U5 { n: 4 }.classify(&m);
        assert_eq!(
            u,
            [false, false, false, true, false, false, false, true, false]
        );
    }

    #[test]
    fn calibrated_shares_follow_table_7() {
        let t = generate(TraceKind::All, 10_000, 11);
        let u3 = Policy::calibrated(3, &t.msgs, 0.040).unwrap();
        let s = share(&u3.classify(&t.msgs));
        assert!((s - 0.10).abs() < 0.01, "U3 share {s}");
        let u1 = Policy::calibrated(1, &t.msgs, 0.040).unwrap();
        assert!(share(&u1.classify(&t.msgs)) < 0.01);
        let u5 = Policy::calibrated(5, &t.msgs, 0.040).unwrap();
        assert_eq!(share(&u5.classify(&t.msgs)), 0.25);
        assert!(Policy::calibrated(6, &t.msgs, 0.040).is_none());
        assert!(Policy::calibrated(0, &t.msgs, 0.040).is_none());
    }
}
