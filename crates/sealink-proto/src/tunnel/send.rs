//! The sending half: routing a packet to its peer, the piggyback queue, sealing, and what is queued to transmit.

use std::net::SocketAddr;

use sealink_crypto::Scope;

use crate::session::SealJob;
use crate::time::Time;
use crate::wire::HEADER_LEN;

use super::config::{PiggybackMode, Wire};
use super::ip::packet_addrs;
use super::stats::TunnelDrop;
use super::{HEADROOM, LEN_FIELD, PeerIndex, TAILROOM, Tunnel, ip, wg};

/// Outcome of [`Tunnel::encapsulate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encap {
    /// Sealed in place: send `buf[..len]` to `dest`, after anything [`Tunnel::poll_transmit`]
    /// now yields (queued small packets were flushed ahead of this one).
    Sealed {
        peer: PeerIndex,
        dest: SocketAddr,
        len: usize,
    },
    /// Copied into the core (piggyback queue, or waiting for a handshake).
    Queued,
    Dropped(TunnelDrop),
}

/// Outcome of [`Tunnel::encapsulate_reserve`]: the serial half of sending a packet.
#[derive(Debug, Clone)]
pub enum Reserve {
    /// Routed, counter taken, length field written: seal the buffer with `job` (on any thread,
    /// no lock held), send `buf[..len]` to `dest` after anything [`Tunnel::poll_transmit`] now
    /// yields, then report it with [`Tunnel::sent`].
    Seal {
        peer: PeerIndex,
        dest: SocketAddr,
        job: SealJob,
    },
    /// Copied into the core (piggyback queue, or waiting for a handshake).
    Queued,
    Dropped(TunnelDrop),
}

/// A datagram waiting in the tunnel's outgoing queue for a driver's buffer.
#[derive(Debug)]
pub(super) enum Outgoing {
    /// A handshake message, final.
    Message { dest: SocketAddr, bytes: Vec<u8> },
    /// A data datagram of peer `pi`, its seal reserved: `sealed_len` bytes of body (padding
    /// included) once written.
    Data {
        pi: usize,
        dest: SocketAddr,
        job: SealJob,
        body: Body,
        sealed_len: usize,
    },
}

/// Where a data datagram's body lies until it is written out.
#[derive(Debug)]
pub(super) enum Body {
    /// The next `len` bytes of the peer's `flushed` buffer: a framed piggyback queue (or
    /// nothing: a keepalive).
    Flushed(usize),
    /// A packet that waited for a session, unframed.
    Packet(Vec<u8>),
}

impl Tunnel {
    /// The sealed body's length for one packet of `pkt_len` bytes: sealink's length field and
    /// the packet, or WireGuard's packet padded to a multiple of 16 bytes (never past the MTU).
    pub(super) fn body_len(&self, pkt_len: usize) -> usize {
        match self.cfg.wire {
            Wire::Sealink => LEN_FIELD + pkt_len,
            Wire::WireGuard => wg::padded_len(pkt_len, self.cfg.mtu),
        }
    }

    // ------------------------------------------------------------------ sending

    /// Routes and seals the IP packet at `buf[HEADROOM..HEADROOM + pkt_len]`; `buf` must extend
    /// [`TAILROOM`] bytes past it. Sealed in place when it can leave at once (see [`Encap`]).
    /// The serial reference: [`Tunnel::encapsulate_reserve`] and [`SealJob::seal`] back to back.
    /// The datagram counts as sent at once (no autocork wait behind it).
    pub fn encapsulate(&mut self, now: Time, buf: &mut [u8], pkt_len: usize) -> Encap {
        match self.encapsulate_reserve(now, buf, pkt_len) {
            Reserve::Seal { peer, dest, job } => {
                let r = job.seal(buf);
                self.sent(now, peer, 1);
                match r {
                    Ok(len) => Encap::Sealed { peer, dest, len },
                    Err(_) => Encap::Dropped(self.count(TunnelDrop::SealFailed)),
                }
            }
            Reserve::Queued => Encap::Queued,
            Reserve::Dropped(d) => Encap::Dropped(d),
        }
    }

