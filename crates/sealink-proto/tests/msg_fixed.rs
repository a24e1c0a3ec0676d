//! The sender writes a datagram's only message as a MSG_FIXED frame (fixed-width fields, no
//! varint) when its owner and destination ids fit a byte; every other datagram keeps its
//! MSG_RUNs. Read from the bodies of authenticate-only datagrams (they travel in clear), as an
//! on-path observer sees them, and checked against what the receiver delivers.

mod common;

use std::time::Duration;

use common::*;
use sealink_proto::sim::LinkConfig;
use sealink_proto::wire::{self, Frame, Frames, HEADER_LEN};
use sealink_proto::{Config, Outgoing, Scope, Time, Urgency};

/// One data datagram's messages as an observer reads them: (seq, owner id, destination id,
/// length) of each, and the MSG_RUN and MSG_FIXED frames among its frames.
#[derive(Debug)]
struct Seen {
    msgs: Vec<(u64, u64, u64, usize)>,
    runs: usize,
    fixed: usize,
}

/// The authenticate-only data datagrams A sent that carry messages.
fn seen_from_a(captured: &[(bool, Vec<u8>)]) -> Vec<Seen> {
    captured
        .iter()
        .filter(|(from_a, _)| *from_a)
        .filter_map(|(_, d)| {
            let Ok(wire::Header::Data {
                scope: Scope::AuthOnly,
                ..
            }) = wire::parse_header(d)
            else {
                return None;
            };
            let body = &d[HEADER_LEN..d.len() - 16];
            let mut frames = Frames::new(body);
            let msgs: Vec<_> = frames
                .by_ref()
                .filter_map(|f| match f.expect("a correct sender's frames parse") {
                    Frame::Msg {
                        seq,
                        from,
                        to,
                        data,
                    } => Some((seq, from, to, data.len())),
                    _ => None,
                })
                .collect();
            (!msgs.is_empty()).then(|| Seen {
                msgs,
                runs: frames.runs(),
                fixed: frames.fixed_msgs(),
            })
        })
        .collect()
}

/// Every datagram with one message whose ids fit a byte carries it as MSG_FIXED; every other
/// one carries only MSG_RUNs. Returns how many were of each kind.
fn check_forms(seen: &[Seen]) -> (usize, usize) {
    let (mut fixed, mut runs) = (0, 0);
    for s in seen {
        let one_fitting = matches!(s.msgs[..], [(_, from, to, _)] if from <= 255 && to <= 255);
        if one_fitting {
            assert_eq!((s.fixed, s.runs), (1, 0), "one message: {s:?}");
            fixed += 1;
        } else {
            assert_eq!(s.fixed, 0, "not a lone fitting message: {s:?}");
            assert!(s.runs >= 1, "{s:?}");
            runs += 1;
        }
    }
    (fixed, runs)
}

#[test]
fn a_datagram_with_one_message_carries_it_as_msg_fixed() {
    let mut s = setup(LinkConfig::default(), 3);
    let p = &mut s.pair;
    p.captured = Some(Vec::new());
    let mut sent = Vec::new();
    // 1121 bytes: the largest message a default datagram always carries.
    assert_eq!(Config::default().max_message_len(), 1121);
    for (i, len) in [0usize, 1, 64, 200, 1121].into_iter().enumerate() {
        let now = p.now();
        let msg = vec![i as u8 + 1; len];
        p.a.send(
            now,
            s.a_peer,
            s.a_owners[i % 2],
            (i % 3 == 1).then_some("bob"),
            &msg,
            Urgency::Urgent,
            Scope::AuthOnly,
        )
        .unwrap();
        sent.push(msg);
        p.run_until(now + Duration::from_millis(50));
    }
    let seen = seen_from_a(p.captured.as_ref().unwrap());
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert_eq!(check_forms(&seen), (5, 0));
    assert_eq!(delivered(&p.events_b), sent);
    assert_eq!(p.b.stats().total_drops(), 0);
}

