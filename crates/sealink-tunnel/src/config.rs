//! The tunnel configuration file (TOML, in the spirit of wg-quick). Parsing is strict: unknown
//! keys, missing keys and bad values are errors naming the offending key.
//!
//! ```toml
//! [interface]
//! name = "sl0"                    # TUN name (default sl0)
//! private_key = "/path/host.key"  # written by `sealink keygen host PATH`
//! address = "10.9.0.1/24"         # IPv4 or IPv6 CIDR given to the interface, or a list:
//!                                 # ["10.9.0.1/24", "fd09::1/64"] (all are assigned)
//! listen_port = 51820             # optional: an ephemeral port if left out (`show` tells it)
//! mtu = 1420                      # default 1420; 576..=9000
//! workers = 4                     # crypto worker threads; 0: inline on the readers
//! queues = 4                      # TUN queues and UDP sockets
//!                                 # (default both: the core count; up to 2 cores: 0 and 1)
//! tun_writers = 4                 # threads writing received packets to the TUN device, a
//!                                 # flow always to the same one; 0: the receive path writes
//!                                 # (default: 0; with handoff = "always", one per queue with
//!                                 # several queues and workers)
//! handoff = "auto"                # when batches go to the crypto workers: "auto" (default)
//!                                 # keeps them on the thread that read them until it saturates
//!                                 # its core and a core is idle; "always" hands every batch
//!                                 # over (for comparison)
//! lanes = true                    # number data datagrams by flow, for peers that agree, and
//!                                 # steer received ones over the UDP sockets by that number,
//!                                 # so one peer's flows spread over them (default true;
//!                                 # sealink's wire only)
//! pre_up = "cmd %i"               # hooks (wg-quick's): pre_up, post_up, pre_down, post_down;
//! post_down = ["a", "b"]          # a command or a list, /bin/sh -c, %i: the interface name
//! user = "sealink-tunnel"         # the user the running tunnel switches to once set up
//!                                 # (default "sealink-tunnel", a dedicated system account
//!                                 # that must exist; "root" keeps uid 0, with a warning)
//! fwmark = 51820                  # a full tunnel's mark and routing table (default 51820)
//! table = "auto"                  # wg-quick's Table: "auto" (routes in main, a full tunnel
//!                                 # by policy), "off" (no routes), "main" or a number (every
//!                                 # allowed IP, default routes too, in that table; no policy)
//! dns = ["10.9.0.2", "corp.example"] # optional, as wg-quick's DNS: name servers (addresses)
//!                                 # and search domains (names), set with `resolvconf`
//!
//! [interface.piggyback]           # optional: small packets ride together
//! enabled = true                  # default true
//! mode = "autocork"               # wait only while a send is in flight (default), or "timer"
//! small = 256                     # packets up to this many bytes may wait...
//!                                 # (default 256, at most queue_limit - 2)
//! max_delay_us = 200              # ...at most this long (autocork: a backstop)...
//! queue_limit = 1400              # ...or until this many bytes are queued
//!                                 # (default 1400, at most mtu + 2: one datagram)
//!
//! [[peer]]
//! name = "b"
//! public_key = "<base64 from host.key.pub, field 2>"
//! endpoint = "10.0.0.2:51820"     # optional
//! persistent_keepalive = 25       # optional: a keepalive after 25 s with nothing sent to
//!                                 # the peer (NAT mappings); 0 or absent: off; at most 65535
//! allowed_ips = ["10.9.0.2/32"]   # also routed through the interface where the interface's
//!                                 # own networks do not cover them (a site behind the peer)
//! ```
//!
//! `up` adds a route `PREFIX dev NAME` (through rtnetlink, `rtnl.rs`) for every allowed IP
//! prefix outside the interface's networks; the routes go away with the interface. Any routed prefix that contains a peer's
//! endpoint is refused (the tunnel's own datagrams would loop into it). A full tunnel
//! (`0.0.0.0/0`, `::/0`) is routed as wg-quick routes it, by policy: see [`crate::policy`].

use std::io::Read;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use sealink_engine::Handoff;

use sealink_proto::HostKey;
use sealink_proto::tunnel::{IpNet, TunnelConfig, TunnelPeerConfig};

use crate::error::TunnelError;
use crate::hooks::Hooks;

