//! Root helpers for what must happen after the tunnel dropped its privileges (`privs.rs`): a
//! full tunnel's rules deleted at exit or when the tunnel dies (`policy.rs`), and routes
//! changed on a reload (`reload.rs`). Both are rtnetlink requests, which need CAP_NET_ADMIN.
//!
//! Each helper is the running binary started again during set-up, while `up` still has its
//! privileges, as `EXE tunnel-helper KIND ARGS` ([`SUBCOMMAND`]; the `sealink` binary dispatches
//! it to [`main`], and its path comes from [`crate::RunOptions::helper_exe`]). A fresh process
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
//! - `routes IFNAME`: reads `add NET` or `del NET` lines and answers `ok` or `error MESSAGE`
//!   for each; it can change routes through this one interface and nothing else. It exits
//!   when its stdin closes.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use sealink_proto::tunnel::IpNet;

use crate::error::TunnelError;

/// The hidden subcommand of the binary that runs [`main`].
pub const SUBCOMMAND: &str = "tunnel-helper";

/// The helper's side: `args` are those after [`SUBCOMMAND`]. Returns the exit status.
pub fn main(args: &[String]) -> i32 {
    // Ignored until the work is done: each only sets a flag no one reads.
    let ignored = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        let _ = signal_hook::flag::register(sig, std::sync::Arc::clone(&ignored));
    }
    let mut out = std::io::stdout().lock();
    let mut input = std::io::stdin().lock();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["undo", record] => undo_main(Path::new(record), &mut input, &mut out),
        ["routes", ifname] => routes_main(ifname, &mut input, &mut out),
        _ => {
            let _ = writeln!(out, "error usage: {SUBCOMMAND} undo RECORD | routes IFNAME");
            2
        }
    }
}

fn undo_main(record: &Path, input: &mut impl BufRead, out: &mut impl Write) -> i32 {
    let rules = match crate::policy::read_record(record) {
        Ok(Some(r)) => r,
        Ok(None) => Vec::new(),
        Err(e) => {
            let _ = writeln!(out, "error {e}");
            return 1;
        }
    };
    if writeln!(out, "ready").and_then(|()| out.flush()).is_err() {
        // The tunnel is gone before it heard us: it changed nothing.
        return 1;
    }
    // `go`, or the end of the pipe: the tunnel died.
    let mut line = String::new();
    let released = matches!(input.read_line(&mut line), Ok(n) if n > 0);
    let mut failures: Vec<String> = crate::policy::delete(&rules)
        .iter()
        .map(ToString::to_string)
        .collect();
    match std::fs::remove_file(record) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => failures.push(format!("remove {}: {e}", record.display())),
    }
    let mut told = released;
    for f in &failures {
        told &= writeln!(out, "error {f}").is_ok();
    }
    told &= writeln!(out, "done").and_then(|()| out.flush()).is_ok();
    if !told {
        // The tunnel died: its journal or terminal still gets our stderr.
        for f in &failures {
            eprintln!("sealink {SUBCOMMAND}: full-tunnel cleanup: {f}");
        }
    }
    i32::from(!failures.is_empty())
}

fn routes_main(ifname: &str, input: &mut impl BufRead, out: &mut impl Write) -> i32 {
    if writeln!(out, "ready").and_then(|()| out.flush()).is_err() {
        return 1;
    }
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {}
        }
        let answer = match route_request(ifname, line.trim()) {
            Some(Ok(())) => "ok".to_owned(),
            Some(Err(e)) => format!("error {}", e.replace('\n', " ")),
            None => return 1,
        };
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return 0;
        }
    }
}

/// One `add NET` or `del NET` request; `None` for anything else (the helper then exits).
fn route_request(ifname: &str, line: &str) -> Option<Result<(), String>> {
    let (op, net) = line.split_once(' ')?;
    let add = match op {
        "add" => true,
        "del" => false,
        _ => return None,
    };
    Some(match net.trim().parse::<IpNet>() {
        Ok(net) => crate::netconf::change_route(add, ifname, net).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    })
}

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
    pub(crate) fn start(exe: &Path, ifname: &str) -> Result<Self, TunnelError> {
        Process::start(exe, &["routes", ifname], "route helper").map(RouteHelper)
    }

    /// `ip route add|del NET dev IFNAME`, through the helper.
    pub(crate) fn change(&mut self, add: bool, net: IpNet) -> Result<(), String> {
        let op = if add { "add" } else { "del" };
        if !self.0.send(&format!("{op} {net}")) {
            return Err("the route helper exited".into());
        }
        match self.0.answer() {
            Some(l) if l == "ok" => Ok(()),
            Some(l) => Err(l.strip_prefix("error ").unwrap_or(&l).to_owned()),
            None => Err("the route helper exited".into()),
        }
    }
}

impl Drop for RouteHelper {
    fn drop(&mut self) {
        self.0.stdin = None;
        let _ = self.0.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_record_stops_the_undo_helper_before_ready() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sl0.policy");
        std::fs::write(&p, "-4 rule del not fwmark x\n").unwrap();
        let mut out = Vec::new();
        let code = undo_main(&p, &mut &b""[..], &mut out);
        assert_eq!(code, 1);
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with("error ") && out.contains("line 1"), "{out}");
        assert!(p.exists(), "the record stays for a look");
    }

    #[test]
    fn the_undo_helper_with_nothing_recorded_removes_the_record() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sl0.policy");
        std::fs::write(&p, "\n").unwrap();
        let mut out = Vec::new();
        // The pipe closes without `go`: it undoes all the same.
        assert_eq!(undo_main(&p, &mut &b""[..], &mut out), 0);
        assert_eq!(String::from_utf8(out).unwrap(), "ready\ndone\n");
        assert!(!p.exists());
    }

    #[test]
    fn the_route_helper_takes_add_and_del_only() {
        assert!(route_request("sl0", "flush all").is_none());
        assert!(route_request("sl0", "add").is_none());
        assert_eq!(
            route_request("sl0", "add 10.0.0.0/99"),
            Some(Err(
                "prefix length 99 is out of range for 10.0.0.0 (at most 32)".into()
            ))
        );
        let mut out = Vec::new();
        assert_eq!(routes_main("sl0", &mut &b"reboot now\n"[..], &mut out), 1);
        assert_eq!(String::from_utf8(out).unwrap(), "ready\n");
    }
}
