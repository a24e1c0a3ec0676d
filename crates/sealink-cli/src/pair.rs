//! `sealink pair`: two hosts trust each other's host and owner keys after one short code is
//! read from one screen and typed on the other, as magic-wormhole and croc pair.
//!
//! The listener draws a code, waits for one TCP connection and runs the exchange
//! (`sealink_keys::pair`, the protocol) once, whatever its outcome: an attacker gets a single guess at the code. Both
//! sides then show the fingerprints and add `host NAME KEY` and `owner NAME KEY` to their trust
//! files through [`trust::add`], the code (and lock) of `sealink trust add`.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use sealink_keys::keyfile::{self, KeyFileError, KeyKind};
use sealink_keys::{Identity, fingerprint, home, trust};

use sealink_keys::pair::{self as proto, Code, Payload, Plan, Planned};

/// TCP port of `sealink pair` (one above the stream receiver's 7878).
pub const DEFAULT_PORT: u16 = 7879;
/// How long one read or write of the exchange may take once connected: the exchange is a few
/// hundred bytes, so a peer this slow is gone.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `sealink pair CODE HOST` tries to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Keys, trust file and name of this side.
#[derive(Debug)]
pub struct Me {
    pub id: Identity,
    /// The name the peer files this side under [default: the host name].
    pub name: Option<String>,
}

/// `sealink pair [--listen ADDR]`.
#[derive(Debug)]
pub struct ListenParams {
    pub listen: String,
    pub timeout: Duration,
    /// A fixed code instead of a drawn one (hidden option, for tests and scripts).
    pub code: Option<String>,
    pub me: Me,
}

/// `sealink pair CODE HOST[:PORT]`.
#[derive(Debug)]
pub struct JoinParams {
    pub code: String,
    pub dest: String,
    pub me: Me,
}

/// This side's payload and trust file path, read before any network traffic so that a missing
/// key fails at once rather than after the peer has typed the code.
fn load(me: Me) -> Result<(Payload, PathBuf)> {
    let public = |path: PathBuf, kind: KeyKind| -> Result<[u8; 32]> {
        let private = match keyfile::read_private(&path, kind) {
            Err(KeyFileError::NotFound { .. }) => bail!(
                "{kind} key {} does not exist: run `sealink init` first (or name one with --{})",
                path.display(),
                if kind == KeyKind::Host {
                    "key"
                } else {
                    "owner"
                }
            ),
            r => r?,
        };
        Ok(keyfile::public_from_private(kind, &private)?)
    };
    let host = public(me.id.host_key_path(), KeyKind::Host)?;
    let owner = public(me.id.owner_key_path(), KeyKind::Owner)?;
    // --name, else the name `init` was given (so that two machines both called `vm` pair under
    // the names their users chose), else the system's host name.
    let name = me.name.unwrap_or_else(|| {
        let given = std::fs::read_to_string(home::home().join(home::HOST_NAME)).ok();
        let system = || std::fs::read_to_string("/etc/hostname").ok();
        trust::default_name(
            given.filter(|g| !g.trim().is_empty()).or_else(system),
            "host",
        )
    });
    trust::check_name(&name)?;
    let trust_path = me.id.trust_path();
    // Refuse an unreadable or insecure trust file now, not after the exchange.
    let own = trust::read_trust_or_empty(&trust_path)?;
    // The owner's name: the one this home's trust file gives its own owner key (`init
    // --owner-name` wrote it there), else the host's.
    let owner_name = own
        .owner_name(&owner)
        .map_or_else(|| name.clone(), str::to_owned);
    Ok((
        Payload {
            name,
            owner_name,
            host,
            owner,
        },
        trust_path,
    ))
}

/// `ADDR:PORT`, or a host or address alone on [`DEFAULT_PORT`].
fn resolve(s: &str) -> Result<SocketAddr> {
    let with_port = if s.parse::<SocketAddr>().is_ok() {
        s.to_owned()
    } else if let Ok(ip) = s.parse::<IpAddr>() {
        SocketAddr::new(ip, DEFAULT_PORT).to_string()
    } else if s.contains(':') {
        s.to_owned()
    } else {
        format!("{s}:{DEFAULT_PORT}")
    };
    with_port
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {s}"))?
        .next()
        .ok_or_else(|| anyhow!("{s} has no address"))
}

