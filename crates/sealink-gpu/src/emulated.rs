//! The CUDA kernels run on the host: [`kernel::source`](crate::kernel::source) compiled by the
//! host's C compiler under a small shim that gives every GPU thread of a block its own POSIX
//! thread (`threadIdx`/`blockIdx` thread-local, `__shared__` as statics, `__syncthreads` and
//! `__shfl_xor_sync` through a barrier). Frames are built and finished by the same host code
//! the CUDA backend uses ([`Packed::frame`], [`Packed::fill_frame`], [`finish_frame`]), so the
//! whole device path except the driver calls is checked against aws-lc-rs on machines
//! without a GPU. Skips, saying so, without `cc`.

use std::path::{Path, PathBuf};
use std::process::Command;

use aws_lc_rs::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use proptest::prelude::*;

use crate::gcm::{CpuCtr, finish_frame};
use crate::kernel::{SPREAD_THREADS, THREADS_PER_PACKET, source, spread_blocks_per_packet};
use crate::layout::Packed;

/// The CUDA built-ins the kernels use, for a C11 compiler with POSIX threads.
const SHIM: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef struct { unsigned int x, y, z, w; } uint4;
typedef struct { unsigned int x, y, z; } dim3;
static _Thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim;
static pthread_barrier_t bar;
static unsigned int shfl_buf[1024];
#define __shared__ static
#define __global__
#define DEVFN static inline
static void __syncthreads(void) { pthread_barrier_wait(&bar); }
static unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    (void)y;
    if (s != 0x0123) abort();
    return (x >> 24) | ((x >> 8) & 0xff00u) | ((x << 8) & 0xff0000u) | (x << 24);
}
static unsigned int __shfl_xor_sync(unsigned int mask, unsigned int v, int o) {
    (void)mask;
    shfl_buf[threadIdx.x] = v;
    pthread_barrier_wait(&bar);
    unsigned int r = shfl_buf[threadIdx.x ^ (unsigned int)o];
    pthread_barrier_wait(&bar);
    return r;
}
"#;

/// The launcher: `emu KEYHEX HHEX NPKT GHASH COUNT IN OUT BPP` runs aes128_setup, ghash_powers
/// (COUNT powers), then over the frame in file IN either gcm_seal (BPP 0: one block per packet)
/// or gcm_ctr_spread over BPP blocks per packet followed, with GHASH, by gcm_ghash (the naive
/// kernels), and writes the frame to OUT.
const MAIN: &str = r#"
static u8 g_key[16]; static u32 g_h[4], g_table[TABLE_WORDS], *g_hpow; static u8 *g_buf;
static u32 g_npkt, g_flag, g_count, g_bpp;
static void (*g_fn)(void);
static unsigned int g_block;
static void k_setup(void) { aes128_setup(g_key, g_table); }
static void k_powers(void) { ghash_powers(g_h, g_hpow, g_count); }
static void k_seal(void) { gcm_seal(g_table, g_hpow, g_buf, g_npkt, g_flag); }
static void k_spread(void) { gcm_ctr_spread(g_table, g_buf, g_npkt, g_bpp); }
static void k_ghash(void) { gcm_ghash(g_hpow, g_buf, g_npkt); }
static void *thr(void *a) { threadIdx.x = (unsigned int)(size_t)a; blockIdx.x = g_block; g_fn(); return 0; }
static void launch(void (*f)(void), unsigned int grid, unsigned int block) {
    pthread_t t[1024];
    g_fn = f; blockDim.x = block;
    for (unsigned int b = 0; b < grid; b++) {
        g_block = b;
        pthread_barrier_init(&bar, 0, block);
        for (unsigned int i = 0; i < block; i++)
            if (pthread_create(&t[i], 0, thr, (void *)(size_t)i)) abort();
        for (unsigned int i = 0; i < block; i++) pthread_join(t[i], 0);
        pthread_barrier_destroy(&bar);
    }
}
static unsigned int hexv(char c) { return c <= '9' ? (unsigned int)(c - '0') : (unsigned int)(c - 'a' + 10); }
int main(int argc, char **argv) {
    if (argc != 9) return 2;
    u8 hb[16];
    for (int i = 0; i < 16; i++) {
        g_key[i] = (u8)(hexv(argv[1][2 * i]) << 4 | hexv(argv[1][2 * i + 1]));
        hb[i] = (u8)(hexv(argv[2][2 * i]) << 4 | hexv(argv[2][2 * i + 1]));
    }
    for (int k = 0; k < 4; k++) g_h[k] = ((u32)hb[4 * k] << 24) | ((u32)hb[4 * k + 1] << 16) | ((u32)hb[4 * k + 2] << 8) | hb[4 * k + 3];
    g_npkt = (u32)atoi(argv[3]); g_flag = (u32)atoi(argv[4]); g_count = (u32)atoi(argv[5]);
    g_bpp = (u32)atoi(argv[8]);
    FILE *f = fopen(argv[6], "rb"); if (!f) return 3;
    fseek(f, 0, SEEK_END); long len = ftell(f); fseek(f, 0, SEEK_SET);
    g_buf = malloc((size_t)len + 16);
    if (fread(g_buf, 1, (size_t)len, f) != (size_t)len) return 4;
    fclose(f);
    g_hpow = malloc(16 * (size_t)g_count);
    launch(k_setup, 1, 256);
    launch(k_powers, (g_count + 63) / 64, 64);
    if (g_bpp == 0) {
        launch(k_seal, g_npkt, THREADS);
    } else {
        launch(k_spread, g_npkt * g_bpp, SPREAD);
        if (g_flag) launch(k_ghash, g_npkt, THREADS);
    }
    f = fopen(argv[7], "wb"); if (!f) return 5;
    fwrite(g_buf, 1, (size_t)len, f); fclose(f);
    return 0;
}
"#;

