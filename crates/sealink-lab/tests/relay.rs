//! `sealink-lab relay` over real loopback UDP sockets: a client and a server socket talk through the
//! relay process, and each fault shows up exactly as configured.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running relay; killed (and reaped) on drop even when a test fails.
struct Relay {
    child: Child,
    addr: SocketAddr,
}

impl Relay {
    /// Starts a relay in front of `to` on a free loopback port with the extra `args`.
    fn start(to: SocketAddr, args: &[&str]) -> Relay {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sealink-lab"))
            .args([
                "relay",
                "--listen",
                "127.0.0.1:0",
                "--to",
                &to.to_string(),
                "--seed",
                "7",
            ])
            .args(args)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run sealink relay");
        let mut line = String::new();
        BufReader::new(child.stderr.as_mut().unwrap())
            .read_line(&mut line)
            .expect("relay startup line");
        // "relay: listening on 127.0.0.1:PORT, relaying to ..."
        let addr = line
            .strip_prefix("relay: listening on ")
            .and_then(|r| r.split(',').next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected startup line {line:?}"));
        Relay { child, addr }
    }

    /// Stops the relay with SIGTERM and returns its counters, keyed `direction.name`
    /// (`client->server.lost`, ...).
    fn stop(mut self) -> HashMap<String, u64> {
        let st = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(st.success());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "relay exited with {status}");
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        parse_stats(&out)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn parse_stats(out: &str) -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for line in out.lines() {
        let Some(rest) = line.strip_prefix("relay ") else {
            continue;
        };
        let Some((dir, fields)) = rest.split_once(": ") else {
            continue;
        };
        for kv in fields.split_whitespace() {
            if let Some((k, v)) = kv.split_once('=') {
                m.insert(format!("{dir}.{k}"), v.parse().unwrap());
            }
        }
    }
    assert!(
        m.contains_key("client->server.received"),
        "no counters in {out:?}"
    );
    m
}

fn socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s
}

/// Receives on a clone of `s` in a thread, so a burst cannot overflow the socket buffer while the
/// test is still sending; join it for what `drain` collected.
fn drain_in_background(
    s: &UdpSocket,
    quiet: Duration,
) -> std::thread::JoinHandle<Vec<(Vec<u8>, SocketAddr)>> {
    let s = s.try_clone().unwrap();
    std::thread::spawn(move || drain(&s, quiet))
}

/// Every datagram that arrives at `s` within `quiet` of the previous one, with its source.
fn drain(s: &UdpSocket, quiet: Duration) -> Vec<(Vec<u8>, SocketAddr)> {
    s.set_read_timeout(Some(quiet)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while let Ok((n, a)) = s.recv_from(&mut buf) {
        got.push((buf[..n].to_vec(), a));
    }
    got
}

fn payload(i: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).map(|j| (j as u32 * 31 + i * 7) as u8).collect();
    v[..4].copy_from_slice(&i.to_be_bytes());
    v
}

fn sorted(mut v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    v.sort();
    v
}

