//! Helpers shared by the lab's integration tests (each test binary includes this module).
#![allow(dead_code)]

#[path = "../../../sealink-tunnel/tests/common/ip.rs"]
pub mod ip;
#[path = "../../../sealink-tunnel/tests/common/tunnel_user.rs"]
pub mod tunnel_user;

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `sealink-lab` binary under test.
pub const LAB: &str = env!("CARGO_BIN_EXE_sealink-lab");

/// Runs `sealink-lab` with `args`, `RUST_LOG` unset so that what it prints is its own.
pub fn lab<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Output {
    Command::new(LAB)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sealink-lab")
}

/// [`lab`], which must succeed: its standard output (both outputs in the message if it failed).
pub fn lab_ok<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> String {
    let o = lab(args);
    let out = stdout(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {}", stderr(&o));
    out
}

/// Runs `c`, which must start and succeed (`what` and its standard error in the message if not).
pub fn output_ok(c: &mut Command, what: &str) -> Output {
    let o = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// A bench that ran into a fresh `--out` directory (removed on drop) and succeeded.
pub struct BenchRun {
    _tmp: tempfile::TempDir,
    /// The `--out` directory, which the bench created.
    pub dir: PathBuf,
    pub stdout: String,
}

impl BenchRun {
    /// Its standard output says each of `needles`.
    pub fn assert_stdout_has(&self, needles: &[&str]) {
        let stdout = &self.stdout;
        for needle in needles {
            assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
        }
    }
}

/// Runs `sealink-lab bench ARGS --out DIR`, DIR a fresh temporary path the bench creates; the
/// run must succeed.
pub fn bench(args: &[&str]) -> BenchRun {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let stdout = lab_ok(
        ["bench"]
            .iter()
            .chain(args)
            .chain(&["--out", path_str(&dir)]),
    );
    BenchRun {
        _tmp: tmp,
        dir,
        stdout,
    }
}

/// A run's standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A run's standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A temporary path as an argument.
pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// The product binary `sealink`, for the tests that need both (a tunnel behind the relay). It
/// is another package's binary (sealink-cli), which the lab must not depend on, so cargo gives
/// these tests no `CARGO_BIN_EXE_sealink`: it is looked up next to `sealink-lab`, in the same
/// target directory. `cargo test --workspace` builds every package's binaries before it runs any
/// test; `cargo test -p sealink-lab` alone does not, hence the message. (A `sealink` left from an
/// older build is used as it is: build both after changing either.)
pub fn sealink() -> PathBuf {
    let path = Path::new(LAB).with_file_name("sealink");
    assert!(
        path.is_file(),
        "{} is missing: this test runs the product binary beside the lab's; build it first \
         (`cargo build -p sealink-cli`, same profile and target directory), or run \
         `cargo test --workspace`, which builds both",
        path.display()
    );
    path
}

/// Reads and checks the run record `dir/<bench>.json` a bench wrote: it names the bench, the
/// command that ran (`sealink-lab bench <bench> ...`), a commit, a CPU, cores and a UTC date; it
/// lists exactly `files`, each present in `dir`; and its summary has figures.
pub fn run_record(
    dir: &std::path::Path,
    bench: &str,
    files: &[&str],
) -> sealink_lab::report::RunRecord {
    let path = dir.join(format!("{bench}.json"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let r =
        sealink_lab::report::RunRecord::from_json(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(r.schema, sealink_lab::report::record::SCHEMA, "{text}");
    assert_eq!(r.bench, bench, "{text}");
    assert_eq!(
        r.command_line.get(1..3),
        Some(&["bench".to_owned(), bench.to_owned()][..]),
        "{text}"
    );
    assert!(
        !r.git_commit.is_empty() && !r.cpu_model.is_empty() && r.cores > 0,
        "{text}"
    );
    // RFC 3339 UTC to the second: 2026-11-23T18:16:26Z.
    assert!(
        r.date.len() == 20 && r.date.starts_with("20") && r.date.ends_with('Z'),
        "{text}"
    );
    let mut listed = r.files.clone();
    listed.sort();
    let mut want: Vec<String> = files.iter().map(|f| (*f).to_owned()).collect();
    want.sort();
    assert_eq!(listed, want, "{text}");
    for f in files {
        assert!(dir.join(f).is_file(), "{f} listed but missing");
    }
    assert!(!r.summary.is_empty(), "{text}");
    r
}

/// The value and unit of the summary figure `name` in a run record.
pub fn figure(r: &sealink_lab::report::RunRecord, name: &str) -> (Option<f64>, String) {
    let f = r.summary.iter().find(|f| f.name == name);
    let f = f.unwrap_or_else(|| panic!("no figure {name:?} in {:?}", r.summary));
    (f.value, f.unit.clone())
}
