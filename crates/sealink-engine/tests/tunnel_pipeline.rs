//! The tunnel's parallel data path against its serial reference: for random packet mixes over
//! several peers, sealing through the engine's [`Pipeline`] with any number of workers gives
//! byte-identical datagrams, in the same order, as sealing serially; and opening them through
//! the pipeline on the receivers (reserve, parallel open, in-order finish) delivers every
//! packet to the right peer exactly once and in order.

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use sealink_engine::{Pipeline, Work};
use sealink_proto::tunnel::{
    DecapJob, DecapReserve, HEADROOM, Reserve, SealJob, TAILROOM, Tunnel, TunnelConfig,
    TunnelPeerConfig,
};
use sealink_proto::{DropReason, HostKey, Time};

const PEERS: usize = 3;

fn sa(i: usize) -> SocketAddr {
    SocketAddr::from(([192, 0, 2, i as u8 + 1], 51820))
}

fn ip(i: usize) -> [u8; 4] {
    [10, 9, 0, i as u8 + 1]
}

/// An IPv4 UDP packet of `total` bytes from `src` to `dst` whose payload is `fill`.
fn v4(src: [u8; 4], dst: [u8; 4], total: usize, fill: u8) -> Vec<u8> {
    let mut p = vec![fill; total];
    p[0] = 0x45;
    p[1] = 0;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[9] = 17;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p
}

/// Host 0 (the hub) with peers 1..=PEERS, sessions established through real handshakes.
struct Net {
    hub: Tunnel,
    peers: Vec<Tunnel>,
    now: Time,
}

