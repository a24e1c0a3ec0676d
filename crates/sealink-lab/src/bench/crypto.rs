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

fn random_array<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    sealink_crypto::sign::random_bytes(&mut b).map_err(Error::Random)?;
    Ok(b)
}

/// Iterations between clock reads: about 64 KiB per batch, at most 256 iterations.
fn batch_for(size: usize) -> u64 {
    (65_536 / (size + 64)).clamp(1, 256) as u64
}

/// Effective timing settings (`--quick` shrinks them).
#[derive(Debug, Clone, Copy)]
struct Timing {
    duration: Duration,
    runs: usize,
}

/// Bulk throughput in Mbit/s: a warm-up run, then `runs` timed runs, each over a buffer of
/// `size` bytes filled from a fresh random seed; the median is returned.
fn bulk(
    t: Timing,
    size: usize,
    pb: &indicatif::ProgressBar,
    mut op: impl FnMut(&mut [u8]),
) -> Result<f64> {
    let mut rates = Vec::with_capacity(t.runs);
    let mut buf = vec![0u8; size];
    for run in 0..=t.runs {
        fill(&mut SimRng::new(random_seed()?), &mut buf);
        let (n, d) = timed::<()>(t.duration, batch_for(size), || {
            op(&mut buf);
            Ok(())
        })
        .unwrap_or_default();
        if run > 0 {
            rates.push(n as f64 * size as f64 * 8.0 / d.as_secs_f64() / 1e6);
        }
        pb.inc(1);
    }
    Ok(median(&rates))
}

/// Operations per second: a warm-up run, then `runs` timed runs; `setup` makes each run's fresh
/// inputs and returns the operation.
fn ops<S, F>(t: Timing, pb: &indicatif::ProgressBar, mut setup: S) -> Result<f64>
where
    S: FnMut() -> Result<F>,
    F: FnMut() -> Result<(), &'static str>,
{
    let mut rates = Vec::with_capacity(t.runs);
    for run in 0..=t.runs {
        let mut op = setup()?;
        let (n, d) = timed(t.duration, 1, &mut op).map_err(Error::bench)?;
        if run > 0 {
            rates.push(n as f64 / d.as_secs_f64());
        }
        pb.inc(1);
    }
    Ok(median(&rates))
}

/// The RFC 3526 group 14 modulus in Montgomery parameters.
fn modp_2048_params() -> MontyParams<{ U2048::LIMBS }> {
    let p = U2048::from_be_hex(MODP_2048_HEX);
    let odd = Option::<Odd<U2048>>::from(Odd::new(p)).expect("the RFC 3526 prime is odd");
    MontyParams::new(odd)
}

/// `base^exp mod p` in constant-time Montgomery form (the exponent's full width is processed).
fn modp_pow<const L: usize>(
    params: MontyParams<{ U2048::LIMBS }>,
    base: &U2048,
    exp: &crypto_bigint::Uint<L>,
) -> U2048 {
    MontyForm::new(base, params).pow(exp).retrieve()
}

/// A random public value g^x mod p of the group, for one run's peer.
fn modp_peer_public(params: MontyParams<{ U2048::LIMBS }>) -> Result<U2048> {
    let x = U256::from_be_slice(&random_array::<32>()?);
    Ok(modp_pow(params, &U2048::from_u64(2), &x))
}

/// GHASH over `buf` with the given key; returns the tag.
fn ghash_once(key: &ghash::Key, buf: &[u8]) -> [u8; 16] {
    let mut g = GHash::new(key);
    g.update_padded(buf);
    g.finalize().into()
}

/// Whether this CPU has the carry-less multiply instruction that `polyval` looks for.
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

/// Whether this binary was built with `--cfg polyval_force_soft` (then its GHASH is software).
#[allow(unexpected_cfgs)]
const FORCED_SOFT: bool = cfg!(polyval_force_soft);

fn measure_all(t: Timing, size: usize, pb: &indicatif::ProgressBar) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    measure_bulk(t, size, pb, &mut rows)?;
    measure_rsa_dh(t, pb, &mut rows)?;
    measure_ecc(t, pb, &mut rows)?;
    Ok(rows)
}

