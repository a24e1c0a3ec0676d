//! The endpoint's handshake admission with source addresses: mac1, flood limits, cookies,
//! degenerate keys.

use std::net::SocketAddr;

use sealink_crypto::sign::OwnerSigningKey;

use super::*;
use crate::handshake::cookie::{COOKIE_REPLY_LEN, CookieGenerator};
use crate::wire::write_header;

const A: &str = "192.0.2.1:7000";
const B: &str = "192.0.2.2:7000";

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

struct Net {
    a: Endpoint,
    b: Endpoint,
    /// b as seen by a.
    peer_b: PeerId,
    owner: OwnerId,
    now: Time,
}

fn net(limits: LimiterConfig) -> Net {
    net_with(Config::default(), limits)
}

fn net_with(cfg: Config, limits: LimiterConfig) -> Net {
    let (ka, kb) = (HostKey::generate().unwrap(), HostKey::generate().unwrap());
    let key = OwnerSigningKey::from_seed(&[7; 32]).unwrap();
    let mut dir = Directory::new();
    dir.insert("alice", key.public_key()).unwrap();
    let mut a = Endpoint::new(cfg.clone(), ka.clone(), Directory::new()).unwrap();
    let mut b = Endpoint::new(cfg, kb.clone(), dir).unwrap();
    b.set_handshake_limits(limits);
    let peer_b = a.add_peer("b", *kb.public());
    b.add_peer("a", *ka.public());
    let owner = a.add_owner(LocalOwner::new("alice", key).unwrap());
    Net {
        a,
        b,
        peer_b,
        owner,
        now: Time::from_millis(1000),
    }
}

impl Net {
    fn send(&mut self, data: &[u8]) {
        self.send_to(self.peer_b, data);
    }

    /// a sends `data` to `peer`, urgent and encrypted, from its owner.
    fn send_to(&mut self, peer: PeerId, data: &[u8]) -> MessageId {
        self.a
            .send(
                self.now,
                peer,
                self.owner,
                None,
                data,
                Urgency::Urgent,
                Scope::Encrypt,
            )
            .unwrap()
    }

    /// Datagrams a sends to b (all of them go to b's address).
    fn sent_by_a(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 2048];
        while let Some(t) = self.a.poll_transmit(self.now, &mut buf) {
            out.push(buf[..t.len].to_vec());
        }
        out
    }

    fn cookie_replies(&mut self) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 2048];
        while let Some((to, n)) = self.b.poll_cookie_reply(&mut buf) {
            out.push((to, buf[..n].to_vec()));
        }
        out
    }

    /// Runs both ways (a at A, b at B) until quiet; returns messages b delivered.
    fn run(&mut self) -> usize {
        let mut delivered = 0;
        let mut buf = vec![0u8; 2048];
        for _ in 0..20 {
            let mut quiet = true;
            for mut d in self.sent_by_a() {
                quiet = false;
                let _ = self.b.handle_from(self.now, sa(A), &mut d);
            }
            for (to, mut d) in self.cookie_replies() {
                quiet = false;
                if to == sa(A) {
                    let _ = self.a.handle_from(self.now, sa(B), &mut d);
                }
            }
            while let Some(t) = self.b.poll_transmit(self.now, &mut buf) {
                quiet = false;
                let _ = self.a.handle_from(self.now, sa(B), &mut buf[..t.len]);
            }
            while let Some(e) = self.b.poll_event() {
                if let Event::Messages(m) = e {
                    delivered += m.len();
                }
            }
            if quiet {
                break;
            }
        }
        delivered
    }
}

fn junk_init(seed: u8) -> Vec<u8> {
    let mut d: Vec<u8> = (0..handshake::INIT_LEN)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect();
    write_header(
        &Header::Init {
            sender: u32::from(seed),
        },
        (&mut d[..HEADER_LEN]).try_into().unwrap(),
    );
    d
}

