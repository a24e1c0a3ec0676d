//! `sealink msg listen` and `sealink msg send`: datagram mode from the command line. Keys and
//! trust resolve as in stream mode (`$SEALINK_HOME`, else `~/.sealink` if it exists, else `~/.config/sealink`; `host NAME KEY` and
//! `owner NAME KEY` trust lines), and the UDP port defaults to stream mode's TCP port.

use std::time::Duration;

use sealink_crypto::Scope;
use sealink_datagram::{LocalOwner, Node, NodeConfig, NodeError, PeerConfig, Urgency};

use crate::stream::{parse_dest, resolve_listen};
use crate::{HostArgs, IdentityArgs};
use anyhow::{Context, Result, anyhow, bail};

pub const LISTEN_HELP: &str = "Examples:
  sealink msg listen
  sealink msg listen --listen 127.0.0.1:9000 --count 3
  sealink msg listen --json | jq .text

Each message prints as one line: `OWNER@HOST [to DEST] [SCOPE, N bytes]: TEXT`, where OWNER is
verified against its signature and the trust file and HOST is the trusted host whose channel
carried it; bytes that are not printable UTF-8 print as hex:... With --json, one object a line
with from, peer, to, scope, bytes and text or hex. Runs until a signal, or --count messages.";

pub const SEND_HELP: &str = "Examples:
  sealink msg send 10.0.0.2 hello
  sealink msg send bob@10.0.0.2:9000 'disk full' --to ops --urgent
  sealink msg send 10.0.0.2 a b c --deadline 50 --auth-only

Each MESSAGE argument is one message. Non-urgent messages may wait (up to the default 10 ms, or
--deadline) to ride together in one datagram; --urgent sends at once. The command exits 0 only
after the receiver has acknowledged every message, and fails after --timeout otherwise.";

#[derive(Debug, clap::Args)]
pub struct ListenArgs {
    /// UDP address to listen on (ADDR:PORT, or ADDR for port 7878)
    #[arg(long, default_value = "0.0.0.0:7878")]
    pub listen: String,
    #[command(flatten)]
    pub me: HostArgs,
    /// Print one JSON object per message
    #[arg(long)]
    pub json: bool,
    /// Exit after this many messages
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
}

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// The receiver: [NAME@]HOST[:PORT] (UDP port 7878 by default; NAME picks its trusted host key)
    pub dest: String,
    /// Messages, one per argument
    #[arg(required = true)]
    pub messages: Vec<String>,
    /// Trusted host name of the receiver (instead of NAME@)
    #[arg(long)]
    pub peer: Option<String>,
    #[command(flatten)]
    pub me: IdentityArgs,
    /// The sending owner's name [default: the trust file's `owner` line with this key]
    #[arg(long)]
    pub from: Option<String>,
    /// Destination owner at the receiver [default: the receiving host itself]
    #[arg(long)]
    pub to: Option<String>,
    /// Send at once, taking any queued messages along
    #[arg(long, conflicts_with = "deadline")]
    pub urgent: bool,
    /// Longest a message may wait to ride with others, in milliseconds
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub deadline: Option<u64>,
    /// Authenticate only: the message travels in clear, with a tag
    #[arg(long)]
    pub auth_only: bool,
    /// Local UDP address [default: any address, a free port]
    #[arg(long)]
    pub listen: Option<String>,
    /// Give up if not every message is acknowledged within this long (seconds, or with a unit:
    /// 30s, 5m)
    #[arg(long, value_name = "DURATION", default_value_t = 30.0, value_parser = crate::parse_timeout)]
    pub timeout: f64,
    /// No summary line
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn listen(p: ListenArgs) -> Result<()> {
    let me = p.me.identity();
    let (_, trust) = crate::keys::receiving_trust(&me)?;
    let host = me.host()?;
    let addr = resolve_listen(&p.listen)?;
    let mut cfg = NodeConfig::new(addr, host);
    cfg.directory = trust.directory()?;
    // Senders' addresses are learned from their authenticated handshakes.
    cfg.peers = trust
        .hosts
        .iter()
        .map(|(name, k)| PeerConfig {
            name: name.clone(),
            public_key: *k,
            addr: None,
        })
        .collect();
    let node = Node::start(cfg).with_context(|| format!("cannot listen on {addr}"))?;
    eprintln!("listening on {} (udp)", node.local_addr()?);
    let mut n = 0u64;
    while p.count.is_none_or(|c| n < c) {
        let Some(d) = node.recv(None) else { break };
        n += 1;
        let line = if p.json { d.json_line() } else { d.text_line() };
        crate::output::print(&line)?;
    }
    // Give the final acknowledgements a moment to leave before the socket closes.
    std::thread::sleep(Duration::from_millis(50));
    node.shutdown();
    Ok(())
}

