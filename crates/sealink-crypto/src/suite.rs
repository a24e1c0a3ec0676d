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
//!
//! The AEAD suites run on aws-lc-rs, ring or OpenSSL ([`Backend`]), all compiled in.
//! [`PacketKey::new`] takes the one [`chosen_backend`] picks for the suite once per process from
//! the CPU's features (overridable with [`BACKEND_ENV`]); [`PacketKey::with_backend`] names one.
//! All give the same bytes.

use std::cell::RefCell;

use crate::CryptoError;
pub use crate::backend::{BACKEND_ENV, Backend, OPENSSL_FROM, chosen_backend};
use crate::dir::Dir;
#[cfg(feature = "legacy")]
use crate::legacy::LegacyKey;
use crate::legacy_len;
use crate::ossl::OsslKey;

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
    /// AES blocks one key may seal, counting each message's blocks plus one for its tag, or
    /// `None` where the amount sealed is not what bounds the key. AES-GCM: 2^36, so the
    /// confidentiality advantage (σ + q + 1)² / 2^129 stays below 2^-57, TLS 1.3's margin (RFC
    /// 8446 §5.5, draft-irtf-cfrg-aead-limits). ChaCha20-Poly1305 is bounded by its nonce space
    /// (the counters); the legacy suites are the lab's and insecure whatever the volume.
    pub const fn aead_block_limit(self) -> Option<u64> {
        match self {
            SuiteId::Aes128Gcm | SuiteId::Aes256Gcm => Some(1 << 36),
            _ => None,
        }
    }

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
    /// Parses the name of one of the modern (AEAD) suites, as a command line takes it (trimmed,
    /// case-insensitive); a legacy suite is refused: those exist only for the lab's reruns.
    pub fn parse_modern(name: &str) -> Result<Self, CryptoError> {
        let suite = SuiteId::from_name(name.trim())?;
        if suite.is_legacy() {
            return Err(CryptoError::NotModern(suite.name()));
        }
        Ok(suite)
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
            SuiteId::LegacyDesCbcHmacMd5 => legacy_len::DES_KEY + LEGACY_MAC_KEY_LEN,
            SuiteId::Legacy3DesCbcHmacMd5 => legacy_len::TDES_KEY + LEGACY_MAC_KEY_LEN,
        }
    }
    /// The most bytes sealing can add after a body of `len` bytes in any scope.
    pub fn max_overhead(self) -> usize {
        if self.is_legacy() {
            legacy_len::DES_BLOCK + legacy_len::MD5
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
/// Nonce = 4 zero bytes || counter (little endian).
#[inline]
fn nonce_bytes(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    n
}

/// The one AEAD operation pair [`PacketKey`] needs, over both libraries' `LessSafeKey`. Each
/// packet dispatches once (the `match` on [`Inner`]), then runs monomorphized code.
trait AeadLib {
    /// Encrypts `data` in place with AAD `aad`; writes the tag to `tag` (`TAG_LEN` bytes).
    fn seal_tag(
        &self,
        counter: u64,
        aad: &[u8],
        data: &mut [u8],
        tag: &mut [u8],
    ) -> Result<(), CryptoError>;
    /// Checks `tag` and decrypts `data` in place.
    fn open_tag(
        &self,
        counter: u64,
        aad: &[u8],
        data: &mut [u8],
        tag: &[u8],
    ) -> Result<(), CryptoError>;
}

/// `seal_tag` reads the same on both libraries (their `seal_in_place_separate_tag` agree).
macro_rules! seal_tag_via {
    ($lib:ident) => {
        #[inline]
        fn seal_tag(
            &self,
            counter: u64,
            aad: &[u8],
            data: &mut [u8],
            tag: &mut [u8],
        ) -> Result<(), CryptoError> {
            use $lib::aead::{Aad, Nonce};
            let t = self
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce_bytes(counter)),
                    Aad::from(aad),
                    data,
                )
                .map_err(|_| CryptoError::Malformed)?;
            tag.copy_from_slice(t.as_ref());
            Ok(())
        }
    };
}

impl AeadLib for aws_lc_rs::aead::LessSafeKey {
    seal_tag_via!(aws_lc_rs);
    #[inline]
    fn open_tag(
        &self,
        counter: u64,
        aad: &[u8],
        data: &mut [u8],
        tag: &[u8],
    ) -> Result<(), CryptoError> {
        use aws_lc_rs::aead::{Aad, Nonce};
        self.open_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce_bytes(counter)),
            Aad::from(aad),
            tag,
            data,
        )
        .map(|_| ())
        .map_err(|_| CryptoError::AuthFailed)
    }
}

