//! The simulator's service model (`sim::ServiceModel`): hosts with a CPU cost per datagram and
//! a wire with a bandwidth, as `sealink bench adp` uses them.

mod common;

use std::time::Duration;

use common::*;
use sealink_proto::sim::{LinkConfig, ServiceModel, Side};
use sealink_proto::{Scope, Time, Urgency};

fn send(s: &mut Setup, now: Time, len: usize) {
    let data = vec![7u8; len];
    s.send_from(
        (Side::A, 0),
        now,
        Some("bob"),
        &data,
        Urgency::Urgent,
        Scope::AuthOnly,
    );
}

#[test]
fn a_host_busy_receiving_still_sends_its_acknowledgements() {
    // A sends as fast as its CPU seals; B's CPU is just as busy opening. Received datagrams
    // booked the CPU on arrival, so B's acknowledgements never found it free until A
    // stopped; now the CPU takes turns.
    let mut s = setup(LinkConfig::default(), 1);
    s.pair.service = Some(ServiceModel {
        bandwidth: 0.0,
        wire_overhead: 0,
        tx_queue_bytes: 65_536,
        send_fixed: Duration::from_millis(10),
        send_per_byte_ns: 0.0,
        recv_fixed: Duration::from_millis(10),
        recv_per_byte_ns: 0.0,
    });
    send(&mut s, Time::ZERO, 100);
    s.pair.run_until(Time::from_millis(500));
    let before = s.pair.a.stats().datagrams_received;
    for i in 0..300u64 {
        let now = Time::from_millis(500 + 10 * i);
        s.pair.run_until(now);
        send(&mut s, now, 100);
    }
    let during = s.pair.a.stats().datagrams_received - before;
    assert!(during >= 10, "B acknowledged {during} times while A sent");
}

#[test]
fn a_sender_faster_than_its_wire_queues_no_more_than_its_interface_holds() {
    // 1 MB/s wire, a CPU a thousand times faster: without the bound the wire backlog grew
    // with every message, and with it the round trip, until timers fired on queued data.
    let mut s = setup(LinkConfig::default(), 2);
    let svc = ServiceModel {
        bandwidth: 1e6,
        wire_overhead: 0,
        tx_queue_bytes: 4096,
        send_fixed: Duration::from_micros(1),
        send_per_byte_ns: 0.0,
        recv_fixed: Duration::from_micros(1),
        recv_per_byte_ns: 0.0,
    };
    s.pair.service = Some(svc);
    send(&mut s, Time::ZERO, 10);
    s.pair.run_until(Time::from_millis(100));
    let max_datagram = s.pair.a.config().max_datagram;
    let bound = svc.tx_queue_time() + svc.wire_time(max_datagram) + svc.send_cost(max_datagram);
    let t0 = s.pair.now();
    for i in 0..2000u64 {
        send(&mut s, t0, 1000);
        if i % 50 == 0 {
            s.pair.step(Time::MAX);
        }
    }
    let end = t0 + Duration::from_secs(60);
    while s.pair.step(end) {
        let backlog = s.pair.send_free(Side::A).saturating_since(s.pair.now());
        assert!(backlog <= bound, "{backlog:?} > {bound:?}");
        if s.pair.a.pending_messages_all() == 0 {
            break;
        }
    }
    assert_eq!(s.pair.a.pending_messages_all(), 0);
    assert_eq!(s.pair.a.stats().messages_retransmitted, 0);
}
