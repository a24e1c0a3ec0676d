//! `bench adp --loopback`: the trace-driven runs again over real UDP on loopback, through two
//! `sealink_datagram::Node`s in this process (sockets, the I/O thread, the engine and wall-clock
//! time), beside the virtual-time runs of the same messages with the `today` profile.
//!
//! The same two measurements as in virtual time: T with the trace's messages handed over as
//! fast as the sending node takes them (back-pressure when its queue is full), over the window
//! from the first to the last hand-over; L, the mean latency of urgent messages with the trace
//! replayed open loop at its nominal arrival times. T runs take the whole trace. Real time
//! makes an L run as long as its trace: each is cut to the messages that arrive within
//! `seconds` (the same prefix is run in virtual time, so the two columns compare like with
//! like). The sending node pushes back past [`MAX_OUTSTANDING`] messages.
//!
//! Differences from the simulated runs, by construction: the datagram limit is 65,000 bytes
//! (an IPv4 UDP datagram on loopback carries at most 65,507; the simulation uses 65,535), the
//! retransmission timers are the library's defaults, and latencies include the thread hand-offs
//! of a real node (application → I/O thread → application).

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sealink_crypto::sign::OwnerSigningKey;
use sealink_datagram::{
    Config, Delivery, HostKey, LocalOwner, Node, NodeConfig, NodeError, PeerConfig, Urgency,
};

use super::format::{Table, num, ratio};
use super::model::{Profile, Scope3, Tech};
use super::run::{RunResult, RunSpec, run as run_virtual, urgent_latencies};
use super::tables::Nominal;
use super::trace::{self, Msg, Trace, TraceKind};
use crate::error::{Error, Result};

/// The largest datagram the nodes build: an IPv4 UDP datagram on loopback carries 65,507 bytes.
const MAX_DATAGRAM: usize = 65_000;
/// How long the receiver waits for the last deliveries after the last hand-over.
const DRAIN: Duration = Duration::from_secs(10);
/// Shortest prefix an L run keeps, however slow the trace.
const MIN_MESSAGES: usize = 100;
/// Messages queued or unacknowledged before the sending node pushes back (the simulation's
/// window). A smaller bound throttles the T runs: a 64 KB datagram carries hundreds of TCP
/// messages, and the window must hold several datagrams while acknowledgements wait.
const MAX_OUTSTANDING: usize = 1 << 15;
/// Message bytes of a T run at least: the trace repeated until it carries this much, so a run
/// lasts long enough to measure a sustained rate on loopback. At 64 MiB a piggybacked run
/// lasted about 0.15 s and its first tenth (the window opening, the first allocations and page
/// faults) weighed on T; 256 MiB runs for about half a second.
const T_BYTES: u64 = 256 << 20;
/// The same with `--quick`.
const T_BYTES_QUICK: u64 = 4 << 20;
/// Interleaved rounds of ALL's T with piggybacking on and off, for the ON/OFF ratio.
pub const T_ROUNDS: usize = 5;

/// One loopback run's inputs.
#[derive(Debug, Clone, Copy)]
pub struct LoopSpec<'a> {
    pub msgs: &'a [Msg],
    pub urgent: &'a [bool],
    pub e: Scope3,
    pub q: bool,
    pub timeout: Duration,
    pub saturate: bool,
}

/// The messages of `t` that arrive within `seconds` (at least [`MIN_MESSAGES`]).
pub fn prefix(t: &Trace, seconds: f64) -> usize {
    let within = t.msgs.iter().take_while(|m| m.at <= seconds).count();
    within.max(MIN_MESSAGES).min(t.msgs.len())
}

/// Interleaved ON/OFF rounds of ALL's T (one with `--quick`).
pub fn t_rounds(quick: bool) -> usize {
    if quick { 1 } else { T_ROUNDS }
}

/// Runs per `bench adp --loopback`: for each trace a T and an L run on loopback and in virtual
/// time, plus ALL with piggybacking off; ALL's two loopback T runs are the interleaved rounds.
pub fn runs(traces: usize, quick: bool) -> u64 {
    4 * (traces as u64 + 1) - 2 + 2 * t_rounds(quick) as u64
}

