//! The experiments behind each table and figure, as [`Table`]s: Table 3 (the five traces at
//! nominal levels), Table 7 (urgency policies), Table 8 (E x Q) and Figure 6 (L against R).
//!
//! Nominal levels (Tables 1-3): E = PE, Q = ON, U = U3 (Table 7's U3 row equals Table 3's ALL
//! row), M from Table 3, 64 KB queue limit, hardware single-key crypto. T is measured with the
//! trace's arrivals compressed until the offered load is [`T_OVERLOAD`] times the wire's
//! bandwidth and each message handed over only when the sender's CPU is free (the sender never
//! idles); L is the mean latency of the urgent messages with the trace at its nominal rate,
//! open loop (with Q = OFF every message is urgent, as Table 7's last row says).

use std::time::Duration;

use indicatif::ProgressBar;

use super::format::{L_AND_T, Table, num, ratio};
use super::model::{Profile, Scope3, Tech};
use super::policy::{self, Policy};
use super::run::{RunResult, RunSpec, run};
use super::trace::{self, Msg, Proto, Trace, TraceKind};
use crate::error::{Error, Result};
use crate::report::Chart;

/// Offered load of a throughput run, in multiples of the wire's bandwidth.
pub const T_OVERLOAD: f64 = 20.0;
/// Figure 6's arrival rates, as multiples of the trace's nominal rate.
pub const FIG6_RATES: [f64; 7] = [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0];

/// Table 8 (ALL): L (ms) and T (kB/s) per E, for Q = ON and OFF.
const PAPER_T8: [(Scope3, [f64; 4]); 3] = [
    (Scope3::None, [11.0, 67.0, 760.0, 344.0]),
    (Scope3::Partial, [11.0, 101.0, 750.0, 328.0]),
    (Scope3::Full, [620.0, 4388.0, 350.0, 208.0]),
];
/// Table 7 (ALL): %, L (ms), T (kB/s) for U1-U5 and Q = OFF.
const PAPER_T7: [[f64; 3]; 6] = [
    [0.08, 8.0, 730.0],
    [3.0, 18.0, 600.0],
    [10.0, 11.0, 750.0],
    [19.0, 27.0, 450.0],
    [27.0, 60.0, 401.0],
    [100.0, 101.0, 328.0],
];

/// One experiment's inputs.
#[derive(Debug)]
pub struct Experiment<'a> {
    pub profile: Profile,
    pub seed: u64,
    pub pb: &'a ProgressBar,
}

/// A trace with its nominal timeout and U3 urgency.
#[derive(Debug)]
pub struct Nominal {
    pub trace: Trace,
    pub timeout: Duration,
    pub urgent: Vec<bool>,
}

impl Nominal {
    pub fn new(kind: TraceKind, n: usize, seed: u64) -> Self {
        Nominal::of(trace::generate(kind, n, seed))
    }

    /// A given trace (an imported capture) at its kind's timeout, urgency by U3.
    pub fn of(trace: Trace) -> Self {
        let kind = trace.kind;
        let m = kind.paper().timeout_ms / 1000.0;
        let urgent = Policy::calibrated(3, &trace.msgs, m)
            .map(|p| p.classify(&trace.msgs))
            .unwrap_or_default();
        Nominal {
            trace,
            timeout: Duration::from_secs_f64(m),
            urgent,
        }
    }
}

/// The primary factors of one run (Table 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Levels {
    pub e: Scope3,
    pub y: Tech,
    pub q: bool,
    /// The timeout M.
    pub m: Duration,
}

impl Levels {
    /// Nominal levels with timeout `m`: PE, hardware crypto, piggybacking on.
    pub fn nominal(m: Duration) -> Self {
        Levels {
            e: Scope3::Partial,
            y: Tech::Hw,
            q: true,
            m,
        }
    }
}

