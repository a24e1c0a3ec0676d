//! Two nodes on loopback: three owners on host `a` send to two owners on host `b` over ONE
//! host-to-host channel. `b` verifies each owner's signature once, then believes every later
//! message from it at no public-key cost.
//!
//! Run: `cargo run -p sealink-datagram --example owners`

use std::time::Duration;

use sealink_crypto::sign::OwnerSigningKey;
use sealink_datagram::{HostKey, LocalOwner, Node, NodeConfig, PeerConfig, Scope, Urgency};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let loopback = "127.0.0.1:0".parse()?;
    let (ka, kb) = (HostKey::generate()?, HostKey::generate()?);
    let (pa, pb) = (*ka.public(), *kb.public());

    // Host b trusts host a and the three sending owners (a trust file would list them).
    let names = ["alice", "bob", "carol"];
    let mut owners = Vec::new();
    let mut cb = NodeConfig::new(loopback, kb);
    for n in names {
        let key = OwnerSigningKey::from_seed(&OwnerSigningKey::generate_seed()?)?;
        cb.directory.insert(n, key.public_key())?;
        owners.push(LocalOwner::new(n, key)?);
    }
    // b learns a's address from a's authenticated handshake.
    cb.peers.push(PeerConfig {
        name: "a".into(),
        public_key: pa,
        addr: None,
    });
    let b = Node::start(cb)?;

    let mut ca = NodeConfig::new(loopback, ka);
    ca.peers.push(PeerConfig {
        name: "b".into(),
        public_key: pb,
        addr: Some(b.local_addr()?),
    });
    let a = Node::start(ca)?;
    let ids: Vec<_> = owners.into_iter().map(|o| a.add_owner(o)).collect();

    let mut sent = 0;
    for round in 0..3 {
        for (id, from) in ids.iter().zip(names) {
            for to in ["inbox", "audit"] {
                let text = format!("{from} to {to}, message {round}");
                // The last message of each round is urgent: it leaves at once and takes the
                // queued ones along (piggybacking); the others may wait up to 10 ms.
                let urgency = if from == "carol" && to == "audit" {
                    Urgency::Urgent
                } else {
                    Urgency::Default
                };
                a.send("b", *id, Some(to), text.as_bytes(), urgency, Scope::Encrypt)?;
                sent += 1;
            }
        }
    }
    a.flush("b", Duration::from_secs(5))?;
    for _ in 0..sent {
        let d = b
            .recv(Some(Duration::from_secs(5)))
            .ok_or("a message did not arrive")?;
        println!(
            "{}@{} -> {}: {}",
            d.from,
            d.peer_name,
            d.to.as_deref().unwrap_or("(host)"),
            String::from_utf8_lossy(&d.data)
        );
    }
    let sb = b.stats();
    let peer_a = b.peer_id("a").ok_or("peer a missing")?;
    let ch = b.channel_stats(peer_a).ok_or("no channel")?;
    println!(
        "channels established at b: {}; messages delivered: {} in {} datagrams; signature verifications: {}",
        sb.endpoint.channels_established,
        ch.messages_delivered,
        ch.datagrams_received,
        sb.endpoint.pk.verifies
    );
    if sb.endpoint.pk.verifies != 3 {
        return Err(format!(
            "expected exactly 3 signature verifications, saw {}",
            sb.endpoint.pk.verifies
        )
        .into());
    }
    println!("exactly 3 signature verifications: one per owner, none per message");
    a.shutdown();
    b.shutdown();
    Ok(())
}
