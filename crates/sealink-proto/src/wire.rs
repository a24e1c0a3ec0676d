//! Wire format: the 16-byte header and the frames inside a data body. Parsing is strict and
//! bounds-checked: it returns an error on anything out of place and never panics.
//! Byte layout: docs/PROTOCOL.md.

use crate::error::DropReason;
use sealink_crypto::Scope;

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
/// A responder under load answers an initiation with a cookie (see [`crate::cookie`]).
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

/// An ACK frame: every message sequence number below `cumulative` was received, and so was
/// every number in the listed ranges above it. Ranges are validated at parse time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckFrame<'a> {
    pub cumulative: u64,
    count: usize,
    encoded: &'a [u8],
}

impl<'a> AckFrame<'a> {
    /// The acknowledged ranges above `cumulative`, as half-open `[start, end)`, ascending.
    pub fn ranges(&self) -> AckRanges<'a> {
        AckRanges {
            r: Reader::new(self.encoded),
            left: self.count,
            prev_end: self.cumulative,
        }
    }
}

/// Iterator over an [`AckFrame`]'s ranges.
#[derive(Debug)]
pub struct AckRanges<'a> {
    r: Reader<'a>,
    left: usize,
    prev_end: u64,
}

impl Iterator for AckRanges<'_> {
    type Item = (u64, u64);
    fn next(&mut self) -> Option<(u64, u64)> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let gap = self.r.varint()?;
        let len = self.r.varint()?;
        let start = self.prev_end.checked_add(gap)?;
        let end = start.checked_add(len)?;
        self.prev_end = end;
        Some((start, end))
    }
}

/// One frame of a data body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Zero bytes to the end of the body.
    Padding,
    Ack(AckFrame<'a>),
    /// Introduces a sending owner: its channel-local id, its name, and its signature binding
    /// both to this channel and direction.
    OwnerIntro {
        id: u64,
        name: &'a str,
        sig: &'a [u8; SIGNATURE_LEN],
    },
    /// Declares a destination owner name under a channel-local id.
    Dest {
        id: u64,
        name: &'a str,
    },
    /// A user message.
    Msg {
        seq: u64,
        from: u64,
        to: u64,
        data: &'a [u8],
    },
    /// A MSG_RUN whole (only from [`Frames::with_runs`]; [`Frames::new`] yields its messages
    /// as [`Frame::Msg`]s).
    MsgRun(RunFrame<'a>),
    /// Asks for an acknowledgement; carries nothing.
    Ping,
    /// From a sender: it will never send again any message numbered below `below` (each was
    /// acknowledged or given up on), so the receiver settles them all.
    Abandon {
        below: u64,
    },
    /// From a receiver: message `seq` arrived and was refused (never delivered); the
    /// acknowledgements count it as settled.
    Refused {
        seq: u64,
        reason: RefuseReason,
    },
}

/// A MSG_RUN frame, its messages checked to parse: `count` messages numbered from `seq`, from
/// owner `from` to destination `to`, each as a length and bytes in `items`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunFrame<'a> {
    pub seq: u64,
    pub from: u64,
    pub to: u64,
    pub count: u16,
    pub items: &'a [u8],
    /// Bytes of each item when all have one size (length prefix included), else 0.
    pub stride: usize,
}

impl<'a> RunFrame<'a> {
    /// Each message with its sequence number, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &'a [u8])> + use<'a> {
        let items = self.items;
        let mut r = Reader::new(items);
        let (seq, stride) = (self.seq, self.stride);
        // Equal-sized items lie at known places: no length to read before finding the next.
        let prefix = match stride {
            0 => 0,
            _ => items.first().map_or(0, |&b| 1usize << (b >> 6)),
        };
        (0..u64::from(self.count)).map_while(move |k| {
            if stride != 0 {
                let at = k as usize * stride;
                return Some((seq + k, items.get(at + prefix..at + stride)?));
            }
            let len = usize::try_from(r.varint()?).ok()?;
            Some((seq + k, r.bytes(len)?))
        })
    }
}

/// The size of each of the `count` MSG_RUN items at the start of `items` when they all have
/// the first one's size (its length prefix included), else `None`. Each length is compared at
/// its predicted place, so the checks do not wait on one another as a walk's reads do: a
/// sender's batch of one size is checked at the cost of its loads (RESULTS §20).
fn equal_items(items: &[u8], count: u16) -> Option<usize> {
    let (a, b) = (*items.first()?, items.get(1).copied().unwrap_or(0));
    let k = match a >> 6 {
        0 => 1,
        1 => 2,
        _ => return None,
    };
    // The shortest form only, as `Reader::varint` reads it.
    let len = usize::try_from(Reader::new(items).varint()?).ok()?;
    let stride = k + len;
    let all = items.get(..stride.checked_mul(usize::from(count))?)?;
    all.chunks_exact(stride)
        .all(|c| c[0] == a && (k == 1 || c[1] == b))
        .then_some(stride)
}

/// Bytes of the `count` MSG_RUN items at the start of `items` (a varint length, then that many
/// bytes, each), or `None` if they do not all parse: the receive path checks every run this way
/// before it takes one.
///
/// What [`run_items_fitting`] finds for the whole run, read with the one- and two-byte lengths
/// (every message below 16 KiB) decoded in line and the bounds checked once at the end: the
/// receiving CPU walks every run twice (here, then delivering), so this walk is kept short
/// (RESULTS §20).
#[inline]
fn run_items_len(items: &[u8], count: u16) -> Option<usize> {
    let mut at = 0usize;
    for _ in 0..count {
        // `at` only grows: an item that overran `items` fails the next read or the final check.
        let first = *items.get(at)?;
        at += match first >> 6 {
            0 => 1 + usize::from(first),
            1 => {
                let len = usize::from(u16::from_be_bytes([first & 0x3f, *items.get(at + 1)?]));
                // Only the shortest form is a varint (as `Reader::varint` reads it).
                if len < 1 << 6 {
                    return None;
                }
                2 + len
            }
            _ => {
                let len = usize::try_from(Reader::new(&items[at..]).varint()?).ok()?;
                varint_len(len as u64).checked_add(len)?
            }
        };
    }
    (at <= items.len()).then_some(at)
}

/// A MSG_FIXED frame, `rest` being the body after its type byte: the fields at fixed places
/// (one load each, no varint), the message's bounds checked once, and the bytes after it (the
/// padding) OR-folded as a PADDING frame's are. Every check is folded into one test: a
/// message from owner 0, a seq no varint can hold or a non-zero padding byte is malformed.
#[inline(always)]
fn read_msg_fixed(rest: &[u8]) -> Option<Frame<'_>> {
    let (h, tail) = rest.split_first_chunk::<{ MSG_FIXED_HEADER_LEN - 1 }>()?;
    let len = usize::from(u16::from_le_bytes([h[2], h[3]]));
    let seq = u64::from_le_bytes([h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11]]);
    let (data, pad) = tail.split_at_checked(len)?;
    let pad_bits = pad.iter().fold(0u8, |a, b| a | b);
    if (h[0] == 0) | (seq > VARINT_MAX) | (pad_bits != 0) {
        return None;
    }
    Some(Frame::Msg {
        seq,
        from: u64::from(h[0]),
        to: u64::from(h[1]),
        data,
    })
}

