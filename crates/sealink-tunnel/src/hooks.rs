//! wg-quick's hooks (`pre_up`, `post_up`, `pre_down`, `post_down`), and the privileged shell
//! helper that reads the config and key on a reload.
//!
//! A hook is one string run by `/bin/sh -c`, with `%i` replaced by the interface name. As
//! wg-quick does, `[#] CMD` is shown before it runs and what it prints (stdout and stderr)
//! after, line by line (on [`crate::SAY_TARGET`]: plain lines from the `sealink` binary, also
//! logged at debug). `pre_up` and `post_up` run while
//! `up` still holds its privileges. The running tunnel holds none (`privs.rs`), yet
//! wg-quick's `PreDown`/`PostDown` usually undo firewall rules, which needs them. So each down
//! hook is *armed* during set-up: a shell is started then, with the privileges `up` has, that
//! waits for one line on a pipe before it runs the hook. Shutdown writes `go`; if the tunnel
//! dies instead, the pipe closes without it and the hook never runs. The waiting shells ignore
//! SIGINT, SIGTERM and SIGHUP until released (a Ctrl-C or systemd's stop signal to the whole
//! group must not kill them before they run) and sit in their own process group.
//!
//! Routes changed on a reload and a full tunnel's rules go through rtnetlink, from the root
//! helpers of `helper.rs` (the running binary again, not a shell: no `ip` is run).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::error::TunnelError;

/// The read end of a hook's output pipe.
type PipeReader = std::fs::File;

/// Which hook (for logs and errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    PreUp,
    PostUp,
    PreDown,
    PostDown,
    /// Not a hook of the config: the undo of the interface's DNS settings (`dns.rs`).
    Dns,
}

impl HookKind {
    pub fn key(self) -> &'static str {
        match self {
            HookKind::PreUp => "pre_up",
            HookKind::PostUp => "post_up",
            HookKind::PreDown => "pre_down",
            HookKind::PostDown => "post_down",
            HookKind::Dns => "dns cleanup",
        }
    }
}

/// The hooks of a config, each a list run in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hooks {
    pub pre_up: Vec<String>,
    pub post_up: Vec<String>,
    pub pre_down: Vec<String>,
    pub post_down: Vec<String>,
}

/// Quotes `s` for `/bin/sh` (the cleanup command of `dns.rs`).
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `%i` becomes the interface name, as in wg-quick.
fn expand(cmd: &str, ifname: &str) -> String {
    cmd.replace("%i", ifname)
}

/// How long to wait, once a hook exited, for children it left holding its output pipe.
const OUTPUT_GRACE: Duration = Duration::from_millis(500);

/// Logs what the hook printed, line by line, from a reader thread; the thread ends when every
/// writer is closed, which a child the hook left in the background may delay: the caller waits
/// [`OUTPUT_GRACE`] at most once the hook exited.
fn log_output(kind: HookKind, out: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let _ = std::thread::Builder::new()
        .name("sl-hook-log".into())
        .spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                tracing::info!(target: crate::SAY_TARGET, "{line}");
                tracing::debug!(hook = kind.key(), "{line}");
            }
            let _ = tx.send(());
        });
    rx
}

/// A `/bin/sh -c SCRIPT sealink-hook ARGS...` with stdout and stderr into one pipe, in its own
/// process group.
fn shell(script: &str, args: &[&str], stdin: bool) -> std::io::Result<(Child, PipeReader)> {
    // std::io::pipe needs Rust 1.87; the workspace supports 1.85.
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let w2 = w.try_clone()?;
    let r = PipeReader::from(r);
    let _umask = crate::UMASK.lock().unwrap_or_else(|e| e.into_inner());
    let child = Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .arg("sealink-hook")
        .args(args)
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(w)
        .stderr(w2)
        .process_group(0)
        .spawn()?;
    Ok((child, r))
}

fn finish(kind: HookKind, cmd: &str, mut child: Child, out: PipeReader) -> Result<(), TunnelError> {
    let done = log_output(kind, out);
    let status = child.wait();
    let _ = done.recv_timeout(OUTPUT_GRACE);
    check(kind, cmd, status)
}