    /// The serial half of [`Tunnel::encapsulate`]: routes the packet at
    /// `buf[HEADROOM..HEADROOM + pkt_len]`, queues it or takes the next counter of the peer's
    /// session and writes the length field. The caller seals with the returned [`SealJob`]
    /// (anywhere, no lock held), sends, and reports the send with [`Tunnel::sent`].
    pub fn encapsulate_reserve(&mut self, now: Time, buf: &mut [u8], pkt_len: usize) -> Reserve {
        self.encapsulate_reserve_with(now, buf, pkt_len, |_| {})
    }

    /// [`Tunnel::encapsulate_reserve`] for a packet the driver has not finished: `finish` runs
    /// on the packet's bytes before the core keeps a copy of it (staged for a handshake, or
    /// queued to ride along), and only then. A packet returned as [`Reserve::Seal`] is the
    /// caller's to finish before it seals it. The TUN reader uses this to leave a TCP
    /// segment's checksum to the worker that seals it (`sealink-tunnel`'s `tunread.rs`):
    /// routing and the checks here read only the IP header and the length.
    pub fn encapsulate_reserve_with(
        &mut self,
        now: Time,
        buf: &mut [u8],
        pkt_len: usize,
        finish: impl FnOnce(&mut [u8]),
    ) -> Reserve {
        let h = self.cfg.headroom();
        let Some(pkt) = buf.get(h..h + pkt_len) else {
            return Reserve::Dropped(self.count(TunnelDrop::MalformedPacket));
        };
        if pkt_len > self.cfg.mtu || buf.len() < HEADER_LEN + self.body_len(pkt_len) + TAILROOM {
            return Reserve::Dropped(self.count(TunnelDrop::MalformedPacket));
        }
        let Some((src, dst)) = packet_addrs(pkt) else {
            return Reserve::Dropped(self.count(TunnelDrop::MalformedPacket));
        };
        let Some(pi) = self.routes.lookup(dst) else {
            let why = if ip::is_link_scoped(src, dst) {
                TunnelDrop::LinkLocal
            } else {
                TunnelDrop::NoRoute
            };
            return Reserve::Dropped(self.count(why));
        };
        let usable = self.usable(pi, now);
        match usable {
            Some((true, rekey)) => {
                if rekey && self.peers[pi].handshake.initiation.is_none() {
                    self.start_handshake(pi, now, 1);
                }
            }
            _ => {
                // No session to send on: hold the packet and make sure a handshake is under way.
                let staged = &mut self.peers[pi].staged;
                if staged.len() >= self.cfg.staged_packets {
                    return Reserve::Dropped(self.count(TunnelDrop::StagingFull));
                }
                let mut copy = pkt.to_vec();
                finish(&mut copy);
                staged.push_back(copy);
                if self.peers[pi].handshake.initiation.is_none() {
                    self.start_handshake(pi, now, 1);
                }
                return Reserve::Queued;
            }
        }
        let pb = self.cfg.piggyback;
        if pb.enabled && pkt_len <= pb.small && !ip::is_urgent(&buf[h..h + pkt_len]) {
            // Small: joins the queue; leaves with company, at the queue limit, when the peer's
            // sends complete (autocork) or at the deadline.
            if self.peers[pi].queue.len() + LEN_FIELD + pkt_len > pb.queue_limit {
                self.flush_queue(pi, now);
            }
            let p = &mut self.peers[pi];
            if p.queue.is_empty() {
                self.corked.push(pi);
                self.hint_queue = true;
            }
            p.queue.extend_from_slice(&(pkt_len as u16).to_be_bytes());
            let at = p.queue.len();
            p.queue
                .extend_from_slice(&buf[HEADROOM..HEADROOM + pkt_len]);
            finish(&mut p.queue[at..]);
            p.queue_packets += 1;
            p.queued_since.get_or_insert(now);
            if p.queue.len() >= pb.queue_limit {
                self.flush_queue(pi, now);
            }
            return Reserve::Queued;
        }
        // Large (or piggybacking off): never waits; what is queued goes first, keeping order.
        self.flush_queue(pi, now);
        let Some(dest) = self.peers[pi].endpoint else {
            return Reserve::Dropped(self.count(TunnelDrop::NoEndpoint));
        };
        let body_len = self.body_len(pkt_len);
        match self.cfg.wire {
            Wire::Sealink => {
                buf[HEADER_LEN..HEADROOM].copy_from_slice(&(pkt_len as u16).to_be_bytes());
            }
            // WireGuard's zero padding (up to 15 bytes, within the MTU).
            Wire::WireGuard => buf[h + pkt_len..h + body_len].fill(0),
        }
        let Some(job) = self.reserve_on_current(pi, body_len) else {
            return Reserve::Dropped(self.count(TunnelDrop::SealFailed));
        };
        let p = &mut self.peers[pi];
        p.in_flight += 1;
        p.note_sent(now);
        p.unanswered_since.get_or_insert(now);
        let st = &mut p.stats;
        st.tx_packets += 1;
        st.tx_bytes += pkt_len as u64;
        Reserve::Seal {
            peer: PeerIndex(pi),
            dest,
            job,
        }
    }

