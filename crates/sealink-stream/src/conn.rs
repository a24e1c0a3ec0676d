//! Connection set-up and control records: the preamble that says whether a new connection
//! starts a session or joins one, the handshake messages, and reading/writing single records.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use sealink_crypto::{PacketKey, Scope};
use sealink_proto::stream::handshake::{INIT_PREAMBLE, JOIN_TOKEN_LEN};
use sealink_proto::stream::record::{self, RECORD_HEADER_LEN, RecordHeader, RecordType};

use crate::error::{IoContext, TransferError, is_timeout, socket_error};

pub(crate) const MAGIC: &[u8; 4] = b"SLS1";
/// An initiation that ends with mac1 ([`INIT_PREAMBLE`]); kind 1, without it, is retired.
pub(crate) const KIND_INIT: u8 = INIT_PREAMBLE[4];
pub(crate) const KIND_JOIN: u8 = 2;
const _: () = assert!(
    MAGIC[0] == INIT_PREAMBLE[0]
        && MAGIC[1] == INIT_PREAMBLE[1]
        && MAGIC[2] == INIT_PREAMBLE[2]
        && MAGIC[3] == INIT_PREAMBLE[3]
);
/// magic, kind, token, stripe index (u16 LE)
pub(crate) const JOIN_LEN: usize = 5 + JOIN_TOKEN_LEN + 2;
/// Socket buffers: a few batches in flight per connection.
const SOCKET_BUFFER: usize = 4 << 20;

/// Large socket buffers; failures only cost speed.
pub(crate) fn tune(s: &TcpStream) {
    let _ = rustix::net::sockopt::set_socket_send_buffer_size(s, SOCKET_BUFFER);
    let _ = rustix::net::sockopt::set_socket_recv_buffer_size(s, SOCKET_BUFFER);
}

pub(crate) fn join_message(token: &[u8; JOIN_TOKEN_LEN], stripe: u16) -> [u8; JOIN_LEN] {
    let mut m = [0u8; JOIN_LEN];
    m[..4].copy_from_slice(MAGIC);
    m[4] = KIND_JOIN;
    m[5..5 + JOIN_TOKEN_LEN].copy_from_slice(token);
    m[5 + JOIN_TOKEN_LEN..].copy_from_slice(&stripe.to_le_bytes());
    m
}

/// Writes one control record (small body, own buffer).
pub(crate) fn write_record(
    mut s: &TcpStream,
    key: &PacketKey,
    kind: RecordType,
    scope: Scope,
    seq: u64,
    body: &[u8],
) -> Result<(), TransferError> {
    let mut buf = vec![0u8; record::wire_len(body.len())];
    buf[RECORD_HEADER_LEN..][..body.len()].copy_from_slice(body);
    let n = record::seal_record(key, &mut buf, kind, scope, seq, body.len())?;
    s.write_all(&buf[..n])
        .ctx(|| format!("sending the {kind:?} record"))
}

/// Reads exactly `buf.len()` bytes by `deadline` (however the peer spreads them out);
/// `Ok(false)` on a clean end of stream before the first byte, a `TimedOut` error after the
/// deadline.
pub(crate) fn read_full(
    mut s: &TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> std::io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => return Err(std::io::ErrorKind::TimedOut.into()),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Reads and opens one record by `deadline`; `None` on a clean end of stream. The data is
/// returned. Running out of time is a `TimedOut` error naming `waiting_for`.
pub(crate) fn read_record(
    s: &TcpStream,
    key: &PacketKey,
    deadline: Instant,
    waiting_for: &str,
) -> Result<Option<(RecordHeader, Vec<u8>)>, TransferError> {
    let waited = deadline.saturating_duration_since(Instant::now());
    let fail = |e: std::io::Error, what: &str| {
        socket_error(e, &format!("reading {what}"), || {
            format!("no {waiting_for} within {}", secs(waited))
        })
    };
    let mut h = [0u8; RECORD_HEADER_LEN];
    if !read_full(s, &mut h, deadline).map_err(|e| fail(e, "a record header"))? {
        return Ok(None);
    }
    let hdr = RecordHeader::parse(&h)?;
    let mut buf = vec![0u8; hdr.record_len()];
    buf[..RECORD_HEADER_LEN].copy_from_slice(&h);
    if !read_full(s, &mut buf[RECORD_HEADER_LEN..], deadline).map_err(|e| fail(e, "a record"))? {
        return Err(TransferError::PeerClosed(
            "in the middle of a record".into(),
        ));
    }
    let n = record::open_record(key, &hdr, &mut buf)?;
    buf.drain(..RECORD_HEADER_LEN);
    buf.truncate(n);
    Ok(Some((hdr, buf)))
}

/// A duration for a person: "1.5 s".
pub(crate) fn secs(d: Duration) -> String {
    format!("{} s", (d.as_secs_f64() * 1000.0).round() / 1000.0)
}
