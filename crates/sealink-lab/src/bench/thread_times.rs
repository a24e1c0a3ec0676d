//! `sealink-lab bench thread-times`: paper 004's sender experiment (section 5) rerun on this
//! machine. One communication thread sends a volume of data over TCP (loopback here; the paper
//! used a 10 Gb/s NIC) without encryption, while N encryption threads each encrypt their share
//! of the same volume in 3 kB buffers with AES-128-CTR (the paper's cipher; AES-128-GCM on
//! request) over buffers unrelated to the sent data, as the paper did. Every thread starts at
//! one barrier and times itself; the estimate is the volume over the slowest thread's time.
//!
//! - Figure 8: each thread's time against N;
//! - Figure 10: the distribution of the thread times over repeated tests at two values of N;
//! - Figure 11: the thread times against the data volume at the N that Figure 8 found best;
//! - Table 1: sending alone, encrypting then sending in one thread, and the cipher alone on
//!   one thread, all measured in the same run.
//!
//! A receiving thread drains the socket: it stands in for the paper's remote host, runs on
//! the same cores, and its time is recorded but not counted in the estimate.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use aws_lc_rs::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::cipher::{AES_128, EncryptingKey, EncryptionContext, UnboundCipherKey};
use aws_lc_rs::iv::FixedLength;

use super::{fill, median, print_with_files, random_seed};
use crate::error::{Error, Result};
use crate::output;
use crate::report::{Chart, PointLog, RunRecord, Table, record};

/// The paper's encryption buffer: "240 Gbit of data, split in buffers of 3 kB".
pub const BUFFER: usize = 3000;
/// Bytes per `write` of the communication thread.
pub const WRITE: usize = 64 << 10;
/// Buffers each encryption thread cycles through (192 KB: its own, in its cache, as the paper's
/// buffers were unrelated to the sent data).
const RING: usize = 64;
/// Largest volume accepted (bytes).
pub const MAX_VOLUME: u64 = 64 << 30;
/// Most encryption threads accepted.
pub const MAX_THREADS: usize = 256;
/// Every thread time as it is measured (a stopped run keeps these).
pub const POINTS_FILE: &str = "thread-times-points.csv";
const POINTS_HEAD: [&str; 7] = [
    "experiment",
    "enc_threads",
    "volume_bytes",
    "test",
    "role",
    "index",
    "seconds",
];

/// The encryption threads' cipher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cipher {
    /// AES-128-CTR through aws-lc-rs: the paper's cipher.
    Ctr,
    /// AES-128-GCM through aws-lc-rs (seal in place, tag apart): the tunnel's suite.
    Gcm,
}

