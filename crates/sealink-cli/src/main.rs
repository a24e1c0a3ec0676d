//! `sealink`: keys and trust, stream, datagram and tunnel modes, and a loopback demo.
//! The papers' benchmarks, the simulated demo and the fault relay are not here: they are the `sealink-lab` binary
//! (crates/sealink-lab), which this crate does not depend on.
#![forbid(unsafe_code)]

mod demo;
mod error;
mod keys;
mod manpage;
mod msg;
mod output;
mod pair;
mod stream;
mod tunnel;
mod units;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use sealink_crypto::SuiteId;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

use anyhow::{Context, Result};
use sealink_keys::KeyKind;

#[derive(Debug, Parser)]
#[command(
    name = "sealink",
    version,
    about = "Encrypted file transfer, VPN tunnels (also on WireGuard's wire) and messages between hosts and their owners",
    after_help = "Examples:\n  sealink keygen host /etc/sealink/host.key\n  sealink demo\n  sealink send big.iso 10.0.0.2\n\nLogs go to stderr (colour only on a terminal, never with NO_COLOR set); -v, -vv, -vvv or RUST_LOG (e.g. RUST_LOG=debug) show more.\n\nExit status: 0 success; 1 the command failed (network, files, keys, a transfer); 2 usage error (bad arguments or options)."
)]
struct Cli {
    /// More log output: -v info, -vv debug, -vvv trace (RUST_LOG, when set, decides instead)
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Less log output: errors only (RUST_LOG, when set, decides instead). After send, recv
    /// and msg send, -q/--quiet also drops their progress and summary lines
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

const RELOAD_HELP: &str = "Examples:\n  sealink reload sl0\n  sealink reload /etc/wireguard/wg0.conf\n  systemctl reload sealink@wg0\n\nCONFIG is resolved as `sealink up` resolves it (sealink@.service runs `sealink up %i` and\n`sealink reload %i`, so /etc/sealink/NAME.toml or /etc/wireguard/NAME.conf) and must be the\nfile the tunnel was started from; a NAME with neither file reloads the file the tunnel NAME was\nstarted from; SIGHUP to `sealink up` does the same. Peers are matched by public key: new ones are\nadded, missing ones removed (their sessions and routes dropped), kept ones take the new\nallowed_ips, endpoint and persistent_keepalive without a new handshake. Interface settings\n(private key, address, listen_port, mtu, queues, workers, piggyback, hooks) need a restart:\nsuch a reload is refused and the running config stays, as it does when the file does not\nparse. Exit status 1 with the reason when refused.";

/// Exit status of a usage error (bad arguments), as clap and rsync use it.
const EXIT_USAGE: u8 = 2;

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate a host or owner key pair (PATH, mode 0600, and PATH.pub)
    #[command(
        after_help = "Example:\n  sealink keygen owner ./alice.key\n\n`sealink init` makes this home's keys and trust file in one step."
    )]
    Keygen(KeygenArgs),
    /// Print the public key line, fingerprint or trust line of a key file (private or .pub)
    #[command(
        after_help = "Examples:\n  sealink pubkey ./alice.key\n  sealink pubkey --fingerprint ./alice.key.pub"
    )]
    Pubkey(PubkeyArgs),
    /// Set up $SEALINK_HOME: a host key, an owner key and a trust file; prints what a peer adds
    #[command(
        after_help = "Example:\n  sealink init --owner-name alice\n\nExisting keys are kept. The printed `sealink trust add` lines go to the peer."
    )]
    Init(InitArgs),
    /// Pair with another host by a short code: both trust each other's host and owner keys
    #[command(after_help = PAIR_HELP)]
    Pair(PairArgs),
    /// Work with trust files (the owners and hosts a node believes)
    #[command(
        subcommand,
        after_help = "Examples:\n  sealink trust check /etc/sealink/trust\n  sealink trust check --json /etc/sealink/trust | jq .ok"
    )]
    Trust(TrustCommand),
    /// Two hosts with throwaway keys exchange messages over UDP on 127.0.0.1; checks each arrives once
    #[command(
        after_help = "Example:\n  sealink demo --messages 500\n\nReal sockets and the product's own code, no simulator. Two hosts over a simulated lossy\nlink, with piggybacking on and off: `sealink-lab demo` (cargo run --release -p sealink-lab -- demo)."
    )]
    Demo(demo::DemoArgs),
    /// Send files (or standard input) to a `sealink recv`, sealed and striped over TCP
    #[command(after_help = SEND_HELP)]
    Send(SendArgs),
    /// Receive files from `sealink send` into a directory (or standard output)
    #[command(after_help = RECV_HELP)]
    Recv(RecvArgs),
    /// Datagram mode: owner-authenticated messages over UDP (`listen` prints, `send` delivers)
    #[command(subcommand, after_help = MSG_HELP)]
    Msg(MsgCommand),
    /// Tunnel mode: bring up a TUN interface carrying IP packets to peers (foreground)
    #[command(after_help = tunnel::UP_HELP)]
    Up(UpArgs),
    /// Re-read a running tunnel's config and apply its peer changes (live sessions stay)
    #[command(after_help = RELOAD_HELP)]
    Reload(UpArgs),
    /// Stop the tunnel NAME started by `sealink up` and wait until its interface is gone
    #[command(after_help = "Example:\n  sealink down sl0")]
    Down(DownArgs),
    /// Print tunnel peers, endpoints, handshakes, bytes, datagrams and drops by reason
    #[command(after_help = "Examples:\n  sealink show\n  sealink show sl0\n  sealink show --json")]
    Show(ShowArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout
    #[command(
        after_help = "Examples:\n  sealink completions bash > /etc/bash_completion.d/sealink\n  sealink completions zsh > \"${fpath[1]}/_sealink\""
    )]
    Completions(CompletionsArgs),
    /// Print the man page (roff) to stdout, or write every command's page into a directory
    #[command(
        after_help = "Examples:\n  sealink man > /usr/local/share/man/man1/sealink.1\n  sealink man --dir /usr/local/share/man/man1"
    )]
    Man(ManArgs),
    /// A running tunnel's root helper, started by `up` (sealink_tunnel::helper); not for direct use
    #[command(name = sealink_tunnel::helper::SUBCOMMAND, hide = true)]
    TunnelHelper(TunnelHelperArgs),
}

