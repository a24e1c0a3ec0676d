//! sealink's manual pages: one per command, laid out as wg(8) and rsync(1) are: NAME,
//! SYNOPSIS, DESCRIPTION, OPTIONS, COMMANDS (clap_mangen renders those from the command tree),
//! then EXAMPLES and NOTES from the command's `--help` epilogue, one example per line, and EXIT
//! STATUS, ENVIRONMENT, FILES and SEE ALSO, which every page carries. The footer names the
//! version, not the command. [`find`] picks a command's page, [`write_all`] writes every page.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use roff::{Roff, bold, italic, roman};

/// Why a page was not rendered or written.
#[derive(Debug, thiserror::Error)]
pub enum ManError {
    /// No (visible) command of that path: the caller's usage error.
    #[error("no command `sealink {0}`: `sealink --help` lists them")]
    NoCommand(String),
    #[error("cannot {what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ManError {
    let what = what.into();
    move |source| ManError::Io { what, source }
}

/// The command `path` names under `root` (`["msg", "send"]`), hidden ones not counted.
pub fn find<'a>(root: &'a clap::Command, path: &[String]) -> Result<&'a clap::Command, ManError> {
    let mut at = root;
    for (i, name) in path.iter().enumerate() {
        at = at
            .get_subcommands()
            .find(|s| s.get_name() == name && !s.is_hide_set())
            .ok_or_else(|| ManError::NoCommand(path[..=i].join(" ")))?;
    }
    Ok(at)
}

/// Writes the page of `root` and of each visible command under it into `dir` (made if missing),
/// as `sealink.1`, `sealink-send.1`, `sealink-msg-send.1`, ...; the files written, in order.
pub fn write_all(
    root: &clap::Command,
    dir: &Path,
    version: &str,
) -> Result<Vec<PathBuf>, ManError> {
    std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
    fn write(
        cmd: &clap::Command,
        path: &mut Vec<String>,
        dir: &Path,
        version: &str,
        out: &mut Vec<PathBuf>,
    ) -> Result<(), ManError> {
        let names: Vec<&str> = path.iter().map(String::as_str).collect();
        let file = dir.join(format!("{}.1", page_name(&names)));
        std::fs::write(&file, render(cmd, &names, version)?)
            .map_err(io(format!("write {}", file.display())))?;
        out.push(file);
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            path.push(sub.get_name().to_owned());
            write(sub, path, dir, version, out)?;
            path.pop();
        }
        Ok(())
    }
    let mut written = Vec::new();
    write(root, &mut Vec::new(), dir, version, &mut written)?;
    Ok(written)
}

/// The page of `cmd`, whose command path from `sealink` is `path` (empty: sealink(1)).
/// `version` goes into the footer.
pub fn render(cmd: &clap::Command, path: &[&str], version: &str) -> Result<Vec<u8>, ManError> {
    let epilogue = cmd
        .get_after_long_help()
        .or_else(|| cmd.get_after_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    // The epilogue becomes sections of its own below, not clap_mangen's "EXTRA".
    let bare = cmd
        .clone()
        .after_help(None::<&str>)
        .after_long_help(None::<&str>);
    let man = clap_mangen::Man::new(bare)
        .title(page_name(path).to_uppercase())
        .source(format!("sealink {version}"))
        .manual("sealink manual");
    let mut head = Vec::new();
    let rendering = || io("render the page");
    man.render_title(&mut head).map_err(rendering())?;
    man.render_name_section(&mut head).map_err(rendering())?;
    man.render_synopsis_section(&mut head)
        .map_err(rendering())?;
    man.render_description_section(&mut head)
        .map_err(rendering())?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut head).map_err(rendering())?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut head)
            .map_err(rendering())?;
    }
    // Each clap_mangen call writes roff's preamble again: keep the first only.
    let preamble = Roff::new().render();
    let mut out = Vec::new();
    for (i, chunk) in split_after(&head, preamble.as_bytes())
        .into_iter()
        .enumerate()
    {
        out.extend_from_slice(if i == 0 {
            chunk
        } else {
            strip(chunk, &preamble)
        });
    }
    let mut roff = Roff::new();
    epilogue_sections(&mut roff, &epilogue);
    common_sections(&mut roff, cmd, path, &epilogue);
    out.extend_from_slice(strip(roff.render().as_bytes(), &preamble));
    Ok(out)
}

