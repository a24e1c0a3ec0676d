//! When a submitting thread hands its batches to the workers: only while it saturates its core
//! and a core is idle to take the work (issue 43).
//!
//! A thread that reads a batch has it hot in its cache and is already awake; sealing it there
//! costs the seal. Handing it to a worker adds a queue operation, often a wake-up (several
//! microseconds of CPU on each side, docs/RESULTS.md §40), and the worker's cache misses on the
//! whole batch: on the lent 16-core machine the spread shape spent twice the CPU per bit that one
//! run-to-completion thread did. So a [`Gauge`] keeps its thread's work inline, and hands off
//! only while the thread is busy at least [`HIGH`] of its wall time (its own CPU clock, so time
//! spent waiting for a core does not count) over two windows in a row, with an idle CPU to run
//! the workers on ([`crate::spare`]). It goes back inline once its busy share, with the work it
//! handed off added back, would fall under [`LOW`] for two windows (hysteresis, so a flow near
//! the limit does not flap).

use std::time::{Duration, Instant};

/// Length of one measurement window.
pub const WINDOW: Duration = Duration::from_millis(10);
/// Busy share of its wall time above which a thread is saturated.
pub const HIGH: f64 = 0.85;
/// Predicted busy share (inline) under which a thread that hands off goes back inline.
pub const LOW: f64 = 0.70;
/// Windows in a row a condition must hold before the mode changes.
const DWELL: u32 = 2;

/// Whether batches go to the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Handoff {
    /// Inline until the thread saturates and a core is idle (the default).
    #[default]
    Auto,
    /// Every batch to the workers (the engine before issue 43; for comparison).
    Always,
}

/// A submitting thread's load, and its choice between inline and hand-off (see the module
/// documentation). One per thread: it reads the calling thread's CPU clock.
#[derive(Debug)]
pub struct Gauge {
    policy: Handoff,
    pub(crate) handing_off: bool,
    start: Instant,
    cpu_start: Option<Duration>,
    /// Time spent running and releasing batches inline in this window.
    inline: Duration,
    /// Share of the thread's busy time that its inline batches took (a moving average).
    share: f64,
    /// Windows in a row that argued for the other mode.
    streak: u32,
    /// Batches run inline, batches handed off, and mode changes, since the start.
    pub ran_inline: u64,
    pub handed_off: u64,
    pub switches: u64,
}

impl Gauge {
    pub fn new(policy: Handoff) -> Self {
        Gauge {
            policy,
            handing_off: policy == Handoff::Always,
            start: Instant::now(),
            cpu_start: thread_cpu(),
            inline: Duration::ZERO,
            share: 0.0,
            streak: 0,
            ran_inline: 0,
            handed_off: 0,
            switches: 0,
        }
    }

    /// Whether the next batch goes to the workers; ends a window when one has passed.
    pub fn hand_off(&mut self) -> bool {
        if self.policy == Handoff::Auto {
            let now = Instant::now();
            let wall = now - self.start;
            if wall >= WINDOW {
                let cpu = thread_cpu();
                if let (Some(c0), Some(c1)) = (self.cpu_start, cpu) {
                    let busy = (c1.saturating_sub(c0)).as_secs_f64() / wall.as_secs_f64();
                    self.decide(busy, wall, crate::spare::has_idle_core());
                }
                self.start = now;
                self.cpu_start = cpu;
                self.inline = Duration::ZERO;
            }
        }
        self.handing_off
    }

    /// Records a batch run (and released) inline, and how long it took.
    pub fn ran(&mut self, took: Duration) {
        self.inline += took;
        self.ran_inline += 1;
    }

    /// Records a batch handed off.
    pub fn handed(&mut self) {
        self.handed_off += 1;
    }

    /// Whether batches are being handed off now.
    pub fn handing_off(&self) -> bool {
        self.handing_off
    }

    /// One window's verdict: `busy` is the thread's CPU time over the window's wall time.
    fn decide(&mut self, busy: f64, wall: Duration, idle_core: bool) {
        let wall = wall.as_secs_f64().max(1e-9);
        let want_other = if self.handing_off {
            // What this thread would be busy with inline: today's load plus the share it hands
            // off (learnt while inline).
            let predicted = busy / (1.0 - self.share.min(0.9));
            predicted < LOW
        } else {
            if busy > 0.05 {
                let s = (self.inline.as_secs_f64() / wall / busy).clamp(0.0, 1.0);
                self.share = if self.share == 0.0 {
                    s
                } else {
                    0.75 * self.share + 0.25 * s
                };
            }
            busy >= HIGH && idle_core
        };
        self.streak = if want_other { self.streak + 1 } else { 0 };
        if self.streak >= DWELL {
            self.handing_off = !self.handing_off;
            self.switches += 1;
            self.streak = 0;
        }
    }
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu() -> Option<Duration> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Some(Duration::new(
        u64::try_from(t.tv_sec).ok()?,
        u32::try_from(t.tv_nsec).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauge() -> Gauge {
        Gauge::new(Handoff::Auto)
    }

    #[test]
    fn hands_off_only_when_saturated_with_an_idle_core() {
        let mut g = gauge();
        // Busy but no idle core: stays inline however long it lasts.
        for _ in 0..10 {
            g.decide(0.98, WINDOW, false);
        }
        assert!(!g.handing_off());
        // An idle core, but the thread is not saturated.
        for _ in 0..10 {
            g.decide(0.6, WINDOW, true);
        }
        assert!(!g.handing_off());
        // Saturated with an idle core: one window is not enough, two are.
        g.decide(0.95, WINDOW, true);
        assert!(!g.handing_off());
        g.decide(0.95, WINDOW, true);
        assert!(g.handing_off());
        assert_eq!(g.switches, 1);
    }

    #[test]
    fn goes_back_inline_when_the_load_would_fit() {
        let mut g = gauge();
        // Inline windows: 40% of its busy time ran batches.
        g.inline = WINDOW.mul_f64(0.4 * 0.9);
        g.decide(0.9, WINDOW, true);
        g.inline = WINDOW.mul_f64(0.4 * 0.9);
        g.decide(0.9, WINDOW, true);
        assert!(g.handing_off());
        assert!((g.share - 0.4).abs() < 1e-6, "{}", g.share);
        // Handing off, 0.5 busy: inline it would be 0.5 / 0.6 = 0.83, over LOW: stays.
        for _ in 0..5 {
            g.decide(0.5, WINDOW, true);
        }
        assert!(g.handing_off());
        // 0.3 busy: inline 0.5, under LOW, for two windows: back inline.
        g.decide(0.3, WINDOW, true);
        assert!(g.handing_off());
        g.decide(0.3, WINDOW, true);
        assert!(!g.handing_off());
        assert_eq!(g.switches, 2);
    }

    #[test]
    fn always_hands_off() {
        let mut g = Gauge::new(Handoff::Always);
        assert!(g.hand_off());
        std::thread::sleep(WINDOW);
        assert!(g.hand_off());
        assert_eq!(g.switches, 0);
    }

    #[test]
    fn the_thread_clock_moves_with_work() {
        let a = thread_cpu().expect("a thread CPU clock");
        let mut x = 0u64;
        for i in 0..3_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let b = thread_cpu().expect("a thread CPU clock");
        assert!(b > a);
    }
}
