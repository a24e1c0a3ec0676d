//! When a submitting thread hands its batches to the workers: only the share of them that its
//! own core cannot carry, and only while a core is idle to take them (issue 43).
//!
//! A thread that reads a batch has it hot in its cache and is already awake; sealing it there
//! costs the seal. Handing it to a worker adds a queue operation, often a wake-up (several
//! microseconds of CPU on each side), and the worker's cache misses on the whole batch: on the
//! lent 16-core machine the old always-hand-off engine spent twice the CPU per bit that one
//! run-to-completion thread did (about 40 µs per hand-off, docs/RESULTS.md §40). So a [`Gauge`]
//! keeps its thread's work inline and hands off a *fraction* of its batches, spread evenly
//! over them, that it adjusts once per [`WINDOW`] from the thread's busy share of wall time
//! (its own CPU clock, so time spent waiting for a core does not count):
//! - up one [`STEP`] after two windows in a row busy at least [`HIGH`] with an allowed CPU idle
//!   ([`crate::spare`]): the thread is the bottleneck and another core can help. The first step
//!   needs most of a core idle ([`crate::spare::IDLE_CORE`]); once the workers run on it, each
//!   further step needs idle time for twice what a step hands over (at least a quarter core),
//!   since the workers' own use of that core is no longer idle. Once climbing, each further
//!   window that still argues for it adds a step;
//! - down one step after two windows in a row in which handing off one step less would still
//!   have left the thread under [`LOW`] (the cost of its inline batches is measured, so the
//!   prediction needs no model);
//! - back to zero after an idle gap (a window four times its length): a new burst starts inline.
//!
//! Between LOW and HIGH nothing moves, so a flow near the limit does not flap; handing off only
//! the excess keeps most batches where their data is.

use std::time::{Duration, Instant};

/// Length of one measurement window.
pub const WINDOW: Duration = Duration::from_millis(10);
/// Busy share of its wall time above which a thread is saturated.
pub const HIGH: f64 = 0.85;
/// Predicted busy share under which a thread hands off one step less.
pub const LOW: f64 = 0.70;
/// How much the handed-off fraction moves at a time.
pub const STEP: f64 = 0.125;
/// Windows in a row a condition must hold before the fraction moves.
const DWELL: u32 = 2;

/// Whether batches go to the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Handoff {
    /// Inline, with the share a saturated thread cannot carry handed off while a core is idle
    /// (the default).
    #[default]
    Auto,
    /// Every batch to the workers (the engine before issue 43; for comparison).
    Always,
}

/// A submitting thread's load, and the share of its batches it hands off (see the module
/// documentation). One per thread: it reads the calling thread's CPU clock.
#[derive(Debug)]
pub struct Gauge {
    policy: Handoff,
    /// Share of batches handed off, 0..=1.
    pub(crate) fraction: f64,
    /// Spreads the handed-off batches evenly (a Bresenham accumulator).
    acc: f64,
    start: Instant,
    cpu_start: Option<Duration>,
    /// This window: time spent running and releasing batches inline, and batches run inline
    /// and handed off.
    inline: Duration,
    n_inline: u64,
    n_handed: u64,
    /// What one inline batch costs (a moving average, seconds), for the way down.
    batch_cost: f64,
    up: u32,
    down: u32,
    /// Batches run inline, batches handed off, and changes of the fraction, since the start.
    pub ran_inline: u64,
    pub handed_off: u64,
    pub changes: u64,
}

impl Gauge {
    pub fn new(policy: Handoff) -> Self {
        Gauge {
            policy,
            fraction: if policy == Handoff::Always { 1.0 } else { 0.0 },
            acc: 0.0,
            start: Instant::now(),
            cpu_start: thread_cpu(),
            inline: Duration::ZERO,
            n_inline: 0,
            n_handed: 0,
            batch_cost: 0.0,
            up: 0,
            down: 0,
            ran_inline: 0,
            handed_off: 0,
            changes: 0,
        }
    }

