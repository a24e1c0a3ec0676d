//! `sealink keygen`, `sealink pubkey`, `sealink init` and `sealink trust list|check|add|remove`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use sealink_keys::keyfile::{self, KeyFileError, KeyKind};
use sealink_keys::{home, trust};

use crate::output;
use anyhow::{Context, Result, anyhow, bail};

/// Generates a key pair, writes `path` (0600) and `path.pub`, prints the public line on stdout
/// and where the files went on stderr.
pub fn keygen(kind: KeyKind, path: &Path, force: bool) -> Result<()> {
    // As ssh-keygen: a key pair is two files, the private one 0600 and checked as such
    // wherever it is read; a private key on standard output would end in a terminal's
    // scrollback or a pipe with no mode at all. `-` named a file called `-` before: refused.
    if path == Path::new("-") {
        bail!(
            "keygen writes the private key to a file (mode 0600) and the public key to FILE.pub; \
             it has no standard-output mode: name a file (./- for one called -)"
        );
    }
    let private = keyfile::generate(kind)?;
    let public = keyfile::write_keypair(path, kind, &private, force)?;
    output::print(&format!("{}\n", keyfile::format_public(kind, &public)))?;
    eprintln!(
        "wrote {kind} private key to {} (mode 0600) and public key to {}",
        path.display(),
        keyfile::public_path(path).display()
    );
    Ok(())
}

/// Prints the public line of a private key file, or with `trust_line` the trust-file line
/// naming it.
pub fn pubkey(
    path: &Path,
    kind: Option<KeyKind>,
    trust_line: Option<String>,
    fingerprint: bool,
) -> Result<()> {
    // A public key file (`sealink-host KEY`, as keygen writes FILE.pub) is taken as it is, as
    // `ssh-keygen -lf` takes a .pub: a fingerprint or a trust line needs no private key.
    let (kind, public) = match public_file(path, kind)? {
        Some(found) => found,
        None => {
            let (kind, private) = match kind {
                Some(k) => (k, keyfile::read_private(path, k)?),
                None => detect(path)?,
            };
            let public = keyfile::public_from_private(kind, &private)?;
            drop(private);
            (kind, public)
        }
    };
    let line = match trust_line {
        _ if fingerprint => sealink_keys::fingerprint(&public),
        Some(name) => {
            check_name(&name)?;
            format!("{} {name} {}", kind.trust_keyword(), B64.encode(public))
        }
        None => keyfile::format_public(kind, &public),
    };
    output::print(&format!("{line}\n"))?;
    Ok(())
}

/// The key of a public key file (one line `sealink-host KEY` or `sealink-owner KEY`, of `kind`
/// when given); `None` when `path` is not one (a private key file, or unreadable: the private
/// key path then reports it).
fn public_file(path: &Path, kind: Option<KeyKind>) -> Result<Option<(KeyKind, [u8; 32])>> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(None);
    };
    let line = text.trim();
    for k in [KeyKind::Host, KeyKind::Owner] {
        let Some(b64) = line
            .strip_prefix(k.public_tag())
            .filter(|r| r.starts_with(char::is_whitespace))
        else {
            continue;
        };
        if let Some(want) = kind.filter(|w| *w != k) {
            let article = |k: KeyKind| match k {
                KeyKind::Host => "a host",
                KeyKind::Owner => "an owner",
            };
            bail!(
                "{}: this is {} public key, not {} one",
                path.display(),
                article(k),
                article(want)
            );
        }
        let key = sealink_keys::parse_public(b64.trim(), k).with_context(|| {
            format!(
                "{}: a {} line with a bad key",
                path.display(),
                k.public_tag()
            )
        })?;
        return Ok(Some((k, key)));
    }
    Ok(None)
}

/// A trust-file name, refused with the trust parser's own message.
fn check_name(name: &str) -> Result<()> {
    if trust::valid_name(name) {
        Ok(())
    } else {
        Err(sealink_keys::TrustProblem::BadName(name.to_owned()).into())
    }
}

