//! Handshake flood protection with MACs and cookies, after WireGuard (wireguard-go
//! `device/cookie.go`), shared by the datagram endpoint and the tunnel core; stream mode's
//! initiations carry the same mac1 alone ([`Mac1`]).
//!
//! Every initiation ends with two 16-byte MACs (layout: docs/PROTOCOL.md §3):
//! * `mac1 = MAC(HASH("mac1----" || responder_static_pub), bytes before mac1)`: anyone who knows
//!   the responder's public key can make it, but junk cannot; the responder checks it before
//!   anything else, so spoofed junk costs one BLAKE2s and no limiter token.
//! * `mac2 = MAC(cookie, bytes before mac2)`, or zeros without a cookie. The cookie is
//!   `MAC(secret, source address)` for a random secret the responder replaces every
//!   [`COOKIE_SECRET_LIFETIME`]; the responder sends it, encrypted, only to the address the
//!   initiation came from, so a valid mac2 proves the initiator receives there.
//!
//! MAC is keyed BLAKE2s with a 16-byte output, HASH is BLAKE2s-256, and the cookie travels
//! sealed with XChaCha20-Poly1305 under `HASH("cookie--" || responder_static_pub)` with the
//! initiation's mac1 as associated data (so only the initiator that sent that initiation
//! accepts it). The key lasts as long as the host key, so nonces must never repeat: each is a
//! 16-byte random prefix, drawn with each cookie secret, and a 64-bit counter (WireGuard draws
//! all 24 bytes per reply; this spares a call to the system's generator per reply under a
//! flood, and 128 random bits per secret keep prefixes from ever meeting). All primitives come from RustCrypto's `blake2` and
//! `chacha20poly1305`, already used by snow.
//!
//! [`HandshakeGuard`] is the responder's admission step: mac1, then two [`HandshakeLimiter`]s.
//! An initiation with a valid mac2 spends a token of the *proven* limiter (its source address is
//! real, so per-address limits are fair). One without spends a token of the *unproven* limiter
//! while that has tokens for its source; once it has none (the source, or the host as a whole,
//! is **under load**) it is not processed but answered with a cookie reply. A peer whose address
//! is spoofed by a flooder so keeps its handshakes: the flooder drains only the unproven bucket
//! of that address, the peer is sent a cookie, and its retry with mac2 uses the proven bucket,
//! which nobody without the peer's address can reach.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use blake2::digest::consts::U16;
use blake2::digest::{Digest, Mac};
use blake2::{Blake2s256, Blake2sMac};
use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{Tag, XChaCha20Poly1305, XNonce};

use crate::error::DropReason;
use crate::handshake::ratelimit::{HandshakeLimiter, LimiterConfig};
use crate::time::Time;
use crate::wire::{HEADER_LEN, Header, write_header};

/// Bytes of mac1 and of mac2.
pub const MAC_LEN: usize = 16;
/// Bytes of a cookie.
pub const COOKIE_LEN: usize = 16;
/// Bytes of a cookie reply's XChaCha20-Poly1305 nonce.
pub const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// Header (type 4, the initiation's sender index), nonce (24), sealed cookie (16 + 16).
pub const COOKIE_REPLY_LEN: usize = HEADER_LEN + NONCE_LEN + COOKIE_LEN + TAG_LEN;
/// How long a cookie secret is used before a fresh one replaces it (WireGuard's
/// `CookieRefreshTime`); an initiator uses a received cookie for as long.
pub const COOKIE_SECRET_LIFETIME: Duration = Duration::from_secs(120);

const LABEL_MAC1: &[u8] = b"mac1----";
const LABEL_COOKIE: &[u8] = b"cookie--";

fn hash_label(label: &[u8], public: &[u8; 32]) -> [u8; 32] {
    Blake2s256::new()
        .chain_update(label)
        .chain_update(public)
        .finalize()
        .into()
}

