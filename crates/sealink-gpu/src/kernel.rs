//! The CUDA C source compiled at run time by NVRTC.
//!
//! [`AES_CORE`] is plain C (functions marked `DEVFN`): the S-box computed from its definition
//! (inverse in GF(2^8), then the affine map, so no 256-byte table is typed in by hand), the
//! AES-128 key schedule and block encryption (FIPS 197). The same text is compiled by the
//! host's C compiler in a test ([`tests`]) and checked against aws-lc-rs, so the cipher is
//! verified even on machines without a GPU.
//!
//! [`KERNELS`] are the device entry points: `aes128_setup` (one block: S-box and round keys
//! into a 432-byte table, once per key) and `gcm_ctr` (one thread block per packet, a fixed
//! [`THREADS_PER_PACKET`] threads each taking every `THREADS_PER_PACKET`-th AES block of the
//! packet; block `nblocks` is `E_K(J0)`, the tag mask).

/// Threads per packet (the block size of `gcm_ctr`): a 1400-byte packet has 88 AES blocks
/// plus the tag mask, so 128 threads cover it in one pass.
pub const THREADS_PER_PACKET: u32 = 128;
/// Bytes of the per-key table: S-box (256) then round keys (176).
pub const TABLE_LEN: usize = 256 + 176;

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
"#;

/// The device entry points (see the module documentation).
pub const KERNELS: &str = r#"
#define TABLE_LEN (256 + 176)

/* One block of 256 threads: the S-box, then the round keys of `key`, into `table`. */
extern "C" __global__ void aes128_setup(const u8 *key, u8 *table) {
    __shared__ u8 sbox[256];
    u32 t = threadIdx.x;
    if (t < 256) sbox[t] = aes_sbox_entry((u8)t);
    __syncthreads();
    if (t < 256) table[t] = sbox[t];
    if (t == 0) aes128_expand(sbox, key, table + 256);
}

/* One thread block per packet. meta: 5 words per packet (offset, length, nonce as three
   little-endian words). data: the packed batch, XORed in place with the keystream of
   counter blocks nonce || BE32(2 + i); each packet is padded to 16 bytes in the buffer.
   masks: E_K(nonce || BE32(1)) per packet, for the host's tag. */
extern "C" __global__ void gcm_ctr(const u8 *table, const u32 *meta, u8 *data, u8 *masks, u32 npkt) {
    __shared__ u8 sbox[256];
    __shared__ u8 rk[176];
    for (u32 i = threadIdx.x; i < TABLE_LEN; i += blockDim.x) {
        if (i < 256) sbox[i] = table[i]; else rk[i - 256] = table[i];
    }
    __syncthreads();
    u32 p = blockIdx.x;
    if (p >= npkt) return;
    const u32 *m = meta + 5 * p;
    u32 off = m[0], len = m[1];
    u8 ctr[16], ks[16];
    for (int w = 0; w < 3; w++)
        for (int k = 0; k < 4; k++) ctr[4 * w + k] = (u8)(m[2 + w] >> (8 * k));
    u32 nblocks = (len + 15) / 16;
    for (u32 b = threadIdx.x; b <= nblocks; b += blockDim.x) {
        u32 c = (b == nblocks) ? 1u : 2u + b;
        ctr[12] = (u8)(c >> 24); ctr[13] = (u8)(c >> 16); ctr[14] = (u8)(c >> 8); ctr[15] = (u8)c;
        aes128_encrypt(sbox, rk, ctr, ks);
        if (b == nblocks) {
            for (int k = 0; k < 16; k++) masks[16 * p + k] = ks[k];
        } else {
            u8 *d = data + off + 16 * b;
            for (int k = 0; k < 16; k++) d[k] ^= ks[k];
        }
    }
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

    /// Compiles [`AES_CORE`] with the host's C compiler and checks its block encryption
    /// against aws-lc-rs for random keys and blocks. Skips (and says so) without `cc`.
    #[test]
    fn aes_core_matches_aws_lc_on_the_host() {
        if Command::new("cc").arg("--version").output().is_err() {
            eprintln!("SKIP aes_core_matches_aws_lc_on_the_host: no C compiler `cc` on PATH");
            return;
        }
        let mut cases = Vec::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        };
        for _ in 0..8 {
            let key: [u8; 16] = std::array::from_fn(|_| next());
            let block: [u8; 16] = std::array::from_fn(|_| next());
            cases.push((key, block));
        }
        // FIPS 197 appendix C.1 as the first case.
        cases[0] = (
            std::array::from_fn(|i| i as u8),
            std::array::from_fn(|i| (i as u8) * 0x11),
        );
        let arr = |b: &[u8; 16]| {
            b.iter()
                .map(|v| format!("{v}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut c = String::from("#include <stdio.h>\n#define DEVFN static\n");
        c.push_str(AES_CORE);
        let _ = writeln!(c, "static const u8 KEYS[{}][16] = {{", cases.len());
        for (k, _) in &cases {
            let _ = writeln!(c, "{{{}}},", arr(k));
        }
        let _ = writeln!(c, "}};\nstatic const u8 BLOCKS[{}][16] = {{", cases.len());
        for (_, b) in &cases {
            let _ = writeln!(c, "{{{}}},", arr(b));
        }
        let _ = writeln!(
            c,
            "}};\nint main(void) {{ u8 sbox[256], rk[176], out[16];\n\
             for (int i = 0; i < 256; i++) sbox[i] = aes_sbox_entry((u8)i);\n\
             for (int n = 0; n < {}; n++) {{ aes128_expand(sbox, KEYS[n], rk);\n\
             aes128_encrypt(sbox, rk, BLOCKS[n], out);\n\
             for (int i = 0; i < 16; i++) {{ printf(\"%02x\", out[i]); }}\n             printf(\"\\n\"); }}\n\
             return 0; }}",
            cases.len()
        );
        let dir = std::env::temp_dir().join(format!("sealink-gpu-aes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, exe) = (dir.join("aes.c"), dir.join("aes"));
        std::fs::write(&src, c).unwrap();
        let out = Command::new("cc")
            .args(["-O1", "-std=c99", "-Wall", "-Werror", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cc failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run = Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let text = String::from_utf8(run.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), cases.len());
        assert_eq!(lines[0], "69c4e0d86a7b0430d8cdb78070b4c55a", "FIPS 197 C.1");
        for ((key, block), line) in cases.iter().zip(lines) {
            let want = CpuCtr::new(key).unwrap().encrypt_block(*block).unwrap();
            let want: String = want.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(line, want);
        }
    }
}