impl Experiment<'_> {
    fn one(&self, t: &Trace, urgent: &[bool], lv: Levels, sat: bool) -> Result<RunResult> {
        self.one_on(&t.msgs, urgent, lv, sat, false)
    }

    /// One run of `msgs`; `cold`: on a channel of its own, established first (TR).
    pub(super) fn one_on(
        &self,
        msgs: &[Msg],
        urgent: &[bool],
        lv: Levels,
        sat: bool,
        cold: bool,
    ) -> Result<RunResult> {
        let r = run(&RunSpec {
            msgs,
            urgent,
            e: lv.e,
            y: lv.y,
            q: lv.q,
            timeout: lv.m,
            profile: self.profile,
            saturate: sat,
            cold,
            seed: self.seed,
        });
        self.pb.inc(1);
        r.map_err(|e| {
            let what = format!(
                "{} run of {} messages ({} profile, E={:?} Y={:?} Q={} M={:?})",
                if sat { "T" } else { "L" },
                msgs.len(),
                self.profile.name,
                lv.e,
                lv.y,
                lv.q,
                lv.m
            );
            Error::bench_by(what, e)
        })
    }

    /// The trace compressed for a T run (offered load [`T_OVERLOAD`] times the wire).
    pub(super) fn saturating(&self, t: &Trace) -> Trace {
        let load = t.mean_size() / t.mean_interarrival().max(1e-12);
        trace::speed_up(t, (T_OVERLOAD * self.profile.bandwidth / load).max(1.0))
    }

    /// (T run, L run) of `t` at the given levels.
    pub fn t_and_l(
        &self,
        t: &Trace,
        urgent: &[bool],
        lv: Levels,
    ) -> Result<(RunResult, RunResult)> {
        let fast = self.saturating(t);
        Ok((
            self.one(&fast, urgent, lv, true)?,
            self.one(t, urgent, lv, false)?,
        ))
    }

    pub fn table3(&self, traces: &[Nominal]) -> Result<Table> {
        let mut tab = Table::new(
            format!(
                "Table 3: the five traces at nominal levels (profile {})",
                self.profile.name
            ),
            &[
                "trace",
                "messages",
                "mean size B",
                "paper",
                "interarrival ms",
                "paper",
                "M ms",
                "urgent %",
                "mean ADP msg B",
                "paper",
                "ratio",
                "T kB/s",
                "paper",
                "ratio",
                "L ms",
                "paper",
                "ratio",
                "load/T",
            ],
        );
        for n in traces {
            let p = n.trace.kind.paper();
            let (t, l) = self.t_and_l(&n.trace, &n.urgent, Levels::nominal(n.timeout))?;
            let load = n.trace.mean_size() / n.trace.mean_interarrival() / 1000.0;
            tab.push(vec![
                n.trace.kind.name().to_owned(),
                n.trace.msgs.len().to_string(),
                num(n.trace.mean_size(), 0),
                num(p.mean_size, 0),
                num(n.trace.mean_interarrival() * 1000.0, 2),
                num(p.interarrival_ms, 0),
                num(p.timeout_ms, 0),
                num(policy::share(&n.urgent) * 100.0, 1),
                num(l.mean_datagram(), 0),
                num(p.adp_size, 0),
                ratio(l.mean_datagram(), p.adp_size),
                num(t.t_kbs(), 1),
                num(p.t_kbs, 0),
                ratio(t.t_kbs(), p.t_kbs),
                num(l.l_ms, 3),
                num(p.l_ms, 0),
                ratio(l.l_ms, p.l_ms),
                num(load / t.t_kbs(), 3),
            ]);
            let name = n.trace.kind.name();
            tab.figure(format!("{name} T"), t.t_kbs(), "kB/s");
            tab.figure(format!("{name} L"), l.l_ms, "ms");
        }
        Ok(tab)
    }

    /// Table 8 and its improvement factors (OFF/ON for L, ON/OFF for T).
    pub fn table8(&self, all: &Nominal) -> Result<(Table, Table)> {
        let mut tab = Table::new(
            format!("Table 8: E x Q on ALL (profile {})", self.profile.name),
            &[&["E", "Q"][..], &L_AND_T, &["datagrams", "mean ADP msg B"]].concat(),
        );
        let mut gain = Table::new(
            format!(
                "Table 8: piggybacking's improvement factors on ALL (profile {})",
                self.profile.name
            ),
            &["E", "L OFF/ON", "paper", "T ON/OFF", "paper"],
        );
        for (e, [l_on, l_off, t_on, t_off]) in PAPER_T8 {
            let mut got = Vec::new();
            for (q, pl, pt) in [(true, l_on, t_on), (false, l_off, t_off)] {
                let (t, l) = self.t_and_l(
                    &all.trace,
                    &all.urgent,
                    Levels {
                        e,
                        q,
                        ..Levels::nominal(all.timeout)
                    },
                )?;
                let mut r = vec![e.name().to_owned(), if q { "ON" } else { "OFF" }.to_owned()];
                r.extend(l_and_t(&l, pl, &t, pt));
                r.extend([l.datagrams.to_string(), num(l.mean_datagram(), 0)]);
                tab.push(r);
                got.push((l.l_ms, t.t_kbs()));
            }
            gain.push(vec![
                e.name().to_owned(),
                num(got[1].0 / got[0].0, 2),
                num(l_off / l_on, 1),
                num(got[0].1 / got[1].1, 2),
                num(t_on / t_off, 1),
            ]);
            gain.figure(
                format!("{} piggybacking L OFF/ON", e.name()),
                got[1].0 / got[0].0,
                "x",
            );
            gain.figure(
                format!("{} piggybacking T ON/OFF", e.name()),
                got[0].1 / got[1].1,
                "x",
            );
        }
        Ok((tab, gain))
    }

    pub fn table7(&self, all: &Nominal) -> Result<Table> {
        let mut tab = Table::new(
            format!(
                "Table 7: urgency policies on ALL (profile {})",
                self.profile.name
            ),
            &[&["U", "parameter", "urgent %", "paper"][..], &L_AND_T].concat(),
        );
        let m = all.timeout.as_secs_f64();
        for (i, paper) in PAPER_T7.iter().enumerate() {
            let (name, param, urgent, q) = match Policy::calibrated(i + 1, &all.trace.msgs, m) {
                Some(p) => (p.name(), p.parameter(), p.classify(&all.trace.msgs), true),
                None => (
                    "* (Q=OFF)",
                    String::new(),
                    vec![true; all.trace.msgs.len()],
                    false,
                ),
            };
            let (t, l) = self.t_and_l(
                &all.trace,
                &urgent,
                Levels {
                    q,
                    ..Levels::nominal(all.timeout)
                },
            )?;
            let mut r = vec![
                name.to_owned(),
                param,
                num(policy::share(&urgent) * 100.0, 2),
                num(paper[0], 2),
            ];
            r.extend(l_and_t(&l, paper[1], &t, paper[2]));
            tab.push(r);
        }
        Ok(tab)
    }

    /// Figure 6: L against R for ALL and TCP, Q on and off (M = 40 ms); the table, and one
    /// curve per trace and Q, (R msg/s, L ms), for the plot.
    pub fn figure6(&self, traces: &[&Nominal]) -> Result<(Table, Vec<Curve>)> {
        let mut tab = Table::new(
            format!(
                "Figure 6: L against arrival rate R, M = 40 ms (profile {})",
                self.profile.name
            ),
            &[
                "trace",
                "Q",
                "R/nominal",
                "R msg/s",
                "offered kB/s",
                "L ms",
                "urgent",
            ],
        );
        let m = Duration::from_millis(40);
        let mut curves = Vec::new();
        for n in traces {
            for q in [true, false] {
                let mut points = Vec::new();
                for f in FIG6_RATES {
                    let t = trace::speed_up(&n.trace, f);
                    let r = self.one(
                        &t,
                        &n.urgent,
                        Levels {
                            q,
                            ..Levels::nominal(m)
                        },
                        false,
                    )?;
                    let rate = 1.0 / t.mean_interarrival();
                    tab.push(vec![
                        n.trace.kind.name().to_owned(),
                        if q { "ON" } else { "OFF" }.to_owned(),
                        num(f, 2),
                        num(rate, 1),
                        num(rate * t.mean_size() / 1000.0, 1),
                        num(r.l_ms, 3),
                        r.urgent.to_string(),
                    ]);
                    points.push((rate, r.l_ms));
                }
                curves.push(Curve {
                    name: format!(
                        "{} {} Q={}",
                        self.profile.name,
                        n.trace.kind.name(),
                        if q { "ON" } else { "OFF" }
                    ),
                    points,
                });
            }
        }
        Ok((tab, curves))
    }

    /// Tables 5 and 6: scope E and technology Y on ALL and ND, nominal otherwise.
    pub fn table5_6(&self, all: &Nominal, nd: &Nominal) -> Result<(Table, Table)> {
        let mut t5 = Table::new(
            format!(
                "Table 5: encryption scope E (profile {})",
                self.profile.name
            ),
            &[
                "trace", "E", "L ms", "paper", "ratio", "T kB/s", "paper", "ratio",
            ],
        );
        let mut t6 = Table::new(
            format!(
                "Table 6: encryption technology Y (profile {})",
                self.profile.name
            ),
            &[
                "trace", "Y", "L ms", "paper", "ratio", "T kB/s", "paper", "ratio",
            ],
        );
        for (n, p5, p6) in [
            (all, PAPER_T5[0], PAPER_T6[0]),
            (nd, PAPER_T5[1], PAPER_T6[1]),
        ] {
            let name = n.trace.kind.name();
            for (i, e) in Scope3::EVERY.into_iter().enumerate() {
                let lv = Levels {
                    e,
                    ..Levels::nominal(n.timeout)
                };
                let (t, l) = self.t_and_l(&n.trace, &n.urgent, lv)?;
                t5.push(row(name, e.name(), &l, p5[i], &t, p5[i + 3]));
            }
            for (i, y) in [Tech::Hw, Tech::Sw].into_iter().enumerate() {
                let lv = Levels {
                    y,
                    ..Levels::nominal(n.timeout)
                };
                let (t, l) = self.t_and_l(&n.trace, &n.urgent, lv)?;
                t6.push(row(name, y.name(), &l, p6[i], &t, p6[i + 2]));
            }
        }
        Ok((t5, t6))
    }

    /// Figure 5: the distribution of urgent-message latency on ALL at nominal levels, as a
    /// histogram of [`FIG5_BINS`] equal bins from 0 to the largest latency, and its moments
    /// beside the paper's (mean 11 ms, median 10 ms, standard deviation 6.08 ms); and the
    /// histogram as a chart, ALL and each of its component protocols, as the paper draws it.
    pub fn figure5(&self, all: &Nominal) -> Result<(Table, Table, Chart)> {
        let l = self.one(&all.trace, &all.urgent, Levels::nominal(all.timeout), false)?;
        let v = &l.latencies_ms;
        let n = v.len().max(1) as f64;
        let mean = v.iter().sum::<f64>() / n;
        let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        let mut moments = Table::new(
            format!(
                "Figure 5: urgent-message latency on ALL (profile {})",
                self.profile.name
            ),
            &["statistic", "ms", "paper", "ratio"],
        );
        let median = crate::bench::median(v);
        for (name, ours, paper) in [
            ("mean", mean, 11.0),
            ("median", median, 10.0),
            ("standard deviation", sd, 6.08),
        ] {
            moments.push(vec![
                name.to_owned(),
                num(ours, 3),
                num(paper, 2),
                ratio(ours, paper),
            ]);
        }
        let mut hist = Table::new(
            format!("Figure 5: histogram (profile {})", self.profile.name),
            &["from ms", "to ms", "urgent messages"],
        );
        let top = v.iter().copied().fold(0.0, f64::max).max(1e-9);
        let width = top / FIG5_BINS as f64;
        let bin = |x: f64| ((x / width) as usize).min(FIG5_BINS - 1);
        let mut counts = [0usize; FIG5_BINS];
        for x in v {
            counts[bin(*x)] += 1;
        }
        for (i, c) in counts.iter().enumerate() {
            hist.push(vec![
                num(i as f64 * width, 3),
                num((i + 1) as f64 * width, 3),
                c.to_string(),
            ]);
        }
        // The urgent messages' protocols, in the order of `latencies_ms` (trace order).
        let protos: Vec<Proto> = all
            .trace
            .msgs
            .iter()
            .zip(&all.urgent)
            .filter(|(_, u)| **u)
            .map(|(m, _)| m.proto)
            .collect();
        let mid = |i: usize| (i as f64 + 0.5) * width;
        let mut chart = Chart::new(
            format!(
                "Figure 5: urgent-message latency on ALL, nominal levels (profile {})",
                self.profile.name
            ),
            "latency ms (bin middle)",
            "urgent messages per bin",
        )
        .series(
            "ALL",
            counts
                .iter()
                .enumerate()
                .map(|(i, c)| (mid(i), *c as f64))
                .collect(),
        );
        for (proto, name) in [(Proto::Tcp, "TCP"), (Proto::Nd, "ND"), (Proto::Nfs, "NFS")] {
            let mut c = [0usize; FIG5_BINS];
            for (x, _) in v.iter().zip(&protos).filter(|(_, p)| **p == proto) {
                c[bin(*x)] += 1;
            }
            chart = chart.series(
                name,
                c.iter()
                    .enumerate()
                    .map(|(i, c)| (mid(i), *c as f64))
                    .collect(),
            );
        }
        Ok((moments, hist, chart))
    }
}

