//! Reading from a TUN device with offloads: a TSO super-packet split into segments whose bytes
//! the reader does not touch.
//!
//! tun-rs's split (`recv_multiple`) copies every segment out of the super-packet and computes
//! its TCP checksum: on the sending host that ran on the TUN reader, the one thread every packet
//! of a flow goes through, at about 11 us per 64 KiB here (docs/RESULTS.md §28), a quarter of
//! the reader's time. Here the reader writes only each segment's headers (IP length and ID,
//! TCP sequence number and flags, and the pseudo-header sum in the checksum field, the kernel's
//! `CHECKSUM_PARTIAL`) and notes what is left ([`Unfinished`]): the payload still in the read
//! buffer, and the checksum. The rest ([`finish`]) is done where the packet is next touched
//! anyway: by the engine worker that seals it, in parallel and just before the AEAD reads the
//! same bytes, or by the core before it keeps a copy (a packet staged for a handshake or
//! queued to ride along; routing reads only the IP header). What leaves on the wire is the same
//! as before, byte for byte, so every peer interoperates unchanged.
//!
//! TCP super-packets (IPv4 and IPv6, ECN or not) and single packets are handled here (a single
//! packet is copied whole; its checksum may still be partial); a UDP super-packet (USO) goes
//! through tun-rs's split, checksums included.

use std::io;

use tun_rs::{
    VIRTIO_NET_HDR_GSO_TCPV4, VIRTIO_NET_HDR_GSO_TCPV6, VIRTIO_NET_HDR_GSO_UDP_L4, VirtioNetHdr,
};

const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;
const TCP: u8 = 6;
const TCP_FLAG_FIN: u8 = 0x01;
const TCP_FLAG_PSH: u8 = 0x08;
const TCP_FLAG_CWR: u8 = 0x80;
/// Offset of the checksum field in a TCP and in a UDP header.
const TCP_CSUM: u16 = 16;
const UDP_CSUM: u16 = 6;

/// A packet whose transport checksum is still partial (`CHECKSUM_PARTIAL`): the 16-bit field
/// at `start + offset` holds the folded pseudo-header sum, and the checksum covers the packet
/// from `start` to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partial {
    start: u16,
    offset: u16,
}

/// What the reader left undone in a packet: `len` payload bytes still at `src` in the read
/// buffer (for the packet's bytes from `at`), and a checksum still partial.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unfinished {
    payload: Option<(u32, u16, u16)>,
    partial: Option<Partial>,
}

impl Unfinished {
    /// Nothing is left to do.
    pub fn is_done(&self) -> bool {
        self.payload.is_none() && self.partial.is_none()
    }
}

/// Finishes a packet: copies its payload from `read` (the buffer the super-packet was read
/// into, from the IP header on), then completes its checksum.
pub fn finish(pkt: &mut [u8], read: &[u8], u: Unfinished) {
    if let Some((src, at, len)) = u.payload {
        let (src, at, len) = (src as usize, usize::from(at), usize::from(len));
        // The split checked both ranges against the buffers it was given.
        if let (Some(to), Some(from)) = (pkt.get_mut(at..at + len), read.get(src..src + len)) {
            to.copy_from_slice(from);
        }
    }
    if let Some(p) = u.partial {
        complete(pkt, p);
    }
}