/// The default names `init` gives: the system host name and `$USER`, reduced to the
/// characters a trust-file name allows.
pub(crate) fn default_name(from: Option<String>, fallback: &str) -> String {
    let cleaned: String = from
        .unwrap_or_default()
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '+' | '-'))
        .take(trust::MAX_NAME_LEN)
        .collect();
    if cleaned.is_empty() {
        fallback.to_string()
    } else {
        cleaned
    }
}

/// `sealink init`: $SEALINK_HOME (0700) with a host key and an owner key (kept if present) and
/// a trust file listing this owner (so `send` knows its own name); prints the commands the peer
/// runs to trust this side.
pub fn init(host_name: Option<String>, owner_name: Option<String>) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = home::home();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let given_host = host_name.is_some();
    let host = default_name(
        host_name.or_else(|| std::fs::read_to_string("/etc/hostname").ok()),
        "host",
    );
    let owner = default_name(owner_name.or_else(|| std::env::var("USER").ok()), "owner");
    for name in [&host, &owner] {
        check_name(name)?;
    }
    let mut publics = Vec::new();
    for (kind, file) in [
        (KeyKind::Host, home::HOST_KEY),
        (KeyKind::Owner, home::OWNER_KEY),
    ] {
        let path = dir.join(file);
        let public = match keyfile::read_private(&path, kind) {
            Ok(private) => {
                eprintln!("keeping {kind} key {}", path.display());
                keyfile::public_from_private(kind, &private)?
            }
            Err(KeyFileError::NotFound { .. }) => {
                let private = keyfile::generate(kind)?;
                let public = keyfile::write_keypair(&path, kind, &private, false)?;
                eprintln!("wrote {kind} key {} (mode 0600)", path.display());
                public
            }
            Err(e) => return Err(e.into()),
        };
        publics.push(public);
    }
    // The host name, for `sealink pair` to send (it has no --host-name of its own): written
    // when given, or when none was written yet.
    let name_path = dir.join(home::HOST_NAME);
    if given_host || !name_path.exists() {
        std::fs::write(&name_path, format!("{host}\n"))
            .with_context(|| format!("cannot write {}", name_path.display()))?;
    }
    let trust_path = dir.join(home::TRUST);
    trust::add(&trust_path, KeyKind::Owner, &owner, &publics[1])?;
    eprintln!("trust file {} lists owner {owner}", trust_path.display());
    output::print(&format!(
        "# On the peer, to trust this host and this owner:\n\
         sealink trust add host {host} {}\n\
         sealink trust add owner {owner} {}\n",
        B64.encode(publics[0]),
        B64.encode(publics[1])
    ))?;
    Ok(())
}

/// The key argument of `trust add`: base64, or a whole `sealink-host ...` line of that kind.
fn parse_key_arg(kind: KeyKind, key: &str) -> Result<[u8; 32]> {
    let b64 = match key.split_once(char::is_whitespace) {
        Some((tag, rest)) if tag == kind.public_tag() => rest.trim(),
        Some((tag, _)) => bail!("this is a {tag} line, not a {} key", kind.public_tag()),
        None => key.trim(),
    };
    Ok(sealink_keys::parse_public(b64, kind)?)
}

/// `sealink trust add KIND NAME KEY`.
pub fn trust_add(file: Option<PathBuf>, kind: KeyKind, name: &str, key: &str) -> Result<()> {
    let path = home::or_home(file, home::TRUST);
    let key = parse_key_arg(kind, key)?;
    match trust::add(&path, kind, name, &key)? {
        trust::Added::New => eprintln!(
            "{}: now trusts {} {name}",
            path.display(),
            kind.trust_keyword()
        ),
        trust::Added::AlreadyTrusted => eprintln!(
            "{}: already trusts {} {name} with this key",
            path.display(),
            kind.trust_keyword()
        ),
    }
    Ok(())
}

/// `sealink trust remove NAME`.
pub fn trust_remove(file: Option<PathBuf>, name: &str) -> Result<()> {
    let path = home::or_home(file, home::TRUST);
    match trust::remove(&path, name)? {
        0 => bail!("{}: no entry named {name}", path.display()),
        n => eprintln!(
            "{}: removed {n} entr{} named {name}",
            path.display(),
            if n == 1 { "y" } else { "ies" }
        ),
    }
    Ok(())
}

