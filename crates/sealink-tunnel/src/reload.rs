//! Reloading a running tunnel's config (`sealink reload NAME`, SIGHUP) and resolving endpoint
//! names again off the data path.
//!
//! A reload re-reads the config file the tunnel was started from and applies its peer changes
//! ([`sealink_proto::tunnel::Tunnel::reconfigure`]): live sessions of kept peers go on. Routes
//! for added or removed prefixes outside the interface's networks change through the route
//! helper ([`crate::helper::RouteHelper`]), since the running tunnel holds no capability; the
//! helper reads the config file again itself, as root, and adds only its routes. Any
//! interface-level change, a config that does not parse, a peer list the core refuses or a
//! route that cannot be added leaves the running config as it was, and the answer says why.
//!
//! A tunnel that switched to an unprivileged user (`privs.rs`) usually cannot read its config
//! or its key (root's, 0600) any more: it has them read by the [`PrivHelper`] started during
//! set-up, and applies the same StrictModes checks, judged for the user that started it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Weak};

use sealink_proto::tunnel::{IpNet, PeerPlan};

use crate::helper::RouteHelper;
use crate::hooks::PrivHelper;
use crate::{Config, QueuedTransmits, Shared};

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
    /// Reads the config and key as root once the tunnel runs as another user (`None`: it
    /// reads them itself). Also removes the control socket at exit.
    pub privileged: Option<PrivHelper>,
    /// The uid that started the tunnel: what the files read through `privileged` are judged
    /// for.
    pub started_as: u32,
    /// The core's peer-list generation that `cfg.peers` is ([`Tunnel::peers_generation`]): a
    /// reload applies only its difference from it, unless the list changed since (UAPI).
    ///
    /// [`Tunnel::peers_generation`]: sealink_proto::tunnel::Tunnel::peers_generation
    pub peers_generation: u64,
    /// Applies a reload's peer changes under the core's lock at the data path's priority
    /// (`None`: on the control thread itself).
    pub applier: Option<Applier>,
}

/// Work that holds the core's lock for milliseconds (a reload's peer changes: about 2.5 ms for
/// 1,000 added and 1,000 removed beside 10,000 kept), done on a thread of its own at the data
/// path's priority. The control thread runs at nice +10, since it also parses configs; holding
/// the lock at that weight, it got a tenth of a core while other work wanted both, and the
/// data path waited on the lock ten times as long (27 ms, RESULTS §54). An unprivileged thread
/// cannot raise its own priority back, so the work goes to a thread started before the control
/// thread lowers itself.
pub(crate) struct Applier {
    tx: std::sync::mpsc::Sender<LockedJob>,
}

/// A job for the [`Applier`]'s thread.
type LockedJob = Box<dyn FnOnce(&Shared) + Send>;

impl std::fmt::Debug for Applier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Applier")
    }
}

impl Applier {
    /// Starts its thread, which takes the calling thread's priority. Holds only a weak
    /// reference: the thread ends with the tunnel's state or when the `Applier` is dropped.
    pub(crate) fn start(sh: Weak<Shared>) -> Option<Applier> {
        let (tx, rx) = std::sync::mpsc::channel::<LockedJob>();
        std::thread::Builder::new()
            .name("sl-apply".into())
            .spawn(move || {
                for job in rx {
                    let Some(sh) = sh.upgrade() else { break };
                    job(&sh);
                }
            })
            .ok()?;
        Some(Applier { tx })
    }

    /// Runs `f` on the applier's thread and waits for its result (`None`: the thread is gone,
    /// or `f` panicked there).
    fn run<R: Send + 'static>(&self, f: impl FnOnce(&Shared) -> R + Send + 'static) -> Option<R> {
        let (rtx, rrx) = std::sync::mpsc::sync_channel(1);
        self.tx
            .send(Box::new(move |sh: &Shared| {
                let _ = rtx.send(f(sh));
            }))
            .ok()?;
        rrx.recv().ok()
    }
}

