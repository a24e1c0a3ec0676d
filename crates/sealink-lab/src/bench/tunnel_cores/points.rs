//! Measuring the figures: the CPU topology (hyper-thread siblings, pinned pairs), every point
//! of a run in interleaved rounds, and the fits over them.

use super::*;

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
pub(super) fn pinned_pair(
    cpus: (usize, usize),
    keys: &Arc<Keys>,
    cfg: Config,
    seconds: f64,
) -> Result<f64> {
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
/// Measures the points in order of priority, each logged as it is taken, fitting them to
/// `--budget` (what it left out goes in `budget_note`).
pub(super) fn measure_points(
    p: &Params,
    keys: &Arc<Keys>,
    pb: &indicatif::ProgressBar,
    logged: &mut dyn FnMut([String; 9]) -> Result<()>,
    smt: Option<((usize, usize), (usize, usize))>,
    top: usize,
    budget_note: &mut Option<String>,
) -> Result<Measured> {
    let mut point = |experiment: &str, c: Config, seconds: f64| -> Result<Point> {
        let pt = measure(c, keys, seconds, p.runs, pb)?;
        logged(point_row(experiment, c, p.runs, &pt))?;
        Ok(pt)
    };
    let (first, rest) = plan(p, top);
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
    let order_each = if p.order_each {
        order_costs(&p.workers, top, &done, (ordered, unordered))
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

fn cfg(cipher: Cipher, workers: usize, batch: usize, ordered: bool) -> Config {
    Config {
        cipher,
        workers,
        batch,
        ordered,
    }
}

/// The points of a run in order of priority (what a budget skips goes from the end): the first
/// scaling point, then order kept against not (the report needs both), the rest of the
/// scaling, with --order-each the unordered point at every other worker count, the grouping
/// sweep. The SMT pair comes after all of them.
fn plan(p: &Params, top: usize) -> ((&'static str, Config), Vec<(&'static str, Config)>) {
    let ciphers = [Cipher::Gcm, Cipher::Ctr];
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
    (first, rest)
}

/// The order cost at each worker count of `done`: (workers, in order, as finished); at `top`
/// the dedicated pair `at_top`.
fn order_costs(
    workers: &[usize],
    top: usize,
    done: &[(&str, Config, Point)],
    at_top: (Point, Point),
) -> Vec<(usize, Point, Point)> {
    workers
        .iter()
        .filter_map(|&w| {
            if w == top {
                return Some((w, at_top.0, at_top.1));
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
}

/// The runs' seconds and how many of `rest` (then the SMT pair) fit in the budget `b`, given
/// that the first point took `t1` s; and the note that says so.
pub(super) fn fit_points(
    p: &Params,
    b: f64,
    t1: f64,
    rest: &[(&str, Config)],
    smt_points: usize,
) -> (f64, usize, String) {
    let windows = p.runs + 1;
    let overhead = t1 / windows as f64 - p.seconds;
    let f = crate::bench::fit_budget(
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
    let note = crate::bench::budget_note(b, t1, seconds, p.seconds, &what) + over;
    (seconds, keep, note)
}

/// Two CPUs for the SMT pair.
pub(super) type CpuPair = (usize, usize);

/// What a run measured, for the report.
pub(super) struct Measured {
    pub(super) scaling: Vec<(Cipher, usize, Point)>,
    pub(super) ordered: Point,
    pub(super) unordered: Point,
    pub(super) grouping: Vec<(Cipher, usize, Point)>,
    /// The sibling and separate CPU pairs and their Gbit/s.
    pub(super) smt: Option<(CpuPair, CpuPair, f64, f64)>,
    /// The order cost at each worker count: (workers, in order, as finished).
    pub(super) order_each: Vec<(usize, Point, Point)>,
}
