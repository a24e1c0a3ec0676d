//! WireGuard's transport data (message type 4) sealed and opened in place, beside its codec
//! ([`super::message`]): the product's sessions call these for a session on the WireGuard wire
//! ([`crate::session::SealJob`], [`crate::session::OpenJob`]).

use std::ops::Range;

use sealink_crypto::{PacketKey, Scope};

use crate::datapath::SealError;
use crate::error::DropReason;
use crate::wire::HEADER_LEN;

/// WireGuard's transport message: its header in `buf[..16]`, then `buf[16..16 + body_len]`
/// sealed in place with no associated data and the nonce 0^32 || counter (little-endian), which
/// is [`PacketKey`]'s nonce. Returns the datagram's length.
#[inline]
pub(crate) fn seal(
    key: &PacketKey,
    receiver: u32,
    counter: u64,
    buf: &mut [u8],
    body_len: usize,
) -> Result<usize, SealError> {
    let have = buf.len();
    let (hdr, body) = buf
        .split_at_mut_checked(HEADER_LEN)
        .ok_or(SealError::NoHeaderRoom(have))?;
    let hdr: &mut [u8; HEADER_LEN] = hdr.try_into().map_err(|_| SealError::NoHeaderRoom(have))?;
    super::message::write_transport_header(hdr, receiver, counter);
    let sealed = key.seal(counter, Scope::Encrypt, &[], body, body_len)?;
    Ok(HEADER_LEN + sealed)
}

/// Opens a WireGuard transport message in place; returns the plaintext's range.
#[inline]
pub(crate) fn open(
    key: &PacketKey,
    counter: u64,
    buf: &mut [u8],
) -> Result<Range<usize>, DropReason> {
    let body = buf
        .get_mut(HEADER_LEN..)
        .ok_or(DropReason::MalformedHeader)?;
    let len = body.len();
    let n = key
        .open(counter, Scope::Encrypt, &[], body, len)
        .map_err(|_| DropReason::AuthFailed)?;
    Ok(HEADER_LEN..HEADER_LEN + n)
}
