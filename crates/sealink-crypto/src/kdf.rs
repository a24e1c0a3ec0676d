//! Key derivation: HKDF-SHA-256 from a 32-byte handshake secret to suite key material.

use aws_lc_rs::hkdf::{HKDF_SHA256, KeyType, Salt};

use zeroize::Zeroizing;

use crate::{CryptoError, PacketKey, SuiteId};

/// The longest key material any suite takes (3DES: 24-byte cipher key || 16-byte MAC key).
pub const MAX_KEY_LEN: usize = 40;

/// Prefix of the HKDF info string.
pub const INFO_PREFIX: &[u8] = b"sealink v1 ";

struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-SHA-256 (RFC 5869): extracts with `salt` from `ikm`, then fills `out` (at most
/// 255 * 32 bytes) with the expansion under `info`.
pub fn hkdf_sha256(
    salt: &[u8],
    ikm: &[u8],
    info: &[u8],
    out: &mut [u8],
) -> Result<(), CryptoError> {
    Salt::new(HKDF_SHA256, salt)
        .extract(ikm)
        .expand(&[info], Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .map_err(|_| CryptoError::Library("HKDF output too long"))
}

/// Fills `out` with HKDF-SHA-256 output keying material from `secret` (salt empty,
/// info = "sealink v1 " || suite name || " " || label). `out` is usually
/// `suite.key_len()` bytes; it may be at most 255 * 32 bytes.
pub fn derive_key_material(
    suite: SuiteId,
    secret: &[u8; 32],
    label: &[u8],
    out: &mut [u8],
) -> Result<(), CryptoError> {
    let prk = Salt::new(HKDF_SHA256, &[]).extract(secret);
    let info = [INFO_PREFIX, suite.name().as_bytes(), b" ", label];
    prk.expand(&info, Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .map_err(|_| CryptoError::BadKeyLength {
            suite: suite.name(),
            expected: suite.key_len(),
            got: out.len(),
        })
}

/// Derives a packet key for `suite` from `secret` with HKDF-SHA-256 (salt empty,
/// info = "sealink v1 " || suite name || " " || label).
pub fn derive_packet_key(
    suite: SuiteId,
    secret: &[u8; 32],
    label: &[u8],
    allow_insecure_legacy: bool,
) -> Result<PacketKey, CryptoError> {
    if suite.is_legacy() && !allow_insecure_legacy {
        return Err(CryptoError::LegacyRefused(suite.name()));
    }
    // Wiped when dropped, on the error paths too.
    let mut buf = Zeroizing::new([0u8; MAX_KEY_LEN]);
    let key = &mut buf[..suite.key_len()];
    derive_key_material(suite, secret, label, key)?;
    PacketKey::new(suite, key, allow_insecure_legacy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    /// RFC 5869 test case 1.
    #[test]
    fn hkdf_rfc5869_case_1() {
        let mut okm = [0u8; 42];
        hkdf_sha256(
            &hex!("000102030405060708090a0b0c"),
            &[0x0b; 22],
            &hex!("f0f1f2f3f4f5f6f7f8f9"),
            &mut okm,
        )
        .unwrap();
        assert_eq!(
            okm,
            hex!(
                "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
            )
        );
        assert!(hkdf_sha256(b"", b"k", b"", &mut vec![0u8; 255 * 32 + 1]).is_err());
    }
}
