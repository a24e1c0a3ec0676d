//! `sealink bench crypto --quick` runs end to end, prints the table and writes the CSV and the
//! run record.

mod common;

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
    // 13 rows of Table 1 and the in-process GHASH, 7 fields each (details with commas quoted).
    let rows: Vec<csv::StringRecord> = csv::Reader::from_reader(csv.as_bytes())
        .records()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{e}: {csv}"));
    assert!(rows.len() >= 14, "{csv}");
    assert!(rows.iter().all(|r| r.len() == 7), "{csv}");
    // A name with a comma is quoted, and reads back whole.
    assert!(
        csv.contains("\n\"DH-2048 agreement, 256-bit exponent\",")
            && rows
                .iter()
                .any(|r| &r[0] == "DH-2048 agreement, 256-bit exponent"),
        "{csv}"
    );
    assert!(rows.iter().any(|r| &r[0] == "GHASH in process"), "{csv}");
    let md5: f64 = rows.iter().find(|r| &r[0] == "MD5").unwrap()[1]
        .parse()
        .unwrap();
    assert!(stdout.contains("run record: "), "{stdout}");
    let rec = common::run_record(&dir, "crypto", &["crypto.csv"]);
    assert_eq!(common::figure(&rec, "MD5"), (Some(md5), "Mbit/s".into()));
}

#[test]
fn bench_crypto_rejects_bad_size() {
    let o = Command::new(env!("CARGO_BIN_EXE_sealink"))
        .args(["bench", "crypto", "--size", "0"])
        .output()
        .expect("run sealink");
    assert_eq!(o.status.code(), Some(2), "a usage error");
}
