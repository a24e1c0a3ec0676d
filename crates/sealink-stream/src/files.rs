//! File I/O of the fast path: positional vectored reads into record slots and writes out of
//! them (one system call per batch or run of records), and the receiver's temporary files.

use std::fs::File;
use std::io::{IoSlice, IoSliceMut};
use std::path::{Path, PathBuf};

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
}

impl PartFile {
    pub fn create(dir: &Path, name: &str, size: Option<u64>) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join(name);
        let mut tag = [0u8; 16];
        sealink_crypto::sign::random_bytes(&mut tag).map_err(std::io::Error::other)?;
        let tag: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        let temp = dir.join(format!(".{tag}{PART_SUFFIX}"));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        let part = Self { file, temp, path };
        if let Some(n) = size.filter(|&n| n > 0) {
            // Reserve the space now so a full disk shows up before any data moves. A size
            // the file system cannot hold fails here (EFBIG, ENOSPC) and refuses the transfer.
            match rustix::fs::fallocate(&part.file, rustix::fs::FallocateFlags::empty(), 0, n) {
                Ok(()) | Err(rustix::io::Errno::OPNOTSUPP) | Err(rustix::io::Errno::NOSYS) => {}
                Err(e) => {
                    part.discard();
                    return Err(e.into());
                }
            }
        }
        Ok(part)
    }

    /// Flushes to disk, sets `mode` (already filtered by [`received_mode`]) and moves the file
    /// to its final name; refuses to replace an existing file unless `overwrite` (a hard link
    /// fails atomically if the name is taken).
    pub fn commit(&self, mode: u32, overwrite: bool) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        self.file.sync_all()?;
        self.file
            .set_permissions(std::fs::Permissions::from_mode(mode & 0o777))?;
        if overwrite {
            std::fs::rename(&self.temp, &self.path)
        } else {
            std::fs::hard_link(&self.temp, &self.path)?;
            std::fs::remove_file(&self.temp)
        }
    }

    pub fn discard(&self) {
        let _ = std::fs::remove_file(&self.temp);
    }
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
        a.commit(0o644, false).unwrap();
        b.discard();
        let names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from(&long)]);
    }
}
