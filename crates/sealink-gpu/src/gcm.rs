//! GCM around an external CTR keystream: the device XORs the payload with `E_K(inc32^i(J0))`
//! and returns `E_K(J0)` per packet; the host computes GHASH over AAD and ciphertext and the
//! tag `GHASH ^ E_K(J0)` (SP 800-38D, 7.1).
//!
//! GHASH runs on the CPU with RustCrypto's `ghash` (through `polyval`, which uses the
//! carry-less multiply instruction where the CPU has it): aws-lc-rs exposes no GHASH on its
//! own, and sealing twice (once on the GPU for CTR, once with aws-lc for the tag) would do the
//! CPU's whole work anyway. The hash subkey `H = E_K(0^128)` and the CPU reference keystream
//! come from aws-lc-rs's AES-CTR, so no AES is written here for the CPU.

use aws_lc_rs::cipher::{AES_128, EncryptingKey, EncryptionContext, UnboundCipherKey};
use aws_lc_rs::iv::FixedLength;
use ghash::GHash;
use ghash::universal_hash::{KeyInit, UniversalHash};

use crate::GpuError;
use crate::layout::{Frame, NONCE_LEN, Packed, TAG_LEN, counter_block, j0};

/// An AES-128 key.
pub type Key128 = [u8; 16];

/// AES-128 in CTR mode through aws-lc-rs: the CPU's keystream.
pub struct CpuCtr {
    key: EncryptingKey,
}

impl std::fmt::Debug for CpuCtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CpuCtr")
    }
}

fn crypto_err(what: &str) -> GpuError {
    GpuError::Crypto(what.to_owned())
}

impl CpuCtr {
    pub fn new(key: &Key128) -> Result<Self, GpuError> {
        let k = UnboundCipherKey::new(&AES_128, key).map_err(|_| crypto_err("AES-128 key"))?;
        let key = EncryptingKey::ctr(k).map_err(|_| crypto_err("AES-CTR key"))?;
        Ok(CpuCtr { key })
    }

    /// XORs `data` with the CTR keystream starting at counter block `iv`. aws-lc increments
    /// the whole 128-bit block while GCM's inc32 wraps the low 32 bits: they agree while the
    /// low word does not wrap, which holds for every packet under `layout::MAX_PACKET`
    /// starting at counter 2.
    pub fn apply(&self, iv: [u8; 16], data: &mut [u8]) -> Result<(), GpuError> {
        self.key
            .less_safe_encrypt(data, EncryptionContext::Iv128(FixedLength::from(iv)))
            .map(|_| ())
            .map_err(|_| crypto_err("AES-CTR"))
    }

    /// `E_K(block)`.
    pub fn encrypt_block(&self, block: [u8; 16]) -> Result<[u8; 16], GpuError> {
        let mut out = [0u8; 16];
        self.apply(block, &mut out)?;
        Ok(out)
    }

    /// The GHASH subkey `H = E_K(0^128)`.
    pub fn hash_subkey(&self) -> Result<[u8; 16], GpuError> {
        self.encrypt_block([0u8; 16])
    }

    /// The device's job done on the CPU: every packet of `packed` XORed with its keystream
    /// in place, and each packet's `E_K(J0)`. The reference the GPU kernel must match.
    pub fn keystream_packed(&self, packed: &mut Packed) -> Result<Vec<[u8; 16]>, GpuError> {
        let mut masks = Vec::with_capacity(packed.count());
        for i in 0..packed.count() {
            let n = packed.nonce(i);
            let r = packed.range(i);
            self.apply(counter_block(&n, 2), &mut packed.data[r])?;
            masks.push(self.encrypt_block(j0(&n))?);
        }
        Ok(masks)
    }
}

/// The GCM tag of ciphertext `ct` under hash subkey `h`, given `mask = E_K(J0)`.
pub fn tag(h: &[u8; 16], aad: &[u8], ct: &[u8], mask: &[u8; 16]) -> [u8; TAG_LEN] {
    let mut g = GHash::new(h.into());
    g.update_padded(aad);
    g.update_padded(ct);
    let mut lens = [0u8; 16];
    lens[..8].copy_from_slice(&((aad.len() as u64) * 8).to_be_bytes());
    lens[8..].copy_from_slice(&((ct.len() as u64) * 8).to_be_bytes());
    g.update(&[lens.into()]);
    let s = g.finalize();
    let mut t = [0u8; TAG_LEN];
    for (o, (a, b)) in t.iter_mut().zip(s.iter().zip(mask)) {
        *o = a ^ b;
    }
    t
}

