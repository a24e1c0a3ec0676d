//! The five message traces of paper 002 (Table 3), generated from fitted distributions.
//!
//! The paper gives, per trace, only the mean message size and the mean interarrival time
//! (Table 3), plus a few shape hints: TCP holds "a large number of single-character messages",
//! the file-server traces move 8-kbyte pages (Figure 5's peaks), acknowledgements and writes to
//! remote disk are the typical non-urgent messages (section 2.3). Where it is silent we chose:
//!
//! * Sizes: each protocol is a two-part mixture, a small part (TCP: half 1-byte keystrokes, half
//!   acknowledgements uniform in 20..=120 B; ND: requests uniform in 32..=128 B; NFS: RPC calls
//!   and replies uniform in 64..=256 B) and a bulk part (TCP: segments uniform in 512..=1024 B;
//!   ND and NFS: an 8192-byte page plus a header uniform in 0..=64 B, so sizes above a page are
//!   continuous for policy U1's threshold). The bulk share is solved so the mean hits Table 3.
//! * Arrivals: each component is a hyperexponential (two-phase) process with squared
//!   coefficient of variation 4, a common model of bursty LAN traffic; the paper gives no shape.
//! * Merges: ND+NFS superposes an ND and an NFS stream, ALL superposes a TCP stream and an
//!   ND+NFS stream. In the paper these components came from the ALL trace's busiest server, not
//!   from the standalone traces (ND+NFS's mean, 1891 B, is below both standalone means), so the
//!   merged traces re-solve the page share; the shares of messages follow the Table 3 rates (ND
//!   1/11 ms against NFS 1/50 ms) and, for ALL, the mean sizes (TCP 219 B against ND+NFS 1891 B).
//! * Rates: every trace is rescaled to its Table 3 mean interarrival time, as the paper varied
//!   each trace's rate "while the ratios between any two interarrival times were kept constant".
//! * Low priority (policies U2, U3): acknowledgements and page writes (half of the pages).

use sealink_proto::sim::SimRng;

/// Paper 002's traces (Table 2, factor W).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceKind {
    All,
    Tcp,
    Nd,
    Nfs,
    NdNfs,
}

impl TraceKind {
    pub const EVERY: [TraceKind; 5] = [
        TraceKind::All,
        TraceKind::Tcp,
        TraceKind::Nd,
        TraceKind::Nfs,
        TraceKind::NdNfs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TraceKind::All => "ALL",
            TraceKind::Tcp => "TCP",
            TraceKind::Nd => "ND",
            TraceKind::Nfs => "NFS",
            TraceKind::NdNfs => "ND+NFS",
        }
    }

    /// Table 3: mean message size (B), mean interarrival time (ms), nominal timeout M (ms),
    /// mean ADP message size (B), T (kB/s), L (ms).
    pub fn paper(self) -> PaperRow {
        let (size, gap, m, adp, t, l) = match self {
            TraceKind::All => (1166.0, 4.0, 40.0, 6247.0, 750.0, 11.0),
            TraceKind::Tcp => (219.0, 2.0, 40.0, 2104.0, 180.0, 8.0),
            TraceKind::Nd => (2339.0, 11.0, 100.0, 11073.0, 986.0, 18.0),
            TraceKind::Nfs => (1897.0, 50.0, 100.0, 3382.0, 740.0, 13.0),
            TraceKind::NdNfs => (1891.0, 10.0, 60.0, 10332.0, 960.0, 11.0),
        };
        PaperRow {
            mean_size: size,
            interarrival_ms: gap,
            timeout_ms: m,
            adp_size: adp,
            t_kbs: t,
            l_ms: l,
        }
    }
}

/// One row of the paper's Table 3.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaperRow {
    pub mean_size: f64,
    pub interarrival_ms: f64,
    pub timeout_ms: f64,
    pub adp_size: f64,
    pub t_kbs: f64,
    pub l_ms: f64,
}

/// The protocol a message belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Nd,
    Nfs,
}

/// One message of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Msg {
    /// Arrival at the sending module, seconds from the trace's start.
    pub at: f64,
    pub size: usize,
    pub proto: Proto,
    /// An acknowledgement or a page write (the paper's non-urgent examples).
    pub low_priority: bool,
}

/// A generated trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub kind: TraceKind,
    pub msgs: Vec<Msg>,
}

impl Trace {
    pub fn mean_size(&self) -> f64 {
        self.msgs.iter().map(|m| m.size as f64).sum::<f64>() / self.msgs.len().max(1) as f64
    }
    /// Mean interarrival time in seconds.
    pub fn mean_interarrival(&self) -> f64 {
        match (self.msgs.first(), self.msgs.last()) {
            (Some(f), Some(l)) if self.msgs.len() > 1 => {
                (l.at - f.at) / (self.msgs.len() - 1) as f64
            }
            _ => 0.0,
        }
    }
    pub fn total_bytes(&self) -> u64 {
        self.msgs.iter().map(|m| m.size as u64).sum()
    }
}

