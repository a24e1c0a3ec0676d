use std::net::SocketAddr;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::error::DropReason;
use crate::handshake;
use crate::handshake::cookie::{COOKIE_REPLY_LEN, CookieGenerator};
use crate::handshake::ratelimit::LimiterConfig;
use crate::wire::Header;
use sealink_crypto::SuiteId;

const A_ADDR: &str = "192.0.2.1:51820";
const B_ADDR: &str = "192.0.2.2:51820";

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// An IPv4 UDP packet of `total` bytes from `src` to `dst` with a recognisable payload.
fn v4(src: [u8; 4], dst: [u8; 4], total: usize, fill: u8) -> Vec<u8> {
    let mut p = vec![fill; total];
    p[0] = 0x45;
    p[1] = 0;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[9] = 17;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p
}

const IP_A: [u8; 4] = [10, 9, 0, 1];
const IP_B: [u8; 4] = [10, 9, 0, 2];

struct Pair {
    a: Tunnel,
    b: Tunnel,
    now: Time,
    /// Datagrams in flight: (from, to, bytes).
    wire: Vec<(SocketAddr, SocketAddr, Vec<u8>)>,
    /// Packets delivered to each side's TUN.
    got_a: Vec<Vec<u8>>,
    got_b: Vec<Vec<u8>>,
}

fn pair_with(cfg: TunnelConfig) -> Pair {
    pair_keepalive(cfg, None)
}

/// A pair where A keeps B alive every `keepalive` (A knows B's endpoint; B learns A's).
fn pair_keepalive(cfg: TunnelConfig, keepalive: Option<Duration>) -> Pair {
    let ka = HostKey::generate().unwrap();
    let kb = HostKey::generate().unwrap();
    let a = Tunnel::new(
        ka.clone(),
        cfg.clone(),
        vec![TunnelPeerConfig {
            name: "b".into(),
            public_key: *kb.public(),
            endpoint: Some(sa(B_ADDR)),
            allowed_ips: vec!["10.9.0.2/32".parse().unwrap()],
            persistent_keepalive: keepalive,
            preshared_key: None,
        }],
    )
    .unwrap();
    let b = Tunnel::new(
        kb,
        cfg,
        vec![TunnelPeerConfig {
            name: "a".into(),
            public_key: *ka.public(),
            endpoint: None,
            allowed_ips: vec!["10.9.0.1/32".parse().unwrap()],
            persistent_keepalive: None,
            preshared_key: None,
        }],
    )
    .unwrap();
    Pair {
        a,
        b,
        now: Time::from_millis(1_000),
        wire: Vec::new(),
        got_a: Vec::new(),
        got_b: Vec::new(),
    }
}

fn pair() -> Pair {
    pair_with(TunnelConfig::default())
}

impl Pair {
    /// Hands `pkt` to A's (or B's) TUN side; sealed datagrams go on the wire.
    fn send(&mut self, from_a: bool, pkt: &[u8]) -> Encap {
        let (t, me) = if from_a {
            (&mut self.a, sa(A_ADDR))
        } else {
            (&mut self.b, sa(B_ADDR))
        };
        let h = t.config().headroom();
        let mut buf = vec![0u8; h + pkt.len() + 15 + TAILROOM];
        buf[h..h + pkt.len()].copy_from_slice(pkt);
        let r = t.encapsulate(self.now, &mut buf, pkt.len());
        self.collect();
        if let Encap::Sealed { dest, len, .. } = r {
            self.wire.push((me, dest, buf[..len].to_vec()));
        }
        r
    }

    fn collect(&mut self) {
        let mut out = vec![0u8; 2048];
        while let Some((d, n)) = self.a.poll_transmit(&mut out) {
            self.wire.push((sa(A_ADDR), d, out[..n].to_vec()));
        }
        while let Some((d, n)) = self.b.poll_transmit(&mut out) {
            self.wire.push((sa(B_ADDR), d, out[..n].to_vec()));
        }
    }

    /// Delivers one datagram to the side it is addressed to.
    fn deliver(
        &mut self,
        from: SocketAddr,
        to: SocketAddr,
        mut d: Vec<u8>,
    ) -> Result<Decap, TunnelDrop> {
        let (t, got) = if to == sa(A_ADDR) {
            (&mut self.a, &mut self.got_a)
        } else {
            (&mut self.b, &mut self.got_b)
        };
        let mut ranges = Vec::new();
        let r = t.decapsulate(self.now, from, &mut d, &mut ranges);
        for rg in ranges {
            got.push(d[rg].to_vec());
        }
        self.collect();
        r
    }

    /// Delivers everything in flight until the wire is empty.
    fn run(&mut self) {
        for _ in 0..100 {
            if self.wire.is_empty() {
                return;
            }
            for (f, t, d) in std::mem::take(&mut self.wire) {
                let _ = self.deliver(f, t, d);
            }
        }
        panic!("the wire never went quiet");
    }

    fn advance(&mut self, d: Duration) {
        self.now = self.now + d;
        self.a.handle_timeout(self.now);
        self.b.handle_timeout(self.now);
        self.collect();
    }
}

#[path = "wg_tests.rs"]
mod wg_tests;

#[path = "storm_tests.rs"]
mod storm_tests;

#[test]
fn round_trip_through_two_cores() {
    let mut p = pair();
    let first = v4(IP_A, IP_B, 1000, 1);
    assert_eq!(
        p.send(true, &first),
        Encap::Queued,
        "staged until the handshake"
    );
    assert_eq!(p.wire.len(), 1, "one initiation");
    p.run();
    assert_eq!(p.got_b, vec![first]);
    // Established: large packets seal in place, both ways.
    for i in 0..50u8 {
        let pkt = v4(IP_A, IP_B, 1420, i);
        assert!(matches!(p.send(true, &pkt), Encap::Sealed { .. }));
        let back = v4(IP_B, IP_A, 600 + usize::from(i), i);
        assert!(matches!(p.send(false, &back), Encap::Sealed { .. }));
    }
    p.run();
    assert_eq!(p.got_b.len(), 51);
    assert_eq!(p.got_a.len(), 50);
    assert_eq!(p.got_b[50], v4(IP_A, IP_B, 1420, 49));
    let st = &p.a.peer_status(p.now)[0];
    assert!(st.session_up);
    assert_eq!(st.stats.tx_packets, 51);
    assert_eq!(st.stats.rx_packets, 50);
    assert_eq!(st.endpoint, Some(sa(B_ADDR)));
    // B learned A's endpoint from authenticated datagrams.
    assert_eq!(p.b.peer_status(p.now)[0].endpoint, Some(sa(A_ADDR)));
    assert!(p.a.drops().is_empty(), "{:?}", p.a.drops());
    assert!(p.b.drops().is_empty(), "{:?}", p.b.drops());
}

fn established() -> Pair {
    let mut p = pair();
    p.send(true, &v4(IP_A, IP_B, 100, 0));
    p.run();
    p.got_b.clear();
    p
}

#[test]
fn tampered_replayed_and_unknown_are_dropped_and_counted() {
    let mut p = established();
    assert!(matches!(
        p.send(true, &v4(IP_A, IP_B, 1200, 7)),
        Encap::Sealed { .. }
    ));
    let (f, t, d) = p.wire.pop().unwrap();
    for i in [0usize, 4, 9, 16, 40, d.len() - 1] {
        let mut bad = d.clone();
        bad[i] ^= 0x20;
        assert!(p.deliver(f, t, bad).is_err(), "tampered byte {i} accepted");
    }
    assert_eq!(p.deliver(f, t, d.clone()), Ok(Decap::Data(PeerIndex(0))));
    assert_eq!(
        p.deliver(f, t, d.clone()),
        Err(TunnelDrop::Proto(DropReason::Replayed))
    );
    assert_eq!(p.got_b.len(), 1, "only the genuine datagram delivered");
    assert_eq!(p.b.drop_count(DropReason::Replayed.into()), 1);
    assert!(p.b.drop_count(DropReason::AuthFailed.into()) >= 3);
    let mut unknown = d.clone();
    unknown[4..8].copy_from_slice(&0xdead_beefu32.to_le_bytes());
    assert_eq!(
        p.deliver(f, t, unknown),
        Err(TunnelDrop::Proto(DropReason::UnknownIndex))
    );
    assert_eq!(
        p.deliver(f, t, vec![1, 3, 0]),
        Err(TunnelDrop::Proto(DropReason::MalformedHeader))
    );
}

