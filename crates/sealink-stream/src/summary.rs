//! The human lines of a transfer, as `sealink send` and `sealink recv` print them: the summary
//! line (sizes and rates in binary units, KiB, MiB, ...; the rate in Gbit/s too), what the
//! receiver already held, the tree's directories and links, and `--dry-run`'s listing. Exact
//! figures are in the `--json` records ([`report`](crate::report)).

use std::time::Duration;

use indicatif::{HumanBytes, HumanDuration};
use sealink_proto::stream::FileEntry;
use sealink_proto::stream::body::EntryKind;

use crate::{RecvReport, SendReport};

/// `sent 3.00 MiB in 2 files over 1 stream in 0.50 s (6.00 MiB/s, 0.05 Gbit/s)`.
pub fn transfer_line(
    verb: &str,
    bytes: u64,
    files: usize,
    streams: usize,
    elapsed: Duration,
) -> String {
    let secs = elapsed.as_secs_f64();
    let per_sec = bytes as f64 / secs.max(1e-9);
    let took = if elapsed >= Duration::from_secs(60) {
        format!("{secs:.0} s ({})", HumanDuration(elapsed))
    } else {
        format!("{secs:.2} s")
    };
    // The bit rate only where it says something: "0.00 Gbit/s" after a small file did not.
    let gbits = per_sec * 8.0 / 1e9;
    let rate = if gbits >= 0.01 {
        format!("{}/s, {gbits:.2} Gbit/s", HumanBytes(per_sec as u64))
    } else {
        format!("{}/s", HumanBytes(per_sec as u64))
    };
    format!(
        "{verb} {} in {files} file{} over {streams} stream{} in {took} ({rate})",
        HumanBytes(bytes),
        if files == 1 { "" } else { "s" },
        if streams == 1 { "" } else { "s" },
    )
}

/// `; X held from an interrupted transfer, not sent again; N files up to date (Y), not sent`:
/// what the receiver had already, apart from what travelled.
pub fn held_note(resumed: u64, up_to_date_files: usize, up_to_date_bytes: u64) -> String {
    let mut parts = Vec::new();
    if resumed > 0 {
        parts.push(format!(
            "{} held from an interrupted transfer, not sent again",
            HumanBytes(resumed)
        ));
    }
    if up_to_date_files > 0 {
        parts.push(format!(
            "{up_to_date_files} file{} up to date ({}), not sent",
            if up_to_date_files == 1 { "" } else { "s" },
            HumanBytes(up_to_date_bytes)
        ));
    }
    parts.iter().map(|p| format!("; {p}")).collect()
}

/// What a report counts, for its summary line (the reports list entries only for `--json`).
struct Counts {
    bytes: u64,
    entries: u64,
    dirs: u64,
    links: u64,
    resumed: u64,
    up_to_date: (u64, u64),
    streams: usize,
    elapsed: Duration,
}

impl Counts {
    /// The summary line, `middle` after the counts and before what was held.
    fn line(&self, verb: &str, middle: &str) -> String {
        let (files_held, bytes_held) = self.up_to_date;
        let sent = self.bytes.saturating_sub(self.resumed + bytes_held);
        let files = self
            .entries
            .saturating_sub(self.dirs + self.links + files_held);
        transfer_line(verb, sent, files as usize, self.streams, self.elapsed)
            + middle
            + &held_note(self.resumed, files_held as usize, bytes_held)
    }
}

/// The [`Counts`] of a `SendReport` or a `RecvReport` (the same fields, but for how each
/// counts its entries).
macro_rules! counts {
    ($rep:expr, $entries:expr) => {
        Counts {
            bytes: $rep.bytes,
            entries: $entries,
            dirs: $rep.dirs,
            links: $rep.links,
            resumed: $rep.resumed_bytes,
            up_to_date: ($rep.up_to_date_files, $rep.up_to_date_bytes),
            streams: $rep.streams,
            elapsed: $rep.elapsed,
        }
    };
}

