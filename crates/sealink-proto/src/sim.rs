//! A simulated network for two endpoints, in virtual time: delay, jitter, loss, reordering,
//! duplication and corruption, all from a seeded generator so every run can be replayed.
//! Used by the tests and by `sealink demo`. An optional [`ServiceModel`] adds service times
//! (a wire bandwidth and each host's CPU cost to seal and open a datagram) for the lab's
//! trace-driven runs (`sealink-lab bench adp`); without one, sending and receiving take no time.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use crate::endpoint::{Endpoint, Event};
use crate::time::Time;

/// Faults and timing of the simulated link (the same in both directions).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    pub delay: Duration,
    /// Extra delay drawn uniformly from `[0, jitter)` per datagram.
    pub jitter: Duration,
    pub loss: f64,
    pub duplicate: f64,
    /// Probability that a datagram is held back by an extra `2 * delay` (overtaken by later ones).
    pub reorder: f64,
    /// Probability that one random bit of a datagram is flipped.
    pub corrupt: f64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            delay: Duration::from_millis(5),
            jitter: Duration::ZERO,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
        }
    }
}

/// Service times of the simulated hosts and wire: each host is one CPU that alternates between
/// opening a received datagram and sealing one to send whenever both wait (received datagrams
/// queue in arrival order); each direction of the wire carries one datagram at a time.
/// (Booking a received datagram's CPU time on arrival starved the sends of a host that receives
/// as fast as it can open: its acknowledgements never left.)
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServiceModel {
    /// Wire bandwidth in bytes per second (0 or less: unlimited).
    pub bandwidth: f64,
    /// Bytes the wire adds to every datagram (link, IP and UDP headers).
    pub wire_overhead: usize,
    /// Bytes a host's interface queue holds waiting for the wire: beyond it the host sends no
    /// more (a real sender blocks on its socket buffer), and datagrams wait in the endpoint.
    /// Without this bound a sender faster than its wire queues without limit, and the round
    /// trip grows until retransmission and rekey timers fire on data that is only queued.
    pub tx_queue_bytes: usize,
    /// CPU time to build and seal one datagram: fixed part and per byte (ns).
    pub send_fixed: Duration,
    pub send_per_byte_ns: f64,
    /// CPU time to open and handle one datagram: fixed part and per byte (ns).
    pub recv_fixed: Duration,
    pub recv_per_byte_ns: f64,
}

impl ServiceModel {
    fn cost(fixed: Duration, per_byte_ns: f64, len: usize) -> Duration {
        fixed + Duration::from_nanos((per_byte_ns.max(0.0) * len as f64).round() as u64)
    }
    pub fn send_cost(&self, len: usize) -> Duration {
        Self::cost(self.send_fixed, self.send_per_byte_ns, len)
    }
    pub fn recv_cost(&self, len: usize) -> Duration {
        Self::cost(self.recv_fixed, self.recv_per_byte_ns, len)
    }
    /// Time the wire takes to carry a datagram of `len` bytes.
    pub fn wire_time(&self, len: usize) -> Duration {
        self.wire_bytes_time(len + self.wire_overhead)
    }
    fn wire_bytes_time(&self, bytes: usize) -> Duration {
        if self.bandwidth <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_nanos((bytes as f64 * 1e9 / self.bandwidth).round() as u64)
    }
    /// The longest wire backlog a host still hands datagrams to.
    pub fn tx_queue_time(&self) -> Duration {
        self.wire_bytes_time(self.tx_queue_bytes)
    }
}

/// SplitMix64: a small deterministic generator for the simulation (not for cryptography).
#[derive(Debug, Clone)]
pub struct SimRng(u64);

impl SimRng {
    pub fn new(seed: u64) -> Self {
        SimRng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}

/// Which endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    A,
    B,
}

/// What the link did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub sent: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
    /// Dropped by [`Pair::attacker`].
    pub filtered: u64,
    pub delivered: u64,
}

/// An on-path attacker: sees every datagram put on the link (from A?, bytes) and returns true
/// to drop it.
pub type Attacker = Box<dyn FnMut(bool, &[u8]) -> bool>;

/// (due, order, to B?, opened by the receiver's CPU already?, bytes).
type InFlight = Reverse<(Time, u64, bool, bool, Vec<u8>)>;

/// Two endpoints joined by a simulated link.
pub struct Pair {
    pub a: Endpoint,
    pub b: Endpoint,
    pub link: LinkConfig,
    pub rng: SimRng,
    pub stats: LinkStats,
    now: Time,
    heap: BinaryHeap<InFlight>,
    order: u64,
    stalls: u32,
    buf: Vec<u8>,
    /// Events of each side with the virtual time they surfaced.
    pub events_a: Vec<(Time, Event)>,
    pub events_b: Vec<(Time, Event)>,
    /// Every datagram put on the link, when capture is on: (from A?, bytes).
    pub captured: Option<Vec<(bool, Vec<u8>)>>,
    /// Drops the datagrams it picks, before the link's own faults.
    pub attacker: Option<Attacker>,
    /// Service times; `None` (the default) keeps sending and receiving instantaneous.
    pub service: Option<ServiceModel>,
    /// When each host's CPU is next free: [A, B].
    cpu_free: [Time; 2],
    /// When each direction of the wire is next free: [A to B, B to A].
    wire_free: [Time; 2],
    /// Datagrams arrived at each host and waiting for its CPU: [at A, at B].
    rx_wait: [VecDeque<Vec<u8>>; 2],
    /// The host's CPU last opened a received datagram: a waiting send goes next.
    send_next: [bool; 2],
}