mod check;
pub mod wgquick;

/// Longest interface name Linux accepts (IFNAMSIZ - 1).
const MAX_IFNAME: usize = 15;

/// The config as written, before its checks: from TOML, or from a wg-quick file
/// ([`wgquick`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub interface: RawInterface,
    #[serde(default)]
    pub peer: Vec<RawPeer>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawInterface {
    pub name: Option<String>,
    pub private_key: PathBuf,
    pub address: OneOrMany,
    pub listen_port: Option<u16>,
    pub mtu: Option<u32>,
    pub workers: Option<u32>,
    pub queues: Option<u32>,
    pub tun_writers: Option<u32>,
    pub handoff: Option<String>,
    pub lanes: Option<bool>,
    pub piggyback: Option<RawPiggyback>,
    pub pre_up: Option<OneOrMany>,
    pub post_up: Option<OneOrMany>,
    pub pre_down: Option<OneOrMany>,
    pub post_down: Option<OneOrMany>,
    pub user: Option<String>,
    pub fwmark: Option<u32>,
    /// `"auto"` (the default), `"off"`, `"main"` or a table number (wg-quick's `Table`).
    pub table: Option<RawTable>,
    pub dns: Option<OneOrMany>,
    /// `"sealink"` (the default) or `"wireguard"`.
    pub protocol: Option<String>,
}

/// `table = "off"` or `table = 1234`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawTable {
    Name(String),
    Id(i64),
}

/// Where `up` puts the routes of the peers' allowed IPs (wg-quick's `Table`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RouteTable {
    /// The main table, and a full tunnel (`0.0.0.0/0`, `::/0`) by policy ([`crate::policy`]).
    #[default]
    Auto,
    /// No routes at all: the user (or a hook) routes.
    Off,
    /// Every allowed IP, default routes too, as a route in this table; no policy rules.
    Id(u32),
}

impl RouteTable {
    fn parse(raw: Option<RawTable>) -> Result<Self, TunnelError> {
        let bad_value = |v: String| {
            bad(
                "interface.table",
                format!("{v}: must be auto, off, main or a table number within 1..=4294967295"),
            )
        };
        let id = |n: i64| {
            u32::try_from(n)
                .ok()
                .filter(|n| *n != 0)
                .map(RouteTable::Id)
                .ok_or_else(|| bad_value(n.to_string()))
        };
        match raw {
            None => Ok(RouteTable::Auto),
            Some(RawTable::Id(n)) => id(n),
            Some(RawTable::Name(s)) => match s.trim().to_ascii_lowercase().as_str() {
                "auto" => Ok(RouteTable::Auto),
                "off" => Ok(RouteTable::Off),
                // RT_TABLE_MAIN.
                "main" => Ok(RouteTable::Id(254)),
                t => t
                    .parse::<i64>()
                    .map_err(|_| bad_value(s.clone()))
                    .and_then(id),
            },
        }
    }

    /// The table a route goes into (`None`: the main table).
    pub fn id(self) -> Option<u32> {
        match self {
            RouteTable::Id(t) => Some(t),
            RouteTable::Auto | RouteTable::Off => None,
        }
    }
}

/// `address = "CIDR"` or `address = ["CIDR", ...]` (and hooks: a command or a list).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPiggyback {
    enabled: Option<bool>,
    mode: Option<String>,
    small: Option<u32>,
    max_delay_us: Option<u64>,
    queue_limit: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPeer {
    pub name: String,
    pub public_key: String,
    pub endpoint: Option<String>,
    pub allowed_ips: Vec<String>,
    pub persistent_keepalive: Option<u16>,
    /// WireGuard's optional preshared key (base64), `protocol = "wireguard"` only.
    pub preshared_key: Option<String>,
}

/// An address of the interface and the length of its network's prefix (`10.9.0.1/24`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfAddr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl IfAddr {
    /// The network the address lies in (the kernel routes it to the interface).
    pub fn network(&self) -> IpNet {
        // `prefix` was checked against the address family at parse time.
        IpNet::new(self.addr, self.prefix).unwrap_or_else(|_| IpNet::new(self.addr, 0).unwrap())
    }
}

