//! Errors of a transfer, worded for the person running it.

use sealink_proto::stream::StreamError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransferError {
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Protocol(#[from] StreamError),
    #[error("the receiver refused the transfer: {0}")]
    Refused(String),
    #[error("the receiver aborted the transfer: {0}")]
    ReceiverAborted(String),
    #[error("the sender aborted the transfer: {0}")]
    SenderAborted(String),
    #[error("the peer closed the connection {0}")]
    PeerClosed(String),
    /// The peer made no progress for longer than a timeout (it stalled, or the route did).
    #[error("timed out: {0}")]
    TimedOut(String),
    /// An entry's place is taken at the receiver. `name` is relative to the receiving
    /// directory (this error travels to the sender, who has no business knowing the receiver's
    /// paths); `hint` says who can do what about it.
    #[error("{name} already exists at the receiver ({hint})")]
    Exists { name: String, hint: ExistsHint },
    #[error("{0}")]
    Usage(String),
    /// A worker thread of the transfer panicked: a bug in sealink, not a mistake of the user.
    #[error("a {0} worker panicked (a bug in sealink)")]
    WorkerPanicked(&'static str),
}

/// What would let a transfer through when an entry's place is taken at the receiver, and on
/// which side (`send` has no `--force`; only the receiver can consent to changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExistsHint {
    /// A file or link the sender did not ask to update.
    Replace,
    /// A directory the sender did not ask to update.
    Merge,
    /// The sender asked to update, the receiver has not agreed to take updates.
    NoConsent,
    /// Another kind of entry (a directory for a file, a file for a directory, ...).
    OtherKind,
    /// A directory where the sender has a file or link: never replaced.
    Directory,
    /// A file or link where the sender has a directory: never replaced by one.
    NotDirectory,
}

impl std::fmt::Display for ExistsHint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ExistsHint::Replace => {
                "the sender can send it under another name, or the receiver can allow \
                 replacing with `sealink recv --force`"
            }
            ExistsHint::Merge => {
                "the sender can merge into it with `sealink send --update` if the receiver \
                 runs `sealink recv --update` (or `--force`)"
            }
            ExistsHint::NoConsent => {
                "the receiver takes no updates: it must run `sealink recv --update` (or \
                 `--force`) to let senders add to and update what it has"
            }
            ExistsHint::OtherKind => {
                "it is of another kind there: only `sealink recv --force` replaces it"
            }
            ExistsHint::Directory => {
                "it is a directory there, which is never replaced: the receiver must move it \
                 away"
            }
            ExistsHint::NotDirectory => {
                "it is not a directory there, and a directory never replaces it: the receiver \
                 must move it away"
            }
        })
    }
}

/// A worker's result once joined: its own, or [`TransferError::WorkerPanicked`] if it panicked.
pub(crate) fn joined(
    r: std::thread::Result<Result<(), TransferError>>,
    role: &'static str,
) -> Result<(), TransferError> {
    r.unwrap_or(Err(TransferError::WorkerPanicked(role)))
}

/// Whether a socket error is a receive or send timeout expiring (`SO_RCVTIMEO`/`SO_SNDTIMEO`).
pub(crate) fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

pub(crate) trait IoContext<T> {
    fn ctx(self, f: impl FnOnce() -> String) -> Result<T, TransferError>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, f: impl FnOnce() -> String) -> Result<T, TransferError> {
        self.map_err(|source| TransferError::Io {
            context: f(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicked_worker_is_its_own_error() {
        let r = std::thread::spawn(|| -> Result<(), TransferError> { panic!("worker bug") }).join();
        let e = joined(r, "send").unwrap_err();
        assert!(matches!(e, TransferError::WorkerPanicked("send")), "{e:?}");
        assert_eq!(e.to_string(), "a send worker panicked (a bug in sealink)");
        // A worker's own error passes through.
        let r = std::thread::spawn(|| Err(TransferError::TimedOut("x".into()))).join();
        assert!(matches!(joined(r, "send"), Err(TransferError::TimedOut(_))));
    }
}
