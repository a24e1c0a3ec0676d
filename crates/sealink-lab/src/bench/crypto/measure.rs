//! Timing paper 001's bulk primitives (ciphers, MACs, hashes, GHASH with and without CLMUL):
//! the timing loops every row of the bench runs, and the soft-GHASH build that
//! `bench/ghash-soft.sh` measures apart.

use super::*;

pub(super) fn random_array<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    sealink_crypto::sign::random_bytes(&mut b).map_err(Error::Random)?;
    Ok(b)
}

/// Iterations between clock reads: about 64 KiB per batch, at most 256 iterations.
pub(super) fn batch_for(size: usize) -> u64 {
    (65_536 / (size + 64)).clamp(1, 256) as u64
}

/// Effective timing settings (`--quick` shrinks them).
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    pub(super) duration: Duration,
    pub(super) runs: usize,
}

/// Bulk throughput in Mbit/s: a warm-up run, then `runs` timed runs, each over a buffer of
/// `size` bytes filled from a fresh random seed; the median is returned.
pub(super) fn bulk(
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
pub(super) fn ops<S, F>(t: Timing, pb: &indicatif::ProgressBar, mut setup: S) -> Result<f64>
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
/// GHASH over `buf` with the given key; returns the tag.
pub(super) fn ghash_once(key: &ghash::Key, buf: &[u8]) -> [u8; 16] {
    let mut g = GHash::new(key);
    g.update_padded(buf);
    g.finalize().into()
}

/// Whether this CPU has the carry-less multiply instruction that `polyval` looks for.
pub(super) fn clmul_available() -> bool {
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
pub(super) const FORCED_SOFT: bool = cfg!(polyval_force_soft);

pub(super) fn measure_all(t: Timing, size: usize, pb: &indicatif::ProgressBar) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    measure_bulk(t, size, pb, &mut rows)?;
    measure_rsa_dh(t, pb, &mut rows)?;
    measure_ecc(t, pb, &mut rows)?;
    Ok(rows)
}

/// The bulk rows: hashes and ciphers over `size`-byte buffers.
pub(super) fn measure_bulk(
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
/// The software GHASH figure left by `bench/ghash-soft.sh`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SoftGhash {
    pub(super) mbps: f64,
    pub(super) size: usize,
    pub(super) forced_soft: bool,
    pub(super) when: String,
}

/// Parses the script's CSV: a header line, then `backend,forced_soft,size,mbit_s,unix_time`.
pub(super) fn parse_soft(text: &str) -> Option<SoftGhash> {
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
pub(super) fn run_soft_script(out: &Path, size: usize, t: Timing) -> Result<()> {
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
