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

/// A file being received: written under a hidden temporary name next to its final name, so
/// nothing looks complete until it is.
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
        let mut tag = [0u8; 6];
        sealink_crypto::sign::random_bytes(&mut tag).map_err(std::io::Error::other)?;
        let tag: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        let temp = dir.join(format!(".{name}.{tag}.sealink-part"));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        let part = Self { file, temp, path };
        if let Some(n) = size.filter(|&n| n > 0) {
            // Reserve the space now so a full disk shows up before any data moves.
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

    /// Flushes to disk and moves the file to its final name; refuses to replace an existing
    /// file unless `overwrite` (a hard link fails atomically if the name is taken).
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
