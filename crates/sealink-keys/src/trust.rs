//! Trust files: the keys a node believes. This is the one place a trust file is parsed.
//!
//! A trust file lists the keys a node trusts, one per line:
//!
//! ```text
//! # comment
//! owner alice@example  <base64 Ed25519 public key>
//! host  gateway-1      <base64 X25519 public key>
//! ```
//!
//! Blank lines and everything from `#` to the end of a line are ignored.
//! Names are 1 to 64 bytes from `A-Z a-z 0-9 . _ @ + -`; owner names and host
//! names are separate namespaces. Listing the same name twice with the same
//! key is harmless; with a different key it is an error. Small-order keys are
//! refused ([`crate::keyfile`]), and so is a trust file other users could have
//! written ([`crate::secure_file`]).

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use sealink_proto::Directory;

use crate::error::{KeyFileError, TrustProblem};
use crate::keyfile::{KEY_LEN, KeyKind, decode_key, is_weak, read_text};
use crate::secure_file;

/// Largest trust file we are willing to read.
const MAX_TRUST_FILE_LEN: u64 = 16 << 20;

/// Maximum length in bytes of a trust-file name.
pub const MAX_NAME_LEN: usize = 64;

/// Parsed trust file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustFile {
    /// Trusted owners: name and Ed25519 public key, in file order.
    pub owners: Vec<(String, [u8; KEY_LEN])>,
    /// Trusted hosts: name and X25519 public key, in file order.
    pub hosts: Vec<(String, [u8; KEY_LEN])>,
}

impl TrustFile {
    /// The trusted owners as the protocol core's [`Directory`] (names → Ed25519 keys).
    pub fn directory(&self) -> Result<Directory, KeyFileError> {
        let mut d = Directory::new();
        for (name, k) in &self.owners {
            d.insert(name, *k)?;
        }
        Ok(d)
    }

    /// The trusted host that `dest_host` (a destination's host part) stands for, as its name
    /// and X25519 key: the host `name` names (a destination's `NAME@`, or `--peer`), else the
    /// trusted host named like `dest_host`, else the only trusted host. `path` (this file's)
    /// goes into the error.
    pub fn pick_host(
        &self,
        name: Option<&str>,
        dest_host: &str,
        path: &Path,
    ) -> Result<(String, [u8; KEY_LEN]), PickHostError> {
        let path = || path.to_owned();
        if let Some(n) = name {
            return self
                .hosts
                .iter()
                .find(|(h, _)| h == n)
                .cloned()
                .ok_or_else(|| PickHostError::NoSuchName {
                    name: n.to_owned(),
                    path: path(),
                });
        }
        if let Some(found) = self.hosts.iter().find(|(h, _)| h == dest_host) {
            return Ok(found.clone());
        }
        match &self.hosts[..] {
            [only] => Ok(only.clone()),
            [] => Err(PickHostError::NoHosts { path: path() }),
            _ => Err(PickHostError::Ambiguous { path: path() }),
        }
    }

    /// The name this file gives the owner key `key`, if it lists it (`sealink init` lists this
    /// home's own owner).
    pub fn owner_name(&self, key: &[u8; KEY_LEN]) -> Option<&str> {
        self.owners
            .iter()
            .find(|(_, k)| k == key)
            .map(|(n, _)| n.as_str())
    }
}

/// Why [`TrustFile::pick_host`] found no host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PickHostError {
    #[error("no host named {name:?} in {}", path.display())]
    NoSuchName { name: String, path: PathBuf },
    #[error("{} trusts no host; add the receiver's `host NAME KEY` line", path.display())]
    NoHosts { path: PathBuf },
    #[error(
        "{} trusts several hosts; say which one receives with NAME@HOST or --peer NAME",
        path.display()
    )]
    Ambiguous { path: PathBuf },
}

