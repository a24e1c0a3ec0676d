//! A whole WireGuard peer of its own (sessions, ChaCha20-Poly1305 through the `chacha20poly1305`
//! crate, an index allocator, drop reasons), on WireGuard's handshake ([`crate::handshake::wg`])
//! and the product's replay window: an independent oracle for tests (checked against
//! wireguard-go in `tests/wg_interop.rs`), not part of the product. One [`WgPeer`] is this
//! host's side of the tunnel with one remote peer. No sockets and no clock reads: the caller
//! passes monotonic time ([`Time`]) and, to make an initiation, wall-clock time since the Unix
//! epoch (for the TAI64N timestamp).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Nonce, Tag};

use crate::handshake::HostKey;
use crate::handshake::cookie::{CookieChecker, CookieGenerator};
use crate::replay::ReplayVerdict;
use crate::time::Time;

use crate::handshake::wg::{
    HandshakeFailed, NO_PSK, TransportKeys, read_initiation, read_response, tai64n,
    write_initiation, write_response,
};
use crate::replay::ReplayWindow;
use crate::wg::message::{
    CookieReply, INITIATION_LEN, Message, ParseError, TAG_LEN, TRANSPORT_HEADER_LEN,
};
use crate::wg::{REJECT_AFTER_MESSAGES, REJECT_AFTER_TIME, REKEY_AFTER_MESSAGES, REKEY_AFTER_TIME};
use crate::wg::{inner_len, message};

/// Why a datagram from the network was refused. Each is counted in [`WgStats::drops`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, thiserror::Error)]
pub enum WgDrop {
    #[error("malformed: {0}")]
    Malformed(ParseError),
    #[error("bad mac1")]
    BadMac1,
    /// Under load, without a valid mac2 and without a source address to send a cookie to.
    #[error("cookie required")]
    CookieRequired,
    #[error("handshake message did not decrypt")]
    HandshakeFailed,
    #[error("initiation from a static key that is not this peer's")]
    UnknownPeer,
    #[error("initiation timestamp not newer than the last accepted")]
    StaleTimestamp,
    #[error("no session or handshake with this receiver index")]
    UnknownIndex,
    #[error("replayed counter")]
    Replayed,
    #[error("counter behind the replay window")]
    TooOld,
    #[error("counter past REJECT_AFTER_MESSAGES")]
    CounterLimit,
    #[error("session older than REJECT_AFTER_TIME")]
    Expired,
    #[error("transport data did not authenticate")]
    Decrypt,
    #[error("cookie reply did not decrypt")]
    BadCookieReply,
    #[error("decrypted packet is not an IP packet that fits")]
    BadInnerPacket,
}

/// Errors returned to the local caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WgError {
    #[error("no confirmed session with this peer: handshake first")]
    NoSession,
    #[error("the session is older than REJECT_AFTER_TIME")]
    SessionExpired,
    #[error("the session has sent REJECT_AFTER_MESSAGES")]
    CounterExhausted,
    #[error("the peer's public key is a small-order point")]
    DegenerateKey,
    #[error("handshake: {0}")]
    Handshake(String),
    #[error(transparent)]
    Crypto(#[from] sealink_crypto::CryptoError),
}

/// Counters of one peer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WgStats {
    pub drops: BTreeMap<WgDrop, u64>,
    pub initiations_sent: u64,
    pub responses_sent: u64,
    pub cookie_replies_sent: u64,
    pub cookies_received: u64,
    pub handshakes_completed: u64,
    pub packets_sent: u64,
    pub packets_received: u64,
    pub keepalives_received: u64,
}

impl WgStats {
    /// Drops counted for `reason`.
    pub fn dropped(&self, reason: WgDrop) -> u64 {
        self.drops.get(&reason).copied().unwrap_or(0)
    }
    /// Drops counted, all reasons.
    pub fn dropped_total(&self) -> u64 {
        self.drops.values().sum()
    }
}

/// What [`WgPeer::receive`] made of a datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WgEvent {
    /// Send this datagram back to the source (a handshake response or a cookie reply).
    Send(Vec<u8>),
    /// Our initiation was answered: a session is up and data may be sent.
    HandshakeComplete,
    /// A cookie for our next initiation was stored (resend the initiation to use it).
    CookieStored,
    /// A decrypted inner IP packet, padding removed.
    Packet(Vec<u8>),
    /// An empty transport message.
    Keepalive,
    /// Refused and counted.
    Dropped(WgDrop),
}

