//! `sealink-lab bench gpu`: paper 004's Figure 12 rerun. Throughput of sealing batches of
//! 1400-byte packets with AES-128-GCM against the batch size, on the CPU through the engine
//! (1..N workers, each batch split among them, the engine's batches in flight) and on the GPU
//! (`sealink-gpu`: one launch per batch, up to [`RUN_BATCHES`] batches per call pipelined over the
//! device's streams; packing, copies both ways and unpacking included), with GHASH on the GPU
//! and on the CPU; the crossover batch size where the GPU starts to win; the paper's 3.7 Gb/s
//! at 128 KB beside; and where one batch's time goes on the device path.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sealink_gpu::{Availability, Dispatch, GpuSealer};

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

/// Batches per `seal_batches` call in the GPU runs: the pipeline fills and drains once per
/// call, as the engine's does once per run. Fewer (down to [`MIN_RUN_BATCHES`]) where 16 would
/// hold more than [`RUN_BYTES`] of packets.
pub const RUN_BATCHES: usize = 16;
/// At least one batch per CUDA stream.
pub const MIN_RUN_BATCHES: usize = 4;
/// Packet bytes one GPU call holds at most (unless [`MIN_RUN_BATCHES`] batches need more).
pub const RUN_BYTES: usize = 64 << 20;

/// Batches of `n` packets per GPU call.
fn run_batches(n: usize) -> usize {
    (RUN_BYTES / (n * PACKET).max(1)).clamp(MIN_RUN_BATCHES, RUN_BATCHES)
}

/// A random key, `n` random packets and their 16-byte AADs.
type Inputs = ([u8; 16], Vec<Vec<u8>>, Vec<[u8; 16]>);

