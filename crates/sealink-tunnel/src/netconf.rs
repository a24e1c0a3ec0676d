//! Interface configuration beyond what the TUN builder does: routes for allowed IPs outside the
//! interface's own networks (and, with several addresses, the addresses after the first; with
//! no IPv6 address, no IPv6 link-local address either). As
//! wg-quick does, this runs `ip` from iproute2, during set-up while the process still holds
//! CAP_NET_ADMIN. Everything added here belongs to the interface: the kernel removes it with
//! the interface when the tunnel closes its TUN device, so teardown has nothing to undo.

use std::process::Command;

use sealink_proto::tunnel::IpNet;

use crate::config::IfAddr;
use crate::error::TunnelError;

/// Runs `ip ARGS`; a failure names the command and carries what `ip` printed.
pub(crate) fn ip(args: &[String]) -> Result<(), TunnelError> {
    let cmd = format!("ip {}", args.join(" "));
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|source| TunnelError::Io {
            what: format!("run `{cmd}` (is iproute2 installed?)"),
            source,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(TunnelError::Netconf {
            cmd,
            msg: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

/// `ip route add NET dev IFNAME`: packets to `net` go into the tunnel.
pub(crate) fn add_route(ifname: &str, net: IpNet) -> Result<(), TunnelError> {
    ip(&[
        "route".into(),
        "add".into(),
        net.to_string(),
        "dev".into(),
        ifname.into(),
    ])
}

/// `ip address add ADDR/PREFIX dev IFNAME`: an address after the first (which the TUN builder
/// sets).
pub(crate) fn add_address(ifname: &str, a: &IfAddr) -> Result<(), TunnelError> {
    ip(&[
        "address".into(),
        "add".into(),
        a.to_string(),
        "dev".into(),
        ifname.into(),
    ])
}

/// `ip -6 link set dev IFNAME addrgenmode none`, before the link goes up: the kernel gives the
/// interface no IPv6 link-local address, so it sends no router solicitations or MLD reports
/// through a tunnel that carries no IPv6 (each would be a dropped packet in `show`). Addresses
/// added later by hand or by a hook still work.
pub(crate) fn no_ipv6_link_local(ifname: &str) -> Result<(), TunnelError> {
    ip(&[
        "-6".into(),
        "link".into(),
        "set".into(),
        "dev".into(),
        ifname.into(),
        "addrgenmode".into(),
        "none".into(),
    ])
}
