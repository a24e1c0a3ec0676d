//! `sealink-lab bench crypto`: Table 1 of paper 001 (Nahum, O'Malley, Orman, Schroeppel 1995,
//! "Towards High Performance Cryptographic Software") redone on this machine, one core, next to
//! the paper's 1995 figures (175 MHz DEC Alpha 600), plus the paper's hardware proposal (a
//! carry-less "XOR multiply" instruction) measured as GHASH on its CLMUL path against the same
//! crate built for software only.
//!
//! Every primitive comes from a library: MD5, DES-CBC and 3DES-CBC through
//! `sealink_crypto::legacy` (RustCrypto), SHA-256, RSA, X25519 and Ed25519 from aws-lc-rs,
//! AES-128-GCM and ChaCha20-Poly1305 through `sealink_crypto::raw::RawAead` (aws-lc-rs), GHASH
//! from RustCrypto's `ghash`/`polyval`, and the finite-field Diffie-Hellman exponentiation from
//! RustCrypto's `crypto-bigint` (constant-time Montgomery form). The DH-2048 rows benchmark the
//! modular exponentiation only: it is not a DH implementation and nothing else uses it.

use std::fmt::Write as _;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_lc_rs::{agreement, digest, rand as lc_rand, rsa, signature};
use crypto_bigint::modular::{MontyForm, MontyParams};
use crypto_bigint::{Odd, U256, U2048};
use ghash::GHash;
use ghash::universal_hash::{KeyInit, UniversalHash};
use sealink_crypto::raw::{self, RawAead};
use sealink_crypto::{SuiteId, legacy};
use sealink_proto::sim::SimRng;

use super::{fill, median, print_with_files, random_seed, timed};
use crate::error::{Error, Result};
use crate::output;
use crate::report::{RunRecord, Table, record};

mod measure;
mod public_key;
mod render;

use measure::*;
use public_key::*;
pub use render::*;
/// Largest bulk buffer accepted.
pub const MAX_SIZE: usize = 1 << 24;

/// RFC 3526 group 14: the 2048-bit MODP prime (generator 2).
const MODP_2048_HEX: &str = concat!(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74",
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437",
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED",
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF05",
    "98DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB",
    "9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B",
    "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF695581718",
    "3995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF",
);

/// Script that measures GHASH with the `polyval` crate forced to its software backend.
const GHASH_SOFT_SCRIPT: &str = "bench/ghash-soft.sh";
/// File the script leaves in the output directory.
const GHASH_SOFT_FILE: &str = "ghash-soft.csv";

/// Parameters of `sealink-lab bench crypto`.
#[derive(Debug, Clone)]
pub struct Params {
    pub seconds: f64,
    pub runs: usize,
    pub size: usize,
    pub quick: bool,
    pub out: PathBuf,
    /// Run `bench/ghash-soft.sh` first (builds the software-only GHASH example).
    pub ghash_soft: bool,
}

/// What a row measures.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Unit {
    /// 10^6 bit/s of payload.
    Mbps,
    /// Operations per second.
    PerSec,
    /// 10^3 bit/s (of RSA modulus processed by private-key operations).
    Kbps,
    /// A ratio of two measured rates.
    Ratio,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Mbps => "Mbit/s",
            Unit::PerSec => "ops/s",
            Unit::Kbps => "kbit/s",
            Unit::Ratio => "x",
        }
    }
}

/// The paper's figure for a row, in the row's unit.
#[derive(Debug, Clone, Copy)]
struct Paper {
    value: f64,
    /// Table 1's line, as printed.
    text: &'static str,
}

#[derive(Debug, Clone)]
struct Row {
    name: &'static str,
    detail: String,
    unit: Unit,
    value: f64,
    paper: Option<Paper>,
}

impl Row {
    fn ratio(&self) -> Option<f64> {
        self.paper.map(|p| self.value / p.value)
    }
}

fn validate(p: &Params) -> Result<()> {
    if !(1..=MAX_SIZE).contains(&p.size) {
        return Err(Error::Usage(format!(
            "--size must be within 1..={MAX_SIZE}, got {}",
            p.size
        )));
    }
    super::check_timing(p.seconds, p.runs)
}

