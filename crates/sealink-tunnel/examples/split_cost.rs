//! What the TUN reader spends splitting one TSO super-packet (64 KiB of TCP payload, MSS 1368,
//! as a 1420-byte tunnel MTU gives), interleaved in one process: tun-rs's split (copy and
//! checksum of every segment, what the reader did before), sealink's split (each segment's
//! headers only: what the reader does now), and sealink's split followed by finishing every
//! segment (payload copy and checksum: the whole work, as the inline path does it on one
//! thread; with workers, they do the finishing). Behind docs/RESULTS.md §28.
//!
//! `cargo run --release -p sealink-tunnel --example split_cost`

use std::hint::black_box;
use std::time::Instant;

use sealink_tunnel::tunread::{self, Out};
use tun_rs::{VIRTIO_NET_HDR_GSO_TCPV4, VirtioNetHdr};

const MSS: usize = 1368;
const SEGMENTS: usize = 48;
const STRIDE: usize = 1500;
const OFFSET: usize = 18;
const SLICE: usize = 2_000;
const ROUNDS: usize = 40;

fn main() {
    let payload = MSS * SEGMENTS;
    let mut input = vec![0u8; 52 + payload];
    for (i, b) in input.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(29);
    }
    input[0] = 0x45;
    input[9] = 6;
    input[12..16].copy_from_slice(&[10, 0, 0, 1]);
    input[16..20].copy_from_slice(&[10, 0, 0, 2]);
    input[32] = 8 << 4; // TCP header of 32 bytes
    input[33] = 0x18;
    let hdr = VirtioNetHdr {
        flags: 1,
        gso_type: VIRTIO_NET_HDR_GSO_TCPV4,
        hdr_len: 52,
        gso_size: MSS as u16,
        csum_start: 20,
        csum_offset: 16,
    };
    let mut slots = vec![0u8; STRIDE * 128];
    let mut sizes = vec![0usize; 128];
    let mut unfinished = vec![tunread::Unfinished::default(); 128];
    let names = [
        "tun-rs split (copy + checksum)",
        "sealink split (headers only)",
        "sealink split + finish",
    ];
    let mut res = vec![Vec::new(); names.len()];
    for _ in 0..ROUNDS {
        for (v, r) in res.iter_mut().enumerate() {
            let t = Instant::now();
            for _ in 0..SLICE {
                let n = if v == 0 {
                    let mut bufs: Vec<&mut [u8]> = slots.chunks_mut(STRIDE).collect();
                    tun_rs::gso_split(&mut input, hdr, &mut bufs, &mut sizes, OFFSET, false)
                        .unwrap()
                } else {
                    let n = tunread::split(
                        &hdr,
                        &mut input,
                        &mut Out {
                            slots: &mut slots,
                            stride: STRIDE,
                            offset: OFFSET,
                            max_len: 1420,
                            sizes: &mut sizes,
                            unfinished: &mut unfinished,
                        },
                    )
                    .unwrap();
                    if v == 2 {
                        for i in 0..n {
                            let at = i * STRIDE + OFFSET;
                            tunread::finish(&mut slots[at..at + sizes[i]], &input, unfinished[i]);
                        }
                    }
                    n
                };
                assert_eq!(n, SEGMENTS);
                black_box(&slots);
            }
            r.push(t.elapsed().as_nanos() as f64 / SLICE as f64 / 1000.0);
        }
    }
    println!(
        "one super-packet: {SEGMENTS} segments of {MSS} B ({} KiB of payload); us per super-packet, median of {ROUNDS} slices",
        payload / 1024
    );
    let mut med = Vec::new();
    for (name, v) in names.iter().zip(res.iter_mut()) {
        v.sort_by(f64::total_cmp);
        let m = v[v.len() / 2];
        med.push(m);
        println!("{name:<32} {m:7.2} us");
    }
    println!(
        "reader's time, sealink / tun-rs: {:.2}; whole work on one thread: {:.2}",
        med[1] / med[0],
        med[2] / med[0]
    );
}
