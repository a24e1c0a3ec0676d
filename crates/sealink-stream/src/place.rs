//! Where a received transfer goes in the receiver's directory: what each entry of a hello
//! becomes, decided and checked against what is already there before anything is created; and
//! the commit that puts everything in place once all data has arrived and verified.
//!
//! A top-level directory that does not exist yet is assembled under a hidden staging
//! directory (`.<32 hex digits>.sealink-part-dir`) and renamed into place at the very end
//! (`RENAME_NOREPLACE`), so a failed transfer never leaves a partial tree under its name. The
//! staging directory's name is a hash of the owner's key and the tree's name: a transfer that
//! fails keeps it, and the same owner's next transfer of the same tree finds what it holds
//! (an entry there with the announced size and mtime is not sent again), so a tree of any
//! size resumes batch by batch. What the sender no longer has is deleted from it. An
//! existing directory is merged into only with the receiver's consent (`--force`, or the
//! sender's update taken by a receiver run with `--update`): each file is replaced
//! atomically, the tree as a whole is not, and the directory keeps its own mode and mtime
//! unless the receiver forces.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use sealink_proto::stream::FileEntry;
use sealink_proto::stream::body::{EntryKind, reserved_name};

use crate::error::{ExistsHint, IoContext, TransferError};
use crate::files::{PART_SUFFIX, PartFile, is_temp_name, lock_unused, set_mtime_at};
use crate::tree::mtime_ns;

/// Suffix of the receiver's staging directory.
pub(crate) const STAGING_SUFFIX: &str = ".sealink-part-dir";

/// What one entry becomes on the receiver.
#[derive(Debug)]
pub(crate) enum Slot {
    /// A regular file being received.
    Part(PartFile),
    /// A file of a new tree, written straight under its final name in the tree's staging
    /// directory, created when its first record arrives (or, with no data, when its batch is
    /// stored): the batch's ready need not wait for thousands of creations, which then overlap
    /// the data.
    Lazy(LazyFile),
    /// A file the receiver already has with the announced size and mtime: kept as it is.
    Keep,
    Dir,
    Link(String),
}

/// A file created on first use ([`Slot::Lazy`]).
#[derive(Debug)]
pub(crate) struct LazyFile {
    at: PathBuf,
    size: Option<u64>,
    /// Created with this mode (see [`PartFile::create_direct`]).
    mode: Option<u32>,
    made: std::sync::OnceLock<PartFile>,
    /// Held while one stripe creates it, so that another with a later record of the same
    /// file waits rather than fails on the name it finds taken.
    making: std::sync::Mutex<()>,
}

impl Slot {
    /// A slot for a file of a new tree, created by [`Slot::make`] (see [`Slot::Lazy`]).
    pub fn lazy(at: PathBuf, size: Option<u64>, mode: Option<u32>) -> Self {
        Slot::Lazy(LazyFile {
            at,
            size,
            mode,
            made: std::sync::OnceLock::new(),
            making: std::sync::Mutex::new(()),
        })
    }

    /// The slot's file, if it is one and exists.
    pub fn part(&self) -> Option<&PartFile> {
        match self {
            Slot::Part(p) => Some(p),
            Slot::Lazy(l) => l.made.get(),
            _ => None,
        }
    }

    /// The slot's file, created now if it is a lazy one not made yet; `None` if the slot is
    /// not a file being received.
    pub fn make(&self) -> std::io::Result<Option<&PartFile>> {
        let Slot::Lazy(l) = self else {
            return Ok(self.part());
        };
        if let Some(p) = l.made.get() {
            return Ok(Some(p));
        }
        let _one = l.making.lock().unwrap_or_else(|p| p.into_inner());
        if l.made.get().is_none() {
            let p = PartFile::create_direct(l.at.clone(), l.size, l.mode)?;
            let _ = l.made.set(p);
        }
        Ok(l.made.get())
    }

