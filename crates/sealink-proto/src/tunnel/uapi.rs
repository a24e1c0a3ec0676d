//! WireGuard's cross-platform userspace API (<https://www.wireguard.com/xplatform/>), sans-IO:
//! the text protocol `wg(8)` speaks on `/var/run/wireguard/NAME.sock`. A request is `get=1` or
//! `set=1`, then `key=value` lines, ended by an empty line; the answer to `get` is the
//! device's and each peer's `key=value` lines, and every answer ends with `errno=N` and an
//! empty line (0: done; else a positive errno, as wireguard-go writes it).
//!
//! [`parse_request`] checks a whole request before anything is applied (keys in hex, ports,
//! endpoints, prefixes, the order of keys), so a `set` that fails changes nothing. As in
//! wireguard-go v0.0.20250522, `allowed_ip=-ADDR/BITS` removes a prefix from the peer (what
//! `wg set ... allowed-ips -NET` of wireguard-tools >= 1.0.20250521 sends), and an IPv6
//! endpoint may carry a zone, a number (its scope id) or an interface name
//! (`[fe80::1%eth0]:51820`, [`PeerEndpoint::Scoped`], resolved by the driver);
//! [`format_get`] writes a [`Device`] snapshot. Nothing here panics on any input (proptests and
//! the `wg_uapi` fuzz target).

use std::fmt;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::Duration;

use super::IpNet;

/// Longest request accepted (`wg setconf` of a large config fits many times over).
pub const MAX_REQUEST: usize = 1 << 20;

/// errno values of the answers (Linux's, as wireguard-go sends them).
pub const EIO: i32 = 5;
pub const EINVAL: i32 = 22;
/// A setting that cannot change while the tunnel runs (the private key, listen port or fwmark):
/// `wg set` then prints "Operation not supported" rather than "Invalid argument".
pub const EOPNOTSUPP: i32 = 95;
pub const EADDRINUSE: i32 = 98;
pub const EPROTO: i32 = 71;

/// Why a request was refused; [`UapiError::errno`] is what the answer says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UapiError {
    #[error("request larger than {MAX_REQUEST} bytes or not ended by an empty line")]
    TooLong,
    #[error("not UTF-8")]
    NotText,
    #[error("first line is not get=1 or set=1")]
    UnknownOperation,
    #[error("line {0}: not key=value")]
    NotKeyValue(usize),
    #[error("line {line}: unknown key {key:?}")]
    UnknownKey { line: usize, key: String },
    #[error("line {line}: bad value for {key}")]
    BadValue { line: usize, key: &'static str },
    #[error("line {line}: {key} before any public_key")]
    PeerKeyOutsidePeer { line: usize, key: &'static str },
    #[error("line {line}: protocol_version {version} is not 1")]
    ProtocolVersion { line: usize, version: String },
}

impl UapiError {
    /// The errno of the answer.
    pub fn errno(&self) -> i32 {
        match self {
            UapiError::ProtocolVersion { .. } => EPROTO,
            UapiError::TooLong | UapiError::NotText => EIO,
            _ => EINVAL,
        }
    }

    /// A short name for counting refusals by reason.
    pub fn reason(&self) -> &'static str {
        match self {
            UapiError::TooLong => "too-long",
            UapiError::NotText => "not-text",
            UapiError::UnknownOperation => "unknown-operation",
            UapiError::NotKeyValue(_) => "not-key-value",
            UapiError::UnknownKey { .. } => "unknown-key",
            UapiError::BadValue { .. } => "bad-value",
            UapiError::PeerKeyOutsidePeer { .. } => "peer-key-outside-peer",
            UapiError::ProtocolVersion { .. } => "protocol-version",
        }
    }
}

/// One `allowed_ip` line of a peer, applied in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowedIp {
    /// `allowed_ip=NET`: add it (taken from any other peer that has it).
    Add(IpNet),
    /// `allowed_ip=-NET`: remove it from this peer (nothing if the peer does not have it).
    Remove(IpNet),
}