/// The kernel's own traffic on the TUN (router solicitations, MLD and IGMP
/// reports) is counted as `link-local`, apart from packets misrouted into the tunnel.
#[test]
fn link_scoped_packets_are_counted_apart_from_no_route() {
    let mut p = established();
    // A router solicitation: fe80::1 -> ff02::2, ICMPv6 type 133, 8 bytes of payload.
    let mut rs = vec![0u8; 48];
    rs[0] = 0x60;
    rs[4..6].copy_from_slice(&8u16.to_be_bytes());
    rs[6] = 58;
    rs[7] = 255;
    rs[8] = 0xfe;
    rs[9] = 0x80;
    rs[23] = 1;
    rs[24] = 0xff;
    rs[25] = 0x02;
    rs[39] = 2;
    rs[40] = 133;
    assert_eq!(p.send(true, &rs), Encap::Dropped(TunnelDrop::LinkLocal));
    assert_eq!(
        p.send(true, &v4(IP_A, [224, 0, 0, 22], 40, 0)),
        Encap::Dropped(TunnelDrop::LinkLocal)
    );
    assert_eq!(p.a.drop_count(TunnelDrop::LinkLocal), 2);
    assert_eq!(p.a.drop_count(TunnelDrop::NoRoute), 0);
    assert!(
        p.a.drops().contains(&("link-local", 2)),
        "{:?}",
        p.a.drops()
    );
    // An ordinary address outside every allowed IP is still no-route.
    assert_eq!(
        p.send(true, &v4(IP_A, [10, 9, 0, 77], 40, 0)),
        Encap::Dropped(TunnelDrop::NoRoute)
    );
}

#[test]
fn allowed_ips_both_ways() {
    let mut p = established();
    // Outgoing: a destination outside every peer's allowed IPs.
    assert_eq!(
        p.send(true, &v4(IP_A, [10, 9, 0, 99], 500, 0)),
        Encap::Dropped(TunnelDrop::NoRoute)
    );
    assert_eq!(p.a.drop_count(TunnelDrop::NoRoute), 1);
    // Incoming: A's host sends with a spoofed source; B refuses it after opening it.
    assert!(matches!(
        p.send(true, &v4([10, 9, 0, 50], IP_B, 500, 0)),
        Encap::Sealed { .. }
    ));
    p.run();
    assert!(p.got_b.is_empty());
    assert_eq!(p.b.drop_count(TunnelDrop::SourceNotAllowed), 1);
    // Not an IP packet at all.
    assert_eq!(
        p.send(true, &[0x99; 40]),
        Encap::Dropped(TunnelDrop::MalformedPacket)
    );
}

#[test]
fn small_packets_ride_together_until_the_deadline() {
    let mut p = established();
    for i in 0..5 {
        assert_eq!(p.send(true, &v4(IP_A, IP_B, 60, i)), Encap::Queued);
    }
    assert!(p.wire.is_empty(), "small packets wait");
    let deadline = p.a.poll_timeout().unwrap();
    assert_eq!(deadline, p.now + Duration::from_micros(200));
    p.advance(Duration::from_micros(199));
    assert!(p.wire.is_empty(), "not before the deadline");
    p.advance(Duration::from_micros(1));
    assert_eq!(p.wire.len(), 1, "one datagram for all five");
    p.run();
    assert_eq!(p.got_b.len(), 5);
    assert_eq!(p.got_b[4], v4(IP_A, IP_B, 60, 4));
    assert_eq!(p.a.peer_status(p.now)[0].stats.piggybacked, 5);
}

#[test]
fn a_large_packet_flushes_the_queue_ahead_of_itself() {
    let mut p = established();
    p.send(true, &v4(IP_A, IP_B, 80, 1));
    p.send(true, &v4(IP_A, IP_B, 80, 2));
    assert!(matches!(
        p.send(true, &v4(IP_A, IP_B, 1400, 3)),
        Encap::Sealed { .. }
    ));
    assert_eq!(p.wire.len(), 2, "queue and the large packet, at once");
    assert_eq!(p.a.poll_timeout(), None, "nothing left waiting");
    p.run();
    let fills: Vec<u8> = p.got_b.iter().map(|x| x[30]).collect();
    assert_eq!(fills, vec![1, 2, 3], "order kept");
}

#[test]
fn urgent_small_packets_do_not_wait() {
    let mut p = established();
    p.send(true, &v4(IP_A, IP_B, 60, 1));
    let mut ef = v4(IP_A, IP_B, 60, 2);
    ef[1] = 46 << 2; // DSCP EF
    assert!(matches!(p.send(true, &ef), Encap::Sealed { .. }));
    assert_eq!(
        p.wire.len(),
        2,
        "the queue went first, the urgent packet at once"
    );
    p.run();
    assert_eq!(p.got_b.len(), 2);
    let mut v6 = vec![0u8; 40];
    v6[0] = 0x60 | (46 >> 2);
    v6[1] = (46 & 3) << 6;
    assert!(ip::is_urgent(&v6));
    assert!(!ip::is_urgent(&v4(IP_A, IP_B, 60, 0)));
}

#[test]
fn queue_limit_flushes_without_waiting() {
    let mut p = established_with_queue_limit(500);
    for i in 0..4 {
        p.send(true, &v4(IP_A, IP_B, 200, i));
    }
    // 202 + 202 fit in 500; the third flushes the first two; the fourth joins the third.
    assert_eq!(p.wire.len(), 1);
    p.run();
    assert_eq!(p.got_b.len(), 2);
    p.advance(Duration::from_micros(200));
    p.run();
    assert_eq!(p.got_b.len(), 4);
}

#[test]
fn piggybacking_off_sends_every_packet_at_once() {
    let mut cfg = TunnelConfig::default();
    cfg.piggyback.enabled = false;
    let mut p = pair_with(cfg);
    p.send(true, &v4(IP_A, IP_B, 100, 0));
    p.run();
    assert!(matches!(
        p.send(true, &v4(IP_A, IP_B, 60, 0)),
        Encap::Sealed { .. }
    ));
}

/// A's first initiation to B is lost; the retry a second later brings the staged packet.
fn first_initiation_lost_then_retried() -> Pair {
    let mut p = pair();
    p.send(true, &v4(IP_A, IP_B, 300, 0));
    assert_eq!(p.wire.len(), 1);
    p.wire.clear();
    assert_eq!(p.a.poll_timeout(), Some(p.now + Duration::from_secs(1)));
    p.advance(Duration::from_secs(1));
    assert_eq!(p.wire.len(), 1, "retried");
    p.run();
    assert_eq!(
        p.got_b.len(),
        1,
        "the staged packet arrives after the retry"
    );
    p
}

#[test]
fn handshake_is_retried_then_abandoned() {
    first_initiation_lost_then_retried();

    let mut q = pair();
    q.send(true, &v4(IP_A, IP_B, 300, 0));
    for _ in 0..25 {
        q.wire.clear();
        q.advance(Duration::from_secs(1));
    }
    assert_eq!(q.a.drop_count(TunnelDrop::HandshakeTimeout), 1);
    assert_eq!(q.a.peer_status(q.now)[0].stats.handshakes_initiated, 20);
    assert_eq!(q.a.poll_timeout(), None);
}

#[test]
fn rekey_after_time_keeps_traffic_flowing() {
    let mut p = established();
    p.now = p.now + Duration::from_secs(121);
    assert!(matches!(
        p.send(true, &v4(IP_A, IP_B, 1000, 1)),
        Encap::Sealed { .. }
    ));
    assert_eq!(p.wire.len(), 2, "a new initiation rides beside the data");
    p.run();
    assert_eq!(p.got_b.len(), 1);
    assert_eq!(p.a.peer_status(p.now)[0].stats.handshakes_completed, 2);
    // Both sides now use the new session; B sends back on it.
    assert!(matches!(
        p.send(false, &v4(IP_B, IP_A, 1000, 2)),
        Encap::Sealed { .. }
    ));
    p.run();
    assert_eq!(p.got_a.len(), 1);
    // Past the reject time without a rekey, nothing is sent on the old keys.
    p.now = p.now + Duration::from_secs(200);
    assert_eq!(p.send(true, &v4(IP_A, IP_B, 1000, 3)), Encap::Queued);
    p.run();
    assert_eq!(p.got_b.len(), 2);
}

/// Handshakes each side has initiated (also for `wg_tests`).
fn initiated(p: &Pair) -> (u64, u64) {
    (
        p.a.peer_status(p.now)[0].stats.handshakes_initiated,
        p.b.peer_status(p.now)[0].stats.handshakes_initiated,
    )
}

