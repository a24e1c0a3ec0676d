//! The helpers' own side (see `helper.rs` for the tunnel's side and the protocol): the
//! running binary, started again as `EXE tunnel-helper KIND ARGS`, runs [`main`]. Kept apart
//! from `helper.rs` because it does the work (`policy`, `netconf`) that those modules hand to
//! the helpers, which they reach through `helper.rs`.

use std::io::{BufRead, Write};
use std::path::Path;

use crate::helper::SUBCOMMAND;
use crate::route_rules::{Request, RequestError, RouteArgs, RouteRules};

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
        ["routes", rest @ ..] => match RouteArgs::parse(rest) {
            Ok(a) => routes_main(&a, &mut input, &mut out),
            Err(e) => {
                let _ = writeln!(out, "error usage: {SUBCOMMAND} routes: {e}");
                2
            }
        },
        _ => {
            let _ = writeln!(
                out,
                "error usage: {SUBCOMMAND} undo RECORD | routes IFNAME CONFIG ROUTES"
            );
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

/// The route helper: answers each request line with `ok` or `error MESSAGE`, doing only what
/// [`RouteRules`] allows (see `route_rules.rs`); a refusal is also logged on its standard
/// error (the tunnel's journal or terminal), as a compromised tunnel is the likely sender.
fn routes_main(args: &RouteArgs, input: &mut impl BufRead, out: &mut impl Write) -> i32 {
    let mut rules = RouteRules::new(&args.ifname, &args.routes);
    routes_loop(args, &mut rules, input, out, &|add, net| {
        crate::netconf::change_route(add, &args.ifname, net, args.table).map_err(|e| e.to_string())
    })
}

/// Routes are read as root from the config file the helper was given.
fn config_routes(config: Option<&Path>) -> Result<Vec<sealink_proto::tunnel::IpNet>, String> {
    let path = config.ok_or("the tunnel was not started from a config file")?;
    crate::Config::from_file(path)
        .map(|c| c.routes())
        .map_err(|e| format!("config {}: {e}", path.display()))
}

/// The loop of [`routes_main`], with the route change injected (the unit tests record it).
fn routes_loop(
    args: &RouteArgs,
    rules: &mut RouteRules,
    input: &mut impl BufRead,
    out: &mut impl Write,
    change: &dyn Fn(bool, sealink_proto::tunnel::IpNet) -> Result<(), String>,
) -> i32 {
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
        let request = line.trim();
        let done = match route_request(args, rules, request, change) {
            Err(RequestError::Unknown) => return 1,
            Err(e @ RequestError::Refused { .. }) => {
                eprintln!("sealink {SUBCOMMAND}: routes {}: {e}", args.ifname);
                Err(e.to_string())
            }
            Err(e) => Err(e.to_string()),
            Ok(r) => r,
        };
        let answer = match done {
            Ok(()) => "ok".to_owned(),
            Err(e) => format!("error {}", e.replace('\n', " ")),
        };
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return 0;
        }
    }
}

