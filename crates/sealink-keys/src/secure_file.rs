//! StrictModes-style checks (as ssh does) for the files that hold keys, trust lists and tunnel
//! configuration, and for the control socket's run directory. Whoever can edit a trust list or
//! a peer's key can make this node believe them, so a file another user can write, or replace
//! through its directory, is refused with a message that says how to fix it.
//!
//! A file passes when it is owned by us or by root and not writable by group or others, and its
//! directory is owned by us or by root and not writable by group or others, unless the sticky
//! bit is set (as on /tmp: then only the file's owner may rename or remove it).

use std::fmt;
use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const STICKY: u32 = 0o1000;

/// What is wrong with a file or directory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// Group or others may write it.
    Writable { mode: u32 },
    /// Owned by a user other than us and root.
    Owner { uid: u32, me: u32 },
}

/// A file (or the directory that holds it) that other users could have written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InsecureFile {
    /// What the file is, e.g. "trust file", "tunnel config".
    pub what: &'static str,
    pub path: PathBuf,
    /// The directory at fault, when it is the directory and not the file itself.
    pub dir: Option<PathBuf>,
    pub problem: Problem,
}

impl fmt::Display for InsecureFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refusing {} {}: ", self.what, self.path.display())?;
        let (subject, target) = match &self.dir {
            Some(d) => (format!("its directory {}", d.display()), d.as_path()),
            None => ("it".to_owned(), self.path.as_path()),
        };
        match &self.problem {
            Problem::Writable { mode } => write!(
                f,
                "{subject} is writable by group or others (mode {mode:04o}){}; run `chmod go-w {}`",
                if self.dir.is_some() {
                    ", so anyone could replace the file"
                } else {
                    ""
                },
                target.display()
            ),
            Problem::Owner { uid, me } => write!(
                f,
                "{subject} is owned by uid {uid}, neither you (uid {me}) nor root; run `chown {me} {}`",
                target.display()
            ),
        }
    }
}

/// Our effective uid.
pub fn my_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The problem with `meta`, if any: owner other than `me` and root, or group/other-writable
/// (directories with the sticky bit excepted when `sticky_ok`).
fn problem(meta: &Metadata, me: u32, sticky_ok: bool) -> Option<Problem> {
    problem_of(meta.uid(), meta.mode(), me, sticky_ok)
}

fn problem_of(uid: u32, mode: u32, me: u32, sticky_ok: bool) -> Option<Problem> {
    let mode = mode & 0o7777;
    if uid != me && uid != 0 {
        return Some(Problem::Owner { uid, me });
    }
    if mode & 0o022 != 0 && !(sticky_ok && mode & STICKY != 0) {
        return Some(Problem::Writable { mode });
    }
    None
}

/// Checks an opened file (its own metadata, so it is the file that was read) and the directory
/// named by `path`'s parent.
pub fn check_file(file: &File, path: &Path, what: &'static str) -> Result<(), InsecureFile> {
    let me = my_uid();
    let fail = |dir: Option<PathBuf>, problem| InsecureFile {
        what,
        path: path.to_path_buf(),
        dir,
        problem,
    };
    // An fstat failure leaves nothing to judge; the read itself already succeeded.
    if let Ok(meta) = file.metadata() {
        if let Some(p) = problem(&meta, me, false) {
            return Err(fail(None, p));
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Ok(meta) = std::fs::metadata(dir) {
        if let Some(p) = problem(&meta, me, true) {
            return Err(fail(Some(dir.to_path_buf()), p));
        }
    }
    Ok(())
}

/// [`check_file`] for a file someone else opened and stat'ed for us: `uid` and `mode` of the
/// file and of its directory, judged for the user `me` (a tunnel that switched users reads its
/// config through a helper still running as the user that started it, and judges for that one).
pub fn check_owner_and_mode(
    (uid, mode): (u32, u32),
    (dir_uid, dir_mode): (u32, u32),
    me: u32,
    path: &Path,
    what: &'static str,
) -> Result<(), InsecureFile> {
    let fail = |dir: Option<PathBuf>, problem| InsecureFile {
        what,
        path: path.to_path_buf(),
        dir,
        problem,
    };
    if let Some(p) = problem_of(uid, mode, me, false) {
        return Err(fail(None, p));
    }
    if let Some(p) = problem_of(dir_uid, dir_mode, me, true) {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        return Err(fail(Some(dir.to_path_buf()), p));
    }
    Ok(())
}

/// Checks a directory the way [`check_file`] checks a file's directory (`meta` from `lstat`).
pub fn check_dir(meta: &Metadata, path: &Path, what: &'static str) -> Result<(), InsecureFile> {
    match problem(meta, my_uid(), true) {
        None => Ok(()),
        Some(problem) => Err(InsecureFile {
            what,
            path: path.to_path_buf(),
            dir: None,
            problem,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    /// A fresh directory, removed on drop, with mode 0755 whatever the umask (the test changes
    /// it and checks what each mode means).
    fn scratch() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    fn check(path: &Path) -> Result<(), InsecureFile> {
        check_file(&File::open(path).unwrap(), path, "test file")
    }

    #[test]
    fn modes_owners_and_directories() {
        let scratch = scratch();
        let d = scratch.path();
        let f = d.join("f");
        fs::write(&f, "x").unwrap();
        for (mode, ok) in [
            (0o644, true),
            (0o600, true),
            (0o444, true),
            (0o664, false),
            (0o646, false),
            (0o666, false),
        ] {
            fs::set_permissions(&f, fs::Permissions::from_mode(mode)).unwrap();
            let r = check(&f);
            assert_eq!(r.is_ok(), ok, "{mode:o}: {r:?}");
            if let Err(e) = r {
                assert_eq!(e.problem, Problem::Writable { mode });
                assert!(e.to_string().contains("chmod go-w"), "{e}");
            }
        }
        fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
        for (mode, ok) in [
            (0o755, true),
            (0o775, false),
            (0o777, false),
            (0o1777, true),
        ] {
            fs::set_permissions(d, fs::Permissions::from_mode(mode)).unwrap();
            let r = check(&f);
            assert_eq!(r.is_ok(), ok, "dir {mode:o}: {r:?}");
            if let Err(e) = r {
                assert_eq!(e.dir.as_deref(), Some(d));
                assert!(e.to_string().contains("its directory"), "{e}");
            }
        }
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
        // The same judgement from owners and modes given by value.
        let by_value = |f, d| check_owner_and_mode(f, d, 0, Path::new("/x/f"), "test file");
        assert!(by_value((0, 0o100600), (0, 0o40700)).is_ok());
        assert!(
            by_value((0, 0o100600), (0, 0o41777)).is_ok(),
            "sticky directory"
        );
        let e = by_value((0, 0o100620), (0, 0o40755)).unwrap_err();
        assert_eq!(e.problem, Problem::Writable { mode: 0o620 });
        let e = by_value((65534, 0o100600), (0, 0o40755)).unwrap_err();
        assert_eq!(e.problem, Problem::Owner { uid: 65534, me: 0 });
        let e = by_value((0, 0o100600), (0, 0o40777)).unwrap_err();
        assert_eq!(e.dir.as_deref(), Some(Path::new("/x")));
        if my_uid() == 0 {
            std::os::unix::fs::chown(&f, Some(65534), None).unwrap();
            let e = check(&f).unwrap_err();
            assert_eq!(e.problem, Problem::Owner { uid: 65534, me: 0 });
            assert!(e.to_string().contains("owned by uid 65534"), "{e}");
        }
    }
}
