//! Property tests over the simulated link with virtual time.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use sealink_proto::sim::{LinkConfig, Side};
use sealink_proto::{Config, DropReason, Event, Scope, Time, Urgency};

#[derive(Debug, Clone)]
struct Msg {
    from_a: bool,
    owner: usize,
    to: Option<usize>,
    size: usize,
    urgency: Urgency,
    scope: Scope,
    gap_us: u64,
}

fn urgency() -> impl Strategy<Value = Urgency> {
    prop_oneof![
        Just(Urgency::Urgent),
        Just(Urgency::Default),
        (0u64..40).prop_map(|ms| Urgency::Deadline(Duration::from_millis(ms))),
    ]
}

fn msg(max: usize) -> impl Strategy<Value = Msg> {
    (
        any::<bool>(),
        0usize..2,
        proptest::option::of(0usize..2),
        prop_oneof![8usize..64, 64usize..600, 600..=max],
        urgency(),
        prop_oneof![Just(Scope::AuthOnly), Just(Scope::Encrypt)],
        0u64..3000,
    )
        .prop_map(|(from_a, owner, to, size, urgency, scope, gap_us)| Msg {
            from_a,
            owner,
            to,
            size,
            urgency,
            scope,
            gap_us,
        })
}

fn payload(i: usize, size: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..size)
        .map(|k| (k as u8).wrapping_mul(31).wrapping_add(i as u8))
        .collect();
    let id = (i as u64).to_le_bytes();
    for (k, b) in v.iter_mut().take(8).enumerate() {
        *b = id[k];
    }
    v
}

/// (index, sent at, from A?, from owner, to owner, payload, urgency)
type Sent = (usize, Time, bool, String, Option<String>, Vec<u8>, Urgency);
/// (delivered at, from A?, from owner, to owner, payload)
type Delivered = (Time, bool, String, Option<String>, Vec<u8>);

struct Outcome {
    sent: Vec<Sent>,
    delivered: Vec<Delivered>,
    /// Per side: messages still queued or unacknowledged, and the bytes the send buffer holds.
    leftover: [(usize, usize); 2],
}

/// What a channel's send buffer may keep with nothing pending: its one current chunk.
const IDLE_SEND_BUFFER: usize = 8 * 1024;

/// Sends `msgs` over `s` at their times and runs until everything settles.
fn run(s: &mut Setup, msgs: &[Msg], start: Time, limit: Duration) -> Outcome {
    let mut sent = Vec::new();
    let mut t = start;
    for (i, m) in msgs.iter().enumerate() {
        t = t + Duration::from_micros(m.gap_us);
        s.pair.run_until(t);
        let (side, peer, owners, names, dests) = if m.from_a {
            (Side::A, s.a_peer, &s.a_owners, &A_OWNERS, &B_OWNERS)
        } else {
            (Side::B, s.b_peer, &s.b_owners, &B_OWNERS, &A_OWNERS)
        };
        let to = m.to.map(|k| dests[k]);
        let data = payload(i, m.size);
        let now = s.pair.now();
        s.pair
            .endpoint(side)
            .send(now, peer, owners[m.owner], to, &data, m.urgency, m.scope)
            .expect("send");
        sent.push((
            i,
            now,
            m.from_a,
            names[m.owner].to_string(),
            to.map(str::to_owned),
            data,
            m.urgency,
        ));
    }
    let until = s.pair.now() + limit;
    s.pair.run_idle(until);
    s.pair.transmit();
    let leftover = [(Side::A, s.a_peer), (Side::B, s.b_peer)].map(|(side, peer)| {
        let ep = s.pair.endpoint(side);
        (ep.pending_messages(peer), ep.send_buffer_bytes(peer))
    });
    let mut delivered = Vec::new();
    for (to_b, evs) in [(true, &s.pair.events_b), (false, &s.pair.events_a)] {
        for (t, e) in evs {
            let Event::Messages(m) = e else { continue };
            for d in m.deliveries() {
                delivered.push((
                    *t,
                    to_b,
                    d.from.to_string(),
                    d.to.as_deref().map(str::to_owned),
                    d.data.to_vec(),
                ));
            }
        }
    }
    Outcome {
        sent,
        delivered,
        leftover,
    }
}

