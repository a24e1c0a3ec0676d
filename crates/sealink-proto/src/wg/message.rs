//! WireGuard's four messages (whitepaper §5.4), parsed strictly: the exact length for the three
//! handshake messages, at least header and tag for transport data, the three reserved bytes
//! zero. Indexes and the counter are little-endian. A parse never panics; each refusal has its
//! own [`ParseError`], which the peer counts (`WgDrop::Malformed` in the test-only reference peer).
//!
//! ```text
//! 1 initiation (148): type 1 | reserved 3 | sender 4 | ephemeral 32 | static 32+16
//!                     | timestamp 12+16 | mac1 16 | mac2 16
//! 2 response (92):    type 2 | reserved 3 | sender 4 | receiver 4 | ephemeral 32 | empty 0+16
//!                     | mac1 16 | mac2 16
//! 3 cookie reply (64): type 3 | reserved 3 | receiver 4 | nonce 24 | cookie 16+16
//! 4 transport (>= 32): type 4 | reserved 3 | receiver 4 | counter 8 | packet n+16
//! ```

pub const MSG_INITIATION: u8 = 1;
pub const MSG_RESPONSE: u8 = 2;
pub const MSG_COOKIE_REPLY: u8 = 3;
pub const MSG_TRANSPORT: u8 = 4;

pub const INITIATION_LEN: usize = 148;
pub const RESPONSE_LEN: usize = 92;
pub const COOKIE_REPLY_LEN: usize = 64;
/// type, reserved, receiver, counter.
pub const TRANSPORT_HEADER_LEN: usize = 16;
/// Poly1305 tag.
pub const TAG_LEN: usize = 16;
/// An empty (keepalive) transport message.
pub const TRANSPORT_MIN_LEN: usize = TRANSPORT_HEADER_LEN + TAG_LEN;

/// The Noise message inside an initiation: ephemeral, sealed static, sealed timestamp.
pub const INITIATION_NOISE: std::ops::Range<usize> = 8..116;
/// The Noise message inside a response: ephemeral, sealed empty payload.
pub const RESPONSE_NOISE: std::ops::Range<usize> = 12..60;

/// Why bytes are not a WireGuard message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, thiserror::Error)]
pub enum ParseError {
    #[error("empty datagram")]
    Empty,
    #[error("unknown message type")]
    UnknownType,
    #[error("reserved bytes not zero")]
    ReservedNotZero,
    #[error("wrong length for an initiation")]
    InitiationLength,
    #[error("wrong length for a response")]
    ResponseLength,
    #[error("wrong length for a cookie reply")]
    CookieReplyLength,
    #[error("transport message shorter than header and tag")]
    TransportTooShort,
}

impl ParseError {
    pub const ALL: [ParseError; 7] = [
        ParseError::Empty,
        ParseError::UnknownType,
        ParseError::ReservedNotZero,
        ParseError::InitiationLength,
        ParseError::ResponseLength,
        ParseError::CookieReplyLength,
        ParseError::TransportTooShort,
    ];
}

/// Type 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initiation {
    pub sender: u32,
    pub ephemeral: [u8; 32],
    pub static_sealed: [u8; 48],
    pub timestamp_sealed: [u8; 28],
    pub mac1: [u8; 16],
    pub mac2: [u8; 16],
}

/// Type 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub sender: u32,
    pub receiver: u32,
    pub ephemeral: [u8; 32],
    pub empty_sealed: [u8; 16],
    pub mac1: [u8; 16],
    pub mac2: [u8; 16],
}

/// Type 3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookieReply {
    pub receiver: u32,
    pub nonce: [u8; 24],
    pub cookie_sealed: [u8; 32],
}

/// Type 4: the header, and the sealed packet (at least the tag) behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transport<'a> {
    pub receiver: u32,
    pub counter: u64,
    pub sealed: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<'a> {
    Initiation(Initiation),
    Response(Response),
    CookieReply(CookieReply),
    Transport(Transport<'a>),
}

/// Copies `N` bytes at `at`; callers have checked the length already.
fn arr<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = b.get(at..at + N) {
        out.copy_from_slice(src);
    }
    out
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(arr(b, at))
}

