//! `sealink-lab demo`: two hosts in one process over the simulated link, a synthetic trace of
//! messages both ways, then a check that every message arrived exactly once and intact, with
//! the protocol's counters laid out per direction. The same trace runs a second time with
//! piggybacking off for comparison.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use sealink_crypto::sign::OwnerSigningKey;
use sealink_proto::sim::{LinkConfig, LinkStats, Pair, Side, SimRng};
use sealink_proto::{
    Config, Directory, Endpoint, Event, HostKey, LocalOwner, MessageId, OwnerId, PeerId, Scope,
    Stats, Time, Urgency,
};

use crate::error::{Error, Result};
use crate::output;
use crate::report::Table;

/// Owners on host A and on host B.
const A_OWNERS: [&str; 2] = ["alice", "carol"];
const B_OWNERS: [&str; 2] = ["bob", "dave"];

/// Mean virtual inter-arrival time of the trace, per direction.
const MEAN_GAP_NS: f64 = 500_000.0;
/// How long the simulation may run after the last message was queued.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);
/// Examples shown per kind of failure.
const EXAMPLES: usize = 8;

/// Parameters of one demo run.
#[derive(Debug, Clone)]
pub struct Params {
    pub seed: Option<u64>,
    pub messages: usize,
    pub loss: f64,
    pub delay: Duration,
}

/// `sealink-lab demo`'s arguments.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Seed of the trace and the link (default: random, printed so the run can be replayed)
    #[arg(long)]
    seed: Option<u64>,
    /// Messages per direction
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    messages: u32,
    /// Probability that the link loses a datagram, in [0, 1)
    #[arg(long, default_value_t = 0.02, value_parser = crate::cli::parse_probability)]
    loss: f64,
    /// One-way link delay in milliseconds
    #[arg(long = "delay-ms", default_value_t = 5.0, value_parser = parse_delay_ms)]
    delay_ms: f64,
}

impl DemoArgs {
    pub fn params(&self) -> Params {
        Params {
            seed: self.seed,
            messages: self.messages as usize,
            loss: self.loss,
            delay: Duration::from_secs_f64(self.delay_ms / 1e3),
        }
    }
}

/// One-way delay of the demo's link, 0..=10000 ms.
fn parse_delay_ms(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=10_000.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a delay within 0..=10000 ms"))
    }
}

/// One message of the trace.
#[derive(Debug, Clone)]
struct TraceMsg {
    /// Message number; also the first 8 bytes of the payload (little endian).
    num: u64,
    from_a: bool,
    at: Time,
    /// Index of the sending owner on its host.
    owner: usize,
    to: &'static str,
    urgency: Urgency,
    scope: Scope,
    data: Vec<u8>,
}

impl TraceMsg {
    fn sender_name(&self) -> &'static str {
        if self.from_a {
            A_OWNERS[self.owner]
        } else {
            B_OWNERS[self.owner]
        }
    }
}

/// Keys shared by both runs so that they differ only in the piggyback setting. They are derived
/// from the demo seed so that a seed replays a run exactly: which host wins a simultaneous
/// open depends on the order of the static keys. (Demo keys only: `SimRng` is not a CSPRNG.)
struct Keys {
    host_a: HostKey,
    host_b: HostKey,
    owner_seeds: Vec<(&'static str, [u8; 32])>,
}

/// Mixed into the seed for the key stream, so that keys and trace draw different numbers.
const KEY_STREAM: u64 = 0x6B65_7973_6B65_7973;

impl Keys {
    fn derive(seed: u64) -> Result<Self> {
        let mut rng = SimRng::new(seed ^ KEY_STREAM);
        let mut key = || {
            let mut k = [0u8; 32];
            fill(&mut rng, &mut k);
            k
        };
        let host_a = HostKey::from_private(key())
            .map_err(|e| Error::bench_by("cannot make host key A", e))?;
        let host_b = HostKey::from_private(key())
            .map_err(|e| Error::bench_by("cannot make host key B", e))?;
        let owner_seeds = A_OWNERS
            .iter()
            .chain(&B_OWNERS)
            .map(|n| (*n, key()))
            .collect();
        Ok(Keys {
            host_a,
            host_b,
            owner_seeds,
        })
    }
    fn owner_key(&self, name: &str) -> Result<OwnerSigningKey> {
        let seed = self
            .owner_seeds
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| s)
            .ok_or_else(|| Error::bench(format!("no key for owner {name}")))?;
        Ok(OwnerSigningKey::from_seed(seed)?)
    }
}

