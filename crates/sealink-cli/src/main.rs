//! `sealink`: key management, a simulated two-host demo, and benchmarks for the sealink protocol.
#![forbid(unsafe_code)]

mod keys;
mod msg;
mod stream;
mod tunnel;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use sealink_crypto::SuiteId;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

use anyhow::Result;
use sealink_keys::KeyKind;
use sealink_lab::error;
use sealink_lab::{bench, demo, output, relay};

#[derive(Debug, Parser)]
#[command(
    name = "sealink",
    version,
    about = "sealink: authenticated, optionally encrypted messaging between hosts and their owners",
    after_help = "Examples:\n  sealink keygen host /etc/sealink/host.key\n  sealink demo --seed 7\n  sealink bench seal --sizes 1400 --suites aes128-gcm\n\nLogs go to stderr (colour only on a terminal, never with NO_COLOR set); -v, -vv, -vvv or RUST_LOG (e.g. RUST_LOG=debug) show more.\n\nExit status: 0 success; 1 the command failed (network, files, keys, a transfer); 2 usage error (bad arguments or options)."
)]
struct Cli {
    /// More log output: -v info, -vv debug, -vvv trace (RUST_LOG, when set, decides instead)
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

/// Exit status of a usage error (bad arguments), as clap and rsync use it.
const EXIT_USAGE: u8 = 2;

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate a host or owner key pair (PATH, mode 0600, and PATH.pub)
    #[command(after_help = "Example:\n  sealink keygen owner ~/.sealink/alice.key")]
    Keygen(KeygenArgs),
    /// Print the public key line of a private key file
    #[command(after_help = "Example:\n  sealink pubkey ~/.sealink/alice.key")]
    Pubkey(PubkeyArgs),
    /// Set up $SEALINK_HOME: a host key, an owner key and a trust file; prints what a peer adds
    #[command(
        after_help = "Example:\n  sealink init --owner-name alice\n\nExisting keys are kept. The printed `sealink trust add` lines go to the peer."
    )]
    Init(InitArgs),
    /// Work with trust files (the owners and hosts a node believes)
    #[command(
        subcommand,
        after_help = "Example:\n  sealink trust check /etc/sealink/trust"
    )]
    Trust(TrustCommand),
    /// Run two hosts over a simulated lossy link and check every message arrives exactly once
    #[command(after_help = "Example:\n  sealink demo --seed 7 --messages 500 --loss 0.05")]
    Demo(DemoArgs),
    /// Send files (or standard input) to a `sealink recv`, sealed and striped over TCP
    #[command(after_help = SEND_HELP)]
    Send(SendArgs),
    /// Receive files from `sealink send` into a directory (or standard output)
    #[command(after_help = RECV_HELP)]
    Recv(RecvArgs),
    /// Datagram mode: owner-authenticated messages over UDP (`listen` prints, `send` delivers)
    #[command(subcommand, after_help = MSG_HELP)]
    Msg(MsgCommand),
    /// Relay UDP both ways while injecting faults: loss, reordering, duplication, corruption, replay
    #[command(after_help = RELAY_HELP)]
    Relay(RelayArgs),
    /// Tunnel mode: bring up a TUN interface carrying IP packets to peers (foreground)
    #[command(after_help = tunnel::UP_HELP)]
    Up(UpArgs),
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
    /// Print the man page (roff) to stdout
    #[command(after_help = "Example:\n  sealink man > /usr/local/share/man/man1/sealink.1")]
    Man,
    /// Measure performance
    #[command(
        subcommand,
        after_help = "Example:\n  sealink bench seal --sizes 1400,8192 --runs 3"
    )]
    Bench(BenchCommand),
}