/// Sends `n` datagrams client -> server through the relay (paced so no socket buffer overflows).
fn send_all(client: &UdpSocket, relay: SocketAddr, n: u32) -> Vec<Vec<u8>> {
    let sent: Vec<Vec<u8>> = (0..n)
        .map(|i| payload(i, 100 + (i as usize * 37) % 1300))
        .collect();
    for d in &sent {
        client.send_to(d, relay).unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
    sent
}

#[test]
fn clean_relay_forwards_everything_both_ways() {
    let server = socket();
    let (c1, c2) = (socket(), socket());
    let relay = Relay::start(server.local_addr().unwrap(), &[]);
    let rx = drain_in_background(&server, Duration::from_millis(300));
    let sent1 = send_all(&c1, relay.addr, 200);
    let sent2 = send_all(&c2, relay.addr, 50);
    let got = rx.join().unwrap();
    assert_eq!(got.len(), 250);
    // Each client has its own upstream source address at the server.
    let sources: Vec<SocketAddr> = got.iter().map(|(_, a)| *a).collect();
    let (up1, up2) = (sources[0], sources[249]);
    assert_ne!(up1, up2);
    let from = |a: SocketAddr| -> Vec<Vec<u8>> {
        got.iter()
            .filter(|(_, s)| *s == a)
            .map(|(d, _)| d.clone())
            .collect()
    };
    // Without faults nothing is reordered either.
    assert!(from(up1) == sent1, "client 1's datagrams changed");
    assert!(from(up2) == sent2, "client 2's datagrams changed");

    // Replies reach the client they belong to, unchanged.
    for (i, up) in [(0u32, up1), (1, up2)] {
        for j in 0..20 {
            server
                .send_to(&payload(1000 * (i + 1) + j, 500), up)
                .unwrap();
        }
    }
    let r1 = drain(&c1, Duration::from_millis(300));
    let r2 = drain(&c2, Duration::from_millis(300));
    assert!(r1.iter().chain(&r2).all(|(_, a)| *a == relay.addr));
    let want = |i: u32| {
        (0..20)
            .map(|j| payload(1000 * (i + 1) + j, 500))
            .collect::<Vec<_>>()
    };
    assert!(
        r1.into_iter().map(|(d, _)| d).collect::<Vec<_>>() == want(0),
        "replies to 1"
    );
    assert!(
        r2.into_iter().map(|(d, _)| d).collect::<Vec<_>>() == want(1),
        "replies to 2"
    );

    let st = relay.stop();
    assert_eq!(st["client->server.received"], 250);
    assert_eq!(st["client->server.sent"], 250);
    assert_eq!(st["server->client.received"], 40);
    assert_eq!(st["server->client.sent"], 40);
    assert_eq!(st["clients.seen"], 2);
    for k in [
        "lost",
        "reordered",
        "duplicated",
        "corrupted",
        "replayed",
        "errors",
    ] {
        assert_eq!(st[&format!("client->server.{k}")], 0, "{k}");
        assert_eq!(st[&format!("server->client.{k}")], 0, "{k}");
    }
}

#[test]
fn total_loss_delivers_nothing() {
    let server = socket();
    let client = socket();
    let relay = Relay::start(server.local_addr().unwrap(), &["--loss", "1"]);
    let rx = drain_in_background(&server, Duration::from_millis(300));
    send_all(&client, relay.addr, 100);
    assert!(rx.join().unwrap().is_empty());
    let st = relay.stop();
    assert_eq!(st["client->server.received"], 100);
    assert_eq!(st["client->server.lost"], 100);
    assert_eq!(st["client->server.sent"], 0);
}

#[test]
fn duplication_delivers_each_datagram_twice_both_ways() {
    let server = socket();
    let client = socket();
    let relay = Relay::start(server.local_addr().unwrap(), &["--duplicate", "1"]);
    let rx = drain_in_background(&server, Duration::from_millis(300));
    let sent = send_all(&client, relay.addr, 100);
    let got = rx.join().unwrap();
    assert_eq!(got.len(), 200);
    let up = got[0].1;
    let twice: Vec<Vec<u8>> = sent.iter().flat_map(|d| [d.clone(), d.clone()]).collect();
    assert!(
        got.into_iter().map(|(d, _)| d).collect::<Vec<_>>() == twice,
        "not each twice"
    );
    server.send_to(b"reply", up).unwrap();
    let back = drain(&client, Duration::from_millis(300));
    assert_eq!(back.len(), 2);
    assert!(back.iter().all(|(d, _)| d == b"reply"));
    let st = relay.stop();
    assert_eq!(st["client->server.duplicated"], 100);
    assert_eq!(st["client->server.sent"], 200);
    assert_eq!(st["server->client.duplicated"], 1);
}

#[test]
fn corruption_flips_exactly_one_bit() {
    let server = socket();
    let client = socket();
    let relay = Relay::start(server.local_addr().unwrap(), &["--corrupt", "1"]);
    let rx = drain_in_background(&server, Duration::from_millis(300));
    let sent = send_all(&client, relay.addr, 100);
    let got = rx.join().unwrap();
    assert_eq!(got.len(), sent.len());
    let mut positions = std::collections::HashSet::new();
    for (s, (g, _)) in sent.iter().zip(&got) {
        assert_eq!(s.len(), g.len());
        let diff: Vec<(usize, u8)> = s
            .iter()
            .zip(g)
            .enumerate()
            .map(|(i, (a, b))| (i, a ^ b))
            .filter(|x| x.1 != 0)
            .collect();
        assert_eq!(diff.len(), 1, "exactly one byte differs");
        assert_eq!(diff[0].1.count_ones(), 1, "exactly one bit differs");
        positions.insert(diff[0].0);
    }
    // The bit is random, not always the same one.
    assert!(
        positions.len() > 50,
        "{} distinct positions",
        positions.len()
    );
    let st = relay.stop();
    assert_eq!(st["client->server.corrupted"], 100);
}

#[test]
fn replayed_copies_arrive_later() {
    let server = socket();
    let client = socket();
    let relay = Relay::start(
        server.local_addr().unwrap(),
        &["--replay", "1", "--replay-delay-ms", "400"],
    );
    let t0 = Instant::now();
    let sent = send_all(&client, relay.addr, 20);
    let first = drain(&server, Duration::from_millis(100));
    assert!(
        t0.elapsed() < Duration::from_millis(400),
        "test too slow to tell copies apart"
    );
    assert!(
        first.into_iter().map(|(d, _)| d).collect::<Vec<_>>() == sent,
        "originals"
    );
    // The copies come ~400 ms after their originals: pristine, and each exactly once.
    let later = drain(&server, Duration::from_millis(600));
    assert_eq!(later.len(), sent.len());
    assert!(
        sorted(later.into_iter().map(|(d, _)| d).collect()) == sorted(sent),
        "copies"
    );
    let st = relay.stop();
    assert_eq!(st["client->server.replayed"], 20);
    assert_eq!(st["client->server.sent"], 40);
}

#[test]
fn reordering_keeps_every_datagram_but_not_the_order() {
    let server = socket();
    let client = socket();
    let relay = Relay::start(server.local_addr().unwrap(), &["--reorder", "0.3"]);
    let rx = drain_in_background(&server, Duration::from_millis(300));
    let sent = send_all(&client, relay.addr, 200);
    let got: Vec<Vec<u8>> = rx.join().unwrap().into_iter().map(|(d, _)| d).collect();
    assert_eq!(got.len(), sent.len());
    assert!(got != sent, "order unchanged");
    assert!(sorted(got) == sorted(sent), "contents changed");
    let st = relay.stop();
    assert!(st["client->server.reordered"] > 20, "{st:?}");
    assert_eq!(st["client->server.sent"], 200);
}
