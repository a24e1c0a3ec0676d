//! The report of `bench tunnel-cores`: the scaling, order and grouping tables, the CSV rows
//! and the files written.

use super::*;

pub(super) fn f3(v: f64) -> String {
    format!("{v:.3}")
}

/// One measured point as a row of [`POINTS_FILE`] (medians over `runs`).
pub(super) fn point_row(experiment: &str, cfg: Config, runs: usize, pt: &Point) -> [String; 9] {
    [
        experiment.to_owned(),
        cfg.cipher.name().to_owned(),
        cfg.workers.to_string(),
        cfg.batch.to_string(),
        cfg.ordered.to_string(),
        runs.to_string(),
        f3(pt.gbps),
        f3(pt.mpps),
        format!("{:.4}", pt.out_of_order),
    ]
}
/// The report's heading and its scaling section (paper 004's Table 1, Figures 8-9): the
/// scaling CSV's table and the chart.
pub(super) fn report_scaling(
    out: &mut String,
    p: &Params,
    m: &Measured,
    cores: usize,
    budget_note: Option<&str>,
) -> (Table, Chart) {
    let ciphers = [Cipher::Gcm, Cipher::Ctr];
    let (backend, why) = sealink_crypto::suite::chosen_backend(SuiteId::Aes128Gcm);
    let _ = writeln!(
        out,
        "sealink-lab bench tunnel-cores: paper 004's multicore figures, {PACKET}-byte packets sealed in process through the tunnel's engine (sealink_engine::Pipeline)"
    );
    if p.quick {
        let _ = writeln!(out, "QUICK MODE: short runs, not a measurement");
    }
    let _ = writeln!(
        out,
        "machine: {} ({cores} cores); AEAD backend {backend} ({why}); AES-CTR: aws-lc-rs",
        record::cpu_model()
    );
    let _ = writeln!(
        out,
        "median of {} runs of {} s after a warm-up; payload bytes only (Gbit/s = 10^9 bit/s); batches of {} packets unless stated; workers = engine threads + the submitting thread, which helps",
        p.runs, p.seconds, p.batch
    );
    if let Some(note) = &budget_note {
        let _ = writeln!(out, "{note}");
    }
    let _ = writeln!(
        out,
        "paper 004 figures: only the values its text states are shown (our copy of the paper is text only, so nothing is read off its plots)\n"
    );

    // Figure 8/9 and Table 1: throughput against workers.
    let _ = writeln!(
        out,
        "### Throughput against workers (paper: Table 1, Figures 8-9)"
    );
    let mut t = Table::new([
        "workers",
        "cipher",
        "Gbit/s",
        "Mpps",
        "speedup",
        "paper 004 (AES-CTR, 2x Xeon 5530)",
    ]);
    let mut tc = Table::new(["workers", "cipher", "gbps", "mpps", "speedup"]);
    let mut chart = Chart::new(
        "tunnel-cores: throughput against workers (1400-byte packets)",
        "workers",
        "Gbit/s",
    );
    for &c in &ciphers {
        let rows: Vec<_> = m.scaling.iter().filter(|r| r.0 == c).collect();
        let base = rows
            .iter()
            .find(|r| r.1 == 1)
            .map_or(f64::NAN, |r| r.2.gbps);
        for r in &rows {
            let paper = match r.1 {
                1 => "0.8 Gb/s mono-thread (Table 1)",
                2..=7 => "linear in threads below 7 (Fig. 8, text)",
                8..=14 => "HT: falls, then rises from 13 (Fig. 9, text)",
                _ => "5.75 Gb/s at 15 threads, the best (Fig. 9, text)",
            };
            let sp = r.2.gbps / base;
            t.row([
                r.1.to_string(),
                c.name().into(),
                f3(r.2.gbps),
                f3(r.2.mpps),
                f3(sp),
                paper.into(),
            ]);
            tc.row([
                r.1.to_string(),
                c.name().into(),
                r.2.gbps.to_string(),
                r.2.mpps.to_string(),
                sp.to_string(),
            ]);
        }
        chart = chart.series(
            c.name(),
            rows.iter().map(|r| (r.1 as f64, r.2.gbps)).collect(),
        );
    }
    out.push_str(&t.markdown());

    (tc, chart)
}

