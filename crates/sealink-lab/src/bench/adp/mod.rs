//! `sealink-lab bench adp`: paper 002's trace-driven evaluation rerun over the simulated link in
//! virtual time (deterministic for a seed). `trace` generates the five traces, `policy` the
//! urgency policies U1-U5, `model` the service times of the hosts and wire, `run` one run, and
//! `tables` the experiments and their markdown and CSV, `layer` Table 4 (SUB against TR),
//! `figures` Figures 4, 7 and 8.

pub mod bounds;
pub mod figures;
pub mod format;
pub mod layer;
pub mod loopback;
pub mod model;
pub mod pcap;
pub mod policy;
pub mod run;
pub mod tables;
pub mod trace;

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::output;
use crate::report::{self, Chart, RunRecord, write_file};
use model::{Profile, Scope3};
use tables::{Experiment, Nominal};
use trace::TraceKind;

/// Messages per trace (the paper's 10,000) and in `--quick` mode.
pub const MESSAGES: usize = 10_000;
pub const QUICK_MESSAGES: usize = 1_000;

/// Inputs of `sealink-lab bench adp`.
#[derive(Debug, Clone)]
pub struct Params {
    /// Directory the markdown and CSV files go to (created if missing).
    pub out: PathBuf,
    pub quick: bool,
    pub seed: u64,
    /// Profiles to run ("1987", "today").
    pub profiles: Vec<String>,
    /// A packet capture whose first messages replace the generated ALL trace.
    pub pcap: Option<PathBuf>,
    /// Also run over real loopback, L runs cut to this many seconds of each trace.
    pub loopback: Option<f64>,
    /// With `loopback`: this many interleaved rounds of ALL's L, piggybacking on and off, at
    /// E = NE and FE (`--loopback-l-rounds`; 0: none).
    pub l_rounds: usize,
}

/// Written by `--loopback` (not deterministic: wall-clock runs).
pub const LOOPBACK_CSV: &str = "loopback.csv";
/// Written by `--loopback`: ALL's T with piggybacking on and off, per interleaved round.
pub const LOOPBACK_GAIN_CSV: &str = "loopback-piggyback.csv";

/// Files written under `out`, each a table as CSV, and `adp.md` with all of them; the run
/// record `adp.json` lists them and the plots ([`svg_files`]) with the headline figures.
pub const FILES: [&str; 17] = [
    "adp.md",
    "table3.csv",
    "table4.csv",
    "table4_streams.csv",
    "table5.csv",
    "table6.csv",
    "table7.csv",
    "table8.csv",
    "table8_factors.csv",
    "figure5.csv",
    "figure5_histogram.csv",
    "figure6.csv",
    "figure4.csv",
    "figure7.csv",
    "figure8.csv",
    "figures7_8_claims.csv",
    "constant_size.csv",
];

/// Paper 002's PKO bound by its own method (`bounds`): outside [`FILES`] and `adp.md` because
/// its public-key times are wall-clock (not deterministic for a seed).
pub const PKO_CSV: &str = "pko_bound.csv";

/// The plots, SVG: Figure 5 per profile (its latencies differ by orders of magnitude between
/// profiles), Figures 4, 6, 7 and 8 for every profile on one chart each (6, 7 and 8 on a
/// logarithmic axis).
pub fn svg_files(profiles: &[String]) -> Vec<String> {
    let mut v: Vec<String> = profiles
        .iter()
        .map(|p| format!("figure5_{p}.svg"))
        .collect();
    v.extend(SHARED_SVGS.iter().map(|s| (*s).to_owned()));
    v
}

const SHARED_SVGS: [&str; 4] = ["figure6.svg", "figure4.svg", "figure7.svg", "figure8.svg"];

