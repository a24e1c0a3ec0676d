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
                .replace("0.0.0.0:7878", "127.0.0.1:0")
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