#[derive(Debug, Args)]
struct CompletionsArgs {
    /// Shell to complete for
    shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
struct UpArgs {
    /// Tunnel configuration file (TOML; see the example below)
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

Keys and trust default to $SEALINK_HOME (or ~/.sealink): host.key, owner.key, trust. The receiver
must trust this host's and this owner's public keys; this side must trust the receiver's host key
(`host NAME KEY` in the trust file; NAME@ picks one when several are trusted).
`sealink send` exits 0 only after the receiver confirms it holds every file complete. A receiver
that takes no data for --idle-timeout seconds (stalled, or a dead route) fails the transfer.";

const RECV_HELP: &str = "Examples:
  sealink recv --dir /srv/incoming
  sealink recv --listen 127.0.0.1:9000 --dir . --once
  sealink recv --once --stdout > dir.tar

Each file is written under a hidden temporary name and renamed only after its last record has
been verified and the stream's authenticated end has arrived; a failed transfer leaves no file.
Existing files are kept unless --force. With --stdout, data is written in order as it arrives.
A connection must authenticate within --setup-timeout; until it has, it holds no slot of --once
and may be closed to make room (--max-pending, oldest first). A transfer that receives nothing for
--idle-timeout seconds fails, and its temporary files are removed.";

const MSG_HELP: &str = "Examples:
  sealink msg listen --listen 0.0.0.0:7878
  sealink msg send 10.0.0.2 'hello' 'second message' --to inbox --urgent
  sealink msg listen --json --count 1

Keys and trust default to $SEALINK_HOME (or ~/.sealink): host.key, owner.key, trust, as for
`sealink send`. The listener trusts the `host` and `owner` lines of its trust file; the sender
must trust the listener's host key and names itself after the `owner` line matching its key.";

const RELAY_HELP: &str = "Examples:
  sealink relay --listen 10.0.1.1:51820 --to 10.0.2.2:51820 --loss 0.05 --corrupt 0.02 --seed 7
  sealink relay --listen 127.0.0.1:9000 --to 127.0.0.1:7878 --replay 0.1 --stats-every 1

Every client source address gets its own upstream socket, so replies go back to the client they
belong to. Each direction draws its faults independently: a lost datagram is dropped; a reordered
one is held back until 1..=--reorder-depth later ones have passed (at most 25 ms); a duplicated one
is sent twice; a corrupted one has one random bit flipped; a replayed one is captured as it goes
out and the copy is sent again --replay-delay-ms later. Counters print on stdout at SIGINT or
SIGTERM (and every --stats-every seconds).";

#[derive(Debug, Args)]
struct RelayArgs {
    /// UDP address clients send to (ADDR:PORT; port 0 picks one, printed on stderr)
    #[arg(long)]
    listen: String,
    /// UDP address datagrams are relayed to (ADDR:PORT)
    #[arg(long)]
    to: String,
    /// Probability of dropping a datagram
    #[arg(long, default_value_t = 0.0, value_parser = relay::parse_probability)]
    loss: f64,
    /// Probability of holding a datagram back behind later ones
    #[arg(long, default_value_t = 0.0, value_parser = relay::parse_probability)]
    reorder: f64,
    /// A held datagram is released after 1..=N later ones
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    reorder_depth: u32,
    /// Probability of sending a datagram twice
    #[arg(long, default_value_t = 0.0, value_parser = relay::parse_probability)]
    duplicate: f64,
    /// Probability of flipping one random bit of a datagram
    #[arg(long, default_value_t = 0.0, value_parser = relay::parse_probability)]
    corrupt: f64,
    /// Probability of capturing a datagram and sending a copy again later
    #[arg(long, default_value_t = 0.0, value_parser = relay::parse_probability)]
    replay: f64,
    /// Delay before a captured datagram is replayed, in milliseconds
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    replay_delay_ms: u64,
    /// Seed of the fault RNG (default: random, printed)
    #[arg(long)]
    seed: Option<u64>,
    /// Bandwidth limit per direction and client, in Mbit/s (default: none)
    #[arg(long, value_parser = relay::parse_rate)]
    rate_limit: Option<f64>,
    /// Also print the counters every SECS seconds
    #[arg(long, value_parser = parse_seconds)]
    stats_every: Option<f64>,
}

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
    /// Give up if not every message is acknowledged within this many seconds
    #[arg(long, default_value_t = 30.0, value_parser = parse_timeout)]
    timeout: f64,
    /// No summary line
    #[arg(long, short)]
    quiet: bool,
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() && v > 0.0 && v <= 3600.0 {
        Ok(v)
    } else {
        Err(format!("{v} is not within (0, 3600] seconds"))
    }
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
    /// Private key file to write; the public key goes to PATH.pub
    path: PathBuf,
    /// Replace existing files
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
struct PubkeyArgs {
    /// Private key file
    path: PathBuf,
    /// Kind of key (default: read from the file)
    #[arg(long, value_enum)]
    kind: Option<KindArg>,
    /// Print the trust-file line a peer adds (`host NAME KEY` / `owner NAME KEY`)
    #[arg(long, value_name = "NAME")]
    trust_line: Option<String>,
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
    /// Parse a trust file and summarize what it trusts
    #[command(after_help = "Example:\n  sealink trust check /etc/sealink/trust")]
    Check {
        /// Trust file
        file: PathBuf,
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
    /// Files to send ("-" reads standard input; it must come last)
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
    /// Suite (aes128-gcm, aes256-gcm, chacha20-poly1305)
    #[arg(long, default_value = "aes128-gcm", value_parser = parse_suite)]
    suite: SuiteId,
    /// Authenticate only: data travels in clear, every record still carries a tag
    #[arg(long)]
    auth_only: bool,
    /// Data bytes per record
    #[arg(long, default_value_t = sealink_stream::DEFAULT_RECORD_DATA, value_parser = parse_record_size)]
    record_size: usize,
    /// Name under which standard input is stored
    #[arg(long = "as", default_value = "stdin")]
    stdin_name: String,
    #[command(flatten)]
    timeouts: TimeoutArgs,
    /// No progress bar, no summary line
    #[arg(long, short)]
    quiet: bool,
}

/// Timeouts of stream mode (both sides).
#[derive(Debug, Args)]
struct TimeoutArgs {
    /// Seconds to connect, shake hands and gather the stripes (on the receiver: from a
    /// connection's arrival until its peer has authenticated)
    #[arg(long, value_name = "SECS", default_value_t = 10.0, value_parser = parse_stream_timeout)]
    setup_timeout: f64,
    /// Seconds a transfer may go without progress before both sides give up (also the
    /// sender's wait for the receiver's final confirmation)
    #[arg(long, value_name = "SECS", default_value_t = 60.0, value_parser = parse_stream_timeout)]
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
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() && (0.01..=86_400.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not within 0.01..=86400 seconds"))
    }
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
    /// Replace existing files
    #[arg(long)]
    force: bool,
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
    /// No progress bar, no summary lines
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// Seed of the trace and the link (default: random, printed so the run can be replayed)
    #[arg(long)]
    seed: Option<u64>,
    /// Messages per direction
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    messages: u32,
    /// Probability that the link loses a datagram, in [0, 1)
    #[arg(long, default_value_t = 0.02, value_parser = parse_probability)]
    loss: f64,
    /// One-way link delay in milliseconds
    #[arg(long = "delay-ms", default_value_t = 5.0, value_parser = parse_delay_ms)]
    delay_ms: f64,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Protocol data path (seal + open of one datagram) against the raw AEAD library
    #[command(
        after_help = "Example:\n  sealink bench seal --sizes 64,1400 --suites aes128-gcm --seconds 0.5 --runs 7"
    )]
    Seal(SealArgs),
    /// Table 1 of paper 001 redone: bulk ciphers and hashes, public-key operations, and GHASH
    /// with and without the carry-less multiply instruction
    #[command(
        after_help = "Examples:\n  sealink bench crypto\n  sealink bench crypto --seconds 1 --runs 7 --size 16384\n  sealink bench crypto --quick\n\nThe software-only GHASH figure comes from bench/ghash-soft.sh (or --ghash-soft, which runs it)."
    )]
    Crypto(CryptoArgs),
    /// Paper 000 rerun: protocol stacks through the parallel engine (PLP and CLP), throughput,
    /// speedup, latency breakdown, serial fraction, CSV and SVG plots
    #[command(
        after_help = "Examples:\n  sealink bench stacks\n  sealink bench stacks --workers 2 --seconds 0.5 --runs 7 --out bench-out/stacks\n  sealink bench stacks --quick --stacks baseline,aes128-gcm"
    )]
    Stacks(StacksArgs),
    /// Paper 003 Tables I and II rerun: library, crypto-service and integrated (SO_CRYPT-like)
    /// send paths over loopback TCP; seconds, Gbit/s, writes, copies, context switches, CSV
    #[command(
        after_help = "Examples:\n  sealink bench socket\n  sealink bench socket --size 256 --runs 5 --batch 32 --out bench-out/socket\n  sealink bench socket --quick"
    )]
    Socket(SocketArgs),
    /// Datagram mode over loopback UDP: small-message throughput and urgent-message latency
    /// with piggybacking on and off
    #[command(
        after_help = "Examples:\n  sealink bench datagram\n  sealink bench datagram --sizes 64,256 --seconds 2 --runs 3\n  sealink bench datagram --quick\n  sealink bench datagram --no-gso --max-datagram 65507\n  sealink bench datagram --peer quic --sizes 64,256,1024"
    )]
    Datagram(DatagramArgs),
    /// Paper 002 rerun in virtual time: its five traces, urgency policies U1-U5, encryption
    /// scope and technology, piggybacking; Tables 3, 5-8 and Figures 5-6 as markdown and CSV
    #[command(
        after_help = "Examples:\n  sealink bench adp\n  sealink bench adp --quick --out bench-out/adp\n  sealink bench adp --profiles 1987 --seed 7"
    )]
    Adp(AdpArgs),
    /// Paper 004 rerun on the CPU: 1400-byte packets through the tunnel's engine, throughput
    /// against workers, order kept or not, batch size, hyper-thread siblings; CSV, SVG, JSON
    #[command(
        after_help = "Examples:\n  sealink bench tunnel-cores\n  sealink bench tunnel-cores --workers 1,2,4,8,16 --seconds 0.5\n  sealink bench tunnel-cores --quick"
    )]
    TunnelCores(TunnelCoresArgs),
    /// Paper 004 Figure 12 rerun: AES-128-GCM throughput against batch size, CPU (engine,
    /// 1..N workers) and GPU (needs a build with --features cuda and a CUDA device), crossover
    #[command(
        after_help = "Examples:\n  sealink bench gpu\n  sealink bench gpu --sizes 65536,131072 --workers 1,16\n  sealink bench gpu --quick"
    )]
    Gpu(GpuArgs),
}

