//! The lab's command line: the clap arguments of `sealink-lab bench ...` and `sealink-lab
//! relay`, their value parsers, and the step from parsed arguments to each entry point's
//! `Params`. The `sealink-lab` binary (`main.rs`) puts [`BenchCommand`] and [`RelayArgs`] into
//! its command tree and hands them to [`run_bench`] and [`run_relay`]; flags, defaults and
//! checks of the lab's commands live here, beside the code that uses them.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use sealink_crypto::SuiteId;

use crate::error::Result;
use crate::{bench, relay};

/// `sealink-lab relay --help`'s examples and notes (the binary sets it as the command's after-help).
pub const RELAY_HELP: &str = "Examples:
  sealink-lab relay --listen 10.0.1.1:51820 --to 10.0.2.2:51820 --loss 0.05 --corrupt 0.02 --seed 7
  sealink-lab relay --listen 127.0.0.1:9000 --to 127.0.0.1:7878 --replay 0.1 --stats-every 1

Every client source address gets its own upstream socket, so replies go back to the client they
belong to. Each direction draws its faults independently: a lost datagram is dropped; a reordered
one is held back until 1..=--reorder-depth later ones have passed (at most 25 ms); a duplicated one
is sent twice; a corrupted one has one random bit flipped; a replayed one is captured as it goes
out and the copy is sent again --replay-delay-ms later. Counters print on stdout at SIGINT or
SIGTERM (and every --stats-every seconds).";

