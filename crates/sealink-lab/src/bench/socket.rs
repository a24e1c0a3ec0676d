//! `sealink-lab bench socket`: Tables I and II of paper 003 (Burnside and Keromytis, "Accelerating
//! Application-Level Security Protocols") rerun on this machine over TCP on 127.0.0.1.
//!
//! Three send paths move the same transfer of random bytes as AES-128-GCM records:
//! - library (the paper's OpenSSL EVP): per record, copy the plaintext into an output buffer,
//!   seal it there, one `write()`;
//! - crypto service (`/dev/crypto`): per record, copy the plaintext into a request buffer, a
//!   round trip to a crypto thread that seals it and copies the result out, one `write()`;
//! - integrated (`SO_CRYPT`, in user space): the application's buffer has room for headers and
//!   tags, records are sealed in place in the buffer that goes to the socket, and a batch of
//!   records goes out per `write()`;
//! - integrated-1: the integrated path with one record per `write()` (`--batch 1`), which
//!   separates sealing in place from making fewer writes. Its code is the library path's: that
//!   path also copies the plaintext once into the buffer it seals and seals it there.
//!
//! Copies are counted at the copy sites, alike on every path: the library and both integrated
//! paths copy each plaintext byte once into the buffer they seal; the crypto service copies it
//! in and copies the sealed record out.
//!
//! One receiver, identical for all paths, reads large chunks, opens every record in place and
//! counts bytes, so the comparison isolates the send path.
//!
//! Records are sealed and read by sealink-stream's own code, `RecordBatch` and `RecordReader`
//! (what `sealink send` and `sealink recv` run), so the integrated column measures the shipped
//! send path and not a copy of it.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Instant;

use sealink_crypto::{PacketKey, Scope, SuiteId};
use sealink_proto::sim::SimRng;
use sealink_proto::stream::record::{self, RecordType};
use sealink_stream::{RecordBatch, RecordReader};

use super::{fill, median, print_with_files, random_seed};
use crate::error::{Error, Result, chain};
use crate::output;
use crate::report::{RunRecord, Table, record as run_record};

/// Plaintext per record, as in the paper's 4k/8k/16k columns.
pub const RECORD_SIZES: [usize; 3] = [4096, 8192, 16384];
/// The application's data: a pre-filled random buffer reused cyclically (no file I/O timed).
const SOURCE_LEN: usize = 64 << 20;
/// Receiver read buffer.
const RECV_BUF: usize = 1 << 20;
/// Default records per write on the integrated path: 16 to 128 measured within noise of each
/// other on 2 cores (256 MiB, 3 x 3 runs); 64 keeps writes at 256 KiB to 1 MiB.
pub const DEFAULT_BATCH: usize = 64;
/// Bytes of the transfer in --quick mode.
pub const QUICK_SIZE: u64 = 16 << 20;
/// Warm-up transfer per path and record size before the timed runs.
const WARMUP_SIZE: u64 = 64 << 20;

/// Parameters of `sealink-lab bench socket`.
#[derive(Debug, Clone)]
pub struct Params {
    /// Plaintext bytes per transfer.
    pub size: u64,
    pub runs: usize,
    /// Records per write on the integrated path.
    pub batch: usize,
    pub quick: bool,
    pub out: PathBuf,
    /// Only this path at this record size, `runs` times, with no tables (for a profile of one
    /// path: `bench/socket-profile.sh`).
    pub only: Option<(SendPath, usize)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendPath {
    Library,
    Service,
    /// The integrated path with one record per write.
    IntegratedOne,
    Integrated,
}

impl SendPath {
    pub const ALL: [SendPath; 4] = [
        SendPath::Library,
        SendPath::Service,
        SendPath::IntegratedOne,
        SendPath::Integrated,
    ];
    /// The path named `s` (as the tables name it).
    pub fn parse(s: &str) -> Option<SendPath> {
        SendPath::ALL.into_iter().find(|p| p.name() == s)
    }
    fn name(self) -> &'static str {
        match self {
            SendPath::Library => "library",
            SendPath::Service => "crypto-service",
            SendPath::IntegratedOne => "integrated-1",
            SendPath::Integrated => "integrated",
        }
    }
    /// The paper's scenario this path stands for.
    fn paper_name(self) -> &'static str {
        match self {
            SendPath::Library => "EVP",
            SendPath::Service => "/dev/crypto",
            SendPath::IntegratedOne => "kernel, 1 record per write",
            SendPath::Integrated => "kernel",
        }
    }
    /// Table I: seconds for 100 MB at 4k/8k/16k (none for the row the paper lacks).
    fn paper_seconds(self) -> Option<[f64; 3]> {
        match self {
            SendPath::Library => Some([32.79, 31.84, 32.38]),
            SendPath::Service => Some([4.13, 4.23, 4.72]),
            SendPath::IntegratedOne => None,
            SendPath::Integrated => Some([3.80, 3.97, 4.27]),
        }
    }
    /// Records per write() on this path, `batch` being the integrated path's.
    fn batch(self, batch: usize) -> usize {
        match self {
            SendPath::Integrated => batch,
            _ => 1,
        }
    }
}

