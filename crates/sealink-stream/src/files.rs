//! File I/O of the fast path: positional vectored reads into record slots and writes out of
//! them (one system call per batch or run of records), and the receiver's temporary files.

use std::fs::File;
use std::io::{IoSlice, IoSliceMut};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sealink_crypto::hash::{SHA256_LEN, Sha256};
use sealink_proto::stream::resume::{MAX_MAP_LEN, RecordMap, state_stem};

/// Fills every slice from `file` at `offset` (preadv, repeated on short reads). A file that
/// ends early is an error: it shrank while being sent.
pub(crate) fn read_exact_at(
    file: &File,
    mut bufs: &mut [IoSliceMut<'_>],
    mut offset: u64,
) -> std::io::Result<()> {
    IoSliceMut::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match rustix::io::preadv(file, bufs, offset) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file got shorter while being sent",
                ));
            }
            Ok(n) => {
                offset += n as u64;
                IoSliceMut::advance_slices(&mut bufs, n);
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Writes every slice to `file` at `offset` (pwritev, repeated on short writes).
pub(crate) fn write_all_at(
    file: &File,
    mut bufs: &mut [IoSlice<'_>],
    mut offset: u64,
) -> std::io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match rustix::io::pwritev(file, bufs, offset) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                offset += n as u64;
                IoSlice::advance_slices(&mut bufs, n);
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Reads into `buf` until it is full or the input ends; returns the bytes read.
pub(crate) fn read_up_to(r: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Suffix of the receiver's temporary files.
pub(crate) const PART_SUFFIX: &str = ".sealink-part";

/// A file being received: written under a hidden temporary name in the target directory, so
/// nothing looks complete until it is. The temporary name is random and independent of the
/// final one (`.<32 hex digits>.sealink-part`, 46 bytes), so every valid name (up to 255 bytes)
/// can be received.
#[derive(Debug)]
pub(crate) struct PartFile {
    pub file: File,
    pub temp: PathBuf,
    pub path: PathBuf,
    /// Device and inode of `file`: what `temp` must still name when it is committed.
    id: (u64, u64),
    /// Set for a file that may be resumed: its part file keeps a deterministic hidden name and
    /// survives a failed transfer together with its record map.
    pub resume: Option<Resume>,
    /// Written under its final name (`temp == path`), in a new tree's private staging
    /// directory: nothing to move at the commit ([`PartFile::create_direct`]).
    direct: bool,
    /// The mode it was created with, when that is already its final one (a file of a new
    /// tree): [`PartFile::prepare`] then needs no `fchmod`.
    created_mode: Option<u32>,
}

/// The resume state of one part file.
#[derive(Debug)]
pub(crate) struct Resume {
    map_path: PathBuf,
    /// Owner, name, size, mtime, and the bytes the map on disk claims (0: no map on disk).
    map: Mutex<RecordMap>,
    /// Set once the state is deleted: nothing may write a map for it again.
    gone: std::sync::atomic::AtomicBool,
}

/// Suffixes of a resumable file's part file and record map.
pub(crate) const RESUME_PART: &str = ".part";
pub(crate) const RESUME_MAP: &str = ".map";

/// Opens a file for reading and writing without following a symbolic link at its name, creating
/// it (0600) if absent.
fn open_private(path: &Path, read: bool, truncate: bool) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(read)
        .write(true)
        .create(true)
        .truncate(truncate)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

/// Opens and locks a resumable file's part file. One session per state: while another holds
/// the lock this fails with `WouldBlock` (the receiver may ask that session to stop, and try
/// again). The lock is only good if `temp` still names the file locked: a session that held it
/// may have moved it into place or deleted it before letting go, and a file no longer under
/// that name is not the state.
fn lock_resumable(temp: &Path, name: &str) -> std::io::Result<File> {
    for _ in 0..8 {
        let file = open_private(temp, true, false)?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    format!("another transfer of {name} from this owner is in progress"),
                ));
            }
            Err(e) => return Err(e.into()),
        }
        use std::os::unix::fs::MetadataExt;
        let locked = inode_of(&file)?;
        let named = std::fs::symlink_metadata(temp)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        if named == Some(locked) {
            return Ok(file);
        }
    }
    Err(std::io::Error::other(format!(
        "{} keeps being replaced",
        temp.display()
    )))
}