#[derive(Debug, Args)]
struct TunnelHelperArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

const PAIR_HELP: &str = "Examples:
  sealink pair                                  (host B: prints a code such as 7-guitar-ocean)
  sealink pair 7-guitar-ocean hostb.example      (host A: types the code B printed)

Both hosts need keys ($SEALINK_HOME: `sealink init`). The two sides run SPAKE2 over TCP (port
7879) with the code as the password, confirm they hold the same key, then exchange their host and
owner public keys sealed with it. Each side shows all four fingerprints and adds `host NAME KEY`
and `owner NAME KEY` (NAME: the peer's --name, by default its host name) to its trust file. A key
already trusted under another name is kept and not listed again; a NAME already listed with
another key adds nothing and fails. A wrong code fails on both sides before any key is sent. The
listener serves one attempt, right or wrong, and exits: a code works once.";

#[derive(Debug, Args)]
struct PairArgs {
    /// The code the listening host printed; with HOST, connect to it instead of listening
    #[arg(requires = "host")]
    code: Option<String>,
    /// The listening host: HOST[:PORT] (port 7879 by default)
    host: Option<String>,
    /// Address to listen on, waiting for a code (ADDR:PORT, or ADDR for port 7879)
    #[arg(long, default_value = "0.0.0.0:7879", conflicts_with = "code")]
    listen: String,
    /// Seconds the listener waits for the other host before the code expires
    #[arg(long, default_value_t = 600.0, value_parser = parse_timeout, conflicts_with = "code")]
    timeout: f64,
    /// Listen with this code instead of a fresh random one (tests and scripts)
    #[arg(long = "with-code", hide = true, conflicts_with = "code")]
    with_code: Option<String>,
    /// This side's name in the peer's trust file [default: the system host name]
    #[arg(long)]
    name: Option<String>,
    /// This host's private key [default: $SEALINK_HOME/host.key]
    #[arg(long)]
    key: Option<PathBuf>,
    /// This owner's private key [default: $SEALINK_HOME/owner.key]
    #[arg(long)]
    owner: Option<PathBuf>,
    /// Trust file to add the peer to [default: $SEALINK_HOME/trust]
    #[arg(long)]
    trust: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ManArgs {
    /// The command whose page to print (`sealink man msg send`) [default: sealink(1)]
    #[arg(value_name = "COMMAND", conflicts_with = "dir")]
    command: Vec<String>,
    /// Write one page per command into DIR (sealink.1, sealink-send.1, sealink-msg-send.1, ...)
    /// and list them, instead of printing one page
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct CompletionsArgs {
    /// Shell to complete for
    shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
struct UpArgs {
    /// Tunnel configuration file (TOML; see the example below), or a NAME standing for
    /// /etc/sealink/NAME.toml (a NAME has no `/` and does not end in `.toml`)
    config: PathBuf,
    #[command(flatten)]
    run_dir: RunDirArg,
}

#[derive(Debug, Args)]
struct DownArgs {
    /// Interface name given in the configuration (`[interface] name`)
    name: String,
    #[command(flatten)]
    run_dir: RunDirArg,
}

#[derive(Debug, Args)]
struct ShowArgs {
    /// Interface name; all running tunnels of this network namespace if left out
    name: Option<String>,
    /// Print a JSON array with one object per interface (schema: sealink_tunnel::control::Status)
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    run_dir: RunDirArg,
}

#[derive(Debug, Args)]
struct RunDirArg {
    /// Directory of the control sockets (one 0700 subdirectory per network namespace)
    /// [default: $SEALINK_RUN_DIR, else /run/sealink]
    #[arg(long, value_name = "DIR")]
    run_dir: Option<PathBuf>,
}

const SEND_HELP: &str = "Examples:
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
named on standard error), the rest was; 1 the transfer failed; 2 bad usage.";

const RECV_HELP: &str = "Examples:
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

const MSG_HELP: &str = "Examples:
  sealink msg listen --listen 0.0.0.0:7878
  sealink msg send 10.0.0.2 'hello' 'second message' --to inbox --urgent
  sealink msg listen --json --count 1

Keys and trust default to $SEALINK_HOME (else ~/.sealink if it exists, else ~/.config/sealink): host.key, owner.key, trust, as for
`sealink send`. The listener trusts the `host` and `owner` lines of its trust file; the sender
must trust the listener's host key and names itself after the `owner` line matching its key.";

#[derive(Debug, Subcommand)]
enum MsgCommand {
    /// Receive messages and print each: sender owner@host, scope, size, text (or hex)
    #[command(after_help = MSG_LISTEN_HELP)]
    Listen(MsgListenArgs),
    /// Send messages to a `sealink msg listen`; exits 0 once every one is acknowledged
    #[command(after_help = MSG_SEND_HELP)]
    Send(MsgSendArgs),
}

const MSG_LISTEN_HELP: &str = "Examples:
  sealink msg listen
  sealink msg listen --listen 127.0.0.1:9000 --count 3
  sealink msg listen --json | jq .text

Each message prints as one line: `OWNER@HOST [to DEST] [SCOPE, N bytes]: TEXT`, where OWNER is
verified against its signature and the trust file and HOST is the trusted host whose channel
carried it; bytes that are not printable UTF-8 print as hex:... With --json, one object a line
with from, peer, to, scope, bytes and text or hex. Runs until a signal, or --count messages.";

const MSG_SEND_HELP: &str = "Examples:
  sealink msg send 10.0.0.2 hello
  sealink msg send bob@10.0.0.2:9000 'disk full' --to ops --urgent
  sealink msg send 10.0.0.2 a b c --deadline 50 --auth-only

Each MESSAGE argument is one message. Non-urgent messages may wait (up to the default 10 ms, or
--deadline) to ride together in one datagram; --urgent sends at once. The command exits 0 only
after the receiver has acknowledged every message, and fails after --timeout otherwise.";

#[derive(Debug, Args)]
struct MsgListenArgs {
    /// UDP address to listen on (ADDR:PORT, or ADDR for port 7878)
    #[arg(long, default_value = "0.0.0.0:7878")]
    listen: String,
    /// This host's private key [default: $SEALINK_HOME/host.key]
    #[arg(long)]
    key: Option<PathBuf>,
    /// Trust file: hosts that may open channels, owners that may send [default: $SEALINK_HOME/trust]
    #[arg(long)]
    trust: Option<PathBuf>,
    /// Print one JSON object per message
    #[arg(long)]
    json: bool,
    /// Exit after this many messages
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
}

#[derive(Debug, Args)]
struct MsgSendArgs {
    /// The receiver: [NAME@]HOST[:PORT] (UDP port 7878 by default; NAME picks its trusted host key)
    dest: String,
    /// Messages, one per argument
    #[arg(required = true)]
    messages: Vec<String>,
    /// Trusted host name of the receiver (instead of NAME@)
    #[arg(long)]
    peer: Option<String>,
    /// This host's private key [default: $SEALINK_HOME/host.key]
    #[arg(long)]
    key: Option<PathBuf>,
    /// The sending owner's private key [default: $SEALINK_HOME/owner.key]
    #[arg(long)]
    owner: Option<PathBuf>,
    /// The sending owner's name [default: the trust file's `owner` line with this key]
    #[arg(long)]
    from: Option<String>,
    /// Destination owner at the receiver [default: the receiving host itself]
    #[arg(long)]
    to: Option<String>,
    /// Trust file [default: $SEALINK_HOME/trust]
    #[arg(long)]
    trust: Option<PathBuf>,
    /// Send at once, taking any queued messages along
    #[arg(long, conflicts_with = "deadline")]
    urgent: bool,
    /// Longest a message may wait to ride with others, in milliseconds
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    deadline: Option<u64>,
    /// Authenticate only: the message travels in clear, with a tag
    #[arg(long)]
    auth_only: bool,
    /// Local UDP address [default: any address, a free port]
    #[arg(long)]
    listen: Option<String>,
    /// Give up if not every message is acknowledged within this long (seconds, or with a unit:
    /// 30s, 5m)
    #[arg(long, value_name = "DURATION", default_value_t = 30.0, value_parser = parse_timeout)]
    timeout: f64,
    /// No summary line
    #[arg(long, short)]
    quiet: bool,
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    units::parse_secs_within(s, 0.001, 3600.0)
}

/// Kind of key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum KindArg {
    /// A host's static X25519 key (channel handshakes)
    Host,
    /// An owner's Ed25519 signing key (message senders)
    Owner,
}

impl From<KindArg> for KeyKind {
    fn from(k: KindArg) -> Self {
        match k {
            KindArg::Host => KeyKind::Host,
            KindArg::Owner => KeyKind::Owner,
        }
    }
}

#[derive(Debug, Args)]
struct KeygenArgs {
    /// Kind of key to generate
    #[arg(value_enum)]
    kind: KindArg,
    /// Private key file to write; the public key goes to PATH.pub (no `-`: keys go to files)
    path: PathBuf,
    /// Replace an existing PATH and PATH.pub (a symlink there is replaced, never followed)
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
struct PubkeyArgs {
    /// Private key file, or a public key file (FILE.pub) for --fingerprint and --trust-line
    path: PathBuf,
    /// Kind of key (default: read from the file)
    #[arg(long, value_enum)]
    kind: Option<KindArg>,
    /// Print the trust-file line a peer adds (`host NAME KEY` / `owner NAME KEY`)
    #[arg(long, value_name = "NAME", conflicts_with = "fingerprint")]
    trust_line: Option<String>,
    /// Print the key's short fingerprint (`xxxx-xxxx-xxxx-xxxx`), as transfers show it
    #[arg(long)]
    fingerprint: bool,
}

#[derive(Debug, Args)]
struct InitArgs {
    /// This host's name in the peer's trust file [default: the system host name]
    #[arg(long)]
    host_name: Option<String>,
    /// This owner's name in trust files [default: $USER]
    #[arg(long)]
    owner_name: Option<String>,
}

#[derive(Debug, Args)]
struct TrustFileArg {
    /// Trust file [default: $SEALINK_HOME/trust]
    #[arg(long)]
    file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum TrustCommand {
    /// List every trusted host and owner key with its fingerprint
    #[command(
        after_help = "Prints one line per key: host|owner, name, fingerprint (as transfers and refusals show it), key.\n\nExamples:\n  sealink trust list\n  sealink trust list --file /etc/sealink/trust"
    )]
    List {
        #[command(flatten)]
        file: TrustFileArg,
    },
    /// Parse a trust file and summarize what it trusts
    #[command(
        after_help = "Examples:\n  sealink trust check\n  sealink trust check --json /etc/sealink/trust"
    )]
    Check {
        /// Trust file [default: $SEALINK_HOME/trust]
        file: Option<PathBuf>,
        /// Print the findings as one JSON object (path, ok, owners, hosts, error; schema:
        /// sealink_keys::check::TrustCheck), for a bad file too (which still exits 1)
        #[arg(long)]
        json: bool,
    },
    /// Trust a host or an owner key (the line `sealink init` printed on the peer)
    #[command(
        after_help = "Examples:\n  sealink trust add host b AbC...=\n  sealink trust add owner bob AbC...= --file /etc/sealink/trust"
    )]
    Add {
        #[arg(value_enum)]
        kind: KindArg,
        /// Name (1 to 64 characters from A-Z a-z 0-9 . _ @ + -)
        name: String,
        /// Public key: base64, or the `sealink-host ...` / `sealink-owner ...` line
        key: String,
        #[command(flatten)]
        file: TrustFileArg,
    },
    /// Stop trusting every key listed under NAME
    #[command(after_help = "Example:\n  sealink trust remove bob")]
    Remove {
        name: String,
        #[command(flatten)]
        file: TrustFileArg,
    },
}

