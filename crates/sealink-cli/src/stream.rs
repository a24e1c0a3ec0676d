//! `sealink send` and `sealink recv`: stream mode from the command line. Loads keys and trust,
//! resolves the receiver, draws progress, prints the summary line.

mod args;

pub use args::{RECV_HELP, RecvArgs, SEND_HELP, SendArgs};
use std::io::IsTerminal;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{HumanBytes, HumanDuration, ProgressBar, ProgressDrawTarget, ProgressStyle};
use sealink_crypto::Scope;
use sealink_proto::stream::body::EntryKind;
use sealink_stream::{
    ConnLimits, Dest, FileRecord, Progress, Receiver, RecvConfig, SendConfig, Source, TransferMeta,
};

use anyhow::{Context, Result, anyhow, bail};

/// What `send` returns when it sent what it could and left some out (unreadable, vanished,
/// missing arguments): the command exits with [`EXIT_PARTIAL`].
#[derive(Debug)]
pub struct Partial(pub usize);

impl std::fmt::Display for Partial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "partial transfer: {} thing{} could not be sent (see the warnings above); the rest was \
             sent",
            self.0,
            if self.0 == 1 { "" } else { "s" }
        )
    }
}

impl std::error::Error for Partial {}

/// Exit status of a partial transfer (as rsync's 23: some files were not transferred).
pub const EXIT_PARTIAL: u8 = 23;

/// What an interrupted send says (issue 46: a Ctrl-C exited silently, a cut connection said only
/// "Connection reset by peer").
pub(crate) const RESUME_HINT: &str = "hint: the receiver keeps what arrived; run the same \
     command again to resume (--no-resume starts over)";

/// Whether `e` is a transfer cut short (the connection reset, closed or broken): one the same
/// command resumes.
pub(crate) fn resumable_cut(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::*;
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | TimedOut
            )
        }) || c
            .downcast_ref::<sealink_stream::TransferError>()
            .is_some_and(|t| {
                use sealink_stream::TransferError as T;
                // The receiver went away or stopped answering; an `Io` error's kind is
                // matched above through the chain.
                matches!(
                    t,
                    T::PeerClosed(_) | T::TimedOut(_) | T::ConnectionTimedOut(_)
                )
            })
    })
}

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

/// A port after the last `:` that is a number but no port (`:99999`; `:0` too unless
/// `zero_ok`, as for a listen address, where 0 asks for any free port): a usage error (exit 2)
/// naming it, rather than "cannot resolve".
fn check_port(what: &str, s: &str, zero_ok: bool) -> Result<()> {
    let Some((_, port)) = s.rsplit_once(':') else {
        return Ok(());
    };
    if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
        match port.parse::<u16>() {
            Ok(p) if p > 0 || zero_ok => {}
            _ => {
                let range = if zero_ok { "0-65535" } else { "1-65535" };
                return Err(crate::error::UsageError(format!(
                    "{what} {s:?}: port {port} is out of range ({range})"
                ))
                .into());
            }
        }
    }
    Ok(())
}

/// A listen address: `ADDR:PORT`, or a host or address alone on the default port.
pub(crate) fn resolve_listen(s: &str) -> Result<SocketAddr> {
    check_port("--listen", s, true)?;
    let with_port = if s.parse::<SocketAddr>().is_ok() {
        s.to_owned()
    } else {
        format!("{s}:{}", sealink_stream::DEFAULT_PORT)
    };
    with_port
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {s}"))?
        .next()
        .ok_or_else(|| anyhow!("{s} has no address"))
}