/// Waits for one connection until `deadline` (std's accept has no timeout: poll it).
fn accept_until(l: &TcpListener, deadline: Instant) -> Result<(TcpStream, SocketAddr)> {
    l.set_nonblocking(true)?;
    loop {
        match l.accept() {
            Ok((s, peer)) => {
                s.set_nonblocking(false)?;
                return Ok((s, peer));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    bail!("nobody connected before the timeout: the code is void");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(anyhow!(e).context("accept failed")),
        }
    }
}

/// This side's half of the exchange on `s` with `peer` (`initiator`: the joining host), then
/// the trust-file entries.
fn exchange(
    mut s: TcpStream,
    peer: SocketAddr,
    initiator: bool,
    code: &Code,
    mine: &Payload,
    trust_path: &Path,
) -> Result<()> {
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut plans = Vec::new();
    let check = |t: &Payload| {
        plans = plan(t, trust_path)?.into();
        Ok(())
    };
    let theirs = if initiator {
        proto::initiate(&mut s, code, mine, check)?
    } else {
        proto::respond(&mut s, code, mine, check)?
    };
    finish(mine, &theirs, peer, trust_path, plans)
}

/// `sealink pair`: draws a code, serves one attempt, and exits.
pub fn listen(p: ListenParams) -> Result<()> {
    let (mine, trust_path) = load(p.me)?;
    let code = match p.code {
        Some(c) => Code::parse(&c)?,
        None => Code::generate()?,
    };
    let addr = resolve(&p.listen)?;
    let l = TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    let local = l.local_addr()?;
    eprintln!("listening on {local} for one pairing attempt");
    // The code alone on stdout, for scripts; the instructions on stderr.
    crate::output::print(&format!("{}\n", code.text()))?;
    let port = if local.port() == DEFAULT_PORT {
        String::new()
    } else {
        format!(":{}", local.port())
    };
    eprintln!(
        "on the other host, run:\n  sealink pair {} THIS-HOST{port}\n(the code works once and expires in {} s)",
        code.text(),
        p.timeout.as_secs()
    );
    let (s, peer) = accept_until(&l, Instant::now() + p.timeout)?;
    // One attempt only: stop listening before the exchange, whatever it gives.
    drop(l);
    eprintln!("connection from {peer}");
    exchange(s, peer, false, &code, &mine, &trust_path)
}

/// `sealink pair CODE HOST[:PORT]`.
pub fn join(p: JoinParams) -> Result<()> {
    let code = Code::parse(&p.code)?;
    let (mine, trust_path) = load(p.me)?;
    let addr = resolve(&p.dest)?;
    let s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).with_context(|| {
        format!(
            "cannot connect to {addr}: is `sealink pair` waiting there? (a code works once: \
             the listener exits after one attempt)"
        )
    })?;
    exchange(s, addr, true, &code, &mine, &trust_path)
}

/// What to do with each of the peer's keys ([`proto::plan`]), checked before either side
/// writes anything.
fn plan(theirs: &Payload, trust_path: &Path) -> Result<[Planned; 2], String> {
    let current = trust::read_trust_or_empty(trust_path).map_err(|e| crate::error::chain(&e))?;
    proto::plan(theirs, &current).map_err(|e| format!("{}: {e}", trust_path.display()))
}

/// Shows the fingerprints and carries out the plans, once both sides accepted.
fn finish(
    mine: &Payload,
    theirs: &Payload,
    peer: SocketAddr,
    trust_path: &Path,
    plans: Vec<Planned>,
) -> Result<()> {
    eprintln!(
        "paired with {} at {peer}\n  their host key  {}\n  their owner key {}\n  this host key   {}\n  this owner key  {}\n\
         (the same four fingerprints show on the other host: compare them if in doubt)",
        theirs.name,
        fingerprint(&theirs.host),
        fingerprint(&theirs.owner),
        fingerprint(&mine.host),
        fingerprint(&mine.owner),
    );
    for Planned {
        kind,
        name,
        key,
        plan,
    } in plans
    {
        let word = kind.trust_keyword();
        let path = trust_path.display();
        match plan {
            Plan::Already => eprintln!("{path}: already trusts {word} {name} with this key"),
            Plan::OtherName(other) => eprintln!(
                "{path}: already trusts this {word} key as {other}; not listed again as {name}"
            ),
            Plan::Add => match trust::add(trust_path, kind, &name, &key)? {
                trust::Added::New => eprintln!("{path}: now trusts {word} {name}"),
                trust::Added::AlreadyTrusted => {
                    eprintln!("{path}: already trusts {word} {name} with this key")
                }
            },
        }
    }
    Ok(())
}