fn config(q: bool, timeout: Duration) -> Config {
    let mut cfg = Config {
        insecure_lab_plaintext: true,
        max_datagram: MAX_DATAGRAM,
        default_timeout: timeout,
        piggyback: q,
        message_window: 1 << 15,
        max_queued_messages: MAX_OUTSTANDING,
        ..Config::default()
    };
    cfg.queue_limit = cfg.max_body();
    cfg
}

/// A trace message's bytes: its index in the first (up to) four, as in virtual time.
fn fill_tag(buf: &mut Vec<u8>, i: usize, size: usize) {
    buf.clear();
    buf.resize(size, 0);
    let n = size.min(4);
    buf[..n].copy_from_slice(&(i as u32).to_le_bytes()[..n]);
}

fn tag_of(data: &[u8]) -> ([u8; 4], usize) {
    let mut t = [0u8; 4];
    let n = data.len().min(4);
    t[..n].copy_from_slice(&data[..n]);
    (t, data.len())
}

/// Two nodes on loopback: A sends as owner "x" to owner "y" at B.
struct Nodes {
    a: Node,
    b: Arc<Node>,
    peer: sealink_datagram::PeerId,
    owner: sealink_datagram::OwnerId,
}

fn nodes(q: bool, timeout: Duration) -> Result<Nodes> {
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let (ka, kb) = (HostKey::generate()?, HostKey::generate()?);
    let (pa, pb) = (*ka.public(), *kb.public());
    let (sx, sy) = (
        OwnerSigningKey::generate_seed()?,
        OwnerSigningKey::generate_seed()?,
    );
    let (x, y) = (
        OwnerSigningKey::from_seed(&sx)?,
        OwnerSigningKey::from_seed(&sy)?,
    );
    let mut cb = NodeConfig::new(loopback, kb);
    cb.config = config(q, timeout);
    cb.directory.insert("x", x.public_key())?;
    cb.directory.insert("y", y.public_key())?;
    cb.peers.push(PeerConfig {
        name: "a".into(),
        public_key: pa,
        addr: None,
    });
    let b = Arc::new(Node::start(cb).map_err(|e| Error::bench_by("cannot start node B", e))?);
    b.add_owner(LocalOwner::new("y", y)?);
    let mut ca = NodeConfig::new(loopback, ka);
    ca.config = config(q, timeout);
    ca.directory = {
        let mut d = sealink_datagram::Directory::new();
        d.insert("x", x.public_key())?;
        d.insert("y", OwnerSigningKey::from_seed(&sy)?.public_key())?;
        d
    };
    let b_addr = b
        .local_addr()
        .map_err(|e| Error::bench_by("node B has no address", e))?;
    ca.peers.push(PeerConfig {
        name: "b".into(),
        public_key: pb,
        addr: Some(b_addr),
    });
    let a = Node::start(ca).map_err(|e| Error::bench_by("cannot start node A", e))?;
    let owner = a.add_owner(LocalOwner::new("x", x)?);
    let peer = a
        .peer_id("b")
        .ok_or_else(|| Error::bench("peer b missing"))?;
    Ok(Nodes { a, b, peer, owner })
}

