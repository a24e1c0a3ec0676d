//! `sealink-lab bench datagram`: datagram mode over real loopback UDP, piggybacking on and off.
//!
//! Two [`Node`]s in this process (each with its own I/O thread) share one channel. The sending
//! application offers small messages as fast as the channel takes them, `BATCH` per `send_batch`
//! call (back-pressure: at most `WINDOW` messages queued or unacknowledged), a share of them
//! urgent: by default as a [`Source`] that the sending node's I/O thread calls each round, with
//! `--sender thread` on a thread of its own calling [`Node::send_batch`] and [`Node::wait_room`]; the
//! receiving application takes the deliveries in batches, by default in a receive handler on the
//! receiving node's I/O thread ([`OnArrival`]), with `--receiver thread` on a thread of its own
//! blocked in [`Node::recv_arrivals`]. Every message carries its send time
//! (nanoseconds since a shared start instant), so an urgent message's latency is its delivery
//! time at the receiving node minus its send time. Both modes use the same batched API: what
//! differs is only whether messages share datagrams.
//! Reported per size and mode: messages/s delivered, data datagrams/s sent, messages per datagram,
//! urgent latency p50/p99, process CPU per delivered message; then the ON/OFF throughput ratio.
//! With `--peer quic` the same workload also runs over quinn (see [`super::quic`]), interleaved
//! run by run with the sealink modes, and the ratios against it follow. Writes datagram.csv and
//! the run record datagram.json into `--out`.
//!
//! Every point runs under each `--placement` (see [`super::placement`]): `shared` leaves all
//! threads to the scheduler; `split` pins the sending host (its node's I/O thread and the
//! sending application) to one CPU and the receiving host (its node's I/O thread, which runs
//! the receive handler) to another, and does the same to quinn's two hosts.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sealink_crypto::sign::OwnerSigningKey;
use sealink_datagram::{
    Arrival, Config, HostKey, LocalOwner, Node, NodeConfig, NodeError, OnArrival, Outbox, Outgoing,
    OwnerId, PeerConfig, PeerId, Scope, Source, Supply, Urgency,
};
use sealink_proto::sim::SimRng;

use super::placement::{Cpus, Placement, on_cpu};
use super::quic::{self, Peer, process_cpu};
use super::{fill, median, random_seed};
use crate::error::{Error, Result};
use crate::output;
use crate::report::{RunRecord, Table};

/// Largest message size the bench takes (one message always fits a datagram).
pub const MAX_SIZE: usize = 1024;
/// Messages queued or unacknowledged per channel before the sender backs off.
const WINDOW: usize = 2048;
/// Messages offered per `send_batch` call (one lock and one clock read for all of them).
const BATCH: usize = 32;
/// Bytes of each message used for the send timestamp and the urgent flag.
const STAMP: usize = 9;

/// Parameters of `sealink-lab bench datagram`.
#[derive(Debug, Clone)]
pub struct Params {
    pub sizes: Vec<usize>,
    pub seconds: f64,
    pub runs: usize,
    /// Share of messages sent urgent.
    pub urgent: f64,
    pub quick: bool,
    /// One datagram per send system call instead of GSO runs.
    pub no_gso: bool,
    /// Engine workers per node (`None`: the node's default).
    pub workers: Option<usize>,
    /// When each node's I/O thread hands batches to its workers.
    pub handoff: sealink_datagram::Handoff,
    /// Largest datagram built (the piggyback queue limit follows it).
    pub max_datagram: usize,
    /// Each node's receive busy-polls this long before sleeping ([`sealink_udp::UdpOptions`]).
    pub busy_poll: Duration,
    /// Directory for datagram.csv and datagram.json.
    pub out: PathBuf,
    /// Also run the workload over this peer, interleaved with sealink's runs.
    pub peer: Option<Peer>,
    /// How the receiving application takes its messages.
    pub receiver: Receiver,
    /// How the sending application hands its messages over.
    pub sender: SenderKind,
    /// Where the two hosts run on the CPUs; each point runs under every placement given.
    pub placements: Vec<Placement>,
}

/// How the bench's receiving application takes messages from its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receiver {
    /// A receive handler on the node's own thread ([`OnArrival`]): no hand-off.
    Handler,
    /// A thread of its own blocked in [`Node::recv_arrivals`]: a lock and a wake-up per round.
    Thread,
}

