//! The demo's report: latencies, counters per direction, keys and drops, and piggybacking on
//! against off.

use super::*;

/// Nearest-rank percentile of sorted values.
pub(super) fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

pub(super) fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

pub(super) fn opt_ms(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".to_owned(), ms)
}

pub(super) fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "-".to_owned()
    } else {
        format!("{:.2}", a as f64 / b as f64)
    }
}

/// Latency figures of one direction.
#[derive(Default)]
pub(super) struct Latency {
    pub(super) urgent: Vec<Duration>,
    pub(super) deadline_late: u64,
    pub(super) deadline_count: u64,
    pub(super) deadline_max_over: Duration,
    pub(super) default_max: Duration,
    pub(super) default_late: u64,
    pub(super) default_count: u64,
    pub(super) late_before_up: u64,
}

pub(super) fn latency(
    trace: &[TraceMsg],
    r: &RunResult,
    from_a: bool,
    m_timeout: Duration,
    slack: Duration,
) -> Latency {
    let mut l = Latency::default();
    let up = if from_a { r.up_a } else { r.up_b };
    for m in trace.iter().filter(|m| m.from_a == from_a) {
        let sent = r.sent_at[m.num as usize];
        let Some(got) = r.delivered_at[m.num as usize] else {
            continue;
        };
        let lat = got.saturating_since(sent);
        let before_up = up.is_none_or(|u| sent < u);
        match m.urgency {
            Urgency::Urgent => l.urgent.push(lat),
            Urgency::Deadline(d) => {
                l.deadline_count += 1;
                if lat > d + slack {
                    l.deadline_late += 1;
                    l.deadline_max_over = l.deadline_max_over.max(lat - d);
                    l.late_before_up += u64::from(before_up);
                }
            }
            Urgency::Default => {
                l.default_count += 1;
                l.default_max = l.default_max.max(lat);
                if lat > m_timeout + slack {
                    l.default_late += 1;
                    l.late_before_up += u64::from(before_up);
                }
            }
        }
    }
    l.urgent.sort();
    l
}

pub(super) fn cells<const N: usize>(label: &str, v: [String; N]) -> Vec<String> {
    std::iter::once(label.to_owned()).chain(v).collect()
}

/// Message frames sent: first transmissions and retransmissions.
pub(super) fn frames(s: &Stats) -> u64 {
    s.messages_sent + s.messages_retransmitted
}

pub(super) fn handshake_datagrams(s: &Stats) -> u64 {
    s.datagrams_sent
        .saturating_sub(s.data_datagrams_sent + s.ack_only_datagrams_sent)
}

pub(super) fn drops_line(s: &Stats) -> String {
    let v: Vec<String> = s
        .drops_by_reason()
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    if v.is_empty() {
        "none".to_owned()
    } else {
        v.join(", ")
    }
}

pub(super) fn report_run(
    out: &mut String,
    trace: &[TraceMsg],
    r: &RunResult,
    link: &LinkConfig,
    cfg: &Config,
) {
    let mut t = Table::new(["", "A→B", "B→A", "total"]);
    traffic_rows(&mut t, trace, r);
    latency_rows(
        &mut t,
        trace,
        r,
        link.delay + link.jitter,
        cfg.default_timeout,
    );
    out.push_str(&t.terminal());
    let _ = writeln!(
        out,
        "(A→B counts datagrams sent by A and messages from A's owners; latency is virtual time from send to delivery)"
    );

    report_keys_and_drops(out, r);
}

