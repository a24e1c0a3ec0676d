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

mod measure;
mod render;

pub use measure::*;
use render::*;

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A one-run quick bench of every strategy on one worker writing into `out`, batch sizes
    /// on the x-axis, no budget.
    fn quick(out: &Path) -> Params {
        Params {
            sizes: vec![8 << 10],
            workers: vec![1],
            seconds: 0.01,
            runs: 1,
            quick: true,
            out: out.to_path_buf(),
            strategies: Strategy::ALL.to_vec(),
            budget: None,
            packet_size: false,
        }
    }

    /// A run stopped after its first point (as a kill would stop it) leaves that point in
    /// gpu-points.csv, and none of the final files. The CPU rows run with or without a GPU.
    #[test]
    fn a_stopped_run_keeps_the_points_it_measured() {
        let out = crate::bench::test_support::scratch("gpu-stop");
        let p = Params {
            sizes: vec![8 << 10, 16 << 10],
            ..quick(&out)
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
        let out = crate::bench::test_support::scratch("gpu-budget");
        let p = Params {
            sizes: vec![8 << 10, 16 << 10, 32 << 10],
            workers: vec![1, 2],
            seconds: 0.05,
            strategies: vec![Strategy::Streams],
            budget: Some(0.001),
            ..quick(&out)
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
            strategies: vec![Strategy::Naive, Strategy::Streams],
            ..quick(Path::new(""))
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
        let out = crate::bench::test_support::scratch("gpu-pkt");
        let p = Params {
            sizes: vec![4 << 10, 128 << 10],
            workers: vec![1, 2],
            packet_size: true,
            ..quick(&out)
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
