//! The report of `bench gpu`: throughput against batch (or packet) size, the crossover, the
//! paper's figures beside ours, the naive strategies and the phases of one batch.

use super::*;

/// Gbit/s to three decimals, "skipped" for a point a budget skipped.
pub(super) fn g3(v: f64) -> String {
    if v.is_nan() {
        "skipped".into()
    } else {
        format!("{v:.3}")
    }
}

/// What the paper says a strategy gains over its naive code at `size` (Figure 12's text).
pub(super) fn paper_gain(size: usize) -> &'static str {
    match size {
        s if s == 4 << 10 => "4x (one block per file with streams, over naive)",
        s if s == 128 << 10 => "8x, 3.7 Gb/s",
        s if s < 4 << 10 => "no significant speed-up below 4 KB",
        _ => "",
    }
}

/// The report, the CSV and SVG files and the run record.
pub(super) fn report(
    p: &Params,
    seconds: f64,
    cpu: &[Vec<f64>],
    gpu_rows: Option<&[Vec<[f64; 2]>]>,
    phase_rows: &[(usize, bool, [f64; 5])],
    (gpu_name, absent): (Option<String>, Option<String>),
    budget_note: Option<String>,
) -> Result<()> {
    let mut out = String::new();
    report_heading(
        &mut out,
        p,
        seconds,
        gpu_name.as_deref(),
        absent.as_deref(),
        budget_note.as_deref(),
    );
    let xname = if p.packet_size { "packet" } else { "batch" };
    let mut head: Vec<String> = vec![xname.into(), "packets".into()];
    head.extend(p.workers.iter().map(|w| format!("CPU {w}w Gbit/s")));
    for s in &p.strategies {
        head.push(format!("GPU {} Gbit/s (GHASH on GPU)", s.name()));
        head.push(format!("GPU {} Gbit/s (GHASH on CPU)", s.name()));
    }
    head.push("paper 004 (Fig. 12, text)".into());
    let mut t = Table::new(head.clone());
    let mut tc = Table::new(head);
    let chart = throughput_chart(p, cpu, gpu_rows, xname);
    for (i, &size) in p.sizes.iter().enumerate() {
        let paper = if size == 128 << 10 {
            "3.7 Gb/s (GTX 295, AES-CTR)"
        } else {
            ""
        };
        let per = Shape::of(p, size).per_batch.to_string();
        let mut row = vec![kb(size), per.clone()];
        row.extend(cpu[i].iter().map(|v| g3(*v)));
        let mut rowc = vec![size.to_string(), per];
        rowc.extend(cpu[i].iter().map(|v| v.to_string()));
        for si in 0..p.strategies.len() {
            for k in 0..2 {
                match gpu_rows {
                    Some(r) => {
                        row.push(g3(r[i][si][k]));
                        rowc.push(r[i][si][k].to_string());
                    }
                    None => {
                        row.push("not measured".into());
                        rowc.push(String::new());
                    }
                }
            }
        }
        row.push(paper.into());
        rowc.push(paper.into());
        t.row(row);
        tc.row(rowc);
    }
    out.push_str(&t.markdown());
    let ts = report_vs_naive(&mut out, p, gpu_rows, xname);
    let (best_cpu, d) = report_crossover(&mut out, p, cpu, gpu_rows);
    report_ghash_and_phases(&mut out, p, gpu_rows, phase_rows);
    let _ = writeln!(
        out,
        "paper 004 (text): 3.7 Gb/s at 128 KB with one CUDA block per file and streams, 8x its naive GPU code; 4x at 4 KB; CPU almost constant in size; no speed-up below 4 KB"
    );
    let mut rec = RunRecord::new("gpu");
    rec.file(POINTS_FILE);
    let csv = rec.write_csv(&p.out, "gpu.csv", &tc)?;
    if !ts.is_empty() {
        rec.write_csv(&p.out, "gpu-strategies.csv", &ts)?;
    }
    rec.write_svg(&p.out, "gpu.svg", &chart)?;
    for (s, c) in &best_cpu {
        rec.figure(format!("cpu best {}", kb(*s)), *c, "Gbit/s");
    }
    if let Some(r) = gpu_rows {
        for (i, size) in p.sizes.iter().enumerate() {
            for (si, st) in p.strategies.iter().enumerate() {
                for k in [0, 1] {
                    rec.figure(
                        format!("gpu {} {} {}", st.name(), ghash_name(k == 0), kb(*size)),
                        r[i][si][k],
                        "Gbit/s",
                    );
                }
            }
        }
    }
    rec.figure(
        "crossover",
        d.crossover().map_or(f64::NAN, |s| s as f64),
        "bytes",
    );
    let json = rec.write(&p.out)?;
    print_with_files(out, &csv, &json)
}

