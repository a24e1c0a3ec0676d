//! The interface's addresses, routes and policy rules, set through rtnetlink: one request
//! on a blocking `NETLINK_ROUTE` socket, then its acknowledgement, as `ip` itself does. No
//! `ip` binary is run, so the package depends on nothing it does not declare.
//!
//! Each request names its operation ([`Op`]); an error acknowledgement becomes
//! [`TunnelError::Rtnl`] with that name, the errno's text and the kernel's extended message
//! when it sends one ("add route 10.0.0.0/24 dev sl0: File exists").

use std::net::IpAddr;
use std::time::Duration;

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage,
    NetlinkPayload,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    AfSpecInet6, AfSpecUnspec, In6AddrGenMode, LinkAttribute, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleFlags, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};
use sealink_proto::tunnel::IpNet;

use crate::error::TunnelError;

/// `NLMSG_ERROR`: an acknowledgement (error 0) or a refusal.
const NLMSG_ERROR: u16 = 2;
/// In an acknowledgement's flags: TLVs follow the echoed request (`NETLINK_EXT_ACK`).
const NLM_F_ACK_TLVS: u16 = 0x200;
/// In an acknowledgement's flags: only the request's header is echoed (`NETLINK_CAP_ACK`).
const NLM_F_CAPPED: u16 = 0x100;
/// The extended acknowledgement's text attribute.
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLMSG_HDRLEN: usize = 16;
/// The kernel answers a request at once; this bounds a wait that never should happen.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// A request and the words that name it in errors and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Op {
    pub what: String,
    pub msg: RouteNetlinkMessage,
    /// `NLM_F_*` beyond REQUEST and ACK (CREATE|EXCL for an addition, as `ip ... add`).
    pub flags: u16,
}

fn family(v6: bool) -> AddressFamily {
    if v6 {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    }
}

/// A table number as the 8-bit header field takes it; larger ones travel in the attribute
/// alone (the kernel prefers the attribute), as iproute2 does.
fn header_table(table: u32) -> u8 {
    u8::try_from(table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC)
}

/// `ip route add|del NET dev IFNAME [table T]` (main table when `table` is `None`).
pub(crate) fn route(add: bool, net: IpNet, ifname: &str, ifindex: u32, table: Option<u32>) -> Op {
    let mut m = RouteMessage::default();
    let v6 = net.addr().is_ipv6();
    let t = table.unwrap_or(u32::from(RouteHeader::RT_TABLE_MAIN));
    m.header.address_family = family(v6);
    m.header.destination_prefix_length = net.prefix();
    m.header.table = header_table(t);
    if add {
        m.header.protocol = RouteProtocol::Boot;
        m.header.kind = RouteType::Unicast;
        // A route through a device with no gateway is on-link, for IPv4; IPv6 routes are
        // always universe scope (iproute2's choice too).
        m.header.scope = if v6 {
            RouteScope::Universe
        } else {
            RouteScope::Link
        };
    } else {
        // Any scope, type and protocol: the kernel matches by prefix, table and device.
        m.header.scope = RouteScope::NoWhere;
    }
    if net.prefix() > 0 {
        m.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(net.addr())));
    }
    m.attributes.push(RouteAttribute::Table(t));
    m.attributes.push(RouteAttribute::Oif(ifindex));
    let what = match table {
        Some(t) => format!("route {net} dev {ifname} table {t}"),
        None => format!("route {net} dev {ifname}"),
    };
    Op {
        what: format!("{} {what}", if add { "add" } else { "delete" }),
        msg: if add {
            RouteNetlinkMessage::NewRoute(m)
        } else {
            RouteNetlinkMessage::DelRoute(m)
        },
        flags: if add { NLM_F_CREATE | NLM_F_EXCL } else { 0 },
    }
}