fn check(
    kind: HookKind,
    cmd: &str,
    status: std::io::Result<ExitStatus>,
) -> Result<(), TunnelError> {
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(TunnelError::Hook {
            hook: kind.key(),
            cmd: cmd.to_owned(),
            status: s.to_string(),
        }),
        Err(e) => Err(TunnelError::Hook {
            hook: kind.key(),
            cmd: cmd.to_owned(),
            status: format!("could not run /bin/sh: {e}"),
        }),
    }
}

/// Runs the hooks of `kind` now, in order; the first that fails ends the run with its error.
pub(crate) fn run_now(kind: HookKind, cmds: &[String], ifname: &str) -> Result<(), TunnelError> {
    for c in cmds {
        let cmd = expand(c, ifname);
        tracing::info!(target: crate::SAY_TARGET, "[#] {cmd}");
        tracing::debug!(hook = kind.key(), "running: {cmd}");
        let (child, out) = shell(&cmd, &[], false).map_err(|e| TunnelError::Hook {
            hook: kind.key(),
            cmd: cmd.clone(),
            status: format!("could not run /bin/sh: {e}"),
        })?;
        finish(kind, &cmd, child, out)?;
    }
    Ok(())
}

/// Waits for `go` (ignoring the stop signals meanwhile), then runs `$1` with default signals.
const ARMED: &str = "trap '' INT TERM HUP; read -r go || exit 0; [ \"$go\" = go ] || exit 0; \
                     trap - INT TERM HUP; exec /bin/sh -c \"$1\"";

/// As [`ARMED`], but runs `$1` also when the pipe closes without `go` (the tunnel died).
const ARMED_ALWAYS: &str = "trap '' INT TERM HUP; read -r go; trap - INT TERM HUP; \
                            exec /bin/sh -c \"$1\"";

/// One hook started during set-up, waiting to be released (see the module documentation).
pub(crate) struct Armed {
    kind: HookKind,
    cmd: String,
    child: Child,
    stdin: Option<ChildStdin>,
    out: PipeReader,
}

impl Armed {
    /// Starts a waiting shell for each hook of `kind`.
    pub(crate) fn arm(
        kind: HookKind,
        cmds: &[String],
        ifname: &str,
    ) -> Result<Vec<Armed>, TunnelError> {
        let mut v = Vec::new();
        for c in cmds {
            let cmd = expand(c, ifname);
            let (mut child, out) = shell(ARMED, &[&cmd], true).map_err(|e| TunnelError::Hook {
                hook: kind.key(),
                cmd: cmd.clone(),
                status: format!("could not run /bin/sh: {e}"),
            })?;
            let stdin = child.stdin.take();
            v.push(Armed {
                kind,
                cmd,
                child,
                stdin,
                out,
            });
        }
        Ok(v)
    }

    /// One shell that runs `script` when released or when the tunnel dies, whichever comes
    /// first: for undoing what must not outlive the tunnel (the interface's DNS settings).
    pub(crate) fn arm_always(kind: HookKind, script: &str) -> Result<Armed, TunnelError> {
        let (mut child, out) =
            shell(ARMED_ALWAYS, &[script], true).map_err(|e| TunnelError::Hook {
                hook: kind.key(),
                cmd: script.to_owned(),
                status: format!("could not run /bin/sh: {e}"),
            })?;
        let stdin = child.stdin.take();
        Ok(Armed {
            kind,
            cmd: script.to_owned(),
            child,
            stdin,
            out,
        })
    }

    /// Stops the shell without running its command (there is nothing to undo).
    pub(crate) fn disarm(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Releases the hook and waits for it; a failure is logged (shutdown goes on).
    pub(crate) fn fire(mut self) {
        tracing::info!(target: crate::SAY_TARGET, "[#] {}", self.cmd);
        tracing::debug!(hook = self.kind.key(), "running: {}", self.cmd);
        if let Some(mut s) = self.stdin.take() {
            let _ = s.write_all(b"go\n");
        }
        let Armed {
            kind,
            cmd,
            child,
            out,
            ..
        } = self;
        if let Err(e) = finish(kind, &cmd, child, out) {
            tracing::error!("{e}");
        }
    }
}

/// Fires every armed hook in order.
pub(crate) fn fire_all(hooks: Vec<Armed>) {
    for h in hooks {
        h.fire();
    }
}

/// A root shell started during set-up that runs one fixed script, reading requests on its stdin
/// and answering one line each on its stdout (the privileged helper). It exits when dropped
/// (its stdin closes).
struct ShellHelper {
    _child: Child,
    stdin: ChildStdin,
    answers: BufReader<ChildStdout>,
}

impl ShellHelper {
    /// `/bin/sh -c SCRIPT NAME ARGS...` in its own process group (a Ctrl-C meant for the tunnel
    /// does not reach it), under the tunnel's umask.
    fn start<I, A>(script: &str, name: &str, args: I) -> std::io::Result<Self>
    where
        I: IntoIterator<Item = A>,
        A: AsRef<std::ffi::OsStr>,
    {
        let _umask = crate::UMASK.lock().unwrap_or_else(|e| e.into_inner());
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .arg(name)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout"))?;
        Ok(ShellHelper {
            _child: child,
            stdin,
            answers: BufReader::new(stdout),
        })
    }

