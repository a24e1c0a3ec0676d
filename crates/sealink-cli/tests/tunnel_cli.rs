//! What the tunnel commands tell a user before any tunnel runs (issue 46): without root, `up`
//! says it needs root and `show`/`reload`/`down` say the control socket is not theirs to reach
//! (not "no tunnel is running"). The non-root cases run the binary as `nobody`, which needs
//! root to start; they skip elsewhere.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_sealink");
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|v| v.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn as_nobody(args: &[&str], run_dir: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .env("SEALINK_RUN_DIR", run_dir)
        .env_remove("RUST_LOG")
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn without_root_the_tunnel_commands_say_so() {
    if !is_root() {
        eprintln!("skipped: needs root to run the binary as nobody");
        return;
    }
    // A run directory as `up` makes it: root's, 0700, with a tunnel's socket in it.
    let base = tempfile::tempdir().unwrap();
    let run = base.path().join("run");
    std::fs::create_dir(&run).unwrap();
    // The binary may not cd into the test's tempdir as nobody: open the parent to all.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
    use std::os::unix::fs::MetadataExt as _;
    let ino = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
    let dir = run.join(format!("net-{ino}"));
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(dir.join("sl7.sock")).unwrap();

    let o = as_nobody(&["up", "/etc/sealink/sl7.toml"], &run);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(err(&o).contains("must be run as root"), "{}", err(&o));

    for args in [&["show", "sl7"][..], &["down", "sl7"][..]] {
        let o = as_nobody(args, &run);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", err(&o));
        assert!(
            err(&o).contains("cannot reach tunnel sl7's control socket")
                && err(&o).contains("permission denied"),
            "{args:?}: {}",
            err(&o)
        );
        assert!(!err(&o).contains("is running"), "{}", err(&o));
    }
    // Bare `show` cannot list them: an error, not an empty success.
    let o = as_nobody(&["show"], &run);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(
        err(&o).contains("cannot list the running tunnels"),
        "{}",
        err(&o)
    );
}

/// Config errors name the file once; a bare name says both places `up` looked; a wg-quick
/// line error reads `line N:`; a key file others can read is refused with why and the fix.
#[test]
fn config_errors_say_where_and_why_once() {
    if !is_root() {
        eprintln!("skipped: `up` checks for root before reading a config");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("SEALINK_CONFIG_DIR", dir.path())
            .env("SEALINK_RUN_DIR", dir.path().join("run"))
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    };
    let o = run(&["up", "slq9"]);
    assert_eq!(o.status.code(), Some(1));
    let e = err(&o);
    assert!(
        e.contains(&format!("{}/slq9.toml", dir.path().display()))
            && e.contains("/etc/wireguard/slq9.conf"),
        "{e}"
    );
    let o = run(&["reload", "slq9"]);
    assert!(err(&o).contains("/etc/wireguard/slq9.conf"), "{}", err(&o));

    let missing = dir.path().join("gone.toml");
    let o = run(&["up", missing.to_str().unwrap()]);
    let e = err(&o);
    assert_eq!(e.matches("gone.toml").count(), 1, "{e}");

    use std::os::unix::fs::PermissionsExt as _;
    let bad = dir.path().join("slq8.conf");
    std::fs::write(&bad, "[Interface]\nPrivateKey = abc\n").unwrap();
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = run(&["up", bad.to_str().unwrap()]);
    let e = err(&o);
    assert!(e.contains(": line 2: PrivateKey"), "{e}");
    assert!(!e.contains("config key line"), "{e}");

    let open = dir.path().join("slq7.conf");
    let key = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=";
    std::fs::write(
        &open,
        format!("[Interface]\nPrivateKey = {key}\nAddress = 10.251.0.1/24\n"),
    )
    .unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = run(&["up", open.to_str().unwrap()]);
    let e = err(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("mode 0644") && e.contains(&format!("chmod 600 {}", open.display())),
        "{e}"
    );
}
