//! `sealink-lab bench datagram`: datagram mode over loopback UDP (piggybacking on and off), and
//! against the QUIC peer (`--peer quic`); smoke runs.

mod common;

use common::lab as run;
use std::fs;

#[test]
fn datagram_bench_quick_runs() {
    let run = common::bench(&[
        "datagram",
        "--quick",
        "--sizes",
        "64",
        "--seconds",
        "0.1",
        "--receiver",
        "thread",
        "--sender",
        "thread",
        "--placement",
        "shared",
    ]);
    let (dir, s) = (&run.dir, &run.stdout);
    assert!(s.contains("receiver: a thread in recv_arrivals"), "{s}");
    assert!(s.contains("sender: a thread in send_batch"), "{s}");
    assert!(s.contains("64 B, shared: throughput on/off = "), "{s}");
    let on = s
        .lines()
        .find(|l| l.trim_start().starts_with("64") && l.contains(" on "))
        .unwrap();
    let msgs: f64 = on.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(msgs > 0.0, "{s}");
    // datagram.csv: one line per mode, the figures at full precision.
    let csv = fs::read_to_string(dir.join("datagram.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert!(
        lines[0].starts_with("size_bytes,placement,piggyback,msgs_per_s,"),
        "{csv}"
    );
    assert_eq!(lines.len(), 3, "{csv}");
    let on_csv: f64 = lines[1]
        .strip_prefix("64,shared,on,")
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(format!("{on_csv:.0}"), format!("{msgs:.0}"), "{csv}");
    let rec = common::run_record(dir, "datagram", &["datagram.csv"]);
    let fig = common::figure(&rec, "64 B shared piggyback on");
    assert_eq!(fig, (Some(on_csv), "msgs/s".into()));
}

#[test]
fn datagram_bench_quick_runs_against_quic() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run([
        "bench",
        "datagram",
        "--quick",
        "--peer",
        "quic",
        "--sizes",
        "64,1024",
        "--seconds",
        "0.1",
        // Both nodes' receives spin before they sleep: the same workload arrives whole.
        "--busy-poll-us",
        "50",
        "--out",
        tmp.path().to_str().unwrap(),
    ]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("busy poll 50 us"), "{s}");
    // A QUIC stream message lost, reordered or resized fails the run.
    assert!(
        out.status.success(),
        "{s}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(s.contains("TLS13_AES_128_GCM_SHA256"), "{s}");
    assert!(s.contains("receiver: handler on the node's thread"), "{s}");
    assert!(s.contains("sender: source on the node's thread"), "{s}");
    // Both placements by default where there are two CPUs (CI has two).
    let two = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    let placements: &[&str] = if two {
        &["shared", "split"]
    } else {
        &["shared"]
    };
    for size in ["64", "1024"] {
        for placement in placements {
            for mode in ["on", "off", "quic-strm", "quic-dgrm"] {
                let row: Vec<&str> = s
                    .lines()
                    .map(|l| l.split_whitespace().collect::<Vec<_>>())
                    .find(|f| f.len() == 11 && f[0] == size && f[1] == *placement && f[2] == mode)
                    .unwrap_or_else(|| panic!("no {size} B {placement} {mode} row in:\n{s}"));
                let num = |i: usize| -> f64 { row[i].trim_end_matches('%').parse().unwrap() };
                let (msgs, p50, p99, cpu, lost) = (num(3), num(6), num(7), num(9), num(10));
                assert!(msgs > 0.0 && cpu > 0.0, "{size} B {mode}: {row:?}");
                assert!(p50 >= 0.0 && p99 >= p50, "{size} B {mode}: {row:?}");
                if mode != "quic-dgrm" {
                    assert_eq!(lost, 0.0, "{size} B {mode}: reliable mode lost messages");
                }
            }
            assert!(
                s.contains(&format!(
                    "{size:>4} B, {placement}: sealink (piggyback on) / quic-strm: msgs/s = "
                )),
                "{s}"
            );
        }
        if two {
            assert!(
                s.contains(&format!("{size:>4} B, best placement of each: sealink (")),
                "{s}"
            );
        }
    }
    let bad = run(["bench", "datagram", "--quick", "--peer", "tcp"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown peer"));
}
