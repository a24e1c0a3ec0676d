//! `sealink demo`'s exchange: two hosts in this process, each with throwaway keys, exchange
//! messages in datagram mode over real UDP sockets on 127.0.0.1 (the product's own handshake,
//! owner signatures, sealing, piggybacking and acknowledgements, no simulator), and every
//! message is checked to arrive exactly once and intact. The simulated lossy link is the lab's.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sealink_crypto::CryptoError;
use sealink_crypto::sign::OwnerSigningKey;

use crate::{
    Directory, HostKey, LocalOwner, Node, NodeConfig, NodeError, NodeStats, PeerConfig, Scope,
    Urgency,
};

/// The sending owners, on host a; host b receives.
pub const OWNERS: [&str; 2] = ["alice", "carol"];
/// How long the whole exchange may take.
const LIMIT: Duration = Duration::from_secs(30);

/// Why the exchange did not run to its end (a message lost or altered is a
/// [`Report::problems`] entry instead).
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Proto(#[from] sealink_proto::Error),
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("cannot start host {host}")]
    Start {
        host: &'static str,
        #[source]
        source: NodeError,
    },
    #[error("cannot queue message {n}")]
    Queue {
        n: u64,
        #[source]
        source: NodeError,
    },
    #[error("host b did not acknowledge every message")]
    NotAcknowledged(#[source] NodeError),
}

/// What the exchange did.
#[derive(Debug)]
pub struct Report {
    pub a_addr: SocketAddr,
    pub b_addr: SocketAddr,
    /// Messages sent, and their bytes.
    pub total: u64,
    pub bytes: usize,
    /// Until the last message arrived, and until every one was acknowledged.
    pub delivered_in: Duration,
    pub acked_in: Duration,
    pub stats_a: NodeStats,
    pub stats_b: NodeStats,
    /// Messages missing, doubled, altered or from the wrong owner: empty when all is well.
    pub problems: Vec<String>,
}

/// Message `n`: its number (8 bytes, little endian), then text that says who sent it.
fn payload(n: u64) -> Vec<u8> {
    let mut m = n.to_le_bytes().to_vec();
    m.extend_from_slice(format!(" message {n} from {}", OWNERS[n as usize % 2]).as_bytes());
    m
}

fn owner_key() -> Result<OwnerSigningKey, CryptoError> {
    OwnerSigningKey::from_seed(&OwnerSigningKey::generate_seed()?)
}

/// Host a sends `total` messages, from [`OWNERS`] in turn, to host b: every tenth urgent, half
/// authenticate-only.
pub fn run(total: u64) -> Result<Report, DemoError> {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let (host_a, host_b) = (HostKey::generate()?, HostKey::generate()?);
    let owners = [owner_key()?, owner_key()?];

    // b trusts a's host key and both owners; a trusts b's host key and knows its address.
    let mut cfg_b = NodeConfig::new(loopback, host_b);
    let mut dir = Directory::new();
    for (name, key) in OWNERS.iter().zip(&owners) {
        dir.insert(name, key.public_key())?;
    }
    cfg_b.directory = dir;
    cfg_b.peers.push(PeerConfig {
        name: "a".into(),
        public_key: *host_a.public(),
        addr: None,
    });
    let b_public = *cfg_b.host.public();
    let b = Node::start(cfg_b).map_err(|source| DemoError::Start { host: "b", source })?;
    let b_addr = b.local_addr()?;
    let mut cfg_a = NodeConfig::new(loopback, host_a);
    cfg_a.peers.push(PeerConfig {
        name: "b".into(),
        public_key: b_public,
        addr: Some(b_addr),
    });
    let a = Node::start(cfg_a).map_err(|source| DemoError::Start { host: "a", source })?;
    let a_addr = a.local_addr()?;
    let [alice, carol] = owners;
    let ids = [
        a.add_owner(LocalOwner::new(OWNERS[0], alice)?),
        a.add_owner(LocalOwner::new(OWNERS[1], carol)?),
    ];

    let start = Instant::now();
    let mut bytes = 0;
    for n in 0..total {
        let data = payload(n);
        bytes += data.len();
        // Every tenth urgent (sent at once, taking queued ones along); half authenticate-only.
        let urgency = if n % 10 == 9 {
            Urgency::Urgent
        } else {
            Urgency::Default
        };
        let scope = if n % 2 == 0 {
            Scope::Encrypt
        } else {
            Scope::AuthOnly
        };
        a.send("b", ids[n as usize % 2], None, &data, urgency, scope)
            .map_err(|source| DemoError::Queue { n, source })?;
    }
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    while (seen.len() as u64) < total {
        let Some(d) = b.recv(Some(LIMIT.saturating_sub(start.elapsed()))) else {
            break;
        };
        let n = d
            .data
            .get(..8)
            .map(|h| u64::from_le_bytes(h.try_into().unwrap_or([0; 8])));
        match n {
            Some(n) if n < total && d.data[..] == payload(n)[..] => {
                if d.from.as_ref() != OWNERS[n as usize % 2] {
                    problems.push(format!("message {n} came from {}", d.from));
                }
                if !seen.insert(n) {
                    problems.push(format!("message {n} delivered twice"));
                }
            }
            _ => problems.push(format!("a message of {} bytes was altered", d.data.len())),
        }
    }
    let delivered_in = start.elapsed();
    a.flush("b", LIMIT.saturating_sub(start.elapsed()))
        .map_err(DemoError::NotAcknowledged)?;
    let acked_in = start.elapsed();
    let (stats_a, stats_b) = (a.stats(), b.stats());
    a.shutdown();
    b.shutdown();
    let missing = total - seen.len() as u64;
    if missing > 0 {
        problems.push(format!("{missing} messages not delivered"));
    }
    Ok(Report {
        a_addr,
        b_addr,
        total,
        bytes,
        delivered_in,
        acked_in,
        stats_a,
        stats_b,
        problems,
    })
}

/// One host's counters on one line: datagrams, handshakes, public-key operations, drops.
pub fn counters(s: &NodeStats) -> String {
    let e = &s.endpoint;
    format!(
        "{} datagrams sent ({} with messages, {} ack-only), {} received; {} handshake(s); \
         public-key ops: {} sign, {} verify, {} X25519; {} dropped",
        e.datagrams_sent,
        e.data_datagrams_sent,
        e.ack_only_datagrams_sent,
        e.datagrams_received,
        e.handshakes_completed,
        e.pk.signs,
        e.pk.verifies,
        e.pk.dh,
        e.total_drops()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_carries_its_number() {
        let p = payload(7);
        assert_eq!(&p[..8], &7u64.to_le_bytes());
        assert!(p.ends_with(b"message 7 from carol"));
    }

    #[test]
    fn a_short_exchange_arrives_once_and_intact() {
        let r = run(25).unwrap();
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(r.total, 25);
        assert!(r.stats_a.endpoint.messages_sent >= 25);
        assert!(counters(&r.stats_b).contains("handshake(s)"));
    }
}