/// Keyed BLAKE2s-128. The keys here are 16 or 32 bytes, which BLAKE2s always accepts.
fn mac(key: &[u8], data: &[u8]) -> Option<Blake2sMac<U16>> {
    <Blake2sMac<U16> as Mac>::new_from_slice(key)
        .ok()
        .map(|m| m.chain_update(data))
}

fn mac_bytes(key: &[u8], data: &[u8]) -> Option<[u8; MAC_LEN]> {
    mac(key, data).map(|m| m.finalize().into_bytes().into())
}

/// Constant-time check of `tag` against the MAC of `data`.
fn mac_ok(key: &[u8], data: &[u8], tag: &[u8]) -> bool {
    mac(key, data).is_some_and(|m| m.verify_slice(tag).is_ok())
}

/// Offsets of mac1 and mac2 in a message that ends with both.
fn mac_offsets(len: usize) -> Option<(usize, usize)> {
    let mac2 = len.checked_sub(MAC_LEN)?;
    let mac1 = mac2.checked_sub(MAC_LEN)?;
    (mac1 >= HEADER_LEN).then_some((mac1, mac2))
}

/// The bytes a cookie is bound to: the source IP (IPv4-mapped IPv6 as IPv4) and port.
fn address_bytes(src: SocketAddr, out: &mut [u8; 18]) -> &[u8] {
    let port = src.port().to_be_bytes();
    match canonical_ip(src.ip()) {
        IpAddr::V4(v4) => {
            out[..4].copy_from_slice(&v4.octets());
            out[4..6].copy_from_slice(&port);
            &out[..6]
        }
        IpAddr::V6(v6) => {
            out[..16].copy_from_slice(&v6.octets());
            out[16..18].copy_from_slice(&port);
            &out[..18]
        }
    }
}

/// IPv4-mapped IPv6 sources count as their IPv4 address (one host, one bucket, one cookie).
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// mac1 on its own, for stream mode: its initiations arrive over TCP, whose handshake already
/// proves the source address, so they carry the same mac1 (same key, same MAC) and no mac2.
#[derive(Clone)]
pub struct Mac1 {
    key: [u8; 32],
}

impl std::fmt::Debug for Mac1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mac1").finish_non_exhaustive()
    }
}

impl Mac1 {
    /// For messages to the host whose static public key is `responder_public`.
    pub fn new(responder_public: &[u8; 32]) -> Self {
        Mac1 {
            key: hash_label(LABEL_MAC1, responder_public),
        }
    }

    /// The mac1 of `covered` (every byte before the tag).
    pub fn compute(&self, covered: &[u8]) -> [u8; MAC_LEN] {
        // A 32-byte key is always accepted, so the fallback is never taken.
        mac_bytes(&self.key, covered).unwrap_or([0; MAC_LEN])
    }

    /// Whether `tag` is the mac1 of `covered` (constant time).
    pub fn verify(&self, covered: &[u8], tag: &[u8]) -> bool {
        tag.len() == MAC_LEN && mac_ok(&self.key, covered, tag)
    }
}

/// The responder's side: checks mac1 and mac2 and makes cookie replies.
pub struct CookieChecker {
    mac1_key: [u8; 32],
    seal_key: [u8; 32],
    secret: [u8; 32],
    /// When `secret` was drawn; `None` until the first cookie is needed.
    secret_born: Option<Time>,
    /// Nonces: a random prefix drawn with the secret, then a counter.
    nonce_prefix: [u8; 16],
    nonce_counter: u64,
}

sealink_crypto::debug_showing!(CookieChecker { secret_born });

impl CookieChecker {
    /// For the host whose static public key is `own_public`.
    pub fn new(own_public: &[u8; 32]) -> Self {
        CookieChecker {
            mac1_key: hash_label(LABEL_MAC1, own_public),
            seal_key: hash_label(LABEL_COOKIE, own_public),
            secret: [0; 32],
            secret_born: None,
            nonce_prefix: [0; 16],
            nonce_counter: 0,
        }
    }

