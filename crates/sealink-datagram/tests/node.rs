//! Node to Node over real loopback UDP: owners multiplexed over one channel with verified names
//! and one signature check each; a handshake flood that mac1, the limits and cookies absorb with
//! bounded memory while the established channel keeps delivering; spoofed initiations from a
//! peer's own address that do not keep it from its handshake.

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, RngCore};
use sealink_crypto::sign::OwnerSigningKey;
use sealink_datagram::{
    Arrival, Handoff, HostKey, LimiterConfig, LocalOwner, MessageId, Node, NodeConfig, NodeError,
    OnArrival, Outbox, Outgoing, PeerConfig, PeerId, Scope, Source, Supply, Urgency,
};
use sealink_proto::DropReason;
use sealink_proto::cookie::CookieGenerator;
use sealink_proto::handshake::INIT_LEN;
use sealink_proto::wire::{self, HEADER_LEN, Header};

const LOOPBACK: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

fn owner(name: &str) -> (LocalOwner, [u8; 32]) {
    let key = OwnerSigningKey::from_seed(&OwnerSigningKey::generate_seed().unwrap()).unwrap();
    let public = key.public_key();
    (LocalOwner::new(name, key).unwrap(), public)
}

/// Node `a` knows `b`'s address; `b` learns `a`'s from the handshake. Both trust `owners`.
fn pair(owners: &[(&str, [u8; 32])], limiter: LimiterConfig) -> (Node, Node, PeerId, PeerId) {
    pair_with(owners, limiter, |_| {})
}

/// [`pair`] with `tweak` applied to both nodes' configurations.
fn pair_with(
    owners: &[(&str, [u8; 32])],
    limiter: LimiterConfig,
    tweak: impl Fn(&mut NodeConfig),
) -> (Node, Node, PeerId, PeerId) {
    let (ka, kb) = (HostKey::generate().unwrap(), HostKey::generate().unwrap());
    let (pa, pb) = (*ka.public(), *kb.public());
    let mut cb = NodeConfig::new(LOOPBACK, kb);
    for (n, k) in owners {
        cb.directory.insert(n, *k).unwrap();
    }
    cb.peers.push(PeerConfig {
        name: "a".into(),
        public_key: pa,
        addr: None,
    });
    cb.limiter = limiter;
    tweak(&mut cb);
    let b = Node::start(cb).unwrap();
    let mut ca = NodeConfig::new(LOOPBACK, ka);
    ca.peers.push(PeerConfig {
        name: "b".into(),
        public_key: pb,
        addr: Some(b.local_addr().unwrap()),
    });
    for (n, k) in owners {
        ca.directory.insert(n, *k).unwrap();
    }
    tweak(&mut ca);
    let a = Node::start(ca).unwrap();
    let (b_at_a, a_at_b) = (a.peer_id("b").unwrap(), b.peer_id("a").unwrap());
    (a, b, b_at_a, a_at_b)
}

fn collect(node: &Node, n: usize, within: Duration) -> Vec<sealink_datagram::Delivery> {
    let end = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < n {
        let Some(left) = end.checked_duration_since(Instant::now()) else {
            break;
        };
        match node.recv(Some(left)) {
            Some(d) => got.push(d),
            None => break,
        }
    }
    got
}

