//! The tunnel core on WireGuard's wire ([`Wire::WireGuard`]): the handshake messages (types 1-3)
//! and the transport data's body (one IP packet, zero-padded to 16 bytes). Everything else
//! (routing, sessions and their limits, retries, persistent keepalives, roaming, the cookie
//! guard, counters) is the core's own, shared with sealink's wire; the seal and open of a
//! transport message are [`crate::session`]'s.

use std::net::SocketAddr;
use std::ops::Range;

use sealink_crypto::Scope;

use super::{Decap, DecapReserve, Peer, PeerIndex, Tunnel, TunnelDrop, Wire, handshake_done};
use crate::endpoint::MAX_PENDING_COOKIE_REPLIES;
use crate::error::DropReason;
use crate::handshake::HostKey;
use crate::handshake::wg::{
    NO_PSK, read_initiation, read_response, tai64n_nanos, write_response_unmacked,
};
use crate::session::Session;
use crate::time::Time;
use crate::wg as proto;
use crate::wg::message::RESPONSE_LEN;
use crate::wg::message::{self, CookieReply, Message};

/// WireGuard's padded plaintext length for a packet of `len` bytes: the next multiple of 16,
/// but never past the MTU (a packet of the MTU's size is sent as it is).
pub fn padded_len(len: usize, mtu: usize) -> usize {
    let padded = len.div_ceil(16) * 16;
    if padded > mtu { len.max(mtu) } else { padded }
}

/// Data sent and nothing authenticated back for this long: a new handshake (whitepaper §6.5).
const UNANSWERED: std::time::Duration =
    proto::KEEPALIVE_TIMEOUT.saturating_add(proto::REKEY_TIMEOUT);
/// Sessions are erased this many REJECT_AFTER_TIMEs after they were made (whitepaper §6.3).
const ERASE_AFTER_REJECTS: u32 = 3;

impl Peer {
    /// The next of WireGuard's timers (other than retries and persistent keepalives, which the
    /// core runs for both wires): a passive keepalive, a handshake for data gone unanswered,
    /// the erasure of old keys.
    pub(super) fn wg_timer_due(&self, reject_after: std::time::Duration) -> Option<Time> {
        let unanswered = self
            .unanswered_since
            .filter(|_| self.handshake.initiation.is_none())
            .map(|t| t + UNANSWERED);
        let erase = [&self.current, &self.previous, &self.next]
            .into_iter()
            .flatten()
            .map(|s| s.established + reject_after * ERASE_AFTER_REJECTS)
            .min();
        [self.passive_keepalive_due, unanswered, erase]
            .into_iter()
            .flatten()
            .min()
    }
}

/// A WireGuard initiation read (the Noise message: the public-key work) with no access to the
/// tunnel's state but the host key.
pub(super) struct WgInit {
    hs: Box<snow::HandshakeState>,
    remote: [u8; 32],
    ts: [u8; 12],
    sender: u32,
}

/// Reads an admitted initiation (`buf`: the whole message, its MACs checked) with `host`.
pub(super) fn read_wg_init(host: &HostKey, buf: &[u8], sender: u32) -> Result<WgInit, TunnelDrop> {
    let (hs, remote, ts) = read_initiation(host, buf).map_err(|_| DropReason::HandshakeFailed)?;
    Ok(WgInit {
        hs: Box::new(hs),
        remote,
        ts,
        sender,
    })
}

/// An initiation checked against its peer, with an index for the response.
pub(super) struct WgPrepared {
    pi: usize,
    hs: Box<snow::HandshakeState>,
    sender: u32,
    local: u32,
    psk: [u8; 32],
    ts: u64,
}

/// A response written (without its MACs), for [`Tunnel::wg_init_commit`].
pub(super) struct WgWritten {
    pi: usize,
    local: u32,
    ts: u64,
    answered: Result<([u8; RESPONSE_LEN], Session), DropReason>,
}

impl WgPrepared {
    /// The response and the session's keys (two X25519 operations), with no lock held.
    pub(super) fn write(self, now: Time) -> WgWritten {
        let (local, sender) = (self.local, self.sender);
        let answered = write_response_unmacked(*self.hs, &self.psk, local, sender)
            .map_err(|_| DropReason::HandshakeFailed)
            .and_then(|(resp, keys)| {
                Session::wireguard(&keys.send, &keys.recv, local, sender, now, false)
                    .map(|s| (resp, s))
            });
        WgWritten {
            pi: self.pi,
            local,
            ts: self.ts,
            answered,
        }
    }
}