/// Opens (for reading and writing, not following a link) and locks the file at `path` if no
/// live session holds it: the handle keeps the lock. `None` if it is in use or cannot be
/// opened.
pub(crate) fn lock_unused(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .ok()?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).ok()?;
    Some(f)
}

/// Whether `name` is a receiver's random temporary name with this suffix:
/// `.<32 hex digits><suffix>`.
pub(crate) fn is_temp_name(name: &str, suffix: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|n| n.strip_suffix(suffix))
        .is_some_and(|tag| tag.len() == 32 && tag.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Reads a record map (bounded), or `None` if there is none or it cannot be read.
pub(crate) fn read_map(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .ok()?;
    let mut b = Vec::new();
    f.take(MAX_MAP_LEN as u64 + 1).read_to_end(&mut b).ok()?;
    Some(b)
}

impl PartFile {
    #[cfg(test)]
    pub fn create(dir: &Path, name: &str, size: Option<u64>) -> std::io::Result<Self> {
        Self::create_in(dir, dir.join(name), size)
    }

    /// A part file in `dir` for the file that will be `path` (named in messages). `dir` is
    /// best the directory `path` will be in: the commit is then a rename within one directory,
    /// and the file system allocates the inode near its directory.
    pub fn create_in(dir: &Path, path: PathBuf, size: Option<u64>) -> std::io::Result<Self> {
        let mut tag = [0u8; 16];
        sealink_crypto::sign::random_bytes(&mut tag).map_err(std::io::Error::other)?;
        let tag: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        let temp = dir.join(format!(".{tag}{PART_SUFFIX}"));
        Self::create_new(temp, path, size, false, None)
    }

    /// A file written straight under its final name `path`, which must lie in a new tree's
    /// staging directory: private to this receiver (its own, mode 0700, checked when it was
    /// taken), locked by this session, and seen under the tree's name only once every file in
    /// it is complete. A part file and a rename per file would buy nothing there. A failure
    /// deletes it ([`PartFile::discard`]); a crash can leave it short, or with data the disk
    /// does not hold yet, but never with the sender's mtime and size both set on a short file,
    /// which is what a rerun checks before it keeps a file of the tree.
    ///
    /// With `mode`, the file is created with it (the caller has checked that the umask and no
    /// default ACL change it): the staging directory is private, so the final mode can be set
    /// at once, which saves an `fchmod` per file.
    pub fn create_direct(
        path: PathBuf,
        size: Option<u64>,
        mode: Option<u32>,
    ) -> std::io::Result<Self> {
        Self::create_new(path.clone(), path, size, true, mode)
    }

    /// Creates `temp` (0600, or `mode`; never an existing name) for the file that will be
    /// `path`.
    fn create_new(
        temp: PathBuf,
        path: PathBuf,
        size: Option<u64>,
        direct: bool,
        mode: Option<u32>,
    ) -> std::io::Result<Self> {
        /// Up to this size a file's room is not reserved up front.
        const SMALL_FILE: u64 = 64 << 10;
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode.map_or(0o600, |m| m & 0o777))
            .open(&temp)?;
        if !direct {
            // Locked while in use: the start-up clean-up of another receiver on this
            // directory leaves it alone (a fresh file cannot be locked by anyone else). A
            // staging directory is locked as a whole.
            let _ = rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive);
        }
        let id = inode_of(&file)?;
        let part = Self {
            file,
            temp,
            path,
            id,
            resume: None,
            direct,
            created_mode: mode.map(|m| m & 0o777),
        };
        // Small files are not worth a system call to reserve their room (a full disk still
        // fails their write).
        if let Some(n) = size.filter(|&n| n > SMALL_FILE)
            && let Err(e) = reserve(&part.file, n)
        {
            part.discard();
            return Err(e);
        }
        Ok(part)
    }

    /// Opens the resume state of `owner`'s file `name` (`size` bytes, modified at `mtime`):
    /// `.sealink-resume-<hash>.part` and `.map` in `dir`. Returns the part file and the bytes
    /// at its start that a valid record map says are held (0 if none, if the map is damaged or
    /// belongs to another file, or if `fresh`; the part file then starts over).
    pub fn open_resumable(
        dir: &Path,
        owner: &[u8; 32],
        name: &str,
        size: u64,
        mtime: u64,
        fresh: bool,
    ) -> std::io::Result<(Self, u64)> {
        use std::os::unix::fs::PermissionsExt;
        let stem = state_stem(owner, name, size, mtime);
        let temp = dir.join(format!("{stem}{RESUME_PART}"));
        let map_path = dir.join(format!("{stem}{RESUME_MAP}"));
        let file = lock_resumable(&temp, name)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::other(format!(
                "{} is not a regular file",
                temp.display()
            )));
        }
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        let held = if fresh {
            None
        } else {
            read_map(&map_path)
                .and_then(
                    |b| match RecordMap::decode_for(&b, owner, name, size, mtime) {
                        Ok(m) => Some(m.held),
                        Err(e) => {
                            tracing::info!("{}: ignored ({e})", map_path.display());
                            None
                        }
                    },
                )
                // A part file shorter than its map claims was cut: start over.
                .filter(|&h| h <= meta.len())
        };
        let held = held.unwrap_or(0);
        let id = inode_of(&file)?;
        let part = Self {
            file,
            temp,
            path: dir.join(name),
            id,
            direct: false,
            created_mode: None,
            resume: Some(Resume {
                map_path,
                map: Mutex::new(RecordMap {
                    owner: *owner,
                    name: name.to_owned(),
                    size,
                    mtime,
                    held,
                }),
                gone: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        let prepared = (|| -> std::io::Result<()> {
            if held == 0 {
                // Nothing to keep: drop stale data and any map.
                part.file.set_len(0)?;
                remove_if_present(&part.resume.as_ref().map(|r| &r.map_path))?;
            }
            // Exactly `size` bytes, whatever was there: the final file is never longer.
            part.file.set_len(size)?;
            reserve(&part.file, size)
        })();
        if let Err(e) = prepared {
            part.discard();
            return Err(e);
        }
        Ok((part, held))
    }

    /// Records durably that the first `held` bytes are in place: syncs the part file's data,
    /// then replaces the record map (written, synced, renamed, directory synced). Only ever
    /// claims more than before; a no-op for a file that is not resumable.
    pub fn checkpoint(&self, held: u64) -> std::io::Result<()> {
        let Some(r) = &self.resume else {
            return Ok(());
        };
        let mut map = r.map.lock().unwrap_or_else(|p| p.into_inner());
        if held <= map.held || r.gone.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(());
        }
        self.file.sync_data()?;
        let next = RecordMap {
            held,
            ..map.clone()
        };
        let tmp = r.map_path.with_extension("map-new");
        let write = (|| -> std::io::Result<()> {
            use std::io::Write;
            let mut f = open_private(&tmp, false, true)?;
            f.write_all(&next.encode())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &r.map_path)?;
            if let Some(dir) = r.map_path.parent() {
                File::open(dir)?.sync_all()?;
            }
            Ok(())
        })();
        if write.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        write?;
        *map = next;
        Ok(())
    }

    /// SHA-256 of the first `size` bytes of the part file (one read of the whole file).
    pub fn sha256(&self, size: u64) -> std::io::Result<[u8; SHA256_LEN]> {
        hash_file(&self.file, size)
    }

    /// After a failed transfer: a resumable file keeps its state if a map on disk claims part
    /// of it, cut down to what the map claims (the rest of the announced size, reserved when
    /// the transfer started, would otherwise stay allocated for as long as the state is
    /// kept); anything else is deleted.
    pub fn release(&self) {
        let held = self.resume.as_ref().map_or(0, |r| {
            if r.gone.load(std::sync::atomic::Ordering::Relaxed) {
                0
            } else {
                r.map.lock().unwrap_or_else(|p| p.into_inner()).held
            }
        });
        if held == 0 || self.file.set_len(held).is_err() {
            self.discard();
        }
    }

    /// Sets `mode` (already filtered by [`received_mode`]) and the sender's `mtime` (0:
    /// unknown, left).
    pub fn prepare(&self, mode: u32, mtime: u64) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        if self.created_mode != Some(mode & 0o777) {
            self.file
                .set_permissions(std::fs::Permissions::from_mode(mode & 0o777))?;
        }
        if mtime != 0 {
            rustix::fs::futimens(&self.file, &mtime_stamps(mtime))?;
        }
        Ok(())
    }

    /// Flushes to disk, sets `mode` and `mtime` ([`PartFile::prepare`]), and moves the file to
    /// `target`; refuses to replace an existing file unless `overwrite` (a hard link fails
    /// atomically if the name is taken). A resumable file's record map goes with it. With
    /// `synced`, the caller has prepared the file and, when it syncs, fsynced it (a batch's
    /// files side by side: `Tree::durable`).
    pub fn commit(
        &self,
        target: &Path,
        mode: u32,
        mtime: u64,
        overwrite: bool,
        synced: bool,
    ) -> std::io::Result<()> {
        if !synced {
            self.prepare(mode, mtime)?;
            self.file.sync_all()?;
        }
        if self.direct {
            // Already under its name, in a directory no one else can reach.
            debug_assert_eq!(self.temp, target);
            return Ok(());
        }
        // Renaming goes by name: whatever `temp` names at that instant moves. It must be the
        // file written and verified here, not one put in its place meanwhile (through the
        // directory by a local user, or by anything else that could reach the name).
        if !self.names_this_file(&self.temp) {
            self.discard();
            return Err(replaced(&self.temp));
        }
        // Without `overwrite`, a name taken meanwhile is refused: a rename that never replaces
        // (one system call), or where the file system has none, a hard link.
        let mut linked = false;
        if overwrite {
            std::fs::rename(&self.temp, target)?;
        } else {
            match rustix::fs::renameat_with(
                rustix::fs::CWD,
                &self.temp,
                rustix::fs::CWD,
                target,
                rustix::fs::RenameFlags::NOREPLACE,
            ) {
                Ok(()) => {}
                Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
                    std::fs::hard_link(&self.temp, target)?;
                    linked = true;
                }
                Err(e) => return Err(e.into()),
            }
        }
        // Swapped between the check and the move: what was moved is not ours; take it away
        // again rather than leave it under the final name.
        if !self.names_this_file(target) {
            let _ = std::fs::remove_file(target);
            self.discard();
            return Err(replaced(&self.temp));
        }
        if linked {
            std::fs::remove_file(&self.temp)?;
        }
        if let Some(r) = &self.resume {
            r.gone.store(true, std::sync::atomic::Ordering::Relaxed);
            remove_if_present(&Some(&r.map_path))?;
        }
        Ok(())
    }

    /// The file system (device) the part file is on.
    pub fn device(&self) -> u64 {
        self.id.0
    }

    /// Deletes the part file, and a resumable file's record map.
    pub fn discard(&self) {
        if let Some(r) = &self.resume {
            r.gone.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = std::fs::remove_file(&r.map_path);
        }
        let _ = std::fs::remove_file(&self.temp);
    }
}