/// Random packets and 16-byte AADs for `n` packets, and a random key.
fn gpu_inputs(n: usize) -> Result<Inputs> {
    let mut key = [0u8; 16];
    sealink_crypto::sign::random_bytes(&mut key).map_err(Error::Random)?;
    let seed = random_seed()?;
    let bufs: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut b = vec![0u8; PACKET];
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

/// GPU: runs of [`run_batches`] batches of `n` packets through `seal_batches`, for
/// `seconds`, GHASH where `on_gpu` says.
fn gpu_point(gpu: &mut GpuSealer, n: usize, seconds: f64, on_gpu: bool) -> Result<f64> {
    gpu.set_gpu_ghash(on_gpu);
    let (key, mut bufs, aads) = gpu_inputs(n * run_batches(n))?;
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
    Ok(sealed as f64 * PACKET as f64 * 8.0 / start.elapsed().as_secs_f64() / 1e9)
}

/// Where one batch of `n` packets spends its time, step by step: the median of `reps`
/// [`GpuSealer::phases`] runs, per step, in microseconds.
fn gpu_phases(gpu: &mut GpuSealer, n: usize, on_gpu: bool, reps: usize) -> Result<[f64; 5]> {
    gpu.set_gpu_ghash(on_gpu);
    let (key, mut bufs, aads) = gpu_inputs(n)?;
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
    if p.sizes.is_empty() || p.workers.is_empty() {
        return Err(Error::Usage(
            "give at least one size and one worker count".into(),
        ));
    }
    if let Some(s) = p.sizes.iter().find(|s| !(PACKET..=MAX_SIZE).contains(*s)) {
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
    let steps =
        (p.sizes.len() * (p.workers.len() + 2 * usize::from(gpu.is_some())) * (p.runs + 1)) as u64;
    let pb = output::progress(steps, "bench gpu");
    let mut cpu: Vec<Vec<f64>> = Vec::new();
    // Per size: GHASH on the GPU, GHASH on the CPU.
    let mut gpu_rows: Vec<[f64; 2]> = Vec::new();
    let mut phase_rows: Vec<(usize, bool, [f64; 5])> = Vec::new();
    let res = (|| -> Result<()> {
        for &size in &p.sizes {
            let n = packets_in(size);
            let mut row = Vec::new();
            for &w in &p.workers {
                let mut v = Vec::new();
                for run in 0..=p.runs {
                    let g = cpu_point(&keys, w, n, p.seconds)?;
                    pb.inc(1);
                    if run > 0 {
                        v.push(g);
                    }
                }
                row.push(median(&v));
                logged([
                    "figure12".into(),
                    size.to_string(),
                    n.to_string(),
                    "cpu".into(),
                    w.to_string(),
                    p.runs.to_string(),
                    format!("{:.3}", median(&v)),
                    each(&v),
                ])?;
            }
            cpu.push(row);
            if let Some(g) = gpu.as_mut() {
                let mut both = [0.0; 2];
                for (slot, on_gpu) in both.iter_mut().zip([true, false]) {
                    let mut v = Vec::new();
                    for run in 0..=p.runs {
                        let x = gpu_point(g, n, p.seconds, on_gpu)?;
                        pb.inc(1);
                        if run > 0 {
                            v.push(x);
                        }
                    }
                    *slot = median(&v);
                    logged([
                        "figure12".into(),
                        size.to_string(),
                        n.to_string(),
                        if on_gpu {
                            "gpu-ghash-gpu"
                        } else {
                            "gpu-ghash-cpu"
                        }
                        .into(),
                        String::new(),
                        p.runs.to_string(),
                        format!("{:.3}", median(&v)),
                        each(&v),
                    ])?;
                }
                gpu_rows.push(both);
            }
        }
        if let Some(g) = gpu.as_mut() {
            let reps = if p.quick { 3 } else { 50 };
            let mut at = vec![128 << 10];
            at.extend(p.sizes.iter().max().filter(|&&m| m != 128 << 10));
            for size in at {
                for on_gpu in [true, false] {
                    let ph = gpu_phases(g, packets_in(size), on_gpu, reps)?;
                    let us: Vec<String> = ph.iter().map(|v| format!("{v:.3}")).collect();
                    logged([
                        "phases".into(),
                        size.to_string(),
                        packets_in(size).to_string(),
                        if on_gpu {
                            "gpu-ghash-gpu"
                        } else {
                            "gpu-ghash-cpu"
                        }
                        .into(),
                        String::new(),
                        reps.to_string(),
                        String::new(),
                        format!(
                            "phases (pack;copy-in;kernel;copy-out;finish): {}",
                            us.join(";")
                        ),
                    ])?;
                    phase_rows.push((size, on_gpu, ph));
                }
            }
            g.set_gpu_ghash(true);
        }
        Ok(())
    })();
    pb.finish_and_clear();
    res?;

    let mut out = String::new();
    let _ = writeln!(
        out,
        "sealink-lab bench gpu: paper 004 Figure 12 rerun, AES-128-GCM over batches of {PACKET}-byte packets"
    );
    if p.quick {
        let _ = writeln!(out, "QUICK MODE: short runs, not a measurement");
    }
    let _ = writeln!(
        out,
        "machine: {} ({} cores)",
        record::cpu_model(),
        record::cores()
    );
    let gpu_line = match (&gpu, &absent) {
        (Some(g), _) => format!(
            "GPU: {} (AES-CTR with a T-table, one block of 128 threads per packet; GHASH on the GPU or on the CPU; one copy in and one out per batch from pinned buffers, {RUN_BATCHES} batches per call (at least {MIN_RUN_BATCHES}, within {} MiB) over 4 streams; packing and unpacking included)",
            g.name(),
            RUN_BYTES >> 20
        ),
        (None, Some(why)) => format!("GPU: not measured (no CUDA device/driver found: {why})"),
        (None, None) => "GPU: not measured".into(),
    };
    let _ = writeln!(out, "{gpu_line}");
    let _ = writeln!(
        out,
        "CPU: the engine (sealink_engine::Pipeline), the tunnel's seal (datapath::seal_datagram); median of {} runs of {} s\n",
        p.runs, p.seconds
    );
    let mut head: Vec<String> = vec!["batch".into(), "packets".into()];
    head.extend(p.workers.iter().map(|w| format!("CPU {w}w Gbit/s")));
    head.push("GPU Gbit/s (GHASH on GPU)".into());
    head.push("GPU Gbit/s (GHASH on CPU)".into());
    head.push("paper 004 (Fig. 12, text)".into());
    let mut t = Table::new(head.clone());
    let mut tc = Table::new(head);
    let mut chart = Chart::new(
        "bench gpu: AES-128-GCM throughput against batch size",
        "batch (KB)",
        "Gbit/s",
    );
    for (wi, w) in p.workers.iter().enumerate() {
        chart = chart.series(
            format!("CPU {w} workers"),
            p.sizes
                .iter()
                .zip(&cpu)
                .map(|(s, r)| (*s as f64 / 1024.0, r[wi]))
                .collect(),
        );
    }
    if !gpu_rows.is_empty() {
        for (k, label) in [(0, "GPU, GHASH on GPU"), (1, "GPU, GHASH on CPU")] {
            chart = chart.series(
                label,
                p.sizes
                    .iter()
                    .zip(&gpu_rows)
                    .map(|(s, g)| (*s as f64 / 1024.0, g[k]))
                    .collect(),
            );
        }
    }
    for (i, &size) in p.sizes.iter().enumerate() {
        let paper = if size == 128 << 10 {
            "3.7 Gb/s (GTX 295, AES-CTR)"
        } else {
            ""
        };
        let mut row = vec![kb(size), packets_in(size).to_string()];
        row.extend(cpu[i].iter().map(|v| format!("{v:.3}")));
        for k in 0..2 {
            row.push(
                gpu_rows
                    .get(i)
                    .map_or("not measured".to_string(), |g| format!("{:.3}", g[k])),
            );
        }
        row.push(paper.into());
        t.row(row);
        let mut row = vec![size.to_string(), packets_in(size).to_string()];
        row.extend(cpu[i].iter().map(|v| v.to_string()));
        for k in 0..2 {
            row.push(gpu_rows.get(i).map_or(String::new(), |g| g[k].to_string()));
        }
        row.push(paper.into());
        tc.row(row);
    }
    out.push_str(&t.markdown());
    let best_cpu: Vec<(usize, f64)> = p
        .sizes
        .iter()
        .zip(&cpu)
        .map(|(s, r)| (*s, r.iter().copied().fold(f64::NAN, f64::max)))
        .collect();
    // The faster GHASH placement at each size (the dispatcher would use that one).
    let gpu_pts: Vec<(usize, f64)> = p
        .sizes
        .iter()
        .copied()
        .zip(gpu_rows.iter().map(|g| g[0].max(g[1])))
        .collect();
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
    if !gpu_rows.is_empty() {
        let faster = gpu_rows.iter().filter(|g| g[0] >= g[1]).count();
        let _ = writeln!(
            out,
            "GHASH: on the GPU as fast or faster at {faster} of {} batch sizes{}",
            gpu_rows.len(),
            if 2 * faster >= gpu_rows.len() {
                " (kept as the default)"
            } else {
                " (the CPU placement wins more often; the default stays the GPU's, see RESULTS)"
            }
        );
    }
    if !phase_rows.is_empty() {
        let _ = writeln!(
            out,
            "\nWhere one batch's time goes (one stream, each step waited for; median of runs, microseconds):"
        );
        let mut pt = Table::new(
            [
                "batch", "GHASH on", "pack", "copy in", "kernel", "copy out", "finish", "total",
                "Gbit/s",
            ]
            .map(String::from)
            .to_vec(),
        );
        for (size, on_gpu, st) in &phase_rows {
            let total: f64 = st.iter().sum();
            let bits = (packets_in(*size) * PACKET * 8) as f64;
            let mut row = vec![kb(*size), if *on_gpu { "GPU" } else { "CPU" }.to_string()];
            row.extend(st.iter().map(|v| format!("{v:.1}")));
            row.push(format!("{total:.1}"));
            row.push(format!("{:.3}", bits / total / 1e3));
            pt.row(row);
        }
        out.push_str(&pt.markdown());
    }
    let _ = writeln!(
        out,
        "paper 004 (text): 3.7 Gb/s at 128 KB with one CUDA block per file and streams, 8x its naive GPU code; 4x at 4 KB; CPU almost constant in size; no speed-up below 4 KB"
    );
    let mut rec = RunRecord::new("gpu");
    rec.file(POINTS_FILE);
    let csv = rec.write_csv(&p.out, "gpu.csv", &tc)?;
    rec.write_svg(&p.out, "gpu.svg", &chart)?;
    for (s, c) in &best_cpu {
        rec.figure(format!("cpu best {}", kb(*s)), *c, "Gbit/s");
    }
    for (s, g) in p.sizes.iter().zip(&gpu_rows) {
        rec.figure(format!("gpu ghash-gpu {}", kb(*s)), g[0], "Gbit/s");
        rec.figure(format!("gpu ghash-cpu {}", kb(*s)), g[1], "Gbit/s");
    }
    rec.figure(
        "crossover",
        d.crossover().map_or(f64::NAN, |s| s as f64),
        "bytes",
    );
    let json = rec.write(&p.out)?;
    print_with_files(out, &csv, &json)
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

    #[test]
    fn gpu_calls_hold_at_most_64_mib_but_one_batch_per_stream() {
        assert_eq!(run_batches(packets_in(4 << 10)), RUN_BATCHES);
        assert_eq!(run_batches(packets_in(1 << 20)), RUN_BATCHES);
        assert_eq!(run_batches(packets_in(8 << 20)), 8);
        assert_eq!(run_batches(packets_in(MAX_SIZE)), MIN_RUN_BATCHES);
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
