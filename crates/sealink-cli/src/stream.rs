//! `sealink send` and `sealink recv`: stream mode from the command line. Loads keys and trust,
//! resolves the receiver, draws progress, prints the summary line.

mod args;

pub use args::{RECV_HELP, RecvArgs, SEND_HELP, SendArgs};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sealink_crypto::Scope;
use sealink_stream::{
    BarThread, ConnLimits, Dest, Destination, FileRecord, Progress, Receiver, RecvConfig,
    SendConfig, Source, TransferMeta, summary,
};

use anyhow::{Context, Result, anyhow};

/// What `send` returns when it sent what it could and left some out: the command exits with
/// [`EXIT_PARTIAL`] (unreadable files, missing arguments), or [`EXIT_VANISHED`] when the only
/// things left out vanished or changed between being listed and being read.
#[derive(Debug)]
pub struct Partial {
    pub count: usize,
    pub vanished_only: bool,
}

impl Partial {
    fn of(problems: usize, vanished: usize) -> Self {
        Partial {
            count: problems + vanished,
            vanished_only: problems == 0,
        }
    }

    /// The exit status it means.
    pub fn code(&self) -> u8 {
        if self.vanished_only {
            EXIT_VANISHED
        } else {
            EXIT_PARTIAL
        }
    }
}

impl std::fmt::Display for Partial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "partial transfer: {} thing{} could not be sent{} (see the warnings above); the rest \
             was sent",
            self.count,
            if self.count == 1 { "" } else { "s" },
            if self.vanished_only {
                ": vanished or changed while being sent"
            } else {
                ""
            }
        )
    }
}

impl std::error::Error for Partial {}

/// Exit status of a partial transfer (as rsync's 23: some files were not transferred).
pub const EXIT_PARTIAL: u8 = 23;
/// Exit status of a transfer that left out only files that vanished or changed after being
/// listed (as rsync's 24).
pub const EXIT_VANISHED: u8 = 24;

/// What an interrupted send says (issue 46: a Ctrl-C exited silently, a cut connection said only
/// "Connection reset by peer").
pub(crate) const RESUME_HINT: &str = "hint: the receiver keeps what arrived; run the same \
     command again to resume (--no-resume starts over)";

/// On SIGINT or SIGTERM during a send: the hint, then exit 130 (as a shell reports Ctrl-C).
/// The receiver keeps what it holds, as when the sender is killed.
pub(crate) fn hint_on_interrupt() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return; // the default action then: exit without the hint
    };
    let _ = std::thread::Builder::new()
        .name("sl-interrupt".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                eprintln!(
                    "\ninterrupted; {}",
                    RESUME_HINT.trim_start_matches("hint: ")
                );
                std::process::exit(130);
            }
        });
}

/// An address error as the command reports it: a malformed address is a usage error (exit 2).
fn addr_error(e: sealink_stream::AddrError) -> anyhow::Error {
    match e {
        sealink_stream::AddrError::Usage(m) => crate::error::UsageError(m).into(),
        e => e.into(),
    }
}

/// A listen address: `ADDR:PORT`, or a host or address alone on the default port.
pub(crate) fn resolve_listen(s: &str) -> Result<SocketAddr> {
    sealink_stream::resolve_listen(s).map_err(addr_error)
}

/// `[NAME@]HOST[:PORT]`.
pub(crate) fn parse_dest(dest: &str) -> Result<Destination> {
    Destination::parse(dest).map_err(addr_error)
}

/// `--resume-max-age`: seconds, or with units (90m, 12h, 7d, 7days), at most 100 years.
pub(crate) fn parse_age(s: &str) -> Result<Duration, String> {
    let d = sealink_cmdline::units::parse_duration(s)?;
    if d <= Duration::from_secs(100 * 365 * 86_400) {
        Ok(d)
    } else {
        Err(format!("{} is more than 100 years", s.trim()))
    }
}

/// Prints `records` as JSON lines on stdout.
fn print_records(records: &[FileRecord]) -> Result<()> {
    let mut out = String::new();
    for r in records {
        out.push_str(&r.to_json_line());
        out.push('\n');
    }
    crate::output::print(&out)?;
    Ok(())
}