impl AeadLib for ring::aead::LessSafeKey {
    seal_tag_via!(ring);
    #[inline]
    fn open_tag(
        &self,
        counter: u64,
        aad: &[u8],
        data: &mut [u8],
        tag: &[u8],
    ) -> Result<(), CryptoError> {
        use ring::aead::{Aad, Nonce, Tag};
        let tag = Tag::try_from(tag).map_err(|_| CryptoError::AuthFailed)?;
        self.open_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce_bytes(counter)),
            Aad::from(aad),
            tag,
            data,
            0..,
        )
        .map(|_| ())
        .map_err(|_| CryptoError::AuthFailed)
    }
}

impl AeadLib for OsslKey {
    #[inline]
    fn seal_tag(
        &self,
        counter: u64,
        aad: &[u8],
        data: &mut [u8],
        tag: &mut [u8],
    ) -> Result<(), CryptoError> {
        self.seal(&nonce_bytes(counter), aad, data, tag)
    }
    #[inline]
    fn open_tag(
        &self,
        counter: u64,
        aad: &[u8],
        data: &mut [u8],
        tag: &[u8],
    ) -> Result<(), CryptoError> {
        self.open(&nonce_bytes(counter), aad, data, tag)
    }
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

/// [`PacketKey::seal`] or [`PacketKey::open`] for an AEAD suite and a protecting scope (`len`
/// already checked).
#[inline]
fn aead_apply<K: AeadLib>(
    k: &K,
    dir: Dir,
    counter: u64,
    scope: Scope,
    header: &[u8],
    body: &mut [u8],
    len: usize,
) -> Result<usize, CryptoError> {
    match dir {
        Dir::Seal => {
            let need = len + TAG_LEN;
            if body.len() < need {
                return Err(CryptoError::BufferTooSmall {
                    need,
                    have: body.len(),
                });
            }
            let (data, rest) = body.split_at_mut(len);
            let tag = &mut rest[..TAG_LEN];
            if scope == Scope::Encrypt {
                k.seal_tag(counter, header, data, tag)?;
            } else {
                // AuthOnly: the tag of an empty-plaintext seal with AAD = header || data.
                with_joined(header, data, |aad| k.seal_tag(counter, aad, &mut [], tag))?;
            }
            Ok(need)
        }
        Dir::Open => {
            let plen = len.checked_sub(TAG_LEN).ok_or(CryptoError::AuthFailed)?;
            let (data, tag) = body[..len].split_at_mut(plen);
            if scope == Scope::Encrypt {
                k.open_tag(counter, header, data, tag)?;
            } else {
                with_joined(header, data, |aad| k.open_tag(counter, aad, &mut [], tag))?;
            }
            Ok(plen)
        }
    }
}

/// [`PacketKey::seal_contiguous`] or [`PacketKey::open_contiguous`] for an AEAD suite in
/// [`Scope::AuthOnly`]: no copy.
#[inline]
fn aead_auth_contiguous<K: AeadLib>(
    k: &K,
    dir: Dir,
    counter: u64,
    buf: &mut [u8],
    header_len: usize,
    len: usize,
) -> Result<usize, CryptoError> {
    check_len(&buf[header_len..], len)?;
    match dir {
        Dir::Seal => {
            let end = header_len + len;
            if buf.len() < end + TAG_LEN {
                return Err(CryptoError::BufferTooSmall {
                    need: len + TAG_LEN,
                    have: buf.len() - header_len,
                });
            }
            let (aad, rest) = buf.split_at_mut(end);
            k.seal_tag(counter, aad, &mut [], &mut rest[..TAG_LEN])?;
            Ok(len + TAG_LEN)
        }
        Dir::Open => {
            let plen = len.checked_sub(TAG_LEN).ok_or(CryptoError::AuthFailed)?;
            let (aad, tag) = buf[..header_len + len].split_at(header_len + plen);
            k.open_tag(counter, aad, &mut [], tag)?;
            Ok(plen)
        }
    }
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

/// Key wiping on drop: aws-lc-rs keys live in an `EVP_AEAD_CTX` that aws-lc frees with
/// `OPENSSL_free`, which cleanses the allocation; the DES/3DES key schedules wipe themselves
/// (the `des` crate's `zeroize` feature). ring's key schedule is plain data with no wipe hook
/// (and this crate forbids the unsafe code it would take), and the HMAC-MD5 state of the legacy
/// suites is not wiped either. [`OsslKey`] wipes its key (see its module for its contexts).
enum Inner {
    AwsLc(aws_lc_rs::aead::LessSafeKey),
    OpenSsl(OsslKey),
    // Boxed: two keys; the size decides per packet.
    BySize(Box<(aws_lc_rs::aead::LessSafeKey, OsslKey)>),
    // Boxed: ring keeps its key schedule and GHASH table inline (over 500 bytes); aws-lc-rs's
    // key is a pointer to its context already. One indirection either way, none allocated per
    // packet.
    Ring(Box<ring::aead::LessSafeKey>),
    // Boxed: the key schedules are large, and legacy keys are rare (lab only).
    #[cfg(feature = "legacy")]
    Des(Box<LegacyKey<des::Des>>),
    #[cfg(feature = "legacy")]
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

/// [`PacketKey`]'s public entry points for one [`Dir`]: split form, contiguous form, and their
/// batches. Each forwards to `apply` / `apply_contiguous`.
macro_rules! entry_points {
    (
        $dir:expr,
        $(#[$one_doc:meta])* fn $one:ident,
        $(#[$contiguous_doc:meta])* fn $contiguous:ident,
        $(#[$batch_doc:meta])* fn $batch:ident,
        $(#[$batch_contiguous_doc:meta])* fn $batch_contiguous:ident
    ) => {
        $(#[$one_doc])*
        pub fn $one(
            &self,
            counter: u64,
            scope: Scope,
            header: &[u8],
            body: &mut [u8],
            len: usize,
        ) -> Result<usize, CryptoError> {
            self.apply($dir, counter, scope, header, body, len)
        }
        $(#[$contiguous_doc])*
        pub fn $contiguous(
            &self,
            counter: u64,
            scope: Scope,
            buf: &mut [u8],
            header_len: usize,
            len: usize,
        ) -> Result<usize, CryptoError> {
            self.apply_contiguous($dir, counter, scope, buf, header_len, len)
        }
        $(#[$batch_doc])*
        pub fn $batch(&self, scope: Scope, items: &mut [BatchItem<'_>]) {
            for it in items {
                it.result = self.apply($dir, it.counter, scope, it.header, it.body, it.len);
            }
        }
        $(#[$batch_contiguous_doc])*
        pub fn $batch_contiguous(&self, scope: Scope, items: &mut [ContiguousItem<'_>]) {
            for it in items {
                it.result =
                    self.apply_contiguous($dir, it.counter, scope, it.buf, it.header_len, it.len);
            }
        }
    };
}

impl PacketKey {
    /// Builds a key; refuses legacy suites unless `allow_insecure_legacy`. AEAD suites run on
    /// the backend [`chosen_backend`] picks for the suite on this CPU.
    pub fn new(
        suite: SuiteId,
        key: &[u8],
        allow_insecure_legacy: bool,
    ) -> Result<Self, CryptoError> {
        Self::with_backend(chosen_backend(suite).0, suite, key, allow_insecure_legacy)
    }
    /// Like [`new`](Self::new), with the AEAD suites on `backend` (legacy suites ignore it):
    /// for tests and benches that compare the backends.
    pub fn with_backend(
        backend: Backend,
        suite: SuiteId,
        key: &[u8],
        allow_insecure_legacy: bool,
    ) -> Result<Self, CryptoError> {
        if suite.is_legacy() && !allow_insecure_legacy {
            return Err(CryptoError::LegacyRefused(suite.name()));
        }
        let expected = suite.key_len();
        let bad_len = || CryptoError::BadKeyLength {
            suite: suite.name(),
            expected,
            got: key.len(),
        };
        if key.len() != expected {
            return Err(bad_len());
        }
        // The same algorithm constant, on the chosen library.
        macro_rules! aead {
            ($alg:ident) => {
                match backend {
                    Backend::AwsLc => {
                        use aws_lc_rs::aead::{LessSafeKey, UnboundKey, $alg};
                        let k = UnboundKey::new(&$alg, key).map_err(|_| bad_len())?;
                        Inner::AwsLc(LessSafeKey::new(k))
                    }
                    Backend::Ring => {
                        use ring::aead::{LessSafeKey, UnboundKey, $alg};
                        let k = UnboundKey::new(&$alg, key).map_err(|_| bad_len())?;
                        Inner::Ring(Box::new(LessSafeKey::new(k)))
                    }
                    Backend::OpenSsl => Inner::OpenSsl(OsslKey::new(suite, key)?),
                    Backend::BySize => {
                        use aws_lc_rs::aead::{LessSafeKey, UnboundKey, $alg};
                        let k = UnboundKey::new(&$alg, key).map_err(|_| bad_len())?;
                        Inner::BySize(Box::new((LessSafeKey::new(k), OsslKey::new(suite, key)?)))
                    }
                }
            };
        }
        #[cfg(feature = "legacy")]
        let mac_split = key.len() - LEGACY_MAC_KEY_LEN;
        let inner = match suite {
            SuiteId::Aes128Gcm => aead!(AES_128_GCM),
            SuiteId::Aes256Gcm => aead!(AES_256_GCM),
            SuiteId::ChaCha20Poly1305 => aead!(CHACHA20_POLY1305),
            #[cfg(feature = "legacy")]
            SuiteId::LegacyDesCbcHmacMd5 => Inner::Des(Box::new(LegacyKey::new(
                &key[..mac_split],
                &key[mac_split..],
            )?)),
            #[cfg(feature = "legacy")]
            SuiteId::Legacy3DesCbcHmacMd5 => Inner::Tdes(Box::new(LegacyKey::new(
                &key[..mac_split],
                &key[mac_split..],
            )?)),
            #[cfg(not(feature = "legacy"))]
            SuiteId::LegacyDesCbcHmacMd5 | SuiteId::Legacy3DesCbcHmacMd5 => {
                return Err(CryptoError::LegacyNotBuilt(suite.name()));
            }
        };
        Ok(Self { suite, inner })
    }
    /// The AEAD library this key runs on; `None` for the legacy suites.
    pub fn backend(&self) -> Option<Backend> {
        match self.inner {
            Inner::AwsLc(_) => Some(Backend::AwsLc),
            Inner::Ring(_) => Some(Backend::Ring),
            Inner::OpenSsl(_) => Some(Backend::OpenSsl),
            Inner::BySize(_) => Some(Backend::BySize),
            #[cfg(feature = "legacy")]
            Inner::Des(_) | Inner::Tdes(_) => None,
        }
    }
    pub fn suite(&self) -> SuiteId {
        self.suite
    }
    entry_points!(
        Dir::Seal,
        /// Seals `body[..len]` in place; returns the sealed length (`len` + tag, or padded + MAC).
        /// `body` must have room for `len + suite.max_overhead()` bytes. No allocation.
        ///
        /// For AEAD suites in [`Scope::AuthOnly`] this copies `header || body[..len]` into a
        /// scratch buffer (the AEAD needs the AAD contiguous);
        /// [`seal_contiguous`](Self::seal_contiguous) avoids the copy and gives the same bytes.
        fn seal,
        /// Seals the body `buf[header_len..header_len + len]` in place, authenticating the header
        /// `buf[..header_len]`; returns the body's sealed length. Same bytes as
        /// [`seal`](Self::seal) with `header = &buf[..header_len]`,
        /// `body = &mut buf[header_len..]`; never copies.
        fn seal_contiguous,
        /// Seals every item of a batch (one call amortises dispatch over many packets).
        fn seal_batch,
        /// Seals every item of a contiguous batch (see [`seal_contiguous`](Self::seal_contiguous)).
        fn seal_batch_contiguous
    );
    entry_points!(
        Dir::Open,
        /// Opens `body[..len]` in place; returns the plaintext length (plaintext at `body[..n]`).
        /// On failure the body's contents are unspecified. No allocation.
        ///
        /// Like [`seal`](Self::seal), AEAD [`Scope::AuthOnly`] copies `header || plaintext` into a
        /// scratch buffer; [`open_contiguous`](Self::open_contiguous) avoids the copy.
        fn open,
        /// Opens the body `buf[header_len..header_len + len]` in place, checking the header
        /// `buf[..header_len]`; returns the body's plaintext length (plaintext at
        /// `buf[header_len..header_len + n]`). Never copies.
        fn open_contiguous,
        /// Opens every item of a batch.
        fn open_batch,
        /// Opens every item of a contiguous batch (see [`open_contiguous`](Self::open_contiguous)).
        fn open_batch_contiguous
    );

    /// [`seal`](Self::seal) or [`open`](Self::open): one dispatch on the key's kind.
    #[inline]
    fn apply(
        &self,
        dir: Dir,
        counter: u64,
        scope: Scope,
        header: &[u8],
        body: &mut [u8],
        len: usize,
    ) -> Result<usize, CryptoError> {
        check_len(body, len)?;
        if scope == Scope::None {
            return Ok(len);
        }
        match &self.inner {
            Inner::AwsLc(k) => aead_apply(k, dir, counter, scope, header, body, len),
            Inner::Ring(k) => aead_apply(&**k, dir, counter, scope, header, body, len),
            Inner::OpenSsl(k) => aead_apply(k, dir, counter, scope, header, body, len),
            Inner::BySize(k) if len >= OPENSSL_FROM => {
                aead_apply(&k.1, dir, counter, scope, header, body, len)
            }
            Inner::BySize(k) => aead_apply(&k.0, dir, counter, scope, header, body, len),
            #[cfg(feature = "legacy")]
            Inner::Des(k) => k.apply(dir, counter, scope == Scope::Encrypt, header, body, len),
            #[cfg(feature = "legacy")]
            Inner::Tdes(k) => k.apply(dir, counter, scope == Scope::Encrypt, header, body, len),
        }
    }
    /// [`seal_contiguous`](Self::seal_contiguous) or [`open_contiguous`](Self::open_contiguous).
    #[inline]
    fn apply_contiguous(
        &self,
        dir: Dir,
        counter: u64,
        scope: Scope,
        buf: &mut [u8],
        header_len: usize,
        len: usize,
    ) -> Result<usize, CryptoError> {
        check_len(buf, header_len)?;
        if scope == Scope::AuthOnly {
            match &self.inner {
                Inner::AwsLc(k) => {
                    return aead_auth_contiguous(k, dir, counter, buf, header_len, len);
                }
                Inner::Ring(k) => {
                    return aead_auth_contiguous(&**k, dir, counter, buf, header_len, len);
                }
                Inner::OpenSsl(k) => {
                    return aead_auth_contiguous(k, dir, counter, buf, header_len, len);
                }
                Inner::BySize(k) if len >= OPENSSL_FROM => {
                    return aead_auth_contiguous(&k.1, dir, counter, buf, header_len, len);
                }
                Inner::BySize(k) => {
                    return aead_auth_contiguous(&k.0, dir, counter, buf, header_len, len);
                }
                #[cfg(feature = "legacy")]
                Inner::Des(_) | Inner::Tdes(_) => {}
            }
        }
        let (header, body) = buf.split_at_mut(header_len);
        self.apply(dir, counter, scope, header, body, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_modern_takes_the_aead_suites_only() {
        assert_eq!(
            SuiteId::parse_modern(" AES128-gcm "),
            Ok(SuiteId::Aes128Gcm)
        );
        assert_eq!(
            "chacha20-poly1305".parse::<SuiteId>(),
            Ok(SuiteId::ChaCha20Poly1305)
        );
        assert_eq!(
            SuiteId::parse_modern("legacy-3des-cbc-hmac-md5"),
            Err(CryptoError::NotModern("legacy-3des-cbc-hmac-md5"))
        );
        assert!(matches!(
            SuiteId::parse_modern("rot13"),
            Err(CryptoError::UnknownSuite(_))
        ));
    }

    #[test]
    fn packet_key_is_send_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<PacketKey>();
    }

    #[test]
    fn chosen_backend_is_stable_and_used_by_new() {
        for suite in SuiteId::MODERN {
            let (b, why) = chosen_backend(suite);
            assert!(!why.is_empty());
            assert_eq!(chosen_backend(suite), (b, why));
            let k = PacketKey::new(suite, &vec![7u8; suite.key_len()], false).unwrap();
            assert_eq!(k.backend(), Some(b));
            for other in Backend::ALL {
                let k = PacketKey::with_backend(other, suite, &vec![7u8; suite.key_len()], false)
                    .unwrap();
                assert_eq!(k.backend(), Some(other));
            }
        }
        let legacy = SuiteId::LegacyDesCbcHmacMd5;
        let k = PacketKey::new(legacy, &vec![7u8; legacy.key_len()], true);
        #[cfg(feature = "legacy")]
        assert_eq!(k.unwrap().backend(), None);
        #[cfg(not(feature = "legacy"))]
        assert_eq!(k.unwrap_err(), CryptoError::LegacyNotBuilt(legacy.name()));
    }
}
