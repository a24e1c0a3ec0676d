//! The checks every config passes, whichever format it came in: a [`RawConfig`] (from TOML or
//! from a wg-quick file) to a [`Config`], each error naming the key it is about.

use std::net::SocketAddr;
use std::time::Duration;

use sealink_engine::Handoff;
use sealink_keys::{KeyFileError, KeyKind};
use sealink_proto::tunnel::{
    IpNet, PiggybackMode, PiggybackPolicy, TunnelConfig, TunnelPeerConfig,
};

use super::{
    Config, DEFAULT_FWMARK, DEFAULT_USER, Dns, IfAddr, KeyFormat, MAX_IFNAME, OneOrMany, RawConfig,
    RawInterface, RawPeer, RawPiggyback, RouteTable, bad, hook_list, parse_if_addr, resolve,
    scoped_by_name, valid_user, wgquick,
};
use crate::error::TunnelError;
use crate::hooks::Hooks;

impl Config {
    /// The checks every config passes, whichever format it came in.
    pub(super) fn from_raw(raw: RawConfig) -> Result<Self, TunnelError> {
        let mut i = raw.interface;
        let wireguard = match i.protocol.as_deref() {
            None | Some("sealink") => false,
            Some("wireguard") => true,
            Some(p) => {
                return Err(bad(
                    "interface.protocol",
                    format!("{p:?}: expected \"sealink\" or \"wireguard\""),
                ));
            }
        };
        if wireguard && i.piggyback.is_some() {
            return Err(bad(
                "interface.piggyback",
                "WireGuard's wire carries one packet per datagram: no piggybacking",
            ));
        }
        let name = interface_name(i.name.take())?;
        let user = i.user.take().unwrap_or_else(|| DEFAULT_USER.into());
        if !valid_user(&user) {
            return Err(bad(
                "interface.user",
                format!("{user:?}: a user name, 1 to 32 characters of [A-Za-z0-9_.-]"),
            ));
        }
        let hooks = Hooks {
            pre_up: hook_list("pre_up", i.pre_up.take())?,
            post_up: hook_list("post_up", i.post_up.take())?,
            pre_down: hook_list("pre_down", i.pre_down.take())?,
            post_down: hook_list("post_down", i.post_down.take())?,
        };
        let addresses = addresses(std::mem::replace(
            &mut i.address,
            OneOrMany::Many(Vec::new()),
        ))?;
        let dns = match i.dns.take() {
            None => Dns::default(),
            Some(d) => Dns::parse(&d.into_vec())?,
        };
        let table = RouteTable::parse(i.table.take())?;
        let fwmark = i.fwmark.unwrap_or(DEFAULT_FWMARK);
        if fwmark == 0 {
            return Err(bad(
                "interface.fwmark",
                "must be within 1..=4294967295 (leave it out for the default, 51820)",
            ));
        }
        if i.listen_port == Some(0) {
            return Err(bad(
                "interface.listen_port",
                "must be within 1..=65535 (leave it out for an ephemeral port)",
            ));
        }
        let (core, handoff) = core_config(&mut i, wireguard)?;
        let mut peers = Vec::with_capacity(raw.peer.len());
        let mut endpoint_names = Vec::with_capacity(raw.peer.len());
        for (n, p) in raw.peer.into_iter().enumerate() {
            let (peer, endpoint_name) = peer_config(n, p, wireguard)?;
            peers.push(peer);
            endpoint_names.push(endpoint_name);
        }
        peers_distinct(&peers)?;
        let cfg = Config {
            name,
            private_key: i.private_key,
            key_format: if wireguard {
                KeyFormat::WireGuard
            } else {
                KeyFormat::Sealink
            },
            addresses,
            listen_port: i.listen_port.unwrap_or(0),
            workers: i.workers.map(|w| w as usize),
            queues: i.queues.map(|q| q as usize),
            tun_writers: i.tun_writers.map(|w| w as usize),
            handoff,
            core,
            peers,
            endpoint_names,
            hooks,
            user,
            fwmark,
            table,
            dns,
        };
        cfg.check_routes_spare_endpoints()?;
        Ok(cfg)
    }
}

