//! Changing the peers of a running tunnel ([`Tunnel::reconfigure`], what `sealink reload` and
//! SIGHUP apply) and re-resolving endpoint host names ([`Tunnel::poll_resolve`]).
//!
//! Peers are matched by public key: a kept peer keeps its sessions, handshake state, counters
//! and learned endpoint, and takes the new name, allowed IPs, persistent keepalive and (when the
//! configured one changed) endpoint. A removed peer loses its sessions, queued packets, routes
//! and indexes at once; its slot stays, emptied, so that a [`PeerIndex`] a driver still holds
//! for a datagram in flight never names a different peer.

use std::net::SocketAddr;

use super::{AllowedIps, IpNet, Peer, Tunnel, TunnelPeerConfig};
use crate::handshake;
use crate::handshake::HostKey;
use crate::time::Time;

/// Handshake retries between two re-resolutions of a peer's endpoint name: with the default
/// 1 s retry interval, a name is looked up again after 5 s of unanswered handshakes, and every
/// 5 s after that while they stay unanswered (wireguard-tools' reresolve-dns does it on a timer
/// once the latest handshake is stale).
pub const RERESOLVE_AFTER_ATTEMPTS: u32 = 5;

/// What [`Tunnel::reconfigure`] changed, by peer name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerChanges {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Kept peers whose name, endpoint, allowed IPs or keepalive changed.
    pub updated: Vec<String>,
    /// Kept peers with nothing changed.
    pub unchanged: usize,
}

impl PeerChanges {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.updated.is_empty()
    }
}

impl std::fmt::Display for PeerChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(",")
            }
        };
        write!(
            f,
            "added={} removed={} updated={} unchanged={}",
            list(&self.added),
            list(&self.removed),
            list(&self.updated),
            self.unchanged
        )
    }
}

/// A new peer list checked and compared with the one in force, made with no access to the
/// tunnel (a driver makes it outside its lock; at 10,000 peers that is the whole cost of a
/// reload): [`Tunnel::apply_peer_plan`] then applies only the difference, matched by public key
/// as [`Tunnel::reconfigure`] matches. Peers that change nothing are not touched.
#[derive(Debug, Clone)]
pub struct PeerPlan {
    generation: u64,
    removed: Vec<[u8; 32]>,
    updated: Vec<TunnelPeerConfig>,
    added: Vec<TunnelPeerConfig>,
    endpoint_names: Vec<([u8; 32], Option<String>)>,
    unchanged: usize,
}

/// What [`Tunnel::apply_peer_plan`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub changes: PeerChanges,
    /// Peers and prefixes it touched: the work done (under the driver's lock), in proportion to
    /// the change.
    pub steps: usize,
}

impl PeerPlan {
    /// Compares `new` (with the endpoint host names of its peers, `names[i]` for `new[i]`;
    /// `None`: an address) against `old` and `old_names`, the list in force at `generation`
    /// ([`Tunnel::peers_generation`]) for the host whose public key is `own`. The new list is
    /// checked whole, as [`Tunnel::reconfigure`] checks it.
    pub fn new(
        own: &[u8; 32],
        generation: u64,
        old: &[TunnelPeerConfig],
        old_names: &[Option<String>],
        new: Vec<TunnelPeerConfig>,
        names: &[Option<String>],
    ) -> Result<Self, crate::Error> {
        check_peers(own, &new)?;
        let none = None;
        let old_by_key: std::collections::HashMap<[u8; 32], (&TunnelPeerConfig, &Option<String>)> =
            old.iter()
                .enumerate()
                .map(|(i, p)| (p.public_key, (p, old_names.get(i).unwrap_or(&none))))
                .collect();
        let new_keys: std::collections::HashSet<[u8; 32]> =
            new.iter().map(|p| p.public_key).collect();
        let mut plan = PeerPlan {
            generation,
            removed: old
                .iter()
                .filter(|p| !new_keys.contains(&p.public_key))
                .map(|p| p.public_key)
                .collect(),
            updated: Vec::new(),
            added: Vec::new(),
            endpoint_names: Vec::new(),
            unchanged: 0,
        };
        for (i, cfg) in new.into_iter().enumerate() {
            let name = names.get(i).cloned().flatten();
            match old_by_key.get(&cfg.public_key) {
                Some((o, old_name)) => {
                    if **old_name != name {
                        plan.endpoint_names.push((cfg.public_key, name));
                    }
                    let changed = o.name != cfg.name
                        || o.endpoint != cfg.endpoint
                        || o.allowed_ips != cfg.allowed_ips
                        || o.persistent_keepalive != cfg.persistent_keepalive
                        || o.preshared_key != cfg.preshared_key;
                    if changed {
                        plan.updated.push(cfg);
                    } else {
                        plan.unchanged += 1;
                    }
                }
                None => {
                    if name.is_some() {
                        plan.endpoint_names.push((cfg.public_key, name));
                    }
                    plan.added.push(cfg);
                }
            }
        }
        Ok(plan)
    }

