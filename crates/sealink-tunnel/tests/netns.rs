//! `sealink_tunnel::run` driven from the library, one tunnel per network namespace (each on a
//! thread that entered its namespace with `setns`): both come up, a ping crosses, `show`
//! through `control::request` reports the session, a second `run` of a running name is refused,
//! and `down` and the stop flag each end `run` with the interface removed. Needs root
//! (`ip netns add`, veth, TUN); skips with a printed reason where `ip netns add` fails.

mod common;

use common::ip::{ip, ip_ok};

use std::os::fd::AsFd;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use base64::Engine;
use sealink_proto::HostKey;
use sealink_tunnel::{Config, RunDir, RunOptions, TunnelError, UpInfo, control};

/// Two namespaces joined by a veth pair (10.203.0.1 and .2); deleted on drop.
struct Netns {
    ns: [String; 2],
}

impl Netns {
    fn new(id: &str) -> Option<Self> {
        let ns = [format!("slL{id}a"), format!("slL{id}b")];
        let o = ip(&["netns", "add", &ns[0]]);
        if !o.status.success() {
            println!(
                "SKIPPED: `ip netns add` failed (needs root): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return None;
        }
        // Root: the tunnel switches to the default user, which must exist.
        common::tunnel_user::ensure();
        let n = Netns { ns };
        ip_ok(&["netns", "add", &n.ns[1]]);
        let (va, vb) = (format!("vL{id}a"), format!("vL{id}b"));
        ip_ok(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        ip_ok(&["link", "set", &va, "netns", &n.ns[0]]);
        ip_ok(&["link", "set", &vb, "netns", &n.ns[1]]);
        for (ns, v, a) in [
            (&n.ns[0], &va, "10.203.0.1/24"),
            (&n.ns[1], &vb, "10.203.0.2/24"),
        ] {
            ip_ok(&["-n", ns, "addr", "add", a, "dev", v]);
            ip_ok(&["-n", ns, "link", "set", v, "up"]);
            ip_ok(&["-n", ns, "link", "set", "lo", "up"]);
        }
        Some(n)
    }

    fn has_link(&self, side: usize, name: &str) -> bool {
        ip(&["-n", &self.ns[side], "link", "show", name])
            .status
            .success()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

fn b64(k: &[u8; 32]) -> String {
    base64::engine::general_purpose::STANDARD.encode(k)
}

/// The configuration of side `me` (0 or 1) whose peer has `peer_key`.
fn config(me: usize, name: &str, peer_key: &[u8; 32]) -> Config {
    let other = 1 - me;
    Config::parse(&format!(
        r#"[interface]
name = "{name}"
private_key = "unused"
address = "10.204.0.{a}/24"
listen_port = {port}
workers = 1
queues = 1

[[peer]]
name = "side{other}"
public_key = "{key}"
endpoint = "10.203.0.{b}:{peer_port}"
allowed_ips = ["10.204.0.{b}/32"]
"#,
        a = me + 1,
        b = other + 1,
        port = 51871 + me,
        peer_port = 51871 + other,
        key = b64(peer_key),
    ))
    .unwrap()
}

/// Runs the tunnel on a thread inside namespace `ns`; `up` gets its `UpInfo`.
fn spawn_in(
    ns: &str,
    cfg: Config,
    host: HostKey,
    run_dir: RunDir,
    stop: Arc<AtomicBool>,
    up: mpsc::Sender<UpInfo>,
) -> thread::JoinHandle<Result<(), TunnelError>> {
    spawn_in_with(ns, cfg, host, run_dir, stop, up, RunOptions::default())
}

fn spawn_in_with(
    ns: &str,
    cfg: Config,
    host: HostKey,
    run_dir: RunDir,
    stop: Arc<AtomicBool>,
    up: mpsc::Sender<UpInfo>,
    opts: RunOptions,
) -> thread::JoinHandle<Result<(), TunnelError>> {
    let path = format!("/run/netns/{ns}");
    thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        // Only this thread (and the threads `run` starts) enter the namespace; `run` also
        // drops this thread's capabilities, not the test process's.
        rustix::thread::move_into_link_name_space(
            f.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        sealink_tunnel::run_with(cfg, host, &run_dir, stop, opts, |i| {
            let _ = up.send(i.clone());
        })
    })
}

/// The test helpers' spelling of the default user (shared with the lab, which cannot name
/// the constant) is the product's.
#[test]
fn the_tests_default_user_is_the_products() {
    assert_eq!(
        common::tunnel_user::NAME,
        sealink_tunnel::config::DEFAULT_USER
    );
}

/// Two library tunnels' shared set-up: the namespaces (`None` where they cannot be made),
/// a private run directory, interface names, host keys and stop flags.
struct Ends {
    net: Netns,
    _dir: tempfile::TempDir,
    run_dir: RunDir,
    names: [String; 2],
    keys: [HostKey; 2],
    stops: [Arc<AtomicBool>; 2],
}

impl Ends {
    /// What `show` says of side `side`'s interface.
    fn show(&self, side: usize) -> String {
        control::request(
            &self.run_dir,
            &self.names[side],
            "show",
            Duration::from_secs(5),
        )
        .unwrap()
    }

    fn new(id: &str) -> Option<Ends> {
        let net = Netns::new(id)?;
        let dir = common::private_dir();
        let run_dir = RunDir::new(Some(dir.path().join("run")));
        Some(Ends {
            net,
            _dir: dir,
            run_dir,
            names: [format!("tL{id}a"), format!("tL{id}b")],
            keys: [HostKey::generate().unwrap(), HostKey::generate().unwrap()],
            stops: [
                Arc::new(AtomicBool::new(false)),
                Arc::new(AtomicBool::new(false)),
            ],
        })
    }
}

#[test]
fn library_tunnel_between_namespaces() {
    let id = (std::process::id() % 100_000).to_string();
    let Some(ends) = Ends::new(&id) else { return };
    let (tx, rx) = mpsc::channel();
    let mut runs = Vec::new();
    for side in 0..2 {
        runs.push(spawn_in(
            &ends.net.ns[side],
            config(side, &ends.names[side], ends.keys[1 - side].public()),
            ends.keys[side].clone(),
            ends.run_dir.clone(),
            ends.stops[side].clone(),
            tx.clone(),
        ));
    }
    let mut up: Vec<UpInfo> = (0..2)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(20))
                .expect("a tunnel did not come up")
        })
        .collect();
    up.sort_by(|a, b| a.name.cmp(&b.name));
    for (side, up) in up.iter().enumerate() {
        assert_eq!(up.name, ends.names[side]);
        assert_eq!(up.listen.port(), 51871 + side as u16);
        assert_eq!((up.queues, up.udp_sockets), (1, 1));
        assert_eq!(up.workers, 1);
        assert!(ends.net.has_link(side, &ends.names[side]));
    }
    // Both sockets are in the one run directory (the thread's `/proc/self` is the process's).
    assert_eq!(control::running(&ends.run_dir).unwrap(), ends.names);

