//! The sender's list of what it sends: the files given, and each directory given walked into
//! entries (directories, regular files, symbolic links as links), lazily, in the order the
//! manifest requires (stream protocol 2): depth first, every directory before what it holds,
//! each directory's entries and the top-level ones in byte order of their names. The walk
//! holds one sorted listing per open directory, never the whole tree.
//!
//! What cannot be sent is reported and left out, and the rest goes (as rsync does): a source
//! that does not exist, an entry that cannot be read or that vanished, a name that cannot
//! travel. A link that is absolute or leads out of its tree is skipped with a warning, or with
//! `copy_links` sent as what it points to.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use sealink_proto::stream::FileEntry;
use sealink_proto::stream::body::{
    EntryKind, MAX_DEPTH, MAX_PATH_LEN, RESERVED_PREFIX, UNKNOWN_SIZE, link_stays_inside,
    reserved_name, valid_file_name,
};

use crate::error::TransferError;

/// One input of a transfer (here, with the walk that turns inputs into entries, so that `send`
/// imports `tree` and not the reverse).
#[derive(Debug, Clone)]
pub enum Source {
    /// A regular file or a directory (sent as a tree), under `name`.
    File { path: PathBuf, name: String },
    /// Standard input, sent under `name` (must be the last source).
    Stdin { name: String },
}

/// One entry of a transfer on the sender: what the hello announces, and for a regular file
/// the file, opened by the walk (a source given by name) or when its data is first needed (a
/// file of a tree, which the walk only looks at: a file the receiver already has is never
/// opened).
pub(crate) struct Input {
    pub entry: FileEntry,
    file: std::sync::OnceLock<File>,
    /// A file of a tree: its directory, open, and its name there. It is looked at and opened
    /// relative to the directory, which saves walking the whole path twice per file.
    at: Option<(Arc<OwnedFd>, OsString)>,
    /// Whether opening it later follows a link put in its place.
    follow: bool,
    /// Where it was read (`None` for standard input).
    pub path: Option<PathBuf>,
}

/// How a link found in a tree is sent ([`Walk::link`]).
enum LinkAs {
    /// As a link to this target.
    Link(String),
    /// As what it points to (`copy_links`), which is this.
    Target(std::fs::Metadata),
}

/// Why a file announced in a manifest cannot be sent as announced.
#[derive(Debug)]
pub(crate) enum Gone {
    /// It is no longer there, or it changed (kind, size or mtime) since it was looked at.
    Vanished(String),
    /// It cannot be opened or read.
    Unreadable(String),
}

impl Input {
    fn new(entry: FileEntry, file: Option<File>, path: Option<PathBuf>, follow: bool) -> Self {
        let cell = std::sync::OnceLock::new();
        if let Some(f) = file {
            let _ = cell.set(f);
        }
        Input {
            entry,
            file: cell,
            at: None,
            follow,
            path,
        }
    }

    /// The file to read: opened now if the walk only looked at it, not following a link put
    /// in its place since (unless links are followed), and refused if it is no longer the
    /// regular file of the size and mtime the manifest announced.
    pub fn open(&self) -> Result<&File, Gone> {
        if let Some(f) = self.file.get() {
            return Ok(f);
        }
        let Some(path) = &self.path else {
            return Err(Gone::Unreadable(format!(
                "{}: nothing to read",
                self.entry.name
            )));
        };
        use rustix::fs::{Mode, OFlags};
        let mut flags = OFlags::RDONLY | OFlags::CLOEXEC;
        if !self.follow {
            flags |= OFlags::NOFOLLOW;
        }
        let opened = match &self.at {
            Some((dir, name)) => rustix::fs::openat(&**dir, name.as_os_str(), flags, Mode::empty()),
            None => rustix::fs::open(path, flags, Mode::empty()),
        };
        let opened = opened.map_err(std::io::Error::from).map(File::from);
        let (f, m) = match opened.and_then(|f| f.metadata().map(|m| (f, m))) {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Gone::Vanished(format!("{} vanished", path.display())));
            }
            // A link put in its place (refused by O_NOFOLLOW).
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                return Err(Gone::Vanished(format!(
                    "{} changed: it is now a link",
                    path.display()
                )));
            }
            Err(e) => {
                return Err(Gone::Unreadable(format!(
                    "cannot open {}: {e}",
                    path.display()
                )));
            }
        };
        if !m.is_file() || m.len() != self.entry.size || mtime_ns(&m) != self.entry.mtime {
            return Err(Gone::Vanished(format!(
                "{} changed after it was listed",
                path.display()
            )));
        }
        let _ = self.file.set(f);
        Ok(self.file.get().expect("just set"))
    }
}

