//! Host-side layout of a batch: GCM counter blocks and the packed buffer the GPU reads.
//!
//! Packets are packed back to back, each starting on a 16-byte boundary, so that a thread of
//! the packet's block handles whole AES blocks; their additional data (AAD) follows, each
//! also 16-byte aligned and zero padded, for GHASH on the device. A metadata record per
//! packet gives the kernel the packet's offset, length and nonce and its AAD's offset and
//! length ([`META_WORDS`] little-endian `u32`s).
//!
//! The device works on one buffer per batch ([`Frame`]): the metadata, a 16-byte slot per
//! packet for its tag (or tag mask), then the packed data. One copy each way and one kernel
//! launch per batch: with several batches in flight, the driver calls are the host's cost.

use crate::GpuError;

/// Bytes of a GCM nonce (the only length aws-lc-rs accepts for AES-GCM).
pub const NONCE_LEN: usize = 12;
/// Bytes of a GCM tag.
pub const TAG_LEN: usize = 16;
/// Largest packet in a batch. GCM allows 2^36 - 32 bytes; a network packet, even a GSO
/// super-buffer, is far below this, and the limit keeps offsets in `u32`.
pub const MAX_PACKET: usize = 1 << 20;
/// Largest additional data (AAD) of one packet: a tunnel's header is a few dozen bytes; the
/// bound sizes the device's table of powers of H (see `kernel`).
pub const MAX_AAD: usize = 1 << 16;
/// Largest batch in bytes once packed (keeps offsets in `u32` and bounds pinned memory).
pub const MAX_BATCH_BYTES: usize = 1 << 30;
/// `u32`s of metadata per packet: offset, length, nonce (three words), AAD offset, AAD
/// length, and one word of padding (32 bytes, so records stay 16-byte aligned).
pub const META_WORDS: usize = 8;
/// Most GHASH blocks of one packet: its AAD, its payload and the length block.
pub const MAX_GHASH_BLOCKS: usize = MAX_AAD / 16 + MAX_PACKET / 16 + 1;

/// Where the parts of a batch's device buffer lie: `npkt` metadata records, then a 16-byte
/// tag slot per packet, then the packed data ([`Packed::data`]'s layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub npkt: usize,
    pub data_len: usize,
}

impl Frame {
    /// Byte offset of the tag slots.
    pub fn tags_at(&self) -> usize {
        self.npkt * META_WORDS * 4
    }
    /// Byte offset of the packed data.
    pub fn data_at(&self) -> usize {
        self.tags_at() + self.npkt * TAG_LEN
    }
    /// The whole buffer's length.
    pub fn len(&self) -> usize {
        self.data_at() + self.data_len
    }
    /// Whether the frame holds no packet.
    pub fn is_empty(&self) -> bool {
        self.npkt == 0
    }
}

/// The pre-counter block J0 of a 96-bit nonce: `nonce || 0x00000001` (SP 800-38D 7.1).
pub fn j0(nonce: &[u8; NONCE_LEN]) -> [u8; 16] {
    counter_block(nonce, 1)
}

/// The counter block `nonce || BE32(ctr)`. Block `i` (from 0) of a packet's keystream is
/// `E_K(counter_block(nonce, 2 + i))`: GCM starts the payload at inc32(J0).
pub fn counter_block(nonce: &[u8; NONCE_LEN], ctr: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..NONCE_LEN].copy_from_slice(nonce);
    b[NONCE_LEN..].copy_from_slice(&ctr.to_be_bytes());
    b
}

/// Offset of the next packet after one of `len` bytes at `off` (16-byte aligned).
fn next_offset(off: usize, len: usize) -> usize {
    off + len.div_ceil(16) * 16
}

/// A batch packed for the device: data, per-packet metadata, and where each packet and AAD
/// lies.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Packed {
    /// Packets back to back, each at a 16-byte aligned offset, zero padding between; then
    /// the AADs likewise.
    pub data: Vec<u8>,
    /// [`META_WORDS`] per packet: offset, length, nonce as three little-endian words, AAD
    /// offset and length, 0.
    pub meta: Vec<u32>,
}

impl Packed {
    /// Packed size of `lens` (data bytes), without packing.
    pub fn packed_len(lens: impl IntoIterator<Item = usize>) -> usize {
        lens.into_iter().fold(0, next_offset)
    }

    /// Packs `packets` with their `nonces` and `aads`, reusing this buffer's allocations.
    pub fn pack(
        &mut self,
        nonces: &[[u8; NONCE_LEN]],
        aads: &[&[u8]],
        packets: &[&mut [u8]],
    ) -> Result<(), GpuError> {
        let total = self.layout(
            nonces,
            packets.iter().map(|p| p.len()),
            aads.iter().map(|a| a.len()),
        )?;
        self.data.clear();
        self.data.resize(total, 0);
        let mut data = std::mem::take(&mut self.data);
        self.scatter(packets, aads, &mut data);
        self.data = data;
        Ok(())
    }

