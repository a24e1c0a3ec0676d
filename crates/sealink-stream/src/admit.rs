//! The receiver's admission of connections: bounded connection tables, oldest-first eviction of
//! connections that have not authenticated, the handshake rate limiter and the initiation
//! replay check, and counters of every connection dropped, by reason.
//!
//! A connection is *pending* from accept until its peer proves it holds a session's keys (a
//! join token, or the hello record opened under the session key). Pending connections are
//! bounded per source address and in all; a new one evicts the oldest (of its source first),
//! so stalled connections cannot keep a sender that completes its handshake out, and a flood
//! must outpace the handshake of the connection it wants to evict.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use sealink_proto::Time;
use sealink_proto::cookie::Mac1;
use sealink_proto::ratelimit::HandshakeLimiter;
use sealink_proto::stream::handshake::mac1_ok;

use crate::limits::ConnLimits;

/// Why the receiver dropped a connection (each counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnDrop {
    /// Every connection slot was held by authenticated connections (or no descriptor was left).
    Full,
    /// Closed to make room for a newer connection before it authenticated.
    Evicted,
    /// Did not authenticate within the set-up timeout.
    SetupTimeout,
    /// Closed, or sent something that is not a sealink stream preamble.
    NotSealink,
    /// A handshake initiation without a valid mac1 (its sender does not know our host key):
    /// dropped before the rate limit, so it spends no token of its source's bucket.
    BadMac1,
    /// A handshake initiation over the rate limit.
    RateLimited,
    /// A handshake initiation already seen, or older than the window of recent ones.
    ReplayedInitiation,
    /// A bad or untrusted initiation, or no valid hello under the new session's key.
    HandshakeFailed,
    /// A join with a token of no session waiting for stripes.
    UnknownJoin,
    /// The system refused a thread for it.
    NoThread,
    /// Authenticated while a `--once` receiver was already serving its one transfer.
    TurnedAway,
}

impl ConnDrop {
    pub const ALL: [ConnDrop; 11] = [
        ConnDrop::Full,
        ConnDrop::Evicted,
        ConnDrop::SetupTimeout,
        ConnDrop::NotSealink,
        ConnDrop::BadMac1,
        ConnDrop::RateLimited,
        ConnDrop::ReplayedInitiation,
        ConnDrop::HandshakeFailed,
        ConnDrop::UnknownJoin,
        ConnDrop::NoThread,
        ConnDrop::TurnedAway,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ConnDrop::Full => "full",
            ConnDrop::Evicted => "evicted",
            ConnDrop::SetupTimeout => "setup-timeout",
            ConnDrop::NotSealink => "not-sealink",
            ConnDrop::BadMac1 => "bad-mac1",
            ConnDrop::RateLimited => "rate-limited",
            ConnDrop::ReplayedInitiation => "replayed-initiation",
            ConnDrop::HandshakeFailed => "handshake-failed",
            ConnDrop::UnknownJoin => "unknown-join",
            ConnDrop::NoThread => "no-thread",
            ConnDrop::TurnedAway => "turned-away",
        }
    }

    fn index(self) -> usize {
        ConnDrop::ALL.iter().position(|&d| d == self).unwrap_or(0)
    }
}

/// Initiations older than the newest one accepted from the same host by more than this are
/// refused outright; newer ones are refused if seen before. The window lets two senders on one
/// host race without one of them being taken for a replay.
const REPLAY_WINDOW_NS: u64 = 120 * 1_000_000_000;
/// Initiation timestamps remembered per host (the oldest is forgotten by raising the floor).
const MAX_RECENT_INITS: usize = 1024;

/// Per trusted host: the timestamps of recent initiations.
#[derive(Debug, Default)]
struct Seen {
    /// Timestamps at or below this are refused.
    floor: u64,
    newest: u64,
    recent: BTreeSet<u64>,
}