/// The largest message a trace holds (a page plus its header).
pub const MAX_SIZE: usize = PAGE + PAGE_HEADER_MAX;
const PAGE: usize = 8192;
const PAGE_HEADER_MAX: usize = 64;
/// Squared coefficient of variation of the interarrival times.
const ARRIVAL_SCV: f64 = 4.0;

/// Small and bulk parts of a protocol's size mixture, with their means.
struct Mix {
    proto: Proto,
    small_mean: f64,
    bulk_mean: f64,
}

const TCP: Mix = Mix {
    proto: Proto::Tcp,
    small_mean: 0.5 * 1.0 + 0.5 * 70.0,
    bulk_mean: 768.0,
};
const ND: Mix = Mix {
    proto: Proto::Nd,
    small_mean: 80.0,
    bulk_mean: PAGE as f64 + PAGE_HEADER_MAX as f64 / 2.0,
};
const NFS: Mix = Mix {
    proto: Proto::Nfs,
    small_mean: 160.0,
    bulk_mean: PAGE as f64 + PAGE_HEADER_MAX as f64 / 2.0,
};

impl Mix {
    fn draw(&self, rng: &mut SimRng, bulk_share: f64) -> (usize, bool) {
        let uniform = |rng: &mut SimRng, lo: u64, hi: u64| (lo + rng.below(hi - lo + 1)) as usize;
        if rng.unit() < bulk_share {
            match self.proto {
                Proto::Tcp => (uniform(rng, 512, 1024), false),
                // Half the pages are writes to the server: low priority.
                Proto::Nd | Proto::Nfs => (
                    PAGE + uniform(rng, 0, PAGE_HEADER_MAX as u64),
                    rng.chance(0.5),
                ),
            }
        } else {
            match self.proto {
                Proto::Tcp if rng.chance(0.5) => (1, false),
                Proto::Tcp => (uniform(rng, 20, 120), true),
                Proto::Nd => (uniform(rng, 32, 128), false),
                // RPC replies are acknowledgements of the calls: half are low priority.
                Proto::Nfs => (uniform(rng, 64, 256), rng.chance(0.5)),
            }
        }
    }
}

/// One component stream: a protocol, its bulk share, and its share of the messages.
struct Part {
    mix: &'static Mix,
    bulk_share: f64,
    msg_share: f64,
}

