//! The underlying AEAD library called directly, with no protocol around it: the baseline the
//! `sealink-lab bench seal` ratio is measured against.
//!
//! [`RawAead`] is aws-lc-rs, [`ring_backend::RingAead`] the same thing on ring,
//! [`crate::ossl::OsslKey`] the same on OpenSSL, and [`ChosenRaw`] whichever of the three
//! [`PacketKey`](crate::PacketKey) runs on for the suite with this CPU
//! ([`crate::backend::chosen_backend`]), so that a bench compares the protocol with its own library.

use crate::{CryptoError, SuiteId};

/// Nonce length of the AEAD suites.
pub const NONCE_LEN: usize = 12;
/// Tag length of the AEAD suites.
pub const TAG_LEN: usize = 16;

macro_rules! raw_aead {
    ($(#[$meta:meta])* $name:ident, $lib:ident, $libname:literal) => {
        $(#[$meta])*
        pub struct $name {
            key: $lib::aead::LessSafeKey,
            suite: SuiteId,
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.suite.name())
            }
        }

        impl $name {
            /// Name of the library this wraps.
            pub const LIBRARY: &'static str = $libname;

            /// A key for one of the modern suites ([`SuiteId::MODERN`]); legacy suites give
            /// [`CryptoError::UnknownSuite`], a key of the wrong length
            /// [`CryptoError::BadKeyLength`].
            pub fn new(suite: SuiteId, key: &[u8]) -> Result<Self, CryptoError> {
                use $lib::aead;
                let alg = match suite {
                    SuiteId::Aes128Gcm => &aead::AES_128_GCM,
                    SuiteId::Aes256Gcm => &aead::AES_256_GCM,
                    SuiteId::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
                    _ => return Err(CryptoError::UnknownSuite(suite.name().to_owned())),
                };
                let bad_len = || CryptoError::BadKeyLength { suite: suite.name(), expected: suite.key_len(), got: key.len() };
                if key.len() != suite.key_len() {
                    return Err(bad_len());
                }
                let key = aead::UnboundKey::new(alg, key).map_err(|_| bad_len())?;
                Ok(Self { key: aead::LessSafeKey::new(key), suite })
            }

            pub fn suite(&self) -> SuiteId {
                self.suite
            }

            /// Encrypts `in_out` in place and returns the tag.
            ///
            /// # Panics
            /// Only if `in_out` exceeds the AEAD's message limit (about 64 GiB for AES-GCM).
            pub fn seal_in_place(&self, nonce: [u8; NONCE_LEN], aad: &[u8], in_out: &mut [u8]) -> [u8; TAG_LEN] {
                use $lib::aead;
                let tag = self
                    .key
                    .seal_in_place_separate_tag(aead::Nonce::assume_unique_for_key(nonce), aead::Aad::from(aad), in_out)
                    .expect("message within the AEAD's length limit");
                tag.as_ref().try_into().expect("16-byte tag")
            }

            /// Opens `in_out_with_tag` (ciphertext || 16-byte tag) in place; returns the plaintext
            /// length (plaintext at `in_out_with_tag[..n]`).
            pub fn open_in_place(&self, nonce: [u8; NONCE_LEN], aad: &[u8], in_out_with_tag: &mut [u8]) -> Result<usize, CryptoError> {
                use $lib::aead;
                self.key
                    .open_in_place(aead::Nonce::assume_unique_for_key(nonce), aead::Aad::from(aad), in_out_with_tag)
                    .map(|p| p.len())
                    .map_err(|_| CryptoError::AuthFailed)
            }
        }
    };
}

raw_aead!(
    /// aws-lc-rs AEAD called directly (AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305).
    RawAead,
    aws_lc_rs,
    "aws-lc-rs"
);

/// The same raw AEAD on ring, used only for the backend comparison.
pub mod ring_backend {
    use crate::{CryptoError, SuiteId};

    use super::{NONCE_LEN, TAG_LEN};

    raw_aead!(
        /// ring AEAD called directly (AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305).
        RingAead,
        ring,
        "ring"
    );
}