impl Cipher {
    pub fn name(self) -> &'static str {
        match self {
            Cipher::Ctr => "aes128-ctr",
            Cipher::Gcm => "aes128-gcm",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "aes128-ctr" | "ctr" => Some(Cipher::Ctr),
            "aes128-gcm" | "gcm" => Some(Cipher::Gcm),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Params {
    /// Encryption thread counts for Figure 8.
    pub threads: Vec<usize>,
    /// The two thread counts whose distribution Figure 10 shows.
    pub spread: Vec<usize>,
    /// Bytes sent by the communication thread and encrypted by the encryption threads together.
    pub volume: u64,
    /// Multiples of `volume` for Figure 11.
    pub scales: Vec<f64>,
    /// Tests per point (Figures 8 and 11: medians; Figure 10: the distribution over them).
    pub tests: usize,
    pub cipher: Cipher,
    pub quick: bool,
    pub out: PathBuf,
}

/// Logical CPUs and physical cores (sibling groups; the logical count where sysfs says nothing).
fn cpus() -> (usize, usize) {
    let logical = record::cores().max(1);
    let physical = super::tunnel_cores::sibling_groups().len();
    (logical, if physical == 0 { logical } else { physical })
}

/// Figure 10's two thread counts by default: the paper's were 9 and 15 on 8 cores with 16
/// hardware threads, that is one more than the cores, and one fewer than the hardware threads
/// (with the communication thread, every hardware thread busy). The same rule here.
pub fn default_spread() -> Vec<usize> {
    let (logical, physical) = cpus();
    let mut v = vec![(logical - 1).max(1), physical + 1];
    v.sort_unstable();
    v.dedup();
    v
}

/// Figure 8's thread counts by default: 1 up to twice the hardware threads plus one.
pub fn default_threads() -> Vec<usize> {
    (1..=2 * cpus().0 + 1).collect()
}

/// One encryption thread's key (the CTR key boxed: it holds aws-lc's expanded schedule).
enum Enc {
    Ctr(Box<EncryptingKey>),
    Gcm(LessSafeKey),
}

impl Enc {
    fn new(cipher: Cipher, key: &[u8; 16]) -> Result<Self> {
        Ok(match cipher {
            Cipher::Ctr => {
                let k = UnboundCipherKey::new(&AES_128, key)
                    .map_err(|_| Error::bench("aws-lc-rs refused the AES-128 key"))?;
                Enc::Ctr(Box::new(
                    EncryptingKey::ctr(k).map_err(|_| Error::bench("aws-lc-rs refused AES-CTR"))?,
                ))
            }
            Cipher::Gcm => Enc::Gcm(LessSafeKey::new(
                UnboundKey::new(&AES_128_GCM, key)
                    .map_err(|_| Error::bench("aws-lc-rs refused the AES-128-GCM key"))?,
            )),
        })
    }

    /// Encrypts `buf` in place under counter/nonce `n` (unique per buffer within a run).
    fn apply(&self, n: u64, buf: &mut [u8]) -> Result<()> {
        let mut iv = [0u8; 16];
        iv[..8].copy_from_slice(&n.to_be_bytes());
        match self {
            Enc::Ctr(k) => k
                .less_safe_encrypt(buf, EncryptionContext::Iv128(FixedLength::from(iv)))
                .map(|_| ())
                .map_err(|_| Error::bench("AES-CTR failed")),
            Enc::Gcm(k) => {
                let nonce: [u8; 12] = iv[..12].try_into().expect("12 bytes");
                k.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), buf)
                    .map(|_| ())
                    .map_err(|_| Error::bench("AES-GCM failed"))
            }
        }
    }
}

/// Encrypts `bytes` in [`BUFFER`]-byte buffers of `ring`, in place, numbering them from
/// `first`; returns the buffers encrypted.
fn encrypt_share(enc: &Enc, ring: &mut [Vec<u8>], bytes: u64, first: u64) -> Result<u64> {
    let mut left = bytes;
    let mut n = 0u64;
    while left > 0 {
        let take = left.min(BUFFER as u64) as usize;
        let i = (n % ring.len() as u64) as usize;
        enc.apply(first + n, &mut ring[i][..take])?;
        left -= take as u64;
        n += 1;
    }
    Ok(n)
}

/// Random buffers for one thread.
fn ring(seed: u64) -> Vec<Vec<u8>> {
    let mut rng = sealink_proto::sim::SimRng::new(seed);
    (0..RING)
        .map(|_| {
            let mut b = vec![0u8; BUFFER];
            fill(&mut rng, &mut b);
            b
        })
        .collect()
}

/// Sends `bytes` over `s` in [`WRITE`]-byte writes of `chunk`, encrypting each write's worth
/// first (in [`BUFFER`]-byte buffers) when `enc` is given: one thread doing both.
fn send(s: &mut TcpStream, chunk: &mut [u8], bytes: u64, enc: Option<&Enc>) -> Result<()> {
    let mut left = bytes;
    let mut n = 0u64;
    while left > 0 {
        let take = left.min(chunk.len() as u64) as usize;
        if let Some(e) = enc {
            for b in chunk[..take].chunks_mut(BUFFER) {
                e.apply(n, b)?;
                n += 1;
            }
        }
        s.write_all(&chunk[..take])
            .map_err(|e| Error::bench_by("the communication thread's write failed", e))?;
        left -= take as u64;
    }
    Ok(())
}

/// The times of one test, in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Test {
    /// The communication thread (None when the test had none).
    pub comm: Option<f64>,
    /// Each encryption thread, in the order they were started.
    pub enc: Vec<f64>,
    /// The receiving thread (stands in for the remote host; not in the estimate).
    pub recv: Option<f64>,
}

impl Test {
    /// The slowest sending-side thread: the paper's bottleneck.
    pub fn slowest(&self) -> f64 {
        self.enc
            .iter()
            .copied()
            .chain(self.comm)
            .fold(0.0, f64::max)
    }
    /// The paper's estimate: the volume over the slowest thread's time, Gbit/s.
    pub fn gbps(&self, volume: u64) -> f64 {
        volume as f64 * 8.0 / self.slowest() / 1e9
    }
}

