//! WireGuard (issue 33): the message parser never panics and whatever parses re-encodes to the
//! same bytes; a peer with a live session takes any datagram without panicking, and nothing
//! random gets through it (every such datagram is dropped and counted, or is a valid-looking
//! message that fails its MAC or AEAD).
#![no_main]

use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;
use sealink_proto::wg::message;
use sealink_proto::wg_reference::{WgPeerConfig, WgEvent, WgPeer};
use sealink_proto::{HostKey, Time};

fn peers() -> (WgPeer, WgPeer) {
    let (a, b) = (HostKey::generate().unwrap(), HostKey::generate().unwrap());
    let cfg = |k: &HostKey| WgPeerConfig {
        public_key: *k.public(),
        preshared_key: None,
    };
    let (ca, cb) = (cfg(&b), cfg(&a));
    let mut a = WgPeer::new(a, ca).unwrap();
    let mut b = WgPeer::new(b, cb).unwrap();
    let now = Time::ZERO;
    let init = a.initiate(now, std::time::Duration::from_secs(1)).unwrap();
    let WgEvent::Send(resp) = b.receive(now, None, &init) else {
        panic!("no response")
    };
    assert_eq!(a.receive(now, None, &resp), WgEvent::HandshakeComplete);
    (a, b)
}

static PEERS: Mutex<Option<(WgPeer, WgPeer)>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = message::parse(data) {
        assert_eq!(m.encode(), data);
    }
    let mut g = PEERS.lock().unwrap();
    let (a, b) = g.get_or_insert_with(peers);
    let now = Time::from_millis(1);
    for p in [a, b] {
        let before = p.stats().dropped_total();
        match p.receive(now, Some("192.0.2.1:9".parse().unwrap()), data) {
            WgEvent::Dropped(_) => assert_eq!(p.stats().dropped_total(), before + 1),
            e => panic!("random bytes accepted: {e:?}"),
        }
    }
});
