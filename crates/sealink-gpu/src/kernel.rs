//! The CUDA C source compiled at run time by NVRTC.
//!
//! [`AES_CORE`] is plain C (functions marked `DEVFN`): the S-box computed from its definition
//! (inverse in GF(2^8), then the affine map, so no 256-byte table is typed in by hand), the
//! AES-128 key schedule and block encryption (FIPS 197) both byte by byte and with a 32-bit
//! T-table (the form the kernel runs), and multiplication in GCM's GF(2^128) (SP 800-38D,
//! algorithm 1). The same text is compiled by the host's C compiler in tests ([`tests`]) and
//! checked against aws-lc-rs and RustCrypto's `ghash`, so the cipher and the hash are
//! verified even on machines without a GPU.
//!
//! [`KERNELS`] are the device entry points:
//! - `aes128_setup` (one block, once per key): S-box, T-table and round keys into a
//!   [`TABLE_WORDS`]-word table;
//! - `ghash_powers` (once per key): `H^1 .. H^n` for the GHASH of a packet in parallel;
//! - `gcm_seal`: one thread block per packet, [`THREADS_PER_PACKET`] threads each taking
//!   every `THREADS_PER_PACKET`-th AES block of the packet (block `nblocks` is `E_K(J0)`, the
//!   tag mask). With `gpu_ghash`, the same threads then hash: block `j` of the `m` blocks
//!   `AAD || C || lengths` contributes `B_j * H^(m-j)` (GHASH's Horner sum written out), the
//!   block's threads XOR their sums together, and the tag is written. Without it the mask is
//!   written and the host computes GHASH.

/// Threads per packet (the block size of `gcm_seal`): a 1400-byte packet has 88 AES blocks
/// plus the tag mask, so 128 threads cover it in one pass.
pub const THREADS_PER_PACKET: u32 = 128;
/// Threads per block of the naive kernel `gcm_ctr_spread`: one warp, one AES block per thread,
/// so a 1400-byte packet (89 AES blocks with the tag mask) spans three blocks.
pub const SPREAD_THREADS: u32 = 32;

/// Blocks per packet of `gcm_ctr_spread` for a batch of packets of lengths `lens`: enough for
/// the longest packet's AES blocks plus its tag mask, one per thread (at least 1).
pub fn spread_blocks_per_packet(lens: impl IntoIterator<Item = usize>) -> u32 {
    let most = lens
        .into_iter()
        .map(|l| l.div_ceil(16) + 1)
        .max()
        .unwrap_or(1);
    most.div_ceil(SPREAD_THREADS as usize).max(1) as u32
}
/// `u32`s of the per-key table: T-table (256), S-box (64 words of 4 bytes), round keys (44).
pub const TABLE_WORDS: usize = 256 + 64 + 44;

/// AES-128 in portable C (see the module documentation).
pub const AES_CORE: &str = r#"
#ifndef DEVFN
#define DEVFN __device__ __forceinline__
#endif
typedef unsigned char u8;
typedef unsigned int u32;

/* Multiplication by x in GF(2^8) modulo x^8 + x^4 + x^3 + x + 1. */
DEVFN u8 aes_xt(u8 x) { return (u8)((x << 1) ^ ((x >> 7) * 0x1b)); }

DEVFN u8 aes_gmul(u8 a, u8 b) {
    u8 p = 0;
    for (int i = 0; i < 8; i++) {
        if (b & 1) p ^= a;
        a = aes_xt(a);
        b >>= 1;
    }
    return p;
}

DEVFN u8 aes_rotl8(u8 x, int n) { return (u8)((x << n) | (x >> (8 - n))); }

/* S-box entry: multiplicative inverse (x^254; 0 maps to 0), then the affine map. */
DEVFN u8 aes_sbox_entry(u8 x) {
    u8 inv = 1, base = x;
    for (int e = 254; e > 0; e >>= 1) {
        if (e & 1) inv = aes_gmul(inv, base);
        base = aes_gmul(base, base);
    }
    if (x == 0) inv = 0;
    return (u8)(inv ^ aes_rotl8(inv, 1) ^ aes_rotl8(inv, 2) ^ aes_rotl8(inv, 3) ^ aes_rotl8(inv, 4) ^ 0x63);
}

