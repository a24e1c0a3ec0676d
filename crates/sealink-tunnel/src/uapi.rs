//! WireGuard's cross-platform UAPI for a tunnel on WireGuard's wire: the socket
//! `/var/run/wireguard/NAME.sock` that `wg show`, `wg showconf`, `wg set`, `wg setconf` and
//! `wg syncconf` talk to, served by the thread `sl-uapi` with the codec of
//! [`sealink_proto::tunnel::uapi`].
//!
//! The socket is made during set-up (root), mode 0600 in a 0755 directory as wireguard-go
//! makes them; a connection must come from root or the uid that started the tunnel (as the
//! control socket's). `get` reads the core; `set` changes its peers through
//! [`Tunnel::reconfigure`] (sessions of kept peers stay), and refuses, with `errno=-95`
//! (EOPNOTSUPP: `wg` prints "Operation not supported") and a log line, what cannot change while
//! the tunnel runs: another private key, listen port or fwmark (wireguard-go rebinds to a new
//! port; sealink's sockets are shared by its data-path threads and need a restart). Like `wg set` on a kernel interface, it adds or removes no routes. Refused requests
//! are counted by reason (`sealink show`).
//!
//! As wireguard-go v0.0.20250522: `allowed_ip=-NET` removes one prefix from a peer; an
//! endpoint's IPv6 zone may name an interface (`[fe80::1%eth0]:51820`), resolved here to its
//! index for the scope id (an unknown name is refused) and printed back by `get`; and the
//! tunnel stops, as on SIGTERM, once its socket file is removed (wg-quick's `down` for a
//! userspace implementation removes it and waits for the interface to go).

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV6};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use base64::Engine as _;
use sealink_proto::tunnel::uapi::{
    self, AllowedIp, Device, Peer, PeerEndpoint, Request, Set, UapiError,
};
use sealink_proto::tunnel::{IpNet, TunnelPeerConfig};

use crate::Shared;
use crate::error::TunnelError;

/// Where wg(8) looks for userspace interfaces.
pub const DIR: &str = "/var/run/wireguard";

/// How long one connection may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the socket file is checked for removal.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The UAPI socket made by [`bind`].
pub(crate) struct Socket {
    pub listener: UnixListener,
    pub path: PathBuf,
    /// The socket file's (device, inode) once made: while the path names it, it is ours.
    id: Option<(u64, u64)>,
}

impl Socket {
    /// Whether the path still names the socket file we made. Only a missing file or another
    /// file says no: an error reading it (a permission) does not stop the tunnel.
    fn still_ours(&self) -> bool {
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) => self.id.is_none_or(|id| id == (m.dev(), m.ino())),
            Err(e) => e.kind() != std::io::ErrorKind::NotFound,
        }
    }
}

impl Socket {
    /// `DEV:INODE` of the socket file as made (as `stat -c %d:%i` prints it), or empty.
    pub(crate) fn id_arg(&self) -> String {
        self.id
            .map(|(dev, ino)| format!("{dev}:{ino}"))
            .unwrap_or_default()
    }
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// `DIR/NAME.sock`.
pub fn socket_path(name: &str) -> PathBuf {
    Path::new(DIR).join(format!("{name}.sock"))
}

/// Makes the UAPI socket of interface `name` (during set-up, as root): refused while another
/// process answers on it (wireguard-go or another sealink of that name); a stale one is
/// replaced.
pub(crate) fn bind(name: &str) -> Result<Socket, TunnelError> {
    let dir = Path::new(DIR);
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(crate::error::io(format!("create {DIR}")))?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    }
    let path = socket_path(name);
    if UnixStream::connect(&path).is_ok() {
        return Err(TunnelError::Config {
            key: "interface name".into(),
            msg: format!(
                "{} answers already: another WireGuard implementation runs {name}",
                path.display()
            ),
        });
    }
    let _ = std::fs::remove_file(&path);
    let l = crate::control::bind_private(&path, "WireGuard UAPI socket")?;
    l.set_nonblocking(true)
        .map_err(crate::error::io("UAPI socket"))?;
    let id = file_id(&path);
    Ok(Socket {
        listener: l,
        path,
        id,
    })
}

