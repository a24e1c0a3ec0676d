//! The sender's list of what it sends: the files given, and each directory given walked into
//! entries (directories, regular files, symbolic links as links), in an order where every
//! directory comes before what it holds.

use std::fs::File;
use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use sealink_proto::stream::body::{
    EntryKind, MAX_DEPTH, MAX_FILES, MAX_PATH_LEN, RESERVED_PREFIX, UNKNOWN_SIZE,
    link_stays_inside, reserved_name, valid_file_name,
};
use sealink_proto::stream::{FileEntry, StreamError};

use crate::error::{IoContext, TransferError};

/// One input of a transfer (here, with the walk that turns inputs into entries, so that `send`
/// imports `tree` and not the reverse).
#[derive(Debug, Clone)]
pub enum Source {
    /// A regular file or a directory (sent as a tree), under `name`.
    File { path: PathBuf, name: String },
    /// Standard input, sent under `name` (must be the last source).
    Stdin { name: String },
}

/// One entry of a transfer on the sender: what the hello announces, and the open file for a
/// regular file (`None` for standard input, directories and links).
pub(crate) struct Input {
    pub entry: FileEntry,
    pub file: Option<File>,
    /// Where it was read (`None` for standard input).
    pub path: Option<PathBuf>,
}

/// What walking the sources gave.
pub(crate) struct Walked {
    pub inputs: Vec<Input>,
    /// Entries of the trees that are neither a regular file, a directory nor a link (fifos,
    /// sockets, devices): not sent.
    pub special: Vec<PathBuf>,
    /// Entries left out by `--exclude` (an excluded directory counts once).
    pub excluded: u64,
}

/// Modification time in nanoseconds since the epoch (0 if unknown or before it).
pub(crate) fn mtime_ns(meta: &std::fs::Metadata) -> u64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn mode_of(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o777
}

