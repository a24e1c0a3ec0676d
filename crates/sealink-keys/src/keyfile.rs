//! Key files: private keys (wiped on drop) and the one public-key parser.
//!
//! # Key files
//!
//! A private key file holds one line, `sealink-host-private <base64>` (an
//! X25519 private key) or `sealink-owner-private <base64>` (an Ed25519 seed).
//! It must not be readable or writable by group or others (mode `0600`): a
//! wider mode is refused, not just warned about, since the key may already
//! have leaked and a warning in a service log goes unread.
//! The matching public key lives next to it in `PATH.pub`, one line
//! `sealink-host <base64>` or `sealink-owner <base64>`. The base64 is the
//! standard alphabet with padding, encoding exactly 32 bytes. Files end with
//! a newline; surrounding whitespace is ignored when reading.
//!
//! # Refusals
//!
//! * Key files that other users could have written are refused, as
//!   ssh's StrictModes does: the file or its directory writable by group or
//!   others (a directory with the sticky bit excepted), or owned by a user
//!   other than us and root ([`crate::secure_file`]).
//! * Public keys of small order are refused in public key files, keys given
//!   as text and trust files ([`crate::trust`]), see [`sealink_crypto::weak_keys`]:
//!   an all-zero or small-order X25519 key makes every handshake secret public,
//!   an Ed25519 identity or other small-order key lets anyone sign as that owner.
//!
//! Secrets read or generated here are wiped when dropped ([`Zeroizing`]),
//! with the text and base64 buffers they passed through.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use sealink_crypto::weak_keys;
use sealink_proto::HostKey;
use zeroize::Zeroizing;

pub use crate::error::KeyFileError;
pub use crate::kind::KeyKind;
use crate::secure_file;

/// Length in bytes of every key handled here.
pub const KEY_LEN: usize = 32;

/// Largest key file we are willing to read.
const MAX_KEY_FILE_LEN: u64 = 4096;

const PRIVATE_MODE: u32 = 0o600;
const PUBLIC_MODE: u32 = 0o644;

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.trust_keyword())
    }
}

/// Whether `key` is a small-order public key of `kind`.
pub(crate) fn is_weak(kind: KeyKind, key: &[u8; KEY_LEN]) -> bool {
    match kind {
        KeyKind::Host => weak_keys::x25519_public_is_degenerate(key),
        KeyKind::Owner => weak_keys::ed25519_public_is_weak(key),
    }
}

const fn file_what(kind: KeyKind, private: bool) -> &'static str {
    match (kind, private) {
        (KeyKind::Host, true) => "host private key",
        (KeyKind::Host, false) => "host public key",
        (KeyKind::Owner, true) => "owner private key",
        (KeyKind::Owner, false) => "owner public key",
    }
}

/// A private key (X25519 private key or Ed25519 seed), wiped when dropped.
pub type PrivateKey = Zeroizing<[u8; KEY_LEN]>;

/// A fresh random private key (X25519 private key or Ed25519 seed).
pub fn generate(kind: KeyKind) -> Result<PrivateKey, KeyFileError> {
    let mut key = Zeroizing::new([0u8; KEY_LEN]);
    sealink_crypto::sign::random_bytes(&mut *key).map_err(|_| KeyFileError::Random)?;
    // Make sure the library accepts it before anyone stores it.
    public_from_private(kind, &key)?;
    Ok(key)
}

/// Derive the public key (X25519 or Ed25519) from a private key.
pub fn public_from_private(
    kind: KeyKind,
    private: &[u8; KEY_LEN],
) -> Result<[u8; KEY_LEN], KeyFileError> {
    let rejected = || KeyFileError::InvalidKey {
        what: kind.describe(true),
    };
    match kind {
        KeyKind::Host => sealink_crypto::kx::x25519_public_key(private).map_err(|_| rejected()),
        KeyKind::Owner => sealink_crypto::sign::OwnerSigningKey::from_seed(private)
            .map(|k| k.public_key())
            .map_err(|_| rejected()),
    }
}