/// Every message arrived exactly once, intact, from the right owner to the right destination.
/// Each payload starts with its message number.
fn check_exactly_once(o: &Outcome) -> Result<(), TestCaseError> {
    // Every settled message gave its bytes back (acknowledged, refused or given up alike).
    for (pending, buffered) in o.leftover {
        if pending == 0 {
            prop_assert!(
                buffered <= IDLE_SEND_BUFFER,
                "{buffered} bytes kept with nothing pending"
            );
        }
    }
    let mut count: HashMap<usize, usize> = HashMap::new();
    for (_, from_a, from, to, data) in &o.delivered {
        prop_assert!(data.len() >= 8);
        let idx = u64::from_le_bytes(data[..8].try_into().unwrap()) as usize;
        let s = o
            .sent
            .get(idx)
            .ok_or_else(|| TestCaseError::fail("unknown message delivered"))?;
        prop_assert_eq!(&s.5, data, "payload altered");
        prop_assert_eq!(s.2, *from_a);
        prop_assert_eq!(&s.3, from);
        prop_assert_eq!(&s.4, to);
        *count.entry(idx).or_default() += 1;
    }
    for s in &o.sent {
        let n = count.get(&s.0).copied().unwrap_or(0);
        prop_assert_eq!(n, 1, "message {} delivered {} times", s.0, n);
    }
    Ok(())
}

