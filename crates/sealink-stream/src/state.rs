//! The receiver's own files in the directory it receives into, between transfers: resume state
//! kept after a failure, bounded in age, bytes and count (per owner and in total); and what a
//! receiver that crashed left behind (part files, staging directories), cleaned at start-up.
//!
//! Kept state is bounded because each owner may leave some behind at every interrupted
//! transfer: without bounds, a trusted owner could fill the disk with state no one resumes.
//! Within the bounds the newest state is kept first; anything past a bound is deleted (the
//! owner's oldest first, then everyone's oldest). State in use (its part file locked by a live
//! session) is neither counted nor touched.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sealink_proto::stream::resume::{RecordMap, STATE_PREFIX, state_stem};

use crate::files::{PART_SUFFIX, RESUME_MAP, RESUME_PART, is_temp_name, lock_unused, read_map};
use crate::place::STAGING_SUFFIX;

/// Default bound on one owner's kept resume state: bytes on disk (its part files as allocated).
pub const DEFAULT_RESUME_OWNER_BYTES: u64 = 16 << 30;
/// Default bound on one owner's kept resume state: files resumable.
pub const DEFAULT_RESUME_OWNER_FILES: usize = 64;
/// Default bound on all kept resume state in one directory: bytes on disk.
pub const DEFAULT_RESUME_TOTAL_BYTES: u64 = 64 << 30;
/// Default bound on all kept resume state in one directory: files resumable.
pub const DEFAULT_RESUME_TOTAL_FILES: usize = 256;

/// Bounds on the resume state a receiver keeps in its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeLimits {
    pub owner_bytes: u64,
    pub owner_files: usize,
    pub total_bytes: u64,
    pub total_files: usize,
}

impl Default for ResumeLimits {
    fn default() -> Self {
        ResumeLimits {
            owner_bytes: DEFAULT_RESUME_OWNER_BYTES,
            owner_files: DEFAULT_RESUME_OWNER_FILES,
            total_bytes: DEFAULT_RESUME_TOTAL_BYTES,
            total_files: DEFAULT_RESUME_TOTAL_FILES,
        }
    }
}

/// What a clean-up removed or cut.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cleaned {
    /// Resume state files older than the age limit.
    pub expired: usize,
    /// Part files and staging directories a crashed receiver left, older than the age limit.
    pub leftovers: usize,
    /// Resume state that held nothing (a part file without a valid record map, or the
    /// reverse).
    pub orphans: usize,
    /// Part files cut down to what their record map claims.
    pub trimmed: usize,
    /// Resumable files whose state went to keep within [`ResumeLimits`].
    pub evicted: usize,
}

impl Cleaned {
    pub fn total(&self) -> usize {
        self.expired + self.leftovers + self.orphans + self.trimmed + self.evicted
    }
}

fn age(meta: &std::fs::Metadata, now: SystemTime) -> Duration {
    meta.modified()
        .ok()
        .and_then(|m| now.duration_since(m).ok())
        .unwrap_or_default()
}

/// Cleans the receiver's directory when it starts: deletes resume state and leftovers of a
/// crashed receiver (part files, staging directories) not modified for `max_age`; deletes
/// resume state that holds nothing; cuts part files down to what their record map claims (a
/// receiver killed mid-transfer left them at the full announced size); then keeps what is
/// left within `limits`. Entries in use by a live receiver are left alone.
pub fn clean_at_start(
    dir: &Path,
    max_age: Duration,
    limits: &ResumeLimits,
) -> std::io::Result<Cleaned> {
    let now = SystemTime::now();
    let mut c = Cleaned::default();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let state = name.starts_with(STATE_PREFIX);
        let part = is_temp_name(name, PART_SUFFIX);
        let staging = is_temp_name(name, STAGING_SUFFIX);
        if !(state || part || staging) {
            continue;
        }
        let Ok(meta) = e.path().symlink_metadata() else {
            continue;
        };
        if age(&meta, now) < max_age {
            continue;
        }
        let ft = meta.file_type();
        let removed = if staging && ft.is_dir() {
            // Links in it are removed, never followed.
            std::fs::remove_dir_all(e.path()).is_ok()
        } else if ft.is_file() {
            // Held open by a live session: not a leftover. The lock is held while it goes.
            let lock = lock_unused(&e.path());
            lock.is_some() && std::fs::remove_file(e.path()).is_ok()
        } else if part && ft.is_symlink() {
            // A link made beside the one it replaces, left by a crash.
            std::fs::remove_file(e.path()).is_ok()
        } else {
            false
        };
        if removed && state {
            c.expired += 1;
        } else if removed {
            c.leftovers += 1;
        }
    }
    let (orphans, trimmed) = tidy_state(dir)?;
    c.orphans = orphans;
    c.trimmed = trimmed;
    c.evicted = enforce_limits(dir, limits)?;
    Ok(c)
}