#[derive(Debug, Args)]
struct SendArgs {
    /// Files and directories to send (a directory goes as a tree: its files, directories and
    /// links, with modes and mtimes); "-" reads standard input and must come last
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The receiver: [NAME@]HOST[:PORT] (port 7878 by default; NAME picks its trusted host key)
    dest: String,
    /// Trusted host name of the receiver (instead of NAME@)
    #[arg(long)]
    peer: Option<String>,
    /// This host's private key [default: $SEALINK_HOME/host.key]
    #[arg(long)]
    key: Option<PathBuf>,
    /// The sending owner's private key [default: $SEALINK_HOME/owner.key]
    #[arg(long)]
    owner: Option<PathBuf>,
    /// Trust file [default: $SEALINK_HOME/trust]
    #[arg(long)]
    trust: Option<PathBuf>,
    /// TCP connections to stripe over [default: one per core, at most 8]
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    streams: Option<u16>,
    /// AEAD suite of the records
    #[arg(long, default_value = "aes128-gcm", value_parser = suite_parser(), ignore_case = true)]
    suite: SuiteId,
    /// Authenticate only: data travels in clear, every record still carries a tag
    #[arg(long)]
    auth_only: bool,
    /// Data bytes per record
    #[arg(long, default_value_t = sealink_stream::DEFAULT_RECORD_DATA, value_parser = parse_record_size)]
    record_size: usize,
    /// Name under which standard input ("-") is stored [default: stdin]
    #[arg(long = "as", value_name = "NAME")]
    stdin_name: Option<String>,
    /// Start every file over: the receiver discards what it kept of an interrupted transfer
    #[arg(long)]
    no_resume: bool,
    /// Leave out of directory trees what matches this gitignore-style pattern, matched against
    /// paths relative to each directory given (`*.log`, `build/`, `/only-at-the-top`);
    /// repeatable
    #[arg(long, value_name = "PATTERN")]
    exclude: Vec<String>,
    /// Update what the receiver has: send no data for files it already has with the same size
    /// and mtime, and add to and replace in existing directories. The receiver must agree
    /// (`sealink recv --update` or `--force`); without that, a transfer that would change
    /// anything it has is refused, and an up-to-date file alone is only skipped
    #[arg(long)]
    update: bool,
    /// Send what absolute links, and links leading out of their tree, point to (by default
    /// such links are skipped with a warning; links inside the tree always go as links)
    #[arg(long)]
    copy_links: bool,
    /// List what would be sent (path, kind, size) and what would be left out; connect to
    /// nothing, change nothing
    #[arg(long, short = 'n')]
    dry_run: bool,
    /// Delete at the receiver, in the directories this transfer merges into, what the sender
    /// no longer has. The receiver must allow it (`sealink recv --delete`), else the transfer
    /// is refused; nothing outside the directories sent is ever touched
    #[arg(long)]
    delete: bool,
    /// Most bytes per second to send, over all streams together: a number with an optional
    /// unit, k/M/G powers of 1000 (10M = 10 MB/s), Ki/Mi/Gi powers of 1024 (10MiB), or bits
    /// (80Mbit = 10 MB/s); at least 1KiB. Counts the sealed records written (file data plus
    /// 32 bytes a record), not TCP/IP headers
    #[arg(long, value_name = "RATE", value_parser = units::parse_rate)]
    limit: Option<u64>,
    #[command(flatten)]
    timeouts: TimeoutArgs,
    /// No progress bar, no summary line
    #[arg(long, short)]
    quiet: bool,
    /// Print one JSON object a line on stdout for each file (delivered or failed) instead of
    /// the summary line (schema: sealink_stream::report::FileRecord)
    #[arg(long)]
    json: bool,
}

