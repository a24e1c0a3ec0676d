//! The pairing exchange over any byte stream: SPAKE2 on the code, key confirmation both ways,
//! then each side's keys sealed. No sockets, files or clocks here; the caller gives a stream
//! (with its own timeouts) and gets the peer's [`Payload`] or a [`PairError`].
//!
//! Every message is a frame `type (1 byte) | length (u16, big-endian) | body`, the body at most
//! [`MAX_BODY`] bytes and of the exact size its type allows; anything else ends the exchange
//! with an error, never a panic. The order (I = `sealink pair CODE HOST`, L = the listener):
//!
//! ```text
//! I -> L  PAKE     version (2) | SPAKE2 message of side A (33)
//! L -> I  PAKE     version (2) | SPAKE2 message of side B (33)
//! L -> I  CONFIRM  HMAC-SHA-256(confirm key of L, transcript hash)       (32)
//! I -> L  CONFIRM  HMAC-SHA-256(confirm key of I, transcript hash)       (32)
//! I -> L  SEALED   ChaCha20-Poly1305(seal key of I, nonce 0, aad = transcript hash, payload)
//! L -> I  SEALED   ChaCha20-Poly1305(seal key of L, nonce 0, aad = transcript hash, payload)
//! ```
//!
//! The initiator sends its CONFIRM before checking the listener's, so with a wrong code both
//! sides see a confirmation fail and say so; neither has sent a key by then.

use std::io::{Read, Write};

use sealink_crypto::mac::{HMAC_SHA256_LEN, HmacSha256};
use sealink_crypto::{PacketKey, Scope, SuiteId};
use spake2::{Ed25519Group, Identity, Password, Spake2};

use super::PairError;
use super::code::Code;

/// The protocol version both PAKE messages carry.
pub const VERSION: u8 = 2;
/// The largest frame body either side accepts (the largest real one is a sealed payload).
pub const MAX_BODY: usize = 256;
/// SPAKE2 identities: fixed per role, so a message of one role cannot be reflected as the other.
const ID_INITIATOR: &[u8] = b"sealink pair v1 initiator";
const ID_LISTENER: &[u8] = b"sealink pair v1 listener";
/// HKDF salt and the transcript hash's domain label.
const SALT: &[u8] = b"sealink pair v1";
const TRANSCRIPT: &[u8] = b"sealink pair v1 transcript";
/// A SPAKE2 (Ed25519 group) message: side byte and a point.
const PAKE_MSG_LEN: usize = 33;
const MAC_LEN: usize = HMAC_SHA256_LEN;
const TAG_LEN: usize = sealink_crypto::suite::TAG_LEN;
/// Payload: host key, owner key, then the host's name and the owner's, each a length and 1 to
/// 64 bytes (version 2; version 1 had one name for both).
const PAYLOAD_MIN: usize = 32 + 32 + 2 * (1 + 1);
const PAYLOAD_MAX: usize = 32 + 32 + 2 * (1 + crate::trust::MAX_NAME_LEN);

/// Frame types.
const T_PAKE: u8 = 1;
const T_CONFIRM: u8 = 2;
const T_SEALED: u8 = 3;
const T_VERDICT: u8 = 4;
/// A verdict: status (0 accepted, 1 refused) · HMAC-SHA-256(sender's confirm key, "verdict" ·
/// status · TH).
const VERDICT_LEN: usize = 1 + MAC_LEN;

/// Which end of the exchange this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `sealink pair CODE HOST`: connects, SPAKE2 side A.
    Initiator,
    /// `sealink pair`: listens, SPAKE2 side B.
    Listener,
}

/// What each side gives the other: the name to file it under and its two public keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    /// The name the peer files this host's key under.
    pub name: String,
    /// The name the peer files this owner's key under.
    pub owner_name: String,
    pub host: [u8; 32],
    pub owner: [u8; 32],
}