/// Table II: the paper's improvement of its kernel path over EVP and /dev/crypto, percent (none
/// against the row the paper lacks).
const PAPER_IMPROVEMENT: [(SendPath, Option<[u32; 3]>); 3] = [
    (SendPath::Library, Some([88, 88, 87])),
    (SendPath::Service, Some([8, 6, 10])),
    (SendPath::IntegratedOne, None),
];

// --- Receiver -------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, Default)]
pub struct Received {
    pub bytes: u64,
    pub records: u64,
    pub reads: u64,
}

/// Reads records until EOF with the stream receiver's reader, opening each in place; any bad
/// header, record that is not data, out-of-order sequence number, failed tag or truncated
/// record is an error. `max_plain` bounds the record size.
pub fn receive(key: &PacketKey, r: &mut impl Read, max_plain: usize) -> Result<Received> {
    let max_rec = record::wire_len(max_plain);
    let mut reader = RecordReader::new(RECV_BUF.max(2 * max_rec), max_rec);
    let mut got = Received::default();
    loop {
        while let Some(rec) = reader
            .next_record(key)
            .map_err(|e| Error::bench_by(format!("record {}", got.records), e))?
        {
            let seq = rec.header.seq;
            if rec.header.kind != RecordType::Data || seq != got.records {
                return Err(Error::bench(format!(
                    "{:?} record {seq} where data record {} was due",
                    rec.header.kind, got.records
                )));
            }
            got.bytes += rec.len as u64;
            got.records += 1;
        }
        let n = match reader.fill(r) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::bench_by("receiver read failed", e)),
        };
        got.reads += 1;
        if n == 0 {
            if reader.pending() != 0 {
                return Err(Error::bench(format!(
                    "stream ended inside record {} ({} bytes left over)",
                    got.records,
                    reader.pending()
                )));
            }
            return Ok(got);
        }
    }
}

// --- Send paths -----------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, Default)]
struct Sent {
    /// write() calls.
    writes: u64,
    /// User-space bytes copied (plaintext or records), counted at the copy sites.
    copied: u64,
    /// Context switches of the sending and service threads: voluntary, involuntary.
    ctx: (u64, u64),
}

/// write_all, counting every write() call.
fn write_all(s: &mut TcpStream, mut buf: &[u8], writes: &mut u64) -> Result<()> {
    while !buf.is_empty() {
        *writes += 1;
        match s.write(buf) {
            Ok(0) => return Err(Error::bench("socket accepted no bytes")),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::bench_by("write failed", e)),
        }
    }
    Ok(())
}

/// This thread's (voluntary, involuntary) context switches so far.
fn ctx_switches() -> Result<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/thread-self/status")
        .map_err(Error::io("read", "/proc/thread-self/status"))?;
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
            .ok_or_else(|| Error::bench(format!("no {name} in /proc/thread-self/status")))
    };
    Ok((
        field("voluntary_ctxt_switches:")?,
        field("nonvoluntary_ctxt_switches:")?,
    ))
}

fn ctx_delta(a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
    (b.0 - a.0, b.1 - a.1)
}

/// The transfer: record `seq` carries `len` bytes taken from `src` at `off`.
#[derive(Debug, Clone, Copy)]
struct Plan {
    total: u64,
    rec: usize,
}

impl Plan {
    fn records(self) -> u64 {
        self.total.div_ceil(self.rec as u64)
    }
    /// (source offset, length) of record `seq`; `src.len()` is a multiple of `rec`.
    fn slice(self, seq: u64, src_len: usize) -> (usize, usize) {
        let at = seq * self.rec as u64;
        let len = (self.total - at).min(self.rec as u64) as usize;
        ((at % src_len as u64) as usize, len)
    }
}

/// The application puts records `seq, seq + 1, ...` of the transfer into `b`'s payload slots,
/// as many as fit and remain; `lens` gets their lengths.
fn load(b: &mut RecordBatch, src: &[u8], plan: Plan, seq: u64, lens: &mut Vec<usize>) {
    lens.clear();
    for (k, p) in b.payloads_mut().enumerate() {
        let seq = seq + k as u64;
        if seq >= plan.records() {
            break;
        }
        let (off, len) = plan.slice(seq, src.len());
        p[..len].copy_from_slice(&src[off..off + len]);
        lens.push(len);
    }
}