sealink_crypto::debug_showing!(Pair { now, stats });

impl Pair {
    pub fn new(a: Endpoint, b: Endpoint, link: LinkConfig, seed: u64) -> Self {
        let buf = vec![0u8; a.config().max_datagram.max(b.config().max_datagram)];
        Pair {
            a,
            b,
            link,
            rng: SimRng::new(seed),
            stats: LinkStats::default(),
            now: Time::ZERO,
            heap: BinaryHeap::new(),
            order: 0,
            stalls: 0,
            buf,
            events_a: Vec::new(),
            events_b: Vec::new(),
            captured: None,
            attacker: None,
            service: None,
            cpu_free: [Time::ZERO; 2],
            wire_free: [Time::ZERO; 2],
            rx_wait: Default::default(),
            send_next: [false; 2],
        }
    }

    /// Books `work` on a host's CPU (a driver's per-message cost, for instance): it starts when
    /// the CPU is next free. No effect on timing without a [`ServiceModel`].
    pub fn charge(&mut self, side: Side, work: Duration) {
        let i = side as usize;
        self.cpu_free[i] = self.cpu_free[i].max(self.now) + work;
    }

    /// When a host's CPU is next free (the current time if it is idle).
    pub fn cpu_free(&self, side: Side) -> Time {
        self.cpu_free[side as usize].max(self.now)
    }

    /// When a host can next send: its CPU is free and its interface queue has room.
    pub fn send_free(&self, side: Side) -> Time {
        self.cpu_free(side).max(self.queue_room(side as usize))
    }

    /// When the wire backlog of `side` falls to what its interface queue holds.
    fn queue_room(&self, side: usize) -> Time {
        match self.service {
            Some(s) => (self.wire_free[side] - s.tx_queue_time()).max(self.now),
            None => self.now,
        }
    }

    pub fn now(&self) -> Time {
        self.now
    }

