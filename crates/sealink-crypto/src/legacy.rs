//! Legacy transforms for the lab only (paper 000/001 reruns): DES-CBC, 3DES-CBC, MD5, HMAC-MD5.
//! Insecure; real channels refuse them unless explicitly opted in.
//!
//! **None of these is secure.** DES has a 56-bit key and falls to exhaustive search; 3DES has a
//! 64-bit block (Sweet32) and is withdrawn by NIST; MD5 is broken for collisions. They exist so
//! that the lab can rerun old measurements against the exact transforms the papers used. Every
//! primitive comes from the RustCrypto crates (`des`, `cbc`, `md-5`, `hmac`); this module only
//! wires them together.

use cbc::cipher::block_padding::{NoPadding, Pkcs7};
use cbc::cipher::consts::U8;
use cbc::cipher::generic_array::GenericArray;
use cbc::cipher::{
    BlockCipher, BlockDecrypt, BlockDecryptMut, BlockEncrypt, BlockEncryptMut, BlockSizeUser,
    InnerIvInit, KeyInit, KeyIvInit,
};
use hmac::{Hmac, Mac};
use md5::{Digest, Md5};

use crate::CryptoError;
use crate::dir::Dir;
use crate::legacy_len;

/// DES block size in bytes (also the IV length).
pub const DES_BLOCK_LEN: usize = legacy_len::DES_BLOCK;
/// DES key length in bytes (64 bits including the parity bits, which DES ignores).
pub const DES_KEY_LEN: usize = legacy_len::DES_KEY;
/// Three-key 3DES (EDE3) key length in bytes: K1 || K2 || K3.
pub const TDES_KEY_LEN: usize = legacy_len::TDES_KEY;
/// Length of an MD5 digest and of an HMAC-MD5 tag.
pub const MD5_LEN: usize = legacy_len::MD5;

type HmacMd5 = Hmac<Md5>;

/// MD5 of `data` (RFC 1321). **Insecure**: collisions are practical; lab use only.
pub fn md5(data: &[u8]) -> [u8; MD5_LEN] {
    Md5::digest(data).into()
}

