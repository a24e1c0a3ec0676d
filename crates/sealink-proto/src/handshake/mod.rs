//! Channel establishment: a Noise IK handshake (snow), one round trip. The initiator knows the
//! responder's static key from its trust set; the responder learns and checks the initiator's.
//! The handshake payloads negotiate the suite and say whether this handshake continues an
//! existing channel (a rekey) or starts a new one.
//!
//! Datagram initiations (ADP channels and tunnels) end with mac1 and mac2
//! ([`crate::handshake::cookie`]); stream mode sends the bare Noise message over its TCP connection.
//!
//! Every Diffie-Hellman result is checked for all zeros ([`ZeroCheckingResolver`]): a peer
//! that offers a small-order point as its static or ephemeral key is refused
//! ([`DropReason::DegenerateKey`]) instead of deriving keys from a known secret.

pub mod cookie;
pub mod ratelimit;
pub(crate) mod state;
pub mod wg;

use sealink_crypto::SuiteId;
pub use sealink_crypto::weak_keys::{ed25519_public_is_weak, x25519_public_is_degenerate};
use snow::params::{CipherChoice, DHChoice, HashChoice};
use snow::resolvers::{BoxedCryptoResolver, CryptoResolver, DefaultResolver};
use snow::types::{Cipher, Dh, Hash, Random};

use crate::error::DropReason;
use crate::handshake::cookie::{CookieGenerator, MAC_LEN};
pub(crate) use crate::session::Split;
use crate::time::Time;
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
/// The Noise message of an initiation: header, e (32), encrypted s (32 + 16), encrypted
/// payload (+16). Stream mode sends exactly this.
pub const NOISE_INIT_LEN: usize = HEADER_LEN + 32 + 48 + INIT_PAYLOAD_LEN + 16;
/// A datagram initiation: the Noise message, mac1 and mac2.
pub const INIT_LEN: usize = NOISE_INIT_LEN + 2 * MAC_LEN;
/// Header, e (32), encrypted payload (+16).
pub const RESP_LEN: usize = HEADER_LEN + 32 + RESP_PAYLOAD_LEN + 16;

/// A host's static X25519 key pair.
#[derive(Clone)]
pub struct HostKey {
    pub(crate) private: [u8; 32],
    pub(crate) public: [u8; 32],
}

impl Drop for HostKey {
    fn drop(&mut self) {
        // The static private key must not outlive its holder in freed memory.
        zeroize::Zeroize::zeroize(&mut self.private);
    }
}

sealink_crypto::debug_showing!(HostKey { public });

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
    /// The private key itself (for WireGuard's UAPI `get`, which reports it to root).
    pub fn private(&self) -> &[u8; 32] {
        &self.private
    }
    pub fn public(&self) -> &[u8; 32] {
        &self.public
    }
}

fn params() -> snow::params::NoiseParams {
    // The constant parses; a failure here would be a build defect caught by every test.
    NOISE_PARAMS.parse().expect("valid noise params")
}

/// snow's default primitives, except X25519, which is AWS-LC's ([`FastDh`]); every X25519
/// result is checked for all zeros.
///
/// Why the output and not the peer's keys: RFC 7748 §6.1 recommends exactly this check, and an
/// all-zero result is what every small-order point gives (our scalars are clamped to multiples
/// of the cofactor), whatever its encoding (top bit set, non-canonical u), so one check in one
/// place covers all four exchanges of the pattern (es, ss, ee, se) on both sides. snow does not
/// make it itself, and a handshake whose exchanges gave zeros has keys an attacker can compute
/// without any private key (an initiator "owning" the all-zero static key, for instance).
#[derive(Debug, Clone, Copy, Default)]
pub struct ZeroCheckingResolver;

impl CryptoResolver for ZeroCheckingResolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        DefaultResolver.resolve_rng()
    }
    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        let inner: Box<dyn Dh> = match choice {
            DHChoice::Curve25519 => Box::new(FastDh::default()),
            _ => DefaultResolver.resolve_dh(choice)?,
        };
        Some(Box::new(NonZeroDh(inner)))
    }
    fn resolve_hash(&self, choice: &HashChoice) -> Option<Box<dyn Hash>> {
        DefaultResolver.resolve_hash(choice)
    }
    fn resolve_cipher(&self, choice: &CipherChoice) -> Option<Box<dyn Cipher>> {
        DefaultResolver.resolve_cipher(choice)
    }
}

