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

/// Whether we run as root; if not, says the test is skipped (`why`).
fn root_or_skip(why: &str) -> bool {
    let root = is_root();
    if !root {
        eprintln!("skipped: {why}");
    }
    root
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn without_root_the_tunnel_commands_say_so() {
    if !root_or_skip("needs root to run the binary as nobody") {
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
    if !root_or_skip("`up` checks for root before reading a config") {
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

#[path = "../../sealink-tunnel/tests/common/tunnel_user.rs"]
mod tunnel_user;

/// wg-quick's `Table` on a real interface in a namespace (issue 46): `Table = 1234` puts the
/// peer's prefixes in table 1234 (not main), `Table = off` adds none.
#[test]
fn table_off_and_a_number_route_as_wg_quick_does() {
    if !is_root() || !Path::new("/dev/net/tun").exists() {
        eprintln!("skipped: needs root and /dev/net/tun");
        return;
    }
    let id = std::process::id() % 100_000;
    let ns = format!("sltbl{id}");
    if !Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .unwrap()
        .success()
    {
        eprintln!("skipped: cannot add a network namespace");
        return;
    }
    struct Gone(String);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    let _gone = Gone(ns.clone());
    tunnel_user::ensure();
    let dir = tempfile::tempdir().unwrap();
    let key = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=";
    let peer = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=";
    let ip = |args: &[&str]| {
        let o = Command::new("ip")
            .args(["-n", &ns])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for (table, want_in, want_main) in [("1234", "1234", false), ("off", "", false)] {
        let ifn = format!("tb{}", table.len());
        let conf = dir.path().join(format!("{ifn}.conf"));
        std::fs::write(
            &conf,
            format!(
                "[Interface]\nPrivateKey = {key}\nAddress = 10.252.8.1/24\nTable = {table}\n\n[Peer]\nPublicKey = {peer}\nAllowedIPs = 10.252.8.2/32, 10.252.9.0/24\n"
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o600)).unwrap();
        let run_dir = dir.path().join("run");
        let mut up = Command::new("ip")
            .args(["netns", "exec", &ns, BIN, "up", conf.to_str().unwrap()])
            .env("SEALINK_RUN_DIR", &run_dir)
            .env_remove("RUST_LOG")
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let show = || {
            Command::new("ip")
                .args(["netns", "exec", &ns, BIN, "show", &ifn])
                .env("SEALINK_RUN_DIR", &run_dir)
                .output()
                .unwrap()
                .status
                .success()
        };
        let t0 = std::time::Instant::now();
        while !show() {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(20),
                "Table = {table}: {ifn} did not come up"
            );
            assert!(
                up.try_wait().unwrap().is_none(),
                "Table = {table}: up exited"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let main = ip(&["route", "show", "table", "main"]);
        assert_eq!(
            main.contains("10.252.9.0/24"),
            want_main,
            "Table = {table}: main has {main}"
        );
        if !want_in.is_empty() {
            let t = ip(&["route", "show", "table", want_in]);
            for r in ["10.252.8.2 dev", "10.252.9.0/24 dev"] {
                assert!(t.contains(r), "Table = {table}: table {want_in} has {t}");
            }
        }
        let o = Command::new("ip")
            .args(["netns", "exec", &ns, BIN, "down", &ifn])
            .env("SEALINK_RUN_DIR", &run_dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", err(&o));
        assert!(up.wait().unwrap().success());
    }
}
