//! The QUIC peer of `sealink-lab bench datagram --peer quic`: the same workload over quinn on loopback.
//!
//! Same messages as the sealink runs: `size` bytes, the first 8 the send time (nanoseconds since a
//! shared start instant), byte 8 the urgent flag (5% by default), then a sequence number (bytes
//! 9..17, when the size has room) that the receiver checks; `BATCH` messages stamped at once and
//! handed over in one call. Two quinn endpoints in this process carrying one connection, on one
//! tokio multi-thread runtime with a worker per core (quinn as it is usually deployed), or, placed
//! `split` (see [`super::placement`]), each host on a single-threaded runtime pinned to a CPU of
//! its own:
//!
//! - **stream**: one bidirectional stream (only the client half is written) carrying the messages
//!   length-prefixed (2 bytes). Reliable and ordered, as a sealink channel is. An urgent message
//!   cannot overtake the bytes queued before it: QUIC has no urgency within a stream.
//! - **datagram**: each message one QUIC DATAGRAM frame (RFC 9221; quinn packs several frames into
//!   one packet), no acknowledgements of our own: unreliable, losses counted and shown.
//!
//! The stream is the fair comparison: it gives what sealink's channel gives (every message
//! delivered once, in order, retransmitted when lost, under a window of outstanding messages).
//! The datagram variant does less work (no retransmission state, no reassembly, no order) and is
//! shown as quinn's upper bound; adding our own acks would only make it slower, so none are added.
//!
//! Configuration, and why it is fair:
//! - TLS 1.3 through rustls with the aws-lc-rs provider restricted to `TLS13_AES_128_GCM_SHA256`:
//!   packets are sealed with AES-128-GCM by aws-lc, the AEAD and library sealink uses. The
//!   certificate is self-signed (rcgen) and pinned as the client's only root.
//! - Congestion control: quinn's default (CUBIC). Loopback loses nothing unless a buffer overflows.
//! - Datagram size: `initial_mtu` = the sealink run's `--max-datagram` (clamped to QUIC's
//!   1200..=65527) and MTU discovery off, so both systems build datagrams of the same size. Two
//!   quinn defaults are sized for 1,200-byte datagrams and would keep it from using larger ones
//!   (RESULTS.md §19a): its initial congestion window (14,720 bytes: smaller than one datagram
//!   past that, so nothing left) is set by RFC 9002's rule for the size, and its GSO batches
//!   (10 datagrams: past 6,550 bytes more than one `sendmsg` takes, and quinn-udp drops the
//!   `EMSGSIZE` silently) are capped to what fits 64 KiB ([`GsoWithin64k`]).
//! - Outstanding data: `send_window` and the receive windows = sealink's window of messages times
//!   the framed message size, so neither side queues more than the other before back-pressure.
//! - Sockets: 8 MiB send and receive buffers (forced past the sysctl when root), as sealink's.
//!   quinn uses GSO/GRO through quinn-udp by default, as sealink does.

use std::io::IoSliceMut;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use quinn::congestion::CubicConfig;
use quinn::rustls;
use quinn::{
    AsyncUdpSocket, ClientConfig, Connection, Endpoint, EndpointConfig, Runtime, ServerConfig,
    TokioRuntime, TransportConfig, UdpPoller, VarInt,
};
use sealink_proto::sim::SimRng;
use tokio::runtime::Handle;

use super::placement::{Cpus, on_cpu};
use super::{fill, random_seed};
use crate::error::{Error, Result};

/// Bytes of the length prefix of each message on the stream.
const PREFIX: usize = 2;
/// Bytes of each message that carry the send time and the urgent flag (as the sealink runs).
const STAMP: usize = 9;
/// Socket buffer size requested, as sealink-udp's default.
const SOCKET_BUFFER: usize = 8 << 20;
/// How long the datagram receiver waits for stragglers after the sender stops.
const DRAIN_IDLE: Duration = Duration::from_millis(100);
const ALPN: &[u8] = b"sealink-bench";

/// The peer systems `sealink-lab bench datagram --peer` runs beside sealink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// quinn on loopback, stream and datagram variants.
    Quic,
}

/// Parses `--peer`.
pub fn parse_peer(s: &str) -> std::result::Result<Peer, String> {
    match s.trim() {
        "quic" => Ok(Peer::Quic),
        other => Err(format!("unknown peer {other:?} (known: quic)")),
    }
}