#[derive(Debug, Args)]
pub struct RelayArgs {
    /// UDP address clients send to (ADDR:PORT; port 0 picks one, printed on stderr)
    #[arg(long)]
    listen: String,
    /// UDP address datagrams are relayed to (ADDR:PORT)
    #[arg(long)]
    to: String,
    /// Probability of dropping a datagram
    #[arg(long, default_value_t = 0.0, value_parser = relay::parse_probability)]
    loss: f64,
    /// Probability of holding a datagram back behind later ones
    #[arg(long, default_value_t = 0.0, value_parser = relay::parse_probability)]
    reorder: f64,
    /// A held datagram is released after 1..=N later ones
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    reorder_depth: u32,
    /// Probability of sending a datagram twice
    #[arg(long, default_value_t = 0.0, value_parser = relay::parse_probability)]
    duplicate: f64,
    /// Probability of flipping one random bit of a datagram
    #[arg(long, default_value_t = 0.0, value_parser = relay::parse_probability)]
    corrupt: f64,
    /// Probability of capturing a datagram and sending a copy again later
    #[arg(long, default_value_t = 0.0, value_parser = relay::parse_probability)]
    replay: f64,
    /// Delay before a captured datagram is replayed, in milliseconds
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    replay_delay_ms: u64,
    /// Seed of the fault RNG (default: random, printed)
    #[arg(long)]
    seed: Option<u64>,
    /// Bandwidth limit per direction and client, in Mbit/s (default: none)
    #[arg(long, value_parser = relay::parse_rate)]
    rate_limit: Option<f64>,
    /// Also print the counters every SECS seconds
    #[arg(long, value_parser = parse_seconds)]
    stats_every: Option<f64>,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Protocol data path (seal + open of one datagram) against the raw AEAD library
    #[command(
        after_help = "Example:\n  sealink-lab bench seal --sizes 64,1400 --suites aes128-gcm --seconds 0.5 --runs 7"
    )]
    Seal(SealArgs),
    /// Table 1 of paper 001 redone: bulk ciphers and hashes, public-key operations, and GHASH
    /// with and without the carry-less multiply instruction
    #[command(
        after_help = "Examples:\n  sealink-lab bench crypto\n  sealink-lab bench crypto --seconds 1 --runs 7 --size 16384\n  sealink-lab bench crypto --quick\n\nThe software-only GHASH figure comes from bench/ghash-soft.sh (or --ghash-soft, which runs it)."
    )]
    Crypto(CryptoArgs),
    /// Paper 000 rerun: protocol stacks through the parallel engine (PLP and CLP), throughput,
    /// speedup, latency breakdown, serial fraction, CSV and SVG plots
    #[command(
        after_help = "Examples:\n  sealink-lab bench stacks\n  sealink-lab bench stacks --workers 2 --seconds 0.5 --runs 7 --out bench-out/stacks\n  sealink-lab bench stacks --quick --stacks baseline,aes128-gcm"
    )]
    Stacks(StacksArgs),
    /// Paper 003 Tables I and II rerun: library, crypto-service and integrated (SO_CRYPT-like)
    /// send paths over loopback TCP; seconds, Gbit/s, writes, copies, context switches, CSV
    #[command(
        after_help = "Examples:\n  sealink-lab bench socket\n  sealink-lab bench socket --size 256 --runs 5 --batch 32 --out bench-out/socket\n  sealink-lab bench socket --quick"
    )]
    Socket(SocketArgs),
    /// Datagram mode over loopback UDP: small-message throughput and urgent-message latency
    /// with piggybacking on and off
    #[command(
        after_help = "Examples:\n  sealink-lab bench datagram\n  sealink-lab bench datagram --sizes 64,256 --seconds 2 --runs 3\n  sealink-lab bench datagram --quick\n  sealink-lab bench datagram --no-gso --max-datagram 65507\n  sealink-lab bench datagram --peer quic --sizes 64,256,1024"
    )]
    Datagram(DatagramArgs),
    /// Paper 002 rerun in virtual time: its five traces, urgency policies U1-U5, encryption
    /// scope and technology, piggybacking; Tables 3-8 and Figures 4-8 as markdown, CSV and SVG
    /// (and over real loopback with --loopback)
    #[command(
        after_help = "Examples:\n  sealink-lab bench adp\n  sealink-lab bench adp --quick --out bench-out/adp\n  sealink-lab bench adp --profiles 1987 --seed 7\n  sealink-lab bench adp --profiles today --loopback"
    )]
    Adp(AdpArgs),
    /// Paper 004 rerun on the CPU: 1400-byte packets through the tunnel's engine, throughput
    /// against workers, order kept or not, batch size, hyper-thread siblings; CSV, SVG, JSON
    #[command(
        after_help = "Examples:\n  sealink-lab bench tunnel-cores\n  sealink-lab bench tunnel-cores --workers 1,2,4,8,16 --seconds 0.5\n  sealink-lab bench tunnel-cores --quick"
    )]
    TunnelCores(TunnelCoresArgs),
    /// Paper 004 Figure 12 rerun: AES-128-GCM throughput against batch size, CPU (engine,
    /// 1..N workers) and GPU (needs a build with --features cuda and a CUDA device), crossover
    #[command(
        after_help = "Examples:\n  sealink-lab bench gpu\n  sealink-lab bench gpu --sizes 65536,131072 --workers 1,16\n  sealink-lab bench gpu --quick\n  sealink-lab bench gpu --strategy naive,naive-streams,no-streams,streams --budget 300\n  sealink-lab bench gpu --packet-size --workers 1,4,16 --strategy naive,naive-streams,no-streams,streams"
    )]
    Gpu(GpuArgs),
    /// Paper 004's sender threads: one communication thread (TCP over loopback) and N
    /// encryption threads, each timed; Figures 8, 10 and 11 and Table 1 on this machine
    #[command(
        after_help = "Examples:\n  sealink-lab bench thread-times\n  sealink-lab bench thread-times --threads 1,2,3,4,5 --volume 268435456\n  sealink-lab bench thread-times --quick"
    )]
    ThreadTimes(ThreadTimesArgs),
    /// Issue 50: a hub with many configured peers against a load generator of simulated peers
    /// over real UDP (network namespaces; needs root): memory per idle peer, up and show times,
    /// handshakes a second, established peers' loss and p99 through handshake storms, a flood
    /// and a reload; with --wire wg, wireguard-go beside sealink
    #[command(
        after_help = "Examples:\n  sealink-lab bench peers --peers 1000 --active 100\n  sealink-lab bench peers --peers 10000 --active 1000 --storm 1000 --flood 10000 --reload 1000 --wire wg\n  sealink-lab bench peers --peers 1000 --active 100 --duration 1 --json\n\nThe hub is the `sealink` binary beside sealink-lab (or --sealink); with --wire wg, wireguard-go and wg from the PATH (or --wireguard-go, --wg) run too, unless --no-wireguard-go."
    )]
    Peers(PeersArgs),
    /// Issue 50: the per-packet cost of cryptokey routing (the allowed-IP lookup) at 100,
    /// 10,000 and 100,000 prefixes
    #[command(
        after_help = "Examples:\n  sealink-lab bench allowed-ips\n  sealink-lab bench allowed-ips --prefixes 100,10000,100000 --seconds 0.5 --runs 7"
    )]
    AllowedIps(AllowedIpsArgs),
}

#[derive(Debug, Args)]
pub struct AllowedIpsArgs {
    /// Prefix counts, comma separated
    #[arg(long, value_delimiter = ',', default_value = "100,10000,100000", value_parser = clap::value_parser!(u32).range(1..=4_000_000))]
    prefixes: Vec<u32>,
    /// Seconds per timed run of one table
    #[arg(long, default_value_t = 0.3, value_parser = parse_seconds)]
    seconds: f64,
    /// Rounds (every table once per round; the median is reported)
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: u32,
    /// Seed of the prefixes and destinations (default: random, printed)
    #[arg(long)]
    seed: Option<u64>,
    /// Directory for allowed-ips.csv and the run record allowed-ips.json
    #[arg(long, default_value = "bench-out/allowed-ips")]
    out: PathBuf,
}

