//! Measuring `bench gpu`: the CPU lines (the engine's workers, or aws-lc-rs threads at the
//! paper's packet sizes), the GPU's pipelined runs, each GPU point checked against aws-lc-rs
//! first, and where one batch's time goes on the device path.

use super::*;

/// CPU: batches of `n` packets, each split into one engine job per worker, through the
/// engine with its usual batches in flight (the GPU side pipelines over its streams too).
pub(super) fn cpu_point(keys: &Keys, workers: usize, n: usize, seconds: f64) -> Result<f64> {
    let per = n.div_ceil(workers);
    let cfg = Config {
        cipher: Cipher::Gcm,
        workers,
        batch: per,
        ordered: true,
    };
    let s = crate::bench::tunnel_cores::drive(
        cfg,
        keys,
        Duration::from_secs_f64(seconds),
        None,
        |_| {},
    )?;
    Ok(s.gbps())
}

/// CPU at `--packet-size`: `workers` threads, each sealing its own [`PACKETS_PER_BATCH`] packets
/// of `packet` bytes with aws-lc-rs's AES-128-GCM (one key, a fresh nonce per packet) over and
/// over for `seconds`; the bytes all threads sealed, per second. Each thread first checks that
/// what it seals opens again.
pub(super) fn cpu_packets_point(workers: usize, shape: Shape, seconds: f64) -> Result<f64> {
    use aws_lc_rs::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    let (key, _, _) = gpu_inputs(Shape {
        packet: 0,
        per_batch: 0,
    })?;
    let sealer = LessSafeKey::new(
        UnboundKey::new(&AES_128_GCM, &key)
            .map_err(|_| Error::bench("aws-lc-rs refused the AES-128-GCM key"))?,
    );
    cpu_packets_check(&sealer, shape.packet)?;
    let dur = Duration::from_secs_f64(seconds);
    let totals = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|t| {
                let sealer = &sealer;
                s.spawn(move || -> Result<(u64, f64)> {
                    let (_, mut bufs, aads) = gpu_inputs(shape)?;
                    let mut counter = (t as u64) << 40;
                    let start = Instant::now();
                    let mut sealed = 0u64;
                    while start.elapsed() < dur {
                        for (b, aad) in bufs.iter_mut().zip(&aads) {
                            let mut n = [0u8; 12];
                            n[4..].copy_from_slice(&counter.to_le_bytes());
                            counter += 1;
                            let tag = sealer
                                .seal_in_place_separate_tag(
                                    Nonce::assume_unique_for_key(n),
                                    Aad::from(&aad[..]),
                                    b,
                                )
                                .map_err(|_| Error::bench("aws-lc-rs seal failed"))?;
                            let _ = std::hint::black_box(tag);
                        }
                        sealed += bufs.len() as u64;
                    }
                    Ok((sealed, start.elapsed().as_secs_f64()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| Error::bench("a CPU sealing thread panicked"))?
            })
            .collect::<Result<Vec<_>>>()
    })?;
    let bytes: f64 = totals
        .iter()
        .map(|(n, _)| *n as f64 * shape.packet as f64)
        .sum();
    let secs = totals.iter().map(|(_, s)| *s).fold(0.0, f64::max);
    Ok(bytes * 8.0 / secs / 1e9)
}

/// Seals one random packet of `len` bytes with `sealer` and opens it again: the CPU line's
/// check that it seals what it claims (a wrong tag or byte fails the point).
pub(super) fn cpu_packets_check(sealer: &aws_lc_rs::aead::LessSafeKey, len: usize) -> Result<()> {
    use aws_lc_rs::aead::{Aad, Nonce};
    let (_, mut bufs, aads) = gpu_inputs(Shape {
        packet: len,
        per_batch: 1,
    })?;
    let plain = bufs[0].clone();
    let nonce = [7u8; 12];
    let mut sealed = bufs[0].clone();
    let tag = sealer
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&aads[0][..]),
            &mut sealed,
        )
        .map_err(|_| Error::bench("aws-lc-rs seal failed"))?;
    sealed.extend_from_slice(tag.as_ref());
    let opened = sealer
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&aads[0][..]),
            &mut sealed,
        )
        .map_err(|_| Error::bench(format!("a sealed {len}-byte packet did not open")))?;
    if opened != &plain[..] {
        return Err(Error::bench(format!(
            "a sealed {len}-byte packet opened to other bytes"
        )));
    }
    bufs.clear();
    Ok(())
}