    /// Whether `msg` (ending with mac1 and mac2) carries a valid mac1 for this host.
    pub fn check_mac1(&self, msg: &[u8]) -> bool {
        let Some((m1, m2)) = mac_offsets(msg.len()) else {
            return false;
        };
        mac_ok(&self.mac1_key, &msg[..m1], &msg[m1..m2])
    }

    fn secret_live(&self, now: Time) -> bool {
        self.secret_born
            .is_some_and(|b| now.saturating_since(b) < COOKIE_SECRET_LIFETIME)
    }

    fn cookie(&self, src: SocketAddr) -> Option<[u8; COOKIE_LEN]> {
        let mut a = [0u8; 18];
        mac_bytes(&self.secret, address_bytes(src, &mut a))
    }

    /// Whether `msg` carries a valid mac2 for a cookie this host gave `src` under its current
    /// secret.
    pub fn check_mac2(&self, now: Time, msg: &[u8], src: SocketAddr) -> bool {
        let Some((_, m2)) = mac_offsets(msg.len()) else {
            return false;
        };
        if !self.secret_live(now) {
            return false;
        }
        self.cookie(src)
            .is_some_and(|c| mac_ok(&c, &msg[..m2], &msg[m2..]))
    }

    /// The cookie reply to initiation `msg` (sender index `sender`) from `src`; draws a fresh
    /// secret when the current one has expired.
    pub fn write_reply(
        &mut self,
        now: Time,
        msg: &[u8],
        sender: u32,
        src: SocketAddr,
    ) -> Result<[u8; COOKIE_REPLY_LEN], crate::Error> {
        let bad = || crate::Error::Handshake("cookie reply".into());
        let (nonce, sealed) = self.seal_cookie(now, msg, src)?;
        let mut out = [0u8; COOKIE_REPLY_LEN];
        let (h, rest) = out.split_at_mut(HEADER_LEN);
        write_header(
            &Header::CookieReply { receiver: sender },
            h.try_into().map_err(|_| bad())?,
        );
        rest[..NONCE_LEN].copy_from_slice(&nonce);
        rest[NONCE_LEN..].copy_from_slice(&sealed);
        Ok(out)
    }

    /// The body of a cookie reply to `msg` (ending with mac1 and mac2) from `src`: the nonce
    /// and the cookie sealed under it with `msg`'s mac1 as associated data. Shared by sealink's
    /// reply and WireGuard's ([`crate::wg`]), whose headers differ.
    pub fn seal_cookie(
        &mut self,
        now: Time,
        msg: &[u8],
        src: SocketAddr,
    ) -> Result<([u8; NONCE_LEN], [u8; COOKIE_LEN + TAG_LEN]), crate::Error> {
        let bad = || crate::Error::Handshake("cookie reply".into());
        let (m1, m2) = mac_offsets(msg.len()).ok_or_else(bad)?;
        if !self.secret_live(now) || self.nonce_counter == u64::MAX {
            sealink_crypto::sign::random_bytes(&mut self.secret)?;
            sealink_crypto::sign::random_bytes(&mut self.nonce_prefix)?;
            self.nonce_counter = 0;
            self.secret_born = Some(now);
        }
        let cookie = self.cookie(src).ok_or_else(bad)?;
        let mut nonce = [0u8; NONCE_LEN];
        nonce[..16].copy_from_slice(&self.nonce_prefix);
        nonce[16..].copy_from_slice(&self.nonce_counter.to_le_bytes());
        self.nonce_counter += 1;
        let mut sealed = [0u8; COOKIE_LEN + TAG_LEN];
        let (body, tag) = sealed.split_at_mut(COOKIE_LEN);
        body.copy_from_slice(&cookie);
        let t = XChaCha20Poly1305::new(&self.seal_key.into())
            .encrypt_in_place_detached(XNonce::from_slice(&nonce), &msg[m1..m2], body)
            .map_err(|_| bad())?;
        tag.copy_from_slice(&t);
        Ok((nonce, sealed))
    }
}

