//! `sealink-lab bench stacks`: paper 000 (Nahum et al. 1996) rerun on this machine. Protocol stacks
//! composed from layers (datagram framing, then a MAC or a cipher + MAC) run through the lab's
//! engines ([`crate::engines`], drivers over `sealink_engine::Pipeline`): packet-level
//! parallelism on one channel, connection-level parallelism on 12 channels, workers 1..N, send
//! side and receive side, with in-memory drivers (paper 000 section 3.3). Writes CSV files and SVG plots and prints markdown tables that put
//! the 1996 figures next to today's.

use std::fmt::Write as _;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engines::{
    self, Channel, Clp, ClpPolicy, Engine, HEADER_ROOM, Layered, Op, Packet, Plp, seal_serial,
};
use sealink_crypto::raw::{self, RawAead};
use sealink_crypto::{Scope, SuiteId, kdf};
use sealink_proto::sim::SimRng;

use super::{fill, median, random_seed};
use crate::error::{Error, Result};
use crate::output;
use crate::projection::SerialCeiling;
use crate::report::{Chart, PointLog, RunRecord, Table, record};

mod measure;
mod paper;
mod render;
mod sweep;

pub(crate) use measure::baseline_plp_send;
use measure::*;
use paper::{PaperPoint, Point, Read};
use render::*;
use sweep::{MODES, OPS, Sweep};

/// A protocol stack of the lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stack {
    pub name: &'static str,
    pub layers: &'static str,
    pub suite: SuiteId,
    pub scope: Scope,
    /// The matching row of paper 000 (index into `PAPER`), if any.
    paper: Option<usize>,
}

/// Every stack, in the paper's order first.
pub const STACKS: [Stack; 7] = [
    Stack {
        name: "baseline",
        layers: "framing only (scope none, insecure lab opt-in)",
        suite: SuiteId::Aes128Gcm,
        scope: Scope::None,
        paper: Some(0),
    },
    Stack {
        name: "md5",
        layers: "framing + HMAC-MD5 (legacy-des-cbc-hmac-md5, scope auth)",
        suite: SuiteId::LegacyDesCbcHmacMd5,
        scope: Scope::AuthOnly,
        paper: Some(1),
    },
    Stack {
        name: "gcm-auth",
        layers: "framing + AES-128-GCM tag only (scope auth)",
        suite: SuiteId::Aes128Gcm,
        scope: Scope::AuthOnly,
        paper: None,
    },
    Stack {
        name: "des-md5",
        layers: "framing + DES-CBC + HMAC-MD5",
        suite: SuiteId::LegacyDesCbcHmacMd5,
        scope: Scope::Encrypt,
        paper: Some(2),
    },
    Stack {
        name: "3des-md5",
        layers: "framing + 3DES-CBC + HMAC-MD5",
        suite: SuiteId::Legacy3DesCbcHmacMd5,
        scope: Scope::Encrypt,
        paper: Some(3),
    },
    Stack {
        name: "aes128-gcm",
        layers: "framing + AES-128-GCM",
        suite: SuiteId::Aes128Gcm,
        scope: Scope::Encrypt,
        paper: None,
    },
    Stack {
        name: "chacha20-poly1305",
        layers: "framing + ChaCha20-Poly1305",
        suite: SuiteId::ChaCha20Poly1305,
        scope: Scope::Encrypt,
        paper: None,
    },
];

/// Paper 000, Tables 1 and 2 (usec per 4 KiB packet on one 100 MHz R4400):
/// (paper stack, PLP send, PLP recv, CLP send, CLP recv).
const PAPER: [(&str, f64, f64, f64, f64); 4] = [
    ("TCP/IP", 236.0, 189.0, 226.0, 214.0),
    ("TCP/MD5/IP", 1737.0, 1708.0, 1772.0, 1769.0),
    ("DES/TCP/MD5/IP", 8982.0, 9179.0, 8694.0, 8985.0),
    ("3-DES/TCP/(MD5/)IP", 21461.0, 21121.0, 23150.0, 23237.0),
];

/// Paper 000's projection: "TCP/MD5/IP would bottleneck at about 16 processors, DES ... 30".
const PAPER_PROJECTION: [&str; 4] = ["", "bottleneck ~16 procs", "scales to ~30 procs", ""];

/// Packets per engine batch (default of `--batch`). Measured on 2 cores (docs/RESULTS.md):
/// 32 left the AES-128-GCM 2-worker speedup at 1.4-1.7 (hand-off cost per ~21 us batch);
/// 192 reached 2.0-2.2 while one worker kept 0.98 of the raw seal rate; 512 fell out of cache.
pub const CHUNK: usize = 192;

