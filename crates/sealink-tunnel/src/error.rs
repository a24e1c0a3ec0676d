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
    /// A command run to configure the interface (`resolvconf`) failed.
    #[error("`{cmd}` failed: {msg}")]
    Netconf { cmd: String, msg: String },
    /// The kernel refused an rtnetlink request (`rtnl.rs`): `op` names it ("add route
    /// 10.0.0.0/24 dev sl0"), `msg` is the errno's text and the kernel's own message.
    #[error("{op}: {msg}")]
    Rtnl { op: String, errno: i32, msg: String },
    /// A full tunnel's record of its rules (`RUN_DIR/net-INODE/NAME.policy`) does not parse.
    #[error("{path} line {line}: {msg}")]
    PolicyRecord {
        path: String,
        line: usize,
        msg: String,
    },
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