impl AllowedIpsArgs {
    fn params(self) -> bench::allowed_ips::Params {
        bench::allowed_ips::Params {
            prefixes: self.prefixes.into_iter().map(|n| n as usize).collect(),
            seconds: self.seconds,
            runs: self.runs as usize,
            seed: self.seed,
            out: self.out,
        }
    }
}

#[derive(Debug, Args)]
pub struct PeersArgs {
    /// Peers in the hub's config
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    peers: u32,
    /// Peers the generator drives (handshake, echo at --rate)
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    active: u32,
    /// Echo requests a second per active peer
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// Seconds of each measured window (quiet, storm, flood, reload)
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// The wire: sealink, or wg (WireGuard's; wireguard-go runs too)
    #[arg(long, default_value = "sealink", value_parser = parse_wire)]
    wire: bench::peers::loadgen::WireKind,
    /// Idle peers that start their handshakes at once while the active ones send (0: no storm)
    #[arg(long, default_value_t = 0)]
    storm: u32,
    /// Handshake initiations a second from spoofed sources while the active peers send (0: no
    /// flood)
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    flood: u64,
    /// Idle peers a reload removes, and new ones it adds, while the active peers send (0: no
    /// reload)
    #[arg(long, default_value_t = 0)]
    reload: u32,
    /// A rekey storm: the driven peers rekey SECS after the bring-up (their REKEY_AFTER_TIME
    /// shortened, a setting of the lab's own cores), all within a fraction of a second; a
    /// window measures the echoes while they do (0: none). sealink's hub gets
    /// SEALINK_TEST_REKEY_AFTER=SECS, which only a build with the test-only feature
    /// `sealink-tunnel/test-timers` honours (it rekeys by time only the sessions it initiated,
    /// and near REJECT_AFTER_TIME those it answered).
    /// Within [--duration + 2, 170); the later windows then see a rekey every SECS too
    #[arg(long, default_value_t = 0.0, value_name = "SECS")]
    rekey_storm: f64,
    /// Seconds the handshakes of all active (or storm) peers may take
    #[arg(long, default_value_t = 60.0)]
    handshake_timeout: f64,
    /// The echo loop does the active peers' handshake work itself, as before the generator's
    /// handshake worker (to measure what that costs the echoes' timing)
    #[arg(long)]
    inline_handshakes: bool,
    /// With --wire wg: measure sealink only
    #[arg(long)]
    no_wireguard_go: bool,
    /// All driven peers send from one address, each from a port of its own (default: each
    /// from an address of its own; a handshake limiter keys on the address)
    #[arg(long)]
    shared_source: bool,
    /// The hub's binary (default: `sealink` beside this program, else on the PATH)
    #[arg(long)]
    sealink: Option<PathBuf>,
    /// wireguard-go (default: on the PATH)
    #[arg(long)]
    wireguard_go: Option<PathBuf>,
    /// wg (default: on the PATH)
    #[arg(long)]
    wg: Option<PathBuf>,
    /// Print the result as JSON on stdout (the tables otherwise)
    #[arg(long)]
    json: bool,
    /// Directory for peers.csv, peers-echo.csv, peers-result.json and the run record
    #[arg(long, default_value = "bench-out/peers")]
    out: PathBuf,
}

fn parse_wire(s: &str) -> Result<bench::peers::loadgen::WireKind, String> {
    match s {
        "sealink" => Ok(bench::peers::loadgen::WireKind::Sealink),
        "wg" | "wireguard" => Ok(bench::peers::loadgen::WireKind::WireGuard),
        _ => Err(format!("unknown wire {s:?}: sealink or wg")),
    }
}

impl PeersArgs {
    fn params(self) -> bench::peers::Params {
        use bench::peers::lab::which;
        let sealink = self.sealink.unwrap_or_else(|| {
            std::env::current_exe()
                .ok()
                .map(|e| e.with_file_name("sealink"))
                .filter(|p| p.is_file())
                .or_else(|| which("sealink"))
                .unwrap_or_else(|| "sealink".into())
        });
        let wireguard_go = self.wireguard_go.or_else(|| which("wireguard-go"));
        let wg = self.wg.or_else(|| which("wg"));
        bench::peers::Params {
            peers: self.peers as usize,
            active: self.active as usize,
            rate: self.rate,
            duration: self.duration,
            wire: self.wire,
            storm: self.storm as usize,
            flood: self.flood,
            reload: self.reload as usize,
            rekey_storm: self.rekey_storm,
            handshake_timeout: self.handshake_timeout,
            inline_handshakes: self.inline_handshakes,
            wireguard_go: self.wire == bench::peers::loadgen::WireKind::WireGuard
                && !self.no_wireguard_go,
            shared_source: self.shared_source,
            programs: bench::peers::lab::Programs {
                sealink,
                wireguard_go,
                wg,
            },
            json: self.json,
            out: self.out,
        }
    }
}