    // The same name again is refused while its control socket answers.
    let again = sealink_tunnel::run(
        config(0, &ends.names[0], ends.keys[1].public()),
        ends.keys[0].clone(),
        &ends.run_dir,
        Arc::new(AtomicBool::new(false)),
        |_| panic!("a second tunnel came up"),
    );
    assert!(
        matches!(&again, Err(TunnelError::AlreadyRunning(n)) if *n == ends.names[0]),
        "{again:?}"
    );

    let have_ping = Command::new("sh")
        .args(["-c", "command -v ping"])
        .output()
        .is_ok_and(|o| o.status.success());
    if have_ping {
        let o = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ends.net.ns[0],
                "ping",
                "-c",
                "3",
                "-i",
                "0.2",
                "-W",
                "5",
            ])
            .arg("10.204.0.2")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "ping through the tunnel failed: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let show = ends.show(0);
        assert!(
            show.contains(&format!("interface: {}", ends.names[0])),
            "{show}"
        );
        assert!(show.contains("peer: side1"), "{show}");
        assert!(show.contains("(session up, lanes)"), "{show}");
    } else {
        println!("ping not installed: the ping and session checks are skipped");
    }

    // `down` answers once the tunnel has stopped and removed its interface.
    let answer = control::request(
        &ends.run_dir,
        &ends.names[0],
        "down",
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(answer, "down\n");
    let r0 = runs.remove(0).join().unwrap();
    assert!(r0.is_ok(), "{r0:?}");
    assert!(!ends.net.has_link(0, &ends.names[0]));
    assert!(ends.stops[0].load(Ordering::SeqCst));
    // The stop flag (what a signal sets) ends the other.
    ends.stops[1].store(true, Ordering::SeqCst);
    let r1 = runs.remove(0).join().unwrap();
    assert!(r1.is_ok(), "{r1:?}");
    assert!(!ends.net.has_link(1, &ends.names[1]));
    let left = control::running(&ends.run_dir).unwrap();
    let mode = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).map(|m| format!("{:o}", m.permissions().mode()))
    };
    assert!(
        left.is_empty(),
        "{left:?} of {:?}; {:?} {:?}",
        ends.names,
        mode(ends.run_dir.base()),
        mode(&ends.run_dir.dir())
    );
}

