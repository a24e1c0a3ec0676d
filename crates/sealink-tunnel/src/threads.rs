//! Per-thread counters of the data path, so that every run names the stage that saturates.
//!
//! Each data-path thread (readers, the inline I/O threads, the engine's crypto workers, the
//! timer) counts its own system calls and the packets they carried; a release that runs on a
//! worker counts on that worker, which is where the time went. Busy time is not sampled by the
//! threads: `show` reads every thread's CPU clock (`/proc/self/task/TID/schedstat`, the
//! scheduler's run time in ns) when asked, so the data path pays nothing for it.
//!
//! A counter has one writer (its thread), so it is bumped with a load and a store, not an atomic
//! read-modify-write; readers may see a value a few calls old.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What a thread counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// TUN read system calls that returned packets, and the packets (segments after a split).
    TunReads,
    TunReadPackets,
    /// UDP send system calls (one GSO send is one call), and the datagrams they carried.
    UdpSends,
    UdpSendDatagrams,
    /// UDP receive system calls that returned data, and the datagrams (GRO segments).
    UdpReceives,
    UdpReceiveDatagrams,
    /// TUN write calls (a coalesced super-packet is one), and the packets handed to them.
    TunWrites,
    TunWritePackets,
    /// Batches handed to the engine (run inline or by a worker).
    BatchesSubmitted,
    /// Of those, batches handed to the crypto workers rather than run on this thread.
    Handoffs,
    /// Datagrams received on a socket other than the one the lane steering program picks for
    /// their lane: a receive GRO batch that coalesced two lanes (`sealink_udp::steer`).
    LaneStrays,
}

const N: usize = 11;

/// One thread's counters.
#[derive(Debug, Default)]
pub(crate) struct Counters([AtomicU64; N]);

impl Counters {
    fn bump(&self, c: Count, n: u64) {
        let a = &self.0[c as usize];
        // One writer: no read-modify-write needed.
        a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
    fn get(&self, c: Count) -> u64 {
        self.0[c as usize].load(Ordering::Relaxed)
    }
}

/// The threads of one tunnel that have counted something.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    id: usize,
    threads: Mutex<Vec<(String, Arc<Counters>)>>,
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// This thread's counters and the registry they belong to (a process may run several
    /// tunnels, and a thread serves one).
    static MINE: RefCell<Option<(usize, Arc<Counters>)>> = const { RefCell::new(None) };
}

impl Registry {
    pub(crate) fn new() -> Self {
        Registry {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            threads: Mutex::new(Vec::new()),
        }
    }

    /// Adds `n` to the calling thread's counter `c`.
    pub(crate) fn count(&self, c: Count, n: u64) {
        self.with_mine(|ctr| ctr.bump(c, n));
    }

    /// Counts one system call that carried `n` items.
    pub(crate) fn call(&self, call: Count, items: Count, n: u64) {
        self.call_n(call, 1, items, n);
    }

    /// Counts `calls` system calls that carried `n` items in all.
    pub(crate) fn call_n(&self, call: Count, calls: u64, items: Count, n: u64) {
        self.with_mine(|ctr| {
            ctr.bump(call, calls);
            ctr.bump(items, n);
        });
    }

    fn with_mine(&self, f: impl FnOnce(&Counters)) {
        MINE.with(|m| {
            let mut m = m.borrow_mut();
            match m.as_ref() {
                Some((id, ctr)) if *id == self.id => f(ctr),
                _ => {
                    let ctr = self.register();
                    f(&ctr);
                    *m = Some((self.id, ctr));
                }
            }
        });
    }

    fn register(&self) -> Arc<Counters> {
        let name = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        let mut t = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, c)) = t.iter().find(|(n, _)| *n == name) {
            return Arc::clone(c);
        }
        let c = Arc::new(Counters::default());
        t.push((name, Arc::clone(&c)));
        c
    }

    /// Every thread of this process whose name starts with `sl-`, with its busy time and its
    /// counters (zeros for a thread that counted nothing, such as an idle worker), by name.
    pub(crate) fn snapshot(&self) -> Vec<ThreadStatus> {
        let counted = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<ThreadStatus> = task_times()
            .into_iter()
            .filter(|(name, _)| name.starts_with("sl-"))
            .map(|(name, busy_ns)| {
                let c = counted.iter().find(|(n, _)| *n == name).map(|(_, c)| c);
                let g = |k: Count| c.map_or(0, |c| c.get(k));
                ThreadStatus {
                    busy_s: busy_ns as f64 / 1e9,
                    tun_reads: g(Count::TunReads),
                    tun_read_packets: g(Count::TunReadPackets),
                    udp_sends: g(Count::UdpSends),
                    udp_send_datagrams: g(Count::UdpSendDatagrams),
                    udp_receives: g(Count::UdpReceives),
                    udp_receive_datagrams: g(Count::UdpReceiveDatagrams),
                    tun_writes: g(Count::TunWrites),
                    tun_write_packets: g(Count::TunWritePackets),
                    batches_submitted: g(Count::BatchesSubmitted),
                    handoffs: g(Count::Handoffs),
                    lane_strays: g(Count::LaneStrays),
                    name,
                }
            })
            .collect();
        out.sort_by_key(|t| natural(&t.name));
        out
    }
}

