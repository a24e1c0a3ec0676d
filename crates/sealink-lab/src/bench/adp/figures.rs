//! Figures 4, 7 and 8 of paper 002, at nominal levels otherwise: T and L against the trace's
//! length (Figure 4, ALL: how long a trace must be for stable results), T against the timeout M
//! (Figure 7) and L against M (Figure 8) for every trace.
//!
//! The paper prints these as plots without numbers; its text states what they show, and
//! [`Experiment::figure7_8`] checks those statements on our runs: T stops depending on M
//! beyond a value about the same for every trace, and the M that minimises L differs by trace,
//! much higher for ND (a low arrival rate) than for TCP and ALL.

use std::time::Duration;

use super::format::{Table, num};
use super::tables::{Curve, Experiment, Levels, Nominal};
use super::trace::{Trace, TraceKind};
use crate::error::Result;

/// Figure 4's trace lengths, as fractions of the full trace.
pub const FIG4_FRACTIONS: [f64; 5] = [0.05, 0.1, 0.2, 0.5, 1.0];
/// Figures 7 and 8's timeouts M (ms): around the paper's nominal 40 to 100 ms, a factor of 8
/// either side.
pub const FIG78_TIMEOUTS_MS: [f64; 8] = [5.0, 10.0, 20.0, 40.0, 60.0, 100.0, 200.0, 400.0];
/// T within this fraction of its largest value counts as insensitive to M (Figure 7's knee).
const KNEE: f64 = 0.05;

/// Runs of one profile: a T and an L run per point.
pub fn runs(traces: usize) -> u64 {
    (2 * FIG4_FRACTIONS.len() + 2 * traces * FIG78_TIMEOUTS_MS.len()) as u64
}

/// Figure 7's knee: the smallest M from which every larger M keeps T within [`KNEE`] of its
/// largest value.
pub fn knee(points: &[(f64, f64)]) -> Option<f64> {
    let best = points.iter().map(|p| p.1).fold(f64::NAN, f64::max);
    if !best.is_finite() || best <= 0.0 {
        return None;
    }
    let mut knee = None;
    for &(m, t) in points.iter().rev() {
        if t < best * (1.0 - KNEE) {
            break;
        }
        knee = Some(m);
    }
    knee
}

/// Figure 8's optimum: the M with the lowest L (the first, if several tie).
pub fn best_m(points: &[(f64, f64)]) -> Option<f64> {
    points
        .iter()
        .filter(|p| p.1.is_finite())
        .fold(None, |b: Option<(f64, f64)>, &p| match b {
            Some(b) if b.1 <= p.1 => Some(b),
            _ => Some(p),
        })
        .map(|b| b.0)
}

