//! The bytes of a channel's queued and in-flight messages, packed into shared chunks.
//!
//! A small message used to own a `Vec` from `enqueue` until its acknowledgement: one allocation
//! and one free per message, a measurable share of a 64-byte message's cost (`sealink-lab bench
//! datagram --sizes 64` under `perf`). Here messages are appended to the current chunk, each
//! chunk counts the messages that still hold bytes in it, and a chunk whose count falls to zero
//! is reused. Messages are released in any order (acknowledgement ranges, refusals, give-ups);
//! a released message never moves the others, so a [`Slot`] stays valid until released.
//!
//! Memory: a chunk is pinned while any one of its messages is held. The sender holds at most
//! `message_window` messages in flight plus the queue (which fills chunks densely), so a peer
//! that acknowledges all but one message per chunk pins at most `message_window` chunks of
//! [`CHUNK`] bytes until those messages are acknowledged or given up.

/// Bytes per shared chunk: many small messages per allocation, little pinned by one.
pub(crate) const CHUNK: usize = 8 * 1024;
/// Messages larger than this get a chunk of their own (as large as the message).
const OWN_CHUNK_ABOVE: usize = CHUNK / 4;
/// Emptied chunks kept for reuse.
const SPARE_KEEP: usize = 8;

/// Where one message's bytes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    chunk: u32,
    start: u32,
    len: u32,
}

impl Slot {
    pub fn len(&self) -> usize {
        self.len as usize
    }
}

/// A fixed buffer filled from the front. Not a `Vec`: appending then writes into bytes that
/// already exist, with the fill mark in a register, instead of a capacity check and a length
/// store around every message's copy (RESULTS §20).
#[derive(Debug)]
struct Chunk {
    buf: Box<[u8]>,
    /// Bytes written: `buf[..used]`.
    used: usize,
    /// Messages not yet released.
    live: u32,
}

#[derive(Debug, Default)]
pub(crate) struct SendArena {
    /// `None`: a free index.
    chunks: Vec<Option<Chunk>>,
    free_ids: Vec<u32>,
    spare: Vec<Box<[u8]>>,
    /// The chunk appended to.
    current: Option<u32>,
}

impl SendArena {
    /// Copies `data` in and returns where it lies.
    #[cfg(test)]
    pub fn push(&mut self, data: &[u8]) -> Slot {
        if data.len() > OWN_CHUNK_ABOVE {
            return self.own_chunk(&[data]);
        }
        let id = self.current_with_room(data.len());
        self.append(id, data)
    }

    /// Starts a run's bytes with one MSG_RUN item (varint length, then `data`).
    pub fn push_item(&mut self, data: &[u8]) -> Slot {
        let (prefix, n) = crate::wire::varint_bytes(data.len() as u64);
        let total = n + data.len();
        if total > OWN_CHUNK_ABOVE {
            return self.own_chunk(&[&prefix[..n], data]);
        }
        let id = self.current_with_room(total);
        let mut s = self.append(id, &prefix[..n]);
        self.append_more(&mut s, data);
        s
    }

    /// Appends one MSG_RUN item to the run at `s` if `s` ends the chunk being appended to and
    /// the chunk has room; false (and nothing written) otherwise.
    #[cfg(test)]
    pub fn extend_item(&mut self, s: &mut Slot, data: &[u8]) -> bool {
        self.extend_items(s, std::iter::once(data)) == 1
    }