fn read_name<'a>(r: &mut Reader<'a>) -> Option<&'a str> {
    let n = r.u8()? as usize;
    let s = std::str::from_utf8(r.bytes(n)?).ok()?;
    valid_name(s).then_some(s)
}

/// Iterates the frames of a data body; yields `Err` once on the first malformed frame. A
/// MSG_RUN frame comes out as one [`Frame::Msg`] per message.
#[derive(Debug)]
pub struct Frames<'a> {
    r: Reader<'a>,
    failed: bool,
    /// The MSG_RUN being read: next seq, owner, destination, messages left.
    run: Option<(u64, u64, u64, u16)>,
    runs: usize,
    /// MSG_FIXED frames read (at most one: it ends the body).
    fixed: usize,
    /// Yield each MSG_RUN as one [`Frame::MsgRun`].
    whole_runs: bool,
}

impl<'a> Frames<'a> {
    pub fn new(body: &'a [u8]) -> Self {
        Frames {
            r: Reader::new(body),
            failed: false,
            run: None,
            runs: 0,
            fixed: 0,
            whole_runs: false,
        }
    }

    /// As [`Frames::new`], but each MSG_RUN comes out whole, as a [`Frame::MsgRun`] whose
    /// messages were checked to parse (the receive path's form: it takes a run at once).
    pub fn with_runs(body: &'a [u8]) -> Self {
        Frames {
            whole_runs: true,
            ..Frames::new(body)
        }
    }

    /// MSG_RUN frames begun so far (their messages come out as MSGs).
    pub fn runs(&self) -> usize {
        self.runs
    }

    /// MSG_FIXED frames read so far (0 or 1: one ends the body; its message came out as a MSG).
    pub fn fixed_msgs(&self) -> usize {
        self.fixed
    }

    /// The next message of the MSG_RUN being read.
    fn run_item(&mut self, (seq, from, to, left): (u64, u64, u64, u16)) -> Option<Frame<'a>> {
        let len = self.r.varint()?;
        let data = self.r.bytes(usize::try_from(len).ok()?)?;
        self.run = (left > 1).then_some((seq + 1, from, to, left - 1));
        Some(Frame::Msg {
            seq,
            from,
            to,
            data,
        })
    }

    // Inlined into `next`, its one caller: returned through memory, the frame cost a
    // store-forwarding stall per frame (a quarter of the frame parse's time, RESULTS §22).
    #[inline(always)]
    fn parse_one(&mut self) -> Option<Frame<'a>> {
        if let Some(run) = self.run {
            return self.run_item(run);
        }
        let r = &mut self.r;
        match r.u8()? {
            FRAME_PADDING => {
                // OR-fold rather than `all`: no early exit, so it runs a word at a time over
                // the up to 15 bytes a sender pads with (`pad_to_block`).
                if r.remaining().iter().fold(0u8, |a, b| a | b) == 0 {
                    let n = r.remaining().len();
                    r.bytes(n)?;
                    Some(Frame::Padding)
                } else {
                    None
                }
            }
            FRAME_ACK => {
                let cumulative = r.varint()?;
                let count = r.varint()? as usize;
                if count > MAX_ACK_RANGES {
                    return None;
                }
                let start = r.remaining();
                let mut prev_end = cumulative;
                for _ in 0..count {
                    let gap = r.varint()?;
                    let len = r.varint()?;
                    // Ranges are disjoint, non-adjacent and non-empty: `cumulative` itself was
                    // not received (or it would be higher), so every range starts after a gap.
                    if gap == 0 || len == 0 {
                        return None;
                    }
                    let s = prev_end.checked_add(gap)?;
                    prev_end = s.checked_add(len)?;
                    if prev_end > VARINT_MAX {
                        return None;
                    }
                }
                let used = start.len() - r.remaining().len();
                Some(Frame::Ack(AckFrame {
                    cumulative,
                    count,
                    encoded: &start[..used],
                }))
            }
            FRAME_OWNER_INTRO => {
                let id = r.varint()?;
                let name = read_name(r)?;
                let sig = r.bytes(SIGNATURE_LEN)?.try_into().ok()?;
                (id != 0).then_some(Frame::OwnerIntro { id, name, sig })
            }
            FRAME_DEST => {
                let id = r.varint()?;
                let name = read_name(r)?;
                (id != 0).then_some(Frame::Dest { id, name })
            }
            FRAME_MSG => {
                let seq = r.varint()?;
                let from = r.varint()?;
                let to = r.varint()?;
                let len = r.varint()?;
                let data = r.bytes(usize::try_from(len).ok()?)?;
                (from != 0).then_some(Frame::Msg {
                    seq,
                    from,
                    to,
                    data,
                })
            }
            FRAME_MSG_RUN => {
                let seq = r.varint()?;
                let from = r.varint()?;
                let to = r.varint()?;
                let count = u16::from_be_bytes(r.bytes(2)?.try_into().ok()?);
                // Every seq of the run must be a varint too.
                if from == 0 || count == 0 || seq.checked_add(u64::from(count))? > VARINT_MAX + 1 {
                    return None;
                }
                self.runs += 1;
                if self.whole_runs {
                    let start = r.remaining();
                    let (used, stride) = match equal_items(start, count) {
                        Some(stride) => (stride * usize::from(count), stride),
                        None => (run_items_len(start, count)?, 0),
                    };
                    r.bytes(used)?;
                    return Some(Frame::MsgRun(RunFrame {
                        seq,
                        from,
                        to,
                        count,
                        items: &start[..used],
                        stride,
                    }));
                }
                self.run_item((seq, from, to, count))
            }
            FRAME_MSG_FIXED => {
                let f = read_msg_fixed(r.remaining())?;
                // The frame takes the rest of the body (its message, then padding).
                r.pos = r.buf.len();
                self.fixed += 1;
                Some(f)
            }
            FRAME_PING => Some(Frame::Ping),
            FRAME_ABANDON => Some(Frame::Abandon { below: r.varint()? }),
            FRAME_REFUSED => {
                let seq = r.varint()?;
                let reason = RefuseReason::from_u8(r.u8()?)?;
                Some(Frame::Refused { seq, reason })
            }
            _ => None,
        }
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, DropReason>;
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || (self.r.is_empty() && self.run.is_none()) {
            return None;
        }
        match self.parse_one() {
            Some(f) => Some(Ok(f)),
            None => {
                self.failed = true;
                Some(Err(DropReason::MalformedFrame))
            }
        }
    }
}

/// Encrypted bodies are padded to a multiple of this (one AES block).
pub const PAD_BLOCK: usize = 16;

/// Bytes of PADDING that bring a body of `len` bytes to a multiple of [`PAD_BLOCK`].
#[inline]
pub const fn block_padding(len: usize) -> usize {
    (PAD_BLOCK - len % PAD_BLOCK) % PAD_BLOCK
}