/// Timeouts of stream mode (both sides).
#[derive(Debug, Args)]
struct TimeoutArgs {
    /// How long to connect, shake hands and gather the stripes (on the receiver: from a
    /// connection's arrival until its peer has authenticated); seconds, or with a unit (30s, 2m)
    #[arg(long, value_name = "DURATION", default_value_t = 10.0, value_parser = parse_stream_timeout)]
    setup_timeout: f64,
    /// How long a transfer may go without progress before both sides give up (also the
    /// sender's wait for the receiver's final confirmation); seconds, or with a unit (90s, 5m)
    #[arg(long, value_name = "DURATION", default_value_t = 60.0, value_parser = parse_stream_timeout)]
    idle_timeout: f64,
}

impl TimeoutArgs {
    fn get(&self) -> sealink_stream::Timeouts {
        sealink_stream::Timeouts {
            setup: Duration::from_secs_f64(self.setup_timeout),
            idle: Duration::from_secs_f64(self.idle_timeout),
        }
    }
}

fn parse_conn_count(s: &str) -> Result<usize, String> {
    let v: usize = s.trim().parse().map_err(|e| format!("{e}"))?;
    if (1..=65_536).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not within 1..=65536"))
    }
}

fn parse_stream_timeout(s: &str) -> Result<f64, String> {
    units::parse_secs_within(s, 0.01, 86_400.0)
}