/* Key schedule: 11 round keys, 176 bytes. */
DEVFN void aes128_expand(const u8 *sbox, const u8 *key, u8 *rk) {
    for (int i = 0; i < 16; i++) rk[i] = key[i];
    u8 rcon = 1;
    for (int i = 16; i < 176; i += 4) {
        u8 t0 = rk[i - 4], t1 = rk[i - 3], t2 = rk[i - 2], t3 = rk[i - 1];
        if (i % 16 == 0) {
            u8 tmp = t0;
            t0 = (u8)(sbox[t1] ^ rcon);
            t1 = sbox[t2];
            t2 = sbox[t3];
            t3 = sbox[tmp];
            rcon = aes_xt(rcon);
        }
        rk[i] = rk[i - 16] ^ t0;
        rk[i + 1] = rk[i - 15] ^ t1;
        rk[i + 2] = rk[i - 14] ^ t2;
        rk[i + 3] = rk[i - 13] ^ t3;
    }
}

/* One block; the state is column-major (byte 4c + r is row r of column c). */
DEVFN void aes128_encrypt(const u8 *sbox, const u8 *rk, const u8 *in, u8 *out) {
    u8 s[16], t[16];
    for (int i = 0; i < 16; i++) s[i] = in[i] ^ rk[i];
    for (int r = 1; r <= 10; r++) {
        /* SubBytes and ShiftRows: row r moves left by r columns. */
        for (int c = 0; c < 4; c++)
            for (int row = 0; row < 4; row++)
                t[4 * c + row] = sbox[s[4 * ((c + row) & 3) + row]];
        if (r < 10) {
            for (int c = 0; c < 4; c++) {
                u8 a0 = t[4 * c], a1 = t[4 * c + 1], a2 = t[4 * c + 2], a3 = t[4 * c + 3];
                u8 all = a0 ^ a1 ^ a2 ^ a3;
                s[4 * c] = a0 ^ all ^ aes_xt(a0 ^ a1);
                s[4 * c + 1] = a1 ^ all ^ aes_xt(a1 ^ a2);
                s[4 * c + 2] = a2 ^ all ^ aes_xt(a2 ^ a3);
                s[4 * c + 3] = a3 ^ all ^ aes_xt(a3 ^ a0);
            }
        } else {
            for (int i = 0; i < 16; i++) s[i] = t[i];
        }
        for (int i = 0; i < 16; i++) s[i] ^= rk[16 * r + i];
    }
    for (int i = 0; i < 16; i++) out[i] = s[i];
}

DEVFN u32 aes_rotl32(u32 x, int n) { return (x << n) | (x >> (32 - n)); }

/* T-table entry for S-box output s: the MixColumns column (2s, s, s, 3s) of row 0, rows in
   the bytes of a little-endian word; row r's table is this word rotated left by 8r. */
DEVFN u32 aes_t0_entry(u8 s) {
    u8 s2 = aes_xt(s);
    return (u32)s2 | ((u32)s << 8) | ((u32)s << 16) | ((u32)(u8)(s2 ^ s) << 24);
}

/* Round keys as little-endian column words (byte r of word 4i + c is row r, column c). */
DEVFN void aes128_round_words(const u8 *rk, u32 *rkw) {
    for (int i = 0; i < 44; i++)
        rkw[i] = (u32)rk[4 * i] | ((u32)rk[4 * i + 1] << 8) | ((u32)rk[4 * i + 2] << 16) | ((u32)rk[4 * i + 3] << 24);
}