/// Runs the bench, prints the tables and writes crypto.csv and crypto.json into `p.out`.
pub fn run(p: &Params) -> Result<()> {
    validate(p)?;
    let t = if p.quick {
        Timing {
            duration: Duration::from_millis(5),
            runs: 1,
        }
    } else {
        Timing {
            duration: Duration::from_secs_f64(p.seconds),
            runs: p.runs,
        }
    };
    let size = if p.quick { p.size.min(1024) } else { p.size };
    if p.ghash_soft {
        run_soft_script(&p.out, size, t)?;
    }

    // 6 bulk rows, RSA keygen, 2 RSA rows, 2 DH, 2 X25519, 2 Ed25519, 4 fixed/variable-base,
    // GHASH: runs + 1 each.
    let steps = (19 * (t.runs + 1) + 1) as u64;
    let pb = output::progress(steps, "bench crypto");
    let rows = measure_all(t, size, &pb);
    let precomp = measure_precomp(t, &pb);
    let ghash_key = ghash::Key::from(random_array::<16>()?);
    let clmul = bulk(t, size, &pb, |b| {
        black_box(ghash_once(&ghash_key, b));
    });
    pb.finish_and_clear();
    let rows = rows?;
    let precomp = precomp?;
    let clmul = clmul?;
    // Paper 001's "40 processors": the serial step's ceiling, measured now so that it and the
    // algorithm rows above see the same machine.
    let ceiling = if size <= super::stacks::MAX_PACKET {
        let r = super::stacks::baseline_plp_send(size, t.duration.as_secs_f64(), t.runs)?;
        Some(median(&r))
    } else {
        None
    };
    let projection = match ceiling {
        Some(c) => Some(projection_001(&rows, c, size)?),
        None => None,
    };

    let cores = record::cores();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "sealink-lab bench crypto: Table 1 of paper 001 (Nahum et al. 1995, 175 MHz DEC Alpha 600) redone on this machine, one thread ({cores} cores available)"
    );
    if p.quick {
        let _ = writeln!(
            out,
            "QUICK MODE: {} B buffers, one 5 ms run per row after a 5 ms warm-up; a smoke test, not a measurement",
            size
        );
    } else {
        let _ = writeln!(
            out,
            "bulk rows: {size}-byte buffers of fresh random bytes each run; every row is the median of {} runs of {} s after one warm-up run",
            t.runs, p.seconds
        );
    }
    let _ = writeln!(
        out,
        "units: Mbit/s = 10^6 bit/s of payload; kbit/s = 10^3 bit/s; ops/s = operations per second. The paper's Mbits/sec and Kbits/sec are read as 10^6 and 10^3 (if it meant 2^20 and 2^10, its figures are 4.9% and 2.4% higher and the ratios that much lower)"
    );
    let _ = writeln!(out);
    out.push_str(&table(&rows).markdown());
    let _ = writeln!(out);
    let _ = writeln!(out, "what each row measures:");
    for r in &rows {
        let _ = writeln!(out, "- {}: {}", r.name, r.detail);
    }
    let _ = writeln!(
        out,
        "- paper rows: Table 1 states no RSA modulus size; 20 signatures/s x 512 bits = 10.2 kbit/s matches its Crypt-Decrypt line, so a 512-bit modulus is likely, against 2048 bits here. Its DH is the 512-bit prime of section 2, against 2048 bits here; a paper \"key\" may include generating one's own public value (a second exponentiation)"
    );
    let _ = writeln!(
        out,
        "- the DH-2048 rows benchmark a modular exponentiation; they are not a DH implementation used anywhere in sealink"
    );

    // --- Section 2: key exchange with a precomputed table of generator powers --------------
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "elliptic-curve key exchange with and without precomputation (paper 001 section 2: \"about a factor of 2.5\" from a precomputed table of generator powers, EC DH over GF(2^155)); aws-lc-rs, one thread"
    );
    out.push_str(&precomp_table(&precomp).markdown());
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "- fixed base: agreement::PrivateKey::from_private_key (priv x G through the library's precomputed generator table); variable base: agreement::agree with a peer's public key (priv x P, P parsed and checked; no table can cover P)"
    );
    let _ = writeln!(
        out,
        "- loose match: prime-field curves here, the paper's is binary (GF(2^155), see bench/ecc-binary.sh); aws-lc's tables are ~148 KiB (P-256, x86-64) and tens of KiB (X25519), the paper's \"low kilobytes\"; the paper's 2.5 can only be per generator exponentiation, since a whole exchange has one multiplication of each kind and so at most halves (last column)"
    );
    for r in &precomp {
        let _ = writeln!(out, "- {}: {}", r.curve, r.table);
    }

    let ghash_csv = report_clmul(&mut out, p, size, clmul);

    // --- Section 3: the paper's projection of packet-level parallelism ------------------------
    report_projection(&mut out, projection.as_ref(), size, t.runs, cores);

    let mut all = rows;
    all.extend(precomp_rows(&precomp));
    let (csv, json) = write_files(&p.out, &all, &ghash_csv, projection.as_ref())?;
    print_with_files(out, &csv, &json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modp_prime_is_the_rfc_3526_one() {
        let p = U2048::from_be_hex(MODP_2048_HEX);
        // Top and bottom 64 bits are all ones; pi's digits start right after.
        assert_eq!(p.as_words()[0], u64::MAX as crypto_bigint::Word);
        assert_eq!(
            p.as_words()[U2048::LIMBS - 1],
            u64::MAX as crypto_bigint::Word
        );
        assert_eq!(p.bits(), 2048);
    }

    #[test]
    fn modp_exponentiations_agree() {
        let params = modp_2048_params();
        let g = U2048::from_u64(2);
        let a = U256::from_u64(0x1234_5678_9abc_def1);
        let b = U256::from_be_slice(&[0xA5; 32]);
        let ga = modp_pow(params, &g, &a);
        let gb = modp_pow(params, &g, &b);
        assert_eq!(modp_pow(params, &gb, &a), modp_pow(params, &ga, &b));
        // 2^10 mod p is 1024.
        assert_eq!(
            modp_pow(params, &g, &U256::from_u64(10)),
            U2048::from_u64(1024)
        );
    }

    #[test]
    fn ghash_matches_rfc_8452_vector() {
        // RFC 8452 Appendix A: GHASH(H, X_1 || X_2).
        let hex = |s: &str| -> [u8; 16] {
            let mut b = [0u8; 16];
            for (i, o) in b.iter_mut().enumerate() {
                *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
            }
            b
        };
        let h = ghash::Key::from(hex("25629347589242761d31f826ba4b757b"));
        let mut data = hex("4f4f95668c83dfb6401762bb2d01a262").to_vec();
        data.extend_from_slice(&hex("d1a24ddd2721d006bbe45f20d3c9f362"));
        assert_eq!(
            ghash_once(&h, &data),
            hex("bd9b3997046731fb96251b91f9c99d7a")
        );
    }

    #[test]
    fn soft_csv_parses() {
        let s = parse_soft(
            "backend,forced_soft,size,mbit_s,unix_time\nsoft,true,8192,123.5,1700000000\n",
        )
        .unwrap();
        assert_eq!(
            s,
            SoftGhash {
                mbps: 123.5,
                size: 8192,
                forced_soft: true,
                when: "1700000000".into()
            }
        );
        assert!(parse_soft("header only\n").is_none());
    }

    #[test]
    fn projection_001_adds_the_serial_path_to_each_algorithm() {
        let row = |name, value| Row {
            name,
            detail: String::new(),
            unit: Unit::Mbps,
            value,
            paper: None,
        };
        // Ceiling 200 Mbit/s; MD5 at 200 makes a 100 Mbit/s stack: 2 processors reach the
        // ceiling. DES at 4.6 / (1 - 4.6 / 200) makes the paper's 4.6 Mbit/s stack: 43.5.
        let rows = [row("MD5", 200.0), row("DES-CBC", 4.6 / (1.0 - 4.6 / 200.0))];
        let t = projection_001(&rows, 200.0, 4096).unwrap();
        assert_eq!(t.rows().len(), 2);
        let md5 = &t.rows()[0];
        assert_eq!(md5[0], "TCP/MD5/IP");
        assert_eq!(md5[6], "100.0");
        assert_eq!(md5[8], "2.0");
        assert_eq!(md5[4], "163.8400"); // 4096 x 8 bits at 200 Mbit/s
        assert_eq!(md5[9], "2.00"); // flat at the ceiling from 2 processors on
        let des = &t.rows()[1];
        assert_eq!(des[6], "4.6");
        assert_eq!(des[8], "43.5");
        assert_eq!(des[9], "8.00");
        assert!(projection_001(&rows, 0.0, 4096).is_err());
    }

    #[test]
    fn precomputation_ratios() {
        // Fixed base 3x the variable-base rate: one exchange (one of each) against two
        // variable-base multiplications is 2 / (1/3 + 1) = 1.5x faster, never 2x or more.
        let r = Precomp {
            curve: "X",
            names: ["a", "b", "c"],
            fixed: 300.0,
            variable: 100.0,
            table: "",
        };
        assert!((r.ratio() - 3.0).abs() < 1e-12);
        assert!((r.exchange_ratio() - 1.5).abs() < 1e-12);
        let rows = precomp_rows(std::slice::from_ref(&r));
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[2].unit, Unit::Ratio);
        assert!((rows[2].ratio().unwrap() - 3.0 / 2.5).abs() < 1e-12);
        let t = precomp_table(&[r]).markdown();
        assert!(
            t.contains("| X ") && t.contains("3.00x") && t.contains("1.50x"),
            "{t}"
        );
    }

    #[test]
    fn table_has_ratio_and_na() {
        let rows = [
            Row {
                name: "MD5",
                detail: String::new(),
                unit: Unit::Mbps,
                value: 800.0,
                paper: Some(Paper {
                    value: 80.0,
                    text: "80 Mbits/sec",
                }),
            },
            Row {
                name: "SHA-256",
                detail: String::new(),
                unit: Unit::Mbps,
                value: 1.5,
                paper: None,
            },
        ];
        let s = table(&rows).markdown();
        assert!(s.contains("| MD5 "));
        assert!(s.contains("10.0x"));
        assert!(s.contains("n/a"));
    }
}
