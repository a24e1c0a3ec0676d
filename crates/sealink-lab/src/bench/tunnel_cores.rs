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

/// What the workers read: keys, and where released batches go back to the submitter.
pub(crate) struct Ctx {
    key: Arc<PacketKey>,
    ctr: EncryptingKey,
    done: mpsc::Sender<Job>,
}

/// One batch of packets of the flow.
pub(crate) struct Job {
    cipher: Cipher,
    /// Submission number: release order is checked against it.
    seq: u64,
    packets: Vec<Packet>,
    failed: bool,
}

impl Work for Job {
    type Ctx = Ctx;
    fn run(&mut self, ctx: &Ctx) {
        for p in &mut self.packets {
            p.len = PACKET;
            match self.cipher {
                Cipher::Gcm => {
                    seal_one(&ctx.key, RECEIVER, Scope::Encrypt, p);
                    self.failed |= p.status.is_err();
                }
                Cipher::Ctr => {
                    let mut iv = [0u8; 16];
                    iv[..8].copy_from_slice(&p.counter.to_be_bytes());
                    let body = &mut p.buf[HEADER_ROOM..HEADER_ROOM + PACKET];
                    let ctx_iv = EncryptionContext::Iv128(FixedLength::from(iv));
                    self.failed |= ctx.ctr.less_safe_encrypt(body, ctx_iv).is_err();
                }
            }
        }
    }
    fn release(self, ctx: &Ctx) {
        // The submitter may have stopped listening at the end of a run: nothing to do then.
        let _ = ctx.done.send(self);
    }
}

/// One configuration of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Config {
    pub cipher: Cipher,
    /// Cores sealing: `workers - 1` engine threads plus the submitting thread, which helps.
    pub workers: usize,
    /// Packets per engine batch.
    pub batch: usize,
    /// One lane (per-flow order kept) or a lane per batch (packets leave as they finish).
    pub ordered: bool,
}

/// What one timed run did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunStats {
    pub packets: u64,
    pub elapsed: Duration,
    pub batches: u64,
    /// Batches released after a batch submitted later than them.
    pub out_of_order: u64,
}

impl RunStats {
    pub fn gbps(&self) -> f64 {
        self.packets as f64 * PACKET as f64 * 8.0 / self.elapsed.as_secs_f64() / 1e9
    }
    pub fn mpps(&self) -> f64 {
        self.packets as f64 / self.elapsed.as_secs_f64() / 1e6
    }
}

/// Keys for a run: a fresh random secret each time.
pub(crate) struct Keys {
    key: Arc<PacketKey>,
    ctr_key: [u8; 16],
}

impl Keys {
    pub fn new() -> Result<Self> {
        let mut secret = [0u8; 32];
        sealink_crypto::sign::random_bytes(&mut secret).map_err(Error::Random)?;
        let key = Arc::new(kdf::derive_packet_key(
            SuiteId::Aes128Gcm,
            &secret,
            b"tunnel-cores",
            false,
        )?);
        let mut ctr_key = [0u8; 16];
        kdf::derive_key_material(
            SuiteId::Aes128Gcm,
            &secret,
            b"tunnel-cores ctr",
            &mut ctr_key,
        )?;
        secret.fill(0);
        Ok(Keys { key, ctr_key })
    }
    fn ctx(&self, done: mpsc::Sender<Job>) -> Result<Ctx> {
        let k = UnboundCipherKey::new(&AES_128, &self.ctr_key)
            .map_err(|_| Error::bench("aws-lc-rs refused the AES-128 key"))?;
        let ctr = EncryptingKey::ctr(k).map_err(|_| Error::bench("aws-lc-rs refused AES-CTR"))?;
        Ok(Ctx {
            key: Arc::clone(&self.key),
            ctr,
            done,
        })
    }
}