#[derive(Debug, Args)]
pub struct ThreadTimesArgs {
    /// Encryption thread counts for Figure 8, comma separated (default 1 up to twice the
    /// logical CPUs plus one)
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: Vec<u16>,
    /// The two encryption thread counts of Figure 10 (default: the logical CPUs less one, and
    /// the cores plus one: the paper's 15 and 9 on its 8-core, 16-thread machine)
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u16).range(1..=256))]
    spread: Vec<u16>,
    /// Bytes sent, and encrypted by the encryption threads together, per test (default
    /// 256 MiB; 4 MiB with --quick)
    #[arg(long, value_parser = clap::value_parser!(u64).range(3000..=68719476736))]
    volume: Option<u64>,
    /// Multiples of the volume for Figure 11, comma separated
    #[arg(long, value_delimiter = ',', default_value = "0.25,0.5,1,2")]
    scales: Vec<f64>,
    /// Tests per point, medians reported (Figure 10 always runs 10; default 3, 1 with --quick)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    tests: Option<u32>,
    /// The encryption threads' cipher: aes128-ctr (the paper's) or aes128-gcm
    #[arg(long, default_value = "aes128-ctr", value_parser = parse_tt_cipher)]
    cipher: bench::thread_times::Cipher,
    /// Smoke test: a small volume, few thread counts (not a measurement)
    #[arg(long)]
    quick: bool,
    /// Directory for the CSV files, SVG plots and the run record
    #[arg(long, default_value = "bench-out/thread-times")]
    out: PathBuf,
}

fn parse_tt_cipher(s: &str) -> Result<bench::thread_times::Cipher, String> {
    bench::thread_times::Cipher::parse(s)
        .ok_or_else(|| format!("unknown cipher {s:?}: aes128-ctr or aes128-gcm"))
}

impl ThreadTimesArgs {
    fn params(self) -> bench::thread_times::Params {
        let list = |v: &[u16]| v.iter().map(|&t| usize::from(t)).collect::<Vec<_>>();
        bench::thread_times::Params {
            threads: match (self.threads.is_empty(), self.quick) {
                (false, _) => list(&self.threads),
                (true, true) => vec![1, 2],
                (true, false) => bench::thread_times::default_threads(),
            },
            spread: if self.spread.is_empty() {
                bench::thread_times::default_spread()
            } else {
                list(&self.spread)
            },
            volume: self
                .volume
                .unwrap_or(if self.quick { 4 << 20 } else { 256 << 20 }),
            scales: self.scales,
            tests: self
                .tests
                .map_or(if self.quick { 1 } else { 3 }, |t| t as usize),
            cipher: self.cipher,
            quick: self.quick,
            out: self.out,
        }
    }
}

/// What `sealink-lab bench tunnel-cores` and `sealink-lab bench gpu` (paper 004) both take.
#[derive(Debug, Args)]
pub struct CoresArgs {
    /// Worker counts, comma separated (default 1, 2, 4, ... up to the cores; 1,2 with --quick)
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: Vec<u16>,
    /// Seconds per timed run (default 0.3; 0.02 with --quick)
    #[arg(long, value_parser = parse_seconds)]
    seconds: Option<f64>,
    /// Timed runs per point after a warm-up, medians reported (default 5; 1 with --quick)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: Option<u32>,
    /// Smoke test: short runs, few points (not a measurement)
    #[arg(long)]
    quick: bool,
    /// Directory for the CSV files, the SVG plot and the run record
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TunnelCoresArgs {
    #[command(flatten)]
    cores: CoresArgs,
    /// Packets per batch in the grouping sweep, comma separated
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,128", value_parser = parse_batch)]
    batches: Vec<usize>,
    /// Packets per batch in the other experiments
    #[arg(long, default_value_t = 32, value_parser = parse_batch)]
    batch: usize,
    /// Measure the cost of keeping per-flow order at every worker count (one more point per
    /// count), not only at the largest
    #[arg(long)]
    order_each: bool,
    #[command(flatten)]
    budget: bench::BudgetArgs,
}

#[derive(Debug, Args)]
pub struct GpuArgs {
    #[command(flatten)]
    cores: CoresArgs,
    /// Batch sizes in bytes, comma separated (default 4 KB .. 1 MB); with --packet-size, packet
    /// sizes (default 4 KB .. 128 KB)
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1024..=67108864))]
    sizes: Vec<u64>,
    /// Paper 004's own x-axis: --sizes are the sizes of one packet (the paper's file), 128
    /// packets per batch, one thread block per packet; the CPU line is aws-lc-rs on 1..N threads
    /// at the same sizes; every GPU point is first checked against aws-lc-rs
    #[arg(long)]
    packet_size: bool,
    /// GPU strategies (paper 004's Figure 12), comma separated: naive (each packet spread over
    /// many blocks, one batch at a time), naive-streams, no-streams (one block per packet, one
    /// batch at a time), streams (one block per packet, batches in flight over the streams)
    #[arg(long, value_delimiter = ',', default_value = "streams", value_parser = parse_strategy)]
    strategy: Vec<sealink_gpu::Strategy>,
    #[command(flatten)]
    budget: bench::BudgetArgs,
}

