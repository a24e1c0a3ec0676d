//! Channel establishment: a Noise IK handshake (snow), one round trip. The initiator knows the
//! responder's static key from its trust set; the responder learns and checks the initiator's.
//! The handshake payloads negotiate the suite and say whether this handshake continues an
//! existing channel (a rekey) or starts a new one.

use sealink_crypto::SuiteId;

use crate::error::DropReason;
use crate::wire::{HEADER_LEN, Header, write_header};

pub const NOISE_PARAMS: &str = "Noise_IK_25519_ChaChaPoly_BLAKE2s";
/// Prologue of datagram-mode channels.
pub const PROLOGUE: &[u8] = b"sealink v1";
/// Prologue of stream-mode sessions: a handshake made for one mode is useless in the other.
pub const STREAM_PROLOGUE: &[u8] = b"sealink v1 stream";
/// Prologue of tunnel-mode sessions (`sealink up`).
pub const TUNNEL_PROLOGUE: &[u8] = b"sealink v1 tunnel";

/// suite (1) || flags (1) || timestamp (8, LE) || channel binding (32; zero for a new channel)
/// || sender index (4, LE; repeats the header's so that it is authenticated)
pub const INIT_PAYLOAD_LEN: usize = 46;
/// suite (1) || decision (1: 0 = new channel, 1 = continues the channel) || receiver index (4)
/// || sender index (4) (repeating the header's, authenticated) || the responder's newest
/// initiation timestamp (8): every initiation it sent before answering is now stale, so one
/// still in flight from a lost simultaneous open cannot later split the channel in two.
pub const RESP_PAYLOAD_LEN: usize = 18;
/// Header, e (32), encrypted s (32 + 16), encrypted payload (+16).
pub const INIT_LEN: usize = HEADER_LEN + 32 + 48 + INIT_PAYLOAD_LEN + 16;
/// Header, e (32), encrypted payload (+16).
pub const RESP_LEN: usize = HEADER_LEN + 32 + RESP_PAYLOAD_LEN + 16;

/// A host's static X25519 key pair.
#[derive(Clone)]
pub struct HostKey {
    pub(crate) private: [u8; 32],
    pub(crate) public: [u8; 32],
}

impl std::fmt::Debug for HostKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostKey")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl HostKey {
    /// A fresh random key pair.
    pub fn generate() -> Result<Self, crate::Error> {
        let kp = snow::Builder::new(params())
            .generate_keypair()
            .map_err(|e| crate::Error::Handshake(e.to_string()))?;
        let mut k = HostKey {
            private: [0; 32],
            public: [0; 32],
        };
        k.private.copy_from_slice(&kp.private);
        k.public.copy_from_slice(&kp.public);
        Ok(k)
    }
    /// From a private key; the public key is derived.
    pub fn from_private(private: [u8; 32]) -> Result<Self, crate::Error> {
        let public = sealink_crypto::kx::x25519_public_key(&private)?;
        Ok(HostKey { private, public })
    }
    pub fn public(&self) -> &[u8; 32] {
        &self.public
    }
}