/// Modification time in nanoseconds since the epoch (0 if unknown or before it).
pub(crate) fn mtime_ns(meta: &std::fs::Metadata) -> u64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// [`mtime_ns`] of a `stat` result.
// The fields' types differ between targets (32-bit ones have narrower ones).
#[allow(clippy::unnecessary_cast)]
fn stat_mtime_ns(st: &rustix::fs::Stat) -> u64 {
    let (s, ns) = (st.st_mtime as i64, st.st_mtime_nsec as i64);
    if s < 0 {
        return 0;
    }
    (s as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ns.clamp(0, 999_999_999) as u64)
}

/// Opens directory `dir` and lists it: each name, and whether the listing says it is a
/// regular file.
fn list_dir(dir: &Path) -> std::io::Result<(OwnedFd, Vec<(OsString, bool)>)> {
    use rustix::fs::{FileType, Mode, OFlags};
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut left = Vec::new();
    for e in rustix::fs::Dir::read_from(&fd)? {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        use std::os::unix::ffi::OsStrExt;
        left.push((
            OsStr::from_bytes(name).to_owned(),
            e.file_type() == FileType::RegularFile,
        ));
    }
    Ok((fd, left))
}

fn mode_of(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o777
}

/// A name no receiver takes: it is one of the receiver's own (resume state, part files).
fn reserved(name: &str) -> TransferError {
    TransferError::Usage(format!(
        "cannot send {name}: names starting with {RESERVED_PREFIX} or ending in .sealink-part \
         are the receiver's own (rename it, or leave it out with --exclude)"
    ))
}

/// Compiles gitignore-style `patterns`, matched against paths relative to `root`.
fn excluder(root: &Path, patterns: &[String]) -> Result<Gitignore, TransferError> {
    let mut b = GitignoreBuilder::new(root);
    for p in patterns {
        b.add_line(None, p)
            .map_err(|e| TransferError::Usage(format!("bad --exclude pattern {p:?}: {e}")))?;
    }
    b.build()
        .map_err(|e| TransferError::Usage(format!("bad --exclude patterns: {e}")))
}

/// One directory being walked: where it is, its path as sent, what of it is left to list
/// (sorted, reversed: the next name is last), and the exclude patterns of its tree.
struct Level {
    dir: PathBuf,
    /// The directory, open: its files are looked at and opened relative to it.
    fd: Arc<OwnedFd>,
    rel: String,
    /// Each name, and whether the directory listing said it is a regular file (no `stat`
    /// needed to know one).
    left: Vec<(OsString, bool)>,
    ex: std::rc::Rc<Gitignore>,
    /// Device and inode, to refuse a loop of followed links (`copy_links`).
    id: (u64, u64),
}

/// The lazy walk over the sources (see the module's comment).
pub(crate) struct Walk {
    /// The sources still to start, sorted by name, reversed (the next is last).
    sources: Vec<Source>,
    levels: Vec<Level>,
    exclude: Vec<String>,
    copy_links: bool,
    peeked: Option<Input>,
    /// What could not be sent, one line each: the transfer is partial.
    pub problems: Vec<String>,
    /// Files that vanished or changed after being listed, one line each: not sent.
    pub vanished: Vec<String>,
    /// Entries that are neither a regular file, a directory nor a link (fifos, sockets,
    /// devices): not sent.
    pub special: Vec<PathBuf>,
    /// Entries left out by `--exclude` (an excluded directory counts once).
    pub excluded: u64,
    /// Links skipped because they are absolute or lead out of their tree.
    pub skipped_links: Vec<String>,
}

/// Most problems kept word for word; more are only counted.
const MAX_PROBLEMS_KEPT: usize = 1000;

/// Keeps `line` in `lines`, up to [`MAX_PROBLEMS_KEPT`] of them.
pub(crate) fn keep(lines: &mut Vec<String>, line: String) {
    if lines.len() < MAX_PROBLEMS_KEPT {
        lines.push(line);
    } else if lines.len() == MAX_PROBLEMS_KEPT {
        lines.push("(more: see the warnings above)".into());
    }
}

