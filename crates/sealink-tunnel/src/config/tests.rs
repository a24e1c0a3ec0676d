use std::time::Duration;

use sealink_proto::tunnel::PiggybackMode;

use super::*;

const KEY: &str = "sealink-host hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo=";

fn sample() -> String {
    format!(
        r#"
[interface]
private_key = "host.key"
address = "10.9.0.1/24"
listen_port = 51820

[interface.piggyback]
small = 128
max_delay_us = 100

[[peer]]
name = "b"
public_key = "{KEY}"
endpoint = "10.0.0.2:51820"
allowed_ips = ["10.9.0.2/32", "fd00::/64"]
"#
    )
}

#[test]
fn parses_the_documented_example() {
    let c = Config::parse(&sample()).unwrap();
    assert_eq!(c.name, "sl0");
    assert_eq!(c.core.mtu, 1420);
    assert_eq!(c.addresses, [parse_if_addr("10.9.0.1/24").unwrap()]);
    assert_eq!(c.core.piggyback.small, 128);
    assert_eq!(c.core.piggyback.max_delay, Duration::from_micros(100));
    assert_eq!(c.peers.len(), 1);
    assert_eq!(c.peers[0].allowed_ips.len(), 2);
    assert_eq!(c.peers[0].endpoint, Some("10.0.0.2:51820".parse().unwrap()));
}

#[test]
fn errors_name_the_key() {
    let e = Config::parse(&sample().replace("listen_port", "listen_prot")).unwrap_err();
    assert!(e.to_string().contains("listen_prot"), "{e}");
    let e = Config::parse(&sample().replace("10.9.0.2/32", "10.9.0.2/40")).unwrap_err();
    assert!(e.to_string().contains("peer[0].allowed_ips"), "{e}");
    let e = Config::parse(&sample().replace(KEY, "nope")).unwrap_err();
    assert!(e.to_string().contains("peer[0].public_key"), "{e}");
    let e = Config::parse(&sample().replace("small = 128", "small = 5000")).unwrap_err();
    assert!(e.to_string().contains("piggyback.small"), "{e}");
    let e = Config::parse(&sample().replace("10.9.0.1/24", "10.9.0.1")).unwrap_err();
    assert!(e.to_string().contains("interface.address"), "{e}");
    let e = Config::parse(&sample().replace("\"10.0.0.2:51820\"", "\"x\"")).unwrap_err();
    assert!(e.to_string().contains("peer[0].endpoint"), "{e}");
    let with = |line: &str| {
        sample().replace(
            "[interface.piggyback]",
            &format!("{line}\n[interface.piggyback]"),
        )
    };
    let e = Config::parse(&with("queues = 0")).unwrap_err();
    assert!(e.to_string().contains("interface.queues"), "{e}");
    let e = Config::parse(&with("workers = 1000")).unwrap_err();
    assert!(e.to_string().contains("interface.workers"), "{e}");
    let e = Config::parse(&with("tun_writers = 257")).unwrap_err();
    assert!(e.to_string().contains("interface.tun_writers"), "{e}");
    let c = Config::parse(&with("tun_writers = 0")).unwrap();
    assert_eq!(c.tun_writers, Some(0));
    assert_eq!(Config::parse(&sample()).unwrap().handoff, Handoff::Auto);
    let c = Config::parse(&with("handoff = \"always\"")).unwrap();
    assert_eq!(c.handoff, Handoff::Always);
    assert_eq!(
        Config::parse(&sample()).unwrap().restart_needed(&c),
        Some("interface.handoff")
    );
    let e = Config::parse(&with("handoff = \"never\"")).unwrap_err();
    assert!(e.to_string().contains("interface.handoff"), "{e}");
    assert!(e.to_string().contains("\"auto\" or \"always\""), "{e}");
    assert!(
        Config::parse(&sample()).unwrap().core.lanes,
        "lanes by default"
    );
    assert!(!Config::parse(&with("lanes = false")).unwrap().core.lanes);
    let e = Config::parse(&with("lanes = 1")).unwrap_err();
    assert!(e.to_string().contains("lanes"), "{e}");
    let e = Config::parse(&sample().replace("small = 128", "small = 128\nmode = \"soon\""))
        .unwrap_err();
    assert!(e.to_string().contains("interface.piggyback.mode"), "{e}");
}

