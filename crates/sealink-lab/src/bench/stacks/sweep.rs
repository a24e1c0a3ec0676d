//! The sweep of one run: every stack's scaling curves (PLP and CLP, each side, workers 1..N),
//! its layered point and its connection counts for Figure 11, logged point by point, with a
//! `--budget` fitted after the first point and held to as the run goes.

use super::*;

/// The sides and modes of every stack's scaling curves.
pub(super) const OPS: [Op; 2] = [Op::Seal, Op::Open];
pub(super) const MODES: [Mode; 2] = [Mode::Plp, Mode::Clp];

/// A run in progress: what it measured so far, and what a `--budget` changed of it.
pub(super) struct Sweep<'a> {
    p: &'a Params,
    /// `p` with the runs' seconds a budget fitted after the first point.
    cur: Params,
    connections: &'a [usize],
    logged: &'a mut dyn FnMut(Vec<String>) -> Result<()>,
    pb: &'a indicatif::ProgressBar,
    t0: Instant,
    /// How many of `p.stacks` are measured.
    keep_stacks: usize,
    budget_note: Option<String>,
    /// Why the budget stopped a stack as the run went.
    late_note: Option<String>,
    /// The raw rate is measured right before the aes128-gcm PLP send point at one worker, so
    /// that the two see the same machine load (or at the end without that stack).
    raw: Option<Estimate>,
    curves: Vec<Curve>,
    layered: Vec<(&'static Stack, Op, Estimate)>,
    many: Vec<(&'static Stack, usize, ClpPolicy, Estimate)>,
}

impl<'a> Sweep<'a> {
    pub(super) fn new(
        p: &'a Params,
        connections: &'a [usize],
        logged: &'a mut dyn FnMut(Vec<String>) -> Result<()>,
        pb: &'a indicatif::ProgressBar,
    ) -> Self {
        Sweep {
            p,
            cur: p.clone(),
            connections,
            logged,
            pb,
            t0: Instant::now(),
            keep_stacks: p.stacks.len(),
            budget_note: None,
            late_note: None,
            raw: None,
            curves: Vec::new(),
            layered: Vec::new(),
            many: Vec::new(),
        }
    }

    fn windows(&self) -> usize {
        self.p.runs + 1
    }

    fn many_runs(&self) -> usize {
        self.p.runs.min(3)
    }

    /// Whether stack `si` ran past the budget (the first stack is always measured whole).
    fn past_budget(&self, si: usize) -> bool {
        si > 0
            && self
                .p
                .budget
                .is_some_and(|b| self.t0.elapsed().as_secs_f64() > b)
    }

    /// Every stack in turn. After the first stack, which is measured whole, the budget is also
    /// held to as the run goes: a stack's cost is known only once it ran (a slow cipher's
    /// windows take long to drain at many workers, which the first point does not show). A
    /// stack is not started when the costliest so far would not fit in what is left, and one
    /// that runs past the budget is abandoned (its points stay in POINTS_FILE, not in the
    /// report).
    pub(super) fn all_stacks(&mut self) -> Result<()> {
        let p = self.p;
        let mut stack_secs: Vec<f64> = Vec::new();
        for (si, &stack) in p.stacks.iter().enumerate() {
            if si >= self.keep_stacks {
                continue;
            }
            if let Some(b) = p.budget
                && si > 0
            {
                let longest = stack_secs.iter().copied().fold(0.0, f64::max);
                let now = self.t0.elapsed().as_secs_f64();
                if now + longest > b {
                    self.keep_stacks = si;
                    self.late_note = Some(format!(
                        "{} not started: {now:.1} s gone, and a stack took up to {longest:.1} s",
                        stack.name
                    ));
                    continue;
                }
            }
            let ts = Instant::now();
            if self.stack(si, stack)? {
                self.keep_stacks = si;
                self.curves.retain(|c| !std::ptr::eq(c.stack, stack));
                self.layered.retain(|(s, _, _)| !std::ptr::eq(*s, stack));
                self.many.retain(|(s, ..)| !std::ptr::eq(*s, stack));
                self.late_note = Some(format!(
                    "{} abandoned after {:.1} s of it, past the budget at {:.1} s (its points so far are in {POINTS_FILE} only)",
                    stack.name,
                    ts.elapsed().as_secs_f64(),
                    self.t0.elapsed().as_secs_f64()
                ));
                continue;
            }
            stack_secs.push(ts.elapsed().as_secs_f64());
        }
        if let (Some(late), Some(note)) = (&self.late_note, self.budget_note.as_mut()) {
            let skipped: Vec<&str> = p.stacks[self.keep_stacks..]
                .iter()
                .map(|s| s.name)
                .collect();
            let _ = write!(
                note,
                "; held to as the run went: {late}; measured {}, skipped {}",
                p.stacks[..self.keep_stacks]
                    .iter()
                    .map(|s| s.name)
                    .collect::<Vec<_>>()
                    .join(", "),
                skipped.join(", ")
            );
        }
        Ok(())
    }

    /// One stack's points: its scaling curves and layered point for each side, then its
    /// connection counts. True when it ran past the budget and was abandoned.
    fn stack(&mut self, si: usize, stack: &'static Stack) -> Result<bool> {
        let p = self.p;
        for op in OPS {
            for mode in MODES {
                if self.curve(si, stack, op, mode)? {
                    return Ok(true);
                }
            }
            let r = measure(
                stack,
                EngineKind::Layered,
                op,
                1,
                p.batch,
                &self.cur,
                self.windows(),
            )?;
            self.layered.push((stack, op, estimate(&r)));
            (self.logged)(point_row(
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
            self.pb.inc(1);
            if self.past_budget(si) {
                return Ok(true);
            }
        }
        self.connection_points(si, stack)
    }

    /// One scaling curve, workers 1..N; the budget is fitted after the run's first point.
    /// True when the stack ran past the budget (the curve is then left out).
    fn curve(&mut self, si: usize, stack: &'static Stack, op: Op, mode: Mode) -> Result<bool> {
        let (p, nw) = (self.p, self.p.workers);
        let mut points = Vec::new();
        for w in 1..=nw {
            let kind = match mode {
                Mode::Plp => EngineKind::Plp(w),
                Mode::Clp => EngineKind::Clp(ClpPolicy::ProcessorPerConnection(w)),
            };
            if stack.name == "aes128-gcm" && op == Op::Seal && kind == EngineKind::Plp(1) {
                self.raw = Some(raw_point(p, &self.cur, &mut self.logged, self.pb)?);
            }
            let r = measure(
                stack,
                kind,
                op,
                mode.channels(nw),
                p.batch,
                &self.cur,
                self.windows(),
            )?;
            points.push(estimate(&r));
            (self.logged)(point_row(
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
            self.pb.inc(1);
            if let (Some(b), None) = (p.budget, &self.budget_note) {
                // Fitted once, after the first point.
                let t1 = self.t0.elapsed().as_secs_f64();
                let per_stack = (OPS.len() * MODES.len() * nw + OPS.len()) * self.windows()
                    + self.connections.len() * 2 * (self.many_runs() + 1);
                let note;
                (self.cur.seconds, self.keep_stacks, note) = fit_stacks(p, b, t1, per_stack);
                self.budget_note = Some(note);
            }
            if self.past_budget(si) {
                return Ok(true);
            }
        }
        self.curves.push(Curve {
            stack,
            op,
            mode,
            points,
        });
        Ok(false)
    }

    /// Figure 11's points: the send side at each connection count, a thread per connection
    /// against a processor per connection. True when the stack ran past the budget.
    fn connection_points(&mut self, si: usize, stack: &'static Stack) -> Result<bool> {
        let p = self.p;
        for &n in self.connections {
            for policy in [
                ClpPolicy::ThreadPerConnection,
                ClpPolicy::ProcessorPerConnection(p.workers),
            ] {
                let r = measure(
                    stack,
                    EngineKind::Clp(policy),
                    Op::Seal,
                    n,
                    CHUNK_MANY,
                    &self.cur,
                    self.many_runs() + 1,
                )?;
                self.many.push((stack, n, policy, estimate(&r)));
                let threads = match policy {
                    ClpPolicy::ThreadPerConnection => n,
                    ClpPolicy::ProcessorPerConnection(w) => w,
                };
                (self.logged)(point_row(
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
                self.pb.inc(1);
                if self.past_budget(si) {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// The report of what ran (the runs' seconds after any budget, the stacks kept), with the
    /// files written.
    pub(super) fn report(mut self) -> Result<String> {
        let raw = match self.raw {
            Some(r) => r,
            None => raw_point(self.p, &self.cur, &mut self.logged, self.pb)?,
        };
        let p = &Params {
            seconds: self.cur.seconds,
            stacks: self.p.stacks[..self.keep_stacks].to_vec(),
            ..self.p.clone()
        };
        let (curves, layered, many) = (&self.curves, &self.layered, &self.many);
        let mut out = render(
            p,
            record::cores(),
            raw,
            curves,
            layered,
            many,
            self.many_runs(),
        );
        if let Some(note) = &self.budget_note {
            let _ = writeln!(out, "\n{note}");
        }
        // The projection before the comparison, which ends the report.
        let proj = projection_table(p, &projections(curves)?);
        out.push_str(&projection_report(p, &proj));
        out.push_str(&paper_comparison(p, curves, many));
        let json = write_files(p, raw, curves, layered, many, &proj, &out)?;
        let _ = writeln!(
            out,
            "\nreport: {}\nrun record: {}",
            p.out.join(REPORT_FILE).display(),
            json.display()
        );
        Ok(out)
    }
}
