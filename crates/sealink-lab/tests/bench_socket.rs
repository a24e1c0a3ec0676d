//! `sealink-lab bench socket --quick` end to end: tables on stdout, socket.csv and the run record
//! socket.json in --out.

mod common;

#[test]
fn bench_socket_quick_writes_tables_and_csv() {
    let run = common::bench(&["socket", "--quick"]);
    let dir = &run.dir;
    run.assert_stdout_has(&[
        "QUICK MODE",
        "machine: ",
        "### Send paths",
        "| library        | 4k     |",
        "| crypto-service | 16k    |",
        "| integrated     | 8k     |",
        "| integrated-1   | 4k     |",
        "### Table I",
        "| integrated (kernel) ",
        "| integrated-1 (kernel, 1 record per write) |",
        "32.79",
        "### Table II",
        "| vs crypto-service (/dev/crypto) ",
        "| vs integrated-1 (kernel, 1 record per write) |",
        "socket.csv",
    ]);
    let csv = std::fs::read_to_string(dir.join("socket.csv")).expect("socket.csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("path,record_bytes,run,bytes,seconds,gbps,writes"));
    // header + 12 runs + 12 medians (4 paths x 3 record sizes)
    assert_eq!(lines.len(), 1 + 12 + 12, "{csv}");
    for l in &lines[1..] {
        let bytes: u64 = l.split(',').nth(3).unwrap().parse().unwrap();
        assert_eq!(bytes, 16 << 20, "{l}");
    }
    let rec = common::run_record(dir, "socket", &["socket.csv"]);
    // Seconds and Gbit/s for each of the 12 points, as in the CSV's median lines.
    assert_eq!(rec.summary.len(), 2 * 12, "{:?}", rec.summary);
    let median = lines
        .iter()
        .find(|l| l.starts_with("integrated,16384,median,"))
        .unwrap();
    let secs: f64 = median.split(',').nth(4).unwrap().parse().unwrap();
    let fig = common::figure(&rec, "integrated 16k seconds");
    assert_eq!(fig, (Some(secs), "s".into()));
    // The library and integrated paths copy each plaintext byte once, counted alike
    // (copied_bytes is column 7); the integrated-1 row writes once per record, as the library.
    let col = |prefix: &str, i: usize| -> f64 {
        let l = lines.iter().find(|l| l.starts_with(prefix)).unwrap();
        l.split(',').nth(i).unwrap().parse().unwrap()
    };
    for path in ["library", "integrated-1", "integrated"] {
        let copied = col(&format!("{path},4096,median,"), 7);
        assert_eq!(copied, (16u64 << 20) as f64, "{path}");
    }
    assert_eq!(col("integrated-1,4096,median,", 11), 1.0);
    assert_eq!(col("integrated,4096,median,", 11), 64.0);
}

/// `--only PATH --record BYTES` (what bench/socket-profile.sh profiles): that path alone, one
/// line per run, no tables and no files; an unknown path or record size is a usage error.
#[test]
fn bench_socket_only_runs_one_path() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let run = |args: &[&str]| {
        let out = common::path_str(&dir);
        let fixed = [
            "bench", "socket", "--size", "1", "--runs", "2", "--out", out,
        ];
        common::lab(fixed.iter().chain(args))
    };
    let out = run(&["--only", "crypto-service", "--record", "4096"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    for (i, l) in lines.iter().enumerate() {
        assert!(
            l.starts_with(&format!("crypto-service 4k run {i}: ")),
            "{l}"
        );
        assert!(l.ends_with(" Gbit/s"), "{l}");
    }
    assert!(!stdout.contains("Table I"), "{stdout}");
    assert!(!dir.join("socket.csv").exists());
    for bad in [
        &["--only", "fast"][..],
        &["--only", "library", "--record", "1000"],
    ] {
        let out = run(bad);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