/// `[NAME@]HOST[:PORT]` → (trusted host name if given, socket address).
pub(crate) fn parse_dest(dest: &str) -> Result<(Option<String>, String, SocketAddr)> {
    let usage = |why: &str| -> anyhow::Error {
        crate::error::UsageError(format!(
            "destination {dest:?}: {why}; expected [NAME@]HOST[:PORT], e.g. bob@10.0.0.2"
        ))
        .into()
    };
    let (name, hostport) = match dest.split_once('@') {
        Some(("", _)) => return Err(usage("no name before @")),
        Some((n, h)) => (Some(n.to_owned()), h),
        None => (None, dest),
    };
    // `bob@` and `bob@:7878` name no host (`::1` is one).
    let only_port = hostport
        .strip_prefix(':')
        .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
    if hostport.is_empty() || only_port {
        return Err(usage("no host"));
    }
    check_port("destination", hostport, false)?;
    let with_port = if hostport.parse::<SocketAddr>().is_ok()
        || (hostport.matches(':').count() == 1 && !hostport.ends_with(']'))
    {
        hostport.to_owned()
    } else if hostport.starts_with('[') || !hostport.contains(':') {
        format!("{hostport}:{}", sealink_stream::DEFAULT_PORT)
    } else {
        format!("[{hostport}]:{}", sealink_stream::DEFAULT_PORT)
    };
    let addr = with_port
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {hostport}"))?
        .next()
        .ok_or_else(|| anyhow!("{hostport} has no address"))?;
    let host = hostport
        .rsplit_once(':')
        .filter(|(h, p)| p.parse::<u16>().is_ok() && !h.is_empty())
        .map_or(hostport, |(h, _)| h)
        .trim_matches(['[', ']'])
        .to_owned();
    Ok((name, host, addr))
}

/// A bar fed from `progress` by a thread until `stop`; hidden unless stderr is a terminal.
fn bar_thread(
    progress: Arc<Progress>,
    quiet: bool,
    label: &'static str,
) -> (Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    // A refused thread only costs the bar.
    let h = std::thread::Builder::new()
        .name("progress".into())
        .spawn(move || {
            if quiet || !std::io::stderr().is_terminal() {
                return;
            }
            // Created once bytes move (issue 46: a receiver's bar counted seconds with no
            // sender, and its rate was diluted by them; a sender's read `eta 0s` first).
            let mut pb: Option<ProgressBar> = None;
            let mut held = 0;
            while !s.load(Ordering::Relaxed) {
                let (total, done) = (progress.total(), progress.done());
                let phase = bar_phase(total, done);
                if phase == BarPhase::Waiting {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                let bar = pb.get_or_insert_with(|| {
                    let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
                    b.set_style(
                        ProgressStyle::with_template(
                            "{prefix:>9} {bytes} ({binary_bytes_per_sec}, {elapsed}){msg}",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    b.set_prefix(label);
                    b
                });
                // The bar covers what travels in this run only: the rate and the estimate are
                // over bytes sent, and what the receiver holds is shown beside them.
                if progress.held() != held {
                    held = progress.held();
                    bar.set_message(format!(" (+{} held, not sent)", HumanBytes(held)));
                }
                if phase == BarPhase::Sized && bar.length().is_none() {
                    bar.set_length(total.saturating_sub(held));
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{prefix:>9} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} \
                             eta {eta}{msg}",
                        )
                        .map(|st| st.progress_chars("=> "))
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                    );
                } else if phase == BarPhase::Sized {
                    bar.set_length(total.saturating_sub(held));
                }
                bar.set_position(done);
                std::thread::sleep(Duration::from_millis(100));
            }
            if let Some(bar) = pb {
                bar.finish_and_clear();
            }
        });
    (stop, h.ok())
}

/// What the progress bar shows for a transfer's `total` (0: not known yet, `u64::MAX`: no
/// size, standard input) and the bytes `done` in this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BarPhase {
    /// Nothing has moved (no sender yet, or the hello still in flight): no bar at all.
    Waiting,
    /// Bytes, rate and time, no size to measure them against.
    Counting,
    /// A bar against the size, with an estimate.
    Sized,
}

fn bar_phase(total: u64, done: u64) -> BarPhase {
    match (total, done) {
        (_, 0) => BarPhase::Waiting,
        (0 | u64::MAX, _) => BarPhase::Counting,
        _ => BarPhase::Sized,
    }
}