fn junk_init_mac1(seed: u8, responder: &[u8; 32]) -> Vec<u8> {
    let mut d = junk_init(seed);
    CookieGenerator::new(responder).add_macs(Time::ZERO, &mut d);
    d
}

#[test]
fn spoofed_junk_from_the_peers_address_is_dropped_by_mac1_and_blocks_nothing() {
    let mut n = net(LimiterConfig::default());
    for i in 0..200u8 {
        assert_eq!(
            n.b.handle_from(n.now, sa(A), &mut junk_init(i)),
            Err(DropReason::BadMac1)
        );
    }
    assert_eq!(n.b.stats().drops(DropReason::BadMac1), 200);
    assert_eq!(n.b.stats().drops(DropReason::RateLimited), 0);
    assert_eq!(n.b.stats().pk.dh, 0, "no public-key work");
    n.send(b"hello");
    assert_eq!(n.run(), 1);
    assert!(n.a.is_established(n.peer_b, n.now));
}

#[test]
fn under_load_the_initiation_gets_a_cookie_and_the_retry_with_mac2_succeeds() {
    let mut n = net(LimiterConfig::default());
    let b_pub = *n.b.host_public();
    for i in 0..100u8 {
        let _ =
            n.b.handle_from(n.now, sa(A), &mut junk_init_mac1(i, &b_pub));
    }
    let flood_cookies = n.b.stats().drops(DropReason::CookieRequired);
    assert!(flood_cookies > 50, "{flood_cookies}");
    // The flooder's cookies reach A, which did not send those initiations.
    for (to, mut r) in n.cookie_replies() {
        assert_eq!(to, sa(A));
        assert_eq!(r.len(), COOKIE_REPLY_LEN);
        assert!(n.a.handle_from(n.now, sa(B), &mut r).is_err());
    }
    n.send(b"hello");
    let init = n.sent_by_a();
    assert_eq!(init.len(), 1);
    assert_eq!(
        n.b.handle_from(n.now, sa(A), &mut init[0].clone()),
        Err(DropReason::CookieRequired)
    );
    let replies = n.cookie_replies();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].0, sa(A));
    assert!(
        n.a.handle_from(n.now, sa(B), &mut replies[0].1.clone())
            .is_ok()
    );
    assert_eq!(n.run(), 1, "drops at b: {:?}", {
        n.b.stats().drops_by_reason().collect::<Vec<_>>()
    });
    assert!(n.a.is_established(n.peer_b, n.now));
    assert_eq!(
        n.a.stats().handshakes_initiated,
        1,
        "the same initiation again"
    );
}

#[test]
fn a_cookie_for_one_address_does_not_work_from_another() {
    let mut n = net(LimiterConfig {
        per_source_per_sec: 1,
        per_source_burst: 1,
        ..LimiterConfig::default()
    });
    let b_pub = *n.b.host_public();
    let (c, a_other_port) = (sa("198.51.100.3:7000"), sa("192.0.2.1:7001"));
    for from in [sa(A), c, a_other_port] {
        for i in 0..3u8 {
            let _ = n.b.handle_from(n.now, from, &mut junk_init_mac1(i, &b_pub));
        }
    }
    n.cookie_replies();
    n.send(b"hello");
    let mut init = n.sent_by_a().remove(0);
    assert_eq!(
        n.b.handle_from(n.now, sa(A), &mut init),
        Err(DropReason::CookieRequired)
    );
    let (_, mut reply) = n.cookie_replies().remove(0);
    n.a.handle_from(n.now, sa(B), &mut reply).unwrap();
    let retry = n.sent_by_a().remove(0);
    for from in [c, a_other_port] {
        assert_eq!(
            n.b.handle_from(n.now, from, &mut retry.clone()),
            Err(DropReason::CookieRequired),
            "{from}"
        );
    }
    assert!(n.b.handle_from(n.now, sa(A), &mut retry.clone()).is_ok());
    assert_eq!(n.run(), 1);
}

