//! `sealink-lab bench ...`: measurements. `seal` compares the protocol's per-datagram data path with
//! the AEAD library called directly; more benches (stacks, crypto, socket) go next to it.

pub mod adp;
pub mod crypto;
pub mod datagram;
pub mod gpu;
pub mod placement;
pub mod quic;
pub mod seal;
pub mod socket;
pub mod stacks;
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
/// iterations.
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
