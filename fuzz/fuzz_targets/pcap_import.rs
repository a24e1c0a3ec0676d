//! `sealink-lab bench adp --pcap`'s importer never panics on any bytes: a capture either becomes a
//! trace within the limits (messages no larger than MAX_SIZE, at most the limit, times from
//! zero in order) or is refused with a typed error.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The lab's own source files, compiled here (they need only sealink-proto and pcap-file), so the
// fuzz build does not compile the whole lab; `pcap` reaches `trace` as `super::trace`.
#[allow(dead_code, unused_imports)]
#[path = "../../crates/sealink-lab/src/bench/adp/trace.rs"]
mod trace;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/sealink-lab/src/bench/adp/pcap.rs"]
mod pcap;

use pcap::import;
use trace::MAX_SIZE;

fuzz_target!(|data: &[u8]| {
    let limit = usize::from(data.first().copied().unwrap_or(0)) + 1;
    if let Ok(got) = import(data, limit) {
        let m = &got.trace.msgs;
        assert!(!m.is_empty() && m.len() <= limit);
        assert!(m.iter().all(|m| (1..=MAX_SIZE).contains(&m.size)));
        assert_eq!(m[0].at, 0.0);
        assert!(m.windows(2).all(|w| w[0].at <= w[1].at));
    }
});