/// A peer whose endpoint name resolved to a stale address at load: its handshakes go
/// unanswered, the running tunnel asks its resolver again (here an injected one standing in
/// for DNS; no real DNS is involved), moves the endpoint, and the ping that waited gets through.
#[test]
fn a_stale_endpoint_name_is_resolved_again_and_the_tunnel_comes_up() {
    let id = format!("{}r", std::process::id() % 100_000);
    let Some(ends) = Ends::new(&id) else { return };
    let mut cfg0 = config(0, &ends.names[0], ends.keys[1].public());
    // Nobody is at 10.203.0.9: what the name resolved to when the config was read.
    cfg0.peers[0].endpoint = Some("10.203.0.9:51872".parse().unwrap());
    cfg0.endpoint_names = vec![Some("side1.test:51872".into())];
    let asked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let asked2 = Arc::clone(&asked);
    let resolver: sealink_tunnel::Resolver = Arc::new(move |name: &str| {
        asked2.lock().unwrap().push(name.to_owned());
        match name {
            "side1.test:51872" => Ok(vec!["10.203.0.2:51872".parse().unwrap()]),
            _ => Err(std::io::Error::other("unknown name")),
        }
    });
    let (tx, rx) = mpsc::channel();
    let mut runs = vec![
        spawn_in_with(
            &ends.net.ns[0],
            cfg0,
            ends.keys[0].clone(),
            ends.run_dir.clone(),
            ends.stops[0].clone(),
            tx.clone(),
            RunOptions {
                resolver: Some(resolver),
                ..RunOptions::default()
            },
        ),
        spawn_in(
            &ends.net.ns[1],
            config(1, &ends.names[1], ends.keys[0].public()),
            ends.keys[1].clone(),
            ends.run_dir.clone(),
            ends.stops[1].clone(),
            tx,
        ),
    ];
    for _ in 0..2 {
        rx.recv_timeout(Duration::from_secs(20))
            .expect("a tunnel did not come up");
    }
    // One echo request: staged until a handshake succeeds, which needs the re-resolution
    // (after RERESOLVE_AFTER_ATTEMPTS unanswered initiations, one a second).
    let o = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ends.net.ns[0],
            "ping",
            "-c",
            "1",
            "-W",
            "15",
            "10.204.0.2",
        ])
        .output()
        .unwrap();
    let show = ends.show(0);
    assert!(
        o.status.success(),
        "{}{show}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(*asked.lock().unwrap(), ["side1.test:51872"]);
    assert!(show.contains("endpoint: 10.203.0.2:51872"), "{show}");
    assert!(show.contains("(session up, lanes)"), "{show}");
    for s in &ends.stops {
        s.store(true, Ordering::SeqCst);
    }
    for r in runs.drain(..) {
        assert!(r.join().unwrap().is_ok());
    }
}
