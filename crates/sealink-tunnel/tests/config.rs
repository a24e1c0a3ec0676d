//! Loading a tunnel configuration from a file through the library (`Config::from_file`): the
//! good case with every optional key, and each kind of bad input giving its typed error that
//! names the offending key.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use sealink_proto::HostKey;
use sealink_proto::tunnel::PiggybackMode;
use sealink_tunnel::{Config, TunnelError};

/// The base64 public key of a freshly generated host key, as in its `.pub` file.
fn peer_key() -> (String, [u8; 32]) {
    use base64::Engine;
    let k = HostKey::generate().unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(k.public());
    (b64, *k.public())
}

/// A complete configuration; `interface_extra` and `peer_extra` are appended to the sections.
fn text(key: &str, interface_extra: &str, peer_extra: &str) -> String {
    format!(
        r#"[interface]
name = "slt0"
private_key = "keys/host.key"
address = "10.77.0.1/24"
listen_port = 51999
{interface_extra}
[[peer]]
name = "far"
public_key = "{key}"
endpoint = "127.0.0.1:51998"
allowed_ips = ["10.77.0.2/32", "fd77::/64"]
{peer_extra}"#
    )
}

/// Loads `text` from a 0600 file in a fresh directory.
fn load(text: &str) -> Result<Config, TunnelError> {
    let d = common::private_dir();
    let p = common::write(d.path(), "tunnel.toml", text, 0o600);
    Config::from_file(&p)
}