impl Payload {
    /// The payload's bytes, as sealed.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(PAYLOAD_MAX + TAG_LEN);
        v.extend_from_slice(&self.host);
        v.extend_from_slice(&self.owner);
        // Names are checked to be at most 64 bytes before they get here.
        for name in [&self.name, &self.owner_name] {
            v.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
            v.extend_from_slice(name.as_bytes());
        }
        v
    }

    /// Parses and checks a peer's payload: a valid trust-file name and no small-order or
    /// degenerate key (the trust file would refuse them later; here the message is clearer).
    pub fn decode(b: &[u8]) -> Result<Payload, PairError> {
        let bad = |problem: &str| PairError::Malformed {
            stage: "in its keys",
            problem: problem.to_owned(),
        };
        if !(PAYLOAD_MIN..=PAYLOAD_MAX).contains(&b.len()) {
            return Err(bad(&format!("{} bytes of payload", b.len())));
        }
        let (host, rest) = b.split_at(32);
        let (owner, rest) = rest.split_at(32);
        // Two length-prefixed names, the second ending the payload.
        let take = |rest: &'_ [u8]| -> Result<(String, usize), PairError> {
            let len = usize::from(*rest.first().ok_or_else(|| bad("a name is missing"))?);
            let name = rest
                .get(1..1 + len)
                .ok_or_else(|| bad("the name's length is wrong"))?;
            let name = std::str::from_utf8(name)
                .ok()
                .filter(|n| crate::trust::valid_name(n))
                .ok_or_else(|| {
                    bad("the name is not 1 to 64 characters from A-Z a-z 0-9 . _ @ + -")
                })?;
            Ok((name.to_owned(), 1 + len))
        };
        let (name, used) = take(rest)?;
        let rest = &rest[used..];
        let (owner_name, used) = take(rest)?;
        if used != rest.len() {
            return Err(bad("the name's length is wrong"));
        }
        let mut p = Payload {
            name,
            owner_name,
            host: [0; 32],
            owner: [0; 32],
        };
        p.host.copy_from_slice(host);
        p.owner.copy_from_slice(owner);
        if sealink_crypto::x25519_public_is_degenerate(&p.host) {
            return Err(bad("its host key is a degenerate X25519 key"));
        }
        if sealink_crypto::ed25519_public_is_weak(&p.owner) {
            return Err(bad("its owner key is a small-order Ed25519 key"));
        }
        Ok(p)
    }
}

/// The keys of one exchange, from the SPAKE2 key and the transcript. The seal keys are
/// ChaCha20-Poly1305 packet keys used at counter 0 (an all-zero nonce).
struct Keys {
    transcript: [u8; 32],
    confirm_mine: HmacSha256,
    confirm_theirs: HmacSha256,
    seal_mine: PacketKey,
    open_theirs: PacketKey,
}

impl Keys {
    fn derive(
        role: Role,
        spake_key: &[u8],
        pake_a: &[u8],
        pake_b: &[u8],
    ) -> Result<Keys, PairError> {
        let mut t = Vec::with_capacity(TRANSCRIPT.len() + pake_a.len() + pake_b.len());
        t.extend_from_slice(TRANSCRIPT);
        t.extend_from_slice(pake_a);
        t.extend_from_slice(pake_b);
        let transcript = sealink_crypto::hash::sha256(&t);
        let expand = |label: &[u8]| -> Result<zeroize::Zeroizing<[u8; 32]>, PairError> {
            let mut out = zeroize::Zeroizing::new([0u8; 32]);
            sealink_crypto::kdf::hkdf_sha256(SALT, spake_key, label, &mut out[..])
                .map_err(|_| PairError::Crypto)?;
            Ok(out)
        };
        let aead = |k: zeroize::Zeroizing<[u8; 32]>| {
            PacketKey::new(SuiteId::ChaCha20Poly1305, &k[..], false).map_err(|_| PairError::Crypto)
        };
        let (mine, theirs): (&[u8], &[u8]) = match role {
            Role::Initiator => (b"initiator", b"listener"),
            Role::Listener => (b"listener", b"initiator"),
        };
        let label = |what: &[u8], who: &[u8]| [what, b" ", who].concat();
        Ok(Keys {
            transcript,
            confirm_mine: HmacSha256::new(&expand(&label(b"confirm", mine))?[..]),
            confirm_theirs: HmacSha256::new(&expand(&label(b"confirm", theirs))?[..]),
            seal_mine: aead(expand(&label(b"seal", mine))?)?,
            open_theirs: aead(expand(&label(b"seal", theirs))?)?,
        })
    }