/// The plot of throughput against size: one line per CPU worker count, two per GPU strategy
/// (GHASH on either side).
fn throughput_chart(
    p: &Params,
    cpu: &[Vec<f64>],
    gpu_rows: Option<&[Vec<[f64; 2]>]>,
    xname: &str,
) -> Chart {
    let mut chart = Chart::new(
        format!("bench gpu: AES-128-GCM throughput against {xname} size"),
        &format!("{xname} (KB)"),
        "Gbit/s",
    );
    let kbx = |i: usize| p.sizes[i] as f64 / 1024.0;
    for (wi, w) in p.workers.iter().enumerate() {
        chart = chart.series(
            format!("CPU {w} workers"),
            (0..p.sizes.len()).map(|i| (kbx(i), cpu[i][wi])).collect(),
        );
    }
    if let Some(rows) = gpu_rows {
        for (si, s) in p.strategies.iter().enumerate() {
            for (k, on) in [(0, "GPU"), (1, "CPU")] {
                chart = chart.series(
                    format!("GPU {}, GHASH on {on}", s.name()),
                    (0..p.sizes.len())
                        .map(|i| (kbx(i), rows[i][si][k]))
                        .collect(),
                );
            }
        }
    }
    chart
}

/// The report's crossover line: from which batch size the GPU beats the best CPU row. The best
/// CPU figure at each size, and the dispatcher built from both sides' best.
pub(super) fn report_crossover(
    out: &mut String,
    p: &Params,
    cpu: &[Vec<f64>],
    gpu_rows: Option<&[Vec<[f64; 2]>]>,
) -> (Vec<(usize, f64)>, Dispatch) {
    let best_cpu: Vec<(usize, f64)> = p
        .sizes
        .iter()
        .zip(cpu)
        .map(|(s, r)| (*s, r.iter().copied().fold(f64::NAN, f64::max)))
        .collect();
    // The fastest strategy and GHASH placement at each size (the dispatcher would use that).
    let gpu_pts: Vec<(usize, f64)> = match gpu_rows {
        Some(r) => p
            .sizes
            .iter()
            .copied()
            .zip(r.iter().map(|per| {
                per.iter()
                    .flat_map(|g| g.iter().copied())
                    .fold(f64::NAN, f64::max)
            }))
            .collect(),
        None => Vec::new(),
    };
    let d = Dispatch::new(&best_cpu, &gpu_pts);
    let cross = if gpu_pts.is_empty() {
        "crossover: not measured (no GPU)".to_string()
    } else {
        match d.crossover() {
            Some(s) => format!(
                "crossover: the GPU beats the best CPU row from {} batches up",
                kb(s)
            ),
            None => "crossover: none (the CPU is as fast or faster at every measured size)".into(),
        }
    };
    let _ = writeln!(out, "\n{cross}");
    (best_cpu, d)
}

/// The report's heading: what ran, on what machine and GPU, and any budget note.
pub(super) fn report_heading(
    out: &mut String,
    p: &Params,
    seconds: f64,
    gpu_name: Option<&str>,
    absent: Option<&str>,
    budget_note: Option<&str>,
) {
    if p.packet_size {
        let _ = writeln!(
            out,
            "sealink-lab bench gpu --packet-size: paper 004 Figure 12 rerun on the paper's x-axis, AES-128-GCM over packets (the paper's files) of each size, {PACKETS_PER_BATCH} packets per batch, each packet one thread block (the naive strategies spread it over several)"
        );
    } else {
        let _ = writeln!(
            out,
            "sealink-lab bench gpu: paper 004 Figure 12 rerun, AES-128-GCM over batches of {PACKET}-byte packets"
        );
    }
    if p.quick {
        let _ = writeln!(out, "QUICK MODE: short runs, not a measurement");
    }
    let _ = writeln!(
        out,
        "machine: {} ({} cores)",
        record::cpu_model(),
        record::cores()
    );
    let strategies: Vec<&str> = p.strategies.iter().map(|s| s.name()).collect();
    let gpu_line = match (&gpu_name, &absent) {
        (Some(name), _) => format!(
            "GPU: {name} (AES-CTR with a T-table; strategies {}: naive = each packet spread over blocks of {} threads, one batch at a time; naive-streams = the same with batches in flight; no-streams = one block of {} threads per packet, one batch at a time; streams = one block per packet with {RUN_BATCHES} batches per call (at least {MIN_RUN_BATCHES}, within {} MiB) in flight over 4 streams; GHASH on the GPU or on the CPU; one copy in and one out per batch from pinned buffers; packing and unpacking included)",
            strategies.join(", "),
            sealink_gpu::kernel::SPREAD_THREADS,
            sealink_gpu::kernel::THREADS_PER_PACKET,
            RUN_BYTES >> 20
        ),
        (None, Some(why)) => format!(
            "GPU: not measured, no strategy ({}) ran (no CUDA device/driver found: {why})",
            strategies.join(", ")
        ),
        (None, None) => "GPU: not measured".into(),
    };
    let _ = writeln!(out, "{gpu_line}");
    if p.packet_size {
        let _ = writeln!(
            out,
            "CPU: aws-lc-rs AES-128-GCM (seal_in_place_separate_tag), N threads each sealing its own {PACKETS_PER_BATCH} packets of the size, each first checked to open again; median of {} runs of {seconds} s",
            p.runs
        );
        let _ = writeln!(
            out,
            "GPU points: each strategy's first batch at each size is checked byte for byte against aws-lc-rs before it is timed"
        );
    } else {
        let _ = writeln!(
            out,
            "CPU: the engine (sealink_engine::Pipeline), the tunnel's seal (datapath::seal_datagram); median of {} runs of {seconds} s",
            p.runs
        );
    }
    if let Some(note) = &budget_note {
        let _ = writeln!(out, "{note}");
    }
    out.push('\n');
}