/// Path of the public key file that goes with the private key file `path`:
/// `path` with `.pub` appended.
pub fn public_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".pub");
    PathBuf::from(s)
}

/// One-line text of a public key: `sealink-host <base64>` or
/// `sealink-owner <base64>`, without a newline.
pub fn format_public(kind: KeyKind, public: &[u8; KEY_LEN]) -> String {
    format!("{} {}", kind.public_tag(), B64.encode(public))
}

/// Write a private key to `path` (mode 0600) and its public key to
/// `path.pub` (mode 0644, subject to the umask). Returns the public key.
///
/// Without `force`, refuses if either file already exists (anything at the
/// path, a symlink included). With `force`, each file is written to a fresh
/// temporary file beside it and renamed over it: whatever was at the path,
/// a symlink included, is replaced, never written through.
pub fn write_keypair(
    path: &Path,
    kind: KeyKind,
    private: &[u8; KEY_LEN],
    force: bool,
) -> Result<[u8; KEY_LEN], KeyFileError> {
    let public = public_from_private(kind, private)?;
    let pub_path = public_path(path);
    if !force {
        // Check both up front so that we do not leave half a key pair behind.
        for p in [path, pub_path.as_path()] {
            if p.symlink_metadata().is_ok() {
                return Err(KeyFileError::AlreadyExists {
                    path: p.to_path_buf(),
                });
            }
        }
    }

    let b64 = Zeroizing::new(B64.encode(private));
    let tag = kind.private_tag();
    // Sized up front so that no reallocation leaves a copy of the key behind.
    let mut private_line = Zeroizing::new(String::with_capacity(tag.len() + b64.len() + 2));
    private_line.push_str(tag);
    private_line.push(' ');
    private_line.push_str(&b64);
    private_line.push('\n');
    write_file(
        path,
        file_what(kind, true),
        private_line.as_bytes(),
        PRIVATE_MODE,
        force,
    )?;

    let public_line = format!("{}\n", format_public(kind, &public));
    write_file(
        &pub_path,
        file_what(kind, false),
        public_line.as_bytes(),
        PUBLIC_MODE,
        force,
    )?;
    Ok(public)
}

fn write_file(
    path: &Path,
    what: &'static str,
    contents: &[u8],
    mode: u32,
    force: bool,
) -> Result<(), KeyFileError> {
    let io_err = |action, error| KeyFileError::Io {
        action,
        what,
        path: path.to_path_buf(),
        error,
    };
    if force {
        return replace_file(path, contents, mode).map_err(|e| io_err("write", e));
    }
    // O_CREAT | O_EXCL: fails on anything at the path, a (dangling) symlink included.
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                KeyFileError::AlreadyExists {
                    path: path.to_path_buf(),
                }
            } else {
                io_err("create", e)
            }
        })?;
    file.write_all(contents).map_err(|e| io_err("write", e))?;
    file.sync_all().map_err(|e| io_err("write", e))?;
    Ok(())
}

