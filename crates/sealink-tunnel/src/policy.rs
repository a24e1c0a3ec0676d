//! A full tunnel's routing, as wg-quick does it. When a peer's allowed IPs hold `0.0.0.0/0`
//! (or `::/0`), a default route into the interface would also carry the tunnel's own UDP
//! datagrams to the peer, which then never arrive. Instead, for each such family:
//!
//! - the tunnel's UDP sockets carry the mark `M` (`interface.fwmark`, default 51820);
//! - `ip route add default dev IFNAME table M`;
//! - `ip rule add table main suppress_prefixlength 0 priority 32760`: the main table still
//!   decides for every destination it has a more specific route to (the LAN, the peer's own
//!   network), but its default route no longer applies;
//! - `ip rule add not fwmark M table M priority 32761`: everything else that is not the tunnel's
//!   own traffic goes into the tunnel; the marked datagrams fall through to the main table and
//!   leave by the underlay as before.
//! - for IPv4, `net.ipv4.conf.all.src_valid_mark = 1`, so that reverse-path filtering sees the
//!   mark (wg-quick sets it too, and does not reset it).
//!
//! The route goes away with the interface. The rules do not: each is undone by a root shell
//! started during set-up, while `up` still holds its privileges, that runs the undo when the
//! tunnel closes its end of a pipe: at a clean exit, and also when the tunnel is killed or
//! crashes (unlike the down hooks, which run only at a clean exit). The undo commands are also
//! written, before any rule is added, to `NAME.policy` in the namespace's run directory; the
//! shell removes the file once done. If both the tunnel and the shell are killed (SIGKILL to
//! the whole service), the next `sealink up` or `sealink down` of that name finds the file and
//! undoes what it lists ([`clean_stale`]).

use std::path::{Path, PathBuf};

use crate::error::TunnelError;
use crate::hooks::{self, HookKind, sh_quote};
use crate::netconf::ip;

/// Priorities of the two rules: just before the main table's own rule (32766), where the
/// kernel would put the first rules added without one.
const PRIORITY_SUPPRESS: u32 = 32760;
const PRIORITY_MARK: u32 = 32761;

/// The record of a tunnel's rules in the run directory.
pub(crate) fn record_path(run_dir: &Path, ifname: &str) -> PathBuf {
    run_dir.join(format!("{ifname}.policy"))
}

/// The `ip` commands that set up (first) and undo (second) a full tunnel for IPv4 and/or IPv6.
fn commands(ifname: &str, mark: u32, v4: bool, v6: bool) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let (mut add, mut undo) = (Vec::new(), Vec::new());
    for (on, fam, all) in [(v4, "-4", "0.0.0.0/0"), (v6, "-6", "::/0")] {
        if !on {
            continue;
        }
        let m = mark.to_string();
        let words = |w: &[&str]| w.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        add.push(words(&[
            fam, "route", "add", all, "dev", ifname, "table", &m,
        ]));
        let suppress = |op| {
            let p = PRIORITY_SUPPRESS.to_string();
            words(&[
                fam,
                "rule",
                op,
                "table",
                "main",
                "suppress_prefixlength",
                "0",
                "priority",
                &p,
            ])
        };
        let marked = |op| {
            let p = PRIORITY_MARK.to_string();
            words(&[
                fam, "rule", op, "not", "fwmark", &m, "table", &m, "priority", &p,
            ])
        };
        // The suppressing rule first: alone it changes nothing; the marked rule then starts
        // taking traffic with the LAN's routes already kept.
        add.push(suppress("add"));
        add.push(marked("add"));
        undo.push(marked("del"));
        undo.push(suppress("del"));
    }
    (add, undo)
}

/// A line of the record: `ip` arguments, only ever a rule deletion with plain words (a record
/// edited to run anything else is refused, line by line).
fn parse_record_line(line: &str) -> Option<Vec<String>> {
    let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
    let plain = |w: &String| {
        !w.is_empty()
            && w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'/'))
    };
    let ok = words.len() >= 3
        && matches!(words[0].as_str(), "-4" | "-6")
        && words[1] == "rule"
        && words[2] == "del"
        && words[3..].iter().all(plain);
    ok.then_some(words)
}

