//! Driving a trace over the simulated link: the two endpoints, the stepping with its stall
//! guard, and the check of what each side delivered against what was sent.

use super::*;

/// What one run of the trace produced.
pub(super) struct RunResult {
    pub(super) piggyback: bool,
    pub(super) stats_a: Stats,
    pub(super) stats_b: Stats,
    pub(super) link: LinkStats,
    /// Virtual time each message was queued, by number.
    pub(super) sent_at: Vec<Time>,
    /// Virtual time each message was delivered (first delivery), by number.
    pub(super) delivered_at: Vec<Option<Time>>,
    /// Virtual time each side first saw its channel up.
    pub(super) up_a: Option<Time>,
    pub(super) up_b: Option<Time>,
    pub(super) end: Time,
    pub(super) wall: Duration,
    pub(super) problems: Problems,
}

/// Everything that went wrong, with a few examples each.
#[derive(Default)]
pub(super) struct Problems {
    pub(super) missing: Vec<u64>,
    pub(super) duplicates: Vec<u64>,
    pub(super) corrupted: Vec<u64>,
    pub(super) wrong_names: Vec<u64>,
    pub(super) weaker_scope: Vec<u64>,
    pub(super) misrouted: Vec<u64>,
    pub(super) unknown: usize,
    pub(super) undeliverable: Vec<u64>,
    /// Of those, how many had in fact been delivered (the sender gave up on the acknowledgement).
    pub(super) undeliverable_delivered: usize,
    pub(super) handshake_failed: usize,
    /// The simulation stopped advancing virtual time.
    pub(super) stall: Option<String>,
}

impl Problems {
    pub(super) fn is_empty(&self) -> bool {
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

    pub(super) fn summary(&self) -> String {
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
pub(super) const STALL_STEPS: u32 = 10_000;
/// Steps a run may take in all: a fixed allowance plus this many per message. A healthy run
/// needs a few per message (arrivals, datagrams, timers).
pub(super) const STEPS_BASE: u64 = 1_000_000;
pub(super) const STEPS_PER_MESSAGE: u64 = 1_000;

/// What the simulation was doing when it was stopped.
pub(super) fn stuck_report(pair: &Pair, why: String) -> String {
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
pub(super) fn advance(
    pair: &mut Pair,
    until: Time,
    until_idle: bool,
    budget: &mut u64,
) -> Result<(), String> {
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

pub(super) fn endpoint(
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

pub(super) fn run_trace(
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
pub(super) type SideEvents<'a> = (&'a [(Time, Event)], &'a [u64]);

/// What each side's events say of the trace's messages: when each was delivered (by message
/// number), what went wrong, and when each side's channel came up (a, b). `sides`: b's events
/// and the message numbers of b's ids, then a's.
pub(super) fn check_events(
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