/// Writes `contents` to a new temporary file beside `path` (mode `mode`, created with
/// O_EXCL) and renames it over `path`. The rename replaces the directory entry itself, so a
/// symlink at `path` is replaced rather than followed, and a reader sees the old file or the
/// whole new one. The temporary file is removed on failure.
pub(crate) fn replace_file(path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "the path does not name a file")
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut attempt = 0;
    let (tmp, mut file) = loop {
        let mut nonce = [0u8; 8];
        sealink_crypto::sign::random_bytes(&mut nonce)
            .map_err(|_| io::Error::other("random generator failed"))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".tmp-{:016x}", u64::from_le_bytes(nonce)));
        let tmp = dir.join(tmp_name);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
        {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 8 => attempt += 1,
            Err(e) => return Err(e),
        }
    };
    let written = (|| {
        if mode == PRIVATE_MODE {
            // Exactly 0600 whatever the umask left.
            file.set_permissions(fs::Permissions::from_mode(PRIVATE_MODE))?;
        }
        file.write_all(contents)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    // Make the rename durable; a directory that cannot be opened or synced is not an error.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Open `path` and read at most `limit` bytes of UTF-8 text (wiped when dropped: it may be a
/// private key).
pub(crate) fn read_text(
    path: &Path,
    what: &'static str,
    limit: u64,
    missing_is_not_found: bool,
) -> Result<(File, Zeroizing<String>), KeyFileError> {
    let io_err = |error| KeyFileError::Io {
        action: "read",
        what,
        path: path.to_path_buf(),
        error,
    };
    let file = File::open(path).map_err(|e| {
        if missing_is_not_found && e.kind() == io::ErrorKind::NotFound {
            KeyFileError::NotFound {
                what,
                path: path.to_path_buf(),
            }
        } else {
            io_err(e)
        }
    })?;
    // Sized for the whole file up front: growing the buffer would leave copies behind.
    let size = file.metadata().map_or(0, |m| m.len()).min(limit + 1);
    let mut bytes = Zeroizing::new(Vec::with_capacity(size as usize + 1));
    (&file)
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err)?;
    if bytes.len() as u64 > limit {
        return Err(io_err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("file is larger than {limit} bytes"),
        )));
    }
    // Moves the buffer out (no copy); on failure it comes back and is wiped.
    match String::from_utf8(std::mem::take(&mut *bytes)) {
        Ok(text) => Ok((file, Zeroizing::new(text))),
        Err(e) => {
            drop(Zeroizing::new(e.into_bytes()));
            Err(io_err(io::Error::new(
                io::ErrorKind::InvalidData,
                "file is not UTF-8 text",
            )))
        }
    }
}

/// Decode padded standard base64 that must be exactly 32 bytes.
pub(crate) fn decode_key(b64: &str) -> Result<PrivateKey, Result<base64::DecodeError, usize>> {
    let bytes = Zeroizing::new(B64.decode(b64).map_err(Ok)?);
    if bytes.len() != KEY_LEN {
        return Err(Err(bytes.len()));
    }
    let mut key = Zeroizing::new([0u8; KEY_LEN]);
    key.copy_from_slice(&bytes);
    Ok(key)
}

/// Parse the text of a key file (or a key given as a string).
fn parse_key_text(
    text: &str,
    kind: KeyKind,
    private: bool,
    path: Option<&Path>,
    allow_bare: bool,
) -> Result<PrivateKey, KeyFileError> {
    let expected_tag = if private {
        kind.private_tag()
    } else {
        kind.public_tag()
    };
    let malformed = |problem| KeyFileError::Malformed {
        path: path.map(Path::to_path_buf),
        expected_tag,
        problem,
    };
    let text = text.trim();
    if text.is_empty() {
        return Err(malformed("it is empty"));
    }
    if text.contains('\n') {
        return Err(malformed("it has more than one line"));
    }
    let b64 = match text.split_once(char::is_whitespace) {
        Some((tag, rest)) => {
            match KeyKind::from_tag(tag) {
                Some(found) if found == (kind, private) => {}
                Some((found_kind, found_private)) => {
                    return Err(KeyFileError::WrongKind {
                        path: path.map(Path::to_path_buf),
                        expected: kind.describe(private),
                        found: found_kind.describe(found_private),
                    });
                }
                None => return Err(malformed("unknown key type")),
            }
            let rest = rest.trim();
            if rest.contains(char::is_whitespace) {
                return Err(malformed("unexpected text after the key"));
            }
            rest
        }
        None if KeyKind::from_tag(text).is_some() => {
            return Err(malformed("the key is missing after the key type"));
        }
        None if allow_bare => text,
        None => return Err(malformed("the key type is missing")),
    };
    let key = decode_key(b64).map_err(|e| match e {
        Ok(error) => KeyFileError::BadBase64 {
            path: path.map(Path::to_path_buf),
            error,
        },
        Err(len) => KeyFileError::WrongLength {
            path: path.map(Path::to_path_buf),
            len,
        },
    })?;
    if !private && is_weak(kind, &key) {
        return Err(KeyFileError::WeakKey {
            path: path.map(Path::to_path_buf),
            kind,
        });
    }
    Ok(key)
}

