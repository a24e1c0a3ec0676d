//! What the product binary links, as cargo resolves it for `sealink` alone: no terminal-table
//! crate (the lab's reports), no simulator (sealink-proto's `sim` feature), no legacy ciphers
//! (sealink-crypto's `legacy` feature and the DES, CBC and MD5 crates it pulls in). The lab
//! enables those; a workspace build unifies them, so only a per-package resolution shows what
//! `sealink` itself carries.

use std::path::Path;
use std::process::Command;

/// `cargo tree -p sealink-cli -e features,normal,build`: the shipped graph with its features.
fn product_tree() -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let o = Command::new(cargo)
        .current_dir(root)
        .args(["tree", "-p", "sealink-cli", "-e", "features,normal,build"])
        .args(["--locked", "--offline", "--prefix", "none"])
        .output()
        .expect("run cargo tree");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// The lines of `tree` that carry `what`.
fn lines_with<'a>(tree: &'a str, what: &str) -> Vec<&'a str> {
    tree.lines().filter(|l| l.contains(what)).collect()
}

#[test]
fn the_product_links_no_lab_tables_simulator_or_legacy_ciphers() {
    let tree = product_tree();
    assert!(
        tree.lines().any(|l| l.starts_with("sealink-cli ")),
        "{tree}"
    );
    assert!(
        tree.contains("sealink-proto feature \"default\""),
        "the feature view is on: {tree}"
    );
    for banned in [
        "comfy-table ",
        "sealink-proto feature \"sim\"",
        "sealink-crypto feature \"legacy\"",
        "des v",
        "cbc v",
        "md-5 v",
        "sealink-lab ",
    ] {
        let hits = lines_with(&tree, banned);
        assert!(hits.is_empty(), "sealink links {banned:?}: {hits:?}");
    }
}
