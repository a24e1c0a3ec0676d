//! The root route helper's requests (issue 47): any line the tunnel (perhaps compromised)
//! writes parses without a panic, and an `add` or `del` passes the helper's check only for a
//! route of the config as root read it. Input: a config (sealink's TOML, or the fixed one
//! below when it does not parse), a NUL, then request lines; `reload` takes the routes of the
//! next config section (after another NUL), as the helper does when it reads its file again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealink_proto::tunnel::IpNet;
use sealink_tunnel::route_rules::{Request, RequestError, RouteArgs, RouteRules, parse_request};

fn routes_of(text: &str) -> Vec<IpNet> {
    match sealink_tunnel::Config::parse(text) {
        Ok(c) => c.routes(),
        Err(_) => vec![
            "10.95.0.2/32".parse().unwrap(),
            "fd00::/64".parse().unwrap(),
        ],
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.split('\0');
    let mut routes = routes_of(parts.next().unwrap_or(""));
    // The command line carries the routes: what the helper parses back is what `up` gave.
    let args = RouteArgs {
        ifname: "sl0".into(),
        config: None,
        routes: routes.clone(),
        table: None,
    };
    let argv = args.to_args();
    let argv: Vec<&str> = argv.iter().map(|a| a.to_str().unwrap()).collect();
    assert_eq!(RouteArgs::parse(&argv).as_ref(), Ok(&args));
    let mut rules = RouteRules::new("sl0", &routes);
    let mut known = routes.clone();
    let requests = parts.next().unwrap_or("");
    for line in requests.lines() {
        match parse_request(line) {
            Ok(Request::Add(net)) => {
                let r = rules.check(true, net);
                assert_eq!(r.is_ok(), routes.contains(&net), "add {net}: {r:?}");
            }
            Ok(Request::Del(net)) => {
                let r = rules.check(false, net);
                assert_eq!(r.is_ok(), known.contains(&net), "del {net}: {r:?}");
            }
            Ok(Request::Reload) => {
                routes = routes_of(parts.next().unwrap_or(""));
                rules.replace(&routes);
                known.extend(routes.iter().copied());
            }
            Err(RequestError::Refused { .. }) => unreachable!("parsing refuses nothing"),
            Err(_) => {}
        }
    }
});
