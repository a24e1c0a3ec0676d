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
//! `no_new_privs` keeps an exec from gaining any back. Leaving uid 0 also makes the process
//! not dumpable, so other processes of that user cannot ptrace it or read its memory.
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

/// The account to switch to for the config's `user`, read from /etc/passwd during set-up;
/// `None` when there is nothing to switch: `user = "root"` (logged as a warning) or a process
/// that is not uid 0 to begin with (it already runs as its own user).
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
        Some(a) => Ok(Some(a)),
        None => Err(TunnelError::Config {
            key: "interface.user".into(),
            msg: format!("no user {user:?} in /etc/passwd"),
        }),
    }
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
    Ok(())
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
}
