//! wg-quick's configuration format (`wg-quick(8)`, `wg(8)`), read into the same raw form as
//! sealink's TOML so that one set of checks builds the [`Config`]: `[Interface]` PrivateKey,
//! Address, ListenPort, MTU, DNS, FwMark, Table, PreUp/PostUp/PreDown/PostDown, SaveConfig;
//! `[Peer]` PublicKey, PresharedKey, AllowedIPs, Endpoint, PersistentKeepalive. Keys are matched
//! without regard to case (as `wg` does); `#` starts a comment; lists are comma-separated and a
//! key may repeat where wg-quick lets it (Address, DNS, AllowedIPs, the hooks). The interface is
//! named after the file (`wg0.conf` gives `wg0`), as wg-quick names it. Every error names its
//! line.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use super::{OneOrMany, RawConfig, RawInterface, RawPeer, RawTable};
use crate::error::TunnelError;

/// Whether `text` (of the file at `path`) is a wg-quick config: a `.conf` file, or one whose
/// first line is `[Interface]`, capitalised as wg-quick writes it (sealink's TOML starts with
/// `[interface]`).
pub fn is_wg_quick(path: &Path, text: &str) -> bool {
    path.extension().is_some_and(|e| e == "conf")
        || text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .find(|l| !l.is_empty())
            .is_some_and(|l| l == "[Interface]")
}

/// The interface name wg-quick takes from `path`: the file name without `.conf`, at most 15
/// bytes of `[a-zA-Z0-9_=+.-]`.
pub fn name_from_path(path: &Path) -> Result<String, TunnelError> {
    let stem = path
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.strip_suffix(".conf").unwrap_or(n))
        .unwrap_or("");
    let ok = (1..=15).contains(&stem.len())
        && stem
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_=+.-".contains(&b));
    if !ok {
        return Err(TunnelError::Config {
            key: "file name".into(),
            msg: format!(
                "{}: wg-quick names the interface after the file; it must be NAME.conf with \
                 NAME 1 to 15 characters of [a-zA-Z0-9_=+.-]",
                path.display()
            ),
        });
    }
    Ok(stem.to_owned())
}

fn err(line: usize, msg: impl Into<String>) -> TunnelError {
    TunnelError::Config {
        key: format!("line {line}"),
        msg: msg.into(),
    }
}

/// A 32-byte key in wg's base64 (`wg genkey`, `wg pubkey`, `wg genpsk`).
pub fn parse_key(s: &str) -> Option<[u8; 32]> {
    if s.len() != 44 {
        return None;
    }
    B64.decode(s).ok()?.try_into().ok()
}

/// Comma-separated items, trimmed, empty ones refused.
fn list(line: usize, key: &str, value: &str) -> Result<Vec<String>, TunnelError> {
    value
        .split(',')
        .map(|v| {
            let v = v.trim();
            if v.is_empty() {
                Err(err(line, format!("{key}: an empty item in {value:?}")))
            } else {
                Ok(v.to_owned())
            }
        })
        .collect()
}

/// `off` or a number (wg accepts decimal or 0x hex for FwMark).
fn number(line: usize, key: &str, value: &str, max: u64) -> Result<Option<u64>, TunnelError> {
    if value.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let n = match value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => value.parse::<u64>().ok(),
    };
    match n {
        Some(n) if n <= max => Ok(Some(n)),
        _ => Err(err(
            line,
            format!("{key}: {value:?} is not off or 0..={max}"),
        )),
    }
}

#[derive(Default)]
struct Section {
    /// (line of the header, keys seen once)
    line: usize,
    private_key: Option<[u8; 32]>,
    addresses: Vec<String>,
    listen_port: Option<u16>,
    mtu: Option<u32>,
    dns: Vec<String>,
    fwmark: Option<u32>,
    table: Option<String>,
    hooks: [Vec<String>; 4],
    public_key: Option<String>,
    preshared_key: Option<String>,
    allowed_ips: Vec<String>,
    endpoint: Option<String>,
    persistent_keepalive: Option<u16>,
}

/// What a wg-quick file holds: the raw config (its `private_key` path left for the caller to
/// set) and the private key itself.
pub(crate) struct Parsed {
    pub raw: RawConfig,
    pub private_key: [u8; 32],
}

