//! `sealink-lab bench stacks --quick` end to end: tables on stdout, CSV and SVG files, the markdown
//! report stacks.md (with paper 000's figures beside ours) and the run record stacks.json in
//! --out.

mod common;

#[test]
fn bench_stacks_quick_writes_tables_csv_and_svg() {
    let run = common::bench(&[
        "stacks",
        "--quick",
        "--stacks",
        "baseline,aes128-gcm",
        "--workers",
        "2",
        "--seconds",
        "0.02",
        "--runs",
        "1",
    ]);
    let (dir, stdout) = (&run.dir, &run.stdout);
    run.assert_stdout_has(&[
        "### Throughput and speedup",
        "| aes128-gcm | send | PLP  |",
        "Table 1 (PLP)",
        "Table 2 (CLP)",
        "thread-per-connection vs processor-per-connection",
        "PROJECTED",
        "PROJECTION by paper 000's own method",
        "raw library seal rate",
        "TCP/IP",
    ]);
    let files = [
        "scaling.csv",
        "latency.csv",
        "serial_fraction.csv",
        // Paper 000's projection method (baseline and aes128-gcm are in --stacks).
        "projection.csv",
        "connections.csv",
        "layered.csv",
        "raw.csv",
        "throughput-plp-send.svg",
        "speedup-plp-send.svg",
        "throughput-clp-recv.svg",
        "speedup-clp-recv.svg",
        "connections.svg",
    ];
    for f in files {
        let text = std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(text.len() > 40, "{f} is nearly empty");
        if f.ends_with(".svg") {
            assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
            // The legend names every stack.
            for stack in ["baseline", "aes128-gcm"] {
                assert!(text.contains(stack), "{f} has no {stack}");
            }
        }
    }
    let scaling = std::fs::read_to_string(dir.join("scaling.csv")).unwrap();
    // header + 2 stacks x 2 sides x 2 modes x 2 workers
    assert_eq!(scaling.lines().count(), 1 + 16, "{scaling}");
    check_report(&dir.join("stacks.md"), stdout);
    let mut all = files.to_vec();
    all.extend([
        "stacks.md",
        "stacks-points.csv",
        "throughput-plp-recv.svg",
        "speedup-plp-recv.svg",
        "throughput-clp-send.svg",
        "speedup-clp-send.svg",
    ]);
    let rec = common::run_record(dir, "stacks", &all);
    let (speedup, unit) = common::figure(&rec, "aes128-gcm send PLP speedup @2w");
    assert!(
        speedup.is_some_and(|s| s > 0.0) && unit == "x",
        "{speedup:?} {unit}"
    );
}

/// The cells of a markdown table row.
fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_matches('|')
        .split('|')
        .map(|c| c.trim().to_owned())
        .collect()
}

/// stacks.md holds the report and the comparison with paper 000's figures: a paper column, our
/// figure as a number and the ratio, for Figure 3 (one processor) and Figure 11 (12 and 24
/// connections in --quick) of the baseline stack.
fn check_report(path: &std::path::Path, stdout: &str) {
    let md = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(md.contains("### Throughput and speedup"), "{md}");
    let at = md
        .find("### Paper 000's figures beside ours")
        .unwrap_or_else(|| panic!("no comparison in stacks.md:\n{md}"));
    assert!(stdout.contains("### Paper 000's figures beside ours"));
    let lines: Vec<&str> = md[at..].lines().filter(|l| l.starts_with('|')).collect();
    let head = cells(lines[0]);
    let col = |name: &str| {
        head.iter()
            .position(|c| c == name)
            .unwrap_or_else(|| panic!("no column {name:?} in {head:?}"))
    };
    let (paper, ours, ratio) = (col("paper 1996"), col("ours"), col("ours / paper"));
    let rows: Vec<Vec<String>> = lines[2..].iter().map(|l| cells(l)).collect();
    let row = |fig: &str, point: &str| {
        rows.iter()
            .find(|r| r[0] == fig && r[1].starts_with("baseline") && r[4] == point)
            .unwrap_or_else(|| panic!("no {fig} {point} row in\n{md}"))
    };
    for r in &rows {
        let v: f64 = r[ours]
            .parse()
            .unwrap_or_else(|e| panic!("ours {:?} is not a number ({e}): {r:?}", r[ours]));
        assert!(v.is_finite() && v > 0.0, "{r:?}");
    }
    // Figure 3: "roughly 138 Mb/s" at one processor; ratio = ours / 138.
    let f3 = row("Fig. 3", "1 proc; ours 1 worker");
    assert_eq!(f3[paper], "~138", "{f3:?}");
    let (o, x): (f64, f64) = (f3[ours].parse().unwrap(), f3[ratio].parse().unwrap());
    assert!((x - o / 138.0).abs() <= 0.01 * x.max(1.0), "{f3:?}");
    // Figure 11 at 12 connections: equal in the paper, a ratio here.
    let f11 = row("Fig. 11", "12 conns");
    assert_eq!(f11[paper], "1", "{f11:?}");
    assert_eq!(f11[ours], f11[ratio], "{f11:?}");
    // Beyond 12 the paper's baseline has no number: no ratio.
    let f11 = row("Fig. 11", "24 conns");
    assert_eq!(f11[ratio], "-", "{f11:?}");
    // The speedup figures are there, and the sources are quoted.
    assert!(rows.iter().any(|r| r[0] == "Fig. 4"), "{md}");
    assert!(md.contains("Sources (paper 000, by section)"), "{md}");
}
