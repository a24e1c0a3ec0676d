//! The tunnel core on WireGuard's wire: two cores together, and the core against the separate
//! sans-IO [`crate::wg_reference::WgPeer`] (itself checked against wireguard-go in `tests/wg_interop.rs`).

use super::*;
use crate::error::DropReason;
use crate::wg::message::{self, Message, TRANSPORT_HEADER_LEN};
use crate::wg::{self as proto};
use crate::wg_reference::{WgEvent, WgPeer};

fn wg_pair() -> Pair {
    pair_with(TunnelConfig::wireguard())
}

#[test]
fn two_cores_handshake_and_carry_packets_on_wireguards_wire() {
    let mut p = wg_pair();
    let first = v4(IP_A, IP_B, 1000, 1);
    assert_eq!(p.send(true, &first), Encap::Queued);
    assert_eq!(p.wire.len(), 1);
    let init = &p.wire[0].2;
    assert!(
        matches!(message::parse(init), Ok(Message::Initiation(_))),
        "a WireGuard initiation (148 bytes), got {} bytes",
        init.len()
    );
    p.run();
    assert_eq!(p.got_b, vec![first]);
    for i in 0..20u8 {
        let pkt = v4(IP_A, IP_B, 1420, i);
        assert!(matches!(p.send(true, &pkt), Encap::Sealed { .. }));
        let back = v4(IP_B, IP_A, 41 + usize::from(i), i);
        assert!(matches!(p.send(false, &back), Encap::Sealed { .. }));
    }
    // Every data datagram is a transport message whose body is padded to 16 (or the MTU).
    for (_, _, d) in &p.wire {
        match message::parse(d) {
            Ok(Message::Transport(t)) => {
                let body = t.sealed.len() - message::TAG_LEN;
                assert!(body % 16 == 0 || body == 1420, "body of {body} bytes");
            }
            other => panic!("not a transport message: {other:?}"),
        }
    }
    p.run();
    assert_eq!(p.got_b.len(), 21);
    assert_eq!(p.got_a.len(), 20);
    // Padding removed on delivery.
    assert_eq!(p.got_a[3], v4(IP_B, IP_A, 44, 3));
    assert!(p.a.drops().is_empty(), "{:?}", p.a.drops());
    assert!(p.b.drops().is_empty(), "{:?}", p.b.drops());
}

#[test]
fn a_preshared_key_must_match() {
    let mk = |psk_a: Option<[u8; 32]>, psk_b: Option<[u8; 32]>| {
        let mut p = wg_pair();
        let ka = p.a.host.clone();
        let kb = p.b.host.clone();
        let peer = |name: &str, k: &HostKey, ep: Option<&str>, ip: &str, psk| TunnelPeerConfig {
            name: name.into(),
            public_key: *k.public(),
            endpoint: ep.map(sa),
            allowed_ips: vec![ip.parse().unwrap()],
            persistent_keepalive: None,
            preshared_key: psk,
        };
        p.a = Tunnel::new(
            ka.clone(),
            TunnelConfig::wireguard(),
            vec![peer("b", &kb, Some(B_ADDR), "10.9.0.2/32", psk_a)],
        )
        .unwrap();
        p.b = Tunnel::new(
            kb,
            TunnelConfig::wireguard(),
            vec![peer("a", &ka, None, "10.9.0.1/32", psk_b)],
        )
        .unwrap();
        p.send(true, &v4(IP_A, IP_B, 100, 7));
        p.run();
        p
    };
    let p = mk(Some([7; 32]), Some([7; 32]));
    assert_eq!(p.got_b.len(), 1, "same psk: the packet arrives");
    let p = mk(Some([7; 32]), Some([8; 32]));
    assert!(p.got_b.is_empty(), "different psk: no session");
    assert_eq!(
        p.a.drop_count(DropReason::HandshakeFailed.into()),
        1,
        "{:?}",
        p.a.drops()
    );
}

#[test]
fn sealinks_wire_refuses_a_preshared_key() {
    let k = HostKey::generate().unwrap();
    let other = HostKey::generate().unwrap();
    let e = Tunnel::new(
        k,
        TunnelConfig::default(),
        vec![TunnelPeerConfig {
            name: "b".into(),
            public_key: *other.public(),
            endpoint: None,
            allowed_ips: vec!["10.9.0.2/32".parse().unwrap()],
            persistent_keepalive: None,
            preshared_key: Some([1; 32]),
        }],
    )
    .unwrap_err();
    assert!(e.to_string().contains("preshared"), "{e}");
}

