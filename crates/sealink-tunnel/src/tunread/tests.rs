use super::*;
use proptest::prelude::*;

const STRIDE: usize = 1600;
const OFFSET: usize = 18;
const MTU: usize = 1500;

/// A TCP super-packet as the kernel hands it to a TUN device with TSO: one IP header and TCP
/// header (timestamp option) over the whole payload, the checksum field holding the
/// pseudo-header sum (any value: both splits overwrite it).
fn super_packet(v6: bool, id: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    crate::test_packets::tcp_segment(v6, id, 40000, seq, flags, payload)
}

fn tso_header(v6: bool, gso_size: u16, ecn: bool) -> VirtioNetHdr {
    VirtioNetHdr {
        flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
        gso_type: if v6 {
            VIRTIO_NET_HDR_GSO_TCPV6
        } else {
            VIRTIO_NET_HDR_GSO_TCPV4
        } | if ecn { VIRTIO_NET_HDR_GSO_ECN } else { 0 },
        hdr_len: if v6 { 72 } else { 52 },
        gso_size,
        csum_start: if v6 { 40 } else { 20 },
        csum_offset: 16,
    }
}

/// Ours: split, then each packet finished (as the worker or the core does).
fn ours(hdr: &VirtioNetHdr, input: &[u8]) -> io::Result<Vec<Vec<u8>>> {
    let mut slots = vec![0u8; STRIDE * 64];
    let (mut sizes, mut unfinished) = (vec![0usize; 64], vec![Unfinished::default(); 64]);
    let mut inp = input.to_vec();
    let n = split(
        hdr,
        &mut inp,
        &mut Out {
            slots: &mut slots,
            stride: STRIDE,
            offset: OFFSET,
            max_len: MTU,
            sizes: &mut sizes,
            unfinished: &mut unfinished,
        },
    )?;
    Ok((0..n)
        .map(|i| {
            let mut p = slots[i * STRIDE + OFFSET..i * STRIDE + OFFSET + sizes[i]].to_vec();
            finish(&mut p, &inp, unfinished[i]);
            p
        })
        .collect())
}

/// tun-rs's split, which computes every checksum itself.
fn theirs(hdr: &VirtioNetHdr, input: &[u8], v6: bool) -> Vec<Vec<u8>> {
    let mut bufs = vec![vec![0u8; STRIDE]; 64];
    let mut sizes = vec![0usize; 64];
    let mut inp = input.to_vec();
    let n = tun_rs::gso_split(&mut inp, *hdr, &mut bufs, &mut sizes, OFFSET, v6).unwrap();
    (0..n)
        .map(|i| bufs[i][OFFSET..OFFSET + sizes[i]].to_vec())
        .collect()
}

/// Whether a TCP packet's checksum verifies (the sum over pseudo-header and segment is 0xffff).
fn tcp_checksum_ok(p: &[u8], v6: bool) -> bool {
    let ip = if v6 { 40 } else { 20 };
    let addrs = if v6 { &p[8..40] } else { &p[12..20] };
    let pseudo = tun_rs::checksum_no_fold(addrs, 0) + u64::from(TCP) + (p.len() - ip) as u64;
    tun_rs::checksum(&p[ip..], pseudo) == 0xffff
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Byte for byte what tun-rs's split gives, once the checksums are completed: the wire does
    /// not change.
    #[test]
    fn split_then_complete_is_tun_rs_split(
        v6 in any::<bool>(),
        ecn in any::<bool>(),
        gso_size in 1usize..=1400,
        len in 1usize..=20_000,
        id in any::<u16>(),
        seq in any::<u32>(),
        flags in prop::sample::select(vec![0x10u8, 0x18, 0x19, 0x90, 0x98, 0x11]),
        fill in any::<u8>(),
    ) {
        let payload: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ fill).collect();
        prop_assume!(len.div_ceil(gso_size) <= 64);
        let input = super_packet(v6, id, seq, flags, &payload);
        let hdr = tso_header(v6, gso_size as u16, ecn);
        let a = ours(&hdr, &input).unwrap();
        let b = theirs(&hdr, &input, v6);
        prop_assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            prop_assert_eq!(x, y);
            prop_assert!(tcp_checksum_ok(x, v6));
        }
    }

    /// Whatever the header and bytes, splitting never panics.
    #[test]
    fn split_never_panics(
        flags in any::<u8>(),
        gso_type in prop::sample::select(vec![0u8, 1, 3, 4, 5, 0x81, 0x84, 0x7f]),
        hdr_len in any::<u16>(),
        gso_size in any::<u16>(),
        csum_start in 0u16..120,
        csum_offset in prop::sample::select(vec![0u16, 6, 16, 200]),
        bytes in proptest::collection::vec(any::<u8>(), 0..3000),
    ) {
        let hdr = VirtioNetHdr { flags, gso_type, hdr_len, gso_size, csum_start, csum_offset };
        let _ = ours(&hdr, &bytes);
    }
}

#[test]
fn a_single_partial_packet_is_copied_and_completed_later() {
    for v6 in [false, true] {
        let mut pkt = super_packet(v6, 7, 1000, 0x18, b"hello, tunnel");
        let ip = if v6 { 40 } else { 20 };
        // As the kernel leaves it: the pseudo-header sum in the field.
        let ps = pseudo_sum(&pkt, v6, pkt.len() - ip);
        pkt[ip + 16..ip + 18].copy_from_slice(&ps.to_be_bytes());
        let hdr = VirtioNetHdr {
            flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
            csum_start: ip as u16,
            csum_offset: 16,
            ..VirtioNetHdr::default()
        };
        let got = ours(&hdr, &pkt).unwrap();
        assert_eq!(got.len(), 1);
        assert!(tcp_checksum_ok(&got[0], v6));
        assert_eq!(got[0][..ip + 16], pkt[..ip + 16]);
        assert_eq!(got[0][ip + 18..], pkt[ip + 18..]);
    }
}

#[test]
fn refused_reads() {
    let v4 = super_packet(false, 1, 1, 0x10, &[0u8; 3000]);
    // More segments than slots.
    assert!(ours(&tso_header(false, 10, false), &v4).is_err());
    // A segment longer than the MTU.
    assert!(ours(&tso_header(false, 1460, false), &v4).is_err());
    // The GSO type of the other family.
    assert!(ours(&tso_header(true, 1000, false), &v4).is_err());
    // A single packet longer than its slot (one over the MTU is the core's to count), and a
    // checksum field past its end.
    assert!(ours(&VirtioNetHdr::default(), &[0x45; 1501]).is_ok());
    assert!(ours(&VirtioNetHdr::default(), &[0x45; STRIDE - OFFSET + 1]).is_err());
    let short = VirtioNetHdr {
        flags: VIRTIO_NET_HDR_F_NEEDS_CSUM,
        csum_start: 20,
        csum_offset: 16,
        ..VirtioNetHdr::default()
    };
    assert!(ours(&short, &v4[..30]).is_err());
}