/// What `sealink bench tunnel-cores` and `sealink bench gpu` (paper 004) both take.
#[derive(Debug, Args)]
struct CoresArgs {
    /// Worker counts, comma separated (default 1, 2, 4, ... up to the cores; 1,2 with --quick)
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: Vec<u16>,
    /// Seconds per timed run (default 0.3; 0.02 with --quick)
    #[arg(long, value_parser = parse_seconds)]
    seconds: Option<f64>,
    /// Timed runs per point after a warm-up, medians reported (default 5; 1 with --quick)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: Option<u32>,
    /// Smoke test: short runs, few points (not a measurement)
    #[arg(long)]
    quick: bool,
    /// Directory for the CSV files, the SVG plot and the run record
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct TunnelCoresArgs {
    #[command(flatten)]
    cores: CoresArgs,
    /// Packets per batch in the grouping sweep, comma separated
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,128", value_parser = parse_batch)]
    batches: Vec<usize>,
    /// Packets per batch in the other experiments
    #[arg(long, default_value_t = 32, value_parser = parse_batch)]
    batch: usize,
}

#[derive(Debug, Args)]
struct GpuArgs {
    #[command(flatten)]
    cores: CoresArgs,
    /// Batch sizes in bytes, comma separated (default 4 KB .. 1 MB)
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1400..=67108864))]
    sizes: Vec<u64>,
}

