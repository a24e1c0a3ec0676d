//! Ed25519 owner keys: owners sign once per channel, receivers verify once and cache.

use aws_lc_rs::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};

use crate::CryptoError;

pub const PUBLIC_KEY_LEN: usize = 32;
pub const SIGNATURE_LEN: usize = 64;
pub const SEED_LEN: usize = 32;

/// An owner's Ed25519 signing key, made from a 32-byte seed. The key lives inside aws-lc
/// (an `EVP_PKEY`), whose `OPENSSL_free` cleanses the memory when the key is dropped; no copy of
/// the seed is kept here.
pub struct OwnerSigningKey {
    pair: Ed25519KeyPair,
    public: [u8; PUBLIC_KEY_LEN],
}

impl std::fmt::Debug for OwnerSigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnerSigningKey { public: ")?;
        for b in self.public {
            write!(f, "{b:02x}")?;
        }
        f.write_str(", secret: <redacted> }")
    }
}

impl OwnerSigningKey {
    pub fn from_seed(seed: &[u8; SEED_LEN]) -> Result<Self, CryptoError> {
        let pair = Ed25519KeyPair::from_seed_unchecked(seed).map_err(|_| CryptoError::Malformed)?;
        let public = pair
            .public_key()
            .as_ref()
            .try_into()
            .map_err(|_| CryptoError::Malformed)?;
        Ok(Self { pair, public })
    }
    /// A fresh random seed from the system generator (used by tests, benches and examples;
    /// `sealink keygen` wraps its keys in `Zeroizing`).
    pub fn generate_seed() -> Result<[u8; SEED_LEN], CryptoError> {
        let mut seed = [0u8; SEED_LEN];
        random_bytes(&mut seed)?;
        Ok(seed)
    }
    pub fn public_key(&self) -> [u8; PUBLIC_KEY_LEN] {
        self.public
    }
    pub fn sign(&self, msg: &[u8]) -> [u8; SIGNATURE_LEN] {
        self.pair
            .sign(msg)
            .as_ref()
            .try_into()
            .expect("Ed25519 signatures are 64 bytes")
    }
}

/// Verifies an Ed25519 signature; `false` for any malformed input.
pub fn verify(public_key: &[u8; PUBLIC_KEY_LEN], msg: &[u8], sig: &[u8; SIGNATURE_LEN]) -> bool {
    UnparsedPublicKey::new(&ED25519, public_key)
        .verify(msg, sig)
        .is_ok()
}

/// Fills `out` from the system random generator.
pub fn random_bytes(out: &mut [u8]) -> Result<(), CryptoError> {
    aws_lc_rs::rand::fill(out).map_err(|_| CryptoError::Rng)
}
