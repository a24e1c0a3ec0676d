//! Profiling aid: only the loopback T runs of `bench adp --loopback` for the ALL trace,
//! piggybacking on and off, interleaved after a warm-up (`cargo run --release -p sealink-lab
//! --example adp_t [ROUNDS [MIB]]`). Prints T in kB/s and the ON/OFF ratio per round.

use sealink_lab::bench::adp::loopback::piggyback_rounds;
use sealink_lab::bench::adp::tables::Nominal;
use sealink_lab::bench::adp::trace::TraceKind;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = std::env::args().nth(1).map_or(Ok(3), |a| a.parse())?;
    let mib: u64 = std::env::args().nth(2).map_or(Ok(256), |a| a.parse())?;
    let all = Nominal::new(TraceKind::All, 10_000, 2);
    let runs = piggyback_rounds(&all, rounds, mib << 20, &indicatif::ProgressBar::hidden())?;
    for (i, (on, off)) in runs.iter().enumerate() {
        println!(
            "round {}: T ON {:.0} kB/s ({} datagrams, {} retransmitted), OFF {:.0} kB/s ({} datagrams), ON/OFF {:.2}",
            i + 1,
            on.t_kbs(),
            on.datagrams,
            on.retransmitted,
            off.t_kbs(),
            off.datagrams,
            on.t_kbs() / off.t_kbs()
        );
    }
    Ok(())
}