/// Seals the records loaded into `b` with the stream sender's code; returns their wire bytes.
fn seal<'b>(key: &PacketKey, b: &'b mut RecordBatch, seq: u64, lens: &[usize]) -> Result<&'b [u8]> {
    b.seal(key, Scope::Encrypt, seq, lens)
        .map_err(|e| Error::bench_by(format!("sealing record {seq}"), e))
}

fn send_library(key: &PacketKey, s: &mut TcpStream, src: &[u8], plan: Plan) -> Result<Sent> {
    let c0 = ctx_switches()?;
    let mut sent = Sent::default();
    let mut out = RecordBatch::new(plan.rec, 1);
    let mut lens = Vec::with_capacity(1);
    for seq in 0..plan.records() {
        // EVP-style: plaintext in, ciphertext out in another buffer.
        load(&mut out, src, plan, seq, &mut lens);
        sent.copied += lens.iter().sum::<usize>() as u64;
        write_all(s, seal(key, &mut out, seq, &lens)?, &mut sent.writes)?;
    }
    sent.ctx = ctx_delta(c0, ctx_switches()?);
    Ok(sent)
}

/// A request to the crypto service: the request buffer it seals and the app's output buffer it
/// copies the result into (both handed back in the reply, so nothing is allocated per record).
struct Job {
    seq: u64,
    lens: Vec<usize>,
    req: RecordBatch,
    out: Vec<u8>,
    /// Bytes of `out` the service filled.
    wire: usize,
}

fn send_service(key: &PacketKey, s: &mut TcpStream, src: &[u8], plan: Plan) -> Result<Sent> {
    let (to_svc, jobs) = mpsc::channel::<Job>();
    let (to_app, done) = mpsc::channel::<Result<Job>>();
    std::thread::scope(|scope| {
        // Named, so that a profile tells its work from the application's (socket-profile.sh).
        let service = std::thread::Builder::new()
            .name("sl-service".into())
            .spawn_scoped(scope, move || -> Result<(u64, (u64, u64))> {
                let c0 = ctx_switches()?;
                let mut copied = 0;
                for mut j in jobs {
                    let r = match seal(key, &mut j.req, j.seq, &j.lens) {
                        Ok(wire) => {
                            j.out[..wire.len()].copy_from_slice(wire); // copy-out
                            j.wire = wire.len();
                            copied += j.wire as u64;
                            Ok(j)
                        }
                        Err(e) => Err(e),
                    };
                    if to_app.send(r).is_err() {
                        break;
                    }
                }
                Ok((copied, ctx_delta(c0, ctx_switches()?)))
            })
            .map_err(|e| Error::bench_by("cannot start the crypto service thread", e))?;
        let mut app = || -> Result<Sent> {
            let c0 = ctx_switches()?;
            let mut sent = Sent::default();
            let mut job = Job {
                seq: 0,
                lens: Vec::with_capacity(1),
                req: RecordBatch::new(plan.rec, 1),
                out: vec![0u8; record::wire_len(plan.rec)],
                wire: 0,
            };
            for seq in 0..plan.records() {
                load(&mut job.req, src, plan, seq, &mut job.lens); // copy-in
                sent.copied += job.lens.iter().sum::<usize>() as u64;
                job.seq = seq;
                to_svc
                    .send(job)
                    .map_err(|_| Error::bench("the crypto service stopped"))?;
                job = done
                    .recv()
                    .map_err(|_| Error::bench("the crypto service stopped"))??;
                write_all(s, &job.out[..job.wire], &mut sent.writes)?;
            }
            sent.ctx = ctx_delta(c0, ctx_switches()?);
            Ok(sent)
        };
        let sent = app();
        drop(to_svc); // ends the service loop
        let (copied, ctx) = service
            .join()
            .map_err(|_| Error::bench("the crypto service panicked"))??;
        let mut sent = sent?;
        sent.copied += copied;
        sent.ctx = (sent.ctx.0 + ctx.0, sent.ctx.1 + ctx.1);
        Ok(sent)
    })
}

