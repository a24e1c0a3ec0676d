//! Errors of the tunnel driver.

/// Why the tunnel could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TunnelError {
    #[error("config: {0}")]
    Toml(String),
    /// A config value refused: `key` names it (`interface.mtu`), or is `line N` for a line of
    /// a wg-quick file.
    #[error("{}", config_message(key, msg))]
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
    /// The private key's file (a wg-quick file holds it) is readable by group or others.
    #[error(
        "{path}: mode {mode:04o} lets group or others read it, and {} the tunnel's private key: \
         run `chmod 600 {path}` (wg-quick only warns; sealink does not run on a key others can read)",
        if *wg_quick { "as a wg-quick file it holds" } else { "it holds" }
    )]
    KeyTooOpen {
        path: String,
        mode: u32,
        wg_quick: bool,
    },
    #[error("tunnel {0} is already running (its control socket answers)")]
    AlreadyRunning(String),
    #[error("no tunnel named {0} is running")]
    NotRunning(String),
    /// The control socket (or its directory) is not ours to reach: the tunnel may well run.
    #[error(
        "cannot reach tunnel {name}'s control socket {path}: permission denied \
         (run this as root, or as the user that started the tunnel)"
    )]
    ControlDenied { name: String, path: String },
    /// The run directory cannot be listed (to find the running tunnels).
    #[error(
        "cannot list the running tunnels in {path}: permission denied \
         (run this as root, or as the user that started them)"
    )]
    RunDirDenied { path: String },
    #[error(transparent)]
    Proto(#[from] sealink_proto::Error),
    #[error(transparent)]
    Insecure(#[from] sealink_keys::InsecureFile),
}

fn config_message(key: &str, msg: &str) -> String {
    if key.starts_with("line ") {
        format!("{key}: {msg}")
    } else {
        format!("config key {key}: {msg}")
    }
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> TunnelError {
    let what = what.into();
    move |source| TunnelError::Io { what, source }
}