/// Each public key names one peer and each allowed IP prefix belongs to one peer: a config that
/// lists a key twice, or gives the same prefix to two peers, is refused, naming both (wg-quick
/// would merge the two sections, and WireGuard gives a prefix to the last peer that names it,
/// silently). Prefixes that only overlap (10.0.0.0/24 and 10.0.0.7/32) are allowed: the longest
/// match routes. Linear in peers and prefixes.
fn peers_distinct(peers: &[TunnelPeerConfig]) -> Result<(), TunnelError> {
    let mut keys = std::collections::HashMap::with_capacity(peers.len());
    let mut nets = std::collections::HashMap::with_capacity(peers.len());
    for (n, p) in peers.iter().enumerate() {
        if let Some(m) = keys.insert(p.public_key, n) {
            return Err(bad(
                format!("peer[{n}].public_key"),
                format!(
                    "peer {:?} has the public key of peer[{m}] ({:?}): each peer once",
                    p.name, peers[m].name
                ),
            ));
        }
        for net in &p.allowed_ips {
            match nets.insert(*net, n) {
                Some(m) if m != n => {
                    return Err(bad(
                        format!("peer[{n}].allowed_ips"),
                        format!(
                            "{net} is also in the allowed_ips of peer[{m}] ({:?}): a prefix \
                             belongs to one peer (a longer prefix inside it may go to another)",
                            peers[m].name
                        ),
                    ));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// `interface.name`, or the default: a name Linux accepts for an interface.
fn interface_name(name: Option<String>) -> Result<String, TunnelError> {
    let name = name.unwrap_or_else(|| "sl0".into());
    if name.is_empty()
        || name.len() > MAX_IFNAME
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return Err(bad(
            "interface.name",
            format!("{name:?}: 1 to 15 characters of [A-Za-z0-9_.-]"),
        ));
    }
    Ok(name)
}

/// `interface.address`: one or more CIDRs, none twice.
fn addresses(raw: OneOrMany) -> Result<Vec<IfAddr>, TunnelError> {
    let texts = raw.into_vec();
    if texts.is_empty() {
        return Err(bad("interface.address", "at least one address is needed"));
    }
    let mut addresses: Vec<IfAddr> = Vec::with_capacity(texts.len());
    for t in &texts {
        let a = parse_if_addr(t)?;
        if addresses.iter().any(|b| b.addr == a.addr) {
            return Err(bad(
                "interface.address",
                format!("{} is listed twice", a.addr),
            ));
        }
        addresses.push(a);
    }
    Ok(addresses)
}

/// The core's settings from the interface's data-path keys (MTU, threads, handoff, lanes,
/// piggybacking), checked together.
fn core_config(
    i: &mut RawInterface,
    wireguard: bool,
) -> Result<(TunnelConfig, Handoff), TunnelError> {
    let mut core = if wireguard {
        TunnelConfig::wireguard()
    } else {
        TunnelConfig::default()
    };
    if let Some(m) = i.mtu {
        if !(576..=9000).contains(&m) {
            return Err(bad(
                "interface.mtu",
                format!("{m} is not within 576..=9000"),
            ));
        }
        core.mtu = m as usize;
    }
    if i.workers.is_some_and(|w| w > 256) {
        return Err(bad("interface.workers", "at most 256"));
    }
    if i.queues.is_some_and(|q| q == 0 || q > 256) {
        return Err(bad("interface.queues", "must be within 1..=256"));
    }
    if i.tun_writers.is_some_and(|w| w > 256) {
        return Err(bad("interface.tun_writers", "at most 256"));
    }
    let handoff = match i.handoff.as_deref() {
        None | Some("auto") => Handoff::Auto,
        Some("always") => Handoff::Always,
        Some(h) => {
            return Err(bad(
                "interface.handoff",
                format!("{h:?}: expected \"auto\" or \"always\""),
            ));
        }
    };
    match (i.lanes, wireguard) {
        (Some(true), true) => {
            return Err(bad(
                "interface.lanes",
                "lanes are sealink's wire only (interface.protocol = \"wireguard\")",
            ));
        }
        (Some(l), _) => core.lanes = l,
        (None, _) => {}
    }
    core.piggyback = piggyback(i.piggyback.take(), core.piggyback, core.mtu)?;
    core.validate()
        .map_err(|e| bad("interface", e.to_string()))?;
    Ok((core, handoff))
}

/// `interface.piggyback` over the defaults `pb`, fitted to `mtu`.
fn piggyback(
    raw: Option<RawPiggyback>,
    mut pb: PiggybackPolicy,
    mtu: usize,
) -> Result<PiggybackPolicy, TunnelError> {
    let (mut queue_limit, mut small) = (None, None);
    if let Some(p) = raw {
        pb.enabled = p.enabled.unwrap_or(pb.enabled);
        match p.mode.as_deref() {
            None | Some("autocork") => {}
            Some("timer") => pb.mode = PiggybackMode::Timer,
            Some(m) => {
                return Err(bad(
                    "interface.piggyback.mode",
                    format!("{m:?}: expected \"autocork\" or \"timer\""),
                ));
            }
        }
        if let Some(d) = p.max_delay_us {
            if d > 1_000_000 {
                return Err(bad(
                    "interface.piggyback.max_delay_us",
                    "at most 1000000 (1 s)",
                ));
            }
            pb.max_delay = Duration::from_micros(d);
        }
        (queue_limit, small) = (p.queue_limit, p.small);
    }
    // The queue leaves as one datagram, so it can hold at most mtu + 2 bytes. The defaults are
    // ceilings fitted to the MTU (and to each other); only a value the user wrote is checked,
    // and its error names that key.
    let one_datagram = mtu + 2;
    pb.queue_limit = match queue_limit.map(|q| q as usize) {
        Some(q) if q > one_datagram => {
            return Err(bad(
                "interface.piggyback.queue_limit",
                format!(
                    "{q} is more than mtu + 2 ({one_datagram}): the queue leaves as one \
                     datagram"
                ),
            ));
        }
        Some(q) if q < 3 => {
            return Err(bad(
                "interface.piggyback.queue_limit",
                format!("{q}: at least 3 (a 2-byte length and a packet)"),
            ));
        }
        Some(q) => q,
        None => pb.queue_limit.min(one_datagram),
    };
    let most_small = pb.queue_limit - 2;
    pb.small = match small.map(|s| s as usize) {
        Some(s) if pb.enabled && (s == 0 || s > most_small) => {
            return Err(bad(
                "interface.piggyback.small",
                format!("{s} is not within 1..=queue_limit - 2 ({most_small})"),
            ));
        }
        Some(s) => s,
        None => pb.small.min(most_small),
    };
    Ok(pb)
}

/// Peer `n` of the config, and the host name its endpoint was resolved from (to resolve again
/// later; none for an address).
fn peer_config(
    n: usize,
    p: RawPeer,
    wireguard: bool,
) -> Result<(TunnelPeerConfig, Option<String>), TunnelError> {
    let key = |k: &str| format!("peer[{n}].{k}");
    if p.name.is_empty() || p.name.len() > 64 {
        return Err(bad(key("name"), "1 to 64 characters"));
    }
    // The one public-key parser (sealink-keys): a host `.pub` line or its base64.
    let public_key = match sealink_keys::parse_public(&p.public_key, KeyKind::Host) {
        Ok(k) => k,
        Err(KeyFileError::WeakKey { .. }) => {
            return Err(bad(
                key("public_key"),
                "an all-zero or small-order X25519 key: every handshake with it would \
                 give a secret anyone can compute; use the key from the peer's host.key.pub",
            ));
        }
        Err(_) => {
            return Err(bad(
                key("public_key"),
                "expected the base64 key of a host .pub file (32 bytes)",
            ));
        }
    };
    let endpoint = match &p.endpoint {
        None => None,
        Some(e) => match scoped_by_name(e) {
            // A link-local endpoint whose zone names an interface, as wg accepts it.
            Some(r) => Some(r.map_err(|why| bad(key("endpoint"), why))?),
            None => Some(
                resolve(e)
                    .ok_or_else(|| bad(key("endpoint"), format!("{e:?} is not HOST:PORT")))?,
            ),
        },
    };
    // Host names are resolved again later; addresses (a zone's interface included) never.
    let endpoint_name = p
        .endpoint
        .filter(|e| e.parse::<SocketAddr>().is_err() && scoped_by_name(e).is_none());
    let preshared_key = match (&p.preshared_key, wireguard) {
        (None, _) => None,
        (Some(_), false) => {
            return Err(bad(
                key("preshared_key"),
                "preshared keys are WireGuard's (interface.protocol = \"wireguard\")",
            ));
        }
        (Some(k), true) => Some(wgquick::parse_key(k).ok_or_else(|| {
            bad(
                key("preshared_key"),
                "expected a 32-byte base64 key (`wg genpsk`)",
            )
        })?),
    };
    let mut allowed_ips = Vec::new();
    for a in &p.allowed_ips {
        let net = a
            .parse::<IpNet>()
            .map_err(|e| bad(key("allowed_ips"), format!("{a:?}: {e}")))?;
        allowed_ips.push(net);
    }
    let peer = TunnelPeerConfig {
        name: p.name,
        public_key,
        endpoint,
        allowed_ips,
        // 0 is off, as in WireGuard; u16 bounds it to 65535 s as there.
        persistent_keepalive: p
            .persistent_keepalive
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(u64::from(s))),
        preshared_key,
    };
    Ok((peer, endpoint_name))
}
