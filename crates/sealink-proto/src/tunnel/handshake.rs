//! The tunnel's handshakes: starting, retrying, answering, and cookie replies.

use std::net::SocketAddr;
use std::time::Duration;

use sealink_crypto::SuiteId;

use crate::endpoint::MAX_PENDING_COOKIE_REPLIES;
use crate::error::DropReason;
use crate::handshake::cookie::Admission;
use crate::handshake::state::{Answered, Handshake, InitiateError};
use crate::handshake::{self, HostKey, INIT_FLAG_LANES, InitPayload, TUNNEL_PROLOGUE};
use crate::session::Session;
use crate::time::Time;
use crate::wire::{Header, parse_header};

use super::config::Wire;
use super::offpath::{InitJob, InitKind};
use super::recv::Decap;
use super::stats::TunnelDrop;
use super::{PeerIndex, TUNNEL_KEYS, Tunnel};

/// An initiation on sealink's wire, read (its Noise message: the public-key work) with no
/// access to the tunnel's state but the host key.
pub(super) struct SealinkInit {
    hs: Box<snow::HandshakeState>,
    remote: [u8; 32],
    payload: InitPayload,
    sender: u32,
}

/// Reads an admitted initiation (`buf`: the whole datagram, its MACs checked) with `host`.
pub(super) fn read_sealink_init(host: &HostKey, buf: &[u8]) -> Result<SealinkInit, TunnelDrop> {
    let noise = buf
        .get(..handshake::NOISE_INIT_LEN)
        .ok_or(DropReason::MalformedHeader)?;
    let (hs, remote, payload) = handshake::read_init(host, TUNNEL_PROLOGUE, noise)?;
    let sender = match parse_header(buf)? {
        Header::Init { sender } => sender,
        _ => return Err(DropReason::MalformedHeader.into()),
    };
    Ok(SealinkInit {
        hs: Box::new(hs),
        remote,
        payload,
        sender,
    })
}

/// An initiation checked against its peer, with an index for the response: the response's
/// public-key work ([`SealinkPrepared::write`]) needs nothing else.
pub(super) struct SealinkPrepared {
    pi: usize,
    hs: Box<snow::HandshakeState>,
    sender: u32,
    suite: SuiteId,
    lanes: bool,
    local: u32,
    last_ts_sent: u64,
}

/// A response written, for [`Tunnel::init_commit`].
pub(super) struct SealinkWritten {
    pi: usize,
    local: u32,
    answered: Result<Answered, DropReason>,
}

impl SealinkPrepared {
    /// The response and the session's keys (two X25519 operations), with no lock held.
    pub(super) fn write(self, now: Time) -> SealinkWritten {
        let answered = Handshake::respond_as(
            *self.hs,
            self.local,
            self.sender,
            self.suite,
            false,
            self.lanes,
            self.last_ts_sent,
            TUNNEL_KEYS,
            now,
        );
        SealinkWritten {
            pi: self.pi,
            local: self.local,
            answered,
        }
    }
}

impl Tunnel {
    pub(super) fn start_handshake(&mut self, pi: usize, now: Time, attempt: u32) {
        self.hint_handshake = true;
        let Some(dest) = self.peers[pi].endpoint else {
            // Nowhere to send it; the packets that wait are dropped at the timeout.
            self.count(TunnelDrop::NoEndpoint);
            return;
        };
        // Odd attempts offer lanes, even ones do not: an older peer refuses the offer
        // silently, and answers the retry.
        let offer = self.cfg.wire == Wire::Sealink
            && self.cfg.lanes
            && !self.peers[pi].no_lanes
            && attempt % 2 == 1;
        let payload = InitPayload {
            suite: self.cfg.suite as u8,
            flags: if offer { INIT_FLAG_LANES } else { 0 },
            timestamp: 0,
            binding: [0; 32],
        };
        let unix = self.cfg.unix_at_zero + Duration::from_nanos(now.as_nanos());
        let jitter = self.next_jitter();
        if self.offpath_inits {
            self.reserve_initiation(pi, now, attempt, offer, payload, unix, jitter);
            return;
        }
        let p = &mut self.peers[pi];
        let built = match self.cfg.wire {
            Wire::Sealink => p.handshake.initiate(
                &self.host,
                TUNNEL_PROLOGUE,
                &p.cfg.public_key,
                payload,
                &mut self.indexes,
                pi,
                now,
                attempt,
            ),
            Wire::WireGuard => p.handshake.initiate_wg(
                &self.host,
                &p.cfg.public_key,
                &p.cfg.preshared_key.unwrap_or(crate::handshake::wg::NO_PSK),
                &mut self.indexes,
                pi,
                now,
                crate::handshake::wg::whitened_nanos(unix),
                attempt,
            ),
        };
        match built {
            Ok(pkt) => {
                let pkt = pkt.to_vec();
                p.offered_lanes = offer;
                p.retry_jitter = jitter;
                p.stats.handshakes_initiated += 1;
                p.note_sent(now);
                self.push_message(dest, pkt);
            }
            Err(InitiateError::DegenerateKey) => {
                // A configuration fault no retry can fix (the configuration refuses such keys;
                // this is the core's own guard): give up at once, as the channel does.
                tracing::warn!(peer = %p.cfg.name, "peer's public key is a small-order point");
                self.give_up(pi);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot build tunnel handshake initiation");
            }
        }
    }

