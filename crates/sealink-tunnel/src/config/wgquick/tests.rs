use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use sealink_proto::tunnel::Wire;

use super::*;
use crate::config::{Config, KeyFormat};

// Keys from wg(8)'s example configuration; the preshared key is any 32 bytes in base64.
const PRIV: &str = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=";
const PUB_B: &str = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=";
const PUB_C: &str = "TrMvSoP4jYQlY6RIzBgbssQqY3vxI2Pi+y71lOWWXX0=";
const PSK: &str = "FpCyhws9cxwWoV4xELtfJvjJN+zQVRPISllRWgeopVE=";

const EXAMPLE: &str = "\
# a comment
[Interface]
PrivateKey = yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=
Address = 10.192.122.1/24, fd00:1::1/64
Address = 10.10.0.1/16
ListenPort = 51820
MTU = 1380
DNS = 10.192.122.53, example.internal
PostUp = echo %i up
PostUp = logger up   # two hooks
PreDown = echo down
SaveConfig = false
Table = auto

[Peer]
PublicKey = xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=
PresharedKey = FpCyhws9cxwWoV4xELtfJvjJN+zQVRPISllRWgeopVE=
Endpoint = 192.95.5.67:1234
AllowedIPs = 10.192.122.3/32, 10.192.124.0/24
AllowedIPs = fd00:1::3/128
PersistentKeepalive = 25

[peer]
publickey = TrMvSoP4jYQlY6RIzBgbssQqY3vxI2Pi+y71lOWWXX0=
allowedips = 10.192.122.4/32
persistentkeepalive = off
";

fn parse_named(text: &str, name: &str) -> Result<Config, TunnelError> {
    Config::parse_at(text, Path::new(&format!("/etc/wireguard/{name}.conf")))
}

