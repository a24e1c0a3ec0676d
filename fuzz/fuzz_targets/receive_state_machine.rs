//! The receive state machine never panics on any datagram sequence, and nothing it did not
//! get from an authentic peer is ever delivered. The input drives an established pair of
//! endpoints: each chunk is either a raw datagram, a mutation of a real captured datagram, or
//! a replay of one, delivered to either side at advancing virtual times.
//!
//! Before that, on inputs whose first byte is odd, the next bytes are an on-path attacker's
//! drop pattern while A sends, with an untrusted owner's message riding along and messages
//! given up after two transmissions (so ABANDON and REFUSED frames flow); once the link is clean
//! again a new message must arrive: no loss, refusal or abandonment may wedge the channel.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use sealink_crypto::sign::OwnerSigningKey;
use sealink_proto::sim::{LinkConfig, Pair, Side};
use sealink_proto::{Config, Directory, Endpoint, Event, HostKey, LocalOwner, OwnerId, PeerId, Scope, Time, Urgency};

fn key(seed: u8) -> [u8; 32] {
    [seed; 32]
}

/// An established pair and the datagrams it exchanged, made once.
fn template() -> &'static (Vec<(bool, Vec<u8>)>, [u8; 32], [u8; 32]) {
    static T: OnceLock<(Vec<(bool, Vec<u8>)>, [u8; 32], [u8; 32])> = OnceLock::new();
    T.get_or_init(|| {
        let (mut p, peer, o) = pair();
        p.captured = Some(Vec::new());
        for i in 0..6u8 {
            let now = p.now();
            p.a.send(now, peer, o, None, &[i; 40], Urgency::Urgent, Scope::Encrypt)
                .unwrap();
            p.run_until(now + Duration::from_millis(30));
        }
        (p.captured.take().unwrap(), key(1), key(2))
    })
}

/// Messages sent in the attacker phase, and the bytes of its drop pattern (one bit a datagram).
const ATTACK_MESSAGES: u8 = 16;
const ATTACK_PATTERN: usize = 32;

fn pair() -> (Pair, PeerId, OwnerId) {
    let ha = HostKey::from_private(key(1)).unwrap();
    let hb = HostKey::from_private(key(2)).unwrap();
    let owner = OwnerSigningKey::from_seed(&[9; 32]).unwrap();
    let mut dir = Directory::new();
    dir.insert("alice", owner.public_key()).unwrap();
    let cfg = Config {
        max_transmissions: 2,
        message_window: 16,
        ..Config::default()
    };
    let mut a = Endpoint::new(cfg.clone(), ha.clone(), dir.clone()).unwrap();
    let mut b = Endpoint::new(cfg, hb.clone(), dir).unwrap();
    let peer = a.add_peer("b", *hb.public());
    b.add_peer("a", *ha.public());
    let o = a.add_owner(LocalOwner::new("alice", owner).unwrap());
    (Pair::new(a, b, LinkConfig::default(), 1), peer, o)
}

fuzz_target!(|data: &[u8]| {
    let (captured, _, _) = template();
    let (mut p, peer, o) = pair();
    // Establish a fresh channel (different session keys each run: data never decrypts unless
    // it came from this run's peer).
    p.a.send(Time::ZERO, peer, o, None, b"start", Urgency::Urgent, Scope::Encrypt)
        .unwrap();
    p.run_until(Time::from_millis(50));
    p.captured = Some(Vec::new());
    // The attacker phase costs many simulated seconds; run it on half of the inputs (first
    // byte odd) so the raw-datagram phase below keeps its speed.
    let (attack, data) = match data.split_first() {
        Some((&b, rest)) => (b & 1 == 1, rest),
        None => (false, data),
    };
    let data = if attack {
        // Attacker phase.
        let (pattern, data) = data.split_at(data.len().min(ATTACK_PATTERN));
        let drops: Vec<bool> = pattern
            .iter()
            .flat_map(|b| (0..8).map(move |i| b >> i & 1 == 1))
            .collect();
        let mut k = 0;
        p.attacker = Some(Box::new(move |_, _| {
            k += 1;
            drops.get(k - 1).copied().unwrap_or(false)
        }));
        let mallory = p
            .a
            .add_owner(LocalOwner::new("mallory", OwnerSigningKey::from_seed(&[7; 32]).unwrap()).unwrap());
        for i in 0..ATTACK_MESSAGES {
            let now = p.now();
            let urgency = if i % 3 == 0 { Urgency::Default } else { Urgency::Urgent };
            if i == 4 {
                p.a.send(now, peer, mallory, None, b"untrusted", Urgency::Default, Scope::AuthOnly)
                    .unwrap();
            }
            p.a.send(now, peer, o, None, &[i; 24], urgency, Scope::AuthOnly).unwrap();
            p.run_until(now + Duration::from_millis(7));
        }
        let now = p.now();
        p.run_until(now + Duration::from_secs(10));
        p.attacker = None;
        let now = p.now();
        p.a.send(now, peer, o, None, b"after", Urgency::Urgent, Scope::Encrypt)
            .unwrap();
        p.run_until(now + Duration::from_secs(30));
        assert!(
            p.events_b
                .iter()
                .any(|(_, e)| matches!(e, Event::Messages(m) if m.iter().any(|d| d == b"after"))),
            "the channel wedged"
        );
        assert!(
            !p.events_b
                .iter()
                .any(|(_, e)| matches!(e, Event::Messages(m) if &*m.from != "alice")),
            "an untrusted owner's message was delivered"
        );
        data
    } else {
        data
    };
    let own: Vec<(bool, Vec<u8>)> = p.captured.take().unwrap_or_default();
    let delivered_before = p.b.stats().messages_delivered + p.a.stats().messages_delivered;
    let mut i = 0;
    let mut now = p.now();
    while i + 2 <= data.len() {
        let op = data[i];
        let len = data[i + 1] as usize;
        i += 2;
        let chunk = &data[i..(i + len).min(data.len())];
        i += len;
        now = now + Duration::from_micros(u64::from(op) * 100);
        let to_b = op & 1 == 0;
        let mut dgram = match op % 4 {
            0 | 1 => chunk.to_vec(),
            2 if !captured.is_empty() => {
                let (_, d) = &captured[chunk.first().copied().unwrap_or(0) as usize % captured.len()];
                let mut d = d.clone();
                for (k, b) in chunk.iter().enumerate().skip(1) {
                    let pos = (k * 131 + *b as usize) % d.len().max(1);
                    if let Some(x) = d.get_mut(pos) {
                        *x ^= b;
                    }
                }
                d
            }
            _ if !own.is_empty() => own[chunk.first().copied().unwrap_or(0) as usize % own.len()].1.clone(),
            _ => chunk.to_vec(),
        };
        let side = if to_b { Side::B } else { Side::A };
        let _ = p.endpoint(side).handle(now, &mut dgram);
        p.endpoint(side).handle_timeout(now);
    }
    p.transmit();
    // Nothing forged or replayed was delivered.
    let delivered_after = p.b.stats().messages_delivered + p.a.stats().messages_delivered;
    assert_eq!(delivered_before, delivered_after);
    for (_, e) in p.events_b.iter().chain(p.events_a.iter()) {
        if let Event::Messages(m) = e {
            assert_eq!(&*m.from, "alice");
        }
    }
});