pub fn send(p: SendArgs) -> Result<()> {
    // The destination first: a malformed one is a usage error whatever the home holds.
    let Destination { name, host, addr } = parse_dest(&p.dest)?;
    let me = p.me.identity();
    let (trust_path, trust) = me.read_trust()?;
    let (peer_name, peer) =
        trust.pick_host(name.as_deref().or(p.peer.as_deref()), &host, &trust_path)?;
    let host_key = me.host()?;
    let owner = me.owner()?;
    let owner_key = owner.public_key();
    let mut sources = Vec::with_capacity(p.files.len());
    for f in &p.files {
        if f.as_os_str() == "-" {
            sources.push(Source::Stdin {
                name: p.stdin_name.clone().unwrap_or_else(|| "stdin".into()),
            });
            continue;
        }
        // `.` or `dir/..` name no file: the directory they stand for is sent under its name.
        let named = match f.file_name() {
            Some(n) => Some(PathBuf::from(n)),
            None => f
                .canonicalize()
                .ok()
                .and_then(|c| c.file_name().map(PathBuf::from)),
        };
        let name = named
            .as_deref()
            .and_then(|n| n.to_str())
            .ok_or_else(|| anyhow!("{} has no usable file name", f.display()))?;
        sources.push(Source::File {
            path: f.clone(),
            name: name.to_owned(),
        });
    }
    let scope = if p.auth_only {
        Scope::AuthOnly
    } else {
        Scope::Encrypt
    };
    let cfg = SendConfig {
        host: host_key,
        peer,
        owner,
        suite: p.suite,
        scope,
        streams: p
            .streams
            .map(usize::from)
            .unwrap_or_else(sealink_stream::default_streams),
        record_data: p.record_size,
        batch_data: 1 << 20,
        timeouts: p.timeouts.get(),
        key_data_records: None,
        resume: !p.no_resume,
        exclude: p.exclude,
        update: p.update,
        rate_limit: p.limit,
        copy_links: p.copy_links,
        delete: p.delete,
        list_entries: p.json,
    };
    if p.dry_run {
        return dry_run(&cfg, &sources, p.json);
    }
    if !p.quiet && !p.json {
        // Both ends print the owner's fingerprint: a trust file holding a mistyped key shows
        // as two different strings before any data is trusted.
        eprintln!(
            "to host {peer_name} at {addr} (host key {}), as owner key {}",
            sealink_keys::fingerprint(&peer),
            sealink_keys::fingerprint(&owner_key)
        );
    }
    let progress = Arc::new(Progress::default());
    let bar = BarThread::start(progress.clone(), p.quiet, "sending");
    let started = Instant::now();
    let r = sealink_stream::send(addr, &cfg, &sources, &progress);
    bar.finish();
    let meta = TransferMeta {
        peer: addr,
        host: peer_name,
        // This owner's name, when its trust file lists it (`sealink init` does).
        owner: trust.owner_name(&owner_key).map(str::to_owned),
        owner_key,
        suite: p.suite,
        scope,
    };
    let rep = match r {
        Ok(rep) => rep,
        Err(e) => {
            if p.json {
                print_records(&FileRecord::send_failed(
                    &meta,
                    &sources,
                    cfg.streams,
                    started.elapsed(),
                    &crate::error::chain(&e),
                ))?;
            }
            return Err(anyhow::Error::new(e).context(format!("sending to {addr} failed")));
        }
    };
    if p.json {
        print_records(&FileRecord::sent(&meta, &rep))?;
    } else if !p.quiet {
        crate::output::print(&format!("{}\n", summary::sent_line(&rep)))?;
    }
    if !rep.skipped_links.is_empty() && !p.quiet {
        eprintln!("{}", summary::skipped_links_line(rep.skipped_links.len()));
    }
    for line in rep.problems.iter().chain(&rep.vanished) {
        eprintln!("not sent: {line}");
    }
    if !rep.problems.is_empty() || !rep.vanished.is_empty() {
        return Err(Partial::of(rep.problems.len(), rep.vanished.len()).into());
    }
    Ok(())
}