/// Reads a private key of either kind, telling which by the file's tag.
fn detect(path: &Path) -> Result<(KeyKind, keyfile::PrivateKey)> {
    let not_private = |found: &str| {
        anyhow!(
            "{}: this is {found}, not a private key file; give the private key file (the one without .pub)",
            path.display()
        )
    };
    match keyfile::read_private(path, KeyKind::Host) {
        Ok(k) => Ok((KeyKind::Host, k)),
        Err(KeyFileError::WrongKind { .. }) => match keyfile::read_private(path, KeyKind::Owner) {
            Ok(k) => Ok((KeyKind::Owner, k)),
            Err(KeyFileError::WrongKind { found, .. }) => Err(not_private(found)),
            Err(e) => Err(e.into()),
        },
        Err(KeyFileError::NotFound { .. }) => Err(anyhow!(
            "private key file {} does not exist; create one with `sealink keygen`",
            path.display()
        )),
        Err(KeyFileError::Malformed { problem, .. }) => Err(anyhow!(
            "{}: not a sealink private key file ({problem}); expected one line `{} <base64>` or `{} <base64>`",
            path.display(),
            KeyKind::Host.private_tag(),
            KeyKind::Owner.private_tag(),
        )),
        Err(e) => Err(e.into()),
    }
}

/// Calls `f(kind, name, key, width)` for every entry of `trust`, the kinds in `order`; `width` is
/// the longest name (to align the keys).
fn for_each_entry(
    trust: &sealink_keys::TrustFile,
    order: [KeyKind; 2],
    mut f: impl FnMut(KeyKind, &str, &[u8; 32], usize),
) {
    let width = trust
        .owners
        .iter()
        .chain(&trust.hosts)
        .map(|(n, _)| n.len())
        .max()
        .unwrap_or(0);
    for kind in order {
        let list = match kind {
            KeyKind::Host => &trust.hosts,
            KeyKind::Owner => &trust.owners,
        };
        for (name, key) in list {
            f(kind, name, key, width);
        }
    }
}

/// `sealink trust list`: every trusted key, one line each: kind, name, fingerprint (as transfers
/// and refusals print it) and key.
pub fn trust_list(file: Option<PathBuf>) -> Result<()> {
    let path = home::or_home(file, home::TRUST);
    let trust = sealink_keys::read_trust(&path)?;
    let mut out = String::new();
    for_each_entry(
        &trust,
        [KeyKind::Host, KeyKind::Owner],
        |kind, name, key, width| {
            let _ = writeln!(
                out,
                "{:<5} {name:<width$}  {}  {}",
                kind.trust_keyword(),
                sealink_keys::fingerprint(key),
                B64.encode(key)
            );
        },
    );
    if out.is_empty() {
        eprintln!(
            "{}: trusts no key yet (sealink trust add, or sealink pair)",
            path.display()
        );
    }
    output::print(&out)?;
    Ok(())
}

/// Parses a trust file and prints what it trusts.
pub fn trust_check(file: Option<PathBuf>, json: bool) -> Result<()> {
    let path = &home::or_home(file, home::TRUST);
    let read = sealink_keys::read_trust(path);
    if json {
        // The findings on stdout, good file or bad; a bad one still fails the command.
        output::print(&format!(
            "{}\n",
            sealink_keys::TrustCheck::of(path, &read).to_json()
        ))?;
        read?;
        return Ok(());
    }
    let trust = read?;
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: OK, {}, {}",
        path.display(),
        plural(trust.owners.len(), "owner"),
        plural(trust.hosts.len(), "host")
    );
    for_each_entry(
        &trust,
        [KeyKind::Owner, KeyKind::Host],
        |kind, name, key, width| {
            let _ = writeln!(
                out,
                "  {:<5} {name:<width$}  {}",
                kind.trust_keyword(),
                B64.encode(key)
            );
        },
    );
    output::print(&out)?;
    Ok(())
}