/// One run over loopback.
pub fn run(spec: &LoopSpec) -> Result<RunResult> {
    if spec.urgent.len() != spec.msgs.len() {
        return Err(Error::bench("one urgency flag per message is needed"));
    }
    let Nodes { a, b, peer, owner } = nodes(spec.q, spec.timeout)?;
    let scope = spec.e.scope();
    // Warm-up: the channel and the owner's introduction, out of the measured run.
    a.send(peer, owner, Some("y"), &[0xff; 8], Urgency::Urgent, scope)?;
    a.flush(peer, Duration::from_secs(5))
        .map_err(|e| Error::bench_by("the warm-up message was not acknowledged", e))?;
    while b.recv(Some(Duration::from_millis(20))).is_some() {}
    let before = a.stats().endpoint;

    let n = spec.msgs.len();
    let stop = Arc::new(AtomicBool::new(false));
    let receiver = spawn_receiver(Arc::clone(&b), Arc::clone(&stop), spec.msgs);

    let t0 = Instant::now();
    let mut sent_at = Vec::with_capacity(n);
    let mut buf = Vec::new();
    for (i, (m, &urgent)) in spec.msgs.iter().zip(spec.urgent).enumerate() {
        if !spec.saturate {
            let due = t0 + Duration::from_secs_f64(m.at.max(0.0));
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        fill_tag(&mut buf, i, m.size);
        // A T run's last message is urgent: the run ends when the queue is flushed, not one
        // timeout M later (the simulated T avoids that drain by its window instead).
        let last_of_t = spec.saturate && i + 1 == n;
        let urgency = if urgent || !spec.q || last_of_t {
            Urgency::Urgent
        } else {
            Urgency::Default
        };
        loop {
            let now = Instant::now();
            match a.send(peer, owner, Some("y"), &buf, urgency, scope) {
                Ok(_) => {
                    sent_at.push(now);
                    break;
                }
                // Back-pressure: the queue or window is full until acknowledgements arrive.
                Err(NodeError::Proto(sealink_proto::Error::QueueFull(_))) => {
                    std::thread::sleep(Duration::from_micros(50));
                }
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    return Err(Error::bench_by(format!("cannot send trace message {i}"), e));
                }
            }
        }
    }
    let handed = Instant::now();
    // The receiver stops by itself once every message arrived; past the drain it is told to.
    let deadline = handed + DRAIN + spec.timeout;
    while !receiver.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    let at = receiver
        .join()
        .map_err(|_| Error::bench("the receiving thread panicked"))?
        .map_err(Error::bench)?;
    let after = a.stats().endpoint;
    a.shutdown();
    if let Ok(b) = Arc::try_unwrap(b) {
        b.shutdown();
    }
    let got = at.iter().flatten().count();
    if got < n {
        return Err(Error::bench(format!(
            "only {got} of {n} trace messages were delivered over loopback"
        )));
    }
    let at: Vec<Instant> = at.into_iter().flatten().collect();
    let first = sent_at.first().copied().unwrap_or(t0);
    let last_handed = sent_at.last().copied().unwrap_or(t0);
    let last = at.iter().copied().max().unwrap_or(first);
    let message_bytes: u64 = spec.msgs.iter().map(|m| m.size as u64).sum();
    // T: every byte over first hand-over to last delivery. The hand-overs alone would measure
    // how fast the application fills the node's queue, not what crosses the link.
    let (window, window_bytes) = if spec.saturate {
        (last.saturating_duration_since(first), message_bytes)
    } else {
        let bytes = spec
            .msgs
            .iter()
            .zip(&at)
            .filter(|(_, t)| **t <= last_handed)
            .map(|(m, _)| m.size as u64)
            .sum();
        (last_handed.saturating_duration_since(first), bytes)
    };
    let (latencies_ms, l_ms) = urgent_latencies(spec.urgent, spec.q, |i| {
        at[i].saturating_duration_since(sent_at[i]).as_secs_f64() * 1000.0
    });
    Ok(RunResult {
        messages: n,
        message_bytes,
        datagrams: after.data_datagrams_sent - before.data_datagrams_sent,
        datagram_bytes: after.bytes_sent - before.bytes_sent,
        span: last.saturating_duration_since(first),
        window,
        window_bytes,
        urgent: latencies_ms.len(),
        l_ms,
        latencies_ms,
        retransmitted: after.messages_retransmitted - before.messages_retransmitted,
    })
}

/// The receiving application on its own thread: when each of `msgs` was delivered, told
/// apart by their tags, until all were or `stop` is set; a delivery that matches no
/// undelivered message is an error.
fn spawn_receiver(
    b: Arc<Node>,
    stop: Arc<AtomicBool>,
    msgs: &[Msg],
) -> std::thread::JoinHandle<std::result::Result<Vec<Option<Instant>>, String>> {
    let n = msgs.len();
    let mut pending: HashMap<([u8; 4], usize), VecDeque<usize>> = HashMap::new();
    for (i, m) in msgs.iter().enumerate() {
        let mut buf = Vec::new();
        fill_tag(&mut buf, i, m.size);
        pending.entry(tag_of(&buf)).or_default().push_back(i);
    }
    std::thread::spawn(
        move || -> std::result::Result<Vec<Option<Instant>>, String> {
            let mut at = vec![None; n];
            let mut seen = 0;
            let mut batch: Vec<Delivery> = Vec::new();
            while seen < n && !stop.load(Ordering::Relaxed) {
                b.recv_batch(&mut batch, Some(Duration::from_millis(20)));
                for d in batch.drain(..) {
                    let Some(k) = pending
                        .get_mut(&tag_of(&d.data))
                        .and_then(VecDeque::pop_front)
                    else {
                        return Err(format!(
                            "a delivery of {} bytes matches no undelivered trace message",
                            d.data.len()
                        ));
                    };
                    at[k] = Some(d.received_at);
                    seen += 1;
                }
            }
            Ok(at)
        },
    )
}