#[test]
fn a_degenerate_static_key_fails_cleanly_both_ways() {
    // Initiating towards a small-order key: nothing is sent, the message is reported.
    let mut n = net(LimiterConfig::default());
    let zero = n.a.add_peer("zero", [0; 32]);
    let id = n.send_to(zero, b"x");
    let mut buf = vec![0u8; 2048];
    assert!(n.a.poll_transmit(n.now, &mut buf).is_none());
    let events: Vec<Event> = std::iter::from_fn(|| n.a.poll_event()).collect();
    assert!(events.contains(&Event::HandshakeFailed { peer: zero }));
    assert!(events.contains(&Event::Undeliverable { peer: zero, id }));
    // Responding: even a (misconfigured) trust in the all-zero key does not let an initiation
    // claiming it through, though it needs no private key to make.
    n.b.add_peer("zero", [0; 32]);
    let forged =
        handshake::tests::forged_init(n.b.host_public(), [0; 32], handshake::PROLOGUE, 3, 1, n.now);
    assert_eq!(
        n.b.handle_from(n.now, sa(A), &mut forged.clone()),
        Err(DropReason::DegenerateKey)
    );
    assert_eq!(n.b.stats().drops(DropReason::DegenerateKey), 1);
    assert!(n.b.poll_transmit(n.now, &mut buf).is_none());
    assert!(std::iter::from_fn(|| n.b.poll_event()).all(|e| !matches!(e, Event::ChannelUp { .. })));
}

#[test]
fn encrypted_data_datagrams_leave_padded_to_whole_blocks_and_are_delivered() {
    let mut n = net(LimiterConfig::default());
    n.send(b"hello");
    assert_eq!(n.run(), 1);
    let mut encrypted = 0;
    for size in 1..70usize {
        n.now = n.now + std::time::Duration::from_millis(1);
        n.send(&vec![size as u8; size]);
        for mut d in n.sent_by_a() {
            if let Ok(wire::Header::Data {
                scope: Scope::Encrypt,
                ..
            }) = wire::parse_header(&d)
            {
                encrypted += 1;
                let body = d.len() - wire::HEADER_LEN - sealink_crypto::suite::TAG_LEN;
                assert_eq!(
                    body % wire::PAD_BLOCK,
                    0,
                    "{size}-byte message: body {body}"
                );
            }
            let _ = n.b.handle_from(n.now, sa(A), &mut d);
        }
        let mut got = 0;
        while let Some(e) = n.b.poll_event() {
            if let Event::Messages(m) = e {
                for msg in m.iter() {
                    assert_eq!(msg, &vec![size as u8; size][..]);
                }
                got += m.len();
            }
        }
        assert_eq!(got, 1, "{size}-byte message delivered once");
    }
    assert!(encrypted >= 69);
}

