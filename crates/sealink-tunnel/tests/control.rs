//! The control socket through the library: where sockets live ([`RunDir`]), which tunnels
//! [`control::running`] lists, a [`control::request`] against a socket served by this test
//! (the request line it sends, the whole answer, a missing tunnel, a silent one), and the text
//! [`control::format_status`] gives `sealink show`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixListener;
use std::thread;
use std::time::{Duration, Instant};

use sealink_proto::Time;
use sealink_proto::tunnel::{PeerStats, PeerStatus};
use sealink_tunnel::{RunDir, TunnelError, UpInfo, control};

/// A run directory under `d` with its namespace directory made (as `up` would).
fn run_dir(d: &tempfile::TempDir) -> RunDir {
    let r = RunDir::new(Some(d.path().join("run")));
    std::fs::create_dir_all(r.dir()).unwrap();
    r
}

#[test]
fn run_dir_is_keyed_by_the_network_namespace() {
    let d = common::private_dir();
    let base = d.path().join("run");
    let r = RunDir::new(Some(base.clone()));
    assert_eq!(r.base(), base);
    let ino = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
    assert_eq!(r.dir(), base.join(format!("net-{ino}")));
    assert_eq!(r.socket_path("sl7"), r.dir().join("sl7.sock"));
    // Two handles on one base in one namespace agree; another base differs.
    assert_eq!(r, RunDir::new(Some(base.clone())));
    assert_ne!(r, RunDir::new(Some(d.path().join("other"))));
    // Nothing is created until a tunnel comes up.
    assert!(!base.exists());
}

#[test]
fn running_lists_sockets_by_name_only() {
    let d = common::private_dir();
    let r = RunDir::new(Some(d.path().join("run")));
    // No directory yet: nothing runs.
    assert!(control::running(&r).unwrap().is_empty());
    std::fs::create_dir_all(r.dir()).unwrap();
    for f in ["zeta.sock", "alpha.sock", "notes.txt", "sock"] {
        std::fs::write(r.dir().join(f), "").unwrap();
    }
    assert_eq!(control::running(&r).unwrap(), ["alpha", "zeta"]);
}

#[test]
fn request_to_a_missing_tunnel_is_not_running() {
    let d = common::private_dir();
    let r = run_dir(&d);
    match control::request(&r, "nope", "show", Duration::from_secs(1)) {
        Err(TunnelError::NotRunning(n)) => assert_eq!(n, "nope"),
        other => panic!("expected NotRunning, got {other:?}"),
    }
    // A stale socket file with no listener behind it is the same.
    let path = r.socket_path("stale");
    drop(UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    assert!(matches!(
        control::request(&r, "stale", "show", Duration::from_secs(1)),
        Err(TunnelError::NotRunning(_))
    ));
}

/// Serves one connection on `name`'s socket: reads the request line, answers `answer` in
/// two writes, closes; returns the line it read.
fn serve_once(r: &RunDir, name: &str, answer: &'static str) -> thread::JoinHandle<String> {
    let l = UnixListener::bind(r.socket_path(name)).unwrap();
    thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).unwrap();
        let (a, b) = answer.split_at(answer.len() / 2);
        (&s).write_all(a.as_bytes()).unwrap();
        thread::sleep(Duration::from_millis(50));
        (&s).write_all(b.as_bytes()).unwrap();
        line
    })
}

#[test]
fn request_sends_one_line_and_reads_the_whole_answer() {
    let d = common::private_dir();
    let r = run_dir(&d);
    let answer = "interface: sl9\n  drops: none\n\npeer: far\n";
    let server = serve_once(&r, "sl9", answer);
    let got = control::request(&r, "sl9", "show", Duration::from_secs(5)).unwrap();
    assert_eq!(got, answer);
    assert_eq!(server.join().unwrap(), "show\n");

    let server = serve_once(&r, "sl8", "down\n");
    assert_eq!(
        control::request(&r, "sl8", "down", Duration::from_secs(5)).unwrap(),
        "down\n"
    );
    assert_eq!(server.join().unwrap(), "down\n");
}

