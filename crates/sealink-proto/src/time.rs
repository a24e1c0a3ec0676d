//! Virtual time. The core never reads a clock: every entry point takes `now` as an argument,
//! so a simulation can drive it deterministically and a real driver passes its monotonic clock.

use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time, in nanoseconds since an epoch the driver chooses (start of a simulation,
/// or the Unix epoch for a real driver: handshake timestamps are taken from it, so a real driver
/// should use wall-clock time so they keep increasing across restarts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(u64);

impl Time {
    pub const ZERO: Time = Time(0);
    pub const MAX: Time = Time(u64::MAX);

    pub const fn from_nanos(n: u64) -> Self {
        Time(n)
    }
    pub const fn from_micros(us: u64) -> Self {
        Time(us.saturating_mul(1_000))
    }
    pub const fn from_millis(ms: u64) -> Self {
        Time(ms.saturating_mul(1_000_000))
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// Time elapsed since `earlier`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

fn dur_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(self.0.saturating_add(dur_nanos(d)))
    }
}

impl Sub<Duration> for Time {
    type Output = Time;
    fn sub(self, d: Duration) -> Time {
        Time(self.0.saturating_sub(dur_nanos(d)))
    }
}

impl std::fmt::Display for Time {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.6}s", self.0 as f64 / 1e9)
    }
}
