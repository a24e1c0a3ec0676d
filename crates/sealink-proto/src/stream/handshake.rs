//! A stream session's handshake: the datagram mode's Noise IK exchange (one round trip, the
//! initiator proves its host key, the responder is known in advance) under its own prologue,
//! sent as the first bytes of the control connection. It yields one record key per direction,
//! the channel binding owners sign, and the token with which further stripes join.
//!
//! The initiation ends with a mac1 keyed by the responder's public key (the datagram modes'
//! mac1, [`crate::handshake::cookie::Mac1`]): the receiver checks it before its initiation limiter, so
//! junk from someone who does not know the receiver's key is dropped without spending a token
//! of the sender's address. There is no mac2: TCP already proves the source.

use sealink_crypto::kdf::{derive_key_material, derive_packet_key};
use sealink_crypto::{PacketKey, SuiteId};

use super::StreamError;
use crate::handshake::cookie::{MAC_LEN, Mac1};
use crate::handshake::{
    HostKey, InitPayload, NOISE_INIT_LEN, RESP_LEN, STREAM_PROLOGUE, Split, read_init,
    read_response, write_init, write_response,
};

/// What a connection that starts a session sends before its initiation: the magic `SLS1` and
/// kind 3. Kind 1 was the initiation without mac1 (before mac1 was added); receivers now refuse it as
/// not sealink, so an old sender is closed at once instead of waiting for bytes it never sends.
pub const INIT_PREAMBLE: [u8; 5] = *b"SLS1\x03";
/// Bytes of the initiator's first message after the preamble (the Noise message, then mac1)
/// and of the responder's answer.
pub const INIT_MESSAGE_LEN: usize = NOISE_INIT_LEN + MAC_LEN;
pub const RESPONSE_MESSAGE_LEN: usize = RESP_LEN;

/// The receiver's first check of an initiation, before its limiter or any public-key work:
/// whether `init` is [`INIT_MESSAGE_LEN`] bytes ending with a valid mac1 for `mac1`'s host.
/// Costs one BLAKE2s.
pub fn mac1_ok(mac1: &Mac1, init: &[u8]) -> bool {
    init.len() == INIT_MESSAGE_LEN && mac1.verify(&init[..NOISE_INIT_LEN], &init[NOISE_INIT_LEN..])
}
pub const JOIN_TOKEN_LEN: usize = 16;

/// What a finished handshake gives either side.
pub struct SessionKeys {
    pub suite: SuiteId,
    /// Seals the records this side sends.
    pub send: PacketKey,
    /// Opens the records the peer sends.
    pub recv: PacketKey,
    /// The handshake hash: what owner signatures bind to.
    pub binding: [u8; 32],
    /// Proves a new connection belongs to this session (derived from the initiator's sending
    /// secret, so only the two hosts know it).
    pub join_token: [u8; JOIN_TOKEN_LEN],
}

sealink_crypto::debug_showing!(SessionKeys { suite });

fn keys(suite: SuiteId, split: &Split, initiator: bool) -> Result<SessionKeys, StreamError> {
    let initiator_send = if initiator { &split.send } else { &split.recv };
    let mut join_token = [0u8; JOIN_TOKEN_LEN];
    derive_key_material(suite, initiator_send, b"stream join", &mut join_token)?;
    Ok(SessionKeys {
        suite,
        send: derive_packet_key(suite, &split.send, b"stream records", false)?,
        recv: derive_packet_key(suite, &split.recv, b"stream records", false)?,
        binding: split.hash,
        join_token,
    })
}

/// The connecting side, between its first message and the answer.
pub struct Initiator {
    hs: snow::HandshakeState,
    suite: SuiteId,
}

sealink_crypto::debug_showing!(Initiator { suite });

impl Initiator {
    /// Starts a handshake with the host whose static key is `responder`, proposing `suite`.
    /// Returns the message to send first.
    pub fn new(
        host: &HostKey,
        responder: &[u8; 32],
        suite: SuiteId,
        timestamp: u64,
    ) -> Result<(Self, Vec<u8>), StreamError> {
        if suite.is_legacy() {
            return Err(StreamError::SuiteRefused(suite.name().into()));
        }
        let payload = InitPayload {
            suite: suite as u8,
            flags: 0,
            timestamp,
            binding: [0; 32],
        };
        let (hs, mut msg) = write_init(host, STREAM_PROLOGUE, responder, 0, &payload)
            .map_err(|e| StreamError::Handshake(e.to_string()))?;
        let tag = Mac1::new(responder).compute(&msg);
        msg.extend_from_slice(&tag);
        Ok((Self { hs, suite }, msg))
    }

    /// Reads the responder's answer.
    pub fn finish(mut self, response: &[u8]) -> Result<SessionKeys, StreamError> {
        let r = read_response(&mut self.hs, response)
            .map_err(|e| StreamError::Handshake(format!("bad response ({e:?})")))?;
        if r.suite != self.suite as u8 || r.continues {
            return Err(StreamError::Handshake(
                "the responder answered with another suite".into(),
            ));
        }
        keys(self.suite, &r.split, true)
    }
}

/// The listening side: reads an initiation, checks the initiator's host key with `trusted`,
/// and answers. Returns the answer to send, the session keys and the initiator's host key.
pub fn accept(
    host: &HostKey,
    init: &[u8],
    trusted: impl FnOnce(&[u8; 32]) -> bool,
) -> Result<(Vec<u8>, SessionKeys, [u8; 32]), StreamError> {
    accept_fresh(host, init, trusted, |_, _| true)
}

