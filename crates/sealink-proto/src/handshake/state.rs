//! The handshake lifecycle of one peer, shared by the datagram channel ([`crate::channel`]) and
//! the tunnel core ([`crate::tunnel`]): the initiator (the initiation under way, its timestamp,
//! the cookie retry, its receiver index) and the responder (stale-timestamp and suite checks,
//! the response, the new session). The cores keep what differs between them: where sessions
//! are installed, retries and their timers, statistics, and where datagrams go.
//!
//! Decisions where the two former copies differed:
//! * A peer key that is a small-order point is a configuration fault that no retry can fix:
//!   [`Handshake::initiate`] reports [`InitiateError::DegenerateKey`] and both cores give up at
//!   once (the channel reports `HandshakeFailed`; the tunnel drops the packets that waited, as
//!   `handshake-timeout`). The tunnel used to log and leave them staged.
//! * A receiver index is freed on every path that does not end in an installed session or a
//!   pending initiation, a key-derivation error included (the channel used to keep it).

use sealink_crypto::SuiteId;

use crate::error::DropReason;
use crate::handshake::cookie::CookieGenerator;
use crate::handshake::{self, HostKey, InitPayload};
use crate::session::{IndexTable, Session};
use crate::time::Time;

/// Our initiation in progress.
pub(crate) struct Initiation {
    /// `None` while the message is being built with no lock held ([`Handshake::reserve`]):
    /// nothing has been sent, so nothing can be answered yet.
    pub hs: Option<snow::HandshakeState>,
    pub local_index: u32,
    pub sent_at: Time,
    /// Initiations sent for this handshake so far, this one included.
    pub attempts: u32,
    /// The datagram sent, kept to send again with mac2 when a cookie reply comes back (or, in
    /// the channel, when a simultaneous open shows it may be lost).
    pub packet: Vec<u8>,
    cookie_retried: bool,
}

/// Why no initiation could be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InitiateError {
    /// The peer's public key is a small-order point: no handshake with it can ever succeed.
    #[error("peer's public key is a small-order point")]
    DegenerateKey,
    /// A local failure building the message.
    #[error(transparent)]
    Other(crate::Error),
}

/// What a key derivation needs besides the handshake's split.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keys<'a> {
    /// Label of the data keys in the derivation.
    pub label: &'a [u8],
    pub allow_legacy: bool,
}

/// An accepted initiation, answered.
pub(crate) struct Answered {
    /// The response to send.
    pub packet: Vec<u8>,
    /// The new (unconfirmed) responder session.
    pub session: Session,
    /// The handshake hash (a new channel's binding).
    pub hash: [u8; 32],
}

/// A response accepted for one of our initiations.
pub(crate) struct Completed {
    pub session: Session,
    /// The responder continued the channel (the binding matched).
    pub continues: bool,
    /// The responder accepts lane numbers (it said so; only meaningful if we offered them).
    pub lanes: bool,
    pub hash: [u8; 32],
}

/// One peer's handshake state on both roles.
pub(crate) struct Handshake {
    pub initiation: Option<Box<Initiation>>,
    /// mac1 and mac2 of our initiations to this peer, and the cookie it last gave us.
    pub cookies: CookieGenerator,
    /// Timestamp of our newest initiation (each is strictly newer).
    pub last_ts_sent: u64,
    /// The peer's newest initiation we accepted, or that it told us it sent: anything not
    /// newer is a replay or an outdated crossing (`stale-handshake`).
    pub last_ts_accepted: u64,
}

impl Handshake {
    pub fn new(remote: &[u8; 32]) -> Self {
        Handshake {
            initiation: None,
            cookies: CookieGenerator::new(remote),
            last_ts_sent: 0,
            last_ts_accepted: 0,
        }
    }

    /// Builds and records a new initiation (attempt number `attempt`) with a fresh index for
    /// `owner`, replacing (and freeing) any under way. Returns the datagram to send. On error
    /// no index stays allocated.
    #[allow(clippy::too_many_arguments)]
    pub fn initiate(
        &mut self,
        host: &HostKey,
        prologue: &[u8],
        remote: &[u8; 32],
        payload: InitPayload,
        idx: &mut IndexTable,
        owner: usize,
        now: Time,
        attempt: u32,
    ) -> Result<&[u8], InitiateError> {
        self.abandon(idx);
        let local = idx.alloc(owner);
        let ts = now.as_nanos().max(self.last_ts_sent + 1);
        let payload = InitPayload {
            timestamp: ts,
            ..payload
        };
        match handshake::write_datagram_init(
            host,
            prologue,
            remote,
            local,
            &payload,
            &mut self.cookies,
            now,
        ) {
            Ok((hs, packet)) => Ok(self.record(hs, local, ts, now, attempt, packet)),
            Err(e) => {
                idx.free(local);
                Err(match e {
                    crate::Error::DegenerateKey => InitiateError::DegenerateKey,
                    e => InitiateError::Other(e),
                })
            }
        }
    }