/// `sealink-msg-send` for `["msg", "send"]`, `sealink` for `[]`.
pub fn page_name(path: &[&str]) -> String {
    std::iter::once("sealink")
        .chain(path.iter().copied())
        .collect::<Vec<_>>()
        .join("-")
}

/// `bytes` cut before each further occurrence of `preamble` (the first chunk keeps its own).
fn split_after<'a>(bytes: &'a [u8], preamble: &[u8]) -> Vec<&'a [u8]> {
    let mut cuts = vec![0];
    let mut i = preamble.len().min(bytes.len());
    while i + preamble.len() <= bytes.len() {
        if &bytes[i..i + preamble.len()] == preamble {
            cuts.push(i);
            i += preamble.len();
        } else {
            i += 1;
        }
    }
    cuts.push(bytes.len());
    cuts.windows(2).map(|w| &bytes[w[0]..w[1]]).collect()
}

fn strip<'a>(chunk: &'a [u8], preamble: &str) -> &'a [u8] {
    chunk.strip_prefix(preamble.as_bytes()).unwrap_or(chunk)
}

/// The `--help` epilogue as sections: paragraphs that start `Example:`/`Examples:` go to
/// EXAMPLES (one command per line, set as written), those that start `Exit status` to EXIT
/// STATUS's first paragraph, the rest to NOTES (indented lines kept as written, the others
/// filled).
fn epilogue_sections(roff: &mut Roff, epilogue: &str) {
    let mut examples = Vec::new();
    let mut notes = Vec::new();
    for para in epilogue
        .split("\n\n")
        .map(str::trim_end)
        .filter(|p| !p.trim().is_empty())
    {
        let first = para.lines().next().unwrap_or_default().trim();
        if first.starts_with("Example") && first.ends_with(':') {
            examples.extend(para.lines().skip(1).map(|l| l.trim().to_owned()));
        } else if !first.starts_with("Exit status") {
            notes.push(para.to_owned());
        }
    }
    if !examples.is_empty() {
        roff.control("SH", ["EXAMPLES"]);
        roff.control("PP", [])
            .control("RS", ["4"])
            .control("nf", []);
        for e in examples.iter().filter(|e| !e.is_empty()) {
            roff.text([bold(e.as_str())]);
        }
        roff.control("fi", []).control("RE", []);
    }
    if !notes.is_empty() {
        roff.control("SH", ["NOTES"]);
        for n in notes {
            paragraph(roff, &n);
        }
    }
}

/// One paragraph: runs of indented lines set as written (lists, commands), others filled.
fn paragraph(roff: &mut Roff, text: &str) {
    roff.control("PP", []);
    let mut literal = false;
    for line in text.lines() {
        let indented = line.starts_with("  ");
        if indented != literal {
            roff.control(if indented { "nf" } else { "fi" }, []);
            literal = indented;
        }
        roff.text([roman(if indented { line } else { line.trim() })]);
    }
    if literal {
        roff.control("fi", []);
    }
}