type Timed = std::thread::JoinHandle<Result<f64>>;

/// Starts a thread that waits at `barrier`, then runs `f` and returns its seconds.
fn timed(
    name: &str,
    barrier: &Arc<Barrier>,
    f: impl FnOnce() -> Result<()> + Send + 'static,
) -> Result<Timed> {
    let b = Arc::clone(barrier);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            b.wait();
            let t = Instant::now();
            f()?;
            Ok(t.elapsed().as_secs_f64())
        })
        .map_err(|e| Error::bench_by("cannot start a thread", e))
}

fn join(h: Timed) -> Result<f64> {
    h.join()
        .map_err(|_| Error::bench("a timed thread panicked"))?
}

/// One test: `comm` says whether a communication thread sends `volume` bytes (encrypting them
/// first itself when `inline` is given), and `enc` encryption threads share `volume` bytes.
pub fn one_test(
    volume: u64,
    comm: bool,
    inline: Option<Cipher>,
    enc: usize,
    cipher: Cipher,
) -> Result<Test> {
    let mut key = [0u8; 16];
    sealink_crypto::sign::random_bytes(&mut key).map_err(Error::Random)?;
    let seed = random_seed()?;
    let barrier = Arc::new(Barrier::new(enc + 2 * usize::from(comm)));
    let mut recv = None;
    let mut sender = None;
    if comm {
        let l = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Error::bench_by("cannot listen on loopback", e))?;
        let addr = l
            .local_addr()
            .map_err(|e| Error::bench_by("no local address", e))?;
        let mut out = TcpStream::connect(addr)
            .map_err(|e| Error::bench_by("cannot connect over loopback", e))?;
        let (mut inp, _) = l
            .accept()
            .map_err(|e| Error::bench_by("cannot accept over loopback", e))?;
        recv = Some(timed("sl-receiver", &barrier, move || {
            let mut buf = vec![0u8; 256 << 10];
            loop {
                match inp.read(&mut buf) {
                    Ok(0) => return Ok(()),
                    Ok(_) => {}
                    Err(e) => return Err(Error::bench_by("the receiving thread failed", e)),
                }
            }
        })?);
        let mut chunk = vec![0u8; WRITE];
        fill(&mut sealink_proto::sim::SimRng::new(seed), &mut chunk);
        let inline = inline.map(|c| Enc::new(c, &key)).transpose()?;
        sender = Some(timed("sl-comm", &barrier, move || {
            send(&mut out, &mut chunk, volume, inline.as_ref())?;
            // The time ends when the last write returns, as a sender's would; the close that
            // follows lets the receiver see the end.
            drop(out);
            Ok(())
        })?);
    }
    let per = volume / enc.max(1) as u64;
    let mut encs = Vec::new();
    for i in 0..enc {
        let e = Enc::new(cipher, &key)?;
        let mut r = ring(seed.wrapping_add(1 + i as u64));
        // Each thread numbers its buffers from its own range: no nonce is used twice.
        let first = (i as u64) << 40;
        // The last thread takes what the division left over.
        let bytes = if i + 1 == enc {
            volume - per * (enc as u64 - 1)
        } else {
            per
        };
        encs.push(timed("sl-enc", &barrier, move || {
            encrypt_share(&e, &mut r, bytes, first).map(|_| ())
        })?);
    }
    let enc_times = encs.into_iter().map(join).collect::<Result<Vec<_>>>()?;
    let comm_t = sender.map(join).transpose()?;
    let recv_t = recv.map(join).transpose()?;
    Ok(Test {
        comm: comm_t,
        enc: enc_times,
        recv: recv_t,
    })
}

/// Per rank (fastest first), the mean over `tests` of the rank's time: "six threads around 36
/// seconds, one between 45 and 50, two near 70" is this, read off the paper's Figure 10.
pub fn rank_means(tests: &[Vec<f64>]) -> Vec<f64> {
    let n = tests.iter().map(Vec::len).min().unwrap_or(0);
    (0..n)
        .map(|r| {
            let sum: f64 = tests
                .iter()
                .map(|t| {
                    let mut s = t.clone();
                    s.sort_by(f64::total_cmp);
                    s[r]
                })
                .sum();
            sum / tests.len() as f64
        })
        .collect()
}