    fn confirm(&self) -> Vec<u8> {
        self.confirm_mine.sign(&self.transcript).to_vec()
    }

    /// Constant-time check of the peer's confirmation: a mismatch means the codes differed.
    fn check(&self, tag: &[u8]) -> Result<(), PairError> {
        self.confirm_theirs
            .verify(&self.transcript, tag)
            .map_err(|_| PairError::CodeMismatch)
    }

    fn verdict_mac(key: &HmacSha256, transcript: &[u8; 32], status: u8) -> [u8; MAC_LEN] {
        key.sign(&[&b"verdict"[..], &[status], transcript].concat())
    }

    /// This side's verdict on the peer's keys, authenticated as the confirmations are.
    fn verdict(&self, accepted: bool) -> Vec<u8> {
        let status = u8::from(!accepted);
        let mac = Self::verdict_mac(&self.confirm_mine, &self.transcript, status);
        [&[status][..], &mac[..]].concat()
    }

    /// Whether the peer accepted this side's keys; a forged or altered verdict is an error.
    fn their_verdict(&self, body: &[u8]) -> Result<bool, PairError> {
        let (status, tag) = body.split_first().ok_or(PairError::Tampered)?;
        self.confirm_theirs
            .verify(
                &[&b"verdict"[..], &[*status], &self.transcript].concat(),
                tag,
            )
            .map_err(|_| PairError::Tampered)?;
        match status {
            0 => Ok(true),
            1 => Ok(false),
            s => Err(PairError::Malformed {
                stage: "in its verdict",
                problem: format!("status {s}"),
            }),
        }
    }

    // Nonce 0 is safe: each seal key seals exactly one message, in one exchange.
    fn seal(&self, p: &Payload) -> Result<Vec<u8>, PairError> {
        let mut buf = p.encode();
        let len = buf.len();
        buf.resize(len + TAG_LEN, 0);
        self.seal_mine
            .seal(0, Scope::Encrypt, &self.transcript, &mut buf, len)
            .map_err(|_| PairError::Crypto)?;
        Ok(buf)
    }

    fn open(&self, sealed: &[u8]) -> Result<Payload, PairError> {
        let mut buf = sealed.to_vec();
        let n = self
            .open_theirs
            .open(0, Scope::Encrypt, &self.transcript, &mut buf, sealed.len())
            .map_err(|_| PairError::Tampered)?;
        Payload::decode(&buf[..n])
    }
}

fn io(stage: &'static str) -> impl Fn(std::io::Error) -> PairError {
    move |error| match error.kind() {
        std::io::ErrorKind::UnexpectedEof => PairError::Closed(stage),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => PairError::Timeout(stage),
        _ => PairError::Io { stage, error },
    }
}

fn write_frame<W: Write>(
    w: &mut W,
    t: u8,
    body: &[u8],
    stage: &'static str,
) -> Result<(), PairError> {
    let len = u16::try_from(body.len()).map_err(|_| PairError::Crypto)?;
    let mut f = Vec::with_capacity(3 + body.len());
    f.push(t);
    f.extend_from_slice(&len.to_be_bytes());
    f.extend_from_slice(body);
    w.write_all(&f).and_then(|()| w.flush()).map_err(io(stage))
}

/// Reads one frame of type `want` whose body is `len` bytes long (an exact size, or a range).
fn read_frame<R: Read>(
    r: &mut R,
    want: u8,
    len: std::ops::RangeInclusive<usize>,
    stage: &'static str,
) -> Result<Vec<u8>, PairError> {
    let mut head = [0u8; 3];
    r.read_exact(&mut head).map_err(io(stage))?;
    let bad = |problem: String| PairError::Malformed { stage, problem };
    if head[0] != want {
        return Err(bad(format!(
            "a message of type {} where type {want} was due (not a sealink pair peer?)",
            head[0]
        )));
    }
    let n = usize::from(u16::from_be_bytes([head[1], head[2]]));
    if n > MAX_BODY || !len.contains(&n) {
        return Err(bad(format!("a message of {n} bytes")));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body).map_err(io(stage))?;
    Ok(body)
}