impl Experiment<'_> {
    /// Figure 4: T and L of the first messages of ALL, for growing lengths; the table, and the
    /// two curves relative to the full trace's values.
    pub fn figure4(&self, all: &Nominal) -> Result<(Table, Vec<Curve>)> {
        let mut tab = Table::new(
            format!(
                "Figure 4: T and L against the number of messages (ALL, profile {})",
                self.profile.name
            ),
            &["messages", "T kB/s", "L ms", "T / T(all)", "L / L(all)"],
        );
        let n = all.trace.msgs.len();
        let mut rows = Vec::new();
        for f in FIG4_FRACTIONS {
            let k = ((n as f64 * f).round() as usize).clamp(1, n);
            let t = Trace {
                kind: all.trace.kind,
                msgs: all.trace.msgs[..k].to_vec(),
            };
            let (tr, lr) = self.t_and_l(&t, &all.urgent[..k], Levels::nominal(all.timeout))?;
            rows.push((k, tr.t_kbs(), lr.l_ms));
        }
        let &(_, t_full, l_full) = rows.last().expect("FIG4_FRACTIONS is not empty");
        let (mut t_curve, mut l_curve) = (Vec::new(), Vec::new());
        for (k, t, l) in rows {
            tab.push(vec![
                k.to_string(),
                num(t, 1),
                num(l, 3),
                num(t / t_full, 3),
                num(l / l_full, 3),
            ]);
            t_curve.push((k as f64, t / t_full));
            l_curve.push((k as f64, l / l_full));
        }
        let name = self.profile.name;
        Ok((
            tab,
            vec![
                Curve {
                    name: format!("{name} T / T({n})"),
                    points: t_curve,
                },
                Curve {
                    name: format!("{name} L / L({n})"),
                    points: l_curve,
                },
            ],
        ))
    }

    /// Figures 7 and 8: T and L against M for every trace. Returns the two tables, a third
    /// with the paper's statements checked, and the T and L curves.
    pub fn figure7_8(&self, traces: &[Nominal]) -> Result<Figures78> {
        let p = self.profile.name;
        let mut t7 = Table::new(
            format!("Figure 7: T against the timeout M (profile {p})"),
            &["trace", "M ms", "T kB/s", "T / max"],
        );
        let mut t8 = Table::new(
            format!("Figure 8: L against the timeout M (profile {p})"),
            &["trace", "M ms", "L ms", "urgent"],
        );
        let (mut t_curves, mut l_curves) = (Vec::new(), Vec::new());
        let mut knees = Vec::new();
        let mut optima = Vec::new();
        for n in traces {
            let (mut tp, mut lp) = (Vec::new(), Vec::new());
            for m in FIG78_TIMEOUTS_MS {
                let lv = Levels::nominal(Duration::from_secs_f64(m / 1000.0));
                let (tr, lr) = self.t_and_l(&n.trace, &n.urgent, lv)?;
                tp.push((m, tr.t_kbs()));
                lp.push((m, lr.l_ms));
                t8.push(vec![
                    n.trace.kind.name().to_owned(),
                    num(m, 0),
                    num(lr.l_ms, 3),
                    lr.urgent.to_string(),
                ]);
            }
            let best = tp.iter().map(|x| x.1).fold(f64::NAN, f64::max);
            for &(m, t) in &tp {
                t7.push(vec![
                    n.trace.kind.name().to_owned(),
                    num(m, 0),
                    num(t, 1),
                    num(t / best, 3),
                ]);
            }
            knees.push((n.trace.kind, knee(&tp)));
            optima.push((n.trace.kind, best_m(&lp)));
            let name = format!("{p} {}", n.trace.kind.name());
            t_curves.push(Curve {
                name: name.clone(),
                points: tp,
            });
            l_curves.push(Curve { name, points: lp });
        }
        let claims = self.claims78(&knees, &optima);
        Ok(Figures78 {
            t7,
            t8,
            claims,
            t_curves,
            l_curves,
        })
    }

    fn claims78(
        &self,
        knees: &[(TraceKind, Option<f64>)],
        optima: &[(TraceKind, Option<f64>)],
    ) -> Table {
        let mut tab = Table::new(
            format!(
                "Figures 7 and 8: the paper's statements against ours (profile {})",
                self.profile.name
            ),
            &["paper says", "ours", "holds"],
        );
        let list = |v: &[(TraceKind, Option<f64>)]| {
            v.iter()
                .map(|(k, m)| format!("{} {}", k.name(), m.map_or("n/a".into(), |m| num(m, 0))))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let ks: Vec<f64> = knees.iter().filter_map(|k| k.1).collect();
        let (lo, hi) = ks
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(a, b), &k| (a.min(k), b.max(k)));
        let same = ks.len() == knees.len() && hi <= 4.0 * lo;
        tab.push(vec![
            format!(
                "beyond an M about the same for all traces, T is insensitive to M (within {:.0}% \
                 of its largest value; \"about the same\": within a factor of 4)",
                KNEE * 100.0
            ),
            format!("knee M ms: {}", list(knees)),
            yes_no(same),
        ]);
        let opt = |k: TraceKind| optima.iter().find(|o| o.0 == k).and_then(|o| o.1);
        let nd_higher = match (opt(TraceKind::Nd), opt(TraceKind::Tcp), opt(TraceKind::All)) {
            (Some(nd), Some(tcp), Some(all)) => nd >= 2.0 * tcp.max(all),
            _ => false,
        };
        tab.push(vec![
            "traffic types need different timeouts for the lowest L: much higher for ND than \
             for TCP and ALL (\"much\": at least 2x)"
                .to_owned(),
            format!("M ms with the lowest L: {}", list(optima)),
            yes_no(nd_higher),
        ]);
        tab
    }
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

/// What [`Experiment::figure7_8`] returns.
#[derive(Debug)]
pub struct Figures78 {
    pub t7: Table,
    pub t8: Table,
    pub claims: Table,
    pub t_curves: Vec<Curve>,
    pub l_curves: Vec<Curve>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knee_is_where_t_stays_near_its_largest() {
        let pts = [(5.0, 100.0), (10.0, 300.0), (20.0, 390.0), (40.0, 400.0)];
        assert_eq!(knee(&pts), Some(20.0));
        // A late dip moves the knee past it.
        let dip = [(5.0, 380.0), (10.0, 400.0), (20.0, 300.0), (40.0, 395.0)];
        assert_eq!(knee(&dip), Some(40.0));
        assert_eq!(knee(&[]), None);
        assert_eq!(knee(&[(1.0, 0.0)]), None);
    }

    #[test]
    fn best_m_is_the_lowest_latency() {
        let pts = [(5.0, 9.0), (10.0, 4.0), (20.0, 4.0), (40.0, f64::NAN)];
        assert_eq!(best_m(&pts), Some(10.0));
        assert_eq!(best_m(&[]), None);
    }
}
