//! [`KeyKind`]: which kind of key a file or trust line holds. Its own module, so that the key
//! file parser (`keyfile`) and the typed errors (`error`) both name it without importing each
//! other. Re-exported as `keyfile::KeyKind`.

/// Which kind of key a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// A host's static X25519 key (32-byte private key).
    Host,
    /// An owner's Ed25519 signing key (32-byte seed).
    Owner,
}

impl KeyKind {
    /// Tag that starts a private key file line.
    pub const fn private_tag(self) -> &'static str {
        match self {
            KeyKind::Host => "sealink-host-private",
            KeyKind::Owner => "sealink-owner-private",
        }
    }

    /// Tag that starts a public key file line.
    pub const fn public_tag(self) -> &'static str {
        match self {
            KeyKind::Host => "sealink-host",
            KeyKind::Owner => "sealink-owner",
        }
    }

    /// Keyword used for this kind in trust files.
    pub const fn trust_keyword(self) -> &'static str {
        match self {
            KeyKind::Host => "host",
            KeyKind::Owner => "owner",
        }
    }

    pub(crate) const fn describe(self, private: bool) -> &'static str {
        match (self, private) {
            (KeyKind::Host, true) => "a host private key",
            (KeyKind::Host, false) => "a host public key",
            (KeyKind::Owner, true) => "an owner private key",
            (KeyKind::Owner, false) => "an owner public key",
        }
    }

    pub(crate) fn from_tag(tag: &str) -> Option<(KeyKind, bool)> {
        [KeyKind::Host, KeyKind::Owner]
            .into_iter()
            .find_map(|kind| {
                if tag == kind.private_tag() {
                    Some((kind, true))
                } else if tag == kind.public_tag() {
                    Some((kind, false))
                } else {
                    None
                }
            })
    }
}
