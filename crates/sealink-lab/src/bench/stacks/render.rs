//! `bench stacks`' report: the markdown tables printed and written to `stacks.md` (paper 000's
//! Tables 1 and 2, figures 3-11 beside ours, serial fractions and projections), the CSV files,
//! the SVG plots and the run record.

use super::*;

/// The projections as a table (CSV and report alike).
pub(super) fn projection_table(p: &Params, rows: &[Projection]) -> Table {
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
pub(super) fn projection_report(p: &Params, t: &Table) -> String {
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

/// One measured point as a row of [`POINTS_FILE`].
#[allow(clippy::too_many_arguments)]
pub(super) fn point_row(
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

/// Writes the report `report` (stacks.md), the CSV files, the SVG plots and the run record
/// stacks.json into `p.out`.
pub(super) fn write_files(
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
    let t = scaling_table(&mut rec, p, curves);
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
    rec.write_csv(dir, "serial_fraction.csv", &serial_fraction_table(curves))?;
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

    write_charts(&mut rec, p, curves, many)?;
    rec.write(dir)
}

fn f3(v: f64) -> String {
    format!("{v:.3}")
}

fn est(e: Estimate) -> [String; 3] {
    [f3(e.median), f3(e.lo), f3(e.hi)]
}

/// scaling.csv: every curve's points with their speedups; each curve's one-worker rate and
/// top speedup also go into the run record.
fn scaling_table(rec: &mut RunRecord, p: &Params, curves: &[Curve]) -> Table {
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
    t
}

/// serial_fraction.csv: each curve's fitted serial fraction, its Amdahl ceiling and the
/// speedups it projects.
fn serial_fraction_table(curves: &[Curve]) -> Table {
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
    t
}

/// The plots: throughput (log scale) and speedup (with the ideal line) against workers, for
/// each side and mode, and the many-connections chart.
fn write_charts(
    rec: &mut RunRecord,
    p: &Params,
    curves: &[Curve],
    many: &[(&Stack, usize, ClpPolicy, Estimate)],
) -> Result<()> {
    let dir = &p.out;
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
    Ok(())
}

/// A markdown table (text in the first column and the columns `left`, numbers elsewhere) and
/// the blank line after it.
pub(super) fn table(out: &mut String, head: &[&str], rows: &[Vec<String>], left: &[usize]) {
    let mut t = Table::new(head.iter().copied()).left(left);
    for r in rows {
        t.row(r.iter().cloned());
    }
    out.push_str(&t.markdown());
    out.push('\n');
}

pub(super) fn fmt_mbps(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

pub(super) fn fmt_est(e: Estimate) -> String {
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
pub(super) fn tpc_ppc(
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

pub(super) fn render(
    p: &Params,
    cores: usize,
    raw: Estimate,
    curves: &[Curve],
    layered: &[(&Stack, Op, Estimate)],
    many: &[(&Stack, usize, ClpPolicy, Estimate)],
    many_runs: usize,
) -> String {
    let mut out = String::new();
    render_header(&mut out, p, cores);
    render_throughput(&mut out, p, curves);
    render_latency(&mut out, p, curves);
    render_many_connections(&mut out, p, many, many_runs);
    render_serial_fraction(&mut out, p, cores, curves);
    render_layered(&mut out, p, curves, layered);
    render_targets(&mut out, p, raw, curves);
    out
}

/// The report's opening: what was measured, how, and where the files went.
fn render_header(out: &mut String, p: &Params, cores: usize) {
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
}

/// Throughput and speedup of every curve, beside the 1996 figures (paper 000 figures 3-10).
fn render_throughput(out: &mut String, p: &Params, curves: &[Curve]) {
    let nw = p.workers;
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
    table(out, &head_ref, &rows, &[1, 2]);
    let _ = writeln!(
        out,
        "1996 columns: 12-processor SGI Challenge (100 MHz R4400), TCP stacks, 4 KiB packets; 1-processor Mb/s derived from Tables 1-2 latencies (4096 B x 8 / usec), speedups as the text states them (see \"Paper 000's figures beside ours\" at the end).\n"
    );
}

/// Tables 1 (PLP) and 2 (CLP): microseconds per packet at one worker, beside the 1996 ones.
fn render_latency(out: &mut String, p: &Params, curves: &[Curve]) {
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
            out,
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
}

/// Figure 11: thread-per-connection against processor-per-connection.
fn render_many_connections(
    out: &mut String,
    p: &Params,
    many: &[(&Stack, usize, ClpPolicy, Estimate)],
    many_runs: usize,
) {
    let nw = p.workers;
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
        out,
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
}

/// The Amdahl fit of each curve and the speedups it projects.
fn render_serial_fraction(out: &mut String, p: &Params, cores: usize, curves: &[Curve]) {
    let nw = p.workers;
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
            out,
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
}

/// The layered pipeline against PLP at the most workers.
fn render_layered(
    out: &mut String,
    p: &Params,
    curves: &[Curve],
    layered: &[(&Stack, Op, Estimate)],
) {
    let nw = p.workers;
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
        out,
        &[
            "stack",
            "side",
            "layered Mbit/s",
            &format!("PLP {nw}w Mbit/s"),
        ],
        &rows,
        &[1],
    );
}

/// The project's own targets: the protocol against the raw library, and the speedup at 2.
fn render_targets(out: &mut String, p: &Params, raw: Estimate, curves: &[Curve]) {
    let nw = p.workers;
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
}

/// "Paper 000's figures beside ours": every point of `paper::POINTS` this run measured, in
/// figure order, with our figure of the same quantity and the ratio, then the sentences of the
/// paper the values rest on.
pub(super) fn paper_comparison(
    p: &Params,
    curves: &[Curve],
    many: &[(&Stack, usize, ClpPolicy, Estimate)],
) -> String {
    let nw = p.workers;
    let rows = beside_rows(p, curves, many);
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

/// The points of `paper::POINTS` this run measured, each with our figure, in figure order.
fn beside_rows(
    p: &Params,
    curves: &[Curve],
    many: &[(&Stack, usize, ClpPolicy, Estimate)],
) -> Vec<Beside> {
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
    rows
}