/// ` (2 directories, 1 link; ...)` for what is not a plain file.
pub fn tree_note(dirs: u64, links: u64, special: u64, excluded: u64) -> String {
    let count = |n: u64, one: &str, many: &str| match n {
        0 => None,
        1 => Some(format!("1 {one}")),
        n => Some(format!("{n} {many}")),
    };
    let parts: Vec<String> = [
        count(dirs, "directory", "directories"),
        count(links, "link", "links"),
        count(special, "special file skipped", "special files skipped"),
        count(excluded, "entry excluded", "entries excluded"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// The sender's summary line.
pub fn sent_line(rep: &SendReport) -> String {
    let tree = tree_note(rep.dirs, rep.links, rep.special.len() as u64, rep.excluded);
    counts!(rep, rep.files as u64).line("sent", &tree)
}

/// The receiver's summary line for one transfer: the counts, what was deleted, and who sent it
/// (the owner key's fingerprint, as the sender printed it).
pub fn received_line(rep: &RecvReport) -> String {
    let deleted = if rep.deleted > 0 {
        format!(", {} deleted", rep.deleted)
    } else {
        String::new()
    };
    let middle = tree_note(rep.dirs, rep.links, 0, 0)
        + &deleted
        + &format!(
            " from {} (host {}, owner {}, owner key {})",
            rep.peer,
            rep.host,
            rep.owner,
            sealink_keys::fingerprint(&rep.owner_key)
        );
    counts!(rep, rep.entries).line("received", &middle)
}

/// The warning after a send that skipped `n` links (absolute, or leading out of their tree).
pub fn skipped_links_line(n: usize) -> String {
    let one = n == 1;
    format!(
        "skipped {n} link{} that {} absolute or {} out of {} tree (--copy-links sends what they point to)",
        if one { "" } else { "s" },
        if one { "is" } else { "are" },
        if one { "leads" } else { "lead" },
        if one { "its" } else { "their" },
    )
}

/// `--dry-run`'s listing, an entry at a time, and its closing line.
#[derive(Debug, Default)]
pub struct DryRun {
    /// Entries listed.
    pub entries: u64,
    /// Bytes of the files listed whose size is known.
    pub bytes: u64,
}

impl DryRun {
    /// The line of entry `e` (`file        1234 dir/name`, or a JSON object with `json`),
    /// counted.
    pub fn line(&mut self, e: &FileEntry, json: bool) -> String {
        self.entries += 1;
        let (kind, size) = match &e.kind {
            EntryKind::File => ("file", e.size),
            EntryKind::Dir => ("dir", 0),
            EntryKind::Symlink(_) => ("link", 0),
        };
        if e.size != u64::MAX {
            self.bytes += size;
        }
        if json {
            serde_json::json!({"dry_run": true, "name": e.name, "kind": kind, "bytes": size})
                .to_string()
                + "\n"
        } else {
            format!("{kind:4} {size:>12} {}\n", e.name)
        }
    }

    /// The closing line of a listing without `--json`.
    pub fn total_line(&self) -> String {
        format!(
            "dry run: would send {} entries ({}); nothing was sent\n",
            self.entries,
            HumanBytes(self.bytes)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_use_binary_units() {
        let s = transfer_line("sent", 3 << 20, 2, 1, Duration::from_millis(500));
        assert_eq!(
            s,
            "sent 3.00 MiB in 2 files over 1 stream in 0.50 s (6.00 MiB/s, 0.05 Gbit/s)"
        );
        let s = transfer_line("received", 5, 1, 4, Duration::from_secs(150));
        assert_eq!(
            s,
            "received 5 B in 1 file over 4 streams in 150 s (3 minutes) (0 B/s)"
        );
    }

    #[test]
    fn held_notes_say_what_did_not_travel() {
        assert_eq!(held_note(0, 0, 0), "");
        assert_eq!(
            held_note(1 << 20, 0, 0),
            "; 1.00 MiB held from an interrupted transfer, not sent again"
        );
        assert_eq!(
            held_note(1 << 20, 2, 12),
            "; 1.00 MiB held from an interrupted transfer, not sent again; 2 files up to date \
             (12 B), not sent"
        );
    }

    #[test]
    fn counts_leave_out_what_was_held_and_what_is_no_file() {
        let c = Counts {
            bytes: 3 << 20,
            entries: 6,
            dirs: 1,
            links: 1,
            resumed: 1 << 20,
            up_to_date: (1, 1 << 20),
            streams: 1,
            elapsed: Duration::from_secs(1),
        };
        assert_eq!(
            c.line("sent", &tree_note(1, 1, 0, 2)),
            "sent 1.00 MiB in 3 files over 1 stream in 1.00 s (1.00 MiB/s) (1 directory, 1 link, \
             2 entries excluded); 1.00 MiB held from an interrupted transfer, not sent again; 1 \
             file up to date (1.00 MiB), not sent"
        );
        assert_eq!(tree_note(0, 0, 0, 0), "");
        assert_eq!(
            tree_note(2, 0, 1, 1),
            " (2 directories, 1 special file skipped, 1 entry excluded)"
        );
    }

    #[test]
    fn skipped_links_agree_in_number() {
        assert_eq!(
            skipped_links_line(1),
            "skipped 1 link that is absolute or leads out of its tree (--copy-links sends what \
             they point to)"
        );
        assert_eq!(
            skipped_links_line(2),
            "skipped 2 links that are absolute or lead out of their tree (--copy-links sends \
             what they point to)"
        );
    }
}
