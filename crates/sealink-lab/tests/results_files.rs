//! Every repository file that docs/RESULTS.md (and docs/results-archive.md, when present) cites
//! is in the repository, tracked by git (issue 32): a figure must not point at a file that is
//! not there, and an ignored file of a warm tree does not count. The other way round,
//! every file under docs/results/ (the lab's outputs kept in the repository) is a CSV or SVG
//! that RESULTS cites by its path, and together they stay under 2 MiB.
//!
//! A cited file is a word, inside an inline code span or a fenced code block, that starts with one
//! of the repository's top-level directories (`docs/`, `bench/`, `crates/`, `fuzz/`, `contrib/`)
//! and names a file (its last component has an extension) or a directory (it ends with `/`).
//! Words with glob or placeholder characters (`*`, `<`, `$`, `{`, ...) are commands' arguments
//! and are skipped; a `::test_name` or `:LINE` suffix is cut off.

use std::path::{Path, PathBuf};

const ROOTS: &[&str] = &["docs/", "bench/", "crates/", "fuzz/", "contrib/"];
const DOCS: &[&str] = &["docs/RESULTS.md", "docs/results-archive.md"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The files git tracks, when the tree is a git checkout. A path counts as there only if git
/// tracks it (or, for a directory, a file under it): a warm tree holds ignored files (a fuzz
/// lock file, bench output) that a fresh clone lacks, and the test must fail here as it would
/// in CI. Without git (a source tarball) it falls back to what is on disk.
fn tracked_files(root: &Path) -> Option<std::collections::HashSet<String>> {
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let list = String::from_utf8(out.stdout).ok()?;
    Some(
        list.split('\0')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect(),
    )
}

fn is_there(root: &Path, tracked: Option<&std::collections::HashSet<String>>, cited: &str) -> bool {
    match tracked {
        Some(files) if cited.ends_with('/') => files.iter().any(|f| f.starts_with(cited)),
        Some(files) => files.contains(cited),
        None => root.join(cited).exists(),
    }
}

/// The text of inline code spans (which may run over a line break) and of fenced code blocks.
fn code_text(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut prose = String::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            out.push(line.to_string());
        } else {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    // Inline spans: every second piece between single backticks.
    out.extend(prose.split('`').skip(1).step_by(2).map(str::to_string));
    out
}

/// Repository-relative paths cited in one piece of code text.
fn cited_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let seps = |c: char| c.is_whitespace() || "()[],;'\"|&=".contains(c);
    for word in code.split(seps) {
        let word = word.strip_prefix("./").unwrap_or(word);
        if !ROOTS.iter().any(|r| word.starts_with(r)) {
            continue;
        }
        if word.contains(['*', '?', '<', '>', '{', '}', '$', '%', '~']) || word.contains("...") {
            continue;
        }
        // `tests/x.rs::name`, `file.rs:123`, trailing punctuation.
        let word = word.split("::").next().unwrap_or(word);
        let word = match word.rsplit_once(':') {
            Some((p, rest)) if rest.chars().all(|c| c.is_ascii_digit()) => p,
            _ => word,
        };
        let word = word.trim_end_matches(['.', ':']);
        let last = word.rsplit('/').next().unwrap_or("");
        let is_dir = word.ends_with('/');
        let is_file = last.contains('.') && !last.starts_with('.') && !last.ends_with('.');
        if is_dir || is_file {
            out.push(word.to_string());
        }
    }
    out
}

#[test]
fn every_file_the_results_cite_exists() {
    let root = repo_root();
    let tracked = tracked_files(&root);
    let mut checked = 0;
    let mut missing = Vec::new();
    for doc in DOCS {
        let path = root.join(doc);
        let md = match std::fs::read_to_string(&path) {
            Ok(md) => md,
            Err(_) if *doc != "docs/RESULTS.md" => continue,
            Err(e) => panic!("cannot read {}: {e}", path.display()),
        };
        for (code, cited) in code_text(&md)
            .iter()
            .flat_map(|c| cited_paths(c).into_iter().map(move |p| (c.clone(), p)))
        {
            checked += 1;
            if !is_there(&root, tracked.as_ref(), &cited) {
                missing.push(format!("{doc}: `{cited}` (in `{}`)", code.trim()));
            }
        }
    }
    assert!(
        checked > 10,
        "only {checked} cited paths found: the pattern no longer matches how RESULTS cites files"
    );
    assert!(
        missing.is_empty(),
        "{} cited path(s) are not in the repository (git does not track them):\n  {}",
        missing.len(),
        missing.join("\n  ")
    );
}