/// One line of a plot: its legend and (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// One row of Tables 5 and 6.
fn row(trace: &str, level: &str, l: &RunResult, pl: f64, t: &RunResult, pt: f64) -> Vec<String> {
    let mut r = vec![trace.to_owned(), level.to_owned()];
    r.extend(l_and_t(l, pl, t, pt));
    r
}

/// The [`L_AND_T`] cells: `l`'s latency beside the paper's `pl`, `t`'s throughput beside `pt`.
fn l_and_t(l: &RunResult, pl: f64, t: &RunResult, pt: f64) -> [String; 6] {
    [
        num(l.l_ms, 3),
        num(pl, 0),
        ratio(l.l_ms, pl),
        num(t.t_kbs(), 1),
        num(pt, 0),
        ratio(t.t_kbs(), pt),
    ]
}

/// Figure 5's histogram bins.
pub const FIG5_BINS: usize = 20;
/// Table 5 (ALL, ND): L for NE, PE, FE, then T for NE, PE, FE.
const PAPER_T5: [[f64; 6]; 2] = [
    [11.0, 11.0, 620.0, 760.0, 750.0, 350.0],
    [18.0, 18.0, 318.0, 991.0, 986.0, 394.0],
];
/// Table 6 (ALL, ND): L for HW, SW, then T for HW, SW.
const PAPER_T6: [[f64; 4]; 2] = [[11.0, 3300.0, 740.0, 50.0], [18.0, 192.0, 980.0, 97.0]];

/// Runs each experiment needs, for the progress bar.
pub fn runs_per_profile() -> u64 {
    let t3 = 2 * TraceKind::EVERY.len() as u64;
    let t8 = 2 * 2 * PAPER_T8.len() as u64;
    let t7 = 2 * PAPER_T7.len() as u64;
    let f6 = 2 * 2 * FIG6_RATES.len() as u64;
    let t56 = 2 * 2 * (3 + 2);
    t3 + t8 + t7 + f6 + t56 + 1
}