impl std::fmt::Display for IfAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn parse_if_addr(s: &str) -> Result<IfAddr, TunnelError> {
    let (addr, prefix) = s.split_once('/').ok_or_else(|| {
        bad(
            "interface.address",
            format!("{s:?}: expected ADDRESS/PREFIX, e.g. 10.9.0.1/24"),
        )
    })?;
    let addr: IpAddr = addr.parse().map_err(|_| {
        bad(
            "interface.address",
            format!("{addr:?} is not an IP address"),
        )
    })?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix: u8 = prefix.parse().ok().filter(|p| *p <= max).ok_or_else(|| {
        bad(
            "interface.address",
            format!("prefix {prefix:?} is not within 0..={max}"),
        )
    })?;
    Ok(IfAddr { addr, prefix })
}

/// A parsed, checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub name: String,
    /// Where the host's private key is: a sealink key file, a `wg genkey` file, or the
    /// wg-quick config itself ([`Config::key_format`]).
    pub private_key: PathBuf,
    pub key_format: KeyFormat,
    /// The interface's own addresses (at least one; IPv4 and IPv6 may mix), all assigned.
    pub addresses: Vec<IfAddr>,
    /// UDP port to listen on (0: an ephemeral port, when the config leaves it out).
    pub listen_port: u16,
    /// Crypto worker threads (`None`: the core count; 0: inline on the readers).
    pub workers: Option<usize>,
    /// TUN queues and UDP sockets (`None`: the core count).
    pub queues: Option<usize>,
    /// TUN writer threads (`None`: none with [`Handoff::Auto`]; with [`Handoff::Always`] one
    /// per queue when there are several queues and workers; 0: the receive path's release
    /// writes).
    pub tun_writers: Option<usize>,
    /// When the readers hand batches to the crypto workers (`handoff`, default auto).
    pub handoff: Handoff,
    pub core: TunnelConfig,
    pub peers: Vec<TunnelPeerConfig>,
    /// For each peer (same order): the `HOST:PORT` its endpoint was resolved from when it is a
    /// name rather than an address; the running tunnel resolves it again when handshakes to
    /// the peer go unanswered.
    pub endpoint_names: Vec<Option<String>>,
    /// `pre_up`, `post_up`, `pre_down`, `post_down` (see [`crate::hooks`]).
    pub hooks: Hooks,
    /// The user (a name in /etc/passwd) the tunnel switches to once set up, with that user's
    /// group and no supplementary groups; [`ROOT_USER`] keeps uid 0 (see [`crate::privs`]).
    pub user: String,
    /// The mark on the tunnel's own datagrams, and the routing table of a full tunnel's default
    /// route (both only used by a full tunnel; wg-quick's default).
    pub fwmark: u32,
    /// Where the allowed IPs' routes go (`table`, wg-quick's `Table`).
    pub table: RouteTable,
    /// Name servers and search domains for the interface (`dns`, wg-quick's `DNS`).
    pub dns: Dns,
}

/// How [`Config::private_key`] holds the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFormat {
    /// A sealink host key file (`sealink keygen host`).
    Sealink,
    /// A file holding `wg genkey`'s base64 (`protocol = "wireguard"` in TOML).
    WireGuard,
    /// The wg-quick config itself (its `PrivateKey`).
    WgQuick,
}

/// The `dns` key: name servers (addresses) and search domains (names), in config order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dns {
    pub servers: Vec<IpAddr>,
    pub search: Vec<String>,
}

impl Dns {
    fn parse(items: &[String]) -> Result<Dns, TunnelError> {
        let mut d = Dns::default();
        for it in items {
            let it = it.trim();
            if let Ok(a) = it.parse::<IpAddr>() {
                d.servers.push(a);
            } else if valid_domain(it) {
                d.search.push(it.to_ascii_lowercase());
            } else {
                return Err(bad(
                    "interface.dns",
                    format!("{it:?} is neither an IP address nor a domain name"),
                ));
            }
        }
        if d.servers.is_empty() && !d.search.is_empty() {
            return Err(bad(
                "interface.dns",
                "search domains need at least one name server address",
            ));
        }
        Ok(d)
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty() && self.search.is_empty()
    }

