//! The CUDA backend (feature `cuda`): cudarc with the driver and NVRTC loaded at run time.
//!
//! A batch is cut into [`STREAMS`] chunks of consecutive packets. Each chunk is packed into
//! its stream's pinned host buffer and goes host-to-device, through `gcm_ctr` and back on its
//! own stream, so one chunk's copies overlap another's kernel; the host then finishes each
//! chunk's tags (GHASH) in order while later chunks are still on the device.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};

use crate::gcm::{CpuCtr, Key128, finish_tags};
use crate::kernel::{TABLE_LEN, THREADS_PER_PACKET, source};
use crate::layout::{NONCE_LEN, Packed, TAG_LEN};
use crate::{Availability, GpuError, GpuSealer};

/// CUDA streams per device: enough for copy-in, kernel and copy-out of three chunks to
/// overlap, plus one being finished on the host.
pub const STREAMS: usize = 4;
/// Pinned host memory kept in the buffer cache; past it the cache is emptied before a new
/// size is allocated (pinned memory is locked RAM taken from the whole machine).
pub const MAX_PINNED_BYTES: usize = 512 << 20;

fn drv(e: cudarc::driver::DriverError) -> GpuError {
    GpuError::Driver(e.to_string())
}

/// One stream's buffers for chunks of one shape (data bytes, packets): cudarc copies whole
/// host slices, so buffers are sized exactly and cached by shape.
struct Buffers {
    host_data: PinnedHostSlice<u8>,
    host_meta: PinnedHostSlice<u32>,
    host_masks: PinnedHostSlice<u8>,
    dev_data: CudaSlice<u8>,
    dev_meta: CudaSlice<u32>,
    dev_masks: CudaSlice<u8>,
}

impl Buffers {
    fn new(
        ctx: &Arc<CudaContext>,
        s: &Arc<CudaStream>,
        bytes: usize,
        n: usize,
    ) -> Result<Self, GpuError> {
        let bytes = bytes.max(16);
        // SAFETY: the pinned buffers are uninitialised host memory; every byte the device
        // reads is written first (pack fills data and meta in full), and masks are only read
        // after the device wrote them. Flags 0 (not write-combined): the host reads results.
        let (host_data, host_meta, host_masks) = unsafe {
            (
                ctx.alloc_pinned_with_flags::<u8>(bytes, 0).map_err(drv)?,
                ctx.alloc_pinned_with_flags::<u32>(n * crate::layout::META_WORDS, 0)
                    .map_err(drv)?,
                ctx.alloc_pinned_with_flags::<u8>(n * 16, 0).map_err(drv)?,
            )
        };
        Ok(Buffers {
            host_data,
            host_meta,
            host_masks,
            dev_data: s.alloc_zeros::<u8>(bytes).map_err(drv)?,
            dev_meta: s
                .alloc_zeros::<u32>(n * crate::layout::META_WORDS)
                .map_err(drv)?,
            dev_masks: s.alloc_zeros::<u8>(n * 16).map_err(drv)?,
        })
    }

    fn pinned_bytes(&self) -> usize {
        self.host_data.num_bytes() + self.host_meta.num_bytes() + self.host_masks.num_bytes()
    }
}

/// The device, its compiled kernels, streams and buffers.
pub(crate) struct Device {
    ctx: Arc<CudaContext>,
    streams: Vec<Arc<CudaStream>>,
    setup: CudaFunction,
    ctr: CudaFunction,
    name: String,
    key_dev: CudaSlice<u8>,
    table: CudaSlice<u8>,
    /// The key whose table is on the device, and its GHASH subkey.
    keyed: Option<(Key128, [u8; 16])>,
    packed: Vec<Packed>,
    buffers: HashMap<(usize, usize, usize), Buffers>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name)
            .field("streams", &self.streams.len())
            .finish()
    }
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
    let ptx = compile_ptx_with_opts(
        source(),
        CompileOptions {
            name: Some("sealink_gcm_ctr.cu".into()),
            ..Default::default()
        },
    )
    .map_err(|e| GpuError::Compile(e.to_string()))?;
    let module = ctx.load_module(ptx).map_err(drv)?;
    let setup = module.load_function("aes128_setup").map_err(drv)?;
    let ctr = module.load_function("gcm_ctr").map_err(drv)?;
    let streams = (0..STREAMS)
        .map(|_| ctx.new_stream())
        .collect::<Result<Vec<_>, _>>()
        .map_err(drv)?;
    let key_dev = streams[0].alloc_zeros::<u8>(16).map_err(drv)?;
    let table = streams[0].alloc_zeros::<u8>(TABLE_LEN).map_err(drv)?;
    Ok(Availability::Ready(Box::new(GpuSealer {
        inner: Device {
            ctx,
            streams,
            setup,
            ctr,
            name,
            key_dev,
            table,
            keyed: None,
            packed: (0..STREAMS).map(|_| Packed::default()).collect(),
            buffers: HashMap::new(),
        },
    })))
}