fn max_len() -> usize {
    Config::default().max_message_len()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    /// Any message sequence, under loss, reordering, duplication and corruption, arrives
    /// exactly once and intact; owners cost one signature and one verification per channel.
    #[test]
    fn exactly_once_under_faults(
        msgs in proptest::collection::vec(msg(max_len()), 1..60),
        loss in 0.0f64..0.25,
        duplicate in 0.0f64..0.2,
        reorder in 0.0f64..0.3,
        corrupt in 0.0f64..0.05,
        jitter_ms in 0u64..8,
        seed in any::<u64>(),
    ) {
        let link = LinkConfig { delay: Duration::from_millis(5), jitter: Duration::from_millis(jitter_ms), loss, duplicate, reorder, corrupt };
        let mut s = setup(link, seed);
        let o = run(&mut s, &msgs, Time::ZERO, Duration::from_secs(600));
        check_exactly_once(&o)?;
        let (a, b) = (s.pair.a.stats().clone(), s.pair.b.stats().clone());
        prop_assert_eq!(a.messages_undeliverable + b.messages_undeliverable, 0);
        // One signature per sending owner per channel, and one verification on the other side.
        let owners_a = msgs.iter().filter(|m| m.from_a).map(|m| m.owner).collect::<std::collections::BTreeSet<_>>().len() as u64;
        let owners_b = msgs.iter().filter(|m| !m.from_a).map(|m| m.owner).collect::<std::collections::BTreeSet<_>>().len() as u64;
        prop_assert!(a.pk.signs <= owners_a * a.channels_established);
        prop_assert!(b.pk.verifies <= owners_a * b.channels_established);
        prop_assert!(b.pk.signs <= owners_b * b.channels_established);
        prop_assert!(a.pk.verifies <= owners_b * a.channels_established);
        // Nothing forged got in: every drop is one the faults explain.
        for st in [&a, &b] {
            for (r, _) in st.drops_by_reason() {
                prop_assert!(matches!(r, DropReason::AuthFailed | DropReason::Replayed | DropReason::MalformedHeader | DropReason::BadVersion
                    | DropReason::UnknownIndex | DropReason::HandshakeFailed | DropReason::StaleHandshake | DropReason::UnexpectedResponse
                    | DropReason::HandshakeCollision | DropReason::TooOld | DropReason::UnknownOwnerId | DropReason::UnknownHost | DropReason::ScopeRefused
                    | DropReason::BadMac1), "unexpected drop {r}");
            }
        }
    }

    /// Every tampered datagram is rejected: flip one bit anywhere in any datagram seen on the
    /// link and hand it to its receiver.
    #[test]
    fn tampered_datagrams_rejected(
        msgs in proptest::collection::vec(msg(max_len()), 1..20),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..40),
        seed in any::<u64>(),
    ) {
        let mut s = setup(LinkConfig::default(), seed);
        s.pair.captured = Some(Vec::new());
        let o = run(&mut s, &msgs, Time::ZERO, Duration::from_secs(60));
        check_exactly_once(&o)?;
        let captured = s.pair.captured.take().unwrap();
        let delivered_before = (s.pair.a.stats().messages_delivered, s.pair.b.stats().messages_delivered);
        let now = s.pair.now();
        for (k, (pos, bit)) in flips.iter().enumerate() {
            let (from_a, orig) = &captured[k % captured.len()];
            let mut d = orig.clone();
            let i = pos.index(d.len());
            d[i] ^= 1 << bit;
            let ep = s.pair.endpoint(if *from_a { Side::B } else { Side::A });
            prop_assert!(ep.handle(now, &mut d).is_err(), "tampered datagram accepted (byte {i})");
        }
        prop_assert_eq!(delivered_before, (s.pair.a.stats().messages_delivered, s.pair.b.stats().messages_delivered));
    }

    /// Every replayed datagram is rejected, whenever it is replayed.
    #[test]
    fn replayed_datagrams_rejected(
        msgs in proptest::collection::vec(msg(max_len()), 1..30),
        loss in 0.0f64..0.2,
        seed in any::<u64>(),
    ) {
        let link = LinkConfig { loss, reorder: 0.1, ..LinkConfig::default() };
        let mut s = setup(link, seed);
        s.pair.captured = Some(Vec::new());
        let o = run(&mut s, &msgs, Time::ZERO, Duration::from_secs(600));
        check_exactly_once(&o)?;
        let captured = s.pair.captured.take().unwrap();
        let delivered_before = (s.pair.a.stats().messages_delivered, s.pair.b.stats().messages_delivered);
        let now = s.pair.now();
        // A datagram the link lost may be accepted on its first (late) arrival; a second copy
        // never is, and nothing is ever delivered twice.
        for (from_a, orig) in &captured {
            let ep = s.pair.endpoint(if *from_a { Side::B } else { Side::A });
            let _ = ep.handle(now, &mut orig.clone());
            let r = ep.handle(now, &mut orig.clone());
            prop_assert!(r.is_err(), "replayed datagram accepted");
        }
        prop_assert_eq!(delivered_before, (s.pair.a.stats().messages_delivered, s.pair.b.stats().messages_delivered));
        prop_assert!(s.pair.pair_events_clean());
    }

    /// Piggybacking never delays an urgent message and never holds one past its deadline:
    /// on a clean link with a fixed delay, an urgent message arrives exactly one link delay
    /// after it was sent, and any other no later than its deadline plus the link delay.
    #[test]
    fn piggyback_respects_urgency(
        msgs in proptest::collection::vec(msg(max_len()), 1..80),
        seed in any::<u64>(),
    ) {
        let delay = Duration::from_millis(5);
        let mut s = setup(LinkConfig { delay, ..LinkConfig::default() }, seed);
        // Establish first: the handshake's round trip is not piggybacking's doing.
        let p = &mut s.pair;
        p.a.send(Time::ZERO, s.a_peer, s.a_owners[0], None, b"hi", Urgency::Urgent, Scope::Encrypt).unwrap();
        p.run_until(Time::from_millis(50));
        p.b.send(p.now(), s.b_peer, s.b_owners[0], None, b"hi", Urgency::Urgent, Scope::Encrypt).unwrap();
        p.run_until(Time::from_millis(100));
        p.events_a.clear();
        p.events_b.clear();
        let o = run(&mut s, &msgs, Time::from_millis(100), Duration::from_secs(10));
        check_exactly_once(&o)?;
        let default_m = Config::default().default_timeout;
        for (t, from_a, _, _, data) in &o.delivered {
            let s_ = o.sent.iter().find(|x| &x.5 == data && x.2 == *from_a).unwrap();
            let sent_at = s_.1;
            let bound = match s_.6 {
                Urgency::Urgent => sent_at + delay,
                Urgency::Deadline(d) => sent_at + d + delay,
                Urgency::Default => sent_at + default_m + delay,
            };
            prop_assert!(*t <= bound, "message {:?} sent {} arrived {} > bound {}", s_.6, sent_at, t, bound);
            if s_.6 == Urgency::Urgent {
                prop_assert_eq!(*t, sent_at + delay);
            }
        }
    }
}

