//! `sealink-lab bench allowed-ips` (issue 50): the per-packet cost of cryptokey routing, the
//! [`AllowedIps::lookup`] that the tunnel core does for every packet read from the TUN device
//! (which peer gets it) and for every packet a peer sends (is its source routed to that peer),
//! at 100, 10,000 and 100,000 prefixes.
//!
//! Each table holds N IPv4 prefixes in 10.0.0.0/8, as a hub's config has them: in `hub`, 99% are
//! random /32s and 1% shorter prefixes of 8, 12, 16, 20 and 24 bits (five lengths in use, as a
//! site-to-site hub may have); in `all-lengths`, the worst case of the structure (one hash probe
//! per prefix length in use, longest first), every length from /1 to /32 is in use. The
//! destinations looked up, 65,536 of them visited in turn, are half configured /32 hosts, a
//! quarter inside the shorter prefixes and a quarter random IPv4 addresses (mostly misses,
//! which probe every length in use). The sizes are timed in turn within each round (after
//! one warm-up round), and the table gives the median, the fastest and the slowest round.

use std::fmt::Write as _;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sealink_proto::sim::SimRng;
use sealink_proto::tunnel::{AllowedIps, IpNet};

use super::{median, print_with_files, random_seed, timed};
use crate::error::Result;
use crate::report::{RunRecord, Table, record};

/// Destinations per table, visited in turn (a power of two).
const DESTS: usize = 1 << 16;
/// Lookups between two reads of the clock.
const BATCH: u64 = 4096;

/// Parameters of `sealink-lab bench allowed-ips`.
#[derive(Debug, Clone)]
pub struct Params {
    /// Prefix counts to measure.
    pub prefixes: Vec<usize>,
    pub seconds: f64,
    pub runs: usize,
    /// Seed of the prefixes and destinations (`None`: random, printed).
    pub seed: Option<u64>,
    pub out: PathBuf,
}

/// How the prefixes' lengths are spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spread {
    /// 99% /32s, 1% of /8, /12, /16, /20 and /24.
    Hub,
    /// Every length from /1 to /32 in use.
    AllLengths,
}

impl Spread {
    fn label(self) -> &'static str {
        match self {
            Spread::Hub => "hub",
            Spread::AllLengths => "all-lengths",
        }
    }
}

/// One table and the destinations to look up in it.
struct Case {
    n: usize,
    spread: Spread,
    table: AllowedIps,
    dests: Vec<IpAddr>,
    lengths: usize,
    hits: usize,
}

fn in_ten(rng: &mut SimRng) -> u32 {
    0x0A00_0000 | (rng.next_u64() as u32 & 0x00FF_FFFF)
}

fn build(n: usize, spread: Spread, rng: &mut SimRng) -> Case {
    let mut table = AllowedIps::default();
    let mut hosts = Vec::new();
    let mut shorter = Vec::new();
    let mut lens = std::collections::BTreeSet::new();
    let mut peer = 0usize;
    while table.len() < n {
        let i = table.len();
        let mut len: u8 = match spread {
            Spread::Hub if i % 100 == 99 => [8, 12, 16, 20, 24][(i / 100) % 5],
            Spread::Hub => 32,
            // The first 32 prefixes use every length once; then mostly /32s, as in a hub.
            Spread::AllLengths if i < 32 => i as u8 + 1,
            Spread::AllLengths if i % 100 == 99 => 1 + (rng.below(31) as u8),
            Spread::AllLengths => 32,
        };
        // A short prefix of 10.0.0.0/8 taken already (there is one /8, two /7s...) gives way to
        // a /32.
        let net = loop {
            let net = IpNet::new(IpAddr::V4(Ipv4Addr::from(in_ten(rng))), len)
                .expect("an IPv4 prefix of at most 32 bits");
            if table.owner(net).is_none() {
                break net;
            }
            len = 32;
        };
        table.insert(net, peer);
        peer += 1;
        lens.insert(len);
        if len == 32 {
            hosts.push(net.addr());
        } else {
            shorter.push(net);
        }
    }
    let dests: Vec<IpAddr> = (0..DESTS)
        .map(|i| match i % 4 {
            0 | 1 if !hosts.is_empty() => hosts[rng.below(hosts.len() as u64) as usize],
            2 if !shorter.is_empty() => {
                let s = shorter[rng.below(shorter.len() as u64) as usize];
                let IpAddr::V4(a) = s.addr() else {
                    unreachable!("IPv4 only")
                };
                let host_bits = (1u64 << (32 - s.prefix())) - 1;
                IpAddr::V4(Ipv4Addr::from(
                    u32::from(a) | (rng.next_u64() & host_bits) as u32,
                ))
            }
            _ => IpAddr::V4(Ipv4Addr::from(rng.next_u64() as u32)),
        })
        .collect();
    let hits = dests.iter().filter(|d| table.lookup(**d).is_some()).count();
    Case {
        n,
        spread,
        table,
        dests,
        lengths: lens.len(),
        hits,
    }
}