/// Least-squares line y = a + b x through `pts`, and its R².
pub fn linear_fit(pts: &[(f64, f64)]) -> (f64, f64, f64) {
    let n = pts.len() as f64;
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let syy: f64 = pts.iter().map(|p| (p.1 - my).powi(2)).sum();
    let b = sxy / sxx;
    let a = my - b * mx;
    let r2 = if syy == 0.0 {
        1.0
    } else {
        sxy * sxy / (sxx * syy)
    };
    (a, b, r2)
}

fn validate(p: &Params) -> Result<()> {
    if p.threads.is_empty() || p.spread.is_empty() || p.scales.is_empty() {
        return Err(Error::Usage(
            "give at least one thread count, one Figure 10 count and one volume scale".into(),
        ));
    }
    if let Some(t) = p
        .threads
        .iter()
        .chain(&p.spread)
        .find(|t| !(1..=MAX_THREADS).contains(*t))
    {
        return Err(Error::Usage(format!(
            "{t} encryption threads is not within 1..={MAX_THREADS}"
        )));
    }
    if !(BUFFER as u64..=MAX_VOLUME).contains(&p.volume) {
        return Err(Error::Usage(format!(
            "volume {} is not within {BUFFER}..={MAX_VOLUME} bytes",
            p.volume
        )));
    }
    if let Some(s) = p
        .scales
        .iter()
        .find(|s| !(s.is_finite() && **s > 0.0 && **s * p.volume as f64 <= MAX_VOLUME as f64))
    {
        return Err(Error::Usage(format!("volume scale {s} is out of range")));
    }
    if p.tests == 0 {
        return Err(Error::Usage("--tests must be at least 1".into()));
    }
    Ok(())
}

fn f3(v: f64) -> String {
    format!("{v:.3}")
}

/// Seconds to the tenth of a millisecond (the default volume's threads take 0.05-0.5 s).
fn s4(v: f64) -> String {
    format!("{v:.4}")
}

fn mib(b: u64) -> String {
    format!("{:.0}", b as f64 / (1 << 20) as f64)
}

pub fn run(p: &Params) -> Result<()> {
    run_with(p, &mut |_| Ok(()))
}