/// The rows of what went each way: messages, bytes, datagrams by kind, retransmissions and
/// duplicates.
fn traffic_rows(t: &mut Table, trace: &[TraceMsg], r: &RunResult) {
    let count = |from_a: bool| trace.iter().filter(|m| m.from_a == from_a).count() as u64;
    let delivered = |from_a: bool| {
        trace
            .iter()
            .filter(|m| m.from_a == from_a && r.delivered_at[m.num as usize].is_some())
            .count() as u64
    };
    let bytes = |from_a: bool| {
        trace
            .iter()
            .filter(|m| m.from_a == from_a && r.delivered_at[m.num as usize].is_some())
            .map(|m| m.data.len() as u64)
            .sum::<u64>()
    };
    let st = |from_a: bool| if from_a { &r.stats_a } else { &r.stats_b };
    let per = |f: &dyn Fn(bool) -> u64| -> [String; 3] {
        let (x, y) = (f(true), f(false));
        [x.to_string(), y.to_string(), (x + y).to_string()]
    };
    t.row(cells("messages sent", per(&count)));
    t.row(cells("messages delivered", per(&delivered)));
    t.row(cells("user bytes delivered", per(&bytes)));
    t.row(cells("datagrams sent", per(&|d| st(d).datagrams_sent)));
    t.row(cells(
        "  data (seals carrying messages)",
        per(&|d| st(d).data_datagrams_sent),
    ));
    t.row(cells("  ack-only", per(&|d| st(d).ack_only_datagrams_sent)));
    t.row(cells("  handshake", per(&|d| handshake_datagrams(st(d)))));
    t.row(cells(
        "messages per data datagram (incl. retransmissions)",
        [
            ratio(frames(st(true)), st(true).data_datagrams_sent),
            ratio(frames(st(false)), st(false).data_datagrams_sent),
            ratio(
                frames(st(true)) + frames(st(false)),
                st(true).data_datagrams_sent + st(false).data_datagrams_sent,
            ),
        ],
    ));
    t.row(cells(
        "retransmissions (messages)",
        per(&|d| st(d).messages_retransmitted),
    ));
    t.row(cells(
        "duplicates suppressed (receiver)",
        per(&|d| st(!d).duplicates_suppressed),
    ));
}

/// The latency rows: urgent percentiles, default messages against M, deadline messages
/// against their deadlines (`slack`: the link's delay plus jitter).
fn latency_rows(
    t: &mut Table,
    trace: &[TraceMsg],
    r: &RunResult,
    slack: Duration,
    m_timeout: Duration,
) {
    let lat: Vec<Latency> = [true, false]
        .iter()
        .map(|d| latency(trace, r, *d, m_timeout, slack))
        .collect();
    let mut all_urgent: Vec<Duration> = lat.iter().flat_map(|l| l.urgent.iter().copied()).collect();
    all_urgent.sort();
    t.row(cells(
        "urgent latency p50 (ms)",
        [
            opt_ms(percentile(&lat[0].urgent, 0.5)),
            opt_ms(percentile(&lat[1].urgent, 0.5)),
            opt_ms(percentile(&all_urgent, 0.5)),
        ],
    ));
    t.row(cells(
        "urgent latency p99 (ms)",
        [
            opt_ms(percentile(&lat[0].urgent, 0.99)),
            opt_ms(percentile(&lat[1].urgent, 0.99)),
            opt_ms(percentile(&all_urgent, 0.99)),
        ],
    ));
    t.row(cells(
        "default messages: max latency (ms)",
        [
            ms(lat[0].default_max),
            ms(lat[1].default_max),
            ms(lat[0].default_max.max(lat[1].default_max)),
        ],
    ));
    // "late/count" per direction, then both directions summed.
    let late_of = |pick: fn(&Latency) -> (u64, u64)| {
        let [(l0, c0), (l1, c1)] = [pick(&lat[0]), pick(&lat[1])];
        [(l0, c0), (l1, c1), (l0 + l1, c0 + c1)].map(|(l, c)| format!("{l}/{c}"))
    };
    t.row(cells(
        &format!(
            "default messages over M+delay+jitter ({} ms)",
            ms(m_timeout + slack)
        ),
        late_of(|l| (l.default_late, l.default_count)),
    ));
    t.row(cells(
        "deadline messages over deadline+delay+jitter",
        late_of(|l| (l.deadline_late, l.deadline_count)),
    ));
    t.row(cells(
        "  max time past deadline (ms)",
        [
            ms(lat[0].deadline_max_over),
            ms(lat[1].deadline_max_over),
            ms(lat[0].deadline_max_over.max(lat[1].deadline_max_over)),
        ],
    ));
    t.row(cells(
        "late ones (default or deadline) queued before channel up",
        [
            lat[0].late_before_up.to_string(),
            lat[1].late_before_up.to_string(),
            (lat[0].late_before_up + lat[1].late_before_up).to_string(),
        ],
    ));
}