    pub fn endpoint(&mut self, side: Side) -> &mut Endpoint {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    /// Moves every datagram both endpoints want to send onto the link; with a service model,
    /// only as many as each host's CPU is free for (the rest wait in the endpoint, where
    /// piggybacking can still add to them), taking turns with the received datagrams waiting
    /// to be opened.
    pub fn transmit(&mut self) {
        for from_a in [true, false] {
            let side = usize::from(!from_a);
            let Some(s) = self.service else {
                while let Some(bytes) = self.poll_send(from_a) {
                    self.put_on_link(from_a, bytes, self.now);
                }
                continue;
            };
            while self.cpu_free[side] <= self.now {
                let can_send = self.queue_room(side) <= self.now;
                let sent = if self.rx_wait[side].is_empty() || self.send_next[side] {
                    self.send_next[side] = false;
                    can_send.then(|| self.poll_send(from_a)).flatten()
                } else {
                    None
                };
                if let Some(bytes) = sent {
                    let sealed = self.now + s.send_cost(bytes.len());
                    self.cpu_free[side] = sealed;
                    let start = sealed.max(self.wire_free[side]);
                    self.wire_free[side] = start + s.wire_time(bytes.len());
                    let depart = self.wire_free[side];
                    self.put_on_link(from_a, bytes, depart);
                } else if let Some(bytes) = self.rx_wait[side].pop_front() {
                    // Opened when the CPU is done with it; the endpoint handles it then.
                    let done = self.now + s.recv_cost(bytes.len());
                    self.cpu_free[side] = done;
                    self.send_next[side] = true;
                    self.order += 1;
                    self.heap
                        .push(Reverse((done, self.order, !from_a, true, bytes)));
                } else {
                    break;
                }
            }
        }
        self.collect_events();
    }

    fn poll_send(&mut self, from_a: bool) -> Option<Vec<u8>> {
        let ep = if from_a { &mut self.a } else { &mut self.b };
        let t = ep.poll_transmit(self.now, &mut self.buf)?;
        Some(self.buf[..t.len].to_vec())
    }

    fn put_on_link(&mut self, from_a: bool, bytes: Vec<u8>, depart: Time) {
        self.stats.sent += 1;
        if let Some(c) = &mut self.captured {
            c.push((from_a, bytes.clone()));
        }
        if let Some(drop) = &mut self.attacker {
            if drop(from_a, &bytes) {
                self.stats.filtered += 1;
                return;
            }
        }
        if self.rng.chance(self.link.loss) {
            self.stats.lost += 1;
            return;
        }
        let copies = if self.rng.chance(self.link.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut b = bytes.clone();
            let jitter = self.rng.below(self.link.jitter.as_nanos() as u64);
            let mut delay = self.link.delay + Duration::from_nanos(jitter);
            if self.rng.chance(self.link.reorder) {
                self.stats.reordered += 1;
                delay += self.link.delay * 2;
            }
            if self.rng.chance(self.link.corrupt) && !b.is_empty() {
                self.stats.corrupted += 1;
                let bit = self.rng.below(b.len() as u64 * 8);
                b[(bit / 8) as usize] ^= 1 << (bit % 8);
            }
            self.inject_at(depart + delay, from_a, b);
        }
    }

    /// Schedules raw bytes to arrive at A (`to_b == false`) or B at time `at` (for attacks).
    pub fn inject_at(&mut self, at: Time, to_b: bool, bytes: Vec<u8>) {
        self.order += 1;
        self.heap
            .push(Reverse((at, self.order, to_b, false, bytes)));
    }

    fn collect_events(&mut self) {
        while let Some(e) = self.a.poll_event() {
            self.events_a.push((self.now, e));
        }
        while let Some(e) = self.b.poll_event() {
            self.events_b.push((self.now, e));
        }
    }

    /// When something next happens, if anything.
    pub fn next_time(&self) -> Option<Time> {
        // With a service model, a host whose CPU frees up may have datagrams waiting.
        // Likewise a host whose interface queue drains below its bound, and a host whose
        // received datagrams wait for its CPU.
        let cpu = |i: usize| {
            let send = self.cpu_free[i].max(self.queue_room(i));
            let open = (!self.rx_wait[i].is_empty()).then_some(self.cpu_free[i]);
            let t = open.map_or(send, |o| o.min(send));
            (self.service.is_some() && t > self.now).then_some(t)
        };
        [
            self.heap.peek().map(|Reverse((t, ..))| *t),
            self.a.poll_timeout(),
            self.b.poll_timeout(),
            cpu(0),
            cpu(1),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Advances to the next event no later than `until`; false when there is none.
    pub fn step(&mut self, until: Time) -> bool {
        self.transmit();
        let Some(next) = self.next_time().filter(|t| *t <= until) else {
            self.now = self.now.max(until);
            return false;
        };
        if next <= self.now
            && self
                .heap
                .peek()
                .is_none_or(|Reverse((t, ..))| *t > self.now)
        {
            // A timer that is due but not consumed would stop virtual time: a protocol bug.
            self.stalls += 1;
            assert!(
                self.stalls < 10_000,
                "timer livelock at {}: poll_timeout keeps returning {}",
                self.now,
                next
            );
        } else {
            self.stalls = 0;
        }
        self.now = self.now.max(next);
        while let Some(Reverse((t, ..))) = self.heap.peek() {
            if *t > self.now {
                break;
            }
            let Some(Reverse((_, _, to_b, opened, mut bytes))) = self.heap.pop() else {
                break;
            };
            if self.service.is_some() && !opened {
                // Arrived: it waits for the receiver's CPU (`transmit` serves it).
                self.rx_wait[usize::from(to_b)].push_back(bytes);
                continue;
            }
            self.stats.delivered += 1;
            let ep = if to_b { &mut self.b } else { &mut self.a };
            let _ = ep.handle(self.now, &mut bytes);
        }
        if self.a.poll_timeout().is_some_and(|t| t <= self.now) {
            self.a.handle_timeout(self.now);
        }
        if self.b.poll_timeout().is_some_and(|t| t <= self.now) {
            self.b.handle_timeout(self.now);
        }
        self.transmit();
        true
    }

    /// Runs until `until` (virtual time).
    pub fn run_until(&mut self, until: Time) {
        while self.step(until) {}
    }

    /// Runs until nothing is left to do or `limit` is reached; returns the time it stopped.
    pub fn run_idle(&mut self, limit: Time) -> Time {
        while self.step(limit) {
            if self.heap.is_empty()
                && self.a.pending_messages_all() == 0
                && self.b.pending_messages_all() == 0
                && self.a.poll_timeout().is_none()
                && self.b.poll_timeout().is_none()
            {
                break;
            }
        }
        self.now
    }
}

impl Pair {
    /// True when neither side reported an undeliverable message or a failed handshake.
    pub fn pair_events_clean(&self) -> bool {
        !self
            .events_a
            .iter()
            .chain(self.events_b.iter())
            .any(|(_, e)| {
                matches!(
                    e,
                    Event::Undeliverable { .. } | Event::HandshakeFailed { .. }
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_model_costs() {
        let s = ServiceModel {
            bandwidth: 1e6,
            wire_overhead: 24,
            tx_queue_bytes: 1000,
            send_fixed: Duration::from_micros(10),
            send_per_byte_ns: 2.0,
            recv_fixed: Duration::ZERO,
            recv_per_byte_ns: 0.5,
        };
        assert_eq!(s.send_cost(1000), Duration::from_micros(12));
        assert_eq!(s.recv_cost(1000), Duration::from_nanos(500));
        assert_eq!(s.wire_time(976), Duration::from_millis(1));
        let unlimited = ServiceModel {
            bandwidth: 0.0,
            ..s
        };
        assert_eq!(unlimited.wire_time(1 << 20), Duration::ZERO);
    }
}
