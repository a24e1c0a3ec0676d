//! Writing opened packets to a TUN device with offloads: no copy and no checksum in user space.
//!
//! TCP segments of one flow that arrive in order are written as one super-packet (the rules of
//! the kernel's GRO: same addresses, ports, ack, window, options and IP header fields,
//! consecutive sequence numbers, equal-sized segments but the last, flags ACK and at most one
//! PSH, which ends the run; at most [`MAX_RUN`] segments and 64 KiB). Each write gathers its
//! pieces straight from the receive buffers where the packets were opened (`writev`: the
//! virtio header, the first segment whole, then the payload of each further segment), so the
//! payload is copied only once, by the kernel.
//!
//! Checksums are neither verified nor computed: the AEAD tag already proved every packet is the
//! one its peer sent (kernel WireGuard marks decrypted packets `CHECKSUM_UNNECESSARY` for the
//! same reason). Every TCP packet goes in with `VIRTIO_NET_HDR_F_NEEDS_CSUM` and the
//! pseudo-header sum in its checksum field, the kernel's `CHECKSUM_PARTIAL`: delivered locally
//! it is accepted as it is, and forwarded it gets its checksum where it leaves. tun-rs's GRO
//! table, used before, verified each segment's checksum and copied each payload into the
//! first packet's buffer: 13% of the receiving thread's time (docs/RESULTS.md §21).

use std::io::IoSlice;

use tun_rs::{VIRTIO_NET_HDR_GSO_TCPV4, VIRTIO_NET_HDR_GSO_TCPV6, VirtioNetHdr, checksum_no_fold};

/// Segments one super-packet may hold.
pub(crate) const MAX_RUN: usize = 64;
/// Largest super-packet (the IPv4 total length field).
const MAX_LEN: usize = 65_535;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VNET_LEN: usize = tun_rs::VIRTIO_NET_HDR_LEN;
const TCP: u8 = 6;
const ACK: u8 = 0x10;
const PSH: u8 = 0x08;

/// A TCP segment's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seg {
    v6: bool,
    /// IP header length, TCP header length, payload length.
    ip: usize,
    tcp: usize,
    payload: usize,
    seq: u32,
    flags: u8,
}

/// Parses an IPv4 (unfragmented) or IPv6 (no extension header) TCP segment.
fn parse_tcp(p: &[u8]) -> Option<Seg> {
    let (v6, ip) = match p.first()? >> 4 {
        4 => {
            let ip = usize::from(p[0] & 0x0f) * 4;
            let frag = u16::from_be_bytes([*p.get(6)?, *p.get(7)?]) & 0x3fff;
            let total = usize::from(u16::from_be_bytes([*p.get(2)?, *p.get(3)?]));
            if ip < 20 || p.len() < ip || total != p.len() || frag != 0 || p[9] != TCP {
                return None;
            }
            (false, ip)
        }
        6 => {
            let plen = usize::from(u16::from_be_bytes([*p.get(4)?, *p.get(5)?]));
            if p.len() < 40 || plen + 40 != p.len() || p[6] != TCP {
                return None;
            }
            (true, 40)
        }
        _ => return None,
    };
    let t = p.get(ip..)?;
    let tcp = usize::from(*t.get(12)? >> 4) * 4;
    if tcp < 20 || t.len() < tcp {
        return None;
    }
    Some(Seg {
        v6,
        ip,
        tcp,
        payload: t.len() - tcp,
        seq: u32::from_be_bytes([t[4], t[5], t[6], t[7]]),
        flags: t[13],
    })
}

/// Whether a segment with these flags may be part of a super-packet.
fn coalescable(s: &Seg) -> bool {
    s.payload > 0 && s.flags & !PSH == ACK
}

/// Whether `b` belongs to the flow of `a` with headers the super-packet can stand for: equal
/// but for the IP length, ID and checksum, the TCP sequence number, checksum and PSH.
fn same_flow(a: &[u8], sa: &Seg, b: &[u8], sb: &Seg) -> bool {
    if sa.v6 != sb.v6 || sa.ip != sb.ip || sa.tcp != sb.tcp {
        return false;
    }
    let ip_same = if sa.v6 {
        a[..4] == b[..4] && a[6..40] == b[6..40]
    } else {
        a[..2] == b[..2]
            && a[6] & 0xe0 == b[6] & 0xe0
            && a[8..10] == b[8..10]
            && a[12..sa.ip] == b[12..sa.ip]
    };
    let (ta, tb) = (&a[sa.ip..], &b[sb.ip..]);
    ip_same
        && ta[..4] == tb[..4]
        && ta[8..13] == tb[8..13]
        && ta[13] & !PSH == tb[13] & !PSH
        && ta[14..16] == tb[14..16]
        && ta[20..sa.tcp] == tb[20..sb.tcp]
}