/// Ends an encrypted body with a PADDING frame (zero bytes) up to a multiple of [`PAD_BLOCK`],
/// when the writer has room; otherwise leaves it as it is. AES-GCM seals whole blocks in its
/// bulk code and a partial last block in a slower tail (an extra GHASH multiply): on the AVX-512
/// path an 80-byte body seals and opens as fast as a 64-byte one and 10% faster than a 72-byte
/// one (RESULTS §22). Like WireGuard's padding, it also blurs message lengths.
#[inline]
pub fn pad_to_block(w: &mut Writer<'_>) {
    let pad = block_padding(w.pos());
    if pad > 0 && pad <= w.remaining() {
        // Zero bytes are a PADDING frame (type 0x00) and its zero contents.
        let at = w.pos;
        w.buf[at..at + pad].fill(0);
        w.pos = at + pad;
    }
}

/// Encoded size of a MSG frame carrying `len` bytes.
pub fn msg_frame_len(seq: u64, from: u64, to: u64, len: usize) -> usize {
    1 + varint_len(seq) + varint_len(from) + varint_len(to) + varint_len(len as u64) + len
}

pub fn write_msg(w: &mut Writer<'_>, seq: u64, from: u64, to: u64, data: &[u8]) -> Option<()> {
    w.u8(FRAME_MSG)?;
    w.varint(seq)?;
    w.varint(from)?;
    w.varint(to)?;
    w.varint(data.len() as u64)?;
    w.bytes(data)
}

/// Encoded size of a MSG_RUN header (the count written as 0, see [`set_run_count`]).
pub fn msg_run_header_len(seq: u64, from: u64, to: u64) -> usize {
    1 + varint_len(seq) + varint_len(from) + varint_len(to) + 2
}

/// Encoded size of one message inside a MSG_RUN.
pub fn run_item_len(len: usize) -> usize {
    varint_len(len as u64) + len
}

/// The message of the MSG_RUN item at the start of `items` (its varint length, then its bytes),
/// or `None` if it does not parse.
pub fn run_item_message(items: &[u8]) -> Option<&[u8]> {
    let mut r = Reader::new(items);
    let len = usize::try_from(r.varint()?).ok()?;
    r.bytes(len)
}

/// The message length whose MSG_RUN item takes `item` bytes, if one does (an item's size grows
/// with its length, so there is at most one; 0 bytes is no item).
pub fn run_item_data_len(item: usize) -> Option<usize> {
    [1, 2, 4, 8]
        .into_iter()
        .filter_map(|k| item.checked_sub(k))
        .find(|&l| run_item_len(l) == item)
}

/// Starts a MSG_RUN whose first message is `seq`; returns where its count lies, for
/// [`set_run_count`] once its messages ([`write_run_item`]) are written.
pub fn write_msg_run_header(w: &mut Writer<'_>, seq: u64, from: u64, to: u64) -> Option<usize> {
    w.u8(FRAME_MSG_RUN)?;
    w.varint(seq)?;
    w.varint(from)?;
    w.varint(to)?;
    let at = w.pos();
    w.bytes(&[0, 0])?;
    Some(at)
}

pub fn write_run_item(w: &mut Writer<'_>, data: &[u8]) -> Option<()> {
    w.varint(data.len() as u64)?;
    w.bytes(data)
}

/// Writes a whole MSG_RUN: its header, then `count` messages already encoded as items
/// (varint length, bytes) back to back in `items`.
pub fn write_msg_run(
    w: &mut Writer<'_>,
    seq: u64,
    from: u64,
    to: u64,
    count: u16,
    items: &[u8],
) -> Option<()> {
    let at = write_msg_run_header(w, seq, from, to)?;
    set_run_count(w, at, count)?;
    w.bytes(items)
}

/// How many of the MSG_RUN items at the front of `items` (at most `max`) fit in `cap` bytes,
/// and the bytes they take. Stops at the first item that does not parse.
pub fn run_items_fitting(items: &[u8], max: usize, cap: usize) -> (usize, usize) {
    let mut r = Reader::new(items);
    let (mut n, mut used) = (0, 0);
    while n < max && !r.is_empty() {
        let Some(len) = r.varint().and_then(|l| usize::try_from(l).ok()) else {
            break;
        };
        let item = varint_len(len as u64) + len;
        if used + item > cap || r.bytes(len).is_none() {
            break;
        }
        used += item;
        n += 1;
    }
    (n, used)
}

/// True when a message's fields fit a MSG_FIXED frame: owner id 1..=255, destination id
/// 0..=255, at most 65535 bytes (every message does: a datagram is at most 65535 bytes), and a
/// seq a varint can hold (every seq a sender numbers).
#[inline]
pub fn msg_fixed_fits(seq: u64, from: u64, to: u64, len: usize) -> bool {
    (1..=0xff).contains(&from) && to <= 0xff && len <= usize::from(u16::MAX) && seq <= VARINT_MAX
}

/// Encoded size of a MSG_FIXED frame carrying `len` bytes (padding not counted).
pub const fn msg_fixed_len(len: usize) -> usize {
    MSG_FIXED_HEADER_LEN + len
}

/// Writes the header of a MSG_FIXED frame for a message of `len` bytes at the start of `out`
/// (the message follows it); `None`, writing nothing, when the fields do not fit
/// ([`msg_fixed_fits`]) or `out` is shorter than [`MSG_FIXED_HEADER_LEN`]. The sender's one
/// encoder of the frame ([`one_run_as_fixed`], [`write_msg_fixed`]).
#[inline]
pub fn write_msg_fixed_header(
    out: &mut [u8],
    seq: u64,
    from: u64,
    to: u64,
    len: usize,
) -> Option<()> {
    if !msg_fixed_fits(seq, from, to, len) {
        return None;
    }
    let (h, _) = out.split_first_chunk_mut::<MSG_FIXED_HEADER_LEN>()?;
    h[0] = FRAME_MSG_FIXED;
    h[1] = from as u8;
    h[2] = to as u8;
    h[3..5].copy_from_slice(&(len as u16).to_le_bytes());
    h[5..].copy_from_slice(&seq.to_le_bytes());
    Some(())
}

/// Writes a whole MSG_FIXED frame (it must end the body: only padding may follow).
pub fn write_msg_fixed(
    w: &mut Writer<'_>,
    seq: u64,
    from: u64,
    to: u64,
    data: &[u8],
) -> Option<()> {
    let end = w.pos.checked_add(msg_fixed_len(data.len()))?;
    let out = w.buf.get_mut(w.pos..end)?;
    write_msg_fixed_header(out, seq, from, to, data.len())?;
    out[MSG_FIXED_HEADER_LEN..].copy_from_slice(data);
    w.pos = end;
    Some(())
}

/// Rewrites as a MSG_FIXED frame the one-message MSG_RUN that starts at `start` and ends what
/// `w` has written (its message `data`, numbered `seq`, from owner `from` to destination `to`),
/// when the fields fit and `w` has room for the frame; returns whether it did (if not, the bytes
/// are left as they were). The sender writes a datagram's messages as MSG_RUNs from its send
/// arena and, when the datagram carries exactly one, calls this before padding it.
///
/// `data` is the message's own copy (the sender's arena, which still holds it), copied to its
/// new place: a first form that moved the bytes just written within the datagram added 10-14
/// ns to writing a 64-byte message's frame where this adds 6-9 (RESULTS §34).
pub fn one_run_as_fixed(
    w: &mut Writer<'_>,
    start: usize,
    seq: u64,
    from: u64,
    to: u64,
    data: &[u8],
) -> bool {
    let len = data.len();
    let run_end = start
        .saturating_add(msg_run_header_len(seq, from, to))
        .saturating_add(run_item_len(len));
    let end = start.saturating_add(msg_fixed_len(len));
    let mut header = [0u8; MSG_FIXED_HEADER_LEN];
    if run_end != w.pos
        || end > w.buf.len()
        || write_msg_fixed_header(&mut header, seq, from, to, len).is_none()
    {
        return false;
    }
    debug_assert_eq!(
        Frames::new(&w.buf[start..w.pos]).collect::<Result<Vec<_>, _>>(),
        Ok(vec![Frame::Msg {
            seq,
            from,
            to,
            data
        }]),
        "not this message's one-message MSG_RUN"
    );
    let out = &mut w.buf[start..end];
    out[..MSG_FIXED_HEADER_LEN].copy_from_slice(&header);
    out[MSG_FIXED_HEADER_LEN..].copy_from_slice(data);
    w.pos = end;
    true
}

