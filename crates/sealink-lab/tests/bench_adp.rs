//! `sealink-lab bench adp --quick` writes paper 002's tables, and the same seed gives the same
//! bytes (virtual time: nothing in the output depends on the machine's speed).

use std::path::Path;

use sealink_lab::bench::adp::{FILES, LOOPBACK_CSV, LOOPBACK_GAIN_CSV, PKO_CSV, svg_files};

mod common;

fn run(dir: &Path, seed: &str, profiles: &str) -> String {
    common::lab_ok([
        "bench",
        "adp",
        "--quick",
        "--seed",
        seed,
        "--profiles",
        profiles,
        "--out",
        common::path_str(dir),
    ])
}

fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn bench_adp_quick_writes_tables_and_replays_by_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, two, other) = (
        tmp.path().join("1"),
        tmp.path().join("2"),
        tmp.path().join("3"),
    );
    let stdout = run(&one, "9", "1987,today");
    for title in [
        "Table 3: the five traces",
        "Table 4: subtransport (SUB) against transport-level (TR)",
        "piggybacking per channel on ALL",
        "Table 5: encryption scope E",
        "Table 6: encryption technology Y",
        "Figure 5: urgent-message latency",
        "Table 7: urgency policies",
        "Table 8: E x Q",
        "improvement factors",
        "Figure 6: L against arrival rate",
        "Figure 4: T and L against the number of messages",
        "Figure 7: T against the timeout M",
        "Figure 8: L against the timeout M",
        "Figures 7 and 8: the paper's statements against ours",
    ] {
        assert!(stdout.contains(title), "missing {title:?}");
    }
    let t3 = String::from_utf8(read(&one, "table3.csv")).unwrap();
    assert!(
        t3.starts_with("profile,trace,messages,mean size B,"),
        "{t3}"
    );
    for trace in ["ALL", "TCP", "ND", "NFS", "ND+NFS"] {
        for profile in ["1987", "today"] {
            assert!(
                t3.lines()
                    .any(|l| l.starts_with(&format!("{profile},{trace},1000,"))),
                "no {profile} {trace} row in\n{t3}"
            );
        }
    }
    let t8 = String::from_utf8(read(&one, "table8.csv")).unwrap();
    assert_eq!(t8.lines().count(), 1 + 2 * 6, "{t8}");
    let h = String::from_utf8(read(&one, "figure5_histogram.csv")).unwrap();
    let counted: usize = h
        .lines()
        .skip(1)
        .filter_map(|l| l.rsplit(',').next()?.parse::<usize>().ok())
        .sum();
    // ALL's urgent messages (about 10 % of 1000 with U3), once per profile.
    assert!((150..=250).contains(&counted), "{h}");
    let f6 = String::from_utf8(read(&one, "figure6.csv")).unwrap();
    assert_eq!(f6.lines().count(), 1 + 2 * 28, "{f6}");
    // Figure 4: five lengths, the longest the whole trace (relative values 1).
    let f4 = String::from_utf8(read(&one, "figure4.csv")).unwrap();
    assert_eq!(f4.lines().count(), 1 + 2 * 5, "{f4}");
    assert!(
        f4.lines()
            .any(|l| l.starts_with("1987,1000,") && l.ends_with(",1.000,1.000")),
        "{f4}"
    );
    // Figures 7 and 8: five traces at eight timeouts, and the paper's two statements checked.
    for name in ["figure7.csv", "figure8.csv"] {
        let f = String::from_utf8(read(&one, name)).unwrap();
        assert_eq!(f.lines().count(), 1 + 2 * 5 * 8, "{name}: {f}");
    }
    let claims = String::from_utf8(read(&one, "figures7_8_claims.csv")).unwrap();
    assert_eq!(claims.lines().count(), 1 + 2 * 2, "{claims}");
    assert!(
        claims
            .lines()
            .skip(1)
            .all(|l| l.ends_with(",yes") || l.ends_with(",no")),
        "{claims}"
    );

    // The run record lists every file and carries the headline figures of Tables 3 and 8.
    assert!(stdout.contains("run record: "), "{stdout}");
    let profiles = ["1987".to_owned(), "today".to_owned()];
    let svgs = svg_files(&profiles);
    let listed: Vec<&str> = FILES
        .iter()
        .copied()
        .chain(svgs.iter().map(String::as_str))
        .collect();
    // The PKO bound's public-key times are wall-clock: recorded, not compared between runs.
    let recorded: Vec<&str> = listed.iter().copied().chain([PKO_CSV]).collect();
    let rec = common::run_record(&one, "adp", &recorded);
    let (t, unit) = common::figure(&rec, "1987 ALL T");
    let (bound, unit_b) = common::figure(&rec, "1987 PKO T bound, the paper's public-key step");
    assert!(
        bound.is_some_and(|b| b > 0.0) && unit_b == "kB/s",
        "{bound:?} {unit_b}"
    );
    let pko = String::from_utf8(read(&one, PKO_CSV)).unwrap();
    // The 1987 profile's paper step, today's two timed steps.
    assert_eq!(pko.lines().count(), 1 + 1 + 2, "{pko}");
    let cs = String::from_utf8(read(&one, "constant_size.csv")).unwrap();
    assert_eq!(cs.lines().count(), 1 + 2 * 3, "{cs}");
    assert!(t.is_some_and(|t| t > 0.0) && unit == "kB/s", "{t:?} {unit}");
    let (gain, unit) = common::figure(&rec, "1987 PE piggybacking T ON/OFF");
    assert!(
        gain.is_some_and(|g| g > 1.0) && unit == "x",
        "{gain:?} {unit}"
    );

    // The plots: Figure 5 per profile, Figures 4, 6, 7 and 8 once; SVG documents (the record
    // lists them).
    assert_eq!(svgs.len(), 6, "{svgs:?}");
    for name in &svgs {
        let svg = String::from_utf8(read(&one, name)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{name} is not SVG"
        );
        assert!(svg.contains("<polyline"), "{name} has no line");
    }
    let f5 = String::from_utf8(read(&one, "figure5_1987.svg")).unwrap();
    for series in ["ALL", "TCP", "ND", "NFS"] {
        assert!(
            f5.lines().any(|l| l.trim() == series),
            "Figure 5 lacks {series}"
        );
    }
    let f6 = String::from_utf8(read(&one, "figure6.svg")).unwrap();
    for series in ["1987 ALL Q=ON", "1987 ALL Q=OFF", "today TCP Q=OFF"] {
        assert!(f6.contains(series), "Figure 6 lacks {series}");
    }

    run(&two, "9", "1987,today");
    for name in listed {
        assert!(
            read(&one, name) == read(&two, name),
            "{name} differs between two runs of seed 9"
        );
    }
    run(&other, "10", "1987,today");
    assert!(
        read(&one, "table3.csv") != read(&other, "table3.csv"),
        "seed changes nothing"
    );
}