/// One TUN write: packets `first..first + n` of the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub first: usize,
    pub n: usize,
    /// The segments' layout (TCP only) and payload size of all but the last.
    seg: Option<Seg>,
    gso: usize,
    total: usize,
}

impl Run {
    /// A write of packet `i` alone, as it is (a TUN device without offloads).
    pub(crate) fn single(i: usize, len: usize) -> Run {
        Run {
            first: i,
            n: 1,
            seg: None,
            gso: 0,
            total: len,
        }
    }
}

/// A hash of the packet's flow: addresses and protocol, and for TCP and UDP the ports, so that
/// every packet of one connection hashes alike and different connections between two hosts
/// spread. An IPv4 fragment (which may lack the ports) and anything unparsed hash by what they
/// have: addresses, or nothing.
pub(crate) fn flow_hash(p: &[u8]) -> u64 {
    const UDP: u8 = 17;
    let (addrs, proto, l4) = match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            let fragment = u16::from_be_bytes([p[6], p[7]]) & 0x3fff != 0;
            (&p[12..20], p[9], (!fragment).then_some(ihl))
        }
        Some(6) if p.len() >= 40 => (&p[8..40], p[6], Some(40)),
        _ => return 0,
    };
    // FxHash's step per word, a hash for spreading, not a secret.
    const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let mut h = u64::from(proto);
    let mut mix = |w: u64| h = (h.rotate_left(5) ^ w).wrapping_mul(K);
    for c in addrs.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        mix(u64::from_le_bytes(w));
    }
    if let Some(ports) = l4
        .filter(|_| proto == TCP || proto == UDP)
        .and_then(|o| p.get(o..o + 4))
    {
        mix(u64::from(u32::from_le_bytes([
            ports[0], ports[1], ports[2], ports[3],
        ])));
    }
    // A multiply carries a change only upwards: fold the high bits down (SplitMix64's
    // finish), since the caller takes the hash modulo a small count.
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Groups the packets (in order) into writes.
pub(crate) fn plan(pkts: &[&[u8]], runs: &mut Vec<Run>) {
    runs.clear();
    let mut cur: Option<(Run, u32, bool)> = None; // run, next sequence number, closed
    for (i, p) in pkts.iter().enumerate() {
        let seg = parse_tcp(p);
        if let (Some((run, next, closed)), Some(s)) = (cur.as_mut(), seg.as_ref())
            && let Some(first) = run.seg.as_ref()
            && !*closed
            && coalescable(s)
            && s.seq == *next
            && s.payload <= run.gso
            && run.n < MAX_RUN
            && run.total + s.payload <= MAX_LEN
            && same_flow(pkts[run.first], first, p, s)
        {
            run.n += 1;
            run.total += s.payload;
            *next = next.wrapping_add(s.payload as u32);
            // A shorter segment or a PSH ends the run.
            *closed = s.payload < run.gso || s.flags & PSH != 0;
            continue;
        }
        if let Some((run, _, _)) = cur.take() {
            runs.push(run);
        }
        let next = seg.map_or(0, |s| s.seq.wrapping_add(s.payload as u32));
        let closed = seg.is_none_or(|s| !coalescable(&s) || s.flags & PSH != 0);
        cur = Some((
            Run {
                first: i,
                n: 1,
                seg,
                gso: seg.map_or(0, |s| s.payload),
                total: p.len(),
            },
            next,
            closed,
        ));
    }
    if let Some((run, _, _)) = cur {
        runs.push(run);
    }
}

/// The folded sum of the TCP pseudo-header for a segment of `tcp_len` bytes (what
/// `CHECKSUM_PARTIAL` expects in the checksum field).
fn pseudo_sum(p: &[u8], v6: bool, tcp_len: usize) -> u16 {
    let addrs = if v6 { &p[8..40] } else { &p[12..20] };
    let mut sum = checksum_no_fold(addrs, 0);
    sum += u64::from(TCP) + tcp_len as u64;
    while sum > 0xffff {
        sum = (sum >> 16) + (sum & 0xffff);
    }
    sum as u16
}

