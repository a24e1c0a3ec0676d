//! Writing a data body's frames, with the lengths they take on the wire.

use super::frames::{Frame, Frames};
use super::{
    FRAME_ABANDON, FRAME_ACK, FRAME_DEST, FRAME_MSG, FRAME_MSG_FIXED, FRAME_MSG_RUN,
    FRAME_OWNER_INTRO, FRAME_REFUSED, MSG_FIXED_HEADER_LEN, Reader, RefuseReason, SIGNATURE_LEN,
    VARINT_MAX, Writer, varint_len,
};

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
/// it (at most [`MAX_ACK_RANGES`](super::MAX_ACK_RANGES); the caller passes the newest ones).
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