/// [`accept`], also asking `fresh` whether the trusted initiator's timestamp is new (and so
/// not a replayed initiation) before answering, so a replay costs no second Diffie-Hellman.
/// `init` is the [`INIT_MESSAGE_LEN`] bytes after the preamble; its mac1 is checked again here
/// (one BLAKE2s) so that no caller can skip it.
pub fn accept_fresh(
    host: &HostKey,
    init: &[u8],
    trusted: impl FnOnce(&[u8; 32]) -> bool,
    fresh: impl FnOnce(&[u8; 32], u64) -> bool,
) -> Result<(Vec<u8>, SessionKeys, [u8; 32]), StreamError> {
    if !mac1_ok(&Mac1::new(host.public()), init) {
        return Err(StreamError::BadMac1);
    }
    let (hs, initiator, payload) = read_init(host, STREAM_PROLOGUE, &init[..NOISE_INIT_LEN])
        .map_err(|e| StreamError::Handshake(format!("bad initiation ({e:?})")))?;
    if !trusted(&initiator) {
        return Err(StreamError::UnknownHost);
    }
    if !fresh(&initiator, payload.timestamp) {
        return Err(StreamError::Handshake(
            "replayed or stale initiation".into(),
        ));
    }
    let suite = SuiteId::from_u8(payload.suite)
        .filter(|s| !s.is_legacy())
        .ok_or_else(|| StreamError::SuiteRefused(format!("#{}", payload.suite)))?;
    let (msg, split) = write_response(hs, 0, 0, suite, false, false, 0)
        .map_err(|e| StreamError::Handshake(format!("{e:?}")))?;
    Ok((msg, keys(suite, &split, false)?, initiator))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_agree_and_keys_cross() {
        let a = HostKey::generate().unwrap();
        let b = HostKey::generate().unwrap();
        let (i, m1) = Initiator::new(&a, b.public(), SuiteId::Aes128Gcm, 1).unwrap();
        assert_eq!(m1.len(), INIT_MESSAGE_LEN);
        let (m2, rk, who) = accept(&b, &m1, |k| k == a.public()).unwrap();
        assert_eq!(&who, a.public());
        assert_eq!(m2.len(), RESPONSE_MESSAGE_LEN);
        let ik = i.finish(&m2).unwrap();
        assert_eq!(ik.binding, rk.binding);
        assert_eq!(ik.join_token, rk.join_token);
        let mut buf = vec![0u8; 64];
        let n = ik
            .send
            .seal(5, sealink_crypto::Scope::Encrypt, b"h", &mut buf, 10)
            .unwrap();
        rk.recv
            .open(5, sealink_crypto::Scope::Encrypt, b"h", &mut buf, n)
            .unwrap();
    }

    #[test]
    fn untrusted_initiator_and_datagram_initiations_are_refused() {
        let a = HostKey::generate().unwrap();
        let b = HostKey::generate().unwrap();
        let (_, m1) = Initiator::new(&a, b.public(), SuiteId::Aes128Gcm, 1).unwrap();
        assert!(matches!(
            accept(&b, &m1, |_| false),
            Err(StreamError::UnknownHost)
        ));
        // A datagram-mode initiation (other prologue) does not verify here.
        let p = InitPayload {
            suite: 1,
            flags: 0,
            timestamp: 1,
            binding: [0; 32],
        };
        let (_, mut dg) = write_init(&a, crate::handshake::PROLOGUE, b.public(), 0, &p).unwrap();
        let tag = Mac1::new(b.public()).compute(&dg);
        dg.extend_from_slice(&tag);
        assert!(matches!(
            accept(&b, &dg, |_| true),
            Err(StreamError::Handshake(_))
        ));
    }

    #[test]
    fn mac1_binds_the_responder_key_and_every_byte() {
        let a = HostKey::generate().unwrap();
        let b = HostKey::generate().unwrap();
        let c = HostKey::generate().unwrap();
        let (_, m1) = Initiator::new(&a, b.public(), SuiteId::Aes128Gcm, 1).unwrap();
        assert_eq!(m1.len(), INIT_MESSAGE_LEN);
        let gate = Mac1::new(b.public());
        assert!(mac1_ok(&gate, &m1));
        assert!(!mac1_ok(&Mac1::new(c.public()), &m1), "another host's key");
        for i in [
            0,
            20,
            NOISE_INIT_LEN - 1,
            NOISE_INIT_LEN,
            INIT_MESSAGE_LEN - 1,
        ] {
            let mut bad = m1.clone();
            bad[i] ^= 1;
            assert!(!mac1_ok(&gate, &bad), "byte {i}");
            assert!(matches!(
                accept(&b, &bad, |_| true),
                Err(StreamError::BadMac1)
            ));
        }
        assert!(!mac1_ok(&gate, &m1[..INIT_MESSAGE_LEN - 1]));
        assert!(!mac1_ok(&gate, &[m1.as_slice(), &[0]].concat()));
        // Without mac1 (the retired kind-1 initiation), even from a trusted host.
        assert!(matches!(
            accept(&b, &m1[..NOISE_INIT_LEN], |_| true),
            Err(StreamError::BadMac1)
        ));
        // The same initiation to the wrong responder fails at mac1, before any Diffie-Hellman.
        assert!(matches!(
            accept(&c, &m1, |_| true),
            Err(StreamError::BadMac1)
        ));
    }
}
