//! docs/ARCHITECTURE.md's "Where is" table answers each question with one file and an item it
//! defines. This keeps the answers true: every file must exist and define its item, and every
//! question must have its row, so a move that makes the table stale fails here.

use std::path::{Path, PathBuf};

/// The questions the table must answer, each by a word its row contains.
const QUESTIONS: [&str; 7] = [
    "replay window",
    "tunnel packet sealed",
    "the handshake",
    "trust file parsed",
    "pairing",
    "transmit queued",
    "control socket served",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The table's rows: (question, path, item).
fn rows(doc: &str) -> Vec<(String, String, String)> {
    let section = doc
        .split("\n## Where is\n")
        .nth(1)
        .expect("ARCHITECTURE.md has a \"## Where is\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---") && !l.starts_with("| question"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 3, "a row of three cells: {l}");
            let bare = |c: &str| c.trim_matches('`').to_string();
            (cells[0].to_string(), bare(cells[1]), bare(cells[2]))
        })
        .collect()
}

/// Whether `text` defines `item` (a function, type, constant or module of that name).
fn defines(text: &str, item: &str) -> bool {
    [
        "fn", "struct", "enum", "type", "trait", "const", "static", "mod",
    ]
    .iter()
    .any(|kw| {
        let needle = format!("{kw} {item}");
        text.match_indices(&needle).any(|(i, _)| {
            let after = text[i + needle.len()..].chars().next();
            !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    })
}

#[test]
fn where_is_table_is_true() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).expect("read docs");
    let rows = rows(&doc);
    for q in QUESTIONS {
        let n = rows
            .iter()
            .filter(|(question, ..)| question.contains(q))
            .count();
        assert_eq!(n, 1, "one row answers \"{q}\"");
    }
    for (question, path, item) in &rows {
        let file = root().join(path);
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{question} {path}: {e}"));
        assert!(
            defines(&text, item),
            "{question} {path} does not define `{item}`"
        );
    }
}
