//! The papers' own projection methods, as arithmetic on figures a bench measures in the same
//! run. What comes out is a prediction by the paper's method applied to our measured inputs,
//! never a measurement: the benches print it under that label, beside what they measured.
//!
//! - Papers 000 (section 4.1) and 001 (section 3): "the locked component of manipulating the
//!   TCP connection-state limits the throughput to about 200 Mb/s ... we estimate that the
//!   TCP/MD5/IP stack would bottleneck at about 16 processors, and that the DES stack would
//!   scale to 30 [000] / 40 [001] processors". The method is the serial step's ceiling divided
//!   by what one processor adds: [`SerialCeiling`].
//! - Paper 002 (section 5(c)): with every encryption public-key (S = PKO), "L >= 875 ms, and
//!   T <= 7.14 kBytes/s". The paper gives no derivation; the two numbers fit one public-key
//!   step of 875 ms per ADP message and the nominal mean ADP message of Table 3 (ALL, 6247 B):
//!   6247 B / 0.875 s = 7.14 kB/s. That is [`PkoBound`].

/// Why a projection cannot be computed from its inputs.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum ProjectionError {
    /// An input that must be a positive, finite number (a rate, a time, a size) is not.
    #[error("{what} must be positive and finite, got {value}")]
    NotPositive { what: &'static str, value: f64 },
    /// A per-processor rate needs the processor count it was measured at.
    #[error("the rate was measured at 0 processors")]
    NoProcessors,
}

fn positive(what: &'static str, value: f64) -> Result<f64, ProjectionError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(ProjectionError::NotPositive { what, value })
    }
}

/// Papers 000/001's projection: a stack whose serial step passes at most `ceiling` and whose
/// throughput at `processors` processors is `rate_at_p` scales linearly at `rate_at_p /
/// processors` per processor until it reaches the ceiling. Rates in any one unit (Mbit/s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SerialCeiling {
    ceiling: f64,
    rate_at_1: f64,
    rate_at_p: f64,
    processors: usize,
}

impl SerialCeiling {
    /// `rate_at_1`: the uniprocessor throughput, the base of the projected speedups.
    pub fn new(
        ceiling: f64,
        rate_at_1: f64,
        rate_at_p: f64,
        processors: usize,
    ) -> Result<Self, ProjectionError> {
        if processors == 0 {
            return Err(ProjectionError::NoProcessors);
        }
        Ok(SerialCeiling {
            ceiling: positive("the serial step's ceiling", ceiling)?,
            rate_at_1: positive("the rate at one processor", rate_at_1)?,
            rate_at_p: positive("the rate at the largest processor count", rate_at_p)?,
            processors,
        })
    }

    pub fn ceiling(&self) -> f64 {
        self.ceiling
    }

    /// What one processor adds: the measured rate at the largest count, per processor (the
    /// paper's MD5 figure needs this form: 18 Mb/s x 8 / 12 = 12 Mb/s, 200 / 12 = 16.7).
    pub fn per_processor(&self) -> f64 {
        self.rate_at_p / self.processors as f64
    }

    /// Where the stack stops scaling: ceiling / per-processor rate.
    pub fn bottleneck_processors(&self) -> f64 {
        self.ceiling / self.per_processor()
    }

    /// Projected throughput at `n` processors: linear, capped by the ceiling.
    pub fn throughput(&self, n: f64) -> f64 {
        (n * self.per_processor()).min(self.ceiling)
    }

    /// Projected speedup at `n` processors over the measured uniprocessor rate.
    pub fn speedup(&self, n: f64) -> f64 {
        self.throughput(n) / self.rate_at_1
    }

    /// The same method in time per packet of `bytes` (rates in Mbit/s): the serial step's time
    /// (us) and one processor's time per packet (us); their ratio is the bottleneck count.
    pub fn per_packet_us(&self, bytes: usize) -> (f64, f64) {
        let bits = bytes as f64 * 8.0;
        (bits / self.ceiling, bits / self.per_processor())
    }
}

/// Paper 002's PKO bound: one public-key step of `public_key_s` seconds per ADP message of
/// `mean_adp_bytes` on average.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PkoBound {
    public_key_s: f64,
    mean_adp_bytes: f64,
}

impl PkoBound {
    pub fn new(public_key_s: f64, mean_adp_bytes: f64) -> Result<Self, ProjectionError> {
        Ok(PkoBound {
            public_key_s: positive("the public-key time per message", public_key_s)?,
            mean_adp_bytes: positive("the mean ADP message size", mean_adp_bytes)?,
        })
    }

    /// Lower bound on the urgent latency L: the public-key step alone, ms.
    pub fn l_min_ms(&self) -> f64 {
        self.public_key_s * 1000.0
    }

    /// Upper bound on the throughput T: one mean ADP message per public-key step, kB/s.
    pub fn t_max_kbs(&self) -> f64 {
        self.mean_adp_bytes / self.public_key_s / 1000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_000_md5_bottlenecks_at_about_16() {
        // 200 Mb/s ceiling; 18 Mb/s at one processor and "a speedup of 8 with 12 processors".
        let s = SerialCeiling::new(200.0, 18.0, 18.0 * 8.0, 12).unwrap();
        assert!((s.per_processor() - 12.0).abs() < 1e-12);
        assert!((s.bottleneck_processors() - 200.0 / 12.0).abs() < 1e-12);
        assert_eq!(format!("{:.0}", s.bottleneck_processors().floor()), "16");
        // Linear up to the ceiling, flat after it.
        assert!((s.speedup(12.0) - 8.0).abs() < 1e-12);
        assert!((s.speedup(64.0) - 200.0 / 18.0).abs() < 1e-12);
        assert!((s.throughput(16.0) - 192.0).abs() < 1e-12);
        // In time per 4 KB packet: 163.84 us serial, 2730.7 us per processor.
        let (serial, par) = s.per_packet_us(4096);
        assert!((serial - 163.84).abs() < 1e-9 && (par / serial - 200.0 / 12.0).abs() < 1e-9);
    }

    #[test]
    fn paper_001_des_scales_to_about_40() {
        // Paper 000's 4.6 Mb/s for DES on the same Challenge, close to linear (paper 001
        // Figure 2): 200 / 4.6 = 43.5, the paper's "40".
        let s = SerialCeiling::new(200.0, 4.6, 4.6, 1).unwrap();
        assert!((s.bottleneck_processors() - 43.478).abs() < 1e-3);
        // Paper 000's "30" for DES does not follow from its stated figures: 50 Mb/s at 12
        // processors (section 4.2) gives 48.
        let d = SerialCeiling::new(200.0, 4.6, 50.0, 12).unwrap();
        assert!((d.bottleneck_processors() - 48.0).abs() < 1e-9);
    }

    #[test]
    fn paper_002_pko_bound() {
        let b = PkoBound::new(0.875, 6247.0).unwrap();
        assert_eq!(format!("{:.2}", b.t_max_kbs()), "7.14");
        assert!((b.l_min_ms() - 875.0).abs() < 1e-9);
    }

    #[test]
    fn bad_inputs_are_refused() {
        assert_eq!(
            SerialCeiling::new(200.0, 1.0, 1.0, 0),
            Err(ProjectionError::NoProcessors)
        );
        assert!(matches!(
            SerialCeiling::new(0.0, 1.0, 1.0, 1),
            Err(ProjectionError::NotPositive { .. })
        ));
        assert!(SerialCeiling::new(1.0, f64::NAN, 1.0, 1).is_err());
        assert!(PkoBound::new(0.0, 6247.0).is_err());
        assert!(PkoBound::new(1.0, -1.0).is_err());
    }
}
