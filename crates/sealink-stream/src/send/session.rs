//! A sending session's connections: connect, handshake, hello and joins, then what goes on
//! the control stripe besides data (the receiver's replies, the sender's abort).

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use sealink_crypto::{PacketKey, Scope};
use sealink_proto::stream::handshake::{Initiator, RESPONSE_MESSAGE_LEN};
use sealink_proto::stream::record::RecordType;
use sealink_proto::stream::{
    Abort, AbortCode, Done, Hello, READY_SEQ, REPLY_SEQ, SENDER_ABORT_SEQ, SessionKeys, StreamError,
};

use super::SendConfig;
use crate::conn::{self, KIND_INIT, MAGIC, secs};
use crate::error::{IoContext, TransferError, is_connection_timeout, is_timeout, socket_error};
use crate::limits::Timeouts;
use crate::tree::Input;

/// Opens a session with the receiver at `addr`: connects, runs the handshake, sends the hello
/// (announcing `inputs`, the manifest's first batch, and whether `more` follow), then
/// connects the other stripes. Returns every stripe's socket (the control stripe's first) and
/// the session's keys.
pub(super) fn open(
    addr: SocketAddr,
    cfg: &SendConfig,
    inputs: &[Input],
    more: bool,
) -> Result<(Vec<TcpStream>, SessionKeys), TransferError> {
    let t = &cfg.timeouts;
    let control = connect(addr, t)?;
    let keys = handshake(&control, cfg)?;
    // The hello first: it authenticates this session to the receiver before the stripes
    // connect (until then they are connections it may evict under load).
    let intro = sealink_proto::stream::owner_intro(&keys.binding, cfg.host.public(), &cfg.peer);
    let hello = Hello {
        owner_public: cfg.owner.public_key(),
        owner_signature: cfg.owner.sign(&intro),
        record_data: cfg.record_data as u32,
        stripes: cfg.streams as u16,
        fresh: !cfg.resume,
        update: cfg.update,
        more,
        delete: cfg.delete,
        files: inputs.iter().map(|i| i.entry.clone()).collect(),
    };
    conn::write_record(
        &control,
        &keys.send,
        RecordType::Hello,
        cfg.scope,
        0,
        &hello.encode(),
    )?;
    drop(hello);
    let mut socks = vec![control];
    for stripe in 1..cfg.streams {
        let joined = connect(addr, t).and_then(|s| {
            (&s).write_all(&conn::join_message(&keys.join_token, stripe as u16))
                .ctx(|| "joining a stripe".into())?;
            Ok(s)
        });
        match joined {
            Ok(s) => socks.push(s),
            Err(e) => {
                // The receiver may have refused the hello and gone (`--once`): its abort on
                // the control stripe says why, which the failed connect does not.
                let answer = Instant::now() + Duration::from_secs(1);
                return Err(
                    match read_reply(&socks[0], &keys.recv, READY_SEQ, answer, "") {
                        Err(
                            a @ (TransferError::Refused(_) | TransferError::ReceiverAborted(_)),
                        ) => a,
                        _ => e,
                    },
                );
            }
        }
    }
    Ok((socks, keys))
}

/// Connects one stripe.
fn connect(addr: SocketAddr, t: &Timeouts) -> Result<TcpStream, TransferError> {
    let s = TcpStream::connect_timeout(&addr, t.setup).map_err(|e| {
        socket_error(e, &format!("cannot connect to {addr}"), || {
            format!("cannot connect to {addr} within {}", secs(t.setup))
        })
    })?;
    conn::tune(&s);
    // A write that cannot hand the receiver a single byte for this long fails.
    s.set_write_timeout(Some(t.idle))
        .ctx(|| "setting a send timeout".into())?;
    Ok(s)
}

/// Runs the handshake on the control stripe: the session's keys.
fn handshake(s: &TcpStream, cfg: &SendConfig) -> Result<SessionKeys, TransferError> {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let (init, msg) = Initiator::new(&cfg.host, &cfg.peer, cfg.suite, ts)?;
    let mut first = Vec::with_capacity(5 + msg.len());
    first.extend_from_slice(MAGIC);
    first.push(KIND_INIT);
    first.extend_from_slice(&msg);
    (&*s)
        .write_all(&first)
        .ctx(|| "sending the handshake".into())?;
    let mut resp = [0u8; RESPONSE_MESSAGE_LEN];
    let deadline = Instant::now() + cfg.timeouts.setup;
    match conn::read_full(s, &mut resp, deadline) {
        Ok(true) => {}
        Err(e) if is_connection_timeout(&e) => {
            return Err(TransferError::ConnectionTimedOut(
                "waiting for the answer to the handshake".into(),
            ));
        }
        Err(e) if is_timeout(&e) => {
            return Err(TransferError::TimedOut(format!(
                "no answer to the handshake within {}",
                secs(cfg.timeouts.setup)
            )));
        }
        Ok(false) | Err(_) => {
            return Err(TransferError::PeerClosed(
                "during the handshake (is this host in the receiver's trust file, and is the \
                 receiver's host key the one you gave? A busy receiver also closes new \
                 connections when it is flooded)"
                    .into(),
            ));
        }
    }
    Ok(init.finish(&resp)?)
}

