//! The addresses `sealink send`, `recv` and `msg` take: a listen address (`ADDR[:PORT]`) and a
//! destination (`[NAME@]HOST[:PORT]`), each on [`DEFAULT_PORT`] when it names none.

use std::net::{SocketAddr, ToSocketAddrs};

use crate::DEFAULT_PORT;

/// Why an address was not taken.
#[derive(Debug, thiserror::Error)]
pub enum AddrError {
    /// The text is not an address of its kind (a port out of range, no host): the caller's
    /// usage error.
    #[error("{0}")]
    Usage(String),
    #[error("cannot resolve {what}")]
    Resolve {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} has no address")]
    NoAddress(String),
}

/// A parsed `[NAME@]HOST[:PORT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// The trusted host name given before `@`.
    pub name: Option<String>,
    /// The host as written, without port or brackets (`::1` for `[::1]:7`).
    pub host: String,
    pub addr: SocketAddr,
}

/// A port after the last `:` that is a number but no port (`:99999`; `:0` too unless
/// `zero_ok`, as for a listen address, where 0 asks for any free port): a usage error naming
/// it, rather than "cannot resolve".
fn check_port(what: &str, s: &str, zero_ok: bool) -> Result<(), AddrError> {
    let Some((_, port)) = s.rsplit_once(':') else {
        return Ok(());
    };
    if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
        match port.parse::<u16>() {
            Ok(p) if p > 0 || zero_ok => {}
            _ => {
                let range = if zero_ok { "0-65535" } else { "1-65535" };
                return Err(AddrError::Usage(format!(
                    "{what} {s:?}: port {port} is out of range ({range})"
                )));
            }
        }
    }
    Ok(())
}

/// The first address `with_port` resolves to; errors name `what`.
fn resolve(with_port: &str, what: &str) -> Result<SocketAddr, AddrError> {
    with_port
        .to_socket_addrs()
        .map_err(|source| AddrError::Resolve {
            what: what.to_owned(),
            source,
        })?
        .next()
        .ok_or_else(|| AddrError::NoAddress(what.to_owned()))
}

/// A listen address: `ADDR:PORT`, or a host or address alone on the default port.
pub fn resolve_listen(s: &str) -> Result<SocketAddr, AddrError> {
    check_port("--listen", s, true)?;
    let with_port = if s.parse::<SocketAddr>().is_ok() {
        s.to_owned()
    } else {
        format!("{s}:{DEFAULT_PORT}")
    };
    resolve(&with_port, s)
}

impl Destination {
    /// Parses and resolves `[NAME@]HOST[:PORT]`.
    pub fn parse(dest: &str) -> Result<Self, AddrError> {
        let usage = |why: &str| {
            AddrError::Usage(format!(
                "destination {dest:?}: {why}; expected [NAME@]HOST[:PORT], e.g. bob@10.0.0.2"
            ))
        };
        let (name, hostport) = match dest.split_once('@') {
            Some(("", _)) => return Err(usage("no name before @")),
            Some((n, h)) => (Some(n.to_owned()), h),
            None => (None, dest),
        };
        // `bob@` and `bob@:7878` name no host (`::1` is one).
        let only_port = hostport
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
        if hostport.is_empty() || only_port {
            return Err(usage("no host"));
        }
        check_port("destination", hostport, false)?;
        let with_port = if hostport.parse::<SocketAddr>().is_ok()
            || (hostport.matches(':').count() == 1 && !hostport.ends_with(']'))
        {
            hostport.to_owned()
        } else if hostport.starts_with('[') || !hostport.contains(':') {
            format!("{hostport}:{DEFAULT_PORT}")
        } else {
            format!("[{hostport}]:{DEFAULT_PORT}")
        };
        let addr = resolve(&with_port, hostport)?;
        let host = hostport
            .rsplit_once(':')
            .filter(|(h, p)| p.parse::<u16>().is_ok() && !h.is_empty())
            .map_or(hostport, |(h, _)| h)
            .trim_matches(['[', ']'])
            .to_owned();
        Ok(Self { name, host, addr })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_parse() {
        let d = Destination::parse("bob@127.0.0.1:9000").unwrap();
        assert_eq!(
            (d.name.as_deref(), d.host.as_str(), d.addr.port()),
            (Some("bob"), "127.0.0.1", 9000)
        );
        let d = Destination::parse("127.0.0.1").unwrap();
        assert_eq!(
            (d.name, d.host.as_str(), d.addr.port()),
            (None, "127.0.0.1", DEFAULT_PORT)
        );
        let d = Destination::parse("[::1]:7").unwrap();
        assert_eq!((d.host.as_str(), d.addr.port()), ("::1", 7));
        assert_eq!(Destination::parse("::1").unwrap().addr.port(), DEFAULT_PORT);
        assert!(Destination::parse("no-such-host.invalid").is_err());
        for bad in ["@h", "bob@", "bob@:7878", "h:0", "h:99999"] {
            assert!(
                matches!(Destination::parse(bad), Err(AddrError::Usage(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn listen_default_port() {
        assert_eq!(resolve_listen("127.0.0.1").unwrap().port(), DEFAULT_PORT);
        assert_eq!(resolve_listen("127.0.0.1:9").unwrap().port(), 9);
        assert_eq!(resolve_listen("127.0.0.1:0").unwrap().port(), 0);
        assert!(matches!(
            resolve_listen("127.0.0.1:65536"),
            Err(AddrError::Usage(_))
        ));
    }
}
