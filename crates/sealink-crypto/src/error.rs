//! Typed errors of the crypto layer.

/// Everything that can go wrong in this crate. Opening failures deliberately carry no detail
/// beyond "did not verify", so a caller cannot leak why to a peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CryptoError {
    /// The tag or MAC did not verify, or the ciphertext was malformed (bad padding, short).
    #[error("authentication failed")]
    AuthFailed,
    /// The caller's buffer has no room for the tag/padding that sealing adds.
    #[error("buffer too small: need {need} bytes, have {have}")]
    BufferTooSmall { need: usize, have: usize },
    /// Key material of the wrong length for the suite.
    #[error("bad key length for {suite}: expected {expected}, got {got}")]
    BadKeyLength {
        suite: &'static str,
        expected: usize,
        got: usize,
    },
    /// A legacy (insecure) suite was requested without the explicit opt-in.
    #[error("suite {0} is insecure and only usable with the explicit insecure-legacy opt-in")]
    LegacyRefused(&'static str),
    /// A legacy suite's key asked of a build without the `legacy` feature (the product's: only
    /// the lab links DES, 3DES and MD5).
    #[error("suite {0} is not in this build (sealink-crypto's `legacy` feature, the lab's)")]
    LegacyNotBuilt(&'static str),
    /// A legacy suite named where only the modern ones are offered ([`crate::SuiteId::parse_modern`]).
    #[error("suite {0} is a legacy lab suite; choose aes128-gcm, aes256-gcm or chacha20-poly1305")]
    NotModern(&'static str),
    /// An unknown suite name or id.
    #[error("unknown suite {0:?}")]
    UnknownSuite(String),
    /// A malformed public key or signature encoding.
    #[error("malformed key or signature")]
    Malformed,
    /// The AEAD library refused a call that valid lengths never make it refuse (a context it
    /// could not allocate, say).
    #[error("crypto library failure: {0}")]
    Library(&'static str),
    /// The system random generator failed.
    #[error("random generator failure")]
    Rng,
}