/// Found by `exactly_once_under_faults`: a simultaneous open under heavy loss and reordering,
/// where a stale initiation of the side that lost the race arrived after the channel was up and
/// split it in two (duplicate deliveries after renumbering). Host keys are random, so the race
/// goes either way: run it a few times.
#[test]
fn regression_duplicate_delivery() {
    for _ in 0..4 {
        let msgs = vec![
            Msg {
                from_a: true,
                owner: 1,
                to: None,
                size: 777,
                urgency: Urgency::Urgent,
                scope: Scope::AuthOnly,
                gap_us: 948,
            },
            Msg {
                from_a: true,
                owner: 0,
                to: Some(0),
                size: 683,
                urgency: Urgency::Default,
                scope: Scope::AuthOnly,
                gap_us: 846,
            },
            Msg {
                from_a: true,
                owner: 1,
                to: Some(0),
                size: 718,
                urgency: Urgency::Urgent,
                scope: Scope::AuthOnly,
                gap_us: 949,
            },
            Msg {
                from_a: false,
                owner: 0,
                to: None,
                size: 497,
                urgency: Urgency::Urgent,
                scope: Scope::AuthOnly,
                gap_us: 1587,
            },
            Msg {
                from_a: false,
                owner: 0,
                to: None,
                size: 252,
                urgency: Urgency::Deadline(Duration::from_millis(9)),
                scope: Scope::Encrypt,
                gap_us: 1063,
            },
            Msg {
                from_a: false,
                owner: 0,
                to: Some(0),
                size: 894,
                urgency: Urgency::Default,
                scope: Scope::AuthOnly,
                gap_us: 248,
            },
            Msg {
                from_a: false,
                owner: 0,
                to: Some(0),
                size: 1114,
                urgency: Urgency::Deadline(Duration::from_millis(11)),
                scope: Scope::AuthOnly,
                gap_us: 896,
            },
            Msg {
                from_a: false,
                owner: 0,
                to: None,
                size: 724,
                urgency: Urgency::Deadline(Duration::from_millis(35)),
                scope: Scope::Encrypt,
                gap_us: 2277,
            },
            Msg {
                from_a: false,
                owner: 1,
                to: Some(1),
                size: 27,
                urgency: Urgency::Default,
                scope: Scope::AuthOnly,
                gap_us: 1818,
            },
            Msg {
                from_a: false,
                owner: 0,
                to: Some(1),
                size: 838,
                urgency: Urgency::Deadline(Duration::from_millis(6)),
                scope: Scope::Encrypt,
                gap_us: 2106,
            },
            Msg {
                from_a: true,
                owner: 0,
                to: Some(1),
                size: 14,
                urgency: Urgency::Urgent,
                scope: Scope::Encrypt,
                gap_us: 2376,
            },
            Msg {
                from_a: true,
                owner: 0,
                to: None,
                size: 830,
                urgency: Urgency::Deadline(Duration::from_millis(38)),
                scope: Scope::Encrypt,
                gap_us: 429,
            },
            Msg {
                from_a: false,
                owner: 0,
                to: Some(1),
                size: 910,
                urgency: Urgency::Default,
                scope: Scope::Encrypt,
                gap_us: 1643,
            },
            Msg {
                from_a: false,
                owner: 1,
                to: None,
                size: 142,
                urgency: Urgency::Deadline(Duration::from_millis(34)),
                scope: Scope::Encrypt,
                gap_us: 457,
            },
            Msg {
                from_a: true,
                owner: 0,
                to: Some(1),
                size: 675,
                urgency: Urgency::Urgent,
                scope: Scope::AuthOnly,
                gap_us: 2803,
            },
            Msg {
                from_a: true,
                owner: 0,
                to: None,
                size: 522,
                urgency: Urgency::Urgent,
                scope: Scope::AuthOnly,
                gap_us: 2040,
            },
            Msg {
                from_a: false,
                owner: 1,
                to: Some(0),
                size: 902,
                urgency: Urgency::Urgent,
                scope: Scope::AuthOnly,
                gap_us: 2853,
            },
        ];
        let link = LinkConfig {
            delay: Duration::from_millis(5),
            jitter: Duration::from_millis(1),
            loss: 0.24104704618209913,
            duplicate: 0.16322329767563085,
            reorder: 0.2579426341897872,
            corrupt: 0.017946507768960205,
        };
        let mut s = setup(link, 7156819455871534903);
        let o = run(&mut s, &msgs, Time::ZERO, Duration::from_secs(600));
        check_exactly_once(&o).unwrap();
    }
}