/// The initiator's side, one per peer: adds mac1 and mac2 and takes the peer's cookies.
pub struct CookieGenerator {
    mac1_key: [u8; 32],
    seal_key: [u8; 32],
    cookie: Option<([u8; COOKIE_LEN], Time)>,
    /// mac1 of the last initiation sent: a cookie reply must be bound to it.
    last_mac1: Option<[u8; MAC_LEN]>,
}

impl std::fmt::Debug for CookieGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CookieGenerator")
            .field("has_cookie", &self.cookie.is_some())
            .finish_non_exhaustive()
    }
}

impl CookieGenerator {
    /// For initiations to the host whose static public key is `remote_public`.
    pub fn new(remote_public: &[u8; 32]) -> Self {
        CookieGenerator {
            mac1_key: hash_label(LABEL_MAC1, remote_public),
            seal_key: hash_label(LABEL_COOKIE, remote_public),
            cookie: None,
            last_mac1: None,
        }
    }

    /// Whether a cookie younger than [`COOKIE_SECRET_LIFETIME`] is held.
    pub fn has_cookie(&self, now: Time) -> bool {
        self.live_cookie(now).is_some()
    }

    fn live_cookie(&self, now: Time) -> Option<[u8; COOKIE_LEN]> {
        self.cookie
            .filter(|(_, at)| now.saturating_since(*at) < COOKIE_SECRET_LIFETIME)
            .map(|(c, _)| c)
    }

    /// Writes mac1 and mac2 (zeros without a live cookie) into the last 32 bytes of `msg`.
    pub fn add_macs(&mut self, now: Time, msg: &mut [u8]) {
        let Some((m1, m2)) = mac_offsets(msg.len()) else {
            return;
        };
        let mac1 = mac_bytes(&self.mac1_key, &msg[..m1]).unwrap_or([0; MAC_LEN]);
        msg[m1..m2].copy_from_slice(&mac1);
        self.last_mac1 = Some(mac1);
        let mac2 = self
            .live_cookie(now)
            .and_then(|c| mac_bytes(&c, &msg[..m2]))
            .unwrap_or([0; MAC_LEN]);
        msg[m2..].copy_from_slice(&mac2);
    }

    /// Takes the cookie out of a reply to our last initiation.
    pub fn consume_reply(&mut self, now: Time, reply: &[u8]) -> Result<(), DropReason> {
        if reply.len() != COOKIE_REPLY_LEN {
            return Err(DropReason::MalformedHeader);
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&reply[HEADER_LEN..HEADER_LEN + NONCE_LEN]);
        let mut sealed = [0u8; COOKIE_LEN + TAG_LEN];
        sealed.copy_from_slice(&reply[HEADER_LEN + NONCE_LEN..]);
        self.consume_sealed(now, &nonce, &sealed)
    }

    /// Takes the cookie out of a reply's body (nonce, sealed cookie), bound to the mac1 of the
    /// last message this generator added MACs to. Shared with [`crate::wg`].
    pub fn consume_sealed(
        &mut self,
        now: Time,
        nonce: &[u8; NONCE_LEN],
        sealed: &[u8; COOKIE_LEN + TAG_LEN],
    ) -> Result<(), DropReason> {
        let last_mac1 = self.last_mac1.ok_or(DropReason::BadCookieReply)?;
        let mut cookie = [0u8; COOKIE_LEN];
        cookie.copy_from_slice(&sealed[..COOKIE_LEN]);
        XChaCha20Poly1305::new(&self.seal_key.into())
            .decrypt_in_place_detached(
                XNonce::from_slice(nonce),
                &last_mac1,
                &mut cookie,
                Tag::from_slice(&sealed[COOKIE_LEN..]),
            )
            .map_err(|_| DropReason::BadCookieReply)?;
        self.cookie = Some((cookie, now));
        Ok(())
    }
}

