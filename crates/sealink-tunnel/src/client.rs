//! What `sealink reload`, `down` and `show` ask a running tunnel over its control socket
//! ([`control::request`]), and what its answers mean: the requests' words, the `ok: ` and
//! `error: ` answers, and `show-json`'s schema.

use std::path::Path;
use std::time::Duration;

use crate::control::{self, Status};
use crate::{RunDir, TunnelError};

/// How long `reload` and `down` wait for the tunnel's answer (`down`: until its interface is
/// gone).
const SLOW: Duration = Duration::from_secs(30);
/// How long `show` waits for each tunnel's status.
const SHOW: Duration = Duration::from_secs(5);

/// Why a request to a running tunnel failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Not reached (not running, no permission), or no answer.
    #[error(transparent)]
    Tunnel(#[from] TunnelError),
    /// The tunnel answered with its refusal.
    #[error("tunnel {name}: {reason}")]
    Refused { name: String, reason: String },
    /// `down` was answered with something other than `down`.
    #[error("tunnel {name} did not confirm it stopped: {answer:?}")]
    NotStopped { name: String, answer: String },
    #[error("the tunnel answered show-json with something else")]
    BadStatus(#[source] serde_json::Error),
}

/// Asks the tunnel `name` to read its config again (from `path`, else from the file it was
/// started from) and apply the peer changes; its summary, or its refusal.
pub fn reload(run_dir: &RunDir, name: &str, path: Option<&Path>) -> Result<String, ClientError> {
    let req = match path {
        Some(p) => format!("reload {}", p.display()),
        None => "reload".to_owned(),
    };
    let answer = control::request(run_dir, name, &req, SLOW)?;
    let answer = answer.trim();
    match answer.strip_prefix("ok: ") {
        Some(msg) => Ok(msg.to_owned()),
        None => Err(ClientError::Refused {
            name: name.to_owned(),
            reason: answer.strip_prefix("error: ").unwrap_or(answer).to_owned(),
        }),
    }
}

/// How `down` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Down {
    /// The tunnel stopped and removed its interface.
    Stopped,
    /// It was not running, and the full-tunnel rules it left (killed together with its cleanup
    /// helper) were removed.
    CleanedStale,
}

/// Stops the tunnel `name` and waits until its interface is gone.
pub fn down(run_dir: &RunDir, name: &str) -> Result<Down, ClientError> {
    let answer = match control::request(run_dir, name, "down", SLOW) {
        Ok(a) => a,
        Err(e @ TunnelError::NotRunning(_)) => {
            if crate::policy::clean_stale(&run_dir.dir(), name)? {
                return Ok(Down::CleanedStale);
            }
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
    if answer.trim() != "down" {
        return Err(ClientError::NotStopped {
            name: name.to_owned(),
            answer,
        });
    }
    Ok(Down::Stopped)
}

/// The status texts (`show`, or `show-json` with `json`) of the tunnel `name`, or of every
/// running tunnel of this network namespace (a socket left behind by a killed one skipped).
pub fn show(run_dir: &RunDir, name: Option<&str>, json: bool) -> Result<Vec<String>, ClientError> {
    let names = match name {
        Some(n) => vec![n.to_owned()],
        None => control::running(run_dir)?,
    };
    let request = if json { "show-json" } else { "show" };
    let mut texts = Vec::new();
    for n in names {
        match control::request(run_dir, &n, request, SHOW) {
            // Refused (e.g. by peer credentials): an error, not a status.
            Ok(text) if text.starts_with("error: ") => {
                return Err(ClientError::Refused {
                    reason: text.trim_start_matches("error: ").trim().to_owned(),
                    name: n,
                });
            }
            Ok(text) => texts.push(text),
            Err(TunnelError::NotRunning(_)) if name.is_none() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(texts)
}

/// [`show`]'s `show-json` answers, each checked against the schema.
pub fn show_json(run_dir: &RunDir, name: Option<&str>) -> Result<Vec<Status>, ClientError> {
    parse_statuses(&show(run_dir, name, true)?)
}

fn parse_statuses(texts: &[String]) -> Result<Vec<Status>, ClientError> {
    texts
        .iter()
        .map(|t| serde_json::from_str::<Status>(t))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ClientError::BadStatus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_to_no_tunnel_say_so() {
        let d = tempfile::tempdir().unwrap();
        let run_dir = RunDir::new(Some(d.path().to_owned()));
        assert!(matches!(
            reload(&run_dir, "sl9", None),
            Err(ClientError::Tunnel(TunnelError::NotRunning(_)))
        ));
        assert!(matches!(
            down(&run_dir, "sl9"),
            Err(ClientError::Tunnel(TunnelError::NotRunning(_)))
        ));
        assert!(matches!(
            show(&run_dir, Some("sl9"), false),
            Err(ClientError::Tunnel(TunnelError::NotRunning(_)))
        ));
        assert!(show(&run_dir, None, false).unwrap().is_empty());
    }

    #[test]
    fn a_status_that_is_no_status_is_refused() {
        let e = parse_statuses(&["{}".to_owned()]).unwrap_err();
        assert!(matches!(e, ClientError::BadStatus(_)), "{e}");
        assert_eq!(
            ClientError::Refused {
                name: "sl0".into(),
                reason: "permission denied".into()
            }
            .to_string(),
            "tunnel sl0: permission denied"
        );
    }
}
