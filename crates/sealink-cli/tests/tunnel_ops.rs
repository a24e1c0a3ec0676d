//! wg-quick parity in real network namespaces: hooks (post_up, pre_down, post_down, a failing
//! post_up), `sealink reload` and SIGHUP adding and removing a peer while the other peer's
//! session goes on, refused reloads, and the global `-q`. Needs root; skips where `ip netns
//! add` fails. Namespaces and processes are removed by Drop guards.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::BIN;

#[path = "../../sealink-tunnel/tests/common/tunnel_user.rs"]
mod tunnel_user;

use common::netns::{ok, sh as run};

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

struct Lab {
    ns: [String; 2],
    id: String,
    dir: tempfile::TempDir,
    run_dir: PathBuf,
    children: Vec<Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        common::netns::tear_down(&mut self.children, &self.ns);
    }
}

impl Lab {
    fn new(tag: &str) -> Option<Lab> {
        let id = format!("{tag}{}", std::process::id() % 100_000);
        let ns = [format!("so{id}a"), format!("so{id}b")];
        if !run("ip", &["netns", "add", &ns[0]]).status.success() {
            println!("SKIPPED: `ip netns add` failed (needs root)");
            return None;
        }
        // Root: `up` switches to the default user, which must exist.
        tunnel_user::ensure();
        let dir = tempfile::tempdir().unwrap();
        let lab = Lab {
            run_dir: dir.path().join("run"),
            dir,
            ns: ns.clone(),
            id: id.clone(),
            children: Vec::new(),
        };
        ok("ip", &["netns", "add", &ns[1]]);
        common::netns::join(&ns, &format!("w{id}"), "10.211.0");
        Some(lab)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A host key `name.key`; returns its public key (base64).
    fn key(&self, name: &str) -> String {
        let key = self.path(&format!("{name}.key"));
        ok(BIN, &["keygen", "host", key.to_str().unwrap()]);
        let t = std::fs::read_to_string(self.path(&format!("{name}.key.pub"))).unwrap();
        t.split_whitespace().nth(1).unwrap().to_owned()
    }

    fn cmd(&self, side: usize, pre: &[&str], args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[side]])
            .args(pre)
            .args(args)
            .env("SEALINK_RUN_DIR", &self.run_dir)
            .env_remove("RUST_LOG")
            .env_remove("NOTIFY_SOCKET");
        c
    }

    fn exec(&self, side: usize, args: &[&str]) -> Output {
        self.cmd(side, &[], args).output().unwrap()
    }

    /// `sealink up CFG` in namespace `side`; waits until `ifname` exists and `show` answers.
    fn up(&mut self, side: usize, cfg: &Path, ifname: &str) -> u32 {
        let child = self
            .cmd(side, &[BIN, "up"], &[cfg.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        self.children.push(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.exec(side, &[BIN, "show", ifname]).status.success() {
            assert!(Instant::now() < deadline, "{ifname} did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        pid
    }

    fn ping(&self, to: &str) -> bool {
        self.exec(0, &["ping", "-c", "2", "-i", "0.2", "-W", "2", to])
            .status
            .success()
    }

    fn peer_json(&self, ifname: &str, peer: &str) -> Option<serde_json::Value> {
        let o = self.exec(0, &[BIN, "show", "--json", ifname]);
        assert!(o.status.success(), "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v[0]["peers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == peer)
            .cloned()
    }
}

fn wait_exit(c: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "process did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn hooks_reload_and_sighup_between_namespaces() {
    let Some(mut lab) = Lab::new("h") else { return };
    let id = lab.id.clone();
    let (if0, if_a, if_b) = (format!("o{id}x"), format!("o{id}a"), format!("o{id}b"));
    let (k0, ka, kb) = (lab.key("h0"), lab.key("ha"), lab.key("hb"));
    let d = lab.dir.path().display().to_string();
    let dummy = format!("d{id}");
    // ns1: peer A (10.212.0.2) and peer B (10.213.0.2), two tunnels on two ports.
    for (name, ifn, key, addr, port, mine) in [
        ("a", &if_a, "ha", "10.212.0.2/24", 51820, "10.212.0.1/32"),
        ("b", &if_b, "hb", "10.213.0.2/24", 51821, "10.213.0.1/32"),
    ] {
        let cfg = format!(
            "[interface]\nname = \"{ifn}\"\nprivate_key = \"{key}.key\"\naddress = \"{addr}\"\nlisten_port = {port}\n\n[[peer]]\nname = \"zero\"\npublic_key = \"{k0}\"\nallowed_ips = [\"{mine}\"]\n"
        );
        let p = lab.path(&format!("{name}.toml"));
        std::fs::write(&p, cfg).unwrap();
        lab.up(1, &p, ifn);
    }
    let peer_a = format!(
        "[[peer]]\nname = \"A\"\npublic_key = \"{ka}\"\nendpoint = \"10.211.0.2:51820\"\nallowed_ips = [\"10.212.0.2/32\"]\n"
    );
    let peer_b = format!(
        "[[peer]]\nname = \"B\"\npublic_key = \"{kb}\"\nendpoint = \"10.211.0.2:51821\"\nallowed_ips = [\"10.213.0.2/32\", \"10.214.0.0/24\"]\n"
    );
    let iface = |port: u16| {
        format!(
            "[interface]\nname = \"{if0}\"\nprivate_key = \"h0.key\"\naddress = [\"10.212.0.1/24\", \"10.213.0.1/24\"]\nlisten_port = {port}\npost_up = \"echo %i > {d}/post_up\"\npre_down = [\"ip link show %i > {d}/pre_down\"]\npost_down = \"echo %i > {d}/post_down; ip link add {dummy} type veth peer name {dummy}p\"\n\n"
        )
    };
    let cfg0 = lab.path("zero.toml");
    std::fs::write(&cfg0, format!("{}{peer_a}", iface(51830))).unwrap();
    let pid0 = lab.up(0, &cfg0, &if0);
    // post_up ran with %i replaced, before `show` answered.
    assert_eq!(
        std::fs::read_to_string(lab.path("post_up")).unwrap().trim(),
        if0
    );

    assert!(lab.ping("10.212.0.2"), "A before the reload");
    let a0 = lab.peer_json(&if0, "A").unwrap();
    assert!(!lab.ping("10.213.0.2"), "B is not a peer yet");

    // Add B: reload answers with what changed; A's session goes on (no new handshake).
    std::fs::write(&cfg0, format!("{}{peer_a}{peer_b}", iface(51830))).unwrap();
    let o = lab.exec(0, &[BIN, "reload", cfg0.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("added=B"), "{}", text(&o));
    assert!(lab.ping("10.213.0.2"), "B after the reload");
    assert!(lab.ping("10.212.0.2"), "A after the reload");
    let a1 = lab.peer_json(&if0, "A").unwrap();
    for k in ["handshakes_initiated", "handshakes_completed"] {
        assert_eq!(a0[k], a1[k], "{k}: A was handshaken again: {a0} {a1}");
    }
    assert!(a1["tx_packets"].as_u64() > a0["tx_packets"].as_u64());
    // B's prefix outside the interface's networks got its route (by the route helper).
    let routes = ok("ip", &["-n", &lab.ns[0], "route"]);
    assert!(
        routes.contains(&format!("10.214.0.0/24 dev {if0}")),
        "{routes}"
    );

    // Refused reloads leave the running config as it was, with the reason.
    std::fs::write(&cfg0, format!("{}{peer_a}", iface(51831))).unwrap();
    let o = lab.exec(0, &[BIN, "reload", cfg0.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("interface.listen_port changed"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("restart"), "{}", text(&o));
    std::fs::write(&cfg0, "[interface\nname = ").unwrap();
    let o = lab.exec(0, &[BIN, "reload", cfg0.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(text(&o).contains("config"), "{}", text(&o));
    assert!(lab.peer_json(&if0, "B").is_some(), "B stays after refusals");
    assert!(lab.ping("10.213.0.2"));

    // `reload NAME` of a tunnel started from a path (no /etc/sealink/NAME.toml): the tunnel
    // reads the file it was started from again (issue 46).
    std::fs::write(&cfg0, format!("{}{peer_a}{peer_b}", iface(51830))).unwrap();
    let o = lab.exec(0, &[BIN, "reload", &if0]);
    assert!(o.status.success(), "reload by name: {}", text(&o));
    assert!(
        text(&o).contains(&format!("reloaded {if0}")),
        "{}",
        text(&o)
    );

    // Remove B by SIGHUP: its traffic is dropped, its route gone, A untouched.
    std::fs::write(&cfg0, format!("{}{peer_a}", iface(51830))).unwrap();
    ok("kill", &["-HUP", &pid0.to_string()]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while lab.peer_json(&if0, "B").is_some() {
        assert!(Instant::now() < deadline, "SIGHUP did not remove B");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!lab.ping("10.213.0.2"), "B after its removal");
    assert!(lab.ping("10.212.0.2"), "A after B's removal");
    let a2 = lab.peer_json(&if0, "A").unwrap();
    assert_eq!(a0["handshakes_initiated"], a2["handshakes_initiated"]);
    let routes = ok("ip", &["-n", &lab.ns[0], "route"]);
    assert!(!routes.contains("10.214.0.0/24"), "{routes}");

    // SIGTERM: pre_down while the interface exists, post_down after, still privileged.
    ok("kill", &["-TERM", &pid0.to_string()]);
    let c = lab.children.iter_mut().find(|c| c.id() == pid0).unwrap();
    assert!(wait_exit(c).success());
    let pre = std::fs::read_to_string(lab.path("pre_down")).unwrap();
    assert!(pre.contains(&if0), "{pre}");
    assert_eq!(
        std::fs::read_to_string(lab.path("post_down"))
            .unwrap()
            .trim(),
        if0
    );
    assert!(
        run("ip", &["-n", &lab.ns[0], "link", "show", &dummy])
            .status
            .success(),
        "post_down ran without CAP_NET_ADMIN"
    );
    assert!(
        !run("ip", &["-n", &lab.ns[0], "link", "show", &if0])
            .status
            .success()
    );
}

#[test]
fn a_failing_post_up_aborts_up_and_quiet_hides_hook_output() {
    let Some(lab) = Lab::new("f") else { return };
    lab.key("h0");
    let ifn = format!("o{}f", lab.id);
    let cfg = lab.path("f.toml");
    // An interface on h0.key with one more line, written to `cfg`.
    let write_cfg = |more: &str| {
        std::fs::write(
            &cfg,
            format!(
                "[interface]\nname = \"{ifn}\"\nprivate_key = \"h0.key\"\naddress = \"10.215.0.1/24\"\n{more}"
            ),
        )
        .unwrap()
    };
    write_cfg("post_up = [\"true\", \"echo marker-$((40+2)); exit 3\"]\n");
    let up = |pre: &[&str]| {
        let o = lab
            .cmd(0, &[BIN], &[pre, &["up", cfg.to_str().unwrap()]].concat())
            .output()
            .unwrap();
        assert!(!o.status.success(), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            err.contains("post_up hook `echo marker-$((40+2)); exit 3` failed: exit status: 3"),
            "{err}"
        );
        assert!(
            !run("ip", &["-n", &lab.ns[0], "link", "show", &ifn])
                .status
                .success()
        );
        err
    };
    // As wg-quick: `[#] CMD` and what the hook printed, as plain lines, by default and with
    // -v (issue 46); -q only the error.
    let default = up(&[]);
    assert!(
        default.contains("\n[#] echo marker-$((40+2)); exit 3\nmarker-42\n")
            || default.starts_with("[#] true\n[#] echo marker-$((40+2)); exit 3\nmarker-42\n"),
        "{default}"
    );
    let verbose = up(&["-vv"]);
    assert!(verbose.contains("\nmarker-42\n"), "{verbose}");
    assert!(
        verbose.contains("DEBUG") && verbose.contains("running: echo marker"),
        "{verbose}"
    );
    let quiet = up(&["-q"]);
    assert!(!quiet.contains("marker-42"), "{quiet}");
    assert!(
        !quiet.contains("INFO") && !quiet.contains("WARN"),
        "{quiet}"
    );

    // A warning (READY=1 cannot reach a NOTIFY_SOCKET that does not exist) shows by default
    // and not with -q; `up:` itself is no log line and stays.
    write_cfg("");
    let up_down = |pre: &[&str]| {
        let child = lab
            .cmd(0, &[BIN], &[pre, &["up", cfg.to_str().unwrap()]].concat())
            .env("NOTIFY_SOCKET", lab.path("no-such-socket"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !lab.exec(0, &[BIN, "show", &ifn]).status.success() {
            assert!(Instant::now() < deadline, "{ifn} did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        let o = lab.exec(0, &[BIN, "down", &ifn]);
        assert!(o.status.success(), "{}", text(&o));
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(err.contains(&format!("up: {ifn}")), "{err}");
        err
    };
    let plain = up_down(&[]);
    assert!(
        plain.contains("WARN") && plain.contains("NOTIFY_SOCKET"),
        "{plain}"
    );
    let quiet = up_down(&["-q"]);
    assert!(!quiet.contains("WARN"), "{quiet}");
}
