//! Public keys that must never be accepted from a trust file, a config or a key file.
//!
//! * X25519: a small-order point makes every Diffie-Hellman result with it a constant (all
//!   zeros), whatever our private key: the "shared" secret is public.
//! * Ed25519: with a small-order public key A (the identity or one of the other 7 points of
//!   order dividing 8), a signature (R, S) = (identity, 0) or similar satisfies the verification
//!   equation for many or all messages, so anyone can sign as that owner.
//!
//! Both checks look at public keys only (no secret data), so they need not run in constant time.

use curve25519_dalek::edwards::CompressedEdwardsY;

/// The u-coordinates of the X25519 points of small order (on the curve or its twist), with bit
/// 255 clear: 0, 1, the two points of order 8, p - 1, and the non-canonical encodings p and
/// p + 1 of 0 and 1 (libsodium's list). u + p for the order-8 points and p - 1 does not fit in
/// 255 bits, so these seven are all the encodings once bit 255 is ignored.
const X25519_SMALL_ORDER: [[u8; 32]; 7] = [
    // 0
    [0; 32],
    // 1
    [
        1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0,
    ],
    // 325606250916557431795983626356110631294008115727848805560023387167927233504 (order 8)
    [
        0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4,
        0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49,
        0xb8, 0x00,
    ],
    // 39382357235489614581723060781553021112529911719440698176882885853963445705823 (order 8)
    [
        0x5f, 0x9c, 0x95, 0xbc, 0xa3, 0x50, 0x8c, 0x24, 0xb1, 0xd0, 0xb1, 0x55, 0x9c, 0x83, 0xef,
        0x5b, 0x04, 0x44, 0x5c, 0xc4, 0x58, 0x1c, 0x8e, 0x86, 0xd8, 0x22, 0x4e, 0xdd, 0xd0, 0x9f,
        0x11, 0x57,
    ],
    // p - 1
    top(0xec),
    // p (non-canonical 0)
    top(0xed),
    // p + 1 (non-canonical 1)
    top(0xee),
];

/// `first` followed by 30 bytes 0xff and 0x7f: p - 1, p, p + 1 for 0xec, 0xed, 0xee.
const fn top(first: u8) -> [u8; 32] {
    let mut k = [0xff; 32];
    k[0] = first;
    k[31] = 0x7f;
    k
}

/// True if `key` is an X25519 public key of small order (all-zero included), in any encoding
/// X25519 accepts: bit 255 is ignored as RFC 7748 §5 says, so both values of it are caught.
pub fn x25519_public_is_degenerate(key: &[u8; 32]) -> bool {
    let mut u = *key;
    u[31] &= 0x7f;
    X25519_SMALL_ORDER.contains(&u)
}

