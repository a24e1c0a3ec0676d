//! Helpers shared by the tunnel's integration tests (each test binary includes this module).
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A fresh directory, removed on drop, private (0700) whatever the umask: the config and key
/// files the tests put there must not look writable by others.
pub fn private_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .permissions(fs::Permissions::from_mode(0o700))
        .tempdir()
        .unwrap()
}

/// Writes `text` to `dir/name` with mode `mode`; returns its path.
pub fn write(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, text).unwrap();
    set_mode(&p, mode);
    p
}

pub fn set_mode(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}