    /// The resolv.conf lines `resolvconf` is given on its standard input.
    pub fn resolv_conf(&self) -> String {
        let mut out: String = self
            .servers
            .iter()
            .map(|a| format!("nameserver {a}\n"))
            .collect();
        if !self.search.is_empty() {
            out.push_str(&format!("search {}\n", self.search.join(" ")));
        }
        out
    }
}

/// A DNS name as resolv.conf's `search` takes it: labels of 1..=63 of `[A-Za-z0-9-]`, not
/// starting or ending with `-`, at most 253 bytes, an optional final dot.
fn valid_domain(s: &str) -> bool {
    let s = s.strip_suffix('.').unwrap_or(s);
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            (1..=63).contains(&l.len())
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// [`Config::fwmark`] when the config leaves it out (wg-quick's).
pub const DEFAULT_FWMARK: u32 = 51820;

/// The user a tunnel runs as when the config names none: a dedicated system account (the
/// Debian package's sysusers entry creates it), not the shared `nobody`, whose other
/// processes could signal, stop, renice or limit the tunnel.
pub const DEFAULT_USER: &str = "sealink-tunnel";
/// `user = "root"`: stay uid 0 after set-up (capabilities still go).
pub const ROOT_USER: &str = "root";

/// A user name as `useradd` accepts it: 1 to 32 of `[A-Za-z0-9._-]`, not starting with `-`.
fn valid_user(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(a) => vec![a],
            OneOrMany::Many(v) => v,
        }
    }
}

/// Hook commands: each non-empty (an empty one would run nothing and hide a typo).
fn hook_list(key: &str, v: Option<OneOrMany>) -> Result<Vec<String>, TunnelError> {
    let v = v.map(OneOrMany::into_vec).unwrap_or_default();
    if v.iter().any(|c| c.trim().is_empty()) {
        return Err(bad(format!("interface.{key}"), "an empty command"));
    }
    Ok(v)
}

fn bad(key: impl Into<String>, msg: impl Into<String>) -> TunnelError {
    TunnelError::Config {
        key: key.into(),
        msg: msg.into(),
    }
}

impl Config {
    /// Reads and parses a config file; refuses one that other users can write (see
    /// [`sealink_keys::secure_file`]): it names the peers this host believes.
    pub fn from_file(path: &Path) -> Result<Self, TunnelError> {
        let read_err = |e| TunnelError::Io {
            what: format!("read config {}", path.display()),
            source: e,
        };
        let mut file = std::fs::File::open(path).map_err(read_err)?;
        sealink_keys::secure_file::check_file(&file, path, "tunnel config")?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(read_err)?;
        Self::parse_at(&text, path)
    }

    /// Parses the text of the config file at `path` (read and checked by the caller): a
    /// wg-quick config ([`wgquick::is_wg_quick`]) or sealink's TOML.
    pub fn parse_at(text: &str, path: &Path) -> Result<Self, TunnelError> {
        if wgquick::is_wg_quick(path, text) {
            let name = wgquick::name_from_path(path)?;
            let parsed = wgquick::parse(text, &name)?;
            let mut cfg = Self::from_raw(parsed.raw)?;
            cfg.private_key = path.to_path_buf();
            cfg.key_format = KeyFormat::WgQuick;
            return Ok(cfg);
        }
        let mut cfg = Self::parse(text)?;
        // A relative key path is relative to the config file, as wg-quick users expect.
        if cfg.private_key.is_relative() {
            if let Some(dir) = path.parent() {
                cfg.private_key = dir.join(&cfg.private_key);
            }
        }
        Ok(cfg)
    }