/// X25519 for snow through AWS-LC ([`sealink_crypto::kx::X25519Key`]): less than half of
/// curve25519-dalek's time per exchange on x86-64, and a handshake's responder makes four. The
/// key is made once per [`Dh::set`] or [`Dh::generate`], not per exchange.
#[derive(Default)]
struct FastDh {
    private: zeroize::Zeroizing<[u8; 32]>,
    key: Option<sealink_crypto::kx::X25519Key>,
}

impl FastDh {
    fn load(&mut self, private: [u8; 32]) {
        *self.private = private;
        // Any 32 bytes are a key (clamped by the exchange); a failure leaves none, and every
        // exchange then fails.
        self.key = sealink_crypto::kx::X25519Key::new(&private).ok();
    }
}

impl Dh for FastDh {
    fn name(&self) -> &'static str {
        "25519"
    }
    fn pub_len(&self) -> usize {
        32
    }
    fn priv_len(&self) -> usize {
        32
    }
    fn set(&mut self, privkey: &[u8]) {
        let mut k = [0u8; 32];
        let n = privkey.len().min(32);
        k[..n].copy_from_slice(&privkey[..n]);
        self.load(k);
    }
    fn generate(&mut self, rng: &mut dyn Random) -> Result<(), snow::Error> {
        let mut k = [0u8; 32];
        rng.try_fill_bytes(&mut k)?;
        self.load(k);
        Ok(())
    }
    fn pubkey(&self) -> &[u8] {
        self.key.as_ref().map_or(&[0u8; 32], |k| k.public())
    }
    fn privkey(&self) -> &[u8] {
        &self.private[..]
    }
    fn dh(&self, pubkey: &[u8], out: &mut [u8]) -> Result<(), snow::Error> {
        let peer: &[u8; 32] = pubkey
            .get(..32)
            .and_then(|p| p.try_into().ok())
            .ok_or(snow::Error::Dh)?;
        let key = self.key.as_ref().ok_or(snow::Error::Dh)?;
        // AWS-LC refuses an all-zero result itself; NonZeroDh around this checks it too.
        let secret = key.exchange(peer).map_err(|_| snow::Error::Dh)?;
        let n = out.len().min(32);
        out[..n].copy_from_slice(&secret[..n]);
        Ok(())
    }
}

struct NonZeroDh(Box<dyn Dh>);

impl Dh for NonZeroDh {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn pub_len(&self) -> usize {
        self.0.pub_len()
    }
    fn priv_len(&self) -> usize {
        self.0.priv_len()
    }
    fn set(&mut self, privkey: &[u8]) {
        self.0.set(privkey)
    }
    fn generate(&mut self, rng: &mut dyn Random) -> Result<(), snow::Error> {
        self.0.generate(rng)
    }
    fn pubkey(&self) -> &[u8] {
        self.0.pubkey()
    }
    fn privkey(&self) -> &[u8] {
        self.0.privkey()
    }
    fn dh_len(&self) -> usize {
        self.0.dh_len()
    }
    fn dh(&self, pubkey: &[u8], out: &mut [u8]) -> Result<(), snow::Error> {
        self.0.dh(pubkey, out)?;
        let n = self.dh_len().min(out.len());
        // Without an early exit: the time taken does not depend on the secret.
        if out[..n].iter().fold(0u8, |acc, b| acc | b) == 0 {
            return Err(snow::Error::Dh);
        }
        Ok(())
    }
}

fn builder(resolver: BoxedCryptoResolver) -> snow::Builder<'static> {
    snow::Builder::with_resolver(params(), resolver)
}

/// A failed `read_message`: a zero exchange is told apart from a mere decryption failure.
fn read_error(e: snow::Error) -> DropReason {
    match e {
        snow::Error::Dh => DropReason::DegenerateKey,
        _ => DropReason::HandshakeFailed,
    }
}