/// On sealink's wire too, REKEY_AFTER_TIME makes only the side that initiated the session start
/// a handshake: sessions made together would otherwise have both ends' initiations cross.
#[test]
fn only_the_initiator_rekeys_after_rekey_after_time() {
    let mut p = established(); // A initiated
    assert_eq!(initiated(&p), (1, 0));
    p.now = p.now + Duration::from_secs(121);
    p.wire.clear();
    assert!(matches!(
        p.send(false, &v4(IP_B, IP_A, 1000, 1)),
        Encap::Sealed { .. }
    ));
    assert_eq!(
        p.wire.len(),
        1,
        "the responder sent its data and no initiation"
    );
    p.run();
    assert_eq!(initiated(&p), (1, 0));
    assert_eq!(p.got_a.len(), 1, "sent on the old session");
    assert!(matches!(
        p.send(true, &v4(IP_A, IP_B, 1000, 2)),
        Encap::Sealed { .. }
    ));
    assert_eq!(p.wire.len(), 2, "the initiator's data and its initiation");
    p.run();
    assert_eq!(initiated(&p), (2, 0));
    assert_eq!(p.a.peer_status(p.now)[0].stats.handshakes_completed, 2);
    assert!(p.a.drops().is_empty(), "{:?}", p.a.drops());
    assert!(p.b.drops().is_empty(), "{:?}", p.b.drops());
}

/// A flow only the responder sends on: the responder rekeys by time once its session is within
/// RESPONDER_REKEY_MARGIN of REJECT_AFTER_TIME (165 s), before the session is refused, and the
/// data never stops.
#[test]
fn a_responder_only_flow_rekeys_before_its_session_is_rejected() {
    let mut p = established(); // A initiated
    let limits = p.a.config().limits;
    let last_minute = limits.reject_after_time - RESPONDER_REKEY_MARGIN;
    // The initiator, only receiving, never rekeys.
    let at = responder_only_flow(&mut p, 1000, 1).expect("the responder never rekeyed");
    assert!(
        at >= last_minute && at < limits.reject_after_time,
        "rekeyed at {at:?}"
    );
    // The new session is B's own: B rekeys it at REKEY_AFTER_TIME (120 s after about 170 s),
    // so 300 s in it has started exactly two.
    assert_eq!(initiated(&p).1, 2);
}

/// Thirty rounds, ten seconds apart, of a flow only B (the responder) sends on, packets of
/// `len` bytes. Watches the handshakes side `rekeyer` starts (0: A, 1: B) and checks the other
/// side starts none; checks every packet arrived and nothing was dropped. Returns when, from the
/// start, `rekeyer` first started one (also for `wg_tests`).
fn responder_only_flow(p: &mut Pair, len: usize, rekeyer: usize) -> Option<Duration> {
    let count = |p: &Pair| {
        let (a, b) = initiated(p);
        if rekeyer == 0 { (a, b) } else { (b, a) }
    };
    let (start, other) = (p.now, count(p).1);
    let mut first = None;
    for i in 1..=30u8 {
        p.advance(Duration::from_secs(10));
        p.run();
        let before = count(p).0;
        assert!(
            matches!(p.send(false, &v4(IP_B, IP_A, len, i)), Encap::Sealed { .. }),
            "round {i}"
        );
        p.run();
        if count(p).0 > before && first.is_none() {
            first = Some(p.now.saturating_since(start));
        }
        assert_eq!(
            count(p).1,
            other,
            "round {i}: the other side started a handshake"
        );
    }
    assert_eq!(p.got_a.len(), 30, "every packet arrived");
    assert!(p.a.drops().is_empty(), "{:?}", p.a.drops());
    assert!(p.b.drops().is_empty(), "{:?}", p.b.drops());
    first
}

/// REKEY_AFTER_MESSAGES still rekeys from either end, the responder's included.
#[test]
fn a_rekey_by_message_count_starts_from_either_end() {
    let mut cfg = TunnelConfig::default();
    cfg.limits.rekey_after_messages = 8;
    for from_a in [true, false] {
        let mut p = pair_with(cfg.clone());
        p.send(true, &v4(IP_A, IP_B, 100, 0));
        p.run();
        assert_eq!(initiated(&p), (1, 0));
        let (src, dst) = if from_a { (IP_A, IP_B) } else { (IP_B, IP_A) };
        for i in 0..10u8 {
            assert!(matches!(
                p.send(from_a, &v4(src, dst, 1000, i)),
                Encap::Sealed { .. }
            ));
            p.run();
        }
        let (a, b) = initiated(&p);
        if from_a {
            assert_eq!((a, b), (2, 0), "the initiator rekeyed by count");
        } else {
            assert_eq!((a, b), (1, 1), "the responder rekeyed by count");
        }
        assert_eq!(p.a.peer_status(p.now)[0].stats.handshakes_completed, 2);
        assert_eq!(p.got_a.len() + p.got_b.len(), 11, "every packet arrived");
        assert!(p.a.drops().is_empty(), "{:?}", p.a.drops());
        assert!(p.b.drops().is_empty(), "{:?}", p.b.drops());
    }
}

/// Seals `pkt` from A on the split path, marked `lane`; returns the datagram (not yet sent).
fn seal_on_lane(p: &mut Pair, pkt: &[u8], lane: u8) -> Vec<u8> {
    let h = p.a.config().headroom();
    let mut buf = vec![0u8; h + pkt.len() + 15 + TAILROOM];
    buf[h..h + pkt.len()].copy_from_slice(pkt);
    let Reserve::Seal { peer, job, .. } = p.a.encapsulate_reserve(p.now, &mut buf, pkt.len())
    else {
        panic!("a large packet on a live session seals at once");
    };
    let len = job.seal_on_lane(&mut buf, lane).unwrap();
    p.a.sent(p.now, peer, 1);
    buf.truncate(len);
    buf
}

fn lanes_of(t: &Tunnel, now: Time) -> bool {
    t.peer_status(now)[0].lanes
}

/// Both ends know lanes (the default): the handshake agrees on them, and a datagram sealed on
/// a lane carries it in the header's byte 3, authenticated with the rest of the header.
#[test]
fn lanes_are_agreed_and_each_datagram_carries_its_lane() {
    let mut p = established();
    assert!(lanes_of(&p.a, p.now) && lanes_of(&p.b, p.now));
    for lane in [1u8, 7, 255] {
        let d = seal_on_lane(&mut p, &v4(IP_A, IP_B, 1200, lane), lane);
        assert_eq!(d[crate::wire::LANE_OFFSET], lane);
        let mut bent = d.clone();
        bent[crate::wire::LANE_OFFSET] ^= 0x40;
        assert_eq!(
            p.deliver(sa(A_ADDR), sa(B_ADDR), bent),
            Err(TunnelDrop::Proto(DropReason::AuthFailed)),
            "the lane byte is authenticated"
        );
        assert_eq!(
            p.deliver(sa(A_ADDR), sa(B_ADDR), d),
            Ok(Decap::Data(PeerIndex(0)))
        );
    }
    assert_eq!(p.got_b.len(), 3);
}

/// Either end with lanes off: none are agreed, and a lane asked of the seal is not written.
#[test]
fn lanes_off_on_either_side_keeps_byte_3_zero() {
    for off_on_a in [true, false] {
        let mut p = pair();
        if off_on_a {
            p.a.cfg.lanes = false;
        } else {
            p.b.cfg.lanes = false;
        }
        p.send(true, &v4(IP_A, IP_B, 100, 0));
        p.run();
        assert_eq!(p.got_b.len(), 1);
        assert!(!lanes_of(&p.a, p.now) && !lanes_of(&p.b, p.now));
        let d = seal_on_lane(&mut p, &v4(IP_A, IP_B, 1200, 1), 9);
        assert_eq!(d[crate::wire::LANE_OFFSET], 0);
        assert!(p.deliver(sa(A_ADDR), sa(B_ADDR), d).is_ok());
    }
}