/// One direction-pair of transport keys.
pub(super) struct WgSession {
    local_index: u32,
    remote_index: u32,
    send: ChaCha20Poly1305,
    recv: ChaCha20Poly1305,
    send_counter: u64,
    replay: ReplayWindow,
    born: Time,
    initiator: bool,
}

impl WgSession {
    fn new(
        local_index: u32,
        remote_index: u32,
        keys: TransportKeys,
        initiator: bool,
        now: Time,
    ) -> Self {
        let TransportKeys { send, recv } = keys;
        WgSession {
            local_index,
            remote_index,
            send: ChaCha20Poly1305::new(&send.into()),
            recv: ChaCha20Poly1305::new(&recv.into()),
            send_counter: 0,
            replay: ReplayWindow::new(),
            born: now,
            initiator,
        }
    }
}

/// The AEAD nonce of transport data: 4 zero bytes, then the counter little-endian.
pub(super) fn nonce(counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    n.into()
}

/// Our initiation, waiting for its response.
pub(super) struct Pending {
    hs: snow::HandshakeState,
    local_index: u32,
}

/// What this host knows of one remote WireGuard peer.
#[derive(Clone)]
pub struct WgPeerConfig {
    pub public_key: [u8; 32],
    /// `None`: WireGuard's default, 32 zero bytes.
    pub preshared_key: Option<[u8; 32]>,
}

impl std::fmt::Debug for WgPeerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgPeerConfig")
            .field("public_key", &self.public_key)
            .field("preshared_key", &self.preshared_key.map(|_| "set"))
            .finish()
    }
}

/// This host's side of a WireGuard tunnel with one peer: handshakes both ways, cookies,
/// transport data.
pub struct WgPeer {
    pub(super) local: HostKey,
    remote: [u8; 32],
    psk: [u8; 32],
    /// mac1/mac2 on what we send (keyed by the peer's public key), cookies the peer gives us.
    to_peer: CookieGenerator,
    /// mac1/mac2 on what the peer sends us (keyed by our public key), cookies we give.
    from_peer: CookieChecker,
    pending: Option<Pending>,
    /// The responder's session, until the first transport message under it confirms it.
    next: Option<WgSession>,
    current: Option<WgSession>,
    previous: Option<WgSession>,
    last_timestamp: Option<[u8; 12]>,
    under_load: bool,
    stats: WgStats,
}

