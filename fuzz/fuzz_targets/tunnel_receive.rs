//! The tunnel core never panics on any datagram from the network or any packet from the TUN
//! device, and counts what it refuses, on both wires. Input: one byte choosing the wire (odd:
//! WireGuard's), then a sequence of chunks (u16 LE length, bytes), each fed to `decapsulate`
//! or, when the first byte is odd, to `encapsulate` as an IP packet.
#![no_main]

use std::net::SocketAddr;

use libfuzzer_sys::fuzz_target;
use sealink_proto::tunnel::{TunnelPeerConfig, TAILROOM, Tunnel, TunnelConfig, packet_addrs};
use sealink_proto::{HostKey, Time};

fuzz_target!(|data: &[u8]| {
    let Some((&wire, data)) = data.split_first() else {
        return;
    };
    let cfg = if wire & 1 == 1 {
        TunnelConfig::wireguard()
    } else {
        TunnelConfig::default()
    };
    let me = HostKey::from_private([1; 32]).unwrap();
    let peer = HostKey::from_private([2; 32]).unwrap();
    let src: SocketAddr = "10.0.0.2:51820".parse().unwrap();
    let mut t = Tunnel::new(
        me,
        cfg,
        vec![TunnelPeerConfig {
            name: "b".into(),
            public_key: *peer.public(),
            endpoint: Some(src),
            allowed_ips: vec!["10.9.0.2/32".parse().unwrap()],
            // On: the fuzzed timeline also drives keepalives.
            persistent_keepalive: Some(std::time::Duration::from_secs(1)),
            preshared_key: None,
        }],
    )
    .unwrap();
    let mut now = Time::from_millis(1_000);
    let mut rest = data;
    let mut packets = Vec::new();
    while rest.len() >= 3 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let chunk = &rest[2..2 + len];
        rest = &rest[2 + len..];
        let _ = packet_addrs(chunk);
        if chunk.first().is_some_and(|b| b & 1 == 1) {
            let h = t.config().headroom();
            let mut buf = vec![0u8; h + chunk.len() + 15 + TAILROOM];
            buf[h..h + chunk.len()].copy_from_slice(chunk);
            let _ = t.encapsulate(now, &mut buf, chunk.len());
        } else {
            let mut buf = chunk.to_vec();
            packets.clear();
            if t.decapsulate(now, src, &mut buf, &mut packets).is_ok() {
                for r in &packets {
                    assert!(r.end <= buf.len());
                }
            }
        }
        let mut out = vec![0u8; 65_536];
        while t.poll_transmit(&mut out).is_some() {}
        now = now + std::time::Duration::from_millis(3);
        if t.poll_timeout().is_some_and(|d| d <= now) {
            t.handle_timeout(now);
        }
    }
});