    /// [`Tunnel::start_handshake`] when the driver builds initiations with no lock held: the
    /// index, the timestamp, the retry's jitter and the lanes offer are taken now (the
    /// initiation is under way: retries and rekeys count it), the Noise message is left to
    /// [`Initiator::build`](super::Initiator::build) and [`Tunnel::initiation_commit`].
    #[allow(clippy::too_many_arguments)]
    fn reserve_initiation(
        &mut self,
        pi: usize,
        now: Time,
        attempt: u32,
        offer: bool,
        payload: InitPayload,
        unix: Duration,
        jitter: Duration,
    ) {
        let wire = self.cfg.wire;
        let p = &mut self.peers[pi];
        if handshake::x25519_public_is_degenerate(&p.cfg.public_key) {
            tracing::warn!(peer = %p.cfg.name, "peer's public key is a small-order point");
            self.give_up(pi);
            return;
        }
        let floor = match wire {
            Wire::Sealink => now.as_nanos(),
            Wire::WireGuard => crate::handshake::wg::whitened_nanos(unix),
        };
        let (local, ts) = p
            .handshake
            .reserve(&mut self.indexes, pi, now, attempt, floor);
        p.offered_lanes = offer;
        p.retry_jitter = jitter;
        let kind = match wire {
            Wire::Sealink => InitKind::Sealink(InitPayload {
                timestamp: ts,
                ..payload
            }),
            Wire::WireGuard => InitKind::Wg {
                psk: p.cfg.preshared_key.unwrap_or(crate::handshake::wg::NO_PSK),
                ts,
            },
        };
        self.initiations.push(InitJob {
            pi,
            remote: p.cfg.public_key,
            local,
            kind,
        });
    }

    /// A uniform draw from `0..=handshake_jitter` (SplitMix64), in whole milliseconds as
    /// WireGuard's implementations draw it; zero when the jitter is off.
    pub(super) fn next_jitter(&mut self) -> Duration {
        let max = self.cfg.handshake_jitter.as_millis() as u64;
        if max == 0 {
            return Duration::ZERO;
        }
        self.jitter_state = self.jitter_state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.jitter_state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Duration::from_millis(z % (max + 1))
    }

    /// The handshake with peer `pi` failed for good: the packets that waited are dropped.
    pub(super) fn give_up(&mut self, pi: usize) {
        self.peers[pi].handshake.abandon(&mut self.indexes);
        let n = self.peers[pi].staged.len() as u64;
        self.peers[pi].staged.clear();
        self.drops[TunnelDrop::HandshakeTimeout.index()] += n;
    }

    /// Retries or abandons peer `pi`'s handshake if its retransmission is due.
    pub(super) fn retry_handshake(&mut self, pi: usize, now: Time) {
        let due = self.peers[pi]
            .handshake
            .initiation
            .as_ref()
            .filter(|i| i.sent_at + self.cfg.handshake_timeout + self.peers[pi].retry_jitter <= now)
            .map(|i| i.attempts);
        let Some(attempts) = due else { return };
        if self.needs_no_handshake(pi, now) {
            // The peer's own handshake gave us a session meanwhile: stop asking.
            self.peers[pi].handshake.abandon(&mut self.indexes);
        } else if attempts >= self.cfg.handshake_attempts {
            self.give_up(pi);
        } else {
            self.start_handshake(pi, now, attempts + 1);
            self.want_resolve(pi, attempts + 1);
        }
    }