    /// Reports that `n` datagrams reserved for `peer` were sent (or given up). In autocork mode
    /// the peer's piggyback queue leaves once nothing is in flight any more.
    pub fn sent(&mut self, now: Time, peer: PeerIndex, n: u64) {
        let Some(p) = self.peers.get_mut(peer.0) else {
            return;
        };
        p.in_flight = p.in_flight.saturating_sub(n);
        if p.in_flight == 0 && !p.queue.is_empty() && self.autocork() {
            self.flush_queue(peer.0, now);
        }
    }

    /// Whether a deadline was armed since the last call that a driver's timer, asleep until
    /// the [`Tunnel::poll_timeout`] it last saw, must wake up for: a handshake started, or a
    /// piggyback queue started and is still waiting (under autocork, [`Tunnel::end_batch`]
    /// usually sends it at once, and then no wake-up is needed). Clears the hint.
    pub fn take_timer_hint(&mut self) -> bool {
        let h = self.hint_handshake || (self.hint_queue && !self.corked.is_empty());
        self.hint_handshake = false;
        self.hint_queue = false;
        h
    }

    /// Ends a batch of packets from the TUN device: in autocork mode the piggyback queues of
    /// peers with nothing in flight leave now (an idle link adds no delay).
    pub fn end_batch(&mut self, now: Time) {
        if !self.autocork() {
            return;
        }
        let mut k = 0;
        while k < self.corked.len() {
            let pi = self.corked[k];
            if self.peers[pi].in_flight == 0 {
                // flush_queue removes pi from `corked`.
                self.flush_queue(pi, now);
            } else {
                k += 1;
            }
        }
    }

    pub(super) fn autocork(&self) -> bool {
        self.cfg.piggyback.enabled && self.cfg.piggyback.mode == PiggybackMode::Autocork
    }

    /// Takes the next counter on the peer's current session: the serial step of sealing.
    pub(super) fn reserve_on_current(&mut self, pi: usize, body_len: usize) -> Option<SealJob> {
        let s = self.peers[pi].current.as_mut()?;
        Some(s.reserve_seal(Scope::Encrypt, body_len))
    }

    /// Sends the piggyback queue as one datagram: reserved now, written into the driver's
    /// buffer by [`Tunnel::poll_transmit_deferred`] straight from the peer's `flushed` bytes.
    pub(super) fn flush_queue(&mut self, pi: usize, now: Time) {
        if self.peers[pi].queue.is_empty() {
            return;
        }
        if let Some(k) = self.corked.iter().position(|&c| c == pi) {
            self.corked.swap_remove(k);
        }
        let n = self.peers[pi].queue_packets;
        let len = self.peers[pi].queue.len();
        let reserved = self.send_body(pi, now, Body::Flushed(len), len, n);
        let p = &mut self.peers[pi];
        if reserved {
            if p.flushed_at == p.flushed.len() {
                // The usual case: nothing flushed waits, so the queue's bytes become the
                // flushed body as they are, and the emptied buffer becomes the queue.
                p.flushed.clear();
                p.flushed_at = 0;
                std::mem::swap(&mut p.queue, &mut p.flushed);
            } else {
                p.flushed.extend_from_slice(&p.queue);
            }
        }
        p.queue.clear();
        p.queue_packets = 0;
        p.queued_since = None;
    }