/// An older responder refuses an initiation that offers lanes, silently. The retry offers
/// none and is answered; later initiations to that peer offer none either, until the peer
/// offers lanes itself.
#[test]
fn a_peer_that_ignores_the_lanes_offer_is_reached_by_the_retry_without_it() {
    // The first initiation (the offer) goes unanswered, as an older responder leaves it.
    let mut p = first_initiation_lost_then_retried();
    // B would have agreed: that it did not shows the retry offered nothing.
    assert!(!lanes_of(&p.a, p.now) && !lanes_of(&p.b, p.now));
    assert!(p.a.peers[0].no_lanes);
    // The rekey offers none either (answered at once, no retry needed).
    p.now = p.now + Duration::from_secs(121);
    p.send(true, &v4(IP_A, IP_B, 1000, 1));
    p.run();
    p.send(false, &v4(IP_B, IP_A, 1000, 2));
    p.run();
    assert_eq!(p.a.peer_status(p.now)[0].stats.handshakes_completed, 2);
    assert!(!lanes_of(&p.a, p.now) && !lanes_of(&p.b, p.now));
    // B offers lanes itself: A takes it for a peer that knows them again.
    p.b.start_handshake(0, p.now, 1);
    p.collect();
    p.run();
    p.send(false, &v4(IP_B, IP_A, 1000, 3));
    p.run();
    p.send(true, &v4(IP_A, IP_B, 1000, 4));
    p.run();
    assert!(!p.a.peers[0].no_lanes);
    assert!(lanes_of(&p.a, p.now) && lanes_of(&p.b, p.now));
}

#[test]
fn roaming_updates_the_endpoint() {
    let mut p = established();
    p.send(false, &v4(IP_B, IP_A, 1000, 1));
    let (_, to, d) = p.wire.pop().unwrap();
    let roamed = sa("198.51.100.7:4000");
    assert!(p.deliver(roamed, to, d).is_ok());
    assert_eq!(p.a.peer_status(p.now)[0].endpoint, Some(roamed));
    // An unauthenticated datagram from elsewhere does not move it.
    p.send(false, &v4(IP_B, IP_A, 1000, 2));
    let (_, to, mut d) = p.wire.pop().unwrap();
    d[30] ^= 1;
    assert!(p.deliver(sa("203.0.113.9:1"), to, d).is_err());
    assert_eq!(p.a.peer_status(p.now)[0].endpoint, Some(roamed));
}

#[test]
fn initiation_flood_gets_cookies_and_replays_are_stale() {
    let mut p = pair();
    p.send(true, &v4(IP_A, IP_B, 300, 0));
    let (f, t, init) = p.wire.pop().unwrap();
    assert!(p.deliver(f, t, init.clone()).is_ok());
    assert_eq!(
        p.deliver(f, t, init.clone()),
        Err(TunnelDrop::Proto(DropReason::StaleHandshake))
    );
    p.wire.clear();
    for _ in 0..100 {
        let _ = p.deliver(f, t, init.clone());
    }
    // Past the source's burst the replays (valid mac1, no mac2) are answered with cookies,
    // not processed.
    let cookies = p.b.drop_count(DropReason::CookieRequired.into());
    assert!(cookies > 50, "{:?}", p.b.drops());
    let replies = p
        .wire
        .iter()
        .filter(|(_, to, d)| *to == f && d.len() == COOKIE_REPLY_LEN)
        .count();
    assert_eq!(replies as u64, cookies);
}

#[test]
fn config_is_validated() {
    let mut c = TunnelConfig::default();
    c.piggyback.small = 1500;
    assert!(c.validate().is_err());
    let mut c = TunnelConfig::default();
    c.piggyback.queue_limit = 5000;
    assert!(c.validate().is_err());
    let c = TunnelConfig {
        mtu: 100,
        ..TunnelConfig::default()
    };
    assert!(c.validate().is_err());
    assert!(TunnelConfig::default().validate().is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random bytes, and valid datagrams with random bytes changed, never panic and are never
    /// delivered unless unchanged.
    #[test]
    fn forged_datagrams_are_never_delivered(
        junk in proptest::collection::vec(any::<u8>(), 0..200),
        flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..4),
        sizes in proptest::collection::vec(20usize..1420, 1..6),
    ) {
        let mut p = established();
        let _ = p.deliver(sa(A_ADDR), sa(B_ADDR), junk);
        prop_assert!(p.got_b.is_empty());
        for (i, s) in sizes.iter().enumerate() {
            p.send(true, &v4(IP_A, IP_B, *s, i as u8));
        }
        p.advance(Duration::from_millis(1));
        let sent = std::mem::take(&mut p.wire);
        for (f, t, d) in &sent {
            let mut bad = d.clone();
            for (at, x) in &flips {
                let n = bad.len();
                bad[at % n] ^= x;
            }
            prop_assert!(p.deliver(*f, *t, bad).is_err());
        }
        prop_assert!(p.got_b.is_empty());
        for (f, t, d) in sent {
            prop_assert!(p.deliver(f, t, d).is_ok());
        }
        prop_assert_eq!(p.got_b.len(), sizes.len());
    }
}

#[test]
fn autocork_idle_link_sends_small_packets_at_the_end_of_the_batch() {
    let mut p = established();
    p.a.take_timer_hint(); // the handshake's
    assert_eq!(p.send(true, &v4(IP_A, IP_B, 60, 1)), Encap::Queued);
    assert!(p.wire.is_empty(), "queued within the batch");
    p.a.end_batch(p.now);
    p.collect();
    assert_eq!(
        p.wire.len(),
        1,
        "nothing in flight: leaves at once, no timer"
    );
    assert_eq!(p.a.poll_timeout(), None);
    assert!(
        !p.a.take_timer_hint(),
        "the queue already left: the driver's timer needs no wake-up"
    );
    p.run();
    assert_eq!(p.got_b, vec![v4(IP_A, IP_B, 60, 1)]);
}

#[test]
fn timer_hint_asks_for_a_wake_up_only_while_a_deadline_waits() {
    let mut p = established();
    p.a.take_timer_hint(); // the handshake's
    assert!(!p.a.take_timer_hint());
    // A large packet in flight keeps the small one queued past the batch: its deadline waits.
    let big = v4(IP_A, IP_B, 1200, 9);
    let mut buf = vec![0u8; HEADROOM + big.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + big.len()].copy_from_slice(&big);
    assert!(matches!(
        p.a.encapsulate_reserve(p.now, &mut buf, big.len()),
        Reserve::Seal { .. }
    ));
    assert_eq!(p.send(true, &v4(IP_A, IP_B, 60, 1)), Encap::Queued);
    p.a.end_batch(p.now);
    assert!(p.a.poll_timeout().is_some());
    assert!(p.a.take_timer_hint(), "a queue waits");
    assert!(!p.a.take_timer_hint(), "the hint is taken once");
    // The first packet to a peer without a session starts a handshake: its retry deadline.
    let mut q = pair_with(TunnelConfig::default());
    assert_eq!(q.send(true, &v4(IP_A, IP_B, 100, 0)), Encap::Queued);
    assert!(
        q.a.take_timer_hint(),
        "the first packet started a handshake"
    );
}

#[test]
fn autocork_small_packets_wait_while_a_send_is_in_flight() {
    let mut p = established();
    // A large packet reserved (sealed elsewhere) and not yet reported sent.
    let big = v4(IP_A, IP_B, 1200, 9);
    let mut buf = vec![0u8; HEADROOM + big.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + big.len()].copy_from_slice(&big);
    let Reserve::Seal { peer, dest, job } = p.a.encapsulate_reserve(p.now, &mut buf, big.len())
    else {
        panic!("a session is up");
    };
    for i in 0..3 {
        assert_eq!(p.send(true, &v4(IP_A, IP_B, 60, i)), Encap::Queued);
    }
    p.a.end_batch(p.now);
    p.collect();
    assert!(
        p.wire.is_empty(),
        "the peer is busy: the small packets ride later"
    );
    let len = job.seal(&mut buf).unwrap();
    p.wire.push((sa(A_ADDR), dest, buf[..len].to_vec()));
    p.a.sent(p.now, peer, 1);
    p.collect();
    assert_eq!(
        p.wire.len(),
        2,
        "the send completed: the queue leaves as one datagram"
    );
    p.run();
    let fills: Vec<u8> = p.got_b.iter().map(|x| x[30]).collect();
    assert_eq!(fills, vec![9, 0, 1, 2]);
}

#[test]
fn timer_mode_ignores_batch_ends() {
    let mut cfg = TunnelConfig::default();
    cfg.piggyback.mode = PiggybackMode::Timer;
    let mut p = pair_with(cfg);
    p.send(true, &v4(IP_A, IP_B, 100, 0));
    p.run();
    p.send(true, &v4(IP_A, IP_B, 60, 1));
    p.a.end_batch(p.now);
    p.collect();
    assert!(p.wire.is_empty(), "the explicit policy waits for max_delay");
    p.advance(Duration::from_micros(200));
    assert_eq!(p.wire.len(), 1);
}