/// Parses one datagram.
pub fn parse(b: &[u8]) -> Result<Message<'_>, ParseError> {
    let (&kind, rest) = b.split_first().ok_or(ParseError::Empty)?;
    if !(MSG_INITIATION..=MSG_TRANSPORT).contains(&kind) {
        return Err(ParseError::UnknownType);
    }
    // Every message is at least 32 bytes, so three reserved bytes are there when the length
    // is right; check the length first so that a short datagram reports its length.
    let len_ok = match kind {
        MSG_INITIATION => b.len() == INITIATION_LEN,
        MSG_RESPONSE => b.len() == RESPONSE_LEN,
        MSG_COOKIE_REPLY => b.len() == COOKIE_REPLY_LEN,
        _ => b.len() >= TRANSPORT_MIN_LEN,
    };
    if !len_ok {
        return Err(match kind {
            MSG_INITIATION => ParseError::InitiationLength,
            MSG_RESPONSE => ParseError::ResponseLength,
            MSG_COOKIE_REPLY => ParseError::CookieReplyLength,
            _ => ParseError::TransportTooShort,
        });
    }
    if rest.get(..3) != Some(&[0, 0, 0]) {
        return Err(ParseError::ReservedNotZero);
    }
    Ok(match kind {
        MSG_INITIATION => Message::Initiation(Initiation {
            sender: u32_at(b, 4),
            ephemeral: arr(b, 8),
            static_sealed: arr(b, 40),
            timestamp_sealed: arr(b, 88),
            mac1: arr(b, 116),
            mac2: arr(b, 132),
        }),
        MSG_RESPONSE => Message::Response(Response {
            sender: u32_at(b, 4),
            receiver: u32_at(b, 8),
            ephemeral: arr(b, 12),
            empty_sealed: arr(b, 44),
            mac1: arr(b, 60),
            mac2: arr(b, 76),
        }),
        MSG_COOKIE_REPLY => Message::CookieReply(CookieReply {
            receiver: u32_at(b, 4),
            nonce: arr(b, 8),
            cookie_sealed: arr(b, 32),
        }),
        _ => Message::Transport(Transport {
            receiver: u32_at(b, 4),
            counter: u64::from_le_bytes(arr(b, 8)),
            sealed: b.get(TRANSPORT_HEADER_LEN..).unwrap_or_default(),
        }),
    })
}

fn head(kind: u8, out: &mut [u8], index: u32) {
    out[0] = kind;
    out[1..4].fill(0);
    out[4..8].copy_from_slice(&index.to_le_bytes());
}

impl Initiation {
    pub fn encode(&self) -> [u8; INITIATION_LEN] {
        let mut b = [0u8; INITIATION_LEN];
        head(MSG_INITIATION, &mut b, self.sender);
        b[8..40].copy_from_slice(&self.ephemeral);
        b[40..88].copy_from_slice(&self.static_sealed);
        b[88..116].copy_from_slice(&self.timestamp_sealed);
        b[116..132].copy_from_slice(&self.mac1);
        b[132..148].copy_from_slice(&self.mac2);
        b
    }
}

impl Response {
    pub fn encode(&self) -> [u8; RESPONSE_LEN] {
        let mut b = [0u8; RESPONSE_LEN];
        head(MSG_RESPONSE, &mut b, self.sender);
        b[8..12].copy_from_slice(&self.receiver.to_le_bytes());
        b[12..44].copy_from_slice(&self.ephemeral);
        b[44..60].copy_from_slice(&self.empty_sealed);
        b[60..76].copy_from_slice(&self.mac1);
        b[76..92].copy_from_slice(&self.mac2);
        b
    }
}

impl CookieReply {
    pub fn encode(&self) -> [u8; COOKIE_REPLY_LEN] {
        let mut b = [0u8; COOKIE_REPLY_LEN];
        head(MSG_COOKIE_REPLY, &mut b, self.receiver);
        b[8..32].copy_from_slice(&self.nonce);
        b[32..64].copy_from_slice(&self.cookie_sealed);
        b
    }
}

/// Writes a transport header (type 4, `receiver`, `counter`) into the first 16 bytes of `out`.
pub fn write_transport_header(out: &mut [u8; TRANSPORT_HEADER_LEN], receiver: u32, counter: u64) {
    head(MSG_TRANSPORT, out, receiver);
    out[8..16].copy_from_slice(&counter.to_le_bytes());
}

impl Transport<'_> {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; TRANSPORT_HEADER_LEN + self.sealed.len()];
        let mut h = [0u8; TRANSPORT_HEADER_LEN];
        write_transport_header(&mut h, self.receiver, self.counter);
        b[..TRANSPORT_HEADER_LEN].copy_from_slice(&h);
        b[TRANSPORT_HEADER_LEN..].copy_from_slice(self.sealed);
        b
    }
}

