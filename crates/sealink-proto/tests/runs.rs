//! The sender tracks messages by run (a batch's consecutive messages of one owner, destination
//! and scope, split where a datagram ends, an acknowledgement range cuts, or a retransmission
//! does not fit). Both hosts send batches of mixed sizes and scopes at once, over clean and
//! faulty links in virtual time: every message arrives exactly once (in order where nothing was
//! lost: a message is delivered as soon as it arrives, not held behind a hole), and nothing is
//! left pending or given up.

mod common;

use std::time::Duration;

use common::*;
use sealink_proto::sim::LinkConfig;
use sealink_proto::{Event, Outgoing, Scope, Time, Urgency};

const MSGS: u32 = 1500;
const BATCH: usize = 50;

/// Messages of many sizes, or all of `fixed` bytes (runs whose datagrams are cut by
/// arithmetic, without reading the items' lengths).
fn messages_of(fixed: Option<usize>) -> Vec<Vec<u8>> {
    (0..MSGS)
        .map(|i| {
            let mut m = i.to_le_bytes().to_vec();
            m.resize(
                fixed.unwrap_or(4 + (i as usize * 37) % 900),
                (i % 251) as u8,
            );
            m
        })
        .collect()
}

fn messages() -> Vec<Vec<u8>> {
    messages_of(None)
}

fn received(ev: &[(Time, Event)]) -> (Vec<Vec<u8>>, usize) {
    let mut got = Vec::new();
    let mut undeliverable = 0;
    for (_, e) in ev {
        match e {
            Event::Messages(m) => got.extend(m.iter().map(<[u8]>::to_vec)),
            Event::Undeliverable { .. } => undeliverable += 1,
            _ => {}
        }
    }
    (got, undeliverable)
}

/// 5% loss, 5% reordering, 3% duplication, 2 ms of jitter.
fn faulty() -> LinkConfig {
    LinkConfig {
        jitter: Duration::from_millis(2),
        loss: 0.05,
        duplicate: 0.03,
        reorder: 0.05,
        ..LinkConfig::default()
    }
}

fn both_ways(link: LinkConfig, seed: u64, in_order: bool) {
    both_ways_with(link, seed, in_order, messages());
}

fn both_ways_with(link: LinkConfig, seed: u64, in_order: bool, msgs: Vec<Vec<u8>>) {
    let mut s = setup(link, seed);
    let mut next = [0usize; 2];
    let mut t = Time::ZERO;
    while next.iter().any(|&n| n < msgs.len()) {
        for (side, n) in next.iter_mut().enumerate() {
            if *n >= msgs.len() {
                continue;
            }
            let batch = *n / BATCH;
            let out: Vec<Outgoing<'_>> = msgs[*n..(*n + BATCH).min(msgs.len())]
                .iter()
                .enumerate()
                .map(|(k, d)| Outgoing {
                    data: d,
                    // The last of each batch is urgent: it flushes the queue mid-run.
                    urgency: if k == BATCH - 1 {
                        Urgency::Urgent
                    } else {
                        Urgency::Default
                    },
                    // Scopes change inside a batch: runs end there.
                    scope: if (batch + k) % 3 == 0 {
                        Scope::AuthOnly
                    } else {
                        Scope::Encrypt
                    },
                })
                .collect();
            let r = if side == 0 {
                s.pair.a.send_batch(t, s.a_peer, s.a_owners[0], None, &out)
            } else {
                s.pair
                    .b
                    .send_batch(t, s.b_peer, s.b_owners[1], Some("carol"), &out)
            };
            if let Ok((_, queued)) = r {
                *n += queued;
            }
        }
        t = t + Duration::from_micros(300);
        s.pair.run_until(t);
    }
    s.pair.run_until(t + Duration::from_secs(60));
    for (ev, at) in [(&s.pair.events_b, "b"), (&s.pair.events_a, "a")] {
        let (mut got, undeliverable) = received(ev);
        assert_eq!(undeliverable, 0, "seed {seed}: given up at {at}'s peer");
        assert_eq!(got.len(), msgs.len(), "seed {seed}: count at {at}");
        if !in_order {
            // Each message starts with its number: back in sending order.
            got.sort_by_key(|m| u32::from_le_bytes(m[..4].try_into().unwrap()));
        }
        assert!(got == msgs, "seed {seed}: order or bytes at {at}");
    }
    assert_eq!(s.pair.a.pending_messages(s.a_peer), 0, "seed {seed}");
    assert_eq!(s.pair.b.pending_messages(s.b_peer), 0, "seed {seed}");
}

#[test]
fn batches_both_ways_over_a_clean_link() {
    for seed in 0..4 {
        both_ways(LinkConfig::default(), seed, true);
    }
}

#[test]
fn batches_both_ways_over_loss_reordering_and_duplication() {
    for seed in 0..6 {
        both_ways(faulty(), seed, false);
    }
}

/// Fixed-size messages (64 bytes, and 63 and 64 around the one-byte length's limit, and 300)
/// over loss, reordering and duplication: the runs that datagrams, acknowledgements and
/// retransmissions cut by arithmetic deliver every message once.
#[test]
fn fixed_size_batches_both_ways_over_loss_reordering_and_duplication() {
    for (seed, size) in [(0, 64), (1, 63), (2, 300), (3, 64)] {
        both_ways_with(faulty(), seed, false, messages_of(Some(size)));
    }
}

/// The path goes dark with 50 messages in flight, each sent at its own instant. Retransmission
/// timeouts probe with the oldest message, backing off to 64x, and after `max_transmissions`
/// the messages are given up: here at 16.9 s, before the failed handshakes would give up on
/// them (20 attempts about 1 s apart, from the third timeout on). A probe that moved on to
/// another message at each timeout never reached `max_transmissions` (none given up by 19 s).
#[test]
fn a_dark_path_gives_messages_up_after_max_transmissions() {
    let mut s = setup(LinkConfig::default(), 3);
    let alice = s.a_owners[0];
    let send = |s: &mut Setup, t: Time, n: u8| {
        s.pair
            .a
            .send(
                t,
                s.a_peer,
                alice,
                None,
                &[n; 40],
                Urgency::Urgent,
                Scope::Encrypt,
            )
            .unwrap();
    };
    send(&mut s, Time::ZERO, 0);
    s.pair.run_until(Time::from_millis(1000));
    s.pair.link.loss = 1.0;
    for n in 1..=50u8 {
        let t = Time::from_millis(1000 + 5 * u64::from(n));
        s.pair.run_until(t);
        send(&mut s, t, n);
    }
    s.pair.run_until(Time::from_millis(19_000));
    let given_up: Vec<Time> = s
        .pair
        .events_a
        .iter()
        .filter(|(_, e)| matches!(e, Event::Undeliverable { .. }))
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(given_up.len(), 50, "every message in flight is given up");
    assert!(
        given_up.iter().all(|&t| t < Time::from_millis(18_000)),
        "given up by max_transmissions, not by the handshake: {:?}",
        given_up.last()
    );
    assert!(
        !s.pair
            .events_a
            .iter()
            .any(|(_, e)| matches!(e, Event::HandshakeFailed { .. })),
        "the handshake had not given up yet"
    );
}