/// Fills in a MSG_RUN's count at `at` (from [`write_msg_run_header`]).
pub fn set_run_count(w: &mut Writer<'_>, at: usize, count: u16) -> Option<()> {
    w.buf
        .get_mut(at..at + 2)?
        .copy_from_slice(&count.to_be_bytes());
    Some(())
}

pub fn owner_intro_len(id: u64, name: &str) -> usize {
    1 + varint_len(id) + 1 + name.len() + SIGNATURE_LEN
}

pub fn write_owner_intro(
    w: &mut Writer<'_>,
    id: u64,
    name: &str,
    sig: &[u8; SIGNATURE_LEN],
) -> Option<()> {
    w.u8(FRAME_OWNER_INTRO)?;
    w.varint(id)?;
    w.u8(u8::try_from(name.len()).ok()?)?;
    w.bytes(name.as_bytes())?;
    w.bytes(sig)
}

pub fn dest_len(id: u64, name: &str) -> usize {
    1 + varint_len(id) + 1 + name.len()
}

pub fn write_dest(w: &mut Writer<'_>, id: u64, name: &str) -> Option<()> {
    w.u8(FRAME_DEST)?;
    w.varint(id)?;
    w.u8(u8::try_from(name.len()).ok()?)?;
    w.bytes(name.as_bytes())
}

/// Writes an ACK frame for `cumulative` and ascending, disjoint, non-adjacent `ranges` above
/// it (at most [`MAX_ACK_RANGES`]; the caller passes the newest ones).
pub fn write_ack(w: &mut Writer<'_>, cumulative: u64, ranges: &[(u64, u64)]) -> Option<()> {
    w.u8(FRAME_ACK)?;
    w.varint(cumulative)?;
    w.varint(ranges.len() as u64)?;
    let mut prev = cumulative;
    for &(s, e) in ranges {
        w.varint(s.checked_sub(prev)?)?;
        w.varint(e.checked_sub(s)?)?;
        prev = e;
    }
    Some(())
}

pub fn abandon_len(below: u64) -> usize {
    1 + varint_len(below)
}

pub fn write_abandon(w: &mut Writer<'_>, below: u64) -> Option<()> {
    w.u8(FRAME_ABANDON)?;
    w.varint(below)
}

pub fn refused_len(seq: u64) -> usize {
    1 + varint_len(seq) + 1
}

pub fn write_refused(w: &mut Writer<'_>, seq: u64, reason: RefuseReason) -> Option<()> {
    w.u8(FRAME_REFUSED)?;
    w.varint(seq)?;
    w.u8(reason as u8)
}