/// The report's strategies against the naive one, per size (the paper's 4x at 4 KB and 8x at
/// 128 KB): the table, for its CSV.
pub(super) fn report_vs_naive(
    out: &mut String,
    p: &Params,
    gpu_rows: Option<&[Vec<[f64; 2]>]>,
    xname: &str,
) -> Table {
    // Each strategy over the naive one, per size: the paper's 4x (4 KB) and 8x (128 KB).
    let naive = p.strategies.iter().position(|s| *s == Strategy::Naive);
    let mut ts = Table::new(
        [
            xname,
            "strategy",
            "x naive (GHASH on GPU)",
            "x naive (GHASH on CPU)",
            "paper 004",
        ]
        .map(String::from)
        .to_vec(),
    );
    match (gpu_rows, naive) {
        (Some(r), Some(n)) => {
            for (i, &size) in p.sizes.iter().enumerate() {
                for (si, s) in p.strategies.iter().enumerate() {
                    if si == n {
                        continue;
                    }
                    let x = |k: usize| format!("{:.2}", r[i][si][k] / r[i][n][k]);
                    let paper = if *s == Strategy::Streams {
                        paper_gain(size)
                    } else {
                        ""
                    };
                    ts.row([kb(size), s.name().into(), x(0), x(1), paper.into()]);
                }
            }
            let _ = writeln!(
                out,
                "\nEach strategy against the naive one (paper: 4x at 4 KB, 8x at 128 KB, for one block per file with streams):"
            );
            out.push_str(&ts.markdown());
        }
        (None, _) => {
            let _ = writeln!(
                out,
                "\nStrategies against the naive one: not measured (no GPU); the paper's 4x at 4 KB and 8x at 128 KB are untested here"
            );
        }
        (Some(_), None) => {
            let _ = writeln!(
                out,
                "\nStrategies against the naive one: the naive strategy was not run (add it to --strategy)"
            );
        }
    }
    ts
}

/// The report's GHASH placement line and where one batch's time goes.
pub(super) fn report_ghash_and_phases(
    out: &mut String,
    p: &Params,
    gpu_rows: Option<&[Vec<[f64; 2]>]>,
    phase_rows: &[(usize, bool, [f64; 5])],
) {
    let dflt = p.strategies.iter().position(|s| *s == Strategy::default());
    if let (Some(r), Some(di)) = (gpu_rows, dflt) {
        let both: Vec<[f64; 2]> = r
            .iter()
            .map(|per| per[di])
            .filter(|g| !g[0].is_nan() && !g[1].is_nan())
            .collect();
        let faster = both.iter().filter(|g| g[0] >= g[1]).count();
        let _ = writeln!(
            out,
            "GHASH ({} strategy): on the GPU as fast or faster at {faster} of {} batch sizes{}",
            Strategy::default().name(),
            both.len(),
            if 2 * faster >= both.len() {
                " (kept as the default)"
            } else {
                " (the CPU placement wins more often; the default stays the GPU's, see RESULTS)"
            }
        );
    }
    if !phase_rows.is_empty() {
        let _ = writeln!(
            out,
            "\nWhere one batch's time goes ({} strategy's kernel, one stream, each step waited for; median of runs, microseconds):",
            Strategy::default().name()
        );
        let mut pt = Table::new(
            [
                "batch", "GHASH on", "pack", "copy in", "kernel", "copy out", "finish", "total",
                "Gbit/s",
            ]
            .map(String::from)
            .to_vec(),
        );
        for (size, on_gpu, st) in phase_rows {
            let total: f64 = st.iter().sum();
            let bits = Shape::of(p, *size).bits();
            let mut row = vec![kb(*size), if *on_gpu { "GPU" } else { "CPU" }.to_string()];
            row.extend(st.iter().map(|v| format!("{v:.1}")));
            row.push(format!("{total:.1}"));
            row.push(format!("{:.3}", bits / total / 1e3));
            pt.row(row);
        }
        out.push_str(&pt.markdown());
    }
}