impl Seen {
    fn check_and_record(&mut self, ts: u64) -> bool {
        if ts <= self.floor || !self.recent.insert(ts) {
            return false;
        }
        self.newest = self.newest.max(ts);
        let floor = self.newest.saturating_sub(REPLAY_WINDOW_NS);
        if floor > self.floor {
            self.floor = floor;
            self.recent = self.recent.split_off(&floor.saturating_add(1));
        }
        while self.recent.len() > MAX_RECENT_INITS {
            if let Some(oldest) = self.recent.pop_first() {
                self.floor = oldest;
            }
        }
        true
    }
}

#[derive(Debug)]
struct Pending {
    source: IpAddr,
    /// A handle on the socket, to shut it down on eviction (its thread then sees the end).
    sock: TcpStream,
}

#[derive(Debug, Default)]
struct Table {
    /// Connections whose guard is alive (evicted ones included until their thread lets go).
    held: usize,
    /// Evicted connections whose thread has not let go yet.
    evicted_held: usize,
    next_id: u64,
    /// By age: ids only grow.
    pending: BTreeMap<u64, Pending>,
    per_source: HashMap<IpAddr, usize>,
}

impl Table {
    fn unlist(&mut self, id: u64) -> bool {
        let Some(p) = self.pending.remove(&id) else {
            return false;
        };
        if let Some(n) = self.per_source.get_mut(&p.source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&p.source);
            }
        }
        true
    }

    /// Closes the oldest pending connection (of `source` if given).
    fn evict_oldest(&mut self, source: Option<IpAddr>) -> bool {
        let id = self
            .pending
            .iter()
            .find(|(_, p)| source.is_none_or(|s| p.source == s))
            .map(|(&id, _)| id);
        let Some(id) = id else { return false };
        if let Some(p) = self.pending.get(&id) {
            let _ = p.sock.shutdown(Shutdown::Both);
        }
        self.unlist(id);
        self.evicted_held += 1;
        true
    }
}