#[test]
fn split_receive_refuses_a_duplicate_opened_in_parallel() {
    let mut p = established();
    let Encap::Sealed { .. } = p.send(true, &v4(IP_A, IP_B, 500, 3)) else {
        panic!("sealed");
    };
    let (from, _, d) = p.wire.pop().unwrap();
    // Two copies pass the replay check before either is recorded (opened on two workers).
    let mut c1 = d.clone();
    let mut c2 = d;
    let DecapReserve::Open(j1) = p.b.decapsulate_reserve(p.now, from, &c1).unwrap() else {
        panic!("data");
    };
    let DecapReserve::Open(j2) = p.b.decapsulate_reserve(p.now, from, &c2).unwrap() else {
        panic!("data");
    };
    let o1 = j1.open(&mut c1);
    let o2 = j2.open(&mut c2);
    let mut ranges = Vec::new();
    assert!(
        p.b.decapsulate_finish(p.now, from, &j1, o1, &c1, &mut ranges)
            .is_ok()
    );
    assert_eq!(ranges.len(), 1);
    assert_eq!(
        p.b.decapsulate_finish(p.now, from, &j2, o2, &c2, &mut ranges),
        Err(TunnelDrop::Proto(DropReason::Replayed))
    );
    assert_eq!(ranges.len(), 1, "nothing delivered twice");
}

/// A spoofed initiation: a well-formed header and the right length, random contents.
fn junk_init(seed: u8) -> Vec<u8> {
    let mut d: Vec<u8> = (0..handshake::INIT_LEN)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    let mut h = [0u8; HEADER_LEN];
    crate::wire::write_header(
        &Header::Init {
            sender: u32::from(seed),
        },
        &mut h,
    );
    d[..HEADER_LEN].copy_from_slice(&h);
    d
}

#[test]
fn spoofed_junk_initiations_do_not_block_the_peers_handshake() {
    let mut p = pair();
    // 200 junk initiations carrying A's address (more than its burst), then A's real one.
    for i in 0..200u32 {
        let _ = p.deliver(sa(A_ADDR), sa(B_ADDR), junk_init(i as u8));
    }
    p.wire.clear();
    p.send(true, &v4(IP_A, IP_B, 300, 1));
    p.run();
    assert_eq!(p.got_b.len(), 1, "drops at B: {:?}", p.b.drops());
    assert!(p.a.peer_status(p.now)[0].session_up);
}

/// `junk_init` with a valid mac1 for `responder`: what a flooder who knows the responder's public
/// key can make (no mac2: it cannot receive the cookies sent to the address it spoofs).
fn junk_init_mac1(seed: u8, responder: &[u8; 32]) -> Vec<u8> {
    let mut d = junk_init(seed);
    CookieGenerator::new(responder).add_macs(Time::ZERO, &mut d);
    d
}

#[test]
fn bad_mac1_initiations_are_counted_and_take_no_tokens() {
    let mut p = pair();
    for i in 0..200u32 {
        assert_eq!(
            p.deliver(sa(A_ADDR), sa(B_ADDR), junk_init(i as u8)),
            Err(TunnelDrop::Proto(DropReason::BadMac1))
        );
    }
    assert_eq!(p.b.drop_count(DropReason::BadMac1.into()), 200);
    assert_eq!(p.b.drop_count(DropReason::RateLimited.into()), 0);
    assert_eq!(p.b.drop_count(DropReason::HandshakeFailed.into()), 0);
    // A real initiation sealed for another host fails mac1 too.
    let kc = HostKey::generate().unwrap();
    let mut g = CookieGenerator::new(kc.public());
    let mut wrong = junk_init(1);
    g.add_macs(p.now, &mut wrong);
    assert_eq!(
        p.deliver(sa(A_ADDR), sa(B_ADDR), wrong),
        Err(TunnelDrop::Proto(DropReason::BadMac1))
    );
}

#[test]
fn under_load_the_peer_gets_a_cookie_and_its_retry_with_mac2_succeeds() {
    let mut p = pair();
    let b_pub = p.a.peer_status(p.now)[0].public_key;
    // A flooder who knows B's key spoofs A's address: valid mac1, junk body, far past A's burst.
    for i in 0..100u32 {
        let _ = p.deliver(sa(A_ADDR), sa(B_ADDR), junk_init_mac1(i as u8, &b_pub));
    }
    assert!(p.b.drop_count(DropReason::CookieRequired.into()) > 50);
    // The cookie replies went to A's address, bound to the flooder's mac1s: A refuses them.
    let spoof_replies = std::mem::take(&mut p.wire);
    for (f, t, d) in spoof_replies {
        assert_eq!(
            p.deliver(f, t, d),
            Err(TunnelDrop::Proto(DropReason::BadCookieReply))
        );
    }
    let cookies_before = p.b.drop_count(DropReason::CookieRequired.into());
    p.send(true, &v4(IP_A, IP_B, 300, 1));
    p.run();
    assert_eq!(
        p.b.drop_count(DropReason::CookieRequired.into()),
        cookies_before + 1,
        "the first initiation got a cookie"
    );
    assert_eq!(p.got_b.len(), 1, "drops at B: {:?}", p.b.drops());
    let st = &p.a.peer_status(p.now)[0];
    assert!(st.session_up);
    assert_eq!(
        st.stats.handshakes_initiated, 1,
        "the same initiation, sent again"
    );
}

#[test]
fn a_cookie_from_one_address_is_worthless_from_another() {
    let cfg = TunnelConfig {
        limiter: LimiterConfig {
            per_source_per_sec: 1,
            per_source_burst: 1,
            ..LimiterConfig::default()
        },
        ..TunnelConfig::default()
    };
    let mut p = pair_with(cfg);
    let b_pub = p.a.peer_status(p.now)[0].public_key;
    let other = sa("198.51.100.9:51820");
    let other_port = sa("192.0.2.1:40000");
    // Both A's address and the other ones are under load.
    for from in [sa(A_ADDR), other, other_port] {
        for i in 0..3u8 {
            let _ = p.deliver(from, sa(B_ADDR), junk_init_mac1(i, &b_pub));
        }
    }
    p.wire.clear();
    p.send(true, &v4(IP_A, IP_B, 300, 1));
    let (f, t, init) = p.wire.pop().unwrap();
    assert_eq!(
        p.deliver(f, t, init),
        Err(TunnelDrop::Proto(DropReason::CookieRequired))
    );
    let (f, t, reply) = p.wire.pop().unwrap();
    assert_eq!(reply.len(), COOKIE_REPLY_LEN);
    assert!(p.deliver(f, t, reply).is_ok());
    // A sent its initiation again, now with mac2 for A's address.
    let (_, t, retry) = p.wire.pop().unwrap();
    assert!(p.wire.is_empty());
    for from in [other, other_port] {
        assert_eq!(
            p.deliver(from, t, retry.clone()),
            Err(TunnelDrop::Proto(DropReason::CookieRequired)),
            "{from}"
        );
    }
    p.wire.clear();
    assert!(p.deliver(sa(A_ADDR), t, retry).is_ok());
    p.run();
    assert_eq!(p.got_b.len(), 1);
}

#[test]
fn degenerate_peer_keys_are_refused() {
    let host = HostKey::generate().unwrap();
    for key in [[0u8; 32], {
        let mut k = [0u8; 32];
        k[0] = 1;
        k
    }] {
        let r = Tunnel::new(
            host.clone(),
            TunnelConfig::default(),
            vec![TunnelPeerConfig {
                name: "zero".into(),
                public_key: key,
                endpoint: Some(sa(B_ADDR)),
                allowed_ips: vec!["10.9.0.2/32".parse().unwrap()],
                persistent_keepalive: None,
                preshared_key: None,
            }],
        );
        assert!(matches!(r, Err(crate::Error::Config(_))), "{key:02x?}");
    }
    // An initiator claiming the all-zero static key, with valid MACs, does no harm either.
    let mut p = pair();
    let b_pub = p.a.peer_status(p.now)[0].public_key;
    let forged = handshake::tests::forged_init(&b_pub, [0; 32], TUNNEL_PROLOGUE, 7, 1, p.now);
    assert_eq!(
        p.deliver(sa(A_ADDR), sa(B_ADDR), forged),
        Err(TunnelDrop::Proto(DropReason::DegenerateKey))
    );
    assert!(p.wire.is_empty());
}

