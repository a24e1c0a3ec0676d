//! `sealink-lab bench gpu`: paper 004's Figure 12 rerun. Throughput of sealing batches of
//! 1400-byte packets with AES-128-GCM against the batch size, on the CPU through the engine
//! (1..N workers, each batch split among them, the engine's batches in flight) and on the GPU
//! (`sealink-gpu`: one launch per batch, up to [`RUN_BATCHES`] batches per call pipelined over the
//! device's streams; packing, copies both ways and unpacking included), with GHASH on the GPU
//! and on the CPU; the crossover batch size where the GPU starts to win; the paper's 3.7 Gb/s
//! at 128 KB beside; and where one batch's time goes on the device path.
//!
//! With `--packet-size` the x-axis is the paper's instead: the size of one packet (the paper's
//! "file", 4 KB to 128 KB by default), each packet one thread block (or spread over blocks by
//! the naive strategies), [`PACKETS_PER_BATCH`] packets of that size per batch; the CPU line is
//! aws-lc-rs's AES-128-GCM on 1..N threads at the same packet sizes (the tunnel's engine carries
//! packets of at most a datagram, so it cannot seal 128 KB ones). Every GPU point is first
//! checked byte for byte against aws-lc-rs.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sealink_gpu::{Availability, Dispatch, GpuSealer, Strategy};

use super::tunnel_cores::{Cipher, Config, Keys, PACKET};
use super::{median, print_with_files, random_seed};
use crate::error::{Error, Result};
use crate::output;
use crate::report::{Chart, PointLog, RunRecord, Table, record};

/// Batch sizes in bytes (4 KB to 1 MB, as the paper's 1-128 KB and beyond).
pub const DEFAULT_SIZES: [usize; 9] = [
    4 << 10,
    8 << 10,
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    512 << 10,
    1 << 20,
];
/// Largest batch accepted (bytes).
pub const MAX_SIZE: usize = 64 << 20;
/// Packet sizes of `--packet-size` (the paper's 4 KB to 128 KB files).
pub const DEFAULT_PACKET_SIZES: [usize; 6] =
    [4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10];
/// Packets per batch with `--packet-size`: the paper ciphers many files of the same size at once
/// (its 1024 streams); 128 one-block packets per launch, up to [`RUN_BATCHES`] launches in flight.
pub const PACKETS_PER_BATCH: usize = 128;
/// Smallest and largest packet of `--packet-size` (the GPU layout's limit).
pub const MIN_PACKET_SIZE: usize = 1 << 10;
pub const MAX_PACKET_SIZE: usize = sealink_gpu::layout::MAX_PACKET;
/// Every point as it is measured, in measurement order (a stopped run keeps these).
pub const POINTS_FILE: &str = "gpu-points.csv";
const POINTS_HEAD: [&str; 8] = [
    "experiment",
    "batch_bytes",
    "packets",
    "engine",
    "workers",
    "runs",
    "gbps_median",
    "detail",
];

#[derive(Debug, Clone)]
pub struct Params {
    pub sizes: Vec<usize>,
    pub workers: Vec<usize>,
    pub seconds: f64,
    pub runs: usize,
    pub quick: bool,
    pub out: PathBuf,
    /// GPU strategies to run (paper 004's Figure 12; `--strategy`).
    pub strategies: Vec<Strategy>,
    /// Wall-clock seconds the run may take (`--budget`; `fit_budget` in bench/mod.rs).
    pub budget: Option<f64>,
    /// `--packet-size`: `sizes` are packet sizes, [`PACKETS_PER_BATCH`] packets per batch
    /// (paper 004's own x-axis), and the CPU line is aws-lc-rs on 1..N threads.
    pub packet_size: bool,
}

/// What one point seals: packets of `packet` bytes, `per_batch` of them per batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub packet: usize,
    pub per_batch: usize,
}

impl Shape {
    /// The shape of x-axis value `size`: a batch of `size` bytes of 1400-byte packets, or with
    /// `--packet-size` [`PACKETS_PER_BATCH`] packets of `size` bytes.
    pub fn of(p: &Params, size: usize) -> Shape {
        if p.packet_size {
            Shape {
                packet: size,
                per_batch: PACKETS_PER_BATCH,
            }
        } else {
            Shape {
                packet: PACKET,
                per_batch: packets_in(size),
            }
        }
    }
    fn bits(self) -> f64 {
        (self.packet * self.per_batch * 8) as f64
    }
}

