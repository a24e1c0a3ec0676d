//! Who the peer is: the handshake (a trusted host, a fresh initiation), then the hello (its
//! owner's signature, then trust), and whether `--once`'s one transfer lets it in.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::Instant;

use sealink_crypto::Scope;
use sealink_proto::cookie::UNTRUSTED_LOG_EVERY;
use sealink_proto::stream::handshake::accept_fresh;
use sealink_proto::stream::record::RecordType;
use sealink_proto::stream::{Abort, AbortCode, Hello, READY_SEQ, SessionKeys, StreamError};

use super::server::Ctx;
use super::takeover::OnceSlot;
use super::{RecvConfig, for_sender};
use crate::admit::{ConnDrop, ConnGuard};
use crate::conn;
use crate::error::TransferError;

/// What the handshake established, before the peer has proven it holds the keys.
pub(super) struct Handshaken {
    pub(super) keys: SessionKeys,
    pub(super) initiator: [u8; 32],
    pub(super) host: String,
}

/// Accepts the initiation `init` from a trusted host, if it is fresh (not a replay): the
/// answer to send and what the handshake established; `None` (logged and counted) otherwise.
pub(super) fn handshake(
    peer: SocketAddr,
    init: &[u8],
    guard: &mut ConnGuard,
    ctx: &Ctx,
) -> Option<(Vec<u8>, Handshaken)> {
    let mut host = String::new();
    let mut replayed = false;
    let mut untrusted = None;
    let trust = ctx.trust.current();
    let accepted = accept_fresh(
        &ctx.cfg.host,
        init,
        |k| {
            let found = trust.hosts.iter().find(|(_, h)| h == k);
            match found {
                Some((n, _)) => host = n.clone(),
                None => untrusted = Some(*k),
            }
            found.is_some()
        },
        |k, ts| {
            replayed = !guard.admission().fresh_initiation(k, ts);
            !replayed
        },
    );
    let (resp, keys, initiator) = match accepted {
        Ok(x) => x,
        Err(e) => {
            match untrusted {
                Some(key) if matches!(e, StreamError::UnknownHost) => log_untrusted(peer, &key),
                _ => tracing::debug!("{peer}: handshake refused: {e}"),
            }
            guard.dropped(if replayed {
                ConnDrop::ReplayedInitiation
            } else {
                ConnDrop::HandshakeFailed
            });
            return None;
        }
    };
    let hs = Handshaken {
        keys,
        initiator,
        host,
    };
    Some((resp, hs))
}

/// Answers the handshake, reads the hello and checks its owner: `Some((scope, checked))`
/// once the peer has authenticated and holds the `--once` slot (a refused hello holds it
/// only when no transfer was held); `None` (counted) otherwise.
pub(super) fn authenticate(
    control: &TcpStream,
    peer: SocketAddr,
    resp: &[u8],
    hs: &Handshaken,
    guard: &mut ConnGuard,
    deadline: Instant,
    ctx: &Ctx,
) -> Option<(Scope, Result<Checked, Refusal>)> {
    let mut c = control;
    if let Err(e) = c.write_all(resp) {
        tracing::debug!("{peer}: cannot answer the handshake: {e}");
        guard.dropped(ConnDrop::HandshakeFailed);
        return None;
    }
    let hello = match conn::read_record(control, &hs.keys.recv, deadline, "hello") {
        Ok(Some((hdr, body))) if hdr.kind == RecordType::Hello && hdr.seq == 0 => (hdr.scope, body),
        r => {
            let why = match r {
                Err(TransferError::TimedOut(_)) => ConnDrop::SetupTimeout,
                _ => ConnDrop::HandshakeFailed,
            };
            tracing::debug!("{peer}: no valid hello ({})", why.name());
            guard.dropped(why);
            return None;
        }
    };
    if !guard.authenticated() {
        return None;
    }
    let (scope, body) = hello;
    // The owner is checked before the slot is looked at: a hello that merely names the
    // holder's owner key takes nothing over, and its refusal is not the receiver's outcome.
    let checked = check_hello(&body, hs, &ctx.cfg, &ctx.trust.current());
    let turned_away = ctx.once && OnceSlot::turns_away(&ctx.slot, &checked, peer);
    if turned_away {
        let message = match &checked {
            // Refused on its own merits; only the sender is told why.
            Err((_, e)) => {
                tracing::info!(
                    "{peer}: refused ({e}); serving one transfer, held by another session"
                );
                for_sender(e, &ctx.cfg.dest)
            }
            Ok(_) => {
                tracing::info!("{peer}: turned away, serving one transfer only");
                "the receiver serves one transfer only and is busy with another".into()
            }
        };
        guard.dropped(ConnDrop::TurnedAway);
        let _ = conn::write_record(
            control,
            &hs.keys.send,
            RecordType::Abort,
            scope,
            READY_SEQ,
            &Abort {
                code: AbortCode::Refused,
                message,
            }
            .encode(),
        );
        return None;
    }
    let _ = control.set_write_timeout(Some(ctx.cfg.timeouts.idle));
    Some((scope, checked))
}

