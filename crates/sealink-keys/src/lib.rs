//! Where sealink's keys and trust come from, for every mode (stream, datagram, tunnel) and the
//! `sealink` command:
//!
//! * [`keyfile`]: private and public key files (the one public-key parser, weak-key refusal,
//!   secrets wiped on drop);
//! * [`trust`]: trust files (the one trust-file parser) and the conversion from trust entries to
//!   the protocol's owner [`Directory`](sealink_proto::Directory);
//! * [`error`]: the typed errors of both;
//! * [`check`]: the schema of `sealink trust check --json` ([`TrustCheck`]);
//! * [`home`]: `$SEALINK_HOME` (else `~/.sealink`) and the default file names in it;
//! * [`secure_file`]: the ssh StrictModes-style checks that refuse key, trust and config files
//!   (and run directories) other users could have written.
#![forbid(unsafe_code)]

pub mod check;
pub mod error;
pub mod fingerprint;
pub mod home;
pub mod keyfile;
mod kind;
pub mod secure_file;
pub mod trust;

pub use check::TrustCheck;
pub use error::{KeyFileError, TrustProblem};
pub use fingerprint::fingerprint;
pub use keyfile::{KEY_LEN, KeyKind, PrivateKey, parse_public, read_host_key, read_private};
pub use secure_file::InsecureFile;
pub use trust::{TrustFile, read_trust};