#[test]
fn datagrams_with_several_messages_keep_their_msg_runs() {
    let mut s = setup(LinkConfig::default(), 4);
    let p = &mut s.pair;
    p.captured = Some(Vec::new());
    let msgs: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 64]).collect();
    let out: Vec<Outgoing<'_>> = msgs
        .iter()
        .map(|d| Outgoing {
            data: d,
            urgency: Urgency::Urgent,
            scope: Scope::AuthOnly,
        })
        .collect();
    p.a.send_batch(Time::ZERO, s.a_peer, s.a_owners[0], None, &out)
        .unwrap();
    // Two owners' messages in one datagram: two runs, no MSG_FIXED.
    p.run_until(Time::from_millis(50));
    let now = p.now();
    for (k, o) in s.a_owners.iter().enumerate() {
        p.a.send(
            now,
            s.a_peer,
            *o,
            None,
            &[k as u8; 10],
            Urgency::Default,
            Scope::AuthOnly,
        )
        .unwrap();
    }
    p.run_until(now + Duration::from_millis(50));
    let seen = seen_from_a(p.captured.as_ref().unwrap());
    let (fixed, runs) = check_forms(&seen);
    assert_eq!(fixed, 0, "{seen:?}");
    assert!(runs >= 2, "{seen:?}");
    assert!(
        seen.iter().any(|s| s.runs == 2 && s.msgs.len() == 2),
        "{seen:?}"
    );
    let mut want = msgs.clone();
    want.extend([vec![0u8; 10], vec![1u8; 10]]);
    assert_eq!(delivered(&p.events_b), want);
}

/// Destination ids past 255 do not fit MSG_FIXED: those lone messages keep the MSG_RUN.
#[test]
fn a_lone_message_whose_ids_do_not_fit_keeps_the_msg_run() {
    let mut s = setup(LinkConfig::default(), 5);
    let p = &mut s.pair;
    p.captured = Some(Vec::new());
    let n = 300;
    for i in 0..n {
        let now = p.now();
        let dest = format!("d{i}");
        p.a.send(
            now,
            s.a_peer,
            s.a_owners[0],
            Some(&dest),
            &(i as u32).to_le_bytes(),
            Urgency::Urgent,
            Scope::AuthOnly,
        )
        .unwrap();
        p.run_until(now + Duration::from_millis(20));
    }
    let seen = seen_from_a(p.captured.as_ref().unwrap());
    assert_eq!(seen.len(), n, "one datagram per message");
    assert_eq!(check_forms(&seen), (255, n - 255));
    assert!(seen[255..].iter().all(|s| s.msgs[0].2 > 255));
    let got = delivered(&p.events_b);
    assert_eq!(got.len(), n);
    assert!(
        got.iter()
            .enumerate()
            .all(|(i, d)| d[..] == (i as u32).to_le_bytes())
    );
}

/// Without piggybacking every data datagram carries one message; over loss, reordering and
/// duplication (retransmissions included, each a lone message) every message still arrives
/// exactly once, and the encrypted ones too.
#[test]
fn lone_messages_over_a_faulty_link_arrive_once() {
    let cfg = Config {
        piggyback: false,
        ..Config::default()
    };
    let link = LinkConfig {
        loss: 0.1,
        duplicate: 0.05,
        reorder: 0.1,
        jitter: Duration::from_millis(2),
        ..LinkConfig::default()
    };
    let mut s = setup_with(cfg.clone(), cfg, link, 6);
    let p = &mut s.pair;
    p.captured = Some(Vec::new());
    let msgs: Vec<Vec<u8>> = (0..200u32)
        .map(|i| {
            let mut m = i.to_le_bytes().to_vec();
            m.resize(4 + (i as usize * 13) % 150, i as u8);
            m
        })
        .collect();
    for (i, m) in msgs.iter().enumerate() {
        let now = p.now();
        let scope = if i % 2 == 0 {
            Scope::AuthOnly
        } else {
            Scope::Encrypt
        };
        p.a.send(
            now,
            s.a_peer,
            s.a_owners[i % 2],
            None,
            m,
            Urgency::Default,
            scope,
        )
        .unwrap();
        p.run_until(now + Duration::from_millis(1));
    }
    let now = p.now();
    p.run_until(now + Duration::from_secs(5));
    let seen = seen_from_a(p.captured.as_ref().unwrap());
    let (fixed, runs) = check_forms(&seen);
    assert_eq!(runs, 0);
    assert!(fixed > 100, "{fixed}");
    let mut got = delivered(&p.events_b);
    got.sort();
    let mut want = msgs.clone();
    want.sort();
    assert_eq!(got, want);
}