/// `ip address add ADDR/PREFIX dev IFNAME`.
pub(crate) fn add_address(addr: IpAddr, prefix: u8, ifname: &str, ifindex: u32) -> Op {
    let mut m = AddressMessage::default();
    m.header.family = family(addr.is_ipv6());
    m.header.prefix_len = prefix;
    m.header.index = ifindex;
    // Local and peer address the same: no point-to-point peer, as `ip address add` sends it.
    m.attributes.push(AddressAttribute::Local(addr));
    m.attributes.push(AddressAttribute::Address(addr));
    Op {
        what: format!("add address {addr}/{prefix} dev {ifname}"),
        msg: RouteNetlinkMessage::NewAddress(m),
        flags: NLM_F_CREATE | NLM_F_EXCL,
    }
}

/// `ip -6 link set dev IFNAME addrgenmode none`.
pub(crate) fn addrgenmode_none(ifname: &str, ifindex: u32) -> Op {
    let mut m = LinkMessage::default();
    m.header.index = ifindex;
    m.attributes
        .push(LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet6(
            vec![AfSpecInet6::AddrGenMode(In6AddrGenMode::None)],
        )]));
    Op {
        what: format!("set addrgenmode none on {ifname}"),
        msg: RouteNetlinkMessage::NewLink(m),
        flags: 0,
    }
}

/// A policy routing rule, as a full tunnel adds them (`policy.rs`): `[not] [fwmark M] table T
/// [suppress_prefixlength N] priority P`, for IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rule {
    pub v6: bool,
    /// `not`: the rule applies to what does *not* match (the fwmark).
    pub invert: bool,
    pub fwmark: Option<u32>,
    pub table: u32,
    pub suppress_prefixlength: Option<u32>,
    pub priority: u32,
}

impl std::fmt::Display for Rule {
    /// `ip rule`'s words after `add`/`del`, without the family.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.invert {
            f.write_str("not ")?;
        }
        if let Some(m) = self.fwmark {
            write!(f, "fwmark {m} ")?;
        }
        if self.table == u32::from(RouteHeader::RT_TABLE_MAIN) {
            f.write_str("table main ")?;
        } else {
            write!(f, "table {} ", self.table)?;
        }
        if let Some(n) = self.suppress_prefixlength {
            write!(f, "suppress_prefixlength {n} ")?;
        }
        write!(f, "priority {}", self.priority)
    }
}

/// `ip rule add|del RULE`.
pub(crate) fn rule(add: bool, r: &Rule) -> Op {
    let mut m = RuleMessage::default();
    m.header.family = family(r.v6);
    m.header.table = header_table(r.table);
    m.header.action = RuleAction::ToTable;
    if r.invert {
        m.header.flags = RuleFlags::Invert;
    }
    m.attributes.push(RuleAttribute::Table(r.table));
    m.attributes.push(RuleAttribute::Priority(r.priority));
    if let Some(mark) = r.fwmark {
        // No mask: the kernel then matches the whole mark, as `ip rule ... fwmark M` does.
        m.attributes.push(RuleAttribute::FwMark(mark));
    }
    if let Some(n) = r.suppress_prefixlength {
        m.attributes.push(RuleAttribute::SuppressPrefixLen(n));
    }
    let fam = if r.v6 { "IPv6" } else { "IPv4" };
    Op {
        what: format!("{} {fam} rule {r}", if add { "add" } else { "delete" }),
        msg: if add {
            RouteNetlinkMessage::NewRule(m)
        } else {
            RouteNetlinkMessage::DelRule(m)
        },
        flags: if add { NLM_F_CREATE | NLM_F_EXCL } else { 0 },
    }
}

/// The request's bytes, with sequence number `seq`.
pub(crate) fn encode(op: &Op, seq: u32) -> Vec<u8> {
    let mut h = NetlinkHeader::default();
    h.flags = NLM_F_REQUEST | NLM_F_ACK | op.flags;
    h.sequence_number = seq;
    let mut m = NetlinkMessage::new(h, NetlinkPayload::InnerMessage(op.msg.clone()));
    m.finalize();
    let mut buf = vec![0u8; m.buffer_len()];
    m.serialize(&mut buf);
    buf
}