    /// Whether the next batch goes to the workers (counted as handed off if so); ends a window
    /// when one has passed.
    pub fn hand_off(&mut self) -> bool {
        let h = self.choose();
        if h {
            self.n_handed += 1;
            self.handed_off += 1;
        }
        h
    }

    fn choose(&mut self) -> bool {
        if self.policy == Handoff::Always {
            return true;
        }
        let now = Instant::now();
        let wall = now - self.start;
        if wall >= WINDOW {
            let cpu = thread_cpu();
            if wall >= WINDOW * 4 {
                // An idle gap: the next burst starts inline.
                self.set(0.0);
            } else if let (Some(c0), Some(c1)) = (self.cpu_start, cpu) {
                let busy = c1.saturating_sub(c0).as_secs_f64() / wall.as_secs_f64();
                self.decide(busy, wall, crate::spare::idle_cores());
            }
            self.start = now;
            self.cpu_start = cpu;
            self.inline = Duration::ZERO;
            self.n_inline = 0;
            self.n_handed = 0;
        }
        if self.fraction <= 0.0 {
            return false;
        }
        self.acc += self.fraction;
        if self.acc >= 1.0 {
            self.acc -= 1.0;
            true
        } else {
            false
        }
    }

    /// Records a batch run (and released) inline, and how long it took.
    pub fn ran(&mut self, took: Duration) {
        self.inline += took;
        self.n_inline += 1;
        self.ran_inline += 1;
    }

    /// The share of batches handed off now (0: all inline; 1: all to the workers).
    pub fn fraction(&self) -> f64 {
        self.fraction
    }

    fn set(&mut self, f: f64) {
        let f = f.clamp(0.0, 1.0);
        if f != self.fraction {
            self.fraction = f;
            self.changes += 1;
        }
        self.up = 0;
        self.down = 0;
    }