    /// Appends MSG_RUN items to the run at `s`, in order, while `s` ends the chunk being
    /// appended to and the chunk has room; returns how many were appended. The chunk is looked
    /// up once for them all: a sender's batch of small messages goes in at the cost of its copies.
    pub fn extend_items<'d>(
        &mut self,
        s: &mut Slot,
        items: impl Iterator<Item = &'d [u8]>,
    ) -> usize {
        if self.current != Some(s.chunk) {
            return 0;
        }
        let Some(Some(c)) = self.chunks.get_mut(s.chunk as usize) else {
            return 0;
        };
        if c.used != (s.start + s.len) as usize {
            return 0;
        }
        let buf = &mut c.buf[..];
        let before = c.used;
        let mut at = before;
        let mut n = 0;
        for data in items {
            let (prefix, k) = crate::wire::varint_bytes(data.len() as u64);
            let end = at + k + data.len();
            if end > buf.len() {
                break;
            }
            match buf.get_mut(at..at + 8) {
                // All eight bytes at once: the message's own bytes overwrite those past `k`.
                Some(head) => head.copy_from_slice(&prefix),
                None => buf[at..at + k].copy_from_slice(&prefix[..k]),
            }
            copy_bytes(&mut buf[at + k..end], data);
            at = end;
            n += 1;
        }
        c.used = at;
        s.len += (at - before) as u32;
        n
    }

    /// Splits the bytes at `s` after `at` bytes into two slots, each released on its own.
    pub fn split(&mut self, s: Slot, at: usize) -> (Slot, Slot) {
        let at = (at as u32).min(s.len);
        if let Some(Some(c)) = self.chunks.get_mut(s.chunk as usize) {
            c.live += 1;
        }
        (
            Slot { len: at, ..s },
            Slot {
                chunk: s.chunk,
                start: s.start + at,
                len: s.len - at,
            },
        )
    }

    pub fn get(&self, s: Slot) -> &[u8] {
        let start = s.start as usize;
        &self.chunk(s.chunk).buf[start..start + s.len as usize]
    }

    /// The message at `s` no longer needs its bytes. Each slot is released once.
    pub fn release(&mut self, s: Slot) {
        let Some(Some(c)) = self.chunks.get_mut(s.chunk as usize) else {
            debug_assert!(false, "release of a slot in a freed chunk");
            return;
        };
        debug_assert!(c.live > 0, "slot released twice");
        c.live = c.live.saturating_sub(1);
        if c.live == 0 {
            if self.current == Some(s.chunk) {
                // Still appended to: start it over in place.
                c.used = 0;
            } else {
                self.free_if_empty(s.chunk);
            }
        }
    }

    /// Bytes reserved by allocated chunks (spare buffers not counted).
    pub fn bytes_reserved(&self) -> usize {
        self.chunks.iter().flatten().map(|c| c.buf.len()).sum()
    }

    #[cfg(test)]
    fn chunks_in_use(&self) -> usize {
        self.chunks.iter().flatten().count()
    }

    fn chunk(&self, id: u32) -> &Chunk {
        self.chunks[id as usize]
            .as_ref()
            .expect("a live slot's chunk is allocated")
    }

    /// A chunk of its own for one large message, built from `parts` (no zeroing first: it is
    /// written whole).
    fn own_chunk(&mut self, parts: &[&[u8]]) -> Slot {
        let mut v = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
        for p in parts {
            v.extend_from_slice(p);
        }
        let len = u32::try_from(v.len()).expect("message length fits u32");
        let id = self.new_chunk(v.into_boxed_slice());
        let c = self.chunks[id as usize]
            .as_mut()
            .expect("a chunk just allocated");
        c.used = len as usize;
        c.live = 1;
        Slot {
            chunk: id,
            start: 0,
            len,
        }
    }

    fn new_chunk(&mut self, buf: Box<[u8]>) -> u32 {
        let c = Chunk {
            buf,
            used: 0,
            live: 0,
        };
        match self.free_ids.pop() {
            Some(id) => {
                self.chunks[id as usize] = Some(c);
                id
            }
            None => {
                self.chunks.push(Some(c));
                u32::try_from(self.chunks.len() - 1).expect("chunk count fits u32")
            }
        }
    }

    /// The chunk appended to, or a fresh one if it lacks room for `len` more bytes.
    fn current_with_room(&mut self, len: usize) -> u32 {
        match self.current {
            Some(id) if self.chunk(id).used + len <= CHUNK => id,
            _ => {
                let old = self.current.take();
                let buf = self
                    .spare
                    .pop()
                    .unwrap_or_else(|| vec![0; CHUNK].into_boxed_slice());
                let id = self.new_chunk(buf);
                self.current = Some(id);
                // The chunk filled up: once its messages are gone it is free.
                if let Some(old) = old {
                    self.free_if_empty(old);
                }
                id
            }
        }
    }

    /// Appends `data` to the slot `s`, which ends its chunk.
    fn append_more(&mut self, s: &mut Slot, data: &[u8]) {
        let c = self.chunks[s.chunk as usize]
            .as_mut()
            .expect("appending to an allocated chunk");
        debug_assert_eq!(c.used, (s.start + s.len) as usize);
        let end = c.used + data.len();
        c.buf[c.used..end].copy_from_slice(data);
        c.used = end;
        s.len = u32::try_from(end - s.start as usize).expect("run length fits u32");
    }

    fn append(&mut self, id: u32, data: &[u8]) -> Slot {
        let c = self.chunks[id as usize]
            .as_mut()
            .expect("appending to an allocated chunk");
        let start = c.used;
        c.buf[start..start + data.len()].copy_from_slice(data);
        c.used = start + data.len();
        c.live += 1;
        Slot {
            chunk: id,
            start: u32::try_from(start).expect("chunk offset fits u32"),
            len: u32::try_from(data.len()).expect("message length fits u32"),
        }
    }

    fn free_if_empty(&mut self, id: u32) {
        let slot = &mut self.chunks[id as usize];
        if slot.as_ref().is_some_and(|c| c.live == 0) {
            let buf = slot.take().map(|c| c.buf).unwrap_or_default();
            self.free_ids.push(id);
            if buf.len() == CHUNK && self.spare.len() < SPARE_KEEP {
                self.spare.push(buf);
            }
        }
    }
}

