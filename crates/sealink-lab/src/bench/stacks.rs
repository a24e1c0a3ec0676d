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

mod paper;

use paper::{PaperPoint, Point, Read};

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

/// The distribution-free confidence interval of the median: the widest symmetric pair of order
/// statistics whose binomial coverage reaches `CONFIDENCE` (min..max if none does).
fn estimate(values: &[f64]) -> Estimate {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return Estimate {
            median: f64::NAN,
            lo: f64::NAN,
            hi: f64::NAN,
        };
    }
    let (lo, hi) = ci_ranks(n);
    Estimate {
        median: median(&v),
        lo: v[lo],
        hi: v[hi],
    }
}

/// 0-based ranks (lo, hi) of the interval [x_(j), x_(n-j+1)] (1-based) with the largest j whose
/// coverage P(j <= B <= n - j), B ~ Bin(n, 1/2), is at least `CONFIDENCE`.
fn ci_ranks(n: usize) -> (usize, usize) {
    let pmf = |i: usize| -> f64 {
        // C(n, i) / 2^n, in logs to stay finite for large n.
        let ln_c: f64 = (1..=i)
            .map(|k| ((n - i + k) as f64).ln() - (k as f64).ln())
            .sum();
        (ln_c - n as f64 * std::f64::consts::LN_2).exp()
    };
    let mut best = (0, n - 1);
    for j in 1..=n / 2 {
        let cover: f64 = (j..=n - j).map(pmf).sum();
        if cover >= CONFIDENCE {
            best = (j - 1, n - j);
        } else {
            break;
        }
    }
    best
}

/// Fresh keys for a stack's channels (one key pair per channel, random secret).
fn channels(stack: &Stack, n: usize, serial_ns: u64) -> Result<Vec<Channel>> {
    (0..n)
        .map(|i| {
            let mut secret = [0u8; 32];
            sealink_crypto::sign::random_bytes(&mut secret).map_err(Error::Random)?;
            let key = Arc::new(kdf::derive_packet_key(
                stack.suite,
                &secret,
                b"bench stacks",
                true,
            )?);
            secret.fill(0);
            Ok(
                Channel::new(Arc::clone(&key), key, 0x5EA1_0000 + i as u32, stack.scope)
                    .with_insecure_plaintext(stack.scope == Scope::None)
                    .with_serial_ns(serial_ns),
            )
        })
        .collect()
}

/// What the drivers feed into the engine.
enum Source {
    /// Send side: packets filled with random bytes, re-sealed as fast as they come back.
    Send { size: usize },
    /// Receive side: per channel a pool of real datagrams sealed beforehand, replayed in order
    /// (the device copies each into the packet buffer; the window restarts at each wrap).
    Recv { pools: Vec<Vec<Arc<[u8]>>> },
}

/// One engine, driven in a closed loop: `windows` consecutive windows of `window` each, the
/// first a warm-up. Returns the payload Mbit/s of the timed windows.
#[allow(clippy::too_many_arguments)]
fn drive(
    engine: &mut dyn Engine,
    source: &Source,
    nchan: usize,
    size: usize,
    chunk: usize,
    workers: usize,
    window: Duration,
    windows: usize,
) -> Result<Vec<f64>> {
    let op = match source {
        Source::Send { .. } => Op::Seal,
        Source::Recv { .. } => Op::Open,
    };
    // Enough batches in flight to keep every worker busy while the caller releases output.
    let per_chan = (2 * workers + 2).div_ceil(nchan).max(1);
    let mut cursors = vec![0usize; nchan];
    let mut rng = SimRng::new(random_seed()?);
    let mut next_batch = |c: usize, mut packets: Vec<Packet>, engine: &mut dyn Engine| {
        match source {
            Source::Send { size } => {
                for p in &mut packets {
                    p.len = *size;
                    p.status = Ok(());
                }
            }
            Source::Recv { pools } => {
                let pool = &pools[c];
                if cursors[c] == 0 {
                    engine.restart_replay_window(c);
                }
                for p in &mut packets {
                    engines::set_device(p, Arc::clone(&pool[cursors[c]]));
                    p.status = Ok(());
                    cursors[c] = (cursors[c] + 1) % pool.len();
                }
            }
        }
        engine.submit(op, c, packets);
    };
    for c in 0..nchan {
        for _ in 0..per_chan {
            let packets: Vec<Packet> = (0..chunk)
                .map(|_| {
                    let mut buf = vec![0u8; HEADER_ROOM + size + 32];
                    fill(&mut rng, &mut buf);
                    Packet::new(buf, size)
                })
                .collect();
            next_batch(c, packets, engine);
        }
    }
    let mut rates = Vec::with_capacity(windows);
    let mut start = Instant::now();
    let mut count = 0u64;
    let mut failure = None;
    while rates.len() < windows {
        let b = engine
            .recv()
            .ok_or_else(|| Error::bench("the engine returned nothing"))?;
        if let Some(p) = b.packets.iter().find(|p| p.status.is_err()) {
            failure = Some(p.status);
            break;
        }
        black_box(&b.packets[0].buf[..16]);
        count += b.packets.len() as u64;
        let now = Instant::now();
        let el = now - start;
        if el >= window {
            rates.push(count as f64 * size as f64 * 8.0 / el.as_secs_f64() / 1e6);
            count = 0;
            start = now;
        }
        next_batch(b.channel, b.packets, engine);
    }
    while engine.recv().is_some() {}
    if let Some(Err(e)) = failure {
        return Err(Error::bench(format!(
            "a packet was dropped by the engine: {}",
            e.name()
        )));
    }
    Ok(rates.split_off(1.min(rates.len())))
}

