//! IP prefixes, the cryptokey routing table, and the bounds-checked reading of the two addresses
//! an IPv4 or IPv6 header carries. Nothing here trusts a length field it has not checked.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IPv4 or IPv6 prefix such as `10.9.0.0/24`; host bits are cleared on construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

/// Why a prefix did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpNetError {
    #[error("{0:?} is not an IP address")]
    Address(String),
    #[error("prefix length {len} is out of range for {addr} (at most {max})")]
    PrefixRange { addr: IpAddr, len: String, max: u8 },
}

fn max_prefix(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

fn mask_bits(bits: u8, width: u8) -> u128 {
    if bits == 0 {
        0
    } else {
        (u128::MAX << (128 - u32::from(bits))) >> (128 - u32::from(width))
    }
}

fn to_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

impl IpNet {
    /// `addr/prefix` with the host bits of `addr` cleared.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, IpNetError> {
        let max = max_prefix(addr);
        if prefix > max {
            return Err(IpNetError::PrefixRange {
                addr,
                len: prefix.to_string(),
                max,
            });
        }
        let bits = to_bits(addr) & mask_bits(prefix, max);
        let addr = match addr {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(bits as u32)),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(bits)),
        };
        Ok(IpNet { addr, prefix })
    }
    pub fn addr(&self) -> IpAddr {
        self.addr
    }
    pub fn prefix(&self) -> u8 {
        self.prefix
    }
    /// Whether `ip` lies inside this prefix (never across address families).
    pub fn contains(&self, ip: IpAddr) -> bool {
        if ip.is_ipv4() != self.addr.is_ipv4() {
            return false;
        }
        let max = max_prefix(ip);
        to_bits(ip) & mask_bits(self.prefix, max) == to_bits(self.addr)
    }
}