    /// Where the slot's file is (or will be), for messages.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Slot::Part(p) => Some(&p.path),
            Slot::Lazy(l) => Some(&l.at),
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
    /// A directory already in the tree's staging directory, kept from an interrupted
    /// transfer: merged into, and what the sender does not have is deleted from it.
    Staged,
    /// A directory of a new tree, created in its staging directory when its batch was opened
    /// ([`Tree::make_staged_dirs`]).
    Made,
}

/// A directory of the tree whose entries are still arriving: its mode and mtime are set, and
/// (with `--delete`) what the sender lacks is deleted from it, once the manifest has left it.
#[derive(Debug)]
struct OpenDir {
    name: String,
    mode: u32,
    mtime: u64,
    found: Found,
    /// The names the sender has in it: only for a directory that was there (merged into)
    /// when the receiver deletes what the sender lacks.
    names: Option<HashSet<String>>,
}

/// A top-level directory that did not exist in `dest`: assembled in its own staging
/// directory, locked by this session, renamed into place at the end.
#[derive(Debug)]
struct NewTop {
    name: String,
    staging: PathBuf,
    /// Holds the staging directory's lock (`flock`) for the session.
    _lock: std::fs::File,
    mode: u32,
    mtime: u64,
    /// Its staging directory held something from an interrupted transfer (else nothing in it
    /// needs looking at: every entry is new).
    kept: bool,
    /// A file or link of this session is in place in it (else it holds only the directories
    /// made for part files: nothing worth keeping for a rerun).
    stored: bool,
    /// It has no default ACL, so a file created in it gets the mode asked for less the
    /// umask, which the received modes have already taken off.
    plain_modes: bool,
}

/// From this many files a batch is made durable by one `syncfs` per file system; fewer are
/// fsynced each. A flush of the whole file system also writes whatever else is dirty there
/// (another copy just made, say), which a batch of a few changed files should not wait for.
const SYNCFS_FROM: usize = 64;

/// How long a session waits for another session of the same owner to let go of a tree's
/// staging directory (one whose sender has just died ends as soon as its connection does).
const STAGING_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Where a transfer's entries go in `dest`, batch after batch. Holds the new top-level
/// directories (each assembled under its staging directory) and the directories still open in
/// the manifest's depth-first order: bounded by the depth and the top-level directories, not
/// by the number of entries.
#[derive(Debug)]
pub(crate) struct Tree {
    dest: PathBuf,
    owner: [u8; 32],
    new_tops: Vec<NewTop>,
    new_top_names: std::collections::HashMap<String, usize>,
    open: Vec<OpenDir>,
    overwrite: bool,
    /// The sender asked for an update, and the receiver takes them.
    updating: bool,
    /// The sender asked for an update.
    update: bool,
    /// Delete, in directories merged into, what the sender does not have.
    delete: bool,
    /// `fsync` each file before it takes its name (off: `recv --no-fsync`).
    sync: bool,
    /// Entries deleted so far (what the sender no longer has).
    pub deleted: u64,
}

fn top(name: &str) -> &str {
    name.split('/').next().unwrap_or(name)
}