#define AES_B(w, r) (((w) >> (8 * (r))) & 0xff)
/* One block with the T-table; in and out are the state's columns as little-endian words. */
DEVFN void aes128_encrypt_t(const u32 *t0, const u8 *sbox, const u32 *rkw, const u32 *in, u32 *out) {
    u32 s0 = in[0] ^ rkw[0], s1 = in[1] ^ rkw[1], s2 = in[2] ^ rkw[2], s3 = in[3] ^ rkw[3];
    for (int r = 1; r < 10; r++) {
        u32 n0 = t0[AES_B(s0, 0)] ^ aes_rotl32(t0[AES_B(s1, 1)], 8) ^ aes_rotl32(t0[AES_B(s2, 2)], 16) ^ aes_rotl32(t0[AES_B(s3, 3)], 24) ^ rkw[4 * r];
        u32 n1 = t0[AES_B(s1, 0)] ^ aes_rotl32(t0[AES_B(s2, 1)], 8) ^ aes_rotl32(t0[AES_B(s3, 2)], 16) ^ aes_rotl32(t0[AES_B(s0, 3)], 24) ^ rkw[4 * r + 1];
        u32 n2 = t0[AES_B(s2, 0)] ^ aes_rotl32(t0[AES_B(s3, 1)], 8) ^ aes_rotl32(t0[AES_B(s0, 2)], 16) ^ aes_rotl32(t0[AES_B(s1, 3)], 24) ^ rkw[4 * r + 2];
        u32 n3 = t0[AES_B(s3, 0)] ^ aes_rotl32(t0[AES_B(s0, 1)], 8) ^ aes_rotl32(t0[AES_B(s1, 2)], 16) ^ aes_rotl32(t0[AES_B(s2, 3)], 24) ^ rkw[4 * r + 3];
        s0 = n0; s1 = n1; s2 = n2; s3 = n3;
    }
#define AES_LAST(a, b, c, d) ((u32)sbox[AES_B(a, 0)] | ((u32)sbox[AES_B(b, 1)] << 8) | ((u32)sbox[AES_B(c, 2)] << 16) | ((u32)sbox[AES_B(d, 3)] << 24))
    out[0] = AES_LAST(s0, s1, s2, s3) ^ rkw[40];
    out[1] = AES_LAST(s1, s2, s3, s0) ^ rkw[41];
    out[2] = AES_LAST(s2, s3, s0, s1) ^ rkw[42];
    out[3] = AES_LAST(s3, s0, s1, s2) ^ rkw[43];
}

/* z = x * y in GCM's GF(2^128) (SP 800-38D algorithm 1, branch-free); blocks as four
   big-endian words, bit 0 of the block being the top bit of word 0. */
DEVFN void gf128_mul(const u32 *x, const u32 *y, u32 *z) {
    u32 z0 = 0, z1 = 0, z2 = 0, z3 = 0, v0 = y[0], v1 = y[1], v2 = y[2], v3 = y[3];
    for (int w = 0; w < 4; w++) {
        u32 xw = x[w];
        for (int b = 31; b >= 0; b--) {
            u32 m = 0u - ((xw >> b) & 1u);
            z0 ^= v0 & m; z1 ^= v1 & m; z2 ^= v2 & m; z3 ^= v3 & m;
            u32 lsb = 0u - (v3 & 1u);
            v3 = (v3 >> 1) | (v2 << 31);
            v2 = (v2 >> 1) | (v1 << 31);
            v1 = (v1 >> 1) | (v0 << 31);
            v0 = (v0 >> 1) ^ (0xE1000000u & lsb);
        }
    }
    z[0] = z0; z[1] = z1; z[2] = z2; z[3] = z3;
}

/* h^e (e >= 1) by square and multiply. */
DEVFN void gf128_pow(const u32 *h, u32 e, u32 *out) {
    u32 acc[4] = {0, 0, 0, 0}, base[4] = {h[0], h[1], h[2], h[3]}, t[4];
    int have = 0;
    while (e) {
        if (e & 1) {
            if (have) { gf128_mul(acc, base, t); acc[0] = t[0]; acc[1] = t[1]; acc[2] = t[2]; acc[3] = t[3]; }
            else { acc[0] = base[0]; acc[1] = base[1]; acc[2] = base[2]; acc[3] = base[3]; have = 1; }
        }
        e >>= 1;
        if (e) { gf128_mul(base, base, t); base[0] = t[0]; base[1] = t[1]; base[2] = t[2]; base[3] = t[3]; }
    }
    out[0] = acc[0]; out[1] = acc[1]; out[2] = acc[2]; out[3] = acc[3];
}
"#;

/// The device entry points (see the module documentation).
pub const KERNELS: &str = r#"
#define TABLE_WORDS (256 + 64 + 44)
#define META_WORDS 8

DEVFN u32 bswap32(u32 x) { return __byte_perm(x, 0, 0x0123); }