pub fn parse_receiver(s: &str) -> Result<Receiver, String> {
    match s {
        "handler" => Ok(Receiver::Handler),
        "thread" => Ok(Receiver::Thread),
        _ => Err(format!("{s:?} is not a receiver: handler or thread")),
    }
}

/// How the bench's sending application hands messages to its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderKind {
    /// A [`Source`] run by the node's own I/O thread: no hand-off.
    Source,
    /// A thread of its own calling [`Node::send_batch`] and [`Node::wait_room`]: a lock per
    /// batch, wake-ups both ways.
    Thread,
}

pub fn parse_sender(s: &str) -> Result<SenderKind, String> {
    match s {
        "source" => Ok(SenderKind::Source),
        "thread" => Ok(SenderKind::Thread),
        _ => Err(format!("{s:?} is not a sender: source or thread")),
    }
}

pub fn parse_size(s: &str) -> Result<usize, String> {
    sealink_cmdline::units::parse_within(s, STAMP, MAX_SIZE)
}

/// One timed run's figures.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    msgs_per_s: f64,
    dgrams_per_s: f64,
    msgs_per_dgram: f64,
    p50_us: f64,
    p99_us: f64,
    urgent: usize,
    /// Process CPU time per delivered message, in microseconds.
    cpu_us: f64,
    /// Share of the messages sent that never arrived (QUIC datagrams only).
    lost: f64,
}

pub fn run(p: &Params) -> Result<()> {
    print_heading(p);
    // Per placement, sealink's two modes, then the peer's; each run of a point interleaved
    // with the others.
    let mut modes = Vec::new();
    for &placement in &p.placements {
        let cpus = placement.cpus()?;
        let mut systems = vec![System::Sealink(true), System::Sealink(false)];
        if p.peer == Some(Peer::Quic) {
            systems.extend([
                System::Quic(quic::Variant::Stream),
                System::Quic(quic::Variant::Datagram),
            ]);
        }
        modes.extend(systems.into_iter().map(|system| Mode {
            system,
            placement,
            cpus,
        }));
    }
    let pb = output::progress((p.sizes.len() * modes.len() * p.runs) as u64, "datagram");
    let mut rows = Vec::new();
    for &size in &p.sizes {
        let mut samples = vec![Vec::new(); modes.len()];
        for _ in 0..p.runs {
            for (mode, out) in modes.iter().zip(samples.iter_mut()) {
                out.push(match mode.system {
                    System::Sealink(piggyback) => one_run(size, piggyback, p, mode.cpus)?,
                    System::Quic(v) => quic_run(v, size, p, mode.cpus)?,
                });
                pb.inc(1);
            }
        }
        let mut point = Vec::new();
        for samples in &samples {
            let m = |f: fn(&Sample) -> f64| median(&samples.iter().map(f).collect::<Vec<_>>());
            point.push(Sample {
                msgs_per_s: m(|s| s.msgs_per_s),
                dgrams_per_s: m(|s| s.dgrams_per_s),
                msgs_per_dgram: m(|s| s.msgs_per_dgram),
                p50_us: m(|s| s.p50_us),
                p99_us: m(|s| s.p99_us),
                urgent: samples.iter().map(|s| s.urgent).sum(),
                cpu_us: m(|s| s.cpu_us),
                lost: m(|s| s.lost),
            });
        }
        rows.push((size, point));
    }
    pb.finish_and_clear();
    let mut t = table(&rows, &modes).terminal();
    t.push('\n');
    t.push_str(&comparisons(p, &rows, &modes));
    let (csv, json) = write_files(&p.out, &rows, &modes)?;
    t.push_str(&format!(
        "\nCSV: {}\nrun record: {}\n",
        csv.display(),
        json.display()
    ));
    output::print(&t)
}