/// The configuration in one line, for the bench's header.
pub const DESCRIPTION: &str = "quinn 0.11 (tokio: shared, one multi-thread runtime with a worker per core; split, a single-threaded runtime per host), TLS 1.3 \
    TLS13_AES_128_GCM_SHA256 via rustls/aws-lc-rs, CUBIC, MTU = --max-datagram, window as ours";

/// Which QUIC service carries the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// One reliable, ordered stream of length-prefixed messages.
    Stream,
    /// One unreliable QUIC datagram per message, no acknowledgements of ours.
    Datagram,
}

impl Variant {
    pub fn label(self) -> &'static str {
        match self {
            Variant::Stream => "quic-strm",
            Variant::Datagram => "quic-dgrm",
        }
    }
}

/// The workload of one run (the same fields the sealink runs take).
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    pub size: usize,
    pub seconds: f64,
    pub urgent: f64,
    /// Messages outstanding before back-pressure (sealink's window).
    pub window: usize,
    /// Messages stamped and handed over per call.
    pub batch: usize,
    /// Largest UDP payload.
    pub max_datagram: usize,
}

/// How long a quinn run may take beyond its timed window before it is stopped as stalled.
/// Nothing in quinn times out on its own: with its default initial window, datagrams of 16 KiB
/// and more never left (RESULTS.md §18h, fixed by [`cubic`]); a stall of any other cause ends
/// the same way.
pub const STALL: Duration = Duration::from_secs(30);

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Messages delivered to the receiver within the timed window.
    pub delivered: u64,
    /// Seconds of the timed window.
    pub elapsed: f64,
    /// Messages handed to quinn within the timed window.
    pub sent: u64,
    /// Messages received by the end of the run (after the stream's end, or the datagram drain).
    pub received: u64,
    /// UDP datagrams the client sent within the timed window (acks and probes included).
    pub datagrams: u64,
    /// Process CPU time over the timed window, in seconds.
    pub cpu: f64,
    /// Urgent-message latencies in microseconds, unsorted.
    pub latencies_us: Vec<f64>,
}

/// Process CPU time (user + system, all threads): what getrusage(RUSAGE_SELF) sums, in ns.
pub fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Runs `w` once over QUIC `variant`. Fails if a stream message arrives out of order, is lost or
/// corrupted, or if quinn fails.
///
/// Placed `shared` (`cpus` is `None`): both endpoints and all tasks on one multi-thread runtime
/// with a worker per core. Placed `split`: each host on a single-threaded runtime of its own,
/// pinned to its CPU; the client endpoint and the sending loop on the sender's, the server
/// endpoint, its connection and the receiving task on the receiver's.
pub fn one_run(variant: Variant, w: &Workload, cpus: Option<Cpus>) -> Result<Outcome> {
    let Some(cpus) = cpus else {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cores)
            .enable_all()
            .build()
            .map_err(|e| Error::bench_by("cannot start the tokio runtime", e))?;
        return rt.block_on(hosts(variant, w, rt.handle().clone()));
    };
    let single = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::bench_by("cannot start the tokio runtime", e))
    };
    let receiving = single()?;
    let handle = receiving.handle().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::scope(|s| {
        // The receiving host's runtime runs its tasks until the sending host is done.
        let server = s.spawn(move || {
            on_cpu(Some(cpus.receiver), || {
                receiving.block_on(async {
                    let _ = stopped.await;
                });
                Ok(())
            })
        });
        let out = on_cpu(Some(cpus.sender), || {
            single()?.block_on(hosts(variant, w, handle))
        });
        let _ = stop.send(());
        server
            .join()
            .map_err(|_| Error::bench("the receiving host's thread panicked"))??;
        out
    })
}

/// [`run_hosts`], stopped with an error if it takes `STALL` longer than the timed window.
async fn hosts(variant: Variant, w: &Workload, server_rt: Handle) -> Result<Outcome> {
    hosts_within(variant, w, server_rt, STALL).await
}

async fn hosts_within(
    variant: Variant,
    w: &Workload,
    server_rt: Handle,
    stall: Duration,
) -> Result<Outcome> {
    let limit = Duration::from_secs_f64(w.seconds) + stall;
    let what = || format!("quinn ({}, {} B datagrams)", variant.label(), mtu(w));
    within(limit, what, run_hosts(variant, w, server_rt)).await
}