/// `send --dry-run`: walks the sources as a transfer would, lists each entry that would be
/// sent (path, kind, size) on stdout, and what would be left out; connects to nothing.
fn dry_run(cfg: &SendConfig, sources: &[Source], json: bool) -> Result<()> {
    let mut out = String::new();
    let mut listing = summary::DryRun::default();
    let listed = sealink_stream::send::list(sources, &cfg.exclude, cfg.copy_links, |e| {
        out.push_str(&listing.line(e, json));
        // Printed as it goes: a listing of millions of entries is never held whole.
        if out.len() > 1 << 16 {
            let _ = crate::output::print(&std::mem::take(&mut out));
        }
    })?;
    if !json {
        out.push_str(&listing.total_line());
    }
    crate::output::print(&out)?;
    for line in listed.problems.iter().chain(&listed.vanished) {
        eprintln!("would not send: {line}");
    }
    if !listed.problems.is_empty() || !listed.vanished.is_empty() {
        return Err(Partial::of(listed.problems.len(), listed.vanished.len()).into());
    }
    Ok(())
}

pub fn recv(p: RecvArgs) -> Result<()> {
    // The arguments first: a bad one is a usage error whatever the home holds.
    let addr = resolve_listen(&p.listen)?;
    let me = p.me.identity();
    let (trust_path, trust) = crate::keys::receiving_trust(&me)?;
    let host = me.host()?;
    let to_stdout = p.stdout;
    // A --dir that does not exist yet is made (as rsync and croc do), with its parents.
    if !to_stdout && !p.dir.exists() {
        std::fs::create_dir_all(&p.dir)
            .with_context(|| format!("cannot create the directory {}", p.dir.display()))?;
        if !p.quiet {
            eprintln!("created {}", p.dir.display());
        }
    }
    let receiver = Receiver::bind(
        addr,
        RecvConfig {
            host,
            trusted_hosts: trust.hosts,
            trusted_owners: trust.owners,
            // Read again when it changes: `trust add` takes effect at the next connection.
            trust_file: Some(trust_path.clone()),
            dest: if to_stdout {
                Dest::Stdout
            } else {
                Dest::Dir(p.dir.clone())
            },
            overwrite: p.force,
            take_updates: p.update,
            timeouts: p.timeouts.get(),
            limits: ConnLimits {
                max_conns: p.max_conns,
                max_pending: p.max_pending,
                ..ConnLimits::default()
            },
            keep_group_other_write: p.keep_group_other_write,
            session_limits: Default::default(),
            resume_max_age: p.resume_max_age,
            resume_limits: Default::default(),
            tree_limits: sealink_proto::stream::TreeLimits {
                max_entries: p.max_entries,
                max_bytes: p
                    .max_bytes
                    .unwrap_or(sealink_proto::stream::TreeLimits::default().max_bytes),
                max_depth: usize::from(p.max_depth),
            },
            allow_delete: p.delete,
            list_entries: p.json,
            sync: !p.no_fsync,
        },
    )?;
    let quiet = p.quiet;
    if !quiet {
        eprintln!(
            "listening on {} (into {})",
            receiver.local_addr(),
            if to_stdout {
                "standard output".to_owned()
            } else {
                p.dir.display().to_string()
            }
        );
    }
    let progress = Arc::new(Progress::default());
    let bar = BarThread::start(progress.clone(), quiet || !p.once, "receiving");
    let json = p.json;
    let r = receiver.serve(p.once || to_stdout, progress, |r| match r {
        // A reader that went away ends the records, not the service.
        Ok(rep) if json => {
            let _ = print_records(&FileRecord::received(rep));
        }
        Ok(rep) if !quiet => {
            let line = summary::received_line(rep);
            if to_stdout {
                eprintln!("{line}");
            } else {
                let _ = crate::output::print(&format!("{line}\n"));
            }
        }
        Ok(_) => {}
        // Expected, and not the outcome: the receiver said it as a plain line already.
        Err(sealink_stream::TransferError::Superseded(_)) => {}
        Err(e) if !(p.once || to_stdout) => {
            eprintln!("error: transfer failed: {}", crate::error::chain(e));
        }
        Err(_) => {}
    });
    bar.finish();
    r.context("receiving failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse_with_units() {
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_age("90m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_age("0"), Ok(Duration::ZERO));
        assert_eq!(parse_age("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_age("7days"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_age("2w"), Ok(Duration::from_secs(14 * 86_400)));
        for bad in ["", "d", "7x", "-1d", "99999999999999d", "101years"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
    }
}
