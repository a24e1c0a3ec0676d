//! `ip` for the namespace tests: the tunnel's own and the lab's (by `#[path]`).

use std::process::{Command, Output};

/// Runs `ip` with `args` (panics only if it cannot be started).
pub fn ip(args: &[&str]) -> Output {
    Command::new("ip").args(args).output().expect("run ip")
}

/// [`ip`], which must succeed.
pub fn ip_ok(args: &[&str]) {
    let o = ip(args);
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}