pub fn ack_len(cumulative: u64, ranges: &[(u64, u64)]) -> usize {
    let mut n = 1 + varint_len(cumulative) + varint_len(ranges.len() as u64);
    let mut prev = cumulative;
    for &(s, e) in ranges {
        n += varint_len(s.saturating_sub(prev)) + varint_len(e.saturating_sub(s));
        prev = e;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_round_trip() {
        for h in [
            Header::Init { sender: 7 },
            Header::Response {
                receiver: 1,
                sender: u32::MAX,
            },
            Header::Data {
                scope: Scope::AuthOnly,
                receiver: 42,
                counter: u64::MAX,
            },
        ] {
            let mut b = [0u8; HEADER_LEN];
            write_header(&h, &mut b);
            assert_eq!(parse_header(&b), Ok(h));
        }
    }

    #[test]
    fn header_rejects() {
        assert_eq!(parse_header(&[1u8; 3]), Err(DropReason::MalformedHeader));
        let mut b = [0u8; HEADER_LEN];
        write_header(&Header::Init { sender: 1 }, &mut b);
        b[0] = 2;
        assert_eq!(parse_header(&b), Err(DropReason::BadVersion));
        b[0] = 1;
        b[3] = 1;
        assert_eq!(parse_header(&b), Err(DropReason::MalformedHeader));
        b[3] = 0;
        b[9] = 1; // init must carry zero counter
        assert_eq!(parse_header(&b), Err(DropReason::MalformedHeader));
        b[9] = 0;
        b[1] = 9;
        assert_eq!(parse_header(&b), Err(DropReason::MalformedHeader));
        b[1] = TYPE_DATA;
        b[2] = 3;
        assert_eq!(parse_header(&b), Err(DropReason::MalformedHeader));
    }

    /// Byte 3 is a data header's lane (any value) and must be 0 in every handshake message.
    #[test]
    fn lane_byte_only_in_data() {
        for lane in [1u8, 2, 255] {
            let mut b = [0u8; HEADER_LEN];
            let data = Header::Data {
                scope: Scope::Encrypt,
                receiver: 7,
                counter: 9,
            };
            write_header(&data, &mut b);
            b[LANE_OFFSET] = lane;
            assert_eq!(parse_header(&b), Ok(data));
            for h in [
                Header::Init { sender: 1 },
                Header::Response {
                    receiver: 1,
                    sender: 2,
                },
                Header::CookieReply { receiver: 1 },
            ] {
                write_header(&h, &mut b);
                assert_eq!(parse_header(&b), Ok(h));
                b[LANE_OFFSET] = lane;
                assert_eq!(parse_header(&b), Err(DropReason::MalformedHeader), "{h:?}");
            }
        }
    }

    /// RFC 9000 Appendix A.1's examples, both ways, and truncations of each.
    #[test]
    fn varint_known_answers() {
        let cases: [(&[u8], u64); 4] = [
            (
                &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c],
                151_288_809_941_952_652,
            ),
            (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
            (&[0x7b, 0xbd], 15_293),
            (&[0x25], 37),
        ];
        for (enc, v) in cases {
            let mut r = Reader::new(enc);
            assert_eq!(r.varint(), Some(v), "{enc:02x?}");
            assert!(r.is_empty());
            let (bytes, n) = varint_bytes(v);
            assert_eq!(&bytes[..n], enc);
            for cut in 0..enc.len() {
                assert_eq!(
                    Reader::new(&enc[..cut]).varint(),
                    None,
                    "{enc:02x?} cut at {cut}"
                );
            }
        }
        // Two varints back to back: the reader stops exactly after the first.
        let mut r = Reader::new(&[0x7b, 0xbd, 0x25]);
        assert_eq!(
            (r.varint(), r.varint(), r.varint()),
            (Some(15_293), Some(37), None)
        );
    }

    #[test]
    fn varint_rejects_non_minimal() {
        // 5 encoded in two bytes.
        let mut r = Reader::new(&[0x40, 0x05]);
        assert_eq!(r.varint(), None);
    }

    #[test]
    fn frames_round_trip() {
        let mut buf = [0u8; 512];
        let sig = [7u8; 64];
        let mut w = Writer::new(&mut buf);
        write_ack(&mut w, 10, &[(12, 15), (20, 21)]).unwrap();
        write_owner_intro(&mut w, 1, "alice@a", &sig).unwrap();
        write_dest(&mut w, 2, "bob").unwrap();
        write_msg(&mut w, 99, 1, 2, b"hello").unwrap();
        w.u8(FRAME_PING).unwrap();
        write_abandon(&mut w, 70_000).unwrap();
        write_refused(&mut w, 3, RefuseReason::UnknownOwner).unwrap();
        let n = w.pos();
        let frames: Vec<_> = Frames::new(&buf[..n]).collect::<Result<_, _>>().unwrap();
        assert_eq!(frames.len(), 7);
        match frames[0] {
            Frame::Ack(a) => {
                assert_eq!(a.cumulative, 10);
                assert_eq!(a.ranges().collect::<Vec<_>>(), vec![(12, 15), (20, 21)]);
            }
            _ => panic!(),
        }
        assert_eq!(
            frames[1],
            Frame::OwnerIntro {
                id: 1,
                name: "alice@a",
                sig: &sig
            }
        );
        assert_eq!(frames[2], Frame::Dest { id: 2, name: "bob" });
        assert_eq!(
            frames[3],
            Frame::Msg {
                seq: 99,
                from: 1,
                to: 2,
                data: b"hello"
            }
        );
        assert_eq!(frames[4], Frame::Ping);
        assert_eq!(frames[5], Frame::Abandon { below: 70_000 });
        assert_eq!(
            frames[6],
            Frame::Refused {
                seq: 3,
                reason: RefuseReason::UnknownOwner
            }
        );
        assert_eq!(abandon_len(70_000), 1 + 4);
        assert_eq!(refused_len(3), 3);
        for r in [1u8, 2, 3, 4] {
            let reason = RefuseReason::from_u8(r).unwrap();
            assert_eq!(reason as u8, r);
            assert_eq!(RefuseReason::from_drop(reason.drop_reason()), Some(reason));
        }
        assert_eq!(ack_len(10, &[(12, 15), (20, 21)]), 7);
        assert_eq!(msg_frame_len(99, 1, 2, 5), 1 + 2 + 1 + 1 + 1 + 5);
    }

    #[test]
    fn a_msg_run_reads_as_consecutive_msgs() {
        let mut buf = [0u8; 256];
        let mut w = Writer::new(&mut buf);
        let items: [&[u8]; 3] = [b"one", b"", b"three"];
        let at = write_msg_run_header(&mut w, 16_383, 3, 0).unwrap();
        for d in items {
            write_run_item(&mut w, d).unwrap();
        }
        set_run_count(&mut w, at, 3).unwrap();
        w.u8(FRAME_PING).unwrap();
        let n = w.pos();
        assert_eq!(
            n,
            msg_run_header_len(16_383, 3, 0)
                + items.iter().map(|d| run_item_len(d.len())).sum::<usize>()
                + 1
        );
        let frames: Vec<_> = Frames::new(&buf[..n]).collect::<Result<_, _>>().unwrap();
        let want: Vec<Frame<'_>> = items
            .iter()
            .zip(16_383..)
            .map(|(&data, seq)| Frame::Msg {
                seq,
                from: 3,
                to: 0,
                data,
            })
            .chain([Frame::Ping])
            .collect();
        assert_eq!(frames, want);
        // The example of docs/PROTOCOL.md §3.
        let doc = [0x08, 0x05, 0x01, 0x00, 0x00, 0x02, 0x02, 0x68, 0x69, 0x00];
        let frames: Vec<_> = Frames::new(&doc).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            frames,
            [
                Frame::Msg {
                    seq: 5,
                    from: 1,
                    to: 0,
                    data: b"hi"
                },
                Frame::Msg {
                    seq: 6,
                    from: 1,
                    to: 0,
                    data: b""
                }
            ]
        );
        // A run whose count says more than it holds is malformed at the end of the body.
        set_run_count(&mut Writer::new(&mut buf), at, 4).unwrap();
        let r: Result<Vec<_>, _> = Frames::new(&buf[..n - 1]).collect();
        assert_eq!(r, Err(DropReason::MalformedFrame));
    }

    #[test]
    fn with_runs_yields_a_run_whole_with_the_same_messages() {
        let mut buf = [0u8; 256];
        let mut w = Writer::new(&mut buf);
        let items = run_items(&[b"one", b"", b"three"]);
        write_msg_run(&mut w, 70, 2, 5, 3, &items).unwrap();
        w.u8(FRAME_PING).unwrap();
        let n = w.pos();
        let whole: Vec<_> = Frames::with_runs(&buf[..n])
            .collect::<Result<_, _>>()
            .unwrap();
        let Frame::MsgRun(run) = whole[0] else {
            panic!("a MSG_RUN comes out whole: {whole:?}")
        };
        assert_eq!((run.seq, run.from, run.to, run.count), (70, 2, 5, 3));
        assert_eq!(run.items, &items[..]);
        assert_eq!(whole[1], Frame::Ping);
        // Its messages are exactly what `Frames::new` yields one by one.
        let split: Vec<_> = Frames::new(&buf[..n]).collect::<Result<_, _>>().unwrap();
        let expanded: Vec<Frame<'_>> = run
            .iter()
            .map(|(seq, data)| Frame::Msg {
                seq,
                from: 2,
                to: 5,
                data,
            })
            .chain([Frame::Ping])
            .collect();
        assert_eq!(split, expanded);
        // A run whose count says more than it holds is malformed whole too.
        let mut short = buf;
        let at = 1 + varint_len(70) + 2;
        short[at..at + 2].copy_from_slice(&4u16.to_be_bytes());
        let r: Result<Vec<_>, _> = Frames::with_runs(&short[..n - 1]).collect();
        assert_eq!(r, Err(DropReason::MalformedFrame));
    }

    /// Messages encoded as MSG_RUN items, back to back.
    fn run_items(msgs: &[&[u8]]) -> Vec<u8> {
        let mut items = Vec::new();
        for d in msgs {
            let (p, n) = varint_bytes(d.len() as u64);
            items.extend_from_slice(&p[..n]);
            items.extend_from_slice(d);
        }
        items
    }

    #[test]
    fn run_item_data_len_inverts_run_item_len() {
        for len in (0..20_000).chain([1 << 30, (1 << 30) - 1, 1 << 40]) {
            assert_eq!(run_item_data_len(run_item_len(len)), Some(len), "{len}");
        }
        // 64 bytes take a two-byte length: no message makes a 65-byte item.
        assert_eq!(run_item_data_len(65), None);
        assert_eq!(run_item_data_len(0), None);
    }

    #[test]
    fn padding_fills_to_whole_blocks_and_parses_as_one_frame() {
        for msg_len in 0..80usize {
            let mut buf = vec![0xAAu8; 256];
            let mut w = Writer::new(&mut buf);
            write_msg(&mut w, 20_000, 1, 0, &vec![7u8; msg_len]).unwrap();
            let before = w.pos();
            pad_to_block(&mut w);
            let len = w.pos();
            assert_eq!(len % PAD_BLOCK, 0, "msg {msg_len}");
            assert_eq!(len - before, block_padding(before));
            let frames: Vec<_> = Frames::new(&buf[..len]).collect();
            assert!(matches!(frames[0], Ok(Frame::Msg { .. })));
            if len > before {
                assert_eq!(frames.len(), 2);
                assert!(matches!(frames[1], Ok(Frame::Padding)));
            } else {
                assert_eq!(frames.len(), 1);
            }
        }
        // No room: the body is left as it is, never cut or overrun.
        let mut buf = [0xAAu8; 20];
        let mut w = Writer::new(&mut buf);
        write_msg(&mut w, 1, 1, 0, &[5u8; 12]).unwrap();
        assert_eq!(w.pos(), 17);
        pad_to_block(&mut w);
        assert_eq!(w.pos(), 17);
        // Padding with a non-zero byte in it is malformed.
        let mut buf = [0u8; 32];
        let mut w = Writer::new(&mut buf);
        write_msg(&mut w, 1, 1, 0, &[5u8; 12]).unwrap();
        pad_to_block(&mut w);
        buf[30] = 1;
        assert!(Frames::new(&buf).any(|f| f == Err(DropReason::MalformedFrame)));
    }

    /// The layout of docs/PROTOCOL.md §3's MSG_FIXED example, and a round trip with frames
    /// before it and padding after it, through both parsers.
    #[test]
    fn msg_fixed_round_trips_and_matches_the_documented_layout() {
        let doc = [
            0x09, 0x01, 0x00, 0x02, 0x00, 0x05, 0, 0, 0, 0, 0, 0, 0, 0x68, 0x69, 0, 0, 0,
        ];
        let mut buf = [0u8; 18];
        let mut w = Writer::new(&mut buf);
        write_msg_fixed(&mut w, 5, 1, 0, b"hi").unwrap();
        assert_eq!(w.pos(), msg_fixed_len(2));
        assert_eq!(&buf[..15], &doc[..15]);
        let want = Frame::Msg {
            seq: 5,
            from: 1,
            to: 0,
            data: b"hi",
        };
        for body in [&doc[..], &doc[..15], &doc[..16]] {
            let mut f = Frames::new(body);
            assert_eq!(f.next(), Some(Ok(want)), "{body:02x?}");
            assert_eq!(f.next(), None, "the padding is part of the frame");
            assert_eq!((f.fixed_msgs(), f.runs()), (1, 0));
            let whole: Vec<_> = Frames::with_runs(body).collect();
            assert_eq!(whole, [Ok(want)]);
        }
        // After other frames, padded to whole blocks as a sender leaves it.
        for (seq, from, to, len) in [
            (0, 1, 0, 0),
            (VARINT_MAX, 255, 255, 1),
            (1 << 40, 7, 3, 64),
            (16_384, 1, 1, 1400),
            (3, 2, 0, 65_535),
        ] {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut buf = vec![0xAAu8; len + 200];
            let mut w = Writer::new(&mut buf);
            write_ack(&mut w, 10, &[(12, 15)]).unwrap();
            write_abandon(&mut w, 9).unwrap();
            write_msg_fixed(&mut w, seq, from, to, &data).unwrap();
            pad_to_block(&mut w);
            let n = w.pos();
            for frames in [Frames::new(&buf[..n]), Frames::with_runs(&buf[..n])] {
                let got: Vec<_> = frames.collect::<Result<_, _>>().unwrap();
                assert_eq!(got.len(), 3);
                assert_eq!(got[1], Frame::Abandon { below: 9 });
                assert_eq!(
                    got[2],
                    Frame::Msg {
                        seq,
                        from,
                        to,
                        data: &data
                    }
                );
            }
        }
    }

    /// Every truncation of a MSG_FIXED frame short of its message's last byte is malformed
    /// (the drop the receiver counts as `malformed-frame`), never a panic; so is a message from
    /// owner 0, a seq past 2^62, and anything but zeros after the message (a frame included).
    #[test]
    fn msg_fixed_truncations_and_bad_fields_are_malformed() {
        for len in [0usize, 1, 64, 300] {
            let data = vec![0x5Au8; len];
            let mut buf = vec![0u8; len + 64];
            let mut w = Writer::new(&mut buf);
            write_msg_fixed(&mut w, 1 << 20, 4, 2, &data).unwrap();
            let end = w.pos();
            for cut in 1..end {
                for r in [
                    Frames::new(&buf[..cut]).collect::<Result<Vec<_>, _>>(),
                    Frames::with_runs(&buf[..cut]).collect::<Result<Vec<_>, _>>(),
                ] {
                    assert_eq!(r, Err(DropReason::MalformedFrame), "len {len} cut at {cut}");
                }
            }
            // Cutting into the padding only leaves less padding.
            for cut in end..buf.len() {
                assert!(
                    Frames::new(&buf[..cut]).all(|f| f.is_ok()),
                    "len {len} cut {cut}"
                );
            }
        }
        let good = {
            let mut b = [0u8; 32];
            write_msg_fixed(&mut Writer::new(&mut b), 9, 1, 0, b"abc").unwrap();
            b
        };
        let mut bad = Vec::new();
        let mut owner0 = good;
        owner0[1] = 0;
        bad.push(owner0.to_vec());
        let mut big_seq = good;
        big_seq[5..13].copy_from_slice(&(VARINT_MAX + 1).to_le_bytes());
        bad.push(big_seq.to_vec());
        let mut top_seq = good;
        top_seq[5..13].copy_from_slice(&u64::MAX.to_le_bytes());
        bad.push(top_seq.to_vec());
        for at in 16..32 {
            let mut b = good;
            b[at] = if at == 16 { FRAME_PING } else { 0x80 };
            bad.push(b.to_vec());
        }
        // A length past the body.
        let mut long = good;
        long[3..5].copy_from_slice(&20u16.to_le_bytes());
        bad.push(long.to_vec());
        for b in &bad {
            let r: Result<Vec<_>, _> = Frames::new(b).collect();
            assert_eq!(r, Err(DropReason::MalformedFrame), "{b:02x?}");
            let r: Result<Vec<_>, _> = Frames::with_runs(b).collect();
            assert_eq!(r, Err(DropReason::MalformedFrame), "with runs {b:02x?}");
        }
        // The largest seq a varint holds is accepted.
        let mut top = good;
        top[5..13].copy_from_slice(&VARINT_MAX.to_le_bytes());
        assert!(Frames::new(&top).all(|f| f.is_ok()));
    }

    #[test]
    fn msg_fixed_header_refuses_what_does_not_fit() {
        let mut out = [0xEEu8; MSG_FIXED_HEADER_LEN];
        for (seq, from, to, len) in [
            (1, 0, 0, 1),
            (1, 256, 0, 1),
            (1, 1, 256, 1),
            (1, 1, 0, 65_536),
            (VARINT_MAX + 1, 1, 0, 1),
        ] {
            assert!(!msg_fixed_fits(seq, from, to, len));
            assert_eq!(write_msg_fixed_header(&mut out, seq, from, to, len), None);
            assert_eq!(out, [0xEE; MSG_FIXED_HEADER_LEN], "nothing written");
        }
        assert_eq!(
            write_msg_fixed_header(&mut out[..12], 1, 1, 0, 1),
            None,
            "no room"
        );
        assert!(msg_fixed_fits(VARINT_MAX, 255, 255, 65_535));
        assert_eq!(write_msg_fixed_header(&mut out, 1, 1, 0, 1), Some(()));
        let mut w = Writer::new(&mut out);
        assert_eq!(write_msg_fixed(&mut w, 1, 1, 0, b"x"), None, "no room");
        assert_eq!(w.pos(), 0);
    }

    /// The sender's rewrite: a one-message MSG_RUN ending the writer's bytes becomes the
    /// MSG_FIXED frame of the same message, at every seq, id and length form; where the fields
    /// do not fit or the datagram has no room for the longer header, the run stays as it was.
    #[test]
    fn one_run_as_fixed_rewrites_a_one_message_run_or_leaves_it() {
        let seqs = [
            0,
            63,
            64,
            16_383,
            16_384,
            (1 << 30) - 1,
            1 << 30,
            VARINT_MAX,
        ];
        let ids = [
            (1, 0),
            (1, 1),
            (63, 64),
            (255, 255),
            (256, 0),
            (1, 256),
            (300, 70_000),
        ];
        for &seq in &seqs {
            for &(from, to) in &ids {
                for len in [0usize, 1, 63, 64, 1400, 16_383, 16_384, 65_535] {
                    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
                    let items = run_items(&[&data]);
                    let mut buf = vec![0u8; 2 + len + 40];
                    let mut w = Writer::new(&mut buf);
                    write_abandon(&mut w, 3).unwrap();
                    let start = w.pos();
                    write_msg_run(&mut w, seq, from, to, 1, &items).unwrap();
                    let run_end = w.pos();
                    let before = w.buf[..run_end].to_vec();
                    let fits = msg_fixed_fits(seq, from, to, len);
                    // Room only for the run: the rewrite must not overrun.
                    for cap in [run_end, start + msg_fixed_len(len), buf.len()] {
                        let mut b = buf.clone();
                        let cap = cap.min(b.len());
                        if cap < run_end {
                            continue;
                        }
                        // Another message (one byte shorter) is refused: `data` must be the
                        // run's own.
                        if len > 0 {
                            let mut other = b.clone();
                            let mut wo = Writer::new(&mut other[..cap]);
                            wo.pos = run_end;
                            assert!(!one_run_as_fixed(&mut wo, start, seq, from, to, &data[1..]));
                            assert_eq!(wo.pos(), run_end);
                            assert_eq!(other, b);
                        }
                        let mut w = Writer::new(&mut b[..cap]);
                        w.pos = run_end;
                        let done = one_run_as_fixed(&mut w, start, seq, from, to, &data);
                        let room = start + msg_fixed_len(len) <= cap;
                        assert_eq!(
                            done,
                            fits && room,
                            "seq {seq} ids {from},{to} len {len} cap {cap}"
                        );
                        let n = w.pos();
                        if !done {
                            assert_eq!(&b[..n], &before[..], "left as it was");
                            continue;
                        }
                        assert_eq!(n, start + msg_fixed_len(len));
                        let mut f = Frames::with_runs(&b[..n]);
                        assert_eq!(f.next(), Some(Ok(Frame::Abandon { below: 3 })));
                        assert_eq!(
                            f.next(),
                            Some(Ok(Frame::Msg {
                                seq,
                                from,
                                to,
                                data: &data
                            }))
                        );
                        assert_eq!((f.next(), f.fixed_msgs()), (None, 1));
                    }
                }
            }
        }
    }

    #[test]
    fn run_items_fitting_counts_whole_items() {
        let items = run_items(&[b"abc", b"", &[7u8; 100]]);
        assert_eq!(run_items_fitting(&items, 9, 0), (0, 0));
        assert_eq!(run_items_fitting(&items, 9, 4), (1, 4));
        assert_eq!(run_items_fitting(&items, 9, 5), (2, 5));
        assert_eq!(run_items_fitting(&items, 9, 106), (2, 5));
        assert_eq!(run_items_fitting(&items, 9, 107), (3, 107));
        assert_eq!(run_items_fitting(&items, 1, 107), (1, 4));
        // A truncated item ends the count.
        assert_eq!(run_items_fitting(&items[..50], 9, 999), (2, 5));
        // So does a length not in its shortest form (5 in two bytes), as when reading it.
        assert_eq!(
            run_items_fitting(&[1, b'a', 0x40, 5, 1, 2, 3, 4, 5], 9, 99),
            (1, 2)
        );
        assert_eq!(
            run_items_fitting(&[0x40, 64], 9, 99),
            (0, 0),
            "64 bytes announced"
        );
    }

    #[test]
    fn bad_frames() {
        for bad in [
            &[0x0au8][..],                                   // unknown type
            &[FRAME_MSG_FIXED],                              // MSG_FIXED without fields
            &[FRAME_MSG, 1, 0, 0, 5, b'a'],                  // from = 0
            &[FRAME_MSG, 1, 1, 0, 5, b'a'],                  // truncated data
            &[FRAME_DEST, 1, 0],                             // empty name
            &[FRAME_DEST, 1, 1, b' '],                       // bad char
            &[FRAME_ACK, 5, 1, 0, 1],                        // zero gap above non-zero cumulative
            &[FRAME_ACK, 5, 1, 1, 0],                        // empty range
            &[FRAME_ACK, 0, 40],                             // too many ranges
            &[FRAME_PADDING, 0, 1],                          // padding with data
            &[FRAME_ABANDON],                                // no value
            &[FRAME_ABANDON, 0x40, 0x05],                    // non-minimal varint
            &[FRAME_REFUSED, 1],                             // no reason
            &[FRAME_REFUSED, 1, 0],                          // reason 0
            &[FRAME_REFUSED, 1, 5],                          // unknown reason
            &[FRAME_MSG_RUN, 1, 1, 0, 0, 0],                 // no messages
            &[FRAME_MSG_RUN, 1, 0, 0, 0, 1, 1, b'a'],        // from = 0
            &[FRAME_MSG_RUN, 1, 1, 0, 0, 2, 1, b'a'],        // second message missing
            &[FRAME_MSG_RUN, 1, 1, 0, 0, 1, 2, b'a'],        // truncated message
            &[FRAME_MSG_RUN, 1, 1, 0, 0],                    // truncated count
            &[FRAME_MSG_RUN, 1, 1, 0, 0, 1, 0x40, 1, b'a'],  // non-minimal length
            &[FRAME_MSG_RUN, 1, 1, 0, 0, 1, 0x40],           // truncated two-byte length
            &[FRAME_MSG_RUN, 1, 1, 0, 0, 1, 0x40, 64, b'a'], // 64 bytes announced, 1 there
            &[FRAME_MSG_RUN, 1, 1, 0, 0, 1, 0x80, 0, 0, 1],  // non-minimal four-byte length
            &[
                FRAME_MSG_RUN,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                1,
                0,
                0,
                2,
                0,
                0,
            ], // seq past 2^62
        ] {
            let r: Result<Vec<_>, _> = Frames::new(bad).collect();
            assert_eq!(r, Err(DropReason::MalformedFrame), "{bad:?}");
            // The receive path's form refuses the same bodies.
            let r: Result<Vec<_>, _> = Frames::with_runs(bad).collect();
            assert_eq!(r, Err(DropReason::MalformedFrame), "with runs: {bad:?}");
        }
    }

    proptest! {
        #[test]
        fn varint_round_trip(v in prop_oneof![0u64..64, 64u64..16_384, 16_384u64..1 << 30, (1u64 << 30)..=VARINT_MAX]) {
            let mut b = [0u8; 8];
            let mut w = Writer::new(&mut b);
            w.varint(v).unwrap();
            let n = w.pos();
            prop_assert_eq!(n, varint_len(v));
            let mut r = Reader::new(&b[..n]);
            prop_assert_eq!(r.varint(), Some(v));
        }

        /// The receive path's whole-run parse accepts exactly what the frame-by-frame parse
        /// accepts, with the same messages: well-formed runs of every length form, and the
        /// same bytes damaged.
        #[test]
        fn whole_runs_parse_as_their_messages(
            lens in proptest::collection::vec(prop_oneof![0usize..64, 64usize..300, 16_384usize..16_400], 1..6),
            cut in 0usize..64,
            flip in any::<(usize, u8)>(),
            same in any::<bool>(),
        ) {
            // Equal sizes take the receiver's stride path, others its walk.
            let lens: Vec<usize> = if same { vec![lens[0]; lens.len()] } else { lens };
            let msgs: Vec<Vec<u8>> = lens.iter().map(|&l| vec![0xa5; l]).collect();
            let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
            let items = run_items(&refs);
            let mut buf = vec![0u8; items.len() + 32];
            let mut w = Writer::new(&mut buf);
            write_msg_run(&mut w, 9, 1, 0, msgs.len() as u16, &items).unwrap();
            let n = w.pos();
            let mut damaged = buf[..n].to_vec();
            let at = 6 + flip.0 % (n - 6).max(1);
            if let Some(b) = damaged.get_mut(at) { *b ^= flip.1; }
            for body in [&buf[..n], &buf[..n.saturating_sub(cut)], &damaged[..]] {
                let one: Result<Vec<_>, _> = Frames::new(body).collect();
                let whole: Result<Vec<_>, _> = Frames::with_runs(body).collect();
                match (one, whole) {
                    (Ok(one), Ok(whole)) => {
                        let expanded: Vec<Frame<'_>> = whole.iter().flat_map(|f| match f {
                            Frame::MsgRun(r) => r.iter().map(|(seq, data)| Frame::Msg { seq, from: r.from, to: r.to, data }).collect::<Vec<_>>(),
                            other => vec![*other],
                        }).collect();
                        prop_assert_eq!(one, expanded);
                    }
                    (Err(a), Err(b)) => prop_assert_eq!(a, b),
                    (a, b) => prop_assert!(false, "frame by frame {a:?}, whole {b:?}"),
                }
            }
        }

        /// The receive path's in-line walk finds what the general one finds, on any bytes:
        /// every length form, non-shortest forms, truncations.
        #[test]
        fn run_items_len_agrees_with_run_items_fitting(
            items in proptest::collection::vec(any::<u8>(), 0..200),
            count in 1u16..8,
        ) {
            let (n, used) = run_items_fitting(&items, usize::from(count), usize::MAX);
            let want = (n == usize::from(count)).then_some(used);
            prop_assert_eq!(run_items_len(&items, count), want);
            // Where the stride check accepts, it finds the same bytes.
            if let Some(stride) = equal_items(&items, count) {
                prop_assert_eq!(Some(stride * usize::from(count)), want);
            }
        }

        /// Any fitting message encodes as MSG_FIXED and parses back as itself, with any padding
        /// after it; the sender's rewrite of its one-message MSG_RUN gives the same bytes. A
        /// message whose ids do not fit keeps the MSG_RUN, which parses as the same message.
        #[test]
        fn msg_fixed_encodes_and_parses_back(
            seq in prop_oneof![0u64..16_384, 0u64..=VARINT_MAX],
            from in prop_oneof![1u64..=255, 256u64..100_000],
            to in prop_oneof![0u64..=255, 256u64..100_000],
            len in prop_oneof![0usize..100, 0usize..20_000],
            pad in 0usize..40,
        ) {
            let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let want = Frame::Msg { seq, from, to, data: &data };
            let fits = from <= 255 && to <= 255;
            prop_assert_eq!(msg_fixed_fits(seq, from, to, len), fits);
            let mut fixed = vec![0u8; msg_fixed_len(len) + pad];
            let written = write_msg_fixed(&mut Writer::new(&mut fixed), seq, from, to, &data);
            prop_assert_eq!(written.is_some(), fits);
            if fits {
                let got: Vec<_> = Frames::new(&fixed).collect();
                prop_assert_eq!(&got, &[Ok(want)]);
                let got: Vec<_> = Frames::with_runs(&fixed).collect();
                prop_assert_eq!(&got, &[Ok(want)]);
            }
            // The sender's path: a one-message MSG_RUN, rewritten when it fits.
            let items = run_items(&[&data]);
            let mut buf = vec![0u8; msg_run_header_len(seq, from, to) + items.len() + 16 + pad];
            let mut w = Writer::new(&mut buf);
            write_msg_run(&mut w, seq, from, to, 1, &items).unwrap();
            let run_len = w.pos();
            prop_assert_eq!(run_item_message(&items), Some(&data[..]));
            prop_assert_eq!(one_run_as_fixed(&mut w, 0, seq, from, to, &data), fits);
            let n = w.pos();
            if fits {
                prop_assert_eq!(&buf[..n], &fixed[..msg_fixed_len(len)]);
            } else {
                prop_assert_eq!(n, run_len);
                prop_assert_eq!(buf[0], FRAME_MSG_RUN);
                let mut f = Frames::new(&buf[..n]);
                prop_assert_eq!(f.next(), Some(Ok(want)));
                prop_assert_eq!((f.next(), f.runs(), f.fixed_msgs()), (None, 1, 0));
            }
        }

        #[test]
        fn frames_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            for f in Frames::new(&data) {
                if let Ok(Frame::Ack(a)) = f { let _ = a.ranges().count(); }
            }
            let _ = parse_header(&data);
        }

        #[test]
        fn ack_round_trip(cum in 0u64..1_000_000, spans in proptest::collection::vec((1u64..50, 1u64..50), 0..MAX_ACK_RANGES)) {
            let mut ranges = Vec::new();
            let mut prev = cum;
            for (gap, len) in spans { let s = prev + gap; ranges.push((s, s + len)); prev = s + len; }
            let mut b = [0u8; 1024];
            let mut w = Writer::new(&mut b);
            write_ack(&mut w, cum, &ranges).unwrap();
            let n = w.pos();
            prop_assert_eq!(n, ack_len(cum, &ranges));
            let f: Vec<_> = Frames::new(&b[..n]).collect::<Result<_, _>>().unwrap();
            match f[0] { Frame::Ack(a) => { prop_assert_eq!(a.cumulative, cum); prop_assert_eq!(a.ranges().collect::<Vec<_>>(), ranges); } _ => prop_assert!(false) }
        }
    }
}
