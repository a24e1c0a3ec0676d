//! The lab's engines (PLP, CLP, layered: `sealink_lab::engines`, drivers over the product's
//! `Pipeline`), moved here from sealink-engine with them (issue 31).
//!
//! Property tests: every engine's output is byte-identical to the single-threaded path and in
//! per-channel order, for random batch sizes, channel mixes and worker counts; opening gives the
//! originals back in order, and a tampered packet is refused without disturbing the others.

use std::sync::Arc;

use proptest::prelude::*;
use sealink_crypto::{PacketKey, Scope, SuiteId};
use sealink_lab::engines::{
    self, Channel, Clp, ClpPolicy, Engine, Layered, Op, Packet, PacketError, Plp, run_all,
    seal_serial,
};
use sealink_proto::DropReason;

const STACKS: [(SuiteId, Scope); 4] = [
    (SuiteId::Aes128Gcm, Scope::Encrypt),
    (SuiteId::ChaCha20Poly1305, Scope::AuthOnly),
    (SuiteId::LegacyDesCbcHmacMd5, Scope::Encrypt),
    (SuiteId::Aes128Gcm, Scope::None),
];

fn channel(i: usize) -> Channel {
    let (suite, scope) = STACKS[i % STACKS.len()];
    let key = |d: u8| {
        let m: Vec<u8> = (0..suite.key_len())
            .map(|j| j as u8 ^ d ^ (i as u8))
            .collect();
        Arc::new(PacketKey::new(suite, &m, true).unwrap())
    };
    let k = key(0x5a);
    Channel::new(Arc::clone(&k), k, 0x1000 + i as u32, scope).with_insecure_plaintext(true)
}

fn body(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Plp,
    ClpProcessor,
    ClpThread,
    Layered,
}

fn engine(kind: Kind, channels: Vec<Channel>, workers: usize) -> Box<dyn Engine> {
    match kind {
        Kind::Plp => Box::new(Plp::new(channels, workers)),
        Kind::ClpProcessor => Box::new(Clp::new(
            channels,
            ClpPolicy::ProcessorPerConnection(workers),
        )),
        Kind::ClpThread => Box::new(Clp::new(channels, ClpPolicy::ThreadPerConnection)),
        Kind::Layered => Box::new(Layered::new(channels)),
    }
}

/// Batches as (channel, body lengths).
fn batches() -> impl Strategy<Value = Vec<(usize, Vec<usize>)>> {
    prop::collection::vec(
        (0usize..4, prop::collection::vec(0usize..200, 0..10)),
        1..14,
    )
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Plp),
        Just(Kind::ClpProcessor),
        Just(Kind::ClpThread),
        Just(Kind::Layered)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn identical_to_serial_and_ordered(
        kind in kind(),
        workers in 1usize..=4,
        nchan in 1usize..=4,
        spec in batches(),
        seed in any::<u64>(),
        tamper in any::<prop::sample::Index>(),
    ) {
        let spec: Vec<(usize, Vec<usize>)> =
            spec.into_iter().map(|(c, l)| (c % nchan, l)).collect();
        let mut originals: Vec<Vec<Vec<u8>>> = vec![Vec::new(); nchan];
        let mut input = Vec::new();
        for (bi, (c, lens)) in spec.iter().enumerate() {
            let packets: Vec<Packet> = lens
                .iter()
                .enumerate()
                .map(|(pi, &l)| {
                    let b = body(seed ^ ((bi as u64) << 32) ^ pi as u64, l);
                    originals[*c].push(b.clone());
                    Packet::with_body(&b, 24)
                })
                .collect();
            input.push((*c, packets));
        }

        // The single-threaded reference, channel by channel in submission order.
        let mut reference: Vec<Vec<Vec<u8>>> = vec![Vec::new(); nchan];
        let mut ref_chans: Vec<Channel> = (0..nchan).map(channel).collect();
        for (c, packets) in &input {
            let mut ps = packets.clone();
            seal_serial(&mut ref_chans[*c], &mut ps);
            for p in ps {
                prop_assert!(p.status.is_ok());
                reference[*c].push(p.wire().to_vec());
            }
        }

        // Send side through the engine.
        let mut e = engine(kind, (0..nchan).map(channel).collect(), workers);
        let out = run_all(e.as_mut(), Op::Seal, input.clone());
        prop_assert_eq!(e.in_flight(), 0);
        let mut got: Vec<Vec<Vec<u8>>> = vec![Vec::new(); nchan];
        let mut sealed_batches = Vec::new();
        for b in out {
            prop_assert_eq!(b.op, Op::Seal);
            for p in &b.packets {
                prop_assert!(p.status.is_ok());
                got[b.channel].push(p.wire().to_vec());
            }
            sealed_batches.push((b.channel, b.packets.iter().map(|p| p.wire().to_vec()).collect::<Vec<_>>()));
        }
        prop_assert_eq!(&got, &reference);

        // Receive side: open what was sealed, in release order per channel; tamper one packet
        // of an authenticated channel.
        let total: usize = sealed_batches.iter().map(|(_, v)| v.len()).sum();
        let victim = (total > 0).then(|| tamper.index(total));
        let mut k = 0;
        let mut tampered = None;
        let open_input: Vec<(usize, Vec<Packet>)> = sealed_batches
            .iter()
            .map(|(c, dgs)| {
                let ps = dgs
                    .iter()
                    .map(|d| {
                        let mut p = Packet::datagram(d);
                        if Some(k) == victim && STACKS[*c % STACKS.len()].1 != Scope::None {
                            let last = p.len - 1;
                            p.buf[last] ^= 0x40;
                            tampered = Some((*c, k));
                        }
                        k += 1;
                        p
                    })
                    .collect();
                (*c, ps)
            })
            .collect();
        let mut e = engine(kind, (0..nchan).map(channel).collect(), workers);
        let out = run_all(e.as_mut(), Op::Open, open_input);
        let mut bodies: Vec<Vec<Vec<u8>>> = vec![Vec::new(); nchan];
        let mut counters: Vec<Vec<u64>> = vec![Vec::new(); nchan];
        let mut failures = Vec::new();
        for b in out {
            for p in &b.packets {
                match p.status {
                    Ok(()) => {
                        bodies[b.channel].push(p.body().to_vec());
                        counters[b.channel].push(p.counter);
                    }
                    Err(r) => failures.push((b.channel, r)),
                }
            }
        }
        match tampered {
            Some((c, _)) => {
                prop_assert_eq!(failures, vec![(c, PacketError::Dropped(DropReason::AuthFailed))]);
                let mut expect = originals.clone();
                // The victim's position within its channel.
                let pos = {
                    let mut seen = 0;
                    let mut pos = None;
                    let mut kk = 0;
                    for (cc, dgs) in &sealed_batches {
                        for _ in dgs {
                            if *cc == c {
                                if Some(kk) == victim { pos = Some(seen); }
                                seen += 1;
                            }
                            kk += 1;
                        }
                    }
                    pos.unwrap()
                };
                expect[c].remove(pos);
                prop_assert_eq!(&bodies, &expect);
            }
            None => {
                prop_assert!(failures.is_empty());
                prop_assert_eq!(&bodies, &originals);
            }
        }
        for cs in &counters {
            prop_assert!(cs.windows(2).all(|w| w[0] < w[1]), "counters out of order");
        }
    }
}

