//! The per-datagram fast path: header, in-place seal, header parse and in-place open. The
//! receive side's checks run in the order that matters (parse, index, replay check, open, replay
//! accept), the replay steps in the session's serial halves ([`crate::session::Session::reserve_open`],
//! [`crate::session::Session::accept`]) and the open here, through [`crate::session::OpenJob`];
//! the parallel engine and `sealink-lab bench seal` call these functions directly.

use std::ops::Range;

use sealink_crypto::{CryptoError, PacketKey, Scope};

use crate::error::DropReason;
use crate::wire::{self, HEADER_LEN, Header};

/// Why sealing a datagram failed: always a local fault (a buffer too small, a key refused),
/// never something the network sent, so it is not a [`DropReason`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    #[error("no room for the data header: buffer of {0} bytes")]
    NoHeaderRoom(usize),
    #[error("seal failed: {0}")]
    Crypto(#[from] CryptoError),
}

/// Writes the data header into `buf[..16]` and seals `buf[16..16 + body_len]` in place; returns
/// the datagram length. `buf` needs room for `16 + body_len + suite overhead`. `lane` goes in
/// the header's byte 3 ([`wire::LANE_OFFSET`]), authenticated with the rest of the header: 0
/// unless the peer agreed on lanes in its handshake (older receivers drop a datagram whose
/// byte 3 is not 0).
#[inline]
pub fn seal_datagram(
    key: &PacketKey,
    receiver: u32,
    counter: u64,
    scope: Scope,
    buf: &mut [u8],
    body_len: usize,
    lane: u8,
) -> Result<usize, SealError> {
    let have = buf.len();
    let hdr: &mut [u8; HEADER_LEN] = buf
        .get_mut(..HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(SealError::NoHeaderRoom(have))?;
    wire::write_header(
        &Header::Data {
            scope,
            receiver,
            counter,
        },
        hdr,
    );
    hdr[wire::LANE_OFFSET] = lane;
    let sealed = key.seal_contiguous(counter, scope, buf, HEADER_LEN, body_len)?;
    Ok(HEADER_LEN + sealed)
}

/// Parses the header of a data datagram: (scope, receiver index, counter).
#[inline]
pub fn parse_data_header(buf: &[u8]) -> Result<(Scope, u32, u64), DropReason> {
    match wire::parse_header(buf)? {
        Header::Data {
            scope,
            receiver,
            counter,
        } => Ok((scope, receiver, counter)),
        _ => Err(DropReason::MalformedHeader),
    }
}

/// Opens a data datagram in place without touching a replay window: for callers that open on
/// any core and check and record counters themselves, serially and in order (the parallel
/// engine). Returns the plaintext body's range in `buf`.
#[inline]
pub fn open_in_place(
    key: &PacketKey,
    scope: Scope,
    counter: u64,
    allow_plaintext: bool,
    buf: &mut [u8],
) -> Result<Range<usize>, DropReason> {
    if scope == Scope::None && !allow_plaintext {
        return Err(DropReason::ScopeRefused);
    }
    let sealed_len = buf
        .len()
        .checked_sub(HEADER_LEN)
        .ok_or(DropReason::MalformedHeader)?;
    let n = key
        .open_contiguous(counter, scope, buf, HEADER_LEN, sealed_len)
        .map_err(|_| DropReason::AuthFailed)?;
    Ok(HEADER_LEN..HEADER_LEN + n)
}