/// Read a private key file written by [`write_keypair`].
///
/// Fails if the file is accessible by group or others, or another user could
/// have written it.
pub fn read_private(path: &Path, kind: KeyKind) -> Result<PrivateKey, KeyFileError> {
    let what = file_what(kind, true);
    let (file, text) = read_text(path, what, MAX_KEY_FILE_LEN, true)?;
    // Parse first so that handing us a public key file (typically mode 0644)
    // is reported as such rather than as a permissions problem.
    let key = parse_key_text(&text, kind, true, Some(path), false)?;
    drop(text);
    let meta = file.metadata().map_err(|error| KeyFileError::Io {
        action: "read",
        what,
        path: path.to_path_buf(),
        error,
    })?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::PermissionsTooOpen {
            path: path.to_path_buf(),
            mode,
        });
    }
    secure_file::check_file(&file, path, what)?;
    Ok(key)
}

/// Read a host private key file as the protocol core's [`HostKey`].
pub fn read_host_key(path: &Path) -> Result<HostKey, KeyFileError> {
    let k = read_private(path, KeyKind::Host)?;
    // HostKey keeps its own copy (sealink-proto); ours is wiped on return.
    Ok(HostKey::from_private(*k)?)
}

/// Parse the text of a host private key file (read by someone else, who checked its owner
/// and mode) as the protocol core's [`HostKey`].
pub fn parse_host_key(text: &str, path: &Path) -> Result<HostKey, KeyFileError> {
    let k = parse_key_text(text, KeyKind::Host, true, Some(path), false)?;
    Ok(HostKey::from_private(*k)?)
}

/// Read a public key file (`sealink-host <base64>` or `sealink-owner
/// <base64>`; a bare base64 key is accepted too).
pub fn read_public(path: &Path, kind: KeyKind) -> Result<[u8; KEY_LEN], KeyFileError> {
    let what = file_what(kind, false);
    let (file, text) = read_text(path, what, MAX_KEY_FILE_LEN, true)?;
    secure_file::check_file(&file, path, what)?;
    parse_key_text(&text, kind, false, Some(path), true).map(|k| *k)
}