/// The loopback tables: per trace (and ALL with Q off), T and L over loopback beside the
/// `today` profile's virtual-time runs of the same prefix; and ALL's T with piggybacking on and
/// off in interleaved rounds, with the ratio per round and its median (the loopback table's
/// ALL rows take the median ON run and the median OFF run).
pub fn table(
    traces: &[Nominal],
    seconds: f64,
    quick: bool,
    seed: u64,
    pb: &indicatif::ProgressBar,
) -> Result<(Table, Table)> {
    let t_bytes = if quick { T_BYTES_QUICK } else { T_BYTES };
    let all = traces.iter().find(|n| n.trace.kind == TraceKind::All);
    let rounds = match all {
        Some(all) => piggyback_rounds(all, t_rounds(quick), t_bytes, pb)?,
        None => Vec::new(),
    };
    let gain = gain_table(&rounds, t_bytes);
    // The median ON run and the median OFF run stand for ALL in the per-trace table.
    let pick = |rounds: &[(RunResult, RunResult)], k: usize| -> Option<RunResult> {
        let mut v: Vec<&RunResult> = rounds
            .iter()
            .map(|r| if k == 0 { &r.0 } else { &r.1 })
            .collect();
        v.sort_by(|a, b| a.t_kbs().total_cmp(&b.t_kbs()));
        v.get(v.len() / 2).map(|r| (*r).clone())
    };
    let mut all_t = [pick(&rounds, 0), pick(&rounds, 1)];
    let mut tab = Table::new(
        format!(
            "Loopback: Table 3's runs through two real nodes on 127.0.0.1, beside the virtual-time \
             `today` profile (T runs: the trace repeated to {} MiB; L runs: the first {seconds} s \
             of each trace)",
            (if quick { T_BYTES_QUICK } else { T_BYTES }) >> 20
        ),
        &[
            "trace",
            "Q",
            "T kB/s loopback",
            "T virtual",
            "loopback / virtual",
            "L messages",
            "L ms loopback",
            "L virtual",
            "loopback / virtual",
            "datagrams loopback",
            "virtual",
            "retransmitted",
        ],
    );
    let mut cases: Vec<(&Nominal, bool)> = traces.iter().map(|n| (n, true)).collect();
    if let Some(all) = traces.iter().find(|n| n.trace.kind == TraceKind::All) {
        cases.push((all, false));
    }
    for (n, q) in cases {
        let measured = if n.trace.kind == TraceKind::All {
            all_t[usize::from(!q)].take()
        } else {
            None
        };
        let (row, t_lo, l_lo) = case_row(n, q, seconds, t_bytes, seed, measured, pb)?;
        tab.push(row);
        if n.trace.kind == TraceKind::All {
            let name = if q { "ON" } else { "OFF" };
            tab.figure(format!("loopback ALL Q={name} T"), t_lo.t_kbs(), "kB/s");
            tab.figure(format!("loopback ALL Q={name} L"), l_lo.l_ms, "ms");
        }
    }
    Ok((tab, gain))
}