/// The bulk rows: hashes and ciphers over `size`-byte buffers.
fn measure_bulk(
    t: Timing,
    size: usize,
    pb: &indicatif::ProgressBar,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let kib = |n: usize| {
        if n % 1024 == 0 {
            format!("{} KiB", n / 1024)
        } else {
            format!("{n} B")
        }
    };
    let sz = kib(size);

    // --- Bulk algorithms -------------------------------------------------------------------
    let v = bulk(t, size, pb, |b| {
        black_box(legacy::md5(b));
    })?;
    rows.push(Row {
        name: "MD5",
        detail: format!("digest of {sz} (RustCrypto md-5 via sealink_crypto::legacy)"),
        unit: Unit::Mbps,
        value: v,
        paper: Some(Paper {
            value: 80.0,
            text: "80 Mbits/sec",
        }),
    });

    let v = bulk(t, size, pb, |b| {
        black_box(digest::digest(&digest::SHA256, b));
    })?;
    rows.push(Row {
        name: "SHA-256",
        detail: format!("digest of {sz} (aws-lc-rs)"),
        unit: Unit::Mbps,
        value: v,
        paper: None,
    });

    // CBC needs whole 8-byte blocks.
    let cbc_size = size.div_ceil(8) * 8;
    let des_key: [u8; legacy::DES_KEY_LEN] = random_array()?;
    let tdes_key: [u8; legacy::TDES_KEY_LEN] = random_array()?;
    let iv: [u8; 8] = random_array()?;
    let v = bulk(t, cbc_size, pb, |b| {
        legacy::des_cbc_encrypt_in_place(&des_key, &iv, b);
        black_box(&*b);
    })?;
    rows.push(Row {
        name: "DES-CBC",
        detail: format!(
            "encrypt {} in place, key schedule per call (RustCrypto des+cbc via sealink_crypto::legacy)",
            kib(cbc_size)
        ),
        unit: Unit::Mbps,
        value: v,
        paper: Some(Paper {
            value: 15.0,
            text: "DES 15 Mbits/sec",
        }),
    });
    let v = bulk(t, cbc_size, pb, |b| {
        legacy::tdes_cbc_encrypt_in_place(&tdes_key, &iv, b);
        black_box(&*b);
    })?;
    rows.push(Row {
        name: "3DES-CBC",
        detail: format!(
            "EDE3 encrypt {} in place, key schedule per call (RustCrypto des+cbc via sealink_crypto::legacy)",
            kib(cbc_size)
        ),
        unit: Unit::Mbps,
        value: v,
        paper: Some(Paper {
            value: 5.0,
            text: "3-DES 5 Mbits/sec",
        }),
    });

    for (suite, name) in [
        (SuiteId::Aes128Gcm, "AES-128-GCM"),
        (SuiteId::ChaCha20Poly1305, "ChaCha20-Poly1305"),
    ] {
        let key_bytes: [u8; 32] = random_array()?;
        let key = RawAead::new(suite, &key_bytes[..suite.key_len()])?;
        let mut counter = 0u64;
        let v = bulk(t, size, pb, |b| {
            // A fresh nonce per seal; the tag is computed and dropped.
            let mut nonce = [0u8; raw::NONCE_LEN];
            nonce[4..].copy_from_slice(&counter.to_le_bytes());
            counter += 1;
            black_box(key.seal_in_place(nonce, &[], b));
        })?;
        rows.push(Row {
            name,
            detail: format!(
                "seal {sz} in place, no AAD ({} via sealink_crypto::raw::RawAead)",
                RawAead::LIBRARY
            ),
            unit: Unit::Mbps,
            value: v,
            paper: None,
        });
    }

    Ok(())
}

