//! Dropping privileges once the tunnel is set up.
//!
//! `sealink up` needs CAP_NET_ADMIN (create and configure the TUN device, `SO_RCVBUFFORCE`) and,
//! as root, write access to the run directory. Once the device is open, the UDP sockets are
//! bound and the control socket is listening, the running tunnel needs none: it reads and
//! writes file descriptors it already holds, and closing the TUN descriptor removes the
//! interface without a capability check. What still needs root later goes through helpers
//! started during set-up (`hooks.rs`: the down hooks, and the [`crate::hooks::PrivHelper`] that
//! reads the config and key on a reload and removes the control socket at exit; `helper.rs`:
//! routes on a reload, and a full tunnel's rules removed at exit or when the tunnel dies).
//!
//! So, in this order: every capability leaves the bounding set (while CAP_SETPCAP is still
//! held); the thread switches to the config's `user` (supplementary groups to that user's
//! group alone, then real, effective and saved gid, then uid: a compromised tunnel with uid 0
//! would still own every root-owned file, capabilities or not); effective, permitted and
//! inheritable capabilities are emptied (which also empties the ambient set); and
//! `no_new_privs` keeps an exec from gaining any back. Before all that, its resource limits
//! are set (no core files, all the open files the hard limit allows); after, it is made not
//! dumpable (leaving uid 0 already does), so other processes of that user cannot ptrace it,
//! read its memory or take its descriptors.
//!
//! The default user is a dedicated system account, [`crate::config::DEFAULT_USER`] (the
//! Debian package creates it): a process of the tunnel's uid can still signal, stop, renice
//! it and lower its limits, so that uid must be the tunnel's alone. `up` refuses to start
//! when the account is missing (saying how to create it) and warns when it is `nobody` or
//! other processes already run as it.
//!
//! Credentials and capabilities are per thread on Linux: this runs on the set-up thread
//! before any data path thread exists, and those inherit what it leaves. rustix (already in
//! the tree) makes the calls; no extra crate and no unsafe code is needed.

use rustix::process::{Gid, Uid};
use rustix::thread::{self, CapabilitySet, CapabilitySets};

use crate::error::TunnelError;

/// The account the tunnel switches to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// Finds `name` in the text of /etc/passwd (`name:password:uid:gid:...`).
pub(crate) fn find_account(passwd: &str, name: &str) -> Option<Account> {
    passwd.lines().find_map(|line| {
        let mut f = line.split(':');
        if f.next()? != name {
            return None;
        }
        let (_, uid, gid) = (f.next()?, f.next()?, f.next()?);
        Some(Account {
            name: name.to_owned(),
            uid: uid.parse().ok()?,
            gid: gid.parse().ok()?,
        })
    })
}

/// How to make the default account (for the error when it is missing).
fn how_to_create(user: &str) -> String {
    format!(
        "useradd --system --user-group --no-create-home --home-dir /nonexistent \
         --shell /usr/sbin/nologin {user}"
    )
}

/// The account to switch to for the config's `user`, read from /etc/passwd during set-up;
/// `None` when there is nothing to switch: `user = "root"` (logged as a warning) or a process
/// that is not uid 0 to begin with (it already runs as its own user). A missing account is an
/// error that says how to create it: never a silent fall back to a shared one.
pub(crate) fn account_for(user: &str) -> Result<Option<Account>, TunnelError> {
    if user == crate::config::ROOT_USER {
        tracing::warn!(
            "user = \"root\": the running tunnel keeps uid 0 (without capabilities); \
             a compromised tunnel would still own every root-owned file"
        );
        return Ok(None);
    }
    if !rustix::process::geteuid().is_root() {
        tracing::info!(
            uid = rustix::process::geteuid().as_raw(),
            "not started as root: the tunnel keeps its own user (user = {user:?} not applied)"
        );
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| TunnelError::Io {
        what: "read /etc/passwd to find interface.user".into(),
        source: e,
    })?;
    match find_account(&passwd, user) {
        Some(a) if a.uid == 0 => Err(TunnelError::Config {
            key: "interface.user".into(),
            msg: format!(
                "{user:?} has uid 0; name \"root\" to keep uid 0, or an unprivileged user"
            ),
        }),
        Some(a) => {
            warn_if_shared(&a);
            Ok(Some(a))
        }
        None if user == crate::config::DEFAULT_USER => Err(TunnelError::Config {
            key: "interface.user".into(),
            msg: format!(
                "no user {user:?} in /etc/passwd: the tunnel runs as this dedicated system \
                 account by default. The Debian package creates it (systemd-sysusers); \
                 otherwise create it with `{}`, or name another account of its own in \
                 interface.user",
                how_to_create(user)
            ),
        }),
        None => Err(TunnelError::Config {
            key: "interface.user".into(),
            msg: format!(
                "no user {user:?} in /etc/passwd: create it (`{}`) or name an existing \
                 account",
                how_to_create(user)
            ),
        }),
    }
}