impl CoresArgs {
    fn seconds(&self) -> f64 {
        self.seconds.unwrap_or(if self.quick { 0.02 } else { 0.3 })
    }
    fn runs(&self) -> usize {
        self.runs
            .map_or(if self.quick { 1 } else { 5 }, |r| r as usize)
    }
    fn workers(&self) -> Vec<usize> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        match (self.workers.is_empty(), self.quick) {
            (false, _) => self.workers.iter().map(|&w| usize::from(w)).collect(),
            (true, true) => vec![1, 2.min(cores)]
                .into_iter()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect(),
            (true, false) => bench::tunnel_cores::default_workers(cores),
        }
    }
}

#[derive(Debug, Args)]
struct AdpArgs {
    /// Directory for adp.md and the CSV files
    #[arg(long, default_value = "bench-out/adp")]
    out: std::path::PathBuf,
    /// 1,000 messages per trace instead of the paper's 10,000 (for CI)
    #[arg(long)]
    quick: bool,
    /// Seed of the traces and the simulation: the same seed gives the same tables
    #[arg(long, default_value_t = 2)]
    seed: u64,
    /// Service-time profiles to run: 1987 (the paper's Sun 3/50s, Ethernet, DES chip), today
    #[arg(long, value_delimiter = ',', default_value = "1987,today")]
    profiles: Vec<String>,
    /// A packet capture (pcap or pcapng) to run in place of the generated ALL trace
    #[arg(long, value_name = "FILE")]
    pcap: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
struct DatagramArgs {
    /// Message sizes in bytes, comma separated
    #[arg(long, value_delimiter = ',', default_value = "64,128,256", value_parser = bench::datagram::parse_size)]
    sizes: Vec<usize>,
    /// Seconds per timed run (default 2; 0.3 with --quick)
    #[arg(long, value_parser = parse_seconds)]
    seconds: Option<f64>,
    /// Timed runs per point, medians reported (default 3; 1 with --quick)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: Option<u32>,
    /// Share of messages sent urgent, in [0, 1)
    #[arg(long, default_value_t = 0.05, value_parser = parse_probability)]
    urgent: f64,
    /// Smoke test: short runs (not a measurement)
    #[arg(long)]
    quick: bool,
    /// Send one datagram per system call (no UDP GSO), the per-packet cost of a classic stack
    #[arg(long)]
    no_gso: bool,
    /// Engine workers per node that seal and open (0: inline on the node's I/O thread; default:
    /// 0 on two cores or fewer, else one per core)
    #[arg(long, value_parser = clap::value_parser!(u16).range(0..=256))]
    workers: Option<u16>,
    /// Largest datagram, and so the piggyback queue limit (1400 suits any Ethernet path; the
    /// paper's nominal queue limit was 64 KiB, which loopback's MTU allows: try 65507)
    #[arg(long, default_value_t = 1400, value_parser = clap::value_parser!(u16).range(512..=65507))]
    max_datagram: u16,
    /// Directory for datagram.csv and the run record datagram.json
    #[arg(long, default_value = "bench-out/datagram")]
    out: PathBuf,
    /// Also run the same workload over PEER, interleaved with sealink's runs (quic: quinn)
    #[arg(long, value_parser = bench::quic::parse_peer)]
    peer: Option<bench::quic::Peer>,
}

#[derive(Debug, Args)]
struct SocketArgs {
    /// Transfer per path and record size, in MiB (default 1024; 16 with --quick)
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=65536))]
    size: Option<u64>,
    /// Timed runs per point, after a warm-up transfer (default 3; 1 with --quick); medians reported
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: Option<u32>,
    /// Records per write() on the integrated path
    #[arg(long, default_value_t = bench::socket::DEFAULT_BATCH, value_parser = parse_batch)]
    batch: usize,
    /// Smoke test: 16 MiB, one run, no warm-up (not a measurement)
    #[arg(long)]
    quick: bool,
    /// Directory for socket.csv and the run record socket.json
    #[arg(long, default_value = "bench-out/socket")]
    out: PathBuf,
}