/// What [`HandshakeGuard::admit`] decides about an initiation (`R`: the cookie reply, sealink's
/// by default; [`HandshakeGuard::admit_with`] builds another).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission<R = Box<[u8; COOKIE_REPLY_LEN]>> {
    /// Do the handshake work.
    Process,
    /// Refuse it without any public-key work, for this reason.
    Drop(DropReason),
    /// Under load and without a valid mac2: send this cookie reply to the source instead (the
    /// initiation counts as [`DropReason::CookieRequired`]).
    Cookie(R),
}

/// The responder's admission step for initiations: mac1, mac2 and the two limiters (see the
/// module documentation). Memory: at most `max_sources` buckets in each limiter.
#[derive(Debug)]
pub struct HandshakeGuard {
    checker: CookieChecker,
    unproven: HandshakeLimiter,
    proven: HandshakeLimiter,
    /// When the next refusal of an untrusted key may be logged ([`HandshakeGuard::untrusted`]),
    /// and the refusals not logged since the last line.
    untrusted_log: (Option<Time>, u64),
}

/// At most one line per this long about refused untrusted keys.
pub const UNTRUSTED_LOG_EVERY: Duration = Duration::from_secs(10);

impl HandshakeGuard {
    pub fn new(own_public: &[u8; 32], cfg: LimiterConfig) -> Self {
        HandshakeGuard {
            checker: CookieChecker::new(own_public),
            unproven: HandshakeLimiter::new(cfg),
            proven: HandshakeLimiter::new(cfg),
            untrusted_log: (None, 0),
        }
    }

    /// An initiation that passed mac1 and the limits came from a host key we do not trust:
    /// logged at info, as sshd logs a refused key, with the key itself (public) so that it can
    /// be trusted if it should be. One line per [`UNTRUSTED_LOG_EVERY`] at most: whoever knows
    /// our public key can have every initiation the limiters admit refused; the next line
    /// counts those left out (all are counted as `unknown-host` drops). Whether a line was
    /// logged.
    pub fn untrusted(&mut self, now: Time, src: Option<SocketAddr>, key: &[u8; 32]) -> bool {
        use base64::Engine as _;
        let (next, unlogged) = &mut self.untrusted_log;
        if next.is_some_and(|t| now < t) {
            *unlogged += 1;
            return false;
        }
        *next = Some(now + UNTRUSTED_LOG_EVERY);
        let key = base64::engine::general_purpose::STANDARD.encode(key);
        let from = src.map_or_else(|| "an unknown address".to_owned(), |a| a.to_string());
        let more = std::mem::take(unlogged);
        if more > 0 {
            tracing::warn!(
                "refused a handshake from {from}: host key {key} is not trusted ({more} more \
                 refused since the last such line)"
            );
        } else {
            tracing::warn!("refused a handshake from {from}: host key {key} is not trusted");
        }
        true
    }

    pub fn config(&self) -> &LimiterConfig {
        self.unproven.config()
    }

    /// Decides about the initiation `msg` (whole datagram, header already parsed as an
    /// initiation) from `src`. Without a source address (a driver that has none, such as the
    /// simulator) only mac1 is checked. `room_for_reply` false (the caller's queue of replies
    /// is full): refused as rate-limited instead of making a cookie reply.
    pub fn admit(
        &mut self,
        now: Time,
        src: Option<SocketAddr>,
        msg: &[u8],
        room_for_reply: bool,
    ) -> Admission {
        self.admit_with(now, src, msg, room_for_reply, |checker, now, msg, src| {
            let sender = match crate::wire::parse_header(msg) {
                Ok(Header::Init { sender }) => sender,
                _ => return Err(DropReason::MalformedHeader),
            };
            checker
                .write_reply(now, msg, sender, src)
                .map(Box::new)
                .map_err(|_| DropReason::RateLimited)
        })
    }

