//! Two network namespaces joined by a veth pair, for the tests that run tunnels between them
//! (root only), and the commands that set them up.

use std::process::{Child, Command, Output};

/// Runs `cmd args` to completion, whatever its exit status.
pub fn sh(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"))
}

/// `ip netns add NAME`, as root; false, with a `SKIPPED:` line saying why, where it fails.
pub fn add_or_skip(name: &str) -> bool {
    let o = sh("ip", &["netns", "add", name]);
    if !o.status.success() {
        println!(
            "SKIPPED: `ip netns add` failed (needs root): {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    o.status.success()
}

/// What a namespace lab's drop does: kills and reaps `children`, then deletes the network
/// namespaces `ns` (errors ignored).
pub fn tear_down<'a>(
    children: impl IntoIterator<Item = &'a mut Child>,
    ns: impl IntoIterator<Item = &'a String>,
) {
    for c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    for n in ns {
        let _ = sh("ip", &["netns", "del", n]);
    }
}

/// [`sh`], which must succeed: its standard output.
pub fn ok(cmd: &str, args: &[&str]) -> String {
    let o = sh(cmd, args);
    assert!(
        o.status.success(),
        "{cmd} {args:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Joins the namespaces `ns` (both made already) with a veth pair `{veth}a` and `{veth}b`,
/// addressed `{net}.1/24` and `{net}.2/24`; both ends and each namespace's loopback up.
pub fn join(ns: &[String; 2], veth: &str, net: &str) {
    let (va, vb) = (format!("{veth}a"), format!("{veth}b"));
    ok(
        "ip",
        &["link", "add", &va, "type", "veth", "peer", "name", &vb],
    );
    ok("ip", &["link", "set", &va, "netns", &ns[0]]);
    ok("ip", &["link", "set", &vb, "netns", &ns[1]]);
    for (n, v, a) in [
        (&ns[0], &va, format!("{net}.1/24")),
        (&ns[1], &vb, format!("{net}.2/24")),
    ] {
        ok("ip", &["-n", n, "addr", "add", &a, "dev", v]);
        ok("ip", &["-n", n, "link", "set", v, "up"]);
        ok("ip", &["-n", n, "link", "set", "lo", "up"]);
    }
}
