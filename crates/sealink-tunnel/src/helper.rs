//! Root helpers for what must happen after the tunnel dropped its privileges (`privs.rs`): a
//! full tunnel's rules deleted at exit or when the tunnel dies (`policy.rs`), and routes
//! changed on a reload (`reload.rs`). Both are rtnetlink requests, which need CAP_NET_ADMIN.
//!
//! Each helper is the running binary started again during set-up, while `up` still has its
//! privileges, as `EXE tunnel-helper KIND ARGS` ([`SUBCOMMAND`]; the `sealink` binary dispatches
//! it to `helper_main::main`, and its path comes from [`crate::RunOptions::helper_exe`]). A fresh process
//! rather than a fork: the tunnel has threads by then, and a forked copy of a threaded process
//! may only make async-signal-safe calls. It talks on its stdin and stdout, a line each way:
//! it answers `ready` once started (or `error MESSAGE`), so that `up` knows it is there before
//! it changes anything. It ignores SIGINT, SIGTERM and SIGHUP and sits in its own process
//! group (a Ctrl-C or systemd's stop signal to the tunnel's group must not end it first).
//!
//! - `undo RECORD`: reads the rules of the record (`NAME.policy`) at once, then waits for a
//!   line or the end of its stdin: a clean exit writes `go`, a killed or crashed tunnel closes
//!   the pipe. Either way it deletes the rules, removes the record, and answers an
//!   `error MESSAGE` line per failure and `done` (to the journal instead when the tunnel is
//!   gone).
//! - `routes IFNAME CONFIG ROUTES`: reads `add NET`, `del NET` or `reload` lines and answers
//!   `ok` or `error MESSAGE` for each. It changes routes through this one interface, and only
//!   the routes of the config as root read it: ROUTES, those of the config `up` read, then
//!   those of CONFIG read again by the helper itself on `reload`; anything else is refused and
//!   logged (`route_rules.rs`). It exits when its stdin closes.
//!
//! Every root helper takes only requests fixed at set-up: the undo helper, the armed down hooks
//! and the DNS cleanup (`hooks.rs`) act on what `up` gave them, on `go` or when the pipe closes;
//! the privileged helper (`hooks.rs`) reads and removes only the paths it was started with; the
//! route helper is bounded as above.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use sealink_proto::tunnel::IpNet;

use crate::error::TunnelError;

/// The hidden subcommand of the binary that runs `helper_main::main`.
pub const SUBCOMMAND: &str = "tunnel-helper";

/// A helper process, seen from the tunnel: started, and `ready`.
struct Process {
    child: Child,
    stdin: Option<ChildStdin>,
    answers: BufReader<ChildStdout>,
}

impl Process {
    /// Starts `EXE tunnel-helper ARGS...` and waits for its `ready`; `who` names it in errors.
    fn start<A: AsRef<OsStr>>(exe: &Path, args: &[A], who: &str) -> Result<Self, TunnelError> {
        let failed = |msg: String| TunnelError::Io {
            what: format!("start the {who} ({} {SUBCOMMAND})", exe.display()),
            source: std::io::Error::other(msg),
        };
        let mut child = {
            // Not with the umask another tunnel's set-up may briefly hold (`bind_private`).
            let _umask = crate::UMASK.lock().unwrap_or_else(|e| e.into_inner());
            Command::new(exe)
                .arg(SUBCOMMAND)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .process_group(0)
                .spawn()
                .map_err(|e| failed(e.to_string()))?
        };
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(failed("no pipes".into()));
        };
        let mut p = Process {
            child,
            stdin: Some(stdin),
            answers: BufReader::new(stdout),
        };
        match p.answer() {
            Some(l) if l == "ready" => Ok(p),
            other => {
                let _ = p.child.kill();
                let _ = p.child.wait();
                Err(failed(match other {
                    Some(l) => l.strip_prefix("error ").unwrap_or(&l).to_owned(),
                    None => "it exited".into(),
                }))
            }
        }
    }

    /// The next answer line, without its newline; `None` once the helper is gone.
    fn answer(&mut self) -> Option<String> {
        let mut line = String::new();
        match self.answers.read_line(&mut line) {
            Ok(n) if n > 0 => Some(line.trim_end().to_owned()),
            _ => None,
        }
    }

    fn send(&mut self, line: &str) -> bool {
        self.stdin
            .as_mut()
            .is_some_and(|s| writeln!(s, "{line}").is_ok())
    }
}

/// The undo of a full tunnel's rules, armed (see the module documentation): dropped without
/// [`UndoHelper::fire`], the helper still undoes them once the pipe closes.
pub(crate) struct UndoHelper(Process);

impl std::fmt::Debug for UndoHelper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("UndoHelper")
            .field(&self.0.child.id())
            .finish()
    }
}

impl UndoHelper {
    /// Starts the helper for `record` (already written); it has read it when this returns.
    pub(crate) fn start(exe: &Path, record: &Path) -> Result<Self, TunnelError> {
        Process::start(
            exe,
            &[OsStr::new("undo"), record.as_os_str()],
            "full-tunnel cleanup helper",
        )
        .map(UndoHelper)
    }

    /// Releases it and waits until the rules are gone; a failure is logged (shutdown goes on).
    pub(crate) fn fire(mut self) {
        tracing::info!("full tunnel: removing its rules");
        self.0.send("go");
        self.0.stdin = None;
        while let Some(l) = self.0.answer() {
            if let Some(e) = l.strip_prefix("error ") {
                tracing::error!("full-tunnel cleanup: {e}");
            }
        }
        let _ = self.0.child.wait();
    }
}

/// The route helper (see the module documentation); it exits when dropped (its stdin closes).
pub(crate) struct RouteHelper(Process);

impl RouteHelper {
    pub(crate) fn start(
        exe: &Path,
        args: &crate::route_rules::RouteArgs,
    ) -> Result<Self, TunnelError> {
        let mut a: Vec<std::ffi::OsString> = vec!["routes".into()];
        a.extend(args.to_args());
        Process::start(exe, &a, "route helper").map(RouteHelper)
    }

    /// Has the helper read the config file again (as root) and take its routes.
    pub(crate) fn reload(&mut self) -> Result<(), String> {
        self.ask("reload")
    }

    fn ask(&mut self, line: &str) -> Result<(), String> {
        if !self.0.send(line) {
            return Err("the route helper exited".into());
        }
        match self.0.answer() {
            Some(l) if l == "ok" => Ok(()),
            Some(l) => Err(l.strip_prefix("error ").unwrap_or(&l).to_owned()),
            None => Err("the route helper exited".into()),
        }
    }

    /// `ip route add|del NET dev IFNAME`, through the helper.
    pub(crate) fn change(&mut self, add: bool, net: IpNet) -> Result<(), String> {
        let op = if add { "add" } else { "del" };
        self.ask(&format!("{op} {net}"))
    }
}

impl Drop for RouteHelper {
    fn drop(&mut self) {
        self.0.stdin = None;
        let _ = self.0.child.wait();
    }
}
