//! WireGuard's cross-platform UAPI for a tunnel on WireGuard's wire: the socket
//! `/var/run/wireguard/NAME.sock` that `wg show`, `wg showconf`, `wg set`, `wg setconf` and
//! `wg syncconf` talk to, served by the thread `sl-uapi` with the codec of
//! [`sealink_proto::tunnel::uapi`].
//!
//! The socket is made during set-up (root), mode 0600 in a 0755 directory as wireguard-go
//! makes them; a connection must come from root or the uid that started the tunnel (as the
//! control socket's). `get` reads the core; `set` changes its peers through
//! [`Tunnel::reconfigure`] (sessions of kept peers stay), and refuses, with `errno=22` and a
//! log line, what cannot change while the tunnel runs: another private key, listen port or
//! fwmark. Like `wg set` on a kernel interface, it adds or removes no routes. Refused requests
//! are counted by reason (`sealink show`).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use sealink_proto::tunnel::uapi::{self, Device, Peer, Request, Set, UapiError};
use sealink_proto::tunnel::{PeerConfig, Tunnel};

use crate::Shared;
use crate::error::TunnelError;

/// Where wg(8) looks for userspace interfaces.
pub const DIR: &str = "/var/run/wireguard";

/// How long one connection may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// `DIR/NAME.sock`.
pub fn socket_path(name: &str) -> PathBuf {
    Path::new(DIR).join(format!("{name}.sock"))
}

/// Makes the UAPI socket of interface `name` (during set-up, as root): refused while another
/// process answers on it (wireguard-go or another sealink of that name); a stale one is
/// replaced.
pub(crate) fn bind(name: &str) -> Result<(UnixListener, PathBuf), TunnelError> {
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
    let l = crate::bind_private(&path, "WireGuard UAPI socket")?;
    l.set_nonblocking(true)
        .map_err(crate::error::io("UAPI socket"))?;
    Ok((l, path))
}

/// Removes the UAPI socket made by [`bind`] (at exit, or when set-up fails), if it can.
pub(crate) fn remove(sock: Option<&(UnixListener, PathBuf)>) {
    if let Some((_, p)) = sock {
        let _ = std::fs::remove_file(p);
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

/// Serves the UAPI socket until the tunnel stops.
pub(crate) fn serve_loop(sh: &Shared, listener: &UnixListener) {
    use std::os::fd::AsFd;
    while !sh.stopping() {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(refusal) = crate::authorize(sh, &stream) {
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
                Err(errno) => {
                    sh.uapi_refused.count("set-refused");
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
                endpoint: p.endpoint,
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

/// Applies a `set`; the errno when refused (nothing changed then).
fn apply(sh: &Shared, set: Set) -> Result<(), i32> {
    let mut core = sh.lock();
    let refuse = |what: &str| {
        tracing::warn!("UAPI set refused: {what} cannot change while the tunnel runs");
        Err(uapi::EINVAL)
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
    let peers = updated_peers(&core, set);
    match core.reconfigure(peers) {
        Ok(changes) => {
            if !changes.is_empty() {
                tracing::info!("UAPI set: {changes}");
            }
            Ok(())
        }
        Err(e) => {
            tracing::warn!("UAPI set refused: {e}");
            Err(uapi::EINVAL)
        }
    }
}

/// The peer list after `set`, from the core's.
fn updated_peers(core: &Tunnel, set: Set) -> Vec<PeerConfig> {
    let mut peers = if set.replace_peers {
        Vec::new()
    } else {
        core.peer_configs()
    };
    for ps in set.peers {
        let at = peers.iter().position(|p| p.public_key == ps.public_key);
        if ps.remove {
            if let Some(i) = at {
                peers.remove(i);
            }
            continue;
        }
        let i = match at {
            Some(i) => i,
            None if ps.update_only => continue,
            None => {
                let b64 = base64::engine::general_purpose::STANDARD.encode(ps.public_key);
                peers.push(PeerConfig {
                    // wg has no peer names: the start of its key, as wg-quick configs get.
                    name: b64.chars().take(8).collect(),
                    public_key: ps.public_key,
                    endpoint: None,
                    allowed_ips: Vec::new(),
                    persistent_keepalive: None,
                    preshared_key: None,
                });
                peers.len() - 1
            }
        };
        let p = &mut peers[i];
        if let Some(k) = ps.preshared_key {
            p.preshared_key = (k != [0; 32]).then_some(k);
        }
        if let Some(e) = ps.endpoint {
            p.endpoint = Some(e);
        }
        if let Some(s) = ps.persistent_keepalive {
            p.persistent_keepalive = (s > 0).then(|| Duration::from_secs(u64::from(s)));
        }
        if ps.replace_allowed_ips {
            p.allowed_ips.clear();
        }
        for a in ps.allowed_ips {
            // As in WireGuard, a prefix given to one peer is taken from any other.
            for (j, q) in peers.iter_mut().enumerate() {
                if j != i {
                    q.allowed_ips.retain(|x| *x != a);
                }
            }
            if !peers[i].allowed_ips.contains(&a) {
                peers[i].allowed_ips.push(a);
            }
        }
    }
    peers
}