    /// Fills the metadata for packets of lengths `lens` with AADs of lengths `aad_lens` and
    /// returns the packed data length, leaving `data` alone (the device path packs straight
    /// into pinned memory).
    pub fn layout(
        &mut self,
        nonces: &[[u8; NONCE_LEN]],
        lens: impl Iterator<Item = usize> + Clone,
        aad_lens: impl Iterator<Item = usize> + Clone,
    ) -> Result<usize, GpuError> {
        check(nonces.len(), lens.clone())?;
        check_aads(nonces.len(), aad_lens.clone())?;
        self.meta.clear();
        let mut off = 0;
        for (len, n) in lens.zip(nonces) {
            self.meta.push(off as u32);
            self.meta.push(len as u32);
            for w in n.chunks_exact(4) {
                self.meta.push(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
            }
            self.meta.extend([0, 0, 0]);
            off = next_offset(off, len);
        }
        for (i, len) in aad_lens.enumerate() {
            self.meta[i * META_WORDS + 5] = off as u32;
            self.meta[i * META_WORDS + 6] = len as u32;
            off = next_offset(off, len);
        }
        if off > MAX_BATCH_BYTES {
            return Err(GpuError::Batch(format!(
                "the batch packs to {off} bytes with its AADs, over the limit of {MAX_BATCH_BYTES}"
            )));
        }
        Ok(off)
    }

    /// Copies `packets` and `aads` to their offsets in `dst` (laid out by
    /// [`Packed::layout`]) and zeroes the padding after each.
    pub fn scatter(&self, packets: &[&mut [u8]], aads: &[&[u8]], dst: &mut [u8]) {
        let put = |dst: &mut [u8], r: std::ops::Range<usize>, src: &[u8]| {
            let end = next_offset(r.start, src.len()).min(dst.len());
            dst[r.clone()].copy_from_slice(src);
            dst[r.end..end].fill(0);
        };
        for (i, p) in packets.iter().enumerate() {
            put(dst, self.range(i), p);
        }
        for (i, a) in aads.iter().enumerate() {
            put(dst, self.aad_range(i), a);
        }
    }

    /// Lays out a batch as a device frame (see [`Frame`]); the caller sizes a buffer of
    /// `frame.len()` bytes and fills it with [`Packed::fill_frame`].
    pub fn frame(
        &mut self,
        nonces: &[[u8; NONCE_LEN]],
        aads: &[&[u8]],
        packets: &[&mut [u8]],
    ) -> Result<Frame, GpuError> {
        let data_len = self.layout(
            nonces,
            packets.iter().map(|p| p.len()),
            aads.iter().map(|a| a.len()),
        )?;
        Ok(Frame {
            npkt: packets.len(),
            data_len,
        })
    }

    /// Writes the frame laid out by [`Packed::frame`] into `buf` (`frame.len()` bytes): the
    /// metadata, then the packed packets and AADs; the tag slots are left for the device.
    pub fn fill_frame(&self, frame: &Frame, aads: &[&[u8]], packets: &[&mut [u8]], buf: &mut [u8]) {
        self.meta_bytes(&mut buf[..frame.tags_at()]);
        self.scatter(packets, aads, &mut buf[frame.data_at()..frame.len()]);
    }

    /// The metadata as little-endian bytes, as the device reads it.
    pub fn meta_bytes(&self, dst: &mut [u8]) {
        for (d, w) in dst.chunks_exact_mut(4).zip(&self.meta) {
            d.copy_from_slice(&w.to_le_bytes());
        }
    }

    /// Offset and length of packet `i`'s AAD.
    pub fn aad_range(&self, i: usize) -> std::ops::Range<usize> {
        let off = self.meta[i * META_WORDS + 5] as usize;
        off..off + self.meta[i * META_WORDS + 6] as usize
    }

    /// Packets in the batch.
    pub fn count(&self) -> usize {
        self.meta.len() / META_WORDS
    }

    /// Offset and length of packet `i`.
    pub fn range(&self, i: usize) -> std::ops::Range<usize> {
        let off = self.meta[i * META_WORDS] as usize;
        off..off + self.meta[i * META_WORDS + 1] as usize
    }

    /// The nonce of packet `i`, as packed.
    pub fn nonce(&self, i: usize) -> [u8; NONCE_LEN] {
        let mut n = [0u8; NONCE_LEN];
        for (k, w) in self.meta[i * META_WORDS + 2..i * META_WORDS + 5]
            .iter()
            .enumerate()
        {
            n[k * 4..k * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        n
    }

    /// Copies each packet's bytes from `data` (the device's output) back into `packets`.
    pub fn unpack(&self, data: &[u8], packets: &mut [&mut [u8]]) {
        for (i, p) in packets.iter_mut().enumerate() {
            p.copy_from_slice(&data[self.range(i)]);
        }
    }
}

/// Checks a batch against the limits: as many nonces as packets, each packet and the packed
/// batch within bounds.
pub fn check(nonces: usize, lens: impl Iterator<Item = usize> + Clone) -> Result<(), GpuError> {
    let count = lens.clone().count();
    if nonces != count {
        return Err(GpuError::Batch(format!(
            "{nonces} nonces for {count} packets"
        )));
    }
    if let Some(l) = lens.clone().find(|&l| l > MAX_PACKET) {
        return Err(GpuError::Batch(format!(
            "a packet of {l} bytes is over the limit of {MAX_PACKET}"
        )));
    }
    let total = Packed::packed_len(lens);
    if total > MAX_BATCH_BYTES {
        return Err(GpuError::Batch(format!(
            "the batch packs to {total} bytes, over the limit of {MAX_BATCH_BYTES}"
        )));
    }
    Ok(())
}

/// Checks the AADs: one per packet, each within [`MAX_AAD`].
pub fn check_aads(
    packets: usize,
    lens: impl Iterator<Item = usize> + Clone,
) -> Result<(), GpuError> {
    let count = lens.clone().count();
    if count != packets {
        return Err(GpuError::Batch(format!(
            "{count} AADs for {packets} packets"
        )));
    }
    if let Some(l) = lens.clone().find(|&l| l > MAX_AAD) {
        return Err(GpuError::Batch(format!(
            "an AAD of {l} bytes is over the limit of {MAX_AAD}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_blocks_follow_sp800_38d() {
        let n = [0xA0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xBB];
        let j = j0(&n);
        assert_eq!(&j[..12], &n);
        assert_eq!(&j[12..], &[0, 0, 0, 1]);
        // The first payload block uses inc32(J0); the counter is big-endian.
        assert_eq!(&counter_block(&n, 2)[12..], &[0, 0, 0, 2]);
        assert_eq!(&counter_block(&n, 0x0102_0304)[12..], &[1, 2, 3, 4]);
    }

    #[test]
    fn pack_aligns_and_unpack_restores() {
        let mut a = vec![1u8; 17];
        let mut b = vec![2u8; 0];
        let mut c = vec![3u8; 32];
        let nonces = [[7u8; 12], [8u8; 12], [9u8; 12]];
        let mut packed = Packed::default();
        {
            let ps: Vec<&mut [u8]> = vec![&mut a, &mut b, &mut c];
            packed
                .pack(&nonces, &[&[5u8; 3], &[], &[6u8; 16]], &ps)
                .unwrap();
        }
        assert_eq!(packed.count(), 3);
        assert_eq!(packed.range(0), 0..17);
        assert_eq!(packed.range(1), 32..32);
        assert_eq!(packed.range(2), 32..64);
        assert_eq!(packed.aad_range(0), 64..67);
        assert_eq!(packed.aad_range(1), 80..80);
        assert_eq!(packed.aad_range(2), 80..96);
        assert_eq!(packed.data.len(), 96);
        assert!(
            packed.data[17..32].iter().all(|&x| x == 0),
            "padding is zero"
        );
        assert_eq!(
            &packed.data[64..80],
            &[5, 5, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(&packed.data[80..96], &[6u8; 16]);
        let f = Frame {
            npkt: 3,
            data_len: 96,
        };
        assert_eq!((f.tags_at(), f.data_at(), f.len()), (96, 144, 240));
        assert_eq!(f.data_at() % 16, 0);
        assert_eq!(packed.nonce(2), [9u8; 12]);
        // The device's output goes back where each packet came from.
        let out: Vec<u8> = packed.data.iter().map(|x| x ^ 0xFF).collect();
        let mut ps: Vec<&mut [u8]> = vec![&mut a, &mut b, &mut c];
        packed.unpack(&out, &mut ps);
        assert_eq!(a, vec![0xFE; 17]);
        assert_eq!(c, vec![0xFC; 32]);
    }

    #[test]
    fn limits_are_typed_errors() {
        let mut big = vec![0u8; MAX_PACKET + 1];
        let mut p = Packed::default();
        let e = p.pack(&[[0; 12]], &[&[]], &[&mut big]).unwrap_err();
        assert!(e.to_string().contains("over the limit"), "{e}");
        let mut one = vec![0u8; 3];
        let e = p.pack(&[], &[], &[&mut one]).unwrap_err();
        assert!(e.to_string().contains("0 nonces for 1 packets"), "{e}");
        let e = p.pack(&[[0; 12]], &[], &[&mut one]).unwrap_err();
        assert!(e.to_string().contains("0 AADs for 1 packets"), "{e}");
        let aad = vec![0u8; MAX_AAD + 1];
        let e = p.pack(&[[0; 12]], &[&aad], &[&mut one]).unwrap_err();
        assert!(e.to_string().contains("AAD of"), "{e}");
    }
}
