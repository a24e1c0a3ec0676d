//! What `bench peers` reads around each window: the kernel's counters in both namespaces,
//! the hub's CPU time and drop counters; and the window's echoes with them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::EchoResult;
use super::lab;
use super::lab::HubKind;
use super::loadgen::{Driver, EchoPlan, PhaseEcho};
use crate::error::Result;

/// The namespaces' names, for the generator's thread (the guard stays with the caller).
pub(super) struct NsRef {
    pub(super) hub: String,
    pub(super) gen_ns: String,
    /// The hub's tunnel interface.
    pub(super) dev: String,
}

impl NsRef {
    /// Packets the kernel dropped on the hub's tunnel interface, received and sent (`ip -s
    /// link`: a TUN device's transmit queue overflows when the hub does not read it in time).
    fn tun_drops(&self) -> (u64, u64) {
        let o = std::process::Command::new("ip")
            .args([
                "-n", &self.hub, "-s", "-j", "link", "show", "dev", &self.dev,
            ])
            .output();
        let v = o
            .ok()
            .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok());
        let get = |dir: &str| {
            v.as_ref()
                .and_then(|v| v.get(0)?.get("stats64")?.get(dir)?.get("dropped")?.as_u64())
                .unwrap_or(0)
        };
        (get("rx"), get("tx"))
    }

    fn rcvbuf(&self) -> (u64, u64) {
        (
            lab::udp_counter(&self.hub, "RcvbufErrors"),
            lab::udp_counter(&self.gen_ns, "RcvbufErrors"),
        )
    }
}

/// A window of echoes from `active` at `rate` each for `window`: its phase, and the receive
/// buffer overflows in the hub's and the generator's namespaces meanwhile.
pub(super) fn echo_window(
    d: &mut Driver,
    nsr: &NsRef,
    hub: &lab::Hub,
    active: &[usize],
    rate: f64,
    window: Duration,
) -> Result<(usize, Probe)> {
    let phase = d.phase();
    let before = probe(nsr, hub);
    let plan = EchoPlan {
        peers: active.to_vec(),
        rate,
        phase,
    };
    d.run(Instant::now() + window, Some(&plan), |_| false)?;
    let after = probe(nsr, hub);
    Ok((phase, after.since(&before)))
}

/// What is read of both namespaces and the hub around a window.
#[derive(Debug, Clone, Default)]
pub(super) struct Probe {
    hub_rcvbuf: u64,
    gen_rcvbuf: u64,
    hub_cpu: f64,
    /// The kernel's drops on the hub's tunnel interface, received and sent.
    tun_drops: (u64, u64),
    /// The hub's drop counters by reason (sealink's `show --json`; none for wireguard-go).
    drops: BTreeMap<String, u64>,
    /// CPU seconds of the generator's flood thread (set by the flood's window).
    pub gen_flood_cpu: f64,
}

impl Probe {
    pub(super) fn since(&self, before: &Probe) -> Probe {
        Probe {
            hub_rcvbuf: self.hub_rcvbuf.saturating_sub(before.hub_rcvbuf),
            gen_rcvbuf: self.gen_rcvbuf.saturating_sub(before.gen_rcvbuf),
            hub_cpu: self.hub_cpu - before.hub_cpu,
            tun_drops: (
                self.tun_drops.0.saturating_sub(before.tun_drops.0),
                self.tun_drops.1.saturating_sub(before.tun_drops.1),
            ),
            drops: self
                .drops
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.saturating_sub(before.drops.get(k).copied().unwrap_or(0)),
                    )
                })
                .filter(|(_, v)| *v > 0)
                .collect(),
            gen_flood_cpu: 0.0,
        }
    }
}

pub(super) fn probe(nsr: &NsRef, hub: &lab::Hub) -> Probe {
    let (hub_rcvbuf, gen_rcvbuf) = nsr.rcvbuf();
    let drops = match hub.kind {
        HubKind::WireGuardGo => BTreeMap::new(),
        _ => hub
            .show()
            .ok()
            .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
            .and_then(|v| {
                let d = v.get(0)?.get("drops")?.as_object()?.clone();
                Some(
                    d.into_iter()
                        .filter_map(|(k, v)| Some((k, v.as_u64()?)))
                        .collect(),
                )
            })
            .unwrap_or_default(),
    };
    Probe {
        hub_rcvbuf,
        gen_rcvbuf,
        hub_cpu: hub.cpu_seconds().unwrap_or(f64::NAN),
        tun_drops: nsr.tun_drops(),
        drops,
        gen_flood_cpu: 0.0,
    }
}

pub(super) fn echo_result(e: &PhaseEcho, rcv: Probe) -> EchoResult {
    EchoResult {
        sent: e.sent,
        received: e.received,
        not_sent: e.not_sent,
        loss_percent: e.loss() * 100.0,
        rtt_p50_ms: e.rtt_ms(0.5),
        rtt_p99_ms: e.rtt_ms(0.99),
        hub_rcvbuf_errors: rcv.hub_rcvbuf,
        gen_rcvbuf_errors: rcv.gen_rcvbuf,
        hub_cpu_seconds: rcv.hub_cpu,
        tun_rx_dropped: rcv.tun_drops.0,
        tun_tx_dropped: rcv.tun_drops.1,
        hub_drops: rcv.drops,
        gen_loop_handshake_ms: e.loop_handshake_us as f64 / 1000.0,
        gen_loop_handshake_max_ms: e.loop_handshake_max_us as f64 / 1000.0,
        gen_worker_ms: e.worker_us as f64 / 1000.0,
        gen_flood_cpu_seconds: rcv.gen_flood_cpu,
    }
}
