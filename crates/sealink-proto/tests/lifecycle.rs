//! Rekeying, counter uniqueness, peer restarts and handshake failure.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use sealink_proto::session::Limits;
use sealink_proto::sim::{LinkConfig, Pair, Side};
use sealink_proto::wire::{Header, parse_header};
use sealink_proto::{Config, Directory, Endpoint, Event, HostKey, LocalOwner, Scope, Time};

#[test]
fn rekeys_by_count_and_time_without_losing_or_reusing() {
    let cfg = Config {
        limits: Limits {
            rekey_after_messages: 30,
            reject_after_messages: 60,
            rekey_after_time: Duration::from_secs(2),
            reject_after_time: Duration::from_secs(4),
        },
        keep_previous: Duration::from_secs(1),
        ..Config::default()
    };
    let link = LinkConfig {
        loss: 0.05,
        reorder: 0.05,
        jitter: Duration::from_millis(2),
        ..LinkConfig::default()
    };
    let mut s = setup_with(cfg.clone(), cfg, link, 42);
    s.pair.captured = Some(Vec::new());
    let mut sent = Vec::new();
    for i in 0..600u32 {
        let t = Time::from_millis(20 * i as u64);
        s.pair.run_until(t);
        let now = s.pair.now();
        let data = i.to_le_bytes().repeat(10);
        let urg = urgency(i % 3 == 0);
        if i % 2 == 0 {
            s.send_from((Side::A, 0), now, Some("bob"), &data, urg, Scope::Encrypt);
        } else {
            s.send_from((Side::B, 1), now, None, &data, urg, Scope::AuthOnly);
        }
        sent.push(data);
    }
    let end = s.pair.now() + Duration::from_secs(60);
    s.pair.run_idle(end);
    let mut got = delivered(&s.pair.events_a);
    got.extend(delivered(&s.pair.events_b));
    got.sort();
    sent.sort();
    assert_eq!(got, sent, "every message exactly once");
    let (a, b) = (s.pair.a.stats(), s.pair.b.stats());
    assert!(
        a.handshakes_completed >= 5,
        "rekeyed: {}",
        a.handshakes_completed
    );
    // Rekeys continue the channel: owners are not introduced again.
    assert_eq!(a.channels_established, 1);
    assert_eq!(a.pk.signs, 1);
    assert_eq!(b.pk.verifies, 1);
    assert_eq!(a.messages_undeliverable + b.messages_undeliverable, 0);
    // A counter is never reused under one key (receiver index).
    let mut seen = HashSet::new();
    for (from_a, d) in s.pair.captured.as_ref().unwrap() {
        if let Ok(Header::Data {
            receiver, counter, ..
        }) = parse_header(d)
        {
            assert!(
                seen.insert((*from_a, receiver, counter)),
                "counter {counter} reused"
            );
            assert!(counter < 60, "sent past reject_after_messages");
        }
    }
}

#[test]
fn peer_restart_starts_a_new_channel_and_resends() {
    let mut s = setup(LinkConfig::default(), 9);
    s.send_a(Time::ZERO, 0, None, b"before restart");
    let p = &mut s.pair;
    p.run_until(Time::from_millis(100));
    assert_eq!(delivered(&p.events_b).len(), 1);

    // B restarts: same host key and owners, no memory of the channel.
    let hb = p.b.host_private_for_tests();
    let mut dir = Directory::new();
    for n in A_OWNERS.iter().chain(B_OWNERS.iter()) {
        dir.insert(n, owner_key(n).public_key()).unwrap();
    }
    let mut b2 = Endpoint::new(Config::default(), HostKey::from_private(hb).unwrap(), dir).unwrap();
    b2.add_peer("a", *p.a.host_public());
    for n in B_OWNERS {
        b2.add_owner(LocalOwner::new(n, owner_key(n)).unwrap());
    }
    let old_b = std::mem::replace(&mut p.b, b2);
    drop(old_b);
    p.events_b.clear();

    let now = p.now();
    for i in 0..5u8 {
        send_urgent(&mut p.a, now, s.a_peer, s.a_owners[1], None, &[i; 20]);
    }
    p.run_until(now + Duration::from_secs(30));
    let got = delivered(&p.events_b);
    assert_eq!(got, (0..5u8).map(|i| vec![i; 20]).collect::<Vec<_>>());
    assert_eq!(p.a.stats().channels_established, 2);
    assert_eq!(p.a.stats().messages_undeliverable, 0);
}

#[test]
fn unreachable_peer_reports_undeliverable() {
    let cfg = Config {
        handshake_attempts: 3,
        ..Config::default()
    };
    let link = LinkConfig {
        loss: 1.0,
        ..LinkConfig::default()
    };
    let mut s = setup_with(cfg, Config::default(), link, 3);
    let p = &mut s.pair;
    let id = send_urgent(&mut p.a, Time::ZERO, s.a_peer, s.a_owners[0], None, b"x");
    p.run_until(Time::from_millis(10_000));
    assert!(
        p.events_a
            .iter()
            .any(|(_, e)| matches!(e, Event::HandshakeFailed { .. }))
    );
    assert!(
        p.events_a
            .iter()
            .any(|(_, e)| *e == Event::Undeliverable { peer: s.a_peer, id })
    );
    assert_eq!(p.a.pending_messages_all(), 0);
    let _ = Pair::now(p);
}
