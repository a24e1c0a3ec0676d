//! A full tunnel's routing, as wg-quick does it. When a peer's allowed IPs hold `0.0.0.0/0`
//! (or `::/0`), a default route into the interface would also carry the tunnel's own UDP
//! datagrams to the peer, which then never arrive. Instead, for each such family:
//!
//! - the tunnel's UDP sockets carry the mark `M` (`interface.fwmark`, default 51820);
//! - a default route through the interface in table `M`;
//! - the rule `table main suppress_prefixlength 0 priority 32760`: the main table still
//!   decides for every destination it has a more specific route to (the LAN, the peer's own
//!   network), but its default route no longer applies;
//! - the rule `not fwmark M table M priority 32761`: everything else that is not the tunnel's
//!   own traffic goes into the tunnel; the marked datagrams fall through to the main table and
//!   leave by the underlay as before.
//! - for IPv4, `net.ipv4.conf.all.src_valid_mark = 1` (a write to /proc/sys), so that
//!   reverse-path filtering sees the mark (wg-quick sets it too, and does not reset it).
//!
//! All of it goes through rtnetlink (`rtnl.rs`). The route goes away with the interface. The
//! rules do not: they are undone by a root helper process started during set-up, while `up`
//! still holds its privileges (`helper.rs`: the running binary again, `sealink
//! tunnel-helper undo RECORD`), that deletes them when the tunnel closes its end of a pipe: at
//! a clean exit, and also when the tunnel is killed or crashes (unlike the down hooks, which
//! run only at a clean exit). The rules are also written, before any is added, to `NAME.policy`
//! in the namespace's run directory, one `ip rule del` line each (the format earlier versions
//! wrote, so a record left by one is still undone); the helper removes the file once done. If
//! both the tunnel and the helper are killed (SIGKILL to the whole service), the next `sealink
//! up` or `sealink down` of that name finds the file and undoes what it lists
//! ([`clean_stale`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use sealink_proto::tunnel::IpNet;

use crate::error::TunnelError;
use crate::helper::UndoHelper;
use crate::rtnl::{self, Rtnl, Rule};

/// Priorities of the two rules: just before the main table's own rule (32766), where the
/// kernel would put the first rules added without one.
const PRIORITY_SUPPRESS: u32 = 32760;
const PRIORITY_MARK: u32 = 32761;
const TABLE_MAIN: u32 = 254;

/// The record of a tunnel's rules in the run directory.
pub(crate) fn record_path(run_dir: &Path, ifname: &str) -> PathBuf {
    run_dir.join(format!("{ifname}.policy"))
}

/// The rules of a full tunnel for IPv4 and/or IPv6, in the order they are added: the
/// suppressing rule first (alone it changes nothing; the marked rule then starts taking
/// traffic with the LAN's routes already kept). They are deleted in reverse.
pub(crate) fn rules(mark: u32, v4: bool, v6: bool) -> Vec<Rule> {
    let mut out = Vec::new();
    for (on, v6) in [(v4, false), (v6, true)] {
        if !on {
            continue;
        }
        out.push(Rule {
            v6,
            invert: false,
            fwmark: None,
            table: TABLE_MAIN,
            suppress_prefixlength: Some(0),
            priority: PRIORITY_SUPPRESS,
        });
        out.push(Rule {
            v6,
            invert: true,
            fwmark: Some(mark),
            table: mark,
            suppress_prefixlength: None,
            priority: PRIORITY_MARK,
        });
    }
    out
}

/// The record's text: one line per rule, in the order to delete them.
pub(crate) fn record_text(rules: &[Rule]) -> String {
    rules
        .iter()
        .rev()
        .map(|r| format!("{} rule del {r}\n", if r.v6 { "-6" } else { "-4" }))
        .collect()
}

fn number(word: Option<&str>, key: &str) -> Result<u32, String> {
    let w = word.ok_or_else(|| format!("{key} without a value"))?;
    w.parse()
        .map_err(|_| format!("{key} {w:?} is not a number"))
}

/// One line of a record: `-4|-6 rule del [not] [fwmark M] table main|T
/// [suppress_prefixlength N] priority P` (a rule deletion, nothing else).
pub(crate) fn parse_record_line(line: &str) -> Result<Rule, String> {
    let mut w = line.split_whitespace();
    let v6 = match w.next() {
        Some("-4") => false,
        Some("-6") => true,
        other => return Err(format!("expected -4 or -6, found {other:?}")),
    };
    if (w.next(), w.next()) != (Some("rule"), Some("del")) {
        return Err("not a rule deletion (`rule del`)".into());
    }
    let (mut invert, mut fwmark, mut table, mut suppress, mut priority) =
        (false, None, None, None, None);
    while let Some(key) = w.next() {
        match key {
            "not" => invert = true,
            "fwmark" => fwmark = Some(number(w.next(), key)?),
            "table" => {
                table = Some(match w.next() {
                    Some("main") => TABLE_MAIN,
                    t => number(t, key)?,
                });
            }
            "suppress_prefixlength" => suppress = Some(number(w.next(), key)?),
            "priority" => priority = Some(number(w.next(), key)?),
            other => return Err(format!("unknown word {other:?}")),
        }
    }
    // Both required: a deletion with neither would take the first rule that matches the rest.
    let (Some(table), Some(priority)) = (table, priority) else {
        return Err("a rule needs its table and priority".into());
    };
    Ok(Rule {
        v6,
        invert,
        fwmark,
        table,
        suppress_prefixlength: suppress,
        priority,
    })
}