/// Undoes the rules a tunnel of this name left behind, if its record is there (the tunnel and
/// its cleanup shell were both killed). Returns whether there was a record. Each rule already
/// gone is skipped quietly.
pub fn clean_stale(run_dir: &Path, ifname: &str) -> Result<bool, TunnelError> {
    let path = record_path(run_dir, ifname);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(TunnelError::Io {
                what: format!("read {}", path.display()),
                source,
            });
        }
    };
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match parse_record_line(line) {
            Some(args) => {
                if let Err(e) = ip(&args) {
                    tracing::debug!(error = %e, "stale rule already gone");
                }
            }
            None => tracing::warn!(path = %path.display(), line, "not a rule deletion: skipped"),
        }
    }
    std::fs::remove_file(&path).map_err(|source| TunnelError::Io {
        what: format!("remove {}", path.display()),
        source,
    })?;
    tracing::warn!(
        tunnel = ifname,
        "removed the full-tunnel rules that an earlier run left behind (it did not exit cleanly)"
    );
    Ok(true)
}

/// Installs a full tunnel's routing for the families given, with its undo armed; the returned
/// shell must be released ([`hooks::Armed::fire`]) at exit. On an error, whatever was added
/// is removed again before returning.
pub(crate) fn install(
    run_dir: &Path,
    ifname: &str,
    mark: u32,
    v4: bool,
    v6: bool,
) -> Result<hooks::Armed, TunnelError> {
    let (add, undo) = commands(ifname, mark, v4, v6);
    let record = record_path(run_dir, ifname);
    let lines: String = undo.iter().map(|a| a.join(" ") + "\n").collect();
    std::fs::write(&record, &lines).map_err(|source| TunnelError::Io {
        what: format!("write {}", record.display()),
        source,
    })?;
    let script: String = undo
        .iter()
        .map(|a| format!("ip {} 2>/dev/null; ", a.join(" ")))
        .chain([format!("rm -f -- {}", sh_quote(&record.to_string_lossy()))])
        .collect();
    let armed = match hooks::Armed::arm_always(HookKind::FullTunnel, &script) {
        Ok(a) => a,
        Err(e) => {
            let _ = std::fs::remove_file(&record);
            return Err(e);
        }
    };
    if v4 {
        if let Err(e) = std::fs::write("/proc/sys/net/ipv4/conf/all/src_valid_mark", "1") {
            tracing::warn!(error = %e, "cannot set net.ipv4.conf.all.src_valid_mark");
        }
    }
    for a in &add {
        if let Err(e) = ip(a) {
            // Undoes what was added, and removes the record.
            armed.fire();
            return Err(e);
        }
    }
    tracing::info!(
        tunnel = ifname,
        fwmark = mark,
        ipv4 = v4,
        ipv6 = v6,
        "full tunnel: everything but the tunnel's own datagrams is routed into it"
    );
    Ok(armed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_add_the_rules_and_undo_them_in_reverse() {
        let (add, undo) = commands("sl0", 51820, true, true);
        let add: Vec<String> = add.iter().map(|a| a.join(" ")).collect();
        let undo: Vec<String> = undo.iter().map(|a| a.join(" ")).collect();
        assert_eq!(
            add,
            [
                "-4 route add 0.0.0.0/0 dev sl0 table 51820",
                "-4 rule add table main suppress_prefixlength 0 priority 32760",
                "-4 rule add not fwmark 51820 table 51820 priority 32761",
                "-6 route add ::/0 dev sl0 table 51820",
                "-6 rule add table main suppress_prefixlength 0 priority 32760",
                "-6 rule add not fwmark 51820 table 51820 priority 32761",
            ]
        );
        assert_eq!(
            undo,
            [
                "-4 rule del not fwmark 51820 table 51820 priority 32761",
                "-4 rule del table main suppress_prefixlength 0 priority 32760",
                "-6 rule del not fwmark 51820 table 51820 priority 32761",
                "-6 rule del table main suppress_prefixlength 0 priority 32760",
            ]
        );
        // Every undo line reads back from the record.
        for u in &undo {
            assert!(parse_record_line(u).is_some(), "{u}");
        }
        let (add, undo) = commands("sl0", 7, false, true);
        assert_eq!((add.len(), undo.len()), (3, 2));
    }

    #[test]
    fn a_record_runs_rule_deletions_only() {
        for bad in [
            "-4 rule add not fwmark 1 table 1",
            "-4 route del 0.0.0.0/0",
            "-4 rule del table main; reboot",
            "-4 rule del $(reboot)",
            "rule del table 1",
            "-4 rule",
        ] {
            assert_eq!(parse_record_line(bad), None, "{bad}");
        }
    }

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(sh_quote("/run/a'b"), r"'/run/a'\''b'");
    }
}