#[derive(Debug, Args)]
struct StacksArgs {
    /// Workers 1..N (default: the number of cores)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=512))]
    workers: Option<u32>,
    /// Packet payload in bytes
    #[arg(long, default_value_t = 4096, value_parser = parse_stacks_packet)]
    packet: usize,
    /// Seconds per timed run (default 0.3; 0.02 with --quick)
    #[arg(long, value_parser = parse_seconds)]
    seconds: Option<f64>,
    /// Timed runs per point, after a warm-up run (default 5; 3 with --quick)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: Option<u32>,
    /// Directory for the CSV files, SVG plots and the run record stacks.json
    #[arg(long, default_value = "bench-out/stacks")]
    out: PathBuf,
    /// Stacks, comma separated (baseline, md5, gcm-auth, des-md5, 3des-md5, aes128-gcm,
    /// chacha20-poly1305; default all)
    #[arg(long, value_delimiter = ',', value_parser = bench::stacks::stack_by_name)]
    stacks: Vec<&'static bench::stacks::Stack>,
    /// Smoke test: short runs, few connections (not a measurement)
    #[arg(long)]
    quick: bool,
    /// Packets per engine batch in the scaling experiments
    #[arg(long, default_value_t = bench::stacks::CHUNK, value_parser = parse_batch)]
    batch: usize,
    /// Pin engine worker threads to cores
    #[arg(long)]
    pin: bool,
}