/// Reads a record; `None` if there is none. A line that does not parse is an error naming the
/// file and the line, and nothing of it is undone.
pub(crate) fn read_record(path: &Path) -> Result<Option<Vec<Rule>>, TunnelError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(TunnelError::Io {
                what: format!("read {}", path.display()),
                source,
            });
        }
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            parse_record_line(l).map_err(|msg| TunnelError::PolicyRecord {
                path: path.display().to_string(),
                line: i + 1,
                msg: format!("{msg} (fix or remove the file once its rules are checked)"),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Deletes `rules` in order; one already gone is skipped. Returns the failures.
pub(crate) fn delete(rules: &[Rule]) -> Vec<TunnelError> {
    let mut nl = match Rtnl::open() {
        Ok(n) => n,
        Err(e) => return vec![e],
    };
    rules
        .iter()
        .filter_map(|r| match nl.request(&rtnl::rule(false, r)) {
            Ok(()) => None,
            Err(e) if rtnl::is_gone(&e) => {
                tracing::debug!(error = %e, "rule already gone");
                None
            }
            Err(e) => Some(e),
        })
        .collect()
}

/// Undoes the rules a tunnel of this name left behind, if its record is there (the tunnel and
/// its cleanup helper were both killed). Returns whether there was a record. Each rule already
/// gone is skipped quietly; the record stays if a rule cannot be deleted.
pub fn clean_stale(run_dir: &Path, ifname: &str) -> Result<bool, TunnelError> {
    let path = record_path(run_dir, ifname);
    let Some(rules) = read_record(&path)? else {
        return Ok(false);
    };
    if let Some(e) = delete(&rules).into_iter().next() {
        return Err(e);
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
/// helper must be released ([`UndoHelper::fire`]) at exit. On an error, whatever was added
/// is removed again before returning. `helper_exe` runs the helper (`helper.rs`).
pub(crate) fn install(
    helper_exe: &Path,
    run_dir: &Path,
    ifname: &str,
    mark: u32,
    v4: bool,
    v6: bool,
) -> Result<UndoHelper, TunnelError> {
    let rules = rules(mark, v4, v6);
    let record = record_path(run_dir, ifname);
    std::fs::write(&record, record_text(&rules)).map_err(|source| TunnelError::Io {
        what: format!("write {}", record.display()),
        source,
    })?;
    // It reads the record back before it answers: what it will undo is what was written.
    let undo = match UndoHelper::start(helper_exe, &record) {
        Ok(u) => u,
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
    let added = (|| {
        let mut nl = Rtnl::open()?;
        let index = nl.index(ifname)?;
        let any = [
            (v4, IpAddr::from(Ipv4Addr::UNSPECIFIED)),
            (v6, IpAddr::from(Ipv6Addr::UNSPECIFIED)),
        ];
        for (_, all) in any.into_iter().filter(|(on, _)| *on) {
            // Prefix 0 fits either family.
            if let Ok(net) = IpNet::new(all, 0) {
                nl.request(&rtnl::route(true, net, ifname, index, Some(mark)))?;
            }
        }
        for r in &rules {
            nl.request(&rtnl::rule(true, r))?;
        }
        Ok::<(), TunnelError>(())
    })();
    if let Err(e) = added {
        // Undoes what was added, and removes the record.
        undo.fire();
        return Err(e);
    }
    tracing::info!(
        tunnel = ifname,
        fwmark = mark,
        ipv4 = v4,
        ipv6 = v6,
        "full tunnel: everything but the tunnel's own datagrams is routed into it"
    );
    Ok(undo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_lists_the_rules_to_delete_in_reverse() {
        let rules = rules(51820, true, true);
        assert_eq!(
            record_text(&rules),
            "-6 rule del not fwmark 51820 table 51820 priority 32761\n\
             -6 rule del table main suppress_prefixlength 0 priority 32760\n\
             -4 rule del not fwmark 51820 table 51820 priority 32761\n\
             -4 rule del table main suppress_prefixlength 0 priority 32760\n"
        );
        // Every line reads back as the rule it was written from.
        let back: Vec<Rule> = record_text(&rules)
            .lines()
            .map(|l| parse_record_line(l).unwrap())
            .collect();
        assert_eq!(back, rules.iter().rev().copied().collect::<Vec<_>>());
        assert_eq!(super::rules(7, false, true).len(), 2);
    }

    #[test]
    fn a_record_of_an_earlier_version_still_parses() {
        // What the `ip`-running versions wrote.
        let r =
            parse_record_line("-4 rule del not fwmark 51820 table 51820 priority 32761").unwrap();
        assert_eq!(
            (r.v6, r.invert, r.fwmark, r.table, r.priority),
            (false, true, Some(51820), 51820, 32761)
        );
    }

    #[test]
    fn a_malformed_record_is_an_error_not_a_panic() {
        for bad in [
            "-4 rule add not fwmark 1 table 1 priority 1",
            "-4 route del 0.0.0.0/0",
            "-4 rule del table main; reboot",
            "-4 rule del $(reboot)",
            "rule del table 1",
            "-4 rule",
            "-4",
            "-4 rule del fwmark",
            "-4 rule del fwmark x table 1 priority 1",
            "-4 rule del table 1",
            "-4 rule del priority 1",
            "-4 rule del table 99999999999 priority 1",
        ] {
            assert!(parse_record_line(bad).is_err(), "{bad}");
        }
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sl0.policy");
        std::fs::write(
            &p,
            "-4 rule del table main suppress_prefixlength 0 priority 32760\n-4 rule del oops\n",
        )
        .unwrap();
        let e = read_record(&p).unwrap_err().to_string();
        assert!(
            e.contains("sl0.policy line 2: unknown word \"oops\""),
            "{e}"
        );
        // Nothing undone, the record kept.
        assert!(clean_stale(d.path(), "sl0").is_err());
        assert!(p.exists());
        assert!(
            read_record(&d.path().join("none.policy"))
                .unwrap()
                .is_none()
        );
    }
}