/// The staging directory of `owner`'s tree `top` in `dest`.
pub(crate) fn staging_name(owner: &[u8; 32], top: &str) -> String {
    let mut h = sealink_crypto::hash::Sha256::new();
    h.update(b"sealink tree staging");
    h.update(owner);
    h.update(top.as_bytes());
    let d = h.finish();
    let hex: String = d[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!(".{hex}{STAGING_SUFFIX}")
}

impl Tree {
    pub fn new(
        dest: &Path,
        owner: [u8; 32],
        overwrite: bool,
        take_updates: bool,
        update: bool,
        delete: bool,
        sync: bool,
    ) -> Self {
        Tree {
            dest: dest.to_owned(),
            owner,
            new_tops: Vec::new(),
            new_top_names: std::collections::HashMap::new(),
            open: Vec::new(),
            overwrite,
            updating: update && take_updates,
            update,
            delete,
            sync,
            deleted: 0,
        }
    }

    /// Opens (creating it if need be) and locks the staging directory of new top-level
    /// directory `name`; says whether it already holds `name` (kept from an interrupted
    /// transfer).
    fn stage(&mut self, name: &str, mode: u32, mtime: u64) -> Result<bool, TransferError> {
        use std::os::unix::fs::DirBuilderExt;
        let staging = self.dest.join(staging_name(&self.owner, name));
        match std::fs::DirBuilder::new().mode(0o700).create(&staging) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(TransferError::Io {
                    context: format!("cannot create {}", staging.display()),
                    source: e,
                });
            }
        }
        // Only a real directory of ours (never a link put there).
        let meta = staging
            .symlink_metadata()
            .ctx(|| format!("cannot look at {}", staging.display()))?;
        if !meta.is_dir() {
            return Err(TransferError::Usage(format!(
                "{} is not a directory",
                staging.display()
            )));
        }
        // Its name can be worked out by anyone who knows the owner's public key: in a
        // directory others may write to (a sticky /tmp), someone could make it first and swap
        // what is in it. Only a directory of this user's that no one else may write to is used.
        {
            use std::os::unix::fs::MetadataExt;
            if meta.uid() != rustix::process::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
                return Err(TransferError::Usage(format!(
                    "{} belongs to another user or others may write to it: not used as a \
                     staging directory (delete it if it is not yours)",
                    staging.display()
                )));
            }
        }
        let lock =
            std::fs::File::open(&staging).ctx(|| format!("cannot open {}", staging.display()))?;
        let start = std::time::Instant::now();
        loop {
            match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::WOULDBLOCK) if start.elapsed() < STAGING_WAIT => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => {
                    return Err(TransferError::Io {
                        context: format!(
                            "another transfer of {name} from the same owner is in progress \
                             (its staging directory is locked): try again once it has ended"
                        ),
                        source: e.into(),
                    });
                }
            }
        }
        let kept = staging
            .join(name)
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir());
        if !kept {
            // Whatever else an interrupted transfer left there is not this tree.
            clear_dir(&staging).ctx(|| format!("cannot empty {}", staging.display()))?;
        }
        let plain_modes = no_default_acl(&staging);
        self.new_top_names
            .insert(name.to_owned(), self.new_tops.len());
        self.new_tops.push(NewTop {
            name: name.to_owned(),
            staging,
            _lock: lock,
            mode,
            mtime,
            kept,
            stored: false,
            plain_modes,
        });
        Ok(kept)
    }

    /// What the staging directory holds at `f`'s place, kept from an interrupted transfer:
    /// the same file (size and mtime) or link is kept, another is replaced, a directory is
    /// merged into. Something of another kind there is deleted (it is the receiver's own
    /// staging area, no one else's).
    fn staged(&self, f: &FileEntry, path: &Path) -> Result<Found, TransferError> {
        let Ok(m) = path.symlink_metadata() else {
            return Ok(Found::Absent);
        };
        let same_kind = match &f.kind {
            EntryKind::Dir => m.is_dir(),
            EntryKind::File => m.is_file(),
            EntryKind::Symlink(_) => m.is_symlink(),
        };
        if !same_kind {
            let r = if m.is_dir() {
                std::fs::remove_dir_all(path)
            } else {
                std::fs::remove_file(path)
            };
            r.ctx(|| format!("cannot delete {}", path.display()))?;
            return Ok(Found::Absent);
        }
        Ok(match &f.kind {
            EntryKind::Dir => Found::Staged,
            EntryKind::File if f.mtime != 0 && m.len() == f.size && mtime_ns(&m) == f.mtime => {
                Found::Same
            }
            EntryKind::Symlink(t)
                if std::fs::read_link(path).is_ok_and(|l| l.as_os_str() == &**t) =>
            {
                Found::Same
            }
            _ => Found::Replace,
        })
    }

    /// Looks at what `dest` holds at each entry's place of one batch and decides, or refuses
    /// with [`TransferError::Exists`] (naming the entry relative to `dest`, and who can do
    /// what):
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
    pub fn plan(&mut self, files: &[FileEntry]) -> Result<Vec<Found>, TransferError> {
        let (overwrite, updating, update) = (self.overwrite, self.updating, self.update);
        let mut found = Vec::with_capacity(files.len());
        // What to tell the sender when a change needs the receiver's consent.
        let consent = |plain: ExistsHint| {
            if update { ExistsHint::NoConsent } else { plain }
        };
        for f in files {
            let top_level = !f.name.contains('/');
            if !top_level && let Some(&t) = self.new_top_names.get(top(&f.name)) {
                // In a tree just begun nothing is there yet: no need to look.
                found.push(if self.new_tops[t].kept {
                    self.staged(f, &self.target(&f.name))?
                } else {
                    Found::Absent
                });
                continue;
            }
            let path = self.dest.join(&f.name);
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
                let kept = top_level
                    && f.kind == EntryKind::Dir
                    && self.stage(&f.name, f.mode, f.mtime)?;
                found.push(if kept { Found::Staged } else { Found::Absent });
                continue;
            };
            let refuse = |hint| {
                Err(TransferError::Exists {
                    name: f.name.clone(),
                    hint,
                })
            };
            let here = match &f.kind {
                EntryKind::Dir if !m.is_dir() => return refuse(ExistsHint::NotDirectory),
                EntryKind::Dir if overwrite || updating => Found::Dir,
                EntryKind::Dir => return refuse(consent(ExistsHint::Merge)),
                _ if m.is_dir() => return refuse(ExistsHint::Directory),
                EntryKind::File
                    if update
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
            found.push(here);
        }
        Ok(found)
    }

    /// Whether entry `name` is assembled in a new tree's staging directory.
    fn staged_entry(&self, name: &str) -> bool {
        name.contains('/') && self.new_top_names.contains_key(top(name))
    }

    /// Creates the batch's directories that go in a new tree's staging directory and are not
    /// there yet (their `found` becomes [`Found::Made`]), so that each file of the tree gets
    /// its part file beside its final name ([`Tree::part_dir`]). Nothing in a staging directory
    /// is seen under the tree's name before [`Tree::finish`], so making them early shows
    /// nothing unfinished; directories merged into are still made at commit, in order.
    pub fn make_staged_dirs(
        &self,
        files: &[FileEntry],
        found: &mut [Found],
    ) -> Result<(), TransferError> {
        use std::os::unix::fs::DirBuilderExt;
        for (f, here) in files.iter().zip(found.iter_mut()) {
            let top_dir = !f.name.contains('/') && self.new_top_names.contains_key(&f.name);
            if f.kind == EntryKind::Dir
                && *here == Found::Absent
                && (top_dir || self.staged_entry(&f.name))
            {
                let target = self.target(&f.name);
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&target)
                    .map_err(|e| self.exists(e, &target, "create"))?;
                *here = Found::Made;
            }
        }
        Ok(())
    }

    /// The directory where file `name`'s part file is created, and the path it is named by
    /// until then: beside its final name in a new tree's staging directory (made by
    /// [`Tree::make_staged_dirs`], or kept from an interrupted transfer), where a crash
    /// leaves nothing in sight; otherwise in `dest`, whose leftovers the receiver cleans at
    /// start-up.
    pub fn part_dir(&self, name: &str) -> PathBuf {
        if self.staged_entry(name) {
            let target = self.target(name);
            if let Some(parent) = target.parent() {
                return parent.to_owned();
            }
        }
        self.dest.clone()
    }

    /// Whether a file of `name`'s new tree created with its received mode keeps it (see
    /// [`PartFile::create_direct`]).
    pub fn modes_kept_at_creation(&self, name: &str) -> bool {
        self.new_top_names
            .get(top(name))
            .is_some_and(|&t| self.new_tops[t].plain_modes)
    }

    /// Where file `name` is written straight under its final name: in a new tree's staging
    /// directory that held nothing when this session took it (every name in it is this
    /// session's; see [`PartFile::create_direct`]). `None`: it gets a part file.
    pub fn direct_path(&self, name: &str) -> Option<PathBuf> {
        let &t = self.new_top_names.get(top(name))?;
        (name.contains('/') && !self.new_tops[t].kept).then(|| self.target(name))
    }

    /// Where entry `name` is assembled: in its tree's staging directory if the tree is new.
    fn target(&self, name: &str) -> PathBuf {
        match self.new_top_names.get(top(name)) {
            Some(&i) => self.new_tops[i].staging.join(name),
            None => self.dest.join(name),
        }
    }

    fn exists(&self, e: std::io::Error, p: &Path, what: &str) -> TransferError {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            // Taken since the plan: named as the sender named it.
            let rel = self
                .new_tops
                .iter()
                .find_map(|t| p.strip_prefix(&t.staging).ok())
                .or_else(|| p.strip_prefix(&self.dest).ok())
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
    }

    /// Whether received files are fsynced before they take their names.
    pub fn sync(&self) -> bool {
        self.sync
    }

    /// Makes a batch's files durable before any of them takes its name: modes and mtimes set,
    /// then (with `sync`) one `syncfs` for each file system the batch's files are on (from
    /// [`SYNCFS_FROM`] files; fewer are fsynced each, by up to 8 threads). One
    /// flush of the file system (one journal commit) costs about what one file's `fsync`
    /// does, where a batch of small files took one commit per file (fsyncs side by side
    /// share some, not most). It also writes whatever else is dirty on that file system:
    /// mostly this transfer's own data. Needs no `Tree`: a batch is made durable while the
    /// next one is planned. Returns whether the files are ready for [`Tree::commit`]'s
    /// `synced` (a single file is left to its own `commit`, which fsyncs just it).
    pub fn durable(
        sync: bool,
        files: &[FileEntry],
        slots: &[Slot],
        modes: &[u32],
        left_out: &[bool],
    ) -> Result<bool, TransferError> {
        let parts: Vec<(usize, &PartFile)> = slots
            .iter()
            .enumerate()
            .filter(|(i, _)| left_out.get(*i) != Some(&true))
            .filter_map(|(i, s)| s.part().map(|p| (i, p)))
            .collect();
        let t0 = std::time::Instant::now();
        let synced = parts.len() > 1 || !sync;
        if !synced {
            return Ok(false);
        }
        for &(i, p) in &parts {
            p.prepare(modes.get(i).copied().unwrap_or(0o600), files[i].mtime)
                .ctx(|| format!("cannot set the mode and time of {}", p.path.display()))?;
        }
        let mut flushed = 0;
        if sync && parts.len() >= SYNCFS_FROM {
            let mut devices: Vec<u64> = Vec::new();
            for &(_, p) in &parts {
                if devices.contains(&p.device()) {
                    continue;
                }
                devices.push(p.device());
                rustix::fs::syncfs(&p.file)
                    .map_err(std::io::Error::from)
                    .ctx(|| format!("cannot store {}", p.path.display()))?;
                flushed += 1;
            }
        } else if sync {
            // A few files: an fsync each, side by side (the file system batches their journal
            // commits), rather than a flush of everything else dirty on the file system.
            let chunk = parts.len().div_ceil(8).max(1);
            std::thread::scope(|sc| {
                let handles: Vec<_> = parts
                    .chunks(chunk)
                    .map(|c| {
                        sc.spawn(move || {
                            c.iter().try_for_each(|&(_, p)| {
                                p.file
                                    .sync_all()
                                    .ctx(|| format!("cannot store {}", p.path.display()))
                            })
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .try_for_each(|h| crate::error::joined(h.join(), "sync"))
            })?;
        }
        tracing::debug!(
            "{} files: modes, times{} in {:.1} ms",
            parts.len(),
            if sync && flushed == 0 {
                " and an fsync each".to_owned()
            } else if sync {
                format!(" and {flushed} file system flush(es)")
            } else {
                String::new()
            },
            t0.elapsed().as_secs_f64() * 1e3,
        );
        Ok(true)
    }

    /// Puts one batch's entries in place, in order (a directory before what it holds): files
    /// by [`PartFile::commit`] (`synced`: made durable by [`Tree::durable`] already),
    /// directories created, links made. A directory gets its mode and mtime once the manifest
    /// has left it (see [`Tree::finish`]).
    pub fn commit(
        &mut self,
        files: &[FileEntry],
        found: &[Found],
        slots: &[Slot],
        modes: &[u32],
        synced: bool,
        left_out: &[bool],
    ) -> Result<(), TransferError> {
        for (i, (f, slot)) in files.iter().zip(slots).enumerate() {
            self.close_until(&f.name)?;
            if left_out.get(i) == Some(&true) {
                continue;
            }
            let here = found.get(i).copied().unwrap_or(Found::Absent);
            let target = self.target(&f.name);
            let mode = modes.get(i).copied().unwrap_or(0o600);
            if let Some(d) = self.open.last_mut()
                && let Some(names) = &mut d.names
            {
                names.insert(f.name.rsplit('/').next().unwrap_or_default().to_owned());
            }
            if !matches!(slot, Slot::Dir)
                && f.name.contains('/')
                && let Some(&t) = self.new_top_names.get(top(&f.name))
            {
                self.new_tops[t].stored = true;
            }
            match slot {
                // Only a planned replacement may replace: a name taken since is refused.
                Slot::Part(_) | Slot::Lazy(_) => {
                    let p = slot
                        .make()
                        .ctx(|| format!("cannot create {}", target.display()))?
                        .expect("a file's slot");
                    p.commit(&target, mode, f.mtime, here == Found::Replace, synced)
                        .map_err(|e| self.exists(e, &target, "store"))?;
                }
                Slot::Keep => {}
                Slot::Dir => {
                    if here == Found::Absent {
                        use std::os::unix::fs::DirBuilderExt;
                        std::fs::DirBuilder::new()
                            .mode(0o700)
                            .create(&target)
                            .map_err(|e| self.exists(e, &target, "create"))?;
                    }
                    if let Some(&t) = self.new_top_names.get(&f.name) {
                        self.new_tops[t].mode = mode;
                    }
                    // A directory kept from an interrupted transfer loses what the sender no
                    // longer has; one merged into, only when the receiver allows deleting.
                    let track = here == Found::Staged || (self.delete && here == Found::Dir);
                    self.open.push(OpenDir {
                        name: f.name.clone(),
                        mode,
                        mtime: f.mtime,
                        found: here,
                        names: track.then(HashSet::new),
                    });
                }
                Slot::Link(to) => {
                    match here {
                        Found::Same => continue,
                        Found::Replace => {
                            // A new link beside it, renamed over it: never a moment without.
                            let mut tag = [0u8; 16];
                            sealink_crypto::sign::random_bytes(&mut tag)
                                .map_err(std::io::Error::other)
                                .ctx(|| "cannot draw a random name".into())?;
                            let tag: String = tag.iter().map(|b| format!("{b:02x}")).collect();
                            let tmp = target
                                .with_file_name(format!(".{tag}{}", crate::files::PART_SUFFIX));
                            std::os::unix::fs::symlink(to, &tmp)
                                .map_err(|e| self.exists(e, &tmp, "create the link"))?;
                            if let Err(e) = std::fs::rename(&tmp, &target) {
                                let _ = std::fs::remove_file(&tmp);
                                return Err(self.exists(e, &target, "replace"));
                            }
                        }
                        _ => std::os::unix::fs::symlink(to, &target)
                            .map_err(|e| self.exists(e, &target, "create the link"))?,
                    }
                    set_mtime_at(&target, f.mtime)
                        .ctx(|| format!("cannot set the time of {}", target.display()))?;
                }
            }
        }
        Ok(())
    }

    /// Closes the open directories that `name` is not in (the manifest never comes back to
    /// them).
    fn close_until(&mut self, name: &str) -> Result<(), TransferError> {
        while let Some(d) = self.open.last() {
            if name.len() > d.name.len()
                && name.starts_with(d.name.as_str())
                && name.as_bytes()[d.name.len()] == b'/'
            {
                break;
            }
            let d = self.open.pop().expect("just looked");
            self.close(d)?;
        }
        Ok(())
    }

    /// A directory the manifest has left: what the sender lacks is deleted (with `--delete`,
    /// in a directory merged into), then it gets its mode and mtime (a directory that was
    /// there keeps its own unless the receiver forces; a new top-level one gets them once
    /// renamed into place).
    fn close(&mut self, d: OpenDir) -> Result<(), TransferError> {
        let path = self.target(&d.name);
        if let Some(names) = &d.names {
            self.delete_others(&path, names, d.found == Found::Staged)?;
        }
        let kept = d.found == Found::Dir && !self.overwrite;
        let new_top = !d.name.contains('/') && self.new_top_names.contains_key(&d.name);
        if !kept && !new_top {
            set_dir(&path, d.mode, d.mtime)?;
        }
        Ok(())
    }

    /// Deletes, in `dir` (a real directory of the receiver's, merged into), each entry not in
    /// `keep`; never the receiver's own files, never following a link. In a directory of a
    /// staging directory (`staged`), the part files a crashed receiver left go too (none in use
    /// by a live session: those are locked), or they would end up in the finished tree.
    fn delete_others(
        &mut self,
        dir: &Path,
        keep: &HashSet<String>,
        staged: bool,
    ) -> Result<(), TransferError> {
        let listed = std::fs::read_dir(dir).ctx(|| format!("cannot list {}", dir.display()))?;
        for e in listed {
            let e = e.ctx(|| format!("cannot list {}", dir.display()))?;
            let n = e.file_name();
            let Some(n) = n.to_str() else { continue };
            if staged && is_temp_name(n, PART_SUFFIX) {
                let p = dir.join(n);
                // The lock is held while it goes.
                let lock = lock_unused(&p);
                if lock.is_some() || p.symlink_metadata().is_ok_and(|m| m.is_symlink()) {
                    std::fs::remove_file(&p).ctx(|| format!("cannot delete {}", p.display()))?;
                }
                continue;
            }
            if keep.contains(n) || reserved_name(n) {
                continue;
            }
            let p = dir.join(n);
            let is_dir = p.symlink_metadata().is_ok_and(|m| m.is_dir());
            let r = if is_dir {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            r.ctx(|| format!("cannot delete {}", p.display()))?;
            tracing::info!("deleted {} (the sender no longer has it)", p.display());
            self.deleted += 1;
        }
        Ok(())
    }

    /// After the last batch: closes every open directory, and renames each new top-level
    /// directory into place (`RENAME_NOREPLACE`: refused if its name was taken meanwhile),
    /// then deletes its (now empty) staging directory.
    pub fn finish(&mut self) -> Result<(), TransferError> {
        while let Some(d) = self.open.pop() {
            self.close(d)?;
        }
        for t in &self.new_tops {
            let (from, to) = (t.staging.join(&t.name), self.dest.join(&t.name));
            rustix::fs::renameat_with(
                rustix::fs::CWD,
                &from,
                rustix::fs::CWD,
                &to,
                rustix::fs::RenameFlags::NOREPLACE,
            )
            .map_err(|e| self.exists(e.into(), &to, "move into place"))?;
            set_dir(&to, t.mode, t.mtime)?;
            let _ = std::fs::remove_dir(&t.staging);
        }
        self.new_tops.clear();
        self.new_top_names.clear();
        Ok(())
    }

    /// After a failure: each new tree's staging directory is kept for the next transfer of
    /// the same tree (the staging directories of the receiver are cleaned after
    /// `--resume-max-age`); one that holds nothing of this session's but the directories made
    /// for part files is deleted. No partial tree ever appears under its name.
    pub fn abandon(&mut self) {
        for t in self.new_tops.drain(..) {
            if t.kept || t.stored {
                let _ = std::fs::remove_dir(&t.staging);
            } else {
                // Only directories made for part files (the part files are gone).
                let _ = std::fs::remove_dir_all(&t.staging);
            }
        }
        self.new_top_names.clear();
    }
}

/// Deletes everything in `dir` (never following a link).
fn clear_dir(dir: &Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.symlink_metadata()?.is_dir() {
            std::fs::remove_dir_all(&p)?;
        } else {
            std::fs::remove_file(&p)?;
        }
    }
    Ok(())
}

fn set_dir(path: &Path, mode: u32, mtime: u64) -> Result<(), TransferError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o777))
        .ctx(|| format!("cannot set the mode of {}", path.display()))?;
    set_mtime_at(path, mtime).ctx(|| format!("cannot set the time of {}", path.display()))
}