    /// Reserves a data datagram for a body of `len` bytes (`packets` packets; 0 = keepalive)
    /// and queues it to [`Tunnel::poll_transmit_deferred`]. Returns whether it was reserved
    /// (else its packets were counted as dropped).
    fn send_body(&mut self, pi: usize, now: Time, body: Body, len: usize, packets: u64) -> bool {
        let usable = self.peers[pi]
            .current
            .as_ref()
            .is_some_and(|s| self.sendable(s, now));
        let Some(dest) = self.peers[pi].endpoint.filter(|_| usable) else {
            let d = self.count(TunnelDrop::NoEndpoint);
            self.drops[d.index()] += packets.saturating_sub(1);
            return false;
        };
        // Reserved here (the counter is serial); sealed by whoever sends it, outside the lock
        // (`poll_transmit_deferred`).
        // sealink's body is framed already; WireGuard's is one packet (or none), padded when
        // written out.
        let (sealed_len, framing) = match self.cfg.wire {
            Wire::Sealink => (len, LEN_FIELD as u64 * packets),
            Wire::WireGuard => (wg::padded_len(len, self.cfg.mtu), 0),
        };
        let Some(job) = self.reserve_on_current(pi, sealed_len) else {
            // Every packet the datagram carried is lost to a local fault.
            self.drops[TunnelDrop::SealFailed.index()] += packets.max(1);
            return false;
        };
        let p = &mut self.peers[pi];
        p.note_sent(now);
        if packets > 0 {
            p.unanswered_since.get_or_insert(now);
        }
        let st = &mut p.stats;
        st.tx_packets += packets;
        st.tx_bytes += (len as u64).saturating_sub(framing);
        if packets > 1 {
            st.piggybacked += packets;
        }
        self.outgoing.push_back(Outgoing::Data {
            pi,
            dest,
            job,
            body,
            sealed_len,
        });
        true
    }

    /// Sends a data datagram with an empty body (a keepalive).
    pub(super) fn send_empty(&mut self, pi: usize, now: Time) {
        self.send_body(pi, now, Body::Flushed(0), 0, 0);
    }

    /// Queues a handshake message, final as it is.
    pub(super) fn push_message(&mut self, dest: SocketAddr, bytes: Vec<u8>) {
        self.outgoing.push_back(Outgoing::Message { dest, bytes });
    }

    /// Sends the packets that waited for a session, one per datagram (each packet's own
    /// buffer is what [`Tunnel::poll_transmit_deferred`] copies from).
    pub(super) fn release_staged(&mut self, pi: usize, now: Time) {
        let framing = match self.cfg.wire {
            Wire::Sealink => LEN_FIELD,
            Wire::WireGuard => 0,
        };
        while let Some(pkt) = self.peers[pi].staged.pop_front() {
            let len = framing + pkt.len();
            self.send_body(pi, now, Body::Packet(pkt), len, 1);
        }
    }

    /// Next datagram to send (handshakes, flushed piggyback queues, staged packets): copied into
    /// `out`, which should hold [`TunnelConfig::mtu`](super::TunnelConfig::mtu) + [`HEADROOM`] + [`TAILROOM`] bytes; one
    /// that does not fit is dropped.
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> Option<(SocketAddr, usize)> {
        loop {
            let (dest, n, job) = self.poll_transmit_deferred(out)?;
            let Some(job) = job else {
                return Some((dest, n));
            };
            match job.seal(&mut out[..n]) {
                Ok(len) => return Some((dest, len)),
                Err(_) => {
                    self.seal_failed(1);
                }
            }
        }
    }