/// Found by `exactly_once_under_faults` (a simultaneous open under heavy loss): delivered
/// messages were reported undeliverable because renumbering for a new channel kept their old
/// transmission counts and re-handshakes reset the retransmission backoff.
#[test]
fn regression_false_undeliverable() {
    let msgs = vec![
        Msg {
            from_a: true,
            owner: 0,
            to: None,
            size: 114,
            urgency: Urgency::Urgent,
            scope: Scope::AuthOnly,
            gap_us: 0,
        },
        Msg {
            from_a: false,
            owner: 0,
            to: None,
            size: 42,
            urgency: Urgency::Urgent,
            scope: Scope::AuthOnly,
            gap_us: 0,
        },
        Msg {
            from_a: true,
            owner: 1,
            to: Some(1),
            size: 1089,
            urgency: Urgency::Urgent,
            scope: Scope::AuthOnly,
            gap_us: 0,
        },
        Msg {
            from_a: true,
            owner: 0,
            to: None,
            size: 600,
            urgency: Urgency::Urgent,
            scope: Scope::AuthOnly,
            gap_us: 0,
        },
        Msg {
            from_a: false,
            owner: 0,
            to: Some(0),
            size: 63,
            urgency: Urgency::Urgent,
            scope: Scope::AuthOnly,
            gap_us: 0,
        },
        Msg {
            from_a: true,
            owner: 0,
            to: None,
            size: 8,
            urgency: Urgency::Urgent,
            scope: Scope::AuthOnly,
            gap_us: 0,
        },
        Msg {
            from_a: true,
            owner: 0,
            to: None,
            size: 707,
            urgency: Urgency::Urgent,
            scope: Scope::AuthOnly,
            gap_us: 0,
        },
        Msg {
            from_a: false,
            owner: 1,
            to: Some(1),
            size: 1091,
            urgency: Urgency::Urgent,
            scope: Scope::AuthOnly,
            gap_us: 0,
        },
        Msg {
            from_a: true,
            owner: 0,
            to: Some(0),
            size: 572,
            urgency: Urgency::Urgent,
            scope: Scope::AuthOnly,
            gap_us: 0,
        },
        Msg {
            from_a: true,
            owner: 0,
            to: None,
            size: 8,
            urgency: Urgency::Urgent,
            scope: Scope::AuthOnly,
            gap_us: 0,
        },
        Msg {
            from_a: false,
            owner: 0,
            to: None,
            size: 117,
            urgency: Urgency::Urgent,
            scope: Scope::AuthOnly,
            gap_us: 0,
        },
        Msg {
            from_a: true,
            owner: 1,
            to: None,
            size: 622,
            urgency: Urgency::Urgent,
            scope: Scope::AuthOnly,
            gap_us: 0,
        },
    ];
    let link = LinkConfig {
        delay: Duration::from_millis(5),
        jitter: Duration::from_millis(2),
        loss: 0.20277572316253,
        duplicate: 0.15569880966330477,
        reorder: 0.03457096669594653,
        corrupt: 0.006451440102097612,
    };
    let mut s = setup(link, 5115567564800310795);
    let o = run(&mut s, &msgs, Time::ZERO, Duration::from_secs(600));
    check_exactly_once(&o).unwrap();
    assert!(s.pair.pair_events_clean());
}