    /// [`HandshakeGuard::admit`] with the cookie reply built by `reply` (WireGuard's has its own
    /// header: `sealink_proto::tunnel`'s WireGuard wire builds it).
    pub fn admit_with<R>(
        &mut self,
        now: Time,
        src: Option<SocketAddr>,
        msg: &[u8],
        room_for_reply: bool,
        reply: impl FnOnce(&mut CookieChecker, Time, &[u8], SocketAddr) -> Result<R, DropReason>,
    ) -> Admission<R> {
        self.admit_busy(now, src, msg, room_for_reply, false, reply)
    }

    /// [`HandshakeGuard::admit_with`], where `busy` (the driver's handshake queue is busy, as
    /// wireguard-go's `IsUnderLoad`) puts the whole host under load: every initiation without a
    /// valid mac2 gets a cookie reply instead of the public-key work, whatever its source's
    /// unproven bucket holds, and one with a valid mac2 is limited by its source's proven
    /// bucket alone (the queue bounds them all together).
    pub fn admit_busy<R>(
        &mut self,
        now: Time,
        src: Option<SocketAddr>,
        msg: &[u8],
        room_for_reply: bool,
        busy: bool,
        reply: impl FnOnce(&mut CookieChecker, Time, &[u8], SocketAddr) -> Result<R, DropReason>,
    ) -> Admission<R> {
        if !self.checker.check_mac1(msg) {
            return Admission::Drop(DropReason::BadMac1);
        }
        let Some(src) = src else {
            return Admission::Process;
        };
        let ip = canonical_ip(src.ip());
        if self.checker.check_mac2(now, msg, src) {
            // While the driver's queue is busy, it bounds the work of all sources together:
            // a proven source is limited by its own bucket only (wireguard-go's rule), so that
            // a storm of real peers, each sent a cookie, is not refused by the global bucket.
            let allowed = if busy {
                self.proven.allow_source(now, ip)
            } else {
                self.proven.allow(now, ip)
            };
            return if allowed {
                Admission::Process
            } else {
                Admission::Drop(DropReason::RateLimited)
            };
        }
        if !busy && self.unproven.allow(now, ip) {
            return Admission::Process;
        }
        if !room_for_reply {
            return Admission::Drop(DropReason::RateLimited);
        }
        match reply(&mut self.checker, now, msg, src) {
            Ok(r) => Admission::Cookie(r),
            Err(d) => Admission::Drop(d),
        }
    }

    /// mac1 of a message to us (a WireGuard response, which the limiters do not cover).
    pub fn check_mac1(&self, msg: &[u8]) -> bool {
        self.checker.check_mac1(msg)
    }