/// One row of the loopback table: trace `n` with piggybacking `q`, its T run (`measured`, when
/// the gain rounds already ran it) and its L run, on loopback beside virtual time; with the two
/// loopback runs, for the record's figures.
fn case_row(
    n: &Nominal,
    q: bool,
    seconds: f64,
    t_bytes: u64,
    seed: u64,
    measured: Option<RunResult>,
    pb: &indicatif::ProgressBar,
) -> Result<(Vec<String>, RunResult, RunResult)> {
    let k = prefix(&n.trace, seconds);
    let msgs = &n.trace.msgs[..k];
    let fast = saturating(&repeat_to(&n.trace, t_bytes));
    let lp = |saturate: bool, m: &[Msg]| {
        let r = run(&LoopSpec {
            msgs: m,
            urgent: &urgent_of(&n.urgent, m.len()),
            e: Scope3::Partial,
            q,
            timeout: n.timeout,
            saturate,
        });
        pb.inc(1);
        r.map_err(|e| {
            Error::bench_by(
                format!(
                    "loopback {} run of {} ({k} messages, Q={})",
                    if saturate { "T" } else { "L" },
                    n.trace.kind.name(),
                    if q { "ON" } else { "OFF" }
                ),
                e,
            )
        })
    };
    let vt = |saturate: bool, m: &[Msg]| {
        let r = run_virtual(&RunSpec {
            msgs: m,
            urgent: &urgent_of(&n.urgent, m.len()),
            e: Scope3::Partial,
            y: Tech::Hw,
            q,
            timeout: n.timeout,
            profile: Profile::TODAY,
            saturate,
            cold: false,
            seed,
        });
        pb.inc(1);
        r
    };
    let t_lo = match measured {
        Some(r) => r,
        None => lp(true, &fast.msgs)?,
    };
    let l_lo = lp(false, msgs)?;
    let (t_vt, l_vt) = (vt(true, &fast.msgs)?, vt(false, msgs)?);
    let row = vec![
        n.trace.kind.name().to_owned(),
        if q { "ON" } else { "OFF" }.to_owned(),
        num(t_lo.t_kbs(), 0),
        num(t_vt.t_kbs(), 0),
        ratio(t_lo.t_kbs(), t_vt.t_kbs()),
        k.to_string(),
        num(l_lo.l_ms, 3),
        num(l_vt.l_ms, 3),
        ratio(l_lo.l_ms, l_vt.l_ms),
        l_lo.datagrams.to_string(),
        l_vt.datagrams.to_string(),
        (t_lo.retransmitted + l_lo.retransmitted).to_string(),
    ];
    Ok((row, t_lo, l_lo))
}

/// The piggybacking gain table: T with piggybacking on and off, per round and their medians.
fn gain_table(rounds: &[(RunResult, RunResult)], t_bytes: u64) -> Table {
    let mut gain = Table::new(
        format!(
            "Loopback: piggybacking's gain in T on ALL (authenticate-only, GSO on, the trace \
             repeated to {} MiB), ON and OFF interleaved, {} round(s); paper: 2.3x (Table 8, partial \
             encryption)",
            t_bytes >> 20,
            rounds.len()
        ),
        &[
            "round",
            "T ON kB/s",
            "T OFF kB/s",
            "ON / OFF",
            "retransmitted ON",
            "retransmitted OFF",
        ],
    );
    for (i, (on, off)) in rounds.iter().enumerate() {
        gain.push(vec![
            (i + 1).to_string(),
            num(on.t_kbs(), 0),
            num(off.t_kbs(), 0),
            format!("{:.2}", on.t_kbs() / off.t_kbs()),
            on.retransmitted.to_string(),
            off.retransmitted.to_string(),
        ]);
    }
    let ratios: Vec<f64> = rounds
        .iter()
        .map(|(on, off)| on.t_kbs() / off.t_kbs())
        .collect();
    if !rounds.is_empty() {
        let med = crate::bench::median(&ratios);
        let med_on = crate::bench::median(&rounds.iter().map(|r| r.0.t_kbs()).collect::<Vec<_>>());
        let med_off = crate::bench::median(&rounds.iter().map(|r| r.1.t_kbs()).collect::<Vec<_>>());
        gain.push(vec![
            "median".into(),
            num(med_on, 0),
            num(med_off, 0),
            format!("**{med:.2}**"),
            String::new(),
            String::new(),
        ]);
        gain.figure("loopback ALL T ON/OFF median", med, "ratio");
    }
    gain
}

