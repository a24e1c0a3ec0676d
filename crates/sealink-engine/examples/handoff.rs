//! The hand-off policy on real threads (issue 43): one submitting thread that "reads" 64 KiB
//! batches (a copy into the batch and a fixed stretch of system-call-like work) and "seals" them
//! (an in-place pass over the 64 KiB), through a pipeline with no workers (inline), with
//! workers and `Handoff::Auto` (the tunnel's default), and with workers and `Handoff::Always`
//! (every batch handed off, the engine before issue 43). Prints batches per second, the
//! process's CPU per batch (user + system, `/proc/self/stat`), the share the gauge handed off
//! and the idle CPUs it saw.
//!
//! On a machine with an idle core, Auto should carry more batches than inline at less CPU per
//! batch than Always; with no idle core (e.g. `taskset -c 0`), Auto should stay inline.
//!
//! cargo run --release -p sealink-engine --example handoff [SECONDS] [WORKERS] [SEAL_PASSES]

use std::sync::Arc;
use std::time::{Duration, Instant};

use sealink_engine::{Gauge, Handoff, Pipeline, Pool, Work};

const BATCH: usize = 64 * 1024;
/// Batches in flight, as the tunnel's readers (`BATCHES_PER_READER`).
const DEPTH: usize = 4;

struct Ctx {
    passes: u32,
}

struct Batch {
    data: Vec<u8>,
    seq: u64,
    pool: Arc<Pool<Box<Batch>>>,
    released: Arc<std::sync::atomic::AtomicU64>,
}

impl Work for Box<Batch> {
    type Ctx = Ctx;
    fn run(&mut self, ctx: &Ctx) {
        // A stand-in for a cipher: every word read, mixed and written back, `passes` times.
        let mut k = self.seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        for _ in 0..ctx.passes {
            for w in self.data.chunks_exact_mut(8) {
                let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
                k = k.rotate_left(5) ^ v;
                w.copy_from_slice(&(v ^ k).to_le_bytes());
            }
        }
    }
    fn release(self, _: &Ctx) {
        self.released
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pool = Arc::clone(&self.pool);
        pool.put(self);
    }
}

/// User + system time of this process so far.
fn process_cpu() -> Duration {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rfind(')').map_or("", |i| &s[i + 2..]);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// Busy work standing in for the system calls of a read: `us` microseconds on this thread.
fn syscall_like(us: u64) {
    let end = Instant::now() + Duration::from_micros(us);
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

fn run(label: &str, workers: usize, policy: Handoff, secs: f64, passes: u32) {
    let released = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let pipe = Pipeline::new(Arc::new(Ctx { passes }), 1, workers);
    let pool = Pool::new(Vec::new());
    for _ in 0..DEPTH {
        pool.put(Box::new(Batch {
            data: vec![0u8; BATCH],
            seq: 0,
            pool: Arc::clone(&pool),
            released: Arc::clone(&released),
        }));
    }
    let source = vec![0x5Au8; BATCH];
    let mut gauge = Gauge::new(policy);
    let cpu0 = process_cpu();
    let t0 = Instant::now();
    let mut seq = 0u64;
    let mut max_fraction = 0.0f64;
    while t0.elapsed().as_secs_f64() < secs {
        let Some(mut b) = pool.take(&pipe, || false) else {
            break;
        };
        // The read: the kernel's copy into the batch, and the rest of the system call.
        b.data.copy_from_slice(&source);
        syscall_like(15);
        b.seq = seq;
        seq += 1;
        pipe.submit_from(&mut gauge, 0, b);
        max_fraction = max_fraction.max(gauge.fraction());
    }
    drop(pipe);
    let wall = t0.elapsed().as_secs_f64();
    let cpu = (process_cpu() - cpu0).as_secs_f64();
    let n = released.load(std::sync::atomic::Ordering::Relaxed) as f64;
    println!(
        "{label:<22} {:>9.0} {:>9.2} {:>10.1} {:>9.2} {:>9.3} {:>10}",
        n / wall,
        cpu / wall,
        cpu / n * 1e6,
        gauge.handed_off as f64 / seq.max(1) as f64,
        max_fraction,
        sealink_engine::spare::idle_cores().map_or("unknown".into(), |c| format!("{c:.2}")),
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let workers: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let passes: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2);
    println!(
        "one submitter, 64 KiB batches: copy + 15 us of read work, then {passes} in-place passes (the seal); {workers} worker(s); {} CPUs allowed; {secs} s each",
        sealink_engine::cpus().len()
    );
    println!(
        "{:<22} {:>9} {:>9} {:>10} {:>9} {:>9} {:>10}",
        "policy", "batches/s", "cores", "cpu us/b", "handed", "max share", "idle cpus"
    );
    for round in 0..2 {
        let _ = round;
        run("inline (no workers)", 0, Handoff::Auto, secs, passes);
        run("auto", workers, Handoff::Auto, secs, passes);
        run("always", workers, Handoff::Always, secs, passes);
    }
}