/* One block of 256 threads: T-table, S-box and round keys of `key` into `table`. */
extern "C" __global__ void aes128_setup(const u8 *key, u32 *table) {
    __shared__ u8 sbox[256];
    __shared__ u8 rk[176];
    u32 t = threadIdx.x;
    if (t < 256) sbox[t] = aes_sbox_entry((u8)t);
    __syncthreads();
    if (t < 256) table[t] = aes_t0_entry(sbox[t]);
    if (t < 64) table[256 + t] = (u32)sbox[4 * t] | ((u32)sbox[4 * t + 1] << 8) | ((u32)sbox[4 * t + 2] << 16) | ((u32)sbox[4 * t + 3] << 24);
    if (t == 0) {
        aes128_expand(sbox, key, rk);
        aes128_round_words(rk, table + 320);
    }
}

/* hpow[4i .. 4i+4] = H^(i+1) for i < count; h as four big-endian words. */
extern "C" __global__ void ghash_powers(const u32 *h, u32 *hpow, u32 count) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    gf128_pow(h, i + 1, hpow + 4 * i);
}

/* The tail of a block of `valid` (< 16) bytes kept, the rest zeroed; little-endian words. */
DEVFN void keep_bytes(u32 *w, u32 valid) {
    for (int k = 0; k < 4; k++) {
        u32 lo = 4 * k;
        if (valid <= lo) w[k] = 0;
        else if (valid < lo + 4) w[k] &= (1u << (8 * (valid - lo))) - 1u;
    }
}

/* GHASH of packet record m's AAD and ciphertext (in data) by the block's threads, XORed with
   mask (E_K(J0), four little-endian words) into the tag slot. Block j of the m blocks
   AAD || C || lengths contributes B_j * H^(m-j); the threads' sums are XORed together through
   warp shuffles and part (shared, one entry per warp). Every thread of the block calls it. */
DEVFN void ghash_tag(const u32 *hpow, const u8 *data, const u32 *m, u32 *slot, const u32 *mask, u32 (*part)[4]) {
    u32 off = m[0], len = m[1], aoff = m[5], alen = m[6];
    u32 nb = (len + 15) / 16;
    u32 na = (alen + 15) / 16, total = na + nb + 1;
    u32 acc[4] = {0, 0, 0, 0};
    for (u32 j = threadIdx.x; j < total; j += blockDim.x) {
        u32 blk[4], prod[4];
        if (j < total - 1) {
            const uint4 *s = (const uint4 *)(data + (j < na ? aoff + 16 * j : off + 16 * (j - na)));
            uint4 v = *s;
            blk[0] = bswap32(v.x); blk[1] = bswap32(v.y); blk[2] = bswap32(v.z); blk[3] = bswap32(v.w);
        } else {
            blk[0] = alen >> 29; blk[1] = alen << 3; blk[2] = len >> 29; blk[3] = len << 3;
        }
        gf128_mul(blk, hpow + 4 * (total - j - 1), prod);
        acc[0] ^= prod[0]; acc[1] ^= prod[1]; acc[2] ^= prod[2]; acc[3] ^= prod[3];
    }
    for (int o = 16; o > 0; o >>= 1)
        for (int k = 0; k < 4; k++) acc[k] ^= __shfl_xor_sync(0xffffffffu, acc[k], o);
    u32 warp = threadIdx.x / 32, nwarps = (blockDim.x + 31) / 32;
    if ((threadIdx.x & 31) == 0)
        for (int k = 0; k < 4; k++) part[warp][k] = acc[k];
    __syncthreads();
    if (threadIdx.x < 4) {
        u32 x = 0;
        for (u32 w = 0; w < nwarps; w++) x ^= part[w][threadIdx.x];
        slot[threadIdx.x] = bswap32(x) ^ mask[threadIdx.x];
    }
}

/* Where packet p of an npkt-packet frame lies (see gcm_seal): its metadata, its tag slot, the
   frame's data area, and its payload's offset there, length and count of 16-byte blocks. */
typedef struct Pkt { const u32 *m; u32 *slot; u8 *data; u32 off, len, nb; } Pkt;
DEVFN Pkt pkt_at(u8 *buf, u32 npkt, u32 p) {
    Pkt k;
    k.m = (const u32 *)buf + META_WORDS * p;
    k.slot = (u32 *)(buf + META_WORDS * 4 * npkt + 16 * p);
    k.data = buf + (META_WORDS * 4 + 16) * npkt;
    k.off = k.m[0];
    k.len = k.m[1];
    k.nb = (k.len + 15) / 16;
    return k;
}