/// Initiation flag (payload byte 1, bit 0): the initiator accepts data datagrams that carry a
/// lane number in the header's byte 3 (the tunnel's receive steering, `docs/PROTOCOL.md`).
pub(crate) const INIT_FLAG_LANES: u8 = 1;
/// The initiation flags a responder understands; any other bit set refuses the initiation.
const INIT_FLAGS_KNOWN: u8 = INIT_FLAG_LANES;
/// Response flags (payload byte 1): bit 0, the channel continues; bit 1, the responder accepts
/// lane numbers too (only ever set in answer to an initiation that offered them).
const RESP_FLAG_CONTINUES: u8 = 1;
const RESP_FLAG_LANES: u8 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InitPayload {
    pub suite: u8,
    /// [`INIT_FLAG_LANES`] or 0.
    pub flags: u8,
    pub timestamp: u64,
    pub binding: [u8; 32],
}

impl InitPayload {
    fn encode(&self, sender_index: u32) -> [u8; INIT_PAYLOAD_LEN] {
        let mut b = [0u8; INIT_PAYLOAD_LEN];
        b[0] = self.suite;
        b[1] = self.flags;
        b[2..10].copy_from_slice(&self.timestamp.to_le_bytes());
        b[10..42].copy_from_slice(&self.binding);
        b[42..46].copy_from_slice(&sender_index.to_le_bytes());
        b
    }
    fn decode(b: &[u8], sender_index: u32) -> Option<Self> {
        if b.len() != INIT_PAYLOAD_LEN
            || b[1] & !INIT_FLAGS_KNOWN != 0
            || b[42..46] != sender_index.to_le_bytes()
        {
            return None;
        }
        Some(InitPayload {
            suite: b[0],
            flags: b[1],
            timestamp: u64::from_le_bytes(b[2..10].try_into().ok()?),
            binding: b[10..42].try_into().ok()?,
        })
    }
}

fn finish(hs: &mut snow::HandshakeState) -> Option<Split> {
    let hash: [u8; 32] = hs.get_handshake_hash().get(..32)?.try_into().ok()?;
    let (a, b) = hs.dangerously_get_raw_split();
    let (send, recv) = if hs.is_initiator() { (a, b) } else { (b, a) };
    Some(Split { send, recv, hash })
}

/// Builds the Noise message of an initiation ([`NOISE_INIT_LEN`] bytes, no MACs: stream mode);
/// returns the handshake state to finish with the response. Refuses a degenerate `remote`.
pub(crate) fn write_init(
    host: &HostKey,
    prologue: &[u8],
    remote: &[u8; 32],
    sender_index: u32,
    payload: &InitPayload,
) -> Result<(snow::HandshakeState, Vec<u8>), crate::Error> {
    write_init_with(
        Box::new(ZeroCheckingResolver),
        host,
        prologue,
        remote,
        sender_index,
        payload,
        NOISE_INIT_LEN,
    )
}

/// Builds a datagram initiation ([`INIT_LEN`] bytes: the Noise message, then mac1 and mac2 from
/// `cookies`, the generator of the peer `remote`).
pub(crate) fn write_datagram_init(
    host: &HostKey,
    prologue: &[u8],
    remote: &[u8; 32],
    sender_index: u32,
    payload: &InitPayload,
    cookies: &mut CookieGenerator,
    now: Time,
) -> Result<(snow::HandshakeState, Vec<u8>), crate::Error> {
    let (hs, mut pkt) = write_init(host, prologue, remote, sender_index, payload)?;
    // The same Noise message, then zeroed room for the MACs, which `add_macs` fills in.
    pkt.resize(INIT_LEN, 0);
    cookies.add_macs(now, &mut pkt);
    Ok((hs, pkt))
}

