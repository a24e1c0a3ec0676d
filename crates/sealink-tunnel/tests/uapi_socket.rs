//! A tunnel on WireGuard's wire stops once its UAPI socket file is removed, as wireguard-go does:
//! wg-quick's `down` for a userspace implementation removes `/var/run/wireguard/NAME.sock` and
//! waits for the interface to go. Started from a wg-quick config inside a network namespace of
//! its own (a thread of this test, setns); the socket is removed and the tunnel must stop
//! (`run_with` returns) and its interface be gone within a few seconds, with no signal and no
//! `sealink down`.
//!
//! Skips, saying why, unless root with `ip` and /dev/net/tun.

mod common;

use common::{cmd, in_ns, is_root, which};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use sealink_proto::HostKey;
use sealink_tunnel::{Config, RunDir, RunOptions, UpInfo};

/// The namespace, deleted on drop (with anything left in it).
struct Ns(String);

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = cmd("ip", &["netns", "del", &self.0]);
    }
}

fn link_exists(ns: &str, dev: &str) -> bool {
    cmd("ip", &["-n", ns, "link", "show", "dev", dev])
        .status
        .success()
}

#[test]
fn removing_the_uapi_socket_stops_the_tunnel() {
    if !is_root() {
        eprintln!("skipped: needs root (a network namespace, TUN)");
        return;
    }
    if which("ip").is_none() || !Path::new("/dev/net/tun").exists() {
        eprintln!("skipped: no `ip` (iproute2) or no /dev/net/tun");
        return;
    }
    let id = std::process::id() % 100_000;
    let ns = Ns(format!("slus{id}"));
    if !common::add_netns_or_skip(&ns.0) {
        return;
    }
    assert!(
        cmd("ip", &["-n", &ns.0, "link", "set", "lo", "up"])
            .status
            .success()
    );

    // A wg-quick config named after its file (the interface name), as `sealink up` reads it.
    let name = format!("slus{id}");
    let ours = HostKey::generate().unwrap();
    let peer: [u8; 32] = *HostKey::generate().unwrap().public();
    let d = common::private_dir();
    let conf = common::write(
        d.path(),
        &format!("{name}.conf"),
        &format!(
            "[Interface]\nPrivateKey = {}\nAddress = 10.208.0.1/24\nListenPort = 51861\n\n\
             [Peer]\nPublicKey = {}\nAllowedIPs = 10.208.0.2/32\nEndpoint = 10.209.0.2:51862\n",
            B64.encode(ours.private()),
            B64.encode(peer)
        ),
        0o600,
    );
    let cfg = Config::from_file(&conf).unwrap();
    assert_eq!(cfg.name, name);
    let host = cfg.host_key().unwrap();
    assert_eq!(host.public(), ours.public());

    let run_dir = RunDir::new(Some(d.path().join("run")));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<UpInfo>();
    let (done_tx, done_rx) = mpsc::channel();
    let run = {
        let (run_dir, stop) = (run_dir.clone(), stop.clone());
        in_ns(&ns.0, move || {
            let r =
                sealink_tunnel::run_with(cfg, host, &run_dir, stop, RunOptions::default(), |i| {
                    let _ = tx.send(i.clone());
                });
            let _ = done_tx.send(());
            r
        })
    };
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the tunnel did not come up");
    let sock: PathBuf = sealink_tunnel::uapi::socket_path(&name);
    assert!(sock.exists(), "no UAPI socket at {}", sock.display());
    assert!(link_exists(&ns.0, &name), "no interface {name}");
    // Still running a while later: only the removal stops it.
    thread::sleep(Duration::from_millis(1500));
    assert!(done_rx.try_recv().is_err(), "the tunnel stopped by itself");

    // wg-quick down, for a userspace implementation.
    let t0 = Instant::now();
    std::fs::remove_file(&sock).unwrap();
    let stopped = done_rx.recv_timeout(Duration::from_secs(5));
    let r = if stopped.is_ok() {
        run.join().unwrap()
    } else {
        // Do not leave it running: stop it as a signal would, then fail.
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = run.join();
        panic!("the tunnel still ran 5 s after its UAPI socket was removed");
    };
    assert!(r.is_ok(), "{r:?}");
    assert!(
        !link_exists(&ns.0, &name),
        "interface {name} still there after the tunnel stopped"
    );
    eprintln!(
        "stopped and interface gone {:?} after the socket's removal",
        t0.elapsed()
    );
    assert!(
        !sock.exists(),
        "a UAPI socket reappeared at {}",
        sock.display()
    );
}
