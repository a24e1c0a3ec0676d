//! Handshake flood protection with bounded memory (sans-IO).
//!
//! A handshake initiation costs the responder Diffie-Hellman operations and, if accepted, state;
//! data datagrams of established sessions cost one AEAD open. So initiations, and only
//! initiations, pass this limiter before any public-key work: a token bucket per source
//! address (one noisy or spoofing host cannot take the whole budget) inside a global bucket
//! (many spoofed sources cannot either). Established channels never pass through it, so a
//! flood can delay new handshakes but never the traffic of channels already up.
//!
//! Memory: at most `max_sources` per-source buckets. When the table is full, buckets that have
//! refilled completely carry no information and are evicted first; if none has, the source is
//! judged by the global bucket alone (so the table cannot be grown by spoofing new addresses).
//! Drivers do not call it directly: [`crate::handshake::cookie::HandshakeGuard`] checks mac1 first and
//! keeps two of these, one for initiations whose mac2 proves their source address (a cookie,
//! as in WireGuard) and one for the others, whose exhaustion puts a source under load.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::time::Time;

/// Rates and bounds of a [`HandshakeLimiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimiterConfig {
    /// Initiations per second one source address may send, sustained...
    pub per_source_per_sec: u32,
    /// ...and in a burst.
    pub per_source_burst: u32,
    /// Initiations per second processed from all sources together, sustained...
    pub global_per_sec: u32,
    /// ...and in a burst.
    pub global_burst: u32,
    /// Most source addresses tracked at once.
    pub max_sources: usize,
}

impl Default for LimiterConfig {
    fn default() -> Self {
        LimiterConfig {
            per_source_per_sec: 10,
            per_source_burst: 20,
            global_per_sec: 2000,
            global_burst: 500,
            max_sources: 4096,
        }
    }
}

/// A token bucket in fixed point: tokens are counted in nanoseconds' worth of refill, so
/// refilling is one multiplication-free addition of elapsed time.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Accumulated refill time, capped at `burst * interval`.
    credit_ns: u64,
    last: Time,
}

impl Bucket {
    fn full(now: Time, cap_ns: u64) -> Self {
        Bucket {
            credit_ns: cap_ns,
            last: now,
        }
    }

    fn refill(&mut self, now: Time, cap_ns: u64) {
        let dt = now.as_nanos().saturating_sub(self.last.as_nanos());
        self.credit_ns = self.credit_ns.saturating_add(dt).min(cap_ns);
        self.last = self.last.max(now);
    }

    fn is_full(&self, now: Time, cap_ns: u64) -> bool {
        let dt = now.as_nanos().saturating_sub(self.last.as_nanos());
        self.credit_ns.saturating_add(dt) >= cap_ns
    }
}

/// Per-source and global token buckets for handshake initiations.
#[derive(Debug)]
pub struct HandshakeLimiter {
    cfg: LimiterConfig,
    source_interval_ns: u64,
    global_interval_ns: u64,
    global: Option<Bucket>,
    sources: HashMap<IpAddr, Bucket>,
    refused: u64,
}

fn interval_ns(per_sec: u32) -> u64 {
    1_000_000_000 / u64::from(per_sec.max(1))
}

impl HandshakeLimiter {
    pub fn new(cfg: LimiterConfig) -> Self {
        HandshakeLimiter {
            source_interval_ns: interval_ns(cfg.per_source_per_sec),
            global_interval_ns: interval_ns(cfg.global_per_sec),
            cfg,
            global: None,
            sources: HashMap::with_capacity(cfg.max_sources.min(1024)),
            refused: 0,
        }
    }

    pub fn config(&self) -> &LimiterConfig {
        &self.cfg
    }

    /// Whether an initiation from `source` may be processed now (and takes its token if so).
    pub fn allow(&mut self, now: Time, source: IpAddr) -> bool {
        let ok = self.take(now, source);
        if !ok {
            self.refused += 1;
        }
        ok
    }

    /// [`HandshakeLimiter::allow`] by the source's bucket alone: the global bucket is neither
    /// checked nor spent. For a driver whose own bounded handshake queue already bounds the
    /// work of all sources together (wireguard-go limits proven sources per address only).
    pub fn allow_source(&mut self, now: Time, source: IpAddr) -> bool {
        let ok = self.take_scoped(now, source, false);
        if !ok {
            self.refused += 1;
        }
        ok
    }

    fn take(&mut self, now: Time, source: IpAddr) -> bool {
        self.take_scoped(now, source, true)
    }