/// The line that says what the run measures and how.
fn print_heading(p: &Params) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "datagram mode over loopback UDP: {} s per run, {} run(s) per point (medians), {:.0}% urgent, \
         window {WINDOW} messages, {BATCH} per send call, datagrams up to {} B, {cores} core(s), GSO {}, \
         {} engine worker(s) per node, busy poll {} us, sender: {}, receiver: {}, placement: {}{}{}",
        p.seconds,
        p.runs,
        p.urgent * 100.0,
        p.max_datagram,
        if p.no_gso { "off" } else { "on" },
        p.workers.unwrap_or_else(sealink_engine::default_workers),
        p.busy_poll.as_micros(),
        match p.sender {
            SenderKind::Source => "source on the node's thread",
            SenderKind::Thread => "a thread in send_batch",
        },
        match p.receiver {
            Receiver::Handler => "handler on the node's thread",
            Receiver::Thread => "a thread in recv_arrivals",
        },
        p.placements
            .iter()
            .map(|pl| match pl.cpus() {
                Ok(Some(c)) => format!(
                    "split (sender on CPU {}, receiver on CPU {})",
                    c.sender, c.receiver
                ),
                _ => pl.label().to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" and "),
        if p.quick {
            " [--quick: smoke test, not a measurement]"
        } else {
            ""
        },
        match p.peer {
            Some(Peer::Quic) => format!("; peer: {}", quic::DESCRIPTION),
            None => String::new(),
        }
    );
}

/// Piggybacking on against off at each size and placement, then sealink against the peer (and,
/// with several placements, each at its best placement).
fn comparisons(p: &Params, rows: &Rows, modes: &[Mode]) -> String {
    let mut t = String::new();
    let find = |point: &[Sample], system: System, placement: Placement| {
        modes
            .iter()
            .position(|m| m.system == system && m.placement == placement)
            .map(|i| point[i])
    };
    for (size, point) in rows {
        for &pl in &p.placements {
            if let (Some(on), Some(off)) = (
                find(point, System::Sealink(true), pl),
                find(point, System::Sealink(false), pl),
            ) {
                t.push_str(&format!(
                    "{size:>4} B, {}: throughput on/off = {:.2}x, urgent p99 on/off = {:.2}x\n",
                    pl.label(),
                    on.msgs_per_s / off.msgs_per_s.max(1e-9),
                    on.p99_us / off.p99_us.max(1e-9)
                ));
            }
        }
    }
    let ratio = |on: &Sample, peer: &Sample| {
        format!(
            "msgs/s = {:.2}x, urgent p99 = {:.2}x, cpu/msg = {:.2}x",
            on.msgs_per_s / peer.msgs_per_s.max(1e-9),
            on.p99_us / peer.p99_us.max(1e-9),
            on.cpu_us / peer.cpu_us.max(1e-9)
        )
    };
    for (size, point) in rows {
        for (peer, mode) in point.iter().zip(modes) {
            let System::Quic(_) = mode.system else {
                continue;
            };
            if let Some(on) = find(point, System::Sealink(true), mode.placement) {
                t.push_str(&format!(
                    "{size:>4} B, {}: sealink (piggyback on) / {}: {}\n",
                    mode.placement.label(),
                    mode.system.label(),
                    ratio(&on, peer)
                ));
            }
        }
        // With several placements: each system at its best placement, so that no placement
        // choice flatters one side.
        let best = |system: System| {
            point
                .iter()
                .zip(modes)
                .filter(|(_, m)| m.system == system)
                .max_by(|a, b| a.0.msgs_per_s.total_cmp(&b.0.msgs_per_s))
        };
        if p.placements.len() > 1 {
            let stream = System::Quic(quic::Variant::Stream);
            if let (Some((on, mo)), Some((peer, mp))) = (best(System::Sealink(true)), best(stream))
            {
                t.push_str(&format!(
                    "{size:>4} B, best placement of each: sealink ({}) / quic-strm ({}): {}\n",
                    mo.placement.label(),
                    mp.placement.label(),
                    ratio(on, peer)
                ));
            }
        }
    }
    t
}

/// Medians per message size, one per mode (piggybacking on, off, then the peer's variants).
type Rows = [(usize, Vec<Sample>)];

fn table(rows: &Rows, modes: &[Mode]) -> Table {
    let mut t = Table::new([
        "size",
        "placement",
        "piggyback",
        "msgs/s",
        "dgrams/s",
        "msgs/dgr",
        "urg p50 us",
        "urg p99 us",
        "urgent",
        "cpu us/msg",
        "lost",
    ])
    .left(&[1, 2]);
    for (size, point) in rows {
        for (s, mode) in point.iter().zip(modes) {
            t.row([
                size.to_string(),
                mode.placement.label().to_owned(),
                mode.system.label().to_owned(),
                format!("{:.0}", s.msgs_per_s),
                format!("{:.0}", s.dgrams_per_s),
                format!("{:.2}", s.msgs_per_dgram),
                format!("{:.0}", s.p50_us),
                format!("{:.0}", s.p99_us),
                s.urgent.to_string(),
                format!("{:.2}", s.cpu_us),
                format!("{:.1}%", s.lost * 100.0),
            ]);
        }
    }
    t
}

