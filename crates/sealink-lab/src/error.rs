//! The lab's error: what failed (a file, the parameters, a bench run), with the error that
//! stopped it as its `source()`; and the one-line rendering of an error chain that the
//! `sealink-lab` binary prints after "error: ".

use std::error::Error as StdError;
use std::io;
use std::path::PathBuf;

use sealink_crypto::CryptoError;

/// The underlying error of a failed run: any library error.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;
/// Result with the lab's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a bench stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory the lab reads, writes, creates or runs.
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Writing results to standard output failed (a closed pipe is not an error).
    #[error("cannot write to standard output")]
    Stdout(#[source] io::Error),
    /// Parameters the command does not accept.
    #[error("{0}")]
    Usage(String),
    /// The system random generator failed.
    #[error("the system random generator failed")]
    Random(#[source] CryptoError),
    /// A bench could not measure: what it was doing, and what stopped it.
    #[error("{what}")]
    Bench {
        what: String,
        #[source]
        source: Option<BoxError>,
    },
    /// A library call failed where the library's own message says enough.
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    #[error(transparent)]
    Proto(#[from] sealink_proto::Error),
    #[error(transparent)]
    Node(#[from] sealink_datagram::NodeError),
    /// A paper's projection method refused its inputs.
    #[error(transparent)]
    Projection(#[from] crate::projection::ProjectionError),
}

impl Error {
    /// An I/O failure on `path`: "cannot {action} {path}".
    pub fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    }

    /// A bench failure with nothing underneath.
    pub fn bench(what: impl Into<String>) -> Self {
        Error::Bench {
            what: what.into(),
            source: None,
        }
    }

    /// A bench failure caused by `source`.
    pub fn bench_by(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Bench {
            what: what.into(),
            source: Some(source.into()),
        }
    }
}

/// The error and its causes on one line: `outer: cause: root cause` (sealink-crypto's, the one
/// helper for every binary).
pub use sealink_crypto::error::chain;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_names_the_file_and_its_cause_once() {
        let gone = io::Error::new(io::ErrorKind::NotFound, "gone");
        let e = Error::io("write", "/x/socket.csv")(gone);
        assert_eq!(chain(&e), "cannot write /x/socket.csv: gone");
        // A nested bench context keeps every level; a cause already in the message is not
        // repeated.
        let e = Error::bench_by("socket path, 4 KiB records", e);
        assert_eq!(
            chain(&e),
            "socket path, 4 KiB records: cannot write /x/socket.csv: gone"
        );
        let e = Error::bench_by("failed: gone", io::Error::other("gone"));
        assert_eq!(chain(&e), "failed: gone");
        assert_eq!(chain(&Error::Usage("plain".into())), "plain");
    }
}