/// ALL's T over loopback, piggybacking on then off, `rounds` times: (ON, OFF) per round,
/// after an unreported warm-up pair on an eighth of the bytes. The first loopback run of the
/// process paid for its first allocations and page faults: a 64 MiB ON run right after the
/// virtual-time tables measured 485 MB/s where the next rounds measured 610-790.
pub fn piggyback_rounds(
    all: &Nominal,
    rounds: usize,
    t_bytes: u64,
    pb: &indicatif::ProgressBar,
) -> Result<Vec<(RunResult, RunResult)>> {
    let fast = saturating(&repeat_to(&all.trace, t_bytes));
    let urgent = urgent_of(&all.urgent, fast.msgs.len());
    let warm = saturating(&repeat_to(&all.trace, t_bytes / 8));
    for q in [true, false] {
        run(&LoopSpec {
            msgs: &warm.msgs,
            urgent: &urgent[..warm.msgs.len()],
            e: Scope3::Partial,
            q,
            timeout: all.timeout,
            saturate: true,
        })
        .map_err(|e| Error::bench_by("loopback warm-up run of ALL", e))?;
    }
    let t = |q: bool, round: usize| {
        let r = run(&LoopSpec {
            msgs: &fast.msgs,
            urgent: &urgent,
            e: Scope3::Partial,
            q,
            timeout: all.timeout,
            saturate: true,
        });
        pb.inc(1);
        r.map_err(|e| {
            Error::bench_by(
                format!(
                    "loopback T run of ALL, round {round}, Q={}",
                    if q { "ON" } else { "OFF" }
                ),
                e,
            )
        })
    };
    (1..=rounds)
        .map(|i| Ok((t(true, i)?, t(false, i)?)))
        .collect()
}

/// Written by `--loopback-l-rounds`: ALL's urgent latency L with piggybacking on and off, per
/// encryption scope and interleaved round.
pub const LATENCY_CSV: &str = "loopback-latency.csv";

/// Paper 002's Table 8: L OFF / ON on ALL, for E = NE, PE, FE.
fn paper_l_factor(e: Scope3) -> f64 {
    match e {
        Scope3::None => 6.1,
        Scope3::Partial => 9.2,
        Scope3::Full => 7.1,
    }
}

/// ALL's urgent latency over loopback with piggybacking on and off, `rounds` interleaved rounds
/// per scope in `scopes` (§15e's method, for L: the same prefix of the trace replayed at its
/// nominal arrival times, ON then OFF in each round, after an unreported warm-up pair), and the
/// median L OFF / ON per scope beside paper 002's Table 8.
pub fn latency_rounds(
    all: &Nominal,
    scopes: &[Scope3],
    rounds: usize,
    seconds: f64,
    pb: &indicatif::ProgressBar,
) -> Result<Table> {
    let k = prefix(&all.trace, seconds);
    let msgs = &all.trace.msgs[..k];
    let urgent = urgent_of(&all.urgent, k);
    let l = |e: Scope3, q: bool, what: &str| -> Result<RunResult> {
        run(&LoopSpec {
            msgs,
            urgent: &urgent,
            e,
            q,
            timeout: all.timeout,
            saturate: false,
        })
        .map_err(|err| {
            Error::bench_by(
                format!(
                    "loopback L run of ALL ({what}, E={}, Q={})",
                    e.name(),
                    if q { "ON" } else { "OFF" }
                ),
                err,
            )
        })
    };
    let mut tab = Table::new(
        format!(
            "Loopback: urgent latency L on ALL with piggybacking on and off, per encryption scope              ({k} messages, the first {seconds} s of the trace at its nominal arrival times), ON              and OFF interleaved, {rounds} round(s) after a warm-up pair; paper: Table 8's L OFF/ON"
        ),
        &[
            "E",
            "round",
            "L ON ms",
            "L OFF ms",
            "OFF / ON",
            "paper OFF / ON",
        ],
    );
    for &e in scopes {
        for q in [true, false] {
            l(e, q, "warm-up")?;
        }
        let mut rows = Vec::new();
        for round in 1..=rounds {
            let on = l(e, true, &format!("round {round}"))?;
            pb.inc(1);
            let off = l(e, false, &format!("round {round}"))?;
            pb.inc(1);
            rows.push((on.l_ms, off.l_ms));
            tab.push(vec![
                e.name().into(),
                round.to_string(),
                num(on.l_ms, 3),
                num(off.l_ms, 3),
                format!("{:.2}", off.l_ms / on.l_ms),
                format!("{:.1}", paper_l_factor(e)),
            ]);
        }
        let med = |f: &dyn Fn(&(f64, f64)) -> f64| {
            crate::bench::median(&rows.iter().map(f).collect::<Vec<_>>())
        };
        let factor = med(&|r| r.1 / r.0);
        tab.push(vec![
            e.name().into(),
            "median".into(),
            num(med(&|r| r.0), 3),
            num(med(&|r| r.1), 3),
            format!("**{factor:.2}**"),
            format!("{:.1}", paper_l_factor(e)),
        ]);
        tab.figure(
            format!("loopback ALL L OFF/ON median, {}", e.name()),
            factor,
            "ratio",
        );
    }
    Ok(tab)
}