/// Fills `buf` from the generator.
fn fill(rng: &mut SimRng, buf: &mut [u8]) {
    for chunk in buf.chunks_mut(8) {
        let r = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
}

/// Builds the trace: each direction independently, then merged by arrival time.
fn make_trace(rng: &mut SimRng, per_direction: usize, max_len: usize) -> Vec<TraceMsg> {
    let mut all = Vec::with_capacity(per_direction * 2);
    let mut num = 0u64;
    for from_a in [true, false] {
        let mut t = 0f64;
        let dests = if from_a { B_OWNERS } else { A_OWNERS };
        for _ in 0..per_direction {
            t += -MEAN_GAP_NS * (1.0 - rng.unit()).ln();
            let owner = rng.below(2) as usize;
            let to = dests[rng.below(2) as usize];
            let r = rng.unit();
            let (lo, hi) = if r < 0.4 {
                (32, 128)
            } else if r < 0.7 {
                (256, 512)
            } else if r < 0.9 {
                (512, 1024)
            } else {
                (1024, max_len)
            };
            let (lo, hi) = (lo.min(max_len), hi.min(max_len));
            let len = (lo + rng.below((hi - lo + 1) as u64) as usize).max(8);
            let r = rng.unit();
            let urgency = if r < 0.2 {
                Urgency::Urgent
            } else if r < 0.3 {
                Urgency::Deadline(Duration::from_nanos(2_000_000 + rng.below(48_000_000)))
            } else {
                Urgency::Default
            };
            let scope = if rng.chance(0.5) {
                Scope::AuthOnly
            } else {
                Scope::Encrypt
            };
            let mut data = vec![0u8; len];
            data[..8].copy_from_slice(&num.to_le_bytes());
            fill(rng, &mut data[8..]);
            all.push(TraceMsg {
                num,
                from_a,
                at: Time::from_nanos(t as u64),
                owner,
                to,
                urgency,
                scope,
                data,
            });
            num += 1;
        }
    }
    all.sort_by_key(|m| (m.at, m.num));
    all
}

/// What one run of the trace produced.
struct RunResult {
    piggyback: bool,
    stats_a: Stats,
    stats_b: Stats,
    link: LinkStats,
    /// Virtual time each message was queued, by number.
    sent_at: Vec<Time>,
    /// Virtual time each message was delivered (first delivery), by number.
    delivered_at: Vec<Option<Time>>,
    /// Virtual time each side first saw its channel up.
    up_a: Option<Time>,
    up_b: Option<Time>,
    end: Time,
    wall: Duration,
    problems: Problems,
}

/// Everything that went wrong, with a few examples each.
#[derive(Default)]
struct Problems {
    missing: Vec<u64>,
    duplicates: Vec<u64>,
    corrupted: Vec<u64>,
    wrong_names: Vec<u64>,
    weaker_scope: Vec<u64>,
    misrouted: Vec<u64>,
    unknown: usize,
    undeliverable: Vec<u64>,
    /// Of those, how many had in fact been delivered (the sender gave up on the acknowledgement).
    undeliverable_delivered: usize,
    handshake_failed: usize,
    /// The simulation stopped advancing virtual time.
    stall: Option<String>,
}

impl Problems {
    fn is_empty(&self) -> bool {
        self.missing.is_empty()
            && self.duplicates.is_empty()
            && self.corrupted.is_empty()
            && self.wrong_names.is_empty()
            && self.weaker_scope.is_empty()
            && self.misrouted.is_empty()
            && self.unknown == 0
            && self.undeliverable.is_empty()
            && self.handshake_failed == 0
            && self.stall.is_none()
    }

    fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(st) = &self.stall {
            parts.push(st.clone());
        }
        let mut list = |what: &str, v: &[u64]| {
            if !v.is_empty() {
                let ex: Vec<String> = v.iter().take(EXAMPLES).map(|n| format!("#{n}")).collect();
                let more = if v.len() > EXAMPLES { ", ..." } else { "" };
                parts.push(format!("{} {what} ({}{more})", v.len(), ex.join(", ")));
            }
        };
        list("missing", &self.missing);
        list("delivered more than once", &self.duplicates);
        list("with altered data", &self.corrupted);
        list("with wrong sender or destination names", &self.wrong_names);
        list("carried in a weaker scope than asked", &self.weaker_scope);
        list("delivered to the wrong host", &self.misrouted);
        list("reported undeliverable to the sender", &self.undeliverable);
        if self.undeliverable_delivered > 0 {
            parts.push(format!(
                "{} of the undeliverable ones had in fact been delivered (the sender gave up waiting for the acknowledgement)",
                self.undeliverable_delivered
            ));
        }
        if self.unknown > 0 {
            parts.push(format!(
                "{} deliveries of messages never sent",
                self.unknown
            ));
        }
        if self.handshake_failed > 0 {
            parts.push(format!("{} handshake failures", self.handshake_failed));
        }
        parts.join("; ")
    }
}