fn net() -> Net {
    let mut cfg = TunnelConfig::default();
    // Every packet leaves in its own datagram: the property is about sealing, not queueing.
    cfg.piggyback.enabled = false;
    let keys: Vec<HostKey> = (0..=PEERS).map(|_| HostKey::generate().unwrap()).collect();
    let hub = Tunnel::new(
        keys[0].clone(),
        cfg.clone(),
        (1..=PEERS)
            .map(|i| TunnelPeerConfig {
                name: format!("p{i}"),
                public_key: *keys[i].public(),
                endpoint: Some(sa(i)),
                allowed_ips: vec![format!("10.9.0.{}/32", i + 1).parse().unwrap()],
                persistent_keepalive: None,
                preshared_key: None,
            })
            .collect(),
    )
    .unwrap();
    let peers = (1..=PEERS)
        .map(|i| {
            Tunnel::new(
                keys[i].clone(),
                cfg.clone(),
                vec![TunnelPeerConfig {
                    name: "hub".into(),
                    public_key: *keys[0].public(),
                    endpoint: Some(sa(0)),
                    allowed_ips: vec!["10.9.0.1/32".parse().unwrap()],
                    persistent_keepalive: None,
                    preshared_key: None,
                }],
            )
            .unwrap()
        })
        .collect();
    let mut n = Net {
        hub,
        peers,
        now: Time::from_millis(1_000),
    };
    // Handshakes: the first packet to each peer starts one; run the wire until quiet.
    let mut out = vec![0u8; 4096];
    for i in 1..=PEERS {
        let pkt = v4(ip(0), ip(i), 100, 0);
        let mut buf = vec![0u8; HEADROOM + pkt.len() + TAILROOM];
        buf[HEADROOM..HEADROOM + pkt.len()].copy_from_slice(&pkt);
        n.hub.encapsulate(n.now, &mut buf, pkt.len());
    }
    for _ in 0..10 {
        let mut moved = false;
        while let Some((dest, len)) = n.hub.poll_transmit(&mut out) {
            let i = (1..=PEERS).find(|&i| sa(i) == dest).unwrap();
            let mut d = out[..len].to_vec();
            let _ = n.peers[i - 1].decapsulate(n.now, sa(0), &mut d, &mut Vec::new());
            moved = true;
        }
        for i in 1..=PEERS {
            while let Some((_, len)) = n.peers[i - 1].poll_transmit(&mut out) {
                let mut d = out[..len].to_vec();
                let _ = n.hub.decapsulate(n.now, sa(i), &mut d, &mut Vec::new());
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    n
}

// ---------------------------------------------------------------- seal side

/// A batch of reserved packets: slots at a fixed stride, as the TUN reader lays them out.
struct SealBatch {
    lane: usize,
    n: u64,
    slots: Vec<(Vec<u8>, SealJob, usize, Option<usize>)>,
}
type Sealed = Vec<(usize, Vec<u8>)>;
type SealLog = Mutex<Vec<Vec<(u64, Sealed)>>>;

impl Work for SealBatch {
    type Ctx = SealLog;
    fn run(&mut self, _: &SealLog) {
        for (buf, job, _, len) in &mut self.slots {
            *len = job.seal(buf).ok();
        }
    }
    fn release(self, log: &SealLog) {
        let dgs = self
            .slots
            .into_iter()
            .map(|(buf, _, peer, len)| (peer, buf[..len.expect("sealed")].to_vec()))
            .collect();
        log.lock().unwrap()[self.lane].push((self.n, dgs));
    }
}

// ---------------------------------------------------------------- open side

/// A received datagram, its job, and what opening it gave.
type Received = (Vec<u8>, DecapJob, Result<Range<usize>, DropReason>);

struct OpenBatch {
    peer: usize,
    dgs: Vec<Received>,
}
type OpenCtx = Mutex<(Vec<Tunnel>, Vec<Vec<Vec<u8>>>, Time)>;

impl Work for OpenBatch {
    type Ctx = OpenCtx;
    fn run(&mut self, _: &OpenCtx) {
        for (d, job, r) in &mut self.dgs {
            *r = job.open(d);
        }
    }
    fn release(self, ctx: &OpenCtx) {
        let mut g = ctx.lock().unwrap();
        let (tunnels, got, now) = &mut *g;
        let mut ranges = Vec::new();
        for (d, job, r) in self.dgs {
            ranges.clear();
            tunnels[self.peer]
                .decapsulate_finish(*now, sa(0), &job, r, &d, &mut ranges)
                .expect("authentic and fresh");
            for rg in &ranges {
                got[self.peer].push(d[rg.clone()].to_vec());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn parallel_tunnel_path_matches_the_serial_one(
        workers in 0usize..4,
        batches in proptest::collection::vec(
            proptest::collection::vec((0usize..PEERS, 20usize..1400, any::<u8>()), 1..40),
            1..12,
        ),
        lanes in 1usize..3,
    ) {
        let mut n = net();
        let now = n.now;
        let stride = HEADROOM + 1420 + TAILROOM;
        let log: Arc<SealLog> = Arc::new(Mutex::new(vec![Vec::new(); lanes]));
        let pipe = Pipeline::new(Arc::clone(&log), lanes, workers);
        let mut serial: Vec<Vec<(u64, Sealed)>> = vec![Vec::new(); lanes];
        let mut sent: Vec<Vec<Vec<u8>>> = vec![Vec::new(); PEERS];
        for (b, batch) in batches.iter().enumerate() {
            let lane = b % lanes;
            let mut slots = Vec::new();
            for &(peer, size, fill) in batch {
                let pkt = v4(ip(0), ip(peer + 1), size, fill);
                let mut buf = vec![0u8; stride];
                buf[HEADROOM..HEADROOM + size].copy_from_slice(&pkt);
                // The serial step, under the core's lock in the driver.
                match n.hub.encapsulate_reserve(now, &mut buf, size) {
                    Reserve::Seal { peer: p, dest, job } => {
                        prop_assert_eq!(p.0, peer);
                        prop_assert_eq!(dest, sa(peer + 1));
                        slots.push((buf, job, peer, None));
                        sent[peer].push(pkt);
                    }
                    other => prop_assert!(false, "not sealed: {:?}", other),
                }
            }
            // The serial reference on copies of the same reserved slots.
            let reference: Sealed = slots
                .iter()
                .map(|(buf, job, peer, _)| {
                    let mut c = buf.clone();
                    let len = job.seal(&mut c).unwrap();
                    (*peer, c[..len].to_vec())
                })
                .collect();
            serial[lane].push((b as u64, reference));
            pipe.submit(lane, SealBatch { lane, n: b as u64, slots });
        }
        drop(pipe);
        let parallel = std::mem::take(&mut *log.lock().unwrap());
        prop_assert_eq!(&parallel, &serial, "byte-identical, in order per lane");

        // Receivers: datagrams in the order they left, per peer, through an open pipeline.
        let mut per_peer: Vec<Vec<Vec<u8>>> = vec![Vec::new(); PEERS];
        // Lanes carry batches in submission order: replay them in that order.
        let mut all: Vec<&(u64, Sealed)> = parallel.iter().flatten().collect();
        all.sort_by_key(|(b, _)| *b);
        for (_, dgs) in all {
            for (p, d) in dgs {
                per_peer[*p].push(d.clone());
            }
        }
        let tunnels = std::mem::take(&mut n.peers);
        let ctx: Arc<OpenCtx> = Arc::new(Mutex::new((tunnels, vec![Vec::new(); PEERS], now)));
        let open = Pipeline::new(Arc::clone(&ctx), PEERS, workers);
        for (p, dgs) in per_peer.into_iter().enumerate() {
            for chunk in dgs.chunks(7) {
                let mut batch = OpenBatch { peer: p, dgs: Vec::new() };
                {
                    let mut g = ctx.lock().unwrap();
                    for d in chunk {
                        match g.0[p].decapsulate_reserve(now, sa(0), d).unwrap() {
                            DecapReserve::Open(job) => {
                                batch.dgs.push((d.clone(), job, Err(DropReason::AuthFailed)))
                            }
                            DecapReserve::Handshake(_) => prop_assert!(false, "data expected"),
                        }
                    }
                }
                open.submit(p, batch);
            }
        }
        drop(open);
        let g = ctx.lock().unwrap();
        for (p, want) in sent.iter().enumerate() {
            prop_assert_eq!(&g.1[p], want, "peer {} got every packet once, in order", p);
        }
    }
}
