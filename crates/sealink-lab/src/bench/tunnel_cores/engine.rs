//! Sealing packets through `sealink_engine::Pipeline` as the tunnel does: the job, the keys of
//! either cipher, the driving loop and one timed point.

use super::*;

/// What the workers read: keys, and where released batches go back to the submitter.
pub(crate) struct Ctx {
    pub(super) key: Arc<PacketKey>,
    pub(super) ctr: EncryptingKey,
    pub(super) done: mpsc::Sender<Job>,
}

/// One batch of packets of the flow.
pub(crate) struct Job {
    pub(super) cipher: Cipher,
    /// Submission number: release order is checked against it.
    pub(super) seq: u64,
    pub(super) packets: Vec<Packet>,
    pub(super) failed: bool,
}

impl Work for Job {
    type Ctx = Ctx;
    fn run(&mut self, ctx: &Ctx) {
        for p in &mut self.packets {
            p.len = PACKET;
            match self.cipher {
                Cipher::Gcm => {
                    seal_one(&ctx.key, RECEIVER, Scope::Encrypt, p);
                    self.failed |= p.status.is_err();
                }
                Cipher::Ctr => {
                    let mut iv = [0u8; 16];
                    iv[..8].copy_from_slice(&p.counter.to_be_bytes());
                    let body = &mut p.buf[HEADER_ROOM..HEADER_ROOM + PACKET];
                    let ctx_iv = EncryptionContext::Iv128(FixedLength::from(iv));
                    self.failed |= ctx.ctr.less_safe_encrypt(body, ctx_iv).is_err();
                }
            }
        }
    }
    fn release(self, ctx: &Ctx) {
        // The submitter may have stopped listening at the end of a run: nothing to do then.
        let _ = ctx.done.send(self);
    }
}

/// One configuration of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Config {
    pub cipher: Cipher,
    /// Cores sealing: `workers - 1` engine threads plus the submitting thread, which helps.
    pub workers: usize,
    /// Packets per engine batch.
    pub batch: usize,
    /// One lane (per-flow order kept) or a lane per batch (packets leave as they finish).
    pub ordered: bool,
}

/// What one timed run did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunStats {
    pub packets: u64,
    pub elapsed: Duration,
    pub batches: u64,
    /// Batches released after a batch submitted later than them.
    pub out_of_order: u64,
}

impl RunStats {
    pub fn gbps(&self) -> f64 {
        self.packets as f64 * PACKET as f64 * 8.0 / self.elapsed.as_secs_f64() / 1e9
    }
    pub fn mpps(&self) -> f64 {
        self.packets as f64 / self.elapsed.as_secs_f64() / 1e6
    }
}

/// Keys for a run: a fresh random secret each time.
pub(crate) struct Keys {
    pub(super) key: Arc<PacketKey>,
    pub(super) ctr_key: [u8; 16],
}

impl Keys {
    pub fn new() -> Result<Self> {
        let mut secret = [0u8; 32];
        sealink_crypto::sign::random_bytes(&mut secret).map_err(Error::Random)?;
        let key = Arc::new(kdf::derive_packet_key(
            SuiteId::Aes128Gcm,
            &secret,
            b"tunnel-cores",
            false,
        )?);
        let mut ctr_key = [0u8; 16];
        kdf::derive_key_material(
            SuiteId::Aes128Gcm,
            &secret,
            b"tunnel-cores ctr",
            &mut ctr_key,
        )?;
        secret.fill(0);
        Ok(Keys { key, ctr_key })
    }
    pub(super) fn ctx(&self, done: mpsc::Sender<Job>) -> Result<Ctx> {
        let k = UnboundCipherKey::new(&AES_128, &self.ctr_key)
            .map_err(|_| Error::bench("aws-lc-rs refused the AES-128 key"))?;
        let ctr = EncryptingKey::ctr(k).map_err(|_| Error::bench("aws-lc-rs refused AES-CTR"))?;
        Ok(Ctx {
            key: Arc::clone(&self.key),
            ctr,
            done,
        })
    }
}

