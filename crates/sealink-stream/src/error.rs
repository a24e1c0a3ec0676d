//! Errors of a transfer, worded for the person running it.

use std::path::PathBuf;

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
    #[error("{} already exists (use --force to replace it)", .0.display())]
    Exists(PathBuf),
    #[error("{0}")]
    Usage(String),
    /// A worker thread of the transfer panicked: a bug in sealink, not a mistake of the user.
    #[error("a {0} worker panicked (a bug in sealink)")]
    WorkerPanicked(&'static str),
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