/// Runs every experiment for each profile, writes the files and prints the markdown.
pub fn run(p: &Params) -> Result<()> {
    let profiles = p
        .profiles
        .iter()
        .map(|n| {
            Profile::by_name(n)
                .ok_or_else(|| Error::Usage(format!("unknown profile {n:?} (known: 1987, today)")))
        })
        .collect::<Result<Vec<_>>>()?;
    let n = if p.quick { QUICK_MESSAGES } else { MESSAGES };
    let mut traces: Vec<Nominal> = TraceKind::EVERY
        .iter()
        .map(|k| Nominal::new(*k, n, p.seed))
        .collect();
    let mut source = String::new();
    if let Some(path) = &p.pcap {
        let (all, text) = import_capture(path, n)?;
        traces[0] = all;
        source = text;
    }
    let pb = progress(p, n, traces.len(), profiles.len());
    let mut md = format!(
        "# sealink-lab bench adp: paper 002's evaluation in virtual time\n\n\
         {n} messages per trace, seed {}, simulated link (sealink-proto `sim::Pair` with a \
         service model); see crates/sealink-lab/src/bench/adp/ for every modelling choice.\n\n",
        p.seed
    );
    md += &source;
    let mut csv: [Vec<format::Table>; 16] = Default::default();
    // Timed once, before the virtual-time runs, for every profile's PKO table.
    let public_key = bounds::measure_public_key(p.quick)?;
    let mut pko = Vec::new();
    let mut figures = Vec::new();
    let mut charts = Charts::new();
    let [all, tcp, nd] = [&traces[0], &traces[1], &traces[2]];
    for profile in profiles {
        let x = Experiment {
            profile,
            seed: p.seed,
            pb: &pb,
        };
        let t3 = x.table3(&traces)?;
        let t4 = x.table4(&[tcp, &traces[3]])?;
        let t4s = x.table4_streams(all)?;
        let (t5, t6) = x.table5_6(all, nd)?;
        let t7 = x.table7(all)?;
        let (t8, t8f) = x.table8(all)?;
        let (f5, f5h, f5c) = x.figure5(all)?;
        charts.fig5.push(f5c);
        let (f6, curves) = x.figure6(&[all, tcp])?;
        for c in curves {
            charts.fig6 = charts.fig6.series(c.name, c.points);
        }
        let (f4, curves) = x.figure4(all)?;
        for c in curves {
            charts.fig4 = charts.fig4.series(c.name, c.points);
        }
        let f78 = x.figure7_8(&traces)?;
        let constant = x.constant_sizes(all)?;
        let nominal = x.t_and_l(
            &all.trace,
            &all.urgent,
            tables::Levels::nominal(all.timeout),
        )?;
        let steps = if profile.name == "1987" {
            vec![bounds::PublicKeyStep::PAPER]
        } else {
            public_key.clone()
        };
        pko.push(bounds::pko_table(profile.name, &nominal, &steps)?);
        for c in f78.t_curves {
            charts.fig7 = charts.fig7.series(c.name, c.points);
        }
        for c in f78.l_curves {
            charts.fig8 = charts.fig8.series(c.name, c.points);
        }
        for (i, t) in [
            t3, t4, t4s, t5, t6, t7, t8, t8f, f5, f5h, f6, f4, f78.t7, f78.t8, f78.claims, constant,
        ]
        .into_iter()
        .enumerate()
        {
            md += &t.markdown();
            for (what, value, unit) in &t.figures {
                figures.push((format!("{} {what}", x.profile.name), *value, *unit));
            }
            csv[i].push(t);
        }
    }
    let mut rec = RunRecord::new("adp");
    let pko_md = pko_report(&pko, &mut figures);
    write_per_profile(&mut rec, p, PKO_CSV, &pko)?;
    if let Some(seconds) = p.loopback {
        run_loopback(p, seconds, &traces, &pb, &mut rec, &mut md, &mut figures)?;
    }
    pb.finish_and_clear();
    let svgs = svg_files(&p.profiles);
    md += &format!("Plots: {}\n\n", svgs.join(", "));
    write_file(&p.out.join(FILES[0]), &md)?;
    rec.file(FILES[0]);
    for (name, tabs) in FILES[1..].iter().zip(&csv) {
        write_per_profile(&mut rec, p, name, tabs)?;
    }
    for (name, chart) in svgs.iter().zip(charts.fig5.iter().chain([
        &charts.fig6,
        &charts.fig4,
        &charts.fig7,
        &charts.fig8,
    ])) {
        chart.write_svg(&p.out.join(name))?;
        rec.file(name);
    }
    for (what, value, unit) in figures {
        rec.figure(what, value, unit);
    }
    let json = rec.write(&p.out)?;
    md += &format!("run record: {}\n", json.display());
    output::print(&(md + "\n" + &pko_md))
}

/// The progress bar over every run the bench makes: `n` messages per trace, `traces` traces,
/// `profiles` profiles.
fn progress(p: &Params, n: usize, traces: usize, profiles: usize) -> indicatif::ProgressBar {
    output::progress(
        (tables::runs_per_profile()
            + layer::runs(n)
            + figures::runs(traces)
            + bounds::runs_per_profile())
            * profiles as u64
            + p.loopback.map_or(0, |_| {
                loopback::runs(traces, p.quick) + 4 * p.l_rounds as u64
            }),
        "adp runs",
    )
}

