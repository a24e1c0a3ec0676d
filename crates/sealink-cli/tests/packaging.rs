//! What ships beside the binary: the systemd units in contrib/systemd pass `systemd-analyze
//! verify` (skipped with a printed reason where it is missing), and the receiver unit's own
//! command line, pointed at temporary directories, receives a file.

mod common;
use common::BIN;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn contrib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd")
}

/// The units, with `/usr/bin/sealink` replaced by the binary under test (verify checks that
/// every command is executable).
fn units_in(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(contrib()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "service") {
            let text = fs::read_to_string(&p)
                .unwrap()
                .replace("/usr/bin/sealink", BIN);
            let to = dir.join(p.file_name().unwrap());
            fs::write(&to, text).unwrap();
            out.push(to);
        }
    }
    out.sort();
    out
}

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let dir = tempfile::tempdir().unwrap();
    let units = units_in(dir.path());
    assert!(
        units.iter().any(|u| u.ends_with("sealink-recv.service")),
        "{units:?}"
    );
    let probe = Command::new("systemd-analyze").arg("--version").output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: no systemd-analyze here");
        return;
    }
    for u in &units {
        // --man=no: the man page is not installed here. verify exits 0 on unknown keys and bad
        // values, only saying so on stderr: any output is a failure.
        let o = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(u)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && err.trim().is_empty(),
            "{}: {err}",
            u.display()
        );
    }
}

/// The receiver unit's `ExecStart=` arguments (after the binary).
fn recv_exec_start() -> Vec<String> {
    let text = fs::read_to_string(contrib().join("sealink-recv.service")).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart= line");
    let mut words = line.split_whitespace();
    assert_eq!(words.next(), Some("/usr/bin/sealink"), "{line}");
    words.map(str::to_owned).collect()
}

#[test]
fn the_receiver_units_command_line_receives_a_file() {
    let dir = tempfile::tempdir().unwrap();
    common::two_hosts(dir.path());
    let b = dir.path().join("b");
    let inbox = dir.path().join("in");
    let args: Vec<String> = recv_exec_start()
        .into_iter()
        .map(|a| {
            a.replace("/var/lib/sealink/incoming", inbox.to_str().unwrap())
                .replace("/etc/sealink/recv", b.to_str().unwrap())
                .replace("[::]:7878", "127.0.0.1:0")
        })
        .collect();
    assert!(args.iter().any(|a| a == "recv"), "{args:?}");
    let mut recv = Command::new(BIN)
        .args(&args)
        .arg("--once")
        .env_remove("SEALINK_HOME")
        .env("HOME", dir.path().join("nowhere"))
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (addr, mut err) = common::listening(&mut recv);
    let f = dir.path().join("report.txt");
    fs::write(&f, b"delivered to a service").unwrap();
    let o = common::send_cmd(&dir.path().join("a"), &[&f], addr, &[])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let st = recv.wait().unwrap();
    let mut log = String::new();
    let _ = std::io::Read::read_to_string(&mut err, &mut log);
    assert!(st.success(), "{log}");
    assert_eq!(
        fs::read(inbox.join("report.txt")).unwrap(),
        b"delivered to a service"
    );
}

/// `sealink PATH --help`.
fn help_of(path: &[String]) -> String {
    let o = Command::new(BIN)
        .args(path)
        .arg("--help")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(o.status.success(), "{path:?} --help failed");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The lines of the section `heading` of a help text (up to the next blank line).
fn section<'a>(help: &'a str, heading: &str) -> Vec<&'a str> {
    help.lines()
        .skip_while(|l| l.trim_end() != heading)
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect()
}

/// Every command path below `path`, from the `Commands:` lists of the help texts.
fn commands(path: Vec<String>, out: &mut Vec<Vec<String>>) {
    let help = help_of(&path);
    out.push(path.clone());
    for l in section(&help, "Commands:") {
        let name = l.split_whitespace().next().unwrap_or_default();
        if name != "help" && !name.is_empty() {
            let mut sub = path.clone();
            sub.push(name.to_owned());
            commands(sub, out);
        }
    }
}

/// The long options (`--name`) a help text documents.
fn long_options(help: &str) -> Vec<String> {
    help.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| {
            let at = l.find("--")?;
            let name: String = l[at + 2..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            Some(format!("--{name}"))
        })
        .collect()
}