pub fn send(p: SendArgs) -> Result<()> {
    let me = p.me.identity();
    let timeout = Duration::from_secs_f64(p.timeout);
    let urgency = match (p.urgent, p.deadline) {
        (true, _) => Urgency::Urgent,
        (false, Some(ms)) => Urgency::Deadline(Duration::from_millis(ms)),
        (false, None) => Urgency::Default,
    };
    let (trust_path, trust) = me.read_trust()?;
    let sealink_stream::Destination { name, host, addr } = parse_dest(&p.dest)?;
    let (peer_name, peer_key) =
        trust.pick_host(name.as_deref().or(p.peer.as_deref()), &host, &trust_path)?;
    let host_key = me.host()?;
    let owner_path = me.owner_key_path();
    let owner_key = me.owner()?;
    let owner_name = match p.from {
        Some(n) => n,
        None => trust
            .owner_name(&owner_key.public_key())
            .map(str::to_owned)
            .ok_or_else(|| {
                anyhow!(
                    "no `owner NAME KEY` line in {} matches {}; give the owner's name with --from",
                    trust_path.display(),
                    owner_path.display()
                )
            })?,
    };
    let owner = LocalOwner::new(&owner_name, owner_key)?;
    let listen = match &p.listen {
        Some(l) => resolve_listen(l)?,
        None if addr.is_ipv6() => "[::]:0".parse()?,
        None => "0.0.0.0:0".parse()?,
    };
    let mut cfg = NodeConfig::new(listen, host_key);
    // The node gives up on a peer that never answers after its handshake attempts (20, one a
    // second, by default): enough of them to last the whole --timeout, which ends the wait.
    cfg.config.handshake_attempts = handshake_attempts_for(timeout, cfg.config.handshake_timeout);
    cfg.peers.push(PeerConfig {
        name: peer_name.clone(),
        public_key: peer_key,
        addr: Some(addr),
    });
    let node = Node::start(cfg).with_context(|| format!("cannot bind {listen}"))?;
    let me = node.add_owner(owner);
    let scope = if p.auth_only {
        Scope::AuthOnly
    } else {
        Scope::Encrypt
    };
    for m in &p.messages {
        node.send(
            peer_name.as_str(),
            me,
            p.to.as_deref(),
            m.as_bytes(),
            urgency,
            scope,
        )
        .with_context(|| format!("cannot queue a message of {} bytes", m.len()))?;
    }
    match flush_showing_progress(&node, &peer_name, timeout, p.quiet) {
        Ok(()) => {}
        Err(NodeError::Timeout(t)) => {
            bail!(
                "not acknowledged by {peer_name} at {addr} within {t:?} (is `sealink msg listen` \
                 running there, and does it trust this host and owner {owner_name}?)"
            );
        }
        Err(NodeError::Undeliverable(n)) => {
            let refused = node.stats().endpoint.messages_refused;
            return Err(anyhow!(if refused > 0 {
                format!(
                    "{refused} of {n} undeliverable message(s) refused by {peer_name} at {addr}: \
                     it does not trust owner {owner_name}"
                )
            } else {
                format!(
                    "{n} message(s) undeliverable to {peer_name} at {addr} (peer unreachable or \
                     handshake refused)"
                )
            }));
        }
        Err(e) => return Err(e.into()),
    }
    node.shutdown();
    if !p.quiet {
        crate::output::print(&format!(
            "delivered {} message{} from {owner_name} to {peer_name} ({addr})\n",
            p.messages.len(),
            if p.messages.len() == 1 { "" } else { "s" }
        ))?;
    }
    Ok(())
}

/// Handshake initiations, one each `every`, that last `timeout` (and one more, so the last
/// retry is still pending when it ends).
fn handshake_attempts_for(timeout: Duration, every: Duration) -> u32 {
    let n = timeout.as_secs_f64() / every.as_secs_f64().max(1e-3);
    // Finite and at most 3600 s / 1 ms here: the cast cannot saturate.
    (n.ceil() as u32).saturating_add(1)
}

/// How often a wait for acknowledgements says how long it has waited: on a terminal, the
/// spinner's line is redrawn; elsewhere a line is written each `LINE_EVERY`.
const TICK: Duration = Duration::from_millis(200);
const LINE_EVERY: Duration = Duration::from_secs(5);

/// What a wait for acknowledgements shows after `waited` of `timeout`.
fn waiting_line(peer: &str, waited: Duration, timeout: Duration) -> String {
    format!(
        "waiting for an acknowledgement from {peer} ({} s of {} s)",
        waited.as_secs(),
        timeout.as_secs_f64().ceil() as u64
    )
}

/// [`Node::flush`] for up to `timeout`, saying on standard error (unless `quiet`) how long it
/// has waited once the wait lasts: a spinner on a terminal, a line every few seconds elsewhere.
fn flush_showing_progress(
    node: &Node,
    peer: &str,
    timeout: Duration,
    quiet: bool,
) -> Result<(), NodeError> {
    use std::io::IsTerminal;
    let start = std::time::Instant::now();
    let spinner = (!quiet && std::io::stderr().is_terminal()).then(|| {
        let pb = indicatif::ProgressBar::new_spinner();
        pb.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        pb
    });
    let mut next_line = LINE_EVERY;
    let r = loop {
        let left = timeout.saturating_sub(start.elapsed());
        match node.flush(peer, left.min(TICK)) {
            Err(NodeError::Timeout(_)) if !left.is_zero() => {}
            Err(NodeError::Timeout(_)) => break Err(NodeError::Timeout(timeout)),
            r => break r,
        }
        let waited = start.elapsed();
        if let Some(pb) = &spinner {
            if waited >= Duration::from_secs(1) {
                pb.set_message(waiting_line(peer, waited, timeout));
                pb.tick();
            }
        } else if !quiet && waited >= next_line && waited < timeout {
            eprintln!("{}", waiting_line(peer, waited, timeout));
            next_line += LINE_EVERY;
        }
    };
    if let Some(pb) = spinner {
        pb.finish_and_clear();
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_last_the_whole_timeout() {
        let s = Duration::from_secs;
        assert_eq!(handshake_attempts_for(s(60), s(1)), 61);
        assert_eq!(handshake_attempts_for(Duration::from_millis(500), s(1)), 2);
        assert_eq!(handshake_attempts_for(s(3600), Duration::ZERO), 3_600_001);
        assert_eq!(
            waiting_line("bob", Duration::from_millis(12_400), s(60)),
            "waiting for an acknowledgement from bob (12 s of 60 s)"
        );
    }
}