/// Polls `cond` for up to five seconds; fails the test if it never holds.
fn wait_for(cond: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < end, "condition not reached within 5 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `send_batch` queues in order with consecutive ids, stops at the first refused message and
/// reports it when nothing could be queued; `recv_batch` hands over everything in order.
#[test]
fn batched_send_and_receive_keep_order_and_report_refusals() {
    let (alice, ka) = owner("alice");
    let (a, b, peer_b, _) = pair(&[("alice", ka)], LimiterConfig::default());
    let me = a.add_owner(alice);
    let max = a.max_message_len();
    let data: Vec<Vec<u8>> = (0..100u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let mut next = 0u64;
    for chunk in data.chunks(25) {
        let msgs: Vec<Outgoing<'_>> = chunk
            .iter()
            .enumerate()
            .map(|(i, d)| Outgoing {
                data: d,
                urgency: if i % 10 == 9 {
                    Urgency::Urgent
                } else {
                    Urgency::Default
                },
                scope: Scope::Encrypt,
            })
            .collect();
        let q = a.send_batch(peer_b, me, None, &msgs).unwrap();
        assert_eq!(q.count, 25);
        let ids: Vec<MessageId> = q.ids().collect();
        if next > 0 {
            assert_eq!(ids[0], MessageId(next), "ids continue across batches");
        }
        assert!(ids.windows(2).all(|w| w[1].0 == w[0].0 + 1));
        next = ids[24].0 + 1;
    }
    // A batch whose third message is too large: the first two are queued, the rest not.
    let big = vec![0u8; max + 1];
    let ok = |d: &'static [u8]| Outgoing {
        data: d,
        urgency: Urgency::Urgent,
        scope: Scope::Encrypt,
    };
    let bad = Outgoing {
        data: &big,
        urgency: Urgency::Urgent,
        scope: Scope::Encrypt,
    };
    let q = a
        .send_batch(peer_b, me, None, &[ok(b"x1"), ok(b"x2"), bad, ok(b"x3")])
        .unwrap();
    assert_eq!(q.count, 2);
    let e = a
        .send_batch(peer_b, me, None, &[bad, ok(b"x3")])
        .unwrap_err();
    assert!(
        matches!(
            e,
            NodeError::Proto(sealink_proto::Error::MessageTooLarge { .. })
        ),
        "{e}"
    );
    a.flush(peer_b, Duration::from_secs(5)).unwrap();
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while got.len() < 102 && Instant::now() < end {
        b.recv_batch(&mut got, Some(Duration::from_millis(100)));
    }
    let want: Vec<Vec<u8>> = data
        .iter()
        .cloned()
        .chain([b"x1".to_vec(), b"x2".to_vec()])
        .collect();
    let got: Vec<Vec<u8>> = got.into_iter().map(|d| d.data.to_vec()).collect();
    assert_eq!(got, want);
    assert_eq!(
        b.recv_batch(&mut Vec::new(), Some(Duration::from_millis(50))),
        0
    );
}

/// Both nodes seal and open on engine workers (every batch handed off, and by the default
/// gauge, which hands off only what a saturated I/O thread cannot carry) and inline, while both
/// send at once: every message of mixed sizes, scopes and urgencies arrives once, in order, on
/// each side.
#[test]
fn engine_workers_carry_both_directions_in_order() {
    for (workers, handoff) in [
        (Some(0), Handoff::Auto),
        (Some(3), Handoff::Auto),
        (Some(3), Handoff::Always),
    ] {
        let (alice, ka) = owner("alice");
        let (bob, kb) = owner("bob");
        let (a, b, peer_b, peer_a) = pair_with(
            &[("alice", ka), ("bob", kb)],
            LimiterConfig::default(),
            |c| {
                c.workers = workers;
                c.handoff = handoff;
            },
        );
        let (me_a, me_b) = (a.add_owner(alice), b.add_owner(bob));
        let msgs: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| {
                let mut m = i.to_le_bytes().to_vec();
                m.resize(4 + (i as usize * 37) % 900, (i % 251) as u8);
                m
            })
            .collect();
        let send_all = |node: &Node, peer: PeerId, me| {
            for (i, chunk) in msgs.chunks(50).enumerate() {
                let out: Vec<Outgoing<'_>> = chunk
                    .iter()
                    .enumerate()
                    .map(|(k, d)| Outgoing {
                        data: d,
                        urgency: if k == 49 {
                            Urgency::Urgent
                        } else {
                            Urgency::Default
                        },
                        scope: if (i + k) % 3 == 0 {
                            Scope::AuthOnly
                        } else {
                            Scope::Encrypt
                        },
                    })
                    .collect();
                let mut sent = 0;
                while sent < out.len() {
                    sent += node.send_batch(peer, me, None, &out[sent..]).unwrap().count;
                    if sent < out.len() {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
            if let Err(e) = node.flush(peer, Duration::from_secs(20)) {
                panic!("{e}: {:?}", node.stats());
            }
        };
        let want: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        std::thread::scope(|s| {
            let ta = s.spawn(|| send_all(&a, peer_b, me_a));
            let tb = s.spawn(|| send_all(&b, peer_a, me_b));
            let at_b = collect(&b, msgs.len(), Duration::from_secs(20));
            let at_a = collect(&a, msgs.len(), Duration::from_secs(20));
            ta.join().unwrap();
            tb.join().unwrap();
            for (got, from) in [(at_b, "alice"), (at_a, "bob")] {
                assert!(got.iter().all(|d| &*d.from == from), "{workers:?}");
                let got: Vec<&[u8]> = got.iter().map(|d| &d.data[..]).collect();
                assert_eq!(got.len(), want.len(), "workers {workers:?}");
                assert!(
                    got == want,
                    "workers {workers:?}: out of order or corrupted"
                );
            }
        });
        let (sa, sb) = (a.stats(), b.stats());
        for s in [&sa, &sb] {
            assert_eq!(s.seal_failures, 0);
            // Both open at once: one side may refuse the other's initiation (and the other a
            // copy of its winner's); nothing else may be dropped.
            let other = s.endpoint.total_drops()
                - s.endpoint.drops(DropReason::HandshakeCollision)
                - s.endpoint.drops(DropReason::StaleHandshake);
            assert_eq!(other, 0, "{workers:?}: {:?}", s.endpoint);
        }
    }
}

#[test]
fn owners_multiplex_over_one_channel_with_one_verification_each() {
    let (alice, ka) = owner("alice");
    let (bob, kb) = owner("bob");
    let (carol, kc) = owner("carol");
    // `mallory` signs fine but `b` does not trust her: her messages must not arrive.
    let (mallory, _) = owner("mallory");
    let (a, b, peer_b, peer_a) = pair(
        &[("alice", ka), ("bob", kb), ("carol", kc)],
        LimiterConfig::default(),
    );
    let ids = [a.add_owner(alice), a.add_owner(bob), a.add_owner(carol)];
    let names = ["alice", "bob", "carol"];
    let dests = ["inbox", "audit"];
    let per = 40;
    let mut want: HashMap<(String, String), Vec<Vec<u8>>> = HashMap::new();
    for round in 0..per {
        for (o, name) in ids.iter().zip(names) {
            for d in dests {
                let data = format!("{name}->{d} #{round}").into_bytes();
                let urg = if round % 10 == 0 {
                    Urgency::Urgent
                } else {
                    Urgency::Default
                };
                a.send("b", *o, Some(d), &data, urg, Scope::Encrypt)
                    .unwrap();
                want.entry((name.into(), d.into())).or_default().push(data);
            }
        }
    }
    a.flush(peer_b, Duration::from_secs(5)).unwrap();
    let got = collect(&b, 3 * 2 * per, Duration::from_secs(5));
    assert_eq!(got.len(), 3 * 2 * per);
    let mut seen: HashMap<(String, String), Vec<Vec<u8>>> = HashMap::new();
    for d in got {
        assert_eq!(&*d.peer_name, "a");
        assert_eq!(d.peer, peer_a);
        assert_eq!(d.scope, Scope::Encrypt);
        seen.entry((d.from.to_string(), d.to.unwrap().to_string()))
            .or_default()
            .push(d.data.to_vec());
    }
    assert_eq!(
        seen, want,
        "every message once, in order per owner and destination"
    );
    let s = b.stats();
    assert_eq!(
        s.endpoint.pk.verifies, 3,
        "one signature check per owner on this channel"
    );
    assert_eq!(
        s.endpoint.channels_established, 1,
        "one host-to-host channel"
    );
    assert_eq!(a.stats().endpoint.pk.signs, 3);
    // Later messages from the same owners cost no public-key work at all.
    let pk_before = s.endpoint.pk.total();
    for o in ids {
        a.send(peer_b, o, None, b"again", Urgency::Urgent, Scope::AuthOnly)
            .unwrap();
    }
    a.flush(peer_b, Duration::from_secs(5)).unwrap();
    let again = collect(&b, 3, Duration::from_secs(5));
    assert_eq!(again.len(), 3);
    assert!(
        again
            .iter()
            .all(|d| d.to.is_none() && d.scope == Scope::AuthOnly)
    );
    assert_eq!(b.stats().endpoint.pk.total(), pk_before);
    // The receiver learned the sender's address from the handshake and can answer on the channel.
    assert_eq!(b.peer_addr(peer_a), Some(a.local_addr().unwrap()));
    let (reply, kr) = owner("srv");
    let _ = kr;
    let r = b.add_owner(reply);
    b.send(peer_a, r, None, b"pong", Urgency::Urgent, Scope::Encrypt)
        .unwrap();
    // `a` does not trust owner `srv`: the message is refused (counted), never delivered.
    wait_for(|| a.stats().endpoint.drops(DropReason::UnknownOwner) >= 1);
    assert!(a.recv(Some(Duration::from_millis(100))).is_none());
    // An untrusted owner on the sending side is likewise refused by the receiver.
    let m = a.add_owner(mallory);
    a.send(peer_b, m, None, b"hi", Urgency::Urgent, Scope::Encrypt)
        .unwrap();
    wait_for(|| b.stats().endpoint.drops(DropReason::UnknownOwner) >= 1);
    assert!(b.recv(Some(Duration::from_millis(100))).is_none());
    let cs = b.channel_stats(peer_a).unwrap();
    assert!(cs.messages_delivered >= (3 * 2 * per + 3) as u64);
    a.shutdown();
    b.shutdown();
}

/// An untrusted owner's message sharing datagrams with a trusted owner's, over real UDP: the
/// trusted one is delivered, the untrusted one refused by the receiver (counted) and reported
/// to the sender at once (not after a dozen retransmissions), and the channel keeps going.
#[test]
fn untrusted_owner_is_refused_alone_and_the_sender_is_told() {
    let (alice, ka) = owner("alice");
    let (mallory, _) = owner("mallory");
    let (a, b, peer_b, _) = pair(&[("alice", ka)], LimiterConfig::default());
    let (alice, mallory) = (a.add_owner(alice), a.add_owner(mallory));
    for round in 0..3u8 {
        // Mallory's waits for the piggyback timer; alice's urgent one takes it along.
        a.send(
            peer_b,
            mallory,
            None,
            &[round; 8],
            Urgency::Default,
            Scope::AuthOnly,
        )
        .unwrap();
        a.send(
            peer_b,
            alice,
            None,
            &[round; 16],
            Urgency::Urgent,
            Scope::AuthOnly,
        )
        .unwrap();
        let started = Instant::now();
        match a.flush(peer_b, Duration::from_secs(2)) {
            Err(NodeError::Undeliverable(1)) => {}
            other => panic!("round {round}: expected one refused message, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(1));
        let got = collect(&b, 1, Duration::from_secs(2));
        assert_eq!(got.len(), 1);
        assert_eq!(&*got[0].from, "alice");
        assert_eq!(got[0].data, vec![round; 16]);
    }
    assert!(b.recv(Some(Duration::from_millis(100))).is_none());
    let s = b.stats().endpoint;
    assert_eq!(
        s.drops(DropReason::UnknownOwner) + s.drops(DropReason::UnknownOwnerId),
        3
    );
    assert_eq!(a.stats().endpoint.messages_refused, 3);
    a.shutdown();
    b.shutdown();
}

/// A forged initiation: valid header and length, random contents (random ephemeral key, garbage
/// ciphertext, so its mac1 fails too).
fn forged_init(rng: &mut impl Rng) -> Vec<u8> {
    let mut d = vec![0u8; INIT_LEN];
    rng.fill_bytes(&mut d);
    let mut h = [0u8; HEADER_LEN];
    wire::write_header(
        &Header::Init {
            sender: rng.random(),
        },
        &mut h,
    );
    d[..HEADER_LEN].copy_from_slice(&h);
    d
}

/// A forged initiation with a valid mac1 for `responder` (whose public key the flooder knows):
/// it costs the responder DH work unless the limits refuse it first.
fn forged_init_mac1(rng: &mut impl Rng, responder: &[u8; 32]) -> Vec<u8> {
    let mut d = forged_init(rng);
    CookieGenerator::new(responder).add_macs(sealink_proto::Time::ZERO, &mut d);
    d
}

#[test]
fn handshake_flood_is_bounded_and_channel_keeps_delivering() {
    let (alice, ka) = owner("alice");
    let limiter = LimiterConfig {
        per_source_per_sec: 5,
        per_source_burst: 5,
        global_per_sec: 200,
        global_burst: 50,
        max_sources: 64,
    };
    // The flood can keep b's socket buffer full for a while on a starved CI machine: the sender
    // keeps retrying (not giving up after the default 12 transmissions), so that what is tested
    // is that the flood never breaks the channel, not how fast two busy cores drain it.
    let (a, b, peer_b, _) = pair_with(&[("alice", ka)], limiter, |c| {
        c.config.max_transmissions = 60
    });
    let o = a.add_owner(alice);
    a.send(peer_b, o, None, b"hello", Urgency::Urgent, Scope::Encrypt)
        .unwrap();
    a.flush(peer_b, Duration::from_secs(5)).unwrap();
    assert_eq!(collect(&b, 1, Duration::from_secs(2)).len(), 1);
    let before = b.stats();

    // 20000 datagrams from 256 source addresses in 127/8 (all local on Linux), half garbage, a
    // quarter forged initiations, a quarter forged initiations with a valid mac1, while `a`
    // keeps sending on its established channel.
    let target = b.local_addr().unwrap();
    let b_pub = b.host_public();
    let flood = std::thread::spawn(move || {
        let socks: Vec<UdpSocket> = (0..256u32)
            .filter_map(|i| {
                let ip = Ipv4Addr::from(0x7f01_0000 + i + 1);
                UdpSocket::bind((ip, 0)).ok()
            })
            .collect();
        assert!(socks.len() > 128, "could not bind sources in 127/8");
        let mut rng = rand::rng();
        let mut sent = 0u64;
        for i in 0..20_000usize {
            let d = if i % 2 == 0 {
                let mut g = vec![0u8; rng.random_range(1..1500)];
                rng.fill_bytes(&mut g);
                g
            } else if i % 4 == 1 {
                forged_init(&mut rng)
            } else {
                forged_init_mac1(&mut rng, &b_pub)
            };
            if socks[i % socks.len()].send_to(&d, target).is_ok() {
                sent += 1;
            }
            if i % 2000 == 1999 {
                // Let the receiver drain a little so the kernel does not drop the flood itself.
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        sent
    });
    let mut delivered = 0usize;
    let mut sent = 0usize;
    while !flood.is_finished() || sent < 50 {
        let data = format!("during flood {sent}");
        a.send(
            peer_b,
            o,
            None,
            data.as_bytes(),
            Urgency::Urgent,
            Scope::Encrypt,
        )
        .unwrap();
        sent += 1;
        if let Some(d) = b.recv(Some(Duration::from_millis(20))) {
            assert_eq!(&*d.from, "alice");
            delivered += 1;
        }
    }
    let flooded = flood.join().unwrap();
    a.flush(peer_b, Duration::from_secs(10)).unwrap();
    delivered += collect(&b, sent - delivered, Duration::from_secs(5)).len();
    assert_eq!(
        delivered, sent,
        "the established channel delivered everything during the flood"
    );

    // Let the I/O thread finish the flood still queued in the socket.
    let end = Instant::now() + Duration::from_secs(5);
    let s = loop {
        let s = b.stats();
        let drops = s.total_drops() - before.total_drops();
        if drops >= flooded * 9 / 10 || Instant::now() > end {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        s.limiter_sources <= 2 * 64,
        "limiter memory bounded: {}",
        s.limiter_sources
    );
    let refused = s.rate_limited - before.rate_limited;
    let bad_mac1 = s.endpoint.drops(DropReason::BadMac1);
    let dh_attempts = s.endpoint.drops(DropReason::HandshakeFailed);
    assert!(
        bad_mac1 > 2_500,
        "forged initiations without mac1 refused before the limits: {bad_mac1}"
    );
    assert!(
        refused > 2_000,
        "most forged initiations with mac1 refused before DH: {refused}"
    );
    assert!(dh_attempts < 2_000, "DH work bounded: {dh_attempts}");
    let garbage = s.endpoint.drops(DropReason::MalformedHeader)
        + s.endpoint.drops(DropReason::BadVersion)
        + s.endpoint.drops(DropReason::UnknownIndex);
    eprintln!(
        "flood: {flooded} sent, {bad_mac1} bad mac1, {refused} rate-limited or cookie, \
         {dh_attempts} DH attempts, {garbage} garbage, {} sources tracked, \
         {sent} messages delivered meanwhile",
        s.limiter_sources
    );
    assert!(garbage > 5_000, "garbage counted: {garbage}");
    let drops = s.total_drops() - before.total_drops();
    // (A few drops may be the channel's own: a late duplicate under load.)
    assert!(
        drops >= flooded * 9 / 10 && drops <= flooded + 100,
        "{drops} of {flooded} dropped and counted"
    );
    assert!(b.is_established(b.peer_id("a").unwrap()));
    assert_eq!(b.stats().endpoint.pk.verifies, 1);
}

/// Sends `make()` to `target` from 127.0.0.1 (the address node `a` uses too), a few thousand
/// per second, until `stop` is set; returns how many were sent.
fn spoof_from_loopback(
    target: SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    make: impl Fn(&mut rand::rngs::ThreadRng) -> Vec<u8> + Send + 'static,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let s = UdpSocket::bind(LOOPBACK).unwrap();
        let mut rng = rand::rng();
        let mut n = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if s.send_to(&make(&mut rng), target).is_ok() {
                n += 1;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        n
    })
}

/// Forged initiations from the peer's own address, far above its per-source rate, must not
/// keep the peer from opening its channel: they fail the MAC check before taking a token.
#[test]
fn spoofed_initiations_from_the_peers_address_do_not_block_its_handshake() {
    let (alice, ka) = owner("alice");
    let (a, b, peer_b, _) = pair(&[("alice", ka)], LimiterConfig::default());
    let o = a.add_owner(alice);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = spoof_from_loopback(b.local_addr().unwrap(), stop.clone(), forged_init);
    // Far past the source's burst before `a` initiates.
    wait_for(|| b.stats().endpoint.drops(DropReason::BadMac1) > 50);
    a.send(peer_b, o, None, b"through", Urgency::Urgent, Scope::Encrypt)
        .unwrap();
    let got = collect(&b, 1, Duration::from_secs(4));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flooded = flood.join().unwrap();
    let s = b.stats();
    assert_eq!(
        got.len(),
        1,
        "handshake blocked by {flooded} spoofed initiations; drops: {:?}",
        s.endpoint.drops_by_reason().collect::<Vec<_>>()
    );
    a.shutdown();
    b.shutdown();
}

/// The same with a flooder who knows `b`'s public key (valid mac1): `b` is under load for
/// 127.0.0.1 and answers `a`'s initiation with a cookie; `a` sends it again with mac2 and gets
/// through. (A real spoofer never sees the cookies sent to the address it forges; this one shares
/// the host but ignores them.)
#[test]
fn under_load_the_peer_gets_a_cookie_and_its_retry_gets_through() {
    let (alice, ka) = owner("alice");
    let (a, b, peer_b, _) = pair(&[("alice", ka)], LimiterConfig::default());
    let o = a.add_owner(alice);
    let b_pub = b.host_public();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = spoof_from_loopback(b.local_addr().unwrap(), stop.clone(), move |rng| {
        forged_init_mac1(rng, &b_pub)
    });
    wait_for(|| b.stats().endpoint.drops(DropReason::CookieRequired) > 20);
    a.send(peer_b, o, None, b"through", Urgency::Urgent, Scope::Encrypt)
        .unwrap();
    // Well within the first retransmission (1 s): the cookie round trip is immediate.
    let got = collect(&b, 1, Duration::from_millis(900));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    flood.join().unwrap();
    let s = b.stats();
    assert_eq!(
        got.len(),
        1,
        "drops: {:?}",
        s.endpoint.drops_by_reason().collect::<Vec<_>>()
    );
    assert_eq!(a.stats().endpoint.handshakes_initiated, 1);
    assert!(s.rate_limited > 20);
    a.shutdown();
    b.shutdown();
}

/// Messages that shared a datagram come out of `recv_arrivals` as runs of one owner each, in the
/// order they were sent; `recv` may take some first, and `recv_arrivals` then hands over exactly
/// the rest.
#[test]
fn arrivals_group_a_datagrams_messages_by_owner_and_keep_order() {
    let (alice, ka) = owner("alice");
    let (bob, kb) = owner("bob");
    let (a, b, peer_b, _) = pair(&[("alice", ka), ("bob", kb)], LimiterConfig::default());
    let (al, bo) = (a.add_owner(alice), a.add_owner(bob));
    let msg = |i: u32| i.to_le_bytes().to_vec();
    fn out(data: &[u8], urgency: Urgency) -> Outgoing<'_> {
        Outgoing {
            data,
            urgency,
            scope: Scope::Encrypt,
        }
    }
    // Warm-up: the channel and both owners' introductions, so what follows is data only.
    for o in [al, bo] {
        a.send(peer_b, o, None, b"hi", Urgency::Urgent, Scope::Encrypt)
            .unwrap();
    }
    a.flush(peer_b, Duration::from_secs(5)).unwrap();
    assert_eq!(collect(&b, 2, Duration::from_secs(5)).len(), 2);
    // Non-urgent runs from alice, bob, alice, then an urgent one that takes them all along.
    let (runs, per_run) = (4u32, 30u32);
    let mut sent = Vec::new();
    for r in 0..runs {
        let from = if r % 2 == 0 { al } else { bo };
        let data: Vec<Vec<u8>> = (0..per_run).map(|i| msg(r * 1000 + i)).collect();
        let last = r == runs - 1;
        let msgs: Vec<Outgoing<'_>> = data
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let urgent = last && i as u32 == per_run - 1;
                out(
                    d,
                    if urgent {
                        Urgency::Urgent
                    } else {
                        Urgency::Default
                    },
                )
            })
            .collect();
        assert_eq!(
            a.send_batch(peer_b, from, None, &msgs).unwrap().count,
            msgs.len()
        );
        let name = if r % 2 == 0 { "alice" } else { "bob" };
        sent.extend(data.into_iter().map(|d| (name.to_owned(), d)));
    }
    a.flush(peer_b, Duration::from_secs(5)).unwrap();
    // Three taken one at a time first.
    let first = collect(&b, 3, Duration::from_secs(5));
    assert_eq!(first.len(), 3);
    let mut got: Vec<(String, Vec<u8>)> = first
        .iter()
        .map(|d| (d.from.to_string(), d.data.to_vec()))
        .collect();
    let mut arrivals = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    let mut n = 3;
    while n < sent.len() && Instant::now() < end {
        n += b.recv_arrivals(&mut arrivals, Some(Duration::from_millis(100)));
    }
    for arr in &arrivals {
        assert!(!arr.messages.is_empty());
        assert_eq!(&*arr.peer_name, "a");
        assert_eq!(arr.messages.scope, Scope::Encrypt);
        // One owner per arrival, and the per-message views agree with the borrowed ones.
        let views: Vec<Vec<u8>> = arr.deliveries().map(|d| d.data.to_vec()).collect();
        let borrowed: Vec<Vec<u8>> = arr.messages.iter().map(<[u8]>::to_vec).collect();
        assert_eq!(views, borrowed);
        assert!(arr.deliveries().all(|d| d.from == arr.messages.from));
        got.extend(
            borrowed
                .into_iter()
                .map(|d| (arr.messages.from.to_string(), d)),
        );
    }
    assert_eq!(got, sent, "every message once, in order, with its owner");
    assert!(
        arrivals.len() < sent.len() - 3,
        "{} arrivals for {} messages: piggybacked messages share one",
        arrivals.len(),
        sent.len() - 3
    );
    a.shutdown();
    b.shutdown();
}

/// A sender that met back-pressure waits for room instead of polling: it resumes once the
/// peer's acknowledgements free the window, and times out when nothing comes back.
#[test]
fn wait_room_resumes_on_acknowledgements_and_times_out_without_them() {
    let (alice, ka) = owner("alice");
    let window = 64;
    let (a, b, peer_b, _) = pair_with(&[("alice", ka)], LimiterConfig::default(), |c| {
        c.config.max_queued_messages = window;
    });
    let me = a.add_owner(alice);
    let data = [7u8; 16];
    let msgs = [Outgoing {
        data: &data,
        urgency: Urgency::Default,
        scope: Scope::Encrypt,
    }; 40];
    let mut sent = 0;
    for _ in 0..20 {
        match a.send_batch(peer_b, me, None, &msgs) {
            Ok(q) => sent += q.count,
            Err(NodeError::Proto(sealink_proto::Error::QueueFull(_))) => {}
            Err(e) => panic!("{e}"),
        }
        let room = a
            .wait_room(peer_b, msgs.len(), Duration::from_secs(5))
            .unwrap();
        assert!(room >= msgs.len(), "room {room}");
    }
    assert_eq!(
        sent,
        20 * msgs.len(),
        "every batch found room after waiting"
    );
    a.flush(peer_b, Duration::from_secs(5)).unwrap();
    assert_eq!(collect(&b, sent, Duration::from_secs(5)).len(), sent);
    assert!(matches!(
        a.wait_room(peer_b, window + 1, Duration::from_millis(1)),
        Ok(r) if r == window
    ));

    // A peer that never answers: the window stays full, the wait times out.
    let silent = UdpSocket::bind(LOOPBACK).unwrap();
    let (carol, kc) = owner("carol");
    let mut cc = NodeConfig::new(LOOPBACK, HostKey::generate().unwrap());
    cc.config.max_queued_messages = window;
    cc.directory.insert("carol", kc).unwrap();
    cc.peers.push(PeerConfig {
        name: "silent".into(),
        public_key: *HostKey::generate().unwrap().public(),
        addr: Some(silent.local_addr().unwrap()),
    });
    let c = Node::start(cc).unwrap();
    let me = c.add_owner(carol);
    let q = c.send_batch("silent", me, None, &[msgs[0]; 64]).unwrap();
    assert_eq!(q.count, window);
    let t = Instant::now();
    let e = c
        .wait_room("silent", 1, Duration::from_millis(100))
        .unwrap_err();
    assert!(matches!(e, NodeError::Timeout(_)), "{e}");
    assert!(t.elapsed() >= Duration::from_millis(100));
    assert!(matches!(
        c.wait_room("nobody", 1, Duration::from_millis(1)),
        Err(NodeError::UnknownPeer(_))
    ));
    a.shutdown();
    b.shutdown();
    c.shutdown();
}

/// Sets `handler` on the receiving node of [`pair_with`] (the one whose peer is "a").
fn on_b(cfg: &mut NodeConfig, handler: impl Fn() -> OnArrival) {
    if cfg.peers.first().is_some_and(|p| p.name == "a") {
        cfg.on_arrival = Some(handler());
    }
}

/// A receive handler gets every message exactly once and in order, on the node's own threads
/// (inline and with engine workers), and nothing is left queued for `recv`.
#[test]
fn a_receive_handler_gets_every_message_in_order_on_the_nodes_thread() {
    for (workers, handoff) in [(0, Handoff::Auto), (2, Handoff::Always)] {
        let got = Arc::new(Mutex::new(Vec::<(Vec<u8>, String)>::new()));
        let threads = Arc::new(Mutex::new(HashSet::new()));
        let (alice, ka) = owner("alice");
        let (g, t) = (Arc::clone(&got), Arc::clone(&threads));
        let (a, b, peer_b, _) = pair_with(&[("alice", ka)], LimiterConfig::default(), |c| {
            c.workers = Some(workers);
            c.handoff = handoff;
            let (g, t) = (Arc::clone(&g), Arc::clone(&t));
            on_b(c, move || {
                let (g, t) = (Arc::clone(&g), Arc::clone(&t));
                OnArrival::new(move |arr: Arrival| {
                    t.lock().unwrap().insert(std::thread::current().id());
                    let from = arr.messages.from.to_string();
                    let mut g = g.lock().unwrap();
                    g.extend(arr.messages.iter().map(|d| (d.to_vec(), from.clone())));
                })
            });
        });
        let me = a.add_owner(alice);
        let data: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| {
                let mut d = i.to_le_bytes().to_vec();
                d.resize(4 + (i as usize * 7) % 300, i as u8);
                d
            })
            .collect();
        for chunk in data.chunks(30) {
            let msgs: Vec<Outgoing<'_>> = chunk
                .iter()
                .map(|d| Outgoing {
                    data: d,
                    urgency: Urgency::Default,
                    scope: Scope::Encrypt,
                })
                .collect();
            let mut sent = 0;
            while sent < msgs.len() {
                match a.send_batch(peer_b, me, None, &msgs[sent..]) {
                    Ok(q) => sent += q.count,
                    Err(NodeError::Proto(sealink_proto::Error::QueueFull(_))) => {
                        let _ = a.wait_room(peer_b, 30, Duration::from_secs(5));
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        a.flush(peer_b, Duration::from_secs(10)).unwrap();
        wait_for(|| got.lock().unwrap().len() >= data.len());
        let got = std::mem::take(&mut *got.lock().unwrap());
        assert!(got.iter().all(|(_, from)| from == "alice"));
        let got: Vec<Vec<u8>> = got.into_iter().map(|(d, _)| d).collect();
        assert_eq!(got, data, "workers {workers}: every message once, in order");
        assert!(
            b.recv(Some(Duration::from_millis(50))).is_none(),
            "none queued"
        );
        let threads = threads.lock().unwrap();
        assert!(
            !threads.contains(&std::thread::current().id()),
            "the handler runs on the node's threads"
        );
    }
}

/// A handler that panics stops its node as a shutdown would: its senders are told it stopped
/// instead of waiting on a node that no longer receives.
#[test]
fn a_panicking_receive_handler_stops_the_node() {
    let (alice, ka) = owner("alice");
    let (bob, kb) = owner("bob");
    let (a, b, peer_b, peer_a) = pair_with(
        &[("alice", ka), ("bob", kb)],
        LimiterConfig::default(),
        |c| on_b(c, || OnArrival::new(|_| panic!("the application's bug"))),
    );
    let me = a.add_owner(alice);
    let b_me = b.add_owner(bob);
    // Before any arrival, b works.
    b.send(
        peer_a,
        b_me,
        None,
        b"hello",
        Urgency::Urgent,
        Scope::Encrypt,
    )
    .unwrap();
    a.send(peer_b, me, None, b"boom", Urgency::Urgent, Scope::Encrypt)
        .unwrap();
    wait_for(|| {
        matches!(
            b.send(
                peer_a,
                b_me,
                None,
                b"again",
                Urgency::Urgent,
                Scope::Encrypt
            ),
            Err(NodeError::Stopped)
        )
    });
    let t = Instant::now();
    assert!(b.recv(Some(Duration::from_secs(2))).is_none());
    assert!(t.elapsed() < Duration::from_secs(1), "recv sees the stop");
    assert!(matches!(
        b.flush(peer_a, Duration::from_secs(2)),
        Err(NodeError::Stopped)
    ));
}

/// `io_cpu` pins the I/O thread (seen from the receive handler, which runs on it with no
/// engine workers); a CPU the process may not use is refused at start, with no thread left.
#[test]
fn the_io_thread_runs_on_the_cpu_it_was_pinned_to() {
    let cpu = *sealink_engine::cpus().last().expect("some CPU");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (alice, ka) = owner("alice");
    let s = Arc::clone(&seen);
    let (a, _b, peer_b, _) = pair_with(&[("alice", ka)], LimiterConfig::default(), |c| {
        c.workers = Some(0);
        c.io_cpu = Some(cpu);
        let s = Arc::clone(&s);
        on_b(c, move || {
            let s = Arc::clone(&s);
            OnArrival::new(move |_| {
                let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
                let allowed = status
                    .lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .unwrap()
                    .trim()
                    .to_owned();
                s.lock().unwrap().push(allowed);
            })
        });
    });
    let me = a.add_owner(alice);
    a.send(peer_b, me, None, b"where", Urgency::Urgent, Scope::Encrypt)
        .unwrap();
    wait_for(|| !seen.lock().unwrap().is_empty());
    assert_eq!(seen.lock().unwrap()[0], cpu.to_string());

    let mut cfg = NodeConfig::new(LOOPBACK, HostKey::generate().unwrap());
    cfg.io_cpu = Some(1 << 20);
    let e = Node::start(cfg).unwrap_err();
    assert!(matches!(e, NodeError::Pin(_)), "{e}");
    assert!(e.to_string().contains("CPU 1048576"), "{e}");
}

/// A send source run by the node's own thread queues every message exactly once and in order,
/// through back-pressure (a window of 64 messages, so it is pushed back and called again many
/// times), inline and with engine workers; once it says it is done it is not called again.
#[test]
fn a_send_source_delivers_every_message_in_order_from_the_nodes_thread() {
    for (workers, handoff) in [(0, Handoff::Auto), (2, Handoff::Always)] {
        let (alice, ka) = owner("alice");
        let (a, b, peer_b, _) = pair_with(&[("alice", ka)], LimiterConfig::default(), |c| {
            c.workers = Some(workers);
            c.handoff = handoff;
            c.config.max_queued_messages = 64;
        });
        let me = a.add_owner(alice);
        let data: Vec<Vec<u8>> = (0..4000u32)
            .map(|i| {
                let mut d = i.to_le_bytes().to_vec();
                d.resize(4 + (i as usize * 13) % 400, i as u8);
                d
            })
            .collect();
        // Calls, calls after `Done`, calling threads, calls that met back-pressure.
        let calls = Arc::new(Mutex::new((0usize, 0usize, HashSet::new(), 0usize)));
        let (c, d) = (Arc::clone(&calls), data.clone());
        let mut next = 0;
        a.set_source(Source::new(move |out: &mut Outbox<'_>| {
            let mut c = c.lock().unwrap();
            c.0 += 1;
            c.2.insert(std::thread::current().id());
            if next == d.len() {
                c.1 += 1;
                return Supply::Done;
            }
            let msgs: Vec<Outgoing<'_>> = d[next..(next + 50).min(d.len())]
                .iter()
                .enumerate()
                .map(|(k, m)| Outgoing {
                    data: m,
                    urgency: if (next + k) % 20 == 0 {
                        Urgency::Urgent
                    } else {
                        Urgency::Default
                    },
                    scope: Scope::Encrypt,
                })
                .collect();
            match out.send_batch(peer_b, me, None, &msgs) {
                Ok(q) => {
                    next += q.count;
                    if q.count < msgs.len() {
                        assert_eq!(out.room(peer_b), 0, "pushed back only when full");
                        c.3 += 1;
                    }
                }
                Err(NodeError::Proto(sealink_proto::Error::QueueFull(_))) => {
                    assert_eq!(out.room(peer_b), 0, "pushed back only when full");
                    c.3 += 1;
                }
                Err(e) => panic!("{e}"),
            }
            Supply::More
        }));
        let got = collect(&b, data.len(), Duration::from_secs(20));
        let got: Vec<Vec<u8>> = got.into_iter().map(|d| d.data.to_vec()).collect();
        assert_eq!(got.len(), data.len(), "workers {workers}");
        assert!(
            got == data,
            "workers {workers}: every message once, in order"
        );
        a.flush(peer_b, Duration::from_secs(5)).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let (calls, done, threads, pushed_back) = std::mem::take(&mut *calls.lock().unwrap());
        assert!(
            pushed_back > 10,
            "the window of 64 pushed back: {pushed_back} of {calls} calls"
        );
        assert_eq!(done, 1, "not called after Done");
        assert_eq!(threads.len(), 1, "one thread calls it");
        assert!(!threads.contains(&std::thread::current().id()));
    }
}

/// A source that is idle is called again once woken, and its message goes out in that round.
#[test]
fn an_idle_send_source_runs_again_when_woken() {
    let (alice, ka) = owner("alice");
    let (a, b, peer_b, _) = pair(&[("alice", ka)], LimiterConfig::default());
    let me = a.add_owner(alice);
    // Up first, so the source's message is not held by the handshake.
    a.send(peer_b, me, None, b"up", Urgency::Urgent, Scope::Encrypt)
        .unwrap();
    assert_eq!(collect(&b, 1, Duration::from_secs(5)).len(), 1);
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r = Arc::clone(&ready);
    a.set_source(Source::new(move |out: &mut Outbox<'_>| {
        if !r.load(std::sync::atomic::Ordering::SeqCst) {
            return Supply::Idle;
        }
        let m = Outgoing {
            data: b"now",
            urgency: Urgency::Urgent,
            scope: Scope::Encrypt,
        };
        out.send_batch(peer_b, me, None, &[m]).unwrap();
        Supply::Done
    }));
    assert!(b.recv(Some(Duration::from_millis(300))).is_none(), "idle");
    ready.store(true, std::sync::atomic::Ordering::SeqCst);
    let t = Instant::now();
    a.wake_source();
    let d = b
        .recv(Some(Duration::from_secs(5)))
        .expect("sent once woken");
    assert_eq!(&d.data[..], b"now");
    // Woken, not found by the I/O thread's 250 ms idle round.
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
}

/// A source that panics stops its node as a shutdown would.
#[test]
fn a_panicking_send_source_stops_the_node() {
    let (alice, ka) = owner("alice");
    let (a, _b, peer_b, _) = pair(&[("alice", ka)], LimiterConfig::default());
    let me = a.add_owner(alice);
    a.set_source(Source::new(|_: &mut Outbox<'_>| {
        panic!("the application's bug")
    }));
    wait_for(|| {
        matches!(
            a.send(peer_b, me, None, b"x", Urgency::Urgent, Scope::Encrypt),
            Err(NodeError::Stopped)
        )
    });
    assert!(matches!(
        a.flush(peer_b, Duration::from_secs(2)),
        Err(NodeError::Stopped)
    ));
}