    /// Peers added, removed or updated, and endpoint names changed.
    pub fn len(&self) -> usize {
        self.removed.len() + self.updated.len() + self.added.len() + self.endpoint_names.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Checks a peer list (keys unique, not degenerate, not ours; allowed IPs owned by one peer
/// each) and returns its routing table, peer `i` at index `i`.
pub(super) fn check_peers(
    own: &[u8; 32],
    peers: &[TunnelPeerConfig],
) -> Result<AllowedIps, crate::Error> {
    let mut keys = std::collections::HashSet::new();
    let mut routes = AllowedIps::default();
    for (i, p) in peers.iter().enumerate() {
        if !keys.insert(p.public_key) {
            return Err(crate::Error::Config(format!(
                "peer {:?}: public key listed twice",
                p.name
            )));
        }
        if handshake::x25519_public_is_degenerate(&p.public_key) {
            return Err(crate::Error::Config(format!(
                "peer {:?}: public key is a small-order point",
                p.name
            )));
        }
        if &p.public_key == own {
            return Err(crate::Error::Config(format!(
                "peer {:?}: public key is this host's own",
                p.name
            )));
        }
        for n in &p.allowed_ips {
            if routes.owner(*n).is_some_and(|o| o != i) {
                return Err(crate::Error::Config(format!(
                    "peer {:?}: allowed IP {n} already belongs to another peer",
                    p.name
                )));
            }
            routes.insert(*n, i);
        }
    }
    Ok(routes)
}

impl Tunnel {
    /// Replaces the peer list with `peers` (see the module documentation). The new list is
    /// checked whole first: on an error nothing changes.
    pub fn reconfigure(
        &mut self,
        peers: Vec<TunnelPeerConfig>,
    ) -> Result<PeerChanges, crate::Error> {
        check_peers(self.host.public(), &peers)?;
        let mut changes = PeerChanges::default();
        let keep: std::collections::HashSet<[u8; 32]> =
            peers.iter().map(|p| p.public_key).collect();
        for pi in 0..self.peers.len() {
            let p = &self.peers[pi];
            if !p.removed && !keep.contains(&p.cfg.public_key) {
                changes.removed.push(p.cfg.name.clone());
                self.remove_peer(pi);
            }
        }
        let mut slot_of = Vec::with_capacity(peers.len());
        for cfg in peers {
            match self.by_key.get(&cfg.public_key).copied() {
                Some(pi) => {
                    let p = &mut self.peers[pi];
                    let old = &p.cfg;
                    let changed = old.name != cfg.name
                        || old.endpoint != cfg.endpoint
                        || old.allowed_ips != cfg.allowed_ips
                        || old.persistent_keepalive != cfg.persistent_keepalive
                        || old.preshared_key != cfg.preshared_key;
                    if old.endpoint != cfg.endpoint && cfg.endpoint.is_some() {
                        // A new configured endpoint wins over a learned one; an unchanged
                        // one leaves what roaming learned in place.
                        p.endpoint = cfg.endpoint;
                    }
                    if changed {
                        changes.updated.push(cfg.name.clone());
                    } else {
                        changes.unchanged += 1;
                    }
                    p.cfg = cfg;
                    slot_of.push(pi);
                }
                None => {
                    changes.added.push(cfg.name.clone());
                    let pi = self.peers.len();
                    self.by_key.insert(cfg.public_key, pi);
                    self.peers.push(Peer::new(cfg));
                    slot_of.push(pi);
                }
            }
        }
        let mut routes = AllowedIps::default();
        for &pi in &slot_of {
            for n in &self.peers[pi].cfg.allowed_ips {
                routes.insert(*n, pi);
            }
        }
        self.routes = routes;
        self.peers_generation += 1;
        Ok(changes)
    }

    /// The generation of the peer list: what [`PeerPlan::new`] is given with the list the
    /// caller knows to be in force.
    pub fn peers_generation(&self) -> u64 {
        self.peers_generation
    }

    /// Applies a [`PeerPlan`] (see there): under a driver's lock this takes time in proportion
    /// to the change, not to the number of peers. A plan made against another generation of
    /// the peer list (changed since, through WireGuard's UAPI say) is refused, and nothing
    /// changes: apply the list whole with [`Tunnel::reconfigure`] then.
    pub fn apply_peer_plan(&mut self, plan: PeerPlan) -> Result<Applied, PeerPlan> {
        if plan.generation != self.peers_generation {
            return Err(plan);
        }
        let PeerPlan {
            removed,
            updated,
            added,
            endpoint_names,
            unchanged,
            ..
        } = plan;
        let mut changes = PeerChanges {
            unchanged,
            ..PeerChanges::default()
        };
        let mut steps = 0;
        // Removed peers and the old prefixes of updated ones leave the table first, so that a
        // prefix moving between peers lands where the new list puts it.
        for key in &removed {
            let Some(&pi) = self.by_key.get(key) else {
                continue;
            };
            let nets: Vec<IpNet> = self.routes.of_peer(pi).collect();
            for n in nets {
                steps += 1;
                self.routes.remove(n);
            }
            changes.removed.push(self.peers[pi].cfg.name.clone());
            self.remove_peer(pi);
            steps += 1;
        }
        let mut slots = Vec::with_capacity(updated.len());
        for cfg in &updated {
            let Some(&pi) = self.by_key.get(&cfg.public_key) else {
                continue;
            };
            if self.peers[pi].cfg.allowed_ips != cfg.allowed_ips {
                let nets: Vec<IpNet> = self.routes.of_peer(pi).collect();
                for n in nets {
                    steps += 1;
                    self.routes.remove(n);
                }
            }
            slots.push(pi);
        }
        for (cfg, pi) in updated.into_iter().zip(slots) {
            let p = &mut self.peers[pi];
            if p.cfg.endpoint != cfg.endpoint && cfg.endpoint.is_some() {
                // A new configured endpoint wins over a learned one (as in `reconfigure`).
                p.endpoint = cfg.endpoint;
            }
            if p.cfg.allowed_ips != cfg.allowed_ips {
                for n in &cfg.allowed_ips {
                    steps += 1;
                    self.routes.insert(*n, pi);
                }
            }
            changes.updated.push(cfg.name.clone());
            self.peers[pi].cfg = cfg;
            steps += 1;
        }
        for cfg in added {
            let pi = self.peers.len();
            for n in &cfg.allowed_ips {
                steps += 1;
                self.routes.insert(*n, pi);
            }
            changes.added.push(cfg.name.clone());
            self.by_key.insert(cfg.public_key, pi);
            self.peers.push(Peer::new(cfg));
            steps += 1;
        }
        for (key, name) in endpoint_names {
            steps += 1;
            self.set_endpoint_name(&key, name);
        }
        self.peers_generation += 1;
        Ok(Applied { changes, steps })
    }

    /// The peers as configured now (removed ones left out), in their order: what a change made
    /// through WireGuard's UAPI starts from.
    pub fn peer_configs(&self) -> Vec<TunnelPeerConfig> {
        self.peers
            .iter()
            .filter(|p| !p.removed)
            .map(|p| p.cfg.clone())
            .collect()
    }

    /// This host's key (WireGuard's UAPI reports the private key to root and the owner).
    pub fn host_key(&self) -> &HostKey {
        &self.host
    }

    /// Empties peer `pi`'s slot: sessions and the initiation (their indexes freed, so datagrams
    /// for them are `unknown-index`), staged and queued packets, its key; routes are rebuilt by
    /// the caller.
    fn remove_peer(&mut self, pi: usize) {
        let p = &mut self.peers[pi];
        let sessions = [p.current.take(), p.previous.take(), p.next.take()];
        let init = p.handshake.initiation.take();
        p.removed = true;
        p.endpoint = None;
        p.endpoint_name = None;
        p.resolving = false;
        p.cfg.persistent_keepalive = None;
        p.cfg.allowed_ips.clear();
        p.staged.clear();
        p.queue = Vec::new();
        p.queue_packets = 0;
        p.queued_since = None;
        let key = p.cfg.public_key;
        for s in sessions {
            self.free_session(s);
        }
        if let Some(i) = init {
            self.indexes.free(i.local_index);
        }
        self.by_key.remove(&key);
        self.corked.retain(|&c| c != pi);
        self.resolve_requests.retain(|&r| r != pi);
    }

    /// Declares that the endpoint of the peer with `public_key` was configured as the host
    /// name `name` (`HOST:PORT`; `None`: an address, nothing to resolve). Such a peer's name is
    /// offered for resolution again through [`Tunnel::poll_resolve`] when its handshakes go
    /// unanswered. Returns false when no such peer exists.
    pub fn set_endpoint_name(&mut self, public_key: &[u8; 32], name: Option<String>) -> bool {
        let Some(&pi) = self.by_key.get(public_key) else {
            return false;
        };
        let p = &mut self.peers[pi];
        if p.endpoint_name != name {
            p.endpoint_name = name;
            p.resolving = false;
            self.resolve_requests.retain(|&r| r != pi);
        }
        true
    }

    /// Asks for a re-resolution of peer `pi`'s endpoint name once `attempts` initiations went
    /// unanswered (every [`RERESOLVE_AFTER_ATTEMPTS`]), one request outstanding at most.
    pub(super) fn want_resolve(&mut self, pi: usize, attempts: u32) {
        let p = &mut self.peers[pi];
        if p.endpoint_name.is_some()
            && !p.resolving
            && attempts >= RERESOLVE_AFTER_ATTEMPTS
            && attempts % RERESOLVE_AFTER_ATTEMPTS == 0
        {
            p.resolving = true;
            self.resolve_requests.push_back(pi);
        }
    }

    /// The next endpoint name to resolve again: the peer's public key and `HOST:PORT`. The
    /// driver resolves it off the data path and answers with [`Tunnel::resolved`].
    pub fn poll_resolve(&mut self) -> Option<([u8; 32], String)> {
        while let Some(pi) = self.resolve_requests.pop_front() {
            let p = &self.peers[pi];
            if let (false, Some(name)) = (p.removed, &p.endpoint_name) {
                return Some((p.cfg.public_key, name.clone()));
            }
        }
        None
    }

    /// The answer to a [`Tunnel::poll_resolve`] request for `name`: the addresses it resolves
    /// to now (empty: the lookup failed). When the peer's endpoint is not among them it moves
    /// to the first, and an initiation under way is sent there at once. Returns the new
    /// endpoint when it moved. An answer for a name the peer no longer has is ignored.
    pub fn resolved(
        &mut self,
        now: Time,
        public_key: &[u8; 32],
        name: &str,
        addrs: &[SocketAddr],
    ) -> Option<SocketAddr> {
        let &pi = self.by_key.get(public_key)?;
        let p = &mut self.peers[pi];
        if p.endpoint_name.as_deref() != Some(name) {
            return None;
        }
        p.resolving = false;
        let first = *addrs.first()?;
        if p.endpoint.is_some_and(|e| addrs.contains(&e)) {
            return None;
        }
        p.endpoint = Some(first);
        if let Some(attempts) = p.handshake.initiation.as_ref().map(|i| i.attempts) {
            self.start_handshake(pi, now, attempts);
        }
        Some(first)
    }
}
