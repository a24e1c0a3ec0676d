//! Where control sockets live: `BASE/net-INODE/NAME.sock`.
//!
//! BASE is `--run-dir`, else `$SEALINK_RUN_DIR`, else `/run/sealink`. INODE is the inode of
//! `/proc/self/ns/net`, which names the network namespace: interface names are per namespace,
//! so two tunnels named alike in two namespaces get two sockets, and `sealink show`/`down` run
//! in a namespace reach the tunnel of that namespace.
//!
//! BASE is created 0700 if missing and must not be writable by other users; the namespace
//! directory is ours alone (owner us, mode 0700, tightened if found wider), so only we and root
//! can reach the sockets in it. The last tunnel of a namespace to stop removes the namespace
//! directory (empty by then); the base stays.

use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{TunnelError, io};
use sealink_keys::secure_file::{self, InsecureFile, Problem};

/// The run directory when neither `--run-dir` nor [`RUN_DIR_ENV`] says otherwise.
pub const DEFAULT_RUN_DIR: &str = "/run/sealink";
/// Environment variable naming the run directory.
pub const RUN_DIR_ENV: &str = "SEALINK_RUN_DIR";

/// The control socket directory of the calling process's network namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    base: PathBuf,
    netns: String,
}

impl RunDir {
    /// `base` if given, else `$SEALINK_RUN_DIR` (when set and not empty), else `/run/sealink`.
    pub fn new(base: Option<PathBuf>) -> Self {
        let base = base
            .or_else(|| {
                std::env::var_os(RUN_DIR_ENV)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(|| PathBuf::from(DEFAULT_RUN_DIR));
        RunDir {
            base,
            netns: netns_key(),
        }
    }

    /// The base directory (shared by all namespaces).
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The directory of this namespace's sockets.
    pub fn dir(&self) -> PathBuf {
        self.base.join(&self.netns)
    }

    /// Control socket of the tunnel `name` in this namespace.
    pub fn socket_path(&self, name: &str) -> PathBuf {
        self.dir().join(format!("{name}.sock"))
    }

    /// Creates the directories if missing and checks them (for `up`); returns [`Self::dir`].
    pub(crate) fn prepare(&self) -> Result<PathBuf, TunnelError> {
        // Not while another tunnel of this process has the umask at 0177 to bind its socket:
        // the directories would be created 0600, and once capabilities are gone nothing in
        // them could be removed.
        let _umask = crate::UMASK.lock().unwrap_or_else(|e| e.into_inner());
        let mut b = DirBuilder::new();
        b.mode(0o700).recursive(true);
        b.create(&self.base)
            .map_err(io(format!("create run directory {}", self.base.display())))?;
        let meta = std::fs::symlink_metadata(&self.base)
            .map_err(io(format!("run directory {}", self.base.display())))?;
        if !meta.is_dir() {
            return Err(not_dir(&self.base));
        }
        secure_file::check_dir(&meta, &self.base, "run directory")?;

        let dir = self.dir();
        b.recursive(false);
        match b.create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(format!("create {}", dir.display()))(e)),
        }
        // lstat: a symlink planted here is refused, not followed.
        let meta = std::fs::symlink_metadata(&dir).map_err(io(format!("{}", dir.display())))?;
        if !meta.is_dir() {
            return Err(not_dir(&dir));
        }
        let me = secure_file::my_uid();
        if meta.uid() != me {
            return Err(InsecureFile {
                what: "control socket directory",
                path: dir,
                dir: None,
                problem: Problem::Owner {
                    uid: meta.uid(),
                    me,
                },
            }
            .into());
        }
        if meta.mode() & 0o077 != 0 {
            // Ours: only we may use it (a wider mode was set by hand, or by an old version).
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io(format!("chmod 700 {}", dir.display())))?;
        }
        Ok(dir)
    }
}

/// Removes this namespace's socket directory once the last tunnel of the namespace has gone,
/// so that namespaces that come and go leave no empty `net-INODE` directories behind. A
/// directory still holding another tunnel's socket stays (rmdir removes only empty ones); any
/// other failure is only logged: the next `up` creates or checks the directory again.
pub(crate) fn remove_if_empty(dir: &Path) {
    match std::fs::remove_dir(dir) {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::DirectoryNotEmpty | std::io::ErrorKind::NotFound
            ) => {}
        Err(e) => tracing::debug!(error = %e, dir = %dir.display(), "run directory stays"),
    }
}

fn not_dir(p: &Path) -> TunnelError {
    TunnelError::Io {
        what: format!("run directory {}", p.display()),
        source: std::io::Error::other("not a directory (a symlink is not followed)"),
    }
}

/// `net-INODE` of the calling process's network namespace; `net-unknown` without /proc (all
/// namespaces then share one directory, as before namespaces were told apart).
fn netns_key() -> String {
    std::fs::metadata("/proc/self/ns/net")
        .map_or_else(|_| "net-unknown".to_owned(), |m| format!("net-{}", m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_by_namespace_and_created_private() {
        // `base` does not exist yet: `prepare` creates it, private.
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("run");
        let rd = RunDir::new(Some(base.clone()));
        let ns = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        assert_eq!(rd.dir(), base.join(format!("net-{ns}")));
        assert_eq!(
            rd.socket_path("sl0"),
            base.join(format!("net-{ns}")).join("sl0.sock")
        );
        let dir = rd.prepare().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(mode(&base), 0o700);
        assert_eq!(mode(&dir), 0o700);
        // A namespace directory opened up by hand is tightened again.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        rd.prepare().unwrap();
        assert_eq!(mode(&dir), 0o700);
        // A base anyone can write to is refused.
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = rd.prepare().unwrap_err();
        assert!(e.to_string().contains("writable by group or others"), "{e}");
        // A symlink in place of the namespace directory is refused.
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::remove_dir(&dir).unwrap();
        std::os::unix::fs::symlink("/tmp", &dir).unwrap();
        let e = rd.prepare().unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
    }
}
