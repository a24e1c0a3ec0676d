//! The arguments of `sealink send` and `sealink recv`, which `send` and `recv` take as they
//! are, and their help epilogues.

use std::path::PathBuf;
use std::time::Duration;

use sealink_crypto::SuiteId;

use super::parse_age;
use sealink_cmdline::units;

use crate::{HostArgs, IdentityArgs, suite_parser};

pub const SEND_HELP: &str = "Examples:
  sealink send big.iso 10.0.0.2
  sealink send a.bin b.bin bob@10.0.0.2:7878 --streams 4
  tar c dir | sealink send - 10.0.0.2 --as dir.tar

Keys and trust default to $SEALINK_HOME (else ~/.sealink if it exists, else ~/.config/sealink): host.key, owner.key, trust. The receiver
must trust this host's and this owner's public keys; this side must trust the receiver's host key
(`host NAME KEY` in the trust file; NAME@ picks one when several are trusted).
`sealink send` exits 0 only after the receiver confirms it holds every file complete. A receiver
that takes no data for --idle-timeout seconds (stalled, or a dead route) fails the transfer.
With --json, stdout gets one JSON object a line per file (result ok, or failed with error) and
no summary line.
--update skips files the receiver has with the same size and mtime and sends the rest; adding
to or replacing in what the receiver has needs its consent (`sealink recv --update` or --force),
and a refusal says which side can do what.
An interrupted transfer resumes when the same command runs again: the receiver keeps what it
holds of each file (bound to this owner key and the file's name, size and mtime), only the rest
is sent, and the whole file's SHA-256 is checked before it is stored. --no-resume starts over.
A tree of any size goes as it is walked, its list of entries in batches; a new tree that was
interrupted resumes from what the receiver already stored of it.
What cannot be sent (a missing argument, an unreadable or vanished file) is reported and left
out, and the rest is sent. Links that are absolute or lead out of their tree are skipped with a
warning (--copy-links sends what they point to). --dry-run lists what would be sent.

Exit status: 0 everything sent and confirmed; 23 partial: some things could not be sent (each
named on standard error), the rest was; 24 partial: only files that vanished or changed while
being sent were left out (the receiver kept what it had there); 1 the transfer failed; 2 bad
usage.";

pub const RECV_HELP: &str = "Examples:
  sealink recv --dir /srv/incoming
  sealink recv --listen 127.0.0.1:9000 --dir . --once
  sealink recv --once --stdout > dir.tar

Each file is written under a hidden temporary name and renamed only after its last record has
been verified and the stream's authenticated end has arrived; a failed transfer leaves no file
under its name. What arrived of a file (not of standard input) is kept, private, as hidden
.sealink-resume-* state for the same owner's next attempt, cut down to what it holds. At start-up,
state older than --resume-max-age is deleted, as are part files and staging directories of a
receiver that crashed; kept state is bounded per owner and in total (the newest kept first).
Existing files are kept unless --force: a transfer that would change one is refused. With
--update, a sender's `send --update` may add to existing directories and replace files that
changed; a directory's own mode and mtime change only with --force. Received names never take
the receiver's own (.sealink-*, .*.sealink-part). With --stdout, data is written in order as it
arrives.
A new tree is assembled in a hidden staging directory and renamed into place once complete; an
interrupted one keeps its staging directory for the same owner's next attempt. --max-entries,
--max-bytes and --max-depth bound what one transfer may announce (refusals name the flag).
--delete lets a sender's `send --delete` remove, inside the directories its tree merges into,
what the sender no longer has; without it such a transfer is refused.
A connection must authenticate within --setup-timeout; until it has, it holds no slot of --once
and may be closed to make room (--max-pending, oldest first). A transfer that receives nothing for
--idle-timeout seconds fails, and its temporary files are removed.
With --json, stdout gets one JSON object a line for each file stored (name, path, bytes, seconds,
peer, host, owner, suite, ...) instead of the summary lines; failures go to stderr.";

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// Files and directories to send (a directory goes as a tree: its files, directories and
    /// links, with modes and mtimes); "-" reads standard input and must come last
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The receiver: [NAME@]HOST[:PORT] (port 7878 by default; NAME picks its trusted host key)
    pub dest: String,
    /// Trusted host name of the receiver (instead of NAME@)
    #[arg(long)]
    pub peer: Option<String>,
    #[command(flatten)]
    pub me: IdentityArgs,
    /// TCP connections to stripe over [default: one per core, at most 8]
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub streams: Option<u16>,
    /// AEAD suite of the records
    #[arg(long, default_value = "aes128-gcm", value_parser = suite_parser(), ignore_case = true)]
    pub suite: SuiteId,
    /// Authenticate only: data travels in clear, every record still carries a tag
    #[arg(long)]
    pub auth_only: bool,
    /// Data bytes per record
    #[arg(long, default_value_t = sealink_stream::DEFAULT_RECORD_DATA, value_parser = parse_record_size)]
    pub record_size: usize,
    /// Name under which standard input ("-") is stored [default: stdin]
    #[arg(long = "as", value_name = "NAME")]
    pub stdin_name: Option<String>,
    /// Start every file over: the receiver discards what it kept of an interrupted transfer
    #[arg(long)]
    pub no_resume: bool,
    /// Leave out of directory trees what matches this gitignore-style pattern, matched against
    /// paths relative to each directory given (`*.log`, `build/`, `/only-at-the-top`);
    /// repeatable
    #[arg(long, value_name = "PATTERN")]
    pub exclude: Vec<String>,
    /// Update what the receiver has: send no data for files it already has with the same size
    /// and mtime, and add to and replace in existing directories. The receiver must agree
    /// (`sealink recv --update` or `--force`); without that, a transfer that would change
    /// anything it has is refused, and an up-to-date file alone is only skipped
    #[arg(long)]
    pub update: bool,
    /// Send what absolute links, and links leading out of their tree, point to (by default
    /// such links are skipped with a warning; links inside the tree always go as links)
    #[arg(long)]
    pub copy_links: bool,
    /// List what would be sent (path, kind, size) and what would be left out; connect to
    /// nothing, change nothing
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Delete at the receiver, in the directories this transfer merges into, what the sender
    /// no longer has. The receiver must allow it (`sealink recv --delete`), else the transfer
    /// is refused; nothing outside the directories sent is ever touched
    #[arg(long)]
    pub delete: bool,
    /// Most bytes per second to send, over all streams together: a number with an optional
    /// unit, k/M/G powers of 1000 (10M = 10 MB/s), Ki/Mi/Gi powers of 1024 (10MiB), or bits
    /// (80Mbit = 10 MB/s); at least 1KiB. Counts the sealed records written (file data plus
    /// 32 bytes a record), not TCP/IP headers
    #[arg(long, value_name = "RATE", value_parser = units::parse_rate)]
    pub limit: Option<u64>,
    #[command(flatten)]
    pub timeouts: TimeoutArgs,
    /// No progress bar, no summary line
    #[arg(long, short)]
    pub quiet: bool,
    /// Print one JSON object a line on stdout for each file (delivered or failed) instead of
    /// the summary line (schema: sealink_stream::report::FileRecord)
    #[arg(long)]
    pub json: bool,
}

