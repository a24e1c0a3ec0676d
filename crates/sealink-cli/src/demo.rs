//! `sealink demo`: two hosts in this process, each with throwaway keys, exchange messages in
//! datagram mode over real UDP sockets on 127.0.0.1: the product's own handshake, owner
//! signatures, sealing, piggybacking and acknowledgements, with no simulator. It checks that
//! every message arrived exactly once and intact and prints what the two hosts counted. The
//! simulated lossy link (loss, reordering, piggybacking on and off) is the lab's
//! `sealink-lab demo`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use sealink_crypto::Scope;
use sealink_crypto::sign::OwnerSigningKey;
use sealink_datagram::{
    Directory, HostKey, LocalOwner, Node, NodeConfig, NodeStats, PeerConfig, Urgency,
};

/// The sending owners, on host a; host b receives.
const OWNERS: [&str; 2] = ["alice", "carol"];
/// How long the whole exchange may take.
const LIMIT: Duration = Duration::from_secs(30);

/// `sealink demo`'s arguments.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Messages host a sends to host b
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    messages: u32,
}

/// Message `n`: its number (8 bytes, little endian), then text that says who sent it.
fn payload(n: u64) -> Vec<u8> {
    let mut m = n.to_le_bytes().to_vec();
    m.extend_from_slice(format!(" message {n} from {}", OWNERS[n as usize % 2]).as_bytes());
    m
}

fn owner_key() -> Result<OwnerSigningKey> {
    Ok(OwnerSigningKey::from_seed(
        &OwnerSigningKey::generate_seed()?,
    )?)
}

/// Runs the exchange and prints its report; fails if any message is missing, doubled or
/// altered.
pub fn run(a: &DemoArgs) -> Result<()> {
    let total = u64::from(a.messages);
    let loopback = "127.0.0.1:0".parse()?;
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
    let b = Node::start(cfg_b).context("cannot start host b")?;
    let b_addr = b.local_addr()?;
    let mut cfg_a = NodeConfig::new(loopback, host_a);
    cfg_a.peers.push(PeerConfig {
        name: "b".into(),
        public_key: b_public,
        addr: Some(b_addr),
    });
    let a = Node::start(cfg_a).context("cannot start host a")?;
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
            .with_context(|| format!("cannot queue message {n}"))?;
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
        .context("host b did not acknowledge every message")?;
    let acked_in = start.elapsed();
    let (sa, sb) = (a.stats(), b.stats());
    a.shutdown();
    b.shutdown();

    let mut out = String::new();
    let _ = writeln!(
        out,
        "sealink demo: host a ({a_addr}, owners alice and carol) sends to host b ({b_addr}) over UDP,"
    );
    let _ = writeln!(
        out,
        "              datagram mode with throwaway keys (every 10th message urgent, half authenticate-only)"
    );
    let _ = writeln!(
        out,
        "sent:      {total} messages, {bytes} bytes; delivered in {:.1} ms, all acknowledged in {:.1} ms",
        ms(delivered_in),
        ms(acked_in)
    );
    let _ = writeln!(out, "host a:    {}", counters(&sa));
    let _ = writeln!(out, "host b:    {}", counters(&sb));
    let data = sa.endpoint.data_datagrams_sent.max(1);
    let _ = writeln!(
        out,
        "           {:.1} messages per data datagram (piggybacking)",
        sa.endpoint.messages_sent as f64 / data as f64
    );
    let missing = total - seen.len() as u64;
    if missing > 0 {
        problems.push(format!("{missing} messages not delivered"));
    }
    let ok = problems.is_empty();
    if ok {
        let _ = writeln!(
            out,
            "check:     all {total} messages delivered exactly once and intact: OK"
        );
    } else {
        let _ = writeln!(out, "check:     FAILED ({})", problems.join("; "));
    }
    let _ = writeln!(
        out,
        "The simulated lossy link, with piggybacking on and off: cargo run --release -p sealink-lab -- demo"
    );
    crate::output::print(&out)?;
    if !ok {
        bail!("demo check failed; see the report above");
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One host's counters on one line: datagrams, handshakes, public-key operations, drops.
fn counters(s: &NodeStats) -> String {
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
}