/// Packets of `PACKET` bytes in a batch of `bytes` (at least one).
pub fn packets_in(bytes: usize) -> usize {
    (bytes / PACKET).max(1)
}

/// CPU: batches of `n` packets, each split into one engine job per worker, through the
/// engine with its usual batches in flight (the GPU side pipelines over its streams too).
fn cpu_point(keys: &Keys, workers: usize, n: usize, seconds: f64) -> Result<f64> {
    let per = n.div_ceil(workers);
    let cfg = Config {
        cipher: Cipher::Gcm,
        workers,
        batch: per,
        ordered: true,
    };
    let s = super::tunnel_cores::drive(cfg, keys, Duration::from_secs_f64(seconds), None, |_| {})?;
    Ok(s.gbps())
}

/// CPU at `--packet-size`: `workers` threads, each sealing its own [`PACKETS_PER_BATCH`] packets
/// of `packet` bytes with aws-lc-rs's AES-128-GCM (one key, a fresh nonce per packet) over and
/// over for `seconds`; the bytes all threads sealed, per second. Each thread first checks that
/// what it seals opens again.
fn cpu_packets_point(workers: usize, shape: Shape, seconds: f64) -> Result<f64> {
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
fn cpu_packets_check(sealer: &aws_lc_rs::aead::LessSafeKey, len: usize) -> Result<()> {
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
fn run_batches(n: usize, packet: usize) -> usize {
    (RUN_BYTES / (n * packet).max(1)).clamp(MIN_RUN_BATCHES, RUN_BATCHES)
}

/// A random key, `n` random packets and their 16-byte AADs.
type Inputs = ([u8; 16], Vec<Vec<u8>>, Vec<[u8; 16]>);

/// Random packets and 16-byte AADs for a batch of `shape`, and a random key.
fn gpu_inputs(shape: Shape) -> Result<Inputs> {
    let (n, len) = (shape.per_batch, shape.packet);
    let mut key = [0u8; 16];
    sealink_crypto::sign::random_bytes(&mut key).map_err(Error::Random)?;
    let seed = random_seed()?;
    let bufs: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut b = vec![0u8; len];
            super::fill(
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
fn nonces(counter: &mut u64, n: usize) -> Vec<[u8; 12]> {
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
fn gpu_check(gpu: &mut GpuSealer, shape: Shape) -> Result<()> {
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
fn gpu_point(gpu: &mut GpuSealer, shape: Shape, seconds: f64, on_gpu: bool) -> Result<f64> {
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
fn gpu_phases(gpu: &mut GpuSealer, shape: Shape, on_gpu: bool, reps: usize) -> Result<[f64; 5]> {
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

fn validate(p: &Params) -> Result<()> {
    if p.sizes.is_empty() || p.workers.is_empty() || p.strategies.is_empty() {
        return Err(Error::Usage(
            "give at least one size, one worker count and one strategy".into(),
        ));
    }
    if p.packet_size {
        if let Some(s) = p
            .sizes
            .iter()
            .find(|s| !(MIN_PACKET_SIZE..=MAX_PACKET_SIZE).contains(*s))
        {
            return Err(Error::Usage(format!(
                "packet size {s} is not within {MIN_PACKET_SIZE}..={MAX_PACKET_SIZE} bytes"
            )));
        }
    } else if let Some(s) = p.sizes.iter().find(|s| !(PACKET..=MAX_SIZE).contains(*s)) {
        return Err(Error::Usage(format!(
            "batch size {s} is not within {PACKET}..={MAX_SIZE} bytes"
        )));
    }
    if let Some(w) = p
        .workers
        .iter()
        .find(|w| !(1..=super::tunnel_cores::MAX_WORKERS).contains(*w))
    {
        return Err(Error::Usage(format!("{w} workers is out of range")));
    }
    super::check_timing(p.seconds, p.runs)
}

fn kb(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MB", bytes >> 20)
    } else {
        format!("{} KB", bytes >> 10)
    }
}

pub fn run(p: &Params) -> Result<()> {
    run_with(p, &mut |_| Ok(()))
}

/// One point of the run: a CPU row (size, workers) or a GPU one (size, strategy, GHASH on the
/// GPU or not), by index into the parameters' lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pt {
    Cpu {
        size: usize,
        workers: usize,
    },
    Gpu {
        size: usize,
        strategy: usize,
        ghash_gpu: bool,
    },
}

/// The points in order of priority (a budget skips from the end): every CPU row, size by size,
/// then the GPU rows of the default strategy (the design this crate ships), then the other
/// strategies. Without a GPU only the CPU rows.
fn plan(p: &Params, gpu: bool) -> Vec<Pt> {
    let mut v = Vec::new();
    for size in 0..p.sizes.len() {
        for workers in 0..p.workers.len() {
            v.push(Pt::Cpu { size, workers });
        }
    }
    if !gpu {
        return v;
    }
    let default = p.strategies.iter().position(|s| *s == Strategy::default());
    let order = default
        .into_iter()
        .chain((0..p.strategies.len()).filter(|i| Some(*i) != default));
    for strategy in order {
        for size in 0..p.sizes.len() {
            for ghash_gpu in [true, false] {
                v.push(Pt::Gpu {
                    size,
                    strategy,
                    ghash_gpu,
                });
            }
        }
    }
    v
}

fn ghash_name(on_gpu: bool) -> &'static str {
    if on_gpu { "ghash-gpu" } else { "ghash-cpu" }
}

/// [`run`], calling `after_point` with the point log after each point is appended to it (an
/// error stops the run there, as a kill would: the tests stop runs early with it).
fn run_with(p: &Params, after_point: &mut dyn FnMut(&PointLog) -> Result<()>) -> Result<()> {
    validate(p)?;
    let mut log = PointLog::create(&p.out, POINTS_FILE, POINTS_HEAD)?;
    let mut logged = |row: [String; 8]| -> Result<()> {
        log.append(row)?;
        after_point(&log)
    };
    let each = |v: &[f64]| {
        let s: Vec<String> = v.iter().map(|g| format!("{g:.3}")).collect();
        format!("each run: {}", s.join(";"))
    };
    let keys = Arc::new(Keys::new()?);
    let (mut gpu, absent) =
        match sealink_gpu::open().map_err(|e| Error::bench_by("the GPU failed to start", e))? {
            Availability::Ready(g) => (Some(*g), None),
            Availability::Absent(why) => (None, Some(why)),
        };
    let points = plan(p, gpu.is_some());
    let windows = p.runs + 1;
    let (experiment, cpu_engine) = if p.packet_size {
        ("figure12-packet", "cpu-aws-lc")
    } else {
        ("figure12", "cpu")
    };
    let pb = output::progress((points.len() * windows) as u64, "bench gpu");
    // Medians per point; NaN where a budget skipped it.
    let mut cpu = vec![vec![f64::NAN; p.workers.len()]; p.sizes.len()];
    let mut gpu_rows = vec![vec![[f64::NAN; 2]; p.strategies.len()]; p.sizes.len()];
    let mut phase_rows: Vec<(usize, bool, [f64; 5])> = Vec::new();
    let mut budget_note = None;
    let mut seconds = p.seconds;
    let mut skipped = 0usize;
    let res = (|| -> Result<()> {
        let t0 = Instant::now();
        let mut keep = points.len();
        for (i, &pt) in points.iter().enumerate() {
            if i >= keep {
                pb.inc(windows as u64);
                continue;
            }
            let v = measure_point(p, pt, &keys, gpu.as_mut(), seconds, &pb)?;
            let m = median(&v);
            let row = match pt {
                Pt::Cpu { size, workers } => {
                    cpu[size][workers] = m;
                    [
                        experiment.into(),
                        p.sizes[size].to_string(),
                        Shape::of(p, p.sizes[size]).per_batch.to_string(),
                        cpu_engine.into(),
                        p.workers[workers].to_string(),
                        p.runs.to_string(),
                        format!("{m:.3}"),
                        each(&v),
                    ]
                }
                Pt::Gpu {
                    size,
                    strategy,
                    ghash_gpu,
                } => {
                    gpu_rows[size][strategy][usize::from(!ghash_gpu)] = m;
                    [
                        experiment.into(),
                        p.sizes[size].to_string(),
                        Shape::of(p, p.sizes[size]).per_batch.to_string(),
                        format!(
                            "gpu-{}-{}",
                            p.strategies[strategy].name(),
                            ghash_name(ghash_gpu)
                        ),
                        String::new(),
                        p.runs.to_string(),
                        format!("{m:.3}"),
                        each(&v),
                    ]
                }
            };
            logged(row)?;
            // After the first point: what each further run costs beyond its timed seconds, and
            // so what of the rest fits the budget (`fit_budget`).
            if let (0, Some(b)) = (i, p.budget) {
                let t1 = t0.elapsed().as_secs_f64();
                let overhead = t1 / windows as f64 - p.seconds;
                let f = super::fit_budget(b - t1, points.len() - 1, windows, overhead, p.seconds);
                seconds = f.seconds;
                keep = 1 + f.keep;
                skipped = points.len() - keep;
                let what = if skipped == 0 {
                    "nothing skipped".to_owned()
                } else {
                    format!(
                        "skipped the last {skipped} of {} points (and the phase table)",
                        points.len()
                    )
                };
                budget_note = Some(super::budget_note(b, t1, seconds, p.seconds, &what));
            }
        }
        if let (Some(g), 0) = (gpu.as_mut(), skipped) {
            phase_rows = measure_phases(p, g, &mut logged)?;
        }
        Ok(())
    })();
    pb.finish_and_clear();
    res?;
    let measured = gpu.is_some();
    let gpu_name = gpu.as_ref().map(|g| g.name().to_owned());
    report(
        p,
        seconds,
        &cpu,
        measured.then_some(&gpu_rows[..]),
        &phase_rows,
        (gpu_name, absent),
        budget_note,
    )
}

/// One point's runs: a warm-up, then `p.runs` timed ones (their figures). A GPU point is
/// checked byte for byte before its first run.
fn measure_point(
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
fn measure_phases(
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

/// Gbit/s to three decimals, "skipped" for a point a budget skipped.
fn g3(v: f64) -> String {
    if v.is_nan() {
        "skipped".into()
    } else {
        format!("{v:.3}")
    }
}

/// What the paper says a strategy gains over its naive code at `size` (Figure 12's text).
fn paper_gain(size: usize) -> &'static str {
    match size {
        s if s == 4 << 10 => "4x (one block per file with streams, over naive)",
        s if s == 128 << 10 => "8x, 3.7 Gb/s",
        s if s < 4 << 10 => "no significant speed-up below 4 KB",
        _ => "",
    }
}

/// The report, the CSV and SVG files and the run record.
fn report(
    p: &Params,
    seconds: f64,
    cpu: &[Vec<f64>],
    gpu_rows: Option<&[Vec<[f64; 2]>]>,
    phase_rows: &[(usize, bool, [f64; 5])],
    (gpu_name, absent): (Option<String>, Option<String>),
    budget_note: Option<String>,
) -> Result<()> {
    let mut out = String::new();
    report_heading(
        &mut out,
        p,
        seconds,
        gpu_name.as_deref(),
        absent.as_deref(),
        budget_note.as_deref(),
    );
    let xname = if p.packet_size { "packet" } else { "batch" };
    let mut head: Vec<String> = vec![xname.into(), "packets".into()];
    head.extend(p.workers.iter().map(|w| format!("CPU {w}w Gbit/s")));
    for s in &p.strategies {
        head.push(format!("GPU {} Gbit/s (GHASH on GPU)", s.name()));
        head.push(format!("GPU {} Gbit/s (GHASH on CPU)", s.name()));
    }
    head.push("paper 004 (Fig. 12, text)".into());
    let mut t = Table::new(head.clone());
    let mut tc = Table::new(head);
    let mut chart = Chart::new(
        format!("bench gpu: AES-128-GCM throughput against {xname} size"),
        &format!("{xname} (KB)"),
        "Gbit/s",
    );
    let kbx = |i: usize| p.sizes[i] as f64 / 1024.0;
    for (wi, w) in p.workers.iter().enumerate() {
        chart = chart.series(
            format!("CPU {w} workers"),
            (0..p.sizes.len()).map(|i| (kbx(i), cpu[i][wi])).collect(),
        );
    }
    if let Some(rows) = gpu_rows {
        for (si, s) in p.strategies.iter().enumerate() {
            for (k, on) in [(0, "GPU"), (1, "CPU")] {
                chart = chart.series(
                    format!("GPU {}, GHASH on {on}", s.name()),
                    (0..p.sizes.len())
                        .map(|i| (kbx(i), rows[i][si][k]))
                        .collect(),
                );
            }
        }
    }
    for (i, &size) in p.sizes.iter().enumerate() {
        let paper = if size == 128 << 10 {
            "3.7 Gb/s (GTX 295, AES-CTR)"
        } else {
            ""
        };
        let per = Shape::of(p, size).per_batch.to_string();
        let mut row = vec![kb(size), per.clone()];
        row.extend(cpu[i].iter().map(|v| g3(*v)));
        let mut rowc = vec![size.to_string(), per];
        rowc.extend(cpu[i].iter().map(|v| v.to_string()));
        for si in 0..p.strategies.len() {
            for k in 0..2 {
                match gpu_rows {
                    Some(r) => {
                        row.push(g3(r[i][si][k]));
                        rowc.push(r[i][si][k].to_string());
                    }
                    None => {
                        row.push("not measured".into());
                        rowc.push(String::new());
                    }
                }
            }
        }
        row.push(paper.into());
        rowc.push(paper.into());
        t.row(row);
        tc.row(rowc);
    }
    out.push_str(&t.markdown());
    let ts = report_vs_naive(&mut out, p, gpu_rows, xname);
    let (best_cpu, d) = report_crossover(&mut out, p, cpu, gpu_rows);
    report_ghash_and_phases(&mut out, p, gpu_rows, phase_rows);
    let _ = writeln!(
        out,
        "paper 004 (text): 3.7 Gb/s at 128 KB with one CUDA block per file and streams, 8x its naive GPU code; 4x at 4 KB; CPU almost constant in size; no speed-up below 4 KB"
    );
    let mut rec = RunRecord::new("gpu");
    rec.file(POINTS_FILE);
    let csv = rec.write_csv(&p.out, "gpu.csv", &tc)?;
    if !ts.is_empty() {
        rec.write_csv(&p.out, "gpu-strategies.csv", &ts)?;
    }
    rec.write_svg(&p.out, "gpu.svg", &chart)?;
    for (s, c) in &best_cpu {
        rec.figure(format!("cpu best {}", kb(*s)), *c, "Gbit/s");
    }
    if let Some(r) = gpu_rows {
        for (i, size) in p.sizes.iter().enumerate() {
            for (si, st) in p.strategies.iter().enumerate() {
                for k in [0, 1] {
                    rec.figure(
                        format!("gpu {} {} {}", st.name(), ghash_name(k == 0), kb(*size)),
                        r[i][si][k],
                        "Gbit/s",
                    );
                }
            }
        }
    }
    rec.figure(
        "crossover",
        d.crossover().map_or(f64::NAN, |s| s as f64),
        "bytes",
    );
    let json = rec.write(&p.out)?;
    print_with_files(out, &csv, &json)
}

/// The report's crossover line: from which batch size the GPU beats the best CPU row. The best
/// CPU figure at each size, and the dispatcher built from both sides' best.
fn report_crossover(
    out: &mut String,
    p: &Params,
    cpu: &[Vec<f64>],
    gpu_rows: Option<&[Vec<[f64; 2]>]>,
) -> (Vec<(usize, f64)>, Dispatch) {
    let best_cpu: Vec<(usize, f64)> = p
        .sizes
        .iter()
        .zip(cpu)
        .map(|(s, r)| (*s, r.iter().copied().fold(f64::NAN, f64::max)))
        .collect();
    // The fastest strategy and GHASH placement at each size (the dispatcher would use that).
    let gpu_pts: Vec<(usize, f64)> = match gpu_rows {
        Some(r) => p
            .sizes
            .iter()
            .copied()
            .zip(r.iter().map(|per| {
                per.iter()
                    .flat_map(|g| g.iter().copied())
                    .fold(f64::NAN, f64::max)
            }))
            .collect(),
        None => Vec::new(),
    };
    let d = Dispatch::new(&best_cpu, &gpu_pts);
    let cross = if gpu_pts.is_empty() {
        "crossover: not measured (no GPU)".to_string()
    } else {
        match d.crossover() {
            Some(s) => format!(
                "crossover: the GPU beats the best CPU row from {} batches up",
                kb(s)
            ),
            None => "crossover: none (the CPU is as fast or faster at every measured size)".into(),
        }
    };
    let _ = writeln!(out, "\n{cross}");
    (best_cpu, d)
}

/// The report's heading: what ran, on what machine and GPU, and any budget note.
fn report_heading(
    out: &mut String,
    p: &Params,
    seconds: f64,
    gpu_name: Option<&str>,
    absent: Option<&str>,
    budget_note: Option<&str>,
) {
    if p.packet_size {
        let _ = writeln!(
            out,
            "sealink-lab bench gpu --packet-size: paper 004 Figure 12 rerun on the paper's x-axis, AES-128-GCM over packets (the paper's files) of each size, {PACKETS_PER_BATCH} packets per batch, each packet one thread block (the naive strategies spread it over several)"
        );
    } else {
        let _ = writeln!(
            out,
            "sealink-lab bench gpu: paper 004 Figure 12 rerun, AES-128-GCM over batches of {PACKET}-byte packets"
        );
    }
    if p.quick {
        let _ = writeln!(out, "QUICK MODE: short runs, not a measurement");
    }
    let _ = writeln!(
        out,
        "machine: {} ({} cores)",
        record::cpu_model(),
        record::cores()
    );
    let strategies: Vec<&str> = p.strategies.iter().map(|s| s.name()).collect();
    let gpu_line = match (&gpu_name, &absent) {
        (Some(name), _) => format!(
            "GPU: {name} (AES-CTR with a T-table; strategies {}: naive = each packet spread over blocks of {} threads, one batch at a time; naive-streams = the same with batches in flight; no-streams = one block of {} threads per packet, one batch at a time; streams = one block per packet with {RUN_BATCHES} batches per call (at least {MIN_RUN_BATCHES}, within {} MiB) in flight over 4 streams; GHASH on the GPU or on the CPU; one copy in and one out per batch from pinned buffers; packing and unpacking included)",
            strategies.join(", "),
            sealink_gpu::kernel::SPREAD_THREADS,
            sealink_gpu::kernel::THREADS_PER_PACKET,
            RUN_BYTES >> 20
        ),
        (None, Some(why)) => format!(
            "GPU: not measured, no strategy ({}) ran (no CUDA device/driver found: {why})",
            strategies.join(", ")
        ),
        (None, None) => "GPU: not measured".into(),
    };
    let _ = writeln!(out, "{gpu_line}");
    if p.packet_size {
        let _ = writeln!(
            out,
            "CPU: aws-lc-rs AES-128-GCM (seal_in_place_separate_tag), N threads each sealing its own {PACKETS_PER_BATCH} packets of the size, each first checked to open again; median of {} runs of {seconds} s",
            p.runs
        );
        let _ = writeln!(
            out,
            "GPU points: each strategy's first batch at each size is checked byte for byte against aws-lc-rs before it is timed"
        );
    } else {
        let _ = writeln!(
            out,
            "CPU: the engine (sealink_engine::Pipeline), the tunnel's seal (datapath::seal_datagram); median of {} runs of {seconds} s",
            p.runs
        );
    }
    if let Some(note) = &budget_note {
        let _ = writeln!(out, "{note}");
    }
    out.push('\n');
}

/// The report's strategies against the naive one, per size (the paper's 4x at 4 KB and 8x at
/// 128 KB): the table, for its CSV.
fn report_vs_naive(
    out: &mut String,
    p: &Params,
    gpu_rows: Option<&[Vec<[f64; 2]>]>,
    xname: &str,
) -> Table {
    // Each strategy over the naive one, per size: the paper's 4x (4 KB) and 8x (128 KB).
    let naive = p.strategies.iter().position(|s| *s == Strategy::Naive);
    let mut ts = Table::new(
        [
            xname,
            "strategy",
            "x naive (GHASH on GPU)",
            "x naive (GHASH on CPU)",
            "paper 004",
        ]
        .map(String::from)
        .to_vec(),
    );
    match (gpu_rows, naive) {
        (Some(r), Some(n)) => {
            for (i, &size) in p.sizes.iter().enumerate() {
                for (si, s) in p.strategies.iter().enumerate() {
                    if si == n {
                        continue;
                    }
                    let x = |k: usize| format!("{:.2}", r[i][si][k] / r[i][n][k]);
                    let paper = if *s == Strategy::Streams {
                        paper_gain(size)
                    } else {
                        ""
                    };
                    ts.row([kb(size), s.name().into(), x(0), x(1), paper.into()]);
                }
            }
            let _ = writeln!(
                out,
                "\nEach strategy against the naive one (paper: 4x at 4 KB, 8x at 128 KB, for one block per file with streams):"
            );
            out.push_str(&ts.markdown());
        }
        (None, _) => {
            let _ = writeln!(
                out,
                "\nStrategies against the naive one: not measured (no GPU); the paper's 4x at 4 KB and 8x at 128 KB are untested here"
            );
        }
        (Some(_), None) => {
            let _ = writeln!(
                out,
                "\nStrategies against the naive one: the naive strategy was not run (add it to --strategy)"
            );
        }
    }
    ts
}

/// The report's GHASH placement line and where one batch's time goes.
fn report_ghash_and_phases(
    out: &mut String,
    p: &Params,
    gpu_rows: Option<&[Vec<[f64; 2]>]>,
    phase_rows: &[(usize, bool, [f64; 5])],
) {
    let dflt = p.strategies.iter().position(|s| *s == Strategy::default());
    if let (Some(r), Some(di)) = (gpu_rows, dflt) {
        let both: Vec<[f64; 2]> = r
            .iter()
            .map(|per| per[di])
            .filter(|g| !g[0].is_nan() && !g[1].is_nan())
            .collect();
        let faster = both.iter().filter(|g| g[0] >= g[1]).count();
        let _ = writeln!(
            out,
            "GHASH ({} strategy): on the GPU as fast or faster at {faster} of {} batch sizes{}",
            Strategy::default().name(),
            both.len(),
            if 2 * faster >= both.len() {
                " (kept as the default)"
            } else {
                " (the CPU placement wins more often; the default stays the GPU's, see RESULTS)"
            }
        );
    }
    if !phase_rows.is_empty() {
        let _ = writeln!(
            out,
            "\nWhere one batch's time goes ({} strategy's kernel, one stream, each step waited for; median of runs, microseconds):",
            Strategy::default().name()
        );
        let mut pt = Table::new(
            [
                "batch", "GHASH on", "pack", "copy in", "kernel", "copy out", "finish", "total",
                "Gbit/s",
            ]
            .map(String::from)
            .to_vec(),
        );
        for (size, on_gpu, st) in phase_rows {
            let total: f64 = st.iter().sum();
            let bits = Shape::of(p, *size).bits();
            let mut row = vec![kb(*size), if *on_gpu { "GPU" } else { "CPU" }.to_string()];
            row.extend(st.iter().map(|v| format!("{v:.1}")));
            row.push(format!("{total:.1}"));
            row.push(format!("{:.3}", bits / total / 1e3));
            pt.row(row);
        }
        out.push_str(&pt.markdown());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run stopped after its first point (as a kill would stop it) leaves that point in
    /// gpu-points.csv, and none of the final files. The CPU rows run with or without a GPU.
    #[test]
    fn a_stopped_run_keeps_the_points_it_measured() {
        let out = std::env::temp_dir().join(format!("sealink-gpu-stop-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let p = Params {
            sizes: vec![8 << 10, 16 << 10],
            workers: vec![1],
            seconds: 0.01,
            runs: 1,
            quick: true,
            out: out.clone(),
            strategies: Strategy::ALL.to_vec(),
            budget: None,
            packet_size: false,
        };
        let e = run_with(&p, &mut |_| Err(Error::bench("stopped"))).unwrap_err();
        assert!(e.to_string().contains("stopped"), "{e}");
        let text = std::fs::read_to_string(out.join(POINTS_FILE)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].starts_with("elapsed_s,experiment,batch_bytes"),
            "{text}"
        );
        assert!(lines[1].contains(",figure12,8192,5,cpu,1,1,"), "{text}");
        assert!(!out.join("gpu.csv").exists());
        std::fs::remove_dir_all(&out).unwrap();
    }

    /// A budget far below the plan keeps the first point, skips the rest, and still writes the
    /// report, saying what it skipped (the CPU rows: they run with or without a GPU).
    #[test]
    fn a_small_budget_skips_points_and_still_reports() {
        let out = std::env::temp_dir().join(format!("sealink-gpu-budget-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let p = Params {
            sizes: vec![8 << 10, 16 << 10, 32 << 10],
            workers: vec![1, 2],
            seconds: 0.05,
            runs: 1,
            quick: true,
            out: out.clone(),
            strategies: vec![Strategy::Streams],
            budget: Some(0.001),
            packet_size: false,
        };
        run_with(&p, &mut |_| Ok(())).unwrap();
        let text = std::fs::read_to_string(out.join(POINTS_FILE)).unwrap();
        let rows: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(rows.len(), 1, "{text}");
        assert!(rows[0].contains(",figure12,8192,5,cpu,1,1,"), "{text}");
        let csv = std::fs::read_to_string(out.join("gpu.csv")).unwrap();
        // The skipped points are NaN, the measured one a number.
        assert!(csv.lines().nth(1).unwrap().starts_with("8192,5,"), "{csv}");
        assert!(csv.contains("NaN"), "{csv}");
        std::fs::remove_dir_all(&out).unwrap();
    }

    /// The points' order of priority: the CPU rows, then the default strategy's GPU rows, then
    /// the others in the order given; no GPU rows without a GPU.
    #[test]
    fn the_plan_puts_the_default_strategy_first() {
        let p = Params {
            sizes: vec![4 << 10, 8 << 10],
            workers: vec![1],
            seconds: 0.01,
            runs: 1,
            quick: true,
            out: PathBuf::new(),
            strategies: vec![Strategy::Naive, Strategy::Streams],
            budget: None,
            packet_size: false,
        };
        assert_eq!(plan(&p, false).len(), 2);
        let v = plan(&p, true);
        assert_eq!(v.len(), 2 + 2 * 2 * 2);
        assert_eq!(
            v[2],
            Pt::Gpu {
                size: 0,
                strategy: 1,
                ghash_gpu: true
            }
        );
        assert_eq!(
            v[6],
            Pt::Gpu {
                size: 0,
                strategy: 0,
                ghash_gpu: true
            }
        );
    }

    #[test]
    fn gpu_calls_hold_at_most_64_mib_but_one_batch_per_stream() {
        assert_eq!(run_batches(packets_in(4 << 10), PACKET), RUN_BATCHES);
        assert_eq!(run_batches(packets_in(1 << 20), PACKET), RUN_BATCHES);
        assert_eq!(run_batches(packets_in(8 << 20), PACKET), 8);
        assert_eq!(run_batches(packets_in(MAX_SIZE), PACKET), MIN_RUN_BATCHES);
        // --packet-size: 128 packets of 128 KB are 16 MiB a batch, four a call.
        assert_eq!(run_batches(PACKETS_PER_BATCH, 128 << 10), MIN_RUN_BATCHES);
        assert_eq!(run_batches(PACKETS_PER_BATCH, 4 << 10), RUN_BATCHES);
    }

    /// `--packet-size` without a GPU: a CPU row per packet size and worker count, each point
    /// checked (a sealed packet opens again) and measured, the report on the paper's x-axis
    /// saying why the GPU was not measured.
    #[test]
    fn packet_size_runs_and_checks_on_the_cpu() {
        let out = std::env::temp_dir().join(format!("sealink-gpu-pkt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let p = Params {
            sizes: vec![4 << 10, 128 << 10],
            workers: vec![1, 2],
            seconds: 0.01,
            runs: 1,
            quick: true,
            out: out.clone(),
            strategies: Strategy::ALL.to_vec(),
            budget: None,
            packet_size: true,
        };
        run_with(&p, &mut |_| Ok(())).unwrap();
        let text = std::fs::read_to_string(out.join(POINTS_FILE)).unwrap();
        let rows: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(rows.len(), 4, "{text}");
        assert!(
            rows[0].contains(",figure12-packet,4096,128,cpu-aws-lc,1,1,"),
            "{text}"
        );
        assert!(
            rows[3].contains(",figure12-packet,131072,128,cpu-aws-lc,2,1,"),
            "{text}"
        );
        let csv = std::fs::read_to_string(out.join("gpu.csv")).unwrap();
        assert!(csv.starts_with("packet,packets,"), "{csv}");
        assert!(!csv.contains("NaN"), "{csv}");
        std::fs::remove_dir_all(&out).unwrap();
        // Sizes outside the GPU layout's limits are refused.
        let bad = Params {
            sizes: vec![2 << 20],
            ..p
        };
        assert!(matches!(validate(&bad), Err(Error::Usage(_))));
    }

    #[test]
    fn the_cpu_check_opens_what_it_sealed() {
        use aws_lc_rs::aead::{AES_128_GCM, LessSafeKey, UnboundKey};
        let k = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &[3u8; 16]).unwrap());
        for len in DEFAULT_PACKET_SIZES {
            cpu_packets_check(&k, len).unwrap();
        }
        assert_eq!(
            Shape::of(
                &Params {
                    sizes: vec![],
                    workers: vec![],
                    seconds: 0.0,
                    runs: 1,
                    quick: true,
                    out: PathBuf::new(),
                    strategies: vec![],
                    budget: None,
                    packet_size: true,
                },
                64 << 10
            ),
            Shape {
                packet: 64 << 10,
                per_batch: PACKETS_PER_BATCH
            }
        );
    }

    #[test]
    fn batch_sizes_in_packets() {
        assert_eq!(packets_in(4 << 10), 2);
        assert_eq!(packets_in(128 << 10), 93);
        assert_eq!(packets_in(1400), 1);
        assert_eq!(kb(128 << 10), "128 KB");
        assert_eq!(kb(1 << 20), "1 MB");
    }
}