/// Rewrites the first packet of `run` (in place) to head the super-packet, and returns the
/// virtio header of its write. `last_flags`: the TCP flags of the run's last segment.
pub(crate) fn finish(run: &Run, first: &mut [u8], last_flags: u8) -> [u8; VNET_LEN] {
    let mut hdr = VirtioNetHdr::default();
    if let Some(s) = run.seg {
        let total = run.total;
        if run.n > 1 {
            if s.v6 {
                first[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
            } else {
                first[2..4].copy_from_slice(&(total as u16).to_be_bytes());
                first[10..12].fill(0);
                let c = !tun_rs::checksum(&first[..s.ip], 0);
                first[10..12].copy_from_slice(&c.to_be_bytes());
            }
            first[s.ip + 13] |= last_flags & PSH;
            hdr.gso_type = if s.v6 {
                VIRTIO_NET_HDR_GSO_TCPV6
            } else {
                VIRTIO_NET_HDR_GSO_TCPV4
            };
            hdr.gso_size = run.gso as u16;
        }
        let c = pseudo_sum(first, s.v6, total - s.ip);
        first[s.ip + 16..s.ip + 18].copy_from_slice(&c.to_be_bytes());
        hdr.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
        hdr.hdr_len = (s.ip + s.tcp) as u16;
        hdr.csum_start = s.ip as u16;
        hdr.csum_offset = 16;
    }
    let mut out = [0u8; VNET_LEN];
    // The buffer is exactly the header's size: encoding cannot fail.
    let _ = hdr.encode(&mut out);
    out
}

/// The pieces of `run`'s write: the virtio header, the first packet whole, then each further
/// segment's payload (`pkt(i)`: packet `i` of the batch). `iov` must hold [`MAX_RUN`] + 1 entries; returns how many are used.
pub(crate) fn gather<'a>(
    run: &Run,
    hdr: &'a [u8],
    pkt: impl Fn(usize) -> &'a [u8],
    iov: &mut [IoSlice<'a>],
) -> usize {
    iov[0] = IoSlice::new(hdr);
    iov[1] = IoSlice::new(pkt(run.first));
    let skip = run.seg.map_or(0, |s| s.ip + s.tcp);
    for k in 1..run.n {
        iov[1 + k] = IoSlice::new(&pkt(run.first + k)[skip..]);
    }
    run.n + 1
}

/// The TCP flags of a packet (0 if it is not TCP).
pub(crate) fn tcp_flags(p: &[u8]) -> u8 {
    parse_tcp(p).map_or(0, |s| s.flags)
}

#[cfg(test)]
mod tests;

/// The receive path's whole TUN-write planning on `packets` (opened packets as a peer sent
/// them: any bytes), as the data path runs it: plan, the last segments' flags, the in-place
/// rewrite of each run's first packet, the gather and the writer choice. Returns each write's
/// bytes (virtio header first) and its packet count. Panics if a plan breaks its invariants
/// (every packet in exactly one run, in order; a run within MAX_RUN segments and 64 KiB; a
/// gather of exactly the run's pieces). For the fuzz target `tun_write_plan` and the tests;
/// nothing here may panic on any input otherwise.
#[doc(hidden)]
pub fn check_plan(packets: &[Vec<u8>]) -> Vec<(Vec<u8>, usize)> {
    let mut pkts: Vec<Vec<u8>> = packets.to_vec();
    let mut runs = Vec::new();
    {
        let slices: Vec<&[u8]> = pkts.iter().map(|p| p.as_slice()).collect();
        plan(&slices, &mut runs);
    }
    let mut next = 0;
    for r in &runs {
        assert_eq!(r.first, next, "runs cover the packets in order");
        assert!(r.n >= 1 && r.n <= MAX_RUN, "a run of {} packets", r.n);
        assert!(
            r.n == 1 || r.total <= MAX_LEN,
            "a super-packet of {} bytes",
            r.total
        );
        next += r.n;
    }
    assert_eq!(next, pkts.len(), "every packet in a run");
    let last: Vec<u8> = runs
        .iter()
        .map(|r| tcp_flags(&pkts[r.first + r.n - 1]))
        .collect();
    let hdrs: Vec<[u8; VNET_LEN]> = runs
        .iter()
        .zip(&last)
        .map(|(r, &lf)| finish(r, &mut pkts[r.first], lf))
        .collect();
    let slices: Vec<&[u8]> = pkts.iter().map(|p| p.as_slice()).collect();
    let mut iov = [IoSlice::new(&[]); MAX_RUN + 1];
    runs.iter()
        .zip(&hdrs)
        .map(|(r, h)| {
            let n = gather(r, h, |i| slices[i], &mut iov);
            assert_eq!(n, r.n + 1, "a write gathers its header and its packets");
            let _ = flow_hash(slices[r.first]);
            (
                iov[..n].iter().flat_map(|v| v.iter().copied()).collect(),
                r.n,
            )
        })
        .collect()
}