fn parse_strategy(s: &str) -> Result<sealink_gpu::Strategy, String> {
    sealink_gpu::Strategy::parse(s).ok_or_else(|| {
        format!("unknown strategy {s:?}: naive, naive-streams, no-streams or streams")
    })
}

impl CoresArgs {
    fn seconds(&self) -> f64 {
        self.seconds.unwrap_or(if self.quick { 0.02 } else { 0.3 })
    }
    fn runs(&self) -> usize {
        self.runs
            .map_or(if self.quick { 1 } else { 5 }, |r| r as usize)
    }
    fn workers(&self) -> Vec<usize> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        match (self.workers.is_empty(), self.quick) {
            (false, _) => self.workers.iter().map(|&w| usize::from(w)).collect(),
            (true, true) => vec![1, 2.min(cores)]
                .into_iter()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect(),
            (true, false) => bench::tunnel_cores::default_workers(cores),
        }
    }
}

#[derive(Debug, Args)]
pub struct AdpArgs {
    /// Directory for adp.md and the CSV files
    #[arg(long, default_value = "bench-out/adp")]
    out: std::path::PathBuf,
    /// 1,000 messages per trace instead of the paper's 10,000 (for CI)
    #[arg(long)]
    quick: bool,
    /// Seed of the traces and the simulation: the same seed gives the same tables
    #[arg(long, default_value_t = 2)]
    seed: u64,
    /// Service-time profiles to run: 1987 (the paper's Sun 3/50s, Ethernet, DES chip), today
    #[arg(long, value_delimiter = ',', default_value = "1987,today")]
    profiles: Vec<String>,
    /// A packet capture (pcap or pcapng) to run in place of the generated ALL trace
    #[arg(long, value_name = "FILE")]
    pcap: Option<std::path::PathBuf>,
    /// Also run Table 3's traces over real UDP on loopback through two nodes, beside the
    /// virtual-time `today` runs (wall-clock: not deterministic; writes loopback.csv)
    #[arg(long)]
    loopback: bool,
    /// Seconds of each trace a loopback L run replays in real time [default: 10, 2 with --quick]
    #[arg(long, value_name = "SECONDS", value_parser = parse_loopback_seconds)]
    loopback_seconds: Option<f64>,
    /// With --loopback: also this many interleaved rounds of ALL's urgent latency with
    /// piggybacking on and off at E = NE and FE (paper 002's Table 8 L factors; writes
    /// loopback-latency.csv)
    #[arg(long, value_name = "ROUNDS", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    loopback_l_rounds: u32,
}

fn parse_loopback_seconds(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.01..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds within 0.01..=3600"
        )),
    }
}

#[derive(Debug, Args)]
pub struct DatagramArgs {
    /// Message sizes in bytes, comma separated
    #[arg(long, value_delimiter = ',', default_value = "64,128,256", value_parser = bench::datagram::parse_size)]
    sizes: Vec<usize>,
    /// Seconds per timed run (default 2; 0.3 with --quick)
    #[arg(long, value_parser = parse_seconds)]
    seconds: Option<f64>,
    /// Timed runs per point, medians reported (default 3; 1 with --quick)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: Option<u32>,
    /// Share of messages sent urgent, in [0, 1)
    #[arg(long, default_value_t = 0.05, value_parser = parse_probability)]
    urgent: f64,
    /// Smoke test: short runs (not a measurement)
    #[arg(long)]
    quick: bool,
    /// Send one datagram per system call (no UDP GSO), the per-packet cost of a classic stack
    #[arg(long)]
    no_gso: bool,
    /// Engine workers per node that seal and open (0: inline on the node's I/O thread; default:
    /// 0 on two cores or fewer, else one per core)
    #[arg(long, value_parser = clap::value_parser!(u16).range(0..=256))]
    workers: Option<u16>,
    /// When each node's I/O thread hands batches to its workers: auto (only the share it cannot
    /// carry, while it saturates its core and a core is idle) or always (every batch, as before
    /// issue 43)
    #[arg(long, default_value = "auto", value_parser = ["auto", "always"])]
    handoff: String,
    /// Largest datagram, and so the piggyback queue limit (1400 suits any Ethernet path; the
    /// paper's nominal queue limit was 64 KiB, which loopback's MTU allows: try 65507). quinn
    /// gets the same size, RFC 9002's initial window for it, and GSO batches that fit 64 KiB
    #[arg(long, default_value_t = 1400, value_parser = clap::value_parser!(u16).range(512..=65507))]
    max_datagram: u16,
    /// Each node's receive keeps asking for datagrams without sleeping for up to this many
    /// microseconds before it sleeps (0: sleeps at once). Spends a core to spare the sender's
    /// wake-ups; quinn has no such setting
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    busy_poll_us: u32,
    /// Directory for datagram.csv and the run record datagram.json
    #[arg(long, default_value = "bench-out/datagram")]
    out: PathBuf,
    /// Also run the same workload over PEER, interleaved with sealink's runs (quic: quinn)
    #[arg(long, value_parser = bench::quic::parse_peer)]
    peer: Option<bench::quic::Peer>,
    /// How the receiving application takes messages: handler (called on the node's own thread,
    /// no hand-off) or thread (its own thread, blocked in recv_arrivals)
    #[arg(long, default_value = "handler", value_parser = bench::datagram::parse_receiver)]
    receiver: bench::datagram::Receiver,
    /// How the sending application hands messages over: source (run by the node's own thread,
    /// no hand-off) or thread (its own thread, calling send_batch and waiting for room)
    #[arg(long, default_value = "source", value_parser = bench::datagram::parse_sender)]
    sender: bench::datagram::SenderKind,
    /// Where the two hosts run, comma separated, each point run under each: shared (the
    /// scheduler places every thread) or split (each host pinned to a CPU of its own, as two
    /// one-core machines; needs two CPUs). The same for sealink and the peer.
    /// [default: shared,split; shared alone on one CPU]
    #[arg(long, value_delimiter = ',', value_parser = bench::placement::parse_placement)]
    placement: Option<Vec<bench::placement::Placement>>,
}

