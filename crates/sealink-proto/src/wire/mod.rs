//! Wire format: the 16-byte header and the frames inside a data body. Parsing is strict and
//! bounds-checked: it returns an error on anything out of place and never panics.
//! Byte layout: docs/PROTOCOL.md.

mod frames;
mod write;

pub use frames::{AckFrame, AckRanges, Frame, Frames, RunFrame};
pub use write::{
    PAD_BLOCK, abandon_len, ack_len, block_padding, dest_len, msg_fixed_fits, msg_fixed_len,
    msg_frame_len, msg_run_header_len, one_run_as_fixed, owner_intro_len, pad_to_block,
    refused_len, run_item_data_len, run_item_len, run_item_message, run_items_fitting,
    set_run_count, write_abandon, write_ack, write_dest, write_msg, write_msg_fixed,
    write_msg_fixed_header, write_msg_run, write_msg_run_header, write_owner_intro, write_refused,
    write_run_item,
};

use sealink_crypto::Scope;

use crate::error::DropReason;

pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 16;
/// A data header's byte 3: the lane, a number the sender picks per flow (its TUN queue + 1;
/// 0 = none) so that a receiver's `SO_REUSEPORT` steering can spread one peer's datagrams over
/// several sockets and keep each flow on one. Written only to a peer that agreed on lanes in
/// the handshake; authenticated with the rest of the header; any value is accepted. The
/// handshake messages' byte 3 must be 0.
pub const LANE_OFFSET: usize = 3;
/// Longest owner or destination name, in bytes.
pub const MAX_NAME_LEN: usize = 64;
pub const SIGNATURE_LEN: usize = 64;
/// Most ranges an ACK frame may carry.
pub const MAX_ACK_RANGES: usize = 32;
/// Largest value a varint can hold (QUIC encoding, 62 bits).
pub const VARINT_MAX: u64 = (1 << 62) - 1;

pub const TYPE_INIT: u8 = 1;
pub const TYPE_RESPONSE: u8 = 2;
pub const TYPE_DATA: u8 = 3;
/// A responder under load answers an initiation with a cookie (see [`crate::handshake::cookie`]).
pub const TYPE_COOKIE: u8 = 4;

pub const FRAME_PADDING: u8 = 0x00;
pub const FRAME_ACK: u8 = 0x01;
pub const FRAME_OWNER_INTRO: u8 = 0x02;
pub const FRAME_DEST: u8 = 0x03;
pub const FRAME_MSG: u8 = 0x04;
pub const FRAME_PING: u8 = 0x05;
pub const FRAME_ABANDON: u8 = 0x06;
pub const FRAME_REFUSED: u8 = 0x07;
/// Consecutive messages of one owner to one destination: the MSG fields once, then each
/// message as its length and bytes. [`Frames`] yields them as [`Frame::Msg`]s.
pub const FRAME_MSG_RUN: u8 = 0x08;
/// One message in a fixed layout, with no varint: owner and destination ids of one byte, a
/// 16-bit length and the whole 64-bit sequence number, then the message. It ends the body:
/// whatever follows the message is zero padding, read as part of it (so no PADDING frame is
/// parsed after it). A sender writes it for a datagram's only message when the fields fit
/// ([`msg_fixed_fits`]); [`Frames`] yields it as the [`Frame::Msg`] it stands for.
pub const FRAME_MSG_FIXED: u8 = 0x09;
/// Bytes of a MSG_FIXED frame before its message: type, owner (u8), destination (u8), length
/// (u16 LE), seq (u64 LE).
pub const MSG_FIXED_HEADER_LEN: usize = 13;

/// Why a receiver refused one message it acknowledges (the REFUSED frame's reason byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefuseReason {
    /// Its owner is not in the receiver's trust file.
    UnknownOwner = 1,
    /// Its owner's introduction did not verify.
    BadOwnerSignature = 2,
    /// Its owner or destination id was introduced again under another name.
    OwnerConflict = 3,
    /// Its owner or destination id was never (successfully) introduced.
    UnknownOwnerId = 4,
}

