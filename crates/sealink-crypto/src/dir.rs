//! [`Dir`]: which way a packet goes through a key. Its own module, so that `suite` (the AEAD
//! keys) and `legacy` (the lab's CBC + HMAC keys) both use it without importing each other.

/// Which way a packet goes through a key. Sealing and opening share their dispatch and their
/// public signatures (`suite`'s `entry_points!`); only the per-suite work differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    Seal,
    Open,
}