fn parse_record_size(s: &str) -> Result<usize, String> {
    let v: usize = s.trim().parse().map_err(|e| format!("{e}"))?;
    let max = sealink_proto::stream::record::MAX_RECORD_DATA;
    let min = sealink_proto::stream::record::MIN_RECORD_DATA;
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not within {min}..={max}"))
    }
}

#[derive(Debug, Args)]
struct RecvArgs {
    /// Address to listen on (ADDR:PORT, or ADDR for port 7878)
    #[arg(long, default_value = "0.0.0.0:7878")]
    listen: String,
    /// Directory to store received files in
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Write the received data to standard output instead (implies --once)
    #[arg(long, conflicts_with = "dir")]
    stdout: bool,
    /// Serve one transfer, then exit with its outcome
    #[arg(long)]
    once: bool,
    /// Replace existing files and links, and merge received trees into existing directories,
    /// setting their modes and mtimes (never deleting anything the sender did not send)
    #[arg(long)]
    force: bool,
    /// Take updates from senders that ask for them (`sealink send --update`): add entries to
    /// existing directories, which keep their own modes and mtimes, and replace files and links
    /// that changed by ones of the same kind; files with the same size and mtime are kept, not
    /// sent again
    #[arg(long)]
    update: bool,
    /// Let received files keep group and other write permission when the sender's mode has it
    /// (still within the umask). Without it, received files never get group or other write;
    /// setuid, setgid and sticky bits are never kept
    #[arg(long)]
    keep_group_other_write: bool,
    /// This host's private key [default: $SEALINK_HOME/host.key]
    #[arg(long)]
    key: Option<PathBuf>,
    /// Trust file: hosts that may connect, owners that may send [default: $SEALINK_HOME/trust]
    #[arg(long)]
    trust: Option<PathBuf>,
    #[command(flatten)]
    timeouts: TimeoutArgs,
    /// Most connections held at once (each holds a thread; a stripe also a 4 MiB buffer)
    #[arg(long, value_name = "N", default_value_t = sealink_stream::ConnLimits::default().max_conns,
          value_parser = parse_conn_count)]
    max_conns: usize,
    /// Most connections held at once that have not authenticated (the oldest is closed
    /// to make room; one source address may hold at most 64)
    #[arg(long, value_name = "N", default_value_t = sealink_stream::ConnLimits::default().max_pending,
          value_parser = parse_conn_count)]
    max_pending: usize,
    /// Delete resume state of interrupted transfers older than this at start-up (seconds, or
    /// with a unit: 90m, 12h, 7d, 7days)
    #[arg(long, value_name = "AGE", default_value = "7d", value_parser = stream::parse_age)]
    resume_max_age: Duration,
    /// Let senders that ask for it (`sealink send --delete`) delete, in the directories their
    /// transfer merges into, what they no longer have (never anything else)
    #[arg(long)]
    delete: bool,
    /// Do not fsync received files before they take their names (as rsync by default):
    /// faster for many small files, but a crash of this host can then leave a file under its
    /// name without all of its data
    #[arg(long)]
    no_fsync: bool,
    /// Most entries (files, directories, links) one transfer may announce
    #[arg(long, value_name = "N", default_value_t = sealink_proto::stream::TreeLimits::default().max_entries)]
    max_entries: u64,
    /// Most bytes of files one transfer may announce, with an optional unit (k/M/G/T powers of
    /// 1000, Ki/Mi/Gi/Ti powers of 1024) [default: 64TiB]
    #[arg(long, value_name = "SIZE", value_parser = units::parse_size)]
    max_bytes: Option<u64>,
    /// Most components in one path of a transfer (at most 128)
    #[arg(long, value_name = "N", default_value_t = 128,
          value_parser = clap::value_parser!(u16).range(1..=128))]
    max_depth: u16,
    /// No progress bar, no summary lines
    #[arg(long, short)]
    quiet: bool,
    /// Print one JSON object a line on stdout for each file stored instead of the summary
    /// lines (schema: sealink_stream::report::FileRecord)
    #[arg(long, conflicts_with = "stdout")]
    json: bool,
}