fn too_many() -> TransferError {
    TransferError::Usage(format!(
        "more than {MAX_FILES} entries (files, directories and links) to send in one transfer: \
         send the tree in parts, or leave some out with --exclude"
    ))
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

/// Opens every source: a file as itself (a link given on the command line is followed), a
/// directory as a tree (links inside it are sent as links, never followed). Fails, before
/// anything is sent, on an unreadable entry (naming it), on a link whose target a receiver
/// would refuse, on a name that cannot travel, and past [`MAX_FILES`] entries.
pub(crate) fn open_sources(
    sources: &[Source],
    exclude: &[String],
) -> Result<Walked, TransferError> {
    if sources.is_empty() || sources.len() > MAX_FILES {
        return Err(TransferError::Usage(format!(
            "give 1 to {MAX_FILES} files to send"
        )));
    }
    let mut w = Walked {
        inputs: Vec::with_capacity(sources.len()),
        special: Vec::new(),
        excluded: 0,
    };
    for (i, s) in sources.iter().enumerate() {
        let first = w.inputs.len();
        match s {
            Source::File { path, name } => {
                let file = File::open(path).ctx(|| format!("cannot open {}", path.display()))?;
                let meta = file
                    .metadata()
                    .ctx(|| format!("cannot stat {}", path.display()))?;
                let kind = if meta.is_dir() {
                    EntryKind::Dir
                } else if meta.is_file() {
                    EntryKind::File
                } else {
                    return Err(TransferError::Usage(format!(
                        "{} is not a regular file or a directory",
                        path.display()
                    )));
                };
                let dir = kind == EntryKind::Dir;
                w.inputs.push(Input {
                    entry: FileEntry {
                        name: name.clone(),
                        size: if dir { 0 } else { meta.len() },
                        // The version of the file a receiver's resume state is bound to.
                        mtime: mtime_ns(&meta),
                        mode: mode_of(&meta),
                        kind,
                    },
                    file: (!dir).then_some(file),
                    path: Some(path.clone()),
                });
                if dir {
                    let ex = excluder(path, exclude)?;
                    walk(&mut w, path, name, &ex)?;
                }
            }
            Source::Stdin { name } => {
                if i + 1 != sources.len() {
                    return Err(TransferError::Usage(
                        "standard input can only be the last thing sent".into(),
                    ));
                }
                w.inputs.push(Input {
                    entry: FileEntry {
                        name: name.clone(),
                        size: UNKNOWN_SIZE,
                        mtime: 0,
                        mode: 0o644,
                        kind: EntryKind::File,
                    },
                    file: None,
                    path: None,
                });
            }
        }
        let name = &w.inputs[first].entry.name;
        if reserved_name(name) {
            return Err(reserved(name));
        }
        if !valid_file_name(name) || w.inputs[..first].iter().any(|o| &o.entry.name == name) {
            return Err(TransferError::Usage(format!(
                "cannot send under the name {name:?}: names must be distinct plain file names"
            )));
        }
        if w.inputs.len() > MAX_FILES {
            return Err(too_many());
        }
    }
    Ok(w)
}

/// Adds the contents of directory `dir` (sent as `rel`) to `w`, depth first, each directory's
/// entries in name order. `ex` matches paths relative to the top directory.
fn walk(w: &mut Walked, dir: &Path, rel: &str, ex: &Gitignore) -> Result<(), TransferError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(dir)
        .ctx(|| format!("cannot read the directory {}", dir.display()))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .ctx(|| format!("cannot read the directory {}", dir.display()))?;
    names.sort();
    for n in names {
        let path = dir.join(&n);
        // A reserved name is refused only if it is not excluded (`--exclude` can leave it out).
        let Some(n) = n
            .to_str()
            .filter(|n| valid_file_name(n) || reserved_name(n))
        else {
            return Err(TransferError::Usage(format!(
                "cannot send {}: its name is not UTF-8 without control characters or `\\`",
                path.display()
            )));
        };
        let name = format!("{rel}/{n}");
        if name.len() > MAX_PATH_LEN || name.split('/').count() > MAX_DEPTH {
            return Err(TransferError::Usage(format!(
                "cannot send {}: the path is too long or too deep",
                path.display()
            )));
        }
        let meta =
            std::fs::symlink_metadata(&path).ctx(|| format!("cannot stat {}", path.display()))?;
        let within = name.split_once('/').map_or("", |x| x.1);
        if ex.matched(within, meta.is_dir()).is_ignore() {
            w.excluded += 1;
            continue;
        }
        if reserved_name(n) {
            return Err(reserved(&path.display().to_string()));
        }
        if w.inputs.len() >= MAX_FILES {
            return Err(too_many());
        }
        let ft = meta.file_type();
        let (kind, size, file, meta) = if ft.is_dir() {
            (EntryKind::Dir, 0, None, meta)
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&path)
                .ctx(|| format!("cannot read the link {}", path.display()))?;
            let target = target.to_str().map(str::to_owned).unwrap_or_default();
            if !link_stays_inside(&name, &target) {
                return Err(TransferError::Usage(format!(
                    "cannot send the link {} -> {target}: a receiver only accepts relative links \
                     that stay inside the tree (leave it out with --exclude)",
                    path.display()
                )));
            }
            (EntryKind::Symlink(target), 0, None, meta)
        } else if ft.is_file() {
            // Not following a link put there since the stat; the open file is what is sent.
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(&path)
                .ctx(|| format!("cannot open {}", path.display()))?;
            let meta = file
                .metadata()
                .ctx(|| format!("cannot stat {}", path.display()))?;
            if !meta.is_file() {
                return Err(StreamError::MalformedBody {
                    what: "tree",
                    why: format!("{} changed while being listed", path.display()),
                }
                .into());
            }
            (EntryKind::File, meta.len(), Some(file), meta)
        } else {
            tracing::warn!(
                "skipping {}: not a regular file, directory or link",
                path.display()
            );
            w.special.push(path);
            continue;
        };
        let dir = kind == EntryKind::Dir;
        w.inputs.push(Input {
            entry: FileEntry {
                name: name.clone(),
                size,
                mtime: mtime_ns(&meta),
                mode: mode_of(&meta),
                kind,
            },
            file,
            path: Some(path.clone()),
        });
        if dir {
            walk(w, &path, &name, ex)?;
        }
    }
    Ok(())
}