/// Fresh packets of random payload (the papers warn that constant buffers flatter ciphers).
pub(crate) fn packets(n: usize, seed: u64) -> Vec<Packet> {
    let mut rng = SimRng::new(seed);
    (0..n)
        .map(|_| {
            let mut body = vec![0u8; PACKET];
            fill(&mut rng, &mut body);
            Packet::with_body(&body, 16)
        })
        .collect()
}

/// Runs `cfg` through the engine for `dur`, or until `limit` batches were released; returns
/// what was released before the deadline. `on_release` sees every released batch's sequence
/// number in release order.
pub(crate) fn drive(
    cfg: Config,
    keys: &Keys,
    dur: Duration,
    limit: Option<u64>,
    mut on_release: impl FnMut(u64),
) -> Result<RunStats> {
    let (tx, rx) = mpsc::channel();
    let lanes = if cfg.ordered { 1 } else { UNORDERED_LANES };
    let pipe = Pipeline::new(Arc::new(keys.ctx(tx)?), lanes, cfg.workers.max(1) - 1);
    let depth = (DEPTH_PER_WORKER * cfg.workers).max(2);
    let seed = random_seed()?;
    let mut free: Vec<Job> = (0..depth)
        .map(|i| Job {
            cipher: cfg.cipher,
            seq: 0,
            packets: packets(cfg.batch, seed.wrapping_add(i as u64)),
            failed: false,
        })
        .collect();
    let mut counter = 0u64;
    let mut next_seq = 0u64;
    let mut highest: Option<u64> = None;
    let mut st = RunStats::default();
    let start = Instant::now();
    loop {
        let stop = start.elapsed() >= dur || limit.is_some_and(|l| next_seq >= l);
        if !stop {
            while let Some(mut j) = free.pop() {
                // The serial step: counters and the flow's order, on the submitting thread.
                for p in &mut j.packets {
                    p.counter = counter;
                    counter += 1;
                }
                j.seq = next_seq;
                next_seq += 1;
                pipe.submit(j.seq as usize % lanes, j);
            }
        } else if st.batches == next_seq {
            break;
        }
        let job = match rx.try_recv() {
            Ok(j) => Some(j),
            Err(_) if pipe.help() => None,
            Err(_) => rx.recv_timeout(Duration::from_millis(1)).ok(),
        };
        if let Some(mut j) = job {
            if j.failed {
                return Err(Error::bench(format!(
                    "sealing failed ({} with {} workers)",
                    cfg.cipher.name(),
                    cfg.workers
                )));
            }
            on_release(j.seq);
            if highest.is_some_and(|h| j.seq < h) {
                st.out_of_order += 1;
            }
            highest = highest.max(Some(j.seq));
            st.batches += 1;
            if !stop {
                st.packets += j.packets.len() as u64;
                st.elapsed = start.elapsed();
            }
            j.failed = false;
            free.push(j);
        }
    }
    Ok(st)
}

/// Median figures over `runs` timed runs after a warm-up.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Point {
    pub gbps: f64,
    pub mpps: f64,
    pub out_of_order: f64,
}