impl PartFile {
    /// Whether `path` (not followed if a link) is this part file's very inode.
    fn names_this_file(&self, path: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == self.id)
    }
}

/// Device and inode of an open file.
fn inode_of(file: &File) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata()?;
    Ok((m.dev(), m.ino()))
}

fn replaced(temp: &Path) -> std::io::Error {
    std::io::Error::other(format!(
        "{} was replaced while being received: nothing stored",
        temp.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    ))
}

fn remove_if_present(p: &Option<&PathBuf>) -> std::io::Result<()> {
    match p.map(std::fs::remove_file) {
        Some(Err(e)) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Reserves `n` bytes now so a full disk shows up before any data moves. A size the file system
/// cannot hold fails here (EFBIG, ENOSPC) and refuses the transfer.
fn reserve(file: &File, n: u64) -> std::io::Result<()> {
    if n == 0 {
        return Ok(());
    }
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, n) {
        Ok(()) | Err(rustix::io::Errno::OPNOTSUPP) | Err(rustix::io::Errno::NOSYS) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// SHA-256 of the first `size` bytes of `file`, read in 1 MiB pieces; a file shorter than
/// `size` is an error.
pub(crate) fn hash_file(file: &File, size: u64) -> std::io::Result<[u8; SHA256_LEN]> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(buf.len() as u64) as usize;
        read_exact_at(file, &mut [IoSliceMut::new(&mut buf[..n])], off)?;
        h.update(&buf[..n]);
        off += n as u64;
    }
    Ok(h.finish())
}

/// The permissions a received file gets from the mode its sender announced: the read, write
/// and execute bits only (never setuid, setgid or sticky), less the receiver's `umask`, and
/// less group and other write unless the receiver asked to keep them. A sender cannot plant a
/// file that others may modify.
pub(crate) fn received_mode(sent: u32, umask: u32, keep_group_other_write: bool) -> u32 {
    let mut m = sent & 0o777 & !umask;
    if !keep_group_other_write {
        m &= !0o022;
    }
    m
}

/// Raises this process's soft limit on open files to its hard limit, and returns the limit
/// now in force: a session holds the files of up to two manifest batches open at once (up to
/// 2 × `MAX_BATCH_ENTRIES`), more than the usual soft limit of 1024. Failing leaves the limit
/// as it was (the sender then makes its batches smaller).
pub(crate) fn raise_open_files_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        l.current = l.maximum;
        let _ = setrlimit(Resource::Nofile, l);
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// `mtime` (ns since the epoch) as file times: access time left as it is.
pub(crate) fn mtime_stamps(mtime: u64) -> rustix::fs::Timestamps {
    rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: (mtime / 1_000_000_000) as i64,
            tv_nsec: (mtime % 1_000_000_000) as _,
        },
    }
}