fn write_init_with(
    resolver: BoxedCryptoResolver,
    host: &HostKey,
    prologue: &[u8],
    remote: &[u8; 32],
    sender_index: u32,
    payload: &InitPayload,
    len: usize,
) -> Result<(snow::HandshakeState, Vec<u8>), crate::Error> {
    if x25519_public_is_degenerate(remote) {
        return Err(crate::Error::DegenerateKey);
    }
    let err = |e: snow::Error| match e {
        snow::Error::Dh => crate::Error::DegenerateKey,
        e => crate::Error::Handshake(e.to_string()),
    };
    let mut hs = builder(resolver)
        .local_private_key(&host.private)
        .map_err(err)?
        .remote_public_key(remote)
        .map_err(err)?
        .prologue(prologue)
        .map_err(err)?
        .build_initiator()
        .map_err(err)?;
    let mut pkt = vec![0u8; len];
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
    debug_assert_eq!(n, NOISE_INIT_LEN - HEADER_LEN);
    Ok((hs, pkt))
}

/// Reads the Noise message of an initiation addressed to `host` ([`NOISE_INIT_LEN`] bytes: a
/// datagram's MACs are checked and cut off first, by [`crate::handshake::cookie::HandshakeGuard`]);
/// returns the state, the initiator's static key and its payload.
pub(crate) fn read_init(
    host: &HostKey,
    prologue: &[u8],
    pkt: &[u8],
) -> Result<(snow::HandshakeState, [u8; 32], InitPayload), DropReason> {
    if pkt.len() != NOISE_INIT_LEN {
        return Err(DropReason::MalformedHeader);
    }
    let sender_index = match crate::wire::parse_header(pkt)? {
        Header::Init { sender } => sender,
        _ => return Err(DropReason::MalformedHeader),
    };
    let mut hs = builder(Box::new(ZeroCheckingResolver))
        .local_private_key(&host.private)
        .and_then(|b| b.prologue(prologue))
        .and_then(|b| b.build_responder())
        .map_err(|_| DropReason::HandshakeFailed)?;
    let mut payload = [0u8; NOISE_INIT_LEN];
    let n = hs
        .read_message(&pkt[HEADER_LEN..], &mut payload)
        .map_err(read_error)?;
    let p = InitPayload::decode(&payload[..n], sender_index).ok_or(DropReason::HandshakeFailed)?;
    let rs: [u8; 32] = hs
        .get_remote_static()
        .and_then(|s| s.try_into().ok())
        .ok_or(DropReason::HandshakeFailed)?;
    Ok((hs, rs, p))
}

/// Writes the response (`lanes`: we accept lane numbers, said only to an initiation that
/// offered them); returns the datagram and the finished keys.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_response(
    mut hs: snow::HandshakeState,
    receiver: u32,
    sender: u32,
    suite: SuiteId,
    continues: bool,
    lanes: bool,
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
    payload[1] =
        if continues { RESP_FLAG_CONTINUES } else { 0 } | if lanes { RESP_FLAG_LANES } else { 0 };
    payload[2..6].copy_from_slice(&receiver.to_le_bytes());
    payload[6..10].copy_from_slice(&sender.to_le_bytes());
    payload[10..18].copy_from_slice(&newest_own_init.to_le_bytes());
    hs.write_message(&payload, body).map_err(read_error)?;
    let split = finish(&mut hs).ok_or(DropReason::HandshakeFailed)?;
    Ok((pkt, split))
}