/// The RSA-2048 and finite-field Diffie-Hellman rows.
fn measure_rsa_dh(t: Timing, pb: &indicatif::ProgressBar, rows: &mut Vec<Row>) -> Result<()> {
    // --- RSA ---------------------------------------------------------------------------------
    let rng = lc_rand::SystemRandom::new();
    let pair = rsa::KeyPair::generate(rsa::KeySize::Rsa2048)
        .map_err(|_| Error::bench("RSA-2048 key generation failed"))?;
    pb.inc(1);
    let public = signature::KeyPair::public_key(&pair).as_ref().to_vec();
    let sig_len = pair.public_modulus_len();
    let sign_rate = ops(t, pb, || {
        let m: [u8; 32] = random_array()?;
        let mut sig = vec![0u8; sig_len];
        let (pair, rng) = (&pair, &rng);
        Ok(move || {
            pair.sign(&signature::RSA_PKCS1_SHA256, rng, &m, &mut sig)
                .map_err(|_| "RSA sign failed")?;
            black_box(&sig);
            Ok(())
        })
    })?;
    rows.push(Row {
        name: "RSA-2048 sign",
        detail: "PKCS#1 v1.5, SHA-256 of a 32-byte message (aws-lc-rs)".into(),
        unit: Unit::PerSec,
        value: sign_rate,
        paper: Some(Paper {
            value: 20.0,
            text: "RSA Signature 20 signatures/sec (modulus size not stated)",
        }),
    });
    let verify_rate = ops(t, pb, || {
        let m: [u8; 32] = random_array()?;
        let mut sig = vec![0u8; sig_len];
        pair.sign(&signature::RSA_PKCS1_SHA256, &rng, &m, &mut sig)
            .map_err(|_| Error::bench("RSA sign failed"))?;
        let key =
            signature::UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, &public);
        Ok(move || {
            key.verify(&m, &sig).map_err(|_| "RSA verify failed")?;
            Ok(())
        })
    })?;
    rows.push(Row {
        name: "RSA-2048 verify",
        detail: "PKCS#1 v1.5 SHA-256, e = 65537, public key parsed per verify (aws-lc-rs)".into(),
        unit: Unit::PerSec,
        value: verify_rate,
        paper: None,
    });
    rows.push(Row {
        name: "RSA-2048 private-key op",
        detail: "derived, not measured separately: sign/s x 2048 bits of modulus".into(),
        unit: Unit::Kbps,
        value: sign_rate * 2048.0 / 1e3,
        paper: Some(Paper {
            value: 10.0,
            text: "RSA Crypt-Decrypt 10 Kbits/sec",
        }),
    });

    // --- Finite-field Diffie-Hellman (benchmark of the exponentiation only) -------------------
    let params = modp_2048_params();
    let dh_paper = Some(Paper {
        value: 5.0,
        text: "Diffie-Hellman Key Exchange 5 keys/sec (512-bit prime)",
    });
    let v = ops(t, pb, || {
        let peer = modp_peer_public(params)?;
        let x = U256::from_be_slice(&random_array::<32>()?);
        Ok(move || {
            black_box(modp_pow(params, &peer, &x));
            Ok(())
        })
    })?;
    rows.push(Row {
        name: "DH-2048 agreement, 256-bit exponent",
        detail: "peer^x mod p, RFC 3526 group 14, random 256-bit x, constant-time Montgomery pow (crypto-bigint); key generation not included".into(),
        unit: Unit::PerSec,
        value: v,
        paper: dh_paper,
    });
    let v = ops(t, pb, || {
        let peer = modp_peer_public(params)?;
        let x = U2048::from_be_slice(&random_array::<256>()?);
        Ok(move || {
            black_box(modp_pow(params, &peer, &x));
            Ok(())
        })
    })?;
    rows.push(Row {
        name: "DH-2048 agreement, 2048-bit exponent",
        detail: "as above with a random full-size (2048-bit) exponent".into(),
        unit: Unit::PerSec,
        value: v,
        paper: dh_paper,
    });

    Ok(())
}