/// Writes datagram.csv (the medians at full precision) and the run record into `dir`.
fn write_files(dir: &Path, rows: &Rows, modes: &[Mode]) -> Result<(PathBuf, PathBuf)> {
    let mut t = Table::new("size_bytes,placement,piggyback,msgs_per_s,dgrams_per_s,msgs_per_dgram,urgent_p50_us,urgent_p99_us,urgent_samples,cpu_us_per_msg,lost".split(','));
    let mut rec = RunRecord::new("datagram");
    for (size, point) in rows {
        for (s, mode) in point.iter().zip(modes) {
            let (on, pl) = (mode.system.label(), mode.placement.label());
            t.row([
                size.to_string(),
                pl.to_owned(),
                on.to_owned(),
                s.msgs_per_s.to_string(),
                s.dgrams_per_s.to_string(),
                s.msgs_per_dgram.to_string(),
                s.p50_us.to_string(),
                s.p99_us.to_string(),
                s.urgent.to_string(),
                s.cpu_us.to_string(),
                s.lost.to_string(),
            ]);
            rec.figure(
                format!("{size} B {pl} piggyback {on}"),
                s.msgs_per_s,
                "msgs/s",
            );
            rec.figure(
                format!("{size} B {pl} piggyback {on} urgent p99"),
                s.p99_us,
                "us",
            );
        }
    }
    let csv = rec.write_csv(dir, "datagram.csv", &t)?;
    Ok((csv, rec.write(dir)?))
}

/// What one row measures: a sealink mode (piggybacking on or off) or a QUIC variant...
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum System {
    Sealink(bool),
    Quic(quic::Variant),
}

impl System {
    fn label(self) -> &'static str {
        match self {
            System::Sealink(true) => "on",
            System::Sealink(false) => "off",
            System::Quic(v) => v.label(),
        }
    }
}

/// ...and where its hosts run.
#[derive(Debug, Clone, Copy)]
struct Mode {
    system: System,
    placement: Placement,
    cpus: Option<Cpus>,
}

/// The latency percentile `q` of sorted `lat` (NaN when empty).
fn percentile(lat: &[f64], q: f64) -> f64 {
    if lat.is_empty() {
        f64::NAN
    } else {
        lat[((lat.len() - 1) as f64 * q).round() as usize]
    }
}

fn quic_run(variant: quic::Variant, size: usize, p: &Params, cpus: Option<Cpus>) -> Result<Sample> {
    let mut o = quic::one_run(
        variant,
        &quic::Workload {
            size,
            seconds: p.seconds,
            urgent: p.urgent,
            window: WINDOW,
            batch: BATCH,
            max_datagram: p.max_datagram,
        },
        cpus,
    )?;
    o.latencies_us.sort_by(f64::total_cmp);
    Ok(Sample {
        msgs_per_s: o.delivered as f64 / o.elapsed,
        dgrams_per_s: o.datagrams as f64 / o.elapsed,
        msgs_per_dgram: o.sent as f64 / (o.datagrams as f64).max(1.0),
        p50_us: percentile(&o.latencies_us, 0.5),
        p99_us: percentile(&o.latencies_us, 0.99),
        urgent: o.latencies_us.len(),
        cpu_us: o.cpu * 1e6 / (o.delivered as f64).max(1.0),
        lost: 1.0 - o.received as f64 / (o.sent as f64).max(1.0),
    })
}

/// Appends the latency of each urgent message of `a` (its send stamp to its arrival), in µs.
fn urgent_latencies(t0: Instant, a: &Arrival, lat: &mut Vec<f64>) {
    let at = a.received_at.duration_since(t0);
    for data in a.messages.iter() {
        if data.get(8) == Some(&1) {
            let mut ns = [0u8; 8];
            ns.copy_from_slice(&data[..8]);
            let sent = Duration::from_nanos(u64::from_le_bytes(ns));
            lat.push(at.saturating_sub(sent).as_secs_f64() * 1e6);
        }
    }
}

