//! The receiving half: a datagram's header, index, replay check, opening, and the packets it carries.

use std::net::SocketAddr;
use std::ops::Range;

use sealink_crypto::Scope;

use crate::error::DropReason;

use crate::session;
use crate::time::Time;
use crate::wire::{Header, parse_header};

use super::config::Wire;
use super::ip::packet_addrs;
use super::stats::TunnelDrop;
use super::{LEN_FIELD, PeerIndex, Tunnel};

/// Outcome of [`Tunnel::decapsulate_reserve`].
#[derive(Debug, Clone)]
pub enum DecapReserve {
    /// A handshake message, fully handled; any answer is in [`Tunnel::poll_transmit`].
    Handshake(PeerIndex),
    /// A data datagram that passed the cheap checks: open it with the job (on any thread, no
    /// lock held), then hand the result to [`Tunnel::decapsulate_finish`].
    Open(DecapJob),
}

/// The parallel half of receiving one data datagram, with the peer it belongs to.
#[derive(Debug, Clone)]
pub struct DecapJob {
    peer: usize,
    job: session::OpenJob,
}

impl DecapJob {
    /// Authenticates and decrypts `buf` (the whole datagram) in place; returns the body's range.
    /// Touches no replay window: [`Tunnel::decapsulate_finish`] records the counter.
    pub fn open(&self, buf: &mut [u8]) -> Result<Range<usize>, DropReason> {
        self.job.open(buf)
    }
    pub fn peer(&self) -> PeerIndex {
        PeerIndex(self.peer)
    }
    pub fn counter(&self) -> u64 {
        self.job.counter()
    }
}

/// What an accepted datagram was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decap {
    /// A handshake message; any answer is in [`Tunnel::poll_transmit`].
    Handshake(PeerIndex),
    /// Data: the ranges of the IP packets to deliver were pushed to the caller's vector.
    Data(PeerIndex),
}

impl Tunnel {
    /// Authenticates and opens a datagram from `source` in place. For data, the ranges (in
    /// `buf`) of the IP packets to deliver are pushed to `packets` (cleared first). Every
    /// refusal is counted and returned; nothing from the network can make this panic. The serial
    /// reference: [`Tunnel::decapsulate_reserve`], [`DecapJob::open`] and
    /// [`Tunnel::decapsulate_finish`] back to back.
    pub fn decapsulate(
        &mut self,
        now: Time,
        source: SocketAddr,
        buf: &mut [u8],
        packets: &mut Vec<Range<usize>>,
    ) -> Result<Decap, TunnelDrop> {
        packets.clear();
        match self.decapsulate_reserve(now, source, buf)? {
            DecapReserve::Handshake(p) => Ok(Decap::Handshake(p)),
            DecapReserve::Open(job) => {
                let opened = job.open(buf);
                self.decapsulate_finish(now, source, &job, opened, buf, packets)
            }
        }
    }

    /// The serial first half of receiving: parses the header and handles handshakes whole; for
    /// data, finds the session and checks scope, age and the replay window (without recording
    /// the counter), and returns the [`DecapJob`]. Every refusal is counted.
    pub fn decapsulate_reserve(
        &mut self,
        now: Time,
        source: SocketAddr,
        buf: &[u8],
    ) -> Result<DecapReserve, TunnelDrop> {
        if self.cfg.wire == Wire::WireGuard {
            let r = self.wg_decapsulate_reserve(now, source, buf);
            return r.map_err(|d| self.count(d));
        }
        let r = match parse_header(buf) {
            Ok(Header::Init { .. }) => self.on_init(now, source, buf).map(handshake_done),
            Ok(Header::Response { receiver, sender }) => self
                .on_response(now, source, receiver, sender, buf)
                .map(handshake_done),
            Ok(Header::CookieReply { receiver }) => {
                self.on_cookie(now, receiver, buf).map(handshake_done)
            }
            Ok(Header::Data {
                scope,
                receiver,
                counter,
            }) => self.reserve_data(now, scope, receiver, counter),
            Err(e) => Err(e.into()),
        };
        r.map_err(|d| self.count(d))
    }

    pub(super) fn reserve_data(
        &mut self,
        now: Time,
        scope: Scope,
        receiver: u32,
        counter: u64,
    ) -> Result<DecapReserve, TunnelDrop> {
        if scope != Scope::Encrypt {
            return Err(DropReason::ScopeRefused.into());
        }
        let pi = self
            .indexes
            .owner(receiver)
            .ok_or(DropReason::UnknownIndex)?;
        let session = self.peers[pi]
            .session(receiver)
            // The index belongs to an initiation, not a session.
            .ok_or(DropReason::UnknownIndex)?;
        if session.expired(&self.limits(), now) {
            return Err(DropReason::SessionExpired.into());
        }
        let job = session.reserve_open(Scope::Encrypt, counter, false)?;
        Ok(DecapReserve::Open(DecapJob { peer: pi, job }))
    }