/// One request: `Err` when it is not taken at all (unknown, malformed or refused); `Ok` with
/// the outcome of the change (or of reading the config again) otherwise.
fn route_request(
    args: &RouteArgs,
    rules: &mut RouteRules,
    line: &str,
    change: &dyn Fn(bool, sealink_proto::tunnel::IpNet) -> Result<(), String>,
) -> Result<Result<(), String>, RequestError> {
    Ok(match crate::route_rules::parse_request(line)? {
        Request::Add(net) => {
            rules.check(true, net)?;
            change(true, net)
        }
        Request::Del(net) => {
            rules.check(false, net)?;
            change(false, net)
        }
        Request::Reload => config_routes(args.config.as_deref()).map(|r| rules.replace(&r)),
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
    fn the_route_helper_takes_only_the_configs_routes() {
        use std::cell::RefCell;
        let d = tempfile::tempdir().unwrap();
        let config = d.path().join("sl0.toml");
        let args = RouteArgs {
            ifname: "sl0".into(),
            config: Some(config.clone()),
            routes: vec!["10.77.0.0/24".parse().unwrap()],
            table: None,
        };
        let mut rules = RouteRules::new(&args.ifname, &args.routes);
        let done = RefCell::new(Vec::new());
        let change = |add: bool, net| {
            done.borrow_mut()
                .push(format!("{} {net}", if add { "add" } else { "del" }));
            Ok(())
        };
        let mut out = Vec::new();
        let input = "add 0.0.0.0/1\nadd 128.0.0.0/1\nadd 10.77.0.0/24\ndel 10.1.0.0/16\n\
                     add 10.0.0.0/99\nreload\ndel 10.77.0.0/24\n";
        assert_eq!(
            routes_loop(&args, &mut rules, &mut input.as_bytes(), &mut out, &change),
            0
        );
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "ready");
        for (i, net) in [
            (1, "add 0.0.0.0/1"),
            (2, "add 128.0.0.0/1"),
            (4, "del 10.1.0.0/16"),
        ] {
            assert_eq!(
                lines[i],
                format!("error refused: {net}: not a route of the config of sl0 (as root read it)")
            );
        }
        assert_eq!(lines[3], "ok");
        assert_eq!(
            lines[5],
            "error prefix length 99 is out of range for 10.0.0.0 (at most 32)"
        );
        // No config file there: the reload fails, the rules stay.
        assert!(lines[6].starts_with("error config "), "{}", lines[6]);
        assert_eq!(lines[7], "ok");
        assert_eq!(*done.borrow(), ["add 10.77.0.0/24", "del 10.77.0.0/24"]);

        // Anything else ends it.
        let mut out = Vec::new();
        assert_eq!(
            routes_loop(
                &args,
                &mut rules,
                &mut &b"reboot now\n"[..],
                &mut out,
                &change
            ),
            1
        );
        assert_eq!(String::from_utf8(out).unwrap(), "ready\n");
    }

    /// A reload reads the config file again (as the helper's user: root in the field) and
    /// takes its routes: a prefix it adds may then be added.
    #[test]
    fn a_reload_takes_the_routes_of_the_config_read_again() {
        let d = tempfile::Builder::new()
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir()
            .unwrap();
        let config = d.path().join("sl0.toml");
        let write = |allowed: &str| {
            std::fs::write(
                &config,
                format!(
                    "[interface]\nprivate_key = \"k\"\naddress = \"10.9.0.1/24\"\n\
                     [[peer]]\nname = \"b\"\npublic_key = \"{}\"\nallowed_ips = [{allowed}]\n",
                    base64_key()
                ),
            )
            .unwrap();
            std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
        };
        write("\"10.9.0.2/32\", \"10.77.0.0/24\"");
        let args = RouteArgs {
            ifname: "sl0".into(),
            config: Some(config.clone()),
            routes: config_routes(Some(&config)).unwrap(),
            table: None,
        };
        assert_eq!(args.routes, ["10.77.0.0/24".parse().unwrap()]);
        let mut rules = RouteRules::new(&args.ifname, &args.routes);
        write("\"10.9.0.2/32\", \"10.77.0.0/24\", \"10.78.0.0/24\"");
        let mut out = Vec::new();
        let input = "add 10.78.0.0/24\nreload\nadd 10.78.0.0/24\nadd 0.0.0.0/1\n";
        routes_loop(
            &args,
            &mut rules,
            &mut input.as_bytes(),
            &mut out,
            &|_, _| Ok(()),
        );
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[1].starts_with("error refused: add 10.78.0.0/24"),
            "{out}"
        );
        assert_eq!(lines[2..4], ["ok", "ok"], "{out}");
        assert!(
            lines[4].starts_with("error refused: add 0.0.0.0/1"),
            "{out}"
        );
    }

    /// Some valid X25519 public key, base64.
    fn base64_key() -> String {
        use base64::Engine as _;
        let k = sealink_proto::HostKey::generate().unwrap();
        base64::engine::general_purpose::STANDARD.encode(k.public())
    }
}