/// What a response says.
pub(crate) struct Response {
    pub suite: u8,
    pub continues: bool,
    /// The responder accepts lane numbers.
    pub lanes: bool,
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
        .map_err(read_error)?;
    if n != RESP_PAYLOAD_LEN
        || payload[1] & !(RESP_FLAG_CONTINUES | RESP_FLAG_LANES) != 0
        || payload[2..6] != receiver.to_le_bytes()
        || payload[6..10] != sender.to_le_bytes()
    {
        return Err(DropReason::HandshakeFailed);
    }
    let split = finish(hs).ok_or(DropReason::HandshakeFailed)?;
    Ok(Response {
        suite: payload[0],
        continues: payload[1] & RESP_FLAG_CONTINUES != 0,
        lanes: payload[1] & RESP_FLAG_LANES != 0,
        newest_peer_init: u64::from_le_bytes(
            payload[10..18]
                .try_into()
                .map_err(|_| DropReason::HandshakeFailed)?,
        ),
        split,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Two fresh hosts and an initiation payload for a new channel.
    fn two_hosts() -> (HostKey, HostKey, InitPayload) {
        let p = InitPayload {
            suite: 1,
            flags: 0,
            timestamp: 5,
            binding: [0; 32],
        };
        (
            HostKey::generate().unwrap(),
            HostKey::generate().unwrap(),
            p,
        )
    }

    #[test]
    fn handshake_agrees_on_keys() {
        let (a, b, p) = two_hosts();
        let (mut ihs, init) = write_init(&a, PROLOGUE, b.public(), 11, &p).unwrap();
        assert_eq!(init.len(), NOISE_INIT_LEN);
        let (rhs, rs, got) = read_init(&b, PROLOGUE, &init).unwrap();
        assert_eq!(&rs, a.public());
        assert_eq!(got, p);
        let (resp, rsplit) =
            write_response(rhs, 11, 22, SuiteId::Aes128Gcm, false, false, 77).unwrap();
        assert_eq!(resp.len(), RESP_LEN);
        let r = read_response(&mut ihs, &resp).unwrap();
        assert_eq!((r.suite, r.continues, r.newest_peer_init), (1, false, 77));
        let isplit = r.split;
        assert_eq!(isplit.send, rsplit.recv);
        assert_eq!(isplit.recv, rsplit.send);
        assert_eq!(isplit.hash, rsplit.hash);
        assert_ne!(isplit.send, isplit.recv);
    }

    /// The lanes offer travels in the initiation and its answer in the response; an
    /// initiation with a flag bit no responder knows is refused, as older responders refuse
    /// the lanes offer itself.
    #[test]
    fn lanes_are_offered_and_answered_and_unknown_flags_refused() {
        let (a, b, p) = two_hosts();
        for answer in [false, true] {
            let offer = InitPayload {
                flags: INIT_FLAG_LANES,
                ..p
            };
            let (mut ihs, init) = write_init(&a, PROLOGUE, b.public(), 11, &offer).unwrap();
            let (rhs, _, got) = read_init(&b, PROLOGUE, &init).unwrap();
            assert_eq!(got.flags, INIT_FLAG_LANES);
            let (resp, _) =
                write_response(rhs, 11, 22, SuiteId::Aes128Gcm, answer, answer, 0).unwrap();
            let r = read_response(&mut ihs, &resp).unwrap();
            assert_eq!((r.continues, r.lanes), (answer, answer));
        }
        for unknown in [2u8, 4, 0x80, 0xff] {
            let bad = InitPayload {
                flags: unknown,
                ..p
            };
            let (_, init) = write_init(&a, PROLOGUE, b.public(), 11, &bad).unwrap();
            assert_eq!(
                read_init(&b, PROLOGUE, &init).err(),
                Some(DropReason::HandshakeFailed),
                "flags {unknown:#x}"
            );
        }
    }

    #[test]
    fn wrong_responder_key_fails() {
        let a = HostKey::generate().unwrap();
        let b = HostKey::generate().unwrap();
        let c = HostKey::generate().unwrap();
        let p = InitPayload {
            suite: 1,
            flags: 0,
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

    /// An attacker's X25519: with the marker private key it claims a public key of our choice
    /// (a small-order point, for which it knows every exchange gives zeros); otherwise snow's.
    struct Forger(Box<dyn Dh>, Option<[u8; 32]>);
    const MARKER: [u8; 32] = [0xAA; 32];

    impl Dh for Forger {
        fn name(&self) -> &'static str {
            self.0.name()
        }
        fn pub_len(&self) -> usize {
            32
        }
        fn priv_len(&self) -> usize {
            32
        }
        fn set(&mut self, k: &[u8]) {
            self.0.set(k);
            self.1 = (k == MARKER).then_some(self.1.unwrap_or([0; 32]));
        }
        fn generate(&mut self, rng: &mut dyn Random) -> Result<(), snow::Error> {
            self.1 = None;
            self.0.generate(rng)
        }
        fn pubkey(&self) -> &[u8] {
            match &self.1 {
                Some(p) => p,
                None => self.0.pubkey(),
            }
        }
        fn privkey(&self) -> &[u8] {
            self.0.privkey()
        }
        fn dh(&self, pubkey: &[u8], out: &mut [u8]) -> Result<(), snow::Error> {
            if self.1.is_some() {
                out[..32].fill(0);
                return Ok(());
            }
            self.0.dh(pubkey, out)
        }
    }

    struct ForgingResolver([u8; 32]);
    impl CryptoResolver for ForgingResolver {
        fn resolve_rng(&self) -> Option<Box<dyn Random>> {
            DefaultResolver.resolve_rng()
        }
        fn resolve_dh(&self, c: &DHChoice) -> Option<Box<dyn Dh>> {
            let inner = DefaultResolver.resolve_dh(c)?;
            Some(Box::new(Forger(inner, Some(self.0))))
        }
        fn resolve_hash(&self, c: &HashChoice) -> Option<Box<dyn Hash>> {
            DefaultResolver.resolve_hash(c)
        }
        fn resolve_cipher(&self, c: &CipherChoice) -> Option<Box<dyn Cipher>> {
            DefaultResolver.resolve_cipher(c)
        }
    }

    /// A datagram initiation from a host claiming the small-order static key `claimed`, made
    /// without any private key (valid MACs: the responder's public key is public).
    pub(crate) fn forged_init(
        responder: &[u8; 32],
        claimed: [u8; 32],
        prologue: &[u8],
        sender_index: u32,
        timestamp: u64,
        now: Time,
    ) -> Vec<u8> {
        let host = HostKey {
            private: MARKER,
            public: claimed,
        };
        let p = InitPayload {
            suite: SuiteId::Aes128Gcm as u8,
            flags: 0,
            timestamp,
            binding: [0; 32],
        };
        let (_, mut pkt) = write_init_with(
            Box::new(ForgingResolver(claimed)),
            &host,
            prologue,
            responder,
            sender_index,
            &p,
            INIT_LEN,
        )
        .unwrap();
        CookieGenerator::new(responder).add_macs(now, &mut pkt);
        pkt
    }

    #[test]
    fn an_initiator_claiming_a_small_order_static_key_is_refused() {
        let b = HostKey::generate().unwrap();
        for claimed in [[0u8; 32], {
            let mut k = [0xffu8; 32];
            k[0] = 0xec;
            k[31] = 0x7f;
            k
        }] {
            let init = forged_init(b.public(), claimed, PROLOGUE, 5, 9, Time::ZERO);
            assert_eq!(
                read_init(&b, PROLOGUE, &init[..NOISE_INIT_LEN]).err(),
                Some(DropReason::DegenerateKey),
                "{claimed:02x?}"
            );
        }
    }

    #[test]
    fn initiating_towards_a_small_order_key_is_refused() {
        let a = HostKey::generate().unwrap();
        let p = InitPayload {
            suite: 1,
            flags: 0,
            timestamp: 5,
            binding: [0; 32],
        };
        for remote in [[0u8; 32], {
            let mut k = [0u8; 32];
            k[0] = 1;
            k
        }] {
            assert_eq!(
                write_init(&a, PROLOGUE, &remote, 1, &p).err(),
                Some(crate::Error::DegenerateKey)
            );
        }
    }

    #[test]
    fn a_response_with_a_small_order_ephemeral_is_refused() {
        let (a, b, p) = two_hosts();
        let (mut ihs, init) = write_init(&a, PROLOGUE, b.public(), 11, &p).unwrap();
        let (rhs, _, _) = read_init(&b, PROLOGUE, &init).unwrap();
        let (mut resp, _) =
            write_response(rhs, 11, 22, SuiteId::Aes128Gcm, false, false, 0).unwrap();
        resp[HEADER_LEN..HEADER_LEN + 32].fill(0);
        assert_eq!(
            read_response(&mut ihs, &resp).err(),
            Some(DropReason::DegenerateKey)
        );
    }
}