#[test]
fn a_silent_tunnel_times_out_the_request() {
    let d = common::private_dir();
    let r = run_dir(&d);
    let l = UnixListener::bind(r.socket_path("mute")).unwrap();
    let held = thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        thread::sleep(Duration::from_secs(2));
        drop(s);
    });
    let t0 = Instant::now();
    match control::request(&r, "mute", "show", Duration::from_millis(200)) {
        Err(TunnelError::Io { what, .. }) => assert!(what.contains("mute.sock"), "{what}"),
        other => panic!("expected a read timeout, got {other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(2));
    held.join().unwrap();
}

fn info() -> UpInfo {
    UpInfo {
        name: "sl5".into(),
        listen: "[::]:51820".parse().unwrap(),
        tun_offload: true,
        udp_gso_segments: 64,
        queues: 2,
        udp_sockets: 2,
        wire: sealink_proto::tunnel::Wire::Sealink,
        suite: sealink_crypto::SuiteId::Aes128Gcm,
        workers: 3,
        tun_writers: 2,
        handoff: sealink_engine::Handoff::Auto,
        lanes: true,
        lane_steering: true,
        fwmark: None,
    }
}

fn peer(last_handshake: Option<Time>) -> PeerStatus {
    PeerStatus {
        name: "far".into(),
        public_key: [1; 32],
        endpoint: last_handshake.map(|_| "192.0.2.7:51820".parse().unwrap()),
        allowed_ips: vec!["10.5.0.2/32".parse().unwrap(), "fd05::/64".parse().unwrap()],
        last_handshake,
        session_up: last_handshake.is_some(),
        persistent_keepalive: last_handshake.map(|_| Duration::from_secs(25)),
        preshared_key: None,
        lanes: last_handshake.is_some(),
        stats: PeerStats {
            rx_bytes: 1000,
            tx_bytes: 2000,
            rx_packets: 10,
            tx_packets: 20,
            rx_datagrams: 9,
            tx_datagrams: 19,
            piggybacked: 4,
            handshakes_completed: 1,
            handshakes_initiated: 2,
            keepalives: 3,
        },
    }
}

#[test]
fn status_text_has_the_interface_and_every_peer() {
    let now = Time::ZERO + Duration::from_secs(100);
    let seen = Some(Time::ZERO + Duration::from_millis(98_500));
    let s = control::format_status(&control::status(
        &info(),
        &[0; 32],
        now,
        &[peer(seen), peer(None)],
        &[("auth-failed", 3), ("replayed", 1)],
        2,
        vec![],
    ));
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines[0], "interface: sl5");
    assert!(
        s.contains("  public key: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"),
        "{s}"
    );
    assert!(s.contains("  listening: [::]:51820\n"), "{s}");
    assert!(
        s.contains("  offload: tun=tso+gro udp_gso_segments=64\n"),
        "{s}"
    );
    assert!(
        s.contains(&format!(
            "tun_queues=2 udp_sockets=2 crypto_workers=3 handoff=auto tun_writers=2 lanes=steered aead={}\n",
            // The library of the data path's suite (aes128-gcm here), not of another suite.
            sealink_crypto::suite::chosen_backend(sealink_crypto::SuiteId::Aes128Gcm).0
        )),
        "{s}"
    );
    assert!(s.contains("  drops: auth-failed=3 replayed=1\n"), "{s}");
    assert!(s.contains("  control: refused=2 "), "{s}");
    assert_eq!(s.matches("\npeer: far\n").count(), 2, "{s}");
    assert!(
        s.contains("  public key: AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n"),
        "{s}"
    );
    assert!(s.contains("  endpoint: 192.0.2.7:51820\n"), "{s}");
    assert!(s.contains("  endpoint: (unknown)\n"), "{s}");
    assert!(s.contains("  allowed ips: 10.5.0.2/32, fd05::/64\n"), "{s}");
    assert!(
        s.contains("  latest handshake: 1.5 s ago (session up, lanes)\n"),
        "{s}"
    );
    assert!(
        s.contains("  latest handshake: never (session down)\n"),
        "{s}"
    );
    assert!(
        s.contains("  transfer: 1000 B received, 1.95 KiB sent, rx_packets=10 tx_packets=20\n"),
        "{s}"
    );
    assert!(
        s.contains("  datagrams: rx=9 tx=19 piggybacked_packets=4 handshakes=1/2\n"),
        "{s}"
    );
    // Only the peer with a persistent keepalive shows it.
    assert_eq!(
        s.matches("  persistent keepalive: every 25 s keepalives=3\n")
            .count(),
        1,
        "{s}"
    );
}

#[test]
fn status_text_when_quiet() {
    let s = control::format_status(&control::status(
        &info(),
        &[0; 32],
        Time::ZERO,
        &[],
        &[],
        0,
        vec![],
    ));
    assert!(s.contains("  drops: none\n"), "{s}");
    assert!(!s.contains("control:"), "{s}");
    assert!(!s.contains("peer:"), "{s}");
    let mut off = info();
    off.tun_offload = false;
    off.udp_gso_segments = 1;
    let s = control::format_status(&control::status(
        &off,
        &[0; 32],
        Time::ZERO,
        &[],
        &[],
        0,
        vec![],
    ));
    assert!(s.contains("  offload: tun=off udp_gso_segments=1\n"), "{s}");
}

