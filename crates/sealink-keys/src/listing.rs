//! A trust file as people read it: `sealink trust list` (kind, name, fingerprint, key) and
//! `sealink trust check` (a summary, then each entry).

use std::fmt::Write as _;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use crate::kind::KeyKind;
use crate::trust::TrustFile;

/// Calls `f(kind, name, key, width)` for every entry of `trust`, the kinds in `order`; `width` is
/// the longest name (to align the keys).
fn for_each_entry(
    trust: &TrustFile,
    order: [KeyKind; 2],
    mut f: impl FnMut(KeyKind, &str, &[u8; 32], usize),
) {
    let width = trust
        .owners
        .iter()
        .chain(&trust.hosts)
        .map(|(n, _)| n.len())
        .max()
        .unwrap_or(0);
    for kind in order {
        let list = match kind {
            KeyKind::Host => &trust.hosts,
            KeyKind::Owner => &trust.owners,
        };
        for (name, key) in list {
            f(kind, name, key, width);
        }
    }
}

/// Every trusted key, one line each: kind, name, fingerprint (as transfers and refusals print
/// it) and key; hosts first. Empty for a file that trusts nothing.
pub fn list_text(trust: &TrustFile) -> String {
    let mut out = String::new();
    for_each_entry(
        trust,
        [KeyKind::Host, KeyKind::Owner],
        |kind, name, key, width| {
            let _ = writeln!(
                out,
                "{:<5} {name:<width$}  {}  {}",
                kind.trust_keyword(),
                crate::fingerprint(key),
                B64.encode(key)
            );
        },
    );
    out
}

/// `PATH: OK, N owners, M hosts`, then each entry indented (owners first).
pub fn check_text(path: &Path, trust: &TrustFile) -> String {
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: OK, {}, {}",
        path.display(),
        plural(trust.owners.len(), "owner"),
        plural(trust.hosts.len(), "host")
    );
    for_each_entry(
        trust,
        [KeyKind::Owner, KeyKind::Host],
        |kind, name, key, width| {
            let _ = writeln!(
                out,
                "  {:<5} {name:<width$}  {}",
                kind.trust_keyword(),
                B64.encode(key)
            );
        },
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_align_on_the_longest_name() {
        let trust = TrustFile {
            owners: vec![("alice".into(), [1; 32])],
            hosts: vec![("b".into(), [2; 32])],
        };
        let list = list_text(&trust);
        let lines: Vec<&str> = list.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("host  b      "), "{list}");
        assert!(lines[1].starts_with("owner alice  "), "{list}");
        assert!(lines[1].ends_with(&B64.encode([1; 32])), "{list}");
        assert_eq!(
            check_text(Path::new("/t"), &trust),
            format!(
                "/t: OK, 1 owner, 1 host\n  owner alice  {}\n  host  b      {}\n",
                B64.encode([1; 32]),
                B64.encode([2; 32])
            )
        );
        assert_eq!(list_text(&TrustFile::default()), "");
    }
}
