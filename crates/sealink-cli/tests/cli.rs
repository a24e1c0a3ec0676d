//! End-to-end tests of the `sealink` binary.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn sealink(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sealink"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sealink")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `o` is a usage error (exit status 2) whose message says `says`.
fn assert_usage_error(o: &Output, says: &str) {
    assert_eq!(o.status.code(), Some(2), "{}", stderr(o));
    assert!(stderr(o).contains(says), "{}", stderr(o));
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// Asserts a failed run: exit code 1 and one `error: ` line on stderr.
fn assert_error(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(1),
        "stdout: {}\nstderr: {}",
        stdout(o),
        stderr(o)
    );
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    err
}

#[test]
fn demo_exchanges_messages_over_loopback() {
    let o = sealink(&["demo", "--messages", "300"]);
    let out = stdout(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {}", stderr(&o));
    assert!(
        out.lines().any(|l| l.starts_with("check:")
            && l.contains("all 300 messages delivered exactly once and intact: OK")),
        "{out}"
    );
    assert!(out.contains("127.0.0.1:"), "{out}");
    assert!(out.contains("sealink-lab -- demo"), "{out}");
}

#[test]
fn keygen_writes_files_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("host.key");
    let o = sealink(&["keygen", "host", path_str(&key)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let line = stdout(&o);
    assert!(line.starts_with("sealink-host "), "{line}");
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(stderr(&o).contains(path_str(&key)), "{}", stderr(&o));

    let mode = fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let pub_path = dir.path().join("host.key.pub");
    assert_eq!(fs::read_to_string(&pub_path).unwrap(), line);

    // A second time without --force is refused and leaves the files alone.
    let before = fs::read(&key).unwrap();
    let o = sealink(&["keygen", "host", path_str(&key)]);
    let err = assert_error(&o);
    assert!(err.contains("--force"), "{err}");
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(fs::read(&key).unwrap(), before);

    // With --force it is replaced.
    let o = sealink(&["keygen", "host", path_str(&key), "--force"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_ne!(stdout(&o), line);
    assert_ne!(fs::read(&key).unwrap(), before);
}

#[test]
fn pubkey_matches_keygen() {
    let dir = tempfile::tempdir().unwrap();
    for kind in ["host", "owner"] {
        let key = dir.path().join(format!("{kind}.key"));
        let o = sealink(&["keygen", kind, path_str(&key)]);
        assert!(o.status.success(), "{}", stderr(&o));
        let generated = stdout(&o);
        assert!(
            generated.starts_with(&format!("sealink-{kind} ")),
            "{generated}"
        );

        // Kind read from the file.
        let o = sealink(&["pubkey", path_str(&key)]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(stdout(&o), generated);
        // Kind given.
        let o = sealink(&["pubkey", path_str(&key), "--kind", kind]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(stdout(&o), generated);
        // The wrong kind given.
        let other = if kind == "host" { "owner" } else { "host" };
        let err = assert_error(&sealink(&["pubkey", path_str(&key), "--kind", other]));
        assert!(err.contains(&format!("{kind} private key")), "{err}");

        // The public key file gives the same line (as `ssh-keygen -lf` reads a .pub), and
        // is refused as the other kind.
        let pub_path = dir.path().join(format!("{kind}.key.pub"));
        let o = sealink(&["pubkey", path_str(&pub_path)]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(stdout(&o), generated);
        let err = assert_error(&sealink(&["pubkey", path_str(&pub_path), "--kind", other]));
        assert!(err.contains("public key, not"), "{err}");
    }
}

#[test]
fn pubkey_missing_and_malformed_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.key");
    let err = assert_error(&sealink(&["pubkey", path_str(&missing)]));
    assert!(err.contains(path_str(&missing)), "{err}");
    assert!(err.contains("does not exist"), "{err}");

    let bad = dir.path().join("bad.key");
    fs::write(&bad, "ssh-ed25519 AAAA\n").unwrap();
    fs::set_permissions(&bad, fs::Permissions::from_mode(0o600)).unwrap();
    let err = assert_error(&sealink(&["pubkey", path_str(&bad)]));
    assert!(err.contains(path_str(&bad)), "{err}");
    assert!(err.contains("not a sealink private key file"), "{err}");
    assert!(err.contains("sealink-host-private <base64>"), "{err}");
    assert!(err.contains("sealink-owner-private <base64>"), "{err}");

    fs::write(&bad, "sealink-owner-private !!!notbase64!!!\n").unwrap();
    let err = assert_error(&sealink(&["pubkey", path_str(&bad)]));
    assert!(err.contains("base64"), "{err}");
}

/// A directory with an owner key and a host key, and a good trust file naming both: (dir,
/// trust path, owner key in base64, host key in base64).
fn trust_fixture() -> (tempfile::TempDir, PathBuf, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let alice = dir.path().join("alice.key");
    let gw = dir.path().join("gw.key");
    let a = stdout(&sealink(&["keygen", "owner", path_str(&alice)]));
    let g = stdout(&sealink(&["keygen", "host", path_str(&gw)]));
    let a_b64 = a.split_whitespace().nth(1).unwrap().to_owned();
    let g_b64 = g.split_whitespace().nth(1).unwrap().to_owned();
    let trust = dir.path().join("trust");
    fs::write(
        &trust,
        format!("# test\nowner alice@example {a_b64}\nhost gw-1 {g_b64}  # gateway\n"),
    )
    .unwrap();
    (dir, trust, a_b64, g_b64)
}

#[test]
fn trust_check_reports_summary_and_errors() {
    let (dir, trust, a_b64, g_b64) = trust_fixture();
    let o = sealink(&["trust", "check", path_str(&trust)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("1 owner, 1 host"), "{out}");
    assert!(out.contains("alice@example"), "{out}");
    assert!(out.contains("gw-1"), "{out}");

    fs::write(
        &trust,
        format!("owner alice {a_b64}\n\nhost bad/name {g_b64}\n"),
    )
    .unwrap();
    let err = assert_error(&sealink(&["trust", "check", path_str(&trust)]));
    assert!(err.contains(&format!("{}:3", path_str(&trust))), "{err}");
    assert!(err.contains("bad/name"), "{err}");

    let err = assert_error(&sealink(&[
        "trust",
        "check",
        path_str(&dir.path().join("missing")),
    ]));
    assert!(err.contains("trust file"), "{err}");
}

/// `trust check --json`: the parsed findings, for good and bad trust files alike.
fn trust_json(path: &Path) -> (Option<i32>, sealink_keys::TrustCheck) {
    let o = sealink(&["trust", "check", "--json", path_str(path)]);
    let line = stdout(&o);
    assert_eq!(line.lines().count(), 1, "{line}");
    let c = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    (o.status.code(), c)
}

#[test]
fn trust_check_json_reports_entries_and_findings() {
    let (dir, trust, a_b64, g_b64) = trust_fixture();
    let (code, c) = trust_json(&trust);
    assert_eq!(code, Some(0), "{c:?}");
    assert!(c.ok && c.error.is_none(), "{c:?}");
    assert_eq!(c.path, path_str(&trust));
    let pairs = |l: &[sealink_keys::check::TrustEntry]| -> Vec<(String, String)> {
        l.iter().map(|e| (e.name.clone(), e.key.clone())).collect()
    };
    assert_eq!(
        pairs(&c.owners),
        [("alice@example".to_owned(), a_b64.to_owned())]
    );
    assert_eq!(pairs(&c.hosts), [("gw-1".to_owned(), g_b64.to_owned())]);

    // A bad line: exit 1 as without --json, the finding on stdout, the message on stderr.
    fs::write(
        &trust,
        format!("owner alice {a_b64}\n\nhost bad/name {g_b64}\n"),
    )
    .unwrap();
    let (code, c) = trust_json(&trust);
    assert_eq!(code, Some(1), "{c:?}");
    assert!(!c.ok && c.owners.is_empty() && c.hosts.is_empty(), "{c:?}");
    let f = c.error.unwrap();
    assert_eq!(
        (f.kind.as_str(), f.line, f.problem.as_deref()),
        ("entry", Some(3), Some("bad_name"))
    );
    assert!(f.message.contains("bad/name"), "{f:?}");
    assert!(
        stderr(&sealink(&["trust", "check", "--json", path_str(&trust)])).starts_with("error: ")
    );

    fs::write(
        &trust,
        format!("owner alice {a_b64}\nowner alice {g_b64}\n"),
    )
    .unwrap();
    let f = trust_json(&trust).1.error.unwrap();
    assert_eq!(
        (f.line, f.problem.as_deref()),
        (Some(2), Some("duplicate_name"))
    );

    fs::write(&trust, format!("owner alice {a_b64}\n")).unwrap();
    fs::set_permissions(&trust, fs::Permissions::from_mode(0o666)).unwrap();
    let (code, c) = trust_json(&trust);
    assert_eq!(code, Some(1));
    assert_eq!(c.error.unwrap().kind, "insecure");

    let (code, c) = trust_json(&dir.path().join("missing"));
    assert_eq!(code, Some(1));
    assert_eq!(c.error.unwrap().kind, "not_found");
}

#[test]
fn usage_errors_and_help() {
    let o = sealink(&["send", "--suite", "rot13", "x", "127.0.0.1"]);
    assert_eq!(o.status.code(), Some(2), "usage errors exit 2");
    assert!(stderr(&o).starts_with("error: "), "{}", stderr(&o));
    // A demo argument out of range too (checked by clap's value parser).
    let o = sealink(&["demo", "--messages", "0"]);
    assert_eq!(o.status.code(), Some(2), "usage errors exit 2");
    assert!(stderr(&o).starts_with("error: "), "{}", stderr(&o));

    let o = sealink(&["--help"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("Examples:"), "{}", stdout(&o));
    for sub in [
        &["keygen"][..],
        &["pubkey"],
        &["trust", "check"],
        &["demo"],
        &["send"],
    ] {
        let mut args = sub.to_vec();
        args.push("--help");
        let o = sealink(&args);
        assert!(o.status.success(), "{sub:?}");
        let help = stdout(&o);
        assert!(
            help.contains("Example:") || help.contains("Examples:"),
            "{sub:?}: {help}"
        );
    }
}

/// `keygen --force` replaces the paths themselves: symlinks planted there are replaced, and the
/// files they point to (or would create) are left alone.
#[test]
fn keygen_force_does_not_follow_symlinks() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    fs::write(&victim, "precious\n").unwrap();
    let key = dir.path().join("host.key");
    symlink(&victim, &key).unwrap();
    // A dangling link: following it would create a file where it points.
    let elsewhere = dir.path().join("elsewhere");
    symlink(&elsewhere, dir.path().join("host.key.pub")).unwrap();

    let o = sealink(&["keygen", "host", path_str(&key), "--force"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(!elsewhere.exists(), "the public key followed the link");
    for p in [key.clone(), dir.path().join("host.key.pub")] {
        let meta = fs::symlink_metadata(&p).unwrap();
        assert!(
            meta.file_type().is_file(),
            "{} is not a plain file",
            p.display()
        );
    }
    assert_eq!(
        fs::symlink_metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let o = sealink(&["pubkey", path_str(&key)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        fs::read_to_string(dir.path().join("host.key.pub")).unwrap()
    );
    // No temporary files left beside them.
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["host.key", "host.key.pub", "victim"]);
}

/// Trust files others can write (the file, or its directory without the sticky bit) or that
/// another non-root user owns are refused, as ssh's StrictModes does.
#[test]
fn trust_files_others_can_write_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("gw.key");
    assert!(
        sealink(&["keygen", "host", path_str(&key)])
            .status
            .success()
    );
    let line = fs::read_to_string(dir.path().join("gw.key.pub")).unwrap();
    let trust = dir.path().join("trust");
    fs::write(
        &trust,
        format!("host gw {}", line.split_whitespace().nth(1).unwrap()),
    )
    .unwrap();
    let set = |p: &Path, m: u32| fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();

    set(&trust, 0o644);
    let o = sealink(&["trust", "check", path_str(&trust)]);
    assert!(o.status.success(), "{}", stderr(&o));

    for m in [0o666, 0o646, 0o664, 0o620] {
        set(&trust, m);
        let err = assert_error(&sealink(&["trust", "check", path_str(&trust)]));
        assert!(err.contains(path_str(&trust)), "{err}");
        assert!(err.contains("writable by group or others"), "{err}");
        assert!(err.contains(&format!("{m:04o}")), "{err}");
    }
    set(&trust, 0o644);

    // Owned by another user.
    std::os::unix::fs::chown(&trust, Some(65534), None).unwrap();
    let err = assert_error(&sealink(&["trust", "check", path_str(&trust)]));
    assert!(err.contains("owned by uid 65534"), "{err}");
    std::os::unix::fs::chown(&trust, Some(0), None).unwrap();

    // In a directory anyone can write to (no sticky bit): anyone could replace it.
    set(dir.path(), 0o777);
    let err = assert_error(&sealink(&["trust", "check", path_str(&trust)]));
    assert!(err.contains("directory"), "{err}");
    assert!(err.contains(path_str(dir.path())), "{err}");
    // With the sticky bit (like /tmp) only the owner may replace it.
    set(dir.path(), 0o1777);
    assert!(
        sealink(&["trust", "check", path_str(&trust)])
            .status
            .success()
    );
    set(dir.path(), 0o755);
}

/// Issue 29 item 3: one `trust remove` racing twelve `trust add`s, as separate processes on the
/// same file. Each edit reads, changes and renames the whole file, so without a lock held across
/// all three the later rename drops the other edits: adds were lost and the removed key came back.
#[test]
fn concurrent_trust_edits_lose_nothing_and_a_removal_stays() {
    use base64::Engine as _;
    let b64 = |k: u8| base64::engine::general_purpose::STANDARD.encode([k; 32]);
    let dir = tempfile::tempdir().unwrap();
    let trust = dir.path().join("trust");
    for trial in 0..6 {
        fs::write(&trust, format!("# trial {trial}\nhost victim {}\n", b64(1))).unwrap();
        fs::set_permissions(&trust, fs::Permissions::from_mode(0o600)).unwrap();
        let spawn = |args: Vec<String>| {
            Command::new(env!("CARGO_BIN_EXE_sealink"))
                .args(&args)
                .env_remove("RUST_LOG")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn sealink")
        };
        let file = path_str(&trust).to_owned();
        let adds: Vec<(String, u8)> = (0..12u8)
            .map(|i| (format!("h{trial}-{i}"), 10 + i))
            .collect();
        let mut children = Vec::new();
        // The removal goes in the middle so adds start both before and after it.
        for (i, (name, k)) in adds.iter().enumerate() {
            if i == 6 {
                children.push(spawn(
                    ["trust", "remove", "victim", "--file", &file]
                        .map(String::from)
                        .to_vec(),
                ));
            }
            children.push(spawn(
                ["trust", "add", "host", name, &b64(*k), "--file", &file]
                    .map(String::from)
                    .to_vec(),
            ));
        }
        for c in children {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "trial {trial}: {}", stderr(&o));
        }
        let t = sealink_keys::read_trust(&trust).unwrap();
        for (name, k) in &adds {
            assert!(
                t.hosts.contains(&(name.clone(), [*k; 32])),
                "trial {trial}: add of {name} lost: {:?}",
                t.hosts
            );
        }
        assert!(
            !t.hosts.iter().any(|(n, _)| n == "victim"),
            "trial {trial}: the removed key came back: {:?}",
            t.hosts
        );
        assert_eq!(t.hosts.len(), adds.len(), "trial {trial}");
    }
    // The lock file lives beside the trust file, private to its owner.
    let lock = sealink_keys::trust::lock_path(&trust);
    assert_eq!(lock, dir.path().join(".trust.lock"));
    assert_eq!(
        fs::metadata(&lock).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

/// All-zero and small-order public keys are refused wherever they are loaded: trust files
/// (host and owner lines) and tunnel configs.
#[test]
fn degenerate_public_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let trust = dir.path().join("trust");
    let zero = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    // The Ed25519 identity, canonical and with y = p + 1 (non-canonical).
    let identity = "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    let identity_noncanonical = "7v///////////////////////////////////////38=";
    for (line, what) in [
        (format!("host gw {zero}"), "host"),
        (format!("owner alice {identity}"), "owner"),
        (format!("owner alice {identity_noncanonical}"), "owner"),
    ] {
        fs::write(&trust, format!("# ok\n{line}\n")).unwrap();
        let err = assert_error(&sealink(&["trust", "check", path_str(&trust)]));
        assert!(err.contains(&format!("{}:2", path_str(&trust))), "{err}");
        assert!(err.contains("small-order"), "{err}");
        assert!(err.contains(what), "{err}");
    }

    let cfg = dir.path().join("t.toml");
    fs::write(
        &cfg,
        format!(
            "[interface]\nname = \"slweak{}\"\nprivate_key = \"missing.key\"\naddress = \"10.9.0.1/24\"\nlisten_port = 51820\n[[peer]]\nname = \"b\"\npublic_key = \"{zero}\"\nallowed_ips = [\"10.9.0.2/32\"]\n",
            std::process::id() % 10_000
        ),
    )
    .unwrap();
    let err = assert_error(&sealink(&["up", path_str(&cfg)]));
    assert!(err.contains("peer[0].public_key"), "{err}");
    assert!(err.contains("small-order"), "{err}");
}

#[test]
fn completions_man_page_and_exit_codes() {
    let o = sealink(&["completions", "bash"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("_sealink()"), "{}", stdout(&o));
    assert!(stdout(&o).contains("demo"), "subcommands are completed");
    // The lab's commands are the `sealink-lab` binary's, not the product's.
    for lab in ["bench", "relay"] {
        assert!(!stdout(&o).contains(lab), "{lab} completed: {}", stdout(&o));
    }
    let o = sealink(&["man"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(".ie"),
        "roff: {}",
        &stdout(&o)[..40.min(stdout(&o).len())]
    );
    assert!(stdout(&o).contains("sealink"));
    // Usage errors exit 2, other failures 1 (as `--help` says).
    assert_eq!(sealink(&["completions", "tcsh"]).status.code(), Some(2));
    assert_eq!(sealink(&["no-such-command"]).status.code(), Some(2));
    let missing = tempfile::tempdir().unwrap().path().join("missing.key");
    assert_eq!(
        sealink(&["pubkey", path_str(&missing)]).status.code(),
        Some(1)
    );
    assert!(stdout(&sealink(&["--help"])).contains("Exit status: 0 success"));
}

/// Issue 30: `keygen --help` described --force with `recv`'s text (received trees).
#[test]
fn keygen_help_describes_its_own_force() {
    let o = sealink(&["keygen", "--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let help = stdout(&o);
    let force = &help[help.find("--force").expect("--force in keygen --help")..];
    let force = force.split("\n  -").next().unwrap_or(force);
    assert!(force.contains("PATH.pub"), "{force}");
    assert!(!force.contains("received"), "{force}");
}

/// Issue 30: `keygen host -` wrote a private key to a file named `-`. It is refused, writing
/// nothing; `./-` still names such a file on purpose.
#[test]
fn keygen_to_dash_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = |path: &str| {
        Command::new(env!("CARGO_BIN_EXE_sealink"))
            .args(["keygen", "host", path])
            .current_dir(dir.path())
            .env_remove("RUST_LOG")
            .output()
            .expect("run sealink")
    };
    let o = run("-");
    let err = assert_error(&o);
    assert!(err.contains("standard-output"), "{err}");
    assert!(err.contains("./-"), "{err}");
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        0,
        "wrote something"
    );
    let o = run("./-");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.path().join("-").is_file() && dir.path().join("-.pub").is_file());
}

/// `--version` alone is one line; with -v it names the AEAD library of each suite family, and
/// SEALINK_AEAD_BACKEND is reported as the override it is.
#[test]
fn version_verbose_names_the_aead_backends() {
    let plain = sealink(&["--version"]);
    assert!(plain.status.success());
    assert_eq!(stdout(&plain).lines().count(), 1, "{}", stdout(&plain));
    for args in [&["--version", "-v"][..], &["-vv", "--version"][..]] {
        let o = sealink(args);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains("aead backends"), "{out}");
        assert!(out.contains("\n  aes-gcm: "), "{out}");
        assert!(out.contains("\n  chacha20-poly1305: "), "{out}");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_sealink"))
        .args(["--version", "-v"])
        .env("SEALINK_AEAD_BACKEND", "openssl")
        .output()
        .expect("run sealink");
    let out = stdout(&o);
    assert!(
        out.contains("chacha20-poly1305: openssl (set by SEALINK_AEAD_BACKEND"),
        "{out}"
    );
    assert!(
        out.contains("OpenSSL "),
        "the loaded library's version: {out}"
    );
}

/// Shell completions offer the suites for `--suite` (not file names), and a legacy or unknown
/// suite is a usage error naming the choices.
#[test]
fn suite_completes_and_refuses_with_the_choices() {
    let o = sealink(&["completions", "bash"]);
    assert!(o.status.success());
    assert!(
        stdout(&o).contains("aes128-gcm aes256-gcm chacha20-poly1305"),
        "no suite list in the bash completions"
    );
    for bad in ["rot13", "legacy-3des-cbc-hmac-md5"] {
        let o = sealink(&["send", "x", "b@192.0.2.1", "--suite", bad]);
        assert_usage_error(
            &o,
            "possible values: aes128-gcm, aes256-gcm, chacha20-poly1305",
        );
    }
}

/// A destination without a host or name, or a port out of range, is a usage error (exit 2)
/// that says what was expected, not a resolver failure (issue 46).
#[test]
fn bad_destinations_and_ports_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    fs::write(&file, b"x").unwrap();
    for dest in [
        "bob@",
        "@10.0.0.2",
        "bob@:7878",
        "10.0.0.2:99999",
        "10.0.0.2:0",
    ] {
        let o = sealink(&["send", path_str(&file), dest]);
        assert_eq!(o.status.code(), Some(2), "{dest}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("[NAME@]HOST[:PORT]") || stderr(&o).contains("out of range"),
            "{dest}: {}",
            stderr(&o)
        );
    }
    let o = sealink(&[
        "recv",
        "--listen",
        "127.0.0.1:99999",
        "--dir",
        path_str(dir.path()),
    ]);
    assert_usage_error(&o, "port 99999 is out of range");
}

/// `recv --dir NEW` makes NEW (and its parents), as rsync and croc do, and receives into it.
#[test]
fn recv_makes_a_missing_dir() {
    let dir = tempfile::tempdir().unwrap();
    common::two_hosts(dir.path());
    let new = dir.path().join("new").join("inbox");
    let mut recv = Command::new(env!("CARGO_BIN_EXE_sealink"))
        .args([
            "recv",
            "--listen",
            "127.0.0.1:0",
            "--once",
            "--dir",
            path_str(&new),
        ])
        .env("SEALINK_HOME", dir.path().join("b"))
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (addr, mut err) = common::listening(&mut recv);
    assert!(new.is_dir());
    let file = dir.path().join("hello.txt");
    fs::write(&file, b"hello\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_sealink"))
        .args(["send", path_str(&file), &format!("bob@{addr}"), "--quiet"])
        .env("SEALINK_HOME", dir.path().join("a"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(recv.wait().unwrap().success(), "{rest}");
    assert_eq!(fs::read(new.join("hello.txt")).unwrap(), b"hello\n");
}