#[test]
fn a_local_seal_failure_is_typed_and_counted_as_seal_failed() {
    let mut p = established();
    let pkt = v4(IP_A, IP_B, 1200, 3);
    let mut buf = vec![0u8; HEADROOM + pkt.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + pkt.len()].copy_from_slice(&pkt);
    let Reserve::Seal { job, .. } = p.a.encapsulate_reserve(p.now, &mut buf, pkt.len()) else {
        panic!("a session is up");
    };
    // No room for the header, then no room for the tag: local faults, typed as such.
    assert_eq!(
        job.seal(&mut buf[..4]),
        Err(crate::datapath::SealError::NoHeaderRoom(4))
    );
    assert!(matches!(
        job.seal(&mut buf[..HEADROOM + pkt.len()]),
        Err(crate::datapath::SealError::Crypto(_))
    ));
    // The driver reports the failed slots: counted as seal-failed, not as a network drop.
    p.a.seal_failed(2);
    assert_eq!(p.a.drop_count(TunnelDrop::SealFailed), 2);
    assert_eq!(p.a.drop_count(DropReason::MalformedHeader.into()), 0);
    assert!(p.a.drops().contains(&("seal-failed", 2)));
}

/// Datagrams on the wire from A, taken off it.
fn take_from_a(p: &mut Pair) -> Vec<(SocketAddr, SocketAddr, Vec<u8>)> {
    let (a, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut p.wire)
        .into_iter()
        .partition(|(f, _, _)| *f == sa(A_ADDR));
    p.wire = rest;
    a
}

#[test]
fn persistent_keepalive_leaves_after_the_interval_without_sends() {
    let every = Duration::from_secs(25);
    let mut p = pair_keepalive(TunnelConfig::default(), Some(every));
    p.send(true, &v4(IP_A, IP_B, 100, 0));
    p.run();
    p.got_b.clear();
    // A's last send was its keepalive confirming the session (now): due 25 s later.
    assert_eq!(p.a.poll_timeout(), Some(p.now + every));
    p.advance(Duration::from_secs(24));
    assert!(take_from_a(&mut p).is_empty(), "early keepalive");
    p.advance(Duration::from_secs(1));
    let out = take_from_a(&mut p);
    assert_eq!(out.len(), 1, "one keepalive");
    let (f, t, d) = out.into_iter().next().unwrap();
    assert_eq!(t, sa(B_ADDR));
    // B opens it as data with no packets.
    assert!(matches!(p.deliver(f, t, d), Ok(Decap::Data(_))));
    assert!(p.got_b.is_empty());
    assert!(p.b.drops().is_empty(), "{:?}", p.b.drops());
    assert_eq!(p.a.peer_status(p.now)[0].stats.keepalives, 1);
    // A data packet restarts the interval; what A receives does not.
    p.advance(Duration::from_secs(10));
    assert!(matches!(
        p.send(true, &v4(IP_A, IP_B, 1200, 1)),
        Encap::Sealed { .. }
    ));
    let sent_at = p.now;
    p.run();
    p.advance(Duration::from_secs(20));
    p.send(false, &v4(IP_B, IP_A, 1200, 2));
    p.run();
    p.advance(Duration::from_secs(4));
    assert!(
        take_from_a(&mut p).is_empty(),
        "keepalive before 25 s of quiet"
    );
    assert_eq!(p.a.poll_timeout(), Some(sent_at + every));
    p.advance(Duration::from_secs(1));
    assert_eq!(take_from_a(&mut p).len(), 1);
    assert_eq!(p.a.peer_status(p.now)[0].stats.keepalives, 2);
}

#[test]
fn persistent_keepalive_off_sends_nothing_when_idle() {
    let mut p = established();
    p.wire.clear();
    for _ in 0..20 {
        p.advance(Duration::from_secs(30));
    }
    assert!(
        p.wire.is_empty(),
        "an idle tunnel without keepalive stays quiet"
    );
    assert_eq!(p.a.poll_timeout(), None);
}

#[test]
fn persistent_keepalive_without_a_session_starts_a_handshake_and_never_spins() {
    let every = Duration::from_secs(5);
    let mut p = pair_keepalive(TunnelConfig::default(), Some(every));
    // Due at once, as on `up`: the peer behind a NAT announces itself.
    assert!(p.a.poll_timeout().is_some_and(|t| t <= p.now));
    p.advance(Duration::ZERO);
    assert_eq!(p.wire.len(), 1, "an initiation");
    assert_eq!(p.a.peer_status(p.now)[0].stats.handshakes_initiated, 1);
    // While it is under way no keepalive is due: only the retransmission timer.
    let next = p.a.poll_timeout().unwrap();
    assert_eq!(next, p.now + TunnelConfig::default().handshake_timeout);
    p.wire.clear();
    // Unanswered: retries, then gives up; the keepalive tries again an interval later, and
    // every deadline is in the future (a driver waiting on poll_timeout never spins).
    for _ in 0..200 {
        p.advance(Duration::from_millis(500));
        assert!(p.a.poll_timeout().is_none_or(|t| t > p.now));
    }
    assert!(p.a.peer_status(p.now)[0].stats.handshakes_initiated >= 3);
    // Answered: the session comes up and B learns A's endpoint.
    p.wire.clear();
    p.advance(Duration::from_secs(30));
    p.run();
    assert!(p.a.peer_status(p.now)[0].session_up);
    assert_eq!(p.b.peer_status(p.now)[0].endpoint, Some(sa(A_ADDR)));
}

fn peer_b_of(p: &Pair, endpoint: Option<&str>) -> TunnelPeerConfig {
    TunnelPeerConfig {
        name: "b".into(),
        public_key: p.a.peers[0].cfg.public_key,
        endpoint: endpoint.map(sa),
        allowed_ips: vec!["10.9.0.2/32".parse().unwrap()],
        persistent_keepalive: None,
        preshared_key: None,
    }
}

#[test]
fn reconfigure_keeps_live_sessions_and_adds_and_removes_peers() {
    let mut p = established();
    let before = p.a.peer_status(p.now)[0].clone();
    assert!(before.session_up);
    let kc = HostKey::generate().unwrap();
    let c = TunnelPeerConfig {
        name: "c".into(),
        public_key: *kc.public(),
        endpoint: Some(sa("192.0.2.3:51820")),
        allowed_ips: vec!["10.9.0.3/32".parse().unwrap()],
        persistent_keepalive: None,
        preshared_key: None,
    };
    // B kept (a new allowed IP), C added.
    let mut b = peer_b_of(&p, Some(B_ADDR));
    b.allowed_ips.push("10.77.0.0/24".parse().unwrap());
    let ch = p.a.reconfigure(vec![b.clone(), c.clone()]).unwrap();
    assert_eq!(ch.added, ["c"]);
    assert_eq!(ch.updated, ["b"]);
    assert!(ch.removed.is_empty());
    // B's session went on: no new handshake, and a packet to B's new prefix leaves at once.
    let r = p.send(true, &v4(IP_A, [10, 77, 0, 5], 400, 1));
    assert!(matches!(r, Encap::Sealed { .. }), "{r:?}");
    let after = p.a.peer_status(p.now)[0].clone();
    assert_eq!(
        after.stats.handshakes_initiated,
        before.stats.handshakes_initiated
    );
    assert_eq!(after.last_handshake, before.last_handshake);
    assert_eq!(p.a.peer_status(p.now).len(), 2);
    // A packet to C starts a handshake with C.
    assert_eq!(
        p.send(true, &v4(IP_A, [10, 9, 0, 3], 400, 2)),
        Encap::Queued
    );
    assert!(p.wire.iter().any(|(_, to, _)| *to == sa("192.0.2.3:51820")));
    p.wire.retain(|(_, to, _)| *to != sa("192.0.2.3:51820"));
    p.run();

    // B removed: its packets have no route, its datagrams an unknown index.
    let ch = p.a.reconfigure(vec![c]).unwrap();
    assert_eq!(ch.removed, ["b"]);
    assert_eq!(p.a.peer_status(p.now).len(), 1);
    let no_route = p.a.drop_count(TunnelDrop::NoRoute);
    assert!(matches!(
        p.send(true, &v4(IP_A, IP_B, 400, 3)),
        Encap::Dropped(TunnelDrop::NoRoute)
    ));
    assert_eq!(p.a.drop_count(TunnelDrop::NoRoute), no_route + 1);
    let r = p.send(false, &v4(IP_B, IP_A, 400, 4));
    assert!(matches!(r, Encap::Sealed { .. }), "{r:?}");
    let (f, t, d) = p.wire.pop().unwrap();
    assert_eq!(
        p.deliver(f, t, d),
        Err(TunnelDrop::Proto(DropReason::UnknownIndex))
    );
    // B's initiation is now from an unknown host.
    p.b.reconfigure(Vec::new()).unwrap();
    assert!(p.got_a.iter().all(|pkt| pkt[20] != 4));
    // B added back: a fresh handshake, and traffic flows again.
    p.a.reconfigure(vec![peer_b_of_key(&p), c_again(&kc)])
        .unwrap();
    p.b.reconfigure(vec![TunnelPeerConfig {
        name: "a".into(),
        public_key: *p.a.host.public(),
        endpoint: None,
        allowed_ips: vec!["10.9.0.1/32".parse().unwrap()],
        persistent_keepalive: None,
        preshared_key: None,
    }])
    .unwrap();
    assert_eq!(p.send(true, &v4(IP_A, IP_B, 400, 5)), Encap::Queued);
    p.run();
    assert!(p.got_b.iter().any(|pkt| pkt[20] == 5));
}

