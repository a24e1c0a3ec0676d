//! Where OpenSSL's per-packet time goes through its EVP interface (issue 44): ChaCha20-Poly1305
//! on one reused context, timed step by step, at packet sizes around the MTU.
//!
//! ```text
//! cargo run --release -p sealink-crypto --example openssl_steps [-- --n 1000000]
//! ```
//!
//! For each size, the mean time per packet of: setting the nonce alone; that and 12 bytes of AAD
//! (where OpenSSL derives the Poly1305 key and sets Poly1305 up); that and the data in place;
//! then final; then reading the tag (a whole seal, as `OsslKey::seal` does it); the same with the key set again
//! (what a context does when its thread switches keys); and the data alone on a context in the
//! middle of a message (no per-message work: the cipher's own speed). Sizes that are not a
//! multiple of 64 cost OpenSSL another ChaCha20 call for the partial block.

use std::hint::black_box;
use std::time::Instant;

use openssl::cipher::Cipher;
use openssl::cipher_ctx::CipherCtx;

/// One timed step sequence: the context, the packet, its nonce.
type Step<'a> = dyn FnMut(&mut CipherCtx, &mut [u8], &[u8; 12]) + 'a;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .iter()
        .position(|a| a == "--n")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("--n takes a count"))
        .unwrap_or(1_000_000);
    let key = [7u8; 32];
    let aad = [1u8; 12];
    let mut buf = vec![0u8; 16384];
    let mut ctx = CipherCtx::new().expect("context");
    ctx.encrypt_init(Some(Cipher::chacha20_poly1305()), Some(&key), None)
        .expect("init");
    println!(
        "{}: ChaCha20-Poly1305 seal steps, ns per packet (mean of {n}); load average {}",
        openssl::version::version(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "{:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8}",
        "size", "nonce", "+aad", "+data", "+final", "+tag", "rekeyed", "data only", "GB/s"
    );
    for size in [64usize, 1024, 1400, 1408, 1424, 1440, 2048, 4096, 16384] {
        let b = &mut buf[..size];
        let mut nonce = [0u8; 12];
        let mut time = |f: &mut Step<'_>| {
            let t = Instant::now();
            for i in 0..n {
                nonce[4..].copy_from_slice(&i.to_le_bytes());
                f(&mut ctx, black_box(&mut *b), &nonce);
            }
            t.elapsed().as_nanos() as f64 / n as f64
        };
        let steps = |upto: usize, rekey: bool| {
            move |c: &mut CipherCtx, b: &mut [u8], nonce: &[u8; 12]| {
                let mut tag = [0u8; 16];
                let k = rekey.then_some(&key[..]);
                c.encrypt_init(None, k, Some(nonce)).expect("nonce");
                if upto >= 1 {
                    c.cipher_update(&aad, None).expect("aad");
                }
                if upto >= 2 {
                    let len = b.len();
                    c.cipher_update_inplace(b, len).expect("data");
                }
                if upto >= 3 {
                    c.cipher_final(&mut []).expect("final");
                }
                if upto >= 4 {
                    c.tag(&mut tag).expect("tag");
                    black_box(tag);
                }
            }
        };
        let row: Vec<f64> = vec![
            time(&mut steps(0, false)),
            time(&mut steps(1, false)),
            time(&mut steps(2, false)),
            time(&mut steps(3, false)),
            time(&mut steps(4, false)),
            time(&mut steps(4, true)),
            time(&mut |c, b, _| {
                let len = b.len();
                c.cipher_update_inplace(b, len).expect("data");
            }),
        ];
        // Leave the context between messages for the next size.
        ctx.encrypt_init(None, None, Some(&[0u8; 12]))
            .expect("reset");
        println!(
            "{size:>6} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>9.1} {:>9.1} {:>8.2}",
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            row[5],
            row[6],
            size as f64 / row[4]
        );
    }
}