fn owner() -> Result<(LocalOwner, [u8; 32])> {
    let key = OwnerSigningKey::from_seed(&OwnerSigningKey::generate_seed()?)?;
    let public = key.public_key();
    Ok((LocalOwner::new("bench", key)?, public))
}

/// One timed run of sealink; with `cpus`, the receiving node's I/O thread (and receiver) on
/// one CPU, the sending node's I/O thread and the sending application on the other.
/// A node on loopback with `key` and the run's configuration, its I/O thread on `io_cpu`.
fn node_config(p: &Params, cfg: &Config, key: HostKey, io_cpu: Option<usize>) -> NodeConfig {
    let mut c = NodeConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), key);
    c.config = cfg.clone();
    c.gso = !p.no_gso;
    c.udp.busy_poll = p.busy_poll;
    c.workers = p.workers;
    c.handoff = p.handoff;
    c.io_cpu = io_cpu;
    c
}

/// The receiving application as the node's handler (`--receiver handler`): the urgent
/// latencies of what arrives once `armed`, into `lat`.
fn latency_handler(armed: Arc<AtomicBool>, lat: Arc<Mutex<Vec<f64>>>, t0: Instant) -> OnArrival {
    OnArrival::new(move |a: Arrival| {
        if armed.load(Ordering::Relaxed) {
            // Uncontended: nothing else takes this lock until the run is over.
            urgent_latencies(t0, &a, &mut lat.lock().unwrap_or_else(|e| e.into_inner()));
        }
    })
}

/// The receiving application as a thread of its own (`--receiver thread`), on `cpu` if
/// given: the urgent latencies of what it takes from `b` until `stop`.
fn receiving_thread(
    b: Arc<Node>,
    stop: Arc<AtomicBool>,
    cpu: Option<usize>,
    t0: Instant,
) -> std::thread::JoinHandle<Result<Vec<f64>>> {
    std::thread::spawn(move || {
        if let Some(c) = cpu {
            sealink_engine::pin_current_thread(c).map_err(|e| Error::bench_by("placement", e))?;
        }
        let mut lat = Vec::new();
        let mut batch = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            b.recv_arrivals(&mut batch, Some(Duration::from_millis(50)));
            for a in batch.drain(..) {
                urgent_latencies(t0, &a, &mut lat);
            }
        }
        Ok::<_, Error>(lat)
    })
}

/// The two nodes of a run: `b` receives (with `on_arrival` as its handler, if any), `a` sends
/// as owner `me` to `peer`, b.
struct Hosts {
    a: Node,
    b: Arc<Node>,
    peer: PeerId,
    me: OwnerId,
}

fn start_hosts(
    p: &Params,
    piggyback: bool,
    cpus: Option<Cpus>,
    on_arrival: Option<OnArrival>,
) -> Result<Hosts> {
    let mut cfg = Config {
        piggyback,
        max_queued_messages: WINDOW,
        max_datagram: p.max_datagram,
        ..Config::default()
    };
    cfg.queue_limit = cfg.max_body();
    let (ka, kb) = (HostKey::generate()?, HostKey::generate()?);
    let (pa, pb) = (*ka.public(), *kb.public());
    let (own, own_pub) = owner()?;
    let mut cb = node_config(p, &cfg, kb, cpus.map(|c| c.receiver));
    if on_arrival.is_some() {
        cb.on_arrival = on_arrival;
    }
    cb.directory.insert("bench", own_pub)?;
    cb.peers.push(PeerConfig {
        name: "a".into(),
        public_key: pa,
        addr: None,
    });
    let b = Arc::new(
        Node::start(cb).map_err(|e| Error::bench_by("cannot start the receiving node", e))?,
    );
    let mut ca = node_config(p, &cfg, ka, cpus.map(|c| c.sender));
    ca.peers.push(PeerConfig {
        name: "b".into(),
        public_key: pb,
        addr: Some(
            b.local_addr()
                .map_err(|e| Error::bench_by("the receiving node has no address", e))?,
        ),
    });
    let a = Node::start(ca).map_err(|e| Error::bench_by("cannot start the sending node", e))?;
    let me = a.add_owner(own);
    let peer = a
        .peer_id("b")
        .ok_or_else(|| Error::bench("peer b missing"))?;
    Ok(Hosts { a, b, peer, me })
}