#[test]
fn bench_adp_rejects_unknown_profile() {
    let tmp = tempfile::tempdir().unwrap();
    let out = common::path_str(tmp.path());
    let o = common::lab([
        "bench",
        "adp",
        "--quick",
        "--profiles",
        "1990",
        "--out",
        out,
    ]);
    assert_eq!(o.status.code(), Some(2), "a usage error");
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown profile"));
    assert!(!tmp.path().join("adp.md").exists());
}

#[test]
fn bench_adp_runs_a_capture_in_place_of_all_and_refuses_a_broken_one() {
    use sealink_lab::bench::adp::pcap::synth::{TCP, UDP, capture, frame};
    let tmp = tempfile::tempdir().unwrap();
    // 300 packets over 1.2 s: keystrokes and segments, NFS pages, other UDP, bare acks.
    let frames: Vec<(f64, Vec<u8>)> = (0..300)
        .map(|i| {
            let t = 10.0 + i as f64 * 0.004;
            let f = match i % 5 {
                0 => frame(TCP, 40_000, 22, 1),
                1 => frame(UDP, 800, 2049, 8192 + i % 64),
                2 => frame(UDP, 5000, 5001, 100 + i),
                3 => frame(TCP, 22, 40_000, 0),
                _ => frame(TCP, 40_000, 22, 512 + i),
            };
            (t, f)
        })
        .collect();
    let bytes = capture(&frames);
    let path = tmp.path().join("small.pcap");
    std::fs::write(&path, &bytes).unwrap();
    let out = tmp.path().join("out");
    let (pcap, out_str) = (common::path_str(&path), common::path_str(&out));
    let stdout = common::lab_ok([
        "bench",
        "adp",
        "--quick",
        "--profiles",
        "today",
        "--pcap",
        pcap,
        "--out",
        out_str,
    ]);
    assert!(
        stdout.contains("ALL is the capture") && stdout.contains("first 240 messages"),
        "{stdout}"
    );
    let t3 = String::from_utf8(read(&out, "table3.csv")).unwrap();
    assert!(t3.contains("today,ALL,240,"), "{t3}");

    // Cut short: a typed error naming the file, exit status 1, no tables written.
    let cut = tmp.path().join("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() - 5]).unwrap();
    let bad_out = tmp.path().join("bad");
    let (pcap, out_str) = (common::path_str(&cut), common::path_str(&bad_out));
    let o = common::lab(["bench", "adp", "--quick", "--pcap", pcap, "--out", out_str]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot import the capture") && err.contains("malformed capture"),
        "{err}"
    );
    assert!(!bad_out.join("adp.md").exists());
}

/// `--loopback` runs Table 3's traces through two real nodes on 127.0.0.1 (wall clock, so only
/// the shape is checked): every trace and ALL with piggybacking off, each beside its
/// virtual-time run, every message delivered (the run fails otherwise), listed in the record.
#[test]
fn bench_adp_loopback_runs_the_traces_through_real_nodes() {
    let run = common::bench(&[
        "adp",
        "--quick",
        "--profiles",
        "today",
        "--loopback",
        "--loopback-seconds",
        "0.3",
    ]);
    let (out, stdout) = (&run.dir, &run.stdout);
    assert!(stdout.contains("### Loopback: Table 3's runs"), "{stdout}");
    let csv = String::from_utf8(read(out, "loopback.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let cases: Vec<(&str, &str)> = rows.iter().map(|r| (r[0], r[1])).collect();
    assert_eq!(
        cases,
        [
            ("ALL", "ON"),
            ("TCP", "ON"),
            ("ND", "ON"),
            ("NFS", "ON"),
            ("ND+NFS", "ON"),
            ("ALL", "OFF")
        ],
        "{csv}"
    );
    for r in &rows {
        // T and L measured on both sides, and the same datagram count for the L run's prefix
        // with piggybacking off (one datagram per message).
        for i in [2, 3, 6, 7] {
            let v: f64 = r[i].parse().unwrap_or_else(|_| panic!("{csv}"));
            assert!(v > 0.0, "{csv}");
        }
    }
    // Q=OFF: one datagram per message, and one more per retransmission (real loopback may drop
    // a datagram when the receiver falls behind, as on a loaded machine).
    let off = &rows[5];
    let num = |i: usize| -> u64 { off[i].parse().unwrap_or_else(|_| panic!("{csv}")) };
    let (dgrams, msgs, again) = (num(9), num(5), num(11));
    assert!(
        dgrams >= msgs && dgrams <= msgs + again,
        "Q=OFF: one datagram per message and per retransmission\n{csv}"
    );
    let svgs = svg_files(&["today".to_owned()]);
    let listed: Vec<&str> = FILES
        .iter()
        .copied()
        .chain(svgs.iter().map(String::as_str))
        .chain([LOOPBACK_CSV, LOOPBACK_GAIN_CSV, PKO_CSV])
        .collect();
    let rec = common::run_record(out, "adp", &listed);
    let (t, unit) = common::figure(&rec, "loopback ALL Q=ON T");
    assert!(t.is_some_and(|t| t > 0.0) && unit == "kB/s", "{t:?} {unit}");
    // Piggybacking's gain: ALL's T on and off in interleaved rounds (one with --quick), the
    // ALL rows above being the median round's, and the ratio as a figure.
    assert!(
        stdout.contains("### Loopback: piggybacking's gain in T on ALL"),
        "{stdout}"
    );
    let gain = String::from_utf8(read(out, LOOPBACK_GAIN_CSV)).unwrap();
    let grows: Vec<Vec<&str>> = gain
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(grows.len(), 2, "one round and the median\n{gain}");
    assert_eq!(
        grows[0][1], rows[0][2],
        "ALL ON is the round's T\n{gain}\n{csv}"
    );
    assert_eq!(
        grows[0][2], rows[5][2],
        "ALL OFF is the round's T\n{gain}\n{csv}"
    );
    let (r, unit) = common::figure(&rec, "loopback ALL T ON/OFF median");
    assert!(
        r.is_some_and(|r| r > 0.0) && unit == "ratio",
        "{r:?} {unit}"
    );

    // A nonsensical cut is a usage error.
    let o = common::lab(["bench", "adp", "--loopback", "--loopback-seconds", "-1"]);
    assert_eq!(o.status.code(), Some(2));
}