/// `dst.copy_from_slice(src)`, inline for the small messages a batch carries: 16-byte moves,
/// the last one overlapping, instead of a `memcpy` call per message (its call and dispatch cost
/// more than the copy itself at 64 bytes).
#[inline]
fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    assert_eq!(dst.len(), n);
    if (16..=64).contains(&n) {
        let mut i = 0;
        while i + 16 < n {
            dst[i..i + 16].copy_from_slice(&src[i..i + 16]);
            i += 16;
        }
        dst[n - 16..].copy_from_slice(&src[n - 16..]);
    } else {
        dst.copy_from_slice(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every held message reads back as pushed, whatever the release order; when nothing is
        /// held, at most the current chunk stays allocated.
        #[test]
        fn holds_every_message_until_released(
            ops in proptest::collection::vec((0usize..3000, any::<bool>(), any::<u16>()), 1..400)
        ) {
            let mut a = SendArena::default();
            let mut held: Vec<(Slot, Vec<u8>)> = Vec::new();
            for (i, (len, release, pick)) in ops.into_iter().enumerate() {
                if release && !held.is_empty() {
                    let (s, _) = held.swap_remove(pick as usize % held.len());
                    a.release(s);
                } else {
                    let data: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
                    held.push((a.push(&data), data));
                }
                for (s, d) in &held {
                    prop_assert_eq!(a.get(*s), &d[..]);
                }
            }
            for (s, _) in held.drain(..) {
                a.release(s);
            }
            prop_assert!(a.chunks_in_use() <= 1, "{} chunks left", a.chunks_in_use());
        }
    }

    /// A batch extends a run with its items as `extend_item` would one by one, up to the
    /// chunk's end; a run that no longer ends the chunk takes none.
    #[test]
    fn extend_items_appends_a_batch_until_the_chunk_is_full() {
        let mut a = SendArena::default();
        let mut run = a.push_item(&[1; 64]);
        let msgs: Vec<Vec<u8>> = (0..200u8)
            .map(|i| vec![i; 64 + usize::from(i % 3)])
            .collect();
        let n = a.extend_items(&mut run, msgs.iter().map(Vec::as_slice));
        // 8 KiB of 66- to 68-byte items: the chunk fills before the batch ends.
        assert!(n > 100 && n < 200, "{n}");
        let mut one = SendArena::default();
        let mut want = one.push_item(&[1; 64]);
        for m in &msgs[..n] {
            assert!(one.extend_item(&mut want, m));
        }
        assert!(
            !one.extend_item(&mut want, &msgs[n]),
            "the same chunk is full"
        );
        assert_eq!(a.get(run), one.get(want));
        // A new run starts the next chunk; the old one no longer ends the chunk appended to.
        let mut next = a.push_item(&msgs[n]);
        assert_eq!(
            a.extend_items(&mut run, msgs[n..].iter().map(Vec::as_slice)),
            0
        );
        assert_eq!(a.extend_items(&mut next, std::iter::empty()), 0);
        assert_eq!(
            a.get(next).len(),
            2 + msgs[n].len(),
            "a two-byte length and the bytes"
        );
    }

    /// Every length around the in-line copy's cases (below 16, 16 to 64 with the last move
    /// overlapping or not, above 64) lands as its MSG_RUN item, byte for byte.
    #[test]
    fn extend_items_writes_every_length_exactly() {
        let mut a = SendArena::default();
        let mut run = a.push_item(&[]);
        let msgs: Vec<Vec<u8>> = (0..100usize)
            .map(|l| (0..l).map(|j| (l * 7 + j) as u8).collect())
            .collect();
        assert_eq!(
            a.extend_items(&mut run, msgs.iter().map(Vec::as_slice)),
            100
        );
        let mut want = vec![0u8];
        for m in &msgs {
            let (prefix, k) = crate::wire::varint_bytes(m.len() as u64);
            want.extend_from_slice(&prefix[..k]);
            want.extend_from_slice(m);
        }
        assert_eq!(a.get(run), &want[..]);
    }

    /// A large message gets a chunk of its own, exactly its item, written whole; no later
    /// message is appended to it.
    #[test]
    fn a_large_item_has_a_chunk_of_its_own() {
        let mut a = SendArena::default();
        let small = a.push_item(&[1; 10]);
        let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let mut big = a.push_item(&data);
        assert_ne!(big.chunk, small.chunk);
        assert_eq!(&a.get(big)[..2], &[0x53, 0x88], "5000 as a two-byte varint");
        assert_eq!(&a.get(big)[2..], &data[..]);
        assert_eq!(a.bytes_reserved(), CHUNK + 5002);
        assert_eq!(a.extend_items(&mut big, std::iter::once(&[9u8][..])), 0);
        a.release(big);
        assert_eq!(a.bytes_reserved(), CHUNK, "its chunk is freed with it");
    }

    #[test]
    fn small_messages_share_a_chunk_and_reuse_it() {
        let mut a = SendArena::default();
        let slots: Vec<Slot> = (0..100u8).map(|i| a.push(&[i; 64])).collect();
        assert_eq!(a.chunks_in_use(), 1);
        for s in &slots {
            a.release(*s);
        }
        let s = a.push(&[7; 64]);
        assert_eq!((s.chunk, s.start), (slots[0].chunk, 0));
        assert_eq!(a.get(s), &[7; 64]);
    }
}