    /// Sends one request line and reads the answer line into `line`; `who` names the helper in
    /// errors.
    fn ask(&mut self, request: &str, who: &str, line: &mut String) -> Result<(), String> {
        writeln!(self.stdin, "{request}").map_err(|e| format!("{who}: {e}"))?;
        self.read_answer(who, line)
    }

    /// Reads one more answer line (a request may have several).
    fn read_answer(&mut self, who: &str, line: &mut String) -> Result<(), String> {
        line.clear();
        match self.answers.read_line(line) {
            Ok(0) => Err(format!("the {who} exited")),
            Ok(_) => Ok(()),
            Err(e) => Err(format!("{who}: {e}")),
        }
    }
}

/// The privileged helper's script: `$1` the control socket, `$2` the config file, `$3` the
/// key file, `$4` the WireGuard UAPI socket (or empty) and `$5` its `DEV:INODE` when made (or
/// empty): it is removed only while it is still that file, not another process's socket made
/// since ours was removed (see `uapi.rs`). `read` answers one line per file, `ok UID MODE DIR_UID DIR_MODE BASE64` (owner
/// and mode in hex, as `stat -L` gives them, of the file and of its directory) or
/// `error MESSAGE`; `unlink` removes the control socket, then its directory if that is empty
/// now (the last tunnel of the namespace), and answers `ok` or `error MESSAGE`. Anything else
/// ends it. It can read and remove those three paths, and remove that empty directory, and
/// nothing else.
const PRIV_HELPER: &str = "trap '' INT TERM HUP
meta() { stat -L -c '%u %f' -- \"$1\" && stat -L -c '%u %f' -- \"$(dirname -- \"$1\")\"; }
while read -r op; do
  case \"$op\" in
  read)
    for f in \"$2\" \"$3\"; do
      d=
      if m=$(meta \"$f\" 2>&1) && d=$(base64 -w0 < \"$f\" 2>&1); then
        printf 'ok %s %s\\n' \"$(printf %s \"$m\" | tr '\\n' ' ')\" \"$d\"
      else
        printf 'error %s\\n' \"$(printf '%s %s' \"$m\" \"$d\" | tr '\\n' ' ')\"
      fi
    done ;;
  unlink)
    [ -z \"$4\" ] || { [ -n \"$5\" ] && [ \"$(stat -c %d:%i -- \"$4\" 2>/dev/null)\" != \"$5\" ] || rm -f -- \"$4\"; }
    if out=$(rm -f -- \"$1\" 2>&1); then rmdir -- \"$(dirname -- \"$1\")\" 2>/dev/null; echo ok
    else printf 'error %s\\n' \"$(printf %s \"$out\" | tr '\\n' ' ')\"; fi ;;
  *) exit 1 ;;
  esac
done";

/// A file read by the [`PrivHelper`]: its bytes (wiped on drop: it may be the private key) and
/// the owner and mode of it and of its directory, for the StrictModes checks.
pub(crate) struct Fetched {
    pub uid: u32,
    pub mode: u32,
    pub dir_uid: u32,
    pub dir_mode: u32,
    pub data: zeroize::Zeroizing<Vec<u8>>,
}

/// What still needs root once the tunnel runs as its unprivileged user (see `privs.rs`):
/// reading the config file and the host key again on a reload (both usually root's, 0600),
/// and removing the control socket from its root-owned 0700 directory at exit. Started during
/// set-up like the down hooks, for fixed paths; it exits when dropped (its stdin closes).
pub(crate) struct PrivHelper(ShellHelper);

impl PrivHelper {
    pub(crate) fn start(
        socket: &std::path::Path,
        config: Option<&std::path::Path>,
        key: &std::path::Path,
        uapi: Option<(&std::path::Path, String)>,
    ) -> std::io::Result<Self> {
        let none = std::path::Path::new("");
        let config = config.unwrap_or(none);
        let (uapi, uapi_id) = uapi.unwrap_or((none, String::new()));
        let uapi_id = std::path::Path::new(&uapi_id);
        ShellHelper::start(
            PRIV_HELPER,
            "sealink-priv",
            [socket, config, key, uapi, uapi_id],
        )
        .map(PrivHelper)
    }

    /// One answer line, wiped on drop: it may hold the private key.
    fn answer(&mut self, request: Option<&str>) -> Result<zeroize::Zeroizing<String>, String> {
        const WHO: &str = "privileged helper";
        let mut line = zeroize::Zeroizing::new(String::new());
        match request {
            Some(r) => self.0.ask(r, WHO, &mut line)?,
            None => self.0.read_answer(WHO, &mut line)?,
        }
        Ok(line)
    }

    /// The config file and the key file, as root reads them.
    pub(crate) fn read(&mut self) -> Result<(Fetched, Fetched), String> {
        let config = parse_fetched(&self.answer(Some("read"))?);
        let key = parse_fetched(&self.answer(None)?);
        Ok((config?, key?))
    }

    /// Removes the control socket, and its directory if nothing else is left in it; and the
    /// WireGuard UAPI socket, if there is one.
    pub(crate) fn unlink(&mut self) -> Result<(), String> {
        let line = self.answer(Some("unlink"))?;
        match line.trim() {
            "ok" => Ok(()),
            other => Err(other.trim_start_matches("error ").to_owned()),
        }
    }
}

/// One `read` answer line of the helper.
fn parse_fetched(line: &str) -> Result<Fetched, String> {
    use base64::Engine as _;
    let line = line.trim_end_matches('\n');
    let Some(rest) = line.strip_prefix("ok ") else {
        return Err(line.trim_start_matches("error ").trim().to_owned());
    };
    let mut f = rest.split(' ');
    let mut num = |radix| {
        f.next()
            .and_then(|t| u32::from_str_radix(t, radix).ok())
            // Not quoted back: the line may hold a private key.
            .ok_or_else(|| "privileged helper: malformed answer".to_owned())
    };
    let (uid, mode, dir_uid, dir_mode) = (num(10)?, num(16)?, num(10)?, num(16)?);
    let b64 = f.next().unwrap_or("");
    let data = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| format!("privileged helper: {e}"))?;
    Ok(Fetched {
        uid,
        mode,
        dir_uid,
        dir_mode,
        data: zeroize::Zeroizing::new(data),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// `unlink` removes the UAPI socket only while the path is still the file it was given
    /// (by device and inode), not one made there since.
    #[test]
    fn priv_helper_unlinks_only_our_uapi_socket() {
        let d = tempfile::tempdir().unwrap();
        let id = |p: &std::path::Path| {
            let m = std::fs::metadata(p).unwrap();
            format!("{}:{}", m.dev(), m.ino())
        };
        let run = |replace: bool| {
            let ctl_dir = d.path().join("run");
            std::fs::create_dir_all(&ctl_dir).unwrap();
            let ctl = ctl_dir.join("t.sock");
            let uapi = d.path().join("wg.sock");
            std::fs::write(&ctl, "").unwrap();
            std::fs::write(&uapi, "ours").unwrap();
            let ours = id(&uapi);
            if replace {
                // Another file at that path (ours moved aside, so its inode is not reused).
                std::fs::rename(&uapi, d.path().join("aside")).unwrap();
                std::fs::write(&uapi, "theirs").unwrap();
            }
            let key = d.path().join("key");
            let mut h = PrivHelper::start(&ctl, None, &key, Some((&uapi, ours))).unwrap();
            assert_eq!(h.unlink(), Ok(()));
            assert!(!ctl.exists() && !ctl_dir.exists());
            uapi.exists()
        };
        assert!(!run(false), "our UAPI socket stayed");
        assert!(run(true), "another's UAPI socket was removed");
    }
}
