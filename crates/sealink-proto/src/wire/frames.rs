//! Reading a data body's frames: ACK ranges, message runs, and the strict frame iterator.

use crate::error::DropReason;

use super::{
    FRAME_ABANDON, FRAME_ACK, FRAME_DEST, FRAME_MSG, FRAME_MSG_FIXED, FRAME_MSG_RUN,
    FRAME_OWNER_INTRO, FRAME_PADDING, FRAME_PING, FRAME_REFUSED, MAX_ACK_RANGES,
    MSG_FIXED_HEADER_LEN, Reader, RefuseReason, SIGNATURE_LEN, VARINT_MAX, valid_name, varint_len,
};

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
pub(super) fn equal_items(items: &[u8], count: u16) -> Option<usize> {
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
pub(super) fn run_items_len(items: &[u8], count: u16) -> Option<usize> {
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
pub(super) fn read_msg_fixed(rest: &[u8]) -> Option<Frame<'_>> {
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

pub(super) fn read_name<'a>(r: &mut Reader<'a>) -> Option<&'a str> {
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