    /// Source addresses with a bucket now, in both limiters together (at most twice
    /// `max_sources`).
    pub fn tracked_sources(&self) -> usize {
        self.unproven.tracked_sources() + self.proven.tracked_sources()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INIT: usize = 100;

    fn msg(fill: u8) -> Vec<u8> {
        let mut m = vec![fill; INIT];
        write_header(
            &Header::Init { sender: 77 },
            (&mut m[..HEADER_LEN]).try_into().unwrap(),
        );
        m
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn untrusted_keys_are_logged_once_per_interval() {
        let mut g = HandshakeGuard::new(&[9; 32], LimiterConfig::default());
        let from = Some(sa("192.0.2.7:51820"));
        let t0 = Time::from_millis(1_000);
        assert!(g.untrusted(t0, from, &[1; 32]), "the first is logged");
        for k in 0..100u64 {
            assert!(!g.untrusted(t0 + Duration::from_millis(k * 90), from, &[2; 32]));
        }
        assert_eq!(
            g.untrusted_log.1, 100,
            "left out, counted for the next line"
        );
        assert!(g.untrusted(t0 + UNTRUSTED_LOG_EVERY, None, &[3; 32]));
        assert_eq!(g.untrusted_log.1, 0);
    }

    #[test]
    fn mac1_binds_the_responder_key_and_every_byte() {
        let (kb, kc) = ([2u8; 32], [3u8; 32]);
        let mut g = CookieGenerator::new(&kb);
        let mut m = msg(9);
        g.add_macs(Time::ZERO, &mut m);
        assert!(CookieChecker::new(&kb).check_mac1(&m));
        assert!(!CookieChecker::new(&kc).check_mac1(&m));
        for i in 0..INIT - MAC_LEN {
            let mut bad = m.clone();
            bad[i] ^= 1;
            assert!(!CookieChecker::new(&kb).check_mac1(&bad), "byte {i}");
        }
        // mac2 is outside mac1's coverage (it is added after a cookie arrives).
        assert!(!CookieChecker::new(&kb).check_mac1(&m[..20]));
    }

    #[test]
    fn mac1_alone_is_the_same_mac_as_the_datagram_one() {
        let (kb, kc) = ([1u8; 32], [2u8; 32]);
        let mut m = msg(5);
        CookieGenerator::new(&kb).add_macs(Time::ZERO, &mut m);
        let (m1, m2) = mac_offsets(m.len()).unwrap();
        let one = Mac1::new(&kb);
        assert_eq!(one.compute(&m[..m1]), m[m1..m2]);
        assert!(one.verify(&m[..m1], &m[m1..m2]));
        assert!(!Mac1::new(&kc).verify(&m[..m1], &m[m1..m2]));
        assert!(!one.verify(&m[..m1 - 1], &m[m1..m2]));
        assert!(!one.verify(&m[..m1], &m[m1..m2 - 1]), "short tag");
        assert!(!one.verify(&m[..m1], &[0; MAC_LEN]));
    }

    #[test]
    fn cookie_round_trip_is_bound_to_the_address_and_the_initiation() {
        let kb = [2u8; 32];
        let now = Time::from_millis(10);
        let mut checker = CookieChecker::new(&kb);
        let mut g = CookieGenerator::new(&kb);
        let mut m = msg(1);
        g.add_macs(now, &mut m);
        let a = sa("192.0.2.1:4000");
        assert!(!checker.check_mac2(now, &m, a), "no cookie yet");
        let reply = checker.write_reply(now, &m, 77, a).unwrap();
        assert_eq!(
            crate::wire::parse_header(&reply),
            Ok(Header::CookieReply { receiver: 77 })
        );
        // A reply for another initiation (another mac1) is refused.
        let mut other = CookieGenerator::new(&kb);
        other.add_macs(now, &mut msg(2));
        assert_eq!(
            other.consume_reply(now, &reply),
            Err(DropReason::BadCookieReply)
        );
        let mut tampered = reply;
        tampered[HEADER_LEN + 30] ^= 1;
        assert_eq!(
            g.consume_reply(now, &tampered),
            Err(DropReason::BadCookieReply)
        );
        g.consume_reply(now, &reply).unwrap();
        let mut retry = msg(1);
        g.add_macs(now, &mut retry);
        assert!(checker.check_mac1(&retry));
        assert!(checker.check_mac2(now, &retry, a));
        // The cookie is worth nothing from another address, or another port.
        assert!(!checker.check_mac2(now, &retry, sa("192.0.2.2:4000")));
        assert!(!checker.check_mac2(now, &retry, sa("192.0.2.1:4001")));
        // Nor once the secret has expired.
        let later = now + COOKIE_SECRET_LIFETIME;
        assert!(!checker.check_mac2(later, &retry, a));
        // IPv4-mapped IPv6 is the same source.
        assert!(checker.check_mac2(now, &retry, sa("[::ffff:192.0.2.1]:4000")));
    }
}