impl FromStr for IpNet {
    type Err = IpNetError;
    /// `ADDR/LEN`, or a bare address meaning the one host (`/32` or `/128`).
    fn from_str(s: &str) -> Result<Self, IpNetError> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| IpNetError::Address(a.to_owned()))?;
        let max = max_prefix(addr);
        let prefix = match p {
            None => max,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|v| *v <= max)
                .ok_or_else(|| IpNetError::PrefixRange {
                    addr,
                    len: p.to_owned(),
                    max,
                })?,
        };
        IpNet::new(addr, prefix)
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Source and destination of an IP packet, if `pkt` is exactly one well-formed IPv4 or IPv6
/// packet (version nibble, header length and total length all consistent with `pkt.len()`).
pub fn packet_addrs(pkt: &[u8]) -> Option<(IpAddr, IpAddr)> {
    match pkt.first()? >> 4 {
        4 => {
            let h: &[u8; 20] = pkt.get(..20)?.try_into().ok()?;
            let ihl = usize::from(h[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            if ihl < 20 || total < ihl || total != pkt.len() {
                return None;
            }
            let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
            let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
            Some((src.into(), dst.into()))
        }
        6 => {
            let h: &[u8; 40] = pkt.get(..40)?.try_into().ok()?;
            let payload = usize::from(u16::from_be_bytes([h[4], h[5]]));
            // Jumbograms (payload length 0) never fit a tunnel MTU: refused with the rest.
            if 40 + payload != pkt.len() {
                return None;
            }
            let src: [u8; 16] = h[8..24].try_into().ok()?;
            let dst: [u8; 16] = h[24..40].try_into().ok()?;
            Some((Ipv6Addr::from(src).into(), Ipv6Addr::from(dst).into()))
        }
        _ => None,
    }
}

/// Whether a packet stays on its link: a link-local source or destination (fe80::/10,
/// 169.254.0.0/16), or a multicast or broadcast destination (ff00::/8, 224.0.0.0/4,
/// 255.255.255.255). The kernel sends such packets on any interface of its own accord (router
/// solicitations, MLD and IGMP reports); with no peer's allowed IPs covering them they are
/// dropped under their own reason rather than as a misrouted packet.
pub fn is_link_scoped(src: IpAddr, dst: IpAddr) -> bool {
    let link_local = |a: IpAddr| match a {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => a.is_unicast_link_local(),
    };
    let group = match dst {
        IpAddr::V4(a) => a.is_multicast() || a.is_broadcast(),
        IpAddr::V6(a) => a.is_multicast(),
    };
    group || link_local(src) || link_local(dst)
}

/// Whether the packet's DSCP asks for low delay: EF (46), CS6 (48) or CS7 (56). Such packets
/// never wait in the piggyback queue.
pub fn is_urgent(pkt: &[u8]) -> bool {
    let dscp = match pkt.first().map(|b| b >> 4) {
        Some(4) => pkt.get(1).map_or(0, |t| t >> 2),
        // IPv6 traffic class straddles bytes 0 and 1.
        Some(6) => match (pkt.first(), pkt.get(1)) {
            (Some(a), Some(b)) => ((a & 0x0f) << 2) | (b >> 6),
            _ => 0,
        },
        _ => 0,
    };
    matches!(dscp, 46 | 48 | 56)
}

/// Cryptokey routing: prefixes to peers, the longest matching prefix wins.
///
/// A hub has tens of thousands of prefixes a laptop two. Every route lives in a
/// hash table per family and prefix length (network bits to peer), so adding one and finding
/// one's owner cost O(1) and a lookup costs one probe per prefix length in use (a handful in
/// practice, longest first). While there are at most [`FEW`] routes, lookups scan a vector kept
/// longest prefix first instead, which beats hashing for the common small tunnel. The prefixes
/// of each peer are indexed too, so listing them (`show`) is linear overall.
#[derive(Debug, Clone, Default)]
pub struct AllowedIps {
    /// [IPv4, IPv6]: prefix length -> network bits -> peer.
    tables: [std::collections::BTreeMap<u8, std::collections::HashMap<u128, usize, PrefixHash>>; 2],
    /// Every route, longest prefix first, while there are at most [`FEW`] (else `None`).
    few: Option<Vec<(IpNet, usize)>>,
    /// Each peer's prefixes, in the order they were added.
    of_peer: std::collections::HashMap<usize, Vec<IpNet>>,
    len: usize,
}

/// Up to this many routes, a lookup scans [`AllowedIps::few`].
pub const FEW: usize = 16;

/// A multiply-rotate hash for network bits. The keys are prefixes from the config, and lookups
/// only probe: nothing a peer sends adds a key, so no flooding defence (SipHash's cost) is
/// needed on the per-packet path.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrefixHash;

impl std::hash::BuildHasher for PrefixHash {
    type Hasher = PrefixHasher;
    fn build_hasher(&self) -> PrefixHasher {
        PrefixHasher(0)
    }
}

/// The hasher of [`PrefixHash`].
#[derive(Debug, Clone, Copy)]
pub struct PrefixHasher(u64);

impl std::hash::Hasher for PrefixHasher {
    fn finish(&self) -> u64 {
        // The high bits of the product mix every input bit; hashbrown takes its control
        // bits from the top and its bucket from the bottom.
        self.0.rotate_left(26)
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_u128(&mut self, x: u128) {
        self.write_u64(x as u64);
        self.write_u64((x >> 64) as u64);
    }
}

fn family(addr: IpAddr) -> usize {
    usize::from(addr.is_ipv6())
}

impl AllowedIps {
    /// Adds a route; a prefix already present is reassigned to `peer` (the last one wins).
    pub fn insert(&mut self, net: IpNet, peer: usize) {
        let table = self.tables[family(net.addr)].entry(net.prefix).or_default();
        match table.insert(to_bits(net.addr), peer) {
            Some(old) if old == peer => return,
            Some(old) => {
                if let Some(v) = self.of_peer.get_mut(&old) {
                    v.retain(|n| *n != net);
                }
            }
            None => self.len += 1,
        }
        self.of_peer.entry(peer).or_default().push(net);
        if self.len > FEW {
            self.few = None;
            return;
        }
        let few = self.few.get_or_insert_with(Vec::new);
        few.retain(|(n, _)| *n != net);
        let at = few
            .iter()
            .position(|(n, _)| n.prefix < net.prefix)
            .unwrap_or(few.len());
        few.insert(at, (net, peer));
    }
    /// Removes a route; returns the peer it was assigned to.
    pub fn remove(&mut self, net: IpNet) -> Option<usize> {
        let fam = family(net.addr);
        let table = self.tables[fam].get_mut(&net.prefix)?;
        let peer = table.remove(&to_bits(net.addr))?;
        if table.is_empty() {
            self.tables[fam].remove(&net.prefix);
        }
        self.len -= 1;
        if let Some(v) = self.of_peer.get_mut(&peer) {
            v.retain(|n| *n != net);
            if v.is_empty() {
                self.of_peer.remove(&peer);
            }
        }
        match &mut self.few {
            Some(few) => few.retain(|(n, _)| *n != net),
            // Back to a few: the short list again (an insert only extends one that exists).
            None if self.len <= FEW => {
                let mut few: Vec<(IpNet, usize)> = self
                    .of_peer
                    .iter()
                    .flat_map(|(p, v)| v.iter().map(move |n| (*n, *p)))
                    .collect();
                few.sort_by_key(|e| std::cmp::Reverse(e.0.prefix));
                self.few = Some(few);
            }
            None => {}
        }
        Some(peer)
    }
    /// The peer whose longest matching prefix contains `ip`.
    #[inline]
    pub fn lookup(&self, ip: IpAddr) -> Option<usize> {
        if let Some(few) = &self.few {
            return few.iter().find(|(n, _)| n.contains(ip)).map(|(_, p)| *p);
        }
        let bits = to_bits(ip);
        let width = max_prefix(ip);
        self.tables[family(ip)]
            .iter()
            .rev()
            .find_map(|(len, t)| t.get(&(bits & mask_bits(*len, width))).copied())
    }
    /// The peer this exact prefix is assigned to.
    pub fn owner(&self, net: IpNet) -> Option<usize> {
        self.tables[family(net.addr)]
            .get(&net.prefix)?
            .get(&to_bits(net.addr))
            .copied()
    }
    /// Prefixes routed to `peer`.
    pub fn of_peer(&self, peer: usize) -> impl Iterator<Item = IpNet> + '_ {
        self.of_peer.get(&peer).into_iter().flatten().copied()
    }
    /// How many prefixes are routed.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn v4(src: [u8; 4], dst: [u8; 4], payload: usize) -> Vec<u8> {
        let total = 20 + payload;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p
    }

    #[test]
    fn prefixes_parse_and_match() {
        let n: IpNet = "10.9.0.7/24".parse().unwrap();
        assert_eq!(n.to_string(), "10.9.0.0/24");
        assert!(n.contains("10.9.0.200".parse().unwrap()));
        assert!(!n.contains("10.9.1.1".parse().unwrap()));
        assert!(!n.contains("::1".parse().unwrap()));
        let h: IpNet = "fd00::1".parse().unwrap();
        assert_eq!(h.prefix(), 128);
        assert!(
            "0.0.0.0/0"
                .parse::<IpNet>()
                .unwrap()
                .contains("1.2.3.4".parse().unwrap())
        );
        assert!("10.0.0.0/33".parse::<IpNet>().is_err());
        assert!("10.0.0/8".parse::<IpNet>().is_err());
        assert!("fd00::/129".parse::<IpNet>().is_err());
    }

    #[test]
    fn longest_prefix_wins() {
        let mut t = AllowedIps::default();
        t.insert("10.0.0.0/8".parse().unwrap(), 1);
        t.insert("10.9.0.2/32".parse().unwrap(), 2);
        t.insert("0.0.0.0/0".parse().unwrap(), 3);
        assert_eq!(t.lookup("10.9.0.2".parse().unwrap()), Some(2));
        assert_eq!(t.lookup("10.9.0.3".parse().unwrap()), Some(1));
        assert_eq!(t.lookup("192.168.0.1".parse().unwrap()), Some(3));
        assert_eq!(t.lookup("fd00::1".parse().unwrap()), None);
    }

    #[test]
    fn link_scope_is_link_local_or_a_group() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for (src, dst) in [
            ("fe80::1", "ff02::2"),     // a router solicitation
            ("::", "ff02::16"),         // an MLDv2 report before any address
            ("fe80::1", "fe80::2"),     // link-local unicast
            ("fd00::1", "ff0e::1"),     // any multicast
            ("10.9.0.1", "224.0.0.22"), // an IGMPv3 report
            ("10.9.0.1", "255.255.255.255"),
            ("169.254.1.1", "10.9.0.2"),
            ("febf::1", "fd00::2"), // fe80::/10 ends at febf:ffff:...
        ] {
            assert!(is_link_scoped(ip(src), ip(dst)), "{src} -> {dst}");
        }
        for (src, dst) in [
            ("10.9.0.1", "10.9.0.99"),
            ("fd00::1", "fd00::2"),
            ("fd00::1", "fec0::1"), // just past fe80::/10
            ("10.9.0.1", "223.255.255.255"),
        ] {
            assert!(!is_link_scoped(ip(src), ip(dst)), "{src} -> {dst}");
        }
    }

    #[test]
    fn headers_are_bounds_checked() {
        let p = v4([10, 9, 0, 1], [10, 9, 0, 2], 8);
        assert_eq!(
            packet_addrs(&p),
            Some(("10.9.0.1".parse().unwrap(), "10.9.0.2".parse().unwrap()))
        );
        assert_eq!(packet_addrs(&p[..27]), None);
        assert_eq!(packet_addrs(&[]), None);
        assert_eq!(packet_addrs(&[0x45; 19]), None);
        let mut bad = p.clone();
        bad[0] = 0x44; // IHL 16 bytes
        assert_eq!(packet_addrs(&bad), None);
        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        v6[5] = 8;
        v6[23] = 1;
        v6[39] = 2;
        assert_eq!(
            packet_addrs(&v6),
            Some(("::1".parse().unwrap(), "::2".parse().unwrap()))
        );
        assert_eq!(packet_addrs(&v6[..47]), None);
    }

    proptest::proptest! {
        #[test]
        fn parser_never_panics(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..100)) {
            let _ = packet_addrs(&b);
        }

        #[test]
        fn contains_matches_prefix_bits(a in proptest::prelude::any::<u32>(), b in proptest::prelude::any::<u32>(), len in 0u8..=32) {
            let n = IpNet::new(IpAddr::V4(Ipv4Addr::from(a)), len).unwrap();
            let expect = len == 0 || (a ^ b) >> (32 - u32::from(len)) == 0;
            proptest::prop_assert_eq!(n.contains(IpAddr::V4(Ipv4Addr::from(b))), expect);
        }
    }

    /// The hash tables and the small-set scan agree with a plain longest-prefix scan for any
    /// mix of prefixes, reassignments and addresses, below and above [`FEW`] routes.
    mod lpm_matches_a_scan {
        use super::*;
        use proptest::prelude::*;

        fn net() -> impl Strategy<Value = IpNet> {
            prop_oneof![
                // Few distinct networks, so that lookups hit and prefixes nest.
                (0u32..64, 0u8..=32).prop_map(|(a, p)| IpNet::new(
                    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | (a << 20) | (a * 7))),
                    p
                )
                .unwrap()),
                (0u128..64, 0u8..=128).prop_map(|(a, p)| IpNet::new(
                    IpAddr::V6(Ipv6Addr::from((0xfd00u128 << 112) | (a << 100) | a)),
                    p
                )
                .unwrap()),
            ]
        }

        fn addr() -> impl Strategy<Value = IpAddr> {
            prop_oneof![
                (0u32..64, any::<u32>()).prop_map(|(a, low)| IpAddr::V4(Ipv4Addr::from(
                    0x0a00_0000 | (a << 20) | (low & 0xfffff)
                ))),
                (0u128..64, any::<u64>()).prop_map(|(a, low)| IpAddr::V6(Ipv6Addr::from(
                    (0xfd00u128 << 112) | (a << 100) | u128::from(low)
                ))),
                any::<u32>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
            ]
        }

        proptest! {
            #[test]
            fn lookups_owners_and_per_peer_lists(
                routes in prop::collection::vec((net(), 0usize..6), 0..60),
                probes in prop::collection::vec(addr(), 0..40),
            ) {
                let mut t = AllowedIps::default();
                let mut reference: Vec<(IpNet, usize)> = Vec::new();
                for (n, p) in &routes {
                    t.insert(*n, *p);
                    reference.retain(|(m, _)| m != n);
                    reference.push((*n, *p));
                }
                prop_assert_eq!(t.len(), reference.len());
                let longest = |ip: IpAddr| {
                    reference
                        .iter()
                        .filter(|(n, _)| n.contains(ip))
                        .max_by_key(|(n, _)| n.prefix())
                        .map(|(_, p)| *p)
                };
                for ip in probes.iter().copied().chain(reference.iter().map(|(n, _)| n.addr())) {
                    prop_assert_eq!(t.lookup(ip), longest(ip), "{}", ip);
                }
                for (n, p) in &reference {
                    prop_assert_eq!(t.owner(*n), Some(*p));
                }
                for peer in 0..6 {
                    let mut got: Vec<IpNet> = t.of_peer(peer).collect();
                    let mut want: Vec<IpNet> =
                        reference.iter().filter(|(_, p)| *p == peer).map(|(n, _)| *n).collect();
                    got.sort_by_key(|n| (n.addr(), n.prefix()));
                    want.sort_by_key(|n| (n.addr(), n.prefix()));
                    prop_assert_eq!(got, want);
                }
            }
        }
    }
}