/// `n` packets of `len`-byte bodies (room for a 16-byte tag), sealed in order on channel 0.
fn sealed_on_channel_0(n: u64, len: usize) -> Vec<Packet> {
    let mut ch = channel(0);
    let mut ps: Vec<Packet> = (0..n)
        .map(|i| Packet::with_body(&body(i, len), 16))
        .collect();
    seal_serial(&mut ch, &mut ps);
    ps
}

#[test]
fn replay_is_refused_and_restart_rewinds_the_window() {
    let ps = sealed_on_channel_0(5, 64);
    let dgs: Vec<Packet> = ps.iter().map(|p| Packet::datagram(p.wire())).collect();
    for workers in 1..=3 {
        let mut e = Plp::new(vec![channel(0)], workers);
        let out = run_all(&mut e, Op::Open, vec![(0, dgs.clone()), (0, dgs.clone())]);
        let st: Vec<_> = out
            .iter()
            .flat_map(|b| b.packets.iter().map(|p| p.status))
            .collect();
        assert_eq!(&st[..5], &[Ok(()); 5]);
        assert_eq!(
            &st[5..],
            &[Err(PacketError::Dropped(DropReason::Replayed)); 5]
        );
        // The lab hook: a restarted window takes the same packets again, in order.
        e.restart_replay_window(0);
        let out = run_all(&mut e, Op::Open, vec![(0, dgs.clone())]);
        assert!(out[0].packets.iter().all(|p| p.status.is_ok()));
    }
}

#[test]
fn device_copy_reopens_a_pool() {
    let ps = sealed_on_channel_0(3, 100);
    let pool: Vec<Arc<[u8]>> = ps.iter().map(|p| Arc::from(p.wire())).collect();
    let mut e = Clp::new(vec![channel(0)], ClpPolicy::ProcessorPerConnection(2));
    for _ in 0..3 {
        let batch: Vec<Packet> = pool
            .iter()
            .map(|d| engines::from_device(Arc::clone(d)))
            .collect();
        e.restart_replay_window(0);
        e.submit(Op::Open, 0, batch);
        let b = e.recv().unwrap();
        for (i, p) in b.packets.iter().enumerate() {
            assert_eq!(p.status, Ok(()));
            assert_eq!(p.body(), &body(i as u64, 100)[..]);
        }
    }
}