    /// An initiation on sealink's wire, handled whole: [`Tunnel::init_admit`], the read (the
    /// public-key work) and [`Tunnel::init_finish`] back to back (the serial reference; a
    /// driver may run the read with no lock held: [`super::offpath`]).
    pub(super) fn on_init(
        &mut self,
        now: Time,
        source: SocketAddr,
        buf: &[u8],
    ) -> Result<Decap, TunnelDrop> {
        self.init_admit(now, source, buf, false)?;
        let read = read_sealink_init(&self.host, buf)?;
        self.init_finish(now, source, read)
    }

    /// Before any public-key work: the length, mac1, then the limits (and mac2 under load, or
    /// whenever `busy`: see [`HandshakeGuard::admit_busy`](crate::handshake::cookie::HandshakeGuard::admit_busy)).
    pub(super) fn init_admit(
        &mut self,
        now: Time,
        source: SocketAddr,
        buf: &[u8],
        busy: bool,
    ) -> Result<(), TunnelDrop> {
        if buf.len() != handshake::INIT_LEN {
            return Err(DropReason::MalformedHeader.into());
        }
        let room = self.cookie_replies.len() < MAX_PENDING_COOKIE_REPLIES;
        let admitted = self.guard.admit_busy(
            now,
            Some(source),
            buf,
            room,
            busy,
            |checker, now, msg, src| {
                let sender = match parse_header(msg) {
                    Ok(Header::Init { sender }) => sender,
                    _ => return Err(DropReason::MalformedHeader),
                };
                checker
                    .write_reply(now, msg, sender, src)
                    .map_err(|_| DropReason::RateLimited)
            },
        );
        self.admitted(source, admitted, |r| r.to_vec())
    }

    /// Whether peer `pi` has a session it can send on that wants no rekey, and no packet
    /// waits for a handshake: a handshake under way for it need not go on.
    pub(super) fn needs_no_handshake(&self, pi: usize, now: Time) -> bool {
        self.peers[pi].staged.is_empty()
            && self.peers[pi]
                .current
                .as_ref()
                .is_some_and(|s| self.sendable(s, now) && !self.wants_rekey(s, now))
    }

    /// The rest of an admitted initiation once read, serially: [`Tunnel::init_prepare`], the
    /// response's public-key work ([`SealinkPrepared::write`]) and [`Tunnel::init_commit`].
    pub(super) fn init_finish(
        &mut self,
        now: Time,
        source: SocketAddr,
        read: SealinkInit,
    ) -> Result<Decap, TunnelDrop> {
        let prepared = self.init_prepare(now, source, read)?;
        let written = prepared.write(now);
        self.init_commit(now, source, written)
    }

    /// The peer by its static key, the timestamp and suite, and an index for the response.
    pub(super) fn init_prepare(
        &mut self,
        now: Time,
        source: SocketAddr,
        read: SealinkInit,
    ) -> Result<SealinkPrepared, TunnelDrop> {
        let SealinkInit {
            hs,
            remote,
            payload,
            sender,
        } = read;
        let Some(&pi) = self.by_key.get(&remote) else {
            self.guard.untrusted(now, Some(source), &remote);
            return Err(DropReason::UnknownHost.into());
        };
        // Authentic; a fresh one's timestamp is recorded so a replay is refused whatever
        // happens next.
        let p = &mut self.peers[pi];
        let suite = p
            .handshake
            .check_init(&payload, |s| SuiteId::MODERN.contains(&s))?;
        let offered = payload.flags & INIT_FLAG_LANES != 0;
        if offered {
            // It knows lanes after all (upgraded, or our offer was merely lost).
            p.no_lanes = false;
        }
        let last_ts_sent = p.handshake.last_ts_sent;
        let local = self.indexes.alloc(pi);
        Ok(SealinkPrepared {
            pi,
            hs,
            sender,
            suite,
            lanes: offered && self.cfg.lanes,
            local,
            last_ts_sent,
        })
    }

    /// The response and new (unconfirmed) session of a written initiation installed; its
    /// index freed if anything failed or the peer was removed meanwhile.
    pub(super) fn init_commit(
        &mut self,
        now: Time,
        source: SocketAddr,
        w: SealinkWritten,
    ) -> Result<Decap, TunnelDrop> {
        let SealinkWritten {
            pi,
            local,
            answered,
        } = w;
        let answered = match answered {
            Ok(a) if !self.peers[pi].removed => a,
            Ok(_) => {
                self.indexes.free(local);
                return Err(DropReason::UnknownHost.into());
            }
            Err(d) => {
                self.indexes.free(local);
                return Err(d.into());
            }
        };
        let pkt = answered.packet;
        let old = self.peers[pi].next.replace(answered.session);
        self.free_session(old);
        let p = &mut self.peers[pi];
        p.endpoint = Some(source);
        p.last_handshake = Some(now);
        p.stats.handshakes_completed += 1;
        p.stats.rx_datagrams += 1;
        p.note_sent(now);
        self.push_message(source, pkt);
        Ok(Decap::Handshake(PeerIndex(pi)))
    }

