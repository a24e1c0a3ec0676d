//! `sealink demo`: two hosts in this process, each with throwaway keys, exchange messages in
//! datagram mode over real UDP sockets on 127.0.0.1: the product's own handshake, owner
//! signatures, sealing, piggybacking and acknowledgements, with no simulator. It checks that
//! every message arrived exactly once and intact and prints what the two hosts counted. The
//! simulated lossy link (loss, reordering, piggybacking on and off) is the lab's
//! `sealink-lab demo`.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Result, bail};
use sealink_datagram::demo;

/// `sealink demo`'s arguments.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Messages host a sends to host b
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    messages: u32,
}

/// Runs the exchange and prints its report; fails if any message is missing, doubled or
/// altered.
pub fn run(a: &DemoArgs) -> Result<()> {
    let r = demo::run(u64::from(a.messages))?;
    let (a_addr, b_addr, total) = (r.a_addr, r.b_addr, r.total);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "sealink demo: host a ({a_addr}, owners alice and carol) sends to host b ({b_addr}) over UDP,"
    );
    let _ = writeln!(
        out,
        "              datagram mode with throwaway keys (every 10th message urgent, half authenticate-only)"
    );
    let _ = writeln!(
        out,
        "sent:      {total} messages, {} bytes; delivered in {:.1} ms, all acknowledged in {:.1} ms",
        r.bytes,
        ms(r.delivered_in),
        ms(r.acked_in)
    );
    let _ = writeln!(out, "host a:    {}", demo::counters(&r.stats_a));
    let _ = writeln!(out, "host b:    {}", demo::counters(&r.stats_b));
    let data = r.stats_a.endpoint.data_datagrams_sent.max(1);
    let _ = writeln!(
        out,
        "           {:.1} messages per data datagram (piggybacking)",
        r.stats_a.endpoint.messages_sent as f64 / data as f64
    );
    let ok = r.problems.is_empty();
    if ok {
        let _ = writeln!(
            out,
            "check:     all {total} messages delivered exactly once and intact: OK"
        );
    } else {
        let _ = writeln!(out, "check:     FAILED ({})", r.problems.join("; "));
    }
    let _ = writeln!(
        out,
        "The simulated lossy link, with piggybacking on and off: cargo run --release -p sealink-lab -- demo"
    );
    crate::output::print(&out)?;
    if !ok {
        bail!("demo check failed; see the report above");
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