/// Completes a partial checksum in place: the one's-complement sum from `start` (the field's
/// pseudo-header sum included), folded and inverted. A packet too short for the field is left
/// alone (the split checked every packet it marks).
pub fn complete(pkt: &mut [u8], p: Partial) {
    let (start, at) = (usize::from(p.start), usize::from(p.start + p.offset));
    if pkt.len() < at + 2 {
        return;
    }
    let mut c = !tun_rs::checksum(&pkt[start..], 0);
    // UDP sends a computed zero as all ones (zero means "no checksum").
    if c == 0 && p.offset == UDP_CSUM {
        c = 0xffff;
    }
    pkt[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// The folded sum of the TCP pseudo-header of a segment of `tcp_len` bytes.
fn pseudo_sum(ip: &[u8], v6: bool, tcp_len: usize) -> u16 {
    let addrs = if v6 { &ip[8..40] } else { &ip[12..20] };
    let mut sum = tun_rs::checksum_no_fold(addrs, 0) + u64::from(TCP) + tcp_len as u64;
    while sum > 0xffff {
        sum = (sum >> 16) + (sum & 0xffff);
    }
    sum as u16
}

/// Where [`split`] writes: packet `k` at `slots[k * stride + offset..]`, at most `max_len`
/// bytes (headers written, payload and checksum perhaps not); its size into `sizes[k]` and what
/// is left to do in it into `unfinished[k]`.
#[derive(Debug)]
pub struct Out<'a> {
    pub slots: &'a mut [u8],
    pub stride: usize,
    pub offset: usize,
    pub max_len: usize,
    pub sizes: &'a mut [usize],
    pub unfinished: &'a mut [Unfinished],
}

/// Splits what one TUN read returned (`hdr`, then `input`) into `out`; returns how many
/// packets were written. A super-packet that does not fit the slots, or whose headers do not
/// parse, is an error (the read is dropped), as in tun-rs.
pub fn split(hdr: &VirtioNetHdr, input: &mut [u8], out: &mut Out<'_>) -> io::Result<usize> {
    let (stride, offset, max_len) = (out.stride, out.offset, out.max_len);
    let count = (out.slots.len() / stride.max(1))
        .min(out.sizes.len())
        .min(out.unfinished.len());
    if count == 0 || offset + max_len > stride {
        return Err(invalid("no room for packets"));
    }
    let gso = hdr.gso_type & !VIRTIO_NET_HDR_GSO_ECN;
    if gso == VIRTIO_NET_HDR_GSO_NONE {
        // Up to the slot's end, not the MTU: the core counts a packet over the MTU as
        // malformed, where a refused read would go uncounted.
        if input.len() > stride - offset {
            return Err(invalid("packet longer than its slot"));
        }
        let mut p = None;
        if hdr.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 {
            if !matches!(hdr.csum_offset, TCP_CSUM | UDP_CSUM)
                || usize::from(hdr.csum_start) + usize::from(hdr.csum_offset) + 2 > input.len()
            {
                return Err(invalid("checksum field outside the packet"));
            }
            p = Some(Partial {
                start: hdr.csum_start,
                offset: hdr.csum_offset,
            });
        }
        out.slots[offset..offset + input.len()].copy_from_slice(input);
        out.sizes[0] = input.len();
        out.unfinished[0] = Unfinished {
            payload: None,
            partial: p,
        };
        return Ok(1);
    }
    let v6 = match input.first().map(|b| b >> 4) {
        Some(4) if gso == VIRTIO_NET_HDR_GSO_TCPV4 => false,
        Some(6) if gso == VIRTIO_NET_HDR_GSO_TCPV6 => true,
        Some(v @ (4 | 6)) if gso == VIRTIO_NET_HDR_GSO_UDP_L4 => {
            return split_udp(hdr, input, v == 6, out, count);
        }
        _ => return Err(invalid("GSO type does not match the packet")),
    };
    let gso_size = usize::from(hdr.gso_size);
    let iph = usize::from(hdr.csum_start);
    if gso_size == 0 || hdr.csum_offset != TCP_CSUM || iph < if v6 { 40 } else { 20 } {
        return Err(invalid("bad virtio header for a TCP super-packet"));
    }
    // The TCP header's own length, not the kernel's hdr_len (which may cover the whole first
    // packet on a forwarding path; wireguard-go and tun-rs distrust it too).
    let th = input
        .get(iph + 12)
        .map(|b| usize::from(b >> 4) * 4)
        .ok_or_else(|| invalid("TCP header cut short"))?;
    let hl = iph + th;
    if th < 20 || input.len() < hl {
        return Err(invalid("TCP header cut short"));
    }
    let payload = input.len() - hl;
    let n = payload.div_ceil(gso_size);
    if n > count {
        return Err(invalid("more segments than slots"));
    }
    if hl + gso_size.min(payload) > max_len {
        return Err(invalid("segment longer than the MTU"));
    }
    let seq0 = u32::from_be_bytes([
        input[iph + 4],
        input[iph + 5],
        input[iph + 6],
        input[iph + 7],
    ]);
    let flags0 = input[iph + 13];
    let id0 = u16::from_be_bytes([input[4], input[5]]);
    let (head, body) = input.split_at(hl);
    for (i, chunk) in body.chunks(gso_size).enumerate() {
        let total = hl + chunk.len();
        let at = i * stride + offset;
        let pkt = &mut out.slots[at..at + total];
        pkt[..hl].copy_from_slice(head);
        if v6 {
            pkt[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
        } else {
            pkt[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            pkt[4..6].copy_from_slice(&id0.wrapping_add(i as u16).to_be_bytes());
            pkt[10..12].fill(0);
            let c = !tun_rs::checksum(&pkt[..iph], 0);
            pkt[10..12].copy_from_slice(&c.to_be_bytes());
        }
        let seq = seq0.wrapping_add((gso_size * i) as u32);
        pkt[iph + 4..iph + 8].copy_from_slice(&seq.to_be_bytes());
        let mut flags = flags0;
        if i > 0 {
            // Legacy ECN GSO keeps CWR on the first segment only.
            flags &= !TCP_FLAG_CWR;
        }
        if i + 1 < n {
            // FIN and PSH belong to the last segment.
            flags &= !(TCP_FLAG_FIN | TCP_FLAG_PSH);
        }
        pkt[iph + 13] = flags;
        let ps = pseudo_sum(pkt, v6, total - iph);
        pkt[iph + 16..iph + 18].copy_from_slice(&ps.to_be_bytes());
        out.sizes[i] = total;
        out.unfinished[i] = Unfinished {
            payload: Some(((hl + i * gso_size) as u32, hl as u16, chunk.len() as u16)),
            partial: Some(Partial {
                start: iph as u16,
                offset: TCP_CSUM,
            }),
        };
    }
    Ok(n)
}

/// A UDP super-packet through tun-rs's split (checksums computed there).
fn split_udp(
    hdr: &VirtioNetHdr,
    input: &mut [u8],
    v6: bool,
    out: &mut Out<'_>,
    count: usize,
) -> io::Result<usize> {
    let mut h = *hdr;
    // As tun-rs does: the UDP header's length, not the kernel's hdr_len.
    h.hdr_len = h
        .csum_start
        .checked_add(8)
        .ok_or_else(|| invalid("bad csum_start"))?;
    let mut bufs: Vec<&mut [u8]> = out.slots.chunks_mut(out.stride).take(count).collect();
    let n = tun_rs::gso_split(input, h, &mut bufs, &mut out.sizes[..count], out.offset, v6)?;
    if n > 0 && out.sizes[..n].iter().any(|&s| s > out.max_len) {
        return Err(invalid("segment longer than the MTU"));
    }
    out.unfinished[..n].fill(Unfinished::default());
    Ok(n)
}

#[cfg(test)]
mod tests;