    fn take_scoped(&mut self, now: Time, source: IpAddr, global: bool) -> bool {
        let g_cap = self.global_interval_ns * u64::from(self.cfg.global_burst.max(1));
        let s_cap = self.source_interval_ns * u64::from(self.cfg.per_source_burst.max(1));
        let g = self.global.get_or_insert_with(|| Bucket::full(now, g_cap));
        g.refill(now, g_cap);
        if global && g.credit_ns < self.global_interval_ns {
            return false;
        }
        if !self.sources.contains_key(&source) && self.sources.len() >= self.cfg.max_sources {
            // Forget the sources that have refilled completely: they carry no state.
            self.sources.retain(|_, b| !b.is_full(now, s_cap));
        }
        let tracked = self.sources.len() < self.cfg.max_sources;
        let s = match self.sources.get_mut(&source) {
            Some(s) => {
                s.refill(now, s_cap);
                if s.credit_ns < self.source_interval_ns {
                    return false;
                }
                Some(s)
            }
            None if tracked => Some(
                self.sources
                    .entry(source)
                    .or_insert(Bucket::full(now, s_cap)),
            ),
            // The table is full of sources that are still limited: judge by the global bucket.
            None => None,
        };
        if let Some(s) = s {
            s.credit_ns -= self.source_interval_ns;
        }
        if let Some(g) = self.global.as_mut().filter(|_| global) {
            g.credit_ns -= self.global_interval_ns;
        }
        true
    }

    /// Source addresses with a bucket now; never more than `max_sources`.
    pub fn tracked_sources(&self) -> usize {
        self.sources.len()
    }

    /// Initiations refused so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    fn ip(i: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
    }

    #[test]
    fn one_source_gets_its_burst_then_its_rate() {
        let mut l = HandshakeLimiter::new(LimiterConfig::default());
        let t0 = Time::from_millis(1000);
        let allowed = (0..100).filter(|_| l.allow(t0, ip(1))).count();
        assert_eq!(allowed, 20);
        assert_eq!(l.refused(), 80);
        // Another source is not hurt by the first one's flood.
        assert!(l.allow(t0, ip(2)));
        // One second later: ten more.
        let t1 = t0 + Duration::from_secs(1);
        let allowed = (0..100).filter(|_| l.allow(t1, ip(1))).count();
        assert_eq!(allowed, 10);
    }

    #[test]
    fn spoofed_sources_are_held_by_the_global_bucket_and_memory_stays_bounded() {
        let cfg = LimiterConfig {
            max_sources: 64,
            ..LimiterConfig::default()
        };
        let mut l = HandshakeLimiter::new(cfg);
        let mut now = Time::from_millis(5);
        let mut allowed = 0;
        // 100k initiations from 100k addresses within one second.
        for i in 0..100_000u32 {
            if l.allow(now, ip(i)) {
                allowed += 1;
            }
            assert!(l.tracked_sources() <= 64);
            now = now + Duration::from_micros(10);
        }
        // Global budget over 1 s: the burst plus one second's rate.
        assert!(allowed <= 500 + 2000 + 1, "{allowed}");
        assert!(allowed >= 2000, "{allowed}");
    }

    #[test]
    fn idle_sources_are_evicted_when_the_table_is_full() {
        let cfg = LimiterConfig {
            max_sources: 4,
            ..LimiterConfig::default()
        };
        let mut l = HandshakeLimiter::new(cfg);
        let t0 = Time::from_millis(1);
        for i in 0..4 {
            assert!(l.allow(t0, ip(i)));
        }
        assert_eq!(l.tracked_sources(), 4);
        // After they refill, a new source takes a slot and the full ones are gone.
        let t1 = t0 + Duration::from_secs(10);
        assert!(l.allow(t1, ip(99)));
        assert_eq!(l.tracked_sources(), 1);
    }
}

#[cfg(test)]
mod source_only_tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn allow_source_ignores_and_spares_the_global_bucket() {
        let cfg = LimiterConfig {
            per_source_per_sec: 1,
            per_source_burst: 1,
            global_per_sec: 1,
            global_burst: 2,
            max_sources: 64,
        };
        let mut l = HandshakeLimiter::new(cfg);
        let now = Time::from_millis(1_000);
        let ip = |i: u32| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
        // Ten sources, each within its own bucket: all allowed by source alone...
        for i in 0..10 {
            assert!(l.allow_source(now, ip(i)), "source {i}");
        }
        // ...and each source's bucket is spent, ...
        assert!(!l.allow_source(now, ip(0)));
        // ...but the global bucket was not: two more sources pass `allow`, the third not.
        assert!(l.allow(now, ip(20)));
        assert!(l.allow(now, ip(21)));
        assert!(!l.allow(now, ip(22)));
    }
}