impl Tunnel {
    /// Runs WireGuard's timers of peer `pi` that are due at `now` (see [`Peer::wg_timer_due`]).
    pub(super) fn wg_timers(&mut self, pi: usize, now: Time) {
        if self.peers[pi]
            .passive_keepalive_due
            .is_some_and(|t| t <= now)
        {
            // Data arrived and nothing left since: say we are alive, so that the peer's own
            // "unanswered" timer does not start a handshake.
            self.peers[pi].passive_keepalive_due = None;
            if matches!(self.usable(pi, now), Some((true, _))) {
                let before = self.peers[pi].stats.tx_datagrams;
                self.send_empty(pi, now);
                if self.peers[pi].stats.tx_datagrams > before {
                    self.peers[pi].stats.keepalives += 1;
                }
            }
        }
        let p = &self.peers[pi];
        if p.handshake.initiation.is_none()
            && p.unanswered_since.is_some_and(|t| t + UNANSWERED <= now)
        {
            self.peers[pi].unanswered_since = None;
            self.start_handshake(pi, now, 1);
        }
        let dead = self.cfg.limits.reject_after_time * ERASE_AFTER_REJECTS;
        let p = &mut self.peers[pi];
        let mut erased = Vec::new();
        for slot in [&mut p.current, &mut p.previous, &mut p.next] {
            if slot.as_ref().is_some_and(|s| s.established + dead <= now) {
                erased.extend(slot.take());
            }
        }
        for s in erased {
            self.free_session(Some(s));
        }
    }

    /// Data arrived from peer `pi`: if we initiated its current session and that session is
    /// within KEEPALIVE_TIMEOUT + REKEY_TIMEOUT of REJECT_AFTER_TIME, start a handshake, once
    /// per session (wireguard-go's `keepKeyFreshReceiving`). The responder does not rekey by
    /// time ([`crate::session::Session::wants_rekey_wg`]), so a flow that only the responder
    /// sends on relies on this to get fresh keys before the old ones are refused.
    pub(super) fn wg_keep_fresh_receiving(&mut self, pi: usize, now: Time) {
        let limits = self.cfg.limits;
        let p = &self.peers[pi];
        if p.last_minute_handshake || p.handshake.initiation.is_some() {
            return;
        }
        // Never before REKEY_AFTER_TIME, whatever REJECT_AFTER_TIME is (scaled-down timers).
        let at = limits
            .reject_after_time
            .saturating_sub(UNANSWERED)
            .max(limits.rekey_after_time);
        let due = p
            .current
            .as_ref()
            .is_some_and(|s| s.initiator && now.saturating_since(s.established) >= at);
        if due {
            self.peers[pi].last_minute_handshake = true;
            self.start_handshake(pi, now, 1);
        }
    }

    /// [`Tunnel::decapsulate_reserve`] on WireGuard's wire (refusals not yet counted).
    pub(super) fn wg_decapsulate_reserve(
        &mut self,
        now: Time,
        source: SocketAddr,
        buf: &[u8],
    ) -> Result<DecapReserve, TunnelDrop> {
        debug_assert_eq!(self.cfg.wire, Wire::WireGuard);
        match message::parse(buf) {
            Err(_) => Err(DropReason::MalformedHeader.into()),
            Ok(Message::Transport(t)) => {
                if t.counter >= proto::REJECT_AFTER_MESSAGES {
                    return Err(DropReason::SessionExpired.into());
                }
                self.reserve_data(now, Scope::Encrypt, t.receiver, t.counter)
            }
            Ok(Message::Initiation(m)) => self
                .wg_on_init(now, source, buf, m.sender)
                .map(handshake_done),
            Ok(Message::Response(m)) => self
                .wg_on_response(now, source, buf, m.sender, m.receiver)
                .map(handshake_done),
            Ok(Message::CookieReply(m)) => self.wg_on_cookie(now, &m).map(handshake_done),
        }
    }

