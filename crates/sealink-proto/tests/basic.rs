mod common;

use std::time::Duration;

use common::*;
use sealink_proto::sim::LinkConfig;
use sealink_proto::{DropReason, Event, Scope, Time, Urgency};

fn deliveries(ev: &[(Time, Event)]) -> Vec<(Time, String, Option<String>, Vec<u8>)> {
    ev.iter()
        .flat_map(|(t, e)| match e {
            Event::Messages(m) => m
                .deliveries()
                .map(|d| {
                    (
                        *t,
                        d.from.to_string(),
                        d.to.as_deref().map(str::to_owned),
                        d.data.to_vec(),
                    )
                })
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

#[test]
fn handshake_and_delivery_both_ways() {
    let mut s = setup(LinkConfig::default(), 1);
    s.send_a(Time::ZERO, 0, Some("bob"), b"hello bob");
    let p = &mut s.pair;
    p.run_until(Time::from_millis(100));
    let got = deliveries(&p.events_b);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, "alice");
    assert_eq!(got[0].2.as_deref(), Some("bob"));
    assert_eq!(got[0].3, b"hello bob");
    // handshake 1 RTT (10 ms), then data one way (5 ms).
    assert_eq!(got[0].0, Time::from_millis(15));
    let now = p.now();
    p.b.send(
        now,
        s.b_peer,
        s.b_owners[1],
        None,
        b"hi from dave",
        Urgency::Default,
        Scope::AuthOnly,
    )
    .unwrap();
    p.run_until(now + Duration::from_millis(100));
    let got = deliveries(&p.events_a);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, "dave");
    assert_eq!(got[0].3, b"hi from dave");
    // default timeout M (10 ms) plus 5 ms link.
    assert_eq!(got[0].0, now + Duration::from_millis(15));
    assert!(
        p.events_a
            .iter()
            .any(|(_, e)| matches!(e, Event::ChannelUp { .. }))
    );
    assert!(
        p.events_b
            .iter()
            .any(|(_, e)| matches!(e, Event::ChannelUp { .. }))
    );
    assert_eq!(p.a.stats().total_drops(), 0);
    assert_eq!(p.b.stats().total_drops(), 0);
}

#[test]
fn one_signature_per_owner_per_channel() {
    let mut s = setup(LinkConfig::default(), 2);
    let p = &mut s.pair;
    for i in 0..50u32 {
        let now = p.now();
        for (k, o) in s.a_owners.iter().enumerate() {
            let urg = urgency(i % 5 == 0);
            p.a.send(
                now,
                s.a_peer,
                *o,
                Some(common::B_OWNERS[k]),
                &i.to_le_bytes(),
                urg,
                Scope::Encrypt,
            )
            .unwrap();
        }
        p.run_until(now + Duration::from_millis(3));
    }
    p.run_until(p.now() + Duration::from_secs(1));
    assert_eq!(deliveries(&p.events_b).len(), 100);
    assert_eq!(p.a.stats().pk.signs, 2);
    assert_eq!(p.b.stats().pk.verifies, 2);
    assert_eq!(p.b.stats().pk.signs, 0);
}

#[test]
fn simultaneous_open_yields_one_channel() {
    for seed in 0..8 {
        let mut s = setup(LinkConfig::default(), seed);
        s.send_a(Time::ZERO, 0, None, b"from a");
        let p = &mut s.pair;
        send_urgent(
            &mut p.b,
            Time::ZERO,
            s.b_peer,
            s.b_owners[0],
            None,
            b"from b",
        );
        p.run_until(Time::from_millis(200));
        assert_eq!(deliveries(&p.events_a).len(), 1);
        assert_eq!(deliveries(&p.events_b).len(), 1);
        // Exactly one handshake completed on each side and one side dropped the collision.
        assert_eq!(p.a.stats().handshakes_completed, 1, "seed {seed}");
        assert_eq!(p.b.stats().handshakes_completed, 1, "seed {seed}");
        let collisions = p.a.stats().drops(DropReason::HandshakeCollision)
            + p.b.stats().drops(DropReason::HandshakeCollision);
        assert_eq!(collisions, 1);
    }
}

/// A simultaneous open whose winner's initiation never reaches the loser (lost, or never sent
/// by a driver that did not yet know the loser's address): the winner sends it again as soon as
/// the loser's initiation arrives, instead of leaving both waiting for the handshake timeout.
#[test]
fn simultaneous_open_recovers_at_once_when_the_winners_initiation_is_lost() {
    for seed in 0..8 {
        let mut s = setup(LinkConfig::default(), seed);
        let p = &mut s.pair;
        for (ep, peer, owner, data) in [
            (&mut p.a, s.a_peer, s.a_owners[0], b"from a"),
            (&mut p.b, s.b_peer, s.b_owners[0], b"from b"),
        ] {
            send_urgent(ep, Time::ZERO, peer, owner, None, data);
        }
        let winner = if p.a.host_public() > p.b.host_public() {
            &mut p.a
        } else {
            &mut p.b
        };
        let mut buf = vec![0u8; 65_536];
        let lost = winner.poll_transmit(Time::ZERO, &mut buf).unwrap();
        assert!(matches!(
            sealink_proto::wire::parse_header(&buf[..lost.len]),
            Ok(sealink_proto::wire::Header::Init { .. })
        ));
        // Well inside the 1 s handshake timeout.
        p.run_until(Time::from_millis(200));
        assert_eq!(deliveries(&p.events_a).len(), 1, "seed {seed}");
        assert_eq!(deliveries(&p.events_b).len(), 1, "seed {seed}");
    }
}

/// An authenticated peer naming ever new destinations cannot grow the receiver's table past
/// `MAX_DESTINATIONS`: messages to further names are refused one by one (and the sender told),
/// the others delivered.
#[test]
fn destination_table_is_bounded() {
    use sealink_proto::channel::MAX_DESTINATIONS;
    let extra = 5;
    let mut s = setup(LinkConfig::default(), 3);
    let p = &mut s.pair;
    for i in 0..MAX_DESTINATIONS + extra {
        let name = format!("d{i}");
        p.a.send(
            p.now(),
            s.a_peer,
            s.a_owners[0],
            Some(name.as_str()),
            b"x",
            Urgency::Default,
            Scope::Encrypt,
        )
        .unwrap();
        if i % 256 == 255 {
            let t = p.now() + Duration::from_millis(20);
            p.run_until(t);
        }
    }
    let t = p.now() + Duration::from_secs(2);
    p.run_until(t);
    assert_eq!(deliveries(&p.events_b).len(), MAX_DESTINATIONS);
    assert_eq!(p.a.stats().messages_refused, extra as u64);
    assert_eq!(p.b.stats().drops(DropReason::UnknownOwnerId), extra as u64);
}

/// One large datagram carrying hundreds of piggybacked messages is acknowledged at once
/// (`ack_every_messages`), not after the delayed-ACK timer: otherwise a sender whose whole
/// window fits one datagram stalls for `ack_delay` per window.
#[test]
fn big_piggybacked_datagram_is_acknowledged_at_once() {
    let big = || {
        let mut c = sealink_proto::Config {
            max_datagram: 65_000,
            ack_delay: Duration::from_secs(1),
            ..Default::default()
        };
        c.queue_limit = c.max_body();
        c
    };
    let mut s = setup_with(big(), big(), LinkConfig::default(), 7);
    let p = &mut s.pair;
    // Open the channel first, so all messages below share one datagram.
    send_urgent(&mut p.a, Time::ZERO, s.a_peer, s.a_owners[0], None, b"open");
    p.run_until(Time::from_millis(20));
    let now = p.now();
    let n = 300;
    for i in 0..n {
        let u = urgency(i + 1 == n);
        p.a.send(
            now,
            s.a_peer,
            s.a_owners[0],
            None,
            &[7u8; 64],
            u,
            Scope::Encrypt,
        )
        .unwrap();
    }
    let sent_before = p.a.stats().data_datagrams_sent;
    // One way 5 ms, the ACK back 5 ms: far below the 1 s delayed-ACK timer.
    p.run_until(now + Duration::from_millis(15));
    assert_eq!(p.a.stats().data_datagrams_sent - sent_before, 1);
    assert_eq!(deliveries(&p.events_b).len(), n + 1);
    assert_eq!(p.a.pending_messages(s.a_peer), 0, "not acknowledged yet");
}

#[test]
fn a_rekey_over_a_path_slower_than_the_handshake_timeout_completes() {
    // The channel comes up on a fast path, which then slows to 0.8 s each way: every rekey
    // response comes after the 1 s timeout has replaced its initiation. The replaced one is
    // kept for its late response, so the rekey completes and nothing is lost (before, each
    // response was refused as unexpected, every rekey failed, and the session aged out).
    let mut s = setup(LinkConfig::default(), 3);
    let p = &mut s.pair;
    let send = |p: &mut sealink_proto::sim::Pair, now: Time, i: u32| {
        send_urgent(
            &mut p.a,
            now,
            s.a_peer,
            s.a_owners[0],
            Some("bob"),
            &i.to_le_bytes(),
        );
    };
    send(p, Time::ZERO, 0);
    p.run_until(Time::from_millis(1000));
    p.link.delay = Duration::from_millis(800);
    let n = 300;
    for i in 1..n {
        let now = Time::from_millis(1000 * u64::from(i));
        p.run_until(now);
        send(p, now, i);
    }
    p.run_until(Time::from_millis(1000 * u64::from(n) + 30_000));
    let st = p.a.stats();
    assert_eq!(deliveries(&p.events_b).len(), n as usize, "{st:?}");
    assert!(p.pair_events_clean());
    assert_eq!(st.channels_established, 1, "{st:?}");
    assert!(st.handshakes_completed >= 3, "it rekeyed: {st:?}");
}

/// Piggybacked messages reach the receiver as one [`Event::Messages`] per run of one owner and
/// destination within a datagram, in the order sent: alice×3 to bob, carol×2 to bob, alice×2 to
/// the host, alice×1 to bob (urgent, so all eight leave together) makes four events.
#[test]
fn a_datagrams_messages_arrive_as_one_event_per_owner_and_destination_run() {
    let mut s = setup(LinkConfig::default(), 7);
    let p = &mut s.pair;
    // Warm-up: channel and introductions, so the eight below share one datagram.
    for o in [0, 1] {
        for to in [Some("bob"), None] {
            let now = p.now();
            send_urgent(&mut p.a, now, s.a_peer, s.a_owners[o], to, b"w");
        }
    }
    p.run_until(Time::from_millis(100));
    p.events_b.clear();
    let now = p.now();
    let plan: [(usize, Option<&str>, usize); 4] = [
        (0, Some("bob"), 3),
        (1, Some("bob"), 2),
        (0, None, 2),
        (0, Some("bob"), 1),
    ];
    let mut want = Vec::new();
    for (k, &(o, to, n)) in plan.iter().enumerate() {
        for i in 0..n {
            let data = [k as u8, i as u8];
            let urgent = k == plan.len() - 1;
            let u = urgency(urgent);
            p.a.send(now, s.a_peer, s.a_owners[o], to, &data, u, Scope::Encrypt)
                .unwrap();
            want.push((A_OWNERS[o].to_owned(), to.map(str::to_owned), data.to_vec()));
        }
    }
    p.run_until(now + Duration::from_millis(100));
    let runs: Vec<(String, Option<String>, Vec<Vec<u8>>)> = p
        .events_b
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Messages(m) => Some((
                m.from.to_string(),
                m.to.as_deref().map(str::to_owned),
                m.iter().map(<[u8]>::to_vec).collect(),
            )),
            _ => None,
        })
        .collect();
    let sizes: Vec<usize> = runs.iter().map(|r| r.2.len()).collect();
    assert_eq!(sizes, [3, 2, 2, 1], "{runs:?}");
    for (r, (o, to, _)) in runs.iter().zip(plan) {
        assert_eq!((r.0.as_str(), r.1.as_deref()), (A_OWNERS[o], to));
    }
    let flat: Vec<_> = runs
        .into_iter()
        .flat_map(|(f, t, d)| d.into_iter().map(move |d| (f.clone(), t.clone(), d)))
        .collect();
    assert_eq!(flat, want);
}
