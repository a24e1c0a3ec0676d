//! AES-128-GCM sealing of packet batches on a CUDA GPU, after paper 004 (section 6): the CTR
//! keystream on the GPU with one thread block per packet and batches of packets, several CUDA
//! streams overlapping host-to-device copies, kernels and device-to-host copies from pinned
//! host buffers, and several batches in flight. GHASH and the tag run on the GPU too (the
//! default), or on the CPU ([`gcm`]) for comparison ([`GpuSealer::set_gpu_ghash`]). The output
//! is byte-identical to aws-lc-rs's AES-128-GCM seal either way.
//!
//! The CUDA backend is behind the `cuda` feature (cudarc, driver and NVRTC loaded at run
//! time, kernels compiled from [`kernel`]'s source by NVRTC). Without the feature, or on a
//! machine without a driver or device, [`open`] says why and [`open_default`] returns
//! `Ok(None)`; the host-side parts ([`layout`], [`gcm`], [`dispatch`]) always build and run.

#[cfg(feature = "cuda")]
mod cuda;
pub mod dispatch;
#[cfg(test)]
mod emulated;
pub mod gcm;
#[cfg(test)]
mod host_cc;
pub mod kernel;
pub mod layout;

pub use dispatch::{Device, Dispatch, Reorder};
pub use gcm::{Key128, cpu_seal_batch};
pub use layout::{NONCE_LEN, TAG_LEN};

/// Where one batch's time goes on the device path, each step waited for before the next
/// ([`GpuSealer::phases`]): packing into pinned memory, the copy in, the kernel, the copy
/// out, and finishing on the host (unpacking, plus GHASH when it runs on the CPU).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Phases {
    pub pack: std::time::Duration,
    pub h2d: std::time::Duration,
    pub kernel: std::time::Duration,
    pub d2h: std::time::Duration,
    pub finish: std::time::Duration,
}

/// How the device path seals, after paper 004's Figure 12, which compares three GPU
/// strategies: its naive code (a file spread over many blocks, one file at a time), CUDA
/// streams added, and then one block per file (3.7 Gb/s at 128 KB, 8x the naive code; 4x at
/// 4 KB). Two choices make them: the kernel (spread over many blocks, or one block per packet)
/// and the pipelining (batches one at a time on one stream, each waited for, or up to
/// `STREAMS` batches in flight over as many streams). The output is the same whichever is
/// chosen: only the speed differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// The paper's first strategy: each packet spread over several blocks of one warp
    /// (`gcm_ctr_spread`, then `gcm_ghash` when GHASH runs on the GPU), batches one at a time.
    Naive,
    /// The paper's second: the spread kernel, batches in flight over the streams.
    NaiveStreams,
    /// One block per packet (`gcm_seal`), batches one at a time: the streams' part of the
    /// paper's gain, taken out (not one of the paper's three).
    NoStreams,
    /// The paper's third and this crate's default: one block per packet, batches in flight
    /// over the streams.
    #[default]
    Streams,
}

impl Strategy {
    /// Every strategy, the paper's order (with the stream-less one before the last).
    pub const ALL: [Strategy; 4] = [
        Strategy::Naive,
        Strategy::NaiveStreams,
        Strategy::NoStreams,
        Strategy::Streams,
    ];

    /// The name the lab's `--strategy` takes.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::NaiveStreams => "naive-streams",
            Strategy::NoStreams => "no-streams",
            Strategy::Streams => "streams",
        }
    }

    /// The strategy called `name` (see [`Strategy::name`]).
    pub fn parse(name: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.name() == name.trim())
    }

    /// Whether each packet is one thread block (`gcm_seal`) rather than spread over several.
    pub fn block_per_packet(self) -> bool {
        matches!(self, Strategy::NoStreams | Strategy::Streams)
    }

    /// Whether several batches are in flight over the streams.
    pub fn streams(self) -> bool {
        matches!(self, Strategy::NaiveStreams | Strategy::Streams)
    }
}

/// Why the GPU backend failed.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// A batch the backend does not accept (counts disagree, a limit is exceeded).
    #[error("bad batch: {0}")]
    Batch(String),
    /// aws-lc-rs refused a key or an operation.
    #[error("CPU crypto failed: {0}")]
    Crypto(String),
    /// The CUDA driver failed (allocation, copy, launch, synchronisation).
    #[error("CUDA driver: {0}")]
    Driver(String),
    /// NVRTC could not compile the kernels.
    #[error("NVRTC: {0}")]
    Compile(String),
}

/// The result of looking for a GPU.
#[derive(Debug)]
pub enum Availability {
    /// A device with the kernels compiled and loaded.
    Ready(Box<GpuSealer>),
    /// No usable device, and why (no `cuda` feature, no driver library, no device...).
    Absent(String),
}

/// A CUDA device ready to seal batches (see the crate documentation).
#[derive(Debug)]
pub struct GpuSealer {
    #[cfg(feature = "cuda")]
    inner: cuda::Device,
    #[cfg(not(feature = "cuda"))]
    inner: Never,
}

#[cfg(not(feature = "cuda"))]
#[derive(Debug)]
enum Never {}

/// Looks for device 0: the sealer, or why there is none. An `Err` is a device that exists
/// but failed (the kernels did not compile, an allocation failed).
pub fn open() -> Result<Availability, GpuError> {
    #[cfg(feature = "cuda")]
    {
        cuda::open()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Ok(Availability::Absent(
            "built without the `cuda` feature (rebuild with `--features cuda`)".into(),
        ))
    }
}