#[derive(Debug, Args)]
pub struct SocketArgs {
    /// Transfer per path and record size, in MiB (default 1024; 16 with --quick)
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=65536))]
    size: Option<u64>,
    /// Timed runs per point, after a warm-up transfer (default 3; 1 with --quick); medians reported
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: Option<u32>,
    /// Records per write() on the integrated path
    #[arg(long, default_value_t = bench::socket::DEFAULT_BATCH, value_parser = parse_batch)]
    batch: usize,
    /// Smoke test: 16 MiB, one run, no warm-up (not a measurement)
    #[arg(long)]
    quick: bool,
    /// Run only this path (library, crypto-service, integrated-1, integrated) at --record
    /// bytes, --runs times, printing each run and no tables: for profiling one path
    /// (bench/socket-profile.sh)
    #[arg(long, value_parser = parse_send_path)]
    only: Option<bench::socket::SendPath>,
    /// Record size for --only (4096, 8192 or 16384)
    #[arg(long, default_value_t = 16384, requires = "only")]
    record: usize,
    /// Directory for socket.csv and the run record socket.json
    #[arg(long, default_value = "bench-out/socket")]
    out: PathBuf,
}

#[derive(Debug, Args)]
pub struct StacksArgs {
    /// Workers 1..N (default: the number of cores)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=512))]
    workers: Option<u32>,
    /// Packet payload in bytes
    #[arg(long, default_value_t = 4096, value_parser = parse_stacks_packet)]
    packet: usize,
    /// Seconds per timed run (default 0.3; 0.02 with --quick)
    #[arg(long, value_parser = parse_seconds)]
    seconds: Option<f64>,
    /// Timed runs per point, after a warm-up run (default 5; 3 with --quick)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: Option<u32>,
    /// Directory for the CSV files, SVG plots and the run record stacks.json
    #[arg(long, default_value = "bench-out/stacks")]
    out: PathBuf,
    /// Stacks, comma separated (baseline, md5, gcm-auth, des-md5, 3des-md5, aes128-gcm,
    /// chacha20-poly1305; default all)
    #[arg(long, value_delimiter = ',', value_parser = bench::stacks::stack_by_name)]
    stacks: Vec<&'static bench::stacks::Stack>,
    /// Smoke test: short runs, few connections (not a measurement)
    #[arg(long)]
    quick: bool,
    /// Packets per engine batch in the scaling experiments
    #[arg(long, default_value_t = bench::stacks::CHUNK, value_parser = parse_batch)]
    batch: usize,
    /// Pin engine worker threads to cores
    #[arg(long)]
    pin: bool,
    /// Nanoseconds added to each packet's serial step (counter, replay check), a busy wait
    /// under the channel's lock: paper 000's locked TCP/IP step was about 164000 per 4 KiB
    /// packet (200 Mb/s)
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    serial_ns: u64,
    #[command(flatten)]
    budget: bench::BudgetArgs,
}