/// The bulk share that makes a set of parts (with a common share) reach `target` mean size.
fn solve_bulk(parts: &[(&'static Mix, f64)], target: f64) -> f64 {
    let small: f64 = parts.iter().map(|(m, w)| w * m.small_mean).sum();
    let bulk: f64 = parts.iter().map(|(m, w)| w * m.bulk_mean).sum();
    ((target - small) / (bulk - small)).clamp(0.0, 1.0)
}

fn parts(kind: TraceKind) -> Vec<Part> {
    let one = |mix: &'static Mix, target: f64| {
        vec![Part {
            mix,
            bulk_share: solve_bulk(&[(mix, 1.0)], target),
            msg_share: 1.0,
        }]
    };
    // ND+NFS: message shares by the standalone traces' rates (1/11 ms and 1/50 ms).
    let nd_share = (1.0 / TraceKind::Nd.paper().interarrival_ms)
        / (1.0 / TraceKind::Nd.paper().interarrival_ms
            + 1.0 / TraceKind::Nfs.paper().interarrival_ms);
    let nd_nfs = |scale: f64| {
        let target = TraceKind::NdNfs.paper().mean_size;
        let b = solve_bulk(&[(&ND, nd_share), (&NFS, 1.0 - nd_share)], target);
        vec![
            Part {
                mix: &ND,
                bulk_share: b,
                msg_share: nd_share * scale,
            },
            Part {
                mix: &NFS,
                bulk_share: b,
                msg_share: (1.0 - nd_share) * scale,
            },
        ]
    };
    match kind {
        TraceKind::Tcp => one(&TCP, TraceKind::Tcp.paper().mean_size),
        TraceKind::Nd => one(&ND, TraceKind::Nd.paper().mean_size),
        TraceKind::Nfs => one(&NFS, TraceKind::Nfs.paper().mean_size),
        TraceKind::NdNfs => nd_nfs(1.0),
        TraceKind::All => {
            // TCP's share of messages that gives ALL's mean from TCP's and ND+NFS's means.
            let (all, tcp, file) = (
                TraceKind::All.paper().mean_size,
                TraceKind::Tcp.paper().mean_size,
                TraceKind::NdNfs.paper().mean_size,
            );
            let tcp_share = (file - all) / (file - tcp);
            let mut v = one(&TCP, tcp);
            v[0].msg_share = tcp_share;
            v.extend(nd_nfs(1.0 - tcp_share));
            v
        }
    }
}

/// One hyperexponential interarrival time with mean `mean` and squared CV [`ARRIVAL_SCV`]
/// (balanced means).
fn h2(rng: &mut SimRng, mean: f64) -> f64 {
    let p = 0.5 * (1.0 + ((ARRIVAL_SCV - 1.0) / (ARRIVAL_SCV + 1.0)).sqrt());
    let rate = if rng.unit() < p {
        2.0 * p / mean
    } else {
        2.0 * (1.0 - p) / mean
    };
    // 1 - unit() is in (0, 1]: the logarithm is finite.
    -(1.0 - rng.unit()).ln() / rate
}

/// Generates `n` messages of `kind`, rescaled to the paper's mean interarrival time.
pub fn generate(kind: TraceKind, n: usize, seed: u64) -> Trace {
    let mut msgs = Vec::with_capacity(n + 8);
    for (i, part) in parts(kind).iter().enumerate() {
        // Each component its own stream, so changing one does not shift the others' draws.
        let mut rng = SimRng::new(seed ^ (0x5EED_0000 + i as u64).wrapping_mul(0x9E37_79B9));
        // Expected count share*n over one time unit per message.
        let count = ((part.msg_share * n as f64).ceil() as usize).max(1) + 8;
        let mean_gap = 1.0 / part.msg_share;
        let mut t = 0.0;
        for _ in 0..count {
            t += h2(&mut rng, mean_gap);
            let (size, low_priority) = part.mix.draw(&mut rng, part.bulk_share);
            msgs.push(Msg {
                at: t,
                size,
                proto: part.mix.proto,
                low_priority,
            });
        }
    }
    msgs.sort_by(|a, b| a.at.total_cmp(&b.at));
    msgs.truncate(n);
    // Start at zero and rescale to Table 3's mean interarrival time.
    let first = msgs.first().map_or(0.0, |m| m.at);
    let span = msgs.last().map_or(0.0, |m| m.at) - first;
    let target = kind.paper().interarrival_ms / 1000.0 * (n.max(2) - 1) as f64;
    let scale = if span > 0.0 { target / span } else { 0.0 };
    for m in &mut msgs {
        m.at = (m.at - first) * scale;
    }
    Trace { kind, msgs }
}

/// The same trace with every time divided by `factor` (arrival rate R times `factor`).
pub fn speed_up(trace: &Trace, factor: f64) -> Trace {
    let mut t = trace.clone();
    for m in &mut t.msgs {
        m.at /= factor;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_match_table_3() {
        for kind in TraceKind::EVERY {
            let t = generate(kind, 10_000, 7);
            let p = kind.paper();
            assert_eq!(t.msgs.len(), 10_000);
            let size = t.mean_size();
            assert!(
                (size / p.mean_size - 1.0).abs() < 0.06,
                "{}: mean size {size} against {}",
                kind.name(),
                p.mean_size
            );
            let gap = t.mean_interarrival() * 1000.0;
            assert!(
                (gap / p.interarrival_ms - 1.0).abs() < 1e-9,
                "{}: interarrival {gap} ms against {}",
                kind.name(),
                p.interarrival_ms
            );
            assert!(t.msgs.windows(2).all(|w| w[0].at <= w[1].at));
            assert!(t.msgs.iter().all(|m| (1..=MAX_SIZE).contains(&m.size)));
        }
    }

    #[test]
    fn arrivals_are_bursty_and_all_mixes_protocols() {
        let t = generate(TraceKind::All, 10_000, 3);
        let gaps: Vec<f64> = t.msgs.windows(2).map(|w| w[1].at - w[0].at).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        // A superposition of H2 streams: burstier than Poisson (SCV 1).
        assert!(var / (mean * mean) > 1.5, "scv {}", var / (mean * mean));
        let tcp = t.msgs.iter().filter(|m| m.proto == Proto::Tcp).count() as f64 / 1e4;
        assert!((tcp - 0.434).abs() < 0.05, "TCP share {tcp}");
        assert!(t.msgs.iter().any(|m| m.proto == Proto::Nd));
        assert!(t.msgs.iter().any(|m| m.proto == Proto::Nfs));
    }

    #[test]
    fn seeds_replay_and_differ() {
        assert_eq!(
            generate(TraceKind::Nd, 500, 1),
            generate(TraceKind::Nd, 500, 1)
        );
        assert_ne!(
            generate(TraceKind::Nd, 500, 1),
            generate(TraceKind::Nd, 500, 2)
        );
    }
}