/// `sealink send`'s data path: a `RecordBatch` whose payload slots the application fills, the
/// records sealed in place around the data, one write per batch.
fn send_integrated(
    key: &PacketKey,
    s: &mut TcpStream,
    src: &[u8],
    plan: Plan,
    batch: usize,
) -> Result<Sent> {
    let c0 = ctx_switches()?;
    let mut sent = Sent::default();
    let mut buf = RecordBatch::new(plan.rec, batch);
    let mut lens = Vec::with_capacity(batch);
    let mut seq = 0;
    while seq < plan.records() {
        // The plaintext is copied once into the payload slots, the same copy as the library
        // path's (counted alike); the records are then sealed where they lie.
        load(&mut buf, src, plan, seq, &mut lens);
        sent.copied += lens.iter().sum::<usize>() as u64;
        write_all(s, seal(key, &mut buf, seq, &lens)?, &mut sent.writes)?;
        seq += lens.len() as u64;
    }
    sent.ctx = ctx_delta(c0, ctx_switches()?);
    Ok(sent)
}

// --- One transfer ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Sample {
    seconds: f64,
    sent: Sent,
    recv: Received,
    seed: u64,
}

fn random_key() -> Result<[u8; 16]> {
    let mut k = [0u8; 16];
    sealink_crypto::sign::random_bytes(&mut k).map_err(Error::Random)?;
    Ok(k)
}

/// One transfer of `plan.total` bytes over a fresh loopback connection; `src` is refilled from a
/// fresh seed first.
fn transfer(path: SendPath, plan: Plan, batch: usize, src: &mut [u8]) -> Result<Sample> {
    let seed = random_seed()?;
    fill_source(seed, src);
    transfer_filled(path, plan, batch, src, seed)
}

/// Fresh data for a transfer (out of line, so that a profile shows it apart from the paths).
#[inline(never)]
fn fill_source(seed: u64, src: &mut [u8]) {
    fill(&mut SimRng::new(seed), src);
}

/// A transfer of `src` as it is (filled from `seed`).
fn transfer_filled(
    path: SendPath,
    plan: Plan,
    batch: usize,
    src: &[u8],
    seed: u64,
) -> Result<Sample> {
    let key = random_key()?;
    let seal = PacketKey::new(SuiteId::Aes128Gcm, &key, false)
        .map_err(|e| Error::bench_by("AES-128-GCM key", e))?;
    let open = PacketKey::new(SuiteId::Aes128Gcm, &key, false)
        .map_err(|e| Error::bench_by("AES-128-GCM key", e))?;
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::bench_by("cannot listen on 127.0.0.1", e))?;
    let mut tx = listener
        .local_addr()
        .and_then(TcpStream::connect)
        .map_err(|e| Error::bench_by("cannot connect", e))?;
    let (mut rx, _) = listener
        .accept()
        .map_err(|e| Error::bench_by("cannot accept", e))?;
    tx.set_nodelay(true)
        .and_then(|()| rx.set_nodelay(true))
        .map_err(|e| Error::bench_by("cannot set TCP_NODELAY", e))?;
    std::thread::scope(|scope| {
        let receiver = std::thread::Builder::new()
            .name("sl-receiver".into())
            .spawn_scoped(scope, move || {
                let r = receive(&open, &mut rx, plan.rec);
                (r, Instant::now())
            })
            .map_err(|e| Error::bench_by("cannot start the receiving thread", e))?;
        let t0 = Instant::now();
        let sent = match path {
            SendPath::Library => send_library(&seal, &mut tx, src, plan),
            SendPath::Service => send_service(&seal, &mut tx, src, plan),
            SendPath::IntegratedOne => send_integrated(&seal, &mut tx, src, plan, 1),
            SendPath::Integrated => send_integrated(&seal, &mut tx, src, plan, batch),
        };
        let _ = tx.shutdown(Shutdown::Write);
        drop(tx);
        let (recv, t1) = receiver
            .join()
            .map_err(|_| Error::bench("the receiver panicked"))?;
        let (sent, recv) = match (sent, recv) {
            (Ok(s), Ok(r)) => (s, r),
            (Err(e), Ok(_)) | (Ok(_), Err(e)) => return Err(e),
            (Err(s), Err(r)) => {
                return Err(Error::bench(format!(
                    "receiver: {}; sender: {}",
                    chain(&r),
                    chain(&s)
                )));
            }
        };
        if recv.bytes != plan.total || recv.records != plan.records() {
            return Err(Error::bench(format!(
                "received {} bytes in {} records, sent {} in {}",
                recv.bytes,
                recv.records,
                plan.total,
                plan.records()
            )));
        }
        Ok(Sample {
            seconds: (t1 - t0).as_secs_f64(),
            sent,
            recv,
            seed,
        })
    })
}

// --- Reporting ------------------------------------------------------------------------------

/// Medians over the runs of one path and record size.
#[derive(Debug, Clone, Copy)]
struct Point {
    path: SendPath,
    rec: usize,
    seconds: f64,
    writes: f64,
    copied: f64,
    ctx: (f64, f64),
    reads: f64,
}

