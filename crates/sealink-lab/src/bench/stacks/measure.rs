//! `bench stacks`' measuring: the channels and engines of one point, the closed-loop driver,
//! the raw library's rate, and the statistics of the runs (median confidence intervals, Amdahl
//! fits and projections).

use super::*;

/// The distribution-free confidence interval of the median: the widest symmetric pair of order
/// statistics whose binomial coverage reaches `CONFIDENCE` (min..max if none does).
pub(super) fn estimate(values: &[f64]) -> Estimate {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return Estimate {
            median: f64::NAN,
            lo: f64::NAN,
            hi: f64::NAN,
        };
    }
    let (lo, hi) = ci_ranks(n);
    Estimate {
        median: median(&v),
        lo: v[lo],
        hi: v[hi],
    }
}

/// 0-based ranks (lo, hi) of the interval [x_(j), x_(n-j+1)] (1-based) with the largest j whose
/// coverage P(j <= B <= n - j), B ~ Bin(n, 1/2), is at least `CONFIDENCE`.
pub(super) fn ci_ranks(n: usize) -> (usize, usize) {
    let pmf = |i: usize| -> f64 {
        // C(n, i) / 2^n, in logs to stay finite for large n.
        let ln_c: f64 = (1..=i)
            .map(|k| ((n - i + k) as f64).ln() - (k as f64).ln())
            .sum();
        (ln_c - n as f64 * std::f64::consts::LN_2).exp()
    };
    let mut best = (0, n - 1);
    for j in 1..=n / 2 {
        let cover: f64 = (j..=n - j).map(pmf).sum();
        if cover >= CONFIDENCE {
            best = (j - 1, n - j);
        } else {
            break;
        }
    }
    best
}

/// Fresh keys for a stack's channels (one key pair per channel, random secret).
pub(super) fn channels(stack: &Stack, n: usize, serial_ns: u64) -> Result<Vec<Channel>> {
    (0..n)
        .map(|i| {
            let mut secret = [0u8; 32];
            sealink_crypto::sign::random_bytes(&mut secret).map_err(Error::Random)?;
            let key = Arc::new(kdf::derive_packet_key(
                stack.suite,
                &secret,
                b"bench stacks",
                true,
            )?);
            secret.fill(0);
            Ok(
                Channel::new(Arc::clone(&key), key, 0x5EA1_0000 + i as u32, stack.scope)
                    .with_insecure_plaintext(stack.scope == Scope::None)
                    .with_serial_ns(serial_ns),
            )
        })
        .collect()
}

/// One engine, driven in a closed loop: `windows` consecutive windows of `window` each, the
/// first a warm-up. Returns the payload Mbit/s of the timed windows.
#[allow(clippy::too_many_arguments)]
pub(super) fn drive(
    engine: &mut dyn Engine,
    source: &Source,
    nchan: usize,
    size: usize,
    chunk: usize,
    workers: usize,
    window: Duration,
    windows: usize,
) -> Result<Vec<f64>> {
    let op = match source {
        Source::Send { .. } => Op::Seal,
        Source::Recv { .. } => Op::Open,
    };
    // Enough batches in flight to keep every worker busy while the caller releases output.
    let per_chan = (2 * workers + 2).div_ceil(nchan).max(1);
    let mut cursors = vec![0usize; nchan];
    let mut rng = SimRng::new(random_seed()?);
    let mut next_batch = |c: usize, mut packets: Vec<Packet>, engine: &mut dyn Engine| {
        match source {
            Source::Send { size } => {
                for p in &mut packets {
                    p.len = *size;
                    p.status = Ok(());
                }
            }
            Source::Recv { pools } => {
                let pool = &pools[c];
                if cursors[c] == 0 {
                    engine.restart_replay_window(c);
                }
                for p in &mut packets {
                    engines::set_device(p, Arc::clone(&pool[cursors[c]]));
                    p.status = Ok(());
                    cursors[c] = (cursors[c] + 1) % pool.len();
                }
            }
        }
        engine.submit(op, c, packets);
    };
    for c in 0..nchan {
        for _ in 0..per_chan {
            let packets: Vec<Packet> = (0..chunk)
                .map(|_| {
                    let mut buf = vec![0u8; HEADER_ROOM + size + 32];
                    fill(&mut rng, &mut buf);
                    Packet::new(buf, size)
                })
                .collect();
            next_batch(c, packets, engine);
        }
    }
    let mut rates = Vec::with_capacity(windows);
    let mut start = Instant::now();
    let mut count = 0u64;
    let mut failure = None;
    while rates.len() < windows {
        let b = engine
            .recv()
            .ok_or_else(|| Error::bench("the engine returned nothing"))?;
        if let Some(p) = b.packets.iter().find(|p| p.status.is_err()) {
            failure = Some(p.status);
            break;
        }
        black_box(&b.packets[0].buf[..16]);
        count += b.packets.len() as u64;
        let now = Instant::now();
        let el = now - start;
        if el >= window {
            rates.push(count as f64 * size as f64 * 8.0 / el.as_secs_f64() / 1e6);
            count = 0;
            start = now;
        }
        next_batch(b.channel, b.packets, engine);
    }
    while engine.recv().is_some() {}
    if let Some(Err(e)) = failure {
        return Err(Error::bench(format!(
            "a packet was dropped by the engine: {}",
            e.name()
        )));
    }
    Ok(rates.split_off(1.min(rates.len())))
}

