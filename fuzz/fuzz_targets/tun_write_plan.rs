//! The tunnel's TUN-write planning never panics and keeps its invariants on any opened packets
//! a peer may send (the AEAD proves only who sent them, not that they are well formed): the
//! GRO-style coalescing, the in-place rewrite of each run's first packet, the gather and the
//! writer choice (`tunwrite::check_plan`). Input: a sequence of chunks (u16 LE length, bytes),
//! one packet each; a short last chunk takes what is left.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealink_tunnel::tunwrite::check_plan;

fuzz_target!(|data: &[u8]| {
    let mut pkts = Vec::new();
    let mut rest = data;
    while rest.len() >= 2 && pkts.len() < 256 {
        let n = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
        rest = &rest[2..];
        let n = n.min(rest.len());
        pkts.push(rest[..n].to_vec());
        rest = &rest[n..];
    }
    let _ = check_plan(&pkts);
});