impl RefuseReason {
    pub fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => RefuseReason::UnknownOwner,
            2 => RefuseReason::BadOwnerSignature,
            3 => RefuseReason::OwnerConflict,
            4 => RefuseReason::UnknownOwnerId,
            _ => return None,
        })
    }

    /// The drop reason the receiver counts it under.
    pub fn drop_reason(self) -> DropReason {
        match self {
            RefuseReason::UnknownOwner => DropReason::UnknownOwner,
            RefuseReason::BadOwnerSignature => DropReason::BadOwnerSignature,
            RefuseReason::OwnerConflict => DropReason::OwnerConflict,
            RefuseReason::UnknownOwnerId => DropReason::UnknownOwnerId,
        }
    }

    /// The owner-related drop reasons, as refusals; `None` for any other reason.
    pub fn from_drop(r: DropReason) -> Option<Self> {
        Some(match r {
            DropReason::UnknownOwner => RefuseReason::UnknownOwner,
            DropReason::BadOwnerSignature => RefuseReason::BadOwnerSignature,
            DropReason::OwnerConflict => RefuseReason::OwnerConflict,
            DropReason::UnknownOwnerId => RefuseReason::UnknownOwnerId,
            _ => return None,
        })
    }
}

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// Handshake initiation; `sender` is the index the initiator wants data sent to.
    Init { sender: u32 },
    /// Handshake response to the initiation whose index is `receiver`.
    Response { receiver: u32, sender: u32 },
    /// Cookie reply to the initiation whose index is `receiver`.
    CookieReply { receiver: u32 },
    /// Sealed data for the session indexed `receiver`.
    Data {
        scope: Scope,
        receiver: u32,
        counter: u64,
    },
}

/// Parses the 16-byte header at the start of `buf`.
#[inline]
pub fn parse_header(buf: &[u8]) -> Result<Header, DropReason> {
    let h: &[u8; HEADER_LEN] = buf
        .get(..HEADER_LEN)
        .and_then(|s| s.try_into().ok())
        .ok_or(DropReason::MalformedHeader)?;
    if h[0] != VERSION {
        return Err(DropReason::BadVersion);
    }
    // Byte 3: reserved (0) in handshake messages, the lane in data ([`LANE_OFFSET`]).
    if h[LANE_OFFSET] != 0 && h[1] != TYPE_DATA {
        return Err(DropReason::MalformedHeader);
    }
    let a = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    let b = u64::from_le_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]);
    match h[1] {
        TYPE_INIT if h[2] == 0 && b == 0 => Ok(Header::Init { sender: a }),
        TYPE_RESPONSE if h[2] == 0 && b >> 32 == 0 => Ok(Header::Response {
            receiver: a,
            sender: b as u32,
        }),
        TYPE_COOKIE if h[2] == 0 && b == 0 => Ok(Header::CookieReply { receiver: a }),
        TYPE_DATA => {
            let scope = Scope::from_u8(h[2]).ok_or(DropReason::MalformedHeader)?;
            Ok(Header::Data {
                scope,
                receiver: a,
                counter: b,
            })
        }
        _ => Err(DropReason::MalformedHeader),
    }
}

/// Writes a header into `out`.
#[inline]
pub fn write_header(h: &Header, out: &mut [u8; HEADER_LEN]) {
    let (ty, flags, a, b) = match *h {
        Header::Init { sender } => (TYPE_INIT, 0, sender, 0u64),
        Header::Response { receiver, sender } => (TYPE_RESPONSE, 0, receiver, sender as u64),
        Header::CookieReply { receiver } => (TYPE_COOKIE, 0, receiver, 0),
        Header::Data {
            scope,
            receiver,
            counter,
        } => (TYPE_DATA, scope as u8, receiver, counter),
    };
    out[0] = VERSION;
    out[1] = ty;
    out[2] = flags;
    out[3] = 0;
    out[4..8].copy_from_slice(&a.to_le_bytes());
    out[8..16].copy_from_slice(&b.to_le_bytes());
}