fn init_tracing(verbose: u8, quiet: bool) {
    let level = match verbose {
        _ if quiet => LevelFilter::ERROR,
        0 => LevelFilter::WARN,
        1 => LevelFilter::INFO,
        2 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    let filter = EnvFilter::builder()
        .with_default_directive(level.into())
        .from_env_lossy();
    // Escapes only for a person at a terminal: not into the journal, a file or a pipe.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // Lines meant for the person at the terminal as they are (`[#] post_up-command` and what it
    // printed, as wg-quick shows its hooks): no time, level or module, hidden only by -q.
    let plain = tracing_subscriber::fmt::layer()
        .without_time()
        .with_level(false)
        .with_target(false)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .with_filter(tracing_subscriber::filter::filter_fn(move |m| {
            m.target() == sealink_tunnel::SAY_TARGET && !quiet
        }));
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .with_filter(filter)
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.target() != sealink_tunnel::SAY_TARGET
        }));
    // Fails only if a subscriber is already set, which cannot happen here.
    let _ = tracing_subscriber::registry()
        .with(plain)
        .with(logs)
        .try_init();
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Keygen(a) => keys::keygen(a.kind.into(), &a.path, a.force),
        Command::Pubkey(a) => {
            keys::pubkey(&a.path, a.kind.map(Into::into), a.trust_line, a.fingerprint)
        }
        Command::Init(a) => keys::init(a.host_name, a.owner_name),
        Command::Pair(a) => {
            let me = pair::Identity {
                key: a.key,
                owner: a.owner,
                trust: a.trust,
                name: a.name,
            };
            match (a.code, a.host) {
                (Some(code), Some(dest)) => pair::join(pair::JoinParams { code, dest, me }),
                _ => pair::listen(pair::ListenParams {
                    listen: a.listen,
                    timeout: Duration::from_secs_f64(a.timeout),
                    code: a.with_code,
                    me,
                }),
            }
        }
        Command::Trust(TrustCommand::Check { file, json }) => keys::trust_check(file, json),
        Command::Trust(TrustCommand::List { file }) => keys::trust_list(file.file),
        Command::Trust(TrustCommand::Add {
            kind,
            name,
            key,
            file,
        }) => keys::trust_add(file.file, kind.into(), &name, &key),
        Command::Trust(TrustCommand::Remove { name, file }) => keys::trust_remove(file.file, &name),
        Command::Send(a)
            if a.stdin_name.is_some() && !a.files.iter().any(|f| f.as_os_str() == "-") =>
        {
            Err(error::UsageError(
                "--as names what standard input (\"-\") is stored as, and \"-\" is not among \
                 the files: a file keeps its own name"
                    .into(),
            )
            .into())
        }
        Command::Send(a) => stream::send(stream::SendParams {
            files: a.files,
            dest: a.dest,
            peer: a.peer,
            key: a.key,
            owner: a.owner,
            trust: a.trust,
            streams: a.streams.map(usize::from),
            suite: a.suite,
            auth_only: a.auth_only,
            record_size: a.record_size,
            stdin_name: a.stdin_name.unwrap_or_else(|| "stdin".into()),
            resume: !a.no_resume,
            exclude: a.exclude,
            update: a.update,
            rate_limit: a.limit,
            timeouts: a.timeouts.get(),
            quiet: a.quiet,
            json: a.json,
            copy_links: a.copy_links,
            dry_run: a.dry_run,
            delete: a.delete,
        }),
        Command::Recv(a) => stream::recv(stream::RecvParams {
            listen: a.listen,
            dir: a.dir,
            stdout: a.stdout,
            once: a.once,
            force: a.force,
            update: a.update,
            keep_group_other_write: a.keep_group_other_write,
            key: a.key,
            trust: a.trust,
            timeouts: a.timeouts.get(),
            limits: sealink_stream::ConnLimits {
                max_conns: a.max_conns,
                max_pending: a.max_pending,
                ..sealink_stream::ConnLimits::default()
            },
            resume_max_age: a.resume_max_age,
            quiet: a.quiet,
            json: a.json,
            delete: a.delete,
            sync: !a.no_fsync,
            tree_limits: sealink_proto::stream::TreeLimits {
                max_entries: a.max_entries,
                max_bytes: a
                    .max_bytes
                    .unwrap_or(sealink_proto::stream::TreeLimits::default().max_bytes),
                max_depth: usize::from(a.max_depth),
            },
        }),
        Command::Msg(MsgCommand::Listen(a)) => msg::listen(msg::ListenParams {
            listen: a.listen,
            key: a.key,
            trust: a.trust,
            json: a.json,
            count: a.count,
        }),
        Command::Msg(MsgCommand::Send(a)) => msg::send(msg::SendParams {
            dest: a.dest,
            messages: a.messages,
            peer: a.peer,
            key: a.key,
            owner: a.owner,
            from: a.from,
            to: a.to,
            trust: a.trust,
            urgency: match (a.urgent, a.deadline) {
                (true, _) => sealink_datagram::Urgency::Urgent,
                (false, Some(ms)) => sealink_datagram::Urgency::Deadline(Duration::from_millis(ms)),
                (false, None) => sealink_datagram::Urgency::Default,
            },
            auth_only: a.auth_only,
            listen: a.listen,
            timeout: Duration::from_secs_f64(a.timeout),
            quiet: a.quiet,
        }),
        Command::Up(a) => tunnel::up(&a.config, a.run_dir.run_dir),
        Command::Reload(a) => tunnel::reload(&a.config, a.run_dir.run_dir),
        Command::Down(a) => tunnel::down(&a.name, a.run_dir.run_dir),
        Command::Completions(a) => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(a.shell, &mut cmd, "sealink", &mut std::io::stdout());
            Ok(())
        }
        Command::Man(a) => man(&a.command, a.dir.as_deref()),
        Command::TunnelHelper(a) => std::process::exit(sealink_tunnel::helper_main::main(&a.args)),
        Command::Show(a) => tunnel::show(a.name.as_deref(), a.run_dir.run_dir, a.json),
        Command::Demo(a) => demo::run(&a),
    }
}