/// One resumable file's kept state, locked against live sessions while the handle lives.
struct Kept {
    part: PathBuf,
    map: PathBuf,
    owner: [u8; 32],
    /// Bytes the part file takes on disk (as allocated).
    bytes: u64,
    modified: SystemTime,
    _lock: File,
}

impl Kept {
    fn delete(&self) {
        // The map first: a part file without its map holds nothing and is cleaned later.
        let _ = std::fs::remove_file(&self.map);
        let _ = std::fs::remove_file(&self.part);
    }
}

/// The record map's stem if `name` is one (`.sealink-resume-<32 hex>.map`).
fn map_stem(name: &str) -> Option<&str> {
    name.strip_suffix(RESUME_MAP)
        .filter(|s| s.starts_with(STATE_PREFIX))
}

/// The valid record map at `path`, if it belongs to the state named `stem`.
fn valid_map(path: &Path, stem: &str) -> Option<RecordMap> {
    let m = RecordMap::decode(&read_map(path)?).ok()?;
    (state_stem(&m.owner, &m.name, m.size, m.mtime) == stem).then_some(m)
}

/// Deletes resume state that holds nothing (a part file without a valid map, a map without
/// its part file) and cuts each part file down to what its map claims. Returns (state
/// deleted, part files cut).
fn tidy_state(dir: &Path) -> std::io::Result<(usize, usize)> {
    let (mut orphans, mut trimmed) = (0, 0);
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name
            .strip_suffix(RESUME_PART)
            .filter(|s| s.starts_with(STATE_PREFIX))
        else {
            continue;
        };
        let part = e.path();
        if !part.symlink_metadata().is_ok_and(|m| m.is_file()) {
            continue;
        }
        let Some(lock) = lock_unused(&part) else {
            continue;
        };
        let map = dir.join(format!("{stem}{RESUME_MAP}"));
        match valid_map(&map, stem) {
            Some(m) => {
                let len = lock.metadata().map_or(0, |m| m.len());
                if len > m.held && lock.set_len(m.held).is_ok() {
                    trimmed += 1;
                }
            }
            None => {
                let _ = std::fs::remove_file(&map);
                if std::fs::remove_file(&part).is_ok() {
                    orphans += 1;
                }
            }
        }
    }
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(stem) = name.to_str().and_then(map_stem) else {
            continue;
        };
        if !dir.join(format!("{stem}{RESUME_PART}")).exists()
            && std::fs::remove_file(e.path()).is_ok()
        {
            orphans += 1;
        }
    }
    Ok((orphans, trimmed))
}