/// A peer's endpoint, as `set` gives it and `get` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerEndpoint {
    /// `IPv4:PORT`, `[IPv6]:PORT`, or `[IPv6%N]:PORT` with the zone as a number (its scope id).
    Addr(SocketAddr),
    /// `[IPv6%NAME]:PORT`: a zone that is an interface name. In a `set`, `addr`'s scope id is
    /// 0 and the driver resolves `interface` to its index; `get` prints the name back.
    Scoped {
        addr: SocketAddrV6,
        interface: String,
    },
}

impl fmt::Display for PeerEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerEndpoint::Addr(a) => write!(f, "{a}"),
            PeerEndpoint::Scoped { addr, interface } => {
                write!(f, "[{}%{interface}]:{}", addr.ip(), addr.port())
            }
        }
    }
}

/// Whether `z` can name a Linux interface (1 to 15 bytes; not `.` or `..`; no `/`, `:`,
/// whitespace, and here no `%`, `[` or `]` either). All digits is a scope id instead.
fn is_interface_name(z: &str) -> bool {
    (1..=15).contains(&z.len())
        && z != "."
        && z != ".."
        && z.bytes()
            .all(|c| c.is_ascii_graphic() && !b"/:%[]".contains(&c))
}

/// `IPv4:PORT`, `[IPv6]:PORT` or `[IPv6%ZONE]:PORT` (the forms wireguard-go's
/// `netip.ParseAddrPort` takes; a zone only on IPv6): a decimal zone is the scope id, another
/// must be an interface name ([`PeerEndpoint::Scoped`]).
pub fn parse_endpoint(v: &str) -> Option<PeerEndpoint> {
    let Some(rest) = v.strip_prefix('[') else {
        return v
            .parse::<SocketAddrV4>()
            .ok()
            .map(|a| PeerEndpoint::Addr(a.into()));
    };
    let (host, port) = rest.rsplit_once("]:")?;
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let port: u16 = port.parse().ok()?;
    let (ip, zone) = match host.split_once('%') {
        Some((ip, zone)) => (ip, Some(zone)),
        None => (host, None),
    };
    let ip: Ipv6Addr = ip.parse().ok()?;
    match zone {
        None => Some(PeerEndpoint::Addr(SocketAddrV6::new(ip, port, 0, 0).into())),
        Some(z) if !z.is_empty() && z.bytes().all(|c| c.is_ascii_digit()) => {
            let scope = z.parse().ok()?;
            Some(PeerEndpoint::Addr(
                SocketAddrV6::new(ip, port, 0, scope).into(),
            ))
        }
        Some(z) if is_interface_name(z) => Some(PeerEndpoint::Scoped {
            addr: SocketAddrV6::new(ip, port, 0, 0),
            interface: z.to_owned(),
        }),
        Some(_) => None,
    }
}

/// `[-]ADDR/BITS`, as wireguard-go takes an `allowed_ip` (no spaces; a `-` first removes).
fn parse_allowed_ip(v: &str) -> Option<AllowedIp> {
    let (remove, net) = match v.strip_prefix('-') {
        Some(net) => (true, net),
        None => (false, v),
    };
    if !net.contains('/') || net.bytes().any(|c| c.is_ascii_whitespace() || c == b'+') {
        return None;
    }
    let net = net.parse::<IpNet>().ok()?;
    Some(if remove {
        AllowedIp::Remove(net)
    } else {
        AllowedIp::Add(net)
    })
}

/// One peer's part of a `set`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerSet {
    pub public_key: [u8; 32],
    pub remove: bool,
    /// Change the peer only if it exists (do not add it).
    pub update_only: bool,
    /// `Some([0; 32])` clears it.
    pub preshared_key: Option<[u8; 32]>,
    pub endpoint: Option<PeerEndpoint>,
    /// Seconds; `Some(0)` turns it off.
    pub persistent_keepalive: Option<u16>,
    pub replace_allowed_ips: bool,
    /// The `allowed_ip` lines, in order (after `replace_allowed_ips`).
    pub allowed_ips: Vec<AllowedIp>,
}