/// Encoded length of a varint.
pub const fn varint_len(v: u64) -> usize {
    if v < 1 << 6 {
        1
    } else if v < 1 << 14 {
        2
    } else if v < 1 << 30 {
        4
    } else {
        8
    }
}

/// The encoding of varint `v` (at most [`VARINT_MAX`]): its bytes are `.0[..len]`.
pub fn varint_bytes(v: u64) -> ([u8; 8], usize) {
    let len = varint_len(v);
    let tag: u64 = match len {
        1 => 0,
        2 => 1,
        4 => 2,
        _ => 3,
    };
    // Shifted to the top of the word, so the encoding is the first `len` bytes of its big-endian
    // form: no variable-length copy (a `memcpy` call and a stalled load per varint, 16% of the
    // sending CPU at 64-byte messages, RESULTS §19).
    let enc = (v | (tag << (len * 8 - 2))) << ((8 - len) * 8);
    (enc.to_be_bytes(), len)
}

/// Bounds-checked reader over a byte slice.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }
    #[inline]
    pub fn remaining(&self) -> &'a [u8] {
        &self.buf[self.pos.min(self.buf.len())..]
    }
    #[inline]
    pub fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    /// QUIC variable-length integer; rejects non-minimal encodings so each value has one form.
    #[inline(always)]
    pub fn varint(&mut self) -> Option<u64> {
        let first = *self.buf.get(self.pos)?;
        // One- and two-byte forms (lengths, owner ids, small counts) without a loop.
        let (v, len) = match first >> 6 {
            0 => (u64::from(first), 1),
            1 => {
                let second = *self.buf.get(self.pos + 1)?;
                (u64::from(u16::from_be_bytes([first & 0x3f, second])), 2)
            }
            // Four- and eight-byte forms as one load each (sequence numbers past 16383).
            2 => {
                let b: [u8; 4] = self.buf.get(self.pos..self.pos + 4)?.try_into().ok()?;
                (u64::from(u32::from_be_bytes(b) & 0x3fff_ffff), 4)
            }
            _ => {
                let b: [u8; 8] = self.buf.get(self.pos..self.pos + 8)?.try_into().ok()?;
                (u64::from_be_bytes(b) & 0x3fff_ffff_ffff_ffff, 8)
            }
        };
        if varint_len(v) != len {
            return None;
        }
        self.pos += len;
        Some(v)
    }
}

/// Bounds-checked writer into a caller-owned slice.
#[derive(Debug)]
pub struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    pub fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, pos: 0 }
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    #[inline(always)]
    pub fn u8(&mut self, v: u8) -> Option<()> {
        *self.buf.get_mut(self.pos)? = v;
        self.pos += 1;
        Some(())
    }
    #[inline]
    pub fn bytes(&mut self, v: &[u8]) -> Option<()> {
        let end = self.pos.checked_add(v.len())?;
        self.buf.get_mut(self.pos..end)?.copy_from_slice(v);
        self.pos = end;
        Some(())
    }
    #[inline(always)]
    pub fn varint(&mut self, v: u64) -> Option<()> {
        if v > VARINT_MAX {
            return None;
        }
        let (enc, len) = varint_bytes(v);
        // One fixed-size store per length rather than a variable-length copy (a `memcpy` call).
        let end = self.pos.checked_add(len)?;
        let out = self.buf.get_mut(self.pos..end)?;
        match len {
            1 => out.copy_from_slice(&enc[..1]),
            2 => out.copy_from_slice(&enc[..2]),
            4 => out.copy_from_slice(&enc[..4]),
            _ => out.copy_from_slice(&enc),
        }
        self.pos = end;
        Some(())
    }
}

/// True for a valid owner or destination name: 1..=64 bytes of `[A-Za-z0-9._@+-]`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'+' | b'-'))
}

#[cfg(test)]
mod tests;
