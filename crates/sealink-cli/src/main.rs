//! `sealink`: keys and trust, stream, datagram and tunnel modes, and a loopback demo.
//! The papers' benchmarks, the simulated demo and the fault relay are not here: they are the `sealink-lab` binary
//! (crates/sealink-lab), which this crate does not depend on.
#![forbid(unsafe_code)]

mod demo;
mod error;
mod keys;
mod msg;
mod output;
mod pair;
mod stream;
mod tunnel;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use sealink_cmdline::{EXIT_USAGE, units};
use sealink_crypto::SuiteId;

use anyhow::Result;
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
    #[command(after_help = stream::SEND_HELP)]
    Send(stream::SendArgs),
    /// Receive files from `sealink send` into a directory (or standard output)
    #[command(after_help = stream::RECV_HELP)]
    Recv(stream::RecvArgs),
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
    #[command(flatten)]
    me: IdentityArgs,
}

/// This host's key and trust file (send, recv, msg, pair).
#[derive(Debug, Args)]
struct HostArgs {
    /// This host's private key [default: $SEALINK_HOME/host.key]
    #[arg(long)]
    key: Option<PathBuf>,
    /// Trust file: the hosts and owners this side believes (a receiver's senders, a sender's
    /// receivers; pair adds the peer to it) [default: $SEALINK_HOME/trust]
    #[arg(long)]
    trust: Option<PathBuf>,
}

/// [`HostArgs`] and the owner key of a side that sends or pairs.
#[derive(Debug, Args)]
struct IdentityArgs {
    #[command(flatten)]
    host: HostArgs,
    /// This owner's private key [default: $SEALINK_HOME/owner.key]
    #[arg(long)]
    owner: Option<PathBuf>,
}

impl HostArgs {
    fn identity(self) -> sealink_keys::Identity {
        sealink_keys::Identity {
            host_key: self.key,
            owner_key: None,
            trust: self.trust,
        }
    }
}

impl IdentityArgs {
    fn identity(self) -> sealink_keys::Identity {
        sealink_keys::Identity {
            owner_key: self.owner,
            ..self.host.identity()
        }
    }
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
    #[command(after_help = msg::LISTEN_HELP)]
    Listen(msg::ListenArgs),
    /// Send messages to a `sealink msg listen`; exits 0 once every one is acknowledged
    #[command(after_help = msg::SEND_HELP)]
    Send(msg::SendArgs),
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

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Keygen(a) => keys::keygen(a.kind.into(), &a.path, a.force),
        Command::Pubkey(a) => {
            keys::pubkey(&a.path, a.kind.map(Into::into), a.trust_line, a.fingerprint)
        }
        Command::Init(a) => keys::init(a.host_name, a.owner_name),
        Command::Pair(a) => {
            let me = pair::Me {
                id: a.me.identity(),
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
        Command::Send(a) => stream::send(a),
        Command::Recv(a) => stream::recv(a),
        Command::Msg(MsgCommand::Listen(a)) => msg::listen(a),
        Command::Msg(MsgCommand::Send(a)) => msg::send(a),
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
    let version = env!("CARGO_PKG_VERSION");
    let man_error = |e| match e {
        sealink_man::ManError::NoCommand(_) => error::UsageError(e.to_string()).into(),
        e => anyhow::Error::new(e),
    };
    let Some(dir) = dir else {
        let at = sealink_man::find(&cmd, path).map_err(man_error)?;
        let names: Vec<&str> = path.iter().map(String::as_str).collect();
        let page = sealink_man::render(at, &names, version)?;
        std::io::Write::write_all(&mut std::io::stdout(), &page)?;
        return Ok(());
    };
    let written = sealink_man::write_all(&cmd, dir, version).map_err(man_error)?;
    output::print(
        &written
            .iter()
            .map(|f| format!("{}\n", f.display()))
            .collect::<String>(),
    )?;
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
    // The tunnel's SAY_TARGET lines (a hook's `[#] CMD` and what it printed) go out plain.
    sealink_cmdline::init_logging(cli.verbose, cli.quiet, Some(sealink_tunnel::SAY_TARGET));
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
            if sending && sealink_stream::is_resumable_cut(&*e) {
                eprintln!("{}", stream::RESUME_HINT);
            }
            // A command's own argument checks after parsing are usage errors too; a transfer
            // that left some things out says so by its own status.
            ExitCode::from(if error::is_usage(&e) {
                EXIT_USAGE
            } else if let Some(p) = e.downcast_ref::<stream::Partial>() {
                p.code()
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