/// Sort key that puts `sl-io-10` after `sl-io-9`.
fn natural(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, num) = name.split_at(name.len() - digits);
    (stem.to_string(), num.parse().unwrap_or(0))
}

/// One thread as `sealink show --json` reports it (`threads`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThreadStatus {
    pub name: String,
    /// CPU time the thread has used since it started, in seconds.
    pub busy_s: f64,
    pub tun_reads: u64,
    pub tun_read_packets: u64,
    pub udp_sends: u64,
    pub udp_send_datagrams: u64,
    pub udp_receives: u64,
    pub udp_receive_datagrams: u64,
    pub tun_writes: u64,
    pub tun_write_packets: u64,
    pub batches_submitted: u64,
    /// Of those, batches this thread handed to the crypto workers instead of running them
    /// itself (absent from older builds, which handed all of them over).
    #[serde(default)]
    pub handoffs: u64,
    /// Datagrams this reader received though the lane steering program sends their lane to
    /// another socket (a receive GRO batch led by another lane; absent from older builds).
    #[serde(default)]
    pub lane_strays: u64,
}

/// (name, CPU ns) of every thread of this process. The scheduler's run time
/// (`schedstat`), else user + system time from `stat` in clock ticks (assumed 100 Hz, the
/// value on every Linux architecture sealink runs on).
fn task_times() -> Vec<(String, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let main = std::process::id().to_string();
    let mut out = Vec::new();
    for e in dir.flatten() {
        // The main thread carries the program's name, which may start with `sl-` too.
        if e.file_name().to_str() == Some(main.as_str()) {
            continue;
        }
        let p = e.path();
        let Ok(name) = std::fs::read_to_string(p.join("comm")) else {
            continue;
        };
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .or_else(|| {
                let s = std::fs::read_to_string(p.join("stat")).ok()?;
                // Fields after the command name, which is in parentheses and may hold spaces.
                let rest = &s[s.rfind(')')? + 2..];
                let f: Vec<&str> = rest.split_whitespace().collect();
                let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
                Some(ticks * 10_000_000)
            })
            .unwrap_or(0);
        out.push((name.trim_end().to_string(), ns));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_land_on_the_calling_thread_and_busy_time_is_read() {
        let reg = Arc::new(Registry::new());
        let r = Arc::clone(&reg);
        std::thread::Builder::new()
            .name("sl-test-7".into())
            .spawn(move || {
                r.call(Count::TunReads, Count::TunReadPackets, 44);
                r.call(Count::TunReads, Count::TunReadPackets, 2);
                r.count(Count::BatchesSubmitted, 3);
                // Burn some CPU so the clock moves.
                let mut x = 0u64;
                for i in 0..5_000_000u64 {
                    x = x.wrapping_mul(31).wrapping_add(i);
                }
                std::hint::black_box(x);
                // Stay alive until the snapshot is taken.
                std::thread::park_timeout(std::time::Duration::from_secs(5));
            })
            .unwrap();
        let mut found = None;
        for _ in 0..500 {
            found = reg
                .snapshot()
                .into_iter()
                .find(|t| t.name == "sl-test-7" && t.batches_submitted == 3);
            if found.as_ref().is_some_and(|t| t.busy_s > 0.0) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let t = found.expect("the thread is listed with its counts");
        assert_eq!((t.tun_reads, t.tun_read_packets), (2, 46));
        assert_eq!(t.udp_sends, 0);
        assert!(t.busy_s > 0.0, "busy time read from the thread's clock");
        // Another registry (another tunnel in this process) does not see these counts.
        let other = Registry::new();
        assert!(other.snapshot().iter().all(|t| t.tun_reads == 0));
    }

    #[test]
    fn names_sort_by_number() {
        let mut v = ["sl-io-10", "sl-io-9", "sl-crypto-1", "sl-io-0"];
        v.sort_by_key(|n| natural(n));
        assert_eq!(v, ["sl-crypto-1", "sl-io-0", "sl-io-9", "sl-io-10"]);
    }
}