/// The summary line: sizes and rates in binary units (KiB, MiB, ...), the rate in Gbit/s too;
/// exact figures are in `--json`.
fn summary(verb: &str, bytes: u64, files: usize, streams: usize, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let per_sec = bytes as f64 / secs.max(1e-9);
    let took = if elapsed >= Duration::from_secs(60) {
        format!("{secs:.0} s ({})", HumanDuration(elapsed))
    } else {
        format!("{secs:.2} s")
    };
    // The bit rate only where it says something: "0.00 Gbit/s" after a small file did not.
    let gbits = per_sec * 8.0 / 1e9;
    let rate = if gbits >= 0.01 {
        format!("{}/s, {gbits:.2} Gbit/s", HumanBytes(per_sec as u64))
    } else {
        format!("{}/s", HumanBytes(per_sec as u64))
    };
    format!(
        "{verb} {} in {files} file{} over {streams} stream{} in {took} ({rate})",
        HumanBytes(bytes),
        if files == 1 { "" } else { "s" },
        if streams == 1 { "" } else { "s" },
    )
}

/// `; X held from an interrupted transfer, not sent again; N files up to date (Y), not sent`:
/// what the receiver had already, apart from what travelled.
fn held_note(resumed: u64, up_to_date_files: usize, up_to_date_bytes: u64) -> String {
    let mut parts = Vec::new();
    if resumed > 0 {
        parts.push(format!(
            "{} held from an interrupted transfer, not sent again",
            HumanBytes(resumed)
        ));
    }
    if up_to_date_files > 0 {
        parts.push(format!(
            "{up_to_date_files} file{} up to date ({}), not sent",
            if up_to_date_files == 1 { "" } else { "s" },
            HumanBytes(up_to_date_bytes)
        ));
    }
    parts.iter().map(|p| format!("; {p}")).collect()
}

/// The summary line from a report's counts (the reports list entries only for `--json`).
#[allow(clippy::too_many_arguments)]
fn summary_counts(
    verb: &str,
    bytes: u64,
    entries: u64,
    dirs: u64,
    links: u64,
    resumed: u64,
    up_to_date: (u64, u64),
    streams: usize,
    elapsed: Duration,
    middle: &str,
) -> String {
    let sent = bytes.saturating_sub(resumed + up_to_date.1);
    let files = entries.saturating_sub(dirs + links + up_to_date.0);
    summary(verb, sent, files as usize, streams, elapsed)
        + middle
        + &held_note(resumed, up_to_date.0 as usize, up_to_date.1)
}