/// Packets (or records) per batch: 1..=4096.
fn parse_batch(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(v) if (1..=4096).contains(&v) => Ok(v),
        Ok(_) => Err("must be within 1..=4096".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A `bench stacks` packet payload.
fn parse_stacks_packet(s: &str) -> Result<usize, String> {
    sealink_cmdline::units::parse_within(s, 1, bench::stacks::MAX_PACKET)
}

#[derive(Debug, Args)]
pub struct CryptoArgs {
    /// Seconds per timed run
    #[arg(long, default_value_t = 0.3, value_parser = parse_seconds)]
    seconds: f64,
    /// Timed runs per measurement (the median is reported)
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: u32,
    /// Buffer size in bytes for the bulk algorithms and GHASH
    #[arg(long, default_value_t = 8192, value_parser = parse_crypto_size)]
    size: usize,
    /// Smoke test: 5 ms per row, one run, buffers of at most 1 KiB (not a measurement)
    #[arg(long)]
    quick: bool,
    /// Directory for crypto.csv and the run record crypto.json (and where bench/ghash-soft.sh
    /// leaves ghash-soft.csv)
    #[arg(long, default_value = "bench-out/crypto")]
    out: PathBuf,
    /// Run bench/ghash-soft.sh first: builds examples/ghash.rs with polyval forced to software
    /// (needs cargo and this source tree; the first build takes minutes)
    #[arg(long)]
    ghash_soft: bool,
}

/// A `bench crypto` buffer size.
fn parse_crypto_size(s: &str) -> Result<usize, String> {
    sealink_cmdline::units::parse_within(s, 1, bench::crypto::MAX_SIZE)
}

#[derive(Debug, Args)]
pub struct SealArgs {
    /// Payload sizes in bytes, comma separated
    #[arg(long, value_delimiter = ',', default_value = "64,512,1400,8192,65000", value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Suites, comma separated (aes128-gcm, aes256-gcm, chacha20-poly1305)
    #[arg(long, value_delimiter = ',', default_value = "aes128-gcm,aes256-gcm,chacha20-poly1305", value_parser = SuiteId::parse_modern)]
    suites: Vec<SuiteId>,
    /// Seconds per timed run
    #[arg(long, default_value_t = 0.3, value_parser = parse_seconds)]
    seconds: f64,
    /// Timed runs per measurement (the median is reported)
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: u32,
    /// Directory for seal.csv and the run record seal.json
    #[arg(long, default_value = "bench-out/seal")]
    out: PathBuf,
}

/// A share in [0, 1) (`bench datagram --urgent`, `demo --loss`; the relay's own parser also
/// takes 1).
pub(crate) fn parse_probability(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a probability in [0, 1)"))
    }
}

/// Seconds per timed run, and the relay's --stats-every: (0, 60].
fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() && v > 0.0 && v <= 60.0 {
        Ok(v)
    } else {
        Err(format!("{v} is not within (0, 60] seconds"))
    }
}

/// A `bench seal` payload size.
fn parse_size(s: &str) -> Result<usize, String> {
    sealink_cmdline::units::parse_within(s, 1, bench::seal::MAX_SIZE)
}

/// Runs `sealink-lab bench ...`. Its own checks of the arguments fail as [`crate::Error::Usage`].
pub fn run_bench(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Seal(a) => bench::seal::run(&a.params()),
        BenchCommand::Crypto(a) => bench::crypto::run(&a.params()),
        BenchCommand::Stacks(a) => {
            sealink_engine::set_pin_workers(a.pin);
            bench::stacks::run(&a.params())
        }
        BenchCommand::Datagram(a) => bench::datagram::run(&a.params()),
        BenchCommand::Adp(a) => bench::adp::run(&a.params()),
        BenchCommand::TunnelCores(a) => bench::tunnel_cores::run(&a.params()),
        BenchCommand::Gpu(a) => bench::gpu::run(&a.params()),
        BenchCommand::ThreadTimes(a) => bench::thread_times::run(&a.params()),
        BenchCommand::Socket(a) => bench::socket::run(&a.params()),
        BenchCommand::Peers(a) => bench::peers::run(&a.params()),
        BenchCommand::AllowedIps(a) => bench::allowed_ips::run(&a.params()),
    }
}

/// Runs `sealink-lab relay` until SIGINT or SIGTERM.
pub fn run_relay(a: RelayArgs) -> Result<(), relay::RelayError> {
    relay::run(relay::Params {
        listen: a.listen,
        to: a.to,
        faults: relay::FaultConfig {
            loss: a.loss,
            reorder: a.reorder,
            duplicate: a.duplicate,
            corrupt: a.corrupt,
            replay: a.replay,
            reorder_depth: a.reorder_depth,
            replay_delay: Duration::from_millis(a.replay_delay_ms),
            rate_limit: a.rate_limit.map(|mbit| mbit * 1e6 / 8.0),
        },
        seed: a.seed,
        stats_every: a.stats_every.map(Duration::from_secs_f64),
    })
}

impl SealArgs {
    fn params(self) -> bench::seal::Params {
        bench::seal::Params {
            sizes: self.sizes,
            suites: self.suites,
            seconds: self.seconds,
            runs: self.runs as usize,
            out: self.out,
        }
    }
}

impl CryptoArgs {
    fn params(self) -> bench::crypto::Params {
        bench::crypto::Params {
            seconds: self.seconds,
            runs: self.runs as usize,
            size: self.size,
            quick: self.quick,
            out: self.out,
            ghash_soft: self.ghash_soft,
        }
    }
}