fn peer_b_of_key(p: &Pair) -> TunnelPeerConfig {
    TunnelPeerConfig {
        name: "b".into(),
        public_key: *p.b.host.public(),
        endpoint: Some(sa(B_ADDR)),
        allowed_ips: vec!["10.9.0.2/32".parse().unwrap()],
        persistent_keepalive: None,
        preshared_key: None,
    }
}

fn c_again(kc: &HostKey) -> TunnelPeerConfig {
    TunnelPeerConfig {
        name: "c".into(),
        public_key: *kc.public(),
        endpoint: Some(sa("192.0.2.3:51820")),
        allowed_ips: vec!["10.9.0.3/32".parse().unwrap()],
        persistent_keepalive: None,
        preshared_key: None,
    }
}

#[test]
fn a_refused_reconfiguration_changes_nothing() {
    let mut p = established();
    let b = peer_b_of(&p, Some(B_ADDR));
    let mut twin = b.clone();
    twin.name = "twin".into();
    let mut own = b.clone();
    own.public_key = *p.a.host.public();
    let mut overlap = peer_b_of_key(&p);
    overlap.public_key = *HostKey::generate().unwrap().public();
    for bad in [vec![b.clone(), twin], vec![own], vec![b.clone(), overlap]] {
        assert!(p.a.reconfigure(bad).is_err());
        let st = p.a.peer_status(p.now);
        assert_eq!(st.len(), 1);
        assert!(st[0].session_up);
    }
    let r = p.send(true, &v4(IP_A, IP_B, 400, 9));
    assert!(matches!(r, Encap::Sealed { .. }), "{r:?}");
}

#[test]
fn a_silent_named_endpoint_is_resolved_again_and_moved() {
    let mut p = pair();
    let wrong = sa("192.0.2.99:51820");
    let key = *p.b.host.public();
    let name = "b.example:51820".to_string();
    // B's name resolved to a stale address at load.
    p.a.reconfigure(vec![peer_b_of(&p, Some("192.0.2.99:51820"))])
        .unwrap();
    assert!(p.a.set_endpoint_name(&key, Some(name.clone())));
    assert_eq!(p.send(true, &v4(IP_A, IP_B, 400, 1)), Encap::Queued);
    let lost = |p: &mut Pair| p.wire.retain(|(_, to, _)| *to != wrong);
    lost(&mut p);
    for attempt in 2..RERESOLVE_AFTER_ATTEMPTS {
        p.advance(Duration::from_secs(1));
        lost(&mut p);
        assert_eq!(p.a.poll_resolve(), None, "attempt {attempt}: too early");
    }
    p.advance(Duration::from_secs(1));
    lost(&mut p);
    assert_eq!(p.a.poll_resolve(), Some((key, name.clone())));
    // One request outstanding at most.
    p.advance(Duration::from_secs(1));
    lost(&mut p);
    assert_eq!(p.a.poll_resolve(), None);
    // An answer for another name, or a failed lookup, changes nothing.
    assert_eq!(
        p.a.resolved(p.now, &key, "old.example:1", &[sa(B_ADDR)]),
        None
    );
    assert_eq!(p.a.peer_status(p.now)[0].endpoint, Some(wrong));
    // The name now resolves to B's real address: the endpoint moves and the initiation is
    // sent there at once.
    assert_eq!(
        p.a.resolved(p.now, &key, &name, &[sa(B_ADDR)]),
        Some(sa(B_ADDR))
    );
    p.collect();
    assert!(p.wire.iter().any(|(_, to, _)| *to == sa(B_ADDR)));
    p.run();
    assert!(p.got_b.iter().any(|pkt| pkt[20] == 1));
    assert!(p.a.peer_status(p.now)[0].session_up);
    // An address among the answers already: nothing moves.
    assert_eq!(p.a.resolved(p.now, &key, &name, &[wrong, sa(B_ADDR)]), None);
}

#[test]
fn an_address_endpoint_is_never_resolved() {
    let mut p = pair();
    p.a.reconfigure(vec![peer_b_of(&p, Some("192.0.2.99:51820"))])
        .unwrap();
    assert_eq!(p.send(true, &v4(IP_A, IP_B, 400, 1)), Encap::Queued);
    for _ in 0..3 * RERESOLVE_AFTER_ATTEMPTS {
        p.advance(Duration::from_secs(1));
        p.wire.clear();
        assert_eq!(p.a.poll_resolve(), None);
    }
}

// The handshake lifecycle shared with the datagram channel (crate::handshake::state): one test per
// case where the two former copies differed; endpoint_tests.rs has the same two.

/// A small-order peer key (the configuration refuses one; this is the core's own guard): the
/// tunnel gives up at once, as the channel does. It used to log and leave the packets staged.
#[test]
fn lifecycle_a_degenerate_peer_key_gives_up_at_once_without_holding_an_index() {
    let mut p = pair();
    p.a.peers[0].cfg.public_key = [0; 32];
    for round in 1..=2 {
        p.send(true, &v4(IP_A, IP_B, 100, 1));
        assert!(p.wire.is_empty(), "round {round}: nothing sent");
        assert_eq!(
            p.a.drop_count(TunnelDrop::HandshakeTimeout),
            round,
            "the waiting packet is dropped at once"
        );
        assert!(p.a.peers[0].staged.is_empty());
        assert!(p.a.peers[0].handshake.initiation.is_none());
        assert_eq!(p.a.indexes.len(), 0, "round {round}: no index held");
        assert_eq!(p.a.poll_timeout(), None, "no retry is scheduled");
    }
}

/// A key derivation that fails after the response was built: the responder frees the index it
/// allocated and sends nothing (as the tunnel did; the channel now does too), and the
/// initiator's retry succeeds.
#[test]
fn lifecycle_a_failed_key_derivation_frees_the_responder_index() {
    let mut p = pair();
    p.send(true, &v4(IP_A, IP_B, 100, 1));
    let (f, t, init) = p.wire.pop().expect("an initiation");
    assert!(p.wire.is_empty());
    crate::handshake::state::fail_next_derivation();
    assert_eq!(
        p.deliver(f, t, init),
        Err(TunnelDrop::Proto(DropReason::SuiteRefused))
    );
    assert_eq!(p.b.indexes.len(), 0, "the responder's index was freed");
    assert!(p.wire.is_empty(), "no response");
    p.advance(Duration::from_secs(1));
    p.run();
    assert_eq!(
        p.got_b.len(),
        1,
        "the staged packet arrived after the retry"
    );
    assert_eq!(p.b.indexes.len(), 1, "one session's index");
}

/// The driver's unfinished packets (the TUN reader leaves TCP checksums to the worker): the core
/// finishes what it keeps a copy of, staged or queued, and hands every packet it returns for
/// sealing back unfinished, for the caller to finish.
#[test]
fn the_core_finishes_the_packets_it_keeps_and_only_those() {
    let mark = |pkt: &mut [u8]| pkt[pkt.len() - 1] = 0xee;
    let reserve = |t: &mut Tunnel, now: Time, pkt: &[u8], finished: &mut bool| {
        let mut buf = vec![0u8; HEADROOM + pkt.len() + TAILROOM];
        buf[HEADROOM..HEADROOM + pkt.len()].copy_from_slice(pkt);
        let r = t.encapsulate_reserve_with(now, &mut buf, pkt.len(), |p| {
            *finished = true;
            mark(p)
        });
        (r, buf)
    };
    let mut p = pair();
    // Staged for the handshake: finished.
    let staged = v4(IP_A, IP_B, 1000, 1);
    let mut finished = false;
    let (r, _) = reserve(&mut p.a, p.now, &staged, &mut finished);
    assert!(matches!(r, Reserve::Queued) && finished);
    p.collect();
    p.run();
    let mut want = staged.clone();
    mark(&mut want);
    assert_eq!(p.got_b, vec![want], "the staged copy left finished");
    // Small, queued to ride along: finished.
    let small = v4(IP_A, IP_B, 60, 2);
    let mut finished = false;
    let (r, _) = reserve(&mut p.a, p.now, &small, &mut finished);
    assert!(matches!(r, Reserve::Queued) && finished);
    // Large, sealed at once: not finished here; the caller finishes and seals it.
    let large = v4(IP_A, IP_B, 1400, 3);
    let mut finished = false;
    let (r, mut buf) = reserve(&mut p.a, p.now, &large, &mut finished);
    assert!(!finished);
    assert_eq!(buf[HEADROOM..HEADROOM + large.len()], large[..]);
    let Reserve::Seal { peer, dest, job } = r else {
        panic!("a large packet is sealed at once: {r:?}")
    };
    mark(&mut buf[HEADROOM..HEADROOM + large.len()]);
    let n = job.seal(&mut buf).unwrap();
    p.a.sent(p.now, peer, 1);
    p.collect();
    p.wire.push((sa(A_ADDR), dest, buf[..n].to_vec()));
    p.got_b.clear();
    p.run();
    let (mut s, mut l) = (small, large);
    mark(&mut s);
    mark(&mut l);
    assert_eq!(
        p.got_b,
        vec![s, l],
        "the queued packet left first, both finished"
    );
}