/// What the receiver's connection threads share about admission.
#[derive(Debug)]
pub(crate) struct Admission {
    limits: ConnLimits,
    table: Mutex<Table>,
    drops: [AtomicU64; ConnDrop::ALL.len()],
    /// mac1 of initiations to this receiver's host key, checked before `limiter`.
    mac1: Mac1,
    limiter: Mutex<HandshakeLimiter>,
    inits: Mutex<HashMap<[u8; 32], Seen>>,
    epoch: Instant,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Admission {
    /// For a receiver whose host public key is `own_public`.
    pub fn new(limits: ConnLimits, own_public: &[u8; 32]) -> Self {
        Admission {
            mac1: Mac1::new(own_public),
            limiter: Mutex::new(HandshakeLimiter::new(limits.handshake)),
            limits,
            table: Mutex::default(),
            drops: std::array::from_fn(|_| AtomicU64::new(0)),
            inits: Mutex::default(),
            epoch: Instant::now(),
        }
    }

    /// Admits a new connection as pending, evicting older pending ones to stay within the
    /// bounds; `None` (counted) if every slot is held by authenticated connections.
    pub fn admit(self: &Arc<Self>, sock: &TcpStream, peer: SocketAddr) -> Option<ConnGuard> {
        let Ok(handle) = sock.try_clone() else {
            // Out of descriptors: no room for it.
            self.count(ConnDrop::Full);
            return None;
        };
        let l = &self.limits;
        let max_pending = l.max_pending.max(1);
        let per_source = l.max_pending_per_source.clamp(1, max_pending);
        let source = peer.ip();
        let mut t = lock(&self.table);
        if t.per_source.get(&source).copied().unwrap_or(0) >= per_source {
            t.evict_oldest(Some(source));
            self.count(ConnDrop::Evicted);
        } else if t.pending.len() >= max_pending {
            t.evict_oldest(None);
            self.count(ConnDrop::Evicted);
        }
        if t.held - t.evicted_held >= l.max_conns.max(1) {
            if !t.evict_oldest(None) {
                drop(t);
                self.count(ConnDrop::Full);
                return None;
            }
            self.count(ConnDrop::Evicted);
        }
        // Evicted connections hold their thread until it sees the end: bound those too.
        if t.held >= l.max_conns.max(1) + max_pending {
            drop(t);
            self.count(ConnDrop::Full);
            return None;
        }
        let id = t.next_id;
        t.next_id += 1;
        t.held += 1;
        t.pending.insert(
            id,
            Pending {
                source,
                sock: handle,
            },
        );
        *t.per_source.entry(source).or_insert(0) += 1;
        Some(ConnGuard {
            adm: self.clone(),
            id,
            pending: true,
        })
    }

    pub fn count(&self, why: ConnDrop) {
        self.drops[why.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts of connections dropped so far, by reason.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        ConnDrop::ALL
            .iter()
            .map(|&d| (d.name(), self.drops[d.index()].load(Ordering::Relaxed)))
            .collect()
    }

    /// Whether the handshake initiation `init` (the bytes after the preamble) from `source`
    /// may be processed now (counted if not). Its mac1 is checked first: junk from someone who
    /// does not know our host key must not spend the tokens of the address it comes from
    /// (another host behind the same NAT, or the real sender on loopback).
    pub fn allow_initiation(&self, source: IpAddr, init: &[u8]) -> bool {
        if !mac1_ok(&self.mac1, init) {
            self.count(ConnDrop::BadMac1);
            return false;
        }
        let now = Time::ZERO + self.epoch.elapsed();
        let ok = lock(&self.limiter).allow(now, source);
        if !ok {
            self.count(ConnDrop::RateLimited);
        }
        ok
    }

    /// Whether an authentic initiation from `host` with timestamp `ts` is new; records it.
    pub fn fresh_initiation(&self, host: &[u8; 32], ts: u64) -> bool {
        lock(&self.inits)
            .entry(*host)
            .or_default()
            .check_and_record(ts)
    }
}

/// A connection's place in the tables, released on drop.
#[derive(Debug)]
pub(crate) struct ConnGuard {
    adm: Arc<Admission>,
    id: u64,
    pending: bool,
}

impl ConnGuard {
    /// The peer has authenticated: the connection can no longer be evicted. `false` if it
    /// was evicted meanwhile (the socket is shut down; give up on it).
    pub fn authenticated(&mut self) -> bool {
        if !self.pending {
            return true;
        }
        self.pending = false;
        let mut t = lock(&self.adm.table);
        if t.unlist(self.id) {
            true
        } else {
            // Evicted: it stays counted as such until dropped.
            self.pending = true;
            false
        }
    }

    /// Counts `why`, unless eviction (already counted) is what ended the connection.
    pub fn dropped(&self, why: ConnDrop) {
        if !self.pending || lock(&self.adm.table).pending.contains_key(&self.id) {
            self.adm.count(why);
        }
    }

    pub fn admission(&self) -> &Admission {
        &self.adm
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        let mut t = lock(&self.adm.table);
        t.held -= 1;
        if self.pending && !t.unlist(self.id) {
            t.evicted_held -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initiations_are_fresh_once_and_within_the_window() {
        let mut s = Seen::default();
        let base = 1_000 * 1_000_000_000;
        assert!(s.check_and_record(base));
        assert!(!s.check_and_record(base), "the same one twice");
        assert!(s.check_and_record(base - 1), "slightly out of order");
        assert!(!s.check_and_record(base - REPLAY_WINDOW_NS), "too old");
        assert!(s.check_and_record(base + REPLAY_WINDOW_NS));
        assert!(!s.check_and_record(base), "below the raised floor");
        assert!(s.recent.len() <= 2);
        for i in 1..=(MAX_RECENT_INITS as u64 + 10) {
            assert!(s.check_and_record(base + REPLAY_WINDOW_NS + i));
        }
        assert_eq!(s.recent.len(), MAX_RECENT_INITS);
        assert!(!s.check_and_record(base + REPLAY_WINDOW_NS + 5));
    }
}
