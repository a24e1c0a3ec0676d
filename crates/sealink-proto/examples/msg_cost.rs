//! The protocol core's CPU cost per small message, without sockets, threads or a clock: two
//! endpoints in one thread, A queueing messages in batches and B receiving and acknowledging,
//! datagrams handed over in memory. What `sealink-lab bench datagram` costs beyond this is I/O,
//! system calls and thread hand-offs.
//!
//! `cargo run --release -p sealink-proto --example msg_cost -- [SIZE] [MESSAGES]`
//! (under `perf record -g` to see where a message's cycles go).

use std::time::{Duration, Instant};

use sealink_crypto::sign::OwnerSigningKey;
use sealink_proto::{
    Config, Directory, Endpoint, Event, HostKey, LocalOwner, Scope, Time, Urgency,
};

const BATCH: usize = 32;

fn main() {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().map_or(64, |s| s.parse().expect("SIZE"));
    let total: usize = args
        .next()
        .map_or(5_000_000, |s| s.parse().expect("MESSAGES"));

    let (ka, kb) = (HostKey::generate().unwrap(), HostKey::generate().unwrap());
    let alice = OwnerSigningKey::from_seed(&[7; 32]).unwrap();
    let mut dir = Directory::new();
    dir.insert("alice", alice.public_key()).unwrap();
    dir.insert("bob", alice.public_key()).unwrap();
    let mut a = Endpoint::new(Config::default(), ka.clone(), Directory::new()).unwrap();
    let mut b = Endpoint::new(Config::default(), kb.clone(), dir).unwrap();
    let peer_b = a.add_peer("b", *kb.public());
    b.add_peer("a", *ka.public());
    let owner = a.add_owner(LocalOwner::new("alice", alice).unwrap());

    let msg = vec![0x5a; size];
    let mut buf = vec![0u8; 2048];
    let mut now = Time::from_millis(1);
    let tick = Duration::from_micros(1);
    let (mut sent, mut delivered, mut datagrams) = (0usize, 0usize, 0usize);
    let start = Instant::now();
    while delivered < total {
        // Keep the window fed, one batch at a time, every 20th message urgent.
        while sent < total && a.pending_messages(peer_b) < 2048 {
            for i in 0..BATCH {
                let urgency = if (sent + i) % 20 == 0 {
                    Urgency::Urgent
                } else {
                    Urgency::Default
                };
                a.send(
                    now,
                    peer_b,
                    owner,
                    Some("bob"),
                    &msg,
                    urgency,
                    Scope::Encrypt,
                )
                .expect("send");
            }
            sent += BATCH;
        }
        while let Some(t) = a.poll_transmit(now, &mut buf) {
            datagrams += 1;
            let _ = b.handle(now, &mut buf[..t.len]);
        }
        while let Some(ev) = b.poll_event() {
            if let Event::Messages(m) = ev {
                delivered += m.len();
            }
        }
        now = now + tick;
        b.handle_timeout(now);
        while let Some(t) = b.poll_transmit(now, &mut buf) {
            let _ = a.handle(now, &mut buf[..t.len]);
        }
        a.handle_timeout(now);
        while a.poll_event().is_some() {}
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{size} B: {delivered} messages in {secs:.2} s: {:.0} ns/message (both ends, one core), {:.1} messages/datagram",
        secs * 1e9 / delivered as f64,
        delivered as f64 / datagrams.max(1) as f64
    );
}
