//! The receiver's trust, read again when its file changes: a `trust add` (or `trust remove`)
//! takes effect at the next connection, as sshd reads `authorized_keys` for each one (issue
//! 46: a running `recv` kept the lists it started with until it was restarted).
//!
//! Each connection asks for the current lists; the file's modification time, size and inode
//! are compared with those of the last read, so an unchanged file costs one `stat`. A file
//! that no longer parses (or cannot be read) keeps the lists read before, with a warning once
//! per change: a half-written edit never empties the trust of a running receiver.

use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Trusted hosts and owners: name and public key each.
#[derive(Debug, Default)]
pub(crate) struct Lists {
    pub hosts: Vec<(String, [u8; 32])>,
    pub owners: Vec<(String, [u8; 32])>,
}

#[derive(Debug)]
pub(crate) struct LiveTrust {
    /// The trust file to follow; `None`: the lists are fixed.
    path: Option<PathBuf>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// (modification time, size, inode) of the file when last read.
    stamp: Option<(SystemTime, u64, u64)>,
    lists: Arc<Lists>,
}

impl LiveTrust {
    /// The lists the receiver started with, read from `path` (when given) at that time.
    pub(crate) fn new(path: Option<PathBuf>, lists: Lists) -> Self {
        let stamp = path.as_ref().and_then(|p| stamp(p));
        LiveTrust {
            path,
            state: Mutex::new(State {
                stamp,
                lists: Arc::new(lists),
            }),
        }
    }

    /// The lists now: read again if the file changed since the last read.
    pub(crate) fn current(&self) -> Arc<Lists> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(path) = &self.path else {
            return st.lists.clone();
        };
        let now = stamp(path);
        if now == st.stamp {
            return st.lists.clone();
        }
        st.stamp = now;
        match sealink_keys::read_trust(path) {
            Ok(t) => {
                tracing::info!(
                    "{} changed: now trusting {} hosts and {} owners",
                    path.display(),
                    t.hosts.len(),
                    t.owners.len()
                );
                st.lists = Arc::new(Lists {
                    hosts: t.hosts,
                    owners: t.owners,
                });
            }
            Err(e) => tracing::warn!(
                "{} changed but cannot be used ({e}): keeping the trust read before",
                path.display()
            ),
        }
        st.lists.clone()
    }
}

fn stamp(path: &std::path::Path) -> Option<(SystemTime, u64, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}
