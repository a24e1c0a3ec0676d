//! The account a tunnel started as root switches to by default: a dedicated system
//! account, which the Debian package (sysusers) and `.ci/run` create. The namespace tests make
//! it when it is missing, so that they run on a fresh machine too.
#![allow(dead_code)]

use std::process::Command;

/// The default `user` of a tunnel config.
// sealink_tunnel::config::DEFAULT_USER, spelt out: this one file serves the tests of
// sealink-tunnel, sealink-cli and the lab (by `#[path]`), and the lab does not depend on the
// product crates. sealink-tunnel's `netns.rs` checks that the two agree.
pub const NAME: &str = "sealink-tunnel";

/// `name`'s uid and gid in /etc/passwd (where the tunnel looks it up).
pub fn ids(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 3 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

/// Makes sure the default user exists (root only; the namespace tests are); its uid and gid.
pub fn ensure() -> (u32, u32) {
    for _ in 0..100 {
        if let Some(ids) = ids(NAME) {
            return ids;
        }
        // Test binaries run side by side may race here: useradd then fails (the user exists,
        // or /etc/passwd is locked for a moment) and the loop looks again.
        let _ = Command::new("useradd")
            .args(["--system", "--user-group", "--no-create-home"])
            .args([
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                NAME,
            ])
            .output();
        if let Some(ids) = ids(NAME) {
            return ids;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("cannot create the tunnel's default user: useradd --system {NAME}");
}
