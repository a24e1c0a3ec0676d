//! How the `sealink` binary reports a failure: one `error:` line with the error's chain of
//! causes (anyhow's chain, a cause already in the message not repeated), and exit status 2 for
//! a usage error, 1 for any other.

/// Parameters a command refuses after clap has parsed them: exit status 2, like clap's own
/// usage errors. Return it as the outermost error (`Err(UsageError(..).into())`), so that `main`
/// finds it with `downcast_ref`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The error and its causes on one line: `outer: cause: root cause` (sealink-crypto's, the one
/// helper for every binary).
pub use sealink_crypto::error::chain;

/// Whether `e` is a usage error (exit status 2).
pub fn is_usage(e: &anyhow::Error) -> bool {
    e.downcast_ref::<UsageError>().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn chain_names_every_cause_once() {
        let gone = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = anyhow::Error::new(gone).context("cannot write /x/out");
        assert_eq!(chain(&*e), "cannot write /x/out: gone");
        assert_eq!(chain(&*e), format!("{e:#}"));
        let e = e.context("sending to 10.0.0.2:7878 failed");
        assert_eq!(
            chain(&*e),
            "sending to 10.0.0.2:7878 failed: cannot write /x/out: gone"
        );
        // A cause already in the message is not repeated (`{:#}` would).
        let e: anyhow::Error = Err::<(), _>(std::io::Error::other("gone"))
            .context("failed: gone")
            .unwrap_err();
        assert_eq!(chain(&*e), "failed: gone");
        assert_eq!(chain(&UsageError("plain".into())), "plain");
    }

    #[test]
    fn usage_errors_are_found_through_context() {
        let e: anyhow::Error = UsageError("--loss must be within [0, 1)".into()).into();
        assert!(is_usage(&e));
        assert!(is_usage(&e.context("send")));
        assert!(!is_usage(&anyhow::anyhow!("network down")));
    }
}