/// Steps taken at one virtual instant before the simulation counts as stuck. Each step handles
/// everything due at that instant, so a healthy run needs only a few.
const STALL_STEPS: u32 = 10_000;
/// Steps a run may take in all: a fixed allowance plus this many per message. A healthy run
/// needs a few per message (arrivals, datagrams, timers).
const STEPS_BASE: u64 = 1_000_000;
const STEPS_PER_MESSAGE: u64 = 1_000;

/// What the simulation was doing when it was stopped.
fn stuck_report(pair: &Pair, why: String) -> String {
    let now = pair.now();
    let due = |t: Option<Time>| match t {
        Some(t) if t <= now => format!("due at {t} (not later than now)"),
        Some(t) => format!("next at {t}"),
        None => "none".to_owned(),
    };
    format!(
        "{why}; host A timer {}, host B timer {}; pending messages A {}, B {}; \
         handshakes initiated/completed A {}/{}, B {}/{}",
        due(pair.a.poll_timeout()),
        due(pair.b.poll_timeout()),
        pair.a.pending_messages_all(),
        pair.b.pending_messages_all(),
        pair.a.stats().handshakes_initiated,
        pair.a.stats().handshakes_completed,
        pair.b.stats().handshakes_initiated,
        pair.b.stats().handshakes_completed,
    )
}

/// Advances the pair to `until` (like `Pair::run_until`), or, with `until_idle`, until nothing is
/// left to do (like `Pair::run_idle`) or `until` is reached. Unlike those it notices when virtual
/// time stops moving (a timer that stays due after it was handled) or the run uses up its
/// `budget` of steps, and reports what was pending instead of spinning forever.
fn advance(pair: &mut Pair, until: Time, until_idle: bool, budget: &mut u64) -> Result<(), String> {
    let mut at = pair.now();
    let mut same = 0u32;
    while pair.step(until) {
        if until_idle
            && pair.next_time().is_none()
            && pair.a.pending_messages_all() == 0
            && pair.b.pending_messages_all() == 0
        {
            return Ok(());
        }
        *budget = budget.saturating_sub(1);
        if *budget == 0 {
            let why = format!(
                "simulation did not settle: step budget used up at virtual time {}",
                pair.now()
            );
            return Err(stuck_report(pair, why));
        }
        if pair.now() != at {
            at = pair.now();
            same = 0;
            continue;
        }
        same += 1;
        if same >= STALL_STEPS {
            let why = format!(
                "simulation stalled: virtual time stuck at {} for {STALL_STEPS} steps",
                pair.now()
            );
            return Err(stuck_report(pair, why));
        }
    }
    Ok(())
}