#[test]
fn data_path_and_piggyback_mode_keys() {
    let c = Config::parse(&sample()).unwrap();
    assert_eq!(
        (c.workers, c.queues),
        (None, None),
        "defaults come from the core count"
    );
    assert_eq!(c.core.piggyback.mode, PiggybackMode::Autocork);
    let text = sample()
        .replace(
            "[interface.piggyback]",
            "workers = 0\nqueues = 2\n[interface.piggyback]",
        )
        .replace("small = 128", "small = 128\nmode = \"timer\"");
    let c = Config::parse(&text).unwrap();
    assert_eq!((c.workers, c.queues), (Some(0), Some(2)));
    assert_eq!(c.core.piggyback.mode, PiggybackMode::Timer);
}

#[test]
fn routes_cover_allowed_ips_outside_the_interface_networks() {
    // 10.9.0.2/32 lies in 10.9.0.1/24: the kernel already routes it to the interface.
    let text = sample().replace(
        r#"["10.9.0.2/32", "fd00::/64"]"#,
        r#"["10.9.0.2/32", "10.77.0.0/24", "10.9.0.0/16", "fd00::/64", "10.77.0.0/24"]"#,
    );
    let c = Config::parse(&text).unwrap();
    let routes: Vec<String> = c.routes().iter().map(|n| n.to_string()).collect();
    // A wider prefix than the interface's own is routed; duplicates once; IPv6 too.
    assert_eq!(routes, ["10.77.0.0/24", "10.9.0.0/16", "fd00::/64"]);
}

#[test]
fn a_full_tunnel_is_routed_by_policy_not_by_a_route() {
    let c = Config::parse(&sample()).unwrap();
    assert_eq!(c.full_tunnel(), (false, false));
    assert_eq!(c.fwmark, DEFAULT_FWMARK);
    for (all, fams) in [("0.0.0.0/0", (true, false)), ("::/0", (false, true))] {
        // The default route would contain the endpoint 10.0.0.2, but the tunnel's own
        // datagrams are marked and routed around it: accepted.
        let c = Config::parse(&sample().replace("fd00::/64", all)).unwrap();
        assert_eq!(c.full_tunnel(), fams, "{all}");
        assert!(c.routes().iter().all(|n| n.prefix() > 0), "{all}");
        let base = Config::parse(&sample()).unwrap();
        assert!(base.restart_needed(&c).unwrap().contains("full tunnel"));
    }
    let c = Config::parse(&sample().replace("listen_port", "fwmark = 4660\nlisten_port")).unwrap();
    assert_eq!(c.fwmark, 4660);
    let e = Config::parse(&sample().replace("listen_port", "fwmark = 0\nlisten_port")).unwrap_err();
    assert!(e.to_string().contains("interface.fwmark"), "{e}");
}