/// Removes the UAPI socket made by [`bind`] (at exit, or when set-up fails), if it can and
/// the path still names it (not another process's socket made since ours was removed).
pub(crate) fn remove(sock: Option<&Socket>) {
    if let Some(s) = sock.filter(|s| s.still_ours()) {
        let _ = std::fs::remove_file(&s.path);
    }
}

/// The zone of each peer's IPv6 endpoint as the last `set` gave it (a name or a number), so
/// that `get` prints it back as given, as wireguard-go does, while the endpoint is that one.
#[derive(Default)]
pub(crate) struct Zones(Mutex<HashMap<[u8; 32], (SocketAddrV6, String)>>);

impl Zones {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (SocketAddrV6, String)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An interface's index in the tunnel's network namespace (`SIOCGIFINDEX`).
pub(crate) fn interface_index(name: &str) -> std::io::Result<u32> {
    let fd = rustix::net::socket(
        rustix::net::AddressFamily::INET6,
        rustix::net::SocketType::DGRAM,
        None,
    )
    .or_else(|_| {
        rustix::net::socket(
            rustix::net::AddressFamily::INET,
            rustix::net::SocketType::DGRAM,
            None,
        )
    })?;
    Ok(rustix::net::netdevice::name_to_index(&fd, name)?)
}

/// An interface's name from its index (`SIOCGIFNAME`), if there is one.
fn interface_name(index: u32) -> Option<String> {
    let fd = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        None,
    )
    .ok()?;
    rustix::net::netdevice::index_to_name(&fd, index).ok()
}

/// How `get` prints a peer's endpoint: an IPv6 zone as the last `set` gave it while the
/// endpoint is that one, else the interface's name (as wireguard-go prints an endpoint it
/// learned), else the scope id.
fn endpoint_for_get(zones: &Zones, key: &[u8; 32], e: SocketAddr) -> PeerEndpoint {
    let SocketAddr::V6(v6) = e else {
        return PeerEndpoint::Addr(e);
    };
    if v6.scope_id() == 0 {
        return PeerEndpoint::Addr(e);
    }
    let given = zones
        .lock()
        .get(key)
        .filter(|(a, _)| *a == v6)
        .map(|(_, z)| z.clone());
    let zone = given.or_else(|| interface_name(v6.scope_id()));
    match zone {
        Some(z) if !z.bytes().all(|c| c.is_ascii_digit()) => PeerEndpoint::Scoped {
            addr: v6,
            interface: z,
        },
        _ => PeerEndpoint::Addr(e),
    }
}

/// Refused requests by reason.
#[derive(Default)]
pub(crate) struct Refusals(Mutex<BTreeMap<&'static str, u64>>);

impl Refusals {
    fn count(&self, reason: &'static str) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(reason)
            .or_default() += 1;
    }
    /// (reason, count), reasons in name order.
    pub(crate) fn snapshot(&self) -> Vec<(String, u64)> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect()
    }
}