/// The kernel's overflow uid, `nobody` on every distribution.
const NOBODY_UID: u32 = 65534;

/// Warns when processes of another program may share `a`: any process running as the
/// tunnel's uid can signal it (SIGTERM ends it, its down hooks run; SIGSTOP silently
/// black-holes its traffic), lower its limits and renice it (see PROTOCOL.md §13).
fn warn_if_shared(a: &Account) {
    if a.name == "nobody" || a.uid == NOBODY_UID {
        tracing::warn!(
            "user = {:?} (uid {}): an account shared by unrelated daemons, NFS-squashed \
             and `sudo -u nobody` jobs, any of which can stop, kill, renice or lower the \
             limits of this tunnel; give it a dedicated account (the default, {:?})",
            a.name,
            a.uid,
            crate::config::DEFAULT_USER
        );
    }
    let others = processes_of(a.uid);
    if !others.is_empty() {
        let shown: Vec<String> = others
            .iter()
            .take(5)
            .map(|(pid, name)| format!("{pid} ({name})"))
            .collect();
        tracing::warn!(
            "user = {:?} (uid {}) is shared: {} other process(es) run as it ({}{}), and each \
             can stop, kill, renice or lower the limits of this tunnel; give the tunnel an \
             account of its own",
            a.name,
            a.uid,
            others.len(),
            shown.join(", "),
            if others.len() > shown.len() {
                ", ..."
            } else {
                ""
            }
        );
    }
}

/// Processes other than this one with `uid` as their real, effective, saved or filesystem
/// uid: pid and name, from /proc (all readable: we are still root).
fn processes_of(uid: u32) -> Vec<(u32, String)> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<(u32, String)> = dir
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let (uids, name) = status_uids(&status)?;
            (pid != me && uids.contains(&uid)).then_some((pid, name))
        })
        .collect();
    out.sort();
    out
}

/// The four uids (`Uid:` line) and the name of a /proc/PID/status text.
fn status_uids(status: &str) -> Option<([u32; 4], String)> {
    let field = |key: &str| status.lines().find_map(|l| l.strip_prefix(key));
    let mut ids = field("Uid:")?.split_whitespace().map(str::parse);
    let uids = [
        ids.next()?.ok()?,
        ids.next()?.ok()?,
        ids.next()?.ok()?,
        ids.next()?.ok()?,
    ];
    Some((uids, field("Name:").unwrap_or("").trim().to_owned()))
}

/// The running tunnel's resource limits, set while it still may raise them (and before the
/// switch, so the account it becomes never had a say): no core files, its memory holds the
/// host key; and as many open files as the hard limit allows. Other accounts' processes
/// cannot change them afterwards (prlimit needs the same uid or CAP_SYS_RESOURCE).
fn set_limits() -> Result<(), TunnelError> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let fail = |what: &str, e: rustix::io::Errno| TunnelError::Io {
        what: format!("set the limit on {what}"),
        source: e.into(),
    };
    let none = Rlimit {
        current: Some(0),
        maximum: Some(0),
    };
    setrlimit(Resource::Core, none).map_err(|e| fail("core files", e))?;
    let files = getrlimit(Resource::Nofile);
    if files.current != files.maximum {
        let all = Rlimit {
            current: files.maximum,
            maximum: files.maximum,
        };
        setrlimit(Resource::Nofile, all).map_err(|e| fail("open files", e))?;
    }
    Ok(())
}