/// Packets per batch in the many-connections experiment (keeps 384 channels' buffers small).
const CHUNK_MANY: usize = 8;

/// Channels of the CLP experiments (paper 000: 12 connections), or as many as there are
/// workers where that is more ([`clp_channels`]).
const CLP_CHANNELS: usize = 12;

/// Connections of the figure 11 experiment.
const CONNECTIONS: [usize; 6] = [12, 24, 48, 96, 192, 384];

const CONNECTIONS_QUICK: [usize; 2] = [12, 24];

/// Channels of the CLP scaling curves at up to `workers` workers: the paper's 12, or one per
/// worker where there are more workers (12 channels on 16 workers would cap processor-per-
/// connection at 12/16 of the machine, issue 49).
pub fn clp_channels(workers: usize) -> usize {
    CLP_CHANNELS.max(workers)
}

/// Figure 11's connection counts for a run of `workers` workers: the paper's list, each at
/// least `workers` (so processor-per-connection never leaves a worker without a connection):
/// counts below `workers` are dropped and `workers` itself leads where it is above 12.
pub fn figure11_connections(quick: bool, workers: usize) -> Vec<usize> {
    let base: &[usize] = if quick {
        &CONNECTIONS_QUICK
    } else {
        &CONNECTIONS
    };
    let mut v: Vec<usize> = base.iter().copied().filter(|&n| n >= workers).collect();
    if v.first() != Some(&workers) && workers > CLP_CHANNELS {
        v.insert(0, workers);
    }
    v
}

/// Core counts of the projections.
const PROJECT_AT: [f64; 4] = [12.0, 16.0, 64.0, 128.0];

/// Confidence level of the intervals.
const CONFIDENCE: f64 = 0.90;

/// Targets of issue 3.
const TARGET_SPEEDUP: f64 = 1.9;

const TARGET_RAW_RATIO: f64 = 0.9;

pub const MAX_PACKET: usize = 65_000;

/// The markdown report the bench leaves in `--out` (everything it prints but the file list).
const REPORT_FILE: &str = "stacks.md";

/// Paper 000's projection method applied to this run's curves.
pub const PROJECTION_FILE: &str = "projection.csv";

/// Every point as it is measured, in measurement order (a stopped run keeps these).
pub const POINTS_FILE: &str = "stacks-points.csv";

const POINTS_HEAD: [&str; 13] = [
    "experiment",
    "stack",
    "side",
    "engine",
    "channels",
    "workers",
    "packet_bytes",
    "batch",
    "runs",
    "mbps_median",
    "mbps_ci90_lo",
    "mbps_ci90_hi",
    "mbps_each_run",
];

/// Parameters of `sealink-lab bench stacks`.
#[derive(Debug, Clone)]
pub struct Params {
    pub workers: usize,
    pub packet: usize,
    pub seconds: f64,
    pub runs: usize,
    pub out: PathBuf,
    pub stacks: Vec<&'static Stack>,
    pub quick: bool,
    /// Packets per engine batch in the scaling experiments.
    pub batch: usize,
    /// Wall-clock seconds the run may take (`--budget`; `fit_budget` in bench/mod.rs): runs
    /// shortened first, then whole stacks skipped from the end of the list.
    pub budget: Option<f64>,
    /// `--serial-ns`: nanoseconds added to each packet's serial step (the counter on the send
    /// side, the replay check on the receive side), as paper 000's locked TCP/IP step was; 0
    /// measures today's serial step as it is.
    pub serial_ns: u64,
}

/// Looks a stack up by name.
pub fn stack_by_name(name: &str) -> std::result::Result<&'static Stack, String> {
    STACKS
        .iter()
        .find(|s| s.name.eq_ignore_ascii_case(name.trim()))
        .ok_or_else(|| {
            let names: Vec<&str> = STACKS.iter().map(|s| s.name).collect();
            format!("unknown stack {name:?}; choose from {}", names.join(", "))
        })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Packet-level parallelism, one channel.
    Plp,
    /// Connection-level parallelism (processor-per-connection), 12 channels.
    Clp,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Plp => "PLP",
            Mode::Clp => "CLP",
        }
    }
    /// Channels of this mode's curve in a run of `workers` workers.
    fn channels(self, workers: usize) -> usize {
        match self {
            Mode::Plp => 1,
            Mode::Clp => clp_channels(workers),
        }
    }
}

fn side_name(op: Op) -> &'static str {
    match op {
        Op::Seal => "send",
        Op::Open => "recv",
    }
}