/// Fresh packets of random payload (the papers warn that constant buffers flatter ciphers).
pub(crate) fn packets(n: usize, seed: u64) -> Vec<Packet> {
    let mut rng = SimRng::new(seed);
    (0..n)
        .map(|_| {
            let mut body = vec![0u8; PACKET];
            fill(&mut rng, &mut body);
            Packet::with_body(&body, 16)
        })
        .collect()
}

/// Runs `cfg` through the engine for `dur`, or until `limit` batches were released; returns
/// what was released before the deadline. `on_release` sees every released batch's sequence
/// number in release order.
pub(crate) fn drive(
    cfg: Config,
    keys: &Keys,
    dur: Duration,
    limit: Option<u64>,
    mut on_release: impl FnMut(u64),
) -> Result<RunStats> {
    let (tx, rx) = mpsc::channel();
    let lanes = if cfg.ordered { 1 } else { UNORDERED_LANES };
    let pipe = Pipeline::new(Arc::new(keys.ctx(tx)?), lanes, cfg.workers.max(1) - 1);
    let depth = (DEPTH_PER_WORKER * cfg.workers).max(2);
    let seed = random_seed()?;
    let mut free: Vec<Job> = (0..depth)
        .map(|i| Job {
            cipher: cfg.cipher,
            seq: 0,
            packets: packets(cfg.batch, seed.wrapping_add(i as u64)),
            failed: false,
        })
        .collect();
    let mut counter = 0u64;
    let mut next_seq = 0u64;
    let mut highest: Option<u64> = None;
    let mut st = RunStats::default();
    let start = Instant::now();
    loop {
        let stop = start.elapsed() >= dur || limit.is_some_and(|l| next_seq >= l);
        if !stop {
            while let Some(mut j) = free.pop() {
                // The serial step: counters and the flow's order, on the submitting thread.
                for p in &mut j.packets {
                    p.counter = counter;
                    counter += 1;
                }
                j.seq = next_seq;
                next_seq += 1;
                pipe.submit(j.seq as usize % lanes, j);
            }
        } else if st.batches == next_seq {
            break;
        }
        let job = match rx.try_recv() {
            Ok(j) => Some(j),
            Err(_) if pipe.help() => None,
            Err(_) => rx.recv_timeout(Duration::from_millis(1)).ok(),
        };
        if let Some(mut j) = job {
            if j.failed {
                return Err(Error::bench(format!(
                    "sealing failed ({} with {} workers)",
                    cfg.cipher.name(),
                    cfg.workers
                )));
            }
            on_release(j.seq);
            if highest.is_some_and(|h| j.seq < h) {
                st.out_of_order += 1;
            }
            highest = highest.max(Some(j.seq));
            st.batches += 1;
            if !stop {
                st.packets += j.packets.len() as u64;
                st.elapsed = start.elapsed();
            }
            j.failed = false;
            free.push(j);
        }
    }
    Ok(st)
}

/// Median figures over `runs` timed runs after a warm-up.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Point {
    pub gbps: f64,
    pub mpps: f64,
    pub out_of_order: f64,
}

pub(crate) fn measure(
    cfg: Config,
    keys: &Keys,
    seconds: f64,
    runs: usize,
    pb: &indicatif::ProgressBar,
) -> Result<Point> {
    let dur = Duration::from_secs_f64(seconds);
    let (mut g, mut m, mut o) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..=runs {
        let s = drive(cfg, keys, dur, None, |_| {})?;
        pb.inc(1);
        if run > 0 {
            g.push(s.gbps());
            m.push(s.mpps());
            o.push(s.out_of_order as f64 / s.batches.max(1) as f64);
        }
    }
    Ok(Point {
        gbps: median(&g),
        mpps: median(&m),
        out_of_order: median(&o),
    })
}
