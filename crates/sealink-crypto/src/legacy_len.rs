//! The legacy suites' sizes, known in every build (their ciphers only with the `legacy`
//! feature), so that a build without them still sizes and refuses them alike. Its own module,
//! so that `suite` and `legacy` both use it without importing each other.

/// DES block size (also the IV length).
pub const DES_BLOCK: usize = 8;
/// DES key length (64 bits including the parity bits, which DES ignores).
pub const DES_KEY: usize = 8;
/// Three-key 3DES (EDE3): K1 || K2 || K3.
pub const TDES_KEY: usize = 24;
/// MD5 digest and HMAC-MD5 tag.
pub const MD5: usize = 16;