/// Whether `name` is a valid trust-file name: 1 to 64 bytes from
/// `A-Z a-z 0-9 . _ @ + -`.
pub fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'+' | b'-'))
}

/// `name` if it is a valid trust-file name, else the trust parser's own refusal.
pub fn check_name(name: &str) -> Result<(), TrustProblem> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(TrustProblem::BadName(name.to_owned()))
    }
}

/// A name for a trust file from `from` (a system host name, `$USER`), reduced to the
/// characters a name allows; `fallback` when nothing is left.
pub fn default_name(from: Option<String>, fallback: &str) -> String {
    let cleaned: String = from
        .unwrap_or_default()
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '+' | '-'))
        .take(MAX_NAME_LEN)
        .collect();
    if cleaned.is_empty() {
        fallback.to_string()
    } else {
        cleaned
    }
}

/// [`read_trust`], or an empty file when there is none yet (`sealink pair` makes it).
pub fn read_trust_or_empty(path: &Path) -> Result<TrustFile, KeyFileError> {
    match read_trust(path) {
        Ok(t) => Ok(t),
        Err(KeyFileError::NotFound { .. }) => Ok(TrustFile::default()),
        Err(KeyFileError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
            Ok(TrustFile::default())
        }
        Err(e) => Err(e),
    }
}

/// Parse the text of a trust file.
pub fn parse_trust(text: &str) -> Result<TrustFile, KeyFileError> {
    parse_trust_inner(text, None)
}

/// Read and parse a trust file.
pub fn read_trust(path: &Path) -> Result<TrustFile, KeyFileError> {
    let (file, text) = read_text(path, "trust", MAX_TRUST_FILE_LEN, false)?;
    secure_file::check_file(&file, path, "trust file")?;
    parse_trust_inner(&text, Some(path))
}

/// What [`add`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// The entry was appended.
    New,
    /// The same kind, name and key were already listed: nothing changed.
    AlreadyTrusted,
}

/// The trust file's text, or "" when it does not exist yet.
fn read_or_empty(path: &Path) -> Result<String, KeyFileError> {
    match read_text(path, "trust", MAX_TRUST_FILE_LEN, false) {
        Ok((file, text)) => {
            secure_file::check_file(&file, path, "trust file")?;
            Ok(text.to_string())
        }
        Err(KeyFileError::NotFound { .. }) => Ok(String::new()),
        Err(KeyFileError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
            Ok(String::new())
        }
        Err(e) => Err(e),
    }
}

/// Writes a whole new trust file by rename (mode 0600): a reader sees the old file or the new.
fn write_trust(path: &Path, text: &str) -> Result<(), KeyFileError> {
    crate::keyfile::replace_file(path, text.as_bytes(), 0o600).map_err(|error| KeyFileError::Io {
        action: "write",
        what: "trust",
        path: path.to_path_buf(),
        error,
    })
}

/// The lock file that serialises edits of the trust file at `path`: `.NAME.lock` beside it.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = OsString::from(".");
    name.push(path.file_name().unwrap_or(path.as_os_str()));
    name.push(".lock");
    path.with_file_name(name)
}

/// An exclusive `flock` on [`lock_path`], held until the returned descriptor is dropped.
///
/// Every edit reads, changes and renames the whole file, so two edits at once would each
/// write their own copy and the later rename would silently undo the earlier one (a lost
/// `add`, or a revoked key coming back). The lock is on a separate file because the trust
/// file itself is replaced by rename: a lock on its inode would not be seen by an editor that
/// opened the new one. Readers need no lock; they see the old file or the new.
fn lock(path: &Path) -> Result<OwnedFd, KeyFileError> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let lock = lock_path(path);
    let io = |action, error: std::io::Error| KeyFileError::Io {
        action,
        what: "trust lock",
        path: lock.clone(),
        error,
    };
    // O_NOFOLLOW: a planted symlink must not make us create or lock some other file.
    let fd = rustix::fs::open(
        &lock,
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| io("open", e.into()))?;
    loop {
        match rustix::fs::flock(&fd, FlockOperation::LockExclusive) {
            Ok(()) => return Ok(fd),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(io("lock", e.into())),
        }
    }
}