/// Parses a wg-quick config for the interface `name`.
pub(crate) fn parse(text: &str, name: &str) -> Result<Parsed, TunnelError> {
    let mut interface: Option<Section> = None;
    let mut peers: Vec<Section> = Vec::new();
    // 0: before any section, 1: [Interface], 2: [Peer].
    let mut in_section = 0;
    for (k, raw_line) in text.lines().enumerate() {
        let line = k + 1;
        let stripped = raw_line.split('#').next().unwrap_or("").trim();
        if stripped.is_empty() {
            continue;
        }
        if stripped.starts_with('[') {
            if stripped.eq_ignore_ascii_case("[interface]") {
                if interface.is_some() {
                    return Err(err(line, "a second [Interface] section"));
                }
                interface = Some(Section {
                    line,
                    ..Section::default()
                });
                in_section = 1;
            } else if stripped.eq_ignore_ascii_case("[peer]") {
                peers.push(Section {
                    line,
                    ..Section::default()
                });
                in_section = 2;
            } else {
                return Err(err(
                    line,
                    format!("unknown section {stripped:?} (expected [Interface] or [Peer])"),
                ));
            }
            continue;
        }
        let Some((key, value)) = stripped.split_once('=') else {
            return Err(err(line, format!("{stripped:?} is not KEY = VALUE")));
        };
        let (key, value) = (key.trim(), value.trim());
        let lower = key.to_ascii_lowercase();
        let sec = match in_section {
            1 => interface.as_mut(),
            2 => peers.last_mut(),
            _ => None,
        }
        .ok_or_else(|| err(line, format!("{key} outside [Interface] or [Peer]")))?;
        match in_section {
            1 => sec.set_interface_key(line, key, &lower, value)?,
            _ => sec.set_peer_key(line, key, &lower, value)?,
        }
    }
    assemble(interface, peers, name)
}

/// Refuses a key given twice in one section.
fn once(line: usize, key: &str, seen: bool) -> Result<(), TunnelError> {
    if seen {
        Err(err(line, format!("{key} given twice in one section")))
    } else {
        Ok(())
    }
}

/// A key given once in its section as 32 bytes of base64 (`name`: the key as wg spells it,
/// `tool`: what makes one).
fn key_once(
    line: usize,
    key: &str,
    seen: bool,
    value: &str,
    name: &str,
    tool: &str,
) -> Result<[u8; 32], TunnelError> {
    once(line, key, seen)?;
    parse_key(value).ok_or_else(|| {
        err(
            line,
            format!("{name}: expected a 32-byte base64 key (`{tool}`)"),
        )
    })
}

