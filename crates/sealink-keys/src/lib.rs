//! Where sealink's keys and trust come from, for every mode (stream, datagram, tunnel) and the
//! `sealink` command:
//!
//! * [`keyfile`]: private and public key files (the one public-key parser, weak-key refusal,
//!   secrets wiped on drop);
//! * [`trust`]: trust files (the one trust-file parser) and the conversion from trust entries to
//!   the protocol's owner [`Directory`](sealink_proto::Directory);
//! * [`error`]: the typed errors of both;
//! * [`Identity`]: where one side's host key, owner key and trust file are, and reading them;
//! * [`detect`]: key files and key arguments of either kind, told apart by their tags;
//! * [`listing`]: a trust file as `sealink trust list` and `trust check` print it;
//! * [`check`]: the schema of `sealink trust check --json` ([`TrustCheck`]);
//! * [`pair`]: the pairing exchange of `sealink pair` (its code, frames and keys) over any
//!   byte stream;
//! * [`home`]: `$SEALINK_HOME` (else `~/.sealink`) and the default file names in it;
//! * [`secure_file`]: the ssh StrictModes-style checks that refuse key, trust and config files
//!   (and run directories) other users could have written.
#![forbid(unsafe_code)]

pub mod check;
pub mod detect;
pub mod error;
pub mod fingerprint;
pub mod home;
mod identity;
pub mod keyfile;
mod kind;
pub mod listing;
pub mod pair;
pub mod secure_file;
pub mod trust;

pub use check::TrustCheck;
pub use error::{KeyFileError, TrustProblem};
pub use fingerprint::fingerprint;
pub use identity::Identity;
pub use keyfile::{KEY_LEN, KeyKind, PrivateKey, parse_public, read_host_key, read_private};
pub use secure_file::InsecureFile;
pub use trust::{PickHostError, TrustFile, read_trust};