/// sealink(1), or the page of the command `path` names (`sealink man msg send`), on stdout; or
/// every command's page in `dir`. All come from one command tree without the `help`
/// subcommand, so each `sealink-X(1)` a page lists is a page written here.
fn man(path: &[String], dir: Option<&std::path::Path>) -> Result<()> {
    let mut cmd = <Cli as clap::CommandFactory>::command().disable_help_subcommand(true);
    cmd.build();
    let Some(dir) = dir else {
        let mut at = &cmd;
        for (i, name) in path.iter().enumerate() {
            at = at
                .get_subcommands()
                .find(|s| s.get_name() == name && !s.is_hide_set())
                .ok_or_else(|| {
                    error::UsageError(format!(
                        "no command `sealink {}`: `sealink --help` lists them",
                        path[..=i].join(" ")
                    ))
                })?;
        }
        let names: Vec<&str> = path.iter().map(String::as_str).collect();
        std::io::Write::write_all(&mut std::io::stdout(), &manpage::render(at, &names)?)?;
        return Ok(());
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    fn write(
        cmd: &clap::Command,
        path: &mut Vec<String>,
        dir: &std::path::Path,
        out: &mut String,
    ) -> Result<()> {
        let names: Vec<&str> = path.iter().map(String::as_str).collect();
        let file = dir.join(format!("{}.1", manpage::page_name(&names)));
        std::fs::write(&file, manpage::render(cmd, &names)?)
            .with_context(|| format!("cannot write {}", file.display()))?;
        out.push_str(&format!("{}\n", file.display()));
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            path.push(sub.get_name().to_owned());
            write(sub, path, dir, out)?;
            path.pop();
        }
        Ok(())
    }
    let mut written = String::new();
    write(&cmd, &mut Vec::new(), dir, &mut written)?;
    output::print(&written)?;
    Ok(())
}

