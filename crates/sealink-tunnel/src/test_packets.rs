//! Packets the TUN reader's and writer's tests build: a TCP segment over IPv4 or IPv6 as
//! Linux sends it (timestamp option), with its checksums left for each test to set.

/// IPv4's protocol number for TCP (the IPv6 next header is the same).
const TCP: u8 = 6;

/// A TCP segment from 10.0.0.1 (or fd00::1) port `sport` to 10.0.0.2 (fd00::2) port 5201:
/// IPv4 identification `id`, don't fragment, TTL 64; a 32-byte TCP header (timestamp option)
/// with `seq`, `flags` and the checksum field holding 0x1234; `payload` after it. Lengths are
/// truncated to 16 bits, so a TSO super-packet can be built too. The IPv4 header checksum is 0.
pub(crate) fn tcp_segment(
    v6: bool,
    id: u16,
    sport: u16,
    seq: u32,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let ip = if v6 { 40 } else { 20 };
    let tcp = 32;
    let mut p = vec![0u8; ip + tcp + payload.len()];
    let total = p.len();
    if v6 {
        p[0] = 0x60;
        p[4..6].copy_from_slice(&(((total - 40) & 0xffff) as u16).to_be_bytes());
        p[6] = TCP;
        p[7] = 64;
        p[8] = 0xfd;
        p[23] = 1;
        p[24] = 0xfd;
        p[39] = 2;
    } else {
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((total & 0xffff) as u16).to_be_bytes());
        p[4..6].copy_from_slice(&id.to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = TCP;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
    }
    let t = &mut p[ip..];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&5201u16.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&77u32.to_be_bytes());
    t[12] = ((tcp / 4) as u8) << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&512u16.to_be_bytes());
    t[16..18].copy_from_slice(&0x1234u16.to_be_bytes());
    t[20..24].copy_from_slice(&[1, 1, 8, 10]);
    t[24..32].copy_from_slice(&[0, 0, 0, 9, 0, 0, 0, 8]);
    t[tcp..].copy_from_slice(payload);
    p
}