    /// [`Tunnel::poll_transmit`] without the seal, the datagram mode's contract: the next datagram
    /// is written into `out[..n]` and, for a data datagram, comes with the [`SealJob`] reserved
    /// for it, which the caller runs on `out[..n]` (anywhere, no lock held) for the final length;
    /// a handshake or cookie reply comes final (`None`). A data datagram's body is copied
    /// straight from where it was queued (the peer's flushed piggyback bytes, a staged packet):
    /// `out` should be the buffer the caller seals and sends from. A seal that fails is the
    /// caller's to report ([`Tunnel::seal_failed`]).
    pub fn poll_transmit_deferred(
        &mut self,
        out: &mut [u8],
    ) -> Option<(SocketAddr, usize, Option<SealJob>)> {
        if let Some((dest, reply)) = self.cookie_replies.pop_front() {
            if let Some(o) = out.get_mut(..reply.len()) {
                o.copy_from_slice(&reply);
                return Some((dest, reply.len(), None));
            }
        }
        loop {
            match self.outgoing.pop_front()? {
                Outgoing::Message { dest, bytes } => {
                    if let Some(o) = out.get_mut(..bytes.len()) {
                        o.copy_from_slice(&bytes);
                        return Some((dest, bytes.len(), None));
                    }
                    tracing::warn!(
                        len = bytes.len(),
                        "transmit buffer too small; datagram dropped"
                    );
                }
                Outgoing::Data {
                    pi,
                    dest,
                    job,
                    body,
                    sealed_len,
                } => {
                    let n = HEADER_LEN + sealed_len + TAILROOM;
                    let o = out.get_mut(..n);
                    if self.write_body(pi, body, sealed_len, o) {
                        return Some((dest, n, Some(job)));
                    }
                    tracing::warn!(len = n, "transmit buffer too small; datagram dropped");
                    self.seal_failed(1);
                }
            }
        }
    }

    /// Writes a data datagram's body into `out` (header room, body, zero padding and tail room:
    /// `out` is exactly the datagram's length), or only consumes it when `out` is `None` (too
    /// small). Returns whether it was written.
    fn write_body(
        &mut self,
        pi: usize,
        body: Body,
        sealed_len: usize,
        out: Option<&mut [u8]>,
    ) -> bool {
        let p = &mut self.peers[pi];
        let src: &[u8] = match &body {
            Body::Flushed(len) => {
                let at = p.flushed_at;
                p.flushed_at += len;
                p.flushed.get(at..at + len).unwrap_or_default()
            }
            Body::Packet(pkt) => pkt,
        };
        let Some(out) = out else {
            return false;
        };
        let mut w = HEADER_LEN;
        if let (Body::Packet(_), Wire::Sealink) = (&body, self.cfg.wire) {
            // A staged packet goes alone: its length field is written here.
            out[w..w + LEN_FIELD].copy_from_slice(&(src.len() as u16).to_be_bytes());
            w += LEN_FIELD;
        }
        let end = (w + src.len()).min(HEADER_LEN + sealed_len);
        out[w..end].copy_from_slice(&src[..end - w]);
        // WireGuard's padding: zeros (the header and the tag are the seal's to write).
        out[end..HEADER_LEN + sealed_len].fill(0);
        true
    }

    /// Whether [`Tunnel::poll_transmit`] has something.
    pub fn has_transmit(&self) -> bool {
        !self.outgoing.is_empty() || !self.cookie_replies.is_empty()
    }

    /// A persistent keepalive: an empty body on the current session, or a handshake where
    /// there is none to send on (or it wants a rekey).
    pub(super) fn send_keepalive(&mut self, pi: usize, now: Time) {
        // Counts as an attempt whatever happens below, so a failure cannot make it due again
        // at once (the timer would spin).
        self.peers[pi].last_sent = Some(now);
        let usable = self.usable(pi, now);
        match usable {
            Some((true, rekey)) => {
                let before = self.peers[pi].stats.tx_datagrams;
                self.send_empty(pi, now);
                if self.peers[pi].stats.tx_datagrams > before {
                    self.peers[pi].stats.keepalives += 1;
                }
                if rekey {
                    self.start_handshake(pi, now, 1);
                }
            }
            _ => self.start_handshake(pi, now, 1),
        }
    }

    // ---------------------------------------------------------------- receiving
}