/// Sets the modification time of `path` itself (a link is not followed); 0 (unknown) leaves it.
pub(crate) fn set_mtime_at(path: &Path, mtime: u64) -> std::io::Result<()> {
    if mtime == 0 {
        return Ok(());
    }
    rustix::fs::utimensat(
        rustix::fs::CWD,
        path,
        &mtime_stamps(mtime),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )?;
    Ok(())
}

/// This process's umask: from /proc (read-only), else by setting the most restrictive mask for
/// an instant and putting the old one back (a file another thread creates meanwhile only gets
/// fewer permissions).
pub(crate) fn process_umask() -> u32 {
    let from_proc = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        });
    from_proc.unwrap_or_else(|| {
        use rustix::fs::Mode;
        let old = rustix::process::umask(Mode::from_raw_mode(0o777));
        rustix::process::umask(old);
        old.as_raw_mode()
    }) & 0o777
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn received_modes_drop_special_bits_and_foreign_write() {
        assert_eq!(received_mode(0o777, 0o022, false), 0o755);
        assert_eq!(received_mode(0o777, 0o000, false), 0o755);
        assert_eq!(received_mode(0o777, 0o000, true), 0o777);
        assert_eq!(received_mode(0o7777, 0o002, true), 0o775);
        assert_eq!(received_mode(0o4755, 0o022, false), 0o755);
        assert_eq!(received_mode(0o640, 0o077, false), 0o600);
        assert_eq!(received_mode(0o644, 0o022, true), 0o644);
    }

    #[test]
    fn the_umask_is_read() {
        let m = process_umask();
        assert_eq!(m & !0o777, 0);
        // Both ways of reading it agree.
        let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o777));
        rustix::process::umask(old);
        assert_eq!(m, old.as_raw_mode() & 0o777);
    }

    #[test]
    fn a_part_file_replaced_by_name_is_never_committed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        for overwrite in [false, true] {
            let p = PartFile::create(dir, "victim", Some(4)).unwrap();
            write_all_at(&p.file, &mut [IoSlice::new(b"mine")], 0).unwrap();
            // Another file put under the part file's name while it was written.
            let other = dir.join("other");
            std::fs::write(&other, b"evil").unwrap();
            std::fs::rename(&other, &p.temp).unwrap();
            let target = dir.join("victim");
            let e = p.commit(&target, 0o644, 0, overwrite, false).unwrap_err();
            assert!(e.to_string().contains("replaced"), "{e}");
            assert!(
                !target.exists(),
                "stored the other file (overwrite {overwrite})"
            );
        }
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 0);
        // Untouched, it commits.
        let p = PartFile::create(dir, "victim", Some(4)).unwrap();
        write_all_at(&p.file, &mut [IoSlice::new(b"mine")], 0).unwrap();
        p.commit(&dir.join("victim"), 0o644, 0, false, false)
            .unwrap();
        assert_eq!(std::fs::read(dir.join("victim")).unwrap(), b"mine");
    }

    #[test]
    fn part_names_are_short_and_independent_of_the_final_name() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let long = "x".repeat(255);
        let a = PartFile::create(dir, &long, Some(10)).unwrap();
        let b = PartFile::create(dir, &long, None).unwrap();
        for p in [&a, &b] {
            let n = p.temp.file_name().unwrap().to_str().unwrap();
            assert!(
                n.starts_with('.') && n.ends_with(PART_SUFFIX) && n.len() == 46,
                "{n}"
            );
            assert!(!n.contains('x'));
        }
        assert_ne!(a.temp, b.temp);
        a.commit(&a.path, 0o644, 0, false, true).unwrap();
        b.discard();
        let names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from(&long)]);
    }
}