/// `run`, or an error naming `what` if it has not finished after `limit`.
async fn within<T>(
    limit: Duration,
    what: impl FnOnce() -> String,
    run: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, run).await.unwrap_or_else(|_| {
        Err(Error::bench(format!(
            "{} did not finish within {} s: its handshake or transfer stalled",
            what(),
            limit.as_secs()
        )))
    })
}

/// Connects the two hosts, the receiving one on runtime `server_rt`, and runs `variant`.
async fn run_hosts(variant: Variant, w: &Workload, server_rt: Handle) -> Result<Outcome> {
    let (server, client, conn_c, conn_s) = connect(w, &server_rt).await?;
    let out = match variant {
        Variant::Stream => stream_run(&conn_c, &conn_s, w, &server_rt).await,
        Variant::Datagram => datagram_run(&conn_c, &conn_s, w, &server_rt).await,
    };
    conn_c.close(VarInt::from_u32(0), b"done");
    client.wait_idle().await;
    server.close(VarInt::from_u32(0), b"done");
    out
}

fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    p.cipher_suites = vec![rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256];
    Arc::new(p)
}

fn transport(w: &Workload) -> Result<Arc<TransportConfig>> {
    let window = (w.window * (w.size + PREFIX)) as u64;
    let varint =
        |v: u64| VarInt::from_u64(v).map_err(|e| Error::bench_by("QUIC window too large", e));
    let mut t = TransportConfig::default();
    t.send_window(window)
        .stream_receive_window(varint(window)?)
        .receive_window(varint(window)?)
        .datagram_send_buffer_size(window as usize)
        .datagram_receive_buffer_size(Some(window as usize))
        .initial_mtu(mtu(w))
        .mtu_discovery_config(None)
        .congestion_controller_factory(Arc::new(cubic(mtu(w))));
    Ok(Arc::new(t))
}

/// CUBIC with RFC 9002's initial window for `mtu`-byte datagrams. quinn's default (14,720 bytes,
/// sized for 1,200-byte datagrams) is smaller than one datagram past 14,720 bytes: the client's
/// first datagram was blocked by congestion control forever (the stall of RESULTS.md §18h, §19a).
fn cubic(mtu: u16) -> CubicConfig {
    let mut c = CubicConfig::default();
    c.initial_window(initial_window(u64::from(mtu)));
    c
}

/// RFC 9002 §7.2: `min(10 * max_datagram_size, max(2 * max_datagram_size, 14720))`.
fn initial_window(mtu: u64) -> u64 {
    (10 * mtu).min((2 * mtu).max(14_720))
}

/// QUIC's largest UDP payload is 65527; its smallest 1200.
fn mtu(w: &Workload) -> u16 {
    w.max_datagram.clamp(1200, 65527) as u16
}

fn socket() -> Result<UdpSocket> {
    let s = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .map_err(|e| Error::bench_by("cannot bind a loopback UDP socket", e))?;
    // As sealink-udp: force large buffers when root may, else take what the sysctl allows.
    use rustix::net::sockopt;
    if sockopt::set_socket_send_buffer_size_force(s.as_fd(), SOCKET_BUFFER).is_err() {
        let _ = sockopt::set_socket_send_buffer_size(s.as_fd(), SOCKET_BUFFER);
    }
    if sockopt::set_socket_recv_buffer_size_force(s.as_fd(), SOCKET_BUFFER).is_err() {
        let _ = sockopt::set_socket_recv_buffer_size(s.as_fd(), SOCKET_BUFFER);
    }
    Ok(s)
}

/// Largest UDP payload of one IPv4 datagram: a GSO batch (its segments together) must fit it.
const MAX_IPV4_UDP_PAYLOAD: usize = 65_507;

/// quinn's tokio socket with its GSO batches kept within one IPv4 datagram.
///
/// quinn batches up to 10 datagrams of the path MTU into one GSO send. Past 6,550 bytes that
/// exceeds the 65,507 bytes the kernel takes in one `sendmsg`: it answers `EMSGSIZE`, which
/// quinn-udp counts as sent (it expects it only of MTU probes), so every batch is lost and the
/// connection falls back to 1,200 bytes (RESULTS.md §19a). Capping the segments per
/// batch lets quinn use the datagram size it was given, as sealink does.
#[derive(Debug)]
struct GsoWithin64k {
    inner: Arc<dyn AsyncUdpSocket>,
    /// The datagram size the endpoint sends at.
    segment: usize,
}

