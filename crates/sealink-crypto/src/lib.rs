//! Cryptographic suites for sealink, built only on well-kept libraries (aws-lc-rs, ring,
//! OpenSSL's libcrypto, RustCrypto for the legacy lab transforms). Nothing here implements a
//! primitive itself.
//!
//! * [`backend`]: which library each suite runs on, chosen per CPU by measurement.
//! * [`suite`]: per-direction packet keys that seal and open datagram bodies in place, in one
//!   of three [`Scope`]s (none, authenticate-only, full encryption), singly or in batches.
//! * [`hash`]: SHA-256, stream mode's content identity of a file.
//! * [`kdf`]: HKDF-SHA-256 expansion of handshake output into suite keys, and plain HKDF.
//! * [`mac`]: HMAC-SHA-256 with a constant-time check.
//! * [`sign`]: Ed25519 owner keys and verification.
//! * [`legacy`] (feature `legacy`): DES-CBC, 3DES-CBC, MD5, HMAC-MD5, for the lab only.
//! * [`weak_keys`]: small-order X25519 and Ed25519 public keys, refused wherever keys are loaded.
//! * [`raw`] (feature `legacy`): the underlying library called directly, the baseline the
//!   benches compare against.
//!
//! The `legacy` feature is the lab's: the product binary links neither the old ciphers nor
//! the raw baselines.
#![forbid(unsafe_code)]

/// `Debug` for a type that holds secrets or bulky state: it shows only the fields named and
/// marks the rest as left out (`..`), so a private key never reaches a log line.
#[macro_export]
macro_rules! debug_showing {
    ($t:ident { $($field:ident),+ $(,)? }) => {
        impl ::std::fmt::Debug for $t {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($t))
                    $(.field(stringify!($field), &self.$field))+
                    .finish_non_exhaustive()
            }
        }
    };
}

pub mod backend;
mod dir;
pub mod error;
pub mod hash;
pub mod kdf;
pub mod kx;
#[cfg(feature = "legacy")]
pub mod legacy;
mod legacy_len;
pub mod mac;
pub mod ossl;
#[cfg(feature = "legacy")]
pub mod raw;
pub mod sign;
pub mod suite;
pub mod weak_keys;

pub use error::CryptoError;
#[cfg(feature = "legacy")]
pub use raw::RawAead;
pub use suite::{BatchItem, ContiguousItem, PacketKey, Scope, SuiteId};
pub use weak_keys::{ed25519_public_is_weak, x25519_public_is_degenerate};