/// Issue 30: the man page listed pages that did not exist, and none documented a command's
/// options. `sealink man --dir` writes a page per command, each with the options of its
/// `--help`, every page named in one exists, and the package ships every page it writes.
/// A directory with the man pages `sealink man --dir` writes.
fn man_pages() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .args(["man", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    dir
}

#[test]
fn every_command_has_a_man_page_with_its_options_and_the_deb_ships_them() {
    let dir = man_pages();
    let pages: Vec<String> = common::names_in(dir.path());
    let mut all = Vec::new();
    commands(Vec::new(), &mut all);
    assert!(all.len() > 20, "{all:?}");
    let mut options = 0;
    for path in &all {
        let name = std::iter::once("sealink")
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("-")
            + ".1";
        assert!(pages.contains(&name), "no page {name} in {pages:?}");
        let page = fs::read_to_string(dir.path().join(&name))
            .unwrap()
            .replace("\\-", "-");
        for opt in long_options(&help_of(path)) {
            assert!(page.contains(&opt), "{name} does not document {opt}");
            options += 1;
        }
        // Laid out as wg(8) and rsync(1) are (issue 46): these sections on every page, the
        // epilogue as EXAMPLES/NOTES rather than clap_mangen's "EXTRA", the version in the
        // footer.
        for section in [
            ".SH NAME",
            ".SH SYNOPSIS",
            ".SH DESCRIPTION",
            ".SH \"EXIT STATUS\"",
            ".SH ENVIRONMENT",
            ".SH FILES",
            ".SH \"SEE ALSO\"",
        ] {
            assert!(page.contains(section), "{name} has no {section}");
        }
        assert!(!page.contains(".SH EXTRA"), "{name} has an EXTRA section");
        let th = page
            .lines()
            .find(|l| l.starts_with(".TH "))
            .unwrap_or_default();
        assert!(
            th.contains(&format!("\"sealink {}\"", env!("CARGO_PKG_VERSION"))),
            "{name}: {th}"
        );
        if help_of(path).contains("Example") {
            assert!(page.contains(".SH EXAMPLES"), "{name} has no EXAMPLES");
        }
        // `sealink man CMD...` prints the same page.
        let one = Command::new(BIN).arg("man").args(path).output().unwrap();
        assert!(
            one.status.success(),
            "{}",
            String::from_utf8_lossy(&one.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&one.stdout).replace("\\-", "-"),
            page,
            "sealink man {path:?}"
        );
        // Every page it names is there (the old page named sealink-send(1) and others).
        for (i, _) in page.match_indices("(1)") {
            let word = page[..i]
                .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .next()
                .unwrap_or_default();
            if word.starts_with("sealink") {
                assert!(
                    pages.contains(&format!("{word}.1")),
                    "{name} names {word}(1), which is not written"
                );
            }
        }
    }
    assert!(
        options > 100,
        "only {options} options found in the help texts"
    );
    assert_eq!(pages.len(), all.len(), "pages of no command: {pages:?}");
    // The lab's commands are the `sealink-lab` binary's: no page, and not in the package.
    assert!(
        !pages
            .iter()
            .any(|p| p.starts_with("sealink-bench") || p.starts_with("sealink-relay")),
        "{pages:?}"
    );
    // The printed page is the top one.
    let top = Command::new(BIN).arg("man").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&top.stdout),
        fs::read_to_string(dir.path().join("sealink.1")).unwrap()
    );

    // The package: build-deb.sh writes them where the assets take every page from.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = fs::read_to_string(root.join("contrib/debian/build-deb.sh")).unwrap();
    assert!(
        script.contains(r#""$dir/sealink" man --dir "$dir/assets/man""#),
        "{script}"
    );
    let manifest =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    assert!(
        script.contains(r#"gzip -9nf "$dir"/assets/man/*.1"#),
        "the pages are not compressed: {script}"
    );
    assert!(
        manifest.contains(r#"["target/release/assets/man/*.1.gz", "usr/share/man/man1/", "644"]"#),
        "the .deb assets do not take every page"
    );
    assert!(pages.iter().all(|p| p.ends_with(".1")), "{pages:?}");
    assert!(
        !manifest.contains("target/release/sealink-lab"),
        "the .deb ships the lab: {manifest}"
    );
}

/// Issue 30's packaging items: a maintainer with an address, no iproute2 dependency now that the
/// tunnel runs no `ip` (rtnetlink), a prerm that stops the units, the tunnel unit's
/// documentation, resolver ordering and capability bounding set, and an IPv6 listener.
#[test]
fn the_package_declares_what_it_needs_and_stops_its_units() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let field = |name: &str| {
        manifest
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} = ")))
            .unwrap_or_else(|| panic!("no {name} in Cargo.toml"))
            .to_owned()
    };
    let maintainer = field("maintainer");
    let email = maintainer
        .split_once('<')
        .and_then(|(_, r)| r.split_once('>'))
        .map(|(e, _)| e)
        .unwrap_or_default();
    assert!(
        email.contains('@') && email.contains('.'),
        "no address in {maintainer}"
    );
    assert!(!field("depends").contains("iproute2"), "{manifest}");
    // No repository URL until the project has a public home (a placeholder is worse than
    // none): `the_package_metadata_links_nowhere_it_does_not_have`.

    // Issue 47: the tunnels' default user, a dedicated system account, made by the package.
    let sysusers = fs::read_to_string(contrib().join("sealink.sysusers")).unwrap();
    let user = sealink_tunnel::config::DEFAULT_USER;
    assert!(
        sysusers
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["u", user])),
        "no sysusers entry for {user}: {sysusers}"
    );
    assert!(
        manifest.contains(
            r#"["../../contrib/systemd/sealink.sysusers", "usr/lib/sysusers.d/sealink.conf", "644"]"#
        ),
        "the .deb does not install the sysusers entry"
    );
    let postinst = fs::read_to_string(root.join("contrib/debian/postinst")).unwrap();
    assert!(
        postinst.contains(&format!("getent passwd {user}")),
        "{postinst}"
    );

    let prerm = fs::read_to_string(root.join("contrib/debian/prerm")).unwrap();
    assert!(prerm.starts_with("#!/bin/sh\n"), "{prerm}");
    assert!(
        prerm.contains("systemctl stop sealink-recv.service 'sealink@*.service'"),
        "{prerm}"
    );
    // cargo-deb expands no debhelper token here: one left in would ship as it is (lintian:
    // maintainer-script-has-unexpanded-debhelper-token).
    for script in ["postinst", "prerm", "postrm"] {
        let text = fs::read_to_string(root.join("contrib/debian").join(script)).unwrap();
        assert!(!text.contains("#DEBHELPER#"), "{script}: {text}");
    }
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &fs::metadata(root.join("contrib/debian/prerm"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o111, 0o111, "prerm is not executable");
    if Command::new("sh")
        .arg("-n")
        .arg(root.join("contrib/debian/prerm"))
        .status()
        .is_ok_and(|s| !s.success())
    {
        panic!("prerm is not valid sh");
    }

    let unit = fs::read_to_string(contrib().join("sealink@.service")).unwrap();
    let values = |key: &str| -> Vec<String> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(&format!("{key}=")))
            .flat_map(|v| v.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .collect()
    };
    for doc in ["man:sealink(1)", "man:sealink-up(1)"] {
        assert!(values("Documentation").iter().any(|d| d == doc), "{unit}");
    }
    assert!(
        values("After").iter().any(|d| d == "nss-lookup.target"),
        "{unit}"
    );
    assert!(
        values("Wants").iter().any(|d| d == "nss-lookup.target"),
        "{unit}"
    );
    // `up %i` resolves as `sealink up NAME` does: /etc/sealink/NAME.toml, else wg-quick's
    // /etc/wireguard/NAME.conf (issue 46: `.toml` named here never found a wg-quick file).
    assert_eq!(values("ExecStart")[1..], ["up", "%i"], "{unit}");
    assert_eq!(values("ExecReload")[1..], ["reload", "%i"], "{unit}");
    let caps = values("CapabilityBoundingSet");
    // What `up` needs to set up and then drop to its user (crates/sealink-tunnel/src/privs.rs).
    for cap in ["CAP_NET_ADMIN", "CAP_SETUID", "CAP_SETGID"] {
        assert!(caps.iter().any(|c| c == cap), "{cap} missing from {caps:?}");
    }
    // Every page the units name is written by `sealink man --dir`.
    let dir = man_pages();
    for doc in values("Documentation") {
        let page = doc.trim_start_matches("man:").replace("(1)", ".1");
        assert!(dir.path().join(&page).exists(), "{doc}: no {page}");
    }

    // The receiver listens on IPv6 (one dual-stack socket).
    let args = recv_exec_start();
    let at = args.iter().position(|a| a == "--listen").expect("--listen");
    assert_eq!(args[at + 1], "[::]:7878", "{args:?}");
}

#[test]
fn the_package_metadata_links_nowhere_it_does_not_have() {
    // A placeholder repository or home page sends users (and `cargo metadata`, and the
    // .deb's Homepage) nowhere.
    for toml in ["../../Cargo.toml", "Cargo.toml"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(toml);
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            let key = line.split('=').next().unwrap_or_default().trim();
            if key == "repository" || key == "homepage" || key == "documentation" {
                assert!(
                    !line.contains("example.invalid") && !line.contains("example.com"),
                    "{}: {line}",
                    path.display()
                );
            }
        }
    }
}