/// Serves the UAPI socket until the tunnel stops; stops the tunnel (as SIGTERM does) once the
/// socket file is removed or replaced, checked every [`WATCH_EVERY`].
pub(crate) fn serve_loop(sh: &Shared, sock: &Socket) {
    use std::os::fd::AsFd;
    let listener = &sock.listener;
    let mut checked = Instant::now();
    while !sh.stopping() {
        if checked.elapsed() >= WATCH_EVERY {
            checked = Instant::now();
            if !sock.still_ours() {
                tracing::warn!(
                    path = %sock.path.display(),
                    "the UAPI socket was removed (as by wg-quick down): stopping the tunnel"
                );
                sh.stop.store(true, Ordering::SeqCst);
                break;
            }
        }
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(refusal) = crate::control::authorize(sh, &stream) {
                    sh.uapi_refused.count("permission-denied");
                    tracing::warn!("UAPI socket: {refusal}");
                    continue;
                }
                serve_connection(sh, stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let fd = listener.as_fd();
                let mut fds = [rustix::event::PollFd::new(
                    &fd,
                    rustix::event::PollFlags::IN,
                )];
                let timeout = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 250_000_000,
                };
                let _ = rustix::event::poll(&mut fds, Some(&timeout));
            }
            Err(e) => {
                tracing::debug!(error = %e, "UAPI accept failed");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Answers the requests of one connection, one after another, until it closes, times out or
/// sends one that cannot be read.
fn serve_connection(sh: &Shared, mut stream: UnixStream) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let _ = stream.set_write_timeout(Some(READ_TIMEOUT));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let end = loop {
            match uapi::request_end(&buf) {
                Ok(Some(end)) => break end,
                Ok(None) => {}
                Err(e) => {
                    refuse(sh, &mut stream, &e);
                    return;
                }
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => {
                    if !buf.is_empty() && !buf.iter().all(u8::is_ascii_whitespace) {
                        sh.uapi_refused.count("incomplete");
                    }
                    return;
                }
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let answer = match uapi::parse_request(&buf[..end]) {
            Ok(Request::Get) => uapi::format_get(&device(sh)),
            Ok(Request::Set(set)) => match apply(sh, set) {
                Ok(()) => uapi::format_errno(0),
                Err((errno, reason)) => {
                    sh.uapi_refused.count(reason);
                    uapi::format_errno(errno)
                }
            },
            Err(e) => {
                refuse(sh, &mut stream, &e);
                return;
            }
        };
        if stream.write_all(answer.as_bytes()).is_err() {
            return;
        }
        buf.drain(..end);
    }
}

fn refuse(sh: &Shared, stream: &mut UnixStream, e: &UapiError) {
    sh.uapi_refused.count(e.reason());
    tracing::info!("UAPI request refused: {e}");
    let _ = stream.write_all(uapi::format_errno(e.errno()).as_bytes());
}

/// The device as `get` reports it.
fn device(sh: &Shared) -> Device {
    let core = sh.lock();
    let now = sh.clock.now();
    Device {
        private_key: Some(*core.host_key().private()),
        listen_port: sh.info.listen.port(),
        fwmark: sh.info.fwmark.unwrap_or(0),
        peers: core
            .peer_status(now)
            .into_iter()
            .map(|p| Peer {
                public_key: p.public_key,
                preshared_key: p.preshared_key,
                endpoint: p
                    .endpoint
                    .map(|e| endpoint_for_get(&sh.uapi_zones, &p.public_key, e)),
                // The driver's clock counts from the Unix epoch.
                last_handshake: p.last_handshake.map(|t| Duration::from_nanos(t.as_nanos())),
                tx_bytes: p.stats.tx_bytes,
                rx_bytes: p.stats.rx_bytes,
                persistent_keepalive: p
                    .persistent_keepalive
                    .map_or(0, |d| d.as_secs().min(u64::from(u16::MAX)) as u16),
                allowed_ips: p.allowed_ips,
            })
            .collect(),
    }
}

/// Resolves the interface names of scoped endpoints to their index (the scope id) in place;
/// returns each IPv6 zone as given, by peer. An unknown name refuses the whole `set`.
fn resolve_zones(set: &mut Set) -> Result<Vec<([u8; 32], SocketAddrV6, String)>, String> {
    let mut given = Vec::new();
    for ps in &mut set.peers {
        match &ps.endpoint {
            Some(e @ PeerEndpoint::Scoped { addr, interface }) => {
                let index = interface_index(interface)
                    .map_err(|err| format!("endpoint {e}: interface {interface:?}: {err}"))?;
                let mut a = *addr;
                a.set_scope_id(index);
                given.push((ps.public_key, a, interface.clone()));
                ps.endpoint = Some(PeerEndpoint::Addr(SocketAddr::V6(a)));
            }
            Some(PeerEndpoint::Addr(SocketAddr::V6(a))) if a.scope_id() != 0 => {
                given.push((ps.public_key, *a, a.scope_id().to_string()));
            }
            _ => {}
        }
    }
    Ok(given)
}

/// Applies a `set`; the errno and the reason to count when refused (nothing changed then).
fn apply(sh: &Shared, mut set: Set) -> Result<(), (i32, &'static str)> {
    let zones = resolve_zones(&mut set).map_err(|e| {
        tracing::warn!("UAPI set refused: {e}");
        (uapi::EINVAL, "unknown-interface")
    })?;
    let mut core = sh.lock();
    let refuse = |what: &str| {
        tracing::warn!(
            "UAPI set refused: {what} cannot change while the tunnel runs; change the config \
             and restart the tunnel"
        );
        Err((uapi::EOPNOTSUPP, "set-refused"))
    };
    if set
        .private_key
        .is_some_and(|k| k != *core.host_key().private())
    {
        return refuse("the private key");
    }
    if set
        .listen_port
        .is_some_and(|p| p != 0 && p != sh.info.listen.port())
    {
        return refuse("the listen port");
    }
    if set.fwmark.is_some_and(|m| m != sh.info.fwmark.unwrap_or(0)) {
        return refuse("the fwmark");
    }
    let endpoints_set: Vec<[u8; 32]> = set
        .peers
        .iter()
        .filter(|p| p.endpoint.is_some())
        .map(|p| p.public_key)
        .collect();
    let peers = updated_peers(core.peer_configs(), set);
    match core.reconfigure(peers) {
        Ok(changes) => {
            if !changes.is_empty() {
                tracing::info!("UAPI set: {changes}");
            }
            let mut z = sh.uapi_zones.lock();
            for k in &endpoints_set {
                z.remove(k);
            }
            for (k, a, zone) in zones {
                z.insert(k, (a, zone));
            }
            Ok(())
        }
        Err(e) => {
            tracing::warn!("UAPI set refused: {e}");
            Err((uapi::EINVAL, "set-refused"))
        }
    }
}

/// The peer list after `set` (its scoped endpoints resolved by [`resolve_zones`]), from the
/// core's `current` one. Linear in peers and prefixes (issue 50: `wg setconf` of a hub's
/// 100,000 peers): peers are found by key and prefixes by owner through maps, and a removed
/// peer's slot is emptied, the list compacted once at the end.
fn updated_peers(current: Vec<TunnelPeerConfig>, set: Set) -> Vec<TunnelPeerConfig> {
    use std::collections::HashMap;
    let mut peers: Vec<Option<TunnelPeerConfig>> = if set.replace_peers {
        Vec::new()
    } else {
        current.into_iter().map(Some).collect()
    };
    let mut by_key: HashMap<[u8; 32], usize> = peers
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.as_ref().map(|p| (p.public_key, i)))
        .collect();
    let mut owner: HashMap<IpNet, usize> = HashMap::new();
    for (i, p) in peers.iter().enumerate() {
        for n in p.iter().flat_map(|p| &p.allowed_ips) {
            owner.insert(*n, i);
        }
    }
    for ps in set.peers {
        let at = by_key.get(&ps.public_key).copied();
        if ps.remove {
            if let Some(i) = at {
                by_key.remove(&ps.public_key);
                for n in peers[i].take().into_iter().flat_map(|p| p.allowed_ips) {
                    if owner.get(&n) == Some(&i) {
                        owner.remove(&n);
                    }
                }
            }
            continue;
        }
        let i = match at {
            Some(i) => i,
            None if ps.update_only => continue,
            None => {
                let b64 = base64::engine::general_purpose::STANDARD.encode(ps.public_key);
                peers.push(Some(TunnelPeerConfig {
                    // wg has no peer names: the start of its key, as wg-quick configs get.
                    name: b64.chars().take(8).collect(),
                    public_key: ps.public_key,
                    endpoint: None,
                    allowed_ips: Vec::new(),
                    persistent_keepalive: None,
                    preshared_key: None,
                }));
                by_key.insert(ps.public_key, peers.len() - 1);
                peers.len() - 1
            }
        };
        let Some(p) = peers[i].as_mut() else {
            continue;
        };
        if let Some(k) = ps.preshared_key {
            p.preshared_key = (k != [0; 32]).then_some(k);
        }
        match ps.endpoint {
            Some(PeerEndpoint::Addr(e)) => p.endpoint = Some(e),
            // Resolved into an address by `resolve_zones` before.
            Some(PeerEndpoint::Scoped { .. }) | None => {}
        }
        if let Some(s) = ps.persistent_keepalive {
            p.persistent_keepalive = (s > 0).then(|| Duration::from_secs(u64::from(s)));
        }
        if ps.replace_allowed_ips {
            for n in std::mem::take(&mut p.allowed_ips) {
                if owner.get(&n) == Some(&i) {
                    owner.remove(&n);
                }
            }
        }
        for op in ps.allowed_ips {
            match op {
                AllowedIp::Add(a) => {
                    // As in WireGuard, a prefix given to one peer is taken from any other.
                    match owner.insert(a, i) {
                        Some(j) if j == i => {}
                        Some(j) => {
                            if let Some(q) = peers[j].as_mut() {
                                q.allowed_ips.retain(|x| *x != a);
                            }
                            if let Some(p) = peers[i].as_mut() {
                                p.allowed_ips.push(a);
                            }
                        }
                        None => {
                            if let Some(p) = peers[i].as_mut() {
                                p.allowed_ips.push(a);
                            }
                        }
                    }
                }
                // Only this peer's; a prefix it does not have is left alone (wireguard-go).
                AllowedIp::Remove(a) => {
                    if owner.get(&a) == Some(&i) {
                        owner.remove(&a);
                        if let Some(p) = peers[i].as_mut() {
                            p.allowed_ips.retain(|x| *x != a);
                        }
                    }
                }
            }
        }
    }
    peers.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: [u8; 32] = [1; 32];
    const K2: [u8; 32] = [2; 32];

    fn peer(key: [u8; 32], nets: &[&str]) -> TunnelPeerConfig {
        TunnelPeerConfig {
            name: "p".into(),
            public_key: key,
            endpoint: None,
            allowed_ips: nets.iter().map(|n| n.parse().unwrap()).collect(),
            persistent_keepalive: None,
            preshared_key: None,
        }
    }

    fn set(lines: &str) -> Set {
        match uapi::parse_request(format!("set=1\n{lines}\n").as_bytes()) {
            Ok(Request::Set(s)) => s,
            other => panic!("{other:?}"),
        }
    }

    fn hex(k: &[u8; 32]) -> String {
        k.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn nets(p: &TunnelPeerConfig) -> Vec<String> {
        p.allowed_ips.iter().map(ToString::to_string).collect()
    }

    /// `allowed_ip=-NET` removes that prefix from that peer only; a prefix the peer does not
    /// have (another peer's included) is left alone, as in wireguard-go.
    #[test]
    fn allowed_ip_removal_takes_one_prefix_from_one_peer() {
        let current = vec![
            peer(K1, &["10.0.0.0/24", "10.1.0.0/16", "fd00::/64"]),
            peer(K2, &["10.2.0.0/24"]),
        ];
        let s = set(&format!(
            "public_key={}\nallowed_ip=-10.0.0.7/24\nallowed_ip=-10.2.0.0/24\n\
             allowed_ip=-10.9.0.0/24\nallowed_ip=-fd00::/64\nallowed_ip=10.3.0.0/24\n",
            hex(&K1)
        ));
        let peers = updated_peers(current, s);
        assert_eq!(nets(&peers[0]), ["10.1.0.0/16", "10.3.0.0/24"]);
        assert_eq!(nets(&peers[1]), ["10.2.0.0/24"]);
        // In order: added then removed is gone; removed then added is there.
        let s = set(&format!(
            "public_key={}\nallowed_ip=10.4.0.0/24\nallowed_ip=-10.4.0.0/24\n\
             allowed_ip=-10.5.0.0/24\nallowed_ip=10.5.0.0/24\n",
            hex(&K2)
        ));
        let peers = updated_peers(peers, s);
        assert_eq!(nets(&peers[1]), ["10.2.0.0/24", "10.5.0.0/24"]);
    }

    /// WireGuard's rule: a prefix given to one peer leaves any other; and `wg setconf` of as
    /// many peers as a request of at most `MAX_REQUEST` (1 MiB) holds (here 6,000, one prefix
    /// each, then every prefix moved to another peer) is linear: each move used to scan every
    /// peer.
    #[test]
    fn a_prefix_moves_to_the_peer_it_is_given_to_and_setconf_is_linear() {
        let current = vec![peer(K1, &["10.0.0.0/24", "10.1.0.0/24"]), peer(K2, &[])];
        let s = set(&format!(
            "public_key={}\nallowed_ip=10.0.0.0/24\n",
            hex(&K2)
        ));
        let peers = updated_peers(current, s);
        assert_eq!(nets(&peers[0]), ["10.1.0.0/24"]);
        assert_eq!(nets(&peers[1]), ["10.0.0.0/24"]);
        // A removed peer's prefixes are free for the next one.
        let s = set(&format!(
            "public_key={}\nremove=true\npublic_key={}\nallowed_ip=10.1.0.0/24\n",
            hex(&K1),
            hex(&K2)
        ));
        let peers = updated_peers(peers, s);
        assert_eq!(peers.len(), 1);
        assert_eq!(nets(&peers[0]), ["10.0.0.0/24", "10.1.0.0/24"]);

        let n = 6_000u32;
        let key = |i: u32| {
            let mut k = [7u8; 32];
            k[..4].copy_from_slice(&i.to_le_bytes());
            k
        };
        let mut text = String::from("replace_peers=true\n");
        for i in 0..n {
            let ip = std::net::Ipv4Addr::from(0x0A00_0000 + i);
            text.push_str(&format!(
                "public_key={}\nallowed_ip={ip}/32\n",
                hex(&key(i))
            ));
        }
        let t = Instant::now();
        let peers = updated_peers(Vec::new(), set(&text));
        assert_eq!(peers.len(), n as usize);
        // Every prefix moves to the next peer: each one taken from its owner.
        let mut text = String::new();
        for i in 0..n {
            let ip = std::net::Ipv4Addr::from(0x0A00_0000 + (i + 1) % n);
            text.push_str(&format!(
                "public_key={}\nreplace_allowed_ips=true\nallowed_ip={ip}/32\n",
                hex(&key(i))
            ));
        }
        let peers = updated_peers(peers, set(&text));
        assert!(peers.iter().all(|p| p.allowed_ips.len() == 1));
        assert_eq!(nets(&peers[0]), ["10.0.0.1/32"]);
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }

    /// An interface name as the zone becomes its index; an unknown one refuses the set.
    #[test]
    fn scoped_endpoint_names_resolve_to_their_index() {
        let lo = interface_index("lo").expect("lo exists in every network namespace");
        let mut s = set(&format!(
            "public_key={}\nendpoint=[fe80::1%lo]:51820\npublic_key={}\nendpoint=[fe80::2%7]:1\n",
            hex(&K1),
            hex(&K2)
        ));
        let given = resolve_zones(&mut s).unwrap();
        let a1 = SocketAddrV6::new("fe80::1".parse().unwrap(), 51820, 0, lo);
        let a2 = SocketAddrV6::new("fe80::2".parse().unwrap(), 1, 0, 7);
        assert_eq!(
            given,
            vec![(K1, a1, "lo".to_string()), (K2, a2, "7".to_string())]
        );
        let peers = updated_peers(vec![peer(K1, &[])], s);
        assert_eq!(peers[0].endpoint, Some(SocketAddr::V6(a1)));
        assert_eq!(peers[1].endpoint, Some(SocketAddr::V6(a2)));
        // get: as given while the endpoint is that one; else the name of the index.
        let zones = Zones::default();
        zones
            .lock()
            .extend(given.iter().map(|(k, a, z)| (*k, (*a, z.clone()))));
        let get = |k, a| endpoint_for_get(&zones, k, SocketAddr::V6(a)).to_string();
        assert_eq!(get(&K1, a1), "[fe80::1%lo]:51820");
        assert_eq!(get(&K2, a2), "[fe80::2%7]:1");
        let roamed = SocketAddrV6::new("fe80::3".parse().unwrap(), 9, 0, lo);
        assert_eq!(get(&K1, roamed), "[fe80::3%lo]:9");
        assert_eq!(
            endpoint_for_get(&zones, &K1, "10.0.0.1:5".parse().unwrap()).to_string(),
            "10.0.0.1:5"
        );

        let mut s = set(&format!(
            "public_key={}\nendpoint=[fe80::1%nosuchif0]:51820\n",
            hex(&K1)
        ));
        let e = resolve_zones(&mut s).unwrap_err();
        assert!(e.contains("nosuchif0"), "{e}");
    }
}
