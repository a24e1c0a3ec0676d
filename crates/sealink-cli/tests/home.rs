//! Where `sealink` keeps keys and trust by default: `$SEALINK_HOME`, else an existing
//! `~/.sealink`, else the XDG config directory (issue 30).

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