fn parse_batch(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(v) if (1..=4096).contains(&v) => Ok(v),
        Ok(_) => Err("must be within 1..=4096".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_stacks_packet(s: &str) -> Result<usize, String> {
    let v: usize = s.trim().parse().map_err(|e| format!("{e}"))?;
    if (1..=bench::stacks::MAX_PACKET).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{v} is not within 1..={}",
            bench::stacks::MAX_PACKET
        ))
    }
}

#[derive(Debug, Args)]
struct CryptoArgs {
    /// Seconds per timed run
    #[arg(long, default_value_t = 0.3, value_parser = parse_seconds)]
    seconds: f64,
    /// Timed runs per measurement (the median is reported)
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: u32,
    /// Buffer size in bytes for the bulk algorithms and GHASH
    #[arg(long, default_value_t = 8192, value_parser = parse_crypto_size)]
    size: usize,
    /// Smoke test: 5 ms per row, one run, buffers of at most 1 KiB (not a measurement)
    #[arg(long)]
    quick: bool,
    /// Directory for crypto.csv and the run record crypto.json (and where bench/ghash-soft.sh
    /// leaves ghash-soft.csv)
    #[arg(long, default_value = "bench-out/crypto")]
    out: PathBuf,
    /// Run bench/ghash-soft.sh first: builds examples/ghash.rs with polyval forced to software
    /// (needs cargo and this source tree; the first build takes minutes)
    #[arg(long)]
    ghash_soft: bool,
}

fn parse_crypto_size(s: &str) -> Result<usize, String> {
    let v: usize = s.trim().parse().map_err(|e| format!("{e}"))?;
    if (1..=bench::crypto::MAX_SIZE).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not within 1..={}", bench::crypto::MAX_SIZE))
    }
}

#[derive(Debug, Args)]
struct SealArgs {
    /// Payload sizes in bytes, comma separated
    #[arg(long, value_delimiter = ',', default_value = "64,512,1400,8192,65000", value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Suites, comma separated (aes128-gcm, aes256-gcm, chacha20-poly1305)
    #[arg(long, value_delimiter = ',', default_value = "aes128-gcm,aes256-gcm,chacha20-poly1305", value_parser = parse_suite)]
    suites: Vec<SuiteId>,
    /// Seconds per timed run
    #[arg(long, default_value_t = 0.3, value_parser = parse_seconds)]
    seconds: f64,
    /// Timed runs per measurement (the median is reported)
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: u32,
    /// Directory for seal.csv and the run record seal.json
    #[arg(long, default_value = "bench-out/seal")]
    out: PathBuf,
}

fn parse_probability(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a probability in [0, 1)"))
    }
}

fn parse_delay_ms(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=10_000.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a delay within 0..=10000 ms"))
    }
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() && v > 0.0 && v <= 60.0 {
        Ok(v)
    } else {
        Err(format!("{v} is not within (0, 60] seconds"))
    }
}

fn parse_size(s: &str) -> Result<usize, String> {
    let v: usize = s.trim().parse().map_err(|e| format!("{e}"))?;
    if (1..=bench::seal::MAX_SIZE).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not within 1..={}", bench::seal::MAX_SIZE))
    }
}

