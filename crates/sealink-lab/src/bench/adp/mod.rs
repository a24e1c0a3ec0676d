//! `sealink bench adp`: paper 002's trace-driven evaluation rerun over the simulated link in
//! virtual time (deterministic for a seed). `trace` generates the five traces, `policy` the
//! urgency policies U1-U5, `model` the service times of the hosts and wire, `run` one run, and
//! `tables` the experiments and their markdown and CSV.

pub mod format;
pub mod model;
pub mod policy;
pub mod run;
pub mod tables;
pub mod trace;

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::output;
use crate::report::{self, RunRecord, write_file};
use model::Profile;
use tables::{Experiment, Nominal};
use trace::TraceKind;

/// Messages per trace (the paper's 10,000) and in `--quick` mode.
pub const MESSAGES: usize = 10_000;
pub const QUICK_MESSAGES: usize = 1_000;

/// Inputs of `sealink bench adp`.
#[derive(Debug, Clone)]
pub struct Params {
    /// Directory the markdown and CSV files go to (created if missing).
    pub out: PathBuf,
    pub quick: bool,
    pub seed: u64,
    /// Profiles to run ("1987", "today").
    pub profiles: Vec<String>,
}

/// Files written under `out`, each a table as CSV, and `adp.md` with all of them; the run
/// record `adp.json` lists them with the headline figures.
pub const FILES: [&str; 10] = [
    "adp.md",
    "table3.csv",
    "table5.csv",
    "table6.csv",
    "table7.csv",
    "table8.csv",
    "table8_factors.csv",
    "figure5.csv",
    "figure5_histogram.csv",
    "figure6.csv",
];

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
    let traces: Vec<Nominal> = TraceKind::EVERY
        .iter()
        .map(|k| Nominal::new(*k, n, p.seed))
        .collect();
    let pb = output::progress(
        tables::runs_per_profile() * profiles.len() as u64,
        "adp runs",
    );
    let mut md = format!(
        "# sealink bench adp: paper 002's evaluation in virtual time\n\n\
         {n} messages per trace, seed {}, simulated link (sealink-proto `sim::Pair` with a \
         service model); see crates/sealink-lab/src/bench/adp/ for every modelling choice.\n\n",
        p.seed
    );
    let mut csv: [Vec<format::Table>; 9] = Default::default();
    let mut figures = Vec::new();
    let [all, tcp, nd] = [&traces[0], &traces[1], &traces[2]];
    for profile in profiles {
        let x = Experiment {
            profile,
            seed: p.seed,
            pb: &pb,
        };
        let t3 = x.table3(&traces)?;
        let (t5, t6) = x.table5_6(all, nd)?;
        let t7 = x.table7(all)?;
        let (t8, t8f) = x.table8(all)?;
        let (f5, f5h) = x.figure5(all)?;
        let f6 = x.figure6(&[all, tcp])?;
        for (i, t) in [t3, t5, t6, t7, t8, t8f, f5, f5h, f6]
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
    pb.finish_and_clear();
    let mut rec = RunRecord::new("adp");
    write_file(&p.out.join(FILES[0]), &md)?;
    rec.file(FILES[0]);
    for (name, tabs) in FILES[1..].iter().zip(&csv) {
        let parts: Vec<(&str, &report::Table)> = p
            .profiles
            .iter()
            .map(String::as_str)
            .zip(tabs.iter().map(|t| &t.table))
            .collect();
        rec.write_csv(&p.out, name, &report::Table::stacked("profile", &parts))?;
    }
    for (what, value, unit) in figures {
        rec.figure(what, value, unit);
    }
    let json = rec.write(&p.out)?;
    md += &format!("run record: {}\n", json.display());
    output::print(&md)
}