#[test]
fn wireguards_wire_refuses_other_suites_and_piggybacking() {
    let mut c = TunnelConfig::wireguard();
    c.suite = SuiteId::Aes128Gcm;
    assert!(c.validate().is_err());
    let mut c = TunnelConfig::wireguard();
    c.piggyback.enabled = true;
    assert!(c.validate().is_err());
    assert!(TunnelConfig::wireguard().validate().is_ok());
    assert_eq!(TunnelConfig::wireguard().headroom(), TRANSPORT_HEADER_LEN);
}

#[test]
fn replayed_initiations_are_stale_and_garbage_is_counted() {
    let mut p = wg_pair();
    p.send(true, &v4(IP_A, IP_B, 100, 1));
    let init = p.wire[0].2.clone();
    p.run();
    let r = p.deliver(sa(A_ADDR), sa(B_ADDR), init);
    assert_eq!(r, Err(DropReason::StaleHandshake.into()));
    for junk in [
        vec![],
        vec![1u8; 10],
        vec![4, 0, 0, 0, 1, 2, 3],
        vec![9; 200],
    ] {
        assert_eq!(
            p.deliver(sa(A_ADDR), sa(B_ADDR), junk),
            Err(DropReason::MalformedHeader.into())
        );
    }
    assert_eq!(p.b.drop_count(DropReason::MalformedHeader.into()), 4);
}

/// One [`Tunnel`] on WireGuard's wire (`t`, at `T_ADDR`) and one [`WgPeer`] (`w`).
struct Mixed {
    t: Tunnel,
    w: WgPeer,
    now: Time,
    /// The last datagram [`Mixed::t_sends`] sealed in place.
    pending_sealed: Option<Vec<u8>>,
}

const T_ADDR: &str = "192.0.2.1:51820";
const W_ADDR: &str = "192.0.2.2:51820";

fn mixed(psk: Option<[u8; 32]>) -> Mixed {
    let kt = HostKey::generate().unwrap();
    let kw = HostKey::generate().unwrap();
    let t = Tunnel::new(
        kt.clone(),
        TunnelConfig::wireguard(),
        vec![TunnelPeerConfig {
            name: "w".into(),
            public_key: *kw.public(),
            endpoint: Some(sa(W_ADDR)),
            allowed_ips: vec!["10.9.0.2/32".parse().unwrap()],
            persistent_keepalive: None,
            preshared_key: psk,
        }],
    )
    .unwrap();
    let w = WgPeer::new(
        kw,
        crate::wg_reference::WgPeerConfig {
            public_key: *kt.public(),
            preshared_key: psk,
        },
    )
    .unwrap();
    Mixed {
        t,
        w,
        now: Time::from_millis(5_000),
        pending_sealed: None,
    }
}

impl Mixed {
    fn t_transmits(&mut self) -> Vec<Vec<u8>> {
        let mut out = vec![0u8; 2048];
        let mut v = Vec::new();
        while let Some((d, n)) = self.t.poll_transmit(&mut out) {
            assert_eq!(d, sa(W_ADDR));
            v.push(out[..n].to_vec());
        }
        v
    }
    fn deliver_to_core(&mut self, mut d: Vec<u8>) -> (Result<Decap, TunnelDrop>, Vec<Vec<u8>>) {
        let mut ranges = Vec::new();
        let r = self
            .t
            .decapsulate(self.now, sa(W_ADDR), &mut d, &mut ranges);
        (r, ranges.into_iter().map(|rg| d[rg].to_vec()).collect())
    }
    fn t_sends(&mut self, pkt: &[u8]) -> Encap {
        let h = self.t.config().headroom();
        let mut buf = vec![0u8; h + pkt.len() + 15 + TAILROOM];
        buf[h..h + pkt.len()].copy_from_slice(pkt);
        let r = self.t.encapsulate(self.now, &mut buf, pkt.len());
        if let Encap::Sealed { len, .. } = r {
            self.pending_sealed = Some(buf[..len].to_vec());
        }
        r
    }
}

