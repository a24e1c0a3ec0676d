//! Paper 002's two figures that are not tables: the PKO bound (section 5(c)) and the
//! constant-size latencies (section 5(a)).
//!
//! - PKO: "assuming that all factors except S are at their nominal level and all encryption
//!   operations are public-key ones (S = PKO). These bounds are L >= 875 ms, and T <= 7.14
//!   kBytes/s". The paper's method ([`PkoBound`]): one public-key step per ADP message, so L
//!   is at least that step and T at most one mean ADP message (Table 3, ALL) per step. Here the
//!   step is timed in the run (a signature made and checked per message, the public-key form
//!   of PE's encrypted sequence number) and the mean ADP message comes from the same run's
//!   nominal ALL run of each profile; the 1987 profile takes the paper's 875 ms, as nothing of
//!   1987 can be timed here. A prediction by the paper's method, not a measurement.
//! - Constant sizes: "an experiment with constant message sizes in an otherwise identical
//!   environment resulted in mean ADP latencies of 3 ms for a size of 32 bytes and 9 ms for 8
//!   kbytes". Rerun in virtual time: ALL at nominal levels with every message's size set to 32
//!   B, then 8 KiB (arrival times and urgency unchanged).

use std::hint::black_box;
use std::time::Duration;

use aws_lc_rs::{rand as lc_rand, rsa, signature};

use super::format::{Table, num, ratio};
use super::run::RunResult;
use super::tables::{Experiment, Levels, Nominal};
use super::trace::{self, Trace};
use crate::bench::{median, timed};
use crate::error::{Error, Result};
use crate::projection::PkoBound;

/// Paper 002 section 5(c): the bounds, and the public-key time per message they imply.
pub const PAPER_PKO_L_MS: f64 = 875.0;
pub const PAPER_PKO_T_KBS: f64 = 7.14;
/// Section 5(a): (constant message size, mean urgent latency in ms).
pub const PAPER_CONSTANT: [(usize, f64); 2] = [(32, 3.0), (8192, 9.0)];

/// One public-key step per message: the sender's private-key operation and the receiver's
/// public-key operation, seconds each.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PublicKeyStep {
    pub name: &'static str,
    pub source: &'static str,
    pub sender_s: f64,
    pub receiver_s: f64,
}

impl PublicKeyStep {
    /// The paper's step: 875 ms in all (it does not split it between the hosts).
    pub const PAPER: PublicKeyStep = PublicKeyStep {
        name: "the paper's public-key step",
        source: "paper 002 5(c), L >= 875 ms (an input: nothing of 1987 is timed here)",
        sender_s: PAPER_PKO_L_MS / 1000.0,
        receiver_s: 0.0,
    };

    pub fn total_s(&self) -> f64 {
        self.sender_s + self.receiver_s
    }
}

/// Seconds per call of `op`: the median of `runs` timed runs of `window` after a warm-up.
fn seconds_per_op(
    window: Duration,
    runs: usize,
    mut op: impl FnMut() -> Result<(), &'static str>,
) -> Result<f64> {
    let mut per = Vec::with_capacity(runs);
    for run in 0..=runs {
        let (n, d) = timed(window, 1, &mut op).map_err(Error::bench)?;
        if run > 0 {
            per.push(d.as_secs_f64() / n as f64);
        }
    }
    Ok(median(&per))
}