/// The report's section on per-flow order: the order-each CSV's table.
pub(super) fn report_order(out: &mut String, p: &Params, m: &Measured, top: usize) -> Table {
    let (ordered, unordered) = (m.ordered, m.unordered);
    // Order preservation.
    let _ = writeln!(
        out,
        "\n### Per-flow order kept against not (aes128-gcm, {top} workers; paper: section 4)"
    );
    let mut to = Table::new([
        "release",
        "Gbit/s",
        "Mpps",
        "batches out of order",
        "paper 004",
    ]);
    let cost = 1.0 - ordered.gbps / unordered.gbps;
    to.row([
        "in order (one lane: the tunnel's)".to_string(),
        f3(ordered.gbps),
        f3(ordered.mpps),
        format!("{:.1}%", ordered.out_of_order * 100.0),
        "ordered work stealing: speedup 6 on 8 processors (citing [12])".into(),
    ]);
    to.row([
        "as finished (a lane per batch)".to_string(),
        f3(unordered.gbps),
        f3(unordered.mpps),
        format!("{:.1}%", unordered.out_of_order * 100.0),
        "classic parallel: speedup 4 on 8 processors (citing [12])".into(),
    ]);
    out.push_str(&to.markdown());
    let _ = writeln!(
        out,
        "cost of keeping order: {:.1}% of the unordered throughput",
        cost * 100.0
    );
    let mut toe = Table::new([
        "workers",
        "in order Gbit/s",
        "as finished Gbit/s",
        "cost of keeping order",
    ]);
    for (w, or, un) in &m.order_each {
        toe.row([
            w.to_string(),
            f3(or.gbps),
            f3(un.gbps),
            format!("{:.1}%", (1.0 - or.gbps / un.gbps) * 100.0),
        ]);
    }
    if p.order_each {
        let _ = writeln!(
            out,
            "\nThe order cost at each worker count (aes128-gcm, batch {}; in order: the scaling row, or the pair above at {top}; counts a budget skipped are left out):",
            p.batch
        );
        out.push_str(&toe.markdown());
    }

    toe
}

/// The report's sections on packet grouping and hyper-thread siblings: their CSVs' tables.
pub(super) fn report_grouping(
    out: &mut String,
    m: &Measured,
    top: usize,
    smt_skipped: bool,
) -> (Table, Table) {
    // Grouping.
    let _ = writeln!(
        out,
        "\n### Packet grouping: throughput against batch size ({top} workers; paper: Figures 11-12)"
    );
    let mut tg = Table::new(["batch (packets)", "cipher", "Gbit/s", "Mpps", "paper 004"]);
    let mut tgc = Table::new(["batch", "cipher", "gbps", "mpps"]);
    for (c, b, pt) in &m.grouping {
        tg.row([
            b.to_string(),
            c.name().into(),
            f3(pt.gbps),
            f3(pt.mpps),
            "CPU speed almost constant in buffer size (Fig. 12, text); time linear in data size (Fig. 11)".into(),
        ]);
        tgc.row([
            b.to_string(),
            c.name().into(),
            pt.gbps.to_string(),
            pt.mpps.to_string(),
        ]);
    }
    out.push_str(&tg.markdown());

    // Hyper-threading.
    let _ = writeln!(
        out,
        "\n### Hyper-thread siblings against separate cores (paper: Figures 9-10)"
    );
    let mut ts = Table::new(["placement", "cpus", "Gbit/s (2 threads, aes128-gcm)"]);
    match m.smt {
        Some((sib, sep, a, b)) => {
            ts.row([
                "siblings".to_string(),
                format!("{},{}", sib.0, sib.1),
                f3(a),
            ]);
            ts.row([
                "separate cores".to_string(),
                format!("{},{}", sep.0, sep.1),
                f3(b),
            ]);
            out.push_str(&ts.markdown());
            let _ = writeln!(out, "siblings / separate: {:.3}", a / b);
        }
        None if smt_skipped => {
            let _ = writeln!(out, "skipped for the budget");
        }
        None => {
            let _ = writeln!(out, "no SMT siblings on this machine");
        }
    }
    let _ = writeln!(
        out,
        "paper 004 (text): with 9 threads on 8 cores, six threads take about 36 s, one 45-50 s and two near 70 s (Fig. 10); with 15 the times are uniform; 16 or more threads gain nothing"
    );

    (tgc, ts)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn write_files(
    dir: &Path,
    scaling: &Table,
    grouping: &Table,
    chart: &Chart,
    order: (&Point, &Point),
    points: &[(Cipher, usize, Point)],
    smt: &Table,
    order_each: &Table,
) -> Result<(PathBuf, PathBuf)> {
    let mut rec = RunRecord::new("tunnel-cores");
    rec.file(POINTS_FILE);
    let csv = rec.write_csv(dir, "tunnel-cores.csv", scaling)?;
    rec.write_csv(dir, "tunnel-cores-batch.csv", grouping)?;
    if !smt.is_empty() {
        rec.write_csv(dir, "tunnel-cores-smt.csv", smt)?;
    }
    if !order_each.is_empty() {
        rec.write_csv(dir, "tunnel-cores-order.csv", order_each)?;
    }
    rec.write_svg(dir, "tunnel-cores.svg", chart)?;
    for (c, w, pt) in points {
        rec.figure(format!("{} {w} workers", c.name()), pt.gbps, "Gbit/s");
    }
    rec.figure("aes128-gcm ordered", order.0.gbps, "Gbit/s");
    rec.figure("aes128-gcm unordered", order.1.gbps, "Gbit/s");
    rec.figure(
        "order cost",
        (1.0 - order.0.gbps / order.1.gbps) * 100.0,
        "%",
    );
    Ok((csv, rec.write(dir)?))
}
