//! `sealink-lab bench seal` end to end, and the lab binary's command line: help, usage errors
//! (exit status 2, clap's and the benches' own) and the `error:` line.

mod common;

use std::fs;
use std::process::Command;

use common::{lab, stderr, stdout};

#[test]
fn bench_seal_quick_table() {
    let run = common::bench(&[
        "seal",
        "--sizes",
        "64",
        "--seconds",
        "0.01",
        "--runs",
        "1",
        "--suites",
        "aes128-gcm",
    ]);
    let (dir, out) = (&run.dir, &run.stdout);
    assert!(out.contains("| suite"), "{out}");
    assert!(out.contains("protocol Gbit/s"), "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with("| aes128-gcm"))
        .unwrap_or_else(|| panic!("no row: {out}"));
    let cells: Vec<&str> = row
        .split('|')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(cells.len(), 5, "{row}");
    assert_eq!(cells[1], "64");
    for c in &cells[2..] {
        let v: f64 = c.parse().unwrap_or_else(|_| panic!("{row}"));
        assert!(v > 0.0, "{row}");
    }
    // 64 B is judged against the small-message target (0.85), met or not on this machine.
    assert!(
        out.contains("target (protocol/raw for aes128-gcm")
            && (out.contains(": met (64 B") || out.contains(": NOT met (64 B")),
        "{out}"
    );
    // seal.csv: the same row at full precision; the record's ratio is the CSV's.
    let csv = fs::read_to_string(dir.join("seal.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0], "suite,size_bytes,protocol_gbps,raw_gbps,ratio",
        "{csv}"
    );
    assert_eq!(lines.len(), 2, "{csv}");
    let fields: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(fields[..2], ["aes128-gcm", "64"], "{csv}");
    let ratio: f64 = fields[4].parse().unwrap();
    assert_eq!(format!("{ratio:.3}"), cells[4], "{csv}");
    let rec = common::run_record(dir, "seal", &["seal.csv"]);
    let fig = common::figure(&rec, "aes128-gcm 64 B protocol/raw");
    assert_eq!(fig, (Some(ratio), "ratio".into()));
}

#[test]
fn usage_errors_and_help() {
    // clap's own checks.
    let o = lab(["bench", "seal", "--suites", "rot13"]);
    assert_eq!(o.status.code(), Some(2), "usage errors exit 2");
    assert!(stderr(&o).starts_with("error: "), "{}", stderr(&o));
    assert_eq!(lab(["no-such-command"]).status.code(), Some(2));
    assert_eq!(
        lab(["keygen"]).status.code(),
        Some(2),
        "keygen is sealink's"
    );
    // A bench's own check after parsing (the lab's `Error::Usage`): one `error:` line, exit 2.
    // `--placement split` needs two CPUs; taskset leaves this process one.
    let one_cpu = Command::new("taskset")
        .args(["-c", "0", common::LAB, "bench", "datagram", "--quick"])
        .args(["--placement", "split", "--sizes", "64", "--seconds", "0.1"])
        .env_remove("RUST_LOG")
        .output();
    match one_cpu {
        Ok(o) => {
            assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
            assert!(
                stderr(&o).starts_with("error: --placement split needs two CPUs"),
                "{}",
                stderr(&o)
            );
        }
        Err(e) => eprintln!("no taskset ({e}): the bench's usage error is not checked"),
    }

    let o = lab(["--help"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("Examples:"), "{}", stdout(&o));
    assert!(lab(["--version"]).status.success());
    for sub in [&["bench", "seal"][..], &["bench", "stacks"], &["relay"]] {
        let mut args = sub.to_vec();
        args.push("--help");
        let o = lab(args);
        assert!(o.status.success(), "{sub:?}");
        let help = stdout(&o);
        assert!(
            help.contains("Example:") || help.contains("Examples:"),
            "{sub:?}: {help}"
        );
        assert!(help.contains("sealink-lab "), "{sub:?}: {help}");
    }
}
