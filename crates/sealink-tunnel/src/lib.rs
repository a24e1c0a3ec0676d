//! sealink tunnel mode: the I/O driver around the sans-IO core [`sealink_proto::tunnel`].
//!
//! The data path is split the way the core splits each per-packet step: the serial half runs
//! under the core's one mutex, the cryptography (seal, open) runs with no lock held, and the
//! results leave in order ([`sealink_engine::Pipeline`]'s lanes).
//! - I/O threads (`sl-io-q`, `io_loop`), one per queue of a multi-queue TUN device and its
//!   `SO_REUSEPORT` socket: each reads a batch from whichever has packets.
//!   - From the TUN queue (with offloads, a TSO super-packet split into MTU-sized segments at a
//!     fixed stride, each after the wire's headroom bytes): reserve every packet under the lock
//!     (route, session, counter; small packets join the piggyback queue), seal every slot in
//!     place, send runs of full-size datagrams for one peer with one UDP GSO call straight from
//!     the batch buffer, and report the sends to the core (autocork).
//!   - From the UDP socket (GRO): reserve every datagram under the lock (header, index,
//!     session, replay check; handshakes are handled whole), open in place, finish them under
//!     the lock (replay accept, session confirmation, framing, source check) and write the
//!     packets to the TUN device straight from the receive buffers (with offloads, TCP segments
//!     coalesced back into one super-packet: the only copy).
//!
//!   The thread does all of it itself (run to completion: the batch stays in its core's
//!   cache, and nobody is woken), except the share of its batches that its [`Gauge`] hands to
//!   the engine's workers while the thread saturates its core and a core is idle (`handoff =
//!   "auto"`). A handed-off batch is sealed or opened and released (sent, or written)
//!   on a worker, in order per lane with the ones kept.
//! - With `handoff = "always"` (every batch to the workers) the
//!   shape is a TUN reader and a UDP reader per queue, and TUN writer threads (`tun_writers`,
//!   by default one per queue there): the release only plans the writes and hands each flow's
//!   to writer `hash(flow) % N`.
//! - timer: handshake retransmissions and piggyback deadlines.
//!
//! Batch buffers are owned by their reader and come back through the release, so the data
//! path allocates and copies nothing per packet. The calling thread serves the control socket `RUN_DIR/net-INODE/NAME.sock` (see
//! [`RunDir`]; `show`, `down`, `reload`, answered to root and the tunnel's own uid only) and
//! watches the stop flag (set by signals) and the reload flag (SIGHUP; see `reload.rs`); on stop, the threads are interrupted and joined and the TUN
//! device is closed, which removes the interface. Set-up ends by dropping every capability and
//! switching to the config's unprivileged `user` ([`privs`]).
//!
//! [`Gauge`]: sealink_engine::Gauge

pub mod client;
pub mod config;
pub mod control;
mod datapath;
mod dns;
mod error;
mod handshakes;
pub mod helper;
pub mod helper_main;
pub mod hooks;
pub mod lookup;
mod netconf;
pub mod notify;
pub mod policy;
mod prio;
mod privs;
mod reload;
pub mod route_rules;
mod rtnl;
pub mod rundir;
mod setup;
#[cfg(test)]
mod test_packets;
mod threads;
mod transmit;
#[doc(hidden)]
pub mod tunread;
#[doc(hidden)]
pub mod tunwrite;
pub mod uapi;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use sealink_engine::Handoff;
use sealink_proto::Clock;
use sealink_proto::HostKey;
use sealink_proto::tunnel::{Tunnel, Wire};
use sealink_udp::UdpIo;
use tun_rs::{InterruptEvent, SyncDevice};

pub use config::{Config, KeyFormat, wgquick};
pub(crate) use transmit::QueuedTransmits;