/// ` (2 directories, 1 link; ...)` for what is not a plain file.
fn tree_note(dirs: u64, links: u64, special: u64, excluded: u64) -> String {
    let count = |n: u64, one: &str, many: &str| match n {
        0 => None,
        1 => Some(format!("1 {one}")),
        n => Some(format!("{n} {many}")),
    };
    let parts: Vec<String> = [
        count(dirs, "directory", "directories"),
        count(links, "link", "links"),
        count(special, "special file skipped", "special files skipped"),
        count(excluded, "entry excluded", "entries excluded"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// `--resume-max-age`: seconds, or with units (90m, 12h, 7d, 7days), at most 100 years.
pub(crate) fn parse_age(s: &str) -> Result<Duration, String> {
    let d = crate::units::parse_duration(s)?;
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
    let (name, host, addr) = parse_dest(&p.dest)?;
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
    let (stop, bar) = bar_thread(progress.clone(), p.quiet, "sending");
    let started = Instant::now();
    let r = sealink_stream::send(addr, &cfg, &sources, &progress);
    stop.store(true, Ordering::Relaxed);
    if let Some(bar) = bar {
        let _ = bar.join();
    }
    let listed: Vec<(&str, Option<&Path>)> = sources
        .iter()
        .map(|s| match s {
            Source::File { path, name } => (name.as_str(), Some(path.as_path())),
            Source::Stdin { name } => (name.as_str(), None),
        })
        .collect();
    let meta = TransferMeta {
        peer: addr,
        host: peer_name,
        // This owner's name, when its trust file lists it (`sealink init` does).
        owner: trust
            .owners
            .iter()
            .find(|(_, k)| *k == owner_key)
            .map(|(n, _)| n.clone()),
        owner_key,
        suite: p.suite,
        scope,
    };
    let rep = match r {
        Ok(rep) => rep,
        Err(e) => {
            if p.json {
                let sized: Vec<(&str, Option<&Path>, u64)> = listed
                    .iter()
                    .map(|&(n, path)| {
                        let size = path
                            .and_then(|f| std::fs::metadata(f).ok())
                            .filter(std::fs::Metadata::is_file)
                            .map_or(0, |m| m.len());
                        (n, path, size)
                    })
                    .collect();
                print_records(&FileRecord::send_failed(
                    &meta,
                    &sized,
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
        let tree = tree_note(rep.dirs, rep.links, rep.special.len() as u64, rep.excluded);
        let line = summary_counts(
            "sent",
            rep.bytes,
            rep.files as u64,
            rep.dirs,
            rep.links,
            rep.resumed_bytes,
            (rep.up_to_date_files, rep.up_to_date_bytes),
            rep.streams,
            rep.elapsed,
            &tree,
        );
        crate::output::print(&format!("{line}\n"))?;
    }
    if !rep.skipped_links.is_empty() && !p.quiet {
        eprintln!(
            "skipped {} link{} that {} absolute or {} out of {} tree (--copy-links sends what they point to)",
            rep.skipped_links.len(),
            if rep.skipped_links.len() == 1 {
                ""
            } else {
                "s"
            },
            if rep.skipped_links.len() == 1 {
                "is"
            } else {
                "are"
            },
            if rep.skipped_links.len() == 1 {
                "leads"
            } else {
                "lead"
            },
            if rep.skipped_links.len() == 1 {
                "its"
            } else {
                "their"
            },
        );
    }
    if !rep.problems.is_empty() {
        for line in &rep.problems {
            eprintln!("not sent: {line}");
        }
        return Err(Partial(rep.problems.len()).into());
    }
    Ok(())
}

/// `send --dry-run`: walks the sources as a transfer would, lists each entry that would be
/// sent (path, kind, size) on stdout, and what would be left out; connects to nothing.
fn dry_run(cfg: &SendConfig, sources: &[Source], json: bool) -> Result<()> {
    let mut out = String::new();
    let mut n = 0u64;
    let mut bytes = 0u64;
    let listed = sealink_stream::send::list(sources, &cfg.exclude, cfg.copy_links, |e| {
        n += 1;
        let (kind, size) = match &e.kind {
            EntryKind::File => ("file", e.size),
            EntryKind::Dir => ("dir", 0),
            EntryKind::Symlink(_) => ("link", 0),
        };
        if e.size != u64::MAX {
            bytes += size;
        }
        if json {
            out.push_str(
                &serde_json::json!({"dry_run": true, "name": e.name, "kind": kind, "bytes": size})
                    .to_string(),
            );
            out.push('\n');
        } else {
            out.push_str(&format!("{kind:4} {size:>12} {}\n", e.name));
        }
        // Printed as it goes: a listing of millions of entries is never held whole.
        if out.len() > 1 << 16 {
            let _ = crate::output::print(&std::mem::take(&mut out));
        }
    })?;
    if !json {
        out.push_str(&format!(
            "dry run: would send {n} entries ({}); nothing was sent\n",
            HumanBytes(bytes)
        ));
    }
    crate::output::print(&out)?;
    for line in &listed.problems {
        eprintln!("would not send: {line}");
    }
    if !listed.problems.is_empty() {
        return Err(Partial(listed.problems.len()).into());
    }
    Ok(())
}

pub fn recv(p: RecvArgs) -> Result<()> {
    // The arguments first: a bad one is a usage error whatever the home holds.
    let addr = resolve_listen(&p.listen)?;
    let me = p.me.identity();
    let (trust_path, trust) = me.read_trust()?;
    if trust.hosts.is_empty() || trust.owners.is_empty() {
        bail!(
            "{} must trust at least one host and one owner to receive anything",
            trust_path.display()
        );
    }
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
    let (stop, bar) = bar_thread(progress.clone(), quiet || !p.once, "receiving");
    let json = p.json;
    let r = receiver.serve(p.once || to_stdout, progress, |r| match r {
        // A reader that went away ends the records, not the service.
        Ok(rep) if json => {
            let _ = print_records(&FileRecord::received(rep));
        }
        Ok(rep) if !quiet => {
            let deleted = if rep.deleted > 0 {
                format!(", {} deleted", rep.deleted)
            } else {
                String::new()
            };
            let middle = tree_note(rep.dirs, rep.links, 0, 0)
                + &deleted
                + &format!(
                    " from {} (host {}, owner {}, owner key {})",
                    rep.peer,
                    rep.host,
                    rep.owner,
                    sealink_keys::fingerprint(&rep.owner_key)
                );
            let line = summary_counts(
                "received",
                rep.bytes,
                rep.entries,
                rep.dirs,
                rep.links,
                rep.resumed_bytes,
                (rep.up_to_date_files, rep.up_to_date_bytes),
                rep.streams,
                rep.elapsed,
                &middle,
            );
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
    stop.store(true, Ordering::Relaxed);
    if let Some(bar) = bar {
        let _ = bar.join();
    }
    r.context("receiving failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_parse() {
        let (n, h, a) = parse_dest("bob@127.0.0.1:9000").unwrap();
        assert_eq!(
            (n.as_deref(), h.as_str(), a.port()),
            (Some("bob"), "127.0.0.1", 9000)
        );
        let (n, h, a) = parse_dest("127.0.0.1").unwrap();
        assert_eq!(
            (n, h.as_str(), a.port()),
            (None, "127.0.0.1", sealink_stream::DEFAULT_PORT)
        );
        let (_, h, a) = parse_dest("[::1]:7").unwrap();
        assert_eq!((h.as_str(), a.port()), ("::1", 7));
        let (_, _, a) = parse_dest("::1").unwrap();
        assert_eq!(a.port(), sealink_stream::DEFAULT_PORT);
        assert!(parse_dest("no-such-host.invalid").is_err());
    }

    #[test]
    fn the_bar_waits_for_bytes_and_sizes_itself_once_known() {
        assert_eq!(bar_phase(0, 0), BarPhase::Waiting);
        assert_eq!(bar_phase(5 << 20, 0), BarPhase::Waiting);
        assert_eq!(bar_phase(u64::MAX, 1), BarPhase::Counting);
        assert_eq!(bar_phase(0, 7), BarPhase::Counting);
        assert_eq!(bar_phase(5 << 20, 1), BarPhase::Sized);
    }

    #[test]
    fn summaries_use_binary_units() {
        let s = summary("sent", 3 << 20, 2, 1, Duration::from_millis(500));
        assert_eq!(
            s,
            "sent 3.00 MiB in 2 files over 1 stream in 0.50 s (6.00 MiB/s, 0.05 Gbit/s)"
        );
        let s = summary("received", 5, 1, 4, Duration::from_secs(150));
        assert_eq!(
            s,
            "received 5 B in 1 file over 4 streams in 150 s (3 minutes) (0 B/s)"
        );
    }

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
        assert_eq!(held_note(0, 0, 0), "");
        assert_eq!(
            held_note(1 << 20, 0, 0),
            "; 1.00 MiB held from an interrupted transfer, not sent again"
        );
        assert_eq!(
            held_note(1 << 20, 2, 12),
            "; 1.00 MiB held from an interrupted transfer, not sent again; 2 files up to date \
             (12 B), not sent"
        );
    }
}
