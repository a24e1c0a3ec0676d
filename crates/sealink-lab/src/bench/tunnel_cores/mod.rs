//! `sealink-lab bench tunnel-cores`: paper 004's multicore figures rerun with today's AES, in
//! process (no TUN, no root), through the tunnel's own engine ([`sealink_engine::Pipeline`],
//! the ordered pipeline `sealink up` seals on). Packets of 1400 bytes are sealed with
//! AES-128-GCM (`datapath::seal_datagram`, the tunnel's seal) or AES-128-CTR (aws-lc-rs, the
//! paper's cipher) against worker count, with per-flow order kept or not, against batch size,
//! and on hyper-thread siblings against separate cores.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use aws_lc_rs::cipher::{AES_128, EncryptingKey, EncryptionContext, UnboundCipherKey};
use aws_lc_rs::iv::FixedLength;
use sealink_crypto::{PacketKey, Scope, SuiteId, kdf};
use sealink_engine::{Pipeline, Work};

use crate::engines::{HEADER_ROOM, Packet, seal_one};
use sealink_proto::sim::SimRng;

use super::{fill, median, print_with_files, random_seed};
use crate::error::{Error, Result};
use crate::output;
use crate::report::{Chart, PointLog, RunRecord, Table, record};

mod engine;
mod points;
mod render;

pub(crate) use engine::*;
pub use points::*;
use render::*;

/// Payload of every packet (the paper's tunnel carries Ethernet-sized packets).
pub const PACKET: usize = 1400;
/// Receiver index in sealed headers.
const RECEIVER: u32 = 0x5EA1_0004;
/// Batches in flight per worker: as the tunnel's readers (`BATCHES_PER_READER`).
const DEPTH_PER_WORKER: usize = 4;
/// Lanes of the unordered configuration: more than batches in flight, so no batch ever waits
/// for another before it is released.
const UNORDERED_LANES: usize = 1024;
/// Largest worker count and batch accepted.
pub const MAX_WORKERS: usize = 256;
pub const MAX_BATCH: usize = 4096;
/// Every point as it is measured, in measurement order (a stopped run keeps these).
pub const POINTS_FILE: &str = "tunnel-cores-points.csv";
const POINTS_HEAD: [&str; 9] = [
    "experiment",
    "cipher",
    "workers",
    "batch",
    "ordered",
    "runs",
    "gbps",
    "mpps",
    "out_of_order_share",
];

/// The cipher a run seals with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cipher {
    /// AES-128-GCM through the protocol's data path (header, seal, tag): the tunnel's seal.
    Gcm,
    /// AES-128-CTR over the payload through aws-lc-rs: the paper's cipher, no authentication.
    Ctr,
}

impl Cipher {
    pub fn name(self) -> &'static str {
        match self {
            Cipher::Gcm => "aes128-gcm",
            Cipher::Ctr => "aes128-ctr",
        }
    }
}

/// Parameters of `sealink-lab bench tunnel-cores`.
#[derive(Debug, Clone)]
pub struct Params {
    /// Worker counts (default 1, 2, 4, ... up to the cores, and the cores).
    pub workers: Vec<usize>,
    /// Packets per batch in the grouping sweep.
    pub batches: Vec<usize>,
    /// Packets per batch in the other experiments.
    pub batch: usize,
    pub seconds: f64,
    pub runs: usize,
    pub quick: bool,
    pub out: PathBuf,
    /// Wall-clock seconds the run may take (`--budget`; `fit_budget` in bench/mod.rs).
    pub budget: Option<f64>,
    /// `--order-each`: the order pair at every worker count, not only the largest (the
    /// scaling row is the ordered half; one unordered point is added per count).
    pub order_each: bool,
}

/// 1, 2, 4, ... below `cores`, then `cores`.
pub fn default_workers(cores: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |w| Some(w * 2))
        .take_while(|&w| w < cores)
        .collect();
    v.push(cores.max(1));
    v
}

fn validate(p: &Params) -> Result<()> {
    if p.workers.is_empty() || p.batches.is_empty() {
        return Err(Error::Usage(
            "give at least one worker count and one batch".into(),
        ));
    }
    if let Some(w) = p.workers.iter().find(|w| !(1..=MAX_WORKERS).contains(*w)) {
        return Err(Error::Usage(format!(
            "{w} workers is not within 1..={MAX_WORKERS}"
        )));
    }
    if let Some(b) = p
        .batches
        .iter()
        .chain([&p.batch])
        .find(|b| !(1..=MAX_BATCH).contains(*b))
    {
        return Err(Error::Usage(format!(
            "batch {b} is not within 1..={MAX_BATCH}"
        )));
    }
    super::check_timing(p.seconds, p.runs)
}

