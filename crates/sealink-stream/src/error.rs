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
    /// The kernel gave up on the connection (ETIMEDOUT: its retransmissions or keepalives went
    /// unanswered), so the peer's host or the route to it is gone. Not one of our own timers:
    /// it can come long before them, or after, so it says nothing of how long the peer idled.
    /// `0` says what was under way.
    #[error("{0}: the connection timed out (no answer from the peer's host)")]
    ConnectionTimedOut(String),
    /// A newer session of the same owner sent a file whose resume state this session held, and
    /// took it over: this session's sender had most likely vanished without closing.
    #[error("a newer transfer of {0} from the same owner took over")]
    Superseded(String),
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
                "the receiver can allow replacing it with `sealink recv --force`, or move it \
                 away; the sender can send standard input under another name with `--as NAME`"
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

/// Whether a socket error is one of our own timers expiring: a receive or send timeout
/// (`SO_RCVTIMEO`/`SO_SNDTIMEO`, which Linux reports as EAGAIN), or a deadline of ours (the
/// `TimedOut` errors made here and by std's `connect_timeout` carry no OS error code). The
/// kernel's own ETIMEDOUT is not ours: see [`is_connection_timeout`].
pub(crate) fn is_timeout(e: &std::io::Error) -> bool {
    match e.kind() {
        std::io::ErrorKind::WouldBlock => true,
        std::io::ErrorKind::TimedOut => e.raw_os_error().is_none(),
        _ => false,
    }
}

/// Whether the kernel gave up on the connection: ETIMEDOUT from a socket operation (TCP
/// retransmissions, keepalives or `TCP_USER_TIMEOUT` unanswered).
pub(crate) fn is_connection_timeout(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::TimedOut && e.raw_os_error().is_some()
}

/// A failed socket operation (`doing`, such as "sending data") as a transfer error: one of our
/// own timers expiring is [`TransferError::TimedOut`] with `own`'s words, the kernel's
/// ETIMEDOUT is [`TransferError::ConnectionTimedOut`], anything else is an I/O error.
pub(crate) fn socket_error(
    e: std::io::Error,
    doing: &str,
    own: impl FnOnce() -> String,
) -> TransferError {
    if is_timeout(&e) {
        TransferError::TimedOut(own())
    } else if is_connection_timeout(&e) {
        TransferError::ConnectionTimedOut(doing.to_owned())
    } else {
        TransferError::Io {
            context: doing.to_owned(),
            source: e,
        }
    }
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

/// Whether `e`, or any of its causes, is a transfer cut short (the connection reset, closed or
/// broken, or the peer gone quiet): one that the same command, run again, resumes.
pub fn is_resumable_cut(e: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind::*;
    std::iter::successors(Some(e), |c| c.source()).any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | TimedOut
            )
        }) || c.downcast_ref::<TransferError>().is_some_and(|t| {
            // The receiver went away or stopped answering; an `Io` error's kind is matched
            // above through the chain.
            matches!(
                t,
                TransferError::PeerClosed(_)
                    | TransferError::TimedOut(_)
                    | TransferError::ConnectionTimedOut(_)
            )
        })
    })
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

    #[test]
    fn the_kernels_connection_timeout_is_not_ours() {
        use std::io::{Error, ErrorKind};
        let kernel = || Error::from_raw_os_error(rustix::io::Errno::TIMEDOUT.raw_os_error());
        assert_eq!(kernel().kind(), ErrorKind::TimedOut);
        // Ours: a socket timeout (EAGAIN), a deadline made here.
        for own in [
            Error::from_raw_os_error(rustix::io::Errno::AGAIN.raw_os_error()),
            ErrorKind::TimedOut.into(),
        ] {
            assert!(is_timeout(&own) && !is_connection_timeout(&own), "{own:?}");
            let e = socket_error(own, "sending data", || "the receiver took no data".into());
            assert_eq!(e.to_string(), "timed out: the receiver took no data");
        }
        // The kernel's: reported as such, never as one of our timers.
        assert!(!is_timeout(&kernel()) && is_connection_timeout(&kernel()));
        let e = socket_error(kernel(), "sending data", || unreachable!());
        assert!(matches!(e, TransferError::ConnectionTimedOut(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "sending data: the connection timed out (no answer from the peer's host)"
        );
        let reset = Error::from_raw_os_error(rustix::io::Errno::CONNRESET.raw_os_error());
        assert!(matches!(
            socket_error(reset, "x", || unreachable!()),
            TransferError::Io { .. }
        ));
    }

    #[test]
    fn cuts_are_found_among_the_causes() {
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(is_resumable_cut(&reset));
        assert!(is_resumable_cut(&TransferError::PeerClosed("x".into())));
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(!is_resumable_cut(&denied));
        // Through a wrapper's source, as an anyhow context holds it.
        #[derive(Debug, thiserror::Error)]
        #[error("sending failed")]
        struct Outer(#[source] TransferError);
        assert!(is_resumable_cut(&Outer(TransferError::TimedOut(
            "y".into()
        ))));
    }
}
