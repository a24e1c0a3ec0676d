//! The AEAD suites on OpenSSL's libcrypto (the `openssl` crate over the system's libssl3).
//!
//! Why OpenSSL: its ChaCha20 and Poly1305 have AVX-512 code, which aws-lc-rs and ring lack
//! ([`crate::backend`]). Why this shape: OpenSSL's per-call cost is in setting up an
//! `EVP_CIPHER_CTX`, not in the cipher. A context is allocated once per thread, direction and
//! suite and kept; a packet then only sets its nonce (and the key, when the thread's last packet
//! in that direction used another one), feeds the AAD, runs the cipher in place and reads or
//! checks the tag: the sequence `openssl speed -aead` times. Keys are shared between threads
//! (`PacketKey` is `Sync`), contexts never are.
//!
//! Key hygiene: [`OsslKey`] wipes its copy of the key on drop. A thread's context keeps the key
//! it last used until that thread seals or opens under another key (which overwrites it) or
//! exits (OpenSSL cleanses the context when it frees it).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use openssl::cipher::{Cipher, CipherRef};
use openssl::cipher_ctx::{CipherCtx, CipherCtxRef};
use zeroize::Zeroizing;

use crate::{CryptoError, SuiteId};

/// Tag length of the AEAD suites.
const TAG_LEN: usize = 16;

/// Distinguishes keys in the per-thread contexts (a key's address could be reused).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One suite's key for OpenSSL. `Send + Sync`: it holds only the key bytes.
pub struct OsslKey {
    suite: SuiteId,
    /// Which of a thread's contexts this suite uses.
    slot: usize,
    id: u64,
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for OsslKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OsslKey({})", self.suite.name())
    }
}

/// The three modern suites, in context-slot order.
const SUITES: usize = 3;

fn cipher(slot: usize) -> &'static CipherRef {
    match slot {
        0 => Cipher::aes_128_gcm(),
        1 => Cipher::aes_256_gcm(),
        _ => Cipher::chacha20_poly1305(),
    }
}

/// A context and the key it holds now.
struct Ctx {
    key_id: u64,
    ctx: CipherCtx,
}

thread_local! {
    /// This thread's contexts: [seal, open] x suite.
    static CTXS: RefCell<[[Option<Ctx>; SUITES]; 2]> = const {
        RefCell::new([[None, None, None], [None, None, None]])
    };
}

/// Anything OpenSSL reports while setting up or running a context (none is expected with
/// valid lengths).
fn library_error(_: openssl::error::ErrorStack) -> CryptoError {
    CryptoError::Library("OpenSSL's EVP cipher call failed")
}

/// Feeds `aad`, then `data` in place (encrypted or decrypted, as `ctx` was set up), to `ctx`;
/// an empty one is skipped.
fn update(ctx: &mut CipherCtxRef, aad: &[u8], data: &mut [u8]) -> Result<(), CryptoError> {
    if !aad.is_empty() {
        ctx.cipher_update(aad, None).map_err(library_error)?;
    }
    let len = data.len();
    if len > 0 {
        ctx.cipher_update_inplace(data, len)
            .map_err(library_error)?;
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Way {
    Seal = 0,
    Open = 1,
}

impl OsslKey {
    /// A key for one of the modern suites; legacy ones give [`CryptoError::UnknownSuite`], a
    /// key of the wrong length [`CryptoError::BadKeyLength`].
    pub fn new(suite: SuiteId, key: &[u8]) -> Result<Self, CryptoError> {
        let slot = match suite {
            SuiteId::Aes128Gcm => 0,
            SuiteId::Aes256Gcm => 1,
            SuiteId::ChaCha20Poly1305 => 2,
            _ => return Err(CryptoError::UnknownSuite(suite.name().to_owned())),
        };
        if key.len() != suite.key_len() {
            return Err(CryptoError::BadKeyLength {
                suite: suite.name(),
                expected: suite.key_len(),
                got: key.len(),
            });
        }
        Ok(OsslKey {
            suite,
            slot,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            key: Zeroizing::new(key.to_vec()),
        })
    }

    pub fn suite(&self) -> SuiteId {
        self.suite
    }

    /// Runs `f` on this thread's context for `way`, initialised with this key and `nonce`.
    fn with_ctx<R>(
        &self,
        way: Way,
        nonce: &[u8; 12],
        f: impl FnOnce(&mut CipherCtxRef) -> Result<R, CryptoError>,
    ) -> Result<R, CryptoError> {
        CTXS.with_borrow_mut(|all| {
            let slot = &mut all[way as usize][self.slot];
            let init = |ctx: &mut CipherCtxRef,
                        cipher: Option<&CipherRef>,
                        key: Option<&[u8]>|
             -> Result<(), openssl::error::ErrorStack> {
                match way {
                    Way::Seal => ctx.encrypt_init(cipher, key, Some(nonce)),
                    Way::Open => ctx.decrypt_init(cipher, key, Some(nonce)),
                }
            };
            let ready = match slot {
                // The same key as this thread's last packet: the nonce is all that changes.
                Some(c) if c.key_id == self.id => init(&mut c.ctx, None, None),
                Some(c) => init(&mut c.ctx, None, Some(&self.key)).map(|()| c.key_id = self.id),
                None => {
                    let mut ctx = CipherCtx::new().map_err(library_error)?;
                    // The cipher first, then the key: `encrypt_init` checks the key's length
                    // against the cipher set in the context.
                    init(&mut ctx, Some(cipher(self.slot)), None)
                        .and_then(|()| init(&mut ctx, None, Some(&self.key)))
                        .map(|()| {
                            *slot = Some(Ctx {
                                key_id: self.id,
                                ctx,
                            })
                        })
                }
            };
            if let Err(e) = ready {
                // A context in an unknown state is not reused.
                *slot = None;
                return Err(library_error(e));
            }
            let ctx = &mut slot.as_mut().expect("initialised above").ctx;
            f(ctx)
        })
    }

    /// Encrypts `data` in place with AAD `aad` under `nonce`; writes the 16-byte tag to `tag`.
    pub fn seal(
        &self,
        nonce: &[u8; 12],
        aad: &[u8],
        data: &mut [u8],
        tag: &mut [u8],
    ) -> Result<(), CryptoError> {
        self.with_ctx(Way::Seal, nonce, |ctx| {
            update(ctx, aad, data)?;
            ctx.cipher_final(&mut []).map_err(library_error)?;
            ctx.tag(tag).map_err(library_error)
        })
    }

    /// Checks `tag` over `aad` and the ciphertext `data` under `nonce`, decrypting `data` in
    /// place. On failure `data`'s contents are unspecified (the caller drops the packet).
    pub fn open(
        &self,
        nonce: &[u8; 12],
        aad: &[u8],
        data: &mut [u8],
        tag: &[u8],
    ) -> Result<(), CryptoError> {
        if tag.len() != TAG_LEN {
            return Err(CryptoError::AuthFailed);
        }
        self.with_ctx(Way::Open, nonce, |ctx| {
            ctx.set_tag(tag).map_err(library_error)?;
            update(ctx, aad, data)?;
            // The tag is checked here; a mismatch is the one failure expected in operation.
            ctx.cipher_final(&mut [])
                .map(|_| ())
                .map_err(|_| CryptoError::AuthFailed)
        })
    }
}