impl std::fmt::Debug for WgPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgPeer")
            .field("local", &self.local)
            .field("remote", &self.remote)
            .field("pending", &self.pending.is_some())
            .field("current", &self.current.as_ref().map(|s| s.local_index))
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn random_index() -> Result<u32, WgError> {
    let mut b = [0u8; 4];
    sealink_crypto::sign::random_bytes(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

impl WgPeer {
    /// This host's key `local` and the remote peer `peer`.
    pub fn new(local: HostKey, peer: WgPeerConfig) -> Result<Self, WgError> {
        if crate::handshake::x25519_public_is_degenerate(&peer.public_key) {
            return Err(WgError::DegenerateKey);
        }
        Ok(WgPeer {
            to_peer: CookieGenerator::new(&peer.public_key),
            from_peer: CookieChecker::new(local.public()),
            local,
            remote: peer.public_key,
            psk: peer.preshared_key.unwrap_or(NO_PSK),
            pending: None,
            next: None,
            current: None,
            previous: None,
            last_timestamp: None,
            under_load: false,
            stats: WgStats::default(),
        })
    }

    pub fn stats(&self) -> &WgStats {
        &self.stats
    }

    /// Whether data can be sent now.
    pub fn has_session(&self) -> bool {
        self.current.is_some()
    }

    /// Under load (the caller decides, as wireguard-go does from its handshake queue): an
    /// initiation or response without a valid mac2 is answered with a cookie reply instead.
    pub fn set_under_load(&mut self, under_load: bool) {
        self.under_load = under_load;
    }

    /// Whether the current session should be replaced (REKEY_AFTER_MESSAGES sent, or it is
    /// ours and older than REKEY_AFTER_TIME).
    pub fn needs_rekey(&self, now: Time) -> bool {
        self.current.as_ref().is_none_or(|s| {
            s.send_counter >= REKEY_AFTER_MESSAGES
                || (s.initiator && now.saturating_since(s.born) >= REKEY_AFTER_TIME)
        })
    }

    fn drop(&mut self, reason: WgDrop) -> WgEvent {
        *self.stats.drops.entry(reason).or_default() += 1;
        WgEvent::Dropped(reason)
    }

    fn fresh_index(&self) -> Result<u32, WgError> {
        loop {
            let i = random_index()?;
            let used = [&self.next, &self.current, &self.previous]
                .iter()
                .any(|s| s.as_ref().is_some_and(|s| s.local_index == i));
            if !used {
                return Ok(i);
            }
        }
    }

    /// A handshake initiation (148 bytes) at `now`, timestamped `unix` (wall-clock time since
    /// the Unix epoch). Replaces any initiation still waiting for its response.
    pub fn initiate(&mut self, now: Time, unix: Duration) -> Result<[u8; INITIATION_LEN], WgError> {
        let local_index = self.fresh_index()?;
        let (hs, msg) = write_initiation(
            &self.local,
            &self.remote,
            &self.psk,
            local_index,
            &tai64n(unix),
            &mut self.to_peer,
            now,
        )
        .map_err(WgError::Handshake)?;
        self.pending = Some(Pending { hs, local_index });
        self.stats.initiations_sent += 1;
        Ok(msg)
    }

    /// Handles one datagram from the peer, received at `now` from `src` (`None` where the
    /// driver has no address: then no cookie reply can be made).
    pub fn receive(&mut self, now: Time, src: Option<SocketAddr>, datagram: &[u8]) -> WgEvent {
        match message::parse(datagram) {
            Err(e) => self.drop(WgDrop::Malformed(e)),
            Ok(Message::Initiation(m)) => self.admit(now, src, datagram, m.sender, |p| {
                p.on_initiation(now, datagram, m.sender)
            }),
            Ok(Message::Response(m)) => self.admit(now, src, datagram, m.sender, |p| {
                p.on_response(now, datagram, m.receiver)
            }),
            Ok(Message::CookieReply(m)) => self.on_cookie_reply(now, &m),
            Ok(Message::Transport(t)) => self.on_transport(now, t.receiver, t.counter, t.sealed),
        }
    }

    /// mac1, then (under load) mac2 or a cookie reply, then `then`.
    fn admit(
        &mut self,
        now: Time,
        src: Option<SocketAddr>,
        msg: &[u8],
        sender: u32,
        then: impl FnOnce(&mut Self) -> WgEvent,
    ) -> WgEvent {
        if !self.from_peer.check_mac1(msg) {
            return self.drop(WgDrop::BadMac1);
        }
        if self.under_load {
            let Some(src) = src else {
                return self.drop(WgDrop::CookieRequired);
            };
            if !self.from_peer.check_mac2(now, msg, src) {
                return match self.from_peer.seal_cookie(now, msg, src) {
                    Ok((nonce, cookie_sealed)) => {
                        self.stats.cookie_replies_sent += 1;
                        WgEvent::Send(
                            CookieReply {
                                receiver: sender,
                                nonce,
                                cookie_sealed,
                            }
                            .encode()
                            .to_vec(),
                        )
                    }
                    Err(_) => self.drop(WgDrop::CookieRequired),
                };
            }
        }
        then(self)
    }

    fn on_initiation(&mut self, now: Time, msg: &[u8], sender: u32) -> WgEvent {
        let (hs, remote, ts) = match read_initiation(&self.local, msg) {
            Ok(r) => r,
            Err(d) => return self.drop(d.into()),
        };
        if remote != self.remote {
            return self.drop(WgDrop::UnknownPeer);
        }
        if self.last_timestamp.is_some_and(|last| ts <= last) {
            return self.drop(WgDrop::StaleTimestamp);
        }
        let Ok(local_index) = self.fresh_index() else {
            return self.drop(WgDrop::HandshakeFailed);
        };
        let (resp, keys) =
            match write_response(hs, &self.psk, local_index, sender, &mut self.to_peer, now) {
                Ok(r) => r,
                Err(d) => return self.drop(d.into()),
            };
        self.last_timestamp = Some(ts);
        self.next = Some(WgSession::new(local_index, sender, keys, false, now));
        self.stats.responses_sent += 1;
        WgEvent::Send(resp.to_vec())
    }

    fn on_response(&mut self, now: Time, msg: &[u8], receiver: u32) -> WgEvent {
        if self
            .pending
            .as_ref()
            .is_none_or(|p| p.local_index != receiver)
        {
            return self.drop(WgDrop::UnknownIndex);
        }
        // A failed read leaves snow's state half-mixed: the pending handshake is given up (a
        // new initiation follows after REKEY_TIMEOUT). Only a sender knowing our public key
        // (valid mac1) and the index can cause that.
        let Some(mut p) = self.pending.take() else {
            return self.drop(WgDrop::UnknownIndex);
        };
        let keys = match read_response(&mut p.hs, msg) {
            Ok(k) => k,
            Err(d) => return self.drop(d.into()),
        };
        let sender = u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]);
        let s = WgSession::new(p.local_index, sender, keys, true, now);
        self.previous = self.current.replace(s);
        self.stats.handshakes_completed += 1;
        WgEvent::HandshakeComplete
    }

    fn on_cookie_reply(&mut self, now: Time, m: &CookieReply) -> WgEvent {
        if self
            .pending
            .as_ref()
            .is_none_or(|p| p.local_index != m.receiver)
        {
            return self.drop(WgDrop::UnknownIndex);
        }
        match self.to_peer.consume_sealed(now, &m.nonce, &m.cookie_sealed) {
            Ok(()) => {
                self.stats.cookies_received += 1;
                WgEvent::CookieStored
            }
            Err(_) => self.drop(WgDrop::BadCookieReply),
        }
    }

    fn on_transport(&mut self, now: Time, receiver: u32, counter: u64, sealed: &[u8]) -> WgEvent {
        let slot = [&self.current, &self.next, &self.previous]
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.local_index == receiver));
        let session = match slot {
            Some(0) => self.current.as_mut(),
            Some(1) => self.next.as_mut(),
            Some(_) => self.previous.as_mut(),
            None => None,
        };
        let Some(session) = session else {
            return self.drop(WgDrop::UnknownIndex);
        };
        if now.saturating_since(session.born) >= REJECT_AFTER_TIME {
            return self.drop(WgDrop::Expired);
        }
        if counter >= REJECT_AFTER_MESSAGES {
            return self.drop(WgDrop::CounterLimit);
        }
        match session.replay.check(counter) {
            ReplayVerdict::Fresh => {}
            ReplayVerdict::Replayed => return self.drop(WgDrop::Replayed),
            ReplayVerdict::TooOld => return self.drop(WgDrop::TooOld),
        }
        let body_len = sealed.len() - TAG_LEN;
        let mut plain = sealed[..body_len].to_vec();
        let tag = Tag::from_slice(&sealed[body_len..]);
        if session
            .recv
            .decrypt_in_place_detached(&nonce(counter), &[], &mut plain, tag)
            .is_err()
        {
            return self.drop(WgDrop::Decrypt);
        }
        session.replay.accept(counter);
        if slot == Some(1) {
            // The initiator used the responder's new session: it is confirmed.
            self.previous = self.current.take();
            self.current = self.next.take();
            self.stats.handshakes_completed += 1;
        }
        if plain.is_empty() {
            self.stats.keepalives_received += 1;
            return WgEvent::Keepalive;
        }
        match inner_len(&plain) {
            Some(n) => {
                plain.truncate(n);
                self.stats.packets_received += 1;
                WgEvent::Packet(plain)
            }
            None => self.drop(WgDrop::BadInnerPacket),
        }
    }

    /// Encrypts `packet` (an IP packet; empty for a keepalive) for the peer under the current
    /// session, padded to a multiple of 16 bytes as WireGuard does.
    pub fn encapsulate(&mut self, now: Time, packet: &[u8]) -> Result<Vec<u8>, WgError> {
        let s = self.current.as_mut().ok_or(WgError::NoSession)?;
        if now.saturating_since(s.born) >= REJECT_AFTER_TIME {
            return Err(WgError::SessionExpired);
        }
        if s.send_counter >= REJECT_AFTER_MESSAGES {
            return Err(WgError::CounterExhausted);
        }
        let padded = packet.len().div_ceil(16) * 16;
        let mut out = vec![0u8; TRANSPORT_HEADER_LEN + padded + TAG_LEN];
        let (head, rest) = out.split_at_mut(TRANSPORT_HEADER_LEN);
        let counter = s.send_counter;
        let mut h = [0u8; TRANSPORT_HEADER_LEN];
        message::write_transport_header(&mut h, s.remote_index, counter);
        head.copy_from_slice(&h);
        let (body, tag) = rest.split_at_mut(padded);
        body[..packet.len()].copy_from_slice(packet);
        let t = s
            .send
            .encrypt_in_place_detached(&nonce(counter), &[], body)
            .map_err(|_| WgError::Handshake("seal".into()))?;
        tag.copy_from_slice(&t);
        s.send_counter += 1;
        self.stats.packets_sent += 1;
        Ok(out)
    }

    /// A keepalive: an empty transport message.
    pub fn keepalive(&mut self, now: Time) -> Result<Vec<u8>, WgError> {
        self.encapsulate(now, &[])
    }
}

impl From<HandshakeFailed> for WgDrop {
    fn from(_: HandshakeFailed) -> Self {
        WgDrop::HandshakeFailed
    }
}

#[cfg(test)]
mod tests;
