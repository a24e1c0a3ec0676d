//! The CUDA backend (feature `cuda`): cudarc with the driver and NVRTC loaded at run time.
//!
//! A run of packets is cut into batches; each batch is one frame ([`Frame`]: metadata, tag
//! slots, packed data) in its stream's pinned host buffer, and takes one host-to-device copy,
//! one `gcm_seal` launch and one device-to-host copy on its own stream. Up to [`STREAMS`]
//! batches are in flight: while one stream's copies and kernel run, the host packs the next
//! batch and finishes (unpacks, and with GHASH on the CPU hashes) the oldest, so batches come
//! back in the order they went in. The stream-less strategies ([`Strategy::streams`] false)
//! keep one batch in flight on stream 0: pack, copy in, kernel, copy out, wait, finish, and
//! only then the next; the naive ones launch `gcm_ctr_spread` (and `gcm_ghash`) in place of
//! `gcm_seal`.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtrMut, LaunchConfig, PinnedHostSlice,
    PushKernelArg,
};
use cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};

use crate::gcm::{CpuCtr, Key128, finish_frame};
use crate::kernel::{
    SPREAD_THREADS, TABLE_WORDS, THREADS_PER_PACKET, source, spread_blocks_per_packet,
};
use crate::layout::{Frame, MAX_GHASH_BLOCKS, NONCE_LEN, Packed, TAG_LEN};
use crate::{Availability, GpuError, GpuSealer, Phases, Strategy};

/// CUDA streams, and so batches in flight: enough for one batch's copy in, another's kernel
/// and a third's copy out to overlap while the host packs or finishes a fourth.
pub const STREAMS: usize = 4;
/// `seal_batch` splits a batch over the streams only into pieces at least this large: below
/// it the driver calls of each piece cost more than the overlap gains.
pub const MIN_CHUNK_BYTES: usize = 256 << 10;

fn drv(e: cudarc::driver::DriverError) -> GpuError {
    GpuError::Driver(e.to_string())
}

/// One stream's batch: the pinned host buffer and device buffer its frame goes through (grown
/// to the next power of two, never shrunk), and the batch's layout.
#[derive(Default)]
struct Slot {
    host: Option<PinnedHostSlice<u8>>,
    dev: Option<CudaSlice<u8>>,
    packed: Packed,
    frame: Option<Frame>,
}

impl Slot {
    fn ensure(
        &mut self,
        ctx: &Arc<CudaContext>,
        s: &Arc<CudaStream>,
        len: usize,
    ) -> Result<(), GpuError> {
        if self.host.as_ref().is_some_and(|h| h.len() >= len) {
            return Ok(());
        }
        let cap = len.next_power_of_two().max(64 << 10);
        // Free the old pair first (pinned memory is locked RAM taken from the whole machine).
        self.host = None;
        self.dev = None;
        // SAFETY: uninitialised pinned host memory; the host writes every byte of a frame
        // before copying it to the device, and reads back only what the device wrote. Flags 0
        // (not write-combined): the host reads the results.
        self.host = Some(unsafe { ctx.alloc_pinned_with_flags::<u8>(cap, 0) }.map_err(drv)?);
        self.dev = Some(s.alloc_zeros::<u8>(cap).map_err(drv)?);
        Ok(())
    }
}

/// A slot's pinned host buffer, once `Slot::ensure` made it.
fn pinned(host: &mut Option<PinnedHostSlice<u8>>) -> Result<&mut [u8], GpuError> {
    host.as_mut().expect("ensured").as_mut_slice().map_err(drv)
}

/// The device, its compiled kernels, streams and buffers.
pub(crate) struct Device {
    ctx: Arc<CudaContext>,
    streams: Vec<Arc<CudaStream>>,
    setup: CudaFunction,
    powers: CudaFunction,
    seal: CudaFunction,
    ctr_spread: CudaFunction,
    ghash: CudaFunction,
    name: String,
    key_dev: CudaSlice<u8>,
    h_dev: CudaSlice<u32>,
    table: CudaSlice<u32>,
    hpow: CudaSlice<u32>,
    /// The key whose tables are on the device, and its GHASH subkey.
    keyed: Option<(Key128, [u8; 16])>,
    slots: Vec<Slot>,
    gpu_ghash: bool,
    strategy: Strategy,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name)
            .field("streams", &self.streams.len())
            .field("gpu_ghash", &self.gpu_ghash)
            .field("strategy", &self.strategy)
            .finish()
    }
}