    /// The serial second half of receiving a data datagram, in the order the datagrams arrived
    /// for that session: takes the result of [`DecapJob::open`] on `buf`, records the counter in
    /// the replay window (refusing a duplicate that was opened in parallel), confirms a new
    /// session, learns the endpoint, and pushes the ranges of the IP packets to deliver onto
    /// `packets` (appended, not cleared). Every refusal is counted.
    pub fn decapsulate_finish(
        &mut self,
        now: Time,
        source: SocketAddr,
        job: &DecapJob,
        opened: Result<Range<usize>, DropReason>,
        buf: &[u8],
        packets: &mut Vec<Range<usize>>,
    ) -> Result<Decap, TunnelDrop> {
        let r = opened.map_err(TunnelDrop::from).and_then(|body| {
            self.accept_data(now, source, job)?;
            match self.cfg.wire {
                Wire::Sealink => self.push_packets(job.peer, body, buf, packets),
                Wire::WireGuard => {
                    let r = self.wg_push_packet(now, job.peer, body, buf, packets);
                    self.wg_keep_fresh_receiving(job.peer, now);
                    r
                }
            }
        });
        r.map_err(|d| self.count(d))
    }

    /// Records an opened datagram's counter in its session's replay window, confirms the
    /// session (and promotes `next`), and learns the peer's endpoint.
    pub(super) fn accept_data(
        &mut self,
        now: Time,
        source: SocketAddr,
        job: &DecapJob,
    ) -> Result<(), TunnelDrop> {
        let pi = job.peer;
        let p = self.peers.get_mut(pi).ok_or(DropReason::UnknownIndex)?;
        // The session may have been retired while the datagram was being opened.
        let local_index = job.job.local_index();
        let session = p.session_mut(local_index).ok_or(DropReason::UnknownIndex)?;
        session.accept(job.job.counter())?;
        session.confirmed_at.get_or_insert(now);
        let is_next = p
            .next
            .as_ref()
            .is_some_and(|s| s.local_index == local_index);
        p.endpoint = Some(source);
        p.stats.rx_datagrams += 1;
        p.unanswered_since = None;
        if is_next {
            // The initiator used the new keys: it holds them, so they become ours to send on.
            p.last_minute_handshake = false;
            let old_prev = p.previous.take();
            p.previous = p.current.take();
            p.current = p.next.take();
            self.free_session(old_prev);
            if !self.peers[pi].staged.is_empty() {
                self.release_staged(pi, now);
            }
        }
        Ok(())
    }

    /// Pushes the IP packets framed in `buf[body]` (u16 length, packet) onto `packets`; each
    /// packet's source must route back to peer `pi`.
    pub(super) fn push_packets(
        &mut self,
        pi: usize,
        body: Range<usize>,
        buf: &[u8],
        packets: &mut Vec<Range<usize>>,
    ) -> Result<Decap, TunnelDrop> {
        let first = packets.len();
        let mut at = body.start;
        let mut bad_source = 0;
        let mut malformed = 0;
        while at < body.end {
            let len = match buf.get(at..at + LEN_FIELD) {
                Some(b) => usize::from(u16::from_be_bytes([b[0], b[1]])),
                None => {
                    packets.truncate(first);
                    return Err(DropReason::MalformedFrame.into());
                }
            };
            let start = at + LEN_FIELD;
            let end = start + len;
            if len == 0 || end > body.end {
                packets.truncate(first);
                return Err(DropReason::MalformedFrame.into());
            }
            match packet_addrs(&buf[start..end]) {
                None => malformed += 1,
                Some((src, _)) if self.routes.lookup(src) != Some(pi) => bad_source += 1,
                Some(_) => packets.push(start..end),
            }
            at = end;
        }
        self.drops[TunnelDrop::SourceNotAllowed.index()] += bad_source;
        self.drops[TunnelDrop::MalformedPacket.index()] += malformed;
        let st = &mut self.peers[pi].stats;
        st.rx_packets += (packets.len() - first) as u64;
        st.rx_bytes += packets[first..].iter().map(|r| r.len() as u64).sum::<u64>();
        Ok(Decap::Data(PeerIndex(pi)))
    }
}

pub(super) fn handshake_done(d: Decap) -> DecapReserve {
    match d {
        Decap::Handshake(p) | Decap::Data(p) => DecapReserve::Handshake(p),
    }
}