/// `t` repeated until its messages carry `bytes` (at least once).
pub fn repeat_to(t: &Trace, bytes: u64) -> Trace {
    let one: u64 = t.msgs.iter().map(|m| m.size as u64).sum();
    let times = bytes.div_ceil(one.max(1)).max(1) as usize;
    Trace {
        kind: t.kind,
        msgs: t
            .msgs
            .iter()
            .copied()
            .cycle()
            .take(t.msgs.len() * times)
            .collect(),
    }
}

/// The urgency flags of the first `n` messages of a trace repeated as in [`repeat_to`].
pub fn urgent_of(urgent: &[bool], n: usize) -> Vec<bool> {
    urgent.iter().copied().cycle().take(n).collect()
}

/// A T run's trace: arrivals all at time zero (the sender hands messages over as fast as the
/// node takes them; the virtual-time run then also never idles).
pub fn saturating(t: &Trace) -> Trace {
    trace::speed_up(t, 1e12)
}

#[cfg(test)]
mod tests {
    use super::super::trace::generate;
    use super::*;

    #[test]
    fn prefix_keeps_the_arrivals_within_the_cut() {
        let t = generate(TraceKind::All, 2000, 3);
        let k = prefix(&t, 1.0);
        assert!((MIN_MESSAGES..2000).contains(&k), "{k}");
        assert!(t.msgs[k - 1].at <= 1.0 || k == MIN_MESSAGES);
        assert_eq!(prefix(&t, 1e9), 2000);
    }

    #[test]
    fn a_short_trace_crosses_real_loopback_and_every_message_arrives_once() {
        let t = generate(TraceKind::Tcp, 200, 5);
        let fast = saturating(&t);
        let urgent: Vec<bool> = (0..200).map(|i| i % 10 == 0).collect();
        for (saturate, msgs) in [(true, &fast.msgs), (false, &t.msgs)] {
            let r = run(&LoopSpec {
                msgs,
                urgent: &urgent,
                e: Scope3::Partial,
                q: true,
                timeout: Duration::from_millis(40),
                saturate,
            })
            .unwrap();
            assert_eq!(r.messages, 200);
            assert_eq!(r.urgent, 20);
            assert!(r.l_ms.is_finite() && r.l_ms > 0.0, "{r:?}");
            assert!(r.t_kbs() > 0.0, "{r:?}");
            // Piggybacking: far fewer datagrams than messages.
            assert!(r.datagrams < 100, "{} datagrams", r.datagrams);
        }
    }

    /// `--loopback-l-rounds`: per scope, each round's L ON and OFF and their ratio, then the
    /// median beside the paper's Table 8 factor, and one figure per scope.
    #[test]
    fn latency_rounds_give_a_median_factor_per_scope() {
        let all = Nominal::of(generate(TraceKind::All, 300, 3));
        let pb = indicatif::ProgressBar::hidden();
        let t = latency_rounds(&all, &[Scope3::None, Scope3::Full], 1, 0.3, &pb).unwrap();
        let md = t.markdown();
        assert!(md.contains("| NE ") && md.contains("| FE "), "{md}");
        assert!(
            md.contains("median") && md.contains("6.1") && md.contains("7.1"),
            "{md}"
        );
        assert_eq!(t.figures.len(), 2);
        assert!(
            t.figures.iter().all(|f| f.1.is_finite() && f.1 > 0.0),
            "{md}"
        );
    }
}
