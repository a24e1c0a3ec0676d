//! `sealink keygen`, `sealink pubkey`, `sealink init` and `sealink trust list|check|add|remove`.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use sealink_keys::detect::{self, Ensured};
use sealink_keys::keyfile::{self, KeyKind};
use sealink_keys::{home, listing, trust};

use crate::output;
use anyhow::{Context, Result, bail};

/// The trust file of a receiving host (`msg listen`, `recv`), which must name at least one host
/// and one owner: trusting nobody, it could receive nothing.
pub fn receiving_trust(me: &sealink_keys::Identity) -> Result<(PathBuf, trust::TrustFile)> {
    let (trust_path, trust) = me.read_trust()?;
    if trust.hosts.is_empty() || trust.owners.is_empty() {
        bail!(
            "{} must trust at least one host and one owner to receive anything",
            trust_path.display()
        );
    }
    Ok((trust_path, trust))
}

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
    let (kind, public) = match detect::read_public_file(path, kind)? {
        Some(found) => found,
        None => {
            let (kind, private) = match kind {
                Some(k) => (k, keyfile::read_private(path, k)?),
                None => detect::read_any_private(path)?,
            };
            let public = keyfile::public_from_private(kind, &private)?;
            drop(private);
            (kind, public)
        }
    };
    let line = match trust_line {
        _ if fingerprint => sealink_keys::fingerprint(&public),
        Some(name) => {
            trust::check_name(&name)?;
            format!("{} {name} {}", kind.trust_keyword(), B64.encode(public))
        }
        None => keyfile::format_public(kind, &public),
    };
    output::print(&format!("{line}\n"))?;
    Ok(())
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
    let host = trust::default_name(
        host_name.or_else(|| std::fs::read_to_string("/etc/hostname").ok()),
        "host",
    );
    let owner = trust::default_name(owner_name.or_else(|| std::env::var("USER").ok()), "owner");
    for name in [&host, &owner] {
        trust::check_name(name)?;
    }
    let mut publics = Vec::new();
    for (kind, file) in [
        (KeyKind::Host, home::HOST_KEY),
        (KeyKind::Owner, home::OWNER_KEY),
    ] {
        let path = dir.join(file);
        let (public, how) = detect::ensure_keypair(&path, kind)?;
        match how {
            Ensured::Kept => eprintln!("keeping {kind} key {}", path.display()),
            Ensured::Written => eprintln!("wrote {kind} key {} (mode 0600)", path.display()),
        }
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

/// `sealink trust add KIND NAME KEY`.
pub fn trust_add(file: Option<PathBuf>, kind: KeyKind, name: &str, key: &str) -> Result<()> {
    let path = home::or_home(file, home::TRUST);
    let key = detect::parse_public_arg(kind, key)?;
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

/// `sealink trust list`: every trusted key, one line each: kind, name, fingerprint (as transfers
/// and refusals print it) and key.
pub fn trust_list(file: Option<PathBuf>) -> Result<()> {
    let path = home::or_home(file, home::TRUST);
    let out = listing::list_text(&sealink_keys::read_trust(&path)?);
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
    output::print(&listing::check_text(path, &read?))?;
    Ok(())
}