fn dev_ino(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

impl Walk {
    /// Checks the sources before anything connects: names that cannot travel (two the same,
    /// a reserved or invalid one) are usage errors; a source that cannot be opened is a
    /// problem, reported, and left out. Sources go in name order (the manifest's order);
    /// standard input, whose size is unknown, must be the last.
    pub fn new(
        sources: &[Source],
        exclude: &[String],
        copy_links: bool,
    ) -> Result<Self, TransferError> {
        if sources.is_empty() {
            return Err(TransferError::Usage(
                "give at least one file to send".into(),
            ));
        }
        let name_of = |s: &Source| match s {
            Source::File { name, .. } | Source::Stdin { name } => name.clone(),
        };
        let mut sorted = sources.to_vec();
        sorted.sort_by_key(name_of);
        for w in sorted.windows(2) {
            if name_of(&w[0]) == name_of(&w[1]) {
                return Err(TransferError::Usage(format!(
                    "cannot send two things under the name {:?}: names must be distinct",
                    name_of(&w[0])
                )));
            }
        }
        for s in &sorted {
            let name = name_of(s);
            if reserved_name(&name) {
                return Err(reserved(&name));
            }
            if !valid_file_name(&name) {
                return Err(TransferError::Usage(format!(
                    "cannot send under the name {name:?}: names must be plain file names"
                )));
            }
        }
        if let Some(i) = sorted
            .iter()
            .position(|s| matches!(s, Source::Stdin { .. }))
            && i + 1 != sorted.len()
        {
            return Err(TransferError::Usage(format!(
                "standard input is sent last, so its name must sort after the other names \
                 (it is {:?}; choose another with --name)",
                name_of(&sorted[i])
            )));
        }
        // Each exclude pattern is checked now, against any root.
        excluder(Path::new("/"), exclude)?;
        let mut w = Walk {
            sources: Vec::with_capacity(sorted.len()),
            levels: Vec::new(),
            exclude: exclude.to_vec(),
            copy_links,
            peeked: None,
            problems: Vec::new(),
            vanished: Vec::new(),
            special: Vec::new(),
            excluded: 0,
            skipped_links: Vec::new(),
        };
        for s in sorted {
            if let Source::File { path, .. } = &s
                && let Err(e) = std::fs::metadata(path)
            {
                w.problem(format!("cannot send {}: {e}", path.display()));
                continue;
            }
            w.sources.push(s);
        }
        w.sources.reverse();
        Ok(w)
    }

    fn problem(&mut self, line: String) {
        tracing::warn!("{line}");
        keep(&mut self.problems, line);
    }

    /// A file gone or changed between being listed and being read (rsync's "vanished").
    fn vanished(&mut self, line: String) {
        tracing::warn!("{line}");
        keep(&mut self.vanished, line);
    }

    /// The next batch: up to `max_entries` entries taking up to `max_bytes` in a manifest,
    /// and whether more follow. Files are opened here, as their batch is announced.
    pub fn next_batch(
        &mut self,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<(Vec<Input>, bool), TransferError> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        loop {
            let next = match self.peeked.take() {
                Some(i) => Some(i),
                None => self.next_input()?,
            };
            let Some(i) = next else {
                return Ok((out, false));
            };
            let len = 23
                + i.entry.name.len()
                + match &i.entry.kind {
                    EntryKind::Symlink(t) => 2 + t.len(),
                    _ => 0,
                };
            if !out.is_empty() && (out.len() >= max_entries || bytes + len > max_bytes) {
                self.peeked = Some(i);
                return Ok((out, true));
            }
            bytes += len;
            out.push(i);
        }
    }

    /// The next entry of the walk, or `None` at its end.
    fn next_input(&mut self) -> Result<Option<Input>, TransferError> {
        loop {
            let Some(level) = self.levels.last_mut() else {
                let Some(s) = self.sources.pop() else {
                    return Ok(None);
                };
                if let Some(i) = self.start(s)? {
                    return Ok(Some(i));
                }
                continue;
            };
            let Some((n, listed)) = level.left.pop() else {
                self.levels.pop();
                continue;
            };
            let (dir, rel, ex) = (level.dir.join(&n), level.rel.clone(), level.ex.clone());
            let fd = level.fd.clone();
            if let Some(i) = self.child(&dir, &fd, &rel, &n, listed, &ex)? {
                return Ok(Some(i));
            }
        }
    }

    /// Starts a source: a file as itself, a directory as a tree (a link given is followed).
    fn start(&mut self, s: Source) -> Result<Option<Input>, TransferError> {
        let (path, name) = match s {
            Source::Stdin { name } => {
                return Ok(Some(Input::new(
                    FileEntry {
                        name,
                        size: UNKNOWN_SIZE,
                        mtime: 0,
                        mode: 0o644,
                        kind: EntryKind::File,
                    },
                    None,
                    None,
                    false,
                )));
            }
            Source::File { path, name } => (path, name),
        };
        let opened = File::open(&path).and_then(|f| f.metadata().map(|m| (f, m)));
        let (file, meta) = match opened {
            Ok(x) => x,
            Err(e) => {
                self.problem(format!("cannot send {}: {e}", path.display()));
                return Ok(None);
            }
        };
        let kind = if meta.is_dir() {
            EntryKind::Dir
        } else if meta.is_file() {
            EntryKind::File
        } else {
            self.problem(format!(
                "cannot send {}: not a regular file or a directory",
                path.display()
            ));
            return Ok(None);
        };
        let dir = kind == EntryKind::Dir;
        if dir {
            let ex = std::rc::Rc::new(excluder(&path, &self.exclude)?);
            self.descend(&path, &name, ex, dev_ino(&meta));
        }
        Ok(Some(Input::new(
            FileEntry {
                name,
                size: if dir { 0 } else { meta.len() },
                // The version of the file a receiver's resume state is bound to.
                mtime: mtime_ns(&meta),
                mode: mode_of(&meta),
                kind,
            },
            (!dir).then_some(file),
            Some(path),
            true,
        )))
    }

    /// Lists directory `dir` (sent as `rel`) to walk it next; an unreadable one is a problem,
    /// and is sent empty.
    fn descend(&mut self, dir: &Path, rel: &str, ex: std::rc::Rc<Gitignore>, id: (u64, u64)) {
        match list_dir(dir) {
            Ok((fd, mut left)) => {
                left.sort_unstable_by(|a, b| b.0.cmp(&a.0));
                self.levels.push(Level {
                    dir: dir.to_owned(),
                    fd: Arc::new(fd),
                    rel: rel.to_owned(),
                    left,
                    ex,
                    id,
                });
            }
            Err(e) => self.problem(format!(
                "cannot read the directory {} (sent empty): {e}",
                dir.display()
            )),
        }
    }

    /// A regular file of a tree, looked at (not opened: see [`Input::open`]), not following a
    /// link put there since it was listed unless following was asked for. `None` (a problem
    /// reported) if it is gone or is no longer a regular file.
    fn file_entry(
        &mut self,
        path: &Path,
        dir: &Arc<OwnedFd>,
        n: &OsStr,
        name: String,
    ) -> Option<Input> {
        use rustix::fs::{AtFlags, FileType};
        let flags = if self.copy_links {
            AtFlags::empty()
        } else {
            AtFlags::SYMLINK_NOFOLLOW
        };
        match rustix::fs::statat(&**dir, n, flags).map_err(std::io::Error::from) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
                let mut input = Input::new(
                    FileEntry {
                        name,
                        size: u64::try_from(st.st_size).unwrap_or(0),
                        mtime: stat_mtime_ns(&st),
                        mode: st.st_mode & 0o777,
                        kind: EntryKind::File,
                    },
                    None,
                    Some(path.to_owned()),
                    self.copy_links,
                );
                input.at = Some((dir.clone(), n.to_owned()));
                Some(input)
            }
            Ok(_) => {
                self.vanished(format!("{} changed while being listed", path.display()));
                None
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.vanished(format!("{} vanished", path.display()));
                None
            }
            Err(e) => {
                self.problem(format!("cannot send {}: {e}", path.display()));
                None
            }
        }
    }

    /// What the link at `path` (sent as `name`) goes as: itself if it stays inside the tree,
    /// else what it points to with `copy_links`, else nothing (skipped with a warning); `None`
    /// also if it cannot be read (a problem, reported).
    fn link(&mut self, path: &Path, name: &str) -> Option<LinkAs> {
        let target = match std::fs::read_link(path) {
            Ok(t) => t.to_str().map(str::to_owned).unwrap_or_default(),
            Err(e) => {
                self.problem(format!("cannot read the link {}: {e}", path.display()));
                return None;
            }
        };
        if link_stays_inside(name, &target) {
            return Some(LinkAs::Link(target));
        }
        if self.copy_links {
            // What the link points to, sent in its place.
            return match std::fs::metadata(path) {
                Ok(m) => Some(LinkAs::Target(m)),
                Err(e) => {
                    self.problem(format!(
                        "cannot send what the link {} -> {target} points to: {e}",
                        path.display()
                    ));
                    None
                }
            };
        }
        let line = format!(
            "skipping the link {} -> {target}: it is absolute or leads out of the tree \
             (--copy-links sends what it points to)",
            path.display()
        );
        tracing::warn!("{line}");
        if self.skipped_links.len() < MAX_PROBLEMS_KEPT {
            self.skipped_links.push(line);
        }
        None
    }

    /// One entry of a directory being walked: its input, or `None` if it is left out.
    fn child(
        &mut self,
        path: &Path,
        dir: &Arc<OwnedFd>,
        rel: &str,
        n: &OsStr,
        listed_file: bool,
        ex: &std::rc::Rc<Gitignore>,
    ) -> Result<Option<Input>, TransferError> {
        // A reserved name is refused only if it is not excluded (`--exclude` can leave it out).
        let Some(n) = n
            .to_str()
            .filter(|n| valid_file_name(n) || reserved_name(n))
        else {
            self.problem(format!(
                "cannot send {}: its name is not UTF-8 without control characters or `\\`",
                path.display()
            ));
            return Ok(None);
        };
        let name = format!("{rel}/{n}");
        if name.len() > MAX_PATH_LEN || name.split('/').count() > MAX_DEPTH {
            self.problem(format!(
                "cannot send {}: the path is too long or too deep",
                path.display()
            ));
            return Ok(None);
        }
        let within = name.split_once('/').map_or("", |x| x.1);
        // A regular file as listed is opened (not following a link) and checked with `fstat`:
        // no `lstat` first.
        if listed_file {
            if ex.matched(within, false).is_ignore() {
                self.excluded += 1;
                return Ok(None);
            }
            if reserved_name(n) {
                self.problem(reserved(&path.display().to_string()).to_string());
                return Ok(None);
            }
            return Ok(self.file_entry(path, dir, OsStr::new(n), name));
        }
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.vanished(format!("{} vanished", path.display()));
                return Ok(None);
            }
            Err(e) => {
                self.problem(format!("cannot send {}: {e}", path.display()));
                return Ok(None);
            }
        };
        if ex.matched(within, meta.is_dir()).is_ignore() {
            self.excluded += 1;
            return Ok(None);
        }
        if reserved_name(n) {
            self.problem(reserved(&path.display().to_string()).to_string());
            return Ok(None);
        }
        let mut ft = meta.file_type();
        let mut meta = meta;
        let mut kind = None;
        if ft.is_symlink() {
            match self.link(path, &name) {
                None => return Ok(None),
                Some(LinkAs::Link(target)) => kind = Some(EntryKind::Symlink(target)),
                Some(LinkAs::Target(m)) => {
                    ft = m.file_type();
                    meta = m;
                }
            }
        }
        let (kind, size, file) = if let Some(k) = kind {
            (k, 0, None)
        } else if ft.is_dir() {
            let id = dev_ino(&meta);
            if self.levels.iter().any(|l| l.id == id) {
                self.problem(format!(
                    "cannot send {}: a link leads back to a directory above it",
                    path.display()
                ));
                return Ok(None);
            }
            self.descend(path, &name, ex.clone(), id);
            (EntryKind::Dir, 0, None)
        } else if ft.is_file() {
            return Ok(self.file_entry(path, dir, OsStr::new(n), name));
        } else {
            tracing::warn!(
                "skipping {}: not a regular file, directory or link",
                path.display()
            );
            self.special.push(path.to_owned());
            return Ok(None);
        };
        Ok(Some(Input::new(
            FileEntry {
                name,
                size,
                mtime: mtime_ns(&meta),
                mode: mode_of(&meta),
                kind,
            },
            file,
            Some(path.to_owned()),
            false,
        )))
    }
}
