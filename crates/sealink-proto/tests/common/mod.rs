//! Shared set-up for the protocol tests: two hosts, two owners each, trusting each other.
#![allow(dead_code)]

use sealink_crypto::sign::OwnerSigningKey;
use sealink_proto::sim::{LinkConfig, Pair, Side};
use sealink_proto::{
    Config, Directory, Endpoint, Event, HostKey, LocalOwner, MessageId, OwnerId, PeerId, Scope,
    Time, Urgency,
};

#[derive(Debug)]
pub struct Setup {
    pub pair: Pair,
    pub a_peer: PeerId,
    pub b_peer: PeerId,
    pub a_owners: Vec<OwnerId>,
    pub b_owners: Vec<OwnerId>,
}

pub const A_OWNERS: [&str; 2] = ["alice", "carol"];
pub const B_OWNERS: [&str; 2] = ["bob", "dave"];

pub fn owner_key(name: &str) -> OwnerSigningKey {
    let mut seed = [0u8; 32];
    for (i, b) in name.bytes().enumerate() {
        seed[i % 32] ^= b;
    }
    seed[31] ^= 0x5a;
    OwnerSigningKey::from_seed(&seed).unwrap()
}

pub fn setup_with(cfg_a: Config, cfg_b: Config, link: LinkConfig, seed: u64) -> Setup {
    // Host keys from the seed, so a failing case replays exactly (who wins a simultaneous
    // open depends on the keys).
    let mut rng = sealink_proto::sim::SimRng::new(seed ^ 0x5eed);
    let mut key = || {
        let mut k = [0u8; 32];
        for c in k.chunks_mut(8) {
            c.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        HostKey::from_private(k).unwrap()
    };
    let ha = key();
    let hb = key();
    let mut dir = Directory::new();
    for n in A_OWNERS.iter().chain(B_OWNERS.iter()) {
        dir.insert(n, owner_key(n).public_key()).unwrap();
    }
    let mut a = Endpoint::new(cfg_a, ha.clone(), dir.clone()).unwrap();
    let mut b = Endpoint::new(cfg_b, hb.clone(), dir).unwrap();
    let a_peer = a.add_peer("b", *hb.public());
    let b_peer = b.add_peer("a", *ha.public());
    let a_owners = A_OWNERS
        .iter()
        .map(|n| a.add_owner(LocalOwner::new(n, owner_key(n)).unwrap()))
        .collect();
    let b_owners = B_OWNERS
        .iter()
        .map(|n| b.add_owner(LocalOwner::new(n, owner_key(n)).unwrap()))
        .collect();
    Setup {
        pair: Pair::new(a, b, link, seed),
        a_peer,
        b_peer,
        a_owners,
        b_owners,
    }
}

pub fn setup(link: LinkConfig, seed: u64) -> Setup {
    setup_with(Config::default(), Config::default(), link, seed)
}

/// Every message delivered in `ev`, in order, as owned bytes.
pub fn delivered(ev: &[(Time, Event)]) -> Vec<Vec<u8>> {
    ev.iter()
        .flat_map(|(_, e)| match e {
            Event::Messages(m) => m.iter().map(<[u8]>::to_vec).collect(),
            _ => Vec::new(),
        })
        .collect()
}

impl Setup {
    /// The host on `side` sends `data` at `now` to the other, from its owner number `owner` to
    /// `to`; the send must be accepted: its id.
    pub fn send_from(
        &mut self,
        (side, owner): (Side, usize),
        now: Time,
        to: Option<&str>,
        data: &[u8],
        urgency: Urgency,
        scope: Scope,
    ) -> MessageId {
        let (peer, from) = match side {
            Side::A => (self.a_peer, self.a_owners[owner]),
            Side::B => (self.b_peer, self.b_owners[owner]),
        };
        self.pair
            .endpoint(side)
            .send(now, peer, from, to, data, urgency, scope)
            .unwrap()
    }

    /// [`Setup::send_from`] host a, urgent and encrypted.
    pub fn send_a(&mut self, now: Time, owner: usize, to: Option<&str>, data: &[u8]) -> MessageId {
        self.send_from(
            (Side::A, owner),
            now,
            to,
            data,
            Urgency::Urgent,
            Scope::Encrypt,
        )
    }
}

/// `Urgent` where `urgent`, else `Default`.
pub fn urgency(urgent: bool) -> Urgency {
    if urgent {
        Urgency::Urgent
    } else {
        Urgency::Default
    }
}

/// `ep` sends `data` at `now` to `peer`, from `owner` to `to`, urgent and encrypted; the send must
/// be accepted: its id.
pub fn send_urgent(
    ep: &mut Endpoint,
    now: Time,
    peer: PeerId,
    owner: OwnerId,
    to: Option<&str>,
    data: &[u8],
) -> MessageId {
    ep.send(now, peer, owner, to, data, Urgency::Urgent, Scope::Encrypt)
        .unwrap()
}