/// [`run`], calling `after_point` after each test's times are logged (an error stops the run
/// there, as a kill would).
fn run_with(p: &Params, after_point: &mut dyn FnMut(&PointLog) -> Result<()>) -> Result<()> {
    validate(p)?;
    let mut log = PointLog::create(&p.out, POINTS_FILE, POINTS_HEAD)?;
    let vols: Vec<u64> = p
        .scales
        .iter()
        .map(|s| ((s * p.volume as f64) as u64).max(BUFFER as u64))
        .collect();
    let table1_tests = 4;
    let steps = (p.tests * (p.threads.len() + vols.len())
        + 10 * p.spread.len()
        + table1_tests * p.tests) as u64;
    let pb = output::progress(steps, "thread-times");
    // Logs one test's thread times at once.
    let mut logged = |what: &str, n: usize, vol: u64, test: usize, t: &Test| -> Result<()> {
        let row = |role: &str, i: usize, s: f64| {
            [
                what.to_owned(),
                n.to_string(),
                vol.to_string(),
                test.to_string(),
                role.to_owned(),
                i.to_string(),
                format!("{s:.6}"),
            ]
        };
        if let Some(c) = t.comm {
            log.append(row("comm", 0, c))?;
        }
        for (i, e) in t.enc.iter().enumerate() {
            log.append(row("enc", i, *e))?;
        }
        if let Some(r) = t.recv {
            log.append(row("receiver", 0, r))?;
        }
        after_point(&log)
    };
    let res = (|| -> Result<_> {
        // Table 1 first: the cipher on one thread, sending alone, and both in one thread.
        let mut t1: Vec<(&str, Vec<f64>)> = Vec::new();
        let single = [
            (
                "send, no encryption (comm thread alone)",
                true,
                None,
                0,
                p.cipher,
            ),
            (
                "encrypt then send in one thread, aes128-ctr",
                true,
                Some(Cipher::Ctr),
                0,
                p.cipher,
            ),
            ("aes128-ctr, one thread", false, None, 1, Cipher::Ctr),
            ("aes128-gcm, one thread", false, None, 1, Cipher::Gcm),
        ];
        for (i, (name, comm, inline, enc, c)) in single.into_iter().enumerate() {
            let mut v = Vec::new();
            for test in 0..p.tests {
                let t = one_test(p.volume, comm, inline, enc, c)?;
                pb.inc(1);
                logged(&format!("table1-{i}"), enc, p.volume, test, &t)?;
                v.push(t.gbps(p.volume));
            }
            t1.push((name, v));
        }
        // Figure 8.
        let mut fig8: Vec<(usize, Vec<Test>)> = Vec::new();
        for &n in &p.threads {
            let mut v = Vec::new();
            for test in 0..p.tests {
                let t = one_test(p.volume, true, None, n, p.cipher)?;
                pb.inc(1);
                logged("figure8", n, p.volume, test, &t)?;
                v.push(t);
            }
            fig8.push((n, v));
        }
        // Figure 10: ten tests each, as the paper.
        let mut fig10: Vec<(usize, Vec<Test>)> = Vec::new();
        for &n in &p.spread {
            let mut v = Vec::new();
            for test in 0..10 {
                let t = one_test(p.volume, true, None, n, p.cipher)?;
                pb.inc(1);
                logged("figure10", n, p.volume, test, &t)?;
                v.push(t);
            }
            fig10.push((n, v));
        }
        // Figure 11 at the thread count Figure 8 found best (the highest median estimate).
        let best = fig8
            .iter()
            .map(|(n, v)| {
                let g: Vec<f64> = v.iter().map(|t| t.gbps(p.volume)).collect();
                (*n, median(&g))
            })
            .fold((0, f64::MIN), |a, b| if b.1 > a.1 { b } else { a })
            .0;
        let mut fig11: Vec<(u64, Vec<Test>)> = Vec::new();
        for &vol in &vols {
            let mut v = Vec::new();
            for test in 0..p.tests {
                let t = one_test(vol, true, None, best, p.cipher)?;
                pb.inc(1);
                logged("figure11", best, vol, test, &t)?;
                v.push(t);
            }
            fig11.push((vol, v));
        }
        Ok((t1, fig8, fig10, best, fig11))
    })();
    pb.finish_and_clear();
    let (t1, fig8, fig10, best, fig11) = res?;
    report(p, &t1, &fig8, &fig10, best, &fig11)
}

/// Median over tests of a per-test figure.
fn med(tests: &[Test], f: impl Fn(&Test) -> f64) -> f64 {
    median(&tests.iter().map(f).collect::<Vec<_>>())
}

fn enc_min(t: &Test) -> f64 {
    t.enc.iter().copied().fold(f64::INFINITY, f64::min)
}

fn enc_max(t: &Test) -> f64 {
    t.enc.iter().copied().fold(0.0, f64::max)
}

fn report(
    p: &Params,
    t1: &[(&str, Vec<f64>)],
    fig8: &[(usize, Vec<Test>)],
    fig10: &[(usize, Vec<Test>)],
    best: usize,
    fig11: &[(u64, Vec<Test>)],
) -> Result<()> {
    let (logical, physical) = cpus();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "sealink bench thread-times: paper 004's sender threads (section 5), one communication thread (TCP over loopback, {} KiB writes, no encryption) and N encryption threads ({}, {BUFFER}-byte buffers, unrelated to the sent data)",
        WRITE >> 10,
        p.cipher.name()
    );
    if p.quick {
        let _ = writeln!(out, "QUICK MODE: small volume, not a measurement");
    }
    let _ = writeln!(
        out,
        "machine: {} ({logical} logical CPUs, {physical} cores); volume {} MiB per test; {} tests per point (Figure 10: 10); estimate = volume / slowest sending thread (the paper's); a receiving thread drains the socket on the same CPUs (not in the estimate)\n",
        record::cpu_model(),
        mib(p.volume),
        p.tests
    );

    // Table 1.
    let _ = writeln!(out, "### Table 1 on this machine (median Gbit/s)");
    let mut tt = Table::new(["row", "Gbit/s", "paper 004 (Table 1, bi-Xeon 5530, 10 GbE)"]);
    let paper = [
        "9.2 Gb/s without IPsec (best)",
        "0.8 Gb/s, IPsec in tunnel mode (AES-CTR)",
        "0.8 Gb/s, AES-CTR mono-thread",
        "",
    ];
    for ((name, v), pp) in t1.iter().zip(paper) {
        tt.row([name.to_string(), f3(median(v)), pp.into()]);
    }
    out.push_str(&tt.markdown());

    let (t8, c8, chart8) = report_figure8(&mut out, p, fig8, best);
    let (t10, chart10) = report_figure10(&mut out, fig10);
    let (c11, chart11) = report_figure11(&mut out, p, fig11, best);

    let mut rec = RunRecord::new("thread-times");
    rec.file(POINTS_FILE);
    let csv = rec.write_csv(&p.out, "table1.csv", &tt)?;
    rec.write_csv(&p.out, "figure8.csv", &c8)?;
    rec.write_csv(&p.out, "figure8-medians.csv", &t8)?;
    rec.write_svg(&p.out, "figure8.svg", &chart8)?;
    rec.write_csv(&p.out, "figure10.csv", &t10)?;
    rec.write_svg(&p.out, "figure10.svg", &chart10)?;
    rec.write_csv(&p.out, "figure11.csv", &c11)?;
    rec.write_svg(&p.out, "figure11.svg", &chart11)?;
    for (name, v) in t1 {
        rec.figure(format!("table1 {name}"), median(v), "Gbit/s");
    }
    rec.figure("best encryption threads", best as f64, "threads");
    let json = rec.write(&p.out)?;
    print_with_files(out, &csv, &json)
}