/// The run's public-key operations per host, its drops, the link's counts and when each
/// channel came up.
pub(super) fn report_keys_and_drops(out: &mut String, r: &RunResult) {
    let _ = writeln!(out);
    let mut t = Table::new(["public-key operations", "host A", "host B", "expected"]).left(&[3]);
    let pk = |f: &dyn Fn(&Stats) -> u64, expected: &str| -> [String; 3] {
        [
            f(&r.stats_a).to_string(),
            f(&r.stats_b).to_string(),
            expected.to_owned(),
        ]
    };
    t.row(cells(
        "Ed25519 signatures made",
        pk(&|s| s.pk.signs, "2 each (one per owner per channel)"),
    ));
    t.row(cells(
        "Ed25519 signatures verified",
        pk(&|s| s.pk.verifies, "2 each (one per peer owner)"),
    ));
    t.row(cells(
        "X25519 operations",
        pk(
            &|s| s.pk.dh,
            "2 per initiation sent or received, +2 to finish",
        ),
    ));
    t.row(cells(
        "handshakes initiated",
        pk(&|s| s.handshakes_initiated, ""),
    ));
    t.row(cells(
        "handshakes completed",
        pk(&|s| s.handshakes_completed, "1 each"),
    ));
    out.push_str(&t.terminal());

    let _ = writeln!(out);
    let _ = writeln!(out, "drops at A: {}", drops_line(&r.stats_a));
    let _ = writeln!(out, "drops at B: {}", drops_line(&r.stats_b));
    let _ = writeln!(out, "{}", link_line(&r.link));
    let up = |t: Option<Time>| {
        t.map_or_else(
            || "never".to_owned(),
            |t| format!("{} ms", ms(t.saturating_since(Time::ZERO))),
        )
    };
    let _ = writeln!(
        out,
        "channel up at A: {}, at B: {}; simulation idle at {} (virtual), took {:.2} s (wall)",
        up(r.up_a),
        up(r.up_b),
        r.end,
        r.wall.as_secs_f64()
    );
}

pub(super) fn link_line(l: &LinkStats) -> String {
    format!(
        "link (both directions): {} datagrams put on the link, {} lost, {} duplicated, {} reordered, {} corrupted, {} delivered",
        l.sent, l.lost, l.duplicated, l.reordered, l.corrupted, l.delivered
    )
}

pub(super) fn check_counters(r: &RunResult) -> Vec<String> {
    let mut bad = Vec::new();
    for (name, s) in [("A", &r.stats_a), ("B", &r.stats_b)] {
        if s.pk.signs != 2 {
            bad.push(format!(
                "host {name} made {} owner signatures, expected 2",
                s.pk.signs
            ));
        }
        if s.pk.verifies != 2 {
            bad.push(format!(
                "host {name} verified {} owner signatures, expected 2",
                s.pk.verifies
            ));
        }
    }
    bad
}
/// Run 2 against run 1: what piggybacking saved, and run 2's drops and timing.
pub(super) fn report_off_against_on(out: &mut String, on: &RunResult, off: &RunResult) {
    let mut t = Table::new(["", "piggyback on", "piggyback off", "off/on"]);
    let both = |r: &RunResult, f: &dyn Fn(&Stats) -> u64| f(&r.stats_a) + f(&r.stats_b);
    for (label, f) in [
        (
            "datagrams sent (both hosts)",
            &(|s: &Stats| s.datagrams_sent) as &dyn Fn(&Stats) -> u64,
        ),
        ("seals carrying messages (data datagrams)", &|s: &Stats| {
            s.data_datagrams_sent
        }),
        ("ack-only datagrams", &|s: &Stats| s.ack_only_datagrams_sent),
        ("bytes sent", &|s: &Stats| s.bytes_sent),
        ("retransmissions (messages)", &|s: &Stats| {
            s.messages_retransmitted
        }),
    ] {
        let (a, b) = (both(on, f), both(off, f));
        t.row(cells(
            label,
            [a.to_string(), b.to_string(), format!("{}x", ratio(b, a))],
        ));
    }
    t.row(cells(
        "messages per data datagram (incl. retransmissions)",
        [
            ratio(both(on, &frames), both(on, &|s| s.data_datagrams_sent)),
            ratio(both(off, &frames), both(off, &|s| s.data_datagrams_sent)),
            String::new(),
        ],
    ));
    out.push_str(&t.terminal());
    let _ = writeln!(out, "drops at A: {}", drops_line(&off.stats_a));
    let _ = writeln!(out, "drops at B: {}", drops_line(&off.stats_b));
    let _ = writeln!(out, "{}", link_line(&off.link));
    let _ = writeln!(
        out,
        "simulation idle at {} (virtual), took {:.2} s (wall)",
        off.end,
        off.wall.as_secs_f64()
    );
}

/// What went wrong in either run: its problems and the counters that disagree.
pub(super) fn failures(on: &RunResult, off: &RunResult) -> Vec<String> {
    let mut failures = Vec::new();
    for r in [on, off] {
        let name = if r.piggyback {
            "piggyback on"
        } else {
            "piggyback off"
        };
        if !r.problems.is_empty() {
            failures.push(format!("{name}: {}", r.problems.summary()));
        }
        for c in check_counters(r) {
            failures.push(format!("{name}: {c}"));
        }
    }
    failures
}