/// EXIT STATUS, ENVIRONMENT, FILES and SEE ALSO.
fn common_sections(roff: &mut Roff, cmd: &clap::Command, path: &[&str], epilogue: &str) {
    roff.control("SH", ["EXIT STATUS"]);
    let own = epilogue
        .split("\n\n")
        .find(|p| p.trim_start().starts_with("Exit status"));
    match own {
        Some(p) => paragraph(roff, p.trim()),
        None => {
            roff.text([roman(
                "0 on success; 1 when the command failed (network, files, keys, a transfer); \
                 2 on a usage error (bad arguments or options).",
            )]);
        }
    }

    roff.control("SH", ["ENVIRONMENT"]);
    for (name, what) in [
        (
            "SEALINK_HOME",
            "Where keys and the trust file live: host.key, owner.key, trust, host-name. Unset: \
             ~/.sealink if it exists, else $XDG_CONFIG_HOME/sealink (~/.config/sealink).",
        ),
        (
            "SEALINK_AEAD_BACKEND",
            "aws-lc-rs, ring, openssl or aws-lc-rs+openssl: the AEAD library for every suite, \
             instead of the one chosen for this CPU (sealink --version -v shows the choice).",
        ),
        (
            "RUST_LOG",
            "Log filter (for example debug, or sealink_stream=trace); decides instead of -v and -q.",
        ),
        ("NO_COLOR", "When set, logs carry no colour."),
    ] {
        roff.control("TP", []).text([bold(name)]);
        roff.text([roman(what)]);
    }

    roff.control("SH", ["FILES"]);
    let mut files = vec![
        (
            "$SEALINK_HOME/host.key, host.key.pub",
            "This host's X25519 key pair (mode 0600).",
        ),
        (
            "$SEALINK_HOME/owner.key, owner.key.pub",
            "This owner's Ed25519 key pair (mode 0600).",
        ),
        (
            "$SEALINK_HOME/trust",
            "Trusted keys, one per line: host NAME KEY or owner NAME KEY (sealink trust list).",
        ),
        (
            "$SEALINK_HOME/host-name",
            "The name sealink init gave this host, which sealink pair sends.",
        ),
    ];
    let tunnel = matches!(
        path.first().copied(),
        None | Some("up" | "down" | "show" | "reload")
    );
    if tunnel {
        files.extend([
            (
                "/etc/sealink/NAME.toml, /etc/wireguard/NAME.conf",
                "A tunnel's config: sealink's TOML, or a wg-quick file (looked for in that order).",
            ),
            (
                "/run/sealink",
                "Running tunnels' control sockets and state (sealink show, down, reload).",
            ),
        ]);
    }
    for (file, what) in files {
        roff.control("TP", []).text([italic(file)]);
        roff.text([roman(what)]);
    }

    roff.control("SH", ["SEE ALSO"]);
    let mut see: Vec<String> = Vec::new();
    if !path.is_empty() {
        see.push(format!("{}(1)", page_name(&path[..path.len() - 1])));
    }
    see.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).map(|s| {
        let mut p = path.to_vec();
        p.push(s.get_name());
        format!("{}(1)", page_name(&p))
    }));
    match path.first().copied() {
        Some("send" | "recv") => see.extend(["rsync(1)".into(), "scp(1)".into()]),
        Some("up" | "down" | "show" | "reload") => {
            see.extend(["wg(8)".into(), "wg-quick(8)".into()])
        }
        Some("pair" | "trust" | "init" | "keygen" | "pubkey") => see.push("ssh-keygen(1)".into()),
        _ => {}
    }
    roff.text([roman(see.join(", "))]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> clap::Command {
        // As the CLI builds its tree for pages: no `help` subcommand.
        clap::Command::new("sealink")
            .disable_help_subcommand(true)
            .about("the tool")
            .after_help(
                "Examples:\n  sealink a\n\nA note\n  kept as written.\n\nExit status: 0 fine.",
            )
            .subcommand(
                clap::Command::new("msg")
                    .disable_help_subcommand(true)
                    .about("messages")
                    .subcommand(clap::Command::new("send").about("send one")),
            )
            .subcommand(clap::Command::new("hidden").hide(true))
    }

    #[test]
    fn pages_are_named_by_their_path() {
        assert_eq!(page_name(&[]), "sealink");
        assert_eq!(page_name(&["msg", "send"]), "sealink-msg-send");
        let root = tree();
        let path = ["msg".to_owned(), "send".to_owned()];
        assert_eq!(find(&root, &path).unwrap().get_name(), "send");
        let e = find(&root, &["hidden".to_owned()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no command `sealink hidden`: `sealink --help` lists them"
        );
    }

    #[test]
    fn a_page_has_one_preamble_and_the_epilogues_sections() {
        let mut root = tree();
        root.build();
        let page = String::from_utf8(render(&root, &[], "9.9").unwrap()).unwrap();
        let preamble = Roff::new().render();
        assert_eq!(page.matches(preamble.as_str()).count(), 1);
        for section in [
            "EXAMPLES",
            "NOTES",
            "EXIT STATUS",
            "ENVIRONMENT",
            "FILES",
            "SEE ALSO",
        ] {
            assert!(
                page.contains(&format!(".SH \"{section}\""))
                    || page.contains(&format!(".SH {section}")),
                "{section}: {page}"
            );
        }
        assert!(page.contains("sealink 9.9"), "{page}");
        assert!(page.contains("0 fine."), "{page}");
        // roff escapes the hyphen.
        assert!(page.contains("sealink\\-msg(1)"), "{page}");
    }

    #[test]
    fn every_visible_command_gets_a_file() {
        let mut root = tree();
        root.build();
        let d = tempfile::tempdir().unwrap();
        let written = write_all(&root, d.path(), "9.9").unwrap();
        let names: Vec<_> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["sealink.1", "sealink-msg.1", "sealink-msg-send.1"]);
    }
}