/// The transmit contract the datagram core has: a queued data datagram leaves the core
/// unsealed with its reserved seal, for the caller to run outside its lock; handshakes come
/// final.
#[test]
fn poll_transmit_deferred_hands_data_datagrams_over_unsealed() {
    let mut p = pair();
    let mut out = vec![0u8; 2048];
    // A handshake initiation comes final.
    let first = v4(IP_A, IP_B, 1000, 1);
    let mut buf = vec![0u8; HEADROOM + first.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + first.len()].copy_from_slice(&first);
    assert!(matches!(
        p.a.encapsulate_reserve(p.now, &mut buf, first.len()),
        Reserve::Queued
    ));
    let (dest, n, job) = p.a.poll_transmit_deferred(&mut out).unwrap();
    assert!(job.is_none(), "a handshake is final");
    p.wire.push((sa(A_ADDR), dest, out[..n].to_vec()));
    // The response, then the staged packet: a data datagram, unsealed.
    let (f, t, d) = p.wire.pop().unwrap();
    let _ = p.deliver(f, t, d);
    let (f, _, mut d) = p.wire.pop().unwrap();
    let mut ranges = Vec::new();
    let _ = p.a.decapsulate(p.now, f, &mut d, &mut ranges);
    let (dest, n, job) = p.a.poll_transmit_deferred(&mut out).unwrap();
    let job = job.expect("a data datagram comes with its seal");
    assert_eq!(n, HEADER_LEN + 2 + first.len() + TAILROOM);
    assert_eq!(
        &out[HEADER_LEN..HEADER_LEN + 2 + first.len()],
        &[&(first.len() as u16).to_be_bytes()[..], &first[..]].concat()[..],
        "the plaintext body, framed"
    );
    let len = job.seal(&mut out[..n]).unwrap();
    p.wire.push((sa(A_ADDR), dest, out[..len].to_vec()));
    p.run();
    assert_eq!(p.got_b, vec![first]);
    assert!(p.a.poll_transmit_deferred(&mut out).is_none());
}

/// Reserves `pkt` on `t` without polling its transmits (a driver that lets flushes pile up).
fn reserve_only(t: &mut Tunnel, now: Time, pkt: &[u8]) -> (Reserve, Vec<u8>) {
    let mut buf = vec![0u8; HEADROOM + pkt.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + pkt.len()].copy_from_slice(pkt);
    let r = t.encapsulate_reserve(now, &mut buf, pkt.len());
    (r, buf)
}

/// A pair whose first packet has gone through (sessions up), with piggyback queues of
/// `limit` bytes, and nothing delivered left over.
fn established_with_queue_limit(limit: usize) -> Pair {
    let mut cfg = TunnelConfig::default();
    cfg.piggyback.queue_limit = limit;
    let mut p = pair_with(cfg);
    p.send(true, &v4(IP_A, IP_B, 100, 0));
    p.run();
    p.got_b.clear();
    p
}

/// Flushed queues wait in the core as their bodies only, and are written into the caller's
/// buffer when polled: several flushes that pile up between polls leave in order, each body
/// whole and within the queue limit, ahead of the large packet that flushed the last one.
#[test]
fn flushes_that_pile_up_between_polls_leave_in_order_into_the_callers_buffer() {
    let mut p = established_with_queue_limit(500);
    // 202-byte framed packets: every third flushes the two before it (limit 500).
    for i in 1..=7 {
        let (r, _) = reserve_only(&mut p.a, p.now, &v4(IP_A, IP_B, 200, i));
        assert!(matches!(r, Reserve::Queued));
    }
    // A large packet flushes the seventh ahead of itself; it is the caller's to seal.
    let large = v4(IP_A, IP_B, 1400, 8);
    let (r, mut buf) = reserve_only(&mut p.a, p.now, &large);
    let Reserve::Seal { peer, dest, job } = r else {
        panic!("a large packet is sealed at once: {r:?}")
    };
    let mut out = vec![0u8; 2048];
    let mut lens = Vec::new();
    while let Some((d, n, job)) = p.a.poll_transmit_deferred(&mut out) {
        let job = job.expect("a data datagram");
        lens.push(n);
        assert!(n <= HEADER_LEN + 500 + TAILROOM, "within the queue limit");
        let n = job.seal(&mut out[..n]).unwrap();
        p.wire.push((sa(A_ADDR), d, out[..n].to_vec()));
    }
    assert_eq!(
        lens,
        vec![HEADER_LEN + 2 * 202 + TAILROOM; 3]
            .into_iter()
            .chain([HEADER_LEN + 202 + TAILROOM])
            .collect::<Vec<_>>(),
        "three full queues and the seventh packet"
    );
    let n = job.seal(&mut buf).unwrap();
    p.a.sent(p.now, peer, 1);
    p.wire.push((sa(A_ADDR), dest, buf[..n].to_vec()));
    p.run();
    let fills: Vec<u8> = p.got_b.iter().map(|x| x[30]).collect();
    assert_eq!(fills, (1..=8).collect::<Vec<u8>>(), "order kept");
    assert_eq!(p.a.peer_status(p.now)[0].stats.piggybacked, 6);
    // The core holds nothing back, and the next queue starts clean.
    assert!(!p.a.has_transmit());
    p.got_b.clear();
    p.send(true, &v4(IP_A, IP_B, 60, 9));
    p.send(true, &v4(IP_A, IP_B, 1400, 10));
    p.run();
    let fills: Vec<u8> = p.got_b.iter().map(|x| x[30]).collect();
    assert_eq!(fills, vec![9, 10]);
}

/// A caller's buffer too small for a flushed body drops that datagram only (counted as a
/// local fault); the next one, from the same peer's flushed bytes, still leaves whole.
#[test]
fn a_buffer_too_small_for_a_flushed_body_drops_that_datagram_only() {
    let mut p = established_with_queue_limit(500);
    // Two flushed queues: 2 x 202 bytes, then one 60-byte packet.
    for i in 1..=3 {
        reserve_only(&mut p.a, p.now, &v4(IP_A, IP_B, 200, i));
    }
    reserve_only(&mut p.a, p.now, &v4(IP_A, IP_B, 60, 4));
    p.a.handle_timeout(p.now + Duration::from_secs(1));
    let failed = p.a.drop_count(TunnelDrop::SealFailed);
    // Room for the second body (264 bytes) but not the first (404).
    let mut small = vec![0u8; HEADER_LEN + 300];
    let (d, n, job) = p.a.poll_transmit_deferred(&mut small).unwrap();
    assert_eq!(n, HEADER_LEN + 264 + TAILROOM);
    assert_eq!(p.a.drop_count(TunnelDrop::SealFailed), failed + 1);
    let n = job.unwrap().seal(&mut small[..n]).unwrap();
    p.wire.push((sa(A_ADDR), d, small[..n].to_vec()));
    assert!(p.a.poll_transmit_deferred(&mut small).is_none());
    p.run();
    // Later queues start clean.
    reserve_only(&mut p.a, p.now, &v4(IP_A, IP_B, 60, 5));
    p.a.handle_timeout(p.now + Duration::from_secs(2));
    p.collect();
    p.run();
    let fills: Vec<u8> = p.got_b.iter().map(|x| x[30]).collect();
    assert_eq!(
        fills,
        vec![3, 4, 5],
        "what fitted is delivered, whole and in order"
    );
}

#[path = "offpath_tests.rs"]
mod offpath_tests;