/// The X25519 and Ed25519 rows.
fn measure_ecc(t: Timing, pb: &indicatif::ProgressBar, rows: &mut Vec<Row>) -> Result<()> {
    let rng = lc_rand::SystemRandom::new();
    // --- X25519 ------------------------------------------------------------------------------
    let peer_public = |rng: &lc_rand::SystemRandom| -> Result<Vec<u8>> {
        let k = agreement::EphemeralPrivateKey::generate(&agreement::X25519, rng)
            .map_err(|_| Error::bench("X25519 key generation failed"))?;
        let pk = k
            .compute_public_key()
            .map_err(|_| Error::bench("X25519 public key failed"))?;
        Ok(pk.as_ref().to_vec())
    };
    let v = ops(t, pb, || {
        let peer = peer_public(&rng)?;
        let mine = agreement::PrivateKey::generate(&agreement::X25519)
            .map_err(|_| Error::bench("X25519 key generation failed"))?;
        Ok(move || {
            let peer = agreement::UnparsedPublicKey::new(&agreement::X25519, &peer);
            agreement::agree(&mine, peer, "X25519 agreement failed", |k| {
                black_box(k);
                Ok(())
            })
        })
    })?;
    rows.push(Row {
        name: "X25519 agreement",
        detail: "one scalar multiplication with a fixed private key; key generation not included (aws-lc-rs)".into(),
        unit: Unit::PerSec,
        value: v,
        paper: None,
    });
    let v = ops(t, pb, || {
        let peer = peer_public(&rng)?;
        let rng = &rng;
        Ok(move || {
            let mine = agreement::EphemeralPrivateKey::generate(&agreement::X25519, rng)
                .map_err(|_| "X25519 key generation failed")?;
            black_box(
                mine.compute_public_key()
                    .map_err(|_| "X25519 public key failed")?,
            );
            let peer = agreement::UnparsedPublicKey::new(&agreement::X25519, &peer);
            agreement::agree_ephemeral(mine, peer, "X25519 agreement failed", |k| {
                black_box(k);
                Ok(())
            })
        })
    })?;
    rows.push(Row {
        name: "X25519 ephemeral exchange",
        detail: "one side: ephemeral key generation + public key + agreement (aws-lc-rs)".into(),
        unit: Unit::PerSec,
        value: v,
        paper: None,
    });

    // --- Ed25519 -----------------------------------------------------------------------------
    let ed = sealink_crypto::sign::OwnerSigningKey::from_seed(&random_array()?)?;
    let v = ops(t, pb, || {
        let m: [u8; 32] = random_array()?;
        let ed = &ed;
        Ok(move || {
            black_box(ed.sign(&m));
            Ok(())
        })
    })?;
    rows.push(Row {
        name: "Ed25519 sign",
        detail: "32-byte message (aws-lc-rs via sealink_crypto::sign)".into(),
        unit: Unit::PerSec,
        value: v,
        paper: None,
    });
    let v = ops(t, pb, || {
        let m: [u8; 32] = random_array()?;
        let sig = ed.sign(&m);
        let pk = ed.public_key();
        Ok(move || {
            if sealink_crypto::sign::verify(&pk, &m, &sig) {
                Ok(())
            } else {
                Err("Ed25519 verify failed")
            }
        })
    })?;
    rows.push(Row {
        name: "Ed25519 verify",
        detail: "32-byte message (aws-lc-rs via sealink_crypto::sign)".into(),
        unit: Unit::PerSec,
        value: v,
        paper: None,
    });
    Ok(())
}

/// Paper 001, section 2: "A further increase in performance (about a factor of 2.5) can be
/// achieved by precomputing a table of generator powers [Brickell, Gordon, McCurley, Wilson
/// 1993]. The resulting table size is small (in the low kilobytes)", for Diffie-Hellman over an
/// elliptic curve on GF(2^155).
const PAPER_PRECOMP: Paper = Paper {
    value: 2.5,
    text: "~2.5 (EC DH over GF(2^155), precomputed generator powers, sec. 2)",
};