/// Timeouts of stream mode (both sides).
#[derive(Debug, clap::Args)]
pub struct TimeoutArgs {
    /// How long to connect, shake hands and gather the stripes (on the receiver: from a
    /// connection's arrival until its peer has authenticated); seconds, or with a unit (30s, 2m)
    #[arg(long, value_name = "DURATION", default_value_t = 10.0, value_parser = parse_stream_timeout)]
    pub setup_timeout: f64,
    /// How long a transfer may go without progress before both sides give up (also the
    /// sender's wait for the receiver's final confirmation); seconds, or with a unit (90s, 5m)
    #[arg(long, value_name = "DURATION", default_value_t = 60.0, value_parser = parse_stream_timeout)]
    pub idle_timeout: f64,
}

impl TimeoutArgs {
    pub fn get(&self) -> sealink_stream::Timeouts {
        sealink_stream::Timeouts {
            setup: Duration::from_secs_f64(self.setup_timeout),
            idle: Duration::from_secs_f64(self.idle_timeout),
        }
    }
}

fn parse_conn_count(s: &str) -> Result<usize, String> {
    units::parse_within(s, 1, 65_536)
}

fn parse_stream_timeout(s: &str) -> Result<f64, String> {
    units::parse_secs_within(s, 0.01, 86_400.0)
}

