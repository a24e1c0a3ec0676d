//! `sealink bench stacks --quick` end to end: tables on stdout, CSV and SVG files and the run
//! record stacks.json in --out.

mod common;

use std::process::Command;

#[test]
fn bench_stacks_quick_writes_tables_csv_and_svg() {
    // --out names a directory the bench creates.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let out = Command::new(env!("CARGO_BIN_EXE_sealink"))
        .args([
            "bench",
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
            "--out",
        ])
        .arg(&dir)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sealink");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "### Throughput and speedup",
        "| aes128-gcm | send | PLP  |",
        "Table 1 (PLP)",
        "Table 2 (CLP)",
        "thread-per-connection vs processor-per-connection",
        "PROJECTED",
        "raw library seal rate",
        "TCP/IP",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    let files = [
        "scaling.csv",
        "latency.csv",
        "serial_fraction.csv",
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
    let mut all = files.to_vec();
    all.extend([
        "throughput-plp-recv.svg",
        "speedup-plp-recv.svg",
        "throughput-clp-send.svg",
        "speedup-clp-send.svg",
    ]);
    let rec = common::run_record(&dir, "stacks", &all);
    let (speedup, unit) = common::figure(&rec, "aes128-gcm send PLP speedup @2w");
    assert!(
        speedup.is_some_and(|s| s > 0.0) && unit == "x",
        "{speedup:?} {unit}"
    );
}
