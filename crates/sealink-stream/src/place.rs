//! Where a received transfer goes in the receiver's directory: what each entry of a hello
//! becomes, decided and checked against what is already there before anything is created; and
//! the commit that puts everything in place once all data has arrived and verified.
//!
//! A top-level directory that does not exist yet is assembled under a hidden staging
//! directory (`.<32 hex digits>.sealink-part-dir`) and renamed into place at the very end
//! (`RENAME_NOREPLACE`), so a failed transfer never leaves a partial tree under its name. An
//! existing directory is merged into only with the receiver's consent (`--force`, or the
//! sender's update taken by a receiver run with `--update`): each file is replaced
//! atomically, the tree as a whole is not, and the directory keeps its own mode and mtime
//! unless the receiver forces.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use sealink_proto::stream::Hello;
use sealink_proto::stream::body::EntryKind;

use crate::error::{ExistsHint, IoContext, TransferError};
use crate::files::{PartFile, set_mtime_at};
use crate::tree::mtime_ns;

/// Suffix of the receiver's staging directory.
pub(crate) const STAGING_SUFFIX: &str = ".sealink-part-dir";

/// What one entry becomes on the receiver.
#[derive(Debug)]
pub(crate) enum Slot {
    /// A regular file being received.
    Part(PartFile),
    /// A file the receiver already has with the announced size and mtime: kept as it is.
    Keep,
    Dir,
    Link(String),
}

impl Slot {
    pub fn part(&self) -> Option<&PartFile> {
        match self {
            Slot::Part(p) => Some(p),
            _ => None,
        }
    }
}

/// What was at an entry's place when the hello arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    Absent,
    /// The same file (size and mtime, when the sender asked for an update) or the same link.
    Same,
    /// Something the entry replaces (`--force`; never a directory).
    Replace,
    /// A directory (not a link to one) that the tree merges into.
    Dir,
}

/// The placement of a hello's entries in `dest`.
#[derive(Debug)]
pub(crate) struct Tree {
    dest: PathBuf,
    /// Top-level directories that did not exist: built under `staging`, renamed in at the end.
    new_tops: HashSet<String>,
    staging: PathBuf,
    found: Vec<Found>,
}

fn top(name: &str) -> &str {
    name.split('/').next().unwrap_or(name)
}

impl Tree {
    /// Looks at what `dest` holds at each entry's place and decides, or refuses with
    /// [`TransferError::Exists`] (naming the entry relative to `dest`, and who can do what):
    ///
    /// - an existing directory is merged into with `overwrite`, or when the sender asked for an
    ///   update and the receiver takes updates (`take_updates`);
    /// - a file with the announced size and mtime is kept as it is when the sender asked for an
    ///   update (nothing changes, so no consent is needed);
    /// - a file or link is replaced with `overwrite`, or by one of its own kind when the sender
    ///   asked for an update and the receiver takes updates;
    /// - a directory is never replaced, and never replaces anything.
    ///
    /// Creates nothing.
    pub fn plan(
        dest: &Path,
        hello: &Hello,
        overwrite: bool,
        take_updates: bool,
    ) -> Result<Self, TransferError> {
        let mut tag = [0u8; 16];
        sealink_crypto::sign::random_bytes(&mut tag)
            .map_err(std::io::Error::other)
            .ctx(|| "cannot draw a random name".into())?;
        let tag: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        let mut t = Tree {
            dest: dest.to_owned(),
            new_tops: HashSet::new(),
            staging: dest.join(format!(".{tag}{STAGING_SUFFIX}")),
            found: Vec::with_capacity(hello.files.len()),
        };
        let updating = hello.update && take_updates;
        // What to tell the sender when a change needs the receiver's consent.
        let consent = |plain: ExistsHint| {
            if hello.update {
                ExistsHint::NoConsent
            } else {
                plain
            }
        };
        for f in &hello.files {
            let top_level = !f.name.contains('/');
            if !top_level && t.new_tops.contains(top(&f.name)) {
                t.found.push(Found::Absent);
                continue;
            }
            let path = dest.join(&f.name);
            let meta = match path.symlink_metadata() {
                Ok(m) => Some(m),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => {
                    return Err(TransferError::Io {
                        context: format!("cannot look at {}", path.display()),
                        source: e,
                    });
                }
            };
            let Some(m) = meta else {
                if top_level && f.kind == EntryKind::Dir {
                    t.new_tops.insert(f.name.clone());
                }
                t.found.push(Found::Absent);
                continue;
            };
            let refuse = |hint| {
                Err(TransferError::Exists {
                    name: f.name.clone(),
                    hint,
                })
            };
            let found = match &f.kind {
                EntryKind::Dir if !m.is_dir() => return refuse(ExistsHint::NotDirectory),
                EntryKind::Dir if overwrite || updating => Found::Dir,
                EntryKind::Dir => return refuse(consent(ExistsHint::Merge)),
                _ if m.is_dir() => return refuse(ExistsHint::Directory),
                EntryKind::File
                    if hello.update
                        && m.is_file()
                        && f.mtime != 0
                        && m.len() == f.size
                        && mtime_ns(&m) == f.mtime =>
                {
                    Found::Same
                }
                EntryKind::Symlink(target)
                    if m.is_symlink()
                        && std::fs::read_link(&path).is_ok_and(|l| l.as_os_str() == &**target) =>
                {
                    Found::Same
                }
                _ if overwrite => Found::Replace,
                EntryKind::File if updating && m.is_file() => Found::Replace,
                EntryKind::Symlink(_) if updating && m.is_symlink() => Found::Replace,
                _ if updating => return refuse(ExistsHint::OtherKind),
                _ => return refuse(consent(ExistsHint::Replace)),
            };
            t.found.push(found);
        }
        Ok(t)
    }