/// Times today's public-key steps on this machine: Ed25519 (sealink's owner signatures) and
/// RSA-2048 (PKCS#1 v1.5, the paper's era of public-key), each a signature over a 32-byte
/// sequence block and its check.
pub fn measure_public_key(quick: bool) -> Result<Vec<PublicKeyStep>> {
    let (window, runs) = if quick {
        (Duration::from_millis(5), 1)
    } else {
        (Duration::from_millis(100), 5)
    };
    let msg = [0x5Au8; 32];
    let mut seed = [0u8; 32];
    sealink_crypto::sign::random_bytes(&mut seed).map_err(Error::Random)?;
    let ed = sealink_crypto::sign::OwnerSigningKey::from_seed(&seed)?;
    let ed_sig = ed.sign(&msg);
    let ed_pk = ed.public_key();
    let ed_sign = seconds_per_op(window, runs, || {
        black_box(ed.sign(black_box(&msg)));
        Ok(())
    })?;
    let ed_verify = seconds_per_op(window, runs, || {
        if sealink_crypto::sign::verify(&ed_pk, black_box(&msg), &ed_sig) {
            Ok(())
        } else {
            Err("Ed25519 verify failed")
        }
    })?;

    let rng = lc_rand::SystemRandom::new();
    let pair = rsa::KeyPair::generate(rsa::KeySize::Rsa2048)
        .map_err(|_| Error::bench("RSA-2048 key generation failed"))?;
    let mut sig = vec![0u8; pair.public_modulus_len()];
    let rsa_sign = seconds_per_op(window, runs, || {
        pair.sign(&signature::RSA_PKCS1_SHA256, &rng, &msg, &mut sig)
            .map_err(|_| "RSA sign failed")?;
        black_box(&sig);
        Ok(())
    })?;
    let public = signature::KeyPair::public_key(&pair).as_ref().to_vec();
    let key = signature::UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, &public);
    let rsa_verify = seconds_per_op(window, runs, || {
        key.verify(black_box(&msg), &sig)
            .map_err(|_| "RSA verify failed")
    })?;
    Ok(vec![
        PublicKeyStep {
            name: "Ed25519 sign + verify",
            source: "timed in this run (aws-lc-rs)",
            sender_s: ed_sign,
            receiver_s: ed_verify,
        },
        PublicKeyStep {
            name: "RSA-2048 sign + verify",
            source: "timed in this run (aws-lc-rs, PKCS#1 v1.5 SHA-256)",
            sender_s: rsa_sign,
            receiver_s: rsa_verify,
        },
    ])
}

/// The PKO table of one profile: `nominal` is the profile's (T run, L run) of ALL at nominal
/// levels, whose mean ADP message feeds the bound.
pub fn pko_table(
    profile: &str,
    nominal: &(RunResult, RunResult),
    steps: &[PublicKeyStep],
) -> Result<Table> {
    let (t, l) = nominal;
    let mut tab = Table::new(
        format!(
            "PKO bound, paper 002 5(c)'s method (profile {profile}): a PREDICTION from this run's inputs, not a measurement"
        ),
        &[
            "public-key step",
            "source",
            "sender ms",
            "receiver ms",
            "mean ADP msg B (ALL, nominal)",
            "L >= ms",
            "paper L >=",
            "T <= kB/s",
            "paper T <=",
            "ratio",
            "T <= kB/s, hosts overlapped",
            "nominal PSK L ms",
            "nominal PSK T kB/s",
        ],
    );
    for s in steps {
        let b = PkoBound::new(s.total_s(), l.mean_datagram())?;
        // Not the paper's method: were sender and receiver to work on different messages at
        // once, the slower side alone would bound T.
        let overlapped = PkoBound::new(s.sender_s.max(s.receiver_s), l.mean_datagram())?;
        tab.push(vec![
            s.name.to_owned(),
            s.source.to_owned(),
            num(s.sender_s * 1e3, 4),
            num(s.receiver_s * 1e3, 4),
            num(l.mean_datagram(), 0),
            num(b.l_min_ms(), 4),
            num(PAPER_PKO_L_MS, 0),
            num(b.t_max_kbs(), 2),
            num(PAPER_PKO_T_KBS, 2),
            ratio(b.t_max_kbs(), PAPER_PKO_T_KBS),
            num(overlapped.t_max_kbs(), 2),
            num(l.l_ms, 3),
            num(t.t_kbs(), 1),
        ]);
        tab.figure(
            format!("{profile} PKO T bound, {}", s.name),
            b.t_max_kbs(),
            "kB/s",
        );
    }
    Ok(tab)
}

/// `t` with every message's size set to `size`.
pub fn constant_size(t: &Trace, size: usize) -> Trace {
    let mut c = t.clone();
    for m in &mut c.msgs {
        m.size = size;
    }
    c
}