fn summarize(path: SendPath, rec: usize, samples: &[Sample]) -> Point {
    let m = |f: &dyn Fn(&Sample) -> f64| median(&samples.iter().map(f).collect::<Vec<_>>());
    Point {
        path,
        rec,
        seconds: m(&|s| s.seconds),
        writes: m(&|s| s.sent.writes as f64),
        copied: m(&|s| s.sent.copied as f64),
        ctx: (m(&|s| s.sent.ctx.0 as f64), m(&|s| s.sent.ctx.1 as f64)),
        reads: m(&|s| s.recv.reads as f64),
    }
}

fn kib(rec: usize) -> String {
    format!("{}k", rec / 1024)
}

fn render(p: &Params, points: &[Point], out: &mut String) {
    render_heading(p, out);
    render_send_paths(p, points, out);
    let mib = p.size as f64 / (1 << 20) as f64;
    let seconds = |path: SendPath, rec: usize| {
        points
            .iter()
            .find(|q| q.path == path && q.rec == rec)
            .map_or(f64::NAN, |q| q.seconds)
    };
    let _ = writeln!(
        out,
        "### Table I: seconds to encrypt and transfer (today: {mib} MiB over loopback; paper: 100 MB over Gbit Ethernet, 1.4 GHz Pentium III, Broadcom 5820)\n"
    );
    let mut head = vec!["scenario".to_owned()];
    for r in RECORD_SIZES {
        head.push(format!("{} today", kib(r)));
        head.push(format!("{} paper", kib(r)));
    }
    let mut t = Table::new(head.clone());
    for path in SendPath::ALL {
        let mut row = vec![format!("{} ({})", path.name(), path.paper_name())];
        for (i, r) in RECORD_SIZES.into_iter().enumerate() {
            row.push(format!("{:.3}", seconds(path, r)));
            row.push(
                path.paper_seconds()
                    .map_or("-".into(), |s| format!("{:.2}", s[i])),
            );
        }
        t.row(row);
    }
    out.push_str(&t.markdown());

    let _ = writeln!(
        out,
        "\n### Table II: improvement of integrated (paper: kernel) over the others, (t_x - t_c) / t_x\n"
    );
    let mut t = Table::new(head);
    for &(path, paper) in &PAPER_IMPROVEMENT {
        let mut row = vec![format!("vs {} ({})", path.name(), path.paper_name())];
        for (i, r) in RECORD_SIZES.into_iter().enumerate() {
            let (tx, tc) = (seconds(path, r), seconds(SendPath::Integrated, r));
            row.push(format!("{:.0}%", (tx - tc) / tx * 100.0));
            row.push(paper.map_or("-".into(), |p| format!("{}%", p[i])));
        }
        t.row(row);
    }
    out.push_str(&t.markdown());
    let _ = writeln!(
        out,
        "\nThe paper's EVP figures reflect software 3DES/SHA-1 on a 2003 CPU against a crypto card; here all paths run the same AES-NI AES-GCM and the library and integrated paths make the same one copy, so the gaps measure write() calls and the crypto service's copy-out and handoffs only; integrated against integrated-1 is what batching {} records per write() alone gives.",
        p.batch
    );
}

/// The report's heading: the machine, the transfer and what each send path and the receiver do.
fn render_heading(p: &Params, out: &mut String) {
    let mib = p.size as f64 / (1 << 20) as f64;
    let _ = writeln!(
        out,
        "sealink-lab bench socket: paper 003 (Burnside and Keromytis) Tables I and II rerun on this machine"
    );
    let _ = writeln!(
        out,
        "machine: {}, {} cores available; date: {}; seeds: fresh per transfer (in the CSV)",
        run_record::cpu_model(),
        run_record::cores(),
        run_record::utc_minutes(run_record::now())
    );
    if p.quick {
        let _ = writeln!(
            out,
            "QUICK MODE: {mib} MiB, one run, no warm-up; a smoke test, not a measurement"
        );
    }
    let _ = writeln!(
        out,
        "transfer: {mib} MiB of random bytes per path and record size over its own TCP connection on 127.0.0.1 (TCP_NODELAY), AES-128-GCM records with a 16-byte header (the AAD) and 16-byte tag; {} run(s), medians{}",
        p.runs,
        if p.quick {
            ""
        } else {
            ", after a 64 MiB warm-up per point"
        }
    );
    let _ = writeln!(
        out,
        "paths: library = copy into an output buffer, seal, one write() per record (EVP); crypto-service = copy into a request, round trip to a crypto thread that seals and copies out, one write() per record (/dev/crypto); integrated = copy into the buffer that goes to the socket, records sealed in place there, {} records per write() (SO_CRYPT in user space); integrated-1 = the same with one record per write() (the library path's code: it separates sealing in place from fewer writes)",
        p.batch
    );
    let _ = writeln!(
        out,
        "receiver: one thread per connection, identical for all paths, reads up to {} KiB at a time, opens and verifies every record in place; seconds run from the first send to the receiver's end of stream",
        RECV_BUF >> 10
    );
    let _ = writeln!(out);
}