/// Compiles the kernels with NVRTC for `arch` (such as `compute_90`) without a device: the
/// PTX, or `None` when no NVRTC library can be loaded.
pub(crate) fn compile_only(arch: &'static str) -> Result<Option<String>, GpuError> {
    // SAFETY: only tries to dlopen the library by its usual names and close it again.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Ok(None);
    }
    compile(arch).map(|p| Some(p.to_src()))
}

fn compile(arch: &'static str) -> Result<cudarc::nvrtc::Ptx, GpuError> {
    compile_ptx_with_opts(
        source(),
        CompileOptions {
            name: Some("sealink_gcm.cu".into()),
            arch: Some(arch),
            ..Default::default()
        },
    )
    .map_err(|e| GpuError::Compile(e.to_string()))
}

/// Looks for device 0 (see [`crate::open`]).
pub(crate) fn open() -> Result<Availability, GpuError> {
    // SAFETY: both only try to dlopen the library by its usual names and close it again.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Ok(Availability::Absent(
            "no CUDA driver library (libcuda.so) could be loaded".into(),
        ));
    }
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Ok(Availability::Absent(
            "no NVRTC library (libnvrtc.so) could be loaded: install the CUDA runtime compiler or set LD_LIBRARY_PATH".into(),
        ));
    }
    // cudarc panics when a symbol its bindings expect is missing from an older driver: report
    // that as an absent device rather than taking the process down.
    let count = std::panic::catch_unwind(CudaContext::device_count);
    match count {
        Err(_) => {
            return Ok(Availability::Absent(
                "the CUDA driver library lacks a symbol cudarc needs (driver older than CUDA 12.2?)".into(),
            ));
        }
        Ok(Err(e)) => {
            return Ok(Availability::Absent(format!(
                "the CUDA driver found no usable device: {e}"
            )));
        }
        Ok(Ok(0)) => {
            return Ok(Availability::Absent(
                "the CUDA driver reports no device".into(),
            ));
        }
        Ok(Ok(_)) => {}
    }
    let ctx = CudaContext::new(0).map_err(drv)?;
    let name = ctx.name().map_err(drv)?;
    // Compile for this device's own architecture (PTX for an older one would be JIT-compiled
    // by the driver without the newer chip's scheduling).
    let (major, minor) = ctx.compute_capability().map_err(drv)?;
    let arch: &'static str = Box::leak(format!("compute_{major}{minor}").into_boxed_str());
    let ptx = compile(arch)?;
    let module = ctx.load_module(ptx).map_err(drv)?;
    let setup = module.load_function("aes128_setup").map_err(drv)?;
    let powers = module.load_function("ghash_powers").map_err(drv)?;
    let seal = module.load_function("gcm_seal").map_err(drv)?;
    let ctr_spread = module.load_function("gcm_ctr_spread").map_err(drv)?;
    let ghash = module.load_function("gcm_ghash").map_err(drv)?;
    let streams = (0..STREAMS)
        .map(|_| ctx.new_stream())
        .collect::<Result<Vec<_>, _>>()
        .map_err(drv)?;
    let s0 = &streams[0];
    let key_dev = s0.alloc_zeros::<u8>(16).map_err(drv)?;
    let h_dev = s0.alloc_zeros::<u32>(4).map_err(drv)?;
    let table = s0.alloc_zeros::<u32>(TABLE_WORDS).map_err(drv)?;
    let hpow = s0.alloc_zeros::<u32>(4 * MAX_GHASH_BLOCKS).map_err(drv)?;
    Ok(Availability::Ready(Box::new(GpuSealer {
        inner: Device {
            ctx,
            streams,
            setup,
            powers,
            seal,
            ctr_spread,
            ghash,
            name,
            key_dev,
            h_dev,
            table,
            hpow,
            keyed: None,
            slots: (0..STREAMS).map(|_| Slot::default()).collect(),
            gpu_ghash: true,
            strategy: Strategy::default(),
        },
    })))
}

/// What a stream does with a packed batch, in this order.
#[derive(Debug, Clone, Copy)]
enum Step {
    CopyIn,
    Kernel,
    CopyOut,
}