fn params() -> snow::params::NoiseParams {
    // The constant parses; a failure here would be a build defect caught by every test.
    NOISE_PARAMS.parse().expect("valid noise params")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InitPayload {
    pub suite: u8,
    pub timestamp: u64,
    pub binding: [u8; 32],
}

impl InitPayload {
    fn encode(&self, sender_index: u32) -> [u8; INIT_PAYLOAD_LEN] {
        let mut b = [0u8; INIT_PAYLOAD_LEN];
        b[0] = self.suite;
        b[2..10].copy_from_slice(&self.timestamp.to_le_bytes());
        b[10..42].copy_from_slice(&self.binding);
        b[42..46].copy_from_slice(&sender_index.to_le_bytes());
        b
    }
    fn decode(b: &[u8], sender_index: u32) -> Option<Self> {
        if b.len() != INIT_PAYLOAD_LEN || b[1] != 0 || b[42..46] != sender_index.to_le_bytes() {
            return None;
        }
        Some(InitPayload {
            suite: b[0],
            timestamp: u64::from_le_bytes(b[2..10].try_into().ok()?),
            binding: b[10..42].try_into().ok()?,
        })
    }
}

/// The keys a finished handshake yields, and its hash (the channel binding of a new channel).
pub(crate) struct Split {
    pub send: [u8; 32],
    pub recv: [u8; 32],
    pub hash: [u8; 32],
}

fn finish(hs: &mut snow::HandshakeState) -> Option<Split> {
    let hash: [u8; 32] = hs.get_handshake_hash().get(..32)?.try_into().ok()?;
    let (a, b) = hs.dangerously_get_raw_split();
    let (send, recv) = if hs.is_initiator() { (a, b) } else { (b, a) };
    Some(Split { send, recv, hash })
}

/// Builds an initiation datagram; returns the handshake state to finish with the response.
pub(crate) fn write_init(
    host: &HostKey,
    prologue: &[u8],
    remote: &[u8; 32],
    sender_index: u32,
    payload: &InitPayload,
) -> Result<(snow::HandshakeState, Vec<u8>), crate::Error> {
    let err = |e: snow::Error| crate::Error::Handshake(e.to_string());
    let mut hs = snow::Builder::new(params())
        .local_private_key(&host.private)
        .map_err(err)?
        .remote_public_key(remote)
        .map_err(err)?
        .prologue(prologue)
        .map_err(err)?
        .build_initiator()
        .map_err(err)?;
    let mut pkt = vec![0u8; INIT_LEN];
    let (h, body) = pkt.split_at_mut(HEADER_LEN);
    write_header(
        &Header::Init {
            sender: sender_index,
        },
        h.try_into()
            .map_err(|_| crate::Error::Handshake("header".into()))?,
    );
    let n = hs
        .write_message(&payload.encode(sender_index), body)
        .map_err(err)?;
    debug_assert_eq!(n, INIT_LEN - HEADER_LEN);
    Ok((hs, pkt))
}

/// Reads an initiation addressed to `host`; returns the state, the initiator's static key and
/// its payload.
pub(crate) fn read_init(
    host: &HostKey,
    prologue: &[u8],
    pkt: &[u8],
) -> Result<(snow::HandshakeState, [u8; 32], InitPayload), DropReason> {
    if pkt.len() != INIT_LEN {
        return Err(DropReason::MalformedHeader);
    }
    let sender_index = match crate::wire::parse_header(pkt)? {
        Header::Init { sender } => sender,
        _ => return Err(DropReason::MalformedHeader),
    };
    let mut hs = snow::Builder::new(params())
        .local_private_key(&host.private)
        .and_then(|b| b.prologue(prologue))
        .and_then(|b| b.build_responder())
        .map_err(|_| DropReason::HandshakeFailed)?;
    let mut payload = [0u8; INIT_LEN];
    let n = hs
        .read_message(&pkt[HEADER_LEN..], &mut payload)
        .map_err(|_| DropReason::HandshakeFailed)?;
    let p = InitPayload::decode(&payload[..n], sender_index).ok_or(DropReason::HandshakeFailed)?;
    let rs: [u8; 32] = hs
        .get_remote_static()
        .and_then(|s| s.try_into().ok())
        .ok_or(DropReason::HandshakeFailed)?;
    Ok((hs, rs, p))
}

/// Writes the response; returns the datagram and the finished keys.
pub(crate) fn write_response(
    mut hs: snow::HandshakeState,
    receiver: u32,
    sender: u32,
    suite: SuiteId,
    continues: bool,
    newest_own_init: u64,
) -> Result<(Vec<u8>, Split), DropReason> {
    let mut pkt = vec![0u8; RESP_LEN];
    let (h, body) = pkt.split_at_mut(HEADER_LEN);
    write_header(
        &Header::Response { receiver, sender },
        h.try_into().map_err(|_| DropReason::HandshakeFailed)?,
    );
    let mut payload = [0u8; RESP_PAYLOAD_LEN];
    payload[0] = suite as u8;
    payload[1] = continues as u8;
    payload[2..6].copy_from_slice(&receiver.to_le_bytes());
    payload[6..10].copy_from_slice(&sender.to_le_bytes());
    payload[10..18].copy_from_slice(&newest_own_init.to_le_bytes());
    hs.write_message(&payload, body)
        .map_err(|_| DropReason::HandshakeFailed)?;
    let split = finish(&mut hs).ok_or(DropReason::HandshakeFailed)?;
    Ok((pkt, split))
}

/// What a response says.
pub(crate) struct Response {
    pub suite: u8,
    pub continues: bool,
    pub newest_peer_init: u64,
    pub split: Split,
}

/// Reads a response with the initiator's state.
pub(crate) fn read_response(
    hs: &mut snow::HandshakeState,
    pkt: &[u8],
) -> Result<Response, DropReason> {
    if pkt.len() != RESP_LEN {
        return Err(DropReason::MalformedHeader);
    }
    let (receiver, sender) = match crate::wire::parse_header(pkt)? {
        Header::Response { receiver, sender } => (receiver, sender),
        _ => return Err(DropReason::MalformedHeader),
    };
    let mut payload = [0u8; RESP_LEN];
    let n = hs
        .read_message(&pkt[HEADER_LEN..], &mut payload)
        .map_err(|_| DropReason::HandshakeFailed)?;
    if n != RESP_PAYLOAD_LEN
        || payload[1] > 1
        || payload[2..6] != receiver.to_le_bytes()
        || payload[6..10] != sender.to_le_bytes()
    {
        return Err(DropReason::HandshakeFailed);
    }
    let split = finish(hs).ok_or(DropReason::HandshakeFailed)?;
    Ok(Response {
        suite: payload[0],
        continues: payload[1] == 1,
        newest_peer_init: u64::from_le_bytes(
            payload[10..18]
                .try_into()
                .map_err(|_| DropReason::HandshakeFailed)?,
        ),
        split,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_agrees_on_keys() {
        let a = HostKey::generate().unwrap();
        let b = HostKey::generate().unwrap();
        let p = InitPayload {
            suite: 1,
            timestamp: 5,
            binding: [0; 32],
        };
        let (mut ihs, init) = write_init(&a, PROLOGUE, b.public(), 11, &p).unwrap();
        assert_eq!(init.len(), INIT_LEN);
        let (rhs, rs, got) = read_init(&b, PROLOGUE, &init).unwrap();
        assert_eq!(&rs, a.public());
        assert_eq!(got, p);
        let (resp, rsplit) = write_response(rhs, 11, 22, SuiteId::Aes128Gcm, false, 77).unwrap();
        assert_eq!(resp.len(), RESP_LEN);
        let r = read_response(&mut ihs, &resp).unwrap();
        assert_eq!((r.suite, r.continues, r.newest_peer_init), (1, false, 77));
        let isplit = r.split;
        assert_eq!(isplit.send, rsplit.recv);
        assert_eq!(isplit.recv, rsplit.send);
        assert_eq!(isplit.hash, rsplit.hash);
        assert_ne!(isplit.send, isplit.recv);
    }

    #[test]
    fn wrong_responder_key_fails() {
        let a = HostKey::generate().unwrap();
        let b = HostKey::generate().unwrap();
        let c = HostKey::generate().unwrap();
        let p = InitPayload {
            suite: 1,
            timestamp: 5,
            binding: [0; 32],
        };
        let (_, init) = write_init(&a, PROLOGUE, b.public(), 11, &p).unwrap();
        assert_eq!(
            read_init(&c, PROLOGUE, &init).err(),
            Some(DropReason::HandshakeFailed)
        );
        let mut bad = init.clone();
        bad[40] ^= 1;
        assert_eq!(
            read_init(&b, PROLOGUE, &bad).err(),
            Some(DropReason::HandshakeFailed)
        );
        // The header's sender index is authenticated through the payload.
        let mut bad = init.clone();
        bad[5] ^= 1;
        assert_eq!(
            read_init(&b, PROLOGUE, &bad).err(),
            Some(DropReason::HandshakeFailed)
        );
    }
}