/// Batches per `seal_batches` call in the GPU runs: the pipeline fills and drains once per
/// call, as the engine's does once per run. Fewer (down to [`MIN_RUN_BATCHES`]) where 16 would
/// hold more than [`RUN_BYTES`] of packets.
pub const RUN_BATCHES: usize = 16;
/// At least one batch per CUDA stream.
pub const MIN_RUN_BATCHES: usize = 4;
/// Packet bytes one GPU call holds at most (unless [`MIN_RUN_BATCHES`] batches need more).
pub const RUN_BYTES: usize = 64 << 20;

/// Batches of `n` packets of `packet` bytes per GPU call.
pub(super) fn run_batches(n: usize, packet: usize) -> usize {
    (RUN_BYTES / (n * packet).max(1)).clamp(MIN_RUN_BATCHES, RUN_BATCHES)
}

/// A random key, `n` random packets and their 16-byte AADs.
pub(super) type Inputs = ([u8; 16], Vec<Vec<u8>>, Vec<[u8; 16]>);

/// Random packets and 16-byte AADs for a batch of `shape`, and a random key.
pub(super) fn gpu_inputs(shape: Shape) -> Result<Inputs> {
    let (n, len) = (shape.per_batch, shape.packet);
    let mut key = [0u8; 16];
    sealink_crypto::sign::random_bytes(&mut key).map_err(Error::Random)?;
    let seed = random_seed()?;
    let bufs: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut b = vec![0u8; len];
            crate::bench::fill(
                &mut sealink_proto::sim::SimRng::new(seed + i as u64),
                &mut b,
            );
            b
        })
        .collect();
    let aads: Vec<[u8; 16]> = (0..n).map(|i| [i as u8; 16]).collect();
    Ok((key, bufs, aads))
}

/// Unique nonces for `n` packets from `counter` on.
pub(super) fn nonces(counter: &mut u64, n: usize) -> Vec<[u8; 12]> {
    (0..n)
        .map(|_| {
            let mut nonce = [0u8; 12];
            nonce[4..].copy_from_slice(&counter.to_le_bytes());
            *counter += 1;
            nonce
        })
        .collect()
}

/// Seals one batch of `shape` on the GPU and checks every packet and tag against aws-lc-rs's
/// seal: a point is timed only once its strategy sealed right at its size.
pub(super) fn gpu_check(gpu: &mut GpuSealer, shape: Shape) -> Result<()> {
    use aws_lc_rs::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    let (key, mut bufs, aads) = gpu_inputs(shape)?;
    let want: Vec<Vec<u8>> = bufs.clone();
    let aad_refs: Vec<&[u8]> = aads.iter().map(|a| &a[..]).collect();
    let mut counter = 1u64 << 48;
    let nonces = nonces(&mut counter, bufs.len());
    let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
    let tags = gpu
        .seal_batches(&key, &nonces, &aad_refs, &mut refs, shape.per_batch)
        .map_err(|e| Error::bench_by("GPU seal failed", e))?;
    let k = LessSafeKey::new(
        UnboundKey::new(&AES_128_GCM, &key)
            .map_err(|_| Error::bench("aws-lc-rs refused the AES-128-GCM key"))?,
    );
    for (i, mut w) in want.into_iter().enumerate() {
        let t = k
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonces[i]),
                Aad::from(aad_refs[i]),
                &mut w,
            )
            .map_err(|_| Error::bench("aws-lc-rs seal failed"))?;
        if w != bufs[i] || t.as_ref() != &tags[i][..] {
            return Err(Error::bench(format!(
                "the GPU ({}) sealed packet {i} of {} bytes unlike aws-lc-rs",
                gpu.strategy().name(),
                shape.packet
            )));
        }
    }
    Ok(())
}

/// GPU: runs of [`run_batches`] batches of `shape` through `seal_batches`, for `seconds`,
/// GHASH where `on_gpu` says.
pub(super) fn gpu_point(
    gpu: &mut GpuSealer,
    shape: Shape,
    seconds: f64,
    on_gpu: bool,
) -> Result<f64> {
    gpu.set_gpu_ghash(on_gpu);
    let n = shape.per_batch;
    let (key, mut bufs, aads) = gpu_inputs(Shape {
        per_batch: n * run_batches(n, shape.packet),
        ..shape
    })?;
    let aad_refs: Vec<&[u8]> = aads.iter().map(|a| &a[..]).collect();
    let mut counter = 0u64;
    let dur = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut sealed = 0u64;
    while start.elapsed() < dur {
        let nonces = nonces(&mut counter, bufs.len());
        let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        gpu.seal_batches(&key, &nonces, &aad_refs, &mut refs, n)
            .map_err(|e| Error::bench_by("GPU seal failed", e))?;
        sealed += refs.len() as u64;
    }
    Ok(sealed as f64 * shape.packet as f64 * 8.0 / start.elapsed().as_secs_f64() / 1e9)
}