    /// An initiation, handled whole: [`Tunnel::wg_init_admit`], the Noise read and
    /// [`Tunnel::wg_init_finish`] back to back (the serial reference; a driver may run the
    /// read with no lock held: [`super::offpath`]).
    fn wg_on_init(
        &mut self,
        now: Time,
        source: SocketAddr,
        buf: &[u8],
        sender: u32,
    ) -> Result<Decap, TunnelDrop> {
        self.wg_init_admit(now, source, buf, false)?;
        let read = read_wg_init(&self.host, buf, sender)?;
        self.wg_init_finish(now, source, read)
    }

    /// mac1 and the limits (a cookie reply under load, or whenever `busy`), before any
    /// public-key work.
    pub(super) fn wg_init_admit(
        &mut self,
        now: Time,
        source: SocketAddr,
        buf: &[u8],
        busy: bool,
    ) -> Result<(), TunnelDrop> {
        let room = self.cookie_replies.len() < MAX_PENDING_COOKIE_REPLIES;
        let admitted = self.guard.admit_busy(
            now,
            Some(source),
            buf,
            room,
            busy,
            |checker, now, msg, src| {
                // WireGuard's cookie reply (type 3) to the sender index at bytes 4..8.
                let receiver = u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]);
                let (nonce, cookie_sealed) = checker
                    .seal_cookie(now, msg, src)
                    .map_err(|_| DropReason::RateLimited)?;
                Ok(CookieReply {
                    receiver,
                    nonce,
                    cookie_sealed,
                }
                .encode())
            },
        );
        self.admitted(source, admitted, |r| r.to_vec())
    }

    /// The rest of an admitted initiation once read, serially: [`Tunnel::wg_init_prepare`],
    /// the response's public-key work ([`WgPrepared::write`]) and [`Tunnel::wg_init_commit`].
    pub(super) fn wg_init_finish(
        &mut self,
        now: Time,
        source: SocketAddr,
        read: WgInit,
    ) -> Result<Decap, TunnelDrop> {
        let prepared = self.wg_init_prepare(now, source, read)?;
        let written = prepared.write(now);
        self.wg_init_commit(now, source, written)
    }

    /// The peer by its static key, a timestamp newer than the last accepted, and an index for
    /// the response.
    pub(super) fn wg_init_prepare(
        &mut self,
        now: Time,
        source: SocketAddr,
        read: WgInit,
    ) -> Result<WgPrepared, TunnelDrop> {
        let WgInit {
            hs,
            remote,
            ts,
            sender,
        } = read;
        let Some(&pi) = self.by_key.get(&remote) else {
            self.guard.untrusted(now, Some(source), &remote);
            return Err(DropReason::UnknownHost.into());
        };
        let ts = tai64n_nanos(&ts);
        if ts <= self.peers[pi].handshake.last_ts_accepted {
            return Err(DropReason::StaleHandshake.into());
        }
        let local = self.indexes.alloc(pi);
        let psk = self.peers[pi].cfg.preshared_key.unwrap_or(NO_PSK);
        Ok(WgPrepared {
            pi,
            hs,
            sender,
            local,
            psk,
            ts,
        })
    }

    /// The response (its MACs added now, from the peer's cookie state) and the new
    /// (unconfirmed) session installed; the index freed if anything failed, the peer was
    /// removed, or a newer initiation of its was accepted meanwhile.
    pub(super) fn wg_init_commit(
        &mut self,
        now: Time,
        source: SocketAddr,
        w: WgWritten,
    ) -> Result<Decap, TunnelDrop> {
        let WgWritten {
            pi,
            local,
            ts,
            answered,
        } = w;
        let refused = match &answered {
            Err(d) => Some(TunnelDrop::from(*d)),
            Ok(_) if self.peers[pi].removed => Some(DropReason::UnknownHost.into()),
            Ok(_) if ts <= self.peers[pi].handshake.last_ts_accepted => {
                Some(DropReason::StaleHandshake.into())
            }
            Ok(_) => None,
        };
        let (mut resp, session) = match (refused, answered) {
            (None, Ok(a)) => a,
            (r, _) => {
                self.indexes.free(local);
                return Err(r.unwrap_or(DropReason::HandshakeFailed.into()));
            }
        };
        let p = &mut self.peers[pi];
        p.handshake.cookies.add_macs(now, &mut resp);
        // Authentic: a replay of it is refused from now on.
        p.handshake.last_ts_accepted = ts;
        let old = p.next.replace(session);
        self.free_session(old);
        let p = &mut self.peers[pi];
        p.endpoint = Some(source);
        p.last_handshake = Some(now);
        p.stats.handshakes_completed += 1;
        p.stats.rx_datagrams += 1;
        p.unanswered_since = None;
        p.note_sent(now);
        self.push_message(source, resp.to_vec());
        Ok(Decap::Handshake(PeerIndex(pi)))
    }

    /// A response to our initiation `receiver`. A response that does not decrypt leaves the
    /// initiation in place (snow's state is spent, so its retransmission, a new initiation,
    /// comes at the next timeout): only a sender knowing our public key and the index can
    /// cause that, and it cannot stop the handshake, only delay it.
    fn wg_on_response(
        &mut self,
        now: Time,
        source: SocketAddr,
        buf: &[u8],
        sender: u32,
        receiver: u32,
    ) -> Result<Decap, TunnelDrop> {
        if !self.guard.check_mac1(buf) {
            return Err(DropReason::BadMac1.into());
        }
        let pi = self
            .indexes
            .owner(receiver)
            .ok_or(DropReason::UnexpectedResponse)?;
        let init = match &mut self.peers[pi].handshake.initiation {
            Some(i) if i.local_index == receiver => i,
            _ => return Err(DropReason::UnexpectedResponse.into()),
        };
        let hs = init.hs.as_mut().ok_or(DropReason::UnexpectedResponse)?;
        let keys = read_response(hs, buf).map_err(|_| DropReason::HandshakeFailed)?;
        let session = Session::wireguard(&keys.send, &keys.recv, receiver, sender, now, true)?;
        self.install_initiated(now, source, pi, session);
        Ok(Decap::Handshake(PeerIndex(pi)))
    }

    /// A cookie reply to our initiation: keep the cookie and send the initiation again with
    /// mac2, once per initiation. It proves nothing about the endpoint.
    fn wg_on_cookie(&mut self, now: Time, m: &CookieReply) -> Result<Decap, TunnelDrop> {
        let pi = self
            .indexes
            .owner(m.receiver)
            .ok_or(DropReason::BadCookieReply)?;
        let resend = self.peers[pi]
            .handshake
            .accept_cookie_with(now, m.receiver, |c| {
                c.consume_sealed(now, &m.nonce, &m.cookie_sealed)
            })?
            .map(<[u8]>::to_vec);
        self.resend_initiation(pi, now, resend);
        Ok(Decap::Handshake(PeerIndex(pi)))
    }

    /// The opened body `buf[body]` of a transport message from peer `pi`: empty (a keepalive),
    /// or one IP packet followed by padding. The packet's source must route back to `pi`.
    pub(super) fn wg_push_packet(
        &mut self,
        now: Time,
        pi: usize,
        body: Range<usize>,
        buf: &[u8],
        packets: &mut Vec<Range<usize>>,
    ) -> Result<Decap, TunnelDrop> {
        if body.is_empty() {
            return Ok(Decap::Data(PeerIndex(pi)));
        }
        let plain = buf.get(body.clone()).ok_or(TunnelDrop::MalformedPacket)?;
        let n = proto::inner_len(plain).ok_or(TunnelDrop::MalformedPacket)?;
        let pkt = body.start..body.start + n;
        match super::packet_addrs(&buf[pkt.clone()]) {
            None => return Err(TunnelDrop::MalformedPacket),
            Some((src, _)) if self.routes.lookup(src) != Some(pi) => {
                return Err(TunnelDrop::SourceNotAllowed);
            }
            Some(_) => {}
        }
        packets.push(pkt);
        let p = &mut self.peers[pi];
        p.passive_keepalive_due
            .get_or_insert(now + proto::KEEPALIVE_TIMEOUT);
        let st = &mut self.peers[pi].stats;
        st.rx_packets += 1;
        st.rx_bytes += n as u64;
        Ok(Decap::Data(PeerIndex(pi)))
    }
}

#[cfg(test)]
mod tests {
    use super::padded_len;

    #[test]
    fn padding_is_wireguards() {
        assert_eq!(padded_len(0, 1420), 0);
        assert_eq!(padded_len(1, 1420), 16);
        assert_eq!(padded_len(16, 1420), 16);
        assert_eq!(padded_len(17, 1420), 32);
        // 1420 rounds to 1424, past the MTU: sent as it is.
        assert_eq!(padded_len(1420, 1420), 1420);
        assert_eq!(padded_len(1409, 1420), 1420);
        assert_eq!(padded_len(1408, 1420), 1408);
    }
}