/// Median and order-statistics confidence interval of a sample.
#[derive(Debug, Clone, Copy)]
struct Estimate {
    median: f64,
    lo: f64,
    hi: f64,
}

/// What the drivers feed into the engine.
enum Source {
    /// Send side: packets filled with random bytes, re-sealed as fast as they come back.
    Send { size: usize },
    /// Receive side: per channel a pool of real datagrams sealed beforehand, replayed in order
    /// (the device copies each into the packet buffer; the window restarts at each wrap).
    Recv { pools: Vec<Vec<Arc<[u8]>>> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EngineKind {
    Plp(usize),
    Clp(ClpPolicy),
    Layered,
}

/// One scaling curve: a stack, a side, a mode, workers 1..N.
#[derive(Debug, Clone)]
struct Curve {
    stack: &'static Stack,
    op: Op,
    mode: Mode,
    /// Index w-1: the estimate at w workers.
    points: Vec<Estimate>,
}

impl Curve {
    fn speedup(&self, w: usize) -> Estimate {
        let one = self.points[0];
        let at = self.points[w - 1];
        Estimate {
            median: at.median / one.median,
            lo: at.lo / one.hi,
            hi: at.hi / one.lo,
        }
    }
    /// Serial fraction f of Amdahl's law S(w) = 1 / (f + (1 - f) / w), least squares over the
    /// measured speedups in the linearised form 1/S - 1/w = f (1 - 1/w); clamped to [0, 1].
    fn serial_fraction(&self) -> Option<f64> {
        let (mut num, mut den) = (0.0, 0.0);
        for w in 2..=self.points.len() {
            let s = self.speedup(w).median;
            let x = 1.0 - 1.0 / w as f64;
            num += (1.0 / s - 1.0 / w as f64) * x;
            den += x * x;
        }
        (den > 0.0).then(|| (num / den).clamp(0.0, 1.0))
    }
    fn us_per_packet(&self, size: usize) -> f64 {
        size as f64 * 8.0 / self.points[0].median
    }
}

/// One stack's projection by paper 000's own method (section 4.1: the serial step's ceiling
/// divided by the rate one processor adds), from this run's PLP curves.
#[derive(Debug, Clone)]
struct Projection {
    stack: &'static str,
    op: Op,
    /// Workers at which the baseline stack reached the ceiling.
    ceiling_at: usize,
    method: SerialCeiling,
    /// Measured speedups at 1..N workers.
    measured: Vec<f64>,
    /// Paper 000's own projection for this stack, if it makes one (send side only).
    paper: &'static str,
}

fn validate(p: &Params) -> Result<()> {
    if p.stacks.is_empty() {
        return Err(Error::Usage("give at least one stack".into()));
    }
    if !(1..=MAX_PACKET).contains(&p.packet) {
        return Err(Error::Usage(format!(
            "--packet must be within 1..={MAX_PACKET}"
        )));
    }
    if p.workers == 0 || p.workers > 512 {
        return Err(Error::Usage("--workers must be within 1..=512".into()));
    }
    super::check_timing(p.seconds, p.runs)
}

/// Runs the bench, writes CSV and SVG files into `p.out` and prints the tables.
pub fn run(p: &Params) -> Result<()> {
    run_with(p, &mut |_| Ok(()))
}

/// The raw library's AES-128-GCM seal rate under `cur` (the stacks' ceiling): measured, logged
/// as the point `raw`, counted on the progress bar.
fn raw_point(
    p: &Params,
    cur: &Params,
    logged: &mut impl FnMut(Vec<String>) -> Result<()>,
    pb: &indicatif::ProgressBar,
) -> Result<Estimate> {
    let r = raw_seal_rate(cur)?;
    logged(point_row(
        "raw",
        "aes128-gcm",
        "send",
        RawAead::LIBRARY,
        1,
        1,
        p,
        CHUNK,
        &r,
    ))?;
    pb.inc(1);
    Ok(estimate(&r))
}

/// [`run`], calling `after_point` with the point log after each point is appended to it (an
/// error stops the run there, as a kill would: the tests stop runs early with it).
fn run_with(p: &Params, after_point: &mut dyn FnMut(&PointLog) -> Result<()>) -> Result<()> {
    validate(p)?;
    std::fs::create_dir_all(&p.out).map_err(Error::io("create", &p.out))?;
    let mut log = PointLog::create(&p.out, POINTS_FILE, POINTS_HEAD)?;
    let mut logged = |row: Vec<String>| -> Result<()> {
        log.append(row)?;
        after_point(&log)
    };
    let connections = figure11_connections(p.quick, p.workers);
    let steps = 1 + p.stacks.len() as u64
        * (OPS.len() * MODES.len() * p.workers + OPS.len() + connections.len() * 2) as u64;
    let pb = output::progress(steps, "bench stacks");
    let result = (|| -> Result<String> {
        let mut sweep = Sweep::new(p, &connections, &mut logged, &pb);
        sweep.all_stacks()?;
        sweep.report()
    })();
    pb.finish_and_clear();
    output::print(&result?)
}

/// The budget `b` after the first point (which took `t1` s), each stack `per_stack` windows,
/// every window taken to cost what the first point's did beyond its timed length: the runs'
/// seconds from now on, how many stacks are measured, and the note that says so.
fn fit_stacks(p: &Params, b: f64, t1: f64, per_stack: usize) -> (f64, usize, String) {
    let windows = p.runs + 1;
    let overhead = t1 / windows as f64 - p.seconds;
    let first_left = per_stack - windows;
    let total = first_left + (p.stacks.len() - 1) * per_stack + windows;
    let f = super::fit_budget(b - t1, total, 1, overhead, p.seconds);
    let seconds = f.seconds;
    let keep_stacks =
        (1 + f.keep.saturating_sub(first_left + windows) / per_stack).min(p.stacks.len());
    let skipped: Vec<&str> = p.stacks[keep_stacks..].iter().map(|s| s.name).collect();
    let what = if skipped.is_empty() {
        "no stack skipped".to_owned()
    } else {
        format!("skipped the stacks {}", skipped.join(", "))
    };
    let mut note = super::budget_note(b, t1, seconds, p.seconds, &what);
    if f.keep < first_left + windows {
        note.push_str(
            "; the first stack, which is measured whole, does not fit even so: over budget",
        );
    }
    (seconds, keep_stacks, note)
}

fn policy_name(p: ClpPolicy) -> &'static str {
    match p {
        ClpPolicy::ThreadPerConnection => "thread-per-connection",
        ClpPolicy::ProcessorPerConnection(_) => "processor-per-connection",
    }
}

/// One row of the comparison with paper 000's figures.
struct Beside {
    at: &'static PaperPoint,
    stack: &'static Stack,
    /// Where on the figure ("1 proc", "24 conns").
    point: String,
    quantity: &'static str,
    /// The paper's value of `quantity` (the point's value rescaled where needed), if a number.
    paper: Option<f64>,
    paper_text: String,
    ours: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_ranks_cover_90_percent() {
        // n = 5: min..max covers 1 - 2/32 = 0.9375; the next pair only 0.625.
        assert_eq!(ci_ranks(5), (0, 4));
        // n = 3 cannot reach 90%: min..max.
        assert_eq!(ci_ranks(3), (0, 2));
        // n = 9: (x_2, x_8) covers 0.961, (x_3, x_7) covers 0.820.
        assert_eq!(ci_ranks(9), (1, 7));
        let e = estimate(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((e.median, e.lo, e.hi), (3.0, 1.0, 5.0));
    }

    #[test]
    fn amdahl_fit_recovers_the_serial_fraction() {
        let f = 0.1;
        let points = (1..=4)
            .map(|w| {
                let v = 100.0 * amdahl(f, w as f64);
                Estimate {
                    median: v,
                    lo: v,
                    hi: v,
                }
            })
            .collect();
        let c = Curve {
            stack: &STACKS[0],
            op: Op::Seal,
            mode: Mode::Plp,
            points,
        };
        assert!((c.serial_fraction().unwrap() - f).abs() < 1e-9);
        assert!((amdahl(0.0, 16.0) - 16.0).abs() < 1e-9);
    }

    /// A run stopped after its second point (as a kill would stop it) leaves those two points
    /// in stacks-points.csv, and no final report.
    #[test]
    fn a_stopped_run_keeps_the_points_it_measured() {
        let out = crate::bench::test_support::scratch("stacks-stop");
        let p = Params {
            workers: 2,
            packet: 1024,
            seconds: 0.01,
            runs: 1,
            out: out.clone(),
            stacks: vec![stack_by_name("aes128-gcm").unwrap()],
            quick: true,
            batch: 8,
            budget: None,
            serial_ns: 0,
        };
        let mut seen = Vec::new();
        let e = run_with(&p, &mut |log| {
            // Each point is on disk before the run goes on to the next.
            let text = std::fs::read_to_string(log.path()).unwrap();
            seen.push(text.lines().count());
            if log.rows() == 2 {
                Err(Error::bench("stopped"))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert!(e.to_string().contains("stopped"), "{e}");
        assert_eq!(seen, [2, 3]);
        let text = std::fs::read_to_string(out.join(POINTS_FILE)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("elapsed_s,experiment,stack,"),
            "{text}"
        );
        // The raw library rate, then aes128-gcm's PLP send at one worker.
        assert!(lines[1].contains(",raw,aes128-gcm,send,"), "{text}");
        assert!(
            lines[2].contains(",scaling,aes128-gcm,send,PLP,1,1,1024,8,1,"),
            "{text}"
        );
        assert!(!out.join(REPORT_FILE).exists());
        assert!(!out.join("stacks.json").exists());
        std::fs::remove_dir_all(&out).unwrap();
    }

    /// A budget far below the plan measures the first stack only (its runs at the floor), says
    /// so, and still writes the report.
    #[test]
    fn a_small_budget_skips_stacks_and_still_reports() {
        let out = crate::bench::test_support::scratch("stacks-budget");
        let p = Params {
            workers: 1,
            packet: 1024,
            seconds: 0.02,
            runs: 1,
            out: out.clone(),
            stacks: vec![
                stack_by_name("baseline").unwrap(),
                stack_by_name("aes128-gcm").unwrap(),
            ],
            quick: true,
            batch: 8,
            budget: Some(0.001),
            serial_ns: 0,
        };
        run_with(&p, &mut |_| Ok(())).unwrap();
        let report = std::fs::read_to_string(out.join(REPORT_FILE)).unwrap();
        assert!(
            report.contains("budget: 0.001 s") && report.contains("skipped the stacks aes128-gcm"),
            "{report}"
        );
        let points = std::fs::read_to_string(out.join(POINTS_FILE)).unwrap();
        assert!(!points.contains(",scaling,aes128-gcm,"), "{points}");
        assert!(points.contains(",connections,baseline,"), "{points}");
        std::fs::remove_dir_all(&out).unwrap();
    }

    #[test]
    fn stacks_resolve() {
        assert_eq!(
            stack_by_name("AES128-GCM").unwrap().suite,
            SuiteId::Aes128Gcm
        );
        assert!(stack_by_name("rot13").is_err());
    }

    /// `--serial-ns`: every packet's serial step waits that long, so one PLP submitter cannot
    /// send faster than a packet per step (paper 000's locked-step ceiling, here 1024 B per
    /// 100 us = 81.9 Mbit/s), whatever the crypto costs.
    #[test]
    fn serial_ns_caps_the_plp_send_rate() {
        let p = Params {
            workers: 2,
            packet: 1024,
            seconds: 0.05,
            runs: 1,
            out: PathBuf::new(),
            stacks: vec![&STACKS[0]],
            quick: true,
            batch: 8,
            budget: None,
            serial_ns: 100_000,
        };
        for kind in [EngineKind::Plp(1), EngineKind::Plp(2)] {
            let rates = measure(&STACKS[0], kind, Op::Seal, 1, 8, &p, 2).unwrap();
            assert!(!rates.is_empty());
            for r in rates {
                assert!(r > 0.0 && r <= 82.0, "{kind:?}: {r} Mbit/s");
            }
        }
        let c = Channel::new(
            Arc::new(kdf::derive_packet_key(SuiteId::Aes128Gcm, &[1; 32], b"t", true).unwrap()),
            Arc::new(kdf::derive_packet_key(SuiteId::Aes128Gcm, &[1; 32], b"t", true).unwrap()),
            1,
            Scope::Encrypt,
        );
        assert!(c.serial_spin.is_zero());
        let mut c = c.with_serial_ns(300_000);
        let t = Instant::now();
        assert_eq!(c.take_counter(), 0);
        assert!(t.elapsed() >= Duration::from_micros(300));
    }

    /// At N workers the CLP curves run at least N connections, and Figure 11 starts at N
    /// (issue 49: 12 connections on 16 workers capped processor-per-connection at 0.75).
    #[test]
    fn clp_runs_at_least_one_connection_per_worker() {
        assert_eq!(clp_channels(2), 12);
        assert_eq!(clp_channels(12), 12);
        assert_eq!(clp_channels(16), 16);
        assert_eq!(figure11_connections(false, 2), CONNECTIONS.to_vec());
        assert_eq!(figure11_connections(false, 12), CONNECTIONS.to_vec());
        assert_eq!(
            figure11_connections(false, 16),
            vec![16, 24, 48, 96, 192, 384]
        );
        assert_eq!(figure11_connections(true, 16), vec![16, 24]);
        assert_eq!(figure11_connections(false, 24), vec![24, 48, 96, 192, 384]);
        assert_eq!(figure11_connections(false, 30), vec![30, 48, 96, 192, 384]);
    }
}