/// The `tracing` target of lines meant for the person who started the tunnel as they are
/// (`[#] CMD` for each hook and what the hook printed, as wg-quick shows them): the `sealink`
/// binary prints them as plain lines unless -q, not in the log format.
pub const SAY_TARGET: &str = "sealink::say";
pub use error::TunnelError;
pub use notify::Notifier;
pub use privs::may_admin_network;
pub use reload::{Resolver, system_resolver};
pub use rundir::RunDir;

/// What is up, as reported to the caller once the interface is configured.
#[derive(Debug, Clone)]
pub struct UpInfo {
    pub name: String,
    pub listen: SocketAddr,
    /// TUN offloads (TSO/GRO with the virtio header) are in use.
    pub tun_offload: bool,
    /// Segments one UDP GSO send may carry (1: no GSO).
    pub udp_gso_segments: usize,
    /// TUN queues (multi-queue device) and UDP sockets (`SO_REUSEPORT`), one reader each.
    pub queues: usize,
    pub udp_sockets: usize,
    /// The protocol on the wire.
    pub wire: Wire,
    /// The AEAD suite of the data path (its library: `sealink_crypto::backend::chosen_backend`).
    pub suite: sealink_crypto::SuiteId,
    /// Crypto worker threads of the engine (0: sealed and opened inline on the readers).
    pub workers: usize,
    /// Threads writing received packets to the TUN device, a flow always to the same one (0:
    /// the receive path's release writes).
    pub tun_writers: usize,
    /// When the readers hand batches to the workers (`interface.handoff`).
    pub handoff: Handoff,
    /// Lanes are offered to peers ([`sealink_proto::tunnel::TunnelConfig::lanes`]), and the
    /// UDP sockets' group steers received datagrams by lane (`sealink_udp::steer`).
    pub lanes: bool,
    pub lane_steering: bool,
    /// The mark on the tunnel's own datagrams when it is a full tunnel (`policy.rs`), else
    /// `None`.
    pub fwmark: Option<u32>,
}

pub(crate) struct Shared {
    core: Mutex<Tunnel>,
    timer: Condvar,
    stop: std::sync::Arc<AtomicBool>,
    /// `SO_REUSEPORT` sockets on the listen port; socket 0 also sends the timer's datagrams.
    udp: Vec<UdpIo>,
    /// Queues of the (multi-queue) TUN device.
    devs: Vec<SyncDevice>,
    /// The TUN writer threads' queues (empty: the receive path's release writes).
    writers: Vec<std::sync::mpsc::Sender<datapath::WriterJob>>,
    intr: InterruptEvent,
    clock: Clock,
    offload: bool,
    /// Where a packet starts in its slot: the wire's data header (and sealink's length field).
    headroom: usize,
    /// Stride of packet slots: header room, MTU, tag room.
    stride: usize,
    info: UpInfo,
    public_key: [u8; 32],
    /// The uid allowed on the control socket besides root: ours.
    owner_uid: u32,
    /// Control connections refused by their peer credentials.
    control_refused: AtomicU64,
    /// Endpoint names to resolve again, to the resolver thread ([`reload::resolver_loop`]).
    resolve_tx: std::sync::mpsc::Sender<([u8; 32], String)>,
    /// Per-thread counters of the data path (`show`).
    threads: threads::Registry,
    /// WireGuard UAPI requests refused, by reason (`show`).
    uapi_refused: uapi::Refusals,
    /// IPv6 endpoint zones as the last UAPI `set` gave them (`get` prints them back).
    uapi_zones: uapi::Zones,
    /// Handshake messages on their way from the UDP readers to the handshake threads.
    handshakes: handshakes::Handshakes,
}

