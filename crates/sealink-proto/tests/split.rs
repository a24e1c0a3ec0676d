//! The endpoint's split data path (what a driver uses to seal and open outside its lock):
//! `poll_transmit_deferred` + `SealJob::seal` gives datagrams of exactly the announced length,
//! and `handle_reserve` + `OpenJob::open` in any order + `handle_finish` in arrival order
//! delivers every message exactly once, in order, refusing a duplicate opened in parallel.

mod common;

use proptest::prelude::*;
use sealink_proto::endpoint::Reserved;
use sealink_proto::sim::LinkConfig;
use sealink_proto::{DropReason, Endpoint, Event, Scope, Time, Urgency};

/// Everything `from` has to send, sealed through the deferred path.
fn drain_deferred(from: &mut Endpoint, now: Time) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while let Some((t, job)) = from.poll_transmit_deferred(now, &mut buf) {
        if let Some(job) = job {
            let n = job.seal(&mut buf[..t.len]).expect("seals");
            assert_eq!(n, t.len, "the announced length is the sealed length");
        }
        out.push(buf[..t.len].to_vec());
    }
    out
}

/// Delivers a batch: reserve all (serial), open in reverse order (as parallel workers might),
/// finish in arrival order (serial). Returns the drop reasons seen at finish.
fn deliver_split(to: &mut Endpoint, now: Time, mut dgs: Vec<Vec<u8>>) -> Vec<DropReason> {
    let mut jobs = Vec::new();
    for d in &dgs {
        match to.handle_reserve(now, d) {
            Ok(Reserved::Open { peer, job }) => jobs.push(Some((peer, job))),
            _ => jobs.push(None),
        }
    }
    let mut opened: Vec<_> = (0..dgs.len()).map(|_| None).collect();
    for k in (0..dgs.len()).rev() {
        if let Some((_, job)) = &jobs[k] {
            opened[k] = Some(job.open(&mut dgs[k]));
        }
    }
    let mut drops = Vec::new();
    for (k, j) in jobs.into_iter().enumerate() {
        if let (Some((peer, job)), Some(r)) = (j, opened[k].take()) {
            if let Err(e) = to.handle_finish(now, peer, &job, r, &dgs[k]) {
                drops.push(e);
            }
        }
    }
    drops
}

fn messages(ep: &mut Endpoint) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    while let Some(e) = ep.poll_event() {
        if let Event::Messages(m) = e {
            got.extend(m.iter().map(<[u8]>::to_vec));
        }
    }
    got
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn split_path_delivers_exactly_once_in_order(
        sizes in proptest::collection::vec(1usize..900, 1..60),
        auth_only in any::<bool>(),
        dup in any::<bool>(),
    ) {
        let s = common::setup(LinkConfig::default(), 7);
        let (mut a, mut b) = (s.pair.a, s.pair.b);
        let scope = if auth_only { Scope::AuthOnly } else { Scope::Encrypt };
        let mut now = Time::from_millis(1);
        // Handshake through the ordinary path.
        a.send(now, s.a_peer, s.a_owners[0], Some("bob"), b"hi", Urgency::Urgent, scope).unwrap();
        for _ in 0..6 {
            let mut buf = vec![0u8; 65_536];
            while let Some(t) = a.poll_transmit(now, &mut buf) {
                let _ = b.handle(now, &mut buf[..t.len]);
            }
            while let Some(t) = b.poll_transmit(now, &mut buf) {
                let _ = a.handle(now, &mut buf[..t.len]);
            }
            now = now + std::time::Duration::from_millis(20);
            a.handle_timeout(now);
            b.handle_timeout(now);
        }
        prop_assert_eq!(messages(&mut b), vec![b"hi".to_vec()]);
        let sent: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| vec![i as u8; n]).collect();
        for m in &sent {
            a.send(now, s.a_peer, s.a_owners[1], None, m, Urgency::Default, scope).unwrap();
        }
        now = now + std::time::Duration::from_millis(50);
        a.handle_timeout(now);
        let mut dgs = drain_deferred(&mut a, now);
        prop_assert!(!dgs.is_empty());
        if dup {
            // A copy in the same batch: both pass the replay check, only one may be accepted.
            let first = dgs[0].clone();
            dgs.insert(1, first);
        }
        let drops = deliver_split(&mut b, now, dgs);
        prop_assert_eq!(drops, if dup { vec![DropReason::Replayed] } else { vec![] });
        prop_assert_eq!(messages(&mut b), sent);
    }
}