fn pake_body(msg: &[u8]) -> Vec<u8> {
    [&[VERSION][..], msg].concat()
}

fn read_pake<R: Read>(r: &mut R, stage: &'static str) -> Result<Vec<u8>, PairError> {
    // Any length up to the limit, so that another version is named rather than mis-sized.
    let body = read_frame(r, T_PAKE, 1..=MAX_BODY, stage)?;
    if body[0] != VERSION {
        return Err(PairError::Version(body[0]));
    }
    if body.len() != 1 + PAKE_MSG_LEN {
        return Err(PairError::Malformed {
            stage,
            problem: format!("a SPAKE2 message of {} bytes", body.len() - 1),
        });
    }
    Ok(body)
}

fn finish(
    spake: Spake2<Ed25519Group>,
    their_body: &[u8],
    stage: &'static str,
) -> Result<Vec<u8>, PairError> {
    spake
        .finish(&their_body[1..])
        .map_err(|e| PairError::Malformed {
            stage,
            problem: format!("SPAKE2: {e}"),
        })
}

fn start(code: &Code, role: Role) -> (Spake2<Ed25519Group>, Vec<u8>) {
    let pw = Password::new(code.text());
    let (a, b) = (Identity::new(ID_INITIATOR), Identity::new(ID_LISTENER));
    // Fresh randomness per run (OsRng): a recorded exchange replayed later meets a new
    // listener secret, and its confirmation no longer matches.
    match role {
        Role::Initiator => Spake2::<Ed25519Group>::start_a(&pw, &a, &b),
        Role::Listener => Spake2::<Ed25519Group>::start_b(&pw, &a, &b),
    }
}

const SEALED_LEN: std::ops::RangeInclusive<usize> = PAYLOAD_MIN + TAG_LEN..=PAYLOAD_MAX + TAG_LEN;

/// Both verdicts, this side's sent first when `first`: the peer's payload if both accepted.
fn verdicts<S: Read + Write>(
    s: &mut S,
    keys: &Keys,
    theirs: Payload,
    refusal: Option<String>,
    first: bool,
) -> Result<Payload, PairError> {
    let send = |s: &mut S| {
        write_frame(
            s,
            T_VERDICT,
            &keys.verdict(refusal.is_none()),
            "sending this side's verdict",
        )
    };
    if first {
        send(s)?;
    }
    let body = read_frame(
        s,
        T_VERDICT,
        VERDICT_LEN..=VERDICT_LEN,
        "waiting for the peer's verdict",
    )?;
    if !first {
        send(s)?;
    }
    let accepted = keys.their_verdict(&body)?;
    match refusal {
        Some(why) => Err(PairError::Refused(why)),
        None if !accepted => Err(PairError::PeerRefused),
        None => Ok(theirs),
    }
}

/// The initiator's side of the exchange: returns the listener's payload once both sides have
/// accepted the other's (`check` says whether this side does: `Err(why)` refuses).
pub fn initiate<S: Read + Write>(
    s: &mut S,
    code: &Code,
    mine: &Payload,
    check: impl FnOnce(&Payload) -> Result<(), String>,
) -> Result<Payload, PairError> {
    let (spake, msg) = start(code, Role::Initiator);
    let pake_a = pake_body(&msg);
    write_frame(s, T_PAKE, &pake_a, "sending the SPAKE2 message")?;
    let pake_b = read_pake(s, "waiting for the listener's SPAKE2 message")?;
    let key = finish(spake, &pake_b, "in its SPAKE2 message")?;
    let keys = Keys::derive(Role::Initiator, &key, &pake_a, &pake_b)?;
    let their_confirm = read_frame(
        s,
        T_CONFIRM,
        MAC_LEN..=MAC_LEN,
        "waiting for the listener's confirmation",
    )?;
    // Sent before checking theirs, so the listener learns of a wrong code too.
    write_frame(s, T_CONFIRM, &keys.confirm(), "sending the confirmation")?;
    keys.check(&their_confirm)?;
    write_frame(s, T_SEALED, &keys.seal(mine)?, "sending this side's keys")?;
    let sealed = read_frame(s, T_SEALED, SEALED_LEN, "waiting for the listener's keys")?;
    let theirs = keys.open(&sealed)?;
    let refusal = check(&theirs).err();
    verdicts(s, &keys, theirs, refusal, true)
}

