//! The helpers' own side (see `helper.rs` for the tunnel's side and the protocol): the
//! running binary, started again as `EXE tunnel-helper KIND ARGS`, runs [`main`]. Kept apart
//! from `helper.rs` because it does the work (`policy`, `netconf`) that those modules hand to
//! the helpers, which they reach through `helper.rs`.

use std::io::{BufRead, Write};
use std::path::Path;

use sealink_proto::tunnel::IpNet;

use crate::helper::SUBCOMMAND;

/// The helper's side: `args` are those after [`SUBCOMMAND`]. Returns the exit status.
pub fn main(args: &[String]) -> i32 {
    // Ignored until the work is done: each only sets a flag no one reads.
    let ignored = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        let _ = signal_hook::flag::register(sig, std::sync::Arc::clone(&ignored));
    }
    let mut out = std::io::stdout().lock();
    let mut input = std::io::stdin().lock();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["undo", record] => undo_main(Path::new(record), &mut input, &mut out),
        ["routes", ifname] => routes_main(ifname, &mut input, &mut out),
        _ => {
            let _ = writeln!(out, "error usage: {SUBCOMMAND} undo RECORD | routes IFNAME");
            2
        }
    }
}

fn undo_main(record: &Path, input: &mut impl BufRead, out: &mut impl Write) -> i32 {
    let rules = match crate::policy::read_record(record) {
        Ok(Some(r)) => r,
        Ok(None) => Vec::new(),
        Err(e) => {
            let _ = writeln!(out, "error {e}");
            return 1;
        }
    };
    if writeln!(out, "ready").and_then(|()| out.flush()).is_err() {
        // The tunnel is gone before it heard us: it changed nothing.
        return 1;
    }
    // `go`, or the end of the pipe: the tunnel died.
    let mut line = String::new();
    let released = matches!(input.read_line(&mut line), Ok(n) if n > 0);
    let mut failures: Vec<String> = crate::policy::delete(&rules)
        .iter()
        .map(ToString::to_string)
        .collect();
    match std::fs::remove_file(record) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => failures.push(format!("remove {}: {e}", record.display())),
    }
    let mut told = released;
    for f in &failures {
        told &= writeln!(out, "error {f}").is_ok();
    }
    told &= writeln!(out, "done").and_then(|()| out.flush()).is_ok();
    if !told {
        // The tunnel died: its journal or terminal still gets our stderr.
        for f in &failures {
            eprintln!("sealink {SUBCOMMAND}: full-tunnel cleanup: {f}");
        }
    }
    i32::from(!failures.is_empty())
}

fn routes_main(ifname: &str, input: &mut impl BufRead, out: &mut impl Write) -> i32 {
    if writeln!(out, "ready").and_then(|()| out.flush()).is_err() {
        return 1;
    }
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {}
        }
        let answer = match route_request(ifname, line.trim()) {
            Some(Ok(())) => "ok".to_owned(),
            Some(Err(e)) => format!("error {}", e.replace('\n', " ")),
            None => return 1,
        };
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return 0;
        }
    }
}

/// One `add NET` or `del NET` request; `None` for anything else (the helper then exits).
fn route_request(ifname: &str, line: &str) -> Option<Result<(), String>> {
    let (op, net) = line.split_once(' ')?;
    let add = match op {
        "add" => true,
        "del" => false,
        _ => return None,
    };
    Some(match net.trim().parse::<IpNet>() {
        Ok(net) => crate::netconf::change_route(add, ifname, net).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_record_stops_the_undo_helper_before_ready() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sl0.policy");
        std::fs::write(&p, "-4 rule del not fwmark x\n").unwrap();
        let mut out = Vec::new();
        let code = undo_main(&p, &mut &b""[..], &mut out);
        assert_eq!(code, 1);
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with("error ") && out.contains("line 1"), "{out}");
        assert!(p.exists(), "the record stays for a look");
    }

    #[test]
    fn the_undo_helper_with_nothing_recorded_removes_the_record() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sl0.policy");
        std::fs::write(&p, "\n").unwrap();
        let mut out = Vec::new();
        // The pipe closes without `go`: it undoes all the same.
        assert_eq!(undo_main(&p, &mut &b""[..], &mut out), 0);
        assert_eq!(String::from_utf8(out).unwrap(), "ready\ndone\n");
        assert!(!p.exists());
    }

    #[test]
    fn the_route_helper_takes_add_and_del_only() {
        assert!(route_request("sl0", "flush all").is_none());
        assert!(route_request("sl0", "add").is_none());
        assert_eq!(
            route_request("sl0", "add 10.0.0.0/99"),
            Some(Err(
                "prefix length 99 is out of range for 10.0.0.0 (at most 32)".into()
            ))
        );
        let mut out = Vec::new();
        assert_eq!(routes_main("sl0", &mut &b"reboot now\n"[..], &mut out), 1);
        assert_eq!(String::from_utf8(out).unwrap(), "ready\n");
    }
}
