//! Interface configuration beyond what the TUN builder does: routes for allowed IPs outside the
//! interface's own networks (and, with several addresses, the addresses after the first; with
//! no IPv6 address, no IPv6 link-local address either). These are rtnetlink requests
//! (`rtnl.rs`), sent during set-up while the process still holds CAP_NET_ADMIN. Everything
//! added here belongs to the interface: the kernel removes it with the interface when the
//! tunnel closes its TUN device, so teardown has nothing to undo.

use sealink_proto::tunnel::IpNet;

use crate::config::IfAddr;
use crate::error::TunnelError;
use crate::rtnl::{self, Rtnl};

/// Sends the request `make` builds for interface `ifname` (given its index).
fn on_interface(ifname: &str, make: impl FnOnce(u32) -> rtnl::Op) -> Result<(), TunnelError> {
    let mut nl = Rtnl::open()?;
    let index = nl.index(ifname)?;
    nl.request(&make(index))
}

/// `ip route add|del NET dev IFNAME`: packets to `net` go into the tunnel (at set-up, and from
/// the route helper on a reload: `helper.rs`).
pub(crate) fn change_route(
    add: bool,
    ifname: &str,
    net: IpNet,
    table: Option<u32>,
) -> Result<(), TunnelError> {
    on_interface(ifname, |i| rtnl::route(add, net, ifname, i, table))
}

/// `ip address add ADDR/PREFIX dev IFNAME`: an address after the first (which the TUN builder
/// sets).
pub(crate) fn add_address(ifname: &str, a: &IfAddr) -> Result<(), TunnelError> {
    on_interface(ifname, |i| rtnl::add_address(a.addr, a.prefix, ifname, i))
}

/// `ip -6 link set dev IFNAME addrgenmode none`, before the link goes up: the kernel gives the
/// interface no IPv6 link-local address, so it sends no router solicitations or MLD reports
/// through a tunnel that carries no IPv6 (each would be a dropped packet in `show`). Addresses
/// added later by hand or by a hook still work.
pub(crate) fn no_ipv6_link_local(ifname: &str) -> Result<(), TunnelError> {
    on_interface(ifname, |i| rtnl::addrgenmode_none(ifname, i))
}
