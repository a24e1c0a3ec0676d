//! No import circles between the top-level modules of any crate in the workspace (issue 31).
//!
//! A module reaches another through `crate::NAME` (in `use` lines or paths). Two sibling modules
//! that reach each other, directly or around a longer loop, cannot be understood or moved one at
//! a time; each circle so far was closed by one misplaced name. A module's own children (files
//! under `src/NAME/`) count as the module itself, so a module may split into private halves.
//! Comment lines and everything from a file's first `#[cfg(test)]` on are skipped: tests may
//! reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

mod common;

use common::rust_files;

/// Module → (module it reaches → the first `file:line` that does).
type Graph = BTreeMap<String, BTreeMap<String, String>>;

/// The names `text` reaches as `crate::NAME`, with their line numbers (not `$crate::`).
fn reached(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("crate::") {
            let before = rest[..i].chars().next_back();
            let after = &rest[i + "crate::".len()..];
            rest = after;
            if before.is_some_and(|c| c == '$' || c.is_alphanumeric() || c == '_') {
                continue;
            }
            // `crate::{a, b::c}` reaches each of a and b.
            let names: Vec<&str> = if let Some(group) = after.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                group[..end].split(',').map(str::trim).collect()
            } else {
                vec![after]
            };
            for name in names {
                let id: String = name
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                // Lower-case names are modules; `crate::Type` re-exported at the root is not.
                if id.starts_with(|c: char| c.is_ascii_lowercase()) {
                    out.push((id, n + 1));
                }
            }
        }
    }
    out
}

fn crate_graph(src: &Path, root: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph = Graph::new();
    for f in &files {
        let rel = f.strip_prefix(src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if matches!(top.as_str(), "lib" | "main") {
            continue;
        }
        let text = fs::read_to_string(f).unwrap();
        let edges = graph.entry(top.clone()).or_default();
        for (to, line) in reached(&text) {
            if to != top {
                let at = format!("{}:{line}", f.strip_prefix(root).unwrap_or(f).display());
                edges.entry(to).or_insert(at);
            }
        }
    }
    // Only edges to the crate's own modules count.
    let mods: BTreeSet<String> = graph.keys().cloned().collect();
    for edges in graph.values_mut() {
        edges.retain(|to, _| mods.contains(to));
    }
    graph
}

/// Every circle, as the list of its modules and the edge that closes each step.
fn circles(graph: &Graph) -> Vec<Vec<(String, String)>> {
    // A circle exists through `m` when `m` reaches itself; report each set of modules once.
    let mut seen: BTreeSet<BTreeSet<String>> = BTreeSet::new();
    let mut out = Vec::new();
    for start in graph.keys() {
        // Depth-first search for a path back to `start`, keeping the path.
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut visited = BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for to in graph.get(&at).into_iter().flat_map(|e| e.keys()) {
                if to == start {
                    let set: BTreeSet<String> = path.iter().cloned().collect();
                    if seen.insert(set) {
                        let mut steps = Vec::new();
                        for w in path.windows(2) {
                            steps.push((w[0].clone(), graph[&w[0]][&w[1]].clone()));
                        }
                        let last = path.last().unwrap();
                        steps.push((last.clone(), graph[last][start].clone()));
                        out.push(steps);
                    }
                } else if visited.insert(to.clone()) {
                    let mut p = path.clone();
                    p.push(to.clone());
                    stack.push((to.clone(), p));
                }
            }
        }
    }
    out
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut found = Vec::new();
    let mut crates = 0;
    for e in fs::read_dir(root.join("crates")).unwrap() {
        let src = e.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        crates += 1;
        for c in circles(&crate_graph(&src, &root)) {
            let text: Vec<String> = c.iter().map(|(m, at)| format!("{m} (at {at})")).collect();
            found.push(text.join(" -> "));
        }
    }
    assert!(crates >= 10, "found only {crates} crates under crates/");
    assert!(
        found.is_empty(),
        "import circles between sibling modules (move the shared name to its own module, or \
         make one module a child of the other):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_check_finds_a_circle_and_ignores_comments_tests_and_children() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    fs::write(src.join("lib.rs"), "mod a; mod b; mod c;\n").unwrap();
    fs::write(src.join("a.rs"), "use crate::b::X;\n").unwrap();
    fs::write(
        src.join("b.rs"),
        "use crate::{c::Y, a};\n// crate::z in a comment\n",
    )
    .unwrap();
    fs::write(
        src.join("c.rs"),
        "fn f() { crate::a::g(); }\n#[cfg(test)]\nmod tests { use crate::b; }\n",
    )
    .unwrap();
    fs::create_dir(src.join("d")).unwrap();
    fs::write(src.join("d.rs"), "mod inner;\n").unwrap();
    fs::write(
        src.join("d/inner.rs"),
        "use crate::d::Z; macro_rules! m { () => { $crate::a } }\n",
    )
    .unwrap();
    let g = crate_graph(src, src);
    assert_eq!(g["b"].keys().collect::<Vec<_>>(), ["a", "c"]);
    assert!(g["c"].keys().all(|k| k == "a"), "{g:?}");
    assert!(g["d"].is_empty(), "{g:?}");
    let c = circles(&g);
    assert_eq!(c.len(), 2, "a<->b and a->b->c->a: {c:?}");
    assert!(c.iter().any(|s| s.len() == 2));
    assert!(c.iter().any(|s| s.len() == 3 && s[0].1 == "a.rs:1"));
}
