//! `sealink-lab bench ...`: measurements. `seal` compares the protocol's per-datagram data path with
//! the AEAD library called directly; more benches (stacks, crypto, socket) go next to it.

pub mod adp;
pub mod allowed_ips;
pub mod crypto;
pub mod datagram;
pub mod gpu;
pub mod peers;
pub mod placement;
pub mod quic;
pub mod seal;
pub mod socket;
pub mod stacks;
pub mod thread_times;
pub mod tunnel_cores;

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use sealink_proto::sim::SimRng;

use crate::error::{Error, Result};

/// A fresh seed from the system generator, so every run's buffers differ (the papers warn that
/// constant buffers flatter ciphers).
pub(crate) fn random_seed() -> Result<u64> {
    let mut b = [0u8; 8];
    sealink_crypto::sign::random_bytes(&mut b).map_err(Error::Random)?;
    Ok(u64::from_le_bytes(b))
}

/// Fills `buf` with bytes from `rng`.
pub(crate) fn fill(rng: &mut SimRng, buf: &mut [u8]) {
    for chunk in buf.chunks_mut(8) {
        let r = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
}

/// Prints a bench's report `out` followed by where its CSV and run record were written.
pub(crate) fn print_with_files(mut out: String, csv: &Path, json: &Path) -> Result<()> {
    let _ = writeln!(
        out,
        "\nCSV: {}\nrun record: {}",
        csv.display(),
        json.display()
    );
    crate::output::print(&out)
}

/// `--budget SECONDS`, flattened into the arguments of the benches that take one.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct BudgetArgs {
    /// Wall-clock seconds the run may take: the bench times its first point, then shortens the
    /// runs of the rest (to no less than 0.01 s) and skips the points that still do not fit,
    /// and says what it shortened and skipped
    #[arg(long, value_name = "SECONDS", value_parser = parse_budget)]
    pub budget: Option<f64>,
}

fn parse_budget(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number of seconds")),
    }
}

/// The shortest timed run a budget may cut a point's runs to.
pub(crate) const BUDGET_FLOOR: f64 = 0.01;

/// How the rest of a run fits a budget: the seconds of each timed run from now on, and how many
/// of the points still to measure fit (the first `keep`, in the bench's order of priority).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Fit {
    pub seconds: f64,
    pub keep: usize,
}

/// The report's line on a budget of `b` s whose first point took `t1` s: the other points' runs
/// (`seconds`, shortened from `want` or kept), then `skipped` (what the budget left out).
pub(crate) fn budget_note(b: f64, t1: f64, seconds: f64, want: f64, skipped: &str) -> String {
    format!(
        "budget: {b} s; the first point took {t1:.2} s; runs of the other points {}; {skipped}",
        if seconds < want {
            format!("shortened from {want} s to {seconds:.3} s")
        } else {
            format!("kept at {want} s")
        },
    )
}

/// Fits `points` more points, each of `windows` runs (warm-up included) of `want` seconds plus
/// `overhead` seconds, into `left` seconds: all of them at `want` if they fit; else all of them
/// at shorter runs, down to [`BUDGET_FLOOR`]; else as many as fit at the floor.
pub(crate) fn fit_budget(
    left: f64,
    points: usize,
    windows: usize,
    overhead: f64,
    want: f64,
) -> Fit {
    let cost = |s: f64| windows as f64 * (s + overhead.max(0.0));
    if points == 0 || cost(want) * points as f64 <= left {
        return Fit {
            seconds: want,
            keep: points,
        };
    }
    let s = left.max(0.0) / (points * windows) as f64 - overhead.max(0.0);
    if s >= BUDGET_FLOOR {
        return Fit {
            seconds: s.min(want),
            keep: points,
        };
    }
    let floor = BUDGET_FLOOR.min(want);
    Fit {
        seconds: floor,
        keep: ((left.max(0.0) / cost(floor)).floor() as usize).min(points),
    }
}

/// Median of a non-empty list (mean of the two middle values for an even count).
/// The timing arguments every timed bench takes: seconds per run within (0, 60], one run or more.
pub(crate) fn check_timing(seconds: f64, runs: usize) -> Result<()> {
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 60.0) {
        return Err(Error::Usage(format!(
            "--seconds must be within (0, 60], got {seconds}"
        )));
    }
    if runs == 0 {
        return Err(Error::Usage("--runs must be at least 1".into()));
    }
    Ok(())
}

pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Calls `f` in batches of `batch` until `duration` has elapsed; returns the iterations done and
/// the time they took. The clock is read once per batch so that it weighs little on small
/// iterations. Always inlined, so that the timed loop is compiled into its caller as it was in
/// the `sealink` binary before the lab got its own (RESULTS §29).
#[inline(always)]
pub fn timed<E>(
    duration: Duration,
    batch: u64,
    mut f: impl FnMut() -> Result<(), E>,
) -> Result<(u64, Duration), E> {
    let batch = batch.max(1);
    let start = Instant::now();
    let mut iters = 0u64;
    loop {
        for _ in 0..batch {
            f()?;
        }
        iters += batch;
        let elapsed = start.elapsed();
        if elapsed >= duration {
            return Ok((iters, elapsed));
        }
    }
}

/// What the benches' tests share.
#[cfg(test)]
pub(crate) mod test_support {
    use std::path::PathBuf;

    /// An empty scratch directory for one test's files: `sealink-NAME-PID` in the temp dir.
    pub(crate) fn scratch(name: &str) -> PathBuf {
        let out = std::env::temp_dir().join(format!("sealink-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn a_budget_keeps_shortens_or_skips() {
        // 10 points of 3 runs of 0.3 s + 0.1 s overhead: 12 s.
        assert_eq!(
            fit_budget(20.0, 10, 3, 0.1, 0.3),
            Fit {
                seconds: 0.3,
                keep: 10
            }
        );
        // 6 s: every point, runs of 0.1 s.
        let f = fit_budget(6.0, 10, 3, 0.1, 0.3);
        assert_eq!(f.keep, 10);
        assert!((f.seconds - 0.1).abs() < 1e-9, "{f:?}");
        // 1.1 s: at the floor (0.01 + 0.1 = 0.33 s a point), 3 points.
        assert_eq!(
            fit_budget(1.1, 10, 3, 0.1, 0.3),
            Fit {
                seconds: BUDGET_FLOOR,
                keep: 3
            }
        );
        assert_eq!(fit_budget(-1.0, 10, 3, 0.1, 0.3).keep, 0);
        assert_eq!(fit_budget(0.0, 0, 3, 0.1, 0.3).keep, 0);
    }

    #[test]
    fn timed_counts_batches_and_stops_on_error() {
        let (n, d) = timed::<()>(Duration::from_millis(5), 10, || Ok(())).unwrap();
        assert!(n >= 10 && n % 10 == 0);
        assert!(d >= Duration::from_millis(5));
        let mut k = 0;
        let r = timed(Duration::from_secs(10), 4, || {
            k += 1;
            if k == 3 { Err("boom") } else { Ok(()) }
        });
        assert_eq!(r, Err("boom"));
    }
}
