//! Reloading a running tunnel's config (`sealink reload NAME`, SIGHUP) and resolving endpoint
//! names again off the data path.
//!
//! A reload re-reads the config file the tunnel was started from and applies its peer changes
//! ([`sealink_proto::tunnel::Tunnel::reconfigure`]): live sessions of kept peers go on. Routes
//! for added or removed prefixes outside the interface's networks change through the route
//! helper ([`crate::hooks::RouteHelper`]), since the running tunnel holds no capability. Any
//! interface-level change, a config that does not parse, a peer list the core refuses or a
//! route that cannot be added leaves the running config as it was, and the answer says why.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Weak};

use crate::hooks::RouteHelper;
use crate::{Config, Outbox, Shared};

/// Resolves `HOST:PORT` to addresses (the tunnel's default: the system resolver, as
/// `ToSocketAddrs` does). Injectable so tests can stand in for DNS.
pub type Resolver = Arc<dyn Fn(&str) -> std::io::Result<Vec<SocketAddr>> + Send + Sync>;

/// The system resolver (getaddrinfo).
pub fn system_resolver() -> Resolver {
    Arc::new(|name: &str| {
        use std::net::ToSocketAddrs;
        Ok(name.to_socket_addrs()?.collect())
    })
}

/// What the control thread keeps for reloads.
pub(crate) struct Ctl {
    /// The config in force.
    pub cfg: Config,
    /// The file it came from (`None`: started from a [`Config`] built in memory).
    pub path: Option<PathBuf>,
    pub routes: Option<RouteHelper>,
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Applies the config file again; the answer line on success, the reason on refusal.
pub(crate) fn reload(sh: &Shared, ctl: &mut Ctl, asked: Option<&Path>) -> Result<String, String> {
    let name = ctl.cfg.name.clone();
    let Some(path) = ctl.path.clone() else {
        return Err(format!("tunnel {name} was not started from a config file"));
    };
    if let Some(a) = asked.filter(|a| !same_file(a, &path)) {
        return Err(format!(
            "tunnel {name} runs the config {}, not {}",
            path.display(),
            a.display()
        ));
    }
    let keep = "; the running config stays in force";
    let new =
        Config::from_file(&path).map_err(|e| format!("config {}: {e}{keep}", path.display()))?;
    if let Some(key) = ctl.cfg.restart_needed(&new) {
        return Err(format!(
            "{key} changed: a reload applies peer changes only, this needs a restart \
             (`sealink down {name}` and `sealink up`, or `systemctl restart sealink@{name}`){keep}"
        ));
    }
    // The same path may hold a new key.
    match sealink_keys::read_host_key(&new.private_key) {
        Ok(k) if *k.public() == sh.public_key => {}
        Ok(_) => {
            return Err(format!(
                "interface.private_key: {} holds another key now: this needs a restart{keep}",
                new.private_key.display()
            ));
        }
        Err(e) => {
            return Err(format!(
                "cannot read the private key {} to check it is unchanged: {e}{keep}",
                new.private_key.display()
            ));
        }
    }
    let (old_routes, new_routes) = (ctl.cfg.routes(), new.routes());
    let add: Vec<_> = new_routes
        .iter()
        .filter(|n| !old_routes.contains(n))
        .copied()
        .collect();
    let del: Vec<_> = old_routes
        .iter()
        .filter(|n| !new_routes.contains(n))
        .copied()
        .collect();
    let mut added = Vec::new();
    let rollback = |ctl: &mut Ctl, added: &[sealink_proto::tunnel::IpNet]| {
        if let Some(h) = ctl.routes.as_mut() {
            for n in added {
                let _ = h.change(false, *n);
            }
        }
    };
    for n in &add {
        let r = match ctl.routes.as_mut() {
            Some(h) => h.change(true, *n),
            None => Err("the route helper did not start: route changes need a restart".into()),
        };
        if let Err(e) = r {
            rollback(ctl, &added);
            return Err(format!("route {n}: {e}{keep}"));
        }
        added.push(*n);
    }
    let changes = {
        let mut core = sh.lock();
        let r = core.reconfigure(new.peers.clone());
        if r.is_ok() {
            for (p, n) in new.peers.iter().zip(&new.endpoint_names) {
                core.set_endpoint_name(&p.public_key, n.clone());
            }
        }
        r
    };
    let changes = match changes {
        Ok(c) => c,
        Err(e) => {
            rollback(ctl, &added);
            return Err(format!("peers refused: {e}{keep}"));
        }
    };
    // New peers' keepalives and handshakes have timers.
    sh.timer.notify_all();
    if let Some(h) = ctl.routes.as_mut() {
        for n in &del {
            if let Err(e) = h.change(false, *n) {
                tracing::warn!("reload: route {n} of a removed peer stays: {e}");
            }
        }
    }
    ctl.cfg = new;
    Ok(format!("reloaded {name}: {changes}"))
}

/// Resolves the names the core asks for ([`sealink_proto::tunnel::Tunnel::poll_resolve`]) and
/// hands the answers back; a lookup may block for seconds, so it runs on its own thread,
/// never on the data path or the timer. Holds the shared state only while applying an
/// answer, and ends when the tunnel's state is dropped (the request channel closes).
pub(crate) fn resolver_loop(sh: Weak<Shared>, rx: Receiver<([u8; 32], String)>, resolve: Resolver) {
    for (key, name) in rx {
        let addrs = match resolve(&name) {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(endpoint = %name, error = %e, "cannot resolve the endpoint again");
                Vec::new()
            }
        };
        let Some(sh) = sh.upgrade() else { break };
        let mut out = Outbox::new(sh.stride);
        let moved = {
            let mut core = sh.lock();
            let m = core.resolved(sh.clock.now(), &key, &name, &addrs);
            out.drain(&mut core);
            m
        };
        match moved {
            Some(a) => {
                tracing::info!(endpoint = %name, address = %a, "endpoint name resolves to a new address; moved")
            }
            None => tracing::debug!(endpoint = %name, "endpoint name resolved again; unchanged"),
        }
        for k in 0..out.items.len() {
            let (d, b) = out.get(k);
            sh.send(0, d, b, b.len());
        }
        sh.timer.notify_one();
    }
}