/// True if `key` decodes to an Ed25519 point of small order: the identity or one of the other
/// 7 torsion points, including their non-canonical encodings (y >= p, or the sign bit set on a
/// point with x = 0), which curve25519-dalek's decoder accepts and reduces. A key that is not
/// a curve point at all is not "weak" (no signature verifies under it) and returns false.
pub fn ed25519_public_is_weak(key: &[u8; 32]) -> bool {
    CompressedEdwardsY(*key)
        .decompress()
        .is_some_and(|p| p.is_small_order())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::agreement::{self, UnparsedPublicKey, X25519};
    use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT, EIGHT_TORSION};

    /// X25519 with a fresh private key; aws-lc refuses an all-zero result.
    fn dh_fails(public: &[u8; 32]) -> bool {
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let sk = agreement::EphemeralPrivateKey::generate(&X25519, &rng).unwrap();
        agreement::agree_ephemeral(sk, UnparsedPublicKey::new(&X25519, public), (), |_| Ok(()))
            .is_err()
    }

    #[test]
    fn every_listed_x25519_key_gives_an_all_zero_secret() {
        for k in X25519_SMALL_ORDER {
            for high in [0u8, 0x80] {
                let mut key = k;
                key[31] |= high;
                assert!(x25519_public_is_degenerate(&key), "{key:02x?}");
                assert!(dh_fails(&key), "DH with {key:02x?} succeeded");
            }
        }
    }

    #[test]
    fn the_order_8_list_matches_the_torsion_points() {
        // The u-coordinates of the 8 torsion points of the Edwards curve, computed by
        // curve25519-dalek: each is on our list (the identity maps to u = 0).
        for t in EIGHT_TORSION {
            let u = t.to_montgomery().to_bytes();
            assert!(x25519_public_is_degenerate(&u), "{u:02x?}");
        }
    }

    #[test]
    fn honest_x25519_keys_pass() {
        for _ in 0..64 {
            let sk = agreement::PrivateKey::generate(&X25519).unwrap();
            let pk: [u8; 32] = sk
                .compute_public_key()
                .unwrap()
                .as_ref()
                .try_into()
                .unwrap();
            assert!(!x25519_public_is_degenerate(&pk));
        }
        // Neighbours of the listed values are ordinary.
        let mut two = [0u8; 32];
        two[0] = 2;
        assert!(!x25519_public_is_degenerate(&two));
        assert!(!x25519_public_is_degenerate(&top(0xeb)));
        assert!(!x25519_public_is_degenerate(&top(0xef)));
        // Every u below 256 other than 0 and 1 gives a non-zero secret.
        for b in 2..=255u8 {
            let mut u = [0u8; 32];
            u[0] = b;
            assert!(!x25519_public_is_degenerate(&u));
            assert!(!dh_fails(&u), "u = {b}");
        }
    }

    /// The 8 torsion points in canonical form, plus the non-canonical encodings: sign bit set
    /// on the two points with x = 0, y + p for the points with y = 0 and y = 1.
    fn small_order_encodings() -> Vec<[u8; 32]> {
        let mut all: Vec<[u8; 32]> = EIGHT_TORSION.iter().map(|t| t.compress().0).collect();
        let identity = all[0];
        let minus_one = all[4];
        // The two torsion points with x = 0: (0, 1) and (0, -1).
        assert_eq!((identity[0], &identity[1..]), (1, &[0u8; 31][..]));
        assert_eq!(minus_one, top(0xec));
        for mut k in [identity, minus_one] {
            k[31] |= 0x80;
            all.push(k);
        }
        for y0 in [0xed, 0xee] {
            for sign in [0u8, 0x80] {
                let mut k = top(y0);
                k[31] |= sign;
                all.push(k);
            }
        }
        all
    }

    #[test]
    fn ed25519_small_order_points_are_weak() {
        let all = small_order_encodings();
        assert_eq!(all.len(), 14);
        for k in &all {
            assert!(ed25519_public_is_weak(k), "{k:02x?}");
        }
    }

    #[test]
    fn identity_key_lets_anyone_sign() {
        // Why the check exists: under the identity key, R = identity and S = 0 satisfy
        // [S]B = R + [k]A for every message.
        let mut id = [0u8; 32];
        id[0] = 1;
        let mut sig = [0u8; 64];
        sig[..32].copy_from_slice(&id);
        let verifies = |msg: &[u8]| {
            aws_lc_rs::signature::UnparsedPublicKey::new(&aws_lc_rs::signature::ED25519, &id)
                .verify(msg, &sig)
                .is_ok()
        };
        assert!(verifies(b"pay mallory") && verifies(b"anything"));
        assert!(ed25519_public_is_weak(&id));
    }

    #[test]
    fn honest_ed25519_keys_pass() {
        assert!(!ed25519_public_is_weak(
            &ED25519_BASEPOINT_POINT.compress().0
        ));
        for _ in 0..64 {
            let mut seed = [0u8; 32];
            aws_lc_rs::rand::fill(&mut seed).unwrap();
            let pair = aws_lc_rs::signature::Ed25519KeyPair::from_seed_unchecked(&seed).unwrap();
            use aws_lc_rs::signature::KeyPair;
            let pk: [u8; 32] = pair.public_key().as_ref().try_into().unwrap();
            assert!(!ed25519_public_is_weak(&pk));
        }
        // A mixed-order point (base point plus a torsion point) is not small order.
        let mixed = (ED25519_BASEPOINT_POINT + EIGHT_TORSION[1]).compress().0;
        assert!(!ed25519_public_is_weak(&mixed));
        // Not a curve point: not weak (no signature verifies under it).
        let mut off = [0u8; 32];
        off[0] = 2;
        if CompressedEdwardsY(off).decompress().is_none() {
            assert!(!ed25519_public_is_weak(&off));
        }
    }
}