/// The config at `path` and the public key of the host key it names, read by this process.
fn read_directly(path: &Path) -> Result<(Config, Result<[u8; 32], String>), String> {
    let new = Config::from_file(path).map_err(|e| format!("config {}: {e}", path.display()))?;
    let key = new
        .host_key()
        .map(|k| *k.public())
        .map_err(|e| e.to_string());
    Ok((new, key))
}

/// The same, read by the privileged helper (the key file it reads is the one the running
/// config names: a config naming another is refused below as needing a restart).
fn read_through(
    h: &mut PrivHelper,
    path: &Path,
    key_path: &Path,
    me: u32,
) -> Result<(Config, Result<[u8; 32], String>), String> {
    use sealink_keys::secure_file::check_owner_and_mode;
    let (cfg, key) = h.read()?;
    let at = |what: &str| format!("{what} {}", path.display());
    check_owner_and_mode(
        (cfg.uid, cfg.mode),
        (cfg.dir_uid, cfg.dir_mode),
        me,
        path,
        "tunnel config",
    )
    .map_err(|e| e.to_string())?;
    let text =
        std::str::from_utf8(&cfg.data).map_err(|_| format!("{}: not UTF-8", at("config")))?;
    let new = Config::parse_at(text, path).map_err(|e| format!("{}: {e}", at("config")))?;
    let key = (|| {
        check_owner_and_mode(
            (key.uid, key.mode),
            (key.dir_uid, key.dir_mode),
            me,
            key_path,
            "host private key",
        )
        .map_err(|e| e.to_string())?;
        if key.mode & 0o077 != 0 {
            return Err(sealink_keys::KeyFileError::PermissionsTooOpen {
                path: key_path.to_path_buf(),
                mode: key.mode & 0o7777,
            }
            .to_string());
        }
        let text = std::str::from_utf8(&key.data).map_err(|_| "not UTF-8".to_owned())?;
        new.host_key_from_text(text, key_path).map(|k| *k.public())
    })();
    Ok((new, key))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// What a reload adds to a refusal.
const KEEP: &str = "; the running config stays in force";

/// The config file the tunnel runs, read again and checked to need no restart.
fn read_again(sh: &Shared, ctl: &mut Ctl, asked: Option<&Path>) -> Result<Config, String> {
    let name = &ctl.cfg.name;
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
    let key_path = ctl.cfg.private_key.clone();
    let (new, new_key) = match ctl.privileged.as_mut() {
        Some(h) => read_through(h, &path, &key_path, ctl.started_as),
        None => read_directly(&path),
    }
    .map_err(|e| format!("{e}{KEEP}"))?;
    if let Some(key) = ctl.cfg.restart_needed(&new) {
        return Err(format!(
            "{key} changed: a reload applies peer changes only, this needs a restart \
             (`sealink down {name}` and `sealink up`, or `systemctl restart sealink@{name}`){KEEP}"
        ));
    }
    // The same path may hold a new key.
    match new_key {
        Ok(k) if k == sh.public_key => Ok(new),
        Ok(_) => Err(format!(
            "interface.private_key: {} holds another key now: this needs a restart{KEEP}",
            new.private_key.display()
        )),
        Err(e) => Err(format!(
            "cannot read the private key {} to check it is unchanged: {e}{KEEP}",
            new.private_key.display()
        )),
    }
}

/// The routes `new` adds and removes against the config in force.
fn route_changes(old: &Config, new: &Config) -> (Vec<IpNet>, Vec<IpNet>) {
    let (old_routes, new_routes) = (old.routes(), new.routes());
    // Sets, not scans: a hub's lists have tens of thousands of routes.
    let (old_set, new_set): (std::collections::HashSet<_>, std::collections::HashSet<_>) = (
        old_routes.iter().copied().collect(),
        new_routes.iter().copied().collect(),
    );
    let add = new_routes
        .iter()
        .filter(|n| !old_set.contains(n))
        .copied()
        .collect();
    let del = old_routes
        .iter()
        .filter(|n| !new_set.contains(n))
        .copied()
        .collect();
    (add, del)
}

/// Removes routes `added` again (a refused reload).
fn roll_back(ctl: &mut Ctl, added: &[IpNet]) {
    if let Some(h) = ctl.routes.as_mut() {
        for n in added {
            let _ = h.change(false, *n);
        }
    }
}

/// Adds routes `add` through the route helper; on a failure removes those it added.
fn add_routes(ctl: &mut Ctl, add: &[IpNet]) -> Result<Vec<IpNet>, String> {
    // The helper adds only routes of the config as root read it: it reads the file again.
    if let (false, Some(h)) = (add.is_empty(), ctl.routes.as_mut()) {
        h.reload()
            .map_err(|e| format!("route helper: cannot read the config again: {e}{KEEP}"))?;
    }
    let mut added = Vec::new();
    for n in add {
        let r = match ctl.routes.as_mut() {
            Some(h) => h.change(true, *n),
            None => Err("the route helper did not start: route changes need a restart".into()),
        };
        if let Err(e) = r {
            roll_back(ctl, &added);
            return Err(format!("route {n}: {e}{KEEP}"));
        }
        added.push(*n);
    }
    Ok(added)
}

/// Applies `new`'s peers to the core: the new list is checked and compared with the one in
/// force here, outside the core's lock; under it, only the difference is applied (at 10,000
/// peers the whole list under the lock held the data path for a third of a second).
fn apply_peers(sh: &Shared, ctl: &mut Ctl, new: &Config) -> Result<String, String> {
    let plan = PeerPlan::new(
        &sh.public_key,
        ctl.peers_generation,
        &ctl.cfg.peers,
        &ctl.cfg.endpoint_names,
        new.peers.clone(),
        &new.endpoint_names,
    );
    let plan = plan.map_err(|e| e.to_string())?;
    let (peers, names) = (new.peers.clone(), new.endpoint_names.clone());
    let apply = move |sh: &Shared| {
        let mut core = sh.lock();
        let held = std::time::Instant::now();
        let r = match core.apply_peer_plan(plan) {
            Ok(applied) => {
                tracing::debug!(
                    steps = applied.steps,
                    held_us = held.elapsed().as_micros() as u64,
                    "reload: peer changes applied under the lock"
                );
                Ok(applied.changes.to_string())
            }
            Err(_) => {
                // The list changed since (WireGuard's UAPI): applied whole.
                let r = core.reconfigure(peers.clone());
                if r.is_ok() {
                    for (p, n) in peers.iter().zip(names) {
                        core.set_endpoint_name(&p.public_key, n);
                    }
                }
                r.map(|c| c.to_string()).map_err(|e| e.to_string())
            }
        };
        (r, core.peers_generation())
    };
    let (r, generation) = match &ctl.applier {
        Some(a) => a
            .run(apply)
            .ok_or_else(|| "the thread applying it ended".to_owned())?,
        None => apply(sh),
    };
    ctl.peers_generation = generation;
    r
}

/// Applies the config file again; the answer line on success, the reason on refusal.
pub(crate) fn reload(sh: &Shared, ctl: &mut Ctl, asked: Option<&Path>) -> Result<String, String> {
    let new = read_again(sh, ctl, asked)?;
    let (add, del) = route_changes(&ctl.cfg, &new);
    let added = add_routes(ctl, &add)?;
    let changes = match apply_peers(sh, ctl, &new) {
        Ok(c) => c,
        Err(e) => {
            roll_back(ctl, &added);
            return Err(format!("peers refused: {e}{KEEP}"));
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
    let name = ctl.cfg.name.clone();
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
        let mut out = QueuedTransmits::new(sh.stride);
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
        out.seal_and_send(&sh, 0, 0);
        sh.timer.notify_one();
    }
}
