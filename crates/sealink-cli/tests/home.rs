//! Where `sealink` keeps keys and trust by default: `$SEALINK_HOME`, else an existing
//! `~/.sealink`, else the XDG config directory (issue 30).

mod common;

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_sealink");

/// `sealink init` with `HOME=home` and the given XDG/SEALINK variables (None: unset).
fn init(home: &Path, xdg: Option<&Path>, sealink_home: Option<&Path>) {
    let mut c = Command::new(BIN);
    c.args(["init", "--host-name", "h", "--owner-name", "o"])
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("SEALINK_HOME")
        .env_remove("RUST_LOG");
    if let Some(x) = xdg {
        c.env("XDG_CONFIG_HOME", x);
    }
    if let Some(s) = sealink_home {
        c.env("SEALINK_HOME", s);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn has_keys(dir: &Path) -> bool {
    ["host.key", "host.key.pub", "owner.key", "trust"]
        .iter()
        .all(|f| dir.join(f).is_file())
}

#[test]
fn a_new_user_gets_the_xdg_config_directory() {
    let t = tempfile::tempdir().unwrap();
    let xdg = t.path().join("xdg");
    init(t.path(), Some(&xdg), None);
    assert!(has_keys(&xdg.join("sealink")));
    assert!(!t.path().join(".sealink").exists());

    // XDG_CONFIG_HOME unset: ~/.config/sealink.
    let t = tempfile::tempdir().unwrap();
    init(t.path(), None, None);
    assert!(has_keys(&t.path().join(".config/sealink")));
    assert!(!t.path().join(".sealink").exists());
}

#[test]
fn an_existing_dot_sealink_and_sealink_home_win() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join(".sealink")).unwrap();
    let xdg = t.path().join("xdg");
    init(t.path(), Some(&xdg), None);
    assert!(has_keys(&t.path().join(".sealink")));
    assert!(!xdg.join("sealink").exists());

    let t = tempfile::tempdir().unwrap();
    let sh = t.path().join("elsewhere");
    init(t.path(), Some(&t.path().join("xdg")), Some(&sh));
    assert!(has_keys(&sh));
    assert!(!t.path().join("xdg").exists());
}

/// `trust list` prints every key with its fingerprint, `trust check` defaults to the home's
/// trust file as every other command does, and `pubkey` reads a .pub file for `--fingerprint`
/// and `--trust-line` (as `ssh-keygen -lf` does), refusing the wrong kind.
#[test]
fn trust_list_check_default_and_pubkey_of_a_pub_file() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("h");
    let o = common::run_in(&home, &["init", "--host-name", "b", "--owner-name", "bob"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let owner_pub = home.join("owner.key.pub");
    let host_pub = home.join("host.key.pub");
    let owner_b64 = common::public(owner_pub.clone());
    let fp = out(&common::run_in(
        &home,
        &[
            "pubkey",
            "--fingerprint",
            home.join("owner.key").to_str().unwrap(),
        ],
    ));
    let fp = fp.trim();
    assert_eq!(fp.len(), 19, "{fp}");

    let o = common::run_in(&home, &["trust", "list"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let list = out(&o);
    assert!(
        list.lines()
            .any(|l| l.starts_with("owner bob") && l.contains(fp) && l.ends_with(&owner_b64)),
        "{list}"
    );

    let o = common::run_in(&home, &["trust", "check"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out(&o).contains("OK, 1 owner, 0 hosts"), "{}", out(&o));

    let o = common::run_in(
        &home,
        &["pubkey", "--fingerprint", owner_pub.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(out(&o).trim(), fp);
    let o = common::run_in(
        &home,
        &["pubkey", "--trust-line", "b", host_pub.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        out(&o).trim(),
        format!("host b {}", common::public(host_pub.clone()))
    );
    let o = common::run_in(
        &home,
        &["pubkey", "--kind", "host", owner_pub.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("this is an owner public key, not a host one"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