/// What [`run_with`] takes besides the config.
#[derive(Default, Clone)]
pub struct RunOptions {
    /// The file the config came from: `sealink reload` and SIGHUP read it again.
    pub config_path: Option<PathBuf>,
    /// Set by a SIGHUP handler: reload the config file.
    pub reload: Option<std::sync::Arc<AtomicBool>>,
    /// Resolves endpoint names again (default: [`system_resolver`]).
    pub resolver: Option<Resolver>,
    /// An executable that runs [`helper_main::main`] when given [`helper::SUBCOMMAND`] (the
    /// `sealink` binary: `/proc/self/exe`), for the root helpers that undo a full tunnel's
    /// rules and change routes on a reload. Without one, a full tunnel is refused and a
    /// reload cannot change routes.
    pub helper_exe: Option<PathBuf>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("config_path", &self.config_path)
            .field("reload", &self.reload)
            .field("resolver", &self.resolver.as_ref().map(|_| "custom"))
            .field("helper_exe", &self.helper_exe)
            .finish()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Tunnel> {
        // A panic while holding the lock is a bug in the core; keep serving with its state.
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    fn send(&self, sock: usize, dest: SocketAddr, data: &[u8], segment: usize) {
        let u = &self.udp[sock];
        match u.send(dest, data, segment) {
            Ok(calls) => {
                let seg = segment.min(data.len()).max(1);
                self.threads.call_n(
                    threads::Count::UdpSends,
                    calls as u64,
                    threads::Count::UdpSendDatagrams,
                    data.len().div_ceil(seg) as u64,
                );
            }
            Err(e) => tracing::debug!(%dest, error = %e, "udp send failed"),
        }
    }
}

/// Runs the tunnel in the calling thread until `stop` is set (by a signal handler, or by
/// `sealink down` through the control socket). `on_up` is called once the interface is up and
/// configured. The interface is removed before this returns.
pub fn run(
    cfg: Config,
    host: HostKey,
    run_dir: &RunDir,
    stop: std::sync::Arc<AtomicBool>,
    on_up: impl FnOnce(&UpInfo),
) -> Result<(), TunnelError> {
    run_with(cfg, host, run_dir, stop, RunOptions::default(), on_up)
}

/// [`run`] with hooks' config path for reloads, a SIGHUP flag and a resolver. Hooks: `pre_up`
/// before the device is created, `post_up` once addresses and routes are set (before `on_up`,
/// so before READY=1), `pre_down` before teardown and `post_down` after it (see [`hooks`]).
pub fn run_with(
    cfg: Config,
    host: HostKey,
    run_dir: &RunDir,
    stop: std::sync::Arc<AtomicBool>,
    opts: RunOptions,
    on_up: impl FnOnce(&UpInfo),
) -> Result<(), TunnelError> {
    let r = setup::run_prepared(cfg, host, run_dir, stop, opts, on_up);
    // After a failed start too (a pre_up hook, the device, ...): `prepare` may have created
    // the namespace's directory for nothing.
    rundir::remove_if_empty(&run_dir.dir());
    r
}

/// Held while the process-wide umask is changed ([`control::bind_private`]) and by whatever creates
/// files or starts processes during set-up that must not inherit that umask (run directories,
/// hooks): a process running several tunnels (the library's tests) sets them up at once.
pub(crate) static UMASK: Mutex<()> = Mutex::new(());

fn timer_loop(sh: &Shared) {
    let mut out = QueuedTransmits::new(sh.stride);
    let mut core = sh.lock();
    while !sh.stopping() {
        let now = sh.clock.now();
        core.handle_timeout(now);
        while let Some(req) = core.poll_resolve() {
            let _ = sh.resolve_tx.send(req);
        }
        // Initiations that rekeys, retries and waiting packets reserved: built by the
        // handshake threads, with no lock held.
        sh.handshakes.take_initiations(&mut core);
        out.clear();
        if out.drain(&mut core) > 0 {
            drop(core);
            out.seal_and_send(sh, 0, 0);
            core = sh.lock();
            continue;
        }
        let wait = core
            .poll_timeout()
            .map_or(Duration::from_millis(250), |t| t.saturating_since(now))
            .min(Duration::from_millis(250));
        core = sh
            .timer
            .wait_timeout(core, wait)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}
