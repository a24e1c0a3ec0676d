//! The receiver's admission of new connections, over real loopback sockets: handshake
//! initiations are rate limited per source and replays are refused before they get an answer;
//! unauthenticated connections are bounded per source and in all, oldest evicted first.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sealink_proto::HostKey;
use sealink_proto::stream::Initiator;
use sealink_proto::stream::handshake::{INIT_MESSAGE_LEN, INIT_PREAMBLE, RESPONSE_MESSAGE_LEN};
use sealink_stream::{Dest, Progress, Receiver, RecvConfig};

struct Peer {
    addr: SocketAddr,
    receiver: Arc<Receiver>,
    us: HostKey,
    them: [u8; 32],
    _dir: tempfile::TempDir,
}

/// A receiver serving sessions forever (on a thread), trusting the host `us`.
fn receiver(tune: impl FnOnce(&mut RecvConfig)) -> Peer {
    let dir = tempfile::tempdir().unwrap();
    let us = HostKey::generate().unwrap();
    let host = HostKey::generate().unwrap();
    let them = *host.public();
    let mut cfg = RecvConfig::new(host, Dest::Dir(dir.path().to_owned()));
    cfg.trusted_hosts = vec![("us".into(), *us.public())];
    cfg.trusted_owners = vec![("nobody".into(), [7; 32])];
    tune(&mut cfg);
    let receiver = Arc::new(Receiver::bind("127.0.0.1:0".parse().unwrap(), cfg).unwrap());
    let addr = receiver.local_addr();
    let r = receiver.clone();
    std::thread::spawn(move || r.serve(false, Arc::new(Progress::default()), |_| {}));
    Peer {
        addr,
        receiver,
        us,
        them,
        _dir: dir,
    }
}

fn initiation(p: &Peer, ts: u64) -> Vec<u8> {
    let (_, msg) = Initiator::new(&p.us, &p.them, sealink_proto::SuiteId::Aes128Gcm, ts).unwrap();
    let mut m = INIT_PREAMBLE.to_vec();
    m.extend_from_slice(&msg);
    m
}

/// Sends `init` on a fresh connection: whether the receiver answered it.
fn answered(addr: SocketAddr, init: &[u8]) -> bool {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(init).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut resp = [0u8; RESPONSE_MESSAGE_LEN];
    s.read_exact(&mut resp).is_ok()
}

fn count(p: &Peer, reason: &str) -> u64 {
    p.receiver
        .drops()
        .into_iter()
        .find(|(r, _)| *r == reason)
        .unwrap_or_else(|| panic!("no drop reason {reason}"))
        .1
}

#[test]
fn replayed_initiation_gets_no_answer() {
    let p = receiver(|_| {});
    // Timestamps are nanoseconds (of the sender's clock).
    let sec = 1_000_000_000u64;
    let first = initiation(&p, 1_000 * sec);
    assert!(answered(p.addr, &first));
    // The same bytes again: refused before the responder's Diffie-Hellman.
    assert!(!answered(p.addr, &first));
    // An initiation from long before the newest one accepted.
    assert!(!answered(p.addr, &initiation(&p, 500 * sec)));
    // A fresh one, and one slightly out of order (two senders on one host), are answered.
    assert!(answered(p.addr, &initiation(&p, 1_002 * sec)));
    assert!(answered(p.addr, &initiation(&p, 1_001 * sec)));
    assert_eq!(count(&p, "replayed-initiation"), 2);
}

#[test]
fn initiation_flood_from_one_source_is_rate_limited() {
    let p = receiver(|c| {
        c.limits.handshake.per_source_burst = 5;
        c.limits.handshake.per_source_per_sec = 1;
    });
    let t0 = Instant::now();
    let ok = (0..20)
        .filter(|i| answered(p.addr, &initiation(&p, 1_000 + i)))
        .count();
    let allowed = 5 + t0.elapsed().as_secs() as usize + 1;
    assert!((5..=allowed).contains(&ok), "{ok} of 20 answered");
    assert_eq!(count(&p, "rate-limited"), 20 - ok as u64);
}

