//! A reader's free batches: taken to read into, handed back by the pipeline's release.
//!
//! A fixed number of batches per reader bounds the memory in flight and gives back-pressure:
//! a reader that finds none free helps the pipeline's workers instead of reading more.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::pipeline::{Pipeline, Work};

/// A pool of reusable batches (see the module documentation).
#[derive(Debug)]
pub struct Pool<T> {
    free: Mutex<Vec<T>>,
    back: Condvar,
}

impl<T> Pool<T> {
    /// A pool holding `items`; more can be added with [`Pool::put`].
    pub fn new(items: Vec<T>) -> Arc<Self> {
        Arc::new(Pool {
            free: Mutex::new(items),
            back: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<T>> {
        // Nothing panics while holding this lock; keep the batches if something did.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands a batch back (from a release, or unused).
    pub fn put(&self, t: T) {
        self.lock().push(t);
        self.back.notify_one();
    }

    /// A free batch; while none is free, runs queued work of `pipe` on this thread, then waits
    /// briefly. `None` once `stopping` says so.
    pub fn take<W: Work>(&self, pipe: &Pipeline<W>, stopping: impl Fn() -> bool) -> Option<T> {
        loop {
            if stopping() {
                return None;
            }
            if let Some(t) = self.lock().pop() {
                return Some(t);
            }
            if pipe.help() {
                continue;
            }
            let g = self.lock();
            if g.is_empty() {
                let _ = self.back.wait_timeout(g, Duration::from_millis(5));
            }
        }
    }
}
