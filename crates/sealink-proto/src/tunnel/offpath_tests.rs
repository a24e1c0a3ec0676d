//! Handshakes through the driver's queue and the split steps ([`super::offpath`]): a quiet
//! queue answers as the serial path does, a busy one asks every unproven source for mac2
//! before any public-key work, and a full one refuses.

use super::*;

/// A queue with a small capacity: busy from `busy_at` waiting messages.
fn queue(capacity: usize) -> HandshakeQueue {
    HandshakeQueue::new(capacity)
}

/// What a handshake thread does with one popped message at B; returns how far it got.
fn serve_b(p: &mut Pair, from: SocketAddr, msg: &[u8], busy: bool) -> Result<Begun, TunnelDrop> {
    let responder = p.b.responder();
    let r = p.b.handshake_begin(p.now, from, msg, busy);
    if let Ok(Begun::Read) = r {
        let read = responder.read(msg);
        p.b.handshake_finish(p.now, from, read)?;
    }
    p.collect();
    r
}

/// A's first initiation to B, taken off the wire.
fn a_initiation(p: &mut Pair) -> (SocketAddr, Vec<u8>) {
    p.send(true, &v4(IP_A, IP_B, 300, 1));
    let (f, t, d) = p.wire.pop().expect("A's initiation");
    assert_eq!(t, sa(B_ADDR));
    assert!(p.b.is_handshake(&d) && p.wire.is_empty());
    (f, d)
}

fn quiet_queue_answers_like_the_serial_path(cfg: TunnelConfig) {
    let mut p = pair_with(cfg);
    let mut q = queue(64);
    let (from, init) = a_initiation(&mut p);
    assert!(q.push(from, &init));
    let (src, msg, busy) = q.pop(p.now).unwrap();
    assert!(!busy);
    assert_eq!(serve_b(&mut p, src, &msg, busy), Ok(Begun::Read));
    // B's response to A; A's answer (the packet) goes through B's data path.
    p.run();
    assert_eq!(p.got_b.len(), 1, "drops at B: {:?}", p.b.drops());
    assert!(p.a.peer_status(p.now)[0].session_up);
}

#[test]
fn a_quiet_queue_answers_like_the_serial_path_on_both_wires() {
    quiet_queue_answers_like_the_serial_path(TunnelConfig::default());
    quiet_queue_answers_like_the_serial_path(TunnelConfig::wireguard());
}

/// A busy queue: A's initiation (no mac2 yet) gets a cookie reply and no public-key work; A's
/// retry with mac2 (its address proven) is answered while the queue is still busy.
fn busy_queue_wants_mac2(cfg: TunnelConfig, junk: bool) {
    let mut p = pair_with(cfg);
    let mut q = queue(64);
    assert_eq!(q.busy_at(), 8);
    let b_pub = p.a.peer_status(p.now)[0].public_key;
    // Junk with a valid mac1 from spoofed sources (sealink's wire) fills the queue to busy.
    let n_junk = if junk { 10u8 } else { 0 };
    for i in 0..n_junk {
        let from = SocketAddr::from(([198, 51, 100, i], 40_000));
        assert!(q.push(from, &super::junk_init_mac1(i, &b_pub)));
    }
    let (from, init) = a_initiation(&mut p);
    assert!(q.push(from, &init));
    if !junk {
        // Busy as though the queue had just held its eighth: within UNDER_LOAD_AFTER.
        for _ in 0..7 {
            assert!(q.push(from, &init));
        }
        assert!(q.busy(p.now));
        while q.len() > 1 {
            q.pop(p.now);
        }
    }
    let mut reads = 0;
    while let Some((src, msg, busy)) = q.pop(p.now) {
        assert!(
            busy,
            "an eighth of the capacity waits, or did within a second"
        );
        let r = serve_b(&mut p, src, &msg, busy);
        assert_eq!(r, Err(TunnelDrop::Proto(DropReason::CookieRequired)));
        reads += u32::from(r == Ok(Begun::Read));
    }
    assert_eq!(reads, 0, "no public-key work for an unproven source");
    assert_eq!(
        p.b.drop_count(DropReason::CookieRequired.into()),
        u64::from(n_junk) + 1
    );
    // The cookie reply to A (the junk's went to addresses nobody answers from).
    let to_a: Vec<_> = p
        .wire
        .drain(..)
        .filter(|(_, t, _)| *t == sa(A_ADDR))
        .collect();
    assert_eq!(to_a.len(), 1);
    let (f, t, reply) = to_a.into_iter().next().unwrap();
    assert!(p.a.is_handshake(&reply));
    assert!(p.deliver(f, t, reply).is_ok());
    // A sent the same initiation again, now with mac2.
    let (f, t, retry) = p.wire.pop().expect("A's retry");
    assert_eq!(t, sa(B_ADDR));
    assert!(q.push(f, &retry));
    let (src, msg, busy) = q.pop(p.now + Duration::from_millis(500)).unwrap();
    assert!(busy, "still within UNDER_LOAD_AFTER");
    assert_eq!(serve_b(&mut p, src, &msg, busy), Ok(Begun::Read));
    p.run();
    assert_eq!(p.got_b.len(), 1, "drops at B: {:?}", p.b.drops());
    // A second later, with nothing waiting, the queue is quiet again.
    assert!(!q.busy(p.now + UNDER_LOAD_AFTER + Duration::from_millis(600)));
}

