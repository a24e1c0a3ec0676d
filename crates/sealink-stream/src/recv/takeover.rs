//! A newer session of the same owner taking over from a stalled one.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::auth::{Checked, Refusal};
use super::lock;
use crate::conn::secs;
use crate::error::TransferError;
use crate::files::PartFile;

/// How long a session waits for an older session of the same owner, which it asked to stop, to
/// let go of the resume state of a file both send.
const TAKEOVER_WAIT: Duration = Duration::from_secs(5);

/// A session's stop switch. A sender whose host vanished (no FIN, no RST) leaves its session
/// holding its files' resume state until the idle timeout; the same owner's next session for
/// one of those files asks it to stop instead of waiting. Stopping shuts its connections down:
/// its workers end, it records what it holds and closes its files (letting go of their locks),
/// as after any failure. A session already verifying or storing its files is not interrupted.
#[derive(Debug, Default)]
pub(super) struct Stop {
    requested: AtomicBool,
    /// The file the newer session asked for.
    by: Mutex<Option<String>>,
    /// Clones of the session's connections, shut down when it is asked to stop.
    socks: Mutex<Vec<TcpStream>>,
}

impl Stop {
    /// Shuts `s` down when the session is asked to stop (at once if it already was).
    pub(super) fn watch(&self, s: &TcpStream) {
        let mut socks = lock(&self.socks);
        if self.requested() {
            let _ = s.shutdown(Shutdown::Both);
        } else if let Ok(c) = s.try_clone() {
            socks.push(c);
        }
    }

    pub(super) fn request(&self, name: &str) {
        let mut socks = lock(&self.socks);
        if !self.requested.swap(true, Ordering::SeqCst) {
            *lock(&self.by) = Some(name.to_owned());
        }
        for s in socks.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    pub(super) fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// What a session that was asked to stop reports.
    pub(super) fn superseded(&self) -> TransferError {
        TransferError::Superseded(lock(&self.by).clone().unwrap_or_default())
    }
}

/// Which session holds each resume state in use (by its part file's path), to ask it to stop.
pub(super) type Holders = HashMap<PathBuf, Arc<Stop>>;

/// The entries of [`Holders`] one session made; removed when it is dropped (after the
/// session's files are closed), unless a newer session has taken them over since.
pub(super) struct Holding<'a> {
    pub(super) holders: &'a Mutex<Holders>,
    pub(super) stop: Arc<Stop>,
    pub(super) keys: Vec<PathBuf>,
}

impl Holding<'_> {
    /// Forgets the oldest `n` entries (a stored batch's files, whose state is gone): what a
    /// session holds stays bounded by the batches in flight, whatever the number of files.
    pub(super) fn forget_oldest(&mut self, n: usize) {
        let mut h = lock(self.holders);
        for k in self.keys.drain(..n.min(self.keys.len())) {
            if h.get(&k).is_some_and(|s| Arc::ptr_eq(s, &self.stop)) {
                h.remove(&k);
            }
        }
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        let mut h = lock(self.holders);
        for k in &self.keys {
            if h.get(k).is_some_and(|s| Arc::ptr_eq(s, &self.stop)) {
                h.remove(k);
            }
        }
    }
}

/// Opens the resume state of the owner's file `f` in `dir` for the session of `holding`. If
/// another session of this receiver holds it, that session is of the same owner (the state's
/// name hashes the owner's key, which the hello's signature proved): it is asked to stop, and
/// the state is taken once it has let go (the lock on the part file passes from one to the
/// other, so the two never write it at once).
pub(super) fn open_taking_over(
    dir: &std::path::Path,
    owner: &[u8; 32],
    f: &sealink_proto::stream::body::FileEntry,
    fresh: bool,
    holding: &mut Holding<'_>,
) -> std::io::Result<(PartFile, u64)> {
    let key = dir.join(sealink_proto::stream::resume::state_stem(
        owner, &f.name, f.size, f.mtime,
    ));
    let start = Instant::now();
    loop {
        if holding.stop.requested() {
            return Err(std::io::Error::other("asked to stop"));
        }
        let e = match PartFile::open_resumable(dir, owner, &f.name, f.size, f.mtime, fresh) {
            Ok(x) => {
                lock(holding.holders).insert(key.clone(), holding.stop.clone());
                holding.keys.push(key);
                return Ok(x);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => e,
            Err(e) => return Err(e),
        };
        let holder = lock(holding.holders).get(&key).cloned();
        match holder {
            Some(h) if !Arc::ptr_eq(&h, &holding.stop) => {
                if start.elapsed() >= TAKEOVER_WAIT {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!(
                            "{e}, and has not stopped within {} of being asked to (it may be \
                             storing its files): try again shortly",
                            secs(TAKEOVER_WAIT)
                        ),
                    ));
                }
                h.request(&f.name);
            }
            // A session registers just after taking the lock: a moment's grace.
            None if start.elapsed() < Duration::from_millis(200) => {}
            _ => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!(
                        "{e} (held by another receiver on this directory, which lets go once \
                         its sender has sent nothing for its idle timeout)"
                    ),
                ));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Who holds a `--once` receiver's one transfer.