pub(super) fn sealed_pools(
    chans: &[Channel],
    size: usize,
    per_chan: usize,
    chunk: usize,
    workers: usize,
) -> Result<Vec<Vec<Arc<[u8]>>>> {
    // At least twice the packets in flight, a whole number of batches.
    let inflight = (2 * workers + 2).div_ceil(chans.len()).max(1) * chunk;
    let n = (2 * inflight).max(per_chan).div_ceil(chunk) * chunk;
    let mut rng = SimRng::new(random_seed()?);
    chans
        .iter()
        .map(|ch| {
            let mut ch = ch.clone();
            let mut ps: Vec<Packet> = (0..n)
                .map(|_| {
                    let mut body = vec![0u8; size];
                    fill(&mut rng, &mut body);
                    Packet::with_body(&body, 32)
                })
                .collect();
            seal_serial(&mut ch, &mut ps);
            ps.iter()
                .map(|p| {
                    p.status
                        .map(|()| Arc::from(p.wire()))
                        .map_err(|e| Error::bench(format!("sealing the pool failed: {}", e.name())))
                })
                .collect()
        })
        .collect()
}

/// Builds an engine for `stack` on `nchan` fresh channels and drives it.
pub(super) fn measure(
    stack: &Stack,
    kind: EngineKind,
    op: Op,
    nchan: usize,
    chunk: usize,
    p: &Params,
    windows: usize,
) -> Result<Vec<f64>> {
    let chans = channels(stack, nchan, p.serial_ns)?;
    let workers = match kind {
        EngineKind::Plp(w) => w,
        EngineKind::Clp(ClpPolicy::ProcessorPerConnection(w)) => w,
        EngineKind::Clp(ClpPolicy::ThreadPerConnection) => nchan,
        EngineKind::Layered => 2,
    };
    let source = match op {
        Op::Seal => Source::Send { size: p.packet },
        Op::Open => Source::Recv {
            pools: sealed_pools(&chans, p.packet, 4 * chunk, chunk, workers)?,
        },
    };
    let mut engine: Box<dyn Engine> = match kind {
        EngineKind::Plp(w) => Box::new(Plp::new(chans, w)),
        EngineKind::Clp(policy) => Box::new(Clp::new(chans, policy)),
        EngineKind::Layered => Box::new(Layered::new(chans)),
    };
    drive(
        engine.as_mut(),
        &source,
        nchan,
        p.packet,
        chunk,
        workers,
        Duration::from_secs_f64(p.seconds),
        windows,
    )
    .map_err(|e| Error::bench_by(format!("{} ({kind:?}, {})", stack.name, side_name(op)), e))
}