fn one_run(size: usize, piggyback: bool, p: &Params, cpus: Option<Cpus>) -> Result<Sample> {
    // Urgent latencies are recorded once `armed` (the warm-up message is not one of them).
    let t0 = Instant::now();
    let armed = Arc::new(AtomicBool::new(false));
    let lat = Arc::new(Mutex::new(Vec::new()));
    let handler = (p.receiver == Receiver::Handler)
        .then(|| latency_handler(Arc::clone(&armed), Arc::clone(&lat), t0));
    let Hosts { a, b, peer, me } = start_hosts(p, piggyback, cpus, handler)?;

    // Warm-up: handshake and owner introduction out of the timed window.
    let mut rng = SimRng::new(random_seed()?);
    let mut payload = vec![0u8; size];
    fill(&mut rng, &mut payload);
    a.send(peer, me, None, &payload, Urgency::Urgent, Scope::Encrypt)?;
    a.flush(peer, Duration::from_secs(5))
        .map_err(|e| Error::bench_by("warm-up message not acknowledged", e))?;
    while b.recv(Some(Duration::from_millis(1))).is_some() {}

    let stop = Arc::new(AtomicBool::new(false));
    armed.store(true, Ordering::Relaxed);
    let receiver = (p.receiver == Receiver::Thread).then(|| {
        receiving_thread(
            Arc::clone(&b),
            Arc::clone(&stop),
            cpus.map(|c| c.receiver),
            t0,
        )
    });

    let (sa, sb) = (a.stats(), b.stats());
    let cpu0 = process_cpu();
    let start = Instant::now();
    let end = start.duration_since(t0) + Duration::from_secs_f64(p.seconds);
    let stamper = Stamper::new(t0, p.urgent, rng, payload);
    let sent = match p.sender {
        SenderKind::Thread => {
            let sender = Sender {
                node: &a,
                peer,
                me,
                end,
            };
            on_cpu(cpus.map(|c| c.sender), || sender.run(stamper))
        }
        SenderKind::Source => {
            let (done, finished) = std::sync::mpsc::sync_channel(1);
            let per_call = source_batches(size, p.max_datagram);
            a.set_source(source(peer, me, end, per_call, stamper, done));
            let limit = Duration::from_secs_f64(p.seconds) + Duration::from_secs(30);
            finished
                .recv_timeout(limit)
                .map_err(|_| Error::bench("the send source did not finish"))
                .and_then(|r| r)
        }
    };
    let elapsed = start.elapsed().as_secs_f64();
    let (ea, eb) = (a.stats(), b.stats());
    let cpu = (process_cpu() - cpu0).as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    armed.store(false, Ordering::Relaxed);
    let thread_lat = match receiver {
        Some(r) => r
            .join()
            .map_err(|_| Error::bench("receiver thread panicked"))??,
        None => Vec::new(),
    };
    sent?;
    a.shutdown();
    if let Ok(b) = Arc::try_unwrap(b) {
        // Stopping the node ends the handler's calls and drops what it held.
        b.shutdown();
    }
    let mut lat = match Arc::try_unwrap(lat) {
        Ok(m) => m.into_inner().unwrap_or_else(|e| e.into_inner()),
        Err(_) => return Err(Error::bench("the receive handler outlived its node")),
    };
    lat.extend(thread_lat);
    let delivered = eb.endpoint.messages_delivered - sb.endpoint.messages_delivered;
    let dgrams = ea.endpoint.data_datagrams_sent - sa.endpoint.data_datagrams_sent;
    let first_tx = ea.endpoint.messages_sent - sa.endpoint.messages_sent;
    lat.sort_by(f64::total_cmp);
    let pct = |q: f64| percentile(&lat, q);
    Ok(Sample {
        msgs_per_s: delivered as f64 / elapsed,
        dgrams_per_s: dgrams as f64 / elapsed,
        msgs_per_dgram: first_tx as f64 / (dgrams as f64).max(1.0),
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        urgent: lat.len(),
        cpu_us: cpu * 1e6 / (delivered as f64).max(1.0),
        lost: 0.0,
    })
}

/// The sending application's messages: `BATCH` copies of a random payload, each stamped with
/// the time it is handed over and an urgent flag (a share `urgent` of them).
struct Stamper {
    t0: Instant,
    urgent: f64,
    rng: SimRng,
    payloads: Vec<Vec<u8>>,
    urgency: [Urgency; BATCH],
}