impl AsyncUdpSocket for GsoWithin64k {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &quinn::udp::Transmit) -> std::io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> Poll<std::io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        gso_segments(self.inner.max_transmit_segments(), self.segment)
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// Segments per GSO send: what the socket allows, as many `segment`-byte datagrams as fit in one
/// IPv4 datagram, and at least one.
fn gso_segments(allowed: usize, segment: usize) -> usize {
    allowed.min(MAX_IPV4_UDP_PAYLOAD / segment.max(1)).max(1)
}

/// Two endpoints and one established connection (client side, server side); the server's
/// endpoint, connection and accepting task run on `server_rt`.
async fn connect(
    w: &Workload,
    server_rt: &Handle,
) -> Result<(Endpoint, Endpoint, Connection, Connection)> {
    let tls = |e: rustls::Error| Error::bench_by("TLS configuration", e);
    let quic = |e: quinn::crypto::rustls::NoInitialCipherSuite| {
        Error::bench_by("QUIC TLS configuration", e)
    };
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
        .map_err(|e| Error::bench_by("cannot generate the certificate", e))?;
    let cert = ck.cert.der().clone();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der());

    let mut server_tls = rustls::ServerConfig::builder_with_provider(crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key.into())
        .map_err(tls)?;
    server_tls.alpn_protocols = vec![ALPN.to_vec()];
    let mut server_cfg = ServerConfig::with_crypto(Arc::new(
        quinn::crypto::rustls::QuicServerConfig::try_from(server_tls).map_err(quic)?,
    ));
    server_cfg.transport_config(transport(w)?);

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).map_err(tls)?;
    let mut client_tls = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client_tls.alpn_protocols = vec![ALPN.to_vec()];
    let mut client_cfg = ClientConfig::new(Arc::new(
        quinn::crypto::rustls::QuicClientConfig::try_from(client_tls).map_err(quic)?,
    ));
    client_cfg.transport_config(transport(w)?);

    let mut ep_cfg = EndpointConfig::default();
    ep_cfg
        .max_udp_payload_size(mtu(w))
        .map_err(|e| Error::bench_by("QUIC endpoint configuration", e))?;
    let endpoint = |server: Option<ServerConfig>| {
        let io = |e| Error::bench_by("cannot start a quinn endpoint", e);
        let inner = TokioRuntime.wrap_udp_socket(socket()?).map_err(io)?;
        let sock = Arc::new(GsoWithin64k {
            inner,
            segment: usize::from(mtu(w)),
        });
        Endpoint::new_with_abstract_socket(ep_cfg.clone(), server, sock, Arc::new(TokioRuntime))
            .map_err(io)
    };
    let server = {
        // quinn spawns the endpoint's driver on the runtime it is created in.
        let _on = server_rt.enter();
        endpoint(Some(server_cfg))?
    };
    let mut client = endpoint(None)?;
    client.set_default_client_config(client_cfg);
    let addr = server
        .local_addr()
        .map_err(|e| Error::bench_by("the quinn server has no address", e))?;
    let connecting = client
        .connect(addr, "localhost")
        .map_err(|e| Error::bench_by("cannot connect over QUIC", e))?;
    // The server must accept while the client connects: its side runs as a task.
    let srv = server.clone();
    let accepting = server_rt.spawn(async move {
        match srv.accept().await {
            Some(incoming) => incoming
                .await
                .map_err(|e| Error::bench_by("QUIC handshake (server)", e)),
            None => Err(Error::bench("the quinn server closed before accepting")),
        }
    });
    let conn_c = connecting
        .await
        .map_err(|e| Error::bench_by("QUIC handshake (client)", e))?;
    let conn_s = accepting
        .await
        .map_err(|e| Error::bench_by("QUIC accept task", e))??;
    Ok((server, client, conn_c, conn_s))
}

/// Stamps `w.batch` copies of `payload` into `buf` (send time, urgent flag, sequence number),
/// each behind a 2-byte length when `prefix`.
fn stamp_batch(
    buf: &mut BytesMut,
    payload: &[u8],
    w: &Workload,
    rng: &mut SimRng,
    now_ns: u64,
    seq: &mut u64,
    prefix: bool,
) {
    buf.clear();
    for _ in 0..w.batch {
        if prefix {
            buf.put_u16_le(payload.len() as u16);
        }
        let start = buf.len();
        buf.put_slice(payload);
        let m = &mut buf[start..];
        m[..8].copy_from_slice(&now_ns.to_le_bytes());
        m[8] = u8::from(rng.chance(w.urgent));
        if let Some(s) = m.get_mut(STAMP..STAMP + 8) {
            s.copy_from_slice(&seq.to_le_bytes());
        }
        *seq += 1;
    }
}