pub(super) struct OnceSlot {
    owner: [u8; 32],
    names: Vec<String>,
}

impl OnceSlot {
    /// From a checked hello; a refused one takes the slot for no one (when no transfer is held,
    /// a refused session is the receiver's outcome, as it always was).
    fn of(checked: Option<&Checked>) -> OnceSlot {
        match checked {
            Some(c) => OnceSlot {
                owner: c.hello.owner_public,
                names: c.hello.files.iter().map(|f| f.name.clone()).collect(),
            },
            None => OnceSlot {
                owner: [0; 32],
                names: Vec::new(),
            },
        }
    }

    /// Whether a `--once` receiver turns away the session of `checked`: not if `slot` is free
    /// (the session takes it), nor if the session may take it over (then it holds it).
    pub(super) fn turns_away(
        slot: &Mutex<Option<OnceSlot>>,
        checked: &Result<Checked, Refusal>,
        peer: SocketAddr,
    ) -> bool {
        let mut slot = lock(slot);
        match &*slot {
            None => {
                *slot = Some(OnceSlot::of(checked.as_ref().ok()));
                false
            }
            Some(held) => match checked {
                Ok(c) if held.taken_over_by(c) => {
                    tracing::info!(
                        "{peer}: a newer session of the owner holding the one transfer \
                         (its signature verified), sending the same files: it may take over"
                    );
                    *slot = Some(OnceSlot::of(Some(c)));
                    false
                }
                _ => true,
            },
        }
    }

    /// Whether the session of `new` may take over from this slot's session: the same owner
    /// (whose signature `new` has proven, and whom this receiver trusts) sending one of the
    /// same files.
    fn taken_over_by(&self, new: &Checked) -> bool {
        self.owner != [0; 32]
            && new.hello.owner_public == self.owner
            && new.hello.files.iter().any(|f| self.names.contains(&f.name))
    }
}

#[cfg(test)]
mod tests {
    use std::io::IoSlice;

    use sealink_proto::stream::body::EntryKind;

    use super::*;
    use crate::files::write_all_at;

    #[test]
    fn only_the_same_owner_takes_over_held_state_and_only_once_it_is_let_go() {
        use sealink_proto::stream::body::FileEntry;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let holders = Mutex::new(Holders::new());
        let holding = |stop: &Arc<Stop>| Holding {
            holders: &holders,
            stop: stop.clone(),
            keys: Vec::new(),
        };
        let f = FileEntry {
            name: "f".into(),
            size: 1 << 20,
            mtime: 1_700_000_000_000_000_000,
            mode: 0o644,
            kind: EntryKind::File,
        };
        let old_stop = Arc::new(Stop::default());
        let mut old = holding(&old_stop);
        let (part, held) = open_taking_over(dir, &[1; 32], &f, false, &mut old).unwrap();
        assert_eq!(held, 0);
        write_all_at(&part.file, &mut [IoSlice::new(&[7u8; 4096])], 0).unwrap();
        part.checkpoint(4096).unwrap();

        // Another owner's session for a file of the same name: its own state; the old session
        // is not disturbed.
        let other_stop = Arc::new(Stop::default());
        let mut other = holding(&other_stop);
        let (theirs, held) = open_taking_over(dir, &[2; 32], &f, false, &mut other).unwrap();
        assert_eq!(held, 0);
        assert!(!old_stop.requested());
        drop(theirs);

        // The same owner again: the old session is asked to stop, and the new one gets the
        // state only after the old one has let go of it.
        let let_go = AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                while !old_stop.requested() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                std::thread::sleep(Duration::from_millis(200));
                let_go.store(true, Ordering::SeqCst);
                part.release();
                drop(part);
                drop(old);
            });
            let new_stop = Arc::new(Stop::default());
            let mut new = holding(&new_stop);
            let (_p, held) = open_taking_over(dir, &[1; 32], &f, false, &mut new).unwrap();
            assert!(
                let_go.load(Ordering::SeqCst),
                "opened while the old session held it"
            );
            assert_eq!(held, 4096);
            assert!(matches!(old_stop.superseded(), TransferError::Superseded(n) if n == "f"));
            let key = dir.join(sealink_proto::stream::resume::state_stem(
                &[1; 32], "f", f.size, f.mtime,
            ));
            assert!(Arc::ptr_eq(&lock(&holders)[&key], &new_stop));
        });
    }
}