/// The raw library's seal rate (AES-128-GCM, one thread, same packet size), Mbit/s per window.
pub(super) fn raw_seal_rate(p: &Params) -> Result<Vec<f64>> {
    let mut key = [0u8; 16];
    sealink_crypto::sign::random_bytes(&mut key).map_err(Error::Random)?;
    let k = RawAead::new(SuiteId::Aes128Gcm, &key)?;
    let mut buf = vec![0u8; p.packet + raw::TAG_LEN];
    fill(&mut SimRng::new(random_seed()?), &mut buf);
    let aad = [0u8; HEADER_ROOM];
    let mut counter = 0u64;
    let window = Duration::from_secs_f64(p.seconds);
    let mut rates = Vec::new();
    for _ in 0..=p.runs {
        let (n, d) = crate::bench::timed::<()>(window, CHUNK as u64, || {
            let mut nonce = [0u8; raw::NONCE_LEN];
            nonce[4..].copy_from_slice(&counter.to_le_bytes());
            counter += 1;
            let (data, tag_room) = buf.split_at_mut(p.packet);
            let tag = k.seal_in_place(nonce, &aad, data);
            tag_room.copy_from_slice(&tag);
            black_box(&buf);
            Ok(())
        })
        .map_err(|()| Error::bench("raw seal failed"))?;
        rates.push(n as f64 * p.packet as f64 * 8.0 / d.as_secs_f64() / 1e6);
    }
    Ok(rates.split_off(1))
}

pub(super) fn amdahl(f: f64, n: f64) -> f64 {
    1.0 / (f + (1.0 - f) / n)
}

/// Paper 000's projection for every PLP curve but the baseline's. The serial step's ceiling is
/// the baseline stack's best PLP rate on the same side: framing only, so nearly all its time per
/// packet is the engine's serial path (the driver, counters, lane hand-off and release), as
/// the paper's 200 Mb/s was the TCP/IP stack's locked component. The best rate is a floor on the
/// ceiling (the serial step alone is no slower), so the bottleneck counts are floors too. The
/// rate one worker adds is each stack's own rate at N workers over N (the paper's MD5
/// arithmetic). Empty without the baseline stack in the run.
pub(super) fn projections(curves: &[Curve]) -> Result<Vec<Projection>> {
    let mut out = Vec::new();
    for op in [Op::Seal, Op::Open] {
        let plp = |c: &&Curve| c.op == op && c.mode == Mode::Plp;
        let Some(base) = curves
            .iter()
            .filter(plp)
            .find(|c| c.stack.name == "baseline")
        else {
            continue;
        };
        let (ceiling_at, ceiling) = base
            .points
            .iter()
            .enumerate()
            .map(|(i, e)| (i + 1, e.median))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .ok_or_else(|| Error::bench("the baseline curve has no point"))?;
        for c in curves
            .iter()
            .filter(plp)
            .filter(|c| c.stack.name != "baseline")
        {
            let n = c.points.len();
            let method =
                SerialCeiling::new(ceiling, c.points[0].median, c.points[n - 1].median, n)?;
            out.push(Projection {
                stack: c.stack.name,
                op,
                ceiling_at,
                method,
                measured: (1..=n).map(|w| c.speedup(w).median).collect(),
                paper: c
                    .stack
                    .paper
                    .filter(|_| op == Op::Seal)
                    .map_or("", |i| PAPER_PROJECTION[i]),
            });
        }
    }
    Ok(out)
}

/// The serial step's ceiling for paper 001's projection in `bench crypto`: the baseline stack
/// (framing only) through the PLP engine at one worker, send side, `packet`-byte payloads;
/// Mbit/s of each timed run (one warm-up run first).
pub(crate) fn baseline_plp_send(packet: usize, seconds: f64, runs: usize) -> Result<Vec<f64>> {
    let base = &STACKS[0];
    let p = Params {
        workers: 1,
        packet,
        seconds,
        runs,
        out: PathBuf::new(),
        stacks: vec![base],
        quick: false,
        batch: CHUNK,
        budget: None,
        serial_ns: 0,
    };
    validate(&p)?;
    measure(base, EngineKind::Plp(1), Op::Seal, 1, CHUNK, &p, runs + 1)
}