/// Parse a public key given as text: `sealink-host <base64>` /
/// `sealink-owner <base64>`, or just the base64.
pub fn parse_public(s: &str, kind: KeyKind) -> Result<[u8; KEY_LEN], KeyFileError> {
    parse_key_text(s, kind, false, None, true).map(|k| *k)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::error::TrustProblem;

    fn hex(s: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        assert_eq!(s.len(), 64);
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }

    pub(crate) fn write_mode(path: &Path, contents: &str, mode: u32) {
        fs::write(path, contents).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    fn mode_of(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn x25519_public_key_matches_rfc7748() {
        let sk = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
        let pk = hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
        assert_eq!(public_from_private(KeyKind::Host, &sk).unwrap(), pk);
    }

    #[test]
    fn ed25519_public_key_matches_rfc8032() {
        let seed = hex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
        let pk = hex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
        assert_eq!(public_from_private(KeyKind::Owner, &seed).unwrap(), pk);
    }

    #[test]
    fn generate_gives_distinct_usable_keys() {
        for kind in [KeyKind::Host, KeyKind::Owner] {
            let a = generate(kind).unwrap();
            let b = generate(kind).unwrap();
            assert_ne!(a, b);
            assert_ne!(*a, [0; 32]);
            public_from_private(kind, &a).unwrap();
        }
    }

    #[test]
    fn round_trip_both_kinds() {
        let dir = tempfile::tempdir().unwrap();
        for kind in [KeyKind::Host, KeyKind::Owner] {
            let path = dir.path().join(format!("{kind}.key"));
            let private = generate(kind).unwrap();
            let public = write_keypair(&path, kind, &private, false).unwrap();
            assert_eq!(public, public_from_private(kind, &private).unwrap());

            assert_eq!(read_private(&path, kind).unwrap(), private);
            let pub_path = public_path(&path);
            assert_eq!(pub_path, dir.path().join(format!("{kind}.key.pub")));
            assert_eq!(read_public(&pub_path, kind).unwrap(), public);

            // Exact file format.
            let text = fs::read_to_string(&path).unwrap();
            assert_eq!(
                text,
                format!("{} {}\n", kind.private_tag(), B64.encode(private))
            );
            let pub_text = fs::read_to_string(&pub_path).unwrap();
            assert_eq!(pub_text, format!("{}\n", format_public(kind, &public)));
            assert_eq!(parse_public(&pub_text, kind).unwrap(), public);
        }
    }

    #[test]
    fn private_file_is_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.key");
        let private = generate(KeyKind::Host).unwrap();
        write_keypair(&path, KeyKind::Host, &private, false).unwrap();
        assert_eq!(mode_of(&path), 0o600);
        // The public file is at most 0644 (the umask may remove bits).
        assert_eq!(mode_of(&public_path(&path)) & !0o644, 0);
        assert_ne!(mode_of(&public_path(&path)) & 0o400, 0);
    }

    #[test]
    fn refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("owner.key");
        let first = generate(KeyKind::Owner).unwrap();
        write_keypair(&path, KeyKind::Owner, &first, false).unwrap();
        let second = generate(KeyKind::Owner).unwrap();
        let err = write_keypair(&path, KeyKind::Owner, &second, false).unwrap_err();
        match &err {
            KeyFileError::AlreadyExists { path: p } => assert_eq!(p, &path),
            other => panic!("unexpected error {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains("--force"), "{msg}");
        assert_eq!(read_private(&path, KeyKind::Owner).unwrap(), first);
    }

    #[test]
    fn refuses_when_only_public_file_exists() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.key");
        let pub_path = public_path(&path);
        fs::write(&pub_path, "something\n").unwrap();
        let key = generate(KeyKind::Host).unwrap();
        let err = write_keypair(&path, KeyKind::Host, &key, false).unwrap_err();
        match err {
            KeyFileError::AlreadyExists { path: p } => assert_eq!(p, pub_path),
            other => panic!("unexpected error {other:?}"),
        }
        // Nothing half-written.
        assert!(!path.exists());
    }

    #[test]
    fn force_overwrites_and_tightens_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.key");
        write_mode(&path, "old contents\n", 0o644);
        write_mode(&public_path(&path), "old public\n", 0o644);
        let key = generate(KeyKind::Host).unwrap();
        let public = write_keypair(&path, KeyKind::Host, &key, true).unwrap();
        assert_eq!(mode_of(&path), 0o600);
        assert_eq!(read_private(&path, KeyKind::Host).unwrap(), key);
        assert_eq!(
            read_public(&public_path(&path), KeyKind::Host).unwrap(),
            public
        );
        // Forcing also works when nothing exists yet.
        let other = dir.path().join("new.key");
        write_keypair(&other, KeyKind::Owner, &key, true).unwrap();
        assert_eq!(read_private(&other, KeyKind::Owner).unwrap(), key);
    }

    #[test]
    fn missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope.key");
        let err = read_private(&path, KeyKind::Host).unwrap_err();
        assert!(matches!(err, KeyFileError::NotFound { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains("sealink keygen"), "{msg}");

        let err = read_public(&path, KeyKind::Owner).unwrap_err();
        assert!(matches!(err, KeyFileError::NotFound { .. }), "{err:?}");
    }

    #[test]
    fn wrong_kind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("owner.key");
        let key = generate(KeyKind::Owner).unwrap();
        write_keypair(&path, KeyKind::Owner, &key, false).unwrap();

        let err = read_private(&path, KeyKind::Host).unwrap_err();
        match &err {
            KeyFileError::WrongKind {
                expected, found, ..
            } => {
                assert_eq!(*expected, "a host private key");
                assert_eq!(*found, "an owner private key");
            }
            other => panic!("unexpected error {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("owner"), "{msg}");
        assert!(msg.contains("host"), "{msg}");
        assert!(msg.contains(&path.display().to_string()), "{msg}");

        // A public key file handed over as a private key: report the kind,
        // not its 0644 permissions.
        let err = read_private(&public_path(&path), KeyKind::Owner).unwrap_err();
        match err {
            KeyFileError::WrongKind { found, .. } => assert_eq!(found, "an owner public key"),
            other => panic!("unexpected error {other:?}"),
        }

        // And a private key where a public one is wanted.
        let err = read_public(&path, KeyKind::Owner).unwrap_err();
        match err {
            KeyFileError::WrongKind { found, .. } => assert_eq!(found, "an owner private key"),
            other => panic!("unexpected error {other:?}"),
        }
        let err = read_public(&public_path(&path), KeyKind::Host).unwrap_err();
        assert!(matches!(err, KeyFileError::WrongKind { .. }), "{err:?}");
    }

    #[test]
    fn too_open_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.key");
        let key = generate(KeyKind::Host).unwrap();
        write_keypair(&path, KeyKind::Host, &key, false).unwrap();
        for mode in [0o644, 0o640, 0o604, 0o660, 0o601] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            let err = read_private(&path, KeyKind::Host).unwrap_err();
            match &err {
                KeyFileError::PermissionsTooOpen { mode: m, path: p } => {
                    assert_eq!(*m, mode);
                    assert_eq!(p, &path);
                }
                other => panic!("unexpected error {other:?}"),
            }
            if mode == 0o644 {
                let msg = err.to_string();
                let shown = path.display().to_string();
                assert!(msg.contains("permissions 0644"), "{msg}");
                assert!(msg.contains(&format!("chmod 600 {shown}")), "{msg}");
            }
        }
        for mode in [0o600, 0o400] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(read_private(&path, KeyKind::Host).unwrap(), key);
        }
    }

    #[test]
    fn surrounding_whitespace_tolerated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.key");
        let key = [7u8; 32];
        let text = format!(
            "\n  \t{}   {}  \r\n\n",
            KeyKind::Host.private_tag(),
            B64.encode(key)
        );
        write_mode(&path, &text, 0o600);
        assert_eq!(*read_private(&path, KeyKind::Host).unwrap(), key);
        // No trailing newline at all is fine too.
        write_mode(
            &path,
            &format!("{} {}", KeyKind::Host.private_tag(), B64.encode(key)),
            0o600,
        );
        assert_eq!(*read_private(&path, KeyKind::Host).unwrap(), key);
    }

    #[test]
    fn bad_base64() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("owner.key");
        let unpadded = B64.encode([1u8; 32]).trim_end_matches('=').to_owned();
        for bad in ["!!!not-base64!!!", unpadded.as_str(), "AAAA*AAA"] {
            write_mode(&path, &format!("sealink-owner-private {bad}\n"), 0o600);
            let err = read_private(&path, KeyKind::Owner).unwrap_err();
            assert!(
                matches!(err, KeyFileError::BadBase64 { .. }),
                "{bad}: {err:?}"
            );
            assert!(err.to_string().contains("base64"), "{err}");
            assert!(err.to_string().contains(&path.display().to_string()));
        }
        let err = parse_public("sealink-owner @@@@", KeyKind::Owner).unwrap_err();
        assert!(matches!(err, KeyFileError::BadBase64 { .. }), "{err:?}");
    }

    #[test]
    fn wrong_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.key");
        for len in [0usize, 16, 31, 33, 64] {
            let b64 = B64.encode(vec![9u8; len]);
            write_mode(&path, &format!("sealink-host-private {b64}\n"), 0o600);
            let err = read_private(&path, KeyKind::Host).unwrap_err();
            if len == 0 {
                // Empty base64 means no key after the tag at all.
                assert!(matches!(err, KeyFileError::Malformed { .. }), "{err:?}");
                continue;
            }
            match &err {
                KeyFileError::WrongLength { len: l, .. } => assert_eq!(*l, len),
                other => panic!("unexpected error {other:?}"),
            }
            assert!(err.to_string().contains("expected 32"), "{err}");
        }
        let err = parse_public(&B64.encode([0u8; 31]), KeyKind::Host).unwrap_err();
        assert!(
            matches!(err, KeyFileError::WrongLength { len: 31, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn malformed_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.key");
        let b64 = B64.encode([3u8; 32]);
        let cases = [
            String::new(),
            "   \n\n".to_owned(),
            format!("ssh-ed25519 {b64}\n"),
            format!("{b64}\n"),
            "sealink-host-private\n".to_owned(),
            format!("sealink-host-private {b64}\nsealink-host-private {b64}\n"),
            format!("sealink-host-private {b64} comment\n"),
        ];
        for text in &cases {
            write_mode(&path, text, 0o600);
            let err = read_private(&path, KeyKind::Host).unwrap_err();
            assert!(
                matches!(err, KeyFileError::Malformed { .. }),
                "{text:?}: {err:?}"
            );
            let msg = err.to_string();
            assert!(msg.contains("sealink-host-private <base64>"), "{msg}");
        }
        // Oversized files are rejected without reading them whole.
        write_mode(&path, &"A".repeat(10_000), 0o600);
        let err = read_private(&path, KeyKind::Host).unwrap_err();
        assert!(matches!(err, KeyFileError::Io { .. }), "{err:?}");
    }

    #[test]
    fn parse_public_forms() {
        let key = [0x5au8; 32];
        let b64 = B64.encode(key);
        assert_eq!(
            parse_public(&format!("sealink-host {b64}"), KeyKind::Host).unwrap(),
            key
        );
        assert_eq!(
            parse_public(&format!("  sealink-owner\t{b64}\n"), KeyKind::Owner).unwrap(),
            key
        );
        assert_eq!(parse_public(&b64, KeyKind::Host).unwrap(), key);
        assert_eq!(
            parse_public(&format!(" {b64} \n"), KeyKind::Owner).unwrap(),
            key
        );

        let err = parse_public(&format!("sealink-owner {b64}"), KeyKind::Host).unwrap_err();
        match &err {
            KeyFileError::WrongKind {
                path,
                expected,
                found,
            } => {
                assert!(path.is_none());
                assert_eq!(*expected, "a host public key");
                assert_eq!(*found, "an owner public key");
            }
            other => panic!("unexpected error {other:?}"),
        }
        let err = parse_public(&format!("sealink-host-private {b64}"), KeyKind::Host).unwrap_err();
        assert!(matches!(err, KeyFileError::WrongKind { .. }), "{err:?}");
        let err = parse_public(&format!("bogus {b64}"), KeyKind::Host).unwrap_err();
        assert!(matches!(err, KeyFileError::Malformed { .. }), "{err:?}");
        let err = parse_public("", KeyKind::Host).unwrap_err();
        assert!(matches!(err, KeyFileError::Malformed { .. }), "{err:?}");
    }

    /// Small-order encodings: X25519 0, 1 (with bit 255 set), p - 1; Ed25519 identity,
    /// identity with the sign bit, y = p + 1 (non-canonical identity), (0, -1).
    fn weak(kind: KeyKind) -> Vec<[u8; 32]> {
        let top = |first: u8, last: u8| {
            let mut k = [0xffu8; 32];
            k[0] = first;
            k[31] = last;
            k
        };
        let mut one = [0u8; 32];
        one[0] = 1;
        match kind {
            KeyKind::Host => {
                let mut one_high = one;
                one_high[31] = 0x80;
                vec![[0; 32], one_high, top(0xec, 0x7f)]
            }
            KeyKind::Owner => {
                let mut id_sign = one;
                id_sign[31] = 0x80;
                vec![one, id_sign, top(0xee, 0x7f), top(0xec, 0x7f)]
            }
        }
    }

    #[test]
    fn weak_public_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for kind in [KeyKind::Host, KeyKind::Owner] {
            for key in weak(kind) {
                // A public key file.
                let path = dir.path().join("weak.pub");
                write_mode(&path, &format!("{}\n", format_public(kind, &key)), 0o644);
                let err = read_public(&path, kind).unwrap_err();
                assert!(
                    matches!(&err, KeyFileError::WeakKey { kind: k, .. } if *k == kind),
                    "{kind} {key:02x?}: {err:?}"
                );
                let msg = err.to_string();
                assert!(msg.contains(&path.display().to_string()), "{msg}");
                assert!(msg.contains("small-order"), "{msg}");
                // A key given as text.
                let err = parse_public(&B64.encode(key), kind).unwrap_err();
                assert!(matches!(err, KeyFileError::WeakKey { .. }), "{err:?}");
                // A trust file line.
                let text = format!("# x\n{} n {}\n", kind.trust_keyword(), B64.encode(key));
                match crate::trust::parse_trust(&text).unwrap_err() {
                    KeyFileError::Trust { line, problem, .. } => {
                        assert_eq!((line, problem), (2, TrustProblem::WeakKey(kind)))
                    }
                    other => panic!("unexpected error {other:?}"),
                }
            }
        }
        // The same bytes are fine as the other kind when they are not weak there.
        let mut two = [0u8; 32];
        two[0] = 2;
        parse_public(&B64.encode(two), KeyKind::Host).unwrap();
    }

    #[test]
    fn force_replaces_symlinks_instead_of_following_them() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        write_mode(&victim, "precious\n", 0o644);
        let path = dir.path().join("host.key");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        std::os::unix::fs::symlink(dir.path().join("nowhere"), public_path(&path)).unwrap();
        // Without --force a symlink counts as an existing file.
        let key = generate(KeyKind::Host).unwrap();
        let err = write_keypair(&path, KeyKind::Host, &key, false).unwrap_err();
        assert!(matches!(err, KeyFileError::AlreadyExists { .. }), "{err:?}");
        let public = write_keypair(&path, KeyKind::Host, &key, true).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
        assert!(!dir.path().join("nowhere").exists());
        assert!(fs::symlink_metadata(&path).unwrap().is_file());
        assert_eq!(mode_of(&path), 0o600);
        assert_eq!(*read_private(&path, KeyKind::Host).unwrap(), *key);
        assert_eq!(
            read_public(&public_path(&path), KeyKind::Host).unwrap(),
            public
        );
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 3, "temporary files left: {left:?}");
    }

    #[test]
    fn files_others_can_write_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();

        let path = dir.path().join("owner.key");
        let key = generate(KeyKind::Owner).unwrap();
        write_keypair(&path, KeyKind::Owner, &key, false).unwrap();
        write_mode(
            &public_path(&path),
            &fs::read_to_string(public_path(&path)).unwrap(),
            0o646,
        );
        let err = read_public(&public_path(&path), KeyKind::Owner).unwrap_err();
        assert!(matches!(err, KeyFileError::Insecure(_)), "{err:?}");
        // A private key in a directory anyone may write to.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let err = read_private(&path, KeyKind::Owner).unwrap_err();
        assert!(matches!(err, KeyFileError::Insecure(_)), "{err:?}");
        assert!(err.to_string().contains("its directory"), "{err}");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        read_private(&path, KeyKind::Owner).unwrap();
    }
}
