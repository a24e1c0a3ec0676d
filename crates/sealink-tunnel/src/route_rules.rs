//! What the root route helper (`helper.rs`, `helper_main.rs`) will do for the tunnel. It runs
//! with the privileges of `up` while the tunnel runs without any, so it must not trust the
//! tunnel's requests: a compromised tunnel that could add `0.0.0.0/1` and `128.0.0.0/1`
//! through itself would capture the host's cleartext traffic. So it takes only the
//! routes of the config as root read it: the routes `up` computed from the config it read at
//! start (on the helper's command line), then those of the config file the helper reads again
//! itself, as root, when asked to `reload`. Anything else is refused (the helper logs it).
//!
//! Sans-IO: parsing and the checks, reached as they are by the `helper_requests` fuzz target.

use sealink_proto::tunnel::IpNet;

/// One request line of the tunnel to the route helper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `add NET`: a route `NET dev IFNAME`.
    Add(IpNet),
    /// `del NET`: remove it.
    Del(IpNet),
    /// `reload`: read the config file again and take its routes.
    Reload,
}

/// Why a request line was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Not a request of the protocol at all: the helper answers nothing more and exits (the
    /// tunnel never sends one).
    #[error("unknown request")]
    Unknown,
    /// `add` or `del` with a prefix that does not parse.
    #[error(transparent)]
    Prefix(#[from] sealink_proto::tunnel::IpNetError),
    /// A well-formed request outside what the config allows.
    #[error("refused: {op} {net}: not a route of the config of {ifname} (as root read it)")]
    Refused {
        op: &'static str,
        net: IpNet,
        ifname: String,
    },
}

/// Parses one request line (without its newline).
pub fn parse_request(line: &str) -> Result<Request, RequestError> {
    if line == "reload" {
        return Ok(Request::Reload);
    }
    let (op, net) = line.split_once(' ').ok_or(RequestError::Unknown)?;
    let net = || net.trim().parse::<IpNet>();
    match op {
        "add" => Ok(Request::Add(net()?)),
        "del" => Ok(Request::Del(net()?)),
        _ => Err(RequestError::Unknown),
    }
}

/// The helper's command line after `routes`: `IFNAME CONFIG ROUTES TABLE`, CONFIG the config
/// file (`-`: none, the tunnel was not started from a file), ROUTES the config's routes, comma
/// separated (empty: none), and TABLE the routing table they go into (`-`: the main table;
/// `interface.table`, which a reload cannot change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteArgs {
    pub ifname: String,
    pub config: Option<std::path::PathBuf>,
    pub routes: Vec<IpNet>,
    pub table: Option<u32>,
}

impl RouteArgs {
    /// The arguments to start the helper with.
    pub fn to_args(&self) -> Vec<std::ffi::OsString> {
        let routes: Vec<String> = self.routes.iter().map(ToString::to_string).collect();
        vec![
            self.ifname.clone().into(),
            self.config
                .as_ref()
                .map_or_else(|| "-".into(), |p| p.as_os_str().to_owned()),
            routes.join(",").into(),
            self.table
                .map_or_else(|| "-".to_owned(), |t| t.to_string())
                .into(),
        ]
    }

    /// Parses them back (in the helper).
    pub fn parse(args: &[&str]) -> Result<Self, String> {
        let [ifname, config, routes, table] = args else {
            return Err("expected IFNAME CONFIG ROUTES TABLE".into());
        };
        let table = match *table {
            "-" => None,
            t => Some(t.parse::<u32>().map_err(|e| format!("table {t:?}: {e}"))?),
        };
        let routes = routes
            .split(',')
            .filter(|r| !r.is_empty())
            .map(|r| r.parse::<IpNet>().map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        Ok(RouteArgs {
            ifname: (*ifname).to_owned(),
            config: (*config != "-").then(|| (*config).into()),
            routes,
            table,
        })
    }
}

/// The routes the helper may change (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteRules {
    ifname: String,
    /// The routes of the config read last: what `add` may install.
    current: Vec<IpNet>,
    /// The routes of every config read so far: what `del` may remove (a reload that drops a
    /// prefix removes its route).
    known: Vec<IpNet>,
}

