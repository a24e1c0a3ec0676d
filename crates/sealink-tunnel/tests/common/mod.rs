//! Helpers shared by the tunnel's integration tests (each test binary includes this module).
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

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
