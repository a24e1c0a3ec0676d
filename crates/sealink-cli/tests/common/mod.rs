//! Helpers shared by the integration tests (each test binary includes this module).
#![allow(dead_code)]

pub mod hosts;
pub mod netns;
pub mod raw_sender;
#[path = "../../../sealink-stream/tests/common/mod.rs"]
pub mod stream;

use std::fs;
use std::path::PathBuf;

/// The `sealink` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_sealink");

/// Runs `sealink ARGS` to completion with `$SEALINK_HOME` set to `home`.
pub fn run_in(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(BIN)
        .args(args)
        .env("SEALINK_HOME", home)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sealink")
}

/// The public key (second field) of a `.pub` key file.
pub fn public(p: PathBuf) -> String {
    let t = fs::read_to_string(p).unwrap();
    t.split_whitespace().nth(1).unwrap().to_owned()
}

/// Two hosts under `dir`: `a` sends (host key, owner key `alice`, trusts b's host as `bob`),
/// `b` receives (trusts a's host and owner as `alice`) into `dir/in`.
pub fn two_hosts(dir: &std::path::Path) {
    for h in ["a", "b"] {
        fs::create_dir_all(dir.join(h)).unwrap();
        let key = dir.join(h).join("host.key");
        assert!(
            run_in(dir, &["keygen", "host", key.to_str().unwrap()])
                .status
                .success()
        );
    }
    let okey = dir.join("a").join("owner.key");
    assert!(
        run_in(dir, &["keygen", "owner", okey.to_str().unwrap()])
            .status
            .success()
    );
    fs::write(
        dir.join("a").join("trust"),
        format!("host bob {}\n", public(dir.join("b").join("host.key.pub"))),
    )
    .unwrap();
    fs::write(
        dir.join("b").join("trust"),
        format!(
            "host alice {}\nowner alice {}\n",
            public(dir.join("a").join("host.key.pub")),
            public(dir.join("a").join("owner.key.pub"))
        ),
    )
    .unwrap();
    fs::create_dir_all(dir.join("in")).unwrap();
}

/// Takes the standard error of a just-spawned listener (`recv`, `msg listen`) and reads its
/// line `listening on ADDR ...`: the address, and the rest of standard error.
pub fn listening(
    c: &mut std::process::Child,
) -> (
    std::net::SocketAddr,
    std::io::BufReader<std::process::ChildStderr>,
) {
    use std::io::BufRead;
    let mut err = std::io::BufReader::new(c.stderr.take().unwrap());
    let mut line = String::new();
    // Log lines (with -v) may come first.
    let mut before = String::new();
    while err.read_line(&mut line).unwrap() > 0 && !line.starts_with("listening on ") {
        before.push_str(&line);
        line.clear();
    }
    let addr = line
        .strip_prefix("listening on ")
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no `listening on` line; standard error: {before:?}"))
        .parse()
        .unwrap();
    (addr, err)
}

/// Gathers what `rest` (a listener's standard error after [`listening`]) still says, on a
/// thread of its own, into the string returned, until it closes.
pub fn gather(
    mut rest: impl std::io::Read + Send + 'static,
) -> std::sync::Arc<std::sync::Mutex<String>> {
    let err = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let e = err.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = rest.read(&mut buf) {
            if n == 0 {
                break;
            }
            e.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    err
}

/// Every `.rs` file under `dir`, at any depth, appended to `out`.
pub fn rust_files(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Writes `len` pseudo-random bytes (from `seed`) to `path` and returns them.
pub fn random_file(path: &std::path::Path, len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    fs::write(path, &data).unwrap();
    data
}

/// `sealink send FILES bob@TO --quiet EXTRA` from host `a` of [`two_hosts`] (`home_a`).
pub fn send_cmd(
    home_a: &std::path::Path,
    files: &[&std::path::Path],
    to: std::net::SocketAddr,
    extra: &[&str],
) -> std::process::Command {
    let mut c = std::process::Command::new(BIN);
    c.arg("send")
        .args(files)
        .arg(format!("bob@{to}"))
        .arg("--quiet")
        .args(extra)
        .env("SEALINK_HOME", home_a)
        .env_remove("RUST_LOG");
    c
}

/// Names in `dir`, hidden ones included, sorted.
pub fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Starts `send` (a `sealink send -` command) with its standard input piped, writes 1 MiB to
/// it and waits 300 ms, so that the transfer is under way: the child and its open input.
#[allow(dead_code)]
pub fn send_started_with_a_mib(
    mut send: std::process::Command,
) -> (std::process::Child, std::process::ChildStdin) {
    use std::io::Write as _;
    let mut s = send.stdin(std::process::Stdio::piped()).spawn().unwrap();
    let mut input = s.stdin.take().unwrap();
    input.write_all(&vec![7u8; 1 << 20]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    (s, input)
}