#[test]
fn dns_takes_servers_and_search_domains() {
    let with = |d: &str| {
        Config::parse(&sample().replace("listen_port", &format!("dns = {d}\nlisten_port")))
    };
    assert!(Config::parse(&sample()).unwrap().dns.is_empty());
    let c = with(r#"["10.9.0.2", "fd00::53", "Corp.Example", "lan."]"#).unwrap();
    assert_eq!(c.dns.servers.len(), 2);
    assert_eq!(c.dns.search, ["corp.example", "lan."]);
    assert_eq!(
        c.dns.resolv_conf(),
        "nameserver 10.9.0.2\nnameserver fd00::53\nsearch corp.example lan.\n"
    );
    assert_eq!(
        with(r#""1.1.1.1""#).unwrap().dns.resolv_conf(),
        "nameserver 1.1.1.1\n"
    );
    for bad in [
        r#"["a b"]"#,
        r#"["-x.example"]"#,
        r#"["x;reboot"]"#,
        r#"["corp.example"]"#,
    ] {
        let e = with(bad).unwrap_err().to_string();
        assert!(e.contains("interface.dns"), "{bad}: {e}");
    }
    let base = Config::parse(&sample()).unwrap();
    assert_eq!(
        base.restart_needed(&with(r#""1.1.1.1""#).unwrap()),
        Some("interface.dns")
    );
}

#[test]
fn routes_over_the_endpoint_are_refused() {
    // 10.0.0.0/8 would route the peer's endpoint 10.0.0.2 into the tunnel.
    for net in ["10.0.0.0/8", "0.0.0.0/1"] {
        let e = Config::parse(&sample().replace("fd00::/64", net)).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("peer[0].allowed_ips"), "{msg}");
        assert!(msg.contains("endpoint 10.0.0.2:51820"), "{msg}");
    }
}

#[test]
fn listen_port_and_persistent_keepalive_are_optional() {
    let c = Config::parse(&sample()).unwrap();
    assert_eq!(c.listen_port, 51820);
    assert_eq!(c.peers[0].persistent_keepalive, None);
    let c = Config::parse(&sample().replace("listen_port = 51820\n", "")).unwrap();
    assert_eq!(c.listen_port, 0, "left out: an ephemeral port");
    let e = Config::parse(&sample().replace("51820\n", "0\n")).unwrap_err();
    assert!(e.to_string().contains("interface.listen_port"), "{e}");
    let with = |v: &str| {
        sample().replace(
            "endpoint =",
            &format!("persistent_keepalive = {v}\nendpoint ="),
        )
    };
    let c = Config::parse(&with("25")).unwrap();
    assert_eq!(
        c.peers[0].persistent_keepalive,
        Some(Duration::from_secs(25))
    );
    let c = Config::parse(&with("0")).unwrap();
    assert_eq!(c.peers[0].persistent_keepalive, None, "0 is off");
    for v in ["65536", "-1", "\"25\""] {
        let e = Config::parse(&with(v)).unwrap_err();
        assert!(e.to_string().contains("persistent_keepalive"), "{v}: {e}");
    }
}

#[test]
fn address_is_one_cidr_or_a_list() {
    let list = r#"address = ["10.9.0.1/24", "fd09::1/64", "10.8.0.1/16"]"#;
    let c = Config::parse(&sample().replace(r#"address = "10.9.0.1/24""#, list)).unwrap();
    let got: Vec<String> = c.addresses.iter().map(|a| a.to_string()).collect();
    assert_eq!(got, ["10.9.0.1/24", "fd09::1/64", "10.8.0.1/16"]);
    // Every address's network is the interface's: fd00::/64 is not, 10.8.x is now.
    let text = sample()
        .replace(r#"address = "10.9.0.1/24""#, list)
        .replace("fd00::/64", "10.8.3.0/24");
    let c = Config::parse(&text).unwrap();
    assert!(c.routes().is_empty(), "{:?}", c.routes());
    for bad_list in [
        "address = []",
        r#"address = ["10.9.0.1/24", "10.9.0.1/16"]"#,
        r#"address = ["10.9.0.1/24", "fd09::1/129"]"#,
        r#"address = ["10.9.0.1/24", "nope/8"]"#,
        r#"address = ["10.9.0.1/24", "fd09::1"]"#,
    ] {
        let e =
            Config::parse(&sample().replace(r#"address = "10.9.0.1/24""#, bad_list)).unwrap_err();
        assert!(
            e.to_string().contains("interface.address"),
            "{bad_list}: {e}"
        );
    }
    let e =
        Config::parse(&sample().replace(r#"address = "10.9.0.1/24""#, "address = 7")).unwrap_err();
    assert!(e.to_string().contains("address"), "{e}");
}

#[test]
fn small_order_peer_keys_are_refused() {
    let zero = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    // u = 1 with bit 255 set: X25519 ignores that bit.
    let one_high = "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAIA=";
    // p - 1
    let p_minus_1 = "7P///////////////////////////////////////38=";
    for k in [zero, one_high, p_minus_1] {
        let e = Config::parse(&sample().replace(KEY, k)).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("peer[0].public_key"), "{msg}");
        assert!(msg.contains("small-order"), "{msg}");
    }
}

#[test]
fn peer_key_is_read_by_the_shared_parser() {
    // The bare base64 and the whole `.pub` line are both accepted.
    let bare = KEY.split_whitespace().last().unwrap();
    let c = Config::parse(&sample().replace(KEY, bare)).unwrap();
    assert_eq!(
        c.peers[0].public_key,
        Config::parse(&sample()).unwrap().peers[0].public_key
    );
    // An owner's public key line, or any other tag, is not a host key.
    for line in [format!("sealink-owner {bare}"), format!("junk {bare}")] {
        let e = Config::parse(&sample().replace(KEY, &line)).unwrap_err();
        assert!(e.to_string().contains("peer[0].public_key"), "{line}: {e}");
    }
}

#[test]
fn hooks_are_a_command_or_a_list() {
    let with = |line: &str| {
        sample().replace(
            "[interface.piggyback]",
            &format!("{line}\n[interface.piggyback]"),
        )
    };
    let c = Config::parse(&with("post_up = \"echo %i\"\npre_down = [\"a\", \"b\"]")).unwrap();
    assert_eq!(c.hooks.post_up, ["echo %i"]);
    assert_eq!(c.hooks.pre_down, ["a", "b"]);
    assert!(c.hooks.pre_up.is_empty() && c.hooks.post_down.is_empty());
    for bad_hook in ["post_down = \" \"", "pre_up = [\"\"]", "post_up = 3"] {
        let e = Config::parse(&with(bad_hook)).unwrap_err();
        assert!(
            e.to_string().contains("_up") || e.to_string().contains("_down"),
            "{bad_hook}: {e}"
        );
    }
}

#[test]
fn an_endpoint_zone_may_name_an_interface() {
    let lo = crate::uapi::interface_index("lo").expect("a loopback interface");
    let c = Config::parse(&sample().replace("10.0.0.2:51820", "[fe80::1%lo]:51820")).unwrap();
    let Some(SocketAddr::V6(a)) = c.peers[0].endpoint else {
        panic!("{:?}", c.peers[0].endpoint)
    };
    assert_eq!(
        (a.ip().segments()[0], a.port(), a.scope_id()),
        (0xfe80, 51820, lo)
    );
    assert_eq!(
        c.endpoint_names,
        [None],
        "an address is never resolved again"
    );
    // A numeric zone is an address as it is.
    let c = Config::parse(&sample().replace("10.0.0.2:51820", "[fe80::1%7]:51820")).unwrap();
    assert!(matches!(c.peers[0].endpoint, Some(SocketAddr::V6(a)) if a.scope_id() == 7));
    let e = Config::parse(&sample().replace("10.0.0.2:51820", "[fe80::1%nosuch0]:51820"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("peer[0].endpoint") && e.contains("nosuch0"),
        "{e}"
    );
}

#[test]
fn endpoint_names_are_kept_for_re_resolution() {
    let c = Config::parse(&sample()).unwrap();
    assert_eq!(
        c.endpoint_names,
        [None],
        "an address is never resolved again"
    );
    let c = Config::parse(&sample().replace("10.0.0.2:51820", "localhost:51820")).unwrap();
    assert_eq!(c.endpoint_names, [Some("localhost:51820".to_string())]);
    assert!(c.peers[0].endpoint.is_some_and(|e| e.ip().is_loopback()));
}

#[test]
fn only_peer_changes_reload_without_a_restart() {
    let c = Config::parse(&sample()).unwrap();
    let peers_changed = sample()
        .replace("10.9.0.2/32", "10.9.0.3/32")
        .replace("10.0.0.2:51820", "10.0.0.5:51820");
    assert_eq!(
        c.restart_needed(&Config::parse(&peers_changed).unwrap()),
        None
    );
    for (from, to, key) in [
        (
            "listen_port = 51820",
            "listen_port = 51821",
            "interface.listen_port",
        ),
        ("10.9.0.1/24", "10.9.0.1/16", "interface.address"),
        ("host.key", "other.key", "interface.private_key"),
        ("small = 128", "small = 100", "interface.piggyback"),
        (
            "[interface]",
            "[interface]\npost_up = \"true\"",
            "interface hooks",
        ),
        (
            "[interface]",
            "[interface]\nuser = \"daemon\"",
            "interface.user",
        ),
    ] {
        let n = Config::parse(&sample().replace(from, to)).unwrap();
        assert_eq!(c.restart_needed(&n), Some(key), "{from} -> {to}");
    }
}

#[test]
fn piggyback_defaults_fit_a_small_mtu() {
    let with_mtu = |m: u32| sample().replace("listen_port", &format!("mtu = {m}\nlisten_port"));
    // mtu = 1280 (IPv6's minimum) and the documented minimum 576 were refused,
    // blaming a queue_limit default the user never wrote.
    for m in [1280, 576, 1397] {
        let c = Config::parse(&with_mtu(m)).unwrap_or_else(|e| panic!("mtu {m}: {e}"));
        assert_eq!(c.core.mtu, m as usize);
        assert_eq!(c.core.piggyback.queue_limit, m as usize + 2, "mtu {m}");
        assert_eq!(c.core.piggyback.small, 128, "the written small is kept");
    }
    let c = Config::parse(&with_mtu(9000)).unwrap();
    assert_eq!(
        c.core.piggyback.queue_limit, 1400,
        "the default is a ceiling"
    );
    // Without a piggyback section the default small (256) fits too.
    let bare = with_mtu(576).replace(
        "[interface.piggyback]\nsmall = 128\nmax_delay_us = 100\n",
        "",
    );
    assert!(!bare.contains("piggyback"), "{bare}");
    let c = Config::parse(&bare).unwrap();
    assert_eq!(
        (c.core.piggyback.queue_limit, c.core.piggyback.small),
        (578, 256)
    );
    // A written queue_limit fits the default small to it.
    let c = Config::parse(&bare.replace(
        "[[peer]]",
        "[interface.piggyback]\nqueue_limit = 100\n[[peer]]",
    ))
    .unwrap();
    assert_eq!(
        (c.core.piggyback.queue_limit, c.core.piggyback.small),
        (100, 98)
    );
    // A value the user wrote is still checked, and the error names it.
    let big = with_mtu(1280).replace("small = 128", "small = 128\nqueue_limit = 1400");
    let msg = Config::parse(&big).unwrap_err().to_string();
    assert!(msg.contains("interface.piggyback.queue_limit"), "{msg}");
    assert!(msg.contains("1282"), "{msg}");
    let tiny = sample().replace("small = 128", "queue_limit = 2");
    let msg = Config::parse(&tiny).unwrap_err().to_string();
    assert!(msg.contains("interface.piggyback.queue_limit"), "{msg}");
    let msg = Config::parse(&with_mtu(576).replace("small = 128", "small = 577"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("interface.piggyback.small"), "{msg}");
    for m in [575, 9001] {
        let msg = Config::parse(&with_mtu(m)).unwrap_err().to_string();
        assert!(msg.contains("interface.mtu"), "{m}: {msg}");
    }
    // A reload that changes the MTU needs a restart (it was refused as a queue_limit error).
    let running = Config::parse(&sample()).unwrap();
    let new = Config::parse(&with_mtu(1280)).unwrap();
    assert_eq!(running.restart_needed(&new), Some("interface.mtu"));
}

#[test]
fn user_defaults_to_a_dedicated_account_and_is_a_plain_name() {
    assert_eq!(Config::parse(&sample()).unwrap().user, DEFAULT_USER);
    assert_eq!(DEFAULT_USER, "sealink-tunnel");
    for ok in ["root", "sealink", "_sl", "a.b-c"] {
        let c = Config::parse(
            &sample().replace("[interface]", &format!("[interface]\nuser = \"{ok}\"")),
        )
        .unwrap();
        assert_eq!(c.user, ok);
    }
    for bad_user in ["", "-x", "a b", "a:b", "x/y", &"u".repeat(33)] {
        let e = Config::parse(&sample().replace(
            "[interface]",
            &format!("[interface]\nuser = \"{bad_user}\""),
        ))
        .unwrap_err();
        assert!(
            e.to_string().contains("interface.user"),
            "{bad_user:?}: {e}"
        );
    }
}

#[test]
fn config_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.join("t.toml");
    std::fs::write(&path, sample()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let c = Config::from_file(&path).unwrap();
    assert_eq!(c.private_key, dir.join("host.key"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let msg = Config::from_file(&path).unwrap_err().to_string();
    assert!(msg.contains("writable by group or others"), "{msg}");
    assert!(msg.contains("tunnel config"), "{msg}");
}

/// Issue 50's bad input: a key listed twice, or one prefix given to two peers, is refused with
/// both peers named; nested prefixes across peers are allowed (the longest match routes).
#[test]
fn duplicate_keys_and_prefixes_across_peers_are_refused_by_name() {
    let second = |key: &str, ips: &str| {
        format!(
            "{}\n[[peer]]\nname = \"c\"\npublic_key = \"{key}\"\nallowed_ips = [{ips}]\n",
            sample()
        )
    };
    let other = "sealink-host 0mGGb1lfX8Yd6WcUUH8C0jFzUsyXpnEnQk5oEgWfX3Y=";
    let e = Config::parse(&second(KEY, "\"10.9.0.3/32\"")).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("peer[1].public_key") && msg.contains("peer[0]"),
        "{msg}"
    );
    let e = Config::parse(&second(other, "\"10.9.0.2/32\"")).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("peer[1].allowed_ips")
            && msg.contains("10.9.0.2/32")
            && msg.contains("peer[0]"),
        "{msg}"
    );
    // The same prefix written with host bits is the same prefix.
    assert!(Config::parse(&second(other, "\"fd00::1/64\"")).is_err());
    // Nested: b's 10.9.0.2/32 inside c's 10.9.0.0/24: both kept, b's is the longer match.
    let c = Config::parse(&second(other, "\"10.9.0.0/24\"")).unwrap();
    assert_eq!(c.peers.len(), 2);
}