/// HMAC-MD5 of `data` under `key` (RFC 2104). **Insecure** by modern standards; lab use only.
pub fn hmac_md5(key: &[u8], data: &[u8]) -> [u8; MD5_LEN] {
    let mut mac = <HmacMd5 as Mac>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

fn check_blocks(buf: &[u8]) {
    assert!(
        buf.len() % DES_BLOCK_LEN == 0,
        "CBC lab transform: buffer length {} is not a multiple of {DES_BLOCK_LEN}",
        buf.len()
    );
}

fn cbc_encrypt<C>(key: &[u8], iv: &[u8; DES_BLOCK_LEN], buf: &mut [u8])
where
    C: BlockCipher + BlockEncrypt + BlockSizeUser<BlockSize = U8> + KeyInit,
{
    check_blocks(buf);
    let len = buf.len();
    cbc::Encryptor::<C>::new_from_slices(key, iv)
        .expect("key and IV lengths fixed by the signature")
        .encrypt_padded_mut::<NoPadding>(buf, len)
        .expect("length is a multiple of the block size");
}

fn cbc_decrypt<C>(key: &[u8], iv: &[u8; DES_BLOCK_LEN], buf: &mut [u8])
where
    C: BlockCipher + BlockDecrypt + BlockSizeUser<BlockSize = U8> + KeyInit,
{
    check_blocks(buf);
    cbc::Decryptor::<C>::new_from_slices(key, iv)
        .expect("key and IV lengths fixed by the signature")
        .decrypt_padded_mut::<NoPadding>(buf)
        .expect("length is a multiple of the block size");
}

/// DES-CBC encryption in place, no padding. **Insecure** (56-bit key); lab use only.
///
/// # Panics
/// If `buf.len()` is not a multiple of 8.
pub fn des_cbc_encrypt_in_place(key: &[u8; DES_KEY_LEN], iv: &[u8; DES_BLOCK_LEN], buf: &mut [u8]) {
    cbc_encrypt::<des::Des>(key, iv, buf);
}

/// DES-CBC decryption in place, no padding. **Insecure** (56-bit key); lab use only.
///
/// # Panics
/// If `buf.len()` is not a multiple of 8.
pub fn des_cbc_decrypt_in_place(key: &[u8; DES_KEY_LEN], iv: &[u8; DES_BLOCK_LEN], buf: &mut [u8]) {
    cbc_decrypt::<des::Des>(key, iv, buf);
}

/// 3DES-EDE3-CBC encryption in place (key = K1 || K2 || K3), no padding. **Insecure** (64-bit
/// block, Sweet32; withdrawn by NIST); lab use only.
///
/// # Panics
/// If `buf.len()` is not a multiple of 8.
pub fn tdes_cbc_encrypt_in_place(
    key: &[u8; TDES_KEY_LEN],
    iv: &[u8; DES_BLOCK_LEN],
    buf: &mut [u8],
) {
    cbc_encrypt::<des::TdesEde3>(key, iv, buf);
}

/// 3DES-EDE3-CBC decryption in place (key = K1 || K2 || K3), no padding. **Insecure**; lab use
/// only.
///
/// # Panics
/// If `buf.len()` is not a multiple of 8.
pub fn tdes_cbc_decrypt_in_place(
    key: &[u8; TDES_KEY_LEN],
    iv: &[u8; DES_BLOCK_LEN],
    buf: &mut [u8],
) {
    cbc_decrypt::<des::TdesEde3>(key, iv, buf);
}

/// Key of a legacy packet suite: a pre-scheduled block cipher and a pre-keyed HMAC-MD5 state,
/// both cloned per packet (no key schedule and no allocation per packet).
#[derive(Clone)]
pub(crate) struct LegacyKey<C> {
    cipher: C,
    mac: HmacMd5,
}

impl<C> LegacyKey<C>
where
    C: BlockCipher + BlockEncrypt + BlockDecrypt + BlockSizeUser<BlockSize = U8> + KeyInit + Clone,
{
    /// `cipher_key` must have the cipher's key length (checked by the caller).
    pub(crate) fn new(cipher_key: &[u8], mac_key: &[u8]) -> Result<Self, CryptoError> {
        let cipher = C::new_from_slice(cipher_key).map_err(|_| CryptoError::Malformed)?;
        let mac = <HmacMd5 as Mac>::new_from_slice(mac_key).map_err(|_| CryptoError::Malformed)?;
        Ok(Self { cipher, mac })
    }

    /// IV = E_K(counter as 8 little-endian bytes).
    fn iv(&self, counter: u64) -> GenericArray<u8, U8> {
        let mut block = GenericArray::from(counter.to_le_bytes());
        self.cipher.encrypt_block(&mut block);
        block
    }

    /// HMAC-MD5 state already fed with header || counter (little endian) || data.
    fn mac_over(&self, counter: u64, header: &[u8], data: &[u8]) -> HmacMd5 {
        let mut mac = self.mac.clone();
        mac.update(header);
        mac.update(&counter.to_le_bytes());
        mac.update(data);
        mac
    }

    /// Seals or opens `body[..len]` (`len <= body.len()` checked by the caller). `encrypt`
    /// selects CBC+HMAC (encrypt-then-MAC) versus HMAC only. Opening checks the MAC first
    /// (constant time), then decrypts and checks the padding.
    pub(crate) fn apply(
        &self,
        dir: Dir,
        counter: u64,
        encrypt: bool,
        header: &[u8],
        body: &mut [u8],
        len: usize,
    ) -> Result<usize, CryptoError> {
        match dir {
            Dir::Seal => {
                let data_len = if encrypt {
                    (len / DES_BLOCK_LEN + 1) * DES_BLOCK_LEN
                } else {
                    len
                };
                let need = data_len + MD5_LEN;
                if body.len() < need {
                    return Err(CryptoError::BufferTooSmall {
                        need,
                        have: body.len(),
                    });
                }
                if encrypt {
                    let have = body.len();
                    cbc::Encryptor::<C>::inner_iv_init(self.cipher.clone(), &self.iv(counter))
                        .encrypt_padded_mut::<Pkcs7>(&mut body[..data_len], len)
                        .map_err(|_| CryptoError::BufferTooSmall { need, have })?;
                }
                let (data, rest) = body.split_at_mut(data_len);
                let tag = self.mac_over(counter, header, data).finalize().into_bytes();
                rest[..MD5_LEN].copy_from_slice(&tag);
                Ok(need)
            }
            Dir::Open => {
                let Some(data_len) = len.checked_sub(MD5_LEN) else {
                    return Err(CryptoError::AuthFailed);
                };
                if encrypt && (data_len == 0 || data_len % DES_BLOCK_LEN != 0) {
                    return Err(CryptoError::AuthFailed);
                }
                let (data, rest) = body.split_at_mut(data_len);
                self.mac_over(counter, header, data)
                    .verify_slice(&rest[..MD5_LEN])
                    .map_err(|_| CryptoError::AuthFailed)?;
                if !encrypt {
                    return Ok(data_len);
                }
                let plain =
                    cbc::Decryptor::<C>::inner_iv_init(self.cipher.clone(), &self.iv(counter))
                        .decrypt_padded_mut::<Pkcs7>(data)
                        .map_err(|_| CryptoError::AuthFailed)?;
                Ok(plain.len())
            }
        }
    }
}
