//! Degenerate public keys: the small-order points of Curve25519 (X25519 host keys) and of
//! Edwards25519 (Ed25519 owner keys), in every encoding the libraries accept.
//!
//! An X25519 exchange with a small-order point yields an all-zero shared secret whatever the
//! private key (the clamped scalar is a multiple of the cofactor 8), so such a "public key" has
//! no private key behind it and anyone can complete a handshake as it. An Ed25519 key of small
//! order verifies signatures that nobody had to make. Loaders of keys, trust sets and
//! configuration refuse both; the handshake refuses an all-zero exchange on its own as well
//! (`sealink_proto::handshake`).
//!
//! The lists are the standard ones (libsodium's `crypto_scalarmult` and `ge25519_has_small_order`
//! blocklists): they are complete for the encodings below 2^255 and are compared with the top
//! bit masked, because X25519 ignores that bit and Ed25519 keeps the sign of x there.

/// Montgomery u-coordinates of the points of order 1, 2, 4 and 8 (and the non-canonical
/// encodings p, p + 1 of 0 and 1).
const X25519_SMALL_ORDER: [[u8; 32]; 7] = [
    // u = 0: the point (0, 0), of order 2.
    [0; 32],
    // u = 1 (small order, on the twist).
    one(),
    // Order 8.
    [
        0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4,
        0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49,
        0xb8, 0x00,
    ],
    // Order 8.
    [
        0x5f, 0x9c, 0x95, 0xbc, 0xa3, 0x50, 0x8c, 0x24, 0xb1, 0xd0, 0xb1, 0x55, 0x9c, 0x83, 0xef,
        0x5b, 0x04, 0x44, 0x5c, 0xc4, 0x58, 0x1c, 0x8e, 0x86, 0xd8, 0x22, 0x4e, 0xdd, 0xd0, 0x9f,
        0x11, 0x57,
    ],
    // u = p - 1 = -1 (small order).
    p_plus(-1),
    // p (= 0).
    p_plus(0),
    // p + 1 (= 1).
    p_plus(1),
];

/// Edwards y-coordinates (sign bit masked) of the points of order 1, 2, 4 and 8, and the
/// non-canonical encodings p, p + 1 of 0 and 1.
const ED25519_SMALL_ORDER: [[u8; 32]; 7] = [
    // y = 0: the two points of order 4.
    [0; 32],
    // y = 1: the identity.
    one(),
    // Order 8.
    [
        0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98,
        0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53,
        0xfc, 0x05,
    ],
    // Order 8.
    [
        0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67,
        0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac,
        0x03, 0x7a,
    ],
    // y = p - 1 = -1: the point of order 2.
    p_plus(-1),
    // y = p (= 0).
    p_plus(0),
    // y = p + 1 (= 1).
    p_plus(1),
];

const fn one() -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0] = 1;
    b
}

/// Little-endian p + d for p = 2^255 - 19 and small d.
const fn p_plus(d: i8) -> [u8; 32] {
    let mut b = [0xffu8; 32];
    b[31] = 0x7f;
    b[0] = (0xed_i16 + d as i16) as u8;
    b
}

fn listed(key: &[u8; 32], list: &[[u8; 32]]) -> bool {
    let mut k = *key;
    k[31] &= 0x7f;
    list.contains(&k)
}

/// True when `public` is not a usable X25519 public key: a point of small order (or an
/// encoding of one), with which every exchange gives the all-zero secret.
pub fn x25519_public_is_degenerate(public: &[u8; 32]) -> bool {
    listed(public, &X25519_SMALL_ORDER)
}

/// True when `public` is a weak Ed25519 public key: the identity or another point of small
/// order (in any encoding), for which signatures can be forged without a private key.
pub fn ed25519_public_is_weak(public: &[u8; 32]) -> bool {
    listed(public, &ED25519_SMALL_ORDER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use curve25519_dalek::edwards::CompressedEdwardsY;
    use curve25519_dalek::montgomery::MontgomeryPoint;

    #[test]
    fn every_listed_x25519_point_gives_the_zero_secret() {
        for u in X25519_SMALL_ORDER {
            for top in [0u8, 0x80] {
                let mut k = u;
                k[31] |= top;
                assert!(x25519_public_is_degenerate(&k));
                for scalar in [[7u8; 32], [0x42; 32], [0xfe; 32]] {
                    let out = MontgomeryPoint(k).mul_clamped(scalar).to_bytes();
                    assert_eq!(out, [0; 32], "{k:02x?}");
                }
            }
        }
    }

    #[test]
    fn real_x25519_keys_are_not_degenerate() {
        for seed in 1..=50u8 {
            let public = crate::kx::x25519_public_key(&[seed; 32]).unwrap();
            assert!(!x25519_public_is_degenerate(&public));
        }
    }

    #[test]
    fn every_listed_ed25519_point_has_small_order() {
        for y in ED25519_SMALL_ORDER {
            for top in [0u8, 0x80] {
                let mut k = y;
                k[31] |= top;
                assert!(ed25519_public_is_weak(&k));
                // Some encodings (y = 0 with the sign bit set, non-canonical y) may not
                // decompress; those that do are of small order.
                if let Some(p) = CompressedEdwardsY(k).decompress() {
                    assert!(p.is_small_order(), "{k:02x?}");
                }
            }
        }
        // And the canonical ones are exactly the eight small-order points.
        let mut found: Vec<_> = curve25519_dalek::constants::EIGHT_TORSION
            .iter()
            .map(|p| p.compress().to_bytes())
            .collect();
        found.sort();
        found.dedup();
        assert_eq!(found.len(), 8);
        assert!(found.iter().all(ed25519_public_is_weak));
    }

    #[test]
    fn real_ed25519_keys_are_not_weak() {
        for seed in 1..=50u8 {
            let k = crate::sign::OwnerSigningKey::from_seed(&[seed; 32]).unwrap();
            assert!(!ed25519_public_is_weak(&k.public_key()));
        }
    }
}
