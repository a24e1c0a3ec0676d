//! GHASH throughput of RustCrypto's `ghash`/`polyval`, for `bench/ghash-soft.sh`.
//!
//! `polyval` chooses its backend when it is compiled: by default (x86/x86_64) it detects
//! PCLMULQDQ at run time through `cpufeatures` and uses the carry-less multiply instruction;
//! built with `RUSTFLAGS='--cfg polyval_force_soft'` it has only its portable software backend.
//! Both cannot live in one binary, so the script builds this example twice and compares.
//!
//! Usage: `ghash [SIZE [SECONDS [RUNS]]]`; prints one CSV line
//! `backend,forced_soft,size,mbit_s,unix_time` after a header, the median of RUNS timed runs
//! after a warm-up, each over SIZE bytes (default 8192) filled from a fresh seed.
#![forbid(unsafe_code)]

use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ghash::GHash;
use ghash::universal_hash::{KeyInit, UniversalHash};

/// Set by `--cfg polyval_force_soft`: then `polyval` (and so this GHASH) is software only.
#[allow(unexpected_cfgs)]
const FORCED_SOFT: bool = cfg!(polyval_force_soft);

fn clmul_available() -> bool {
    #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
    {
        std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
    {
        false
    }
}

/// Seed from the system random generator.
fn seed() -> u64 {
    let mut b = [0u8; 8];
    sealink_crypto::sign::random_bytes(&mut b).expect("system random generator");
    u64::from_le_bytes(b)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let size: usize = args.first().map_or(8192, |s| s.parse().expect("SIZE"));
    let seconds: f64 = args.get(1).map_or(0.3, |s| s.parse().expect("SECONDS"));
    let runs: usize = args.get(2).map_or(5, |s| s.parse().expect("RUNS"));
    assert!(size > 0 && seconds > 0.0 && runs > 0);

    let mut key = [0u8; 16];
    sealink_crypto::sign::random_bytes(&mut key).expect("system random generator");
    let key = ghash::Key::from(key);
    let mut buf = vec![0u8; size];
    let duration = Duration::from_secs_f64(seconds);
    let mut rates = Vec::new();
    for run in 0..=runs {
        // Fresh random bytes each run (splitmix64 over a fresh seed: test data, not a key).
        let mut s = seed();
        for chunk in buf.chunks_mut(8) {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
        }
        let start = Instant::now();
        let mut n = 0u64;
        let elapsed = loop {
            for _ in 0..8 {
                let mut g = GHash::new(&key);
                g.update_padded(&buf);
                black_box(g.finalize());
            }
            n += 8;
            let e = start.elapsed();
            if e >= duration {
                break e;
            }
        };
        if run > 0 {
            rates.push(n as f64 * size as f64 * 8.0 / elapsed.as_secs_f64() / 1e6);
        }
    }
    rates.sort_by(f64::total_cmp);
    let m = rates.len();
    let median = if m % 2 == 1 {
        rates[m / 2]
    } else {
        (rates[m / 2 - 1] + rates[m / 2]) / 2.0
    };
    let backend = if FORCED_SOFT {
        "soft"
    } else if clmul_available() {
        "clmul"
    } else {
        "soft-fallback"
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    println!("backend,forced_soft,size,mbit_s,unix_time");
    println!("{backend},{FORCED_SOFT},{size},{median},{now}");
}
