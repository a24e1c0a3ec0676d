//! The lab stays out of the product (issue 31): no crate of the workspace but sealink-lab
//! itself names `sealink-lab` in a dependency table (`[dependencies]`, `[dev-dependencies]`,
//! `[build-dependencies]`, their `[target.'...'.*]` forms, `[dependencies.sealink-lab]`) or in a
//! feature, and the product binary's sources do not use `sealink_lab`. `cargo tree -p
//! sealink-cli` then shows no sealink-lab; this test reads the manifests instead, so it needs
//! neither cargo nor the network.

use std::fs;
use std::path::{Path, PathBuf};

mod common;

const LAB: &str = "sealink-lab";
/// The lab's crate name in Rust paths (spelled in two halves so that this file does not match).
const LAB_CRATE: &str = concat!("sealink", "_lab");

/// Whether the TOML table header `[...]` (without brackets) is a dependency table, and if it
/// is the `[dependencies.NAME]` form, the NAME.
fn dependency_table(header: &str) -> Option<Option<String>> {
    let parts: Vec<&str> = header.split('.').map(str::trim).collect();
    let kinds = ["dependencies", "dev-dependencies", "build-dependencies"];
    // `[target.'cfg(...)'.dependencies]`: the kind is the last part (or the one before a NAME).
    for (i, p) in parts.iter().enumerate() {
        if kinds.contains(p) {
            return Some(parts.get(i + 1).map(|n| n.trim_matches('"').to_owned()));
        }
    }
    None
}

/// The lines of `manifest` (a Cargo.toml text) that make its package depend on sealink-lab.
fn lab_dependencies(manifest: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut table: Option<Option<String>> = None;
    let mut in_features = false;
    for (n, raw) in manifest.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(h) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let h = h.trim_matches(['[', ']']);
            table = dependency_table(h);
            in_features = h == "features";
            if let Some(Some(name)) = &table
                && name == LAB
            {
                found.push(format!("line {}: {raw}", n + 1));
            }
            continue;
        }
        let key = line
            .split('=')
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('"');
        let names_lab = key == LAB
            || key.starts_with(&format!("{LAB}."))
            || line.contains(&format!("package = \"{LAB}\""))
            || line.contains(&format!("\"{LAB}/"))
            || line.contains(&format!("\"dep:{LAB}\""));
        let in_dependencies = matches!(table, Some(None));
        if names_lab && (in_dependencies || in_features) {
            found.push(format!("line {}: {raw}", n + 1));
        }
    }
    found
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_check_finds_every_form_of_a_lab_dependency() {
    for manifest in [
        "[dependencies]\nsealink-lab.workspace = true\n",
        "[dependencies]\nsealink-lab = { path = \"../sealink-lab\" }\n",
        "[dev-dependencies]\n\"sealink-lab\" = \"0.1\"\n",
        "[build-dependencies]\nlab = { package = \"sealink-lab\", path = \"x\" }\n",
        "[target.'cfg(unix)'.dependencies]\nsealink-lab = \"0.1\"\n",
        "[dependencies.sealink-lab]\nworkspace = true\n",
        "[features]\ncuda = [\"sealink-lab/cuda\"]\n",
    ] {
        assert_eq!(lab_dependencies(manifest).len(), 1, "{manifest}");
    }
    for manifest in [
        "[package]\ndescription = \"not sealink-lab\"\n",
        "[dependencies]\n# sealink-lab.workspace = true\nsealink-proto.workspace = true\n",
        "[[bin]]\nname = \"sealink-lab\"\n",
    ] {
        assert!(lab_dependencies(manifest).is_empty(), "{manifest}");
    }
}

/// sealink-cli, the product binary, and every other crate of the workspace but the lab.
#[test]
fn no_product_crate_depends_on_the_lab() {
    let cli = root().join("crates/sealink-cli/Cargo.toml");
    let text = fs::read_to_string(&cli).unwrap();
    assert!(
        lab_dependencies(&text).is_empty(),
        "{} depends on sealink-lab: {:?}",
        cli.display(),
        lab_dependencies(&text)
    );
    let mut checked = 0;
    for e in fs::read_dir(root().join("crates")).unwrap() {
        let dir = e.unwrap().path();
        let manifest = dir.join("Cargo.toml");
        if dir.file_name().is_some_and(|n| n == LAB) || !manifest.is_file() {
            continue;
        }
        let found = lab_dependencies(&fs::read_to_string(&manifest).unwrap());
        assert!(
            found.is_empty(),
            "{} depends on sealink-lab: {found:?}",
            manifest.display()
        );
        checked += 1;
    }
    assert!(checked >= 9, "only {checked} manifests checked");
}

#[test]
fn the_product_sources_do_not_use_the_lab() {
    let cli = root().join("crates/sealink-cli");
    let mut files = Vec::new();
    common::rust_files(&cli.join("src"), &mut files);
    common::rust_files(&cli.join("tests"), &mut files);
    let mut hits = Vec::new();
    for p in files {
        let text = fs::read_to_string(&p).unwrap();
        for (n, l) in text.lines().enumerate() {
            if l.contains(LAB_CRATE) && !l.trim_start().starts_with("//") {
                hits.push(format!("{}:{}", p.display(), n + 1));
            }
        }
    }
    assert!(hits.is_empty(), "{LAB_CRATE} used in the product: {hits:?}");
}
