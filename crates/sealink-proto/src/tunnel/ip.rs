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

/// Cryptokey routing: prefixes to peers, longest prefix first. A linear scan: tunnels have few
/// peers and routes, and the scan touches one small vector; a trie would pay off past hundreds.
#[derive(Debug, Clone, Default)]
pub struct AllowedIps {
    routes: Vec<(IpNet, usize)>,
}

impl AllowedIps {
    /// Adds a route; a prefix already present is reassigned to `peer` (the last one wins).
    pub fn insert(&mut self, net: IpNet, peer: usize) {
        self.routes.retain(|(n, _)| *n != net);
        let at = self
            .routes
            .iter()
            .position(|(n, _)| n.prefix < net.prefix)
            .unwrap_or(self.routes.len());
        self.routes.insert(at, (net, peer));
    }
    /// The peer whose longest matching prefix contains `ip`.
    pub fn lookup(&self, ip: IpAddr) -> Option<usize> {
        self.routes
            .iter()
            .find(|(n, _)| n.contains(ip))
            .map(|(_, p)| *p)
    }
    /// The peer this exact prefix is assigned to.
    pub fn owner(&self, net: IpNet) -> Option<usize> {
        self.routes.iter().find(|(n, _)| *n == net).map(|(_, p)| *p)
    }
    /// Prefixes routed to `peer`.
    pub fn of_peer(&self, peer: usize) -> impl Iterator<Item = IpNet> + '_ {
        self.routes
            .iter()
            .filter(move |(_, p)| *p == peer)
            .map(|(n, _)| *n)
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
}
