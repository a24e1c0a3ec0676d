//! Key files and key arguments of either kind, told apart by their tags: `sealink pubkey FILE`
//! (a private key file or a `.pub`), `sealink trust add KIND NAME KEY` (base64, or a whole
//! public key line), and `sealink init` (a key pair kept, or made when missing).

use std::path::{Path, PathBuf};

use crate::error::KeyFileError;
use crate::keyfile::{self, KEY_LEN, PrivateKey};
use crate::kind::KeyKind;

/// Why a key file or argument of either kind was not taken.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// A public key file where a private one was wanted.
    #[error(
        "{}: this is {found}, not a private key file; give the private key file (the one without .pub)",
        path.display()
    )]
    NotPrivate { path: PathBuf, found: &'static str },
    #[error(
        "private key file {} does not exist; create one with `sealink keygen`",
        path.display()
    )]
    NoPrivate { path: PathBuf },
    #[error(
        "{}: not a sealink private key file ({problem}); expected one line `{}` or `{}`",
        path.display(),
        tagged(KeyKind::Host),
        tagged(KeyKind::Owner)
    )]
    NotKeyFile {
        path: PathBuf,
        problem: &'static str,
    },
    /// A public key file of the other kind than asked for.
    #[error(
        "{}: this is {} public key, not {} one",
        path.display(),
        article(*found),
        article(*wanted)
    )]
    OtherKind {
        path: PathBuf,
        found: KeyKind,
        wanted: KeyKind,
    },
    #[error("{}: a {} line with a bad key", path.display(), kind.public_tag())]
    BadPublicLine {
        path: PathBuf,
        kind: KeyKind,
        #[source]
        source: KeyFileError,
    },
    /// A key argument that is a public key line of another kind.
    #[error("this is a {tag} line, not a {} key", kind.public_tag())]
    OtherLine { tag: String, kind: KeyKind },
    #[error(transparent)]
    Key(#[from] KeyFileError),
}

fn tagged(kind: KeyKind) -> String {
    format!("{} <base64>", kind.private_tag())
}

fn article(k: KeyKind) -> &'static str {
    match k {
        KeyKind::Host => "a host",
        KeyKind::Owner => "an owner",
    }
}

/// Reads a private key of either kind, telling which by the file's tag.
pub fn read_any_private(path: &Path) -> Result<(KeyKind, PrivateKey), DetectError> {
    let path_buf = || path.to_path_buf();
    match keyfile::read_private(path, KeyKind::Host) {
        Ok(k) => Ok((KeyKind::Host, k)),
        Err(KeyFileError::WrongKind { .. }) => match keyfile::read_private(path, KeyKind::Owner) {
            Ok(k) => Ok((KeyKind::Owner, k)),
            Err(KeyFileError::WrongKind { found, .. }) => Err(DetectError::NotPrivate {
                path: path_buf(),
                found,
            }),
            Err(e) => Err(e.into()),
        },
        Err(KeyFileError::NotFound { .. }) => Err(DetectError::NoPrivate { path: path_buf() }),
        Err(KeyFileError::Malformed { problem, .. }) => Err(DetectError::NotKeyFile {
            path: path_buf(),
            problem,
        }),
        Err(e) => Err(e.into()),
    }
}

/// The key of a public key file (one line `sealink-host KEY` or `sealink-owner KEY`, of `kind`
/// when given); `None` when `path` is not one (a private key file, or unreadable: reading it
/// as a private key then says why).
pub fn read_public_file(
    path: &Path,
    kind: Option<KeyKind>,
) -> Result<Option<(KeyKind, [u8; KEY_LEN])>, DetectError> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(None);
    };
    let line = text.trim();
    for k in [KeyKind::Host, KeyKind::Owner] {
        let Some(b64) = line
            .strip_prefix(k.public_tag())
            .filter(|r| r.starts_with(char::is_whitespace))
        else {
            continue;
        };
        if let Some(wanted) = kind.filter(|w| *w != k) {
            return Err(DetectError::OtherKind {
                path: path.to_path_buf(),
                found: k,
                wanted,
            });
        }
        let key =
            keyfile::parse_public(b64.trim(), k).map_err(|source| DetectError::BadPublicLine {
                path: path.to_path_buf(),
                kind: k,
                source,
            })?;
        return Ok(Some((k, key)));
    }
    Ok(None)
}

/// A public key of `kind` given as an argument: base64, or a whole `sealink-host ...` line of
/// that kind.
pub fn parse_public_arg(kind: KeyKind, key: &str) -> Result<[u8; KEY_LEN], DetectError> {
    let b64 = match key.split_once(char::is_whitespace) {
        Some((tag, rest)) if tag == kind.public_tag() => rest.trim(),
        Some((tag, _)) => {
            return Err(DetectError::OtherLine {
                tag: tag.to_owned(),
                kind,
            });
        }
        None => key.trim(),
    };
    Ok(keyfile::parse_public(b64, kind)?)
}

/// Whether [`ensure_keypair`] kept a key pair or made one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    Kept,
    Written,
}

/// The public key of the private key file `path`, written (with `path.pub`, mode 0600) when
/// there is none.
pub fn ensure_keypair(
    path: &Path,
    kind: KeyKind,
) -> Result<([u8; KEY_LEN], Ensured), KeyFileError> {
    match keyfile::read_private(path, kind) {
        Ok(private) => Ok((keyfile::public_from_private(kind, &private)?, Ensured::Kept)),
        Err(KeyFileError::NotFound { .. }) => {
            let private = keyfile::generate(kind)?;
            let public = keyfile::write_keypair(path, kind, &private, false)?;
            Ok((public, Ensured::Written))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_kind_is_told_by_its_tag() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("owner.key");
        let (public, how) = ensure_keypair(&path, KeyKind::Owner).unwrap();
        assert_eq!(how, Ensured::Written);
        assert_eq!(
            ensure_keypair(&path, KeyKind::Owner).unwrap(),
            (public, Ensured::Kept)
        );
        let (kind, private) = read_any_private(&path).unwrap();
        assert_eq!(kind, KeyKind::Owner);
        assert_eq!(
            keyfile::public_from_private(kind, &private).unwrap(),
            public
        );
        let pub_path = keyfile::public_path(&path);
        assert_eq!(
            read_public_file(&pub_path, None).unwrap(),
            Some((KeyKind::Owner, public))
        );
        assert_eq!(read_public_file(&path, None).unwrap(), None);
        let e = read_public_file(&pub_path, Some(KeyKind::Host)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: this is an owner public key, not a host one",
                pub_path.display()
            )
        );
        let e = read_any_private(&pub_path).unwrap_err();
        assert!(matches!(e, DetectError::NotPrivate { .. }), "{e}");
        let e = read_any_private(&d.path().join("none")).unwrap_err();
        assert!(matches!(e, DetectError::NoPrivate { .. }), "{e}");
    }

    #[test]
    fn key_arguments_take_base64_or_their_own_line() {
        let d = tempfile::tempdir().unwrap();
        let (public, _) = ensure_keypair(&d.path().join("h"), KeyKind::Host).unwrap();
        let line = keyfile::format_public(KeyKind::Host, &public);
        assert_eq!(parse_public_arg(KeyKind::Host, &line).unwrap(), public);
        let b64 = line.split_once(' ').unwrap().1;
        assert_eq!(parse_public_arg(KeyKind::Host, b64).unwrap(), public);
        assert_eq!(
            parse_public_arg(KeyKind::Owner, &line)
                .unwrap_err()
                .to_string(),
            "this is a sealink-host line, not a sealink-owner key"
        );
    }
}