#[test]
fn the_core_initiates_to_a_wgpeer_and_both_carry_data() {
    for psk in [None, Some([3u8; 32])] {
        let mut m = mixed(psk);
        let pkt = v4(IP_A, IP_B, 300, 9);
        assert_eq!(m.t_sends(&pkt), Encap::Queued);
        let init = m.t_transmits();
        assert_eq!(init.len(), 1);
        let WgEvent::Send(resp) = m.w.receive(m.now, Some(sa(T_ADDR)), &init[0]) else {
            panic!("WgPeer did not answer: {:?}", m.w.stats());
        };
        let (r, _) = m.deliver_to_core(resp);
        assert!(matches!(r, Ok(Decap::Handshake(_))), "{r:?}");
        // The staged packet leaves on the new session; WgPeer confirms its session with it.
        let out = m.t_transmits();
        assert_eq!(out.len(), 1);
        assert_eq!(
            m.w.receive(m.now, Some(sa(T_ADDR)), &out[0]),
            WgEvent::Packet(pkt)
        );
        // And back: WgPeer's transport message opens in the core.
        let back = v4(IP_B, IP_A, 77, 4);
        let d = m.w.encapsulate(m.now, &back).unwrap();
        let (r, got) = m.deliver_to_core(d);
        assert!(matches!(r, Ok(Decap::Data(_))), "{r:?}");
        assert_eq!(got, vec![back]);
        // A keepalive from WgPeer opens to nothing.
        let k = m.w.keepalive(m.now).unwrap();
        let (r, got) = m.deliver_to_core(k);
        assert!(matches!(r, Ok(Decap::Data(_))) && got.is_empty(), "{r:?}");
        assert!(m.t.drops().is_empty(), "{:?}", m.t.drops());
    }
}

#[test]
fn a_wgpeer_initiates_to_the_core_and_both_carry_data() {
    let mut m = mixed(Some([5; 32]));
    let init =
        m.w.initiate(m.now, Duration::from_secs(1_700_000_000))
            .unwrap();
    let (r, _) = m.deliver_to_core(init.to_vec());
    assert!(matches!(r, Ok(Decap::Handshake(_))), "{r:?}");
    let resp = m.t_transmits();
    assert_eq!(resp.len(), 1);
    assert_eq!(
        m.w.receive(m.now, Some(sa(T_ADDR)), &resp[0]),
        WgEvent::HandshakeComplete
    );
    // The core's session is unconfirmed until WgPeer's first transport message.
    let pkt = v4(IP_B, IP_A, 1420, 2);
    let d = m.w.encapsulate(m.now, &pkt).unwrap();
    let (r, got) = m.deliver_to_core(d);
    assert!(matches!(r, Ok(Decap::Data(_))), "{r:?}");
    assert_eq!(got, vec![pkt]);
    let reply = v4(IP_A, IP_B, 64, 1);
    assert!(matches!(m.t_sends(&reply), Encap::Sealed { .. }));
    let sealed = m.pending_sealed.take().unwrap();
    assert_eq!(
        m.w.receive(m.now, Some(sa(T_ADDR)), &sealed),
        WgEvent::Packet(reply)
    );
    // A replayed initiation is refused as stale.
    let (r, _) = m.deliver_to_core(init.to_vec());
    assert_eq!(r, Err(DropReason::StaleHandshake.into()));
}

fn wg_established() -> Pair {
    let mut p = wg_pair();
    p.send(true, &v4(IP_A, IP_B, 100, 0));
    p.run();
    p.got_b.clear();
    p
}

/// Whether `d` is an empty transport message (a keepalive: header and tag only).
fn is_keepalive(d: &[u8]) -> bool {
    matches!(message::parse(d), Ok(Message::Transport(t)) if t.sealed.len() == message::TAG_LEN)
}

fn is_initiation(d: &[u8]) -> bool {
    matches!(message::parse(d), Ok(Message::Initiation(_)))
}

#[test]
fn data_received_and_nothing_sent_gets_a_passive_keepalive() {
    let mut p = wg_established();
    p.send(true, &v4(IP_A, IP_B, 200, 1));
    p.run();
    assert_eq!(p.got_b.len(), 1);
    p.advance(proto::KEEPALIVE_TIMEOUT - Duration::from_millis(1));
    assert!(p.wire.is_empty(), "nothing due before KEEPALIVE_TIMEOUT");
    p.advance(Duration::from_millis(1));
    assert_eq!(p.wire.len(), 1, "B answers with a keepalive");
    assert!(is_keepalive(&p.wire[0].2));
    assert_eq!(p.wire[0].0, sa(B_ADDR));
    assert_eq!(p.b.peer_status(p.now)[0].stats.keepalives, 1);
    p.run();
    assert!(p.a.drops().is_empty(), "{:?}", p.a.drops());
    // Once: nothing more is due until data arrives again.
    p.advance(proto::KEEPALIVE_TIMEOUT * 2);
    assert!(p.wire.is_empty());
}

