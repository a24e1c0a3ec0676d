//! X25519 helpers for host keys (the handshake itself runs inside snow).

use crate::CryptoError;

/// Derives the X25519 public key of a 32-byte private key.
pub fn x25519_public_key(private: &[u8; 32]) -> Result<[u8; 32], CryptoError> {
    let k =
        aws_lc_rs::agreement::PrivateKey::from_private_key(&aws_lc_rs::agreement::X25519, private)
            .map_err(|_| CryptoError::Malformed)?;
    let public = k.compute_public_key().map_err(|_| CryptoError::Malformed)?;
    public
        .as_ref()
        .try_into()
        .map_err(|_| CryptoError::Malformed)
}