/// The listener's side of the exchange: returns the initiator's payload once both sides have
/// accepted the other's (see [`initiate`]).
pub fn respond<S: Read + Write>(
    s: &mut S,
    code: &Code,
    mine: &Payload,
    check: impl FnOnce(&Payload) -> Result<(), String>,
) -> Result<Payload, PairError> {
    let pake_a = read_pake(s, "waiting for the SPAKE2 message")?;
    let (spake, msg) = start(code, Role::Listener);
    let pake_b = pake_body(&msg);
    let key = finish(spake, &pake_a, "in its SPAKE2 message")?;
    let keys = Keys::derive(Role::Listener, &key, &pake_a, &pake_b)?;
    write_frame(s, T_PAKE, &pake_b, "sending the SPAKE2 message")?;
    write_frame(s, T_CONFIRM, &keys.confirm(), "sending the confirmation")?;
    let their_confirm = read_frame(
        s,
        T_CONFIRM,
        MAC_LEN..=MAC_LEN,
        "waiting for the peer's confirmation",
    )?;
    keys.check(&their_confirm)?;
    let sealed = read_frame(s, T_SEALED, SEALED_LEN, "waiting for the peer's keys")?;
    let theirs = keys.open(&sealed)?;
    write_frame(s, T_SEALED, &keys.seal(mine)?, "sending this side's keys")?;
    let refusal = check(&theirs).err();
    verdicts(s, &keys, theirs, refusal, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn payload(name: &str, seed: u8) -> Payload {
        // Real public keys: a degenerate or small-order one would be refused.
        let host = sealink_crypto::kx::x25519_public_key(&[seed; 32]).unwrap();
        let owner = sealink_crypto::sign::OwnerSigningKey::from_seed(&[seed; 32])
            .unwrap()
            .public_key();
        Payload {
            name: name.into(),
            owner_name: format!("{name}-owner"),
            host,
            owner,
        }
    }

    fn run(code_i: &str, code_l: &str) -> (Result<Payload, PairError>, Result<Payload, PairError>) {
        run_checked(code_i, code_l, [true, true])
    }

    /// `accept`: whether the initiator and the listener accept the other's keys.
    fn run_checked(
        code_i: &str,
        code_l: &str,
        accept: [bool; 2],
    ) -> (Result<Payload, PairError>, Result<Payload, PairError>) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let (ci, cl) = (Code::parse(code_i).unwrap(), Code::parse(code_l).unwrap());
        let check = |ok: bool| move |_: &Payload| if ok { Ok(()) } else { Err("no".to_owned()) };
        let l =
            std::thread::spawn(move || respond(&mut b, &cl, &payload("bee", 2), check(accept[1])));
        let i = initiate(&mut a, &ci, &payload("ant", 1), check(accept[0]));
        drop(a);
        (i, l.join().unwrap())
    }

    #[test]
    fn a_refusal_on_either_side_fails_both() {
        for accept in [[false, true], [true, false], [false, false]] {
            let (i, l) = run_checked("7-guitar-ocean", "7-guitar-ocean", accept);
            for (r, ok_here) in [(i, accept[0]), (l, accept[1])] {
                match (r, ok_here) {
                    (Err(PairError::Refused(w)), false) => assert_eq!(w, "no"),
                    (Err(PairError::PeerRefused), true) => {}
                    (r, _) => panic!("{accept:?}: {r:?}"),
                }
            }
        }
    }

    #[test]
    fn a_forged_verdict_is_refused() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let code = Code::parse("7-guitar-ocean").unwrap();
        let c2 = code;
        // The listener's real exchange, up to and with its verdict: then its verdict's status
        // byte is flipped in transit (refused -> accepted).
        let l = std::thread::spawn(move || {
            respond(&mut b, &c2, &payload("bee", 2), |_| Err("no".to_owned()))
        });
        let keys_side = initiate(
            &mut Flip {
                inner: &mut a,
                frames: 0,
            },
            &code,
            &payload("ant", 1),
            |_| Ok(()),
        );
        assert!(
            matches!(keys_side, Err(PairError::Tampered)),
            "{keys_side:?}"
        );
        drop(a);
        let _ = l.join().unwrap();
    }

    /// Flips the status byte of the fourth frame read (the listener's verdict).
    struct Flip<'a> {
        inner: &'a mut UnixStream,
        frames: usize,
    }

    impl Read for Flip<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.inner.read(buf)?;
            // Frames are read head first (3 bytes), then the body: count heads of type 4.
            if n == 3 && buf[0] == T_VERDICT {
                self.frames += 1;
            } else if self.frames == 1 && n == VERDICT_LEN {
                buf[0] ^= 1;
                self.frames += 1;
            }
            Ok(n)
        }
    }

    impl Write for Flip<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.inner.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.inner.flush()
        }
    }

    /// Version 2's payload carries the host's and the owner's names; one name only (version
    /// 1's shape), a name cut short or bytes after the second are refused.
    #[test]
    fn payloads_carry_both_names() {
        let p = payload("b", 3);
        let enc = p.encode();
        assert_eq!(Payload::decode(&enc).unwrap(), p);
        assert_eq!(Payload::decode(&enc).unwrap().owner_name, "b-owner");
        let v1 = &enc[..32 + 32 + 1 + 1];
        assert!(Payload::decode(v1).is_err());
        assert!(Payload::decode(&enc[..enc.len() - 1]).is_err());
        let mut long = enc.clone();
        long.push(b'x');
        assert!(Payload::decode(&long).is_err());
    }

    #[test]
    fn same_code_exchanges_payloads() {
        let (i, l) = run("7-guitar-ocean", "7-guitar-ocean");
        assert_eq!(i.unwrap(), payload("bee", 2));
        assert_eq!(l.unwrap(), payload("ant", 1));
    }

    #[test]
    fn wrong_code_fails_on_both_sides() {
        let (i, l) = run("7-guitar-ocean", "8-guitar-ocean");
        assert!(matches!(i, Err(PairError::CodeMismatch)), "{i:?}");
        assert!(matches!(l, Err(PairError::CodeMismatch)), "{l:?}");
    }

    #[test]
    fn garbage_and_oversized_frames_are_errors_not_panics() {
        let code = Code::parse("7-guitar-ocean").unwrap();
        for input in [
            vec![],
            vec![1],
            vec![1, 0xff, 0xff],
            vec![9, 0, 1, 0],
            vec![1, 0, 1, 2],
            vec![1, 0, 2, 1, 0x41],
            [vec![1, 0, 34, 1], vec![0x41; 33]].concat(),
            [vec![1, 0, 34, 1, 0x42], vec![0; 32]].concat(),
        ] {
            let (mut a, mut b) = UnixStream::pair().unwrap();
            a.write_all(&input).unwrap();
            a.shutdown(std::net::Shutdown::Write).unwrap();
            let r = respond(&mut b, &code, &payload("bee", 2), |_| Ok(()));
            assert!(r.is_err(), "{input:?}");
        }
        assert!(matches!(
            Payload::decode(&[0u8; 70]),
            Err(PairError::Malformed { .. })
        ));
        let mut p = payload("ant", 1).encode();
        p[64] = 9;
        assert!(matches!(
            Payload::decode(&p),
            Err(PairError::Malformed { .. })
        ));
    }
}