/* Loads the AES tables into the block's shared memory, every thread a share of them. */
DEVFN void load_tables(const u32 *table, u32 *t0, u32 *sbw, u32 *rkw) {
    for (u32 i = threadIdx.x; i < TABLE_WORDS; i += blockDim.x) {
        u32 v = table[i];
        if (i < 256) t0[i] = v; else if (i < 320) sbw[i - 256] = v; else rkw[i - 320] = v;
    }
    __syncthreads();
}

/* XORs keystream block ks into block b of the nb-block payload at data (len bytes): the last
   block's bytes past len stay as they are (zero padding). */
DEVFN void xor_block(u8 *data, u32 b, u32 nb, u32 len, u32 ks[4]) {
    if (b == nb - 1 && (len & 15)) keep_bytes(ks, len & 15);
    uint4 *d = (uint4 *)(data + 16 * b);
    uint4 v = *d;
    v.x ^= ks[0]; v.y ^= ks[1]; v.z ^= ks[2]; v.w ^= ks[3];
    *d = v;
}

/* One thread block per packet of the frame `buf`: META_WORDS words of metadata per packet
   (offset, length, nonce as three little-endian words, AAD offset, AAD length, 0), then a
   16-byte tag slot per packet, then the data the offsets point into (16-byte aligned, zero
   padded). The payload is XORed in place with the keystream of nonce || BE32(2 + i), with
   the padding left zero. With gpu_ghash the slot gets the tag, else E_K(nonce || BE32(1)). */
extern "C" __global__ void gcm_seal(const u32 *table, const u32 *hpow, u8 *buf, u32 npkt, u32 gpu_ghash) {
    __shared__ u32 t0[256];
    __shared__ u32 sbw[64];
    __shared__ u32 rkw[44];
    __shared__ u32 mask[4];
    __shared__ u32 part[32][4];
    load_tables(table, t0, sbw, rkw);
    u32 p = blockIdx.x;
    if (p >= npkt) return;
    const u8 *sbox = (const u8 *)sbw;
    Pkt k = pkt_at(buf, npkt, p);
    for (u32 b = threadIdx.x; b <= k.nb; b += blockDim.x) {
        u32 c = (b == k.nb) ? 1u : 2u + b;
        u32 in[4] = {k.m[2], k.m[3], k.m[4], bswap32(c)}, ks[4];
        aes128_encrypt_t(t0, sbox, rkw, in, ks);
        if (b == k.nb) {
            if (gpu_ghash) { mask[0] = ks[0]; mask[1] = ks[1]; mask[2] = ks[2]; mask[3] = ks[3]; }
            else { k.slot[0] = ks[0]; k.slot[1] = ks[1]; k.slot[2] = ks[2]; k.slot[3] = ks[3]; }
        } else {
            xor_block(k.data + k.off, b, k.nb, k.len, ks);
        }
    }
    if (!gpu_ghash) return;
    __syncthreads();
    ghash_tag(hpow, k.data, k.m, k.slot, mask, part);
}

/* The naive strategy's keystream (paper 004's first GPU strategy: a file spread over many
   blocks): each packet spread over bpp blocks of blockDim.x threads, one AES block per thread;
   block b works on packet b / bpp. Every block loads the tables into its shared memory again,
   which is the overhead one block per packet avoids. The slot gets E_K(J0) (the tag mask);
   gcm_ghash turns it into the tag when GHASH runs on the GPU. Grid = npkt * bpp. */
extern "C" __global__ void gcm_ctr_spread(const u32 *table, u8 *buf, u32 npkt, u32 bpp) {
    __shared__ u32 t0[256];
    __shared__ u32 sbw[64];
    __shared__ u32 rkw[44];
    load_tables(table, t0, sbw, rkw);
    u32 p = blockIdx.x / bpp;
    if (p >= npkt) return;
    const u8 *sbox = (const u8 *)sbw;
    Pkt k = pkt_at(buf, npkt, p);
    u32 b = (blockIdx.x % bpp) * blockDim.x + threadIdx.x;
    if (b > k.nb) return;
    u32 c = (b == k.nb) ? 1u : 2u + b;
    u32 in[4] = {k.m[2], k.m[3], k.m[4], bswap32(c)}, ks[4];
    aes128_encrypt_t(t0, sbox, rkw, in, ks);
    if (b == k.nb) {
        k.slot[0] = ks[0]; k.slot[1] = ks[1]; k.slot[2] = ks[2]; k.slot[3] = ks[3];
        return;
    }
    xor_block(k.data + k.off, b, k.nb, k.len, ks);
}

