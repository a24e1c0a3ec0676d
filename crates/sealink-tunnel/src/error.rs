//! Errors of the tunnel driver.

/// Why the tunnel could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TunnelError {
    #[error("config: {0}")]
    Toml(String),
    #[error("config key {key}: {msg}")]
    Config { key: String, msg: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// `ip` (iproute2) refused to configure the interface (a route or an address).
    #[error("`{cmd}` failed: {msg}")]
    Netconf { cmd: String, msg: String },
    /// A hook (`pre_up`, `post_up`, ...) failed: `up` stops, naming it.
    #[error("{hook} hook `{cmd}` failed: {status}")]
    Hook {
        hook: &'static str,
        cmd: String,
        status: String,
    },
    #[error("tunnel {0} is already running (its control socket answers)")]
    AlreadyRunning(String),
    #[error("no tunnel named {0} is running")]
    NotRunning(String),
    #[error(transparent)]
    Proto(#[from] sealink_proto::Error),
    #[error(transparent)]
    Insecure(#[from] sealink_keys::InsecureFile),
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> TunnelError {
    let what = what.into();
    move |source| TunnelError::Io { what, source }
}
