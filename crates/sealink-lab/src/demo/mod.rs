//! `sealink-lab demo`: two hosts in one process over the simulated link, a synthetic trace of
//! messages both ways, then a check that every message arrived exactly once and intact, with
//! the protocol's counters laid out per direction. The same trace runs a second time with
//! piggybacking off for comparison.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use sealink_crypto::sign::OwnerSigningKey;
use sealink_proto::sim::{LinkConfig, LinkStats, Pair, Side, SimRng};
use sealink_proto::{
    Config, Directory, Endpoint, Event, HostKey, LocalOwner, MessageId, OwnerId, PeerId, Scope,
    Stats, Time, Urgency,
};

use crate::error::{Error, Result};
use crate::output;
use crate::report::Table;

mod drive;
mod render;
mod trace;

use drive::*;
use render::*;
use trace::*;

/// Owners on host A and on host B.
const A_OWNERS: [&str; 2] = ["alice", "carol"];
const B_OWNERS: [&str; 2] = ["bob", "dave"];

/// Mean virtual inter-arrival time of the trace, per direction.
const MEAN_GAP_NS: f64 = 500_000.0;
/// How long the simulation may run after the last message was queued.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);
/// Examples shown per kind of failure.
const EXAMPLES: usize = 8;

/// Parameters of one demo run.
#[derive(Debug, Clone)]
pub struct Params {
    pub seed: Option<u64>,
    pub messages: usize,
    pub loss: f64,
    pub delay: Duration,
}

/// `sealink-lab demo`'s arguments.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Seed of the trace and the link (default: random, printed so the run can be replayed)
    #[arg(long)]
    seed: Option<u64>,
    /// Messages per direction
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    messages: u32,
    /// Probability that the link loses a datagram, in [0, 1)
    #[arg(long, default_value_t = 0.02, value_parser = crate::cli::parse_probability)]
    loss: f64,
    /// One-way link delay in milliseconds
    #[arg(long = "delay-ms", default_value_t = 5.0, value_parser = parse_delay_ms)]
    delay_ms: f64,
}

impl DemoArgs {
    pub fn params(&self) -> Params {
        Params {
            seed: self.seed,
            messages: self.messages as usize,
            loss: self.loss,
            delay: Duration::from_secs_f64(self.delay_ms / 1e3),
        }
    }
}

/// One-way delay of the demo's link, 0..=10000 ms.
fn parse_delay_ms(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=10_000.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a delay within 0..=10000 ms"))
    }
}

/// Runs one simulation, turning a panic inside it (the simulator asserts on a timer livelock,
/// for one) into an error naming the seed, so that the run ends with a clear failure.
fn guarded(seed: u64, f: impl FnOnce() -> Result<RunResult>) -> Result<RunResult> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("unknown panic");
        Err(Error::bench(format!(
            "demo check FAILED: the simulation panicked (seed {seed}): {what}"
        )))
    })
}

