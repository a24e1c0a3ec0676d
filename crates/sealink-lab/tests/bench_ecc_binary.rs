//! `bash bench/ecc-binary.sh --quick`: ECDH over binary-field curves through OpenSSL with
//! PCLMULQDQ on and masked (paper 001's carry-less multiply), printed as a markdown table with
//! the paper's estimate beside ours. Skipped, with the script's reason, where this machine
//! cannot make the comparison (exit status 77: no openssl, no binary curves, no PCLMULQDQ).

use std::path::Path;
use std::process::Command;

#[test]
fn ecc_binary_quick_prints_the_table() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/ecc-binary.sh");
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(&script)
        .arg("--quick")
        // One binary curve and one prime-field control keep the smoke test to a few seconds.
        .env("ECC_CURVES", "ecdhb163 ecdhp256")
        .env("ECC_OUT", tmp.path())
        .env_remove("OPENSSL_ia32cap")
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(77) {
        eprintln!("skipped: {}", stderr.trim());
        assert!(stderr.contains("SKIP: "), "{stderr}");
        return;
    }
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("load average at the start: "), "{stdout}");
    assert!(stdout.contains("mask check: AES-128-GCM"), "{stdout}");
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(
        lines[0],
        "| curve | field | CLMUL on, ops/s | CLMUL masked, ops/s | on / masked | paper 1995 | ours / paper |"
    );
    let row = |curve: &str| -> Vec<String> {
        lines[2..]
            .iter()
            .map(|l| {
                l.trim_matches('|')
                    .split('|')
                    .map(|c| c.trim().to_owned())
                    .collect::<Vec<_>>()
            })
            .find(|r| r[0] == curve)
            .unwrap_or_else(|| panic!("no {curve} row in\n{stdout}"))
    };
    for curve in ["ecdhb163", "ecdhp256"] {
        let r = row(curve);
        let num = |i: usize| -> f64 {
            r[i].parse()
                .unwrap_or_else(|e| panic!("{:?} ({e}) in {r:?}", r[i]))
        };
        let (on, off, ratio) = (num(2), num(3), num(4));
        assert!(on > 0.0 && off > 0.0, "{r:?}");
        // The ratio is the medians' (both printed rounded to whole ops/s).
        assert!((ratio - on / off).abs() <= 0.01 + 0.01 * ratio, "{r:?}");
    }
    let b = row("ecdhb163");
    assert!(
        b[1].starts_with("binary") && b[5].starts_with("~1.3"),
        "{b:?}"
    );
    let x: f64 = b[6].parse().expect("ours / paper");
    assert!(
        (x - b[4].parse::<f64>().unwrap() / 1.3).abs() < 0.01,
        "{b:?}"
    );
    let p = row("ecdhp256");
    assert!(p[1].starts_with("prime") && p[6] == "-", "{p:?}");
    // Raw runs: a header, then one line per curve and mode.
    let csv = std::fs::read_to_string(tmp.path().join("ecc-binary.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 2 * 2, "{csv}");
    assert!(csv.starts_with("round,curve,clmul,ops_per_s\n"), "{csv}");
}

#[test]
fn ecc_binary_rejects_bad_arguments() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/ecc-binary.sh");
    let o = Command::new("bash")
        .arg(&script)
        .arg("--slow")
        .output()
        .expect("run bash");
    assert_eq!(o.status.code(), Some(2));
    let o = Command::new("bash")
        .arg(&script)
        .env("ECC_ROUNDS", "0")
        .output()
        .expect("run bash");
    assert_eq!(o.status.code(), Some(2));
}