/// The report's Figure 8: thread times against encryption threads; its medians' table, every
/// test's table and the chart.
fn report_figure8(
    out: &mut String,
    p: &Params,
    fig8: &[(usize, Vec<Test>)],
    best: usize,
) -> (Table, Table, Chart) {
    let _ = writeln!(
        out,
        "\n### Figure 8: thread times against encryption threads (median of {} tests, seconds)",
        p.tests
    );
    let mut t8 = Table::new([
        "enc threads",
        "comm",
        "enc fastest",
        "enc slowest",
        "receiver",
        "estimate Gbit/s",
    ]);
    let mut c8 = Table::new(["enc_threads", "test", "role", "index", "seconds"]);
    for (n, tests) in fig8 {
        t8.row([
            n.to_string(),
            s4(med(tests, |t| t.comm.unwrap_or(f64::NAN))),
            s4(med(tests, enc_min)),
            s4(med(tests, enc_max)),
            s4(med(tests, |t| t.recv.unwrap_or(f64::NAN))),
            f3(med(tests, |t| t.gbps(p.volume))),
        ]);
        for (k, t) in tests.iter().enumerate() {
            c8.row([
                n.to_string(),
                k.to_string(),
                "comm".into(),
                "0".into(),
                t.comm.unwrap_or(f64::NAN).to_string(),
            ]);
            for (i, e) in t.enc.iter().enumerate() {
                c8.row([
                    n.to_string(),
                    k.to_string(),
                    "enc".into(),
                    i.to_string(),
                    e.to_string(),
                ]);
            }
        }
    }
    out.push_str(&t8.markdown());
    let _ = writeln!(
        out,
        "best: {best} encryption threads (highest median estimate); paper: linear gain below 7 threads on 8 cores, best at 15 + 1 (5.75 Gb/s), nothing gained from 16"
    );
    let series = |f: &dyn Fn(&Test) -> f64| -> Vec<(f64, f64)> {
        fig8.iter().map(|(n, v)| (*n as f64, med(v, f))).collect()
    };
    let chart8 = Chart::new(
        "thread-times: Figure 8, thread times against encryption threads",
        "encryption threads",
        "seconds",
    )
    .series("communication", series(&|t| t.comm.unwrap_or(f64::NAN)))
    .series("encryption, fastest", series(&enc_min))
    .series("encryption, slowest", series(&enc_max));
    (t8, c8, chart8)
}