/// Issue 29 item 5: an initiation without a valid mac1 (its sender does not know the
/// receiver's host key) is dropped and counted as `bad-mac1` before the rate limit, so it
/// spends none of its source's tokens; the retired kind-1 form (no mac1) is not sealink.
#[test]
fn initiations_without_a_valid_mac1_spend_no_tokens() {
    let p = receiver(|c| {
        c.limits.handshake.per_source_burst = 3;
        c.limits.handshake.per_source_per_sec = 1;
    });
    let mut x = 7u64;
    for _ in 0..40 {
        let mut m = INIT_PREAMBLE.to_vec();
        m.extend((0..INIT_MESSAGE_LEN).map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        }));
        assert!(!answered(p.addr, &m));
    }
    // A real initiation with one bit of its mac1 flipped.
    let mut flipped = initiation(&p, 10);
    *flipped.last_mut().unwrap() ^= 1;
    assert!(!answered(p.addr, &flipped));
    // One made for another receiver's key (its mac1 is keyed by that key).
    let other = HostKey::generate().unwrap();
    let (_, msg) =
        Initiator::new(&p.us, other.public(), sealink_proto::SuiteId::Aes128Gcm, 11).unwrap();
    assert!(!answered(p.addr, &[&INIT_PREAMBLE[..], &msg].concat()));
    assert_eq!(count(&p, "bad-mac1"), 42);
    assert_eq!(count(&p, "rate-limited"), 0);
    // The bucket is whole: a burst of real initiations is answered.
    for i in 0..3 {
        assert!(answered(p.addr, &initiation(&p, 1_000 + i)));
    }
    assert_eq!(count(&p, "rate-limited"), 0);
    // The old form: kind 1 and no mac1.
    let old = initiation(&p, 2_000);
    let mut v1 = b"SLS1\x01".to_vec();
    v1.extend_from_slice(&old[INIT_PREAMBLE.len()..old.len() - 16]);
    assert!(!answered(p.addr, &v1));
    assert_eq!(count(&p, "not-sealink"), 1);
}

/// A TCP connection from a chosen loopback address.
fn connect_from(src: Ipv4Addr, to: SocketAddr) -> TcpStream {
    use rustix::net::{AddressFamily, SocketType, bind, connect, socket};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    bind(&fd, &SocketAddr::new(IpAddr::V4(src), 0)).unwrap();
    connect(&fd, &to).unwrap();
    TcpStream::from(fd)
}

fn is_closed(s: &TcpStream) -> bool {
    common::closed_within(s, Duration::from_millis(20))
}

#[test]
fn unauthenticated_connections_are_bounded_per_source_and_in_all() {
    let p = receiver(|c| {
        c.limits.max_pending = 6;
        c.limits.max_pending_per_source = 3;
    });
    let quiet = Ipv4Addr::new(127, 0, 0, 2);
    let noisy = Ipv4Addr::new(127, 0, 0, 3);
    let settle = || std::thread::sleep(Duration::from_millis(200));
    let q: Vec<TcpStream> = (0..2).map(|_| connect_from(quiet, p.addr)).collect();
    settle();
    // One noisy source evicts only its own oldest connections.
    let n: Vec<TcpStream> = (0..10)
        .map(|_| {
            let s = connect_from(noisy, p.addr);
            settle();
            s
        })
        .collect();
    assert!(
        q.iter().all(|s| !is_closed(s)),
        "a quiet source was evicted"
    );
    let open: Vec<bool> = n.iter().map(|s| !is_closed(s)).collect();
    assert_eq!(open, [[false; 7].as_slice(), &[true; 3]].concat());
    // Many sources together: the oldest connections overall go first.
    let others: Vec<TcpStream> = (4..7)
        .map(|i| {
            let s = connect_from(Ipv4Addr::new(127, 0, 0, i), p.addr);
            settle();
            s
        })
        .collect();
    assert!(q.iter().all(is_closed), "the oldest were kept");
    assert!(others.iter().all(|s| !is_closed(s)));
    assert_eq!(count(&p, "evicted"), 7 + 2);
}