impl Stamper {
    fn new(t0: Instant, urgent: f64, rng: SimRng, payload: Vec<u8>) -> Self {
        Stamper {
            t0,
            urgent,
            rng,
            payloads: vec![payload; BATCH],
            urgency: [Urgency::Default; BATCH],
        }
    }

    /// The time since the start, or `None` once it is `end`: one clock read per batch serves
    /// both the stop check and the stamp.
    fn now(&self, end: Duration) -> Option<Duration> {
        Some(self.t0.elapsed()).filter(|&now| now < end)
    }

    /// The next batch, stamped `now` (its messages are all handed over at this instant).
    fn stamp(&mut self, now: Duration) -> [Outgoing<'_>; BATCH] {
        let ns = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
        for (p, u) in self.payloads.iter_mut().zip(self.urgency.iter_mut()) {
            let urgent = self.rng.chance(self.urgent);
            p[..8].copy_from_slice(&ns.to_le_bytes());
            p[8] = u8::from(urgent);
            *u = if urgent {
                Urgency::Urgent
            } else {
                Urgency::Default
            };
        }
        std::array::from_fn(|i| Outgoing {
            data: &self.payloads[i],
            urgency: self.urgency[i],
            scope: Scope::Encrypt,
        })
    }
}

/// The sending application on a thread of its own: batches of stamped messages, as fast as the
/// channel takes them, until `end`.
struct Sender<'a> {
    node: &'a Node,
    peer: PeerId,
    me: OwnerId,
    end: Duration,
}

impl Sender<'_> {
    fn run(&self, mut stamper: Stamper) -> Result<()> {
        while let Some(now) = stamper.now(self.end) {
            let msgs = stamper.stamp(now);
            match self.node.send_batch(self.peer, self.me, None, &msgs) {
                // Messages past a partial batch were never accepted: the next batch replaces them.
                Ok(q) if q.count == BATCH => {}
                Ok(_) | Err(NodeError::Proto(sealink_proto::Error::QueueFull(_))) => {
                    // Back-pressure: the window is full until acknowledgements free a batch's room.
                    match self
                        .node
                        .wait_room(self.peer, BATCH, Duration::from_secs(5))
                    {
                        Ok(_) | Err(NodeError::Timeout(_)) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Datagrams' worth of messages a source queues per call before the round transmits them.
/// Fewer means more rounds (a receive and a send system call each) per message: at 64 B, 13
/// datagrams' worth gave 11.2M msgs/s and 32 gave 14.3M; a whole window (2,048 messages, 100
/// datagrams) gave no more than 32 and a higher urgent p99 (RESULTS §19b).
const SOURCE_DATAGRAMS: usize = 32;

/// Batches a source queues per call: [`SOURCE_DATAGRAMS`] full datagrams of `size`-byte
/// messages (each with its 2-byte MSG_RUN length), at least one batch.
fn source_batches(size: usize, max_datagram: usize) -> usize {
    (SOURCE_DATAGRAMS * max_datagram / (size + 2) / BATCH).max(1)
}

/// The sending application as a [`Source`] on the sending node's I/O thread: the same batches
/// as [`Sender`], queued while the channel has room, until `end`; then it reports on `done`.
fn source(
    peer: PeerId,
    me: OwnerId,
    end: Duration,
    batches_per_call: usize,
    mut stamper: Stamper,
    done: std::sync::mpsc::SyncSender<Result<()>>,
) -> Source {
    Source::new(move |out: &mut Outbox<'_>| {
        for _ in 0..batches_per_call {
            let Some(now) = stamper.now(end) else {
                let _ = done.try_send(Ok(()));
                return Supply::Done;
            };
            let msgs = stamper.stamp(now);
            match out.send_batch(peer, me, None, &msgs) {
                Ok(q) if q.count == BATCH => {}
                // Back-pressure: called again when acknowledgements free room.
                Ok(_) | Err(NodeError::Proto(sealink_proto::Error::QueueFull(_))) => {
                    return Supply::More;
                }
                Err(e) => {
                    let _ = done.try_send(Err(e.into()));
                    return Supply::Done;
                }
            }
        }
        Supply::More
    })
}