/// A refusal: the errno and the kernel's extended message, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Nack {
    pub errno: i32,
    pub ext: Option<String>,
}

impl Nack {
    /// "File exists", or "File exists (Nexthop device is not up)" with an extended message.
    pub(crate) fn text(&self) -> String {
        let e = std::io::Error::from_raw_os_error(self.errno).to_string();
        let e = e
            .strip_suffix(&format!(" (os error {})", self.errno))
            .unwrap_or(&e)
            .to_owned();
        match &self.ext {
            Some(x) => format!("{e} ({x})"),
            None => e,
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Looks for the acknowledgement of request `seq` in one datagram from the kernel: `None` if
/// it is not there (another message), else the outcome. A malformed datagram is an error.
pub(crate) fn find_ack(buf: &[u8], seq: u32) -> Result<Option<Result<(), Nack>>, String> {
    let malformed = || "malformed netlink answer".to_owned();
    let mut at = 0;
    while at + NLMSG_HDRLEN <= buf.len() {
        let len = u32_at(buf, at).ok_or_else(malformed)? as usize;
        let kind = u16_at(buf, at + 4).ok_or_else(malformed)?;
        let flags = u16_at(buf, at + 6).ok_or_else(malformed)?;
        let mseq = u32_at(buf, at + 8).ok_or_else(malformed)?;
        if len < NLMSG_HDRLEN || at + len > buf.len() {
            return Err(malformed());
        }
        let msg = &buf[at..at + len];
        if kind == NLMSG_ERROR && mseq == seq {
            let code = u32_at(msg, NLMSG_HDRLEN).ok_or_else(malformed)? as i32;
            if code == 0 {
                return Ok(Some(Ok(())));
            }
            let mut nack = Nack {
                errno: code.saturating_neg(),
                ext: None,
            };
            if flags & NLM_F_ACK_TLVS != 0 {
                // After the code: the request's header, or the whole request when not capped.
                let echoed = NLMSG_HDRLEN + 4;
                let req_len = if flags & NLM_F_CAPPED != 0 {
                    NLMSG_HDRLEN
                } else {
                    u32_at(msg, echoed).ok_or_else(malformed)? as usize
                };
                let mut t = echoed + req_len.next_multiple_of(4);
                while t + 4 <= msg.len() {
                    let (Some(tl), Some(tt)) = (u16_at(msg, t), u16_at(msg, t + 2)) else {
                        break;
                    };
                    let tl = usize::from(tl);
                    if tl < 4 || t + tl > msg.len() {
                        break;
                    }
                    if tt & 0x3fff == NLMSGERR_ATTR_MSG {
                        let s = &msg[t + 4..t + tl];
                        let s = s.split(|&b| b == 0).next().unwrap_or(s);
                        let s = String::from_utf8_lossy(s).trim().to_owned();
                        if !s.is_empty() {
                            nack.ext = Some(s);
                        }
                    }
                    t += tl.next_multiple_of(4);
                }
            }
            return Ok(Some(Err(nack)));
        }
        at += len.next_multiple_of(4);
    }
    Ok(None)
}

/// A `NETLINK_ROUTE` socket that sends one request at a time and waits for its answer.
pub(crate) struct Rtnl {
    sock: Socket,
    seq: u32,
}

impl std::fmt::Debug for Rtnl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rtnl").field("seq", &self.seq).finish()
    }
}

fn io_err(what: &str) -> impl FnOnce(std::io::Error) -> TunnelError + '_ {
    move |source| TunnelError::Io {
        what: format!("{what}: rtnetlink"),
        source,
    }
}

