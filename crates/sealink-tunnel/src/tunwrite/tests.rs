use super::*;
use proptest::prelude::*;

/// The Internet checksum (RFC 1071) of `b`, complemented, as it goes in a header.
fn inet(b: &[u8], initial: u64) -> u16 {
    !tun_rs::checksum(b, initial)
}

/// A valid IPv4 or IPv6 TCP segment of `flow` (0 or 1 picks the source port).
fn segment(v6: bool, flow: u8, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let (id, sport) = (seq as u16, 40000 + u16::from(flow));
    let mut p = crate::test_packets::tcp_segment(v6, id, sport, seq, flags, payload);
    let ip = if v6 { 40 } else { 20 };
    if !v6 {
        let c = inet(&p[..20], 0);
        p[10..12].copy_from_slice(&c.to_be_bytes());
    }
    let c = full_tcp_checksum(&p, v6, ip);
    p[ip + 16..ip + 18].copy_from_slice(&c.to_be_bytes());
    p
}

/// The TCP checksum a packet must carry (the field zeroed while summing).
fn full_tcp_checksum(p: &[u8], v6: bool, ip: usize) -> u16 {
    let mut t = p[ip..].to_vec();
    t[16..18].fill(0);
    let addrs = if v6 { &p[8..40] } else { &p[12..20] };
    let mut pseudo = tun_rs::checksum_no_fold(addrs, 0);
    pseudo += u64::from(TCP) + t.len() as u64;
    inet(&t, pseudo)
}

/// What the kernel does with a `NEEDS_CSUM` packet that leaves: the sum from `csum_start`,
/// with the pseudo-header sum already in the field, complemented into the field.
fn complete_partial(p: &mut [u8], start: usize) {
    let c = inet(&p[start..], 0);
    p[start + 16..start + 18].copy_from_slice(&c.to_be_bytes());
}

/// Plans, finishes and gathers `pkts` as the data path does (through [`check_plan`], so every
/// test also checks its invariants); returns each write's header, bytes and packet count.
fn writes(pkts: &mut [Vec<u8>]) -> Vec<(VirtioNetHdr, Vec<u8>, usize)> {
    check_plan(pkts)
        .into_iter()
        .map(|(bytes, n)| {
            let hdr = VirtioNetHdr::decode(&bytes[..VNET_LEN]).unwrap();
            (hdr, bytes[VNET_LEN..].to_vec(), n)
        })
        .collect()
}