/// A parsed `set`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Set {
    pub private_key: Option<[u8; 32]>,
    /// `Some(0)`: any port.
    pub listen_port: Option<u16>,
    /// `Some(0)` clears it.
    pub fwmark: Option<u32>,
    pub replace_peers: bool,
    pub peers: Vec<PeerSet>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Get,
    Set(Set),
}

/// The device as `get` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Device {
    pub private_key: Option<[u8; 32]>,
    pub listen_port: u16,
    pub fwmark: u32,
    pub peers: Vec<Peer>,
}

/// One peer as `get` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peer {
    pub public_key: [u8; 32],
    pub preshared_key: Option<[u8; 32]>,
    pub endpoint: Option<PeerEndpoint>,
    /// Wall-clock time of the latest handshake since the Unix epoch; `None`: never.
    pub last_handshake: Option<Duration>,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    /// Seconds; 0: off.
    pub persistent_keepalive: u16,
    pub allowed_ips: Vec<IpNet>,
}

/// Where the request in `buf` ends (one past its empty line), once it has: `Ok(None)` while
/// more may come, an error once it is too long.
pub fn request_end(buf: &[u8]) -> Result<Option<usize>, UapiError> {
    if let Some(i) = buf.windows(2).position(|w| w == b"\n\n") {
        return Ok(Some(i + 2));
    }
    if buf.len() > MAX_REQUEST {
        return Err(UapiError::TooLong);
    }
    Ok(None)
}

