//! Backend comparison: aws-lc-rs, ring and OpenSSL AEAD throughput, called directly and through
//! `PacketKey`.
//!
//! ```text
//! cargo run --release -p sealink-crypto --example backends \
//!     [-- --reps N --ms MS --sizes 64,1400,16384 --suites aes128-gcm,chacha20-poly1305]
//! ```
//!
//! For each suite (AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305) and size (64 B, 1400 B,
//! 16 KiB): a fresh random key and buffer from the system generator, a warm-up that also
//! calibrates the iteration count, then `reps` timed repetitions of about `ms` milliseconds
//! each, with the three backends interleaved repetition by repetition so that drifting machine
//! load hits them alike. Prints the median (and min..max) throughput in GB/s (10^9 bytes per
//! second of plaintext), the ratio OpenSSL / aws-lc-rs, and the ratio OpenSSL / the better of
//! aws-lc-rs and ring.
//!
//! Three tables: seal with the libraries called directly (`raw`); seal through
//! `PacketKey::with_backend` (scope encrypt, 12-byte header as AAD: what sealink runs); and open
//! through `PacketKey` (each open first copies the sealed packet back into the buffer, the same
//! copy for every backend). The header lines say which backend `PacketKey::new` picks for each
//! suite on this machine, and why.

use std::hint::black_box;
use std::time::{Duration, Instant};

use sealink_crypto::ossl::OsslKey;
use sealink_crypto::raw::ring_backend::RingAead;
use sealink_crypto::raw::{ChosenRaw, RawAead};
use sealink_crypto::sign::random_bytes;
use sealink_crypto::suite::Backend;
use sealink_crypto::{PacketKey, Scope, SuiteId};

const SIZES: [usize; 3] = [64, 1400, 16 * 1024];
/// Columns: aws-lc-rs, ring, OpenSSL, and what `PacketKey::new` (or `ChosenRaw::new`) picks.
const N: usize = 4;
const PURE: [Backend; 3] = [Backend::AwsLc, Backend::Ring, Backend::OpenSsl];

/// A comma-separated list option, or `default`.
fn list<T>(name: &str, default: &[T], parse: impl Fn(&str) -> T) -> Vec<T>
where
    T: Clone,
{
    let args: Vec<String> = std::env::args().collect();
    match args
        .iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
    {
        Some(v) => v.split(',').map(|x| parse(x.trim())).collect(),
        None => default.to_vec(),
    }
}
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

