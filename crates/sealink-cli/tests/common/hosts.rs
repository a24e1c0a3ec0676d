//! Two stream-mode hosts under one temporary directory, and helpers for the processes the
//! tests start on them (stream.rs, stream_conn.rs, trees.rs).

use std::io::{BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, ExitStatus, Output, Stdio};

use super::BIN;

/// `a` sends (host key, owner key `alice`, trusts b's host), `b` receives into `in`.
pub struct Hosts {
    pub dir: tempfile::TempDir,
}

impl Hosts {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        super::two_hosts(dir.path());
        Hosts { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The sending host's home.
    pub fn a(&self) -> PathBuf {
        self.path("a")
    }

    pub fn inbox(&self) -> PathBuf {
        self.path("in")
    }

    /// Starts `sealink recv --once ARGS` on an ephemeral port; the child, its address and its
    /// standard error.
    pub fn recv(
        &self,
        extra: &[&str],
        stdout: Stdio,
    ) -> (Child, SocketAddr, BufReader<ChildStderr>) {
        let mut args = vec!["--once"];
        args.extend_from_slice(extra);
        self.recv_with(None, &args, stdout)
    }

    /// Starts `sealink recv ARGS` (into the inbox unless `--stdout`) on an ephemeral port, under
    /// `umask` if given (set by a shell that then execs the receiver).
    pub fn recv_with(
        &self,
        umask: Option<&str>,
        extra: &[&str],
        stdout: Stdio,
    ) -> (Child, SocketAddr, BufReader<ChildStderr>) {
        let mut cmd = match umask {
            Some(m) => {
                let mut c = Command::new("sh");
                c.args(["-c", "umask \"$0\" && exec \"$@\"", m, BIN]);
                c
            }
            None => Command::new(BIN),
        };
        cmd.args(["recv", "--listen", "127.0.0.1:0"]);
        if !extra.contains(&"--stdout") {
            cmd.arg("--dir").arg(self.inbox());
        }
        let mut c = cmd
            .args(extra)
            .env("SEALINK_HOME", self.path("b"))
            .env_remove("RUST_LOG")
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (addr, err) = super::listening(&mut c);
        (c, addr, err)
    }

    pub fn send_cmd(&self, files: &[&Path], to: SocketAddr, extra: &[&str]) -> Command {
        super::send_cmd(&self.a(), files, to, extra)
    }

    pub fn send(&self, files: &[&Path], to: SocketAddr, extra: &[&str]) -> Output {
        self.send_cmd(files, to, extra).output().unwrap()
    }

    /// Files in the inbox, hidden temporary ones included.
    pub fn inbox_names(&self) -> Vec<String> {
        super::names_in(&self.inbox())
    }
}

/// Waits for `c`; its status and the rest of its standard error.
pub fn finish(mut c: Child, mut err: BufReader<ChildStderr>) -> (ExitStatus, String) {
    let mut rest = String::new();
    let _ = err.read_to_string(&mut rest);
    (c.wait().unwrap(), rest)
}

/// The standard error of `o`, which must have succeeded.
pub fn ok_stderr(o: &Output) -> String {
    assert!(o.status.success(), "{}", text(o));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A finished process's status and output, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