/// Adds `KIND NAME KEY` to the trust file at `path`, creating it (mode 0600) if missing. The
/// edited file is parsed whole before it is written, so a name already listed with another
/// key, a bad name or a small-order key is refused with the parser's error, and the file is
/// left as it was. Concurrent edits are serialised by [`lock`].
pub fn add(
    path: &Path,
    kind: KeyKind,
    name: &str,
    key: &[u8; KEY_LEN],
) -> Result<Added, KeyFileError> {
    use base64::Engine as _;
    let _lock = lock(path)?;
    let text = read_or_empty(path)?;
    let before = parse_trust_inner(&text, Some(path))?;
    let list = match kind {
        KeyKind::Owner => &before.owners,
        KeyKind::Host => &before.hosts,
    };
    if list.iter().any(|(n, k)| n == name && k == key) {
        return Ok(Added::AlreadyTrusted);
    }
    let mut new = text;
    if !new.is_empty() && !new.ends_with('\n') {
        new.push('\n');
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(key);
    new.push_str(&format!("{} {name} {b64}\n", kind.trust_keyword()));
    parse_trust_inner(&new, Some(path))?;
    write_trust(path, &new)?;
    Ok(Added::New)
}

/// Removes every entry named `name` (owner or host) from the trust file at `path`, keeping
/// comments and every other line as they were; returns how many were removed (nothing is
/// written when none was). Concurrent edits are serialised by [`lock`].
pub fn remove(path: &Path, name: &str) -> Result<usize, KeyFileError> {
    let _lock = lock(path)?;
    let text = read_or_empty(path)?;
    parse_trust_inner(&text, Some(path))?;
    let mut removed = 0;
    let mut new = String::with_capacity(text.len());
    for line in text.lines() {
        let content = line.split_once('#').map_or(line, |(before, _)| before);
        let mut fields = content.split_whitespace();
        if matches!(fields.next(), Some("owner" | "host")) && fields.next() == Some(name) {
            removed += 1;
            continue;
        }
        new.push_str(line);
        new.push('\n');
    }
    if removed > 0 {
        write_trust(path, &new)?;
    }
    Ok(removed)
}

fn parse_trust_inner(text: &str, path: Option<&Path>) -> Result<TrustFile, KeyFileError> {
    let mut trust = TrustFile::default();
    // (kind, name) -> (first line, key)
    let mut seen: HashMap<(KeyKind, &str), (usize, [u8; KEY_LEN])> = HashMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let err = |problem| KeyFileError::Trust {
            path: path.map(Path::to_path_buf),
            line,
            problem,
        };
        let content = raw.split_once('#').map_or(raw, |(before, _)| before);
        let mut fields = content.split_whitespace();
        let Some(keyword) = fields.next() else {
            continue;
        };
        let kind = match keyword {
            "owner" => KeyKind::Owner,
            "host" => KeyKind::Host,
            other => return Err(err(TrustProblem::UnknownKind(other.to_owned()))),
        };
        let (Some(name), Some(b64), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(err(TrustProblem::WrongFieldCount {
                keyword: kind.trust_keyword(),
                fields: content.split_whitespace().count(),
            }));
        };
        if !valid_name(name) {
            return Err(err(TrustProblem::BadName(name.to_owned())));
        }
        let key = *decode_key(b64).map_err(|e| {
            err(match e {
                Ok(error) => TrustProblem::BadBase64(error),
                Err(len) => TrustProblem::WrongLength(len),
            })
        })?;
        if is_weak(kind, &key) {
            return Err(err(TrustProblem::WeakKey(kind)));
        }
        if let Some(&(first_line, first_key)) = seen.get(&(kind, name)) {
            if first_key == key {
                continue;
            }
            return Err(err(TrustProblem::DuplicateName {
                keyword: kind.trust_keyword(),
                name: name.to_owned(),
                first_line,
            }));
        }
        seen.insert((kind, name), (line, key));
        let list = match kind {
            KeyKind::Owner => &mut trust.owners,
            KeyKind::Host => &mut trust.hosts,
        };
        list.push((name.to_owned(), key));
    }
    Ok(trust)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyfile::tests::write_mode;
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as B64;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn pick_host_by_name_then_destination_then_the_only_one() {
        let t = Path::new("trust");
        let file = |hosts: &[(&str, u8)]| TrustFile {
            owners: Vec::new(),
            hosts: hosts
                .iter()
                .map(|(n, b)| (n.to_string(), [*b; 32]))
                .collect(),
        };
        let (one, two) = (file(&[("a", 1)]), file(&[("a", 1), ("b", 2)]));
        assert_eq!(one.pick_host(None, "x", t), Ok(("a".into(), [1; 32])));
        assert_eq!(
            two.pick_host(None, "x", t),
            Err(PickHostError::Ambiguous { path: t.into() })
        );
        assert_eq!(two.pick_host(None, "b", t), Ok(("b".into(), [2; 32])));
        assert_eq!(two.pick_host(Some("b"), "a", t), Ok(("b".into(), [2; 32])));
        assert_eq!(
            two.pick_host(Some("c"), "a", t).unwrap_err().to_string(),
            "no host named \"c\" in trust"
        );
        assert_eq!(
            file(&[]).pick_host(None, "a", t),
            Err(PickHostError::NoHosts { path: t.into() })
        );
    }

    #[test]
    fn names() {
        assert!(valid_name("a"));
        assert!(valid_name("alice@example.org"));
        assert!(valid_name("gw-1_backup+x.Y"));
        assert!(valid_name(&"x".repeat(64)));
        assert!(!valid_name(""));
        assert!(!valid_name(&"x".repeat(65)));
        assert!(!valid_name("has space"));
        assert!(!valid_name("semi;colon"));
        assert!(!valid_name("slash/"));
        assert!(!valid_name("naïve"));
        assert!(!valid_name("hash#"));
    }

    fn b64(byte: u8) -> String {
        B64.encode([byte; 32])
    }

    #[test]
    fn trust_file_parses() {
        let text = format!(
            "# trusted keys\n\
             \n\
             owner alice@example.org {a}\n\
             \towner   bob {b}   # Bob's laptop\n\
             host gw-1 {c}\n\
             host alice@example.org {d}\n\
             # same entry again is harmless\n\
             owner bob {b}\n",
            a = b64(1),
            b = b64(2),
            c = b64(3),
            d = b64(4),
        );
        let trust = parse_trust(&text).unwrap();
        assert_eq!(
            trust.owners,
            vec![
                ("alice@example.org".to_owned(), [1; 32]),
                ("bob".to_owned(), [2; 32]),
            ]
        );
        assert_eq!(
            trust.hosts,
            vec![
                ("gw-1".to_owned(), [3; 32]),
                ("alice@example.org".to_owned(), [4; 32]),
            ]
        );
        assert_eq!(parse_trust("").unwrap(), TrustFile::default());
        assert_eq!(
            parse_trust("# only\n\n  # comments\n").unwrap(),
            TrustFile::default()
        );
    }

    fn trust_problem(text: &str) -> (usize, TrustProblem) {
        match parse_trust(text).unwrap_err() {
            KeyFileError::Trust {
                path: None,
                line,
                problem,
            } => (line, problem),
            other => panic!("unexpected error {other:?}"),
        }
    }

    #[test]
    fn trust_file_errors() {
        let ok = format!("owner alice {}\n", b64(1));

        let (line, p) = trust_problem(&format!("{ok}\nuser carol {}\n", b64(2)));
        assert_eq!(line, 3);
        assert_eq!(p, TrustProblem::UnknownKind("user".to_owned()));

        let (line, p) = trust_problem(&format!("{ok}owner carol\n"));
        assert_eq!(line, 2);
        assert_eq!(
            p,
            TrustProblem::WrongFieldCount {
                keyword: "owner",
                fields: 2
            }
        );
        let (_, p) = trust_problem(&format!("host gw {} extra\n", b64(2)));
        assert_eq!(
            p,
            TrustProblem::WrongFieldCount {
                keyword: "host",
                fields: 4
            }
        );
        let (_, p) = trust_problem("host\n");
        assert!(matches!(p, TrustProblem::WrongFieldCount { fields: 1, .. }));

        let (line, p) = trust_problem(&format!("{ok}host bad/name {}\n", b64(2)));
        assert_eq!(line, 2);
        assert_eq!(p, TrustProblem::BadName("bad/name".to_owned()));
        let long = "n".repeat(65);
        let (_, p) = trust_problem(&format!("owner {long} {}\n", b64(2)));
        assert_eq!(p, TrustProblem::BadName(long));

        let (line, p) = trust_problem(&format!("{ok}{ok}owner carol !!!!\n"));
        assert_eq!(line, 3);
        assert!(matches!(p, TrustProblem::BadBase64(_)), "{p:?}");

        let (_, p) = trust_problem(&format!("owner carol {}\n", B64.encode([1u8; 31])));
        assert_eq!(p, TrustProblem::WrongLength(31));

        let (line, p) = trust_problem(&format!("# c\n{ok}\nowner alice {}\n", b64(9)));
        assert_eq!(line, 4);
        assert_eq!(
            p,
            TrustProblem::DuplicateName {
                keyword: "owner",
                name: "alice".to_owned(),
                first_line: 2
            }
        );

        // Messages say where and what.
        let err = parse_trust(&format!("{ok}owner alice {}\n", b64(9))).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("line 2"), "{msg}");
        assert!(msg.contains("alice"), "{msg}");
        assert!(msg.contains("different key"), "{msg}");
        let msg = parse_trust("peer x y\n").unwrap_err().to_string();
        assert!(msg.contains("unknown entry kind"), "{msg}");
        assert!(msg.contains("\"peer\""), "{msg}");
    }

    #[test]
    fn read_trust_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trust");
        fs::write(&path, format!("host gw {}\n", b64(5))).unwrap();
        let trust = read_trust(&path).unwrap();
        assert_eq!(trust.hosts, vec![("gw".to_owned(), [5; 32])]);
        assert!(trust.owners.is_empty());

        fs::write(&path, format!("host gw {}\nhost ?? {}\n", b64(5), b64(6))).unwrap();
        let err = read_trust(&path).unwrap_err();
        match &err {
            KeyFileError::Trust {
                path: Some(p),
                line: 2,
                problem: TrustProblem::BadName(_),
            } => assert_eq!(p, &path),
            other => panic!("unexpected error {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.starts_with(&format!("{}:2: ", path.display())), "{msg}");

        let missing = dir.path().join("missing");
        let err = read_trust(&missing).unwrap_err();
        assert!(matches!(err, KeyFileError::Io { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("trust file"), "{msg}");
        assert!(msg.contains(&missing.display().to_string()), "{msg}");
    }

    #[test]
    fn trust_file_others_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let trust = dir.path().join("trust");
        write_mode(&trust, &format!("host gw {}\n", b64(5)), 0o666);
        let err = read_trust(&trust).unwrap_err();
        assert!(matches!(err, KeyFileError::Insecure(_)), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("trust file"), "{msg}");
        assert!(msg.contains("writable by group or others"), "{msg}");
        fs::set_permissions(&trust, fs::Permissions::from_mode(0o644)).unwrap();
        read_trust(&trust).unwrap();
    }

    #[test]
    fn owners_become_the_protocol_directory() {
        let trust = parse_trust(&format!(
            "owner alice {}\nowner bob {}\nhost gw {}\n",
            b64(1),
            b64(2),
            b64(3)
        ))
        .unwrap();
        let d = trust.directory().unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d.get("alice"), Some(&[1; 32]));
        assert_eq!(d.get("bob"), Some(&[2; 32]));
        assert_eq!(d.get("gw"), None, "hosts are not owners");
    }

    #[test]
    fn add_creates_appends_and_refuses_a_conflicting_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trust");
        let (k1, k2) = ([7u8; 32], [9u8; 32]);
        assert_eq!(add(&path, KeyKind::Host, "b", &k1).unwrap(), Added::New);
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            add(&path, KeyKind::Host, "b", &k1).unwrap(),
            Added::AlreadyTrusted
        );
        assert_eq!(add(&path, KeyKind::Owner, "b", &k2).unwrap(), Added::New);
        let before = fs::read_to_string(&path).unwrap();
        let e = add(&path, KeyKind::Host, "b", &k2).unwrap_err();
        assert!(e.to_string().contains("already listed"), "{e}");
        assert!(add(&path, KeyKind::Host, "bad name", &k2).is_err());
        assert!(
            add(&path, KeyKind::Owner, "z", &[0; 32]).is_err(),
            "weak key"
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), before, "left as it was");
        let t = read_trust(&path).unwrap();
        assert_eq!(t.hosts, vec![("b".to_string(), k1)]);
        assert_eq!(t.owners, vec![("b".to_string(), k2)]);
    }

    #[test]
    fn edits_lock_beside_the_file_and_refuse_a_planted_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trust");
        assert_eq!(lock_path(&path), dir.path().join(".trust.lock"));
        assert_eq!(lock_path(Path::new("t")), Path::new(".t.lock"));
        add(&path, KeyKind::Host, "a", &[7; 32]).unwrap();
        let lock = lock_path(&path);
        assert_eq!(
            fs::metadata(&lock).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A symlink in the lock's place must not be followed (created or locked elsewhere).
        fs::remove_file(&lock).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&elsewhere, &lock).unwrap();
        let e = add(&path, KeyKind::Host, "b", &[9; 32]).unwrap_err();
        assert!(e.to_string().contains("trust lock"), "{e}");
        assert!(remove(&path, "a").is_err());
        assert!(!elsewhere.exists());
        assert_eq!(read_trust(&path).unwrap().hosts.len(), 1, "left as it was");
    }

    #[test]
    fn remove_keeps_comments_and_other_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trust");
        let k = B64.encode([7u8; 32]);
        write_mode(
            &path,
            &format!("# mine\nhost a {k}\nowner b {k} # bob\nhost b {k}\n"),
            0o600,
        );
        assert_eq!(remove(&path, "b").unwrap(), 2);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            format!("# mine\nhost a {k}\n")
        );
        assert_eq!(remove(&path, "nobody").unwrap(), 0);
    }

    #[test]
    fn default_names_keep_what_a_name_allows() {
        assert_eq!(
            default_name(Some("my host.local\n".into()), "host"),
            "myhost.local"
        );
        assert_eq!(default_name(Some("  ".into()), "host"), "host");
        assert_eq!(default_name(None, "owner"), "owner");
        assert_eq!(default_name(Some("x".repeat(99)), "h").len(), MAX_NAME_LEN);
        assert!(check_name("bob").is_ok());
        assert_eq!(check_name("a b"), Err(TrustProblem::BadName("a b".into())));
        let t = TrustFile {
            owners: vec![("alice".into(), [1; 32])],
            hosts: vec![],
        };
        assert_eq!(t.owner_name(&[1; 32]), Some("alice"));
        assert_eq!(t.owner_name(&[2; 32]), None);
    }
}