/// Where one batch of `shape` spends its time, step by step: the median of `reps`
/// [`GpuSealer::phases`] runs, per step, in microseconds.
pub(super) fn gpu_phases(
    gpu: &mut GpuSealer,
    shape: Shape,
    on_gpu: bool,
    reps: usize,
) -> Result<[f64; 5]> {
    gpu.set_gpu_ghash(on_gpu);
    let n = shape.per_batch;
    let (key, mut bufs, aads) = gpu_inputs(shape)?;
    let aad_refs: Vec<&[u8]> = aads.iter().map(|a| &a[..]).collect();
    let mut counter = 0u64;
    let mut steps: [Vec<f64>; 5] = Default::default();
    for rep in 0..=reps {
        let nonces = nonces(&mut counter, n);
        let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        let ph = gpu
            .phases(&key, &nonces, &aad_refs, &mut refs)
            .map_err(|e| Error::bench_by("GPU seal failed", e))?;
        if rep == 0 {
            continue; // the first run allocates the buffers
        }
        for (v, d) in steps
            .iter_mut()
            .zip([ph.pack, ph.h2d, ph.kernel, ph.d2h, ph.finish])
        {
            v.push(d.as_secs_f64() * 1e6);
        }
    }
    Ok(steps.map(|v| median(&v)))
}
/// One point's runs: a warm-up, then `p.runs` timed ones (their figures). A GPU point is
/// checked byte for byte before its first run.
pub(super) fn measure_point(
    p: &Params,
    pt: Pt,
    keys: &Keys,
    mut gpu: Option<&mut GpuSealer>,
    seconds: f64,
    pb: &indicatif::ProgressBar,
) -> Result<Vec<f64>> {
    let windows = p.runs + 1;
    let mut v = Vec::new();
    for run in 0..windows {
        let g = match pt {
            Pt::Cpu { size, workers } if p.packet_size => {
                cpu_packets_point(p.workers[workers], Shape::of(p, p.sizes[size]), seconds)?
            }
            Pt::Cpu { size, workers } => {
                cpu_point(keys, p.workers[workers], packets_in(p.sizes[size]), seconds)?
            }
            Pt::Gpu {
                size,
                strategy,
                ghash_gpu,
            } => {
                let g = gpu
                    .as_deref_mut()
                    .expect("GPU points are planned with a GPU");
                g.set_strategy(p.strategies[strategy]);
                let shape = Shape::of(p, p.sizes[size]);
                if run == 0 {
                    g.set_gpu_ghash(ghash_gpu);
                    gpu_check(g, shape)?;
                }
                gpu_point(g, shape, seconds, ghash_gpu)?
            }
        };
        pb.inc(1);
        if run > 0 {
            v.push(g);
        }
    }
    Ok(v)
}

/// Where one batch's time goes with the default strategy, GHASH on the GPU and on the CPU, at
/// 128 KB and the largest size: each logged, and returned for the report.
pub(super) fn measure_phases(
    p: &Params,
    g: &mut GpuSealer,
    logged: &mut impl FnMut([String; 8]) -> Result<()>,
) -> Result<Vec<(usize, bool, [f64; 5])>> {
    let mut rows = Vec::new();
    g.set_strategy(Strategy::default());
    let reps = if p.quick { 3 } else { 50 };
    let mut at = vec![128 << 10];
    at.extend(p.sizes.iter().max().filter(|&&m| m != 128 << 10));
    for size in at {
        for on_gpu in [true, false] {
            let ph = gpu_phases(g, Shape::of(p, size), on_gpu, reps)?;
            let us: Vec<String> = ph.iter().map(|v| format!("{v:.3}")).collect();
            logged([
                "phases".into(),
                size.to_string(),
                Shape::of(p, size).per_batch.to_string(),
                format!("gpu-{}-{}", Strategy::default().name(), ghash_name(on_gpu)),
                String::new(),
                reps.to_string(),
                String::new(),
                format!(
                    "phases (pack;copy-in;kernel;copy-out;finish): {}",
                    us.join(";")
                ),
            ])?;
            rows.push((size, on_gpu, ph));
        }
    }
    g.set_gpu_ghash(true);
    Ok(rows)
}