#[test]
fn a_flow_in_order_becomes_one_super_packet_the_kernel_accepts() {
    for v6 in [false, true] {
        let data: Vec<u8> = (0..10 * 1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut pkts: Vec<Vec<u8>> = data
            .chunks(1000)
            .enumerate()
            .map(|(k, c)| {
                segment(
                    v6,
                    0,
                    5000 + 1000 * k as u32,
                    if k == 9 { ACK | PSH } else { ACK },
                    c,
                )
            })
            .collect();
        let w = writes(&mut pkts);
        assert_eq!(w.len(), 1, "v6={v6}");
        let (hdr, mut sp, n) = w.into_iter().next().unwrap();
        assert_eq!(n, 10);
        let ip = if v6 { 40 } else { 20 };
        assert_eq!(hdr.flags, VIRTIO_NET_HDR_F_NEEDS_CSUM);
        assert_eq!(
            hdr.gso_type,
            if v6 {
                VIRTIO_NET_HDR_GSO_TCPV6
            } else {
                VIRTIO_NET_HDR_GSO_TCPV4
            }
        );
        assert_eq!(
            (hdr.gso_size, hdr.hdr_len, hdr.csum_start, hdr.csum_offset),
            (1000, ip as u16 + 32, ip as u16, 16)
        );
        // The super-packet is the one big segment the sender's stack had before TSO.
        let mut want = segment(v6, 0, 5000, ACK | PSH, &data);
        assert_eq!(sp.len(), want.len());
        if !v6 {
            // The IP ID is the first segment's; the header checksum is valid.
            want[4..6].copy_from_slice(&sp[4..6]);
            want[10..12].fill(0);
            let c = inet(&want[..20], 0);
            want[10..12].copy_from_slice(&c.to_be_bytes());
            assert_eq!(inet(&sp[..20], 0), 0, "IPv4 header checksum");
        }
        complete_partial(&mut sp, ip);
        assert_eq!(sp, want, "v6={v6}");
    }
}

#[test]
fn runs_break_where_gro_would() {
    let p = |seq: u32, flags: u8, len: usize| segment(false, 0, seq, flags, &vec![1u8; len]);
    let count =
        |mut pkts: Vec<Vec<u8>>| -> Vec<usize> { writes(&mut pkts).iter().map(|w| w.2).collect() };
    // A gap in the sequence numbers.
    assert_eq!(
        count(vec![p(0, ACK, 100), p(100, ACK, 100), p(300, ACK, 100)]),
        [2, 1]
    );
    // A PSH ends the run after itself.
    assert_eq!(
        count(vec![
            p(0, ACK, 100),
            p(100, ACK | PSH, 100),
            p(200, ACK, 100)
        ]),
        [2, 1]
    );
    // A shorter segment ends it; a longer one cannot join.
    assert_eq!(
        count(vec![p(0, ACK, 100), p(100, ACK, 50), p(150, ACK, 100)]),
        [2, 1]
    );
    assert_eq!(count(vec![p(0, ACK, 100), p(100, ACK, 200)]), [1, 1]);
    // SYN, FIN, pure ACKs and other flows stay alone.
    assert_eq!(count(vec![p(0, ACK, 100), p(100, ACK | 0x01, 100)]), [1, 1]);
    assert_eq!(count(vec![p(0, ACK, 0), p(0, ACK, 0)]), [1, 1]);
    let other = segment(false, 1, 100, ACK, &[1u8; 100]);
    assert_eq!(count(vec![p(0, ACK, 100), other]), [1, 1]);
    // A different window, or IPv4 and IPv6, never merge.
    let mut w = p(100, ACK, 100);
    w[20 + 14] = 9;
    assert_eq!(count(vec![p(0, ACK, 100), w]), [1, 1]);
    assert_eq!(
        count(vec![
            p(0, ACK, 100),
            segment(true, 0, 100, ACK, &[1u8; 100])
        ]),
        [1, 1]
    );
    // At most MAX_RUN segments and 64 KiB.
    let many: Vec<Vec<u8>> = (0..70).map(|k| p(k * 10, ACK, 10)).collect();
    assert_eq!(count(many), [MAX_RUN, 6]);
    let big: Vec<Vec<u8>> = (0..50).map(|k| p(k * 1400, ACK, 1400)).collect();
    let c = count(big);
    assert_eq!(c.iter().sum::<usize>(), 50);
    assert!(c[0] < 50 && (20 + 32 + c[0] * 1400) <= 65_535);
}

#[test]
fn other_packets_are_written_alone_and_untouched() {
    // UDP, ICMP, a fragment, garbage: one write each, no virtio flags, bytes as they came.
    let mut udp = segment(false, 0, 0, ACK, &[5u8; 30]);
    udp[9] = 17;
    let mut frag = segment(false, 0, 0, ACK, &[5u8; 30]);
    frag[6] = 0x20; // MF
    let junk = vec![0x45u8, 0, 0];
    let mut pkts = vec![udp.clone(), frag.clone(), junk.clone(), vec![]];
    let w = writes(&mut pkts);
    assert_eq!(w.len(), 4);
    for ((hdr, bytes, n), want) in w.iter().zip([udp, frag, junk, vec![]]) {
        assert_eq!((hdr.flags, hdr.gso_type, *n), (0, 0, 1));
        assert_eq!(*bytes, want);
    }
}

#[test]
fn a_lone_tcp_segment_gets_a_partial_checksum_that_completes_to_the_real_one() {
    for v6 in [false, true] {
        let orig = segment(v6, 0, 42, ACK | PSH, b"hello");
        let mut pkts = vec![orig.clone()];
        let w = writes(&mut pkts);
        let (hdr, mut bytes, _) = w.into_iter().next().unwrap();
        assert_eq!((hdr.flags, hdr.gso_type), (VIRTIO_NET_HDR_F_NEEDS_CSUM, 0));
        complete_partial(&mut bytes, hdr.csum_start.into());
        assert_eq!(bytes, orig);
    }
}

proptest! {
    /// Any in-order stream of a flow's segments (random sizes, PSH anywhere) is written as
    /// runs whose payloads, in order, are the stream, each run completing to valid checksums.
    #[test]
    fn coalesced_writes_carry_the_stream(
        sizes in prop::collection::vec(1usize..1500, 1..100),
        psh in prop::collection::vec(any::<bool>(), 100),
        v6 in any::<bool>(),
    ) {
        let mut seq = 1000u32;
        let mut stream = Vec::new();
        let mut pkts = Vec::new();
        for (k, &n) in sizes.iter().enumerate() {
            let payload: Vec<u8> = (0..n).map(|i| (i + k * 13) as u8).collect();
            stream.extend_from_slice(&payload);
            pkts.push(segment(v6, 0, seq, if psh[k] { ACK | PSH } else { ACK }, &payload));
            seq = seq.wrapping_add(n as u32);
        }
        let ip = if v6 { 40 } else { 20 };
        let mut got = Vec::new();
        let mut total = 0;
        for (hdr, mut bytes, n) in writes(&mut pkts) {
            total += n;
            prop_assert!(bytes.len() <= 65_535 && n <= MAX_RUN);
            complete_partial(&mut bytes, hdr.csum_start.into());
            prop_assert_eq!(full_tcp_checksum(&bytes, v6, ip), u16::from_be_bytes([bytes[ip + 16], bytes[ip + 17]]));
            if !v6 {
                prop_assert_eq!(inet(&bytes[..20], 0), 0);
            }
            got.extend_from_slice(&bytes[ip + 32..]);
        }
        prop_assert_eq!(total, sizes.len());
        prop_assert_eq!(got, stream);
    }
}

#[test]
fn every_packet_of_a_connection_hashes_alike_and_connections_spread() {
    for v6 in [false, true] {
        // Data, a pure ACK, a PSH and a FIN of one connection: one writer.
        let a = flow_hash(&segment(v6, 0, 1, ACK, &[1; 100]));
        assert_eq!(a, flow_hash(&segment(v6, 0, 99, ACK, &[])));
        assert_eq!(a, flow_hash(&segment(v6, 0, 7, ACK | PSH, &[2; 3])));
        assert_eq!(a, flow_hash(&segment(v6, 0, 7, ACK | 0x01, &[])));
        // Another source port: another connection, which spreads over writers.
        let b = flow_hash(&segment(v6, 1, 1, ACK, &[1; 100]));
        assert_ne!(a, b);
        let writers: std::collections::HashSet<u64> = (0..64u8)
            .map(|f| flow_hash(&segment(v6, f, 1, ACK, &[0; 10])) % 4)
            .collect();
        assert_eq!(
            writers.len(),
            4,
            "64 connections over 4 writers use them all"
        );
    }
    // An IPv4 fragment hashes by addresses and protocol alone: a non-first fragment has no
    // ports, and every fragment of a datagram must go the same way.
    let mut first = segment(false, 0, 1, ACK, &[0; 40]);
    first[6] = 0x20; // MF
    let mut later = segment(false, 1, 5, ACK, &[9; 40]);
    later[6] = 0x00;
    later[7] = 0x10; // offset
    assert_eq!(flow_hash(&first), flow_hash(&later));
    // Anything else does not panic, whatever its length.
    for n in 0..60 {
        let _ = flow_hash(&vec![0x45; n]);
        let _ = flow_hash(&vec![0x60; n]);
    }
}

proptest! {
    /// Hashing never panics on any bytes.
    #[test]
    fn flow_hash_takes_any_bytes(p in prop::collection::vec(any::<u8>(), 0..80)) {
        let _ = flow_hash(&p);
    }
}

proptest! {
    /// The fuzz target's checks on random packets, and on runs of real segments with some
    /// bytes flipped (the shapes the plan must take apart without panicking).
    #[test]
    fn planning_any_packets_keeps_its_invariants(
        raw in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..120), 0..20),
        sizes in prop::collection::vec(1usize..1500, 1..70),
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        v6 in any::<bool>(),
    ) {
        let _ = check_plan(&raw);
        let mut seq = 7u32;
        let mut pkts: Vec<Vec<u8>> = sizes
            .iter()
            .map(|&n| {
                let p = segment(v6, 0, seq, ACK, &vec![3u8; n]);
                seq = seq.wrapping_add(n as u32);
                p
            })
            .collect();
        for (at, x) in flips {
            let k = at % pkts.len();
            let len = pkts[k].len();
            pkts[k][at % len] ^= x;
        }
        let _ = check_plan(&pkts);
    }
}