/// The table of every send path at every record size: time, rate, writes, copies and context
/// switches.
fn render_send_paths(p: &Params, points: &[Point], out: &mut String) {
    let mib = p.size as f64 / (1 << 20) as f64;
    let _ = writeln!(out, "### Send paths\n");
    let mut t = Table::new([
        "path",
        "record",
        "seconds",
        "Gbit/s",
        "writes/MiB",
        "copied B/B",
        "ctx switches",
        "ctx/MiB",
        "recv reads/MiB",
    ])
    .left(&[1]);
    for q in points {
        let per = |v: f64| v / mib;
        t.row([
            q.path.name().to_owned(),
            kib(q.rec),
            format!("{:.3}", q.seconds),
            format!("{:.2}", p.size as f64 * 8.0 / q.seconds / 1e9),
            format!("{:.1}", per(q.writes)),
            format!("{:.2}", q.copied / p.size as f64),
            format!("{:.0}", q.ctx.0 + q.ctx.1),
            format!("{:.1}", per(q.ctx.0 + q.ctx.1)),
            format!("{:.1}", per(q.reads)),
        ]);
    }
    out.push_str(&t.markdown());
    let _ = writeln!(
        out,
        "\nGbit/s = 10^9 bit/s of plaintext; writes = write() calls of the sending side; copied B/B = user-space bytes copied per plaintext byte, counted at the copy sites alike on every path (the library and integrated paths copy the plaintext once into the buffer they seal; the crypto service copies it in and the sealed record out); ctx switches = voluntary + involuntary of the sending and crypto-service threads (/proc/thread-self/status)\n"
    );
}

/// Writes socket.csv (every run, then the medians) and the run record socket.json into `dir`.
fn write_files(
    dir: &Path,
    p: &Params,
    rows: &[(SendPath, usize, usize, Sample)],
    points: &[Point],
) -> Result<(PathBuf, PathBuf)> {
    let mut t = Table::new(
        "path,record_bytes,run,bytes,seconds,gbps,writes,copied_bytes,ctx_voluntary,ctx_nonvoluntary,recv_reads,batch,seed"
            .split(','),
    );
    let gbps = |seconds: f64| p.size as f64 * 8.0 / seconds / 1e9;
    // A run is a point of one sample: its "medians" are its own counts.
    let mut line = |q: &Point, run: String, seed: String| {
        t.row(
            [
                q.path.name().to_owned(),
                q.rec.to_string(),
                run,
                p.size.to_string(),
            ]
            .into_iter()
            .chain(
                [
                    q.seconds,
                    gbps(q.seconds),
                    q.writes,
                    q.copied,
                    q.ctx.0,
                    q.ctx.1,
                    q.reads,
                ]
                .map(|v| v.to_string()),
            )
            .chain([q.path.batch(p.batch).to_string(), seed]),
        );
    };
    for (path, rec, run, x) in rows {
        let one = summarize(*path, *rec, std::slice::from_ref(x));
        line(&one, run.to_string(), x.seed.to_string());
    }
    // Medians of each column over the runs.
    for q in points {
        line(q, "median".to_owned(), String::new());
    }
    let mut record = RunRecord::new("socket");
    for q in points {
        let what = format!("{} {}", q.path.name(), kib(q.rec));
        record.figure(format!("{what} seconds"), q.seconds, "s");
        record.figure(format!("{what} Gbit/s"), gbps(q.seconds), "Gbit/s");
    }
    let csv = record.write_csv(dir, "socket.csv", &t)?;
    Ok((csv, record.write(dir)?))
}