/// An authentic datagram whose MSG_FIXED frame is cut short of its message's end is dropped
/// whole and counted as `malformed-frame`, at every cut, and nothing is delivered; the whole
/// datagram is then delivered once. (Plaintext scope, the lab's, so that the body can be cut
/// without failing the tag.)
#[test]
fn a_cut_msg_fixed_frame_is_dropped_and_counted_as_malformed() {
    let cfg = Config {
        insecure_lab_plaintext: true,
        ..Config::default()
    };
    let mut n = net_with(cfg, LimiterConfig::default());
    n.send(b"hello");
    assert_eq!(n.run(), 1);
    n.now = n.now + std::time::Duration::from_millis(1);
    let msg = [0x42u8; 40];
    n.a.send(
        n.now,
        n.peer_b,
        n.owner,
        None,
        &msg,
        Urgency::Urgent,
        Scope::None,
    )
    .unwrap();
    let sent = n.sent_by_a();
    assert_eq!(sent.len(), 1);
    let d = &sent[0];
    let Ok(wire::Header::Data {
        scope: Scope::None,
        receiver,
        counter,
    }) = wire::parse_header(d)
    else {
        panic!("a plaintext data datagram");
    };
    // The body ends with the MSG_FIXED frame (no padding outside scope encrypt).
    let start = d.len() - wire::msg_fixed_len(msg.len());
    assert_eq!(d[start], wire::FRAME_MSG_FIXED);
    let before = n.b.stats().drops(DropReason::MalformedFrame);
    let mut cuts = 0;
    for (k, cut) in (start + 1..d.len()).enumerate() {
        let mut c = d[..cut].to_vec();
        // A fresh counter each time (a plaintext header is not authenticated).
        let h = wire::Header::Data {
            scope: Scope::None,
            receiver,
            counter: counter + 1 + k as u64,
        };
        write_header(&h, (&mut c[..wire::HEADER_LEN]).try_into().unwrap());
        assert_eq!(
            n.b.handle_from(n.now, sa(A), &mut c),
            Err(DropReason::MalformedFrame),
            "cut at {cut}"
        );
        cuts += 1;
    }
    assert_eq!(n.b.stats().drops(DropReason::MalformedFrame) - before, cuts);
    assert!(std::iter::from_fn(|| n.b.poll_event()).all(|e| !matches!(e, Event::Messages(_))));
    let mut whole = d.clone();
    assert!(n.b.handle_from(n.now, sa(A), &mut whole).is_ok());
    let got: Vec<Vec<u8>> = std::iter::from_fn(|| n.b.poll_event())
        .filter_map(|e| match e {
            Event::Messages(m) => Some(m.iter().map(<[u8]>::to_vec).collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(got, [msg.to_vec()]);
}

// The handshake lifecycle shared with the tunnel (crate::handshake::state): one test per case where
// the channel's and the tunnel's former copies differed; tunnel/tests.rs has the same two.

/// A small-order peer key: the channel gives up at once (HandshakeFailed, nothing sent) and
/// keeps no receiver index or initiation; the tunnel does the same (it used to log and wait).
#[test]
fn lifecycle_a_degenerate_peer_key_gives_up_at_once_without_holding_an_index() {
    let mut n = net(LimiterConfig::default());
    let zero = n.a.add_peer("zero", [0; 32]);
    for round in 0..2 {
        n.send_to(zero, b"x");
        assert!(n.sent_by_a().is_empty(), "round {round}: nothing sent");
        let events: Vec<Event> = std::iter::from_fn(|| n.a.poll_event()).collect();
        assert!(events.contains(&Event::HandshakeFailed { peer: zero }));
        assert_eq!(n.a.idx.len(), 0, "round {round}: no index held");
        assert!(n.a.channels[zero.0].handshake.initiation.is_none());
        assert_eq!(n.a.poll_timeout(), None, "no retry is scheduled");
    }
}

/// A key derivation that fails after the response was built: the responder frees the index it
/// allocated (the channel used to keep it), sends nothing, and a later initiation succeeds.
#[test]
fn lifecycle_a_failed_key_derivation_frees_the_responder_index() {
    let mut n = net(LimiterConfig::default());
    n.send(b"hello");
    let init = n.sent_by_a();
    assert_eq!(init.len(), 1, "one initiation");
    crate::handshake::state::fail_next_derivation();
    assert_eq!(
        n.b.handle_from(n.now, sa(A), &mut init[0].clone()),
        Err(DropReason::SuiteRefused)
    );
    assert_eq!(n.b.idx.len(), 0, "the responder's index was freed");
    let mut buf = vec![0u8; 2048];
    assert!(n.b.poll_transmit(n.now, &mut buf).is_none(), "no response");
    // A's retry is answered normally.
    n.now = n.now + std::time::Duration::from_secs(2);
    n.a.handle_timeout(n.now);
    assert_eq!(n.run(), 1);
    assert_eq!(n.b.idx.len(), 1, "one session's index");
}
