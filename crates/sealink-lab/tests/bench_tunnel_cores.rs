//! `sealink-lab bench tunnel-cores --quick` and `sealink-lab bench gpu --quick` end to end: tables on
//! stdout, CSV, SVG and a run record that parses.

mod common;

#[test]
fn bench_tunnel_cores_quick_writes_its_files() {
    let run = common::bench(&["tunnel-cores", "--quick", "--workers", "1,2"]);
    let (dir, stdout) = (&run.dir, &run.stdout);
    run.assert_stdout_has(&[
        "QUICK MODE",
        "### Throughput against workers",
        "0.8 Gb/s mono-thread (Table 1)",
        "### Per-flow order kept",
        "cost of keeping order",
        "### Packet grouping",
        "### Hyper-thread siblings",
    ]);
    let mut files = vec![
        "tunnel-cores.csv",
        "tunnel-cores-batch.csv",
        "tunnel-cores.svg",
        "tunnel-cores-points.csv",
    ];
    // The SMT table exists only on machines with hyper-thread siblings.
    if stdout.contains("no SMT siblings on this machine") {
        assert!(!dir.join("tunnel-cores-smt.csv").exists());
    } else {
        files.push("tunnel-cores-smt.csv");
    }
    let rec = common::run_record(dir, "tunnel-cores", &files);
    let svg = std::fs::read_to_string(dir.join("tunnel-cores.svg")).unwrap();
    assert!(svg.contains("<svg"));
    let csv = std::fs::read_to_string(dir.join("tunnel-cores.csv")).unwrap();
    // Header, then two ciphers by two worker counts.
    assert_eq!(csv.lines().count(), 1 + 4, "{csv}");
    let (g, unit) = common::figure(&rec, "aes128-gcm 2 workers");
    assert!(g.is_some_and(|g| g > 0.0) && unit == "Gbit/s");
}

#[test]
fn bench_gpu_quick_prints_cpu_rows_and_why_no_gpu() {
    let run = common::bench(&["gpu", "--quick", "--workers", "1", "--sizes", "4096,131072"]);
    let (dir, stdout) = (&run.dir, &run.stdout);
    assert!(stdout.contains("| 128 KB"), "{stdout}");
    assert!(stdout.contains("3.7 Gb/s"), "{stdout}");
    if stdout.contains("GPU: not measured") {
        assert!(stdout.contains("no CUDA device/driver found: "), "{stdout}");
        assert!(
            stdout.contains("crossover: not measured (no GPU)"),
            "{stdout}"
        );
    }
    let rec = common::run_record(dir, "gpu", &["gpu.csv", "gpu.svg", "gpu-points.csv"]);
    let (cpu, _) = common::figure(&rec, "cpu best 128 KB");
    assert!(cpu.is_some_and(|c| c > 0.0));
}