#[test]
fn a_reply_within_keepalive_timeout_needs_no_keepalive() {
    let mut p = wg_established();
    p.send(true, &v4(IP_A, IP_B, 200, 1));
    p.run();
    p.advance(Duration::from_secs(3));
    p.send(false, &v4(IP_B, IP_A, 200, 2));
    p.run();
    // A received data at +3 s and sends nothing: A's keepalive is due at +13 s, B's never.
    p.advance(Duration::from_secs(10));
    assert_eq!(p.wire.len(), 1);
    assert_eq!(p.wire[0].0, sa(A_ADDR), "the keepalive is A's");
    assert!(is_keepalive(&p.wire[0].2));
}

#[test]
fn data_sent_and_nothing_heard_starts_a_handshake_after_fifteen_seconds() {
    let mut p = wg_established();
    // B's passive keepalive for the first packet, then quiet.
    p.advance(proto::KEEPALIVE_TIMEOUT);
    p.run();
    p.send(true, &v4(IP_A, IP_B, 200, 1));
    p.wire.clear(); // lost
    p.advance(proto::KEEPALIVE_TIMEOUT + proto::REKEY_TIMEOUT - Duration::from_millis(1));
    assert!(p.wire.is_empty());
    p.advance(Duration::from_millis(1));
    assert_eq!(p.wire.len(), 1);
    assert!(is_initiation(&p.wire[0].2), "a new handshake");
    p.run();
    assert_eq!(p.a.peer_status(p.now)[0].stats.handshakes_completed, 2);
}

#[test]
fn keys_are_erased_three_reject_after_times_after_their_handshake() {
    let mut p = wg_established();
    let reject = proto::REJECT_AFTER_TIME;
    p.send(true, &v4(IP_A, IP_B, 200, 1));
    let old = p.wire[0].2.clone();
    p.run();
    p.advance(reject * 3);
    assert!(!p.a.peer_status(p.now)[0].session_up);
    assert!(!p.b.peer_status(p.now)[0].session_up);
    // B holds no key for A's old index any more.
    assert_eq!(
        p.deliver(sa(A_ADDR), sa(B_ADDR), old),
        Err(DropReason::UnknownIndex.into())
    );
}

/// As wireguard-go and the kernel: REKEY_AFTER_TIME makes the side that initiated the session
/// start a new handshake when it sends; the responder keeps sending on the session.
#[test]
fn only_the_initiator_rekeys_after_rekey_after_time() {
    let mut p = wg_established(); // A initiated
    assert_eq!(initiated(&p), (1, 0));
    // B's passive keepalive answers A's packet first (one jump of 120 s would also run A's
    // "data unanswered" timer before B's keepalive could arrive).
    p.advance(proto::KEEPALIVE_TIMEOUT);
    p.run();
    p.advance(proto::REKEY_AFTER_TIME - proto::KEEPALIVE_TIMEOUT);
    p.run();
    assert_eq!(initiated(&p), (1, 0), "no handshake without a send");
    p.wire.clear();
    assert!(matches!(
        p.send(false, &v4(IP_B, IP_A, 100, 1)),
        Encap::Sealed { .. }
    ));
    assert!(
        p.wire.iter().all(|(_, _, d)| !is_initiation(d)),
        "the responder started a handshake"
    );
    p.run();
    assert_eq!(initiated(&p), (1, 0));
    assert_eq!(p.got_a.len(), 1, "sent on the old session");
    assert!(matches!(
        p.send(true, &v4(IP_A, IP_B, 100, 2)),
        Encap::Sealed { .. }
    ));
    assert!(
        p.wire
            .iter()
            .any(|(f, _, d)| *f == sa(A_ADDR) && is_initiation(d))
    );
    p.run();
    assert_eq!(initiated(&p), (2, 0));
    assert_eq!(p.a.peer_status(p.now)[0].stats.handshakes_completed, 2);
    assert!(p.a.drops().is_empty(), "{:?}", p.a.drops());
    assert!(p.b.drops().is_empty(), "{:?}", p.b.drops());
}