/// Builds the emulator once per test process; `None` without `cc`.
fn emulator() -> Option<PathBuf> {
    static EXE: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let kernels = source().replace("extern \"C\" __global__", "__global__");
        let text = format!(
            "{SHIM}\n{kernels}\n#define THREADS {THREADS_PER_PACKET}\n#define SPREAD {SPREAD_THREADS}\n{MAIN}"
        );
        crate::host_cc::compile("emu", &text, &["-pthread"])
    })
    .clone()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|v| format!("{v:02x}")).collect()
}

/// Seals `items` through the emulated kernels, GHASH on the "GPU" or not, with one block per
/// packet (`gcm_seal`) or spread over many (`spread`: the naive strategy's `gcm_ctr_spread`
/// then `gcm_ghash`); the tags, with the packets sealed in place.
fn emulated_seal(
    exe: &Path,
    key: &[u8; 16],
    items: &mut [([u8; 12], Vec<u8>, Vec<u8>)],
    gpu_ghash: bool,
    spread: bool,
) -> Vec<[u8; 16]> {
    let nonces: Vec<[u8; 12]> = items.iter().map(|i| i.0).collect();
    let aads_owned: Vec<Vec<u8>> = items.iter().map(|i| i.1.clone()).collect();
    let aads: Vec<&[u8]> = aads_owned.iter().map(|a| &a[..]).collect();
    let mut packets: Vec<&mut [u8]> = items.iter_mut().map(|i| &mut i.2[..]).collect();
    let mut packed = Packed::default();
    let frame = packed.frame(&nonces, &aads, &packets).unwrap();
    // Poison: whatever the kernel does not write shows up as a wrong tag or byte.
    let mut buf = vec![0xA5u8; frame.len()];
    packed.fill_frame(&frame, &aads, &packets, &mut buf);
    let count = aads
        .iter()
        .zip(&packets)
        .map(|(a, p)| a.len().div_ceil(16) + p.len().div_ceil(16) + 1)
        .max()
        .unwrap_or(1);
    let h = CpuCtr::new(key).unwrap().hash_subkey().unwrap();
    let dir = exe.parent().unwrap();
    let tag = format!("{:?}-{}", std::thread::current().id(), rand_suffix());
    let (inp, outp) = (
        dir.join(format!("in-{tag}")),
        dir.join(format!("out-{tag}")),
    );
    std::fs::write(&inp, &buf).unwrap();
    let run = Command::new(exe)
        .arg(hex(key))
        .arg(hex(&h))
        .arg(frame.npkt.to_string())
        .arg(u8::from(gpu_ghash).to_string())
        .arg(count.to_string())
        .arg(&inp)
        .arg(&outp)
        .arg(if spread {
            spread_blocks_per_packet(packets.iter().map(|p| p.len())).to_string()
        } else {
            "0".into()
        })
        .output()
        .unwrap();
    assert!(run.status.success(), "emulator: {run:?}");
    let out = std::fs::read(&outp).unwrap();
    let _ = (std::fs::remove_file(&inp), std::fs::remove_file(&outp));
    finish_frame(&h, &packed, &frame, &out, gpu_ghash, &aads, &mut packets).unwrap()
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn aws_seal(key: &[u8; 16], nonce: [u8; 12], aad: &[u8], data: &mut [u8]) -> [u8; 16] {
    let k = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, key).unwrap());
    let t = k
        .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), data)
        .unwrap();
    t.as_ref().try_into().unwrap()
}

