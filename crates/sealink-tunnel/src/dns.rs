//! `dns` (wg-quick's `DNS`): the interface's name servers and search domains, handed to
//! `resolvconf -a IFNAME -m 0 -x` as resolv.conf lines, the way wg-quick does. `resolvconf` is
//! openresolv's, or systemd-resolved's compatibility command (which sets the link's DNS in
//! resolved); either keeps the host's other resolvers. The undo, `resolvconf -d IFNAME -f`, runs
//! from a root shell armed at set-up that fires at exit and also when the tunnel dies, as the
//! full tunnel's rules do (`policy.rs`).

use std::io::Write as _;
use std::process::{Command, Stdio};

use crate::config::Dns;
use crate::error::TunnelError;
use crate::hooks::{self, HookKind, sh_quote};

/// Gives the interface its DNS settings; the returned shell undoes them when fired or when the
/// tunnel dies.
pub(crate) fn apply(ifname: &str, dns: &Dns) -> Result<hooks::Armed, TunnelError> {
    let undo = format!("resolvconf -d {} -f", sh_quote(ifname));
    let armed = hooks::Armed::arm_always(HookKind::Dns, &undo)?;
    let cmd = format!("resolvconf -a {ifname} -m 0 -x");
    let run = || -> std::io::Result<std::process::Output> {
        let mut child = Command::new("resolvconf")
            .args(["-a", ifname, "-m", "0", "-x"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut i) = child.stdin.take() {
            i.write_all(dns.resolv_conf().as_bytes())?;
        }
        child.wait_with_output()
    };
    match run() {
        Ok(o) if o.status.success() => {}
        // It ran: whatever it set is undone.
        Ok(o) => {
            armed.fire();
            return Err(TunnelError::Netconf {
                cmd,
                msg: String::from_utf8_lossy(&o.stderr).trim().to_owned(),
            });
        }
        // It did not run (not installed): nothing to undo.
        Err(source) => {
            armed.disarm();
            return Err(TunnelError::Io {
                what: format!(
                    "run `{cmd}` for interface.dns (install openresolv, or systemd-resolved's \
                     resolvconf, or leave dns out)"
                ),
                source,
            });
        }
    }
    tracing::info!(tunnel = ifname, servers = ?dns.servers, search = ?dns.search, "DNS set");
    Ok(armed)
}