/// A hello that decoded, whose owner signature verifies, from an owner this receiver trusts.
pub(super) struct Checked {
    pub(super) hello: Hello,
    /// The owner's name in the trust file.
    pub(super) owner: String,
}

/// Why a hello was refused: the abort code the sender is told, and the error.
pub(super) type Refusal = (AbortCode, TransferError);

/// Decodes the hello and checks its owner: the signature over this session's binding, then
/// trust. Nothing about the session (the `--once` slot included) may depend on the owner a
/// hello names before this has passed.
fn check_hello(
    body: &[u8],
    hs: &Handshaken,
    cfg: &RecvConfig,
    trust: &crate::live_trust::Lists,
) -> Result<Checked, Refusal> {
    let hello = Hello::decode(body).map_err(|e| (AbortCode::Protocol, e.into()))?;
    let intro =
        sealink_proto::stream::owner_intro(&hs.keys.binding, &hs.initiator, cfg.host.public());
    if !sealink_crypto::sign::verify(&hello.owner_public, &intro, &hello.owner_signature) {
        return Err((AbortCode::Refused, StreamError::BadOwnerSignature.into()));
    }
    let Some(owner) = trust
        .owners
        .iter()
        .find(|(_, k)| *k == hello.owner_public)
        .map(|(n, _)| n.clone())
    else {
        // The key and its fingerprint in the log, as for an untrusted host: the
        // receiver's user can check it with the sender and trust it from this line.
        use base64::Engine as _;
        let key = base64::engine::general_purpose::STANDARD.encode(hello.owner_public);
        tracing::info!(
            target: crate::SAY_TARGET,
            "refused a transfer from host {}: owner key {key} (fingerprint {}) is not trusted; \
             to trust it: sealink trust add owner NAME {key}",
            hs.host,
            sealink_keys::fingerprint(&hello.owner_public)
        );
        return Err((AbortCode::Refused, StreamError::UntrustedOwner.into()));
    };
    Ok(Checked { hello, owner })
}

/// A refused handshake from a host key we do not trust, logged at info as sshd logs a refused
/// key, with the (public) key so that it can be trusted if it should be. At most one line per
/// `UNTRUSTED_LOG_EVERY` for the whole receiver: only someone who knows our public key gets
/// past mac1 this far, but they could have every initiation the limiter admits refused. The
/// next line counts those left out (all are counted as `handshake-failed`).
fn log_untrusted(peer: SocketAddr, key: &[u8; 32]) {
    use base64::Engine as _;
    static LAST: Mutex<(Option<Instant>, u64)> = Mutex::new((None, 0));
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    if last.0.is_some_and(|t| now < t + UNTRUSTED_LOG_EVERY) {
        last.1 += 1;
        return;
    }
    let more = std::mem::take(&mut last.1);
    last.0 = Some(now);
    let key = base64::engine::general_purpose::STANDARD.encode(key);
    if more > 0 {
        tracing::warn!(
            "refused a transfer from {peer}: host key {key} is not trusted ({more} more refused \
             since the last such line)"
        );
    } else {
        tracing::warn!("refused a transfer from {peer}: host key {key} is not trusted");
    }
}
