//! `sealink bench crypto --quick` runs end to end, prints the table and writes the CSV.

use std::process::Command;

#[test]
fn bench_crypto_quick_prints_table_and_csv() {
    // --out names a directory the bench creates.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_sealink"))
        .args(["bench", "crypto", "--quick", "--out"])
        .arg(&dir)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sealink");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("QUICK MODE"), "{stdout}");
    assert!(
        stdout.contains("| algorithm ") && stdout.contains("today / 1995"),
        "{stdout}"
    );
    for name in [
        "| MD5 ",
        "| SHA-256 ",
        "| DES-CBC ",
        "| 3DES-CBC ",
        "| AES-128-GCM ",
        "| ChaCha20-Poly1305 ",
        "| RSA-2048 sign ",
        "| RSA-2048 verify ",
        "| DH-2048 agreement, 256-bit exponent ",
        "| X25519 agreement ",
        "| Ed25519 sign ",
        "| Ed25519 verify ",
        "| GHASH, this binary ",
    ] {
        assert!(stdout.contains(name), "missing {name:?} in\n{stdout}");
    }
    // Algorithms the paper has get a ratio; the others say n/a.
    assert!(
        stdout.contains("80 Mbits/sec") && stdout.contains("n/a"),
        "{stdout}"
    );
    let csv = std::fs::read_to_string(dir.join("crypto.csv")).expect("crypto.csv");
    assert!(csv.starts_with("algorithm,value,unit,"), "{csv}");
    assert!(csv.lines().count() >= 16, "{csv}");
}

#[test]
fn bench_crypto_rejects_bad_size() {
    let o = Command::new(env!("CARGO_BIN_EXE_sealink"))
        .args(["bench", "crypto", "--size", "0"])
        .output()
        .expect("run sealink");
    assert_eq!(o.status.code(), Some(1));
}
