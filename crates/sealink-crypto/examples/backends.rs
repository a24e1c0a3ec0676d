//! Backend comparison: aws-lc-rs vs ring AEAD seal throughput, called directly (no protocol).
//!
//! ```text
//! cargo run --release -p sealink-crypto --example backends [-- --reps N --ms MS]
//! ```
//!
//! For each suite (AES-128-GCM, ChaCha20-Poly1305) and size (1400 B, 16 KiB): a fresh random
//! key and buffer from the system generator, a warm-up that also calibrates the iteration
//! count, then `reps` timed repetitions of about `ms` milliseconds each, with the two backends
//! interleaved repetition by repetition so that drifting machine load hits both alike. Prints
//! the median (and min..max) throughput in GB/s (10^9 bytes per second of plaintext) and the
//! ratio ring / aws-lc-rs.
//!
//! Two tables: the libraries called directly (`raw`), then the same through
//! `PacketKey::with_backend` (seal, scope encrypt, 12-byte header as AAD: what sealink runs).
//! The header line says which backend `PacketKey::new` picks on this machine, and why.

use std::hint::black_box;
use std::time::{Duration, Instant};

use sealink_crypto::raw::RawAead;
use sealink_crypto::raw::ring_backend::RingAead;
use sealink_crypto::sign::random_bytes;
use sealink_crypto::suite::{Backend, chosen_backend};
use sealink_crypto::{PacketKey, Scope, SuiteId};

const SIZES: [usize; 2] = [1400, 16 * 1024];
const SUITES: [SuiteId; 3] = [
    SuiteId::Aes128Gcm,
    SuiteId::Aes256Gcm,
    SuiteId::ChaCha20Poly1305,
];
const AAD: [u8; 12] = [0x5e; 12];

fn nonce(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    n
}

/// Runs `seal` `iters` times over `buf`; returns the elapsed time.
fn run(
    seal: &mut dyn FnMut(u64, &mut [u8]) -> [u8; 16],
    buf: &mut [u8],
    counter: &mut u64,
    iters: u64,
) -> Duration {
    let t = Instant::now();
    for _ in 0..iters {
        *counter += 1;
        black_box(seal(*counter, black_box(&mut *buf)));
    }
    t.elapsed()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("numeric argument"))
        .unwrap_or(default)
}

type Seal<'a> = &'a mut dyn FnMut(u64, &mut [u8]) -> [u8; 16];

/// Interleaved measurement of two seal functions (aws-lc-rs first, ring second) over `buf`;
/// prints one row.
fn compare(
    label: &str,
    size: usize,
    mut seals: [Seal<'_>; 2],
    buf: &mut [u8],
    reps: usize,
    rep_ms: u64,
) {
    let mut counter = 0u64;

    // Warm-up (about 300 ms per backend) and calibration.
    let mut iters = [0u64; 2];
    for (i, seal) in seals.iter_mut().enumerate() {
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < Duration::from_millis(300) {
            run(&mut **seal, buf, &mut counter, 100);
            n += 100;
        }
        let per_iter = start.elapsed().as_secs_f64() / n as f64;
        iters[i] = ((rep_ms as f64 / 1000.0) / per_iter).max(1.0) as u64;
    }

    let mut gbps = [Vec::new(), Vec::new()];
    for _ in 0..reps {
        for (i, seal) in seals.iter_mut().enumerate() {
            let d = run(&mut **seal, buf, &mut counter, iters[i]);
            gbps[i].push((iters[i] as f64 * size as f64) / d.as_secs_f64() / 1e9);
        }
    }
    let fmt = |v: &mut Vec<f64>| {
        let m = median(v);
        format!("{m:.3} [{:.3}..{:.3}]", v[0], v[v.len() - 1])
    };
    let (ma, mr) = (median(&mut gbps[0]), median(&mut gbps[1]));
    println!(
        "{:<28} {:>7} {:>26} {:>26} {:>10.3}",
        label,
        size,
        fmt(&mut gbps[0]),
        fmt(&mut gbps[1]),
        mr / ma
    );
}

type BoxedSeal = Box<dyn FnMut(u64, &mut [u8]) -> [u8; 16]>;

/// For every suite and size: a fresh random key and buffer (`size + room` bytes; `room` holds a
/// tag written into the buffer), then [`compare`] of the two sealers (aws-lc-rs, ring) that
/// `make` builds from the key.
fn compare_all(
    table: &str,
    room: usize,
    reps: usize,
    rep_ms: u64,
    mut make: impl FnMut(SuiteId, &[u8]) -> [BoxedSeal; 2],
) {
    for suite in SUITES {
        for size in SIZES {
            let mut key = vec![0u8; suite.key_len()];
            random_bytes(&mut key).expect("rng");
            let mut buf = vec![0u8; size + room];
            random_bytes(&mut buf).expect("rng");
            let [mut aws, mut ring] = make(suite, &key);
            let label = format!("{table} {}", suite.name());
            compare(
                &label,
                size,
                [&mut *aws, &mut *ring],
                &mut buf,
                reps,
                rep_ms,
            );
        }
    }
}

fn main() {
    let reps = arg("--reps", 9).max(1) as usize;
    let rep_ms = arg("--ms", 250);
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "backends: seal throughput, {reps} reps x ~{rep_ms} ms each after warm-up; loadavg at start: {}",
        loadavg.trim()
    );
    let (chosen, why) = chosen_backend();
    println!("PacketKey::new picks: {chosen} ({why})");
    println!(
        "{:<28} {:>7} {:>26} {:>26} {:>10}",
        "suite", "size", "aws-lc-rs GB/s med [min..max]", "ring GB/s med [min..max]", "ring/aws"
    );
    compare_all("raw", 0, reps, rep_ms, |suite, key| {
        let aws = RawAead::new(suite, key).expect("key");
        let ring = RingAead::new(suite, key).expect("key");
        [
            Box::new(move |c: u64, b: &mut [u8]| aws.seal_in_place(nonce(c), &AAD, b)),
            Box::new(move |c: u64, b: &mut [u8]| ring.seal_in_place(nonce(c), &AAD, b)),
        ]
    });
    // Body plus tag room; the measured length is `size` bytes of plaintext.
    compare_all("PacketKey", 16, reps, rep_ms, |suite, key| {
        Backend::ALL.map(|b| {
            let k = PacketKey::with_backend(b, suite, key, false).expect("key");
            Box::new(move |c: u64, b: &mut [u8]| {
                let n = b.len() - 16;
                k.seal(c, Scope::Encrypt, &AAD, b, n).expect("seal");
                let mut t = [0u8; 16];
                t.copy_from_slice(&b[n..]);
                t
            }) as BoxedSeal
        })
    });
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("loadavg at end: {}", loadavg.trim());
}