    /// [`Handshake::initiate`] on WireGuard's wire: a message type 1 to `remote` (preshared key
    /// `psk`) timestamped `unix_nanos` (nanoseconds since the Unix epoch, whitened; raised to
    /// one past the last sent so that each initiation is newer).
    #[allow(clippy::too_many_arguments)]
    pub fn initiate_wg(
        &mut self,
        host: &HostKey,
        remote: &[u8; 32],
        psk: &[u8; 32],
        idx: &mut IndexTable,
        owner: usize,
        now: Time,
        unix_nanos: u64,
        attempt: u32,
    ) -> Result<&[u8], InitiateError> {
        self.abandon(idx);
        if handshake::x25519_public_is_degenerate(remote) {
            return Err(InitiateError::DegenerateKey);
        }
        let local = idx.alloc(owner);
        let ts = unix_nanos.max(self.last_ts_sent + 1);
        match crate::handshake::wg::write_initiation(
            host,
            remote,
            psk,
            local,
            &crate::handshake::wg::tai64n_of_nanos(ts),
            &mut self.cookies,
            now,
        ) {
            Ok((hs, packet)) => Ok(self.record(hs, local, ts, now, attempt, packet.to_vec())),
            Err(e) => {
                idx.free(local);
                Err(InitiateError::Other(crate::Error::Handshake(format!(
                    "handshake: {e}"
                ))))
            }
        }
    }

    /// Keeps a sent initiation (index `local`, timestamp `ts`); returns its bytes.
    fn record(
        &mut self,
        hs: snow::HandshakeState,
        local: u32,
        ts: u64,
        now: Time,
        attempt: u32,
        packet: Vec<u8>,
    ) -> &[u8] {
        self.last_ts_sent = ts;
        let init = self.initiation.insert(Box::new(Initiation {
            hs: Some(hs),
            local_index: local,
            sent_at: now,
            attempts: attempt,
            packet,
            cookie_retried: false,
        }));
        &init.packet
    }

    /// The serial half of an initiation built elsewhere: replaces (and frees) any under way
    /// with one whose message is not built yet, its index and timestamp (at least `ts`, one
    /// past the last sent) taken now. Retries count from `now`; [`Handshake::fill`] completes it.
    pub fn reserve(
        &mut self,
        idx: &mut IndexTable,
        owner: usize,
        now: Time,
        attempt: u32,
        ts: u64,
    ) -> (u32, u64) {
        self.abandon(idx);
        let local = idx.alloc(owner);
        let ts = ts.max(self.last_ts_sent + 1);
        self.last_ts_sent = ts;
        self.initiation = Some(Box::new(Initiation {
            hs: None,
            local_index: local,
            sent_at: now,
            attempts: attempt,
            packet: Vec::new(),
            cookie_retried: false,
        }));
        (local, ts)
    }

    /// Completes the reserved initiation `local` with its built message (MACs still zero: they
    /// are added here, with the cookie as it is now). Returns the datagram to send, or `None`
    /// when that reservation is no longer the one under way (stale: replaced or abandoned).
    pub fn fill(
        &mut self,
        local: u32,
        hs: snow::HandshakeState,
        mut packet: Vec<u8>,
        now: Time,
    ) -> Option<&[u8]> {
        let init = self
            .initiation
            .as_mut()
            .filter(|i| i.local_index == local && i.hs.is_none())?;
        self.cookies.add_macs(now, &mut packet);
        init.hs = Some(hs);
        init.packet = packet;
        init.sent_at = now;
        Some(&init.packet)
    }

    /// Drops the initiation under way, freeing its index.
    pub fn abandon(&mut self, idx: &mut IndexTable) {
        if let Some(i) = self.initiation.take() {
            idx.free(i.local_index);
        }
    }

    /// A cookie reply to our initiation `local_index`: keeps the cookie and, once per
    /// initiation, returns the same initiation with mac2 to send again (the responder did not
    /// process it).
    pub fn accept_cookie(
        &mut self,
        now: Time,
        local_index: u32,
        pkt: &[u8],
    ) -> Result<Option<&[u8]>, DropReason> {
        self.accept_cookie_with(now, local_index, |c| c.consume_reply(now, pkt))
    }

    /// [`Handshake::accept_cookie`] with the cookie taken out by `consume` (WireGuard's reply
    /// has its own header).
    pub fn accept_cookie_with(
        &mut self,
        now: Time,
        local_index: u32,
        consume: impl FnOnce(&mut CookieGenerator) -> Result<(), DropReason>,
    ) -> Result<Option<&[u8]>, DropReason> {
        let init = match &mut self.initiation {
            Some(i) if i.local_index == local_index && i.hs.is_some() => i,
            _ => return Err(DropReason::BadCookieReply),
        };
        consume(&mut self.cookies)?;
        if init.cookie_retried {
            return Ok(None);
        }
        init.cookie_retried = true;
        self.cookies.add_macs(now, &mut init.packet);
        Ok(Some(&init.packet))
    }