/// The report's Figure 10: the encryption threads' times by rank; its table and chart.
fn report_figure10(out: &mut String, fig10: &[(usize, Vec<Test>)]) -> (Table, Chart) {
    let _ = writeln!(
        out,
        "\n### Figure 10: distribution of the encryption threads' times over 10 tests (seconds; rank 1 = fastest)"
    );
    let mut t10 = Table::new(["enc threads", "rank", "mean", "min", "max"]);
    let mut chart10 = Chart::new(
        "thread-times: Figure 10, encryption thread times by rank (mean of 10 tests)",
        "rank (1 = fastest)",
        "seconds",
    );
    for (n, tests) in fig10 {
        let enc: Vec<Vec<f64>> = tests.iter().map(|t| t.enc.clone()).collect();
        let means = rank_means(&enc);
        for (r, m) in means.iter().enumerate() {
            let at: Vec<f64> = enc
                .iter()
                .map(|t| {
                    let mut s = t.clone();
                    s.sort_by(f64::total_cmp);
                    s[r]
                })
                .collect();
            t10.row([
                n.to_string(),
                (r + 1).to_string(),
                s4(*m),
                s4(at.iter().copied().fold(f64::INFINITY, f64::min)),
                s4(at.iter().copied().fold(0.0, f64::max)),
            ]);
        }
        let spread =
            means.last().copied().unwrap_or(f64::NAN) / means.first().copied().unwrap_or(f64::NAN);
        let _ = writeln!(out, "{n} threads: slowest / fastest (means) {spread:.2}");
        chart10 = chart10.series(
            format!("{n} encryption threads"),
            means
                .iter()
                .enumerate()
                .map(|(r, m)| ((r + 1) as f64, *m))
                .collect(),
        );
    }
    out.push_str(&t10.markdown());
    let _ = writeln!(
        out,
        "paper: with 9 threads on 8 cores, six near 36 s, one 45-50 s, two near 70 s (a tail); with 15 the times are uniform"
    );
    (t10, chart10)
}