impl StacksArgs {
    fn params(self) -> bench::stacks::Params {
        let quick = self.quick;
        bench::stacks::Params {
            workers: self.workers.map_or_else(
                || std::thread::available_parallelism().map_or(1, |n| n.get()),
                |w| w as usize,
            ),
            packet: self.packet,
            seconds: self.seconds.unwrap_or(if quick { 0.02 } else { 0.3 }),
            runs: self.runs.map_or(if quick { 3 } else { 5 }, |r| r as usize),
            out: self.out,
            stacks: if self.stacks.is_empty() {
                bench::stacks::STACKS.iter().collect()
            } else {
                self.stacks
            },
            quick,
            batch: self.batch,
            budget: self.budget.budget,
            serial_ns: self.serial_ns,
        }
    }
}

impl DatagramArgs {
    fn params(self) -> bench::datagram::Params {
        let quick = self.quick;
        bench::datagram::Params {
            sizes: self.sizes,
            seconds: self.seconds.unwrap_or(if quick { 0.3 } else { 2.0 }),
            runs: self.runs.map_or(if quick { 1 } else { 3 }, |r| r as usize),
            urgent: self.urgent,
            quick,
            no_gso: self.no_gso,
            workers: self.workers.map(usize::from),
            handoff: if self.handoff == "always" {
                sealink_datagram::Handoff::Always
            } else {
                sealink_datagram::Handoff::Auto
            },
            max_datagram: usize::from(self.max_datagram),
            busy_poll: std::time::Duration::from_micros(u64::from(self.busy_poll_us)),
            out: self.out,
            peer: self.peer,
            receiver: self.receiver,
            sender: self.sender,
            placements: self
                .placement
                .unwrap_or_else(bench::placement::Placement::defaults),
        }
    }
}

impl AdpArgs {
    fn params(self) -> bench::adp::Params {
        bench::adp::Params {
            out: self.out,
            quick: self.quick,
            seed: self.seed,
            profiles: self.profiles,
            pcap: self.pcap,
            loopback: self.loopback.then(|| {
                self.loopback_seconds
                    .unwrap_or(if self.quick { 2.0 } else { 10.0 })
            }),
            l_rounds: self.loopback_l_rounds as usize,
        }
    }
}

impl TunnelCoresArgs {
    fn params(self) -> bench::tunnel_cores::Params {
        let c = &self.cores;
        bench::tunnel_cores::Params {
            workers: c.workers(),
            batches: if c.quick { vec![1, 32] } else { self.batches },
            batch: self.batch,
            seconds: c.seconds(),
            runs: c.runs(),
            quick: c.quick,
            out: c
                .out
                .clone()
                .unwrap_or_else(|| "bench-out/tunnel-cores".into()),
            budget: self.budget.budget,
            order_each: self.order_each,
        }
    }
}

impl GpuArgs {
    fn params(self) -> bench::gpu::Params {
        let c = &self.cores;
        bench::gpu::Params {
            sizes: match (self.sizes.is_empty(), c.quick, self.packet_size) {
                (false, _, _) => self.sizes.iter().map(|&s| s as usize).collect(),
                (true, true, _) => vec![4 << 10, 128 << 10],
                (true, false, false) => bench::gpu::DEFAULT_SIZES.to_vec(),
                (true, false, true) => bench::gpu::DEFAULT_PACKET_SIZES.to_vec(),
            },
            workers: c.workers(),
            seconds: c.seconds(),
            runs: c.runs(),
            quick: c.quick,
            out: c.out.clone().unwrap_or_else(|| {
                if self.packet_size {
                    "bench-out/gpu-packet-size".into()
                } else {
                    "bench-out/gpu".into()
                }
            }),
            strategies: self.strategy,
            budget: self.budget.budget,
            packet_size: self.packet_size,
        }
    }
}

fn parse_send_path(s: &str) -> Result<bench::socket::SendPath, String> {
    bench::socket::SendPath::parse(s).ok_or_else(|| {
        format!("unknown path {s:?}: library, crypto-service, integrated-1 or integrated")
    })
}

impl SocketArgs {
    fn params(self) -> bench::socket::Params {
        let quick = self.quick;
        bench::socket::Params {
            size: self.size.map_or(
                if quick {
                    bench::socket::QUICK_SIZE
                } else {
                    1 << 30
                },
                |m| m << 20,
            ),
            runs: self.runs.map_or(if quick { 1 } else { 3 }, |r| r as usize),
            batch: self.batch,
            quick,
            out: self.out,
            only: self.only.map(|p| (p, self.record)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_valid() {
        clap::Command::new("sealink-lab")
            .subcommand(BenchCommand::augment_subcommands(clap::Command::new(
                "bench",
            )))
            .subcommand(RelayArgs::augment_args(clap::Command::new("relay")))
            .debug_assert();
    }

    #[test]
    fn parsers() {
        assert_eq!(parse_size("1400"), Ok(1400));
        assert!(parse_size("0").is_err());
        assert!(parse_probability("1").is_err());
        assert!(parse_seconds("0").is_err());
    }
}
