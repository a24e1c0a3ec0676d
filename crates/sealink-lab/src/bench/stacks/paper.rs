//! Paper 000's figures (Nahum, Yates, O'Malley, Orman, Schroeppel, NDSS 1996) as numbers, and
//! the table that puts ours beside them in `stacks.md`.
//!
//! Where the values come from, and how precisely they can be read: the copy of the paper in
//! `papers/000_*.txt` is text only. The plots of Figures 3-11 are not in it, so no value here
//! was measured off a plot, and that copy has no page numbers (sources are given by figure
//! and section). Each value is what the text says about a figure; [`Read`] says how:
//! - [`Read::Exact`]: equal by construction ("at 12 connections the two schemes are
//!   equivalent"), printed without a "~".
//! - [`Read::Stated`]: a number the text prints ("a speedup of 8 with 12 processors"), good to
//!   the digits printed (8 means 7.5 to 8.5), printed as "~8".
//! - [`Read::Derived`]: arithmetic on two stated numbers, as precise as the rougher of them.
//! - [`Read::Ideal`]: the text says "essentially linear", "very close to linear" or that a
//!   difference "disappears": recorded as the ideal value (12 on 12 processors, a ratio of 1),
//!   printed as "~12" / "~1". The plot may sit some way off the ideal; the text does not say how
//!   far, so read these to about 10%.
//! - [`Read::Words`]: a statement without a number ("minimal", "good"): shown, not compared.

use crate::engines::Op;

use super::Mode;

/// Processors of the paper's machine (12-processor SGI Challenge XL, 100 MHz R4400), at which
/// Figures 4, 6, 8 and 10 end and Figure 11 runs.
pub(super) const PROCESSORS: usize = 12;

/// How a value was obtained from the text (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    Exact,
    Stated,
    Derived,
    Ideal,
    Words,
}

/// What a point of a figure measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Point {
    /// Throughput at one processor, Mbit/s (Figure 3).
    OneProc,
    /// Speedup at 12 processors over one (Figures 4, 6, 8, 10).
    Speedup,
    /// Figure 11: aggregate throughput of thread-per-connection over processor-per-connection
    /// (12 processors), at exactly 12 connections (`true`) or at every count above 12.
    TpcOverPpc { at_12: bool },
}

/// One point of one of the paper's figures.
#[derive(Debug, Clone, Copy)]
pub(super) struct PaperPoint {
    pub figure: u8,
    /// Where the text says it.
    pub section: &'static str,
    /// Index of the paper's stack (`super::PAPER`: 0 TCP/IP, 1 MD5, 2 DES, 3 3-DES).
    pub stack: usize,
    pub op: Op,
    pub mode: Mode,
    pub point: Point,
    /// `None` with [`Read::Words`].
    pub value: Option<f64>,
    pub read: Read,
    /// The value as the comparison prints it ("~8", "minimal").
    pub short: &'static str,
    /// The sentence of the paper it rests on (and the arithmetic for [`Read::Derived`]).
    pub says: &'static str,
}

const MINIMAL: &str =
    "\"this is reflected by the baseline TCP/IP stack's minimal speedup\" (figure 4)";
const MD5_8: &str = "\"the MD5 stack achieves a speedup of 8 with 12 processors\" (figure 4)";
const DES_50: &str = "\"in the send-side experiment using DES, both schemes have a throughput of roughly 50 Mbits/sec with 12 processors\" (4.2), over \"4.6 Mb/s\" at one processor (4.1): 50 / 4.6 = 10.9; 4.1 also says \"very close to linear\"";
const CLOSE_LINEAR: &str =
    "\"the DES and Triple-DES stacks produce very close to linear speedup\" (figure 4)";
