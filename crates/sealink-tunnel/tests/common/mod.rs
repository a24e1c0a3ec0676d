//! Helpers shared by the tunnel's integration tests (each test binary includes this module).
#![allow(dead_code)]

pub mod ip;
pub mod tunnel_user;

use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread;

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

/// Runs `prog` with `args` and returns its output (panics only if it cannot be started).
pub fn cmd(prog: &str, args: &[&str]) -> Output {
    Command::new(prog)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{prog}: {e}"))
}

/// The effective user is root (the namespace tests need it).
pub fn is_root() -> bool {
    fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0")
    })
}

/// `ip netns add NAME` for a namespace test run as root, then the user the tunnel switches to
/// (which must exist); false, with a `skipped:` line, where the namespace cannot be made.
pub fn add_netns_or_skip(name: &str) -> bool {
    let o = cmd("ip", &["netns", "add", name]);
    if !o.status.success() {
        eprintln!(
            "skipped: cannot make a network namespace: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        return false;
    }
    // Root: the tunnel switches to the default user, which must exist.
    tunnel_user::ensure();
    true
}

/// `name` as found on the PATH, if it is there.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Runs `f` on a thread inside network namespace `ns` (`ip netns add` made it).
pub fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let path = format!("/run/netns/{ns}");
    thread::spawn(move || {
        let file = fs::File::open(&path).unwrap();
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        f()
    })
}