/* GHASH on the GPU after gcm_ctr_spread: one block per packet; the slot holds E_K(J0) and
   gets the tag. */
extern "C" __global__ void gcm_ghash(const u32 *hpow, u8 *buf, u32 npkt) {
    __shared__ u32 part[32][4];
    u32 p = blockIdx.x;
    if (p >= npkt) return;
    const u32 *m = (const u32 *)buf + META_WORDS * p;
    u32 *slot = (u32 *)(buf + META_WORDS * 4 * npkt + 16 * p);
    u8 *data = buf + (META_WORDS * 4 + 16) * npkt;
    ghash_tag(hpow, data, m, slot, slot, part);
}
"#;

/// The whole program handed to NVRTC.
pub fn source() -> String {
    format!("{AES_CORE}\n{KERNELS}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcm::CpuCtr;
    use std::fmt::Write as _;
    use std::process::Command;

    /// Compiles [`AES_CORE`] followed by `main_src` with the host's C compiler, runs it and
    /// returns its output; `None` (the caller skips, saying so) without `cc`.
    fn run_c(test: &str, main_src: &str) -> Option<String> {
        let exe = crate::host_cc::compile(
            test,
            &format!("#include <stdio.h>\n#define DEVFN static\n{AES_CORE}{main_src}"),
            &[],
        );
        let Some(exe) = exe else {
            eprintln!("SKIP {test}: no C compiler `cc` on PATH");
            return None;
        };
        let run = Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(exe.parent().unwrap());
        assert!(run.status.success());
        Some(String::from_utf8(run.stdout).unwrap())
    }

    fn xorshift(seed: u64) -> impl FnMut() -> u8 {
        let mut x = seed;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        }
    }

    fn c_array(b: &[u8]) -> String {
        b.iter()
            .map(|v| format!("{v}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|v| format!("{v:02x}")).collect()
    }

    /// [`AES_CORE`]'s block encryption, byte by byte and with the T-table the kernel uses,
    /// against aws-lc-rs for random keys and blocks and FIPS 197 C.1. Skips without `cc`.
    #[test]
    fn aes_core_matches_aws_lc_on_the_host() {
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
        let mut cases: Vec<([u8; 16], [u8; 16])> = (0..8)
            .map(|_| {
                (
                    std::array::from_fn(|_| next()),
                    std::array::from_fn(|_| next()),
                )
            })
            .collect();
        // FIPS 197 appendix C.1 as the first case.
        cases[0] = (
            std::array::from_fn(|i| i as u8),
            std::array::from_fn(|i| (i as u8) * 0x11),
        );
        let mut c = format!("static const u8 KEYS[{}][16] = {{\n", cases.len());
        for (k, _) in &cases {
            let _ = writeln!(c, "{{{}}},", c_array(k));
        }
        let _ = writeln!(c, "}};\nstatic const u8 BLOCKS[{}][16] = {{", cases.len());
        for (_, b) in &cases {
            let _ = writeln!(c, "{{{}}},", c_array(b));
        }
        let _ = writeln!(
            c,
            "}};\nint main(void) {{ u8 sbox[256], rk[176], out[16]; u32 t0[256], rkw[44], in[4], ow[4];\n\
             for (int i = 0; i < 256; i++) sbox[i] = aes_sbox_entry((u8)i);\n\
             for (int i = 0; i < 256; i++) t0[i] = aes_t0_entry(sbox[i]);\n\
             for (int n = 0; n < {}; n++) {{ aes128_expand(sbox, KEYS[n], rk);\n\
             aes128_encrypt(sbox, rk, BLOCKS[n], out);\n\
             for (int i = 0; i < 16; i++) printf(\"%02x\", out[i]);\n\
             printf(\" \"); aes128_round_words(rk, rkw);\n\
             for (int k = 0; k < 4; k++) in[k] = (u32)BLOCKS[n][4*k] | ((u32)BLOCKS[n][4*k+1] << 8) | ((u32)BLOCKS[n][4*k+2] << 16) | ((u32)BLOCKS[n][4*k+3] << 24);\n\
             aes128_encrypt_t(t0, sbox, rkw, in, ow);\n\
             for (int i = 0; i < 16; i++) printf(\"%02x\", (ow[i / 4] >> (8 * (i % 4))) & 0xff);\n\
             printf(\"\\n\"); }}\n\
             return 0; }}",
            cases.len()
        );
        let Some(text) = run_c("aes_core_matches_aws_lc_on_the_host", &c) else {
            return;
        };
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), cases.len());
        assert_eq!(
            lines[0], "69c4e0d86a7b0430d8cdb78070b4c55a 69c4e0d86a7b0430d8cdb78070b4c55a",
            "FIPS 197 C.1, byte-wise and T-table"
        );
        for ((key, block), line) in cases.iter().zip(lines) {
            let want = hex(&CpuCtr::new(key).unwrap().encrypt_block(*block).unwrap());
            assert_eq!(line, format!("{want} {want}"));
        }
    }

    /// [`AES_CORE`]'s GF(2^128) multiplication, as GHASH's Horner loop and as the kernel's sum
    /// of `B_j * H^(m-j)` with `gf128_pow`, against RustCrypto's `ghash` for random subkeys
    /// and messages of 1 to 40 blocks. Skips without `cc`.
    #[test]
    fn gf128_matches_ghash_on_the_host() {
        use ghash::GHash;
        use ghash::universal_hash::{KeyInit, UniversalHash};
        let mut next = xorshift(0x0123_4567_89AB_CDEF);
        let cases: Vec<([u8; 16], Vec<u8>)> = (0..12)
            .map(|i| {
                let h: [u8; 16] = std::array::from_fn(|_| next());
                let n = [1, 2, 3, 5, 8, 13, 17, 31, 32, 33, 39, 40][i];
                (h, (0..16 * n).map(|_| next()).collect())
            })
            .collect();
        let mut c = String::from(
            "static u32 be(const u8 *b) { return ((u32)b[0] << 24) | ((u32)b[1] << 16) | ((u32)b[2] << 8) | b[3]; }\n\
             static void show(const u32 *x) { for (int k = 0; k < 4; k++) printf(\"%08x\", x[k]); }\n\
             static void one(const u8 *hb, const u8 *msg, int n) {\n\
               u32 h[4], x[4] = {0, 0, 0, 0}, s[4] = {0, 0, 0, 0}, b[4], t[4], p[4];\n\
               for (int k = 0; k < 4; k++) h[k] = be(hb + 4 * k);\n\
               for (int j = 0; j < n; j++) {\n\
                 for (int k = 0; k < 4; k++) { b[k] = be(msg + 16 * j + 4 * k); x[k] ^= b[k]; }\n\
                 gf128_mul(x, h, t); for (int k = 0; k < 4; k++) x[k] = t[k];\n\
                 gf128_pow(h, (u32)(n - j), p); gf128_mul(b, p, t); for (int k = 0; k < 4; k++) s[k] ^= t[k];\n\
               }\n\
               show(x); printf(\" \"); show(s); printf(\"\\n\");\n\
             }\n",
        );
        for (i, (h, m)) in cases.iter().enumerate() {
            let _ = writeln!(
                c,
                "static const u8 H{i}[16] = {{{}}}; static const u8 M{i}[{}] = {{{}}};",
                c_array(h),
                m.len(),
                c_array(m)
            );
        }
        c.push_str("int main(void) {\n");
        for (i, (_, m)) in cases.iter().enumerate() {
            let _ = writeln!(c, "one(H{i}, M{i}, {});", m.len() / 16);
        }
        c.push_str("return 0; }\n");
        let Some(text) = run_c("gf128_matches_ghash_on_the_host", &c) else {
            return;
        };
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), cases.len());
        for ((h, m), line) in cases.iter().zip(lines) {
            let mut g = GHash::new(h.into());
            g.update_padded(m);
            let want = hex(&g.finalize());
            assert_eq!(line, format!("{want} {want}"), "{} blocks", m.len() / 16);
        }
    }
}