#[test]
fn a_full_wg_quick_config() {
    let c = parse_named(EXAMPLE, "wg0").unwrap();
    assert_eq!(c.name, "wg0", "named after the file");
    assert_eq!(c.key_format, KeyFormat::WgQuick);
    assert_eq!(c.private_key, Path::new("/etc/wireguard/wg0.conf"));
    assert_eq!(c.core.wire, Wire::WireGuard);
    assert!(!c.core.piggyback.enabled);
    assert_eq!(c.core.mtu, 1380);
    assert_eq!(c.listen_port, 51820);
    let addrs: Vec<String> = c
        .addresses
        .iter()
        .map(|a| format!("{}/{}", a.addr, a.prefix))
        .collect();
    assert_eq!(addrs, ["10.192.122.1/24", "fd00:1::1/64", "10.10.0.1/16"]);
    assert_eq!(
        c.dns.servers,
        ["10.192.122.53".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(c.dns.search, ["example.internal"]);
    assert_eq!(c.hooks.post_up, ["echo %i up", "logger up"]);
    assert_eq!(c.hooks.pre_down, ["echo down"]);
    assert_eq!(c.peers.len(), 2);
    let b = &c.peers[0];
    assert_eq!(b.public_key, parse_key(PUB_B).unwrap());
    assert_eq!(b.preshared_key, parse_key(PSK));
    assert_eq!(b.endpoint, Some("192.95.5.67:1234".parse().unwrap()));
    assert_eq!(b.allowed_ips.len(), 3);
    assert_eq!(b.persistent_keepalive, Some(Duration::from_secs(25)));
    assert_eq!(b.name, &PUB_B[..8]);
    let cc = &c.peers[1];
    assert_eq!(cc.public_key, parse_key(PUB_C).unwrap());
    assert_eq!(cc.preshared_key, None);
    assert_eq!(cc.persistent_keepalive, None, "off");
    assert_eq!(private_key(EXAMPLE).unwrap(), parse_key(PRIV).unwrap());
}

#[test]
fn detection_by_extension_or_first_section() {
    assert!(is_wg_quick(Path::new("x/wg0.conf"), "anything"));
    assert!(is_wg_quick(Path::new("x/wg0"), "# hi\n\n  [Interface]\n"));
    assert!(!is_wg_quick(
        Path::new("x/sl0.toml"),
        "[interface]\nname = 1"
    ));
    assert!(
        !is_wg_quick(Path::new("x/sl0"), "[interface]\nname = \"sl0\"\n"),
        "sealink's TOML starts with the lower-case table"
    );
}

#[test]
fn interface_names_follow_wg_quick() {
    assert_eq!(name_from_path(Path::new("/a/wg0.conf")).unwrap(), "wg0");
    assert_eq!(
        name_from_path(Path::new("a=b+c.d-e_f.conf")).unwrap(),
        "a=b+c.d-e_f"
    );
    for bad in [
        "/a/.conf",
        "/a/waytoolongname16.conf",
        "/a/w g.conf",
        "/a/wé.conf",
    ] {
        assert!(name_from_path(Path::new(bad)).is_err(), "{bad}");
    }
}

#[test]
fn errors_name_their_line() {
    let cases: &[(&str, &str)] = &[
        (
            "[Interface]\nPrivateKey = short\nAddress = 10.0.0.1/24\n",
            "line 2",
        ),
        (
            "[Interface]\nPrivateKey = PK\nAddress = 10.0.0.1/24\nBogus = 1\n",
            "line 4",
        ),
        (
            "[Interface]\nPrivateKey = PK\nAddress = 10.0.0.1/24\nListenPort = 70000\n",
            "line 4",
        ),
        (
            "[Interface]\nPrivateKey = PK\nAddress = 10.0.0.1/24\nSaveConfig = true\n",
            "line 4",
        ),
        (
            "[Interface]\nPrivateKey = PK\nAddress = 10.0.0.1/24\nTable = off\nTable = 7\n",
            "line 5",
        ),
        (
            "[Interface]\nPrivateKey = PK\nAddress = 10.0.0.1/24\n[Peer]\nAllowedIPs = 10.0.0.2/32\n",
            "line 4",
        ),
        (
            "[Interface]\nPrivateKey = PK\nAddress = 10.0.0.1/24\n[Peer]\nPublicKey = PB\nPersistentKeepalive = 99999\n",
            "line 6",
        ),
        (
            "[Interface]\nPrivateKey = PK\nAddress = 10.0.0.1/24\n[Wrong]\n",
            "line 4",
        ),
        ("PrivateKey = PK\n", "line 1"),
        ("[Interface]\nPrivateKey = PK\nPrivateKey = PK\n", "line 3"),
        ("[Interface]\nAddress = 10.0.0.1/24\n", "line 1"),
        (
            "[Interface]\nPrivateKey = PK\nAddress = 10.0.0.1/24,,10.0.0.2/24\n",
            "line 3",
        ),
        ("[Interface]\nPrivateKey = PK\nno equals sign\n", "line 3"),
    ];
    for (text, want) in cases {
        let text = text.replace("PK", PRIV).replace("PB", PUB_B);
        let e = parse_named(&text, "wg0").unwrap_err().to_string();
        assert!(e.contains(want), "{text:?}: {e}");
    }
    // Checks shared with the TOML format name the key.
    let text = format!("[Interface]\nPrivateKey = {PRIV}\nAddress = 10.0.0.1/33\n");
    let e = parse_named(&text, "wg0").unwrap_err().to_string();
    assert!(e.contains("address"), "{e}");
    let text = format!(
        "[Interface]\nPrivateKey = {PRIV}\nAddress = 10.0.0.1/24\n[Peer]\nPublicKey = {PUB_B}\nEndpoint = nowhere\n"
    );
    let e = parse_named(&text, "wg0").unwrap_err().to_string();
    assert!(e.contains("endpoint"), "{e}");
}

#[test]
fn sealinks_toml_can_ask_for_wireguards_wire() {
    let toml = format!(
        r#"[interface]
name = "wgt0"
private_key = "wg.key"
address = "10.0.0.1/24"
protocol = "wireguard"

[[peer]]
name = "b"
public_key = "{PUB_B}"
preshared_key = "{PSK}"
allowed_ips = ["10.0.0.2/32"]
"#
    );
    let c = Config::parse(&toml).unwrap();
    assert_eq!(c.core.wire, Wire::WireGuard);
    assert_eq!(c.key_format, KeyFormat::WireGuard);
    assert_eq!(c.peers[0].preshared_key, parse_key(PSK));
    // A psk on sealink's wire, a piggyback section on WireGuard's, an unknown protocol.
    let e = Config::parse(&toml.replace("protocol = \"wireguard\"\n", ""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("preshared_key"), "{e}");
    let e = Config::parse(&toml.replace(
        "protocol = \"wireguard\"\n",
        "protocol = \"wireguard\"\n[interface.piggyback]\nenabled = true\n",
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("piggyback"), "{e}");
    assert!(!c.core.lanes, "WireGuard's wire has no lanes");
    let e = Config::parse(&toml.replace(
        "protocol = \"wireguard\"\n",
        "protocol = \"wireguard\"\nlanes = true\n",
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("interface.lanes"), "{e}");
    let e = Config::parse(&toml.replace("\"wireguard\"", "\"ipsec\""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("protocol"), "{e}");
}

#[test]
fn the_key_comes_from_the_file_and_only_a_private_one() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .unwrap();
    let p = d.path().join("wgk0.conf");
    let text = format!("[Interface]\nPrivateKey = {PRIV}\nAddress = 10.0.0.1/24\n");
    std::fs::write(&p, &text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = Config::from_file(&p).unwrap();
    let k = c.host_key().unwrap();
    let want = sealink_proto::HostKey::from_private(parse_key(PRIV).unwrap()).unwrap();
    assert_eq!(k.public(), want.public());
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = c.host_key().unwrap_err().to_string();
    assert!(e.contains("private key") && e.contains("chmod 600"), "{e}");
    // A `wg genkey` file named by TOML.
    let kf = d.path().join("wg.key");
    std::fs::write(&kf, format!("{PRIV}\n")).unwrap();
    std::fs::set_permissions(&kf, std::fs::Permissions::from_mode(0o600)).unwrap();
    let toml = d.path().join("wgt.toml");
    std::fs::write(
        &toml,
        "[interface]\nname = \"wgt\"\nprivate_key = \"wg.key\"\naddress = \"10.0.0.1/24\"\nprotocol = \"wireguard\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&toml, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = Config::from_file(&toml).unwrap();
    assert_eq!(c.host_key().unwrap().public(), want.public());
}

proptest! {
    /// Whatever the text, parsing returns (a config or an error naming a line) and never
    /// panics; lines built from the real keys in any order and case are handled too.
    #[test]
    fn never_panics(text in ".{0,400}") {
        let _ = parse_named(&text, "wg0");
        let _ = private_key(&text);
    }

    #[test]
    fn never_panics_on_near_configs(
        lines in proptest::collection::vec(
            prop_oneof![
                Just("[Interface]".to_string()),
                Just("[Peer]".to_string()),
                Just(format!("PrivateKey = {PRIV}")),
                Just(format!("publickey={PUB_B}")),
                Just(format!("PresharedKey = {PSK}")),
                Just("Address = 10.0.0.1/24".to_string()),
                Just("AllowedIPs = 0.0.0.0/0, ::/0".to_string()),
                Just("Endpoint = [::1]:51820".to_string()),
                Just("ListenPort = 0".to_string()),
                Just("MTU = 99999".to_string()),
                Just("FwMark = 0x10".to_string()),
                Just("DNS = ".to_string()),
                ".{0,40}",
            ],
            0..14,
        )
    ) {
        let _ = parse_named(&lines.join("\n"), "wg0");
    }
}

/// `Table`: auto as before; off routes nothing and makes no full tunnel; a number
/// (or main) puts every allowed IP, default routes too, in that table without policy rules.
#[test]
fn table_off_and_a_number_as_wg_quick_has_them() {
    let conf = |table: &str| {
        format!(
            "[Interface]\nPrivateKey = {PRIV}\nAddress = 10.0.0.1/24\n{table}\n[Peer]\nPublicKey = {PUB_B}\nAllowedIPs = 10.0.0.2/32, 10.9.0.0/16, 0.0.0.0/0\nEndpoint = 192.0.2.1:51820\n"
        )
    };
    let cfg = |table: &str| parse_named(&conf(table), "wg0").unwrap();
    let auto = cfg("Table = auto");
    assert_eq!(auto.table, crate::config::RouteTable::Auto);
    assert_eq!(auto.full_tunnel(), (true, false));
    assert_eq!(auto.routes(), ["10.9.0.0/16".parse().unwrap()]);
    let off = cfg("Table = off");
    assert_eq!(off.table, crate::config::RouteTable::Off);
    assert!(off.routes().is_empty());
    assert_eq!(off.full_tunnel(), (false, false));
    for (line, id) in [("Table = 1234", 1234), ("Table = main", 254)] {
        let c = cfg(line);
        assert_eq!(c.table.id(), Some(id), "{line}");
        assert_eq!(c.full_tunnel(), (false, false), "{line}");
        let routes: Vec<String> = c.routes().iter().map(|n| n.to_string()).collect();
        assert_eq!(
            routes,
            ["10.0.0.2/32", "10.9.0.0/16", "0.0.0.0/0"],
            "{line}"
        );
    }
    for bad in ["Table = 0", "Table = -3", "Table = local-ish"] {
        let e = parse_named(&conf(bad), "wg0").unwrap_err().to_string();
        assert!(e.contains("interface.table"), "{bad}: {e}");
    }
    // A reload cannot change it.
    assert_eq!(auto.restart_needed(&off), Some("interface.table"));
}