/// Runs the four experiments, prints them beside the paper and writes the files.
pub fn run(p: &Params) -> Result<()> {
    run_with(p, &mut |_| Ok(()))
}

/// [`run`], calling `after_point` with the point log after each point is appended to it (an
/// error stops the run there, as a kill would: the tests stop runs early with it).
fn run_with(p: &Params, after_point: &mut dyn FnMut(&PointLog) -> Result<()>) -> Result<()> {
    validate(p)?;
    let mut log = PointLog::create(&p.out, POINTS_FILE, POINTS_HEAD)?;
    let cores = record::cores();
    let keys = Arc::new(Keys::new()?);
    let top = *p.workers.iter().max().unwrap_or(&1);
    let groups = sibling_groups();
    let smt = smt_pairs(&groups);
    let ciphers = [Cipher::Gcm, Cipher::Ctr];
    let each = if p.order_each {
        p.workers.iter().filter(|&&w| w != top).count()
    } else {
        0
    };
    let steps = (p.runs + 1) as u64
        * (ciphers.len() * p.workers.len() + 2 + each + ciphers.len() * p.batches.len()) as u64
        + if smt.is_some() { 2 } else { 0 };
    let pb = output::progress(steps, "tunnel-cores");
    let mut out = String::new();
    // Appends one point to the log at once.
    let mut logged = |row: [String; 9]| -> Result<()> {
        log.append(row)?;
        after_point(&log)
    };
    let mut budget_note = None;
    let result = measure_points(p, &keys, &pb, &mut logged, smt, top, &mut budget_note);
    pb.finish_and_clear();
    let m = result?;
    let smt_skipped = smt.is_some() && m.smt.is_none();
    let (tc, chart) = report_scaling(&mut out, p, &m, cores, budget_note.as_deref());
    let toe = report_order(&mut out, p, &m, top);
    let (tgc, ts) = report_grouping(&mut out, &m, top, smt_skipped);
    let (csv, json) = write_files(
        &p.out,
        &tc,
        &tgc,
        &chart,
        (&m.ordered, &m.unordered),
        &m.scaling,
        &ts,
        &toe,
    )?;
    print_with_files(out, &csv, &json)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-run quick bench at batch 8 writing into `out`, no budget, order only at the top.
    fn quick(out: &Path) -> Params {
        Params {
            workers: vec![1],
            batches: vec![8],
            batch: 8,
            seconds: 0.01,
            runs: 1,
            quick: true,
            out: out.to_path_buf(),
            budget: None,
            order_each: false,
        }
    }

    /// A run stopped after its first point (as a kill would stop it) leaves that point in
    /// tunnel-cores-points.csv, and none of the final files.
    #[test]
    fn a_stopped_run_keeps_the_points_it_measured() {
        let out = crate::bench::test_support::scratch("tc-stop");
        let p = Params {
            workers: vec![1, 2],
            batches: vec![8],
            seconds: 0.01,
            ..quick(&out)
        };
        let e = run_with(&p, &mut |log| {
            assert_eq!(
                std::fs::read_to_string(log.path()).unwrap().lines().count(),
                2
            );
            Err(Error::bench("stopped"))
        })
        .unwrap_err();
        assert!(e.to_string().contains("stopped"), "{e}");
        let text = std::fs::read_to_string(out.join(POINTS_FILE)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].starts_with("elapsed_s,experiment,cipher,workers"),
            "{text}"
        );
        assert!(
            lines[1].contains(",scaling,aes128-gcm,1,8,true,1,"),
            "{text}"
        );
        let gbps: f64 = lines[1].split(',').nth(7).unwrap().parse().unwrap();
        assert!(gbps > 0.0, "{text}");
        assert!(!out.join("tunnel-cores.csv").exists());
        std::fs::remove_dir_all(&out).unwrap();
    }

    /// A budget far below the plan keeps the first point and the order pair, skips the rest,
    /// and the report is still written.
    #[test]
    fn a_small_budget_skips_points_and_still_reports() {
        let out = crate::bench::test_support::scratch("tc-budget");
        let p = Params {
            workers: vec![1, 2],
            batches: vec![1, 8, 32],
            seconds: 0.05,
            budget: Some(0.001),
            ..quick(&out)
        };
        run_with(&p, &mut |_| Ok(())).unwrap();
        let text = std::fs::read_to_string(out.join(POINTS_FILE)).unwrap();
        let rows: Vec<&str> = text.lines().skip(1).collect();
        // The first scaling point and the order pair; not the other 3 scaling or 6 grouping.
        assert_eq!(rows.len(), 3, "{text}");
        assert!(rows[0].contains(",scaling,aes128-gcm,1,"), "{text}");
        assert!(
            rows[1].contains(",order,") && rows[2].contains(",order,"),
            "{text}"
        );
        assert!(out.join("tunnel-cores.csv").exists());
        std::fs::remove_dir_all(&out).unwrap();
    }

    /// `--order-each`: one unordered point per worker count below the largest, and the order
    /// cost at every count in the report and in tunnel-cores-order.csv.
    #[test]
    fn order_each_measures_the_order_cost_at_every_count() {
        let out = crate::bench::test_support::scratch("tc-oe");
        let p = Params {
            workers: vec![1, 2, 3],
            batches: vec![8],
            seconds: 0.01,
            order_each: true,
            ..quick(&out)
        };
        run_with(&p, &mut |_| Ok(())).unwrap();
        let text = std::fs::read_to_string(out.join(POINTS_FILE)).unwrap();
        let each: Vec<&str> = text
            .lines()
            .filter(|l| l.contains(",order-each,"))
            .collect();
        assert_eq!(each.len(), 2, "{text}");
        assert!(
            each[0].contains(",order-each,aes128-gcm,1,8,false,"),
            "{text}"
        );
        assert!(
            each[1].contains(",order-each,aes128-gcm,2,8,false,"),
            "{text}"
        );
        let csv = std::fs::read_to_string(out.join("tunnel-cores-order.csv")).unwrap();
        let rows: Vec<&str> = csv.lines().collect();
        assert_eq!(rows.len(), 4, "{csv}");
        assert!(rows[0].starts_with("workers,"), "{csv}");
        assert!(
            rows[1].starts_with("1,") && rows[3].starts_with("3,"),
            "{csv}"
        );
        std::fs::remove_dir_all(&out).unwrap();
    }

    #[test]
    fn ordered_path_releases_batches_in_order() {
        let keys = Keys::new().unwrap();
        for workers in [1, 2, 3] {
            let mut seen = Vec::new();
            let cfg = Config {
                cipher: Cipher::Gcm,
                workers,
                batch: 3,
                ordered: true,
            };
            let s = drive(cfg, &keys, Duration::from_secs(30), Some(400), |q| {
                seen.push(q)
            })
            .unwrap();
            assert_eq!(s.out_of_order, 0);
            assert_eq!(seen, (0..400).collect::<Vec<u64>>(), "{workers} workers");
        }
    }

    #[test]
    fn unordered_path_releases_every_batch_once() {
        let keys = Keys::new().unwrap();
        let mut seen = Vec::new();
        let cfg = Config {
            cipher: Cipher::Ctr,
            workers: 3,
            batch: 2,
            ordered: false,
        };
        drive(cfg, &keys, Duration::from_secs(30), Some(300), |q| {
            seen.push(q)
        })
        .unwrap();
        seen.sort_unstable();
        assert_eq!(seen, (0..300).collect::<Vec<u64>>());
    }

    #[test]
    fn sealed_packets_open_with_the_protocol() {
        // The GCM job is the tunnel's seal: a sealed packet opens with the same key.
        let keys = Keys::new().unwrap();
        let (tx, rx) = mpsc::channel();
        let ctx = keys.ctx(tx).unwrap();
        let mut j = Job {
            cipher: Cipher::Gcm,
            seq: 0,
            packets: packets(2, 1),
            failed: false,
        };
        let body = j.packets[1].body().to_vec();
        j.packets[1].counter = 7;
        j.run(&ctx);
        assert!(!j.failed);
        let mut p = j.packets.pop().unwrap();
        crate::engines::open_one(&keys.key, RECEIVER, false, &mut p);
        assert_eq!(p.status, Ok(()));
        assert_eq!(p.counter, 7);
        assert_eq!(p.body(), &body[..]);
        drop(rx);
    }

    #[test]
    fn cpu_lists_and_smt_pairs() {
        assert_eq!(parse_cpu_list("0-2,8\n"), Some(vec![0, 1, 2, 8]));
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(smt_pairs(&[vec![0], vec![1]]), None);
        assert_eq!(smt_pairs(&[vec![0, 4], vec![1, 5]]), Some(((0, 4), (0, 1))));
        assert_eq!(smt_pairs(&[vec![0, 1]]), None, "one core: no separate pair");
        assert_eq!(default_workers(6), vec![1, 2, 4, 6]);
        assert_eq!(default_workers(4), vec![1, 2, 4]);
        assert_eq!(default_workers(1), vec![1]);
    }
}
