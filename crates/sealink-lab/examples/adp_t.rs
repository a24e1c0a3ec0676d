//! Profiling aid: only the loopback T runs of `bench adp --loopback` for the ALL trace,
//! piggybacking on and off, interleaved (`cargo run --release -p sealink-lab --example adp_t
//! [ROUNDS [MIB]]`). Prints T in kB/s and the ON/OFF ratio per round.

use std::time::Instant;

use sealink_lab::bench::adp::loopback::{LoopSpec, repeat_to, run, saturating, urgent_of};
use sealink_lab::bench::adp::model::Scope3;
use sealink_lab::bench::adp::tables::Nominal;
use sealink_lab::bench::adp::trace::TraceKind;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = std::env::args().nth(1).map_or(Ok(3), |a| a.parse())?;
    let mib: u64 = std::env::args().nth(2).map_or(Ok(64), |a| a.parse())?;
    let all = Nominal::new(TraceKind::All, 10_000, 2);
    let fast = saturating(&repeat_to(&all.trace, mib << 20));
    let urgent = urgent_of(&all.urgent, fast.msgs.len());
    for round in 1..=rounds {
        let mut t = [0.0; 2];
        for (k, q) in [true, false].into_iter().enumerate() {
            let start = Instant::now();
            let r = run(&LoopSpec {
                msgs: &fast.msgs,
                urgent: &urgent,
                e: Scope3::Partial,
                q,
                timeout: all.timeout,
                saturate: true,
            })?;
            t[k] = r.t_kbs();
            println!(
                "round {round} Q={} T {:.0} kB/s, {} datagrams, {} retransmitted, {:.2} s",
                if q { "ON" } else { "OFF" },
                t[k],
                r.datagrams,
                r.retransmitted,
                start.elapsed().as_secs_f64()
            );
        }
        println!("round {round} ON/OFF {:.2}", t[0] / t[1]);
    }
    Ok(())
}