fn hex32(v: &str) -> Option<[u8; 32]> {
    if v.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(v.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn hex(k: &[u8; 32]) -> String {
    k.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses one request: its text up to and including the empty line (or without it).
pub fn parse_request(req: &[u8]) -> Result<Request, UapiError> {
    if req.len() > MAX_REQUEST {
        return Err(UapiError::TooLong);
    }
    let text = std::str::from_utf8(req).map_err(|_| UapiError::NotText)?;
    let mut lines = text.split('\n').enumerate().map(|(i, l)| (i + 1, l));
    match lines.next().map(|(_, l)| l) {
        Some("get=1") => {
            return match lines.find(|(_, l)| !l.is_empty()) {
                None => Ok(Request::Get),
                Some((line, l)) => Err(UapiError::UnknownKey {
                    line,
                    key: l.split('=').next().unwrap_or(l).chars().take(64).collect(),
                }),
            };
        }
        Some("set=1") => {}
        _ => return Err(UapiError::UnknownOperation),
    }
    let mut set = Set::default();
    for (line, l) in lines {
        if l.is_empty() {
            break;
        }
        let (key, value) = l.split_once('=').ok_or(UapiError::NotKeyValue(line))?;
        let bad = |key: &'static str| UapiError::BadValue { line, key };
        let bool_true = |key: &'static str| (value == "true").then_some(true).ok_or(bad(key));
        // Keys after the first public_key belong to the last peer.
        let peer = set.peers.last_mut();
        let need_peer = |key: &'static str| UapiError::PeerKeyOutsidePeer { line, key };
        match key {
            "private_key" if peer.is_none() => {
                set.private_key = Some(hex32(value).ok_or(bad("private_key"))?);
            }
            "listen_port" if peer.is_none() => {
                set.listen_port = Some(value.parse().map_err(|_| bad("listen_port"))?);
            }
            "fwmark" if peer.is_none() => {
                set.fwmark = Some(value.parse().map_err(|_| bad("fwmark"))?);
            }
            "replace_peers" if peer.is_none() => set.replace_peers = bool_true("replace_peers")?,
            "public_key" => set.peers.push(PeerSet {
                public_key: hex32(value).ok_or(bad("public_key"))?,
                ..PeerSet::default()
            }),
            "remove" => peer.ok_or(need_peer("remove"))?.remove = bool_true("remove")?,
            "update_only" => {
                peer.ok_or(need_peer("update_only"))?.update_only = bool_true("update_only")?;
            }
            "preshared_key" => {
                peer.ok_or(need_peer("preshared_key"))?.preshared_key =
                    Some(hex32(value).ok_or(bad("preshared_key"))?);
            }
            "endpoint" => {
                peer.ok_or(need_peer("endpoint"))?.endpoint =
                    Some(parse_endpoint(value).ok_or(bad("endpoint"))?);
            }
            "persistent_keepalive_interval" => {
                peer.ok_or(need_peer("persistent_keepalive_interval"))?
                    .persistent_keepalive = Some(
                    value
                        .parse()
                        .map_err(|_| bad("persistent_keepalive_interval"))?,
                );
            }
            "replace_allowed_ips" => {
                peer.ok_or(need_peer("replace_allowed_ips"))?
                    .replace_allowed_ips = bool_true("replace_allowed_ips")?;
            }
            "allowed_ip" => {
                let op = parse_allowed_ip(value).ok_or(bad("allowed_ip"))?;
                peer.ok_or(need_peer("allowed_ip"))?.allowed_ips.push(op);
            }
            "protocol_version" => {
                peer.ok_or(need_peer("protocol_version"))?;
                if value != "1" {
                    return Err(UapiError::ProtocolVersion {
                        line,
                        version: value.chars().take(16).collect(),
                    });
                }
            }
            _ => {
                return Err(UapiError::UnknownKey {
                    line,
                    key: key.chars().take(64).collect(),
                });
            }
        }
    }
    Ok(Request::Set(set))
}

/// The answer to `get`: the device's lines, each peer's, then `errno=0` and the empty line.
pub fn format_get(d: &Device) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    if let Some(k) = &d.private_key {
        let _ = writeln!(s, "private_key={}", hex(k));
    }
    if d.listen_port != 0 {
        let _ = writeln!(s, "listen_port={}", d.listen_port);
    }
    if d.fwmark != 0 {
        let _ = writeln!(s, "fwmark={}", d.fwmark);
    }
    for p in &d.peers {
        let _ = writeln!(s, "public_key={}", hex(&p.public_key));
        let _ = writeln!(
            s,
            "preshared_key={}",
            hex(&p.preshared_key.unwrap_or([0; 32]))
        );
        let _ = writeln!(s, "protocol_version=1");
        if let Some(e) = &p.endpoint {
            let _ = writeln!(s, "endpoint={e}");
        }
        let t = p.last_handshake.unwrap_or_default();
        let _ = writeln!(s, "last_handshake_time_sec={}", t.as_secs());
        let _ = writeln!(s, "last_handshake_time_nsec={}", t.subsec_nanos());
        let _ = writeln!(s, "tx_bytes={}", p.tx_bytes);
        let _ = writeln!(s, "rx_bytes={}", p.rx_bytes);
        let _ = writeln!(
            s,
            "persistent_keepalive_interval={}",
            p.persistent_keepalive
        );
        for a in &p.allowed_ips {
            let _ = writeln!(s, "allowed_ip={a}");
        }
    }
    s.push_str("errno=0\n\n");
    s
}

/// The answer to a `set` (or any refusal): `errno=0`, or the errno negated as wireguard-go
/// sends it (`errno=-22`: `wg` reads the value as a negative return code and reports
/// `strerror` of its negation), then the empty line.
pub fn format_errno(errno: i32) -> String {
    format!("errno={}\n\n", -errno.saturating_abs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn refusals_carry_the_negated_errno_as_wireguard_go_sends_it() {
        assert_eq!(format_errno(0), "errno=0\n\n");
        assert_eq!(format_errno(22), "errno=-22\n\n");
        assert_eq!(format_errno(71), "errno=-71\n\n");
    }

    const K1: &str = "e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba52027a";
    const K2: &str = "b85996fecc9c7f1fc6d2572a76eda11d59bcd20be8e543b15ce4bd85a8e75a33";

    #[test]
    fn get_and_its_answer() {
        assert_eq!(parse_request(b"get=1\n\n"), Ok(Request::Get));
        let d = Device {
            private_key: hex32(K1),
            listen_port: 12912,
            fwmark: 0,
            peers: vec![Peer {
                public_key: hex32(K2).unwrap(),
                preshared_key: None,
                endpoint: Some(PeerEndpoint::Addr("[abcd:23::33%2]:51820".parse().unwrap())),
                last_handshake: Some(Duration::new(1_700_000_000, 5)),
                tx_bytes: 38333,
                rx_bytes: 2224,
                persistent_keepalive: 25,
                allowed_ips: vec!["192.168.4.4/32".parse().unwrap()],
            }],
        };
        let want = format!(
            "private_key={K1}\nlisten_port=12912\npublic_key={K2}\npreshared_key={}\n\
             protocol_version=1\nendpoint=[abcd:23::33%2]:51820\nlast_handshake_time_sec=1700000000\n\
             last_handshake_time_nsec=5\ntx_bytes=38333\nrx_bytes=2224\n\
             persistent_keepalive_interval=25\nallowed_ip=192.168.4.4/32\nerrno=0\n\n",
            "0".repeat(64)
        );
        assert_eq!(format_get(&d), want);
    }

    /// The set example of wireguard.com/xplatform (its keys), as `wg set` and `wg setconf`
    /// write it.
    #[test]
    fn the_documented_set_example() {
        let req = format!(
            "set=1\nprivate_key={K1}\nfwmark=0\nlisten_port=12912\nreplace_peers=true\n\
             public_key={K2}\npreshared_key=188515093e952f5f22e865cef3012e72f8b5f0b598ac0309d5dacce3b70fcf52\n\
             replace_allowed_ips=true\nallowed_ip=192.168.4.4/32\nendpoint=[abcd:23::33%2]:51820\n\
             public_key=58402e695ba1772b1cc9309755f043251ea77fdcf10fbe63989ceb7e19321376\n\
             update_only=true\npersistent_keepalive_interval=111\nallowed_ip=10.0.0.0/8\n\
             protocol_version=1\n\n"
        );
        let Ok(Request::Set(s)) = parse_request(req.as_bytes()) else {
            panic!("not a set");
        };
        assert_eq!(s.private_key, hex32(K1));
        assert_eq!(
            (s.fwmark, s.listen_port, s.replace_peers),
            (Some(0), Some(12912), true)
        );
        assert_eq!(s.peers.len(), 2);
        assert!(s.peers[0].replace_allowed_ips && !s.peers[0].update_only);
        // The %scope of a link-local endpoint is kept (its zone index).
        assert_eq!(
            s.peers[0]
                .endpoint
                .as_ref()
                .map(|e| e.to_string())
                .as_deref(),
            Some("[abcd:23::33%2]:51820")
        );
        assert!(s.peers[1].update_only);
        assert_eq!(s.peers[1].persistent_keepalive, Some(111));
        assert_eq!(
            s.peers[1].allowed_ips,
            vec![AllowedIp::Add("10.0.0.0/8".parse().unwrap())]
        );
    }

    fn one_peer_set(lines: &str) -> Result<PeerSet, UapiError> {
        match parse_request(format!("set=1\npublic_key={K2}\n{lines}\n").as_bytes())? {
            Request::Set(mut s) if s.peers.len() == 1 => Ok(s.peers.remove(0)),
            other => panic!("{other:?}"),
        }
    }

    /// `wg set wg0 peer K allowed-ips -10.0.0.0/24` (wireguard-tools >= 1.0.20250521) sends
    /// `allowed_ip=-10.0.0.0/24`; wireguard-go v0.0.20250522 removes that prefix. Additions and
    /// removals keep their order; host bits are cleared as for an addition.
    #[test]
    fn allowed_ip_removal() {
        let p = one_peer_set(
            "allowed_ip=10.0.0.0/24\nallowed_ip=-10.0.0.0/24\nallowed_ip=-fd00::1/64\n\
             allowed_ip=-10.1.2.3/16\nallowed_ip=-0.0.0.0/0\n",
        )
        .unwrap();
        let net = |s: &str| s.parse::<IpNet>().unwrap();
        assert_eq!(
            p.allowed_ips,
            vec![
                AllowedIp::Add(net("10.0.0.0/24")),
                AllowedIp::Remove(net("10.0.0.0/24")),
                AllowedIp::Remove(net("fd00::/64")),
                AllowedIp::Remove(net("10.1.0.0/16")),
                AllowedIp::Remove(net("0.0.0.0/0")),
            ]
        );
        for bad in [
            "-",
            "--10.0.0.0/24",
            "-/24",
            "- 10.0.0.0/24",
            "-10.0.0.0/ 24",
            "-10.0.0.0/33",
            "-10.0.0.0/+8",
            "-10.0.0.0",
            "-fd00::/129",
            "-10.0.0.0/24 ",
            "+10.0.0.0/24",
            "10.0.0.0/24-",
            "-eth0",
        ] {
            assert_eq!(
                one_peer_set(&format!("allowed_ip={bad}\n")),
                Err(UapiError::BadValue {
                    line: 3,
                    key: "allowed_ip"
                }),
                "{bad:?}"
            );
        }
        // Outside a peer, a removal is refused like an addition.
        assert_eq!(
            parse_request(b"set=1\nallowed_ip=-10.0.0.0/24\n\n"),
            Err(UapiError::PeerKeyOutsidePeer {
                line: 2,
                key: "allowed_ip"
            })
        );
    }

    /// Endpoints as wireguard-go's `netip.ParseAddrPort` takes them: an IPv6 zone is a scope id
    /// (a number) or an interface name, printed back as given.
    #[test]
    fn scoped_endpoints() {
        let ep = |s: &str| parse_endpoint(s);
        assert_eq!(
            ep("[fe80::1%eth0]:51820"),
            Some(PeerEndpoint::Scoped {
                addr: SocketAddrV6::new("fe80::1".parse().unwrap(), 51820, 0, 0),
                interface: "eth0".into(),
            })
        );
        assert_eq!(
            ep("[fe80::1%7]:51820"),
            Some(PeerEndpoint::Addr(SocketAddr::V6(SocketAddrV6::new(
                "fe80::1".parse().unwrap(),
                51820,
                0,
                7
            ))))
        );
        for s in [
            "[fe80::1%eth0]:51820",
            "[fe80::1%7]:51820",
            "[fe80::1%wg-0.a_b=c+d]:1",
            "[fe80::1%abcdefghijklmno]:65535",
            "[::1]:0",
            "10.0.0.1:51820",
            "[abcd:23::33%2]:51820",
        ] {
            let e = ep(s).unwrap_or_else(|| panic!("{s}"));
            assert_eq!(e.to_string(), s);
        }
        for s in [
            "[fe80::1%]:51820",
            "[fe80::1%eth0%1]:51820",
            "[fe80::1%eth/0]:51820",
            "[fe80::1%eth:0]:51820",
            "[fe80::1%eth 0]:51820",
            "[fe80::1%.]:51820",
            "[fe80::1%..]:51820",
            "[fe80::1%abcdefghijklmnop]:51820",
            "[fe80::1%4294967296]:51820",
            "[fe80::1%eth0]",
            "[fe80::1%eth0]:",
            "[fe80::1%eth0]:65536",
            "[fe80::1%eth0]:+1",
            "[fe80::1%eth0:51820",
            "fe80::1%eth0:51820",
            "10.0.0.1%eth0:51820",
            "[10.0.0.1]:51820",
            "[fe80::1%eth0]]:51820",
            "[fe80::1%eth\u{e9}]:51820",
        ] {
            assert_eq!(ep(s), None, "{s:?}");
        }
        let p = one_peer_set("endpoint=[fe80::1%lo]:51820\n").unwrap();
        assert!(
            matches!(p.endpoint, Some(PeerEndpoint::Scoped { ref interface, .. }) if interface == "lo")
        );
        assert_eq!(
            one_peer_set("endpoint=[fe80::1%a/b]:51820\n"),
            Err(UapiError::BadValue {
                line: 3,
                key: "endpoint"
            })
        );
        // get prints the name back.
        let d = Device {
            peers: vec![Peer {
                endpoint: p.endpoint,
                ..Peer::default()
            }],
            ..Device::default()
        };
        assert!(format_get(&d).contains("\nendpoint=[fe80::1%lo]:51820\n"));
    }

    #[test]
    fn refusals_name_their_line_and_errno() {
        let cases: Vec<(String, UapiError)> = vec![
            ("hello\n\n".into(), UapiError::UnknownOperation),
            ("get=2\n\n".into(), UapiError::UnknownOperation),
            ("set=1\nnonsense\n\n".into(), UapiError::NotKeyValue(2)),
            (
                "set=1\nfrobnicate=1\n\n".into(),
                UapiError::UnknownKey {
                    line: 2,
                    key: "frobnicate".into(),
                },
            ),
            (
                "set=1\nlisten_port=70000\n\n".into(),
                UapiError::BadValue {
                    line: 2,
                    key: "listen_port",
                },
            ),
            (
                "set=1\nallowed_ip=10.0.0.0/8\n\n".into(),
                UapiError::PeerKeyOutsidePeer {
                    line: 2,
                    key: "allowed_ip",
                },
            ),
            (
                format!("set=1\npublic_key={K2}\nprotocol_version=2\n\n"),
                UapiError::ProtocolVersion {
                    line: 3,
                    version: "2".into(),
                },
            ),
            (
                format!("set=1\npublic_key={K2}\nprivate_key={K1}\n\n"),
                UapiError::UnknownKey {
                    line: 3,
                    key: "private_key".into(),
                },
            ),
            (
                format!("set=1\npublic_key={}\n\n", &K2[..63]),
                UapiError::BadValue {
                    line: 2,
                    key: "public_key",
                },
            ),
        ];
        for (req, want) in cases {
            assert_eq!(parse_request(req.as_bytes()), Err(want.clone()), "{req:?}");
        }
        assert_eq!(parse_request(&[0xff, 0xfe]).unwrap_err().errno(), EIO);
    }

    #[test]
    fn requests_end_at_the_empty_line() {
        assert_eq!(request_end(b"get=1\n"), Ok(None));
        assert_eq!(request_end(b"get=1\n\nget=1\n\n"), Ok(Some(7)));
        assert_eq!(
            request_end(&vec![b'a'; MAX_REQUEST + 1]),
            Err(UapiError::TooLong)
        );
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = parse_request(&bytes);
            let _ = request_end(&bytes);
        }

        #[test]
        fn near_requests_never_panic(
            lines in proptest::collection::vec(
                prop_oneof![
                    Just("set=1".to_string()),
                    Just(format!("public_key={K2}")),
                    Just(format!("private_key={K1}")),
                    Just("allowed_ip=::/0".to_string()),
                    Just("allowed_ip=-10.0.0.0/8".to_string()),
                    Just("endpoint=[fe80::1%eth0]:51820".to_string()),
                    Just("endpoint=1.2.3.4:5".to_string()),
                    Just("replace_peers=true".to_string()),
                    Just("remove=true".to_string()),
                    "[a-z_]{0,20}=[0-9a-f:./\\[\\]]{0,70}",
                ],
                0..20,
            )
        ) {
            let _ = parse_request(lines.join("\n").as_bytes());
        }

        /// What `format_get` writes for any peer, read back line by line, is well formed.
        #[test]
        fn get_answers_are_key_value_lines(port in any::<u16>(), tx in any::<u64>(), ka in any::<u16>()) {
            let d = Device {
                private_key: Some([7; 32]),
                listen_port: port,
                fwmark: 0,
                peers: vec![Peer { public_key: [1; 32], tx_bytes: tx, persistent_keepalive: ka, ..Peer::default() }],
            };
            let s = format_get(&d);
            prop_assert!(s.ends_with("errno=0\n\n"));
            for l in s.trim_end().lines() {
                prop_assert!(l.split_once('=').is_some(), "{l}");
            }
        }
    }
}