impl RouteRules {
    /// Allows the routes of the config read at start.
    pub fn new(ifname: &str, routes: &[IpNet]) -> Self {
        RouteRules {
            ifname: ifname.to_owned(),
            current: routes.to_vec(),
            known: routes.to_vec(),
        }
    }

    /// Takes the routes of a config read again (as root).
    pub fn replace(&mut self, routes: &[IpNet]) {
        self.current = routes.to_vec();
        for r in routes {
            if !self.known.contains(r) {
                self.known.push(*r);
            }
        }
    }

    /// Whether the helper may carry out `add` (or `del`) of `net`.
    pub fn check(&self, add: bool, net: IpNet) -> Result<(), RequestError> {
        let allowed = if add { &self.current } else { &self.known };
        if allowed.contains(&net) {
            return Ok(());
        }
        Err(RequestError::Refused {
            op: if add { "add" } else { "del" },
            net,
            ifname: self.ifname.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn requests_parse_and_nothing_else_does() {
        assert_eq!(
            parse_request("add 10.0.0.0/24"),
            Ok(Request::Add(net("10.0.0.0/24")))
        );
        assert_eq!(
            parse_request("del fd00::/8"),
            Ok(Request::Del(net("fd00::/8")))
        );
        assert_eq!(parse_request("reload"), Ok(Request::Reload));
        for bad in [
            "",
            "add",
            "reload now",
            "flush all",
            "ADD 10.0.0.0/8",
            " add 1.0.0.0/8",
        ] {
            assert_eq!(parse_request(bad), Err(RequestError::Unknown), "{bad:?}");
        }
        assert!(matches!(
            parse_request("add 10.0.0.0/99"),
            Err(RequestError::Prefix(_))
        ));
    }

    #[test]
    fn only_the_configs_routes_are_added_and_known_ones_removed() {
        let mut r = RouteRules::new("sl0", &[net("10.95.0.2/32"), net("10.77.0.0/24")]);
        for ok in ["10.95.0.2/32", "10.77.0.0/24", "10.77.0.9/24"] {
            assert_eq!(r.check(true, net(ok)), Ok(()), "{ok}");
            assert_eq!(r.check(false, net(ok)), Ok(()), "{ok}");
        }
        for bad in [
            "0.0.0.0/1",
            "128.0.0.0/1",
            "0.0.0.0/0",
            "10.77.0.0/23",
            "10.77.0.0/25",
            "::/1",
        ] {
            let e = r.check(true, net(bad)).unwrap_err().to_string();
            assert!(e.contains("not a route of the config of sl0"), "{e}");
            assert!(r.check(false, net(bad)).is_err(), "del {bad}");
        }
        // A reload drops one route and adds another: the dropped one may still be removed,
        // not added again.
        r.replace(&[net("10.95.0.2/32"), net("10.78.0.0/24")]);
        assert_eq!(r.check(true, net("10.78.0.0/24")), Ok(()));
        assert!(r.check(true, net("10.77.0.0/24")).is_err());
        assert_eq!(r.check(false, net("10.77.0.0/24")), Ok(()));
        assert!(r.check(true, net("0.0.0.0/1")).is_err());
    }

    #[test]
    fn arguments_round_trip() {
        for a in [
            RouteArgs {
                ifname: "sl0".into(),
                config: Some("/etc/sealink/sl0.toml".into()),
                routes: vec![net("10.77.0.0/24"), net("fd00::/64")],
                table: Some(1234),
            },
            RouteArgs {
                ifname: "wg0".into(),
                config: None,
                routes: Vec::new(),
                table: None,
            },
        ] {
            let args = a.to_args();
            let args: Vec<&str> = args.iter().map(|s| s.to_str().unwrap()).collect();
            assert_eq!(RouteArgs::parse(&args), Ok(a));
        }
        assert!(RouteArgs::parse(&["sl0"]).is_err());
        assert!(RouteArgs::parse(&["sl0", "-", "10.0.0.0/99", "-"]).is_err());
        assert!(RouteArgs::parse(&["sl0", "-", "", "main"]).is_err());
    }
}