    /// One window's verdict: `busy` is the thread's CPU time over the window's wall time, `idle`
    /// the allowed CPUs' idle time in CPUs (`None`: unknown, taken as plenty).
    fn decide(&mut self, busy: f64, wall: Duration, idle: Option<f64>) {
        let wall = wall.as_secs_f64().max(1e-9);
        if self.n_inline > 0 {
            let c = self.inline.as_secs_f64() / self.n_inline as f64;
            self.batch_cost = if self.batch_cost == 0.0 {
                c
            } else {
                0.75 * self.batch_cost + 0.25 * c
            };
        }
        let batches = (self.n_inline + self.n_handed) as f64;
        // What one step of batches costs run here, in cores.
        let step = STEP * batches * self.batch_cost / wall;
        // Busy share with one step fewer batches handed off: those run here instead.
        let one_step_less = busy + step;
        let room = idle.is_none_or(|c| {
            if self.fraction == 0.0 {
                c >= crate::spare::IDLE_CORE
            } else {
                c >= (2.0 * step).max(0.25)
            }
        });
        let up = self.fraction < 1.0 && busy >= HIGH && room;
        let down = self.fraction > 0.0 && one_step_less < LOW;
        self.up = if up { self.up + 1 } else { 0 };
        self.down = if down { self.down + 1 } else { 0 };
        if self.up >= DWELL {
            self.set(self.fraction + STEP);
            // A climb goes on one window per step while the thread stays saturated with room:
            // the first step waits two windows (a burst is not a load), the rest do not, so a
            // flow that needs every batch handed off gets there in 90 ms rather than 160.
            self.up = DWELL - 1;
        } else if self.down >= DWELL {
            self.set(self.fraction - STEP);
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

    /// A window of `n` batches, `handed` of them handed off, the inline ones at `cost` each.
    fn window(g: &mut Gauge, busy: f64, idle: f64, n: u64, cost: Duration) {
        let handed = (n as f64 * g.fraction).round() as u64;
        g.n_handed = handed;
        g.n_inline = n - handed;
        g.inline = cost * (n - handed) as u32;
        g.decide(busy, WINDOW, Some(idle));
    }

    #[test]
    fn hands_off_only_when_saturated_with_an_idle_core() {
        let mut g = gauge();
        let cost = Duration::from_micros(40);
        // Busy but no idle core: stays inline however long it lasts.
        for _ in 0..10 {
            window(&mut g, 0.98, 0.5, 200, cost);
        }
        assert_eq!(g.fraction(), 0.0);
        // An idle core, but the thread is not saturated.
        for _ in 0..10 {
            window(&mut g, 0.6, 1.0, 100, cost);
        }
        assert_eq!(g.fraction(), 0.0);
        // Saturated with an idle core: one window is not enough, two are.
        window(&mut g, 0.95, 1.0, 200, cost);
        assert_eq!(g.fraction(), 0.0);
        window(&mut g, 0.95, 1.0, 200, cost);
        assert_eq!(g.fraction(), STEP);
        // Further steps need room for two more steps (here 200 batches of 40 µs a window: a
        // step is 0.1 core), not a whole idle core: 0.5 idle is enough, 0.15 is not. A climb
        // goes on one window per step.
        window(&mut g, 0.95, 0.5, 200, cost);
        assert_eq!(g.fraction(), 2.0 * STEP);
        for _ in 0..4 {
            window(&mut g, 0.95, 0.15, 200, cost);
        }
        assert_eq!(g.fraction(), 2.0 * STEP);
        // After a pause in the climb, the next step waits two windows again.
        window(&mut g, 0.95, 0.5, 200, cost);
        assert_eq!(g.fraction(), 2.0 * STEP);
        window(&mut g, 0.95, 0.5, 200, cost);
        assert_eq!(g.fraction(), 3.0 * STEP);
        // Between LOW and HIGH nothing moves (a step less handed off would be 0.85).
        for _ in 0..10 {
            window(&mut g, 0.8, 1.0, 100, cost);
        }
        assert_eq!(g.fraction(), 3.0 * STEP);
        assert_eq!(g.changes, 3);
    }

    #[test]
    fn hands_back_when_the_work_would_fit() {
        let mut g = gauge();
        g.fraction = 0.5;
        // 100 batches of 40 µs in 10 ms is 0.4 of the window; a step (12.5 of them) more
        // inline is 0.05 more: at busy 0.6, 0.65 < LOW: down after two windows.
        let cost = Duration::from_micros(40);
        window(&mut g, 0.6, 1.0, 100, cost);
        assert_eq!(g.fraction(), 0.5);
        window(&mut g, 0.6, 1.0, 100, cost);
        assert_eq!(g.fraction(), 0.5 - STEP);
        // At busy 0.68 a step more would be 0.73: stays.
        for _ in 0..5 {
            window(&mut g, 0.68, 1.0, 100, cost);
        }
        assert_eq!(g.fraction(), 0.5 - STEP);
    }

    #[test]
    fn the_handed_off_batches_are_spread_evenly() {
        let mut g = gauge();
        g.fraction = 0.25;
        let picks: Vec<bool> = (0..8).map(|_| g.hand_off()).collect();
        assert_eq!(
            picks,
            [false, false, false, true, false, false, false, true]
        );
    }

    #[test]
    fn an_idle_gap_starts_inline_again() {
        let mut g = gauge();
        g.fraction = 0.75;
        g.start = Instant::now() - WINDOW * 5;
        assert!(!g.hand_off());
        assert_eq!(g.fraction(), 0.0);
    }

    #[test]
    fn always_hands_off() {
        let mut g = Gauge::new(Handoff::Always);
        assert!(g.hand_off());
        std::thread::sleep(WINDOW);
        assert!(g.hand_off());
        assert_eq!(g.fraction(), 1.0);
        assert_eq!(g.changes, 0);
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
