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

/// An X25519 private key made ready for exchanges through AWS-LC, whose X25519 is assembly
/// (s2n-bignum, with the BMI2/ADX multiplications where the CPU has them) where
/// curve25519-dalek's Montgomery ladder, snow's default, is portable Rust: less than half its
/// time per exchange on x86-64 (`x25519_speed` below), and a handshake responder does four
/// variable-base exchanges per initiation.
pub struct X25519Key {
    key: aws_lc_rs::agreement::PrivateKey,
    public: [u8; 32],
}

crate::debug_showing!(X25519Key { public });

impl X25519Key {
    /// The key of 32 private bytes (clamped by the exchange, as RFC 7748 says).
    pub fn new(private: &[u8; 32]) -> Result<Self, CryptoError> {
        let key = aws_lc_rs::agreement::PrivateKey::from_private_key(
            &aws_lc_rs::agreement::X25519,
            private,
        )
        .map_err(|_| CryptoError::Malformed)?;
        let public = key
            .compute_public_key()
            .map_err(|_| CryptoError::Malformed)?
            .as_ref()
            .try_into()
            .map_err(|_| CryptoError::Malformed)?;
        Ok(X25519Key { key, public })
    }

    pub fn public(&self) -> &[u8; 32] {
        &self.public
    }

    /// The shared secret with `peer`'s public key. An all-zero result (a small-order `peer`)
    /// is refused by AWS-LC: `Malformed`.
    pub fn exchange(&self, peer: &[u8; 32]) -> Result<[u8; 32], CryptoError> {
        let peer =
            aws_lc_rs::agreement::UnparsedPublicKey::new(&aws_lc_rs::agreement::X25519, peer);
        aws_lc_rs::agreement::agree(&self.key, peer, CryptoError::Malformed, |s| {
            s.try_into().map_err(|_| CryptoError::Malformed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use curve25519_dalek::montgomery::MontgomeryPoint;

    /// RFC 7748 §6.1's Alice and Bob.
    #[test]
    fn rfc7748_exchange() {
        let hex = |s: &str| -> [u8; 32] {
            let v: Vec<u8> = (0..64)
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect();
            v.try_into().unwrap()
        };
        let a = X25519Key::new(&hex(
            "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
        ))
        .unwrap();
        let b_pub = hex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
        assert_eq!(
            a.public(),
            &hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
        );
        assert_eq!(
            a.exchange(&b_pub).unwrap(),
            hex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742")
        );
        // Same as curve25519-dalek (snow's default) on keys of any bytes.
        for seed in 0u8..16 {
            let p = [seed.wrapping_mul(37).wrapping_add(1); 32];
            let q = X25519Key::new(&[seed ^ 0x5a; 32]).unwrap();
            let dalek = MontgomeryPoint(*q.public()).mul_clamped(p);
            let k = X25519Key::new(&p).unwrap();
            assert_eq!(k.exchange(q.public()).unwrap(), dalek.to_bytes());
            assert_eq!(k.public(), &MontgomeryPoint::mul_base_clamped(p).to_bytes());
        }
        // A small-order point gives zeros: refused.
        assert!(a.exchange(&[0u8; 32]).is_err());
    }

    /// `cargo test --release -p sealink-crypto -- --ignored x25519_speed --nocapture`
    #[test]
    #[ignore = "a timing, not a check"]
    fn x25519_speed() {
        let k = X25519Key::new(&[7u8; 32]).unwrap();
        let peer = *X25519Key::new(&[9u8; 32]).unwrap().public();
        let n = 20_000;
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(k.exchange(std::hint::black_box(&peer)).unwrap());
        }
        let aws = t.elapsed().as_secs_f64() / n as f64 * 1e6;
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(
                MontgomeryPoint(std::hint::black_box(peer)).mul_clamped([7u8; 32]),
            );
        }
        let dalek = t.elapsed().as_secs_f64() / n as f64 * 1e6;
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(X25519Key::new(std::hint::black_box(&[7u8; 32])).unwrap());
        }
        let aws_new = t.elapsed().as_secs_f64() / n as f64 * 1e6;
        println!(
            "X25519 exchange: aws-lc {aws:.1} us, curve25519-dalek {dalek:.1} us; aws-lc key with its public {aws_new:.1} us"
        );
    }
}