fn sealed_pools(
    chans: &[Channel],
    size: usize,
    per_chan: usize,
    chunk: usize,
    workers: usize,
) -> Result<Vec<Vec<Arc<[u8]>>>> {
    // At least twice the packets in flight, a whole number of batches.
    let inflight = (2 * workers + 2).div_ceil(chans.len()).max(1) * chunk;
    let n = (2 * inflight).max(per_chan).div_ceil(chunk) * chunk;
    let mut rng = SimRng::new(random_seed()?);
    chans
        .iter()
        .map(|ch| {
            let mut ch = ch.clone();
            let mut ps: Vec<Packet> = (0..n)
                .map(|_| {
                    let mut body = vec![0u8; size];
                    fill(&mut rng, &mut body);
                    Packet::with_body(&body, 32)
                })
                .collect();
            seal_serial(&mut ch, &mut ps);
            ps.iter()
                .map(|p| {
                    p.status
                        .map(|()| Arc::from(p.wire()))
                        .map_err(|e| Error::bench(format!("sealing the pool failed: {}", e.name())))
                })
                .collect()
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EngineKind {
    Plp(usize),
    Clp(ClpPolicy),
    Layered,
}

/// Builds an engine for `stack` on `nchan` fresh channels and drives it.
fn measure(
    stack: &Stack,
    kind: EngineKind,
    op: Op,
    nchan: usize,
    chunk: usize,
    p: &Params,
    windows: usize,
) -> Result<Vec<f64>> {
    let chans = channels(stack, nchan, p.serial_ns)?;
    let workers = match kind {
        EngineKind::Plp(w) => w,
        EngineKind::Clp(ClpPolicy::ProcessorPerConnection(w)) => w,
        EngineKind::Clp(ClpPolicy::ThreadPerConnection) => nchan,
        EngineKind::Layered => 2,
    };
    let source = match op {
        Op::Seal => Source::Send { size: p.packet },
        Op::Open => Source::Recv {
            pools: sealed_pools(&chans, p.packet, 4 * chunk, chunk, workers)?,
        },
    };
    let mut engine: Box<dyn Engine> = match kind {
        EngineKind::Plp(w) => Box::new(Plp::new(chans, w)),
        EngineKind::Clp(policy) => Box::new(Clp::new(chans, policy)),
        EngineKind::Layered => Box::new(Layered::new(chans)),
    };
    drive(
        engine.as_mut(),
        &source,
        nchan,
        p.packet,
        chunk,
        workers,
        Duration::from_secs_f64(p.seconds),
        windows,
    )
    .map_err(|e| Error::bench_by(format!("{} ({kind:?}, {})", stack.name, side_name(op)), e))
}

/// The raw library's seal rate (AES-128-GCM, one thread, same packet size), Mbit/s per window.
fn raw_seal_rate(p: &Params) -> Result<Vec<f64>> {
    let mut key = [0u8; 16];
    sealink_crypto::sign::random_bytes(&mut key).map_err(Error::Random)?;
    let k = RawAead::new(SuiteId::Aes128Gcm, &key)?;
    let mut buf = vec![0u8; p.packet + raw::TAG_LEN];
    fill(&mut SimRng::new(random_seed()?), &mut buf);
    let aad = [0u8; HEADER_ROOM];
    let mut counter = 0u64;
    let window = Duration::from_secs_f64(p.seconds);
    let mut rates = Vec::new();
    for _ in 0..=p.runs {
        let (n, d) = super::timed::<()>(window, CHUNK as u64, || {
            let mut nonce = [0u8; raw::NONCE_LEN];
            nonce[4..].copy_from_slice(&counter.to_le_bytes());
            counter += 1;
            let (data, tag_room) = buf.split_at_mut(p.packet);
            let tag = k.seal_in_place(nonce, &aad, data);
            tag_room.copy_from_slice(&tag);
            black_box(&buf);
            Ok(())
        })
        .map_err(|()| Error::bench("raw seal failed"))?;
        rates.push(n as f64 * p.packet as f64 * 8.0 / d.as_secs_f64() / 1e6);
    }
    Ok(rates.split_off(1))
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

fn amdahl(f: f64, n: f64) -> f64 {
    1.0 / (f + (1.0 - f) / n)
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

/// Paper 000's projection for every PLP curve but the baseline's. The serial step's ceiling is
/// the baseline stack's best PLP rate on the same side: framing only, so nearly all its time per
/// packet is the engine's serial path (the driver, counters, lane hand-off and release), as
/// the paper's 200 Mb/s was the TCP/IP stack's locked component. The best rate is a floor on the
/// ceiling (the serial step alone is no slower), so the bottleneck counts are floors too. The
/// rate one worker adds is each stack's own rate at N workers over N (the paper's MD5
/// arithmetic). Empty without the baseline stack in the run.
fn projections(curves: &[Curve]) -> Result<Vec<Projection>> {
    let mut out = Vec::new();
    for op in [Op::Seal, Op::Open] {
        let plp = |c: &&Curve| c.op == op && c.mode == Mode::Plp;
        let Some(base) = curves
            .iter()
            .filter(plp)
            .find(|c| c.stack.name == "baseline")
        else {
            continue;
        };
        let (ceiling_at, ceiling) = base
            .points
            .iter()
            .enumerate()
            .map(|(i, e)| (i + 1, e.median))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .ok_or_else(|| Error::bench("the baseline curve has no point"))?;
        for c in curves
            .iter()
            .filter(plp)
            .filter(|c| c.stack.name != "baseline")
        {
            let n = c.points.len();
            let method =
                SerialCeiling::new(ceiling, c.points[0].median, c.points[n - 1].median, n)?;
            out.push(Projection {
                stack: c.stack.name,
                op,
                ceiling_at,
                method,
                measured: (1..=n).map(|w| c.speedup(w).median).collect(),
                paper: c
                    .stack
                    .paper
                    .filter(|_| op == Op::Seal)
                    .map_or("", |i| PAPER_PROJECTION[i]),
            });
        }
    }
    Ok(out)
}

/// The projections as a table (CSV and report alike).
fn projection_table(p: &Params, rows: &[Projection]) -> Table {
    let mut head: Vec<String> = "stack,side,packet_bytes,ceiling_mbps,ceiling_at_workers,serial_us_per_packet,workers,per_worker_mbps,parallel_us_per_packet_per_worker,bottleneck_workers,measured_speedup,projected_speedup"
        .split(',')
        .map(String::from)
        .collect();
    head.extend(PROJECT_AT.map(|n| format!("projected_speedup_{n}")));
    head.push("paper_1996".into());
    let mut t = Table::new(head).left(&[0, 1, 10, 11, 16]);
    for r in rows {
        let (serial, par) = r.method.per_packet_us(p.packet);
        let list = |v: &mut dyn Iterator<Item = f64>| {
            v.map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(";")
        };
        let n = r.measured.len();
        let mut row = vec![
            r.stack.to_owned(),
            side_name(r.op).to_owned(),
            p.packet.to_string(),
            format!("{:.1}", r.method.ceiling()),
            r.ceiling_at.to_string(),
            format!("{serial:.4}"),
            n.to_string(),
            format!("{:.1}", r.method.per_processor()),
            format!("{par:.3}"),
            format!("{:.1}", r.method.bottleneck_processors()),
            list(&mut r.measured.iter().copied()),
            list(&mut (1..=n).map(|w| r.method.speedup(w as f64))),
        ];
        row.extend(PROJECT_AT.map(|n| format!("{:.2}", r.method.speedup(n))));
        row.push(r.paper.to_owned());
        t.row(row);
    }
    t
}

/// The report's section on paper 000's projection method.
fn projection_report(p: &Params, t: &Table) -> String {
    let mut out = String::from(
        "\n### PROJECTION by paper 000's own method (a prediction, not a measurement)\n\n",
    );
    if t.is_empty() {
        out.push_str("(needs the baseline stack and at least one other stack in --stacks)\n");
        return out;
    }
    let _ = writeln!(
        out,
        "Paper 000, section 4.1: the serial (locked) step caps the throughput (there 200 Mb/s), so a stack bottlenecks at that ceiling divided by the rate one processor adds (MD5: 200 / (18 x 8 / 12) = 16.7, \"about 16\"). Here, applied to this run's measurements: the ceiling is the baseline stack's best PLP rate on the same side (framing only: its time per packet is the engine's serial path and little else, so the ceiling and the bottleneck counts are floors); the rate one worker adds is the stack's own rate at {n} workers / {n}. Projected speedup = min(n x per-worker rate, ceiling) / rate at 1 worker, beside the measured speedups at 1..{n} workers. Counts above this machine's workers are the paper's method, not measured.\n",
        n = p.workers
    );
    out.push_str(&t.markdown());
    out
}

/// The serial step's ceiling for paper 001's projection in `bench crypto`: the baseline stack
/// (framing only) through the PLP engine at one worker, send side, `packet`-byte payloads;
/// Mbit/s of each timed run (one warm-up run first).
pub(crate) fn baseline_plp_send(packet: usize, seconds: f64, runs: usize) -> Result<Vec<f64>> {
    let base = &STACKS[0];
    let p = Params {
        workers: 1,
        packet,
        seconds,
        runs,
        out: PathBuf::new(),
        stacks: vec![base],
        quick: false,
        batch: CHUNK,
        budget: None,
        serial_ns: 0,
    };
    validate(&p)?;
    measure(base, EngineKind::Plp(1), Op::Seal, 1, CHUNK, &p, runs + 1)
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

/// One measured point as a row of [`POINTS_FILE`].
#[allow(clippy::too_many_arguments)]
fn point_row(
    experiment: &str,
    stack: &str,
    side: &str,
    engine: &str,
    channels: usize,
    workers: usize,
    p: &Params,
    batch: usize,
    rates: &[f64],
) -> Vec<String> {
    let e = estimate(rates);
    let each: Vec<String> = rates.iter().map(|r| format!("{r:.3}")).collect();
    vec![
        experiment.to_owned(),
        stack.to_owned(),
        side.to_owned(),
        engine.to_owned(),
        channels.to_string(),
        workers.to_string(),
        p.packet.to_string(),
        batch.to_string(),
        rates.len().to_string(),
        format!("{:.3}", e.median),
        format!("{:.3}", e.lo),
        format!("{:.3}", e.hi),
        each.join(";"),
    ]
}

/// Runs the bench, writes CSV and SVG files into `p.out` and prints the tables.
pub fn run(p: &Params) -> Result<()> {
    run_with(p, &mut |_| Ok(()))
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
    let cores = record::cores();
    let nw = p.workers;
    let windows = p.runs + 1;
    let connections = &figure11_connections(p.quick, nw)[..];
    let many_runs = p.runs.min(3);
    let ops = [Op::Seal, Op::Open];
    let modes = [Mode::Plp, Mode::Clp];
    let steps = 1 + p.stacks.len() as u64
        * (ops.len() * modes.len() * nw + ops.len() + connections.len() * 2) as u64;
    let pb = output::progress(steps, "bench stacks");
    let result = (|| -> Result<String> {
        // The raw rate is measured right before the aes128-gcm PLP send point at one worker, so
        // that the two see the same machine load (or at the end without that stack).
        let mut raw = None;
        let mut curves = Vec::new();
        let mut layered = Vec::new();
        let mut many = Vec::new();
        // What a --budget changes after the first point: the seconds of each run, the stacks.
        let mut cur = p.clone();
        let mut keep_stacks = p.stacks.len();
        let mut budget_note = None;
        let t0 = Instant::now();
        // After the first stack, which is measured whole, the budget is also held to as the
        // run goes: a stack's cost is known only once it ran (a slow cipher's windows take
        // long to drain at many workers, which the first point does not show). A stack is not
        // started when the costliest so far would not fit in what is left, and one that runs
        // past the budget is abandoned (its points stay in POINTS_FILE, not in the report).
        let mut stack_secs: Vec<f64> = Vec::new();
        let mut late_note: Option<String> = None;
        let past_budget =
            |si: usize| si > 0 && p.budget.is_some_and(|b| t0.elapsed().as_secs_f64() > b);
        for (si, &stack) in p.stacks.iter().enumerate() {
            if si >= keep_stacks {
                continue;
            }
            if let Some(b) = p.budget
                && si > 0
            {
                let longest = stack_secs.iter().copied().fold(0.0, f64::max);
                let now = t0.elapsed().as_secs_f64();
                if now + longest > b {
                    keep_stacks = si;
                    late_note = Some(format!(
                        "{} not started: {now:.1} s gone, and a stack took up to {longest:.1} s",
                        stack.name
                    ));
                    continue;
                }
            }
            let ts = Instant::now();
            let abandoned = 'stack: {
                for op in ops {
                    for mode in modes {
                        let mut points = Vec::new();
                        for w in 1..=nw {
                            let kind = match mode {
                                Mode::Plp => EngineKind::Plp(w),
                                Mode::Clp => EngineKind::Clp(ClpPolicy::ProcessorPerConnection(w)),
                            };
                            if stack.name == "aes128-gcm"
                                && op == Op::Seal
                                && kind == EngineKind::Plp(1)
                            {
                                let r = raw_seal_rate(&cur)?;
                                raw = Some(estimate(&r));
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
                            }
                            let r = measure(
                                stack,
                                kind,
                                op,
                                mode.channels(nw),
                                p.batch,
                                &cur,
                                windows,
                            )?;
                            points.push(estimate(&r));
                            logged(point_row(
                                "scaling",
                                stack.name,
                                side_name(op),
                                mode.name(),
                                mode.channels(nw),
                                w,
                                p,
                                p.batch,
                                &r,
                            ))?;
                            pb.inc(1);
                            if let (Some(b), None) = (p.budget, &budget_note) {
                                // Fitted once, after the first point: every window is taken to
                                // cost what the first point's did beyond its timed length.
                                let t1 = t0.elapsed().as_secs_f64();
                                let overhead = t1 / windows as f64 - p.seconds;
                                let per_stack = (ops.len() * modes.len() * nw + ops.len())
                                    * windows
                                    + connections.len() * 2 * (many_runs + 1);
                                let first_left = per_stack - windows;
                                let total = first_left + (p.stacks.len() - 1) * per_stack + windows;
                                let f = super::fit_budget(b - t1, total, 1, overhead, p.seconds);
                                cur.seconds = f.seconds;
                                keep_stacks = (1 + f.keep.saturating_sub(first_left + windows)
                                    / per_stack)
                                    .min(p.stacks.len());
                                let skipped: Vec<&str> =
                                    p.stacks[keep_stacks..].iter().map(|s| s.name).collect();
                                budget_note = Some(format!(
                                    "budget: {b} s; the first point took {t1:.2} s; runs of the other points {}; {}",
                                    if cur.seconds < p.seconds {
                                        format!(
                                            "shortened from {} s to {:.3} s",
                                            p.seconds, cur.seconds
                                        )
                                    } else {
                                        format!("kept at {} s", p.seconds)
                                    },
                                    if skipped.is_empty() {
                                        "no stack skipped".to_owned()
                                    } else {
                                        format!("skipped the stacks {}", skipped.join(", "))
                                    }
                                ));
                                if f.keep < first_left + windows {
                                    if let Some(n) = budget_note.as_mut() {
                                        n.push_str(
                                        "; the first stack, which is measured whole, does not fit even so: over budget",
                                    );
                                    }
                                }
                            }
                            if past_budget(si) {
                                break 'stack true;
                            }
                        }
                        curves.push(Curve {
                            stack,
                            op,
                            mode,
                            points,
                        });
                    }
                    let r = measure(stack, EngineKind::Layered, op, 1, p.batch, &cur, windows)?;
                    layered.push((stack, op, estimate(&r)));
                    logged(point_row(
                        "layered",
                        stack.name,
                        side_name(op),
                        "layered",
                        1,
                        2,
                        p,
                        p.batch,
                        &r,
                    ))?;
                    pb.inc(1);
                    if past_budget(si) {
                        break 'stack true;
                    }
                }
                for &n in connections {
                    for policy in [
                        ClpPolicy::ThreadPerConnection,
                        ClpPolicy::ProcessorPerConnection(nw),
                    ] {
                        let r = measure(
                            stack,
                            EngineKind::Clp(policy),
                            Op::Seal,
                            n,
                            CHUNK_MANY,
                            &cur,
                            many_runs + 1,
                        )?;
                        many.push((stack, n, policy, estimate(&r)));
                        let threads = match policy {
                            ClpPolicy::ThreadPerConnection => n,
                            ClpPolicy::ProcessorPerConnection(w) => w,
                        };
                        logged(point_row(
                            "connections",
                            stack.name,
                            "send",
                            policy_name(policy),
                            n,
                            threads,
                            p,
                            CHUNK_MANY,
                            &r,
                        ))?;
                        pb.inc(1);
                        if past_budget(si) {
                            break 'stack true;
                        }
                    }
                }
                false
            };
            if abandoned {
                keep_stacks = si;
                curves.retain(|c| !std::ptr::eq(c.stack, stack));
                layered.retain(|(s, _, _)| !std::ptr::eq(*s, stack));
                many.retain(|(s, ..)| !std::ptr::eq(*s, stack));
                late_note = Some(format!(
                    "{} abandoned after {:.1} s of it, past the budget at {:.1} s (its points so far are in {POINTS_FILE} only)",
                    stack.name,
                    ts.elapsed().as_secs_f64(),
                    t0.elapsed().as_secs_f64()
                ));
                continue;
            }
            stack_secs.push(ts.elapsed().as_secs_f64());
        }
        if let (Some(late), Some(note)) = (&late_note, budget_note.as_mut()) {
            let skipped: Vec<&str> = p.stacks[keep_stacks..].iter().map(|s| s.name).collect();
            let _ = write!(
                note,
                "; held to as the run went: {late}; measured {}, skipped {}",
                p.stacks[..keep_stacks]
                    .iter()
                    .map(|s| s.name)
                    .collect::<Vec<_>>()
                    .join(", "),
                skipped.join(", ")
            );
        }
        let raw = match raw {
            Some(r) => r,
            None => {
                let r = raw_seal_rate(&cur)?;
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
                estimate(&r)
            }
        };
        // The report describes what ran: the runs' seconds after any budget, the stacks kept.
        let p = &Params {
            seconds: cur.seconds,
            stacks: p.stacks[..keep_stacks].to_vec(),
            ..p.clone()
        };
        let mut out = render(p, cores, raw, &curves, &layered, &many, many_runs);
        if let Some(note) = &budget_note {
            let _ = writeln!(out, "\n{note}");
        }
        // The projection before the comparison, which ends the report.
        let proj = projection_table(p, &projections(&curves)?);
        out.push_str(&projection_report(p, &proj));
        out.push_str(&paper_comparison(p, &curves, &many));
        let json = write_files(p, raw, &curves, &layered, &many, &proj, &out)?;
        let _ = writeln!(
            out,
            "\nreport: {}\nrun record: {}",
            p.out.join(REPORT_FILE).display(),
            json.display()
        );
        Ok(out)
    })();
    pb.finish_and_clear();
    output::print(&result?)
}

fn policy_name(p: ClpPolicy) -> &'static str {
    match p {
        ClpPolicy::ThreadPerConnection => "thread-per-connection",
        ClpPolicy::ProcessorPerConnection(_) => "processor-per-connection",
    }
}

/// Writes the report `report` (stacks.md), the CSV files, the SVG plots and the run record
/// stacks.json into `p.out`.
fn write_files(
    p: &Params,
    raw: Estimate,
    curves: &[Curve],
    layered: &[(&Stack, Op, Estimate)],
    many: &[(&Stack, usize, ClpPolicy, Estimate)],
    projection: &Table,
    report: &str,
) -> Result<PathBuf> {
    let dir = &p.out;
    let mut rec = RunRecord::new("stacks");
    rec.file(POINTS_FILE);
    rec.write_text(dir, REPORT_FILE, report)?;
    let f3 = |v: f64| format!("{v:.3}");
    let est = |e: Estimate| [f3(e.median), f3(e.lo), f3(e.hi)];

    let mut t = Table::new("stack,side,mode,channels,workers,packet_bytes,runs,mbps_median,mbps_ci90_lo,mbps_ci90_hi,speedup,speedup_ci90_lo,speedup_ci90_hi".split(','));
    for c in curves {
        for w in 1..=c.points.len() {
            let sp = c.speedup(w);
            let mut r = vec![
                c.stack.name.to_owned(),
                side_name(c.op).to_owned(),
                c.mode.name().to_owned(),
                c.mode.channels(p.workers).to_string(),
                w.to_string(),
                p.packet.to_string(),
                p.runs.to_string(),
            ];
            r.extend(est(c.points[w - 1]));
            r.extend([sp.median, sp.lo, sp.hi].map(|v| format!("{v:.4}")));
            t.row(r);
        }
        let what = format!("{} {} {}", c.stack.name, side_name(c.op), c.mode.name());
        rec.figure(format!("{what} 1w"), c.points[0].median, "Mbit/s");
        rec.figure(
            format!("{what} speedup @{}w", c.points.len()),
            c.speedup(c.points.len()).median,
            "x",
        );
    }
    rec.write_csv(dir, "scaling.csv", &t)?;

    let mut t = Table::new("stack,side,mode,us_per_packet,incremental_us_over_baseline".split(','));
    for c in curves {
        let base = curves
            .iter()
            .find(|b| b.stack.name == "baseline" && b.op == c.op && b.mode == c.mode)
            .map(|b| b.us_per_packet(p.packet));
        let us = c.us_per_packet(p.packet);
        t.row([
            c.stack.name.to_owned(),
            side_name(c.op).to_owned(),
            c.mode.name().to_owned(),
            f3(us),
            base.map_or(String::new(), |b| f3(us - b)),
        ]);
    }
    rec.write_csv(dir, "latency.csv", &t)?;

    let mut head = ["stack", "side", "mode", "serial_fraction", "amdahl_ceiling"]
        .map(String::from)
        .to_vec();
    head.extend(PROJECT_AT.map(|n| format!("projected_{n}")));
    let mut t = Table::new(head);
    for c in curves {
        if let Some(f) = c.serial_fraction() {
            let mut r = vec![
                c.stack.name.to_owned(),
                side_name(c.op).to_owned(),
                c.mode.name().to_owned(),
                format!("{f:.4}"),
                format!("{:.1}", if f > 0.0 { 1.0 / f } else { f64::INFINITY }),
            ];
            r.extend(PROJECT_AT.map(|n| format!("{:.2}", amdahl(f, n))));
            t.row(r);
        }
    }
    rec.write_csv(dir, "serial_fraction.csv", &t)?;
    if !projection.is_empty() {
        rec.write_csv(dir, PROJECTION_FILE, projection)?;
    }

    let mut t = Table::new(
        "stack,policy,connections,threads,mbps_median,mbps_ci90_lo,mbps_ci90_hi".split(','),
    );
    for (stack, n, policy, e) in many {
        let threads = match policy {
            ClpPolicy::ThreadPerConnection => *n,
            ClpPolicy::ProcessorPerConnection(w) => *w,
        };
        let mut r = vec![
            stack.name.to_owned(),
            policy_name(*policy).to_owned(),
            n.to_string(),
            threads.to_string(),
        ];
        r.extend(est(*e));
        t.row(r);
    }
    rec.write_csv(dir, "connections.csv", &t)?;

    let mut t = Table::new("stack,side,layered_mbps,layered_ci90_lo,layered_ci90_hi".split(','));
    for (stack, op, e) in layered {
        let mut r = vec![stack.name.to_owned(), side_name(*op).to_owned()];
        r.extend(est(*e));
        t.row(r);
    }
    rec.write_csv(dir, "layered.csv", &t)?;

    let mut t =
        Table::new("library,suite,packet_bytes,mbps_median,mbps_ci90_lo,mbps_ci90_hi".split(','));
    let mut r = vec![
        RawAead::LIBRARY.to_owned(),
        "aes128-gcm".to_owned(),
        p.packet.to_string(),
    ];
    r.extend(est(raw));
    t.row(r);
    rec.write_csv(dir, "raw.csv", &t)?;
    rec.figure("raw library seal, aes128-gcm", raw.median, "Mbit/s");

    // Plots: throughput (log scale) and speedup (with the ideal line) vs workers.
    for op in [Op::Seal, Op::Open] {
        for mode in [Mode::Plp, Mode::Clp] {
            let sel: Vec<&Curve> = curves
                .iter()
                .filter(|c| c.op == op && c.mode == mode)
                .collect();
            let tag = format!("{}-{}", mode.name().to_lowercase(), side_name(op));
            let mut thr = Chart::new(
                format!(
                    "{} {}-side throughput ({} channel(s), {} B packets)",
                    mode.name(),
                    side_name(op),
                    mode.channels(p.workers),
                    p.packet
                ),
                "workers",
                "Mbit/s (log)",
            )
            .log_y();
            let mut sp = Chart::new(
                format!("{} {}-side speedup", mode.name(), side_name(op)),
                "workers",
                "speedup",
            )
            .ideal();
            for c in sel {
                let ws = 1..=c.points.len();
                thr = thr.series(
                    c.stack.name,
                    ws.clone()
                        .map(|w| (w as f64, c.points[w - 1].median))
                        .collect(),
                );
                sp = sp.series(
                    c.stack.name,
                    ws.map(|w| (w as f64, c.speedup(w).median)).collect(),
                );
            }
            rec.write_svg(dir, &format!("throughput-{tag}.svg"), &thr)?;
            rec.write_svg(dir, &format!("speedup-{tag}.svg"), &sp)?;
        }
    }
    let mut conn = Chart::new(
        "CLP send side, many connections (tpc: thread per connection, ppc: processor per connection)",
        "connections",
        "Mbit/s (log)",
    )
    .log_y();
    for s in &p.stacks {
        for pol in [
            ClpPolicy::ThreadPerConnection,
            ClpPolicy::ProcessorPerConnection(p.workers),
        ] {
            let pts = many
                .iter()
                .filter(|m| m.0.name == s.name && m.2 == pol)
                .map(|m| (m.1 as f64, m.3.median))
                .collect();
            let short = match pol {
                ClpPolicy::ThreadPerConnection => "tpc",
                ClpPolicy::ProcessorPerConnection(_) => "ppc",
            };
            conn = conn.series(format!("{} {short}", s.name), pts);
        }
    }
    rec.write_svg(dir, "connections.svg", &conn)?;
    rec.write(dir)
}

/// A markdown table (text in the first column and the columns `left`, numbers elsewhere) and
/// the blank line after it.
fn table(out: &mut String, head: &[&str], rows: &[Vec<String>], left: &[usize]) {
    let mut t = Table::new(head.iter().copied()).left(left);
    for r in rows {
        t.row(r.iter().cloned());
    }
    out.push_str(&t.markdown());
    out.push('\n');
}

fn fmt_mbps(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn fmt_est(e: Estimate) -> String {
    format!(
        "{} [{}, {}]",
        fmt_mbps(e.median),
        fmt_mbps(e.lo),
        fmt_mbps(e.hi)
    )
}

#[allow(clippy::too_many_arguments)]
/// Figure 11's pairs for one stack: (connections, thread-per-connection,
/// processor-per-connection), for each connection count measured under both.
fn tpc_ppc(
    many: &[(&Stack, usize, ClpPolicy, Estimate)],
    name: &str,
) -> Vec<(usize, Estimate, Estimate)> {
    let mut conns: Vec<usize> = many
        .iter()
        .filter(|m| m.0.name == name)
        .map(|m| m.1)
        .collect();
    conns.dedup();
    let get = |n: usize, tpc: bool| {
        many.iter()
            .find(|m| {
                m.0.name == name && m.1 == n && matches!(m.2, ClpPolicy::ThreadPerConnection) == tpc
            })
            .map(|m| m.3)
    };
    conns
        .into_iter()
        .filter_map(|n| Some((n, get(n, true)?, get(n, false)?)))
        .collect()
}

fn render(
    p: &Params,
    cores: usize,
    raw: Estimate,
    curves: &[Curve],
    layered: &[(&Stack, Op, Estimate)],
    many: &[(&Stack, usize, ClpPolicy, Estimate)],
    many_runs: usize,
) -> String {
    let nw = p.workers;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "sealink-lab bench stacks: paper 000 (Nahum et al. 1996) rerun on this machine ({cores} cores available), {} B packets",
        p.packet
    );
    let _ = writeln!(
        out,
        "each point: median of {} timed runs of {} s after a warm-up run, [90% order-statistics CI of the median; with fewer than 5 runs: min, max]",
        p.runs, p.seconds
    );
    let _ = writeln!(
        out,
        "PLP: 1 channel, packet-level engine; CLP: {} channels (the paper's {CLP_CHANNELS}, or one per worker where there are more), processor-per-connection; batches of {} packets; Mbit/s = 10^6 bit/s of payload",
        clp_channels(p.workers),
        p.batch
    );
    if p.serial_ns > 0 {
        let _ = writeln!(
            out,
            "serial step: {} ns added to each packet's counter (send) and replay check (receive), a busy wait under the channel's lock (--serial-ns; paper 000's locked TCP/IP step took 164 us per 4 KiB packet at its 200 Mb/s)",
            p.serial_ns
        );
    }
    let _ = writeln!(
        out,
        "send: packets of random bytes (fresh seed per run) sealed as fast as possible; recv: a pool of real datagrams sealed beforehand, copied in by the in-memory device, opened and replay-checked"
    );
    let _ = writeln!(out, "output files: {}", p.out.display());
    let _ = writeln!(out);
    let _ = writeln!(out, "stacks:");
    for s in &p.stacks {
        let _ = writeln!(out, "- {}: {}", s.name, s.layers);
    }
    let _ = writeln!(out);

    // Throughput and speedup.
    let _ = writeln!(out, "### Throughput and speedup (paper 000 figures 3-10)\n");
    let mut head: Vec<String> = vec!["stack".into(), "side".into(), "mode".into()];
    for w in 1..=nw {
        head.push(format!("{w}w Mbit/s"));
    }
    head.push(format!("speedup @{nw}w"));
    head.push("1996: 1 proc Mb/s".into());
    head.push("1996: speedup @12".into());
    let rows: Vec<Vec<String>> = curves
        .iter()
        .map(|c| {
            let mut r = vec![
                c.stack.name.to_owned(),
                side_name(c.op).to_owned(),
                c.mode.name().to_owned(),
            ];
            for e in &c.points {
                r.push(fmt_est(*e));
            }
            let sp = c.speedup(nw);
            r.push(format!("{:.2} [{:.2}, {:.2}]", sp.median, sp.lo, sp.hi));
            let paper = c.stack.paper.map(|i| {
                let us = match (c.mode, c.op) {
                    (Mode::Plp, Op::Seal) => PAPER[i].1,
                    (Mode::Plp, Op::Open) => PAPER[i].2,
                    (Mode::Clp, Op::Seal) => PAPER[i].3,
                    (Mode::Clp, Op::Open) => PAPER[i].4,
                };
                let quoted = paper::find(i, c.op, c.mode, Point::OneProc)
                    .map_or(String::new(), |q| format!(" (text: {})", q.short));
                (format!("{:.1}{quoted}", 4096.0 * 8.0 / us), i)
            });
            match paper {
                Some((m, i)) => {
                    r.push(m);
                    r.push(
                        paper::find(i, c.op, c.mode, Point::Speedup)
                            .map_or("-", |q| q.short)
                            .to_owned(),
                    );
                }
                None => {
                    r.push("-".into());
                    r.push("-".into());
                }
            }
            r
        })
        .collect();
    let head_ref: Vec<&str> = head.iter().map(String::as_str).collect();
    table(&mut out, &head_ref, &rows, &[1, 2]);
    let _ = writeln!(
        out,
        "1996 columns: 12-processor SGI Challenge (100 MHz R4400), TCP stacks, 4 KiB packets; 1-processor Mb/s derived from Tables 1-2 latencies (4096 B x 8 / usec), speedups as the text states them (see \"Paper 000's figures beside ours\" at the end).\n"
    );

    // Latency breakdown.
    for (mode, name) in [(Mode::Plp, "Table 1 (PLP)"), (Mode::Clp, "Table 2 (CLP)")] {
        let _ = writeln!(
            out,
            "### Latency breakdown, {name}: usec per packet at one worker, incremental cost over the baseline\n"
        );
        let find = |stack: &str, op: Op| {
            curves
                .iter()
                .find(|c| c.stack.name == stack && c.op == op && c.mode == mode)
                .map(|c| c.us_per_packet(p.packet))
        };
        let rows: Vec<Vec<String>> = p
            .stacks
            .iter()
            .map(|s| {
                let mut r = vec![s.name.to_owned()];
                for op in [Op::Seal, Op::Open] {
                    let us = find(s.name, op);
                    let base = find("baseline", op);
                    r.push(us.map_or("-".into(), |v| format!("{v:.2}")));
                    r.push(match (us, base) {
                        (Some(u), Some(b)) if s.name != "baseline" => format!("{:.2}", u - b),
                        _ => String::new(),
                    });
                }
                match s.paper {
                    Some(i) => {
                        let (ps, pr) = match mode {
                            Mode::Plp => (PAPER[i].1, PAPER[i].2),
                            Mode::Clp => (PAPER[i].3, PAPER[i].4),
                        };
                        let (bs, br) = match mode {
                            Mode::Plp => (PAPER[0].1, PAPER[0].2),
                            Mode::Clp => (PAPER[0].3, PAPER[0].4),
                        };
                        let inc = |v: f64, b: f64| {
                            if i == 0 {
                                String::new()
                            } else {
                                format!("{:.0}", v - b)
                            }
                        };
                        r.push(PAPER[i].0.to_owned());
                        r.push(format!("{ps:.0}"));
                        r.push(inc(ps, bs));
                        r.push(format!("{pr:.0}"));
                        r.push(inc(pr, br));
                    }
                    None => r.extend(std::iter::repeat_n(String::from("-"), 5)),
                }
                r
            })
            .collect();
        table(
            &mut out,
            &[
                "stack",
                "send us",
                "inc",
                "recv us",
                "inc",
                "1996 stack",
                "1996 send us",
                "inc",
                "1996 recv us",
                "inc",
            ],
            &rows,
            &[5],
        );
    }

    // Many connections.
    let _ = writeln!(
        out,
        "### CLP send side, thread-per-connection vs processor-per-connection ({nw} threads), paper 000 figure 11 (median of {many_runs} runs, batches of {CHUNK_MANY})\n"
    );
    let mut rows = Vec::new();
    for s in &p.stacks {
        for (n, t, q) in tpc_ppc(many, s.name) {
            rows.push(vec![
                s.name.to_owned(),
                n.to_string(),
                fmt_est(t),
                fmt_est(q),
                format!("{:.2}", t.median / q.median),
            ]);
        }
    }
    table(
        &mut out,
        &[
            "stack",
            "connections",
            "thread-per-conn Mbit/s",
            "processor-per-conn Mbit/s",
            "tpc/ppc",
        ],
        &rows,
        &[],
    );

    // Serial fraction and projections.
    let _ = writeln!(
        out,
        "### Serial fraction (Amdahl fit to the measured speedups at 1..{nw} workers) and PROJECTED speedups\n"
    );
    let rows: Vec<Vec<String>> = curves
        .iter()
        .filter_map(|c| {
            let f = c.serial_fraction()?;
            let mut r = vec![
                c.stack.name.to_owned(),
                side_name(c.op).to_owned(),
                c.mode.name().to_owned(),
                format!("{f:.3}"),
                if f > 0.0 {
                    format!("{:.0}", 1.0 / f)
                } else {
                    "unbounded".into()
                },
            ];
            for n in PROJECT_AT {
                r.push(format!("{:.1}", amdahl(f, n)));
            }
            r.push(
                c.stack
                    .paper
                    .filter(|_| c.mode == Mode::Plp && c.op == Op::Seal)
                    .map_or("", |i| PAPER_PROJECTION[i])
                    .to_owned(),
            );
            Some(r)
        })
        .collect();
    if rows.is_empty() {
        let _ = writeln!(out, "(needs at least 2 workers)\n");
    } else {
        table(
            &mut out,
            &[
                "stack",
                "side",
                "mode",
                "serial fraction f",
                "ceiling 1/f",
                "proj. @12",
                "proj. @16",
                "proj. @64",
                "proj. @128",
                "1996 estimate",
            ],
            &rows,
            &[1, 2, 9],
        );
        let _ = writeln!(
            out,
            "Projections are Amdahl's law S(n) = 1 / (f + (1 - f) / n) with f fitted on this {cores}-core machine: extrapolations, not measurements. With only 2 workers, f is the deviation of one speedup from 2 and is sensitive to noise from other load on the machine.\n"
        );
    }

    // Layered.
    let _ = writeln!(
        out,
        "### Layered pipeline (one thread per layer: framing, crypto; output on the caller), 1 channel, vs PLP at {nw} workers\n"
    );
    let rows: Vec<Vec<String>> = layered
        .iter()
        .map(|(s, op, e)| {
            let plp = curves
                .iter()
                .find(|c| c.stack.name == s.name && c.op == *op && c.mode == Mode::Plp)
                .map(|c| c.points[nw - 1]);
            vec![
                s.name.to_owned(),
                side_name(*op).to_owned(),
                fmt_est(*e),
                plp.map_or("-".into(), fmt_est),
            ]
        })
        .collect();
    table(
        &mut out,
        &[
            "stack",
            "side",
            "layered Mbit/s",
            &format!("PLP {nw}w Mbit/s"),
        ],
        &rows,
        &[1],
    );

    // Targets.
    let _ = writeln!(out, "### Targets (issue 3)\n");
    let _ = writeln!(
        out,
        "raw library seal rate ({}, aes128-gcm, {} B, one thread): {} Mbit/s",
        RawAead::LIBRARY,
        p.packet,
        fmt_est(raw)
    );
    match curves
        .iter()
        .find(|c| c.stack.name == "aes128-gcm" && c.op == Op::Seal && c.mode == Mode::Plp)
    {
        Some(c) => {
            let ratio = c.points[0].median / raw.median;
            let _ = writeln!(
                out,
                "aes128-gcm PLP send, 1 worker / raw: {ratio:.3} (target >= {TARGET_RAW_RATIO}): {}",
                if ratio >= TARGET_RAW_RATIO {
                    "met"
                } else {
                    "NOT met"
                }
            );
            if nw >= 2 {
                let s = c.speedup(2);
                let _ = writeln!(
                    out,
                    "aes128-gcm PLP send, speedup at 2 workers: {:.3} [{:.2}, {:.2}] (target >= {TARGET_SPEEDUP}): {}",
                    s.median,
                    s.lo,
                    s.hi,
                    if s.median >= TARGET_SPEEDUP {
                        "met"
                    } else {
                        "NOT met"
                    }
                );
            }
        }
        None => {
            let _ = writeln!(out, "aes128-gcm not measured: targets not evaluated");
        }
    }
    out
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

/// "Paper 000's figures beside ours": every point of `paper::POINTS` this run measured, in
/// figure order, with our figure of the same quantity and the ratio, then the sentences of the
/// paper the values rest on.
fn paper_comparison(
    p: &Params,
    curves: &[Curve],
    many: &[(&Stack, usize, ClpPolicy, Estimate)],
) -> String {
    let nw = p.workers;
    let procs = paper::PROCESSORS as f64;
    let mut rows: Vec<Beside> = Vec::new();
    for c in curves {
        let Some(i) = c.stack.paper else { continue };
        if let Some(at) = paper::find(i, c.op, c.mode, Point::OneProc) {
            rows.push(Beside {
                at,
                stack: c.stack,
                point: "1 proc; ours 1 worker".into(),
                quantity: "Mbit/s",
                paper: at.value,
                paper_text: at.short.to_owned(),
                ours: c.points[0].median,
            });
        }
        if nw >= 2
            && let Some(at) = paper::find(i, c.op, c.mode, Point::Speedup)
        {
            let sp = c.speedup(nw).median;
            let per = at.value.map(|v| v / procs);
            rows.push(Beside {
                at,
                stack: c.stack,
                point: format!("{} procs; ours {nw} workers", paper::PROCESSORS),
                quantity: "speedup / processors",
                paper: per,
                paper_text: match per {
                    // "~1 (~12 of 12, linear)", "~0.67 (~8 of 12)".
                    Some(_) if at.read == Read::Ideal => format!(
                        "~1 ({} of {}, linear)",
                        at.short.trim_end_matches(" (linear)"),
                        paper::PROCESSORS
                    ),
                    Some(v) => format!("~{v:.2} ({} of {})", at.short, paper::PROCESSORS),
                    None => format!("speedup {}", at.short),
                },
                ours: sp / nw as f64,
            });
        }
    }
    for s in &p.stacks {
        let Some(i) = s.paper else { continue };
        for (n, t, q) in tpc_ppc(many, s.name) {
            let (t, q) = (t.median, q.median);
            let kind = Point::TpcOverPpc { at_12: n == 12 };
            if let Some(at) = paper::find(i, Op::Seal, Mode::Clp, kind) {
                rows.push(Beside {
                    at,
                    stack: s,
                    point: format!("{n} conns"),
                    quantity: "tpc / ppc",
                    paper: at.value,
                    paper_text: at.short.to_owned(),
                    ours: t / q,
                });
            }
        }
    }
    rows.sort_by_key(|r| r.at.figure);

    let mut out = String::new();
    let _ = writeln!(out, "\n### Paper 000's figures beside ours\n");
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "(no stack of paper 000 was measured: add baseline, md5, des-md5 or 3des-md5 to --stacks)\n"
        );
        return out;
    }
    // Each quoted sentence once, numbered in order of first use.
    let mut sources: Vec<&'static str> = Vec::new();
    let mut t = Table::new([
        "figure",
        "stack (1996 stack)",
        "side",
        "mode",
        "point",
        "quantity",
        "paper 1996",
        "ours",
        "ours / paper",
        "source",
    ])
    .left(&[1, 2, 3, 4, 5, 6, 9]);
    for r in &rows {
        let k = match sources.iter().position(|q| *q == r.at.says) {
            Some(k) => k,
            None => {
                sources.push(r.at.says);
                sources.len() - 1
            }
        };
        t.row([
            format!("Fig. {}", r.at.figure),
            format!("{} ({})", r.stack.name, PAPER[r.at.stack].0),
            side_name(r.at.op).to_owned(),
            r.at.mode.name().to_owned(),
            r.point.clone(),
            r.quantity.to_owned(),
            r.paper_text.clone(),
            crate::report::fmt_sig(r.ours),
            r.paper
                .map_or("-".to_owned(), |v| crate::report::fmt_sig(r.ours / v)),
            format!("sec. {} [{}]", r.at.section, k + 1),
        ]);
    }
    out.push_str(&t.markdown());
    out.push('\n');
    let _ = writeln!(
        out,
        "How to read it: the paper's copy is text only (no plots), so \"paper 1996\" is what its text says about each figure, not a value measured off a plot. \"~8\" is a number the text prints (good to its last digit); \"~12 (linear)\" and \"~1\" are the ideal values the text calls \"essentially linear\" or a difference that \"disappears\" (read to about 10%); \"~11\" for DES is derived from two stated numbers; words (\"minimal\", \"good\") have no ratio. The table is kept in crates/sealink-lab/src/bench/stacks/paper.rs."
    );
    let _ = writeln!(
        out,
        "Speedups are compared per processor, since the paper had {} processors and this run {nw} worker(s): speedup at {} / {}, against ours at {nw} / {nw}. Figure 11's processor-per-connection ran {} threads in 1996 and {nw} here, so ours are not equal at 12 connections as the paper's are (there both schemes had 12 threads). The 1996 stacks are TCP/IP in the x-kernel; ours are datagram framing plus the same class of cryptography.\n",
        paper::PROCESSORS,
        paper::PROCESSORS,
        paper::PROCESSORS,
        paper::PROCESSORS
    );
    let _ = writeln!(out, "Sources (paper 000, by section):\n");
    for (k, q) in sources.iter().enumerate() {
        let _ = writeln!(out, "{}. {q}", k + 1);
    }
    out.push('\n');
    out
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
        let out = std::env::temp_dir().join(format!("sealink-stacks-stop-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
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
        let out =
            std::env::temp_dir().join(format!("sealink-stacks-budget-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
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
