//! Typed errors of the crypto layer, and the one-line rendering of any error's chain of causes
//! ([`chain`]) that every crate above prints.

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

/// Any error and its causes on one line: `outer: cause: root cause`, the chain `anyhow`'s `{:#}`
/// prints, except that a cause whose text the message so far already contains (or an empty one)
/// is not repeated. The one helper for this: the `sealink` and `sealink-lab` binaries print it
/// after "error: ", and a receiver sends it to the sender in an abort.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    for s in std::iter::successors(e.source(), |&s| s.source()) {
        let text = s.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod chain_tests {
    use super::chain;

    #[derive(Debug, thiserror::Error)]
    #[error("{what}")]
    struct Context {
        what: &'static str,
        #[source]
        source: Option<Box<dyn std::error::Error + 'static>>,
    }

    fn ctx(what: &'static str, source: impl std::error::Error + 'static) -> Context {
        Context {
            what,
            source: Some(Box::new(source)),
        }
    }

    #[test]
    fn chain_names_every_cause_once() {
        let gone = || std::io::Error::other("gone");
        assert_eq!(chain(&gone()), "gone");
        let e = ctx("outer", ctx("cannot write /x", gone()));
        assert_eq!(chain(&e), "outer: cannot write /x: gone");
        // A cause already in the message is not repeated, nor is an empty one.
        assert_eq!(chain(&ctx("failed: gone", gone())), "failed: gone");
        assert_eq!(chain(&ctx("plain", std::io::Error::other(""))), "plain");
        let bare = Context {
            what: "plain",
            source: None,
        };
        assert_eq!(chain(&bare), "plain");
    }
}