pub(crate) fn measure(
    cfg: Config,
    keys: &Keys,
    seconds: f64,
    runs: usize,
    pb: &indicatif::ProgressBar,
) -> Result<Point> {
    let dur = Duration::from_secs_f64(seconds);
    let (mut g, mut m, mut o) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..=runs {
        let s = drive(cfg, keys, dur, None, |_| {})?;
        pb.inc(1);
        if run > 0 {
            g.push(s.gbps());
            m.push(s.mpps());
            o.push(s.out_of_order as f64 / s.batches.max(1) as f64);
        }
    }
    Ok(Point {
        gbps: median(&g),
        mpps: median(&m),
        out_of_order: median(&o),
    })
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

/// Parses a CPU list of sysfs (`0-3,8,10-11`).
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 4096 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// The sibling groups of this machine's CPUs (one entry per distinct group).
pub fn sibling_groups() -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let Ok(dir) = std::fs::read_dir("/sys/devices/system/cpu") else {
        return groups;
    };
    for e in dir.flatten() {
        let p = e.path().join("topology/thread_siblings_list");
        if let Some(g) = std::fs::read_to_string(p)
            .ok()
            .and_then(|t| parse_cpu_list(&t))
        {
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
    }
    groups.sort();
    groups
}

/// Two sibling CPUs and two CPUs on separate cores, if the machine has SMT and two cores.
pub fn smt_pairs(groups: &[Vec<usize>]) -> Option<((usize, usize), (usize, usize))> {
    let sib = groups.iter().find(|g| g.len() >= 2)?;
    let other = groups.iter().find(|g| !g.contains(&sib[0]))?;
    Some(((sib[0], sib[1]), (sib[0], other[0])))
}

/// Two pinned threads, each sealing its own flow inline on its CPU; summed throughput.
fn pinned_pair(cpus: (usize, usize), keys: &Arc<Keys>, cfg: Config, seconds: f64) -> Result<f64> {
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = [cpus.0, cpus.1]
        .into_iter()
        .map(|cpu| {
            let (keys, barrier) = (Arc::clone(keys), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let pinned = sealink_engine::pin_current_thread(cpu);
                barrier.wait();
                pinned.map_err(|e| Error::bench_by("pinned pair", e))?;
                drive(cfg, &keys, Duration::from_secs_f64(seconds), None, |_| {})
            })
        })
        .collect();
    let mut total = 0.0;
    for h in handles {
        let s = h
            .join()
            .map_err(|_| Error::bench("a pinned thread panicked"))??;
        total += s.gbps();
    }
    Ok(total)
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

fn f3(v: f64) -> String {
    format!("{v:.3}")
}

/// One measured point as a row of [`POINTS_FILE`] (medians over `runs`).
fn point_row(experiment: &str, cfg: Config, runs: usize, pt: &Point) -> [String; 9] {
    [
        experiment.to_owned(),
        cfg.cipher.name().to_owned(),
        cfg.workers.to_string(),
        cfg.batch.to_string(),
        cfg.ordered.to_string(),
        runs.to_string(),
        f3(pt.gbps),
        f3(pt.mpps),
        format!("{:.4}", pt.out_of_order),
    ]
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

/// Measures the points in order of priority, each logged as it is taken, fitting them to
/// `--budget` (what it left out goes in `budget_note`).
fn measure_points(
    p: &Params,
    keys: &Arc<Keys>,
    pb: &indicatif::ProgressBar,
    logged: &mut dyn FnMut([String; 9]) -> Result<()>,
    smt: Option<((usize, usize), (usize, usize))>,
    top: usize,
    budget_note: &mut Option<String>,
) -> Result<Measured> {
    let ciphers = [Cipher::Gcm, Cipher::Ctr];
    let cfg = |cipher, workers, batch, ordered| Config {
        cipher,
        workers,
        batch,
        ordered,
    };
    let mut point = |experiment: &str, c: Config, seconds: f64| -> Result<Point> {
        let pt = measure(c, keys, seconds, p.runs, pb)?;
        logged(point_row(experiment, c, p.runs, &pt))?;
        Ok(pt)
    };
    // The points in order of priority (what a budget skips goes from the end): the first
    // scaling point, order kept against not (the report needs both), the rest of the
    // scaling, with --order-each the unordered point at every other worker count, the
    // grouping sweep; then the SMT pair.
    let mut rest: Vec<(&str, Config)> = Vec::new();
    for &c in &ciphers {
        for &w in &p.workers {
            rest.push(("scaling", cfg(c, w, p.batch, true)));
        }
    }
    if p.order_each {
        for &w in p.workers.iter().filter(|&&w| w != top) {
            rest.push(("order-each", cfg(Cipher::Gcm, w, p.batch, false)));
        }
    }
    let first = rest.remove(0);
    rest.insert(0, ("order", cfg(Cipher::Gcm, top, p.batch, false)));
    rest.insert(0, ("order", cfg(Cipher::Gcm, top, p.batch, true)));
    for &c in &ciphers {
        for &b in &p.batches {
            rest.push(("grouping", cfg(c, top, b, true)));
        }
    }
    let smt_points = if smt.is_some() { 2 } else { 0 };
    let t0 = Instant::now();
    let mut done = vec![(first.0, first.1, point(first.0, first.1, p.seconds)?)];
    let (mut seconds, mut keep) = (p.seconds, rest.len() + smt_points);
    if let Some(b) = p.budget {
        let t1 = t0.elapsed().as_secs_f64();
        let note;
        (seconds, keep, note) = fit_points(p, b, t1, &rest, smt_points);
        *budget_note = Some(note);
    }
    for (i, &(what, c)) in rest.iter().enumerate() {
        if i < keep {
            done.push((what, c, point(what, c, seconds)?));
        } else {
            pb.inc((p.runs + 1) as u64);
        }
    }
    let find = |ordered: bool| {
        done.iter()
            .find(|d| d.0 == "order" && d.1.ordered == ordered)
            .map_or_else(Point::default, |d| d.2)
    };
    let (ordered, unordered) = (find(true), find(false));
    let scaling: Vec<_> = done
        .iter()
        .filter(|d| d.0 == "scaling")
        .map(|d| (d.1.cipher, d.1.workers, d.2))
        .collect();
    let grouping: Vec<_> = done
        .iter()
        .filter(|d| d.0 == "grouping")
        .map(|d| (d.1.cipher, d.1.batch, d.2))
        .collect();
    let smt = smt.filter(|_| keep >= rest.len() + smt_points);
    let p = &Params {
        seconds,
        ..p.clone()
    };
    let smt_res = match smt {
        Some((sib, sep)) => {
            let c = cfg(Cipher::Gcm, 1, p.batch, true);
            let mut pair = |what: &str, cpus: (usize, usize)| -> Result<f64> {
                let g = pinned_pair(cpus, keys, c, p.seconds)?;
                pb.inc(1);
                let mut row = point_row(
                    what,
                    cfg(Cipher::Gcm, 2, p.batch, true),
                    1,
                    &Point::default(),
                );
                row[6] = f3(g);
                row[7] = String::new();
                row[8] = String::new();
                logged(row)?;
                Ok(g)
            };
            let a = pair("smt-siblings", sib)?;
            let b = pair("smt-separate", sep)?;
            Some((sib, sep, a, b))
        }
        None => None,
    };
    // The order cost at each worker count: (workers, in order, as finished).
    let order_each: Vec<(usize, Point, Point)> = if p.order_each {
        p.workers
            .iter()
            .filter_map(|&w| {
                if w == top {
                    return Some((w, ordered, unordered));
                }
                let un = done
                    .iter()
                    .find(|d| d.0 == "order-each" && d.1.workers == w)?;
                let or = done
                    .iter()
                    .find(|d| d.0 == "scaling" && d.1.cipher == Cipher::Gcm && d.1.workers == w)?;
                Some((w, or.2, un.2))
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(Measured {
        scaling,
        ordered,
        unordered,
        grouping,
        smt: smt_res,
        order_each,
    })
}

/// The runs' seconds and how many of `rest` (then the SMT pair) fit in the budget `b`, given
/// that the first point took `t1` s; and the note that says so.
fn fit_points(
    p: &Params,
    b: f64,
    t1: f64,
    rest: &[(&str, Config)],
    smt_points: usize,
) -> (f64, usize, String) {
    let windows = p.runs + 1;
    let overhead = t1 / windows as f64 - p.seconds;
    let f = super::fit_budget(
        b - t1,
        rest.len() + smt_points,
        windows,
        overhead,
        p.seconds,
    );
    let seconds = f.seconds;
    let keep = f.keep.max(2); // the order pair is always measured
    let over = if f.keep < 2 {
        "; the order pair, which is always measured, does not fit even so: over budget"
    } else {
        ""
    };
    let skipped: Vec<String> = rest
        .iter()
        .skip(keep)
        .map(|(what, c)| {
            format!(
                "{what} {} {}w batch {}",
                c.cipher.name(),
                c.workers,
                c.batch
            )
        })
        .chain((keep < rest.len() + smt_points && smt_points > 0).then(|| "the SMT pair".into()))
        .collect();
    let what = if skipped.is_empty() {
        "nothing skipped".to_owned()
    } else {
        format!("skipped {} point(s): {}", skipped.len(), skipped.join(", "))
    };
    let note = super::budget_note(b, t1, seconds, p.seconds, &what) + over;
    (seconds, keep, note)
}

/// Two CPUs for the SMT pair.
type CpuPair = (usize, usize);

/// What a run measured, for the report.
struct Measured {
    scaling: Vec<(Cipher, usize, Point)>,
    ordered: Point,
    unordered: Point,
    grouping: Vec<(Cipher, usize, Point)>,
    /// The sibling and separate CPU pairs and their Gbit/s.
    smt: Option<(CpuPair, CpuPair, f64, f64)>,
    /// The order cost at each worker count: (workers, in order, as finished).
    order_each: Vec<(usize, Point, Point)>,
}

/// The report's heading and its scaling section (paper 004's Table 1, Figures 8-9): the
/// scaling CSV's table and the chart.
fn report_scaling(
    out: &mut String,
    p: &Params,
    m: &Measured,
    cores: usize,
    budget_note: Option<&str>,
) -> (Table, Chart) {
    let ciphers = [Cipher::Gcm, Cipher::Ctr];
    let (backend, why) = sealink_crypto::suite::chosen_backend(SuiteId::Aes128Gcm);
    let _ = writeln!(
        out,
        "sealink-lab bench tunnel-cores: paper 004's multicore figures, {PACKET}-byte packets sealed in process through the tunnel's engine (sealink_engine::Pipeline)"
    );
    if p.quick {
        let _ = writeln!(out, "QUICK MODE: short runs, not a measurement");
    }
    let _ = writeln!(
        out,
        "machine: {} ({cores} cores); AEAD backend {backend} ({why}); AES-CTR: aws-lc-rs",
        record::cpu_model()
    );
    let _ = writeln!(
        out,
        "median of {} runs of {} s after a warm-up; payload bytes only (Gbit/s = 10^9 bit/s); batches of {} packets unless stated; workers = engine threads + the submitting thread, which helps",
        p.runs, p.seconds, p.batch
    );
    if let Some(note) = &budget_note {
        let _ = writeln!(out, "{note}");
    }
    let _ = writeln!(
        out,
        "paper 004 figures: only the values its text states are shown (our copy of the paper is text only, so nothing is read off its plots)\n"
    );

    // Figure 8/9 and Table 1: throughput against workers.
    let _ = writeln!(
        out,
        "### Throughput against workers (paper: Table 1, Figures 8-9)"
    );
    let mut t = Table::new([
        "workers",
        "cipher",
        "Gbit/s",
        "Mpps",
        "speedup",
        "paper 004 (AES-CTR, 2x Xeon 5530)",
    ]);
    let mut tc = Table::new(["workers", "cipher", "gbps", "mpps", "speedup"]);
    let mut chart = Chart::new(
        "tunnel-cores: throughput against workers (1400-byte packets)",
        "workers",
        "Gbit/s",
    );
    for &c in &ciphers {
        let rows: Vec<_> = m.scaling.iter().filter(|r| r.0 == c).collect();
        let base = rows
            .iter()
            .find(|r| r.1 == 1)
            .map_or(f64::NAN, |r| r.2.gbps);
        for r in &rows {
            let paper = match r.1 {
                1 => "0.8 Gb/s mono-thread (Table 1)",
                2..=7 => "linear in threads below 7 (Fig. 8, text)",
                8..=14 => "HT: falls, then rises from 13 (Fig. 9, text)",
                _ => "5.75 Gb/s at 15 threads, the best (Fig. 9, text)",
            };
            let sp = r.2.gbps / base;
            t.row([
                r.1.to_string(),
                c.name().into(),
                f3(r.2.gbps),
                f3(r.2.mpps),
                f3(sp),
                paper.into(),
            ]);
            tc.row([
                r.1.to_string(),
                c.name().into(),
                r.2.gbps.to_string(),
                r.2.mpps.to_string(),
                sp.to_string(),
            ]);
        }
        chart = chart.series(
            c.name(),
            rows.iter().map(|r| (r.1 as f64, r.2.gbps)).collect(),
        );
    }
    out.push_str(&t.markdown());

    (tc, chart)
}

/// The report's section on per-flow order: the order-each CSV's table.
fn report_order(out: &mut String, p: &Params, m: &Measured, top: usize) -> Table {
    let (ordered, unordered) = (m.ordered, m.unordered);
    // Order preservation.
    let _ = writeln!(
        out,
        "\n### Per-flow order kept against not (aes128-gcm, {top} workers; paper: section 4)"
    );
    let mut to = Table::new([
        "release",
        "Gbit/s",
        "Mpps",
        "batches out of order",
        "paper 004",
    ]);
    let cost = 1.0 - ordered.gbps / unordered.gbps;
    to.row([
        "in order (one lane: the tunnel's)".to_string(),
        f3(ordered.gbps),
        f3(ordered.mpps),
        format!("{:.1}%", ordered.out_of_order * 100.0),
        "ordered work stealing: speedup 6 on 8 processors (citing [12])".into(),
    ]);
    to.row([
        "as finished (a lane per batch)".to_string(),
        f3(unordered.gbps),
        f3(unordered.mpps),
        format!("{:.1}%", unordered.out_of_order * 100.0),
        "classic parallel: speedup 4 on 8 processors (citing [12])".into(),
    ]);
    out.push_str(&to.markdown());
    let _ = writeln!(
        out,
        "cost of keeping order: {:.1}% of the unordered throughput",
        cost * 100.0
    );
    let mut toe = Table::new([
        "workers",
        "in order Gbit/s",
        "as finished Gbit/s",
        "cost of keeping order",
    ]);
    for (w, or, un) in &m.order_each {
        toe.row([
            w.to_string(),
            f3(or.gbps),
            f3(un.gbps),
            format!("{:.1}%", (1.0 - or.gbps / un.gbps) * 100.0),
        ]);
    }
    if p.order_each {
        let _ = writeln!(
            out,
            "\nThe order cost at each worker count (aes128-gcm, batch {}; in order: the scaling row, or the pair above at {top}; counts a budget skipped are left out):",
            p.batch
        );
        out.push_str(&toe.markdown());
    }

    toe
}

/// The report's sections on packet grouping and hyper-thread siblings: their CSVs' tables.
fn report_grouping(
    out: &mut String,
    m: &Measured,
    top: usize,
    smt_skipped: bool,
) -> (Table, Table) {
    // Grouping.
    let _ = writeln!(
        out,
        "\n### Packet grouping: throughput against batch size ({top} workers; paper: Figures 11-12)"
    );
    let mut tg = Table::new(["batch (packets)", "cipher", "Gbit/s", "Mpps", "paper 004"]);
    let mut tgc = Table::new(["batch", "cipher", "gbps", "mpps"]);
    for (c, b, pt) in &m.grouping {
        tg.row([
            b.to_string(),
            c.name().into(),
            f3(pt.gbps),
            f3(pt.mpps),
            "CPU speed almost constant in buffer size (Fig. 12, text); time linear in data size (Fig. 11)".into(),
        ]);
        tgc.row([
            b.to_string(),
            c.name().into(),
            pt.gbps.to_string(),
            pt.mpps.to_string(),
        ]);
    }
    out.push_str(&tg.markdown());

    // Hyper-threading.
    let _ = writeln!(
        out,
        "\n### Hyper-thread siblings against separate cores (paper: Figures 9-10)"
    );
    let mut ts = Table::new(["placement", "cpus", "Gbit/s (2 threads, aes128-gcm)"]);
    match m.smt {
        Some((sib, sep, a, b)) => {
            ts.row([
                "siblings".to_string(),
                format!("{},{}", sib.0, sib.1),
                f3(a),
            ]);
            ts.row([
                "separate cores".to_string(),
                format!("{},{}", sep.0, sep.1),
                f3(b),
            ]);
            out.push_str(&ts.markdown());
            let _ = writeln!(out, "siblings / separate: {:.3}", a / b);
        }
        None if smt_skipped => {
            let _ = writeln!(out, "skipped for the budget");
        }
        None => {
            let _ = writeln!(out, "no SMT siblings on this machine");
        }
    }
    let _ = writeln!(
        out,
        "paper 004 (text): with 9 threads on 8 cores, six threads take about 36 s, one 45-50 s and two near 70 s (Fig. 10); with 15 the times are uniform; 16 or more threads gain nothing"
    );

    (tgc, ts)
}

#[allow(clippy::too_many_arguments)]
fn write_files(
    dir: &Path,
    scaling: &Table,
    grouping: &Table,
    chart: &Chart,
    order: (&Point, &Point),
    points: &[(Cipher, usize, Point)],
    smt: &Table,
    order_each: &Table,
) -> Result<(PathBuf, PathBuf)> {
    let mut rec = RunRecord::new("tunnel-cores");
    rec.file(POINTS_FILE);
    let csv = rec.write_csv(dir, "tunnel-cores.csv", scaling)?;
    rec.write_csv(dir, "tunnel-cores-batch.csv", grouping)?;
    if !smt.is_empty() {
        rec.write_csv(dir, "tunnel-cores-smt.csv", smt)?;
    }
    if !order_each.is_empty() {
        rec.write_csv(dir, "tunnel-cores-order.csv", order_each)?;
    }
    rec.write_svg(dir, "tunnel-cores.svg", chart)?;
    for (c, w, pt) in points {
        rec.figure(format!("{} {w} workers", c.name()), pt.gbps, "Gbit/s");
    }
    rec.figure("aes128-gcm ordered", order.0.gbps, "Gbit/s");
    rec.figure("aes128-gcm unordered", order.1.gbps, "Gbit/s");
    rec.figure(
        "order cost",
        (1.0 - order.0.gbps / order.1.gbps) * 100.0,
        "%",
    );
    Ok((csv, rec.write(dir)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run stopped after its first point (as a kill would stop it) leaves that point in
    /// tunnel-cores-points.csv, and none of the final files.
    #[test]
    fn a_stopped_run_keeps_the_points_it_measured() {
        let out = std::env::temp_dir().join(format!("sealink-tc-stop-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let p = Params {
            workers: vec![1, 2],
            batches: vec![8],
            batch: 8,
            seconds: 0.01,
            runs: 1,
            quick: true,
            out: out.clone(),
            budget: None,
            order_each: false,
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
        let out = std::env::temp_dir().join(format!("sealink-tc-budget-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let p = Params {
            workers: vec![1, 2],
            batches: vec![1, 8, 32],
            batch: 8,
            seconds: 0.05,
            runs: 1,
            quick: true,
            out: out.clone(),
            budget: Some(0.001),
            order_each: false,
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
        let out = std::env::temp_dir().join(format!("sealink-tc-oe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let p = Params {
            workers: vec![1, 2, 3],
            batches: vec![8],
            batch: 8,
            seconds: 0.01,
            runs: 1,
            quick: true,
            out: out.clone(),
            budget: None,
            order_each: true,
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
