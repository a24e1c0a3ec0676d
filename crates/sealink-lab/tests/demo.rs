//! `sealink-lab demo` end to end: the exactly-once check passes on a small run, a seed is
//! printed for replay, and a bad argument is a usage error.

mod common;

use common::lab;

#[test]
fn demo_small_run_checks_ok() {
    let o = lab(["demo", "--seed", "7", "--messages", "300"]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    assert!(
        out.lines().any(|l| l
            .starts_with("check: all 600 messages delivered exactly once and intact")
            && l.ends_with(": OK")),
        "{out}"
    );
    assert!(out.contains("seed:   7"), "{out}");
    assert!(out.contains("piggyback off"), "{out}");
}

#[test]
fn demo_usage_errors_exit_2() {
    // Out of range (clap's value parser).
    let o = lab(["demo", "--loss", "1"]);
    assert_eq!(o.status.code(), Some(2), "usage errors exit 2");
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("error: "));
    let o = lab(["demo", "--help"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("Example:"));
}