/// Interleaved measurement of the backends' functions (in [`Backend::ALL`]'s order) over `buf`;
/// prints one row.
fn compare(
    label: &str,
    size: usize,
    mut seals: [Seal<'_>; N],
    buf: &mut [u8],
    reps: usize,
    rep_ms: u64,
) {
    let mut counter = 0u64;

    // Warm-up (about 300 ms per backend) and calibration.
    let mut iters = [0u64; N];
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

    let mut gbps: [Vec<f64>; N] = Default::default();
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
    let (ma, mr, mo, mc) = (
        median(&mut gbps[0]),
        median(&mut gbps[1]),
        median(&mut gbps[2]),
        median(&mut gbps[3]),
    );
    println!(
        "{:<30} {:>6} {:>22} {:>22} {:>22} {:>22} {:>8.3} {:>8.3}",
        label,
        size,
        fmt(&mut gbps[0]),
        fmt(&mut gbps[1]),
        fmt(&mut gbps[2]),
        fmt(&mut gbps[3]),
        mo / ma,
        mc / ma.max(mr)
    );
}

type BoxedSeal = Box<dyn FnMut(u64, &mut [u8]) -> [u8; 16]>;

/// For every suite and size: a fresh random key and buffer (`size + room` bytes; `room` holds a
/// tag written into the buffer), then [`compare`] of the backends' functions that `make`
/// builds from the key.
fn compare_all(
    table: &str,
    room: usize,
    reps: usize,
    rep_ms: u64,
    mut make: impl FnMut(SuiteId, &[u8]) -> [BoxedSeal; N],
) {
    let suites = list("--suites", &SUITES, |s| {
        SuiteId::parse_modern(s).expect("--suites takes modern suite names")
    });
    let sizes = list("--sizes", &SIZES, |s| {
        s.parse().expect("--sizes takes byte counts")
    });
    for &suite in &suites {
        for &size in &sizes {
            let mut key = vec![0u8; suite.key_len()];
            random_bytes(&mut key).expect("rng");
            let mut buf = vec![0u8; size + room];
            random_bytes(&mut buf).expect("rng");
            let [mut aws, mut ring, mut ossl, mut chosen] = make(suite, &key);
            let label = format!("{table} {}", suite.name());
            compare(
                &label,
                size,
                [&mut *aws, &mut *ring, &mut *ossl, &mut *chosen],
                &mut buf,
                reps,
                rep_ms,
            );
        }
    }
}

/// One key per column: the three libraries, then `PacketKey::new`'s choice.
fn columns(suite: SuiteId, key: &[u8]) -> [PacketKey; N] {
    let [a, r, o] = PURE.map(|b| PacketKey::with_backend(b, suite, key, false).expect("key"));
    [a, r, o, PacketKey::new(suite, key, false).expect("key")]
}

fn main() {
    let reps = arg("--reps", 9).max(1) as usize;
    let rep_ms = arg("--ms", 250);
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "backends: seal throughput, {reps} reps x ~{rep_ms} ms each after warm-up; loadavg at start: {}",
        loadavg.trim()
    );
    println!(
        "PacketKey::new picks:\n{}",
        sealink_crypto::backend::report()
    );
    println!(
        "{:<30} {:>6} {:>22} {:>22} {:>22} {:>22} {:>8} {:>8}",
        "suite",
        "size",
        "aws-lc-rs GB/s [range]",
        "ring GB/s [range]",
        "openssl GB/s [range]",
        "chosen GB/s [range]",
        "ossl/aws",
        "chosen/best"
    );
    compare_all("raw seal", 0, reps, rep_ms, |suite, key| {
        let aws = RawAead::new(suite, key).expect("key");
        let ring = RingAead::new(suite, key).expect("key");
        let ossl = OsslKey::new(suite, key).expect("key");
        let chosen = ChosenRaw::new(suite, key).expect("key");
        [
            Box::new(move |c: u64, b: &mut [u8]| aws.seal_in_place(nonce(c), &AAD, b)),
            Box::new(move |c: u64, b: &mut [u8]| ring.seal_in_place(nonce(c), &AAD, b)),
            Box::new(move |c: u64, b: &mut [u8]| {
                let mut t = [0u8; 16];
                ossl.seal(&nonce(c), &AAD, b, &mut t).expect("seal");
                t
            }),
            Box::new(move |c: u64, b: &mut [u8]| chosen.seal_in_place(nonce(c), &AAD, b)),
        ]
    });
    // Body plus tag room; the measured length is `size` bytes of plaintext.
    compare_all("PacketKey", 16, reps, rep_ms, |suite, key| {
        columns(suite, key).map(|k| {
            Box::new(move |c: u64, b: &mut [u8]| {
                let n = b.len() - 16;
                k.seal(c, Scope::Encrypt, &AAD, b, n).expect("seal");
                let mut t = [0u8; 16];
                t.copy_from_slice(&b[n..]);
                t
            }) as BoxedSeal
        })
    });
    // Open: one packet sealed under counter 1, copied back in before each open.
    compare_all("PacketKey open", 16, reps, rep_ms, |suite, key| {
        columns(suite, key).map(|k| {
            let mut sealed: Vec<u8> = Vec::new();
            Box::new(move |_: u64, buf: &mut [u8]| {
                if sealed.is_empty() {
                    sealed = buf.to_vec();
                    let n = sealed.len() - 16;
                    k.seal(1, Scope::Encrypt, &AAD, &mut sealed, n)
                        .expect("seal");
                }
                buf.copy_from_slice(&sealed);
                let n = k
                    .open(1, Scope::Encrypt, &AAD, buf, buf.len())
                    .expect("open");
                [n as u8; 16]
            }) as BoxedSeal
        })
    });
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("loadavg at end: {}", loadavg.trim());
}