/// Latency of message `m` received at `now` (since `t0`), when it is urgent.
fn urgent_latency(m: &[u8], now: Duration) -> Option<f64> {
    (m[8] == 1).then(|| {
        let mut ns = [0u8; 8];
        ns.copy_from_slice(&m[..8]);
        now.saturating_sub(Duration::from_nanos(u64::from_le_bytes(ns)))
            .as_secs_f64()
            * 1e6
    })
}

/// The sequence number of `m`, when its size has room for one.
fn seq_of(m: &[u8]) -> Option<u64> {
    m.get(STAMP..STAMP + 8)
        .map(|s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
}

/// The sender's generator, a random payload of `w.size` bytes, and the run's start instant.
fn sender(w: &Workload) -> Result<(SimRng, Vec<u8>, Instant)> {
    let mut rng = SimRng::new(random_seed()?);
    let mut payload = vec![0u8; w.size];
    fill(&mut rng, &mut payload);
    Ok((rng, payload, Instant::now()))
}

/// The timed window of a run: when it ends, and the counters at its start.
struct Window {
    t0: Instant,
    start: Instant,
    end: Duration,
    cpu0: Duration,
    udp0: u64,
    seq0: u64,
}

impl Window {
    fn open(t0: Instant, w: &Workload, client: &Connection, seq: u64) -> Self {
        let (cpu0, udp0) = (process_cpu(), client.stats().udp_tx.datagrams);
        let start = Instant::now();
        let end = start.duration_since(t0) + Duration::from_secs_f64(w.seconds);
        Self {
            t0,
            start,
            end,
            cpu0,
            udp0,
            seq0: seq,
        }
    }

    /// The stamp (ns since `t0`) for the next batch, or `None` once the window is over. One clock
    /// read per batch serves both.
    fn next(&self) -> Option<u64> {
        let now = self.t0.elapsed();
        (now < self.end).then(|| u64::try_from(now.as_nanos()).unwrap_or(u64::MAX))
    }

    /// The window's figures, `delivered` counted from the first message sent in it; `received`
    /// and the latencies are filled in once the receiver is done.
    fn close(&self, client: &Connection, seq: u64, delivered: u64) -> Outcome {
        Outcome {
            elapsed: self.start.elapsed().as_secs_f64(),
            delivered: delivered - self.seq0,
            cpu: (process_cpu() - self.cpu0).as_secs_f64(),
            datagrams: client.stats().udp_tx.datagrams - self.udp0,
            sent: seq - self.seq0,
            ..Outcome::default()
        }
    }
}

async fn stream_run(
    client: &Connection,
    server: &Connection,
    w: &Workload,
    server_rt: &Handle,
) -> Result<Outcome> {
    let (mut tx, _) = client
        .open_bi()
        .await
        .map_err(|e| Error::bench_by("cannot open the QUIC stream", e))?;
    let (mut rng, payload, t0) = sender(w)?;
    let mut seq = 0u64;
    let mut buf = BytesMut::with_capacity(w.batch * (w.size + PREFIX));
    // Warm-up: one batch announces the stream and is read before the timed window.
    stamp_batch(&mut buf, &payload, w, &mut rng, 0, &mut seq, true);
    tx.write_all(&buf)
        .await
        .map_err(|e| Error::bench_by("QUIC stream write", e))?;
    let (_, mut rx) = server
        .accept_bi()
        .await
        .map_err(|e| Error::bench_by("cannot accept the QUIC stream", e))?;
    let warm = buf.len();
    let mut skip = vec![0u8; warm];
    rx.read_exact(&mut skip)
        .await
        .map_err(|e| Error::bench_by("QUIC stream warm-up read", e))?;

    let count = Arc::new(AtomicU64::new(seq));
    let counter = Arc::clone(&count);
    let (size, first) = (w.size, seq);
    let receiver = server_rt.spawn(async move {
        let mut pending = BytesMut::new();
        let mut lat = Vec::new();
        let mut expect = first;
        loop {
            let chunk = match rx.read_chunk(usize::MAX, true).await {
                Ok(Some(c)) => c.bytes,
                Ok(None) => break,
                Err(e) => return Err(Error::bench_by("QUIC stream read", e)),
            };
            let now = t0.elapsed();
            pending.extend_from_slice(&chunk);
            let mut at = 0;
            let mut n = 0u64;
            while let Some(len) = pending.get(at..at + PREFIX) {
                let len = usize::from(u16::from_le_bytes([len[0], len[1]]));
                let Some(m) = pending.get(at + PREFIX..at + PREFIX + len) else {
                    break;
                };
                if len != size {
                    return Err(Error::bench(format!(
                        "QUIC stream: {len}-byte message, sent {size}"
                    )));
                }
                if let Some(s) = seq_of(m) {
                    if s != expect {
                        return Err(Error::bench(format!(
                            "QUIC stream: message {s} arrived where {expect} was due"
                        )));
                    }
                }
                expect += 1;
                lat.extend(urgent_latency(m, now));
                at += PREFIX + len;
                n += 1;
            }
            let _ = pending.split_to(at);
            counter.fetch_add(n, Ordering::Relaxed);
        }
        Ok(lat)
    });

    let window = Window::open(t0, w, client, seq);
    while let Some(ns) = window.next() {
        stamp_batch(&mut buf, &payload, w, &mut rng, ns, &mut seq, true);
        // Blocks while the window is full (flow control, send window, congestion window).
        tx.write_all(&buf)
            .await
            .map_err(|e| Error::bench_by("QUIC stream write", e))?;
    }
    let mut out = window.close(client, seq, count.load(Ordering::Relaxed));
    tx.finish()
        .map_err(|e| Error::bench_by("QUIC stream finish", e))?;
    out.latencies_us = receiver
        .await
        .map_err(|e| Error::bench_by("QUIC receiver task", e))??;
    out.received = count.load(Ordering::Relaxed) - window.seq0;
    Ok(out)
}

async fn datagram_run(
    client: &Connection,
    server: &Connection,
    w: &Workload,
    server_rt: &Handle,
) -> Result<Outcome> {
    let max = client
        .max_datagram_size()
        .ok_or_else(|| Error::bench("the QUIC peer does not take datagrams"))?;
    if w.size > max {
        return Err(Error::bench(format!(
            "{} B messages exceed QUIC's {max} B datagram limit at this MTU",
            w.size
        )));
    }
    let (mut rng, payload, t0) = sender(w)?;
    let mut seq = 0u64;
    let mut buf = BytesMut::with_capacity(w.batch * w.size);
    // Warm-up: one message through before the timed window.
    stamp_batch(&mut buf, &payload, w, &mut rng, 0, &mut seq, false);
    let warm = buf.split().freeze().slice(..w.size);
    seq = 1;
    client
        .send_datagram_wait(warm)
        .await
        .map_err(|e| Error::bench_by("QUIC datagram send", e))?;
    server
        .read_datagram()
        .await
        .map_err(|e| Error::bench_by("QUIC datagram warm-up read", e))?;

    let count = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&count);
    let conn = server.clone();
    let size = w.size;
    let receiver = server_rt.spawn(async move {
        let mut lat = Vec::new();
        let mut last = 0u64;
        loop {
            let d = match tokio::time::timeout(DRAIN_IDLE, conn.read_datagram()).await {
                Ok(Ok(d)) => d,
                // Closed, or quiet for DRAIN_IDLE after the sender stopped.
                Ok(Err(_)) | Err(_) => break,
            };
            let now = t0.elapsed();
            if d.len() != size {
                return Err(Error::bench(format!(
                    "QUIC datagram of {} B, sent {size}",
                    d.len()
                )));
            }
            if let Some(s) = seq_of(&d) {
                // Unreliable: gaps are losses; a message never comes twice.
                if s <= last {
                    return Err(Error::bench(format!("QUIC datagram {s} after {last}")));
                }
                last = s;
            }
            lat.extend(urgent_latency(&d, now));
            counter.fetch_add(1, Ordering::Relaxed);
        }
        Ok(lat)
    });

    let window = Window::open(t0, w, client, seq);
    while let Some(ns) = window.next() {
        stamp_batch(&mut buf, &payload, w, &mut rng, ns, &mut seq, false);
        let batch: Bytes = buf.split().freeze();
        for i in 0..w.batch {
            // Waits for room in the send buffer rather than dropping older datagrams.
            client
                .send_datagram_wait(batch.slice(i * w.size..(i + 1) * w.size))
                .await
                .map_err(|e| Error::bench_by("QUIC datagram send", e))?;
        }
    }
    let mut out = window.close(client, seq, window.seq0 + count.load(Ordering::Relaxed));
    out.latencies_us = receiver
        .await
        .map_err(|e| Error::bench_by("QUIC receiver task", e))??;
    out.received = count.load(Ordering::Relaxed);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick(size: usize) -> Workload {
        Workload {
            size,
            seconds: 0.2,
            urgent: 0.05,
            window: 2048,
            batch: 32,
            max_datagram: 1400,
        }
    }

    /// Shared, and split where there are two CPUs.
    fn placements() -> Vec<Option<Cpus>> {
        let split = super::super::placement::Placement::Split.cpus();
        [None]
            .into_iter()
            .chain(split.ok().flatten().map(Some))
            .collect()
    }

    #[test]
    fn stream_delivers_every_message_in_order() {
        for (size, cpus) in [64, 1024].into_iter().zip(placements().into_iter().cycle()) {
            let o = one_run(Variant::Stream, &quick(size), cpus).unwrap();
            // The receiver checked sizes and sequence numbers; everything sent arrived.
            assert!(o.sent > 1000, "{size} B: only {} messages sent", o.sent);
            assert_eq!(o.received, o.sent, "{size} B: stream lost messages");
            assert!(o.delivered > 0 && o.delivered <= o.sent);
            assert!(o.elapsed >= 0.2 && o.elapsed < 5.0);
            assert!(o.cpu > 0.0 && o.datagrams > 0);
            assert!(!o.latencies_us.is_empty());
            assert!(o.latencies_us.iter().all(|l| (0.0..5e6).contains(l)));
        }
    }

    #[test]
    fn datagrams_arrive_once_and_increasing() {
        let cpus = placements().pop().flatten();
        let o = one_run(Variant::Datagram, &quick(64), cpus).unwrap();
        assert!(o.sent > 1000, "only {} datagrams sent", o.sent);
        assert!(o.received > 0 && o.received <= o.sent);
        assert!(o.delivered <= o.received);
        assert!(o.cpu > 0.0 && o.datagrams > 0);
    }

    /// A run that cannot finish ends with an error within its limit instead of hanging the
    /// bench.
    #[test]
    fn a_stalled_quinn_run_is_stopped_with_an_error() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let t = Instant::now();
        let r: Result<()> = rt.block_on(within(
            Duration::from_secs(1),
            || "quinn (test)".to_string(),
            std::future::pending(),
        ));
        let e = r.unwrap_err().to_string();
        assert!(e.contains("quinn (test) did not finish within 1 s"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    /// quinn carries datagrams of 64 KiB on loopback, full of messages, as sealink does: with
    /// its defaults the handshake never completed (RESULTS.md §18h), and at 8 KiB every GSO
    /// batch was dropped until it fell back to 1,200 bytes (§19a).
    #[test]
    fn quinn_carries_the_datagram_size_it_is_given() {
        for max_datagram in [8192, 65507] {
            let w = Workload {
                max_datagram,
                ..quick(64)
            };
            let o = one_run(Variant::Stream, &w, None).unwrap();
            assert!(o.sent > 0 && o.received >= o.sent, "{o:?}");
            // 1,200-byte datagrams would carry 17.5 of these messages each.
            let per = o.sent as f64 / o.datagrams.max(1) as f64;
            assert!(per > 50.0, "{max_datagram}: {per:.1} messages per datagram");
        }
    }

    #[test]
    fn quinn_gets_rfc_9002s_initial_window_and_gso_batches_within_64_kib() {
        assert_eq!(initial_window(1200), 12_000);
        assert_eq!(initial_window(1400), 14_000);
        assert_eq!(initial_window(1472), 14_720);
        assert_eq!(initial_window(8192), 16_384);
        assert_eq!(initial_window(65507), 131_014);
        assert_eq!(gso_segments(10, 1400), 10);
        assert_eq!(gso_segments(10, 8192), 7);
        assert_eq!(gso_segments(10, 65507), 1);
        assert_eq!(gso_segments(1, 1400), 1);
        assert_eq!(gso_segments(64, 0), 64);
    }

    #[test]
    fn process_cpu_advances() {
        let a = process_cpu();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(process_cpu() > a);
    }
}
