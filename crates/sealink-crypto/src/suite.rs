//! Packet keys: in-place seal/open of a datagram body under one suite and one scope.
//!
//! Layout contract (see docs/PROTOCOL.md): the caller splits its datagram buffer into the
//! cleartext `header` (authenticated, never encrypted) and the `body` that follows it.
//! * AEAD suites, [`Scope::Encrypt`]: body = ciphertext || 16-byte tag; nonce = 4 zero bytes ||
//!   counter (little endian, 8 bytes); AAD = header.
//! * AEAD suites, [`Scope::AuthOnly`]: body = plaintext || 16-byte tag, where the tag is the AEAD
//!   seal of an empty plaintext with AAD = header || plaintext (GMAC / Poly1305 over the data).
//! * Legacy suites: CBC with PKCS#7 padding, IV = block-cipher(counter block); then HMAC-MD5 over
//!   header || counter || body (encrypt-then-MAC), 16-byte tag. AuthOnly: HMAC-MD5 only.
//! * [`Scope::None`]: the body is left as is (lab baseline only; the protocol refuses it unless the
//!   insecure opt-in is given).

//!
//! Besides the split `header`/`body` form ([`PacketKey::seal`], [`PacketKey::open`]) there is a
//! contiguous form ([`PacketKey::seal_contiguous`], [`PacketKey::open_contiguous`]) where the
//! header and body sit back to back in one buffer. Both produce byte-identical output. The
//! contiguous form is the zero-copy one for AEAD [`Scope::AuthOnly`], whose AAD (header ||
//! plaintext) the AEAD libraries need as one slice; the split form copies header || plaintext
//! into a scratch buffer for that case (stack for small datagrams, else a per-thread buffer that
//! is reused across calls), so it never allocates per packet either.

use std::cell::RefCell;

use crate::CryptoError;
use crate::legacy::{self, LegacyKey};

/// How much of each datagram is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Scope {
    /// No protection at all: the lab's baseline.
    None = 0,
    /// Authenticate only (the paper's "partial encryption"): data in clear, tag over it.
    AuthOnly = 1,
    /// Full encryption (AEAD).
    Encrypt = 2,
}

impl Scope {
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Scope::None),
            1 => Some(Scope::AuthOnly),
            2 => Some(Scope::Encrypt),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Scope::None => "none",
            Scope::AuthOnly => "auth",
            Scope::Encrypt => "encrypt",
        }
    }
}

/// The suites sealink knows. Legacy suites exist for the lab and are refused by real channels
/// unless the caller opts in explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum SuiteId {
    Aes128Gcm = 1,
    Aes256Gcm = 2,
    ChaCha20Poly1305 = 3,
    LegacyDesCbcHmacMd5 = 0x81,
    Legacy3DesCbcHmacMd5 = 0x82,
}

impl SuiteId {
    /// Every suite, modern first.
    pub const ALL: [SuiteId; 5] = [
        SuiteId::Aes128Gcm,
        SuiteId::Aes256Gcm,
        SuiteId::ChaCha20Poly1305,
        SuiteId::LegacyDesCbcHmacMd5,
        SuiteId::Legacy3DesCbcHmacMd5,
    ];
    /// The modern (non-legacy) suites.
    pub const MODERN: [SuiteId; 3] = [
        SuiteId::Aes128Gcm,
        SuiteId::Aes256Gcm,
        SuiteId::ChaCha20Poly1305,
    ];

    /// Stable name used in configs and on the command line: "aes128-gcm", "aes256-gcm",
    /// "chacha20-poly1305", "legacy-des-cbc-hmac-md5", "legacy-3des-cbc-hmac-md5".
    pub fn name(self) -> &'static str {
        match self {
            SuiteId::Aes128Gcm => "aes128-gcm",
            SuiteId::Aes256Gcm => "aes256-gcm",
            SuiteId::ChaCha20Poly1305 => "chacha20-poly1305",
            SuiteId::LegacyDesCbcHmacMd5 => "legacy-des-cbc-hmac-md5",
            SuiteId::Legacy3DesCbcHmacMd5 => "legacy-3des-cbc-hmac-md5",
        }
    }
    /// Parses a [`name`](Self::name), ASCII case-insensitively.
    pub fn from_name(name: &str) -> Result<Self, CryptoError> {
        SuiteId::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| CryptoError::UnknownSuite(name.to_owned()))
    }
    pub fn from_u8(v: u8) -> Option<Self> {
        SuiteId::ALL.into_iter().find(|s| *s as u8 == v)
    }
    pub fn is_legacy(self) -> bool {
        matches!(
            self,
            SuiteId::LegacyDesCbcHmacMd5 | SuiteId::Legacy3DesCbcHmacMd5
        )
    }
    /// Bytes of key material [`PacketKey::new`] takes (legacy: cipher key || 16-byte MAC key).
    pub fn key_len(self) -> usize {
        match self {
            SuiteId::Aes128Gcm => 16,
            SuiteId::Aes256Gcm | SuiteId::ChaCha20Poly1305 => 32,
            SuiteId::LegacyDesCbcHmacMd5 => legacy::DES_KEY_LEN + LEGACY_MAC_KEY_LEN,
            SuiteId::Legacy3DesCbcHmacMd5 => legacy::TDES_KEY_LEN + LEGACY_MAC_KEY_LEN,
        }
    }
    /// The most bytes sealing can add after a body of `len` bytes in any scope.
    pub fn max_overhead(self) -> usize {
        if self.is_legacy() {
            legacy::DES_BLOCK_LEN + legacy::MD5_LEN
        } else {
            TAG_LEN
        }
    }
}