/// Asserts the emulated kernels seal `items` as aws-lc-rs does, with GHASH on either side and
/// with both kernels (one block per packet, and the naive strategy's spread).
fn check(exe: &Path, key: &[u8; 16], items: &[([u8; 12], Vec<u8>, Vec<u8>)]) {
    for (gpu_ghash, spread) in [(true, false), (false, false), (true, true), (false, true)] {
        let mut ours = items.to_vec();
        let tags = emulated_seal(exe, key, &mut ours, gpu_ghash, spread);
        for (k, (it, o)) in items.iter().zip(&ours).enumerate() {
            let mut want = it.2.clone();
            let t = aws_seal(key, it.0, &it.1, &mut want);
            assert_eq!(
                o.2,
                want,
                "ciphertext of packet {k} ({} bytes), spread: {spread}",
                want.len()
            );
            assert_eq!(
                tags[k], t,
                "tag of packet {k}, GHASH on the GPU: {gpu_ghash}, spread: {spread}"
            );
        }
    }
}

#[test]
fn emulated_kernels_seal_like_aws_lc() {
    let Some(exe) = emulator() else {
        eprintln!("SKIP emulated_kernels_seal_like_aws_lc: no C compiler `cc` on PATH");
        return;
    };
    // Payloads around block and thread-count boundaries (128 threads cover 2048 bytes), AADs
    // empty, partial and whole GHASH blocks.
    let sizes = [0usize, 1, 15, 16, 17, 100, 1400, 2047, 2048, 2049, 4113];
    let items: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut nonce = [0u8; 12];
            nonce[4..].copy_from_slice(&(i as u64 * 0x0101_0101).to_le_bytes());
            let aad = (0..[0, 1, 15, 16, 17, 100][i % 6])
                .map(|b| (b * 3 + i) as u8)
                .collect();
            let data = (0..n).map(|b| (b * 7 + i) as u8).collect();
            (nonce, aad, data)
        })
        .collect();
    check(&exe, &[0x2Bu8; 16], &items);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn emulated_kernels_match_aws_lc_on_random_batches(
        key in any::<[u8; 16]>(),
        items in proptest::collection::vec(
            (any::<[u8; 12]>(), proptest::collection::vec(any::<u8>(), 0..40),
             proptest::collection::vec(any::<u8>(), 0..3000)), 1..6),
    ) {
        let Some(exe) = emulator() else {
            eprintln!("SKIP emulated_kernels_match_aws_lc_on_random_batches: no `cc`");
            return Ok(());
        };
        check(&exe, &key, &items);
    }
}

/// Paper 004's Figure 12 on its own x-axis (`sealink-lab bench gpu --packet-size`): batches of
/// packets of one size each, 4 KB to 128 KB, through both kernels (one block per packet, and
/// the naive strategies' spread over many blocks) with GHASH on either side, byte-identical to
/// aws-lc-rs. The strategies' pipelining (streams or not) does not touch the bytes the kernels
/// write; the CUDA backend runs the same frames through the same kernels.
#[test]
fn emulated_kernels_seal_whole_files_of_4_to_128_kb() {
    let Some(exe) = emulator() else {
        eprintln!("SKIP emulated_kernels_seal_whole_files_of_4_to_128_kb: no `cc` on PATH");
        return;
    };
    for (k, size) in [
        4usize << 10,
        8 << 10,
        16 << 10,
        32 << 10,
        64 << 10,
        128 << 10,
    ]
    .into_iter()
    .enumerate()
    {
        let items: Vec<_> = (0..2)
            .map(|i| {
                let mut nonce = [0u8; 12];
                nonce[..8].copy_from_slice(&((k * 2 + i) as u64 + 0x51).to_le_bytes());
                let aad = vec![(k + i) as u8; 16];
                let data = (0..size).map(|b| (b * 13 + k + i) as u8).collect();
                (nonce, aad, data)
            })
            .collect();
        check(&exe, &[0x3Cu8; 16], &items);
    }
}