/// Runs the bench, prints the tables and writes socket.csv and socket.json into `p.out`.
pub fn run(p: &Params) -> Result<()> {
    if p.size == 0 || p.runs == 0 || p.batch == 0 {
        return Err(Error::Usage(
            "--size, --runs and --batch must be at least 1".into(),
        ));
    }
    let max_rec = RECORD_SIZES[RECORD_SIZES.len() - 1];
    // A multiple of every record size, so records never straddle the end of the source.
    let src_len = (p.size.min(SOURCE_LEN as u64) as usize).next_multiple_of(max_rec);
    let mut src = vec![0u8; src_len];
    if let Some((path, rec)) = p.only {
        return run_only(p, path, rec, &mut src);
    }
    let warmup = !p.quick;
    let points_n = (SendPath::ALL.len() * RECORD_SIZES.len()) as u64;
    let pb = output::progress(
        points_n * (p.runs as u64 + u64::from(warmup)),
        "bench socket",
    );
    if warmup {
        for rec in RECORD_SIZES {
            for path in SendPath::ALL {
                let plan = Plan {
                    total: p.size.min(WARMUP_SIZE),
                    rec,
                };
                transfer(path, plan, p.batch, &mut src).map_err(|e| {
                    Error::bench_by(
                        format!("{} path, {} records (warm-up)", path.name(), kib(rec)),
                        e,
                    )
                })?;
                pb.inc(1);
            }
        }
    }
    // Runs outermost and paths interleaved, so drift in the machine's load hits all alike.
    let mut rows = Vec::new();
    for run in 0..p.runs {
        for rec in RECORD_SIZES {
            for path in SendPath::ALL {
                let x = transfer(path, Plan { total: p.size, rec }, p.batch, &mut src).map_err(
                    |e| Error::bench_by(format!("{} path, {} records", path.name(), kib(rec)), e),
                )?;
                rows.push((path, rec, run, x));
                pb.inc(1);
            }
        }
    }
    pb.finish_and_clear();
    let mut points = Vec::new();
    for path in SendPath::ALL {
        for rec in RECORD_SIZES {
            let samples: Vec<Sample> = rows
                .iter()
                .filter(|r| r.0 == path && r.1 == rec)
                .map(|r| r.3)
                .collect();
            points.push(summarize(path, rec, &samples));
        }
    }
    let mut out = String::new();
    render(p, &points, &mut out);
    let (csv, json) = write_files(&p.out, p, &rows, &points)?;
    print_with_files(out, &csv, &json)
}