impl Rtnl {
    pub(crate) fn open() -> Result<Self, TunnelError> {
        let what = "open an rtnetlink socket";
        let mut sock = Socket::new(NETLINK_ROUTE).map_err(io_err(what))?;
        sock.bind_auto().map_err(io_err(what))?;
        sock.connect(&SocketAddr::new(0, 0)).map_err(io_err(what))?;
        // The kernel's own words on a refusal, and no copy of the request in it; both are
        // optional (older kernels): the errno alone still says what happened.
        let _ = sock.set_ext_ack(true);
        let _ = sock.set_cap_ack(true);
        rustix::net::sockopt::set_socket_timeout(
            &sock,
            rustix::net::sockopt::Timeout::Recv,
            Some(ACK_TIMEOUT),
        )
        .map_err(|e| io_err(what)(e.into()))?;
        Ok(Rtnl { sock, seq: 0 })
    }

    /// The index of interface `name`.
    pub(crate) fn index(&self, name: &str) -> Result<u32, TunnelError> {
        rustix::net::netdevice::name_to_index(&self.sock, name).map_err(|e| TunnelError::Io {
            what: format!("find interface {name}"),
            source: e.into(),
        })
    }

    /// Sends `op` and waits for its acknowledgement; a refusal is [`TunnelError::Rtnl`].
    pub(crate) fn request(&mut self, op: &Op) -> Result<(), TunnelError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let req = encode(op, seq);
        self.sock.send(&req, 0).map_err(io_err(&op.what))?;
        let mut buf = Vec::with_capacity(16 * 1024);
        loop {
            buf.clear();
            self.sock.recv(&mut buf, 0).map_err(io_err(&op.what))?;
            match find_ack(&buf, seq) {
                Ok(None) => continue,
                Ok(Some(Ok(()))) => return Ok(()),
                Ok(Some(Err(n))) => {
                    return Err(TunnelError::Rtnl {
                        op: op.what.clone(),
                        errno: n.errno,
                        msg: n.text(),
                    });
                }
                Err(e) => return Err(io_err(&op.what)(std::io::Error::other(e))),
            }
        }
    }
}