/// One batch of a run: its nonces, AADs and packets.
type Part<'a, 'b> = (
    &'a [[u8; NONCE_LEN]],
    &'a [&'a [u8]],
    &'a mut [&'b mut [u8]],
);

impl Device {
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn set_gpu_ghash(&mut self, on: bool) {
        self.gpu_ghash = on;
    }

    pub(crate) fn gpu_ghash(&self) -> bool {
        self.gpu_ghash
    }

    pub(crate) fn set_strategy(&mut self, strategy: Strategy) {
        self.strategy = strategy;
    }

    pub(crate) fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// Batches in flight: one per stream, or one in all without streams.
    fn depth(&self) -> usize {
        if self.strategy.streams() { STREAMS } else { 1 }
    }

    /// Puts `key`'s tables and the powers of its H on the device (once per key); returns H.
    fn set_key(&mut self, key: &Key128) -> Result<[u8; 16], GpuError> {
        if let Some((k, h)) = &self.keyed {
            if k == key {
                return Ok(*h);
            }
        }
        let h = CpuCtr::new(key)?.hash_subkey()?;
        let hw: Vec<u32> = h
            .chunks_exact(4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let s = &self.streams[0];
        s.memcpy_htod(&key[..], &mut self.key_dev).map_err(drv)?;
        s.memcpy_htod(&hw[..], &mut self.h_dev).map_err(drv)?;
        let mut b = s.launch_builder(&self.setup);
        b.arg(&self.key_dev).arg(&mut self.table);
        // SAFETY: aes128_setup(const u8 *key, u32 *table) reads the 16 bytes of key_dev and
        // writes TABLE_WORDS words of table, both allocated with those lengths; one block of
        // 256 threads as the kernel expects.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .map_err(drv)?;
        let count = MAX_GHASH_BLOCKS as u32;
        let mut b = s.launch_builder(&self.powers);
        b.arg(&self.h_dev).arg(&mut self.hpow).arg(&count);
        // SAFETY: ghash_powers(const u32 *h, u32 *hpow, u32 count) reads 4 words of h_dev and
        // writes 4 words per index below count into hpow, allocated with 4 * count words;
        // threads past count return. Blocks of 256, not the 1024 of `for_num_elems`: the
        // square-and-multiply keeps a dozen 128-bit values per thread in registers.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: (count.div_ceil(256), 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .map_err(drv)?;
        s.synchronize().map_err(drv)?;
        self.keyed = Some((*key, h));
        Ok(h)
    }

    /// Packs batch `part` into stream `s`'s pinned buffer as a frame.
    fn pack(&mut self, s: usize, part: &Part<'_, '_>) -> Result<(), GpuError> {
        let (nonces, aads, packets) = part;
        let slot = &mut self.slots[s];
        let frame = slot.packed.frame(nonces, aads, packets)?;
        slot.ensure(&self.ctx, &self.streams[s], frame.len())?;
        let host = pinned(&mut slot.host)?;
        slot.packed
            .fill_frame(&frame, aads, packets, &mut host[..frame.len()]);
        slot.frame = Some(frame);
        Ok(())
    }

    /// Queues one step of stream `s`'s packed batch on that stream.
    fn step(&mut self, s: usize, step: Step) -> Result<(), GpuError> {
        let st = &self.streams[s];
        let slot = &mut self.slots[s];
        let frame = slot.frame.expect("packed");
        let dev = slot.dev.as_mut().expect("ensured");
        let host = pinned(&mut slot.host)?;
        match step {
            Step::CopyIn => {
                let (dptr, _rec) = dev.device_ptr_mut(st);
                // SAFETY: copies frame.len() bytes of pinned host memory to the device buffer,
                // which holds at least that many (ensure). The host buffer is not touched
                // again until `finish` has synchronised this stream.
                unsafe {
                    cudarc::driver::result::memcpy_htod_async(
                        dptr,
                        &host[..frame.len()],
                        st.cu_stream(),
                    )
                }
                .map_err(drv)
            }
            Step::Kernel if self.strategy.block_per_packet() => {
                let npkt = frame.npkt as u32;
                let ghash = u32::from(self.gpu_ghash);
                let mut b = st.launch_builder(&self.seal);
                b.arg(&self.table)
                    .arg(&self.hpow)
                    .arg(&mut *dev)
                    .arg(&npkt)
                    .arg(&ghash);
                // SAFETY: gcm_seal(table, hpow, buf, npkt, gpu_ghash): table holds
                // TABLE_WORDS words, hpow the MAX_GHASH_BLOCKS powers (layout bounds every
                // packet's AAD and payload so that no packet needs more), buf the frame whose
                // metadata, tag slots and every (offset, padded length) lie inside it (layout
                // built both); one block of THREADS_PER_PACKET threads per packet, grid = npkt.
                unsafe {
                    b.launch(LaunchConfig {
                        grid_dim: (npkt, 1, 1),
                        block_dim: (THREADS_PER_PACKET, 1, 1),
                        shared_mem_bytes: 0,
                    })
                }
                .map(|_| ())
                .map_err(drv)
            }
            Step::Kernel => {
                let npkt = frame.npkt as u32;
                let packed = &slot.packed;
                let bpp =
                    spread_blocks_per_packet((0..packed.count()).map(|i| packed.range(i).len()));
                let grid = npkt.checked_mul(bpp).ok_or_else(|| {
                    GpuError::Batch(format!(
                        "{npkt} packets of {bpp} blocks each: too many blocks"
                    ))
                })?;
                let mut b = st.launch_builder(&self.ctr_spread);
                b.arg(&self.table).arg(&mut *dev).arg(&npkt).arg(&bpp);
                // SAFETY: gcm_ctr_spread(table, buf, npkt, bpp): table holds TABLE_WORDS words,
                // buf the frame as for gcm_seal; bpp blocks of SPREAD_THREADS threads per packet
                // cover its longest packet's AES blocks and tag mask (spread_blocks_per_packet),
                // and threads past a packet's blocks return; grid = npkt * bpp.
                unsafe {
                    b.launch(LaunchConfig {
                        grid_dim: (grid, 1, 1),
                        block_dim: (SPREAD_THREADS, 1, 1),
                        shared_mem_bytes: 0,
                    })
                }
                .map_err(drv)?;
                if !self.gpu_ghash {
                    return Ok(());
                }
                let mut b = st.launch_builder(&self.ghash);
                b.arg(&self.hpow).arg(&mut *dev).arg(&npkt);
                // SAFETY: gcm_ghash(hpow, buf, npkt): hpow and buf as for gcm_seal, the tag
                // slots holding E_K(J0) from gcm_ctr_spread, queued before it on this stream; one
                // block of THREADS_PER_PACKET threads per packet.
                unsafe {
                    b.launch(LaunchConfig {
                        grid_dim: (npkt, 1, 1),
                        block_dim: (THREADS_PER_PACKET, 1, 1),
                        shared_mem_bytes: 0,
                    })
                }
                .map(|_| ())
                .map_err(drv)
            }
            Step::CopyOut => {
                let (dptr, _rec) = dev.device_ptr_mut(st);
                let back = &mut host[frame.tags_at()..frame.len()];
                // SAFETY: copies the frame's tag slots and data (frame.len() - tags_at bytes
                // from device offset tags_at, inside the buffer) back into the same range of
                // the pinned host buffer; read only after `finish` synchronises the stream.
                unsafe {
                    cudarc::driver::result::memcpy_dtoh_async(
                        back,
                        dptr + frame.tags_at() as u64,
                        st.cu_stream(),
                    )
                }
                .map_err(drv)
            }
        }
    }

    /// Packs batch `part` and queues its copy in, kernel and copy out on stream `s`.
    fn launch(&mut self, s: usize, part: &Part<'_, '_>) -> Result<(), GpuError> {
        self.pack(s, part)?;
        for step in [Step::CopyIn, Step::Kernel, Step::CopyOut] {
            self.step(s, step)?;
        }
        Ok(())
    }

    /// Waits for stream `s`'s batch; puts its ciphertext back into `part`'s packets and returns
    /// its tags (GHASH here when the device did not do it).
    fn finish(
        &mut self,
        s: usize,
        h: &[u8; 16],
        part: &mut Part<'_, '_>,
    ) -> Result<Vec<[u8; TAG_LEN]>, GpuError> {
        self.streams[s].synchronize().map_err(drv)?;
        let slot = &mut self.slots[s];
        let frame = slot.frame.take().expect("a launched batch");
        let host = slot
            .host
            .as_ref()
            .expect("launched")
            .as_slice()
            .map_err(drv)?;
        finish_frame(
            h,
            &slot.packed,
            &frame,
            &host[..frame.len()],
            self.gpu_ghash,
            part.1,
            part.2,
        )
    }

    /// Seals a run of packets in batches of `per_batch`, pipelined over the streams. On an
    /// error the packets' contents are unspecified (some batches sealed, some not).
    pub(crate) fn seal_batches(
        &mut self,
        key: &Key128,
        nonces: &[[u8; NONCE_LEN]],
        aads: &[&[u8]],
        packets: &mut [&mut [u8]],
        per_batch: usize,
    ) -> Result<Vec<[u8; TAG_LEN]>, GpuError> {
        crate::layout::check(nonces.len(), packets.iter().map(|p| p.len()))?;
        crate::layout::check_aads(packets.len(), aads.iter().map(|a| a.len()))?;
        if packets.is_empty() {
            return Ok(Vec::new());
        }
        let per = per_batch.max(1);
        let h = self.set_key(key)?;
        let mut parts: Vec<Part<'_, '_>> = nonces
            .chunks(per)
            .zip(aads.chunks(per))
            .zip(packets.chunks_mut(per))
            .map(|((n, a), p)| (n, a, p))
            .collect();
        let mut tags = Vec::with_capacity(nonces.len());
        let depth = self.depth();
        let mut inflight = VecDeque::with_capacity(depth);
        let mut run = || -> Result<(), GpuError> {
            for i in 0..parts.len() {
                if inflight.len() == depth {
                    let j: usize = inflight.pop_front().expect("full");
                    tags.extend(self.finish(j % depth, &h, &mut parts[j])?);
                }
                self.launch(i % depth, &parts[i])?;
                inflight.push_back(i);
            }
            while let Some(j) = inflight.pop_front() {
                tags.extend(self.finish(j % depth, &h, &mut parts[j])?);
            }
            Ok(())
        };
        if let Err(e) = run() {
            // Batches still in flight may be copying into the pinned buffers: wait for them
            // before a later call packs into those buffers again.
            let _ = self.ctx.synchronize();
            for slot in &mut self.slots {
                slot.frame = None;
            }
            return Err(e);
        }
        Ok(tags)
    }

    /// One batch: split over the streams when it is large enough to gain from it (and the
    /// strategy has streams).
    pub(crate) fn seal_batch(
        &mut self,
        key: &Key128,
        nonces: &[[u8; NONCE_LEN]],
        aads: &[&[u8]],
        packets: &mut [&mut [u8]],
    ) -> Result<Vec<[u8; TAG_LEN]>, GpuError> {
        let bytes: usize = packets.iter().map(|p| p.len()).sum();
        let pieces = (bytes / MIN_CHUNK_BYTES).clamp(1, self.depth());
        let per = packets.len().div_ceil(pieces);
        self.seal_batches(key, nonces, aads, packets, per)
    }

    /// One batch on one stream with a wait after each step, timed by the host clock: where a
    /// batch's time goes (see [`Phases`]).
    pub(crate) fn phases(
        &mut self,
        key: &Key128,
        nonces: &[[u8; NONCE_LEN]],
        aads: &[&[u8]],
        packets: &mut [&mut [u8]],
    ) -> Result<Phases, GpuError> {
        crate::layout::check(nonces.len(), packets.iter().map(|p| p.len()))?;
        crate::layout::check_aads(packets.len(), aads.iter().map(|a| a.len()))?;
        let h = self.set_key(key)?;
        let mut part: Part<'_, '_> = (nonces, aads, packets);
        let t = Instant::now();
        self.pack(0, &part)?;
        let pack = t.elapsed();
        let mut took = [std::time::Duration::ZERO; 3];
        for (d, step) in took
            .iter_mut()
            .zip([Step::CopyIn, Step::Kernel, Step::CopyOut])
        {
            let t = Instant::now();
            self.step(0, step)?;
            self.streams[0].synchronize().map_err(drv)?;
            *d = t.elapsed();
        }
        let t = Instant::now();
        self.finish(0, &h, &mut part)?;
        Ok(Phases {
            pack,
            h2d: took[0],
            kernel: took[1],
            d2h: took[2],
            finish: t.elapsed(),
        })
    }
}