/// Runs the demo; prints the report and returns an error if the check failed.
pub fn run(p: &Params) -> Result<()> {
    if !(0.0..1.0).contains(&p.loss) {
        return Err(Error::Usage(format!(
            "--loss must be within [0, 1), got {}",
            p.loss
        )));
    }
    let seed = match p.seed {
        Some(s) => s,
        None => {
            let mut b = [0u8; 8];
            sealink_crypto::sign::random_bytes(&mut b).map_err(Error::Random)?;
            u64::from_le_bytes(b)
        }
    };
    let link = LinkConfig {
        delay: p.delay,
        jitter: Duration::from_millis(2),
        loss: p.loss,
        duplicate: 0.005,
        reorder: 0.01,
        corrupt: 0.002,
    };
    let cfg = Config::default();
    let keys = Keys::derive(seed)?;
    let max_len =
        Endpoint::new(cfg.clone(), keys.host_a.clone(), Directory::new())?.max_message_len();
    let mut trace_rng = SimRng::new(seed);
    let trace = make_trace(&mut trace_rng, p.messages, max_len);
    let link_seed = seed ^ 0x5EA1_11AC_0DE5_EED5;
    let total = trace.len();

    let mut out = String::new();
    let _ = writeln!(
        out,
        "sealink-lab demo: hosts A (alice, carol) and B (bob, dave) over a simulated link, virtual time"
    );
    let _ = writeln!(
        out,
        "seed:   {seed} (replay with `sealink-lab demo --seed {seed}`)"
    );
    let _ = writeln!(
        out,
        "link:   delay {} ms, jitter {} ms, loss {:.1}%, duplicate {:.1}%, reorder {:.1}%, corrupt {:.1}% (each way)",
        ms(link.delay),
        ms(link.jitter),
        link.loss * 100.0,
        link.duplicate * 100.0,
        link.reorder * 100.0,
        link.corrupt * 100.0
    );
    let _ = writeln!(
        out,
        "trace:  {} messages each way, exponential gaps (mean {} ms); sizes 40% 32-128 B, 30% 256-512 B, 20% 512-1024 B, 10% 1024-{max_len} B;",
        p.messages,
        ms(Duration::from_nanos(MEAN_GAP_NS as u64))
    );
    let _ = writeln!(
        out,
        "        urgency 20% urgent, 10% deadline 2-50 ms, 70% default; scope 50% auth-only, 50% encrypt"
    );
    let _ = writeln!(
        out,
        "config: suite {}, max datagram {} B, default timeout M {} ms, ack delay {} ms",
        cfg.suite,
        cfg.max_datagram,
        ms(cfg.default_timeout),
        ms(cfg.ack_delay)
    );

    let pb = output::progress(2 * total as u64, "demo");
    let runs = (|| -> Result<(RunResult, RunResult)> {
        let on = guarded(seed, || {
            run_trace(&trace, &keys, link, link_seed, true, &pb)
        })?;
        let off = guarded(seed, || {
            run_trace(&trace, &keys, link, link_seed, false, &pb)
        })?;
        Ok((on, off))
    })();
    pb.finish_and_clear();
    let (on, off) = runs?;

    let _ = writeln!(out);
    let _ = writeln!(out, "== run 1: piggybacking on ==");
    report_run(&mut out, &trace, &on, &link, &cfg);

    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "== run 2: same trace and link seed, piggybacking off =="
    );
    report_off_against_on(&mut out, &on, &off);

    let failures = failures(&on, &off);
    let _ = writeln!(out);
    let result = if failures.is_empty() {
        let _ = writeln!(
            out,
            "check: all {total} messages delivered exactly once and intact (piggyback on and off): OK"
        );
        Ok(())
    } else {
        let _ = writeln!(out, "check: FAILED ({})", failures.join("; "));
        Err(Error::bench(format!(
            "demo check failed (seed {seed}); see the report above"
        )))
    };
    output::print(&out)?;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_is_deterministic_and_well_formed() {
        let max = Config::default().max_message_len();
        let a = make_trace(&mut SimRng::new(3), 500, max);
        let b = make_trace(&mut SimRng::new(3), 500, max);
        assert_eq!(a.len(), 1000);
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((x.num, x.at, &x.data), (y.num, y.at, &y.data));
            assert_eq!(&x.data[..8], &x.num.to_le_bytes());
            assert!((32..=max).contains(&x.data.len()), "{}", x.data.len());
        }
        let urgent = a.iter().filter(|m| m.urgency == Urgency::Urgent).count();
        assert!((120..280).contains(&urgent), "{urgent}");
        assert_eq!(a.iter().filter(|m| m.from_a).count(), 500);
    }

    #[test]
    fn a_seed_replays_the_run() {
        let link = LinkConfig {
            delay: Duration::from_millis(5),
            jitter: Duration::from_millis(2),
            loss: 0.05,
            duplicate: 0.01,
            reorder: 0.02,
            corrupt: 0.01,
        };
        let go = || {
            let keys = Keys::derive(11).unwrap();
            let trace = make_trace(
                &mut SimRng::new(11),
                150,
                Config::default().max_message_len(),
            );
            let r = run_trace(&trace, &keys, link, 12, true, &ProgressBar::hidden()).unwrap();
            assert!(r.problems.is_empty(), "{}", r.problems.summary());
            (
                r.stats_a.datagrams_sent,
                r.stats_b.datagrams_sent,
                r.stats_a.messages_retransmitted,
                r.link,
                r.delivered_at,
                r.end,
            )
        };
        assert_eq!(go(), go());
    }

    #[test]
    fn parsers() {
        assert!(parse_delay_ms("-1").is_err());
        assert_eq!(parse_delay_ms("10000"), Ok(10_000.0));
    }

    #[test]
    fn percentile_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&v, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&v[..1], 0.99), Some(Duration::from_millis(1)));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