    /// Parses sealink's TOML.
    pub fn parse(text: &str) -> Result<Self, TunnelError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| TunnelError::Toml(e.to_string()))?;
        Self::from_raw(raw)
    }

    /// Reads this host's private key from where the config says ([`Config::key_format`]).
    /// A WireGuard key file or wg-quick config must be private (no access for group or
    /// others), as a sealink key file must.
    pub fn host_key(&self) -> Result<HostKey, TunnelError> {
        let path = &self.private_key;
        if self.key_format == KeyFormat::Sealink {
            return sealink_keys::read_host_key(path)
                .map_err(|e| bad("interface.private_key", e.to_string()));
        }
        let read_err = |e| TunnelError::Io {
            what: format!("read private key {}", path.display()),
            source: e,
        };
        let mut file = std::fs::File::open(path).map_err(read_err)?;
        sealink_keys::secure_file::check_file(&file, path, "WireGuard private key")?;
        let mode = {
            use std::os::unix::fs::PermissionsExt;
            file.metadata().map_err(read_err)?.permissions().mode()
        };
        if mode & 0o077 != 0 {
            // wg-quick only warns here; a key others can read is not a key we run on, so this
            // stays a refusal, with the reason and the fix on the one line.
            return Err(TunnelError::KeyTooOpen {
                path: path.display().to_string(),
                mode: mode & 0o7777,
                wg_quick: self.key_format == KeyFormat::WgQuick,
            });
        }
        // A `wg genkey` file is one line; a wg-quick file holds every peer too (a hub's runs to
        // megabytes), and was read whole by `from_file` already.
        let cap = match self.key_format {
            KeyFormat::WgQuick => u64::MAX,
            _ => 1 << 20,
        };
        let mut text = String::new();
        (&mut file)
            .take(cap)
            .read_to_string(&mut text)
            .map_err(read_err)?;
        self.host_key_from_text(&text, path)
            .map_err(|e| bad("interface.private_key", e))
    }

    /// The host key in `text`, the contents of [`Config::private_key`] read (and checked) by
    /// someone else (the privileged helper of a reload).
    pub fn host_key_from_text(&self, text: &str, path: &Path) -> Result<HostKey, String> {
        let raw = match self.key_format {
            KeyFormat::Sealink => {
                return sealink_keys::keyfile::parse_host_key(text, path)
                    .map_err(|e| e.to_string());
            }
            KeyFormat::WireGuard => wgquick::parse_key(text.trim()).ok_or_else(|| {
                format!(
                    "{}: expected one 32-byte base64 key (`wg genkey`)",
                    path.display()
                )
            })?,
            KeyFormat::WgQuick => wgquick::private_key(text).map_err(|e| e.to_string())?,
        };
        HostKey::from_private(raw).map_err(|e| e.to_string())
    }

    /// Why `new` cannot replace this running config without a restart: the first
    /// interface-level setting that differs (a reload applies peer changes only), or `None`.
    pub fn restart_needed(&self, new: &Config) -> Option<&'static str> {
        let (a, b) = (&self.core, &new.core);
        [
            (self.name != new.name, "interface.name"),
            (self.private_key != new.private_key, "interface.private_key"),
            (self.key_format != new.key_format, "interface.protocol"),
            (self.addresses != new.addresses, "interface.address"),
            (self.listen_port != new.listen_port, "interface.listen_port"),
            (a.mtu != b.mtu, "interface.mtu"),
            (self.workers != new.workers, "interface.workers"),
            (self.queues != new.queues, "interface.queues"),
            (self.tun_writers != new.tun_writers, "interface.tun_writers"),
            (self.handoff != new.handoff, "interface.handoff"),
            (a.lanes != b.lanes, "interface.lanes"),
            (a.piggyback != b.piggyback, "interface.piggyback"),
            (self.hooks != new.hooks, "interface hooks"),
            (self.user != new.user, "interface.user"),
            (self.fwmark != new.fwmark, "interface.fwmark"),
            (self.table != new.table, "interface.table"),
            (self.dns != new.dns, "interface.dns"),
            (
                self.full_tunnel() != new.full_tunnel(),
                "a full tunnel (allowed_ips 0.0.0.0/0 or ::/0)",
            ),
        ]
        .into_iter()
        .find_map(|(differs, key)| differs.then_some(key))
    }

    /// The networks of the interface's own addresses (the kernel routes them to it already).
    pub fn networks(&self) -> Vec<IpNet> {
        self.addresses.iter().map(IfAddr::network).collect()
    }

    /// Whether some peer's allowed IPs hold all of IPv4 (`0.0.0.0/0`) and all of IPv6
    /// (`::/0`): a full tunnel for that family, routed by policy ([`crate::policy`]).
    pub fn full_tunnel(&self) -> (bool, bool) {
        if self.table != RouteTable::Auto {
            // Table = off: nothing routed; Table = N: default routes go into N, no policy.
            return (false, false);
        }
        let all = |v4: bool| {
            self.peers
                .iter()
                .flat_map(|p| &p.allowed_ips)
                .any(|n| n.prefix() == 0 && n.addr().is_ipv4() == v4)
        };
        (all(true), all(false))
    }

    /// The routes `up` adds through the interface: every allowed IP prefix of every peer that
    /// no network of the interface covers, once each, in config order. Default routes are not
    /// among them: a full tunnel is routed by policy instead.
    pub fn routes(&self) -> Vec<IpNet> {
        match self.table {
            RouteTable::Off => return Vec::new(),
            // As wg-quick with `Table = N`: every allowed IP, default routes too, into N.
            RouteTable::Id(_) => {
                let mut seen = std::collections::HashSet::new();
                return self
                    .peers
                    .iter()
                    .flat_map(|p| &p.allowed_ips)
                    .filter(|n| seen.insert(**n))
                    .copied()
                    .collect();
            }
            RouteTable::Auto => {}
        }
        let own = self.networks();
        let covered = |n: &IpNet| {
            own.iter()
                .any(|o| o.prefix() <= n.prefix() && o.contains(n.addr()))
        };
        let mut seen = std::collections::HashSet::new();
        let mut out: Vec<IpNet> = Vec::new();
        for n in self.peers.iter().flat_map(|p| &p.allowed_ips) {
            if n.prefix() > 0 && !covered(n) && seen.insert(*n) {
                out.push(*n);
            }
        }
        out
    }

    /// A route that covered a peer's endpoint would send the tunnel's own datagrams into the
    /// tunnel (a loop that silently carries nothing): refused, naming the prefix and the peer.
    fn check_routes_spare_endpoints(&self) -> Result<(), TunnelError> {
        if self.table != RouteTable::Auto {
            // Routes in another table steer only what the user's own rules send there.
            return Ok(());
        }
        // Every route in a set, looked up from each endpoint at each prefix length: linear in
        // peers (a hub has tens of thousands; each against each was quadratic).
        let routes: std::collections::HashSet<IpNet> = self.routes().into_iter().collect();
        let owner: std::collections::HashMap<IpNet, usize> = self
            .peers
            .iter()
            .enumerate()
            .flat_map(|(n, p)| p.allowed_ips.iter().map(move |net| (*net, n)))
            .collect();
        for q in &self.peers {
            let Some(ep) = q.endpoint else { continue };
            let ip = ep.ip();
            let width = if ip.is_ipv4() { 32 } else { 128 };
            for prefix in (1..=width).rev() {
                let Ok(net) = IpNet::new(ip, prefix) else {
                    continue;
                };
                if !routes.contains(&net) {
                    continue;
                }
                let n = owner.get(&net).copied().unwrap_or_default();
                return Err(bad(
                    format!("peer[{n}].allowed_ips"),
                    format!(
                        "{net} contains the endpoint {ep} of peer {:?}: routed into the \
                         tunnel, the datagrams carrying the tunnel would loop back into \
                         it; leave the endpoint's address out of allowed_ips",
                        q.name
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// `[ADDR%NAME]:PORT`, an IPv6 endpoint whose zone names an interface (`[fe80::1%eth0]:51820`,
/// as `wg` and wireguard-go accept it; a numeric zone is the standard form and parses as an
/// address): `None` when `s` is not of that form, else the address with the interface's index
/// as its scope id, or why not (no such interface here).
fn scoped_by_name(s: &str) -> Option<Result<SocketAddr, String>> {
    let (inside, port) = s.strip_prefix('[')?.split_once("]:")?;
    let (addr, zone) = inside.split_once('%')?;
    if zone.is_empty() || zone.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let addr: std::net::Ipv6Addr = addr.parse().ok()?;
    let port: u16 = port.parse().ok()?;
    Some(
        crate::uapi::interface_index(zone)
            .map(|index| SocketAddr::V6(std::net::SocketAddrV6::new(addr, port, 0, index)))
            .map_err(|e| format!("{s:?}: no interface {zone:?} here ({e})")),
    )
}

fn resolve(s: &str) -> Option<SocketAddr> {
    if let Ok(a) = s.parse() {
        return Some(a);
    }
    s.to_socket_addrs().ok()?.next()
}

#[cfg(test)]
mod tests;
