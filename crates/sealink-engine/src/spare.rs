//! How many of this process's CPUs were idle lately: the test of whether handing work to
//! another thread, or polling for it, can use a core that nothing else wants.
//!
//! Read from `/proc/stat` (idle and iowait time of each CPU this process may run on, so a
//! process under `taskset` or a cpuset counts only its own CPUs) and refreshed at most every
//! [`PERIOD`] by whichever thread asks first; the others read the last figure. A read costs
//! tens of microseconds on a 16-CPU machine, so at most one read per period keeps the cost
//! under a thousandth of a core.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often the estimate is refreshed. `/proc/stat` counts in 10 ms ticks; over 50 ms a tick
/// is a fifth of a core.
pub const PERIOD: Duration = Duration::from_millis(50);

/// The kernel's unit for `/proc/stat` (USER_HZ, 100 on every Linux architecture sealink runs on).
const TICKS_PER_S: f64 = 100.0;

struct Last {
    at: Instant,
    /// Idle + iowait ticks of the allowed CPUs at `at`.
    idle: u64,
}

static LAST: Mutex<Option<Last>> = Mutex::new(None);
/// The latest estimate, in hundredths of a core (`u64::MAX`: unknown, `/proc/stat` unread).
static IDLE_CENTI: AtomicU64 = AtomicU64::new(u64::MAX);

/// Idle CPUs (of those this process may use) over the last period, or `None` where
/// `/proc/stat` cannot be read or no period has passed yet.
pub fn idle_cores() -> Option<f64> {
    refresh();
    match IDLE_CENTI.load(Ordering::Relaxed) {
        u64::MAX => None,
        c => Some(c as f64 / 100.0),
    }
}

/// Idle time, in CPUs, that counts as an idle core: most of one, since `/proc/stat` counts in
/// ticks (a fifth of a core over a period) and a core nobody runs on still takes some
/// interrupts.
pub const IDLE_CORE: f64 = 0.75;

/// Whether an allowed CPU sat (mostly) idle over the last period (true when unknown, so a
/// machine without `/proc/stat` keeps the behaviour of one with idle cores).
pub fn has_idle_core() -> bool {
    idle_cores().is_none_or(|c| c >= IDLE_CORE)
}

fn refresh() {
    // One refresher at a time; the others use the last figure rather than wait.
    let Ok(mut last) = LAST.try_lock() else {
        return;
    };
    let now = Instant::now();
    if last.as_ref().is_some_and(|l| now - l.at < PERIOD) {
        return;
    }
    let Some(idle) = read_idle_ticks(&crate::cpus()) else {
        return;
    };
    if let Some(l) = last.as_ref() {
        let secs = (now - l.at).as_secs_f64();
        let cores = idle.saturating_sub(l.idle) as f64 / TICKS_PER_S / secs;
        IDLE_CENTI.store((cores * 100.0).round() as u64, Ordering::Relaxed);
    }
    *last = Some(Last { at: now, idle });
}

fn read_idle_ticks(allowed: &[usize]) -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    idle_ticks(&stat, allowed)
}

/// Idle + iowait ticks summed over the `cpuN` lines of `stat` whose N is in `allowed` (every
/// CPU when `allowed` is empty, as when the affinity cannot be read).
pub(crate) fn idle_ticks(stat: &str, allowed: &[usize]) -> Option<u64> {
    let mut sum = 0u64;
    let mut seen = false;
    for line in stat.lines() {
        // The first line, "cpu  ...", is the total: only numbered lines ("cpu7 ...") count.
        let Some(rest) = line
            .strip_prefix("cpu")
            .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let Some(Ok(n)) = f.next().map(str::parse::<usize>) else {
            continue;
        };
        if !allowed.is_empty() && !allowed.contains(&n) {
            continue;
        }
        // user nice system idle iowait ...
        let v: Vec<u64> = f.take(5).map_while(|x| x.parse().ok()).collect();
        if v.len() < 5 {
            return None;
        }
        sum += v[3] + v[4];
        seen = true;
    }
    seen.then_some(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 0 50 1000 10 0 5 0 0 0\n\
                        cpu0 50 0 25 400 4 0 2 0 0 0\n\
                        cpu1 50 0 25 600 6 0 3 0 0 0\n\
                        intr 12345\n";

    #[test]
    fn only_the_allowed_cpus_count() {
        assert_eq!(idle_ticks(STAT, &[]), Some(1010));
        assert_eq!(idle_ticks(STAT, &[1]), Some(606));
        assert_eq!(idle_ticks(STAT, &[0, 1]), Some(1010));
        // No allowed CPU listed: nothing to say.
        assert_eq!(idle_ticks(STAT, &[7]), None);
        assert_eq!(idle_ticks("cpu0 1 2\n", &[]), None);
    }

    #[test]
    fn this_machine_reads() {
        // /proc/stat exists wherever the tests run (Linux); two reads a period apart give a
        // figure no larger than the CPUs allowed.
        let _ = idle_cores();
        std::thread::sleep(PERIOD + Duration::from_millis(5));
        let c = idle_cores().expect("an estimate after one period");
        let cpus = crate::cpus().len().max(1) as f64;
        assert!((0.0..=cpus + 0.5).contains(&c), "{c} idle of {cpus}");
    }
}