/// The key a `TunnelError::Config` names (panics on any other error).
fn bad_key(r: Result<Config, TunnelError>) -> String {
    match r {
        Err(TunnelError::Config { key, msg }) => {
            assert!(!msg.is_empty());
            key
        }
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn a_good_file_loads_with_its_values_and_a_key_path_beside_it() {
    let (key, public) = peer_key();
    let d = common::private_dir();
    let extra = "mtu = 1400\nworkers = 2\nqueues = 3\n\n[interface.piggyback]\nmode = \"timer\"\nsmall = 100\nmax_delay_us = 150\n";
    let p = common::write(d.path(), "tunnel.toml", &text(&key, extra, ""), 0o600);
    let c = Config::from_file(&p).unwrap();
    assert_eq!(c.name, "slt0");
    // Relative to the config file's directory.
    assert_eq!(c.private_key, d.path().join("keys/host.key"));
    assert_eq!(c.addresses.len(), 1);
    assert_eq!(c.addresses[0].addr, "10.77.0.1".parse::<IpAddr>().unwrap());
    assert_eq!(c.addresses[0].prefix, 24);
    assert_eq!(c.listen_port, 51999);
    assert_eq!(c.core.mtu, 1400);
    assert_eq!(c.workers, Some(2));
    assert_eq!(c.queues, Some(3));
    assert_eq!(c.core.piggyback.mode, PiggybackMode::Timer);
    assert_eq!(c.core.piggyback.small, 100);
    assert_eq!(c.core.piggyback.max_delay, Duration::from_micros(150));
    assert_eq!(c.peers.len(), 1);
    let peer = &c.peers[0];
    assert_eq!(peer.name, "far");
    assert_eq!(peer.public_key, public);
    assert_eq!(
        peer.endpoint,
        Some("127.0.0.1:51998".parse::<SocketAddr>().unwrap())
    );
    let ips: Vec<String> = peer.allowed_ips.iter().map(|n| n.to_string()).collect();
    assert_eq!(ips, ["10.77.0.2/32", "fd77::/64"]);
}

#[test]
fn defaults_fill_what_is_left_out() {
    let (key, _) = peer_key();
    let t = text(&key, "", "").replace("name = \"slt0\"\n", "");
    let c = load(&t).unwrap();
    assert_eq!(c.name, "sl0");
    assert_eq!(c.core.mtu, 1420);
    assert_eq!((c.workers, c.queues), (None, None));
    assert_eq!(c.core.piggyback.mode, PiggybackMode::Autocork);
    // An absolute key path stays as written.
    let t = text(&key, "", "").replace("\"keys/host.key\"", "\"/etc/sealink/host.key\"");
    let c = load(&t).unwrap();
    assert_eq!(c.private_key, std::path::Path::new("/etc/sealink/host.key"));
}

#[test]
fn a_missing_file_is_an_io_error() {
    let d = common::private_dir();
    match Config::from_file(&d.path().join("nope.toml")) {
        Err(TunnelError::Io { what, .. }) => assert!(what.contains("nope.toml"), "{what}"),
        other => panic!("expected an I/O error, got {other:?}"),
    }
}

#[test]
fn a_file_others_can_write_is_refused() {
    let (key, _) = peer_key();
    let d = common::private_dir();
    let p = common::write(d.path(), "tunnel.toml", &text(&key, "", ""), 0o666);
    assert!(matches!(
        Config::from_file(&p),
        Err(TunnelError::Insecure(_))
    ));
    // The same file, once private, loads.
    common::set_mode(&p, 0o600);
    Config::from_file(&p).unwrap();
    // A directory others can write is refused too.
    common::set_mode(d.path(), 0o777);
    assert!(matches!(
        Config::from_file(&p),
        Err(TunnelError::Insecure(_))
    ));
    common::set_mode(d.path(), 0o700);
}

#[test]
fn malformed_toml_and_unknown_or_missing_keys_are_toml_errors() {
    let (key, _) = peer_key();
    for (what, t) in [
        ("not TOML", "[interface\nname = ".to_owned()),
        ("unknown key", text(&key, "colour = \"blue\"\n", "")),
        ("unknown peer key", text(&key, "", "weight = 3\n")),
        // (listen_port may be left out: an ephemeral port; the private key may not.)
        (
            "missing private_key",
            text(&key, "", "")
                .lines()
                .filter(|l| !l.starts_with("private_key"))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        (
            "wrong type",
            text(&key, "", "").replace("51999", "\"51999\""),
        ),
        ("empty", String::new()),
    ] {
        match load(&t) {
            Err(TunnelError::Toml(m)) => assert!(!m.is_empty(), "{what}"),
            other => panic!("{what}: expected a TOML error, got {other:?}"),
        }
    }
}

#[test]
fn bad_values_name_their_key() {
    let (key, _) = peer_key();
    let good = text(&key, "", "");
    let cases: Vec<(String, &str)> = vec![
        (
            good.replace("\"slt0\"", "\"a-name-too-long-x\""),
            "interface.name",
        ),
        (good.replace("\"slt0\"", "\"sl/0\""), "interface.name"),
        (good.replace("\"slt0\"", "\"\""), "interface.name"),
        (
            good.replace("10.77.0.1/24", "10.77.0.1"),
            "interface.address",
        ),
        (
            good.replace("10.77.0.1/24", "10.77.0/24"),
            "interface.address",
        ),
        (
            good.replace("10.77.0.1/24", "10.77.0.1/33"),
            "interface.address",
        ),
        (
            good.replace("10.77.0.1/24", "fd77::1/129"),
            "interface.address",
        ),
        (good.replace("51999", "0"), "interface.listen_port"),
        (text(&key, "mtu = 575\n", ""), "interface.mtu"),
        (text(&key, "mtu = 9001\n", ""), "interface.mtu"),
        (text(&key, "workers = 257\n", ""), "interface.workers"),
        (text(&key, "queues = 0\n", ""), "interface.queues"),
        (text(&key, "queues = 257\n", ""), "interface.queues"),
        (
            text(&key, "[interface.piggyback]\nmode = \"eager\"\n", ""),
            "interface.piggyback.mode",
        ),
        (
            text(&key, "[interface.piggyback]\nmax_delay_us = 1000001\n", ""),
            "interface.piggyback.max_delay_us",
        ),
        (
            text(&key, "[interface.piggyback]\nqueue_limit = 1423\n", ""),
            "interface.piggyback.queue_limit",
        ),
        (
            text(&key, "[interface.piggyback]\nsmall = 0\n", ""),
            "interface.piggyback.small",
        ),
        (good.replace("\"far\"", "\"\""), "peer[0].name"),
        (good.replace(&key, "not base64!"), "peer[0].public_key"),
        (
            good.replace(&key, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="),
            "peer[0].public_key",
        ),
        (
            good.replace("127.0.0.1:51998", "no port"),
            "peer[0].endpoint",
        ),
        (
            good.replace("10.77.0.2/32", "10.77.0.2/40"),
            "peer[0].allowed_ips",
        ),
    ];
    for (t, want) in cases {
        assert_eq!(bad_key(load(&t)), want, "{t}");
    }
}