/// The PKO bound's section, printed and not written to adp.md (its public-key times are
/// wall-clock); its figures go to `figures`.
fn pko_report(pko: &[format::Table], figures: &mut Vec<(String, f64, &'static str)>) -> String {
    let mut pko_md = format!(
        "PKO bound: printed here and written to {PKO_CSV}, not to {}, because its public-key times are wall-clock.\n\n",
        FILES[0]
    );
    for t in pko {
        pko_md += &t.markdown();
        for (what, value, unit) in &t.figures {
            figures.push((what.clone(), *value, *unit));
        }
    }
    pko_md
}

/// Writes `tables`, one per profile in `p.profiles`' order, as the one CSV `name` with a profile
/// column.
fn write_per_profile(
    rec: &mut RunRecord,
    p: &Params,
    name: &str,
    tables: &[format::Table],
) -> Result<()> {
    let parts: Vec<(&str, &report::Table)> = p
        .profiles
        .iter()
        .map(String::as_str)
        .zip(tables.iter().map(|t| &t.table))
        .collect();
    rec.write_csv(&p.out, name, &report::Table::stacked("profile", &parts))?;
    Ok(())
}

/// The capture at `path` as the ALL trace (its first `n` messages), and the report's paragraph
/// that says so.
fn import_capture(path: &std::path::Path, n: usize) -> Result<(Nominal, String)> {
    let got = pcap::read(path, n)
        .map_err(|e| Error::bench_by(format!("cannot import the capture {}", path.display()), e))?;
    let text = format!(
        "**ALL is the capture {}** in every table below, not the generated trace: its first \
         {} messages ({} packets read, {} skipped without a UDP/TCP payload, {} flows, {} \
         messages past the first {n} left out; mean size {:.0} B, mean interarrival {:.3} \
         ms).\n\n",
        path.display(),
        got.trace.msgs.len(),
        got.packets,
        got.skipped,
        got.flows,
        got.left_out,
        got.trace.mean_size(),
        got.trace.mean_interarrival() * 1000.0,
    );
    Ok((Nominal::of(got.trace), text))
}

/// The run's charts: Figure 5 once per profile, Figures 6, 4, 7 and 8 a series per profile.
struct Charts {
    fig5: Vec<Chart>,
    fig6: Chart,
    fig4: Chart,
    fig7: Chart,
    fig8: Chart,
}

impl Charts {
    fn new() -> Self {
        Charts {
            fig5: Vec::new(),
            fig6: Chart::new(
                "Figure 6: urgent latency L against arrival rate R, M = 40 ms",
                "R (messages/s)",
                "L ms (log)",
            )
            .log_y(),
            fig4: Chart::new(
                "Figure 4: T and L of ALL against the number of messages, relative to the full trace",
                "messages",
                "relative to the full trace",
            ),
            fig7: Chart::new(
                "Figure 7: throughput T against the timeout M",
                "M (ms)",
                "T kB/s (log)",
            )
            .log_y(),
            fig8: Chart::new(
                "Figure 8: urgent latency L against the timeout M",
                "M (ms)",
                "L ms (log)",
            )
            .log_y(),
        }
    }
}

/// `--loopback`: Table 3's traces through two real nodes (and `--loopback-l-rounds`), into the
/// report, the record and `figures`.
fn run_loopback(
    p: &Params,
    seconds: f64,
    traces: &[Nominal],
    pb: &indicatif::ProgressBar,
    rec: &mut RunRecord,
    md: &mut String,
    figures: &mut Vec<(String, f64, &'static str)>,
) -> Result<()> {
    let (t, gain) = loopback::table(traces, seconds, p.quick, p.seed, pb)?;
    for t in [&t, &gain] {
        *md += &t.markdown();
        for (what, value, unit) in &t.figures {
            figures.push((what.clone(), *value, *unit));
        }
    }
    rec.write_csv(&p.out, LOOPBACK_CSV, &t.table)?;
    rec.write_csv(&p.out, LOOPBACK_GAIN_CSV, &gain.table)?;
    if p.l_rounds > 0 {
        let all = traces
            .iter()
            .find(|n| n.trace.kind == TraceKind::All)
            .ok_or_else(|| Error::bench("no ALL trace for the loopback L rounds"))?;
        let lt =
            loopback::latency_rounds(all, &[Scope3::None, Scope3::Full], p.l_rounds, seconds, pb)?;
        *md += &lt.markdown();
        for (what, value, unit) in &lt.figures {
            figures.push((what.clone(), *value, *unit));
        }
        rec.write_csv(&p.out, loopback::LATENCY_CSV, &lt.table)?;
    }
    Ok(())
}