/// Keeps the resume state in `dir` within `limits`: newest first, per owner then in total;
/// state past a bound is deleted (so the oldest goes first). State in use is neither counted
/// nor deleted. Returns how many resumable files lost their state.
pub(crate) fn enforce_limits(dir: &Path, limits: &ResumeLimits) -> std::io::Result<usize> {
    use std::os::unix::fs::MetadataExt;
    let mut kept: Vec<Kept> = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(stem) = name.to_str().and_then(map_stem) else {
            continue;
        };
        let part = dir.join(format!("{stem}{RESUME_PART}"));
        let Some(lock) = lock_unused(&part) else {
            continue;
        };
        let Ok(meta) = lock.metadata() else { continue };
        let Some(m) = valid_map(&e.path(), stem) else {
            continue;
        };
        let modified = e
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        kept.push(Kept {
            part,
            map: e.path(),
            owner: m.owner,
            bytes: meta.blocks().saturating_mul(512),
            modified,
            _lock: lock,
        });
    }
    kept.sort_by_key(|k| std::cmp::Reverse(k.modified));
    let mut per_owner: HashMap<[u8; 32], (usize, u64)> = HashMap::new();
    let (mut files, mut bytes) = (0usize, 0u64);
    let mut evicted = 0;
    for k in &kept {
        let o = per_owner.entry(k.owner).or_default();
        let fits = o.0 < limits.owner_files
            && o.1.saturating_add(k.bytes) <= limits.owner_bytes
            && files < limits.total_files
            && bytes.saturating_add(k.bytes) <= limits.total_bytes;
        if fits {
            o.0 += 1;
            o.1 += k.bytes;
            files += 1;
            bytes += k.bytes;
        } else {
            tracing::info!(
                "deleted resume state {} to keep within the limits",
                k.part.display()
            );
            k.delete();
            evicted += 1;
        }
    }
    Ok(evicted)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resume state for `owner`'s file `name` with `held` bytes written, modified `ago` seconds
    /// ago.
    fn state(dir: &Path, owner: u8, name: &str, held: u64, ago: u64) -> PathBuf {
        let (size, mtime) = (held * 2, 1_700_000_000_000_000_000);
        let stem = state_stem(&[owner; 32], name, size, mtime);
        let part = dir.join(format!("{stem}{RESUME_PART}"));
        std::fs::write(&part, vec![7u8; held as usize]).unwrap();
        let map = dir.join(format!("{stem}{RESUME_MAP}"));
        let m = RecordMap {
            owner: [owner; 32],
            name: name.into(),
            size,
            mtime,
            held,
        };
        std::fs::write(&map, m.encode()).unwrap();
        let t = SystemTime::now() - Duration::from_secs(ago);
        for p in [&part, &map] {
            File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        part
    }

    #[test]
    fn limits_keep_the_newest_state_per_owner_and_in_total() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let a: Vec<PathBuf> = (0..4)
            .map(|i| state(d, 1, &format!("a{i}"), 8192, 100 - i))
            .collect();
        let b: Vec<PathBuf> = (0..2)
            .map(|i| state(d, 2, &format!("b{i}"), 8192, 50 - i))
            .collect();
        let limits = ResumeLimits {
            owner_files: 2,
            owner_bytes: u64::MAX,
            total_files: 3,
            total_bytes: u64::MAX,
        };
        // Owner 1 keeps its 2 newest (a3, a2); in total, the 3 newest of what is left stay
        // (b1, b0, a3), so a2 goes too.
        assert_eq!(enforce_limits(d, &limits).unwrap(), 3);
        let left: Vec<bool> = a.iter().chain(&b).map(|p| p.exists()).collect();
        assert_eq!(left, [false, false, false, true, true, true]);
        // Maps went with their part files.
        let maps = std::fs::read_dir(d)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_str()
                    .unwrap()
                    .ends_with(RESUME_MAP)
            })
            .count();
        assert_eq!(maps, 3);
        // Bytes: one file's worth per owner keeps the newest of each.
        let one = std::fs::metadata(&b[1]).unwrap();
        let limits = ResumeLimits {
            owner_bytes: std::os::unix::fs::MetadataExt::blocks(&one) * 512,
            ..ResumeLimits::default()
        };
        assert_eq!(enforce_limits(d, &limits).unwrap(), 1);
        assert!(a[3].exists() && b[1].exists() && !b[0].exists());
    }

    #[test]
    fn state_in_use_is_neither_counted_nor_deleted() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let old = state(d, 1, "old", 4096, 100);
        let new = state(d, 1, "new", 4096, 10);
        let busy = lock_unused(&old).unwrap();
        let limits = ResumeLimits {
            owner_files: 1,
            ..ResumeLimits::default()
        };
        assert_eq!(enforce_limits(d, &limits).unwrap(), 0);
        assert!(old.exists() && new.exists());
        drop(busy);
        assert_eq!(enforce_limits(d, &limits).unwrap(), 1);
        assert!(!old.exists() && new.exists());
    }

    #[test]
    fn start_up_cuts_parts_to_their_maps_and_drops_orphans() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let kept = state(d, 1, "kept", 4096, 10);
        // A crashed receiver left it at the announced size.
        File::options()
            .write(true)
            .open(&kept)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let orphan = d.join(format!("{}{RESUME_PART}", state_stem(&[3; 32], "o", 9, 9)));
        std::fs::write(&orphan, b"nothing claims this").unwrap();
        let young_part = d.join(format!(".{}{PART_SUFFIX}", "ab".repeat(16)));
        std::fs::write(&young_part, b"x").unwrap();
        let c = clean_at_start(d, Duration::from_secs(3600), &ResumeLimits::default()).unwrap();
        assert_eq!((c.trimmed, c.orphans, c.leftovers), (1, 1, 0), "{c:?}");
        assert_eq!(std::fs::metadata(&kept).unwrap().len(), 4096);
        assert!(!orphan.exists() && young_part.exists());
        // Ordinary files are never touched, whatever their age.
        std::fs::write(d.join("mine.sealink-part"), b"user file").unwrap();
        let c = clean_at_start(d, Duration::ZERO, &ResumeLimits::default()).unwrap();
        assert_eq!((c.expired, c.leftovers), (2, 1), "{c:?}");
        assert!(d.join("mine.sealink-part").exists());
    }
}