impl std::fmt::Display for SuiteId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SuiteId {
    type Err = CryptoError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SuiteId::from_name(s)
    }
}

/// Tag length of the AEAD suites.
pub const TAG_LEN: usize = 16;
/// Length of the HMAC-MD5 key at the end of a legacy suite's key material.
pub const LEGACY_MAC_KEY_LEN: usize = 16;
/// Name of the library behind [`PacketKey`]'s AEAD suites.
pub const AEAD_BACKEND: &str = backend::NAME;

/// The AEAD library behind [`PacketKey`]. aws-lc-rs and ring share this API, so switching the
/// backend is the one `use` line below (plus [`NAME`]).
mod backend {
    pub(super) use aws_lc_rs::aead::{
        AES_128_GCM, AES_256_GCM, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, Tag, UnboundKey,
    };
    pub(super) const NAME: &str = "aws-lc-rs";
}

use backend::{Aad, LessSafeKey, Nonce};

/// Nonce = 4 zero bytes || counter (little endian).
#[inline]
fn nonce(counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    Nonce::assume_unique_for_key(n)
}

/// Header || data copies for split-form AEAD AuthOnly up to this size go on the stack.
const STACK_SCRATCH: usize = 2048;

thread_local! {
    /// Larger header || data copies for split-form AEAD AuthOnly: grown once, then reused.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Calls `f` with `a || b` as one contiguous slice, without a per-call heap allocation.
fn with_joined<R>(a: &[u8], b: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    let total = a.len() + b.len();
    if total <= STACK_SCRATCH {
        let mut buf = [0u8; STACK_SCRATCH];
        buf[..a.len()].copy_from_slice(a);
        buf[a.len()..total].copy_from_slice(b);
        f(&buf[..total])
    } else {
        SCRATCH.with_borrow_mut(|v| {
            v.clear();
            v.extend_from_slice(a);
            v.extend_from_slice(b);
            f(v)
        })
    }
}

/// Tag of an empty-plaintext AEAD seal with AAD = `aad` (GMAC / Poly1305 over the data).
#[inline]
fn aead_auth_tag(key: &LessSafeKey, counter: u64, aad: &[u8]) -> Result<backend::Tag, CryptoError> {
    key.seal_in_place_separate_tag(nonce(counter), Aad::from(aad), &mut [])
        .map_err(|_| CryptoError::Malformed)
}

#[inline]
fn aead_auth_verify(
    key: &LessSafeKey,
    counter: u64,
    aad: &[u8],
    tag: &[u8],
) -> Result<(), CryptoError> {
    key.open_in_place_separate_tag(nonce(counter), Aad::from(aad), tag, &mut [])
        .map(|_| ())
        .map_err(|_| CryptoError::AuthFailed)
}

#[inline]
fn check_len(body: &[u8], len: usize) -> Result<(), CryptoError> {
    if len > body.len() {
        return Err(CryptoError::BufferTooSmall {
            need: len,
            have: body.len(),
        });
    }
    Ok(())
}

enum Inner {
    Aead(LessSafeKey),
    // Boxed: the key schedules are large, and legacy keys are rare (lab only).
    Des(Box<LegacyKey<des::Des>>),
    Tdes(Box<LegacyKey<des::TdesEde3>>),
}

/// One direction's key for one suite. Cheap to share across threads (`Send + Sync`).
pub struct PacketKey {
    suite: SuiteId,
    inner: Inner,
}

impl std::fmt::Debug for PacketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PacketKey({})", self.suite().name())
    }
}

/// One packet of a batch: seal or open `body` in place, the outcome lands in `result`.
#[derive(Debug)]
pub struct BatchItem<'a> {
    pub counter: u64,
    pub header: &'a [u8],
    pub body: &'a mut [u8],
    /// Input length of `body` (plaintext length for seal; sealed length for open).
    pub len: usize,
    /// Output length on success.
    pub result: Result<usize, CryptoError>,
}

