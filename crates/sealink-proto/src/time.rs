//! Virtual time. The core never reads a clock: every entry point takes `now` as an argument,
//! so a simulation can drive it deterministically and a real driver passes its monotonic clock,
//! [`Clock`] (the one clock every driver uses: datagram node, tunnel).

use std::ops::{Add, Sub};
use std::time::{Duration, Instant, SystemTime};

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

/// A driver's clock: monotonic (deadlines never jump with the wall clock) on a wall-clock
/// origin (handshake timestamps keep increasing across restarts). Only drivers read it; the
/// core is given `now`.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base: Time,
    start: Instant,
}

impl Clock {
    /// Starts at the current wall-clock time (Unix epoch origin; the epoch itself if the system
    /// clock is set before it).
    pub fn new() -> Self {
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        Clock {
            base: Time::ZERO + wall,
            start: Instant::now(),
        }
    }

    /// The time now: the origin plus the monotonic time elapsed since [`Clock::new`].
    pub fn now(&self) -> Time {
        self.base + self.start.elapsed()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    #[test]
    fn clock_is_wall_based_and_monotonic() {
        let before = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap();
        let c = Clock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        assert!(a >= Time::ZERO + before);
        // Within a minute of the wall clock.
        assert!(a.saturating_since(Time::ZERO + before) < Duration::from_secs(60));
    }
}