/// Writes a record on the control stripe. If the write fails, the error is the receiver's
/// own reason when it sent one (see [`receivers_reason`]).
pub(super) fn write_control(
    control: &TcpStream,
    keys: &SessionKeys,
    scope: Scope,
    kind: RecordType,
    seq: u64,
    body: &[u8],
) -> Result<(), TransferError> {
    conn::write_record(control, &keys.send, kind, scope, seq, body)
        .map_err(|e| receivers_reason(&e, control, &keys.recv).unwrap_or(e))
}

/// Tells the receiver (best effort) why the sender gives up, and returns that error.
pub(super) fn abort_with(
    e: TransferError,
    control: &TcpStream,
    keys: &SessionKeys,
    cfg: &SendConfig,
) -> TransferError {
    if let Some(why) = receivers_reason(&e, control, &keys.recv) {
        return why;
    }
    // A stalled receiver may not take even this.
    let _ = control.set_write_timeout(Some(cfg.timeouts.idle.min(Duration::from_secs(1))));
    let abort = Abort {
        code: AbortCode::Other,
        message: e.to_string(),
    };
    let _ = conn::write_record(
        control,
        &keys.send,
        RecordType::Abort,
        cfg.scope,
        SENDER_ABORT_SEQ,
        &abort.encode(),
    );
    e
}

/// After a write failed (`e`), the receiver's own reason if it sent one: a receiver that gives
/// up says why on the control connection before closing, and closing with our data unread
/// resets the connection, so our next write fails with a bare reset.
fn receivers_reason(e: &TransferError, s: &TcpStream, key: &PacketKey) -> Option<TransferError> {
    if !matches!(e, TransferError::Io { .. }) {
        return None;
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    match read_reply(s, key, REPLY_SEQ, deadline, "the reason") {
        Err(why @ (TransferError::ReceiverAborted(_) | TransferError::Refused(_))) => Some(why),
        _ => None,
    }
}

/// Reads the receiver's reply with sequence number `seq`: `Ok` with its type and body, or
/// the receiver's abort as an error.
pub(super) fn read_reply(
    s: &TcpStream,
    key: &PacketKey,
    seq: u64,
    deadline: Instant,
    waiting_for: &str,
) -> Result<(RecordType, Vec<u8>), TransferError> {
    let closed = || {
        TransferError::PeerClosed(
            "before confirming the transfer; the receiver has not kept the files".into(),
        )
    };
    let (hdr, body) = match conn::read_record(s, key, deadline, waiting_for) {
        Ok(Some(r)) => r,
        Ok(None) => return Err(closed()),
        Err(TransferError::Io { source, .. })
            if matches!(
                source.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            return Err(closed());
        }
        Err(e) => return Err(e),
    };
    if hdr.kind == RecordType::Abort {
        let a = Abort::decode(&body)?;
        return Err(match a.code {
            AbortCode::Refused => TransferError::Refused(a.message),
            _ => TransferError::ReceiverAborted(a.message),
        });
    }
    if hdr.seq != seq {
        return Err(StreamError::OutOfRange {
            seq: hdr.seq,
            why: "not the receiver's reply",
        }
        .into());
    }
    Ok((hdr.kind, body))
}

/// The receiver answers once at the end, after it has verified and stored everything.
pub(super) fn wait_for_done(
    s: &TcpStream,
    key: &PacketKey,
    bytes: u64,
    files: usize,
    deadline: Instant,
) -> Result<(), TransferError> {
    match read_reply(s, key, REPLY_SEQ, deadline, "the receiver's confirmation")? {
        (RecordType::Done, body) => {
            let d = Done::decode(&body)?;
            if d.bytes != bytes || d.files as usize != files {
                return Err(TransferError::ReceiverAborted(format!(
                    "it confirmed {} bytes in {} files, {bytes} in {files} were sent",
                    d.bytes, d.files
                )));
            }
            Ok(())
        }
        _ => Err(StreamError::MalformedHeader("unexpected reply type").into()),
    }
}