    pub(super) fn on_response(
        &mut self,
        now: Time,
        source: SocketAddr,
        receiver: u32,
        sender: u32,
        buf: &[u8],
    ) -> Result<Decap, TunnelDrop> {
        let pi = self
            .indexes
            .owner(receiver)
            .ok_or(DropReason::UnexpectedResponse)?;
        let hsk = &mut self.peers[pi].handshake;
        let init = match &mut hsk.initiation {
            Some(i) if i.local_index == receiver => i,
            _ => return Err(DropReason::UnexpectedResponse.into()),
        };
        let attempts = init.attempts;
        let done = Handshake::complete(
            &mut hsk.last_ts_accepted,
            init,
            buf,
            self.cfg.suite,
            TUNNEL_KEYS,
            sender,
            now,
        )?;
        let p = &mut self.peers[pi];
        let mut session = done.session;
        session.set_lanes(p.offered_lanes && done.lanes);
        if !p.offered_lanes && attempts > 1 && self.cfg.lanes && self.cfg.wire == Wire::Sealink {
            // The attempt before this one offered lanes and was not answered.
            p.no_lanes = true;
        }
        self.install_initiated(now, source, pi, session);
        Ok(Decap::Handshake(PeerIndex(pi)))
    }

    /// Our initiation to peer `pi` was answered with `session`: it becomes current (the old
    /// one previous), and what waited leaves on it (else a keepalive confirms it).
    pub(super) fn install_initiated(
        &mut self,
        now: Time,
        source: SocketAddr,
        pi: usize,
        session: Session,
    ) {
        let p = &mut self.peers[pi];
        // Its index is now the session's.
        p.handshake.initiation = None;
        p.unanswered_since = None;
        p.last_minute_handshake = false;
        let old_prev = p.previous.take();
        p.previous = p.current.replace(session);
        p.endpoint = Some(source);
        p.last_handshake = Some(now);
        p.stats.handshakes_completed += 1;
        p.stats.rx_datagrams += 1;
        self.free_session(old_prev);
        if self.peers[pi].staged.is_empty() {
            // Nothing to send: a keepalive confirms the session to the responder now.
            self.send_empty(pi, now);
        } else {
            self.release_staged(pi, now);
        }
    }
}

impl Tunnel {
    /// A cookie reply to our initiation `receiver`: keep the cookie and, once per initiation,
    /// send the same initiation again with mac2. It proves nothing about the peer's endpoint,
    /// which stays as it was.
    pub(super) fn on_cookie(
        &mut self,
        now: Time,
        receiver: u32,
        buf: &[u8],
    ) -> Result<Decap, TunnelDrop> {
        let pi = self
            .indexes
            .owner(receiver)
            .ok_or(DropReason::BadCookieReply)?;
        let resend = self.peers[pi]
            .handshake
            .accept_cookie(now, receiver, buf)?
            .map(<[u8]>::to_vec);
        self.resend_initiation(pi, now, resend);
        Ok(Decap::Handshake(PeerIndex(pi)))
    }

    /// Acts on the guard's decision about a handshake message from `source` (either wire): a
    /// cookie reply (its bytes from `bytes`) is queued and the message refused as
    /// `cookie-required`.
    pub(super) fn admitted<R>(
        &mut self,
        source: SocketAddr,
        a: Admission<R>,
        bytes: impl FnOnce(R) -> Vec<u8>,
    ) -> Result<(), TunnelDrop> {
        match a {
            Admission::Process => Ok(()),
            Admission::Drop(r) => Err(r.into()),
            Admission::Cookie(reply) => {
                self.cookie_replies.push_back((source, bytes(reply)));
                Err(DropReason::CookieRequired.into())
            }
        }
    }

    /// Sends our initiation again (with mac2 now) after a cookie reply, if there is one to send.
    pub(super) fn resend_initiation(&mut self, pi: usize, now: Time, resend: Option<Vec<u8>>) {
        let p = &mut self.peers[pi];
        if let (Some(resend), Some(dest)) = (resend, p.endpoint) {
            p.note_sent(now);
            self.push_message(dest, resend);
        }
    }
}