const RECV_3DES: &str = "\"The speedup curve for 3-DES, which is the most compute-intensive, is essentially linear\" (figure 6)";
const PLP_SUMMARY: &str = "\"In packet-level parallelism, speedup is essentially linear when DES or any more compute-intensive protocol is used\" (summary)";
const PLP_RECV_NONE: &str = "figure 6: only \"successively lower throughputs but better relative speedups as more compute intensive cryptographic protocols are used\"; no number";
const CLP_GOOD: &str = "\"Previous work [38] showed good speedup for CLP ... Figure 8 illustrates this in the baseline case\"";
const CLP_LINEAR: &str = "\"when any cryptographic processing is added to the scenario, speedup becomes essentially linear\" (figure 8); summary: \"essentially linear when MD5 or any more compute-intensive protocol is used\"";
const CLP_RECV_BASE: &str = "\"for the receive side, the baseline experiments show better throughput and speedup than for the send side\" (figure 10); no number";
const CLP_RECV_LINEAR: &str = "\"once cryptographic protocols are added, the same trends are exhibited\" (figure 10); summary: CLP \"essentially linear when MD5 or any more compute-intensive protocol is used\"";
const F11_EQUAL: &str =
    "\"Note that at 12 connections the two schemes are equivalent\" (figure 11)";
const F11_BASE: &str = "\"Previous work [38] has shown that, barring any other protocol processing, thread-per-connection achieves higher aggregate throughput than processor-per-connection\"; the paper gives no number for its own baseline curve";
const F11_CRYPTO: &str = "\"as cryptographic protocol processing is added, the difference in performance between the thread-per-connection and processor-per-connection versions of CLP disappear\" (figure 11)";

/// A row of [`POINTS`]: one argument per column keeps each point on one line of the table.
#[allow(clippy::too_many_arguments)]
const fn point(
    figure: u8,
    section: &'static str,
    stack: usize,
    op: Op,
    mode: Mode,
    point: Point,
    value: Option<f64>,
    read: Read,
    short: &'static str,
    says: &'static str,
) -> PaperPoint {
    PaperPoint {
        figure,
        section,
        stack,
        op,
        mode,
        point,
        value,
        read,
        short,
        says,
    }
}

use Mode::{Clp, Plp};
use Op::{Open, Seal};
use Point::{OneProc, Speedup, TpcOverPpc};
use Read::{Derived, Exact, Ideal, Stated, Words};

