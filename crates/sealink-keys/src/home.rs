//! `$SEALINK_HOME`: where keys and the trust file live unless a command names them.

use std::path::PathBuf;

/// The host's private key file in the home directory (its public key is `host.key.pub`).
pub const HOST_KEY: &str = "host.key";
/// The owner's private key file in the home directory.
pub const OWNER_KEY: &str = "owner.key";
/// The trust file in the home directory.
pub const TRUST: &str = "trust";

/// `$SEALINK_HOME`, else `~/.sealink` (`./.sealink` without `$HOME`).
pub fn home() -> PathBuf {
    if let Some(h) = std::env::var_os("SEALINK_HOME") {
        return PathBuf::from(h);
    }
    std::env::var_os("HOME")
        .map_or_else(|| PathBuf::from("."), PathBuf::from)
        .join(".sealink")
}

/// `p` if given, else `file` in [`home`].
pub fn or_home(p: Option<PathBuf>, file: &str) -> PathBuf {
    p.unwrap_or_else(|| home().join(file))
}