#[test]
fn a_busy_queue_answers_unproven_sources_with_cookies_on_sealinks_wire() {
    busy_queue_wants_mac2(TunnelConfig::default(), true);
}

#[test]
fn a_busy_queue_answers_unproven_sources_with_cookies_on_wireguards_wire() {
    busy_queue_wants_mac2(TunnelConfig::wireguard(), false);
}

#[test]
fn a_full_queue_refuses_and_the_drops_are_counted_by_reason() {
    let mut p = pair();
    let mut q = queue(8);
    let (from, init) = a_initiation(&mut p);
    let mut refused = 0;
    for _ in 0..11 {
        if !q.push(from, &init) {
            refused += 1;
        }
    }
    assert_eq!((q.len(), refused), (8, 3));
    p.b.handshake_queue_full(refused);
    assert_eq!(p.b.drop_count(TunnelDrop::HandshakeQueueFull), 3);
    assert!(p.b.drops().contains(&("handshake-queue-full", 3)));
    // Longer than any handshake message: refused too.
    assert!(!q.push(from, &[0u8; 300]));
    // Data is not a handshake; junk is refused by the first step and counted.
    assert!(!p.b.is_handshake(&[4u8; 40]));
    let before = p.b.drops().iter().map(|(_, n)| n).sum::<u64>();
    assert!(matches!(
        p.b.handshake_begin(p.now, from, &[9u8; 40], false),
        Err(TunnelDrop::Proto(_))
    ));
    assert_eq!(p.b.drops().iter().map(|(_, n)| n).sum::<u64>(), before + 1);
}

#[test]
fn a_replay_read_in_parallel_is_refused_at_the_finish() {
    let mut p = pair();
    let (from, init) = a_initiation(&mut p);
    let responder = p.b.responder();
    // Two handshake threads read the same initiation (a replay) before either finishes.
    assert_eq!(
        p.b.handshake_begin(p.now, from, &init, false),
        Ok(Begun::Read)
    );
    assert_eq!(
        p.b.handshake_begin(p.now, from, &init, false),
        Ok(Begun::Read)
    );
    let (r1, r2) = (responder.read(&init), responder.read(&init));
    assert!(p.b.handshake_finish(p.now, from, r1).is_ok());
    assert_eq!(
        p.b.handshake_finish(p.now, from, r2),
        Err(TunnelDrop::Proto(DropReason::StaleHandshake))
    );
}

