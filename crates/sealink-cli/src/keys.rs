//! `sealink keygen`, `sealink pubkey` and `sealink trust check`.

use std::fmt::Write as _;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use sealink_keys::keyfile::{self, KeyFileError, KeyKind};

use crate::output;
use anyhow::{Result, anyhow};

/// Generates a key pair, writes `path` (0600) and `path.pub`, prints the public line on stdout
/// and where the files went on stderr.
pub fn keygen(kind: KeyKind, path: &Path, force: bool) -> Result<()> {
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

/// Prints the public line of a private key file.
pub fn pubkey(path: &Path, kind: Option<KeyKind>) -> Result<()> {
    let (kind, private) = match kind {
        Some(k) => (k, keyfile::read_private(path, k)?),
        None => detect(path)?,
    };
    let public = keyfile::public_from_private(kind, &private)?;
    drop(private);
    output::print(&format!("{}\n", keyfile::format_public(kind, &public)))?;
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

/// Parses a trust file and prints what it trusts.
pub fn trust_check(path: &Path) -> Result<()> {
    let trust = sealink_keys::read_trust(path)?;
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: OK, {}, {}",
        path.display(),
        plural(trust.owners.len(), "owner"),
        plural(trust.hosts.len(), "host")
    );
    let width = trust
        .owners
        .iter()
        .chain(&trust.hosts)
        .map(|(n, _)| n.len())
        .max()
        .unwrap_or(0);
    for (kind, list) in [
        (KeyKind::Owner, &trust.owners),
        (KeyKind::Host, &trust.hosts),
    ] {
        for (name, key) in list {
            let _ = writeln!(
                out,
                "  {:<5} {name:<width$}  {}",
                kind.trust_keyword(),
                B64.encode(key)
            );
        }
    }
    output::print(&out)?;
    Ok(())
}