/// Nanoseconds per lookup over `seconds`.
fn time_case(c: &Case, seconds: f64) -> f64 {
    let mut i = 0usize;
    let mut sum = 0usize;
    let (iters, took) = timed::<()>(Duration::from_secs_f64(seconds), BATCH, || {
        let d = c.dests[i & (DESTS - 1)];
        i = i.wrapping_add(1);
        sum = sum.wrapping_add(black_box(&c.table).lookup(black_box(d)).unwrap_or(0));
        Ok(())
    })
    .expect("the lookup loop does not fail");
    black_box(sum);
    took.as_nanos() as f64 / iters as f64
}

struct Row {
    n: usize,
    spread: Spread,
    lengths: usize,
    hit_pct: f64,
    ns: Vec<f64>,
}

impl Row {
    fn med(&self) -> f64 {
        median(&self.ns)
    }
    fn min(&self) -> f64 {
        self.ns.iter().copied().fold(f64::INFINITY, f64::min)
    }
    fn max(&self) -> f64 {
        self.ns.iter().copied().fold(0.0, f64::max)
    }
}

const HEAD: &str =
    "prefixes,spread,lengths in use,hits %,ns/lookup median,fastest,slowest,M lookups/s";
const CSV_HEAD: &str = "prefixes,spread,lengths,hit_pct,ns_per_lookup_median,ns_per_lookup_min,ns_per_lookup_max,mlookups_per_s";

fn table(rows: &[Row], head: &str, num: fn(f64) -> String) -> Table {
    let mut t = Table::new(head.split(','));
    for r in rows {
        t.row(
            [
                r.n.to_string(),
                r.spread.label().to_owned(),
                r.lengths.to_string(),
            ]
            .into_iter()
            .chain([r.hit_pct, r.med(), r.min(), r.max(), 1e3 / r.med()].map(num)),
        );
    }
    t
}

fn write_files(dir: &Path, rows: &[Row]) -> Result<(PathBuf, PathBuf)> {
    let mut rec = RunRecord::new("allowed-ips");
    let csv = rec.write_csv(
        dir,
        "allowed-ips.csv",
        &table(rows, CSV_HEAD, |v| v.to_string()),
    )?;
    for r in rows {
        rec.figure(
            format!("{} prefixes ({}) lookup", r.n, r.spread.label()),
            r.med(),
            "ns",
        );
    }
    Ok((csv, rec.write(dir)?))
}

/// Runs the bench, prints the table and writes allowed-ips.csv and allowed-ips.json.
pub fn run(p: &Params) -> Result<()> {
    super::check_timing(p.seconds, p.runs)?;
    let seed = match p.seed {
        Some(s) => s,
        None => random_seed()?,
    };
    let mut rng = SimRng::new(seed);
    let mut cases = Vec::new();
    for spread in [Spread::Hub, Spread::AllLengths] {
        for &n in &p.prefixes {
            cases.push(build(n.max(1), spread, &mut rng));
        }
    }
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for round in 0..=p.runs {
        for (c, v) in cases.iter().zip(&mut ns) {
            let t = time_case(c, p.seconds);
            if round > 0 {
                v.push(t);
            }
        }
    }
    let rows: Vec<Row> = cases
        .iter()
        .zip(ns)
        .map(|(c, ns)| Row {
            n: c.n,
            spread: c.spread,
            lengths: c.lengths,
            hit_pct: 100.0 * c.hits as f64 / DESTS as f64,
            ns,
        })
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "sealink-lab bench allowed-ips: AllowedIps::lookup (cryptokey routing, once per packet each way), one thread; CPU: {}, {} cores; seed {seed}",
        record::cpu_model(),
        record::cores()
    );
    let _ = writeln!(
        out,
        "{DESTS} destinations visited in turn (1/2 configured /32 hosts, 1/4 inside shorter prefixes, 1/4 random IPv4 addresses); {} rounds of {} s per table, the tables in turn within each round, after one warm-up round",
        p.runs, p.seconds
    );
    let _ = writeln!(out);
    out.push_str(&table(&rows, HEAD, |v| format!("{v:.1}")).markdown());
    let (csv, json) = write_files(&p.out, &rows)?;
    print_with_files(out, &csv, &json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_hold_what_they_say_and_the_destinations_hit_them() {
        let mut rng = SimRng::new(7);
        let c = build(1000, Spread::Hub, &mut rng);
        assert_eq!(c.table.len(), 1000);
        assert_eq!(c.lengths, 6);
        // Half the destinations are configured hosts, a quarter inside shorter prefixes.
        assert!(c.hits >= DESTS * 3 / 4, "{} hits", c.hits);
        let a = build(200, Spread::AllLengths, &mut rng);
        assert_eq!(a.lengths, 32);
        assert!(time_case(&a, 0.001) > 0.0);
    }
}