/// Compiles the kernels with NVRTC for `arch` (such as `compute_90`) without needing a device
/// or a driver: the PTX, or `None` when no NVRTC library is found (or without the `cuda`
/// feature). Lets a machine without a GPU check that the kernel source compiles.
pub fn compile_kernels(arch: &'static str) -> Result<Option<String>, GpuError> {
    #[cfg(feature = "cuda")]
    {
        cuda::compile_only(arch)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = arch;
        Ok(None)
    }
}

/// [`open`], with `None` when there is no device (its reason is dropped; call [`open`] to
/// have it).
pub fn open_default() -> Result<Option<GpuSealer>, GpuError> {
    Ok(match open()? {
        Availability::Ready(s) => Some(*s),
        Availability::Absent(_) => None,
    })
}

impl GpuSealer {
    /// Seals `packets` in place with AES-128-GCM under `key`, packet `i` with `nonces[i]` and
    /// additional data `aads[i]`; returns the tags. Equal to aws-lc-rs's
    /// `seal_in_place_separate_tag` for every packet.
    pub fn seal_batch(
        &mut self,
        key: &Key128,
        nonces: &[[u8; NONCE_LEN]],
        aads: &[&[u8]],
        packets: &mut [&mut [u8]],
    ) -> Result<Vec<[u8; TAG_LEN]>, GpuError> {
        #[cfg(feature = "cuda")]
        {
            self.inner.seal_batch(key, nonces, aads, packets)
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (key, nonces, aads, packets);
            match self.inner {}
        }
    }

    /// Seals a run of packets in batches of `per_batch` packets, several batches in flight
    /// over the device's streams, tags returned in order. Each packet's result equals
    /// [`GpuSealer::seal_batch`]'s. On an error the packets' contents are unspecified.
    pub fn seal_batches(
        &mut self,
        key: &Key128,
        nonces: &[[u8; NONCE_LEN]],
        aads: &[&[u8]],
        packets: &mut [&mut [u8]],
        per_batch: usize,
    ) -> Result<Vec<[u8; TAG_LEN]>, GpuError> {
        #[cfg(feature = "cuda")]
        {
            self.inner
                .seal_batches(key, nonces, aads, packets, per_batch)
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (key, nonces, aads, packets, per_batch);
            match self.inner {}
        }
    }

    /// Seals one batch synchronously, step by step, and says how long each step took.
    pub fn phases(
        &mut self,
        key: &Key128,
        nonces: &[[u8; NONCE_LEN]],
        aads: &[&[u8]],
        packets: &mut [&mut [u8]],
    ) -> Result<Phases, GpuError> {
        #[cfg(feature = "cuda")]
        {
            self.inner.phases(key, nonces, aads, packets)
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (key, nonces, aads, packets);
            match self.inner {}
        }
    }

    /// GHASH on the GPU (`true`, the default) or on the CPU over the device's ciphertext.
    pub fn set_gpu_ghash(&mut self, on: bool) {
        #[cfg(feature = "cuda")]
        {
            self.inner.set_gpu_ghash(on)
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = on;
            match self.inner {}
        }
    }

    /// How batches are sealed (see [`Strategy`]; [`Strategy::Streams`] by default).
    pub fn set_strategy(&mut self, strategy: Strategy) {
        #[cfg(feature = "cuda")]
        {
            self.inner.set_strategy(strategy)
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = strategy;
            match self.inner {}
        }
    }

    /// The strategy batches are sealed with.
    pub fn strategy(&self) -> Strategy {
        #[cfg(feature = "cuda")]
        {
            self.inner.strategy()
        }
        #[cfg(not(feature = "cuda"))]
        {
            match self.inner {}
        }
    }

    /// Whether GHASH runs on the GPU.
    pub fn gpu_ghash(&self) -> bool {
        #[cfg(feature = "cuda")]
        {
            self.inner.gpu_ghash()
        }
        #[cfg(not(feature = "cuda"))]
        {
            match self.inner {}
        }
    }

    /// The device's name as the driver reports it.
    pub fn name(&self) -> &str {
        #[cfg(feature = "cuda")]
        {
            self.inner.name()
        }
        #[cfg(not(feature = "cuda"))]
        {
            match self.inner {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Strategy;

    #[test]
    fn strategies_by_name_and_what_each_changes() {
        for s in Strategy::ALL {
            assert_eq!(Strategy::parse(s.name()), Some(s));
        }
        assert_eq!(Strategy::parse("fast"), None);
        assert_eq!(Strategy::default(), Strategy::Streams);
        let pairs: Vec<(bool, bool)> = Strategy::ALL
            .iter()
            .map(|s| (s.block_per_packet(), s.streams()))
            .collect();
        // The four combinations, each once: the paper's three and the stream-less one.
        assert_eq!(
            pairs,
            [(false, false), (false, true), (true, false), (true, true)]
        );
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn without_the_feature_there_is_no_device_and_a_reason() {
        match super::open().unwrap() {
            super::Availability::Absent(why) => assert!(why.contains("cuda"), "{why}"),
            super::Availability::Ready(_) => panic!("a device without the cuda feature"),
        }
        assert!(super::open_default().unwrap().is_none());
    }
}