fn endpoint(
    keys: &Keys,
    host: &HostKey,
    owners: [&str; 2],
    piggyback: bool,
) -> Result<(Endpoint, [OwnerId; 2])> {
    let mut dir = Directory::new();
    for (name, seed) in &keys.owner_seeds {
        dir.insert(name, OwnerSigningKey::from_seed(seed)?.public_key())?;
    }
    let cfg = Config {
        piggyback,
        ..Config::default()
    };
    let mut ep = Endpoint::new(cfg, host.clone(), dir)?;
    let ids = [
        ep.add_owner(LocalOwner::new(owners[0], keys.owner_key(owners[0])?)?),
        ep.add_owner(LocalOwner::new(owners[1], keys.owner_key(owners[1])?)?),
    ];
    Ok((ep, ids))
}

fn run_trace(
    trace: &[TraceMsg],
    keys: &Keys,
    link: LinkConfig,
    link_seed: u64,
    piggyback: bool,
    pb: &ProgressBar,
) -> Result<RunResult> {
    let wall = Instant::now();
    let (mut a, a_owners) = endpoint(keys, &keys.host_a, A_OWNERS, piggyback)?;
    let (mut b, b_owners) = endpoint(keys, &keys.host_b, B_OWNERS, piggyback)?;
    let a_peer: PeerId = a.add_peer("b", *keys.host_b.public());
    let b_peer: PeerId = b.add_peer("a", *keys.host_a.public());
    let mut pair = Pair::new(a, b, link, link_seed);

    let total = trace.len();
    let mut sent_at = vec![Time::ZERO; total];
    // Message number of each MessageId, per side, to name undeliverable messages.
    let mut ids_a: Vec<u64> = Vec::new();
    let mut ids_b: Vec<u64> = Vec::new();
    let mut stall = None;
    let mut budget = STEPS_BASE + STEPS_PER_MESSAGE * trace.len() as u64;
    for m in trace {
        if let Err(e) = advance(&mut pair, m.at, false, &mut budget) {
            stall = Some(e);
            break;
        }
        let now = pair.now();
        let (side, peer, owner) = if m.from_a {
            (Side::A, a_peer, a_owners[m.owner])
        } else {
            (Side::B, b_peer, b_owners[m.owner])
        };
        let MessageId(id) = pair
            .endpoint(side)
            .send(now, peer, owner, Some(m.to), &m.data, m.urgency, m.scope)
            .map_err(|e| Error::bench_by(format!("cannot send message #{} at {now}", m.num), e))?;
        let ids = if m.from_a { &mut ids_a } else { &mut ids_b };
        if id as usize != ids.len() {
            tracing::warn!(id, expected = ids.len(), "message ids are not sequential");
        }
        ids.push(m.num);
        sent_at[m.num as usize] = now;
        pb.inc(1);
    }
    if stall.is_none() {
        let limit = pair.now() + DRAIN_LIMIT;
        stall = advance(&mut pair, limit, true, &mut budget).err();
    }
    let end = pair.now();

    let (delivered_at, mut problems, up) =
        check_events(trace, [(&pair.events_b, &ids_b), (&pair.events_a, &ids_a)]);
    problems.stall = stall;
    problems.missing = (0..total as u64)
        .filter(|n| delivered_at[*n as usize].is_none())
        .collect();
    problems.undeliverable_delivered = problems
        .undeliverable
        .iter()
        .filter(|n| delivered_at.get(**n as usize).is_some_and(Option::is_some))
        .count();
    Ok(RunResult {
        piggyback,
        stats_a: pair.a.stats().clone(),
        stats_b: pair.b.stats().clone(),
        link: pair.stats,
        sent_at,
        delivered_at,
        up_a: up[0],
        up_b: up[1],
        end,
        wall: wall.elapsed(),
        problems,
    })
}