/// Whether `e` is the kernel saying there was nothing to delete (no such rule or route, or no
/// such address family at all: a kernel without IPv6 has no IPv6 rules).
pub(crate) fn is_gone(e: &TunnelError) -> bool {
    use rustix::io::Errno;
    matches!(e, TunnelError::Rtnl { errno, .. }
        if *errno == Errno::NOENT.raw_os_error() || *errno == Errno::AFNOSUPPORT.raw_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::Emitable;

    fn net(s: &str) -> IpNet {
        let (a, p) = s.split_once('/').unwrap();
        IpNet::new(a.parse().unwrap(), p.parse().unwrap()).unwrap()
    }

    /// The request decoded again, as the kernel would read it.
    fn decode(bytes: &[u8]) -> (NetlinkHeader, RouteNetlinkMessage) {
        let m = NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes).unwrap();
        let (h, p) = m.into_parts();
        match p {
            NetlinkPayload::InnerMessage(i) => (h, i),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_route_request_carries_destination_table_and_device() {
        let op = route(true, net("10.0.0.0/24"), "sl0", 7, None);
        assert_eq!(op.what, "add route 10.0.0.0/24 dev sl0");
        let bytes = encode(&op, 42);
        let (h, m) = decode(&bytes);
        assert_eq!(h.sequence_number, 42);
        assert_eq!(
            h.flags,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
        );
        let RouteNetlinkMessage::NewRoute(r) = m else {
            panic!("{m:?}")
        };
        assert_eq!(r.header.address_family, AddressFamily::Inet);
        assert_eq!(r.header.destination_prefix_length, 24);
        assert_eq!(r.header.table, RouteHeader::RT_TABLE_MAIN);
        assert_eq!(r.header.scope, RouteScope::Link);
        assert_eq!(r.header.kind, RouteType::Unicast);
        assert!(
            r.attributes
                .contains(&RouteAttribute::Destination(RouteAddress::Inet(
                    "10.0.0.0".parse().unwrap()
                )))
        );
        assert!(r.attributes.contains(&RouteAttribute::Oif(7)));
        assert!(r.attributes.contains(&RouteAttribute::Table(254)));
    }

    #[test]
    fn a_default_route_into_a_numbered_table() {
        let op = route(true, net("::/0"), "sl0", 3, Some(51820));
        assert_eq!(op.what, "add route ::/0 dev sl0 table 51820");
        let (_, m) = decode(&encode(&op, 1));
        let RouteNetlinkMessage::NewRoute(r) = m else {
            panic!("{m:?}")
        };
        assert_eq!(r.header.address_family, AddressFamily::Inet6);
        assert_eq!(r.header.destination_prefix_length, 0);
        // Beyond 255: in the attribute only.
        assert_eq!(r.header.table, RouteHeader::RT_TABLE_UNSPEC);
        assert_eq!(r.header.scope, RouteScope::Universe);
        assert!(r.attributes.contains(&RouteAttribute::Table(51820)));
        assert!(
            !r.attributes
                .iter()
                .any(|a| matches!(a, RouteAttribute::Destination(_)))
        );
        let del = route(false, net("10.1.0.0/16"), "sl0", 3, None);
        assert_eq!(del.what, "delete route 10.1.0.0/16 dev sl0");
        let (h, m) = decode(&encode(&del, 2));
        assert_eq!(h.flags, NLM_F_REQUEST | NLM_F_ACK);
        assert!(
            matches!(m, RouteNetlinkMessage::DelRoute(r) if r.header.scope == RouteScope::NoWhere)
        );
    }

    #[test]
    fn rule_requests_carry_mark_inversion_and_suppression() {
        let marked = Rule {
            v6: false,
            invert: true,
            fwmark: Some(51820),
            table: 51820,
            suppress_prefixlength: None,
            priority: 32761,
        };
        let op = rule(true, &marked);
        assert_eq!(
            op.what,
            "add IPv4 rule not fwmark 51820 table 51820 priority 32761"
        );
        let (_, m) = decode(&encode(&op, 9));
        let RouteNetlinkMessage::NewRule(r) = m else {
            panic!("{m:?}")
        };
        assert_eq!(r.header.family, AddressFamily::Inet);
        assert_eq!(r.header.action, RuleAction::ToTable);
        assert!(r.header.flags.contains(RuleFlags::Invert));
        for a in [
            RuleAttribute::Table(51820),
            RuleAttribute::Priority(32761),
            RuleAttribute::FwMark(51820),
        ] {
            assert!(r.attributes.contains(&a), "{a:?} in {:?}", r.attributes);
        }
        let suppress = Rule {
            v6: true,
            invert: false,
            fwmark: None,
            table: 254,
            suppress_prefixlength: Some(0),
            priority: 32760,
        };
        let op = rule(false, &suppress);
        assert_eq!(
            op.what,
            "delete IPv6 rule table main suppress_prefixlength 0 priority 32760"
        );
        let (_, m) = decode(&encode(&op, 10));
        let RouteNetlinkMessage::DelRule(r) = m else {
            panic!("{m:?}")
        };
        assert_eq!(r.header.family, AddressFamily::Inet6);
        assert_eq!(r.header.table, 254);
        assert!(!r.header.flags.contains(RuleFlags::Invert));
        assert!(r.attributes.contains(&RuleAttribute::SuppressPrefixLen(0)));
    }

    #[test]
    fn address_and_addrgenmode_requests() {
        let op = add_address("fd00::2".parse().unwrap(), 64, "sl0", 5);
        assert_eq!(op.what, "add address fd00::2/64 dev sl0");
        let (_, m) = decode(&encode(&op, 1));
        let RouteNetlinkMessage::NewAddress(a) = m else {
            panic!("{m:?}")
        };
        assert_eq!((a.header.index, a.header.prefix_len), (5, 64));
        assert!(
            a.attributes
                .contains(&AddressAttribute::Local("fd00::2".parse().unwrap()))
        );
        let op = addrgenmode_none("sl0", 5);
        let (h, m) = decode(&encode(&op, 2));
        assert_eq!(h.flags, NLM_F_REQUEST | NLM_F_ACK);
        let RouteNetlinkMessage::NewLink(l) = m else {
            panic!("{m:?}")
        };
        assert_eq!(l.header.index, 5);
        assert_eq!(
            l.attributes,
            vec![LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet6(
                vec![AfSpecInet6::AddrGenMode(In6AddrGenMode::None)]
            )])]
        );
    }

    /// An `NLMSG_ERROR` answer as the kernel builds it, capped, with an optional extended
    /// message.
    fn nlmsgerr(seq: u32, code: i32, ext: Option<&str>) -> Vec<u8> {
        let mut tlvs = Vec::new();
        if let Some(s) = ext {
            let len = 4 + s.len() + 1;
            tlvs.extend((len as u16).to_ne_bytes());
            tlvs.extend(NLMSGERR_ATTR_MSG.to_ne_bytes());
            tlvs.extend(s.as_bytes());
            tlvs.push(0);
            tlvs.resize(tlvs.len().next_multiple_of(4), 0);
        }
        let mut echoed = NetlinkHeader::default();
        echoed.length = 40;
        echoed.sequence_number = seq;
        let mut e = [0u8; NLMSG_HDRLEN];
        echoed.emit(&mut e);
        let len = NLMSG_HDRLEN + 4 + NLMSG_HDRLEN + tlvs.len();
        let mut flags = NLM_F_CAPPED;
        if ext.is_some() {
            flags |= NLM_F_ACK_TLVS;
        }
        let mut b = Vec::new();
        b.extend((len as u32).to_ne_bytes());
        b.extend(NLMSG_ERROR.to_ne_bytes());
        b.extend(flags.to_ne_bytes());
        b.extend(seq.to_ne_bytes());
        b.extend(0u32.to_ne_bytes());
        b.extend(code.to_ne_bytes());
        b.extend(e);
        b.extend(tlvs);
        b
    }

    #[test]
    fn acknowledgements_and_refusals_are_told_apart() {
        assert_eq!(find_ack(&nlmsgerr(3, 0, None), 3), Ok(Some(Ok(()))));
        // Another request's answer is not ours.
        assert_eq!(find_ack(&nlmsgerr(2, 0, None), 3), Ok(None));
        let n = find_ack(&nlmsgerr(3, -17, None), 3)
            .unwrap()
            .unwrap()
            .unwrap_err();
        assert_eq!(n.errno, 17);
        assert_eq!(n.text(), "File exists");
        let n = find_ack(&nlmsgerr(4, -19, Some("Nexthop device is not up")), 4)
            .unwrap()
            .unwrap()
            .unwrap_err();
        assert_eq!(n.text(), "No such device (Nexthop device is not up)");
        // Two messages in one datagram: the second is the answer.
        let mut two = nlmsgerr(1, 0, None);
        two.extend(nlmsgerr(5, -1, None));
        assert_eq!(find_ack(&two, 5).unwrap().unwrap().unwrap_err().errno, 1);
        // Truncated: an error, not a panic.
        let whole = nlmsgerr(6, -17, Some("x"));
        for cut in 1..whole.len() {
            let _ = find_ack(&whole[..cut], 6);
        }
        assert!(find_ack(&whole[..20], 6).is_err());
    }

    #[test]
    fn a_refusal_names_the_operation() {
        let e = TunnelError::Rtnl {
            op: route(true, net("10.0.0.0/24"), "sl0", 1, None).what,
            errno: 17,
            msg: Nack {
                errno: 17,
                ext: None,
            }
            .text(),
        };
        assert_eq!(e.to_string(), "add route 10.0.0.0/24 dev sl0: File exists");
        assert!(!is_gone(&e));
        let gone = TunnelError::Rtnl {
            op: "delete IPv4 rule".into(),
            errno: 2,
            msg: String::new(),
        };
        assert!(is_gone(&gone));
    }
}