/// Switches the calling thread to `a`: groups, then gids, then uids (the uid last, while
/// CAP_SETGID is still held), and checks the kernel did it.
fn switch_user(a: &Account) -> Result<(), TunnelError> {
    let fail = |what: &str, e: rustix::io::Errno| TunnelError::Io {
        what: format!("switch to user {} ({what})", a.name),
        source: e.into(),
    };
    let (uid, gid) = (Uid::from_raw(a.uid), Gid::from_raw(a.gid));
    thread::set_thread_groups(&[gid]).map_err(|e| fail("setgroups", e))?;
    thread::set_thread_res_gid(gid, gid, gid).map_err(|e| fail("setresgid", e))?;
    thread::set_thread_res_uid(uid, uid, uid).map_err(|e| fail("setresuid", e))?;
    // getuid and friends are per thread too (raw system calls): they read what we set.
    let now = (
        rustix::process::getuid().as_raw(),
        rustix::process::geteuid().as_raw(),
        rustix::process::getgid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    if now != (a.uid, a.uid, a.gid, a.gid) {
        return Err(TunnelError::Io {
            what: format!("switch to user {}", a.name),
            source: std::io::Error::other(format!("still uid/euid/gid/egid {now:?}")),
        });
    }
    Ok(())
}

/// Drops every capability of the calling thread and, with `user`, switches it to that
/// account (see the module documentation).
pub(crate) fn drop_all(user: Option<&Account>) -> Result<(), TunnelError> {
    set_limits()?;
    for cap in 0..64 {
        match thread::remove_capability_from_bounding_set(CapabilitySet::from_bits_retain(1 << cap))
        {
            Ok(()) => {}
            // Past the kernel's last capability.
            Err(rustix::io::Errno::INVAL) => break,
            // Without CAP_SETPCAP (e.g. started with only CAP_NET_ADMIN) the bounding set
            // stays; permitted and effective still go below, and no_new_privs holds them off.
            Err(_) => break,
        }
    }
    if let Some(a) = user {
        switch_user(a)?;
    }
    let none = CapabilitySet::empty();
    thread::set_capabilities(
        None,
        CapabilitySets {
            effective: none,
            permitted: none,
            inheritable: none,
        },
    )
    .map_err(|e| TunnelError::Io {
        what: "drop capabilities (capset)".into(),
        source: e.into(),
    })?;
    thread::set_no_new_privs(true).map_err(|e| TunnelError::Io {
        what: "set no_new_privs".into(),
        source: e.into(),
    })?;
    // Leaving uid 0 already cleared it; also with `user = "root"` or a non-root start: no
    // process of the same uid may ptrace the tunnel, read its memory or take its descriptors.
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| TunnelError::Io {
            what: "make the process not dumpable".into(),
            source: e.into(),
        })?;
    Ok(())
}

/// Whether this process may create a TUN device and configure the network: root, or
/// CAP_NET_ADMIN in its effective set (`CapEff` in /proc/self/status). Without /proc, true:
/// `up` then tries, and fails with its own reason.
pub fn may_admin_network() -> bool {
    std::fs::read_to_string("/proc/self/status").map_or(true, |s| status_may_admin(&s))
}

/// [`may_admin_network`] from the text of a `/proc/PID/status`.
fn status_may_admin(status: &str) -> bool {
    const CAP_NET_ADMIN: u32 = 12;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    // Uid: real, effective, saved, filesystem.
    let euid_root = field("Uid:").and_then(|v| v.split_whitespace().nth(1)) == Some("0");
    let net_admin = field("CapEff:")
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_NET_ADMIN) != 0);
    euid_root || net_admin
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_come_from_passwd_lines() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
                      bad:x:notanumber:1::/:/bin/sh\n\
                      nob:x:7:8::/:/bin/sh\n";
        assert_eq!(
            find_account(passwd, "nobody"),
            Some(Account {
                name: "nobody".into(),
                uid: 65534,
                gid: 65534
            })
        );
        assert_eq!(
            find_account(passwd, "nob").map(|a| (a.uid, a.gid)),
            Some((7, 8))
        );
        assert_eq!(find_account(passwd, "no"), None, "a prefix is not a name");
        assert_eq!(find_account(passwd, "bad"), None);
        assert_eq!(find_account(passwd, "missing"), None);
        assert_eq!(find_account("", "root"), None);
    }

    #[test]
    fn status_gives_the_four_uids_and_the_name() {
        let status = "Name:\tsome daemon\nUmask:\t0022\nState:\tS (sleeping)\n\
                      Uid:\t65534\t65534\t1000\t65534\nGid:\t1\t1\t1\t1\n";
        assert_eq!(
            status_uids(status),
            Some(([65534, 65534, 1000, 65534], "some daemon".to_owned()))
        );
        assert_eq!(status_uids("Name:\tx\nUid:\t1\t2\n"), None);
        assert_eq!(status_uids("Name:\tx\n"), None);
    }

    #[test]
    fn a_missing_default_user_says_how_to_create_it() {
        if !rustix::process::geteuid().is_root()
            || find_account(
                &std::fs::read_to_string("/etc/passwd").unwrap_or_default(),
                "sealink-no-such-user",
            )
            .is_some()
        {
            return;
        }
        let e = account_for("sealink-no-such-user").unwrap_err().to_string();
        assert!(
            e.contains("useradd --system") && e.contains("sealink-no-such-user"),
            "{e}"
        );
    }

    #[test]
    fn network_admin_is_root_or_cap_net_admin() {
        let status = |uid: &str, caps: &str| format!("Name:\tx\nUid:\t{uid}\nCapEff:\t{caps}\n");
        assert!(status_may_admin(&status(
            "1000\t0\t0\t0",
            "0000000000000000"
        )));
        assert!(status_may_admin(&status(
            "0\t1000\t0\t0",
            "0000000000001000"
        )));
        assert!(!status_may_admin(&status(
            "0\t1000\t0\t0",
            "0000000000000000"
        )));
        assert!(!status_may_admin(""));
    }
}