/// Every file under docs/results/ (issue 32: the lab's outputs that RESULTS cites).
fn result_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            result_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The other way round: every file committed under docs/results/ is cited by its path in
/// RESULTS (so none lies there unexplained), is CSV or SVG, and all of them together stay
/// under 2 MB.
#[test]
fn every_file_under_docs_results_is_cited_and_small() {
    let root = repo_root();
    let md = std::fs::read_to_string(root.join("docs/RESULTS.md")).unwrap();
    let cited: std::collections::HashSet<String> =
        code_text(&md).iter().flat_map(|c| cited_paths(c)).collect();
    let mut files = Vec::new();
    result_files(&root.join("docs/results"), &mut files);
    let mut total = 0;
    let mut problems = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        total += std::fs::metadata(f).map(|m| m.len()).unwrap_or(0);
        if !(rel.ends_with(".csv") || rel.ends_with(".svg")) {
            problems.push(format!("{rel}: not CSV or SVG"));
        }
        if !cited.contains(&rel) {
            problems.push(format!("{rel}: not cited in docs/RESULTS.md"));
        }
    }
    assert!(
        problems.is_empty(),
        "{} problem(s) under docs/results/:\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
    assert!(
        total < 2 << 20,
        "docs/results/ holds {total} bytes, more than 2 MiB"
    );
}

#[test]
fn the_pattern_finds_files_and_skips_placeholders() {
    let found = |s: &str| cited_paths(s);
    assert_eq!(found("bash bench/compare-scp.sh"), ["bench/compare-scp.sh"]);
    assert_eq!(
        found("crates/sealink-datagram/tests/node.rs::some_test"),
        ["crates/sealink-datagram/tests/node.rs"]
    );
    assert_eq!(
        found("SEALINK=<build> bash bench/ab-tunnel.sh 5 5"),
        ["bench/ab-tunnel.sh"]
    );
    assert_eq!(found("docs/results/"), ["docs/results/"]);
    assert!(found("bench/*.sh").is_empty());
    assert!(found("bench-out/stacks/stacks.md").is_empty());
    assert!(found("/tmp/adp2/adp.md").is_empty());
    assert!(found("target/release/sealink bench adp --out bench-out/adp2").is_empty());
    assert!(found("fuzz/target").is_empty());
    let spans = code_text("a `x/y.rs` b `bench/a.sh` c\n```\ncrates/z/Cargo.toml\n```\n");
    assert_eq!(spans, ["crates/z/Cargo.toml", "x/y.rs", "bench/a.sh"]);
}

/// Machine paths a reader's checkout does not have (issue 49): RESULTS gives commands with
/// repository paths (`bench-out/...`, `target/...`) or placeholders (`<kit>`, `<build dir>`),
/// never a build directory or scratch folder of the machine that ran them.
const MACHINE_PATHS: &[&str] = &["/work/", "/root/", "/home/", "/tmp/"];

fn machine_paths(md: &str) -> Vec<String> {
    md.lines()
        .enumerate()
        .filter(|(_, l)| MACHINE_PATHS.iter().any(|p| l.contains(p)))
        .map(|(i, l)| format!("line {}: {l}", i + 1))
        .collect()
}

#[test]
fn the_results_name_no_machine_path() {
    let root = repo_root();
    for doc in DOCS {
        let Ok(md) = std::fs::read_to_string(root.join(doc)) else {
            continue;
        };
        let found = machine_paths(&md);
        assert!(
            found.is_empty(),
            "{doc} names paths of the machine that ran the command (use bench-out/..., target/... or a <placeholder>):\n{}",
            found.join("\n")
        );
    }
    assert_eq!(
        machine_paths("`--out bench-out/x` in /tmp, and /tmpfs").len(),
        0
    );
    assert_eq!(
        machine_paths("a\n`CARGO_TARGET_DIR=/work/t cargo`").len(),
        1
    );
}
