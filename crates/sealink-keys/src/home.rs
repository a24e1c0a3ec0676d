//! Where keys and the trust file live unless a command names them ([`home`]).

use std::path::PathBuf;

/// The host's private key file in the home directory (its public key is `host.key.pub`).
pub const HOST_KEY: &str = "host.key";
/// The owner's private key file in the home directory.
pub const OWNER_KEY: &str = "owner.key";
/// The trust file in the home directory.
pub const TRUST: &str = "trust";
/// The name `sealink init --host-name` gave this host (one line): what `sealink pair` sends the
/// peer to file this host under, unless `pair --name` says otherwise.
pub const HOST_NAME: &str = "host-name";

/// Where keys and trust live: `$SEALINK_HOME`; else `~/.sealink` if it exists (where sealink kept
/// them before it followed the XDG base directories, so an existing set-up keeps working); else
/// `$XDG_CONFIG_HOME/sealink` (by default `~/.config/sealink`). Without a home directory at all:
/// `./.sealink`.
pub fn home() -> PathBuf {
    if let Some(h) = std::env::var_os("SEALINK_HOME") {
        return PathBuf::from(h);
    }
    let Some(user_home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
        return PathBuf::from(".").join(".sealink");
    };
    let legacy = PathBuf::from(user_home).join(".sealink");
    // `symlink_metadata`: a link named ~/.sealink counts as a set-up the user made.
    if legacy.symlink_metadata().is_ok() {
        return legacy;
    }
    use etcetera::BaseStrategy as _;
    match etcetera::choose_base_strategy() {
        Ok(dirs) => dirs.config_dir().join("sealink"),
        Err(_) => legacy,
    }
}

/// `p` if given, else `file` in [`home`].
pub fn or_home(p: Option<PathBuf>, file: &str) -> PathBuf {
    p.unwrap_or_else(|| home().join(file))
}
