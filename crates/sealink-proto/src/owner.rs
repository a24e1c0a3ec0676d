//! Owners: the principals that send and receive messages. Each owner has an Ed25519 key and a
//! name; a receiving host checks names against its [`Directory`] (the trust file). An owner is
//! introduced once per channel with a signature binding it to that channel and direction, then
//! referred to by a compact id at no public-key cost.

use std::collections::HashMap;
use std::sync::Arc;

use sealink_crypto::sign::{OwnerSigningKey, PUBLIC_KEY_LEN, SIGNATURE_LEN};

use crate::error::Error;
use crate::wire::valid_name;

/// Names → Ed25519 public keys of the owners this host will believe.
#[derive(Debug, Clone, Default)]
pub struct Directory {
    owners: HashMap<Arc<str>, [u8; PUBLIC_KEY_LEN]>,
}

impl Directory {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn insert(&mut self, name: &str, public_key: [u8; PUBLIC_KEY_LEN]) -> Result<(), Error> {
        if !valid_name(name) {
            return Err(Error::InvalidName(name.to_owned()));
        }
        self.owners.insert(Arc::from(name), public_key);
        Ok(())
    }
    pub fn get(&self, name: &str) -> Option<&[u8; PUBLIC_KEY_LEN]> {
        self.owners.get(name)
    }
    pub fn len(&self) -> usize {
        self.owners.len()
    }
    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }
}

/// A local owner able to sign its introductions.
pub struct LocalOwner {
    pub(crate) name: Arc<str>,
    pub(crate) key: OwnerSigningKey,
}

impl std::fmt::Debug for LocalOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalOwner")
            .field("name", &self.name)
            .finish()
    }
}

impl LocalOwner {
    pub fn new(name: &str, key: OwnerSigningKey) -> Result<Self, Error> {
        if !valid_name(name) {
            return Err(Error::InvalidName(name.to_owned()));
        }
        Ok(LocalOwner {
            name: Arc::from(name),
            key,
        })
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn public_key(&self) -> [u8; PUBLIC_KEY_LEN] {
        self.key.public_key()
    }
}

/// Handle to an owner registered with an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(pub(crate) usize);

const BINDING_LABEL: &[u8] = b"sealink owner intro v1";

/// The bytes an owner signs: a label, the channel binding (hash of the channel's first
/// handshake), the sending and receiving hosts' static keys (the direction), the owner's
/// channel-local id and its name. A signature is thus useless on any other channel, in the
/// other direction, or under another id.
pub fn intro_message(
    channel_binding: &[u8; 32],
    sender_host: &[u8; 32],
    receiver_host: &[u8; 32],
    id: u64,
    name: &str,
) -> Vec<u8> {
    let mut m = Vec::with_capacity(BINDING_LABEL.len() + 96 + 8 + 1 + name.len());
    m.extend_from_slice(BINDING_LABEL);
    m.extend_from_slice(channel_binding);
    m.extend_from_slice(sender_host);
    m.extend_from_slice(receiver_host);
    m.extend_from_slice(&id.to_le_bytes());
    m.push(name.len() as u8);
    m.extend_from_slice(name.as_bytes());
    m
}

/// An owner the peer introduced on this channel and we verified.
#[derive(Debug, Clone)]
pub(crate) struct RemoteOwner {
    pub name: Arc<str>,
    pub sig: [u8; SIGNATURE_LEN],
}