/// The report's Figure 11: thread times against data volume; its CSV's table and the chart.
fn report_figure11(
    out: &mut String,
    p: &Params,
    fig11: &[(u64, Vec<Test>)],
    best: usize,
) -> (Table, Chart) {
    let _ = writeln!(
        out,
        "\n### Figure 11: thread times against data volume ({best} encryption threads; median of {} tests, seconds)",
        p.tests
    );
    let mut t11 = Table::new([
        "volume MiB",
        "comm",
        "enc fastest",
        "enc slowest",
        "estimate Gbit/s",
    ]);
    let mut c11 = Table::new([
        "volume_bytes",
        "comm_s",
        "enc_fastest_s",
        "enc_slowest_s",
        "gbps",
    ]);
    let pick = |f: &dyn Fn(&Test) -> f64| -> Vec<(f64, f64)> {
        fig11
            .iter()
            .map(|(v, t)| (*v as f64 / (1 << 20) as f64, med(t, f)))
            .collect()
    };
    for (vol, tests) in fig11 {
        let row = [
            med(tests, |t| t.comm.unwrap_or(f64::NAN)),
            med(tests, enc_min),
            med(tests, enc_max),
            med(tests, |t| t.gbps(*vol)),
        ];
        t11.row([mib(*vol), s4(row[0]), s4(row[1]), s4(row[2]), f3(row[3])]);
        c11.row(std::iter::once(vol.to_string()).chain(row.iter().map(|v| v.to_string())));
    }
    out.push_str(&t11.markdown());
    let (comm_pts, slow_pts) = (pick(&|t| t.comm.unwrap_or(f64::NAN)), pick(&enc_max));
    if fig11.len() >= 2 {
        for (name, pts) in [
            ("communication", &comm_pts),
            ("slowest encryption", &slow_pts),
        ] {
            let (a, b, r2) = linear_fit(pts);
            let _ = writeln!(
                out,
                "{name}: time = {a:.4} s + {:.3} ms per MiB, R² = {r2:.4}",
                b * 1e3
            );
        }
    }
    let bottleneck = if slow_pts.iter().zip(&comm_pts).all(|(e, c)| e.1 > c.1) {
        "encryption"
    } else if slow_pts.iter().zip(&comm_pts).all(|(e, c)| e.1 < c.1) {
        "communication"
    } else {
        "neither at every volume"
    };
    let _ = writeln!(
        out,
        "bottleneck here: {bottleneck}; paper: every thread's time linear in the data size, encryption the bottleneck"
    );
    let chart11 = Chart::new(
        "thread-times: Figure 11, thread times against data volume",
        "volume (MiB)",
        "seconds",
    )
    .series("communication", comm_pts.clone())
    .series("encryption, fastest", pick(&enc_min))
    .series("encryption, slowest", slow_pts.clone());
    (c11, chart11)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_and_lines() {
        let t = vec![vec![3.0, 1.0, 2.0], vec![2.0, 4.0, 6.0]];
        assert_eq!(rank_means(&t), vec![1.5, 3.0, 4.5]);
        let (a, b, r2) = linear_fit(&[(1.0, 3.0), (2.0, 5.0), (4.0, 9.0)]);
        assert!((a - 1.0).abs() < 1e-12 && (b - 2.0).abs() < 1e-12 && (r2 - 1.0).abs() < 1e-12);
        let (_, _, r2) = linear_fit(&[(1.0, 1.0), (2.0, 3.0), (3.0, 1.0)]);
        assert!(r2 < 0.5, "{r2}");
    }

    /// The encryption threads' work is real: CTR twice under the same numbering restores the
    /// buffers; GCM changes them; the bytes are split as asked.
    #[test]
    fn encryption_is_applied_to_every_buffer() {
        let key = [7u8; 16];
        let e = Enc::new(Cipher::Ctr, &key).unwrap();
        let orig = ring(5);
        let mut r = orig.clone();
        assert_eq!(
            encrypt_share(&e, &mut r, (RING * BUFFER) as u64, 0).unwrap(),
            RING as u64
        );
        assert!(r.iter().zip(&orig).all(|(a, b)| a != b));
        encrypt_share(&e, &mut r, (RING * BUFFER) as u64, 0).unwrap();
        assert_eq!(r, orig);
        // A partial last buffer.
        assert_eq!(
            encrypt_share(&e, &mut r, 2 * BUFFER as u64 + 1, 0).unwrap(),
            3
        );
        let g = Enc::new(Cipher::Gcm, &key).unwrap();
        let mut r2 = orig.clone();
        encrypt_share(&g, &mut r2, BUFFER as u64, 9).unwrap();
        assert_ne!(r2[0], orig[0]);
        assert_eq!(r2[1], orig[1]);
    }

    /// One test with a communication thread and three encryption threads: every thread
    /// reports a time, the receiver saw the data, and the estimate uses the slowest.
    #[test]
    fn a_test_times_every_thread() {
        let t = one_test(4 << 20, true, None, 3, Cipher::Ctr).unwrap();
        assert_eq!(t.enc.len(), 3);
        assert!(t.comm.unwrap() > 0.0 && t.recv.unwrap() > 0.0);
        assert!(t.enc.iter().all(|e| *e > 0.0));
        let slowest = t.enc.iter().copied().chain(t.comm).fold(0.0, f64::max);
        assert_eq!(t.slowest(), slowest);
        assert!((t.gbps(4 << 20) - (4u64 << 20) as f64 * 8.0 / slowest / 1e9).abs() < 1e-9);
        let alone = one_test(1 << 20, false, None, 1, Cipher::Gcm).unwrap();
        assert!(alone.comm.is_none() && alone.recv.is_none() && alone.enc.len() == 1);
    }

    /// A quick run writes every figure's files, and each test's rows reach the points file
    /// as they are measured.
    #[test]
    fn a_quick_run_writes_the_figures() {
        let out = crate::bench::test_support::scratch("tt");
        let p = Params {
            threads: vec![1, 2],
            spread: vec![2],
            volume: 1 << 20,
            scales: vec![0.5, 1.0],
            tests: 1,
            cipher: Cipher::Ctr,
            quick: true,
            out: out.clone(),
        };
        let mut seen = 0;
        run_with(&p, &mut |log| {
            assert!(log.rows() > seen, "each test appends rows");
            seen = log.rows();
            Ok(())
        })
        .unwrap();
        for f in [
            "table1.csv",
            "figure8.csv",
            "figure8.svg",
            "figure10.csv",
            "figure10.svg",
            "figure11.csv",
            "figure11.svg",
        ] {
            assert!(out.join(f).exists(), "{f}");
        }
        let f10 = std::fs::read_to_string(out.join("figure10.csv")).unwrap();
        assert_eq!(f10.lines().count(), 1 + 2, "two ranks of 2 threads: {f10}");
        // Figure 10: ten tests of a comm, 2 encryption and a receiving thread's rows.
        let pts = std::fs::read_to_string(out.join(POINTS_FILE)).unwrap();
        assert_eq!(
            pts.lines().filter(|l| l.contains(",figure10,")).count(),
            10 * 4
        );
        std::fs::remove_dir_all(&out).unwrap();
    }
}