/// One packet of a contiguous batch: `buf[..header_len]` is the header, the body starts at
/// `buf[header_len]`; the outcome (the body's new length) lands in `result`.
#[derive(Debug)]
pub struct ContiguousItem<'a> {
    pub counter: u64,
    pub buf: &'a mut [u8],
    pub header_len: usize,
    /// Input length of the body (plaintext length for seal; sealed length for open).
    pub len: usize,
    /// Output length of the body on success.
    pub result: Result<usize, CryptoError>,
}

impl PacketKey {
    /// Builds a key; refuses legacy suites unless `allow_insecure_legacy`.
    pub fn new(
        suite: SuiteId,
        key: &[u8],
        allow_insecure_legacy: bool,
    ) -> Result<Self, CryptoError> {
        if suite.is_legacy() && !allow_insecure_legacy {
            return Err(CryptoError::LegacyRefused(suite.name()));
        }
        let expected = suite.key_len();
        if key.len() != expected {
            return Err(CryptoError::BadKeyLength {
                suite: suite.name(),
                expected,
                got: key.len(),
            });
        }
        let aead = |alg| {
            backend::UnboundKey::new(alg, key)
                .map(|k| Inner::Aead(LessSafeKey::new(k)))
                .map_err(|_| CryptoError::BadKeyLength {
                    suite: suite.name(),
                    expected,
                    got: key.len(),
                })
        };
        let mac_split = key.len() - LEGACY_MAC_KEY_LEN;
        let inner = match suite {
            SuiteId::Aes128Gcm => aead(&backend::AES_128_GCM)?,
            SuiteId::Aes256Gcm => aead(&backend::AES_256_GCM)?,
            SuiteId::ChaCha20Poly1305 => aead(&backend::CHACHA20_POLY1305)?,
            SuiteId::LegacyDesCbcHmacMd5 => Inner::Des(Box::new(LegacyKey::new(
                &key[..mac_split],
                &key[mac_split..],
            )?)),
            SuiteId::Legacy3DesCbcHmacMd5 => Inner::Tdes(Box::new(LegacyKey::new(
                &key[..mac_split],
                &key[mac_split..],
            )?)),
        };
        Ok(Self { suite, inner })
    }
    pub fn suite(&self) -> SuiteId {
        self.suite
    }
    /// Seals `body[..len]` in place; returns the sealed length (`len` + tag, or padded + MAC).
    /// `body` must have room for `len + suite.max_overhead()` bytes. No allocation.
    ///
    /// For AEAD suites in [`Scope::AuthOnly`] this copies `header || body[..len]` into a scratch
    /// buffer (the AEAD needs the AAD contiguous); [`seal_contiguous`](Self::seal_contiguous)
    /// avoids the copy and gives the same bytes.
    pub fn seal(
        &self,
        counter: u64,
        scope: Scope,
        header: &[u8],
        body: &mut [u8],
        len: usize,
    ) -> Result<usize, CryptoError> {
        check_len(body, len)?;
        match (scope, &self.inner) {
            (Scope::None, _) => Ok(len),
            (Scope::Encrypt, Inner::Aead(k)) => {
                let need = len + TAG_LEN;
                if body.len() < need {
                    return Err(CryptoError::BufferTooSmall {
                        need,
                        have: body.len(),
                    });
                }
                let (data, rest) = body.split_at_mut(len);
                let tag = k
                    .seal_in_place_separate_tag(nonce(counter), Aad::from(header), data)
                    .map_err(|_| CryptoError::Malformed)?;
                rest[..TAG_LEN].copy_from_slice(tag.as_ref());
                Ok(need)
            }
            (Scope::AuthOnly, Inner::Aead(k)) => {
                let need = len + TAG_LEN;
                if body.len() < need {
                    return Err(CryptoError::BufferTooSmall {
                        need,
                        have: body.len(),
                    });
                }
                let tag = with_joined(header, &body[..len], |aad| aead_auth_tag(k, counter, aad))?;
                body[len..need].copy_from_slice(tag.as_ref());
                Ok(need)
            }
            (_, Inner::Des(k)) => k.seal(counter, scope == Scope::Encrypt, header, body, len),
            (_, Inner::Tdes(k)) => k.seal(counter, scope == Scope::Encrypt, header, body, len),
        }
    }
    /// Opens `body[..len]` in place; returns the plaintext length (plaintext at `body[..n]`).
    /// On failure the body's contents are unspecified. No allocation.
    ///
    /// Like [`seal`](Self::seal), AEAD [`Scope::AuthOnly`] copies `header || plaintext` into a
    /// scratch buffer; [`open_contiguous`](Self::open_contiguous) avoids the copy.
    pub fn open(
        &self,
        counter: u64,
        scope: Scope,
        header: &[u8],
        body: &mut [u8],
        len: usize,
    ) -> Result<usize, CryptoError> {
        check_len(body, len)?;
        match (scope, &self.inner) {
            (Scope::None, _) => Ok(len),
            (Scope::Encrypt, Inner::Aead(k)) => {
                let plen = len.checked_sub(TAG_LEN).ok_or(CryptoError::AuthFailed)?;
                let (data, tag) = body[..len].split_at_mut(plen);
                k.open_in_place_separate_tag(nonce(counter), Aad::from(header), tag, data)
                    .map_err(|_| CryptoError::AuthFailed)?;
                Ok(plen)
            }
            (Scope::AuthOnly, Inner::Aead(k)) => {
                let plen = len.checked_sub(TAG_LEN).ok_or(CryptoError::AuthFailed)?;
                let (data, tag) = body[..len].split_at(plen);
                with_joined(header, data, |aad| aead_auth_verify(k, counter, aad, tag))?;
                Ok(plen)
            }
            (_, Inner::Des(k)) => k.open(counter, scope == Scope::Encrypt, header, body, len),
            (_, Inner::Tdes(k)) => k.open(counter, scope == Scope::Encrypt, header, body, len),
        }
    }
    /// Seals the body `buf[header_len..header_len + len]` in place, authenticating the header
    /// `buf[..header_len]`; returns the body's sealed length. Same bytes as [`seal`](Self::seal)
    /// with `header = &buf[..header_len]`, `body = &mut buf[header_len..]`; never copies.
    pub fn seal_contiguous(
        &self,
        counter: u64,
        scope: Scope,
        buf: &mut [u8],
        header_len: usize,
        len: usize,
    ) -> Result<usize, CryptoError> {
        check_len(buf, header_len)?;
        let (header, body) = buf.split_at_mut(header_len);
        let Inner::Aead(k) = &self.inner else {
            return self.seal(counter, scope, header, body, len);
        };
        if scope != Scope::AuthOnly {
            return self.seal(counter, scope, header, body, len);
        }
        check_len(body, len)?;
        let end = header_len + len;
        let need = end + TAG_LEN;
        if buf.len() < need {
            return Err(CryptoError::BufferTooSmall {
                need: len + TAG_LEN,
                have: buf.len() - header_len,
            });
        }
        let (aad, rest) = buf.split_at_mut(end);
        let tag = aead_auth_tag(k, counter, aad)?;
        rest[..TAG_LEN].copy_from_slice(tag.as_ref());
        Ok(len + TAG_LEN)
    }
    /// Opens the body `buf[header_len..header_len + len]` in place, checking the header
    /// `buf[..header_len]`; returns the body's plaintext length (plaintext at
    /// `buf[header_len..header_len + n]`). Never copies.
    pub fn open_contiguous(
        &self,
        counter: u64,
        scope: Scope,
        buf: &mut [u8],
        header_len: usize,
        len: usize,
    ) -> Result<usize, CryptoError> {
        check_len(buf, header_len)?;
        let (header, body) = buf.split_at_mut(header_len);
        let Inner::Aead(k) = &self.inner else {
            return self.open(counter, scope, header, body, len);
        };
        if scope != Scope::AuthOnly {
            return self.open(counter, scope, header, body, len);
        }
        check_len(body, len)?;
        let plen = len.checked_sub(TAG_LEN).ok_or(CryptoError::AuthFailed)?;
        let (aad, tag) = buf[..header_len + len].split_at(header_len + plen);
        aead_auth_verify(k, counter, aad, tag)?;
        Ok(plen)
    }
    /// Seals every item of a batch (one call amortises dispatch over many packets).
    pub fn seal_batch(&self, scope: Scope, items: &mut [BatchItem<'_>]) {
        for it in items {
            it.result = self.seal(it.counter, scope, it.header, it.body, it.len);
        }
    }
    /// Opens every item of a batch.
    pub fn open_batch(&self, scope: Scope, items: &mut [BatchItem<'_>]) {
        for it in items {
            it.result = self.open(it.counter, scope, it.header, it.body, it.len);
        }
    }
    /// Seals every item of a contiguous batch (see [`seal_contiguous`](Self::seal_contiguous)).
    pub fn seal_batch_contiguous(&self, scope: Scope, items: &mut [ContiguousItem<'_>]) {
        for it in items {
            it.result = self.seal_contiguous(it.counter, scope, it.buf, it.header_len, it.len);
        }
    }
    /// Opens every item of a contiguous batch (see [`open_contiguous`](Self::open_contiguous)).
    pub fn open_batch_contiguous(&self, scope: Scope, items: &mut [ContiguousItem<'_>]) {
        for it in items {
            it.result = self.open_contiguous(it.counter, scope, it.buf, it.header_len, it.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_key_is_send_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<PacketKey>();
    }
}