/// Tags of every packet of a batch whose keystream has been applied: `data` is the packed
/// ciphertext (the device's output), `masks` the `E_K(J0)` per packet.
pub fn finish_tags(
    h: &[u8; 16],
    packed: &Packed,
    data: &[u8],
    aads: &[&[u8]],
    masks: &[[u8; 16]],
) -> Result<Vec<[u8; TAG_LEN]>, GpuError> {
    if aads.len() != packed.count() || masks.len() != packed.count() {
        return Err(GpuError::Batch(format!(
            "{} packets, {} AADs, {} tag masks",
            packed.count(),
            aads.len(),
            masks.len()
        )));
    }
    Ok((0..packed.count())
        .map(|i| tag(h, aads[i], &data[packed.range(i)], &masks[i]))
        .collect())
}

/// Reads a frame the device has sealed (`buf`, `frame.len()` bytes, laid out by `packed`):
/// puts each packet's ciphertext back into `packets` and returns the tags, read from the tag
/// slots when the device computed GHASH (`gpu_ghash`), else computed here from the slots'
/// `E_K(J0)` masks and the ciphertext under hash subkey `h`.
pub fn finish_frame(
    h: &[u8; 16],
    packed: &Packed,
    frame: &Frame,
    buf: &[u8],
    gpu_ghash: bool,
    aads: &[&[u8]],
    packets: &mut [&mut [u8]],
) -> Result<Vec<[u8; TAG_LEN]>, GpuError> {
    let slots: Vec<[u8; 16]> = buf[frame.tags_at()..frame.data_at()]
        .chunks_exact(16)
        .map(|m| m.try_into().expect("16 bytes"))
        .collect();
    let data = &buf[frame.data_at()..frame.len()];
    let tags = if gpu_ghash {
        slots
    } else {
        finish_tags(h, packed, data, aads, &slots)?
    };
    packed.unpack(data, packets);
    Ok(tags)
}

/// AES-128-GCM seal of a batch entirely on the CPU, through the same packing and tag path as
/// the GPU: ciphertext in place, tags returned. Byte-identical to aws-lc-rs's seal.
pub fn cpu_seal_batch(
    key: &Key128,
    nonces: &[[u8; NONCE_LEN]],
    aads: &[&[u8]],
    packets: &mut [&mut [u8]],
) -> Result<Vec<[u8; TAG_LEN]>, GpuError> {
    let ctr = CpuCtr::new(key)?;
    let h = ctr.hash_subkey()?;
    let mut packed = Packed::default();
    packed.pack(nonces, aads, packets)?;
    let masks = ctr.keystream_packed(&mut packed)?;
    let tags = finish_tags(&h, &packed, &packed.data, aads, &masks)?;
    packed.unpack(&packed.data, packets);
    Ok(tags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    use proptest::prelude::*;

    fn aws_seal(key: &Key128, nonce: [u8; 12], aad: &[u8], data: &mut [u8]) -> [u8; 16] {
        let k = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, key).unwrap());
        let t = k
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), data)
            .unwrap();
        t.as_ref().try_into().unwrap()
    }

    /// The GCM test case 4 of McGrew and Viega (AES-128, 60-byte payload, 20-byte AAD).
    #[test]
    fn known_answer_gcm_spec_test_case_4() {
        let key: Key128 = hex("feffe9928665731c6d6a8f9467308308").try_into().unwrap();
        let nonce: [u8; 12] = hex("cafebabefacedbaddecaf888").try_into().unwrap();
        let aad = hex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
        let mut pt = hex(
            "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
        );
        let tags = cpu_seal_batch(&key, &[nonce], &[&aad], &mut [&mut pt]).unwrap();
        assert_eq!(
            pt,
            hex(
                "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091"
            )
        );
        assert_eq!(tags[0].to_vec(), hex("5bc94fbc3221a5db94fae95ae7121a47"));
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        /// The host-side composition (packing, CTR keystream, GHASH, tag) equals aws-lc-rs's
        /// AES-128-GCM for random batches.
        #[test]
        fn cpu_path_matches_aws_lc(
            key in any::<[u8; 16]>(),
            items in proptest::collection::vec(
                (any::<[u8; 12]>(), proptest::collection::vec(any::<u8>(), 0..40),
                 proptest::collection::vec(any::<u8>(), 0..3000)), 1..12),
        ) {
            let nonces: Vec<[u8; 12]> = items.iter().map(|i| i.0).collect();
            let aads: Vec<&[u8]> = items.iter().map(|i| &i.1[..]).collect();
            let mut ours: Vec<Vec<u8>> = items.iter().map(|i| i.2.clone()).collect();
            let mut refs: Vec<&mut [u8]> = ours.iter_mut().map(|v| &mut v[..]).collect();
            let tags = cpu_seal_batch(&key, &nonces, &aads, &mut refs).unwrap();
            for (k, it) in items.iter().enumerate() {
                let mut want = it.2.clone();
                let t = aws_seal(&key, it.0, &it.1, &mut want);
                prop_assert_eq!(&ours[k], &want);
                prop_assert_eq!(tags[k], t);
            }
        }
    }
}