/// The raw AEAD on the library [`crate::backend::chosen_backend`] picked for the suite.
#[derive(Debug)]
pub enum ChosenRaw {
    AwsLc(RawAead),
    Ring(Box<ring_backend::RingAead>),
    OpenSsl(crate::ossl::OsslKey),
    BySize(Box<(RawAead, crate::ossl::OsslKey)>),
}

impl ChosenRaw {
    /// A key on the chosen backend (see [`RawAead::new`]).
    pub fn new(suite: SuiteId, key: &[u8]) -> Result<Self, CryptoError> {
        Self::on(crate::backend::chosen_backend(suite).0, suite, key)
    }
    /// A key on `backend`.
    pub fn on(
        backend: crate::backend::Backend,
        suite: SuiteId,
        key: &[u8],
    ) -> Result<Self, CryptoError> {
        use crate::backend::Backend;
        Ok(match backend {
            Backend::Ring => ChosenRaw::Ring(Box::new(ring_backend::RingAead::new(suite, key)?)),
            Backend::AwsLc => ChosenRaw::AwsLc(RawAead::new(suite, key)?),
            Backend::OpenSsl => ChosenRaw::OpenSsl(crate::ossl::OsslKey::new(suite, key)?),
            Backend::BySize => ChosenRaw::BySize(Box::new((
                RawAead::new(suite, key)?,
                crate::ossl::OsslKey::new(suite, key)?,
            ))),
        })
    }
    /// Name of the library.
    pub fn library(&self) -> &'static str {
        match self {
            ChosenRaw::AwsLc(_) => RawAead::LIBRARY,
            ChosenRaw::Ring(_) => ring_backend::RingAead::LIBRARY,
            ChosenRaw::OpenSsl(_) => crate::backend::Backend::OpenSsl.name(),
            ChosenRaw::BySize(_) => crate::backend::Backend::BySize.name(),
        }
    }
    /// The OpenSSL key for a message of `len` bytes, where OpenSSL seals it.
    fn ossl_for(&self, len: usize) -> Option<&crate::ossl::OsslKey> {
        match self {
            ChosenRaw::OpenSsl(k) => Some(k),
            ChosenRaw::BySize(k) if len >= crate::backend::OPENSSL_FROM => Some(&k.1),
            _ => None,
        }
    }
    /// See [`RawAead::seal_in_place`].
    pub fn seal_in_place(
        &self,
        nonce: [u8; NONCE_LEN],
        aad: &[u8],
        in_out: &mut [u8],
    ) -> [u8; TAG_LEN] {
        if let Some(k) = self.ossl_for(in_out.len()) {
            let mut tag = [0u8; TAG_LEN];
            k.seal(&nonce, aad, in_out, &mut tag)
                .expect("OpenSSL seals any message within the AEAD's length limit");
            return tag;
        }
        match self {
            ChosenRaw::AwsLc(k) => k.seal_in_place(nonce, aad, in_out),
            ChosenRaw::BySize(k) => k.0.seal_in_place(nonce, aad, in_out),
            ChosenRaw::Ring(k) => k.seal_in_place(nonce, aad, in_out),
            ChosenRaw::OpenSsl(_) => unreachable!("OpenSSL keys are sealed above"),
        }
    }
    /// See [`RawAead::open_in_place`].
    pub fn open_in_place(
        &self,
        nonce: [u8; NONCE_LEN],
        aad: &[u8],
        in_out_with_tag: &mut [u8],
    ) -> Result<usize, CryptoError> {
        let plen = in_out_with_tag
            .len()
            .checked_sub(TAG_LEN)
            .ok_or(CryptoError::AuthFailed)?;
        if let Some(k) = self.ossl_for(plen) {
            let (data, tag) = in_out_with_tag.split_at_mut(plen);
            return k.open(&nonce, aad, data, tag).map(|()| plen);
        }
        match self {
            ChosenRaw::AwsLc(k) => k.open_in_place(nonce, aad, in_out_with_tag),
            ChosenRaw::BySize(k) => k.0.open_in_place(nonce, aad, in_out_with_tag),
            ChosenRaw::Ring(k) => k.open_in_place(nonce, aad, in_out_with_tag),
            ChosenRaw::OpenSsl(_) => unreachable!("OpenSSL keys are opened above"),
        }
    }
}