/// Whether `dir` has no default ACL (none set, or a file system without them): files and
/// directories created in it then get the mode asked for, less the umask. Anything else,
/// an ACL or an error, is taken as "it may have one".
fn no_default_acl(dir: &Path) -> bool {
    match rustix::fs::getxattr(dir, "system.posix_acl_default", &mut [0u8; 0][..]) {
        Err(rustix::io::Errno::NODATA | rustix::io::Errno::NOTSUP) => true,
        Ok(_) | Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, kind: EntryKind) -> FileEntry {
        FileEntry {
            name: name.into(),
            size: 0,
            mtime: 1_600_000_000_000_000_000,
            mode: 0o755,
            kind,
        }
    }

    #[test]
    fn a_staging_directory_others_may_write_to_is_not_used() {
        use std::os::unix::fs::PermissionsExt;
        let dest = tempfile::tempdir().unwrap();
        let owner = [7u8; 32];
        let staging = dest.path().join(staging_name(&owner, "t"));
        std::fs::create_dir(&staging).unwrap();
        std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o777)).unwrap();
        let mut tree = Tree::new(dest.path(), owner, false, false, false, false, true);
        let e = tree.plan(&[entry("t", EntryKind::Dir)]).unwrap_err();
        assert!(e.to_string().contains("others may write to it"), "{e}");

        // Its own, private: used, and the tree's directories are made in it as a batch opens.
        std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o700)).unwrap();
        let files = [
            entry("t", EntryKind::Dir),
            entry("t/d", EntryKind::Dir),
            entry("t/d/f", EntryKind::File),
        ];
        let mut found = tree.plan(&files).unwrap();
        assert_eq!(found, [Found::Absent; 3]);
        tree.make_staged_dirs(&files, &mut found).unwrap();
        assert_eq!(found, [Found::Made, Found::Made, Found::Absent]);
        assert!(staging.join("t/d").is_dir());
        assert_eq!(tree.direct_path("t/d/f"), Some(staging.join("t/d/f")));
        assert_eq!(tree.part_dir("t/d/f"), staging.join("t/d"));
        // A file given alone is not in a tree: its part file goes in the directory itself.
        assert_eq!(tree.direct_path("g"), None);
        assert_eq!(tree.part_dir("g"), dest.path());
        // Nothing of this session's is stored in it: abandoning deletes it whole.
        tree.abandon();
        assert!(!staging.exists());
    }
}