/// One curve's fixed-base and variable-base scalar multiplication rates.
#[derive(Debug, Clone, PartialEq)]
struct Precomp {
    curve: &'static str,
    /// CSV names of the fixed-base, variable-base and ratio rows.
    names: [&'static str; 3],
    /// ops/s of priv x G with the library's precomputed table of generator multiples.
    fixed: f64,
    /// ops/s of priv x P for a peer's point P, which no table can cover.
    variable: f64,
    table: &'static str,
}

impl Precomp {
    fn ratio(&self) -> f64 {
        self.fixed / self.variable
    }
    /// One side's whole exchange, made of one fixed-base multiplication (its own public value)
    /// and one variable-base one (the shared secret), against two variable-base ones.
    fn exchange_ratio(&self) -> f64 {
        2.0 / self.variable / (1.0 / self.fixed + 1.0 / self.variable)
    }
}

/// Paper 001's elliptic-curve claim measured with aws-lc-rs: fixed-base scalar multiplication
/// (the generator, with the library's precomputed tables) against variable-base (a peer's
/// point), for X25519 and P-256.
///
/// Where the match with the paper is loose:
/// - the curve: the paper's is over the binary field GF(2^155); aws-lc-rs has only prime-field
///   curves (binary curves are measured through OpenSSL by bench/ecc-binary.sh);
/// - the table: the paper's (Brickell et al.) is "in the low kilobytes"; aws-lc's are not:
///   P-256 on x86-64/aarch64 uses nistz256's 37 x 64 affine points (~148 KiB), X25519 the
///   precomputed basepoint multiples of s2n-bignum's x25519base (or of the Ed25519 comb
///   without s2n-bignum), tens of KiB;
/// - "without precomputation" is the library's variable-base path, itself tuned otherwise
///   (X25519: Montgomery ladder; P-256: a window of 16 points built per call), not the
///   fixed-base algorithm minus its table;
/// - each timed call is an API call: fixed = parse the private scalar and compute its public
///   point (`PrivateKey::from_private_key`; `compute_public_key` only serializes a point
///   computed at key creation, so it cannot be the measure); variable = parse and check the
///   peer's point and compute the shared secret (`agreement::agree`);
/// - a whole exchange has one multiplication of each kind, so precomputation can at most
///   halve its time: the paper's 2.5 can only describe the generator exponentiation, and it is
///   compared with our fixed / variable ratio; the exchange-level ratio is printed beside it.
fn measure_precomp(t: Timing, pb: &indicatif::ProgressBar) -> Result<Vec<Precomp>> {
    type Curve = (
        &'static str,
        [&'static str; 3],
        &'static agreement::Algorithm,
        &'static str,
    );
    let curves: [Curve; 2] = [
        (
            "X25519",
            [
                "X25519 fixed-base (precomputed table)",
                "X25519 variable-base",
                "X25519 fixed / variable",
            ],
            &agreement::X25519,
            "s2n-bignum x25519base basepoint table (Ed25519 comb without s2n-bignum) vs Montgomery ladder",
        ),
        (
            "P-256",
            [
                "P-256 fixed-base (precomputed table)",
                "P-256 variable-base",
                "P-256 fixed / variable",
            ],
            &agreement::ECDH_P256,
            "nistz256 table of 37 x 64 affine points on x86-64 vs a per-call window",
        ),
    ];
    let mut out = Vec::new();
    for (curve, names, alg, table) in curves {
        // A private scalar: for P-256 below the group order (top bit cleared) and not zero.
        let scalar = || -> Result<[u8; 32]> {
            let mut b = random_array::<32>()?;
            b[0] &= 0x7f;
            b[31] |= 1;
            Ok(b)
        };
        let fixed = ops(t, pb, || {
            let b = scalar()?;
            Ok(move || {
                let k = agreement::PrivateKey::from_private_key(alg, &b)
                    .map_err(|_| "private key rejected")?;
                black_box(k);
                Ok(())
            })
        })?;
        let variable = ops(t, pb, || {
            let mine = agreement::PrivateKey::from_private_key(alg, &scalar()?)
                .map_err(|_| Error::bench(format!("{curve} private key rejected")))?;
            let peer = agreement::PrivateKey::from_private_key(alg, &scalar()?)
                .map_err(|_| Error::bench(format!("{curve} private key rejected")))?
                .compute_public_key()
                .map_err(|_| Error::bench(format!("{curve} public key failed")))?
                .as_ref()
                .to_vec();
            Ok(move || {
                let peer = agreement::UnparsedPublicKey::new(alg, &peer);
                agreement::agree(&mine, peer, "agreement failed", |k| {
                    black_box(k);
                    Ok(())
                })
            })
        })?;
        out.push(Precomp {
            curve,
            names,
            fixed,
            variable,
            table,
        });
    }
    Ok(out)
}

/// The precomputation table as printed: both rates, our ratios and the paper's.
fn precomp_table(rows: &[Precomp]) -> Table {
    let mut t = Table::new([
        "curve",
        "fixed base, precomputed (ops/s)",
        "variable base (ops/s)",
        "fixed / variable",
        "paper 1995",
        "ours / paper",
        "one side's exchange: 2 t_var / (t_fixed + t_var)",
    ])
    .left(&[4]);
    for r in rows {
        t.row([
            r.curve.to_owned(),
            crate::report::fmt_sig(r.fixed),
            crate::report::fmt_sig(r.variable),
            format!("{:.2}x", r.ratio()),
            PAPER_PRECOMP.text.to_owned(),
            format!("{:.2}", r.ratio() / PAPER_PRECOMP.value),
            format!("{:.2}x", r.exchange_ratio()),
        ]);
    }
    t
}

/// The precomputation figures as CSV rows (rates, then the ratio against the paper's 2.5).
fn precomp_rows(rows: &[Precomp]) -> Vec<Row> {
    let mut out = Vec::new();
    for r in rows {
        let [fixed, variable, ratio] = r.names;
        out.push(Row {
            name: fixed,
            detail: format!(
                "PrivateKey::from_private_key: priv x G (tables: {})",
                r.table
            ),
            unit: Unit::PerSec,
            value: r.fixed,
            paper: None,
        });
        out.push(Row {
            name: variable,
            detail: "agreement::agree: priv x peer point, peer point parsed and checked".into(),
            unit: Unit::PerSec,
            value: r.variable,
            paper: None,
        });
        out.push(Row {
            name: ratio,
            detail: format!(
                "ratio of the two rates; one side's exchange: {:.3}x",
                r.exchange_ratio()
            ),
            unit: Unit::Ratio,
            value: r.ratio(),
            paper: Some(PAPER_PRECOMP),
        });
    }
    out
}

/// The software GHASH figure left by `bench/ghash-soft.sh`.
#[derive(Debug, Clone, PartialEq)]
struct SoftGhash {
    mbps: f64,
    size: usize,
    forced_soft: bool,
    when: String,
}

/// Parses the script's CSV: a header line, then `backend,forced_soft,size,mbit_s,unix_time`.
fn parse_soft(text: &str) -> Option<SoftGhash> {
    let f = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .flexible(true)
        .from_reader(text.as_bytes())
        .records()
        .next()?
        .ok()?;
    if f.len() < 5 {
        return None;
    }
    Some(SoftGhash {
        forced_soft: &f[1] == "true",
        size: f[2].parse().ok()?,
        mbps: f[3].parse().ok()?,
        when: f[4].to_owned(),
    })
}

/// Runs the script with this run's effective buffer size and timing.
fn run_soft_script(out: &Path, size: usize, t: Timing) -> Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(GHASH_SOFT_SCRIPT);
    eprintln!(
        "running {} (builds the software-only GHASH example; the first build takes minutes)",
        script.display()
    );
    let status = std::process::Command::new("bash")
        .arg(&script)
        .env("GHASH_OUT", out)
        .env("GHASH_SIZE", size.to_string())
        .env("GHASH_SECONDS", t.duration.as_secs_f64().to_string())
        .env("GHASH_RUNS", t.runs.to_string())
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(Error::io("run", &script))?;
    if !status.success() {
        return Err(Error::bench(format!(
            "{} failed ({status})",
            script.display()
        )));
    }
    Ok(())
}

/// Table 1 as printed: today's figure, the paper's line and the ratio.
fn table(rows: &[Row]) -> Table {
    let mut t = Table::new([
        "algorithm",
        "today",
        "unit",
        "paper 1995 (Table 1)",
        "today / 1995",
    ])
    .left(&[2, 3]);
    for r in rows {
        t.row([
            r.name.to_owned(),
            crate::report::fmt_sig(r.value),
            r.unit.name().to_owned(),
            r.paper.map_or("n/a".to_owned(), |p| p.text.to_owned()),
            r.ratio().map_or("n/a".to_owned(), |x| {
                format!("{}x", crate::report::fmt_sig(x))
            }),
        ]);
    }
    t
}

/// A GHASH figure: what was measured, in Mbit/s, and how it was obtained.
#[derive(Debug, Clone, PartialEq)]
struct Ghash {
    name: &'static str,
    mbps: f64,
    detail: String,
}

/// crypto.csv: every row at full precision, then the GHASH figures; and the run record.
/// Paper 001's projected stacks: (algorithm row, the paper's stack, what the paper projects).
const PROJECTED_001: [(&str, &str, &str); 4] = [
    ("MD5", "TCP/MD5/IP", "bottleneck ~16"),
    ("DES-CBC", "DES/TCP/IP", "scales to ~40"),
    ("3DES-CBC", "triple-DES", "\"should scale linearly\""),
    ("AES-128-GCM", "(today's)", ""),
];
/// The projection's CSV in `--out`.
pub const PROJECTION_FILE: &str = "projection.csv";

/// Paper 001's projection from this run's rows: the serial step passes `ceiling` Mbit/s of
/// `size`-byte packets; one processor's stack spends the serial path's time plus the
/// algorithm's on each packet.
fn projection_001(rows: &[Row], ceiling: f64, size: usize) -> Result<Table> {
    let mut t = Table::new(
        "stack,algorithm,packet_bytes,ceiling_mbps,serial_us_per_packet,algorithm_mbps,stack_mbps_one_processor,us_per_packet_one_processor,bottleneck_processors,projected_speedup_8,projected_speedup_16,projected_speedup_64,paper_1995"
            .split(','),
    )
    .left(&[0, 1, 12]);
    for (alg, stack, paper) in PROJECTED_001 {
        let Some(r) = rows.iter().find(|r| r.name == alg && r.unit == Unit::Mbps) else {
            continue;
        };
        // Times per packet add: 1 / (1 / ceiling + 1 / algorithm).
        let one = 1.0 / (1.0 / ceiling + 1.0 / r.value);
        let m = crate::projection::SerialCeiling::new(ceiling, one, one, 1)?;
        let (serial, per) = m.per_packet_us(size);
        t.row([
            stack.to_owned(),
            alg.to_owned(),
            size.to_string(),
            format!("{ceiling:.1}"),
            format!("{serial:.4}"),
            format!("{:.1}", r.value),
            format!("{one:.1}"),
            format!("{per:.3}"),
            format!("{:.1}", m.bottleneck_processors()),
            format!("{:.2}", m.speedup(8.0)),
            format!("{:.2}", m.speedup(16.0)),
            format!("{:.2}", m.speedup(64.0)),
            paper.to_owned(),
        ]);
    }
    Ok(t)
}

fn write_files(
    dir: &Path,
    rows: &[Row],
    ghash: &[Ghash],
    projection: Option<&Table>,
) -> Result<(PathBuf, PathBuf)> {
    let mut t =
        Table::new("algorithm,value,unit,paper_1995,paper_1995_unit,ratio,detail".split(','));
    let mut rec = RunRecord::new("crypto");
    for r in rows {
        t.row([
            r.name.to_owned(),
            r.value.to_string(),
            r.unit.name().to_owned(),
            r.paper.map_or(String::new(), |p| p.value.to_string()),
            r.unit.name().to_owned(),
            r.ratio().map_or(String::new(), |x| x.to_string()),
            r.detail.clone(),
        ]);
        rec.figure(r.name, r.value, r.unit.name());
        if let Some(x) = r.ratio() {
            rec.figure(format!("{} today / 1995", r.name), x, "ratio");
        }
    }
    for g in ghash {
        t.row([g.name, &g.mbps.to_string(), "Mbit/s", "", "", "", &g.detail]);
        rec.figure(g.name, g.mbps, "Mbit/s");
    }
    let csv = rec.write_csv(dir, "crypto.csv", &t)?;
    if let Some(p) = projection {
        rec.write_csv(dir, PROJECTION_FILE, p)?;
    }
    Ok((csv, rec.write(dir)?))
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

/// The paper's hardware proposal, a carry-less multiply instruction: GHASH in this binary
/// (`clmul` Mbit/s) against a software-only build's figure, if one was measured; the rows
/// for the GHASH CSV.
fn report_clmul(out: &mut String, p: &Params, size: usize, clmul: f64) -> Vec<Ghash> {
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "carry-less multiply (the paper's proposed \"XOR multiply\" instruction): GHASH of {size}-byte buffers, RustCrypto ghash 0.5 / polyval 0.6"
    );
    let have = clmul_available();
    let in_process = if FORCED_SOFT {
        "software backend (this binary was built with --cfg polyval_force_soft)"
    } else if have {
        "CLMUL backend (PCLMULQDQ detected at run time; polyval picks it through cpufeatures)"
    } else {
        "software backend (this CPU has no PCLMULQDQ, so polyval fell back)"
    };
    let soft_path = p.out.join(GHASH_SOFT_FILE);
    let soft = std::fs::read_to_string(&soft_path)
        .ok()
        .and_then(|s| parse_soft(&s));
    let mut body = Table::new(["GHASH", "Mbit/s", "how it was obtained"]).left(&[2]);
    body.row([
        "GHASH, this binary".to_owned(),
        crate::report::fmt_sig(clmul),
        format!("measured now, in process: {in_process}"),
    ]);
    let mut ghash_csv = vec![Ghash {
        name: "GHASH in process",
        mbps: clmul,
        detail: in_process.to_owned(),
    }];
    let speedup_line = match &soft {
        Some(s) if s.forced_soft => {
            body.row([
                "GHASH, software-only build".to_owned(),
                crate::report::fmt_sig(s.mbps),
                format!(
                    "from {} (unix time {}): examples/ghash.rs built by {GHASH_SOFT_SCRIPT} with RUSTFLAGS='--cfg polyval_force_soft', {} B buffers",
                    soft_path.display(),
                    s.when,
                    s.size
                ),
            ]);
            ghash_csv.push(Ghash {
                name: "GHASH software-only build",
                mbps: s.mbps,
                detail: format!("{GHASH_SOFT_SCRIPT} --cfg polyval_force_soft, {} B", s.size),
            });
            let note = if s.size == size {
                ""
            } else {
                " (buffer sizes differ: rerun the script with the same --size)"
            };
            if have && !FORCED_SOFT {
                format!(
                    "speedup the carry-less multiply instruction buys GHASH: {:.1}x{note}",
                    clmul / s.mbps
                )
            } else {
                "speedup: not evaluated (this run had no CLMUL path)".to_owned()
            }
        }
        Some(_) => format!(
            "speedup: not evaluated ({} was not made by a software-only build)",
            soft_path.display()
        ),
        None => format!(
            "speedup: not evaluated: no software figure in {}; run `bash {GHASH_SOFT_SCRIPT}` (or this bench with --ghash-soft) to build examples/ghash.rs with RUSTFLAGS='--cfg polyval_force_soft' and measure it",
            soft_path.display()
        ),
    };
    out.push_str(&body.markdown());
    let _ = writeln!(out);
    let _ = writeln!(out, "{speedup_line}");
    ghash_csv
}

/// Paper 001's projection of packet-level parallelism (section 3), with `ceiling`'s table if
/// it was computed.
fn report_projection(
    out: &mut String,
    projection: Option<&Table>,
    size: usize,
    t_runs: usize,
    cores: usize,
) {
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "PROJECTION by paper 001's own method (section 3; a prediction, not a measurement): \"the locked component of manipulating the TCP connection-state limits the throughput to about 200 Mbits ... the TCP/MD5/IP stack would bottleneck at about 16 processors, and ... the DES stack would scale to 40 processors\" (200 / 4.6 Mb/s, paper 000's DES stack on the same Challenge, = 43)"
    );
    match projection {
        Some(tab) => {
            out.push_str(&tab.markdown());
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "- ceiling: the baseline stack (framing only) through the PLP engine at one worker, {size}-byte packets, send side, measured in this run (median of {t_runs} runs); its time per packet is the engine's serial path and little else, so it is a floor on the ceiling and the counts are floors",
            );
            let _ = writeln!(
                out,
                "- one processor's stack: the serial path plus the algorithm row above on the same packet (times added); the paper's Figure 2 is close to linear, so the uniprocessor rate is the rate each processor adds. Counts above this machine's {cores} cores are the paper's method applied to our inputs, not measured"
            );
        }
        None => {
            let _ = writeln!(
                out,
                "(not computed: --size {size} is above the engine's largest packet, {} B)",
                super::stacks::MAX_PACKET
            );
        }
    }
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
