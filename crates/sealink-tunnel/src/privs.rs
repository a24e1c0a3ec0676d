//! Dropping privileges once the tunnel is set up.
//!
//! `sealink up` needs CAP_NET_ADMIN (create and configure the TUN device, `SO_RCVBUFFORCE`) and,
//! as root, write access to the run directory. Once the device is open, the UDP sockets are
//! bound and the control socket is listening, the running tunnel needs none: it reads and
//! writes file descriptors it already holds, closing the TUN descriptor removes the interface
//! without a capability check, and the control socket it unlinks at exit lies in a directory it
//! owns. So every capability goes: the bounding set (while CAP_SETPCAP is still held),
//! then effective, permitted and inheritable (which also empties the ambient set), and
//! `no_new_privs` keeps an exec from gaining any back. Capabilities are per thread: this runs
//! on the set-up thread before any data path thread exists, and those inherit the empty sets.
//! rustix (already in the tree) makes the calls; no extra crate is needed.

use rustix::thread::{self, CapabilitySet, CapabilitySets};

use crate::error::TunnelError;

/// Drops every capability of the calling thread (see the module documentation).
pub(crate) fn drop_all() -> Result<(), TunnelError> {
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