impl Experiment<'_> {
    /// Section 5(a)'s constant-size latencies on ALL at nominal levels.
    pub fn constant_sizes(&self, all: &Nominal) -> Result<Table> {
        let mut tab = Table::new(
            format!(
                "Constant message sizes (paper 002 5(a)): urgent latency L of ALL at nominal levels, every message one size (profile {})",
                self.profile.name
            ),
            &[
                "size B",
                "arrivals",
                "messages",
                "urgent",
                "mean ADP msg B",
                "L ms",
                "paper",
                "ratio",
            ],
        );
        // The paper does not say at what rate. ALL's own arrivals first; where that offers more
        // bytes than ALL does (8 KiB: 7x, past a 1987 Ethernet), also arrivals spread out to
        // ALL's byte load.
        let mean = all.trace.mean_size();
        for (size, paper) in PAPER_CONSTANT {
            let same = constant_size(&all.trace, size);
            let mut runs = vec![("ALL's", same.clone())];
            if size as f64 > mean {
                runs.push((
                    "ALL's byte load",
                    trace::speed_up(&same, mean / size as f64),
                ));
            }
            for (arrivals, trace) in runs {
                let l = self.one_on(
                    &trace.msgs,
                    &all.urgent,
                    Levels::nominal(all.timeout),
                    false,
                    false,
                )?;
                tab.push(vec![
                    size.to_string(),
                    arrivals.to_owned(),
                    l.messages.to_string(),
                    l.urgent.to_string(),
                    num(l.mean_datagram(), 0),
                    num(l.l_ms, 3),
                    num(paper, 0),
                    ratio(l.l_ms, paper),
                ]);
                tab.figure(
                    format!("ALL constant {size} B, {arrivals} arrivals, L"),
                    l.l_ms,
                    "ms",
                );
            }
        }
        Ok(tab)
    }
}

/// Runs [`Experiment::constant_sizes`] adds per profile, and the nominal ALL pair of the PKO
/// table: for the progress bar.
pub fn runs_per_profile() -> u64 {
    // 32 B once, 8 KiB at two rates; the nominal T and L runs.
    3 + 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::adp::trace::TraceKind;

    fn result(datagram_bytes: u64, datagrams: u64, l_ms: f64) -> RunResult {
        RunResult {
            messages: 1,
            message_bytes: 1,
            datagrams,
            datagram_bytes,
            span: Duration::from_secs(1),
            window: Duration::from_secs(1),
            window_bytes: 750_000,
            urgent: 1,
            l_ms,
            latencies_ms: vec![l_ms],
            retransmitted: 0,
        }
    }

    #[test]
    fn the_paper_step_reproduces_its_bounds() {
        // Table 3's ALL: 6247 B mean ADP message; 875 ms per message.
        let nominal = (result(1, 1, 11.0), result(6247 * 4, 4, 11.0));
        let t = pko_table("1987", &nominal, &[PublicKeyStep::PAPER]).unwrap();
        let row = &t.table.rows()[0];
        assert_eq!(row[4], "6247");
        assert_eq!(row[5], "875.0000");
        assert_eq!(row[7], "7.14");
        assert_eq!(row[9], "1.00");
        // The paper gives the whole step to one side: overlapping changes nothing.
        assert_eq!(row[10], "7.14");
        let (name, value, unit) = &t.figures[0];
        assert!(name.starts_with("1987 PKO T bound") && unit == &"kB/s");
        assert!((value - 6247.0 / 875.0).abs() < 1e-9);
    }

    #[test]
    fn a_split_step_bounds_t_by_the_slower_side_when_overlapped() {
        let step = PublicKeyStep {
            name: "x",
            source: "",
            sender_s: 0.003,
            receiver_s: 0.001,
        };
        let nominal = (result(1, 1, 1.0), result(8000, 1, 1.0));
        let t = pko_table("today", &nominal, &[step]).unwrap();
        let row = &t.table.rows()[0];
        assert_eq!(row[5], "4.0000"); // L >= 3 + 1 ms
        assert_eq!(row[7], "2000.00"); // 8000 B / 4 ms
        assert_eq!(row[10], "2666.67"); // 8000 B / 3 ms
        assert!(pko_table("today", &(result(1, 1, 1.0), result(0, 1, 1.0)), &[step]).is_err());
    }

    #[test]
    fn constant_size_keeps_times_and_count() {
        let t = trace::generate(TraceKind::All, 200, 4);
        let c = constant_size(&t, 32);
        assert_eq!(c.msgs.len(), t.msgs.len());
        assert!(c.msgs.iter().all(|m| m.size == 32));
        assert!(c.msgs.iter().zip(&t.msgs).all(|(a, b)| a.at == b.at));
    }
}