    pub fn found(&self, i: usize) -> Found {
        self.found.get(i).copied().unwrap_or(Found::Absent)
    }

    /// Where entry `name` is assembled: in the staging directory if its tree is new.
    fn target(&self, name: &str) -> PathBuf {
        if self.new_tops.contains(top(name)) {
            self.staging.join(name)
        } else {
            self.dest.join(name)
        }
    }

    /// Puts every entry in place, in the hello's order (a directory before what it holds):
    /// files by [`PartFile::commit`], directories created, links made; then directories get
    /// their modes and mtimes (deepest first, after what they hold), and each new top-level
    /// directory is renamed into place, refused if its name was taken meanwhile. On failure
    /// the staging directory and everything in it is deleted.
    pub fn commit(
        &self,
        hello: &Hello,
        slots: &[Slot],
        modes: &[u32],
        overwrite: bool,
    ) -> Result<(), TransferError> {
        let staged = !self.new_tops.is_empty();
        if staged {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&self.staging)
                .ctx(|| format!("cannot create {}", self.staging.display()))?;
        }
        let r = self.put(hello, slots, modes, overwrite);
        if staged {
            if r.is_err() {
                let _ = std::fs::remove_dir_all(&self.staging);
            } else {
                let _ = std::fs::remove_dir(&self.staging);
            }
        }
        r
    }

    fn put(
        &self,
        hello: &Hello,
        slots: &[Slot],
        modes: &[u32],
        overwrite: bool,
    ) -> Result<(), TransferError> {
        let exists = |e: std::io::Error, p: &Path, what: &str| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                // Taken since the plan: named as the sender named it.
                let rel = p
                    .strip_prefix(&self.staging)
                    .or_else(|_| p.strip_prefix(&self.dest))
                    .unwrap_or(p);
                TransferError::Exists {
                    name: rel.display().to_string(),
                    hint: ExistsHint::Replace,
                }
            } else {
                TransferError::Io {
                    context: format!("cannot {what} {}", p.display()),
                    source: e,
                }
            }
        };
        for (i, (f, slot)) in hello.files.iter().zip(slots).enumerate() {
            let target = self.target(&f.name);
            let mode = modes.get(i).copied().unwrap_or(0o600);
            match slot {
                // Only a planned replacement may replace: a name taken since is refused.
                Slot::Part(p) => p
                    .commit(&target, mode, f.mtime, self.found(i) == Found::Replace)
                    .map_err(|e| exists(e, &target, "store"))?,
                Slot::Keep => {}
                Slot::Dir => {
                    if self.found(i) == Found::Absent {
                        use std::os::unix::fs::DirBuilderExt;
                        std::fs::DirBuilder::new()
                            .mode(0o700)
                            .create(&target)
                            .map_err(|e| exists(e, &target, "create"))?;
                    }
                }
                Slot::Link(to) => {
                    match self.found(i) {
                        Found::Same => continue,
                        Found::Replace => {
                            // A new link beside it, renamed over it: never a moment without.
                            let tmp = target.with_file_name(format!(
                                ".{}{}",
                                &self.staging_tag(),
                                crate::files::PART_SUFFIX
                            ));
                            std::os::unix::fs::symlink(to, &tmp)
                                .map_err(|e| exists(e, &tmp, "create the link"))?;
                            if let Err(e) = std::fs::rename(&tmp, &target) {
                                let _ = std::fs::remove_file(&tmp);
                                return Err(exists(e, &target, "replace"));
                            }
                        }
                        _ => std::os::unix::fs::symlink(to, &target)
                            .map_err(|e| exists(e, &target, "create the link"))?,
                    }
                    set_mtime_at(&target, f.mtime)
                        .ctx(|| format!("cannot set the time of {}", target.display()))?;
                }
            }
        }
        let set_dir = |path: &Path, i: usize, mtime: u64| -> Result<(), TransferError> {
            use std::os::unix::fs::PermissionsExt;
            let mode = modes.get(i).copied().unwrap_or(0o700) & 0o777;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                .ctx(|| format!("cannot set the mode of {}", path.display()))?;
            set_mtime_at(path, mtime).ctx(|| format!("cannot set the time of {}", path.display()))
        };
        let is_new_top = |name: &str| self.new_tops.contains(name);
        for (i, f) in hello.files.iter().enumerate().rev() {
            // A directory that was there keeps its mode and mtime unless the receiver forces.
            let kept = self.found(i) == Found::Dir && !overwrite;
            if f.kind == EntryKind::Dir && !is_new_top(&f.name) && !kept {
                set_dir(&self.target(&f.name), i, f.mtime)?;
            }
        }
        for (i, f) in hello.files.iter().enumerate() {
            if f.kind != EntryKind::Dir || !is_new_top(&f.name) {
                continue;
            }
            let (from, to) = (self.staging.join(&f.name), self.dest.join(&f.name));
            rustix::fs::renameat_with(
                rustix::fs::CWD,
                &from,
                rustix::fs::CWD,
                &to,
                rustix::fs::RenameFlags::NOREPLACE,
            )
            .map_err(|e| exists(e.into(), &to, "move into place"))?;
            set_dir(&to, i, f.mtime)?;
        }
        Ok(())
    }

    fn staging_tag(&self) -> String {
        self.staging
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix('.'))
            .and_then(|n| n.strip_suffix(STAGING_SUFFIX))
            .unwrap_or("link")
            .to_owned()
    }
}