    /// The responder's checks on an authentic initiation: newer than the last accepted one
    /// (else a replay: `stale-handshake`) and a suite `accept` allows (`suite-refused`). Records
    /// its timestamp once both pass, so a replay is refused whatever the caller decides next.
    pub fn check_init(
        &mut self,
        payload: &InitPayload,
        accept: impl Fn(SuiteId) -> bool,
    ) -> Result<SuiteId, DropReason> {
        if payload.timestamp <= self.last_ts_accepted {
            return Err(DropReason::StaleHandshake);
        }
        let suite = SuiteId::from_u8(payload.suite)
            .filter(|s| accept(*s))
            .ok_or(DropReason::SuiteRefused)?;
        self.last_ts_accepted = payload.timestamp;
        Ok(suite)
    }

    /// Answers a checked initiation: a fresh index for `owner`, the response and the new
    /// responder session (`lanes`: say we accept lane numbers; the session then may send
    /// them). On any error the index is freed.
    #[allow(clippy::too_many_arguments)]
    pub fn respond(
        &self,
        hs: snow::HandshakeState,
        idx: &mut IndexTable,
        owner: usize,
        sender_index: u32,
        suite: SuiteId,
        continues: bool,
        lanes: bool,
        keys: Keys<'_>,
        now: Time,
    ) -> Result<Answered, DropReason> {
        let local = idx.alloc(owner);
        let last = self.last_ts_sent;
        let answered = Self::respond_as(
            hs,
            local,
            sender_index,
            suite,
            continues,
            lanes,
            last,
            keys,
            now,
        );
        if answered.is_err() {
            idx.free(local);
        }
        answered
    }

    /// [`Handshake::respond`]'s public-key work with the index `local` already allocated and
    /// our newest initiation's timestamp `last_ts_sent` read: needs no state, so a driver may
    /// run it with no lock held. The caller frees `local` on an error.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn respond_as(
        hs: snow::HandshakeState,
        local: u32,
        sender_index: u32,
        suite: SuiteId,
        continues: bool,
        lanes: bool,
        last_ts_sent: u64,
        keys: Keys<'_>,
        now: Time,
    ) -> Result<Answered, DropReason> {
        handshake::write_response(
            hs,
            sender_index,
            local,
            suite,
            continues,
            lanes,
            last_ts_sent,
        )
        .and_then(|(packet, split)| {
            let mut session = derive(suite, &split, keys, local, sender_index, now, false)?;
            session.set_lanes(lanes);
            Ok(Answered {
                packet,
                session,
                hash: split.hash,
            })
        })
    }

    /// Reads the response `pkt` to `init` (which the caller matched by index; its index becomes
    /// the session's) and derives the initiator's session. The responder's newest-timestamp
    /// hint is recorded once the response is authentic. The suite must be the one proposed.
    #[allow(clippy::too_many_arguments)]
    pub fn complete(
        last_ts_accepted: &mut u64,
        init: &mut Initiation,
        pkt: &[u8],
        proposed: SuiteId,
        keys: Keys<'_>,
        sender_index: u32,
        now: Time,
    ) -> Result<Completed, DropReason> {
        let hs = init.hs.as_mut().ok_or(DropReason::UnexpectedResponse)?;
        let resp = handshake::read_response(hs, pkt)?;
        *last_ts_accepted = (*last_ts_accepted).max(resp.newest_peer_init);
        let suite = SuiteId::from_u8(resp.suite)
            .filter(|s| *s == proposed)
            .ok_or(DropReason::SuiteRefused)?;
        let session = derive(
            suite,
            &resp.split,
            keys,
            init.local_index,
            sender_index,
            now,
            true,
        )?;
        Ok(Completed {
            session,
            continues: resp.continues,
            lanes: resp.lanes,
            hash: resp.split.hash,
        })
    }
}

#[cfg(test)]
thread_local! {
    /// Test hook: the next key derivation on this thread fails (nothing on the wire reaches
    /// that error once the suite checks passed, but every core must survive it).
    static FAIL_NEXT_DERIVATION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes the next key derivation on this thread fail (tests only).
#[cfg(test)]
pub(crate) fn fail_next_derivation() {
    FAIL_NEXT_DERIVATION.with(|f| f.set(true));
}

fn derive(
    suite: SuiteId,
    split: &handshake::Split,
    keys: Keys<'_>,
    local_index: u32,
    remote_index: u32,
    now: Time,
    initiator: bool,
) -> Result<Session, DropReason> {
    #[cfg(test)]
    if FAIL_NEXT_DERIVATION.with(|f| f.replace(false)) {
        return Err(DropReason::SuiteRefused);
    }
    Session::new(
        suite,
        split,
        keys.label,
        keys.allow_legacy,
        local_index,
        remote_index,
        now,
        initiator,
    )
}