#[test]
fn status_json_has_the_same_facts_and_round_trips() {
    let now = Time::ZERO + Duration::from_secs(100);
    let seen = Some(Time::ZERO + Duration::from_millis(98_500));
    let st = control::status(
        &info(),
        &[0; 32],
        now,
        &[peer(seen), peer(None)],
        &[("auth-failed", 3)],
        2,
        vec![control::ThreadStatus {
            name: "sl-io-0".into(),
            busy_s: 1.5,
            tun_reads: 10,
            tun_read_packets: 470,
            udp_sends: 20,
            udp_send_datagrams: 470,
            udp_receives: 3,
            udp_receive_datagrams: 5,
            tun_writes: 5,
            tun_write_packets: 5,
            batches_submitted: 13,
            handoffs: 4,
            lane_strays: 2,
        }],
    );
    let text = control::format_status_json(&st);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["interface"], "sl5");
    assert_eq!(v["threads"][0]["name"], "sl-io-0");
    assert_eq!(v["threads"][0]["tun_read_packets"], 470);
    assert_eq!(v["threads"][0]["busy_s"], 1.5);
    assert_eq!(v["threads"][0]["handoffs"], 4);
    assert_eq!(v["handoff"], "auto");
    assert!(control::format_status(&st).contains("crypto_workers=3 handoff=auto tun_writers=2"));
    // The text form lists the thread with what its calls carried.
    assert!(
        control::format_status(&st).contains("    sl-io-0 busy=1.500s tun_read=10/470 udp_send=20/470 udp_recv=3/5 tun_write=5/5 batches=13 handed_off=4 lane_strays=2"),
        "{}",
        control::format_status(&st)
    );
    assert_eq!(v["drops"]["auth-failed"], 3);
    assert_eq!(v["control_refused"], 2);
    assert_eq!(v["listen_port"], 51820);
    assert_eq!(v["peers"][0]["persistent_keepalive_secs"], 25);
    assert!(v["peers"][1]["persistent_keepalive_secs"].is_null());
    assert_eq!(v["peers"][0]["keepalives"], 3);
    assert_eq!(v["peers"][0]["latest_handshake_secs"], 1.5);
    assert!(v["peers"][1]["latest_handshake_secs"].is_null());
    assert!(v["peers"][1]["endpoint"].is_null());
    assert_eq!(v["peers"][0]["allowed_ips"][1], "fd05::/64");
    assert_eq!(v["peers"][0]["piggybacked_packets"], 4);
    let back: control::Status = serde_json::from_str(&text).unwrap();
    assert_eq!(back, st);
    // An older daemon's answer has no lane_strays: it reads as 0.
    assert_eq!(v["threads"][0]["lane_strays"], 2);
    let mut older = v.clone();
    older["threads"][0]
        .as_object_mut()
        .unwrap()
        .remove("lane_strays");
    let back: control::Status = serde_json::from_value(older).unwrap();
    assert_eq!(back.threads[0].lane_strays, 0);
}

/// `show` once printed byte counters as bare numbers (`tx_bytes=8589934592`). The text
/// gives them in binary units; `--json` keeps the exact counts.
#[test]
fn status_text_gives_bytes_in_human_units_and_json_the_exact_counts() {
    let mut p = peer(Some(Time::ZERO));
    p.stats.rx_bytes = 3 << 20;
    p.stats.tx_bytes = (5 << 30) + (1 << 29);
    let st = control::status(&info(), &[0; 32], Time::ZERO, &[p], &[], 0, vec![]);
    let s = control::format_status(&st);
    assert!(
        s.contains("  transfer: 3.00 MiB received, 5.50 GiB sent, rx_packets=10 tx_packets=20\n"),
        "{s}"
    );
    let v: serde_json::Value = serde_json::from_str(&control::format_status_json(&st)).unwrap();
    assert_eq!(v["peers"][0]["rx_bytes"], 3u64 << 20);
    assert_eq!(v["peers"][0]["tx_bytes"], (5u64 << 30) + (1 << 29));
    for (n, want) in [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.00 KiB"),
        (1536, "1.50 KiB"),
        (u64::MAX, "16.00 EiB"),
    ] {
        assert_eq!(control::human_bytes(n), want);
    }
}