impl Section {
    /// One `key = value` line of [Interface] (`lower`: the key in lower case).
    fn set_interface_key(
        &mut self,
        line: usize,
        key: &str,
        lower: &str,
        value: &str,
    ) -> Result<(), TunnelError> {
        match lower {
            "privatekey" => {
                let seen = self.private_key.is_some();
                self.private_key =
                    Some(key_once(line, key, seen, value, "PrivateKey", "wg genkey")?);
            }
            "address" => self.addresses.extend(list(line, key, value)?),
            "listenport" => {
                once(line, key, self.listen_port.is_some())?;
                let p = value
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| err(line, format!("ListenPort: {value:?} is not 1..=65535")))?;
                self.listen_port = Some(p);
            }
            "mtu" => {
                once(line, key, self.mtu.is_some())?;
                let m = value
                    .parse::<u32>()
                    .map_err(|_| err(line, format!("MTU: {value:?} is not a number")))?;
                self.mtu = Some(m);
            }
            "dns" => self.dns.extend(list(line, key, value)?),
            "fwmark" => {
                once(line, key, self.fwmark.is_some())?;
                self.fwmark = number(line, key, value, u64::from(u32::MAX))?.map(|n| n as u32);
            }
            "table" => {
                // auto (wg-quick's default), off (no routes) or a table: checked with the
                // rest of the interface (`interface.table`).
                once(line, key, self.table.is_some())?;
                self.table = Some(value.to_owned());
            }
            "saveconfig" => {
                if !value.eq_ignore_ascii_case("false") {
                    return Err(err(
                        line,
                        "SaveConfig = true: sealink never writes its config back; \
                     use `wg showconf` and edit the file",
                    ));
                }
            }
            h @ ("preup" | "postup" | "predown" | "postdown") => {
                let i = ["preup", "postup", "predown", "postdown"]
                    .iter()
                    .position(|x| x == &h)
                    .unwrap_or(0);
                if value.is_empty() {
                    return Err(err(line, format!("{key}: an empty command")));
                }
                self.hooks[i].push(value.to_owned());
            }
            _ => return Err(err(line, format!("unknown key {key:?} in [Interface]"))),
        }
        Ok(())
    }

    /// One `key = value` line of [Peer] (`lower`: the key in lower case).
    fn set_peer_key(
        &mut self,
        line: usize,
        key: &str,
        lower: &str,
        value: &str,
    ) -> Result<(), TunnelError> {
        match lower {
            "publickey" => {
                key_once(
                    line,
                    key,
                    self.public_key.is_some(),
                    value,
                    "PublicKey",
                    "wg pubkey",
                )?;
                self.public_key = Some(value.to_owned());
            }
            "presharedkey" => {
                let seen = self.preshared_key.is_some();
                key_once(line, key, seen, value, "PresharedKey", "wg genpsk")?;
                self.preshared_key = Some(value.to_owned());
            }
            "allowedips" => self.allowed_ips.extend(list(line, key, value)?),
            "endpoint" => {
                once(line, key, self.endpoint.is_some())?;
                self.endpoint = Some(value.to_owned());
            }
            "persistentkeepalive" => {
                once(line, key, self.persistent_keepalive.is_some())?;
                self.persistent_keepalive =
                    Some(number(line, key, value, u64::from(u16::MAX))?.unwrap_or(0) as u16);
            }
            _ => return Err(err(line, format!("unknown key {key:?} in [Peer]"))),
        }
        Ok(())
    }
}

/// The raw config from the sections read.
fn assemble(
    interface: Option<Section>,
    peers: Vec<Section>,
    name: &str,
) -> Result<Parsed, TunnelError> {
    let i = interface.ok_or_else(|| err(1, "no [Interface] section"))?;
    let private_key = i
        .private_key
        .ok_or_else(|| err(i.line, "[Interface] has no PrivateKey"))?;
    let [pre_up, post_up, pre_down, post_down] = i
        .hooks
        .map(|h| (!h.is_empty()).then_some(OneOrMany::Many(h)));
    let mut raw_peers = Vec::with_capacity(peers.len());
    for p in peers {
        let public_key = p
            .public_key
            .ok_or_else(|| err(p.line, "[Peer] has no PublicKey"))?;
        raw_peers.push(RawPeer {
            // wg has no peer names; `show` names each by the start of its key, as `wg` shows.
            name: public_key.chars().take(8).collect(),
            public_key,
            endpoint: p.endpoint,
            allowed_ips: p.allowed_ips,
            persistent_keepalive: p.persistent_keepalive,
            preshared_key: p.preshared_key,
        });
    }
    Ok(Parsed {
        raw: RawConfig {
            interface: RawInterface {
                name: Some(name.to_owned()),
                private_key: Default::default(),
                address: OneOrMany::Many(i.addresses),
                listen_port: i.listen_port,
                mtu: i.mtu,
                workers: None,
                queues: None,
                tun_writers: None,
                handoff: None,
                lanes: None,
                piggyback: None,
                pre_up,
                post_up,
                pre_down,
                post_down,
                user: None,
                fwmark: i.fwmark,
                table: i.table.map(RawTable::Name),
                dns: (!i.dns.is_empty()).then_some(OneOrMany::Many(i.dns)),
                protocol: Some("wireguard".into()),
            },
            peer: raw_peers,
        },
        private_key,
    })
}

/// Only the private key of a wg-quick config (a reload reads it again to check it is the
/// same).
pub fn private_key(text: &str) -> Result<[u8; 32], TunnelError> {
    parse(text, "x").map(|p| p.private_key)
}

#[cfg(test)]
mod tests;