fn parse_suite(s: &str) -> Result<SuiteId, String> {
    let suite = SuiteId::from_name(s.trim()).map_err(|e| e.to_string())?;
    if suite.is_legacy() {
        return Err(format!(
            "{suite} is a legacy lab suite; choose from aes128-gcm, aes256-gcm, chacha20-poly1305"
        ));
    }
    Ok(suite)
}

fn init_tracing(verbose: u8) {
    let level = match verbose {
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
    // Fails only if a subscriber is already set, which cannot happen here.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Keygen(a) => keys::keygen(a.kind.into(), &a.path, a.force),
        Command::Pubkey(a) => keys::pubkey(&a.path, a.kind.map(Into::into), a.trust_line),
        Command::Init(a) => keys::init(a.host_name, a.owner_name),
        Command::Trust(TrustCommand::Check { file }) => keys::trust_check(&file),
        Command::Trust(TrustCommand::Add {
            kind,
            name,
            key,
            file,
        }) => keys::trust_add(file.file, kind.into(), &name, &key),
        Command::Trust(TrustCommand::Remove { name, file }) => keys::trust_remove(file.file, &name),
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
            stdin_name: a.stdin_name,
            timeouts: a.timeouts.get(),
            quiet: a.quiet,
        }),
        Command::Recv(a) => stream::recv(stream::RecvParams {
            listen: a.listen,
            dir: a.dir,
            stdout: a.stdout,
            once: a.once,
            force: a.force,
            keep_group_other_write: a.keep_group_other_write,
            key: a.key,
            trust: a.trust,
            timeouts: a.timeouts.get(),
            limits: sealink_stream::ConnLimits {
                max_conns: a.max_conns,
                max_pending: a.max_pending,
                ..sealink_stream::ConnLimits::default()
            },
            quiet: a.quiet,
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
        Command::Down(a) => tunnel::down(&a.name, a.run_dir.run_dir),
        Command::Completions(a) => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(a.shell, &mut cmd, "sealink", &mut std::io::stdout());
            Ok(())
        }
        Command::Man => {
            let cmd = <Cli as clap::CommandFactory>::command();
            clap_mangen::Man::new(cmd).render(&mut std::io::stdout())?;
            Ok(())
        }
        Command::Show(a) => tunnel::show(a.name.as_deref(), a.run_dir.run_dir, a.json),
        Command::Relay(a) => relay::run(relay::Params {
            listen: a.listen,
            to: a.to,
            faults: relay::FaultConfig {
                loss: a.loss,
                reorder: a.reorder,
                duplicate: a.duplicate,
                corrupt: a.corrupt,
                replay: a.replay,
                reorder_depth: a.reorder_depth,
                replay_delay: Duration::from_millis(a.replay_delay_ms),
                rate_limit: a.rate_limit.map(|mbit| mbit * 1e6 / 8.0),
            },
            seed: a.seed,
            stats_every: a.stats_every.map(Duration::from_secs_f64),
        })
        .map_err(Into::into),
        Command::Demo(a) => demo::run(&demo::Params {
            seed: a.seed,
            messages: a.messages as usize,
            loss: a.loss,
            delay: Duration::from_secs_f64(a.delay_ms / 1e3),
        })
        .map_err(Into::into),
        Command::Bench(BenchCommand::Seal(a)) => bench::seal::run(&bench::seal::Params {
            sizes: a.sizes,
            suites: a.suites,
            seconds: a.seconds,
            runs: a.runs as usize,
            out: a.out,
        })
        .map_err(Into::into),
        Command::Bench(BenchCommand::Crypto(a)) => bench::crypto::run(&bench::crypto::Params {
            seconds: a.seconds,
            runs: a.runs as usize,
            size: a.size,
            quick: a.quick,
            out: a.out,
            ghash_soft: a.ghash_soft,
        })
        .map_err(Into::into),
        Command::Bench(BenchCommand::Stacks(a)) => {
            sealink_engine::set_pin_workers(a.pin);
            bench::stacks::run(&bench::stacks::Params {
                workers: a.workers.map_or_else(
                    || std::thread::available_parallelism().map_or(1, |n| n.get()),
                    |w| w as usize,
                ),
                packet: a.packet,
                seconds: a.seconds.unwrap_or(if a.quick { 0.02 } else { 0.3 }),
                runs: a.runs.map_or(if a.quick { 3 } else { 5 }, |r| r as usize),
                out: a.out,
                stacks: if a.stacks.is_empty() {
                    bench::stacks::STACKS.iter().collect()
                } else {
                    a.stacks
                },
                quick: a.quick,
                batch: a.batch,
            })
            .map_err(Into::into)
        }
        Command::Bench(BenchCommand::Datagram(a)) => {
            bench::datagram::run(&bench::datagram::Params {
                sizes: a.sizes,
                seconds: a.seconds.unwrap_or(if a.quick { 0.3 } else { 2.0 }),
                runs: a.runs.map_or(if a.quick { 1 } else { 3 }, |r| r as usize),
                urgent: a.urgent,
                quick: a.quick,
                no_gso: a.no_gso,
                workers: a.workers.map(usize::from),
                max_datagram: usize::from(a.max_datagram),
                out: a.out,
                peer: a.peer,
            })
            .map_err(Into::into)
        }
        Command::Bench(BenchCommand::Adp(a)) => bench::adp::run(&bench::adp::Params {
            out: a.out,
            quick: a.quick,
            seed: a.seed,
            profiles: a.profiles,
            pcap: a.pcap,
        })
        .map_err(Into::into),
        Command::Bench(BenchCommand::TunnelCores(a)) => {
            let c = &a.cores;
            bench::tunnel_cores::run(&bench::tunnel_cores::Params {
                workers: c.workers(),
                batches: if c.quick { vec![1, 32] } else { a.batches },
                batch: a.batch,
                seconds: c.seconds(),
                runs: c.runs(),
                quick: c.quick,
                out: c
                    .out
                    .clone()
                    .unwrap_or_else(|| "bench-out/tunnel-cores".into()),
            })
            .map_err(Into::into)
        }
        Command::Bench(BenchCommand::Gpu(a)) => {
            let c = &a.cores;
            bench::gpu::run(&bench::gpu::Params {
                sizes: match (a.sizes.is_empty(), c.quick) {
                    (false, _) => a.sizes.iter().map(|&s| s as usize).collect(),
                    (true, true) => vec![4 << 10, 128 << 10],
                    (true, false) => bench::gpu::DEFAULT_SIZES.to_vec(),
                },
                workers: c.workers(),
                seconds: c.seconds(),
                runs: c.runs(),
                quick: c.quick,
                out: c.out.clone().unwrap_or_else(|| "bench-out/gpu".into()),
            })
            .map_err(Into::into)
        }
        Command::Bench(BenchCommand::Socket(a)) => bench::socket::run(&bench::socket::Params {
            size: a.size.map_or(
                if a.quick {
                    bench::socket::QUICK_SIZE
                } else {
                    1 << 30
                },
                |m| m << 20,
            ),
            runs: a.runs.map_or(if a.quick { 1 } else { 3 }, |r| r as usize),
            batch: a.batch,
            quick: a.quick,
            out: a.out,
        })
        .map_err(Into::into),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and succeed; usage errors exit 2.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    init_tracing(cli.verbose);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error::chain(&*e));
            // A bench's own argument checks (sizes, profiles) are usage errors too.
            let usage = matches!(
                e.downcast_ref::<sealink_lab::Error>(),
                Some(sealink_lab::Error::Usage(_))
            );
            ExitCode::from(if usage { EXIT_USAGE } else { 1 })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parsers() {
        assert_eq!(parse_suite("AES128-GCM"), Ok(SuiteId::Aes128Gcm));
        assert!(parse_suite("legacy-des-cbc-hmac-md5").is_err());
        assert!(parse_suite("rot13").is_err());
        assert_eq!(parse_size("1400"), Ok(1400));
        assert!(parse_size("0").is_err());
        assert!(parse_probability("1").is_err());
        assert!(parse_seconds("0").is_err());
        assert!(parse_delay_ms("-1").is_err());
    }
}

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