impl Device {
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Puts `key`'s S-box and round keys on the device (once per key); returns H.
    fn set_key(&mut self, key: &Key128) -> Result<[u8; 16], GpuError> {
        if let Some((k, h)) = &self.keyed {
            if k == key {
                return Ok(*h);
            }
        }
        let h = CpuCtr::new(key)?.hash_subkey()?;
        let s = &self.streams[0];
        s.memcpy_htod(&key[..], &mut self.key_dev).map_err(drv)?;
        let mut b = s.launch_builder(&self.setup);
        b.arg(&self.key_dev).arg(&mut self.table);
        // SAFETY: aes128_setup(const u8 *key, u8 *table) reads 16 bytes of key_dev and writes
        // TABLE_LEN bytes of table, both allocated with those lengths; one block of 256
        // threads as the kernel expects.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            })
        }
        .map_err(drv)?;
        s.synchronize().map_err(drv)?;
        self.keyed = Some((*key, h));
        Ok(h)
    }

    fn buffers(&mut self, stream: usize, bytes: usize, n: usize) -> Result<(), GpuError> {
        let shape = (stream, bytes, n);
        if self.buffers.contains_key(&shape) {
            return Ok(());
        }
        let held: usize = self.buffers.values().map(Buffers::pinned_bytes).sum();
        if held + bytes > MAX_PINNED_BYTES {
            self.ctx.synchronize().map_err(drv)?;
            self.buffers.clear();
        }
        let b = Buffers::new(&self.ctx, &self.streams[stream], bytes, n)?;
        self.buffers.insert(shape, b);
        Ok(())
    }

    pub(crate) fn seal_batch(
        &mut self,
        key: &Key128,
        nonces: &[[u8; NONCE_LEN]],
        aads: &[&[u8]],
        packets: &mut [&mut [u8]],
    ) -> Result<Vec<[u8; TAG_LEN]>, GpuError> {
        crate::layout::check(nonces.len(), packets.iter().map(|p| p.len()))?;
        if aads.len() != packets.len() {
            return Err(GpuError::Batch(format!(
                "{} AADs for {} packets",
                aads.len(),
                packets.len()
            )));
        }
        if packets.is_empty() {
            return Ok(Vec::new());
        }
        let h = self.set_key(key)?;
        let per = packets.len().div_ceil(STREAMS);
        let mut shapes = Vec::with_capacity(STREAMS);
        // Launch every chunk: pack into pinned memory, H2D, kernel, D2H on its stream.
        for (s, (chunk, nonce_chunk)) in packets.chunks(per).zip(nonces.chunks(per)).enumerate() {
            let mut packed = std::mem::take(&mut self.packed[s]);
            let lens = chunk.iter().map(|p| p.len());
            let bytes = packed.layout(nonce_chunk, lens)?;
            let n = chunk.len();
            self.buffers(s, bytes.max(16), n)?;
            let shape = (s, bytes.max(16), n);
            let bufs = self.buffers.get_mut(&shape).expect("just inserted");
            packed.scatter(chunk, bufs.host_data.as_mut_slice().map_err(drv)?);
            bufs.host_meta
                .as_mut_slice()
                .map_err(drv)?
                .copy_from_slice(&packed.meta);
            let st = &self.streams[s];
            st.memcpy_htod(&bufs.host_data, &mut bufs.dev_data)
                .map_err(drv)?;
            st.memcpy_htod(&bufs.host_meta, &mut bufs.dev_meta)
                .map_err(drv)?;
            let npkt = n as u32;
            let mut b = st.launch_builder(&self.ctr);
            b.arg(&self.table)
                .arg(&bufs.dev_meta)
                .arg(&mut bufs.dev_data)
                .arg(&mut bufs.dev_masks)
                .arg(&npkt);
            // SAFETY: gcm_ctr(table, meta, data, masks, npkt): table holds TABLE_LEN bytes,
            // meta 5 words per packet, masks 16 bytes per packet, and data the packed chunk
            // whose every (offset, padded length) in meta lies inside it (layout built both);
            // one block of THREADS_PER_PACKET threads per packet, grid = npkt.
            unsafe {
                b.launch(LaunchConfig {
                    grid_dim: (npkt, 1, 1),
                    block_dim: (THREADS_PER_PACKET, 1, 1),
                    shared_mem_bytes: 0,
                })
            }
            .map_err(drv)?;
            st.memcpy_dtoh(&bufs.dev_data, &mut bufs.host_data)
                .map_err(drv)?;
            st.memcpy_dtoh(&bufs.dev_masks, &mut bufs.host_masks)
                .map_err(drv)?;
            self.packed[s] = packed;
            shapes.push(shape);
        }
        // Finish in order: chunk s's tags on the CPU while later chunks are still running.
        let mut tags = Vec::with_capacity(packets.len());
        for (s, (chunk, aad_chunk)) in packets.chunks_mut(per).zip(aads.chunks(per)).enumerate() {
            self.streams[s].synchronize().map_err(drv)?;
            let bufs = &self.buffers[&shapes[s]];
            let data = bufs.host_data.as_slice().map_err(drv)?;
            let masks: Vec<[u8; 16]> = bufs
                .host_masks
                .as_slice()
                .map_err(drv)?
                .chunks_exact(16)
                .map(|m| m.try_into().expect("16 bytes"))
                .collect();
            let packed = &self.packed[s];
            tags.extend(finish_tags(&h, packed, data, aad_chunk, &masks)?);
            packed.unpack(data, chunk);
        }
        Ok(tags)
    }
}
