//! Errors from key and trust files: typed, with messages meant to be shown as they are.

use std::io;
use std::path::PathBuf;

use crate::kind::KeyKind;
use crate::secure_file::InsecureFile;

/// Errors from reading or writing key and trust files.
///
/// The messages are meant to be shown to the user as they are.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    /// A key file does not exist.
    #[error(
        "{what} file {} does not exist; create one with `sealink keygen`",
        path.display()
    )]
    NotFound {
        /// Which file was wanted, e.g. "host private key".
        what: &'static str,
        path: PathBuf,
    },
    /// An I/O error other than a missing key file.
    #[error("cannot {action} {what} file {}: {error}", path.display())]
    Io {
        /// "read", "create", "write", ...
        action: &'static str,
        /// "host private key", "trust", ...
        what: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    /// Refused to replace an existing file.
    #[error(
        "{} already exists; refusing to overwrite it (remove it first, or use --force to replace it)",
        path.display()
    )]
    AlreadyExists { path: PathBuf },
    /// A private key file is accessible by group or others.
    #[error(
        "permissions {mode:04o} for {} are too open: a private key file must not be accessible by group or others; run `chmod 600 {}`",
        path.display(),
        path.display()
    )]
    PermissionsTooOpen { path: PathBuf, mode: u32 },
    /// The key is of another kind than expected.
    #[error("{}: expected {expected}, but this is {found}", origin(path))]
    WrongKind {
        /// The file, or `None` when parsing a string.
        path: Option<PathBuf>,
        expected: &'static str,
        found: &'static str,
    },
    /// Not a sealink key at all.
    #[error(
        "{}: not a sealink key file ({problem}); expected one line `{expected_tag} <base64>`",
        origin(path)
    )]
    Malformed {
        path: Option<PathBuf>,
        expected_tag: &'static str,
        problem: &'static str,
    },
    /// The key text is not valid padded standard base64.
    #[error("{}: key is not valid base64 ({error})", origin(path))]
    BadBase64 {
        path: Option<PathBuf>,
        error: base64::DecodeError,
    },
    /// The key decodes to the wrong number of bytes.
    #[error("{}: key is {len} bytes long, expected 32", origin(path))]
    WrongLength { path: Option<PathBuf>, len: usize },
    /// The system random number generator failed.
    #[error("the system random number generator failed")]
    Random,
    /// The cryptographic library rejected a private key.
    #[error("cannot derive a public key from {what}: the key was rejected")]
    InvalidKey { what: &'static str },
    /// A public key of small order (all-zero included): see [`weak_reason`].
    #[error("{}: {}", origin(path), weak_reason(*kind))]
    WeakKey {
        path: Option<PathBuf>,
        kind: KeyKind,
    },
    /// A key or trust file that other users could have written.
    #[error(transparent)]
    Insecure(#[from] InsecureFile),
    /// The protocol core refused a key or a trusted name.
    #[error(transparent)]
    Proto(#[from] sealink_proto::Error),
    /// A trust file entry is wrong.
    #[error("{}: {problem}", trust_location(path, *line))]
    Trust {
        /// The file, or `None` when parsing a string.
        path: Option<PathBuf>,
        /// 1-based line number.
        line: usize,
        problem: TrustProblem,
    },
}

/// What is wrong with a trust file line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TrustProblem {
    /// The first word is neither `owner` nor `host`.
    #[error("unknown entry kind {0:?}; expected `owner NAME BASE64` or `host NAME BASE64`")]
    UnknownKind(String),
    /// Too few or too many words.
    #[error("expected `{keyword} NAME BASE64`, found {fields} field(s)")]
    WrongFieldCount {
        keyword: &'static str,
        fields: usize,
    },
    /// The name is empty, too long or has characters outside the allowed set.
    #[error("invalid name {0:?}: a name is 1 to 64 characters from A-Z a-z 0-9 . _ @ + -")]
    BadName(String),
    /// The key is not valid padded standard base64.
    #[error("key is not valid base64 ({0})")]
    BadBase64(base64::DecodeError),
    /// The key does not decode to 32 bytes.
    #[error("key is {0} bytes long, expected 32")]
    WrongLength(usize),
    /// The key is of small order (all-zero included): see [`weak_reason`].
    #[error("{}", weak_reason(*.0))]
    WeakKey(KeyKind),
    /// The same name was already listed with another key.
    #[error("{keyword} {name} is already listed with a different key on line {first_line}")]
    DuplicateName {
        keyword: &'static str,
        name: String,
        first_line: usize,
    },
}

/// Why a small-order public key of `kind` is refused.
pub fn weak_reason(kind: KeyKind) -> &'static str {
    match kind {
        KeyKind::Host => {
            "small-order host key (all zeros or another point of order dividing 8): a handshake with it gives a secret anyone can compute; refusing it"
        }
        KeyKind::Owner => {
            "small-order owner key (the identity or another point of order dividing 8): anyone could sign as this owner; refusing it"
        }
    }
}

fn origin(path: &Option<PathBuf>) -> String {
    match path {
        Some(p) => p.display().to_string(),
        None => "key".to_owned(),
    }
}

fn trust_location(path: &Option<PathBuf>, line: usize) -> String {
    match path {
        Some(p) => format!("{}:{line}", p.display()),
        None => format!("trust file line {line}"),
    }
}