impl Message<'_> {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Message::Initiation(m) => m.encode().to_vec(),
            Message::Response(m) => m.encode().to_vec(),
            Message::CookieReply(m) => m.encode().to_vec(),
            Message::Transport(m) => m.encode(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes<const N: usize>() -> impl Strategy<Value = [u8; N]> {
        proptest::collection::vec(any::<u8>(), N).prop_map(|v| {
            let mut a = [0u8; N];
            a.copy_from_slice(&v);
            a
        })
    }

    fn message() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            (
                any::<u32>(),
                bytes::<32>(),
                bytes::<48>(),
                bytes::<28>(),
                bytes::<16>(),
                bytes::<16>()
            )
                .prop_map(
                    |(sender, ephemeral, static_sealed, timestamp_sealed, mac1, mac2)| {
                        Initiation {
                            sender,
                            ephemeral,
                            static_sealed,
                            timestamp_sealed,
                            mac1,
                            mac2,
                        }
                        .encode()
                        .to_vec()
                    }
                ),
            (
                any::<u32>(),
                any::<u32>(),
                bytes::<32>(),
                bytes::<16>(),
                bytes::<16>(),
                bytes::<16>()
            )
                .prop_map(|(sender, receiver, ephemeral, empty_sealed, mac1, mac2)| {
                    Response {
                        sender,
                        receiver,
                        ephemeral,
                        empty_sealed,
                        mac1,
                        mac2,
                    }
                    .encode()
                    .to_vec()
                }),
            (any::<u32>(), bytes::<24>(), bytes::<32>()).prop_map(
                |(receiver, nonce, cookie_sealed)| CookieReply {
                    receiver,
                    nonce,
                    cookie_sealed,
                }
                .encode()
                .to_vec()
            ),
            (
                any::<u32>(),
                any::<u64>(),
                proptest::collection::vec(any::<u8>(), 16..200)
            )
                .prop_map(|(receiver, counter, sealed)| Transport {
                    receiver,
                    counter,
                    sealed: &sealed,
                }
                .encode()),
        ]
    }

    proptest! {
        /// Every encoded message parses back to the same bytes.
        #[test]
        fn round_trip(b in message()) {
            let m = parse(&b).expect("an encoded message parses");
            prop_assert_eq!(m.encode(), b);
        }

        /// Arbitrary bytes never panic; whatever parses re-encodes to the same bytes.
        #[test]
        fn arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(m) = parse(&b) {
                prop_assert_eq!(m.encode(), b);
            }
        }

        /// One flipped reserved byte, one byte more or one less: refused with the right reason.
        #[test]
        fn mutations_refused(b in message(), which in 1usize..4, v in 1u8..=255) {
            let mut r = b.clone();
            r[which] = v;
            prop_assert_eq!(parse(&r), Err(ParseError::ReservedNotZero));
            if b[0] != MSG_TRANSPORT {
                let mut longer = b.clone();
                longer.push(0);
                prop_assert!(parse(&longer).is_err());
                prop_assert!(parse(&b[..b.len() - 1]).is_err());
            }
        }
    }

    #[test]
    fn reasons() {
        assert_eq!(parse(&[]), Err(ParseError::Empty));
        assert_eq!(parse(&[0; 148]), Err(ParseError::UnknownType));
        assert_eq!(parse(&[5; 148]), Err(ParseError::UnknownType));
        let mut i = [0u8; 147];
        i[0] = 1;
        assert_eq!(parse(&i), Err(ParseError::InitiationLength));
        let mut r = [0u8; 93];
        r[0] = 2;
        assert_eq!(parse(&r), Err(ParseError::ResponseLength));
        let mut c = [0u8; 63];
        c[0] = 3;
        assert_eq!(parse(&c), Err(ParseError::CookieReplyLength));
        let mut t = [0u8; 31];
        t[0] = 4;
        assert_eq!(parse(&t), Err(ParseError::TransportTooShort));
        let mut k = [0u8; 32];
        k[0] = 4;
        k[4] = 7;
        k[8] = 9;
        assert_eq!(
            parse(&k),
            Ok(Message::Transport(Transport {
                receiver: 7,
                counter: 9,
                sealed: &[0; 16],
            }))
        );
    }
}
