//! `sealink-lab bench crypto --quick` runs end to end, prints the table and writes the CSV and the
//! run record.

mod common;

#[test]
fn bench_crypto_quick_prints_table_and_csv() {
    let run = common::bench(&["crypto", "--quick"]);
    let (dir, stdout) = (&run.dir, &run.stdout);
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
    check_precomputation(stdout, &rows);
    let md5: f64 = rows.iter().find(|r| &r[0] == "MD5").unwrap()[1]
        .parse()
        .unwrap();
    assert!(stdout.contains("run record: "), "{stdout}");
    let rec = common::run_record(dir, "crypto", &["crypto.csv", "projection.csv"]);
    // Paper 001's projection: MD5, DES, 3DES and AES-128-GCM stacks, each with a count.
    let proj = std::fs::read_to_string(dir.join("projection.csv")).unwrap();
    assert_eq!(proj.lines().count(), 1 + 4, "{proj}");
    assert!(
        proj.lines().skip(1).all(|l| l
            .split(',')
            .nth(8)
            .is_some_and(|n| n.parse::<f64>().is_ok_and(|v| v >= 1.0))),
        "{proj}"
    );
    assert_eq!(common::figure(&rec, "MD5"), (Some(md5), "Mbit/s".into()));
}

/// Paper 001's elliptic-curve claim (precomputed generator powers, about 2.5x): for X25519 and
/// P-256 a row with fixed-base and variable-base ops/s, our ratio and the paper's; the same
/// figures in crypto.csv.
fn check_precomputation(stdout: &str, rows: &[csv::StringRecord]) {
    let at = stdout
        .find("key exchange with and without precomputation")
        .unwrap_or_else(|| panic!("no precomputation table in\n{stdout}"));
    let lines: Vec<&str> = stdout[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .collect();
    let cells = |l: &str| -> Vec<String> {
        l.trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect()
    };
    let head = cells(lines[0]);
    let col = |name: &str| {
        head.iter()
            .position(|c| c.starts_with(name))
            .unwrap_or_else(|| panic!("no column {name:?} in {head:?}"))
    };
    let (fixed, var, ratio, paper) = (
        col("fixed base"),
        col("variable base"),
        col("fixed / variable"),
        col("paper 1995"),
    );
    for curve in ["X25519", "P-256"] {
        let r = lines[2..]
            .iter()
            .map(|l| cells(l))
            .find(|r| r[0] == curve)
            .unwrap_or_else(|| panic!("no {curve} row in\n{stdout}"));
        let num = |c: usize| -> f64 {
            r[c].trim_end_matches('x')
                .parse()
                .unwrap_or_else(|e| panic!("{:?} ({e}) in {r:?}", r[c]))
        };
        let (f, v, x) = (num(fixed), num(var), num(ratio));
        assert!(f > 0.0 && v > 0.0, "{r:?}");
        // The ratio is the two rates' (to the printed precision).
        assert!((x - f / v).abs() <= 0.05 * x + 0.01, "{r:?}");
        assert!(r[paper].contains("2.5"), "{r:?}");
        for (name, unit) in [
            (format!("{curve} fixed-base (precomputed table)"), "ops/s"),
            (format!("{curve} variable-base"), "ops/s"),
            (format!("{curve} fixed / variable"), "x"),
        ] {
            let row = rows
                .iter()
                .find(|c| c[0] == name)
                .unwrap_or_else(|| panic!("no {name:?} in crypto.csv"));
            assert_eq!(&row[2], unit, "{row:?}");
            assert!(row[1].parse::<f64>().is_ok_and(|v| v > 0.0), "{row:?}");
        }
        let csv_ratio = rows
            .iter()
            .find(|c| c[0] == format!("{curve} fixed / variable"))
            .unwrap();
        assert_eq!(&csv_ratio[3], "2.5", "{csv_ratio:?}");
    }
}

#[test]
fn bench_crypto_rejects_bad_size() {
    let o = common::lab(["bench", "crypto", "--size", "0"]);
    assert_eq!(o.status.code(), Some(2), "a usage error");
}