/// `n` peers from number `from` on: made-up keys (no key pair needed: nobody handshakes) and
/// one /32 each in 10.64.0.0/10.
fn hub_peers(from: usize, n: usize) -> Vec<TunnelPeerConfig> {
    (from..from + n)
        .map(|i| {
            let mut key = [7u8; 32];
            key[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
            TunnelPeerConfig {
                name: format!("p{i}"),
                public_key: key,
                endpoint: None,
                allowed_ips: vec![
                    format!("10.{}.{}.{}/32", 64 + (i >> 16), (i >> 8) & 255, i & 255)
                        .parse()
                        .unwrap(),
                ],
                persistent_keepalive: None,
                preshared_key: None,
            }
        })
        .collect()
}

/// The plan from `old` to `new` (no endpoint names) against `t`'s current peers.
fn plan_between(
    t: &Tunnel,
    own: &[u8; 32],
    old: &[TunnelPeerConfig],
    new: &[TunnelPeerConfig],
) -> PeerPlan {
    PeerPlan::new(
        own,
        t.peers_generation(),
        old,
        &vec![None; old.len()],
        new.to_vec(),
        &vec![None; new.len()],
    )
    .unwrap()
}

/// A hub of `n` peers reloaded with 20 removed, 20 added and one moved to another prefix:
/// the plan's steps under the lock, after checking the result against `reconfigure`'s.
fn reload_steps(n: usize) -> usize {
    let host = HostKey::generate().unwrap();
    let own = *host.public();
    let old = hub_peers(0, n);
    let mut t = Tunnel::new(host.clone(), TunnelConfig::default(), old.clone()).unwrap();
    let mut twin = Tunnel::new(host, TunnelConfig::default(), old.clone()).unwrap();
    let mut new: Vec<_> = old[20..].to_vec();
    new[0].allowed_ips = vec!["10.200.0.1/32".parse().unwrap()];
    new.extend(hub_peers(n, 20));
    let plan = plan_between(&t, &own, &old, &new);
    assert_eq!(plan.len(), 41);
    let applied = t.apply_peer_plan(plan).unwrap();
    let whole = twin.reconfigure(new.clone()).unwrap();
    assert_eq!(applied.changes.added, whole.added);
    assert_eq!(applied.changes.updated, whole.updated);
    assert_eq!(applied.changes.unchanged, whole.unchanged);
    assert_eq!(applied.changes.removed.len(), whole.removed.len());
    // The same peers, and every prefix of the new list routed to its peer, in both.
    let keys = |t: &Tunnel| {
        let mut k: Vec<_> = t.peer_configs().iter().map(|p| p.public_key).collect();
        k.sort();
        k
    };
    assert_eq!(keys(&t), keys(&twin));
    for t in [&t, &twin] {
        assert_eq!(t.routes.len(), new.len());
        for p in &new {
            let net = p.allowed_ips[0];
            let pi = t.routes.lookup(net.addr()).expect("routed");
            assert_eq!(t.peers[pi].cfg.public_key, p.public_key);
        }
        for p in &old[..20] {
            assert_eq!(t.routes.lookup(p.allowed_ips[0].addr()), None);
        }
    }
    applied.steps
}

#[test]
fn a_reloads_work_under_the_lock_follows_the_change_not_the_peer_count() {
    let small = reload_steps(100);
    let large = reload_steps(5_000);
    assert_eq!(small, large, "steps under the lock at 100 and 5,000 peers");
    // 20 removed (peer and prefix), 20 added (likewise), one moved (old and new prefix, peer).
    assert_eq!(small, 20 * 2 + 20 * 2 + 3);
}

#[test]
fn a_plan_made_against_another_peer_list_is_refused_and_changes_nothing() {
    let mut p = established();
    let b = p.a.peer_configs();
    let generation = p.a.peers_generation();
    let c = hub_peers(0, 1);
    let mut with_c = b.clone();
    with_c.extend(c.clone());
    let plan = PeerPlan::new(
        &[1; 32],
        generation,
        &b,
        &[None],
        with_c.clone(),
        &[None, None],
    )
    .unwrap();
    // The list changed meanwhile (as a UAPI `set` changes it).
    p.a.reconfigure(b.clone()).unwrap();
    assert!(p.a.apply_peer_plan(plan).is_err());
    assert_eq!(p.a.peer_configs().len(), 1);
    // Made against the list in force, it applies, and B's session goes on.
    let plan = PeerPlan::new(
        &[1; 32],
        p.a.peers_generation(),
        &b,
        &[None],
        with_c,
        &[None, Some("c.example:51820".into())],
    )
    .unwrap();
    let applied = p.a.apply_peer_plan(plan).unwrap();
    assert_eq!(applied.changes.added, ["p0"]);
    assert_eq!(applied.changes.unchanged, 1);
    let before = p.a.peer_status(p.now)[0].stats.handshakes_initiated;
    let r = p.send(true, &v4(IP_A, IP_B, 400, 1));
    assert!(matches!(r, Encap::Sealed { .. }), "{r:?}");
    assert_eq!(p.a.peer_status(p.now)[0].stats.handshakes_initiated, before);
}

#[test]
fn a_peer_removed_while_its_response_is_written_is_refused_and_its_index_freed() {
    for cfg in [TunnelConfig::default(), TunnelConfig::wireguard()] {
        let mut p = pair_with(cfg);
        let (from, init) = a_initiation(&mut p);
        let responder = p.b.responder();
        assert_eq!(
            p.b.handshake_begin(p.now, from, &init, false),
            Ok(Begun::Read)
        );
        let prepared =
            p.b.handshake_prepare(p.now, from, responder.read(&init))
                .unwrap();
        let indexes = p.b.indexes.len();
        // A reload removes A while B writes the response with no lock held.
        p.b.reconfigure(Vec::new()).unwrap();
        let written = prepared.write(p.now);
        assert_eq!(
            p.b.handshake_commit(p.now, from, written),
            Err(TunnelDrop::Proto(DropReason::UnknownHost))
        );
        assert_eq!(p.b.indexes.len(), indexes - 1, "the response's index freed");
        p.collect();
        assert!(p.wire.is_empty(), "no response sent");
    }
}

/// Not a test: prints how long `apply_peer_plan` and `reconfigure` take at 10,000 peers with
/// 1,000 removed and 1,000 added (`cargo test --release -- --ignored --nocapture reload_timing`).
#[test]
#[ignore]
fn reload_timing() {
    let host = HostKey::generate().unwrap();
    let own = *host.public();
    let old = hub_peers(0, 10_000);
    let mut t = Tunnel::new(host.clone(), TunnelConfig::wireguard(), old.clone()).unwrap();
    let mut twin = Tunnel::new(host, TunnelConfig::wireguard(), old.clone()).unwrap();
    let mut new: Vec<_> = old[..9_000].to_vec();
    new.extend(hub_peers(10_000, 1_000));
    let t0 = std::time::Instant::now();
    let plan = plan_between(&t, &own, &old, &new);
    let t1 = std::time::Instant::now();
    let a = t.apply_peer_plan(plan).unwrap();
    let t2 = std::time::Instant::now();
    twin.reconfigure(new).unwrap();
    let t3 = std::time::Instant::now();
    eprintln!(
        "size_of Peer {} B; plan {:?} (no lock), apply {:?} ({} steps), reconfigure {:?}",
        std::mem::size_of::<Peer>(),
        t1 - t0,
        t2 - t1,
        a.steps,
        t3 - t2
    );
}

// ------------------------------------------------------------------ our own initiations

/// What a hub's handshake thread does with the initiations `t` reserved: each built with no
/// access to `t`, then committed. Returns each commit's outcome.
pub(super) fn build_reserved(t: &mut Tunnel, now: Time) -> Vec<Result<PeerIndex, TunnelDrop>> {
    let mut jobs = Vec::new();
    t.take_initiations(&mut jobs);
    let initiator = t.initiator();
    let built: Vec<_> = jobs.into_iter().map(|j| initiator.build(j)).collect();
    built
        .into_iter()
        .map(|b| t.initiation_commit(now, b))
        .collect()
}

fn build_a(p: &mut Pair) -> Vec<Result<PeerIndex, TunnelDrop>> {
    let r = build_reserved(&mut p.a, p.now);
    p.collect();
    r
}

fn established_with(cfg: TunnelConfig) -> Pair {
    let mut p = pair_with(cfg);
    p.send(true, &v4(IP_A, IP_B, 100, 0));
    p.run();
    assert_eq!(p.got_b.len(), 1);
    p.got_b.clear();
    p
}

const STALE: TunnelDrop = TunnelDrop::Proto(DropReason::StaleHandshake);

fn initiation_built_off_the_lock_completes(cfg: TunnelConfig) {
    let mut p = pair_with(cfg);
    p.a.build_initiations_offpath(true);
    assert_eq!(p.send(true, &v4(IP_A, IP_B, 300, 1)), Encap::Queued);
    assert!(p.wire.is_empty(), "nothing built under the core's lock");
    assert!(p.a.has_initiations());
    assert_eq!(build_a(&mut p), [Ok(PeerIndex(0))]);
    assert_eq!(p.wire.len(), 1, "the initiation");
    p.run();
    assert_eq!(p.got_b.len(), 1, "drops at B: {:?}", p.b.drops());
    assert!(p.a.peer_status(p.now)[0].session_up);
    // A rekey: the packet that wants it leaves at once, without the public-key work.
    p.got_b.clear();
    p.now = p.now + Duration::from_secs(121);
    let r = p.send(true, &v4(IP_A, IP_B, 1000, 2));
    assert!(matches!(r, Encap::Sealed { .. }), "{r:?}");
    assert_eq!(p.wire.len(), 1, "the data alone");
    assert!(!p.a.has_initiations() || build_a(&mut p) == [Ok(PeerIndex(0))]);
    assert_eq!(p.wire.len(), 2, "the data and the initiation");
    p.run();
    assert_eq!(p.got_b.len(), 1);
    assert_eq!(p.a.peer_status(p.now)[0].stats.handshakes_initiated, 2);
    assert_eq!(p.a.peer_status(p.now)[0].stats.handshakes_completed, 2);
    assert!(p.a.drops().is_empty(), "{:?}", p.a.drops());
    assert!(p.b.drops().is_empty(), "{:?}", p.b.drops());
}

#[test]
fn an_initiation_built_off_the_lock_completes_a_handshake_on_both_wires() {
    initiation_built_off_the_lock_completes(TunnelConfig::default());
    initiation_built_off_the_lock_completes(TunnelConfig::wireguard());
}

/// Both sides' sessions expired; each side's packet waits for a handshake it builds off the
/// lock: the crossing initiations are resolved and traffic flows both ways afterwards.
fn crossing_initiations_resolve(cfg: TunnelConfig) {
    let mut p = established_with(cfg);
    p.a.build_initiations_offpath(true);
    p.b.build_initiations_offpath(true);
    p.now = p.now + Duration::from_secs(200);
    assert_eq!(p.send(true, &v4(IP_A, IP_B, 500, 1)), Encap::Queued);
    assert_eq!(p.send(false, &v4(IP_B, IP_A, 500, 2)), Encap::Queued);
    assert!(p.wire.is_empty());
    assert_eq!(build_a(&mut p), [Ok(PeerIndex(0))]);
    assert_eq!(build_reserved(&mut p.b, p.now), [Ok(PeerIndex(0))]);
    p.collect();
    p.run();
    assert_eq!((p.got_a.len(), p.got_b.len()), (1, 1));
    for _ in 0..3 {
        p.advance(Duration::from_secs(1));
        build_a(&mut p);
        build_reserved(&mut p.b, p.now);
        p.collect();
        p.run();
    }
    p.got_a.clear();
    p.got_b.clear();
    assert!(matches!(
        p.send(true, &v4(IP_A, IP_B, 500, 3)),
        Encap::Sealed { .. }
    ));
    assert!(matches!(
        p.send(false, &v4(IP_B, IP_A, 500, 4)),
        Encap::Sealed { .. }
    ));
    p.run();
    assert_eq!((p.got_a.len(), p.got_b.len()), (1, 1));
    for t in [&p.a, &p.b] {
        let st = &t.peer_status(p.now)[0];
        assert!(st.session_up);
        assert!(st.stats.handshakes_completed >= 2, "{st:?}");
    }
}

#[test]
fn crossing_initiations_built_off_the_lock_are_resolved_on_both_wires() {
    crossing_initiations_resolve(TunnelConfig::default());
    crossing_initiations_resolve(TunnelConfig::wireguard());
}

/// A prepared initiation whose peer was removed meanwhile is dropped, not sent.
#[test]
fn a_prepared_initiation_to_a_removed_peer_is_dropped() {
    let mut p = pair();
    p.a.build_initiations_offpath(true);
    assert_eq!(p.send(true, &v4(IP_A, IP_B, 300, 1)), Encap::Queued);
    let mut jobs = Vec::new();
    p.a.take_initiations(&mut jobs);
    let built: Vec<_> = {
        let i = p.a.initiator();
        jobs.into_iter().map(|j| i.build(j)).collect()
    };
    p.a.reconfigure(Vec::new()).unwrap();
    for b in built {
        assert_eq!(p.a.initiation_commit(p.now, b), Err(STALE));
    }
    p.collect();
    assert!(p.wire.is_empty(), "nothing sent: {:?}", p.wire);
    assert_eq!(p.a.drop_count(STALE), 1);
}

/// A prepared initiation that a retry replaced is dropped; the retry's completes.
#[test]
fn a_prepared_initiation_replaced_by_its_retry_is_dropped() {
    let mut p = pair();
    p.a.build_initiations_offpath(true);
    assert_eq!(p.send(true, &v4(IP_A, IP_B, 300, 1)), Encap::Queued);
    let mut first = Vec::new();
    p.a.take_initiations(&mut first);
    p.advance(Duration::from_secs(6));
    assert!(p.a.has_initiations(), "the retry reserved a new one");
    let i = p.a.initiator();
    let first = i.build(first.pop().unwrap());
    assert_eq!(p.a.initiation_commit(p.now, first), Err(STALE));
    p.collect();
    assert!(p.wire.is_empty());
    assert_eq!(build_a(&mut p), [Ok(PeerIndex(0))]);
    p.run();
    assert_eq!(
        p.got_b.len(),
        1,
        "the staged packet, on the retry's session"
    );
}

/// A prepared rekey whose peer's own handshake gave us a fresh session meanwhile is dropped.
#[test]
fn a_prepared_rekey_after_a_newer_session_arrived_is_dropped() {
    let mut p = established();
    p.a.build_initiations_offpath(true);
    // Past the responder's rekey time too (165 s): B, which answered the session, rekeys by
    // time only that close to REJECT_AFTER_TIME.
    p.now = p.now + Duration::from_secs(166);
    assert!(matches!(
        p.send(true, &v4(IP_A, IP_B, 500, 1)),
        Encap::Sealed { .. }
    ));
    let mut jobs = Vec::new();
    p.a.take_initiations(&mut jobs);
    assert_eq!(jobs.len(), 1);
    // B rekeys first (built at once: B builds serially); A answers, B confirms.
    assert!(matches!(
        p.send(false, &v4(IP_B, IP_A, 500, 2)),
        Encap::Sealed { .. }
    ));
    p.run();
    p.send(false, &v4(IP_B, IP_A, 500, 3));
    p.run();
    assert_eq!(p.got_a.len(), 2);
    let b = p.a.initiator().build(jobs.pop().unwrap());
    assert_eq!(p.a.initiation_commit(p.now, b), Err(STALE));
    p.collect();
    assert!(p.wire.is_empty(), "nothing sent: {:?}", p.wire);
    // Nothing left under way: A's next packet leaves on the session B made.
    assert!(matches!(
        p.send(true, &v4(IP_A, IP_B, 500, 4)),
        Encap::Sealed { .. }
    ));
    assert!(!p.a.has_initiations());
    p.run();
    assert_eq!(p.got_b.len(), 2);
}