fn parse_record_size(s: &str) -> Result<usize, String> {
    use sealink_proto::stream::record::{MAX_RECORD_DATA, MIN_RECORD_DATA};
    units::parse_within(s, MIN_RECORD_DATA, MAX_RECORD_DATA)
}

#[derive(Debug, clap::Args)]
pub struct RecvArgs {
    /// Address to listen on (ADDR:PORT, or ADDR for port 7878)
    #[arg(long, default_value = "0.0.0.0:7878")]
    pub listen: String,
    /// Directory to store received files in
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Write the received data to standard output instead (implies --once)
    #[arg(long, conflicts_with = "dir")]
    pub stdout: bool,
    /// Serve one transfer, then exit with its outcome
    #[arg(long)]
    pub once: bool,
    /// Replace existing files and links, and merge received trees into existing directories,
    /// setting their modes and mtimes (never deleting anything the sender did not send)
    #[arg(long)]
    pub force: bool,
    /// Take updates from senders that ask for them (`sealink send --update`): add entries to
    /// existing directories, which keep their own modes and mtimes, and replace files and links
    /// that changed by ones of the same kind; files with the same size and mtime are kept, not
    /// sent again
    #[arg(long)]
    pub update: bool,
    /// Let received files keep group and other write permission when the sender's mode has it
    /// (still within the umask). Without it, received files never get group or other write;
    /// setuid, setgid and sticky bits are never kept
    #[arg(long)]
    pub keep_group_other_write: bool,
    #[command(flatten)]
    pub me: HostArgs,
    #[command(flatten)]
    pub timeouts: TimeoutArgs,
    /// Most connections held at once (each holds a thread; a stripe also a 4 MiB buffer)
    #[arg(long, value_name = "N", default_value_t = sealink_stream::ConnLimits::default().max_conns,
          value_parser = parse_conn_count)]
    pub max_conns: usize,
    /// Most connections held at once that have not authenticated (the oldest is closed
    /// to make room; one source address may hold at most 64)
    #[arg(long, value_name = "N", default_value_t = sealink_stream::ConnLimits::default().max_pending,
          value_parser = parse_conn_count)]
    pub max_pending: usize,
    /// Delete resume state of interrupted transfers older than this at start-up (seconds, or
    /// with a unit: 90m, 12h, 7d, 7days)
    #[arg(long, value_name = "AGE", default_value = "7d", value_parser = parse_age)]
    pub resume_max_age: Duration,
    /// Let senders that ask for it (`sealink send --delete`) delete, in the directories their
    /// transfer merges into, what they no longer have (never anything else)
    #[arg(long)]
    pub delete: bool,
    /// Do not fsync received files before they take their names (as rsync by default):
    /// faster for many small files, but a crash of this host can then leave a file under its
    /// name without all of its data
    #[arg(long)]
    pub no_fsync: bool,
    /// Most entries (files, directories, links) one transfer may announce
    #[arg(long, value_name = "N", default_value_t = sealink_proto::stream::TreeLimits::default().max_entries)]
    pub max_entries: u64,
    /// Most bytes of files one transfer may announce, with an optional unit (k/M/G/T powers of
    /// 1000, Ki/Mi/Gi/Ti powers of 1024) [default: 64TiB]
    #[arg(long, value_name = "SIZE", value_parser = units::parse_size)]
    pub max_bytes: Option<u64>,
    /// Most components in one path of a transfer (at most 128)
    #[arg(long, value_name = "N", default_value_t = 128,
          value_parser = clap::value_parser!(u16).range(1..=128))]
    pub max_depth: u16,
    /// No progress bar, no summary lines
    #[arg(long, short)]
    pub quiet: bool,
    /// Print one JSON object a line on stdout for each file stored instead of the summary
    /// lines (schema: sealink_stream::report::FileRecord)
    #[arg(long, conflicts_with = "stdout")]
    pub json: bool,
}