/// `--only PATH --record BYTES`: that one path, `p.runs` transfers, each printed as measured.
fn run_only(p: &Params, path: SendPath, rec: usize, src: &mut [u8]) -> Result<()> {
    if !RECORD_SIZES.contains(&rec) {
        return Err(Error::Usage(format!(
            "--record must be one of {RECORD_SIZES:?}, not {rec}"
        )));
    }
    // Filled once: a profile of this mode sees the path's work, not the bench's data generation.
    let seed = random_seed()?;
    fill_source(seed, src);
    for run in 0..p.runs {
        let x = transfer_filled(path, Plan { total: p.size, rec }, p.batch, src, seed).map_err(
            |e| Error::bench_by(format!("{} path, {} records", path.name(), kib(rec)), e),
        )?;
        output::print(&format!(
            "{} {} run {run}: {:.3} s, {:.2} Gbit/s\n",
            path.name(),
            kib(rec),
            x.seconds,
            p.size as f64 * 8.0 / x.seconds / 1e9
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sealink_proto::stream::record::RECORD_HEADER_LEN;
    use std::io::Cursor;

    fn key() -> PacketKey {
        PacketKey::new(SuiteId::Aes128Gcm, &[7u8; 16], false).unwrap()
    }

    /// The records `sealink send` writes for `plan`: each sealed by sealink-proto's
    /// `seal_record` (the stream sender's sealing function) for the same key, sequence number
    /// (the nonce) and data.
    fn shipped_records(src: &[u8], plan: Plan) -> Vec<u8> {
        let mut out = Vec::new();
        for seq in 0..plan.records() {
            let (off, len) = plan.slice(seq, src.len());
            let mut rec = vec![0u8; record::wire_len(len)];
            rec[RECORD_HEADER_LEN..][..len].copy_from_slice(&src[off..off + len]);
            let n =
                record::seal_record(&key(), &mut rec, RecordType::Data, Scope::Encrypt, seq, len)
                    .unwrap();
            out.extend_from_slice(&rec[..n]);
        }
        out
    }

    /// `n` sealed records of `len` bytes each, back to back.
    fn stream(n: u64, len: usize) -> Vec<u8> {
        let src: Vec<u8> = (0..n as usize * len).map(|i| i as u8).collect();
        shipped_records(
            &src,
            Plan {
                total: n * len as u64,
                rec: len,
            },
        )
    }

    #[test]
    fn records_round_trip_through_the_receiver() {
        let s = stream(5, 1000);
        let got = receive(&key(), &mut Cursor::new(s), 1000).unwrap();
        assert_eq!((got.bytes, got.records), (5000, 5));
    }

    #[test]
    fn tampered_record_is_rejected() {
        // A ciphertext byte and the last tag byte of the second record.
        for at in [RECORD_HEADER_LEN + 10, record::wire_len(100) - 1] {
            let mut s = stream(3, 100);
            s[record::wire_len(100) + at] ^= 1; // in the second record
            let e = receive(&key(), &mut Cursor::new(s), 100).unwrap_err();
            let e = crate::error::chain(&e);
            assert!(
                e.contains("record 1") && e.contains("authentication"),
                "{e}"
            );
        }
    }

    #[test]
    fn reordered_truncated_and_oversized_streams_are_rejected() {
        let mut s = stream(2, 100);
        let n = s.len() / 2;
        s.rotate_left(n);
        assert!(receive(&key(), &mut Cursor::new(s), 100).is_err());
        let s = stream(2, 100);
        let e = receive(&key(), &mut Cursor::new(&s[..s.len() - 1]), 100).unwrap_err();
        assert!(
            e.to_string().contains("stream ended inside record 1"),
            "{e}"
        );
        assert!(receive(&key(), &mut Cursor::new(stream(1, 101)), 100).is_err());
    }

    #[test]
    fn every_path_delivers_and_counts() {
        let mut src = vec![0u8; 64 << 10];
        // 37 records of 4 KiB and a short last one.
        let plan = Plan {
            total: 37 * 4096 + 100,
            rec: 4096,
        };
        for path in SendPath::ALL {
            let x = transfer(path, plan, 8, &mut src).unwrap();
            assert_eq!(x.recv.bytes, plan.total);
            let (writes, copied) = match path {
                SendPath::Library => (38, plan.total),
                SendPath::Service => (38, 2 * plan.total + 38 * 32),
                SendPath::IntegratedOne => (38, plan.total),
                SendPath::Integrated => (5, plan.total),
            };
            assert!(
                x.sent.writes >= writes,
                "{path:?}: {} writes",
                x.sent.writes
            );
            assert_eq!(x.sent.copied, copied, "{path:?}");
        }
    }

    /// The library path and the integrated path copy the plaintext into the buffer they seal in
    /// the same way, so they must count the same bytes copied, at any batch: only the number
    /// of writes differs (issue 32: the integrated path's copy went uncounted, and the bench
    /// printed 1.00 against 0.00 B/B, a saving that does not exist).
    #[test]
    fn library_and_integrated_count_the_same_copy() {
        let mut src = vec![0u8; 64 << 10];
        let plan = Plan {
            total: 21 * 8192 + 5,
            rec: 8192,
        };
        let lib = transfer(SendPath::Library, plan, 8, &mut src).unwrap().sent;
        for (path, batch) in [
            (SendPath::IntegratedOne, 8),
            (SendPath::Integrated, 1),
            (SendPath::Integrated, 4),
            (SendPath::Integrated, 64),
        ] {
            let x = transfer(path, plan, batch, &mut src).unwrap().sent;
            assert_eq!(x.copied, lib.copied, "{path:?} at batch {batch}");
            assert_eq!(x.copied, plan.total, "{path:?} at batch {batch}");
        }
    }

    /// What `path` writes to its socket for `plan`, captured over a loopback connection.
    fn wire_bytes(path: SendPath, plan: Plan, batch: usize, src: &[u8]) -> Vec<u8> {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut rx, _) = l.accept().unwrap();
        std::thread::scope(|s| {
            let reader = s.spawn(move || {
                let mut v = Vec::new();
                rx.read_to_end(&mut v).unwrap();
                v
            });
            let k = key();
            match path {
                SendPath::Library => send_library(&k, &mut tx, src, plan),
                SendPath::Service => send_service(&k, &mut tx, src, plan),
                SendPath::IntegratedOne => send_integrated(&k, &mut tx, src, plan, 1),
                SendPath::Integrated => send_integrated(&k, &mut tx, src, plan, batch),
            }
            .unwrap();
            tx.shutdown(Shutdown::Write).unwrap();
            reader.join().unwrap()
        })
    }

    /// Every path's bytes on the wire are exactly the records `sealink send` writes.
    #[test]
    fn every_path_writes_the_shipped_record_format() {
        let mut src = vec![0u8; 64 << 10];
        fill(&mut SimRng::new(3), &mut src);
        let plan = Plan {
            total: 9 * 4096 + 100,
            rec: 4096,
        };
        let want = shipped_records(&src, plan);
        for path in SendPath::ALL {
            let got = wire_bytes(path, plan, 4, &src);
            assert_eq!(got.len(), want.len(), "{path:?}");
            assert!(
                got == want,
                "{path:?}: records differ from the shipped ones"
            );
        }
    }
}