/// One side's events, and the message number of each of its `MessageId`s.
type SideEvents<'a> = (&'a [(Time, Event)], &'a [u64]);

/// What each side's events say of the trace's messages: when each was delivered (by message
/// number), what went wrong, and when each side's channel came up (a, b). `sides`: b's events
/// and the message numbers of b's ids, then a's.
fn check_events(
    trace: &[TraceMsg],
    sides: [SideEvents<'_>; 2],
) -> (Vec<Option<Time>>, Problems, [Option<Time>; 2]) {
    let total = trace.len();
    let by_num: Vec<&TraceMsg> = {
        let mut v: Vec<&TraceMsg> = trace.iter().collect();
        v.sort_by_key(|m| m.num);
        v
    };
    let mut delivered_at: Vec<Option<Time>> = vec![None; total];
    let mut problems = Problems::default();
    let mut up = [None, None];
    for (at_b, (events, ids)) in [true, false].into_iter().zip(sides) {
        for (t, ev) in events {
            match ev {
                Event::Messages(msgs) => {
                    for d in msgs.deliveries() {
                        let Some(num) = d
                            .data
                            .get(..8)
                            .and_then(|b| b.try_into().ok())
                            .map(u64::from_le_bytes)
                            .filter(|n| (*n as usize) < total)
                        else {
                            problems.unknown += 1;
                            continue;
                        };
                        let m = by_num[num as usize];
                        if m.from_a != at_b {
                            problems.misrouted.push(num);
                            continue;
                        }
                        if delivered_at[num as usize].is_some() {
                            problems.duplicates.push(num);
                            continue;
                        }
                        delivered_at[num as usize] = Some(*t);
                        if d.data != m.data {
                            problems.corrupted.push(num);
                        }
                        if &*d.from != m.sender_name() || d.to.as_deref() != Some(m.to) {
                            problems.wrong_names.push(num);
                        }
                        if d.scope < m.scope {
                            problems.weaker_scope.push(num);
                        }
                    }
                }
                Event::ChannelUp { .. } => {
                    let slot = &mut up[usize::from(at_b)];
                    slot.get_or_insert(*t);
                }
                Event::Undeliverable { id, .. } => {
                    // The undeliverable message was sent by this side.
                    let num = ids.get(id.0 as usize).copied().unwrap_or(u64::MAX);
                    problems.undeliverable.push(num);
                }
                Event::HandshakeFailed { .. } => problems.handshake_failed += 1,
                _ => {}
            }
        }
    }
    (delivered_at, problems, up)
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn opt_ms(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".to_owned(), ms)
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "-".to_owned()
    } else {
        format!("{:.2}", a as f64 / b as f64)
    }
}

/// Latency figures of one direction.
#[derive(Default)]
struct Latency {
    urgent: Vec<Duration>,
    deadline_late: u64,
    deadline_count: u64,
    deadline_max_over: Duration,
    default_max: Duration,
    default_late: u64,
    default_count: u64,
    late_before_up: u64,
}

fn latency(
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

fn cells<const N: usize>(label: &str, v: [String; N]) -> Vec<String> {
    std::iter::once(label.to_owned()).chain(v).collect()
}

/// Message frames sent: first transmissions and retransmissions.
fn frames(s: &Stats) -> u64 {
    s.messages_sent + s.messages_retransmitted
}

fn handshake_datagrams(s: &Stats) -> u64 {
    s.datagrams_sent
        .saturating_sub(s.data_datagrams_sent + s.ack_only_datagrams_sent)
}

fn drops_line(s: &Stats) -> String {
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

fn report_run(
    out: &mut String,
    trace: &[TraceMsg],
    r: &RunResult,
    link: &LinkConfig,
    cfg: &Config,
) {
    let slack = link.delay + link.jitter;
    let m_timeout = cfg.default_timeout;
    let dirs = [true, false];
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
    let lat: Vec<Latency> = dirs
        .iter()
        .map(|d| latency(trace, r, *d, m_timeout, slack))
        .collect();
    let mut all_urgent: Vec<Duration> = lat.iter().flat_map(|l| l.urgent.iter().copied()).collect();
    all_urgent.sort();

    let mut t = Table::new(["", "A→B", "B→A", "total"]);
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
    out.push_str(&t.terminal());
    let _ = writeln!(
        out,
        "(A→B counts datagrams sent by A and messages from A's owners; latency is virtual time from send to delivery)"
    );

    report_keys_and_drops(out, r);
}

/// The run's public-key operations per host, its drops, the link's counts and when each
/// channel came up.
fn report_keys_and_drops(out: &mut String, r: &RunResult) {
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

fn link_line(l: &LinkStats) -> String {
    format!(
        "link (both directions): {} datagrams put on the link, {} lost, {} duplicated, {} reordered, {} corrupted, {} delivered",
        l.sent, l.lost, l.duplicated, l.reordered, l.corrupted, l.delivered
    )
}

fn check_counters(r: &RunResult) -> Vec<String> {
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

/// Runs one simulation, turning a panic inside it (the simulator asserts on a timer livelock,
/// for one) into an error naming the seed, so that the run ends with a clear failure.
fn guarded(seed: u64, f: impl FnOnce() -> Result<RunResult>) -> Result<RunResult> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("unknown panic");
        Err(Error::bench(format!(
            "demo check FAILED: the simulation panicked (seed {seed}): {what}"
        )))
    })
}

/// Runs the demo; prints the report and returns an error if the check failed.
pub fn run(p: &Params) -> Result<()> {
    if !(0.0..1.0).contains(&p.loss) {
        return Err(Error::Usage(format!(
            "--loss must be within [0, 1), got {}",
            p.loss
        )));
    }
    let seed = match p.seed {
        Some(s) => s,
        None => {
            let mut b = [0u8; 8];
            sealink_crypto::sign::random_bytes(&mut b).map_err(Error::Random)?;
            u64::from_le_bytes(b)
        }
    };
    let link = LinkConfig {
        delay: p.delay,
        jitter: Duration::from_millis(2),
        loss: p.loss,
        duplicate: 0.005,
        reorder: 0.01,
        corrupt: 0.002,
    };
    let cfg = Config::default();
    let keys = Keys::derive(seed)?;
    let max_len =
        Endpoint::new(cfg.clone(), keys.host_a.clone(), Directory::new())?.max_message_len();
    let mut trace_rng = SimRng::new(seed);
    let trace = make_trace(&mut trace_rng, p.messages, max_len);
    let link_seed = seed ^ 0x5EA1_11AC_0DE5_EED5;
    let total = trace.len();

    let mut out = String::new();
    let _ = writeln!(
        out,
        "sealink-lab demo: hosts A (alice, carol) and B (bob, dave) over a simulated link, virtual time"
    );
    let _ = writeln!(
        out,
        "seed:   {seed} (replay with `sealink-lab demo --seed {seed}`)"
    );
    let _ = writeln!(
        out,
        "link:   delay {} ms, jitter {} ms, loss {:.1}%, duplicate {:.1}%, reorder {:.1}%, corrupt {:.1}% (each way)",
        ms(link.delay),
        ms(link.jitter),
        link.loss * 100.0,
        link.duplicate * 100.0,
        link.reorder * 100.0,
        link.corrupt * 100.0
    );
    let _ = writeln!(
        out,
        "trace:  {} messages each way, exponential gaps (mean {} ms); sizes 40% 32-128 B, 30% 256-512 B, 20% 512-1024 B, 10% 1024-{max_len} B;",
        p.messages,
        ms(Duration::from_nanos(MEAN_GAP_NS as u64))
    );
    let _ = writeln!(
        out,
        "        urgency 20% urgent, 10% deadline 2-50 ms, 70% default; scope 50% auth-only, 50% encrypt"
    );
    let _ = writeln!(
        out,
        "config: suite {}, max datagram {} B, default timeout M {} ms, ack delay {} ms",
        cfg.suite,
        cfg.max_datagram,
        ms(cfg.default_timeout),
        ms(cfg.ack_delay)
    );

    let pb = output::progress(2 * total as u64, "demo");
    let runs = (|| -> Result<(RunResult, RunResult)> {
        let on = guarded(seed, || {
            run_trace(&trace, &keys, link, link_seed, true, &pb)
        })?;
        let off = guarded(seed, || {
            run_trace(&trace, &keys, link, link_seed, false, &pb)
        })?;
        Ok((on, off))
    })();
    pb.finish_and_clear();
    let (on, off) = runs?;

    let _ = writeln!(out);
    let _ = writeln!(out, "== run 1: piggybacking on ==");
    report_run(&mut out, &trace, &on, &link, &cfg);

    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "== run 2: same trace and link seed, piggybacking off =="
    );
    report_off_against_on(&mut out, &on, &off);

    let failures = failures(&on, &off);
    let _ = writeln!(out);
    let result = if failures.is_empty() {
        let _ = writeln!(
            out,
            "check: all {total} messages delivered exactly once and intact (piggyback on and off): OK"
        );
        Ok(())
    } else {
        let _ = writeln!(out, "check: FAILED ({})", failures.join("; "));
        Err(Error::bench(format!(
            "demo check failed (seed {seed}); see the report above"
        )))
    };
    output::print(&out)?;
    result
}

/// Run 2 against run 1: what piggybacking saved, and run 2's drops and timing.
fn report_off_against_on(out: &mut String, on: &RunResult, off: &RunResult) {
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
fn failures(on: &RunResult, off: &RunResult) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_is_deterministic_and_well_formed() {
        let max = Config::default().max_message_len();
        let a = make_trace(&mut SimRng::new(3), 500, max);
        let b = make_trace(&mut SimRng::new(3), 500, max);
        assert_eq!(a.len(), 1000);
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((x.num, x.at, &x.data), (y.num, y.at, &y.data));
            assert_eq!(&x.data[..8], &x.num.to_le_bytes());
            assert!((32..=max).contains(&x.data.len()), "{}", x.data.len());
        }
        let urgent = a.iter().filter(|m| m.urgency == Urgency::Urgent).count();
        assert!((120..280).contains(&urgent), "{urgent}");
        assert_eq!(a.iter().filter(|m| m.from_a).count(), 500);
    }

    #[test]
    fn a_seed_replays_the_run() {
        let link = LinkConfig {
            delay: Duration::from_millis(5),
            jitter: Duration::from_millis(2),
            loss: 0.05,
            duplicate: 0.01,
            reorder: 0.02,
            corrupt: 0.01,
        };
        let go = || {
            let keys = Keys::derive(11).unwrap();
            let trace = make_trace(
                &mut SimRng::new(11),
                150,
                Config::default().max_message_len(),
            );
            let r = run_trace(&trace, &keys, link, 12, true, &ProgressBar::hidden()).unwrap();
            assert!(r.problems.is_empty(), "{}", r.problems.summary());
            (
                r.stats_a.datagrams_sent,
                r.stats_b.datagrams_sent,
                r.stats_a.messages_retransmitted,
                r.link,
                r.delivered_at,
                r.end,
            )
        };
        assert_eq!(go(), go());
    }

    #[test]
    fn parsers() {
        assert!(parse_delay_ms("-1").is_err());
        assert_eq!(parse_delay_ms("10000"), Ok(10_000.0));
    }

    #[test]
    fn percentile_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&v, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&v[..1], 0.99), Some(Duration::from_millis(1)));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