/// A flow only the responder sends on: the initiator, receiving, starts a handshake once its
/// session is within KEEPALIVE_TIMEOUT + REKEY_TIMEOUT of REJECT_AFTER_TIME (165 s), and only
/// once, so the data never stops (wireguard-go's `keepKeyFreshReceiving`).
#[test]
fn a_receiving_initiator_rekeys_before_its_session_is_refused() {
    let mut p = wg_established(); // A initiated at time 0
    let last_minute = proto::REJECT_AFTER_TIME - proto::KEEPALIVE_TIMEOUT - proto::REKEY_TIMEOUT;
    // The responder never initiates by time.
    let at = responder_only_flow(&mut p, 300, 0).expect("the initiator never rekeyed");
    assert!(
        at >= last_minute && at < last_minute + Duration::from_secs(10),
        "rekeyed at {at:?}"
    );
    // Once per session: the second session (from about 170 s) is not due before 335 s.
    assert_eq!(initiated(&p).0, 2);
}

/// Each retry waits REKEY_TIMEOUT plus up to a third of a second, drawn per initiation; on
/// sealink's wire there is no jitter.
#[test]
fn retries_wait_rekey_timeout_plus_a_random_jitter() {
    let mut p = wg_pair();
    p.send(true, &v4(IP_A, IP_B, 100, 1));
    let mut waits = Vec::new();
    for _ in 0..12 {
        p.wire.clear(); // lost
        let sent = p.now;
        let due = p.a.poll_timeout().expect("a retry is due");
        let wait = due.saturating_since(sent);
        assert!(
            wait >= proto::REKEY_TIMEOUT
                && wait <= proto::REKEY_TIMEOUT + proto::REKEY_TIMEOUT_JITTER_MAX,
            "retry after {wait:?}"
        );
        p.now = due - Duration::from_millis(1);
        p.a.handle_timeout(p.now);
        p.collect();
        assert!(p.wire.is_empty(), "nothing before the deadline");
        p.now = due;
        p.a.handle_timeout(p.now);
        p.collect();
        assert!(p.wire.iter().any(|(_, _, d)| is_initiation(d)), "the retry");
        waits.push(wait);
    }
    waits.sort();
    waits.dedup();
    assert!(waits.len() >= 6, "the jitter hardly varies: {waits:?}");
    let mut s = pair_with(TunnelConfig::default());
    s.send(true, &v4(IP_A, IP_B, 100, 1));
    let due = s.a.poll_timeout().unwrap();
    assert_eq!(
        due.saturating_since(s.now),
        TunnelConfig::default().handshake_timeout
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any sequence of sends, losses, deliveries and waits: the timers never spin (after
    /// `handle_timeout(now)` the next deadline is later than `now`), and once the network
    /// delivers again, a packet from A reaches B within a handshake's retries.
    #[test]
    fn wireguard_timers_never_spin_and_the_pair_recovers(
        ops in proptest::collection::vec((0u8..5, 0u64..40_000), 1..40)
    ) {
        let mut p = wg_pair();
        for (op, ms) in ops {
            match op {
                0 => { p.send(true, &v4(IP_A, IP_B, 60 + (ms % 1300) as usize, 1)); }
                1 => { p.send(false, &v4(IP_B, IP_A, 60 + (ms % 1300) as usize, 2)); }
                2 => p.wire.clear(),
                3 => p.run(),
                _ => p.advance(Duration::from_millis(ms)),
            }
            for t in [&p.a, &p.b] {
                if let Some(due) = t.poll_timeout() {
                    prop_assert!(due >= p.now, "deadline in the past");
                }
            }
            let now = p.now;
            p.a.handle_timeout(now);
            p.b.handle_timeout(now);
            for t in [&p.a, &p.b] {
                if let Some(due) = t.poll_timeout() {
                    prop_assert!(due > now, "spins: {due:?} <= {now:?}");
                }
            }
            p.collect();
        }
        p.run();
        p.got_b.clear();
        let pkt = v4(IP_A, IP_B, 99, 9);
        p.send(true, &pkt);
        for _ in 0..40 {
            p.run();
            if p.got_b.contains(&pkt) {
                break;
            }
            p.advance(proto::REKEY_TIMEOUT);
        }
        prop_assert!(p.got_b.contains(&pkt), "A's packet never arrived");
    }
}

#[test]
fn debug_output_never_shows_the_preshared_key() {
    let c = TunnelPeerConfig {
        name: "b".into(),
        public_key: [1; 32],
        endpoint: None,
        allowed_ips: vec![],
        persistent_keepalive: None,
        preshared_key: Some([0xAB; 32]),
    };
    let s = format!("{c:?}");
    assert!(!s.contains("171"), "{s}");
    assert!(s.contains("preshared_key: Some(\"set\")"), "{s}");
}