/// Every point of paper 000's figures that `bench stacks` reruns, as the text states it.
#[rustfmt::skip]
pub(super) const POINTS: [PaperPoint; 28] = [
    // Figure 3: PLP send-side throughput at one processor, Mbit/s (section 4.1, one paragraph).
    point(3, "4.1", 0, Seal, Plp, OneProc, Some(138.0), Stated, "~138", "\"The baseline speed for the send-side TCP stack is roughly 138 Mb/s\""),
    point(3, "4.1", 1, Seal, Plp, OneProc, Some(18.0), Stated, "~18", "\"Adding MD5 to the stack reduces throughput ... to a mere 18 Mb/s\""),
    point(3, "4.1", 2, Seal, Plp, OneProc, Some(4.6), Stated, "~4.6", "\"Adding DES on top of TCP reduces throughput ... to 4.6 Mb/s\""),
    point(3, "4.1", 3, Seal, Plp, OneProc, Some(1.5), Stated, "~1.5", "\"Using Triple-DES is 3 times slower at 1.5 Mb/s\""),
    // Figure 4: PLP send-side speedup at 12 processors (section 4.1).
    point(4, "4.1", 0, Seal, Plp, Speedup, None, Words, "minimal", MINIMAL),
    point(4, "4.1", 1, Seal, Plp, Speedup, Some(8.0), Stated, "~8", MD5_8),
    point(4, "4.1, 4.2", 2, Seal, Plp, Speedup, Some(10.9), Derived, "~11", DES_50),
    point(4, "4.1", 3, Seal, Plp, Speedup, Some(12.0), Ideal, "~12 (linear)", CLOSE_LINEAR),
    // Figure 6: PLP receive-side speedup at 12 processors (section 4.1, summary).
    point(6, "4.1", 0, Open, Plp, Speedup, None, Words, "not stated", PLP_RECV_NONE),
    point(6, "4.1", 1, Open, Plp, Speedup, None, Words, "not stated", PLP_RECV_NONE),
    point(6, "6", 2, Open, Plp, Speedup, Some(12.0), Ideal, "~12 (linear)", PLP_SUMMARY),
    point(6, "4.1", 3, Open, Plp, Speedup, Some(12.0), Ideal, "~12 (linear)", RECV_3DES),
    // Figure 8: CLP send-side speedup at 12 processors, 12 connections (section 4.2).
    point(8, "4.2", 0, Seal, Clp, Speedup, None, Words, "good", CLP_GOOD),
    point(8, "4.2", 1, Seal, Clp, Speedup, Some(12.0), Ideal, "~12 (linear)", CLP_LINEAR),
    point(8, "4.2", 2, Seal, Clp, Speedup, Some(12.0), Ideal, "~12 (linear)", CLP_LINEAR),
    point(8, "4.2", 3, Seal, Clp, Speedup, Some(12.0), Ideal, "~12 (linear)", CLP_LINEAR),
    // Figure 10: CLP receive-side speedup at 12 processors, 12 connections (section 4.2).
    point(10, "4.2", 0, Open, Clp, Speedup, None, Words, "better than send", CLP_RECV_BASE),
    point(10, "4.2, 6", 1, Open, Clp, Speedup, Some(12.0), Ideal, "~12 (linear)", CLP_RECV_LINEAR),
    point(10, "4.2, 6", 2, Open, Clp, Speedup, Some(12.0), Ideal, "~12 (linear)", CLP_RECV_LINEAR),
    point(10, "4.2, 6", 3, Open, Clp, Speedup, Some(12.0), Ideal, "~12 (linear)", CLP_RECV_LINEAR),
    // Figure 11: CLP send side, 12 processors, 12 to 384 connections; thread-per-connection
    // over processor-per-connection aggregate throughput (section 4.2).
    point(11, "4.2", 0, Seal, Clp, TpcOverPpc { at_12: true }, Some(1.0), Exact, "1", F11_EQUAL),
    point(11, "4.2", 1, Seal, Clp, TpcOverPpc { at_12: true }, Some(1.0), Exact, "1", F11_EQUAL),
    point(11, "4.2", 2, Seal, Clp, TpcOverPpc { at_12: true }, Some(1.0), Exact, "1", F11_EQUAL),
    point(11, "4.2", 3, Seal, Clp, TpcOverPpc { at_12: true }, Some(1.0), Exact, "1", F11_EQUAL),
    point(11, "4.2", 0, Seal, Clp, TpcOverPpc { at_12: false }, None, Words, "> 1 (tpc ahead)", F11_BASE),
    point(11, "4.2", 1, Seal, Clp, TpcOverPpc { at_12: false }, Some(1.0), Ideal, "~1", F11_CRYPTO),
    point(11, "4.2", 2, Seal, Clp, TpcOverPpc { at_12: false }, Some(1.0), Ideal, "~1", F11_CRYPTO),
    point(11, "4.2", 3, Seal, Clp, TpcOverPpc { at_12: false }, Some(1.0), Ideal, "~1", F11_CRYPTO),
];

/// The paper's point for a stack, side, mode and kind of point, if it has one.
pub(super) fn find(stack: usize, op: Op, mode: Mode, kind: Point) -> Option<&'static PaperPoint> {
    POINTS
        .iter()
        .find(|p| p.stack == stack && p.op == op && p.mode == mode && p.point == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_point_is_consistent() {
        for p in &POINTS {
            // A number exactly when the text gives or implies one.
            assert_eq!(p.value.is_none(), p.read == Read::Words, "{p:?}");
            // The printed form carries a "~" unless exact or words.
            let tilde = matches!(p.read, Read::Stated | Read::Derived | Read::Ideal);
            assert_eq!(p.short.starts_with('~'), tilde, "{p:?}");
            assert!(p.stack < super::super::PAPER.len());
            if p.read == Read::Ideal && p.point == Point::Speedup {
                assert_eq!(p.value, Some(PROCESSORS as f64));
            }
            // No two points for the same cell.
            let same = POINTS
                .iter()
                .filter(|q| (q.stack, q.op, q.mode, q.point) == (p.stack, p.op, p.mode, p.point))
                .count();
            assert_eq!(same, 1, "{p:?}");
        }
        assert_eq!(
            find(1, Op::Seal, Mode::Plp, Point::Speedup).unwrap().value,
            Some(8.0)
        );
        assert!(find(1, Op::Seal, Mode::Clp, Point::OneProc).is_none());
    }
}