/// `--suite`: the modern suites by name, listed so that help and shell completions offer them.
fn suite_parser() -> impl clap::builder::TypedValueParser<Value = SuiteId> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(SuiteId::MODERN.map(SuiteId::name))
        .map(|s: String| SuiteId::parse_modern(&s).expect("a listed suite name"))
}

/// Whether the command line carries -v (in any form clap takes: -v, -vv, --verbose), read
/// from the raw arguments because clap stops at --version before counting it.
fn verbose_asked() -> bool {
    std::env::args().skip(1).any(|a| {
        a == "--verbose" || (a.len() > 1 && a.starts_with('-') && a[1..].chars().all(|c| c == 'v'))
    })
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and succeed; usage errors exit 2.
            let _ = e.print();
            if e.kind() == clap::error::ErrorKind::DisplayVersion && verbose_asked() {
                // `--version -v`: which library each AEAD suite runs on here, and why.
                println!("aead backends (SEALINK_AEAD_BACKEND overrides):");
                for line in sealink_crypto::backend::report().lines() {
                    println!("  {line}");
                }
            }
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    init_tracing(cli.verbose, cli.quiet);
    // Sending files (not standard input, which a rerun sends again whole): an interruption or
    // a cut connection says how to resume.
    let sending =
        matches!(&cli.command, Command::Send(a) if !a.files.iter().any(|f| f.as_os_str() == "-"));
    if sending {
        stream::hint_on_interrupt();
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error::chain(&*e));
            if sending && stream::resumable_cut(&e) {
                eprintln!("{}", stream::RESUME_HINT);
            }
            // A command's own argument checks after parsing are usage errors too; a transfer
            // that left some things out says so by its own status.
            ExitCode::from(if error::is_usage(&e) {
                EXIT_USAGE
            } else if e.downcast_ref::<stream::Partial>().is_some() {
                stream::EXIT_PARTIAL
            } else {
                1
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn one_target_for_every_crates_plain_lines() {
        assert_eq!(sealink_tunnel::SAY_TARGET, sealink_stream::SAY_TARGET);
    }

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    fn msg_quiet(args: &[&str]) -> (bool, bool) {
        let cli = Cli::try_parse_from(args).unwrap();
        match cli.command {
            Command::Msg(MsgCommand::Send(a)) => (cli.quiet, a.quiet),
            _ => unreachable!(),
        }
    }

    #[test]
    fn global_quiet_and_the_commands_own_quiet_both_work() {
        // After the command: its own flag (no summary) and, shared by id, the log level.
        let (global, own) = msg_quiet(&["sealink", "msg", "send", "-q", "h", "m"]);
        assert!(own && global);
        let (global, own) = msg_quiet(&["sealink", "msg", "send", "--quiet", "h", "m"]);
        assert!(own && global);
        // Before it: the log level.
        let (global, _) = msg_quiet(&["sealink", "-q", "msg", "send", "h", "m"]);
        assert!(global);
        let (global, own) = msg_quiet(&["sealink", "msg", "send", "h", "m"]);
        assert!(!global && !own);
        assert!(Cli::try_parse_from(["sealink", "-q", "-v", "show"]).is_err());
        assert!(
            Cli::try_parse_from(["sealink", "-q", "show"])
                .unwrap()
                .quiet
        );
    }
}

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
