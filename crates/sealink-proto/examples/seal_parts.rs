//! Where a small datagram's protocol time goes beyond the raw AEAD: the parts of `bench seal`'s
//! protocol side timed one by one, interleaved in one process (each variant runs a slice of
//! 4,000 round trips in turn, 40 rounds; medians), against raw aws-lc-rs on the same payload;
//! then the frame parse alone (MSG and PADDING), its first frame alone, and a sketch of a
//! fixed-layout frame read the same way. Behind RESULTS §25 and §28e.
//!
//! `cargo run --release -p sealink-proto --example seal_parts -- [SIZE]` (default 64).

use std::hint::black_box;
use std::time::Instant;

use sealink_crypto::raw::{self, ChosenRaw as RawAead};
use sealink_crypto::{Scope, SuiteId, kdf};
use sealink_proto::datapath;
use sealink_proto::replay::ReplayWindow;
use sealink_proto::wire::{self, FRAME_MSG, Frame, Frames, HEADER_LEN, Writer};

const RECEIVER: u32 = 0x5EA1_0001;
const SEQ_BASE: u64 = 1 << 14;
const SEQ_MASK: u64 = (1 << 29) - 1;
const SLICE: u64 = 4_000;
const ROUNDS: usize = 40;

/// A zeroed buffer whose byte `at` lies on a 64-byte boundary (as `bench seal`'s).
struct Aligned {
    store: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize, at: usize) -> Self {
        let store = vec![0u8; len + 63];
        let addr = store.as_ptr() as usize + at;
        let start = (64 - addr % 64) % 64;
        Aligned { store, start, len }
    }
}

impl std::ops::Deref for Aligned {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.store[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for Aligned {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.store[self.start..self.start + self.len]
    }
}

/// Writes the MSG frame header of round trip `c` (as `bench seal` does each time); its seq.
fn frame_header(out: &mut [u8], c: u64, size: usize) -> u64 {
    let seq = SEQ_BASE + (c & SEQ_MASK);
    let mut w = Writer::new(out);
    w.u8(FRAME_MSG).unwrap();
    w.varint(seq).unwrap();
    w.varint(1).unwrap();
    w.varint(1).unwrap();
    w.varint(size as u64).unwrap();
    seq
}

/// The MSG frame and its padding, as `bench seal` checks them; the payload's length. Not inlined,
/// like the sketch below, so that the two are timed alike.
#[inline(never)]
fn parse(body: &[u8], seq: Option<u64>) -> usize {
    let mut got = None;
    for f in Frames::new(body) {
        match f.expect("frames parse") {
            Frame::Msg { seq: s, data, .. } if seq.is_none_or(|q| q == s) && got.is_none() => {
                got = Some(data)
            }
            Frame::Padding if got.is_some() => {}
            _ => panic!("unexpected frame"),
        }
    }
    got.expect("a MSG frame").len()
}

/// A sketch, not a wire format: what a fixed-layout frame for one small message (type, owner
/// and destination ids of one byte, a 16-bit length, the whole 64-bit seq), then padding, costs
/// to read, against the varint MSG frame above (RESULTS §28e).
#[inline(never)]
fn parse_fixed(body: &[u8]) -> Option<(u64, u8, u8, &[u8])> {
    let h: &[u8; 13] = body.get(..13)?.try_into().ok()?;
    if h[0] != 9 || h[1] == 0 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([h[3], h[4]]));
    let seq = u64::from_be_bytes(h[5..13].try_into().ok()?);
    let data = body.get(13..13 + len)?;
    if body[13 + len..].iter().fold(0u8, |a, b| a | b) != 0 {
        return None;
    }
    Some((seq, h[1], h[2], data))
}

fn main() {
    let size: usize = std::env::args()
        .nth(1)
        .map_or(64, |s| s.parse().expect("SIZE"));
    let suite = SuiteId::Aes128Gcm;
    let secret = [7u8; 32];
    let tx = kdf::derive_packet_key(suite, &secret, b"parts", false).unwrap();
    let rx = kdf::derive_packet_key(suite, &secret, b"parts", false).unwrap();
    let mut material = [0u8; kdf::MAX_KEY_LEN];
    let material = &mut material[..suite.key_len()];
    kdf::derive_key_material(suite, &secret, b"parts", material).unwrap();
    let rk = RawAead::new(suite, material).unwrap();
    let mut aad = [0u8; HEADER_LEN];
    wire::write_header(
        &wire::Header::Data {
            scope: Scope::Encrypt,
            receiver: RECEIVER,
            counter: 0,
        },
        &mut aad,
    );
    let frame_len = wire::msg_frame_len(SEQ_BASE, 1, 1, size);
    let room = frame_len + wire::PAD_BLOCK;
    let mut pb = Aligned::new(HEADER_LEN + room + 16, HEADER_LEN);
    let payload = vec![3u8; size];
    let mut w = Writer::new(&mut pb[HEADER_LEN..HEADER_LEN + room]);
    wire::write_msg(&mut w, SEQ_BASE, 1, 1, &payload).unwrap();
    wire::pad_to_block(&mut w);
    let body_len = w.pos();
    let fhl = frame_len - size;
    // The raw side at the payload's size, and at the protocol's sealed body size.
    let mut raw_bufs = [Aligned::new(size + 16, 0), Aligned::new(body_len + 16, 0)];
    let mut pc = Aligned::new(HEADER_LEN + room + 16, HEADER_LEN);
    pc.copy_from_slice(&pb);
    let plain_body = pb[HEADER_LEN..HEADER_LEN + body_len].to_vec();
    let mut replay = [ReplayWindow::new(), ReplayWindow::new()];
    let names = [
        "raw, payload",
        "raw, sealed body size",
        "protocol (bench seal)",
        "seal+open via PacketKey",
        "  + header parse, replay",
        "  + frame header write",
        "  + frame parse",
        "frame parse alone",
        "first frame alone",
        "fixed-layout parse (sketch)",
    ];
    let mut ctr = [0u64; 10];
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); 10];
    // The sketch's body: 09 | from u8 | to u8 | len u16 | seq u64 | data | padding.
    let mut fixed_body = vec![0u8; 13 + size];
    fixed_body[0] = 9;
    fixed_body[1] = 1;
    fixed_body[2] = 1;
    fixed_body[3..5].copy_from_slice(&(size as u16).to_be_bytes());
    fixed_body[5..13].copy_from_slice(&SEQ_BASE.to_be_bytes());
    fixed_body.resize(fixed_body.len().div_ceil(16) * 16, 0);
    for _ in 0..ROUNDS {
        for v in 0..names.len() {
            let t = Instant::now();
            for _ in 0..SLICE {
                let c = ctr[v];
                ctr[v] += 1;
                match v {
                    0 | 1 => {
                        let b = &mut raw_bufs[v];
                        let l = b.len - 16;
                        let mut nonce = [0u8; raw::NONCE_LEN];
                        nonce[4..].copy_from_slice(&c.to_le_bytes());
                        let (d, tr) = b.split_at_mut(l);
                        let tag = rk.seal_in_place(nonce, &aad, d);
                        tr.copy_from_slice(&tag);
                        let k = rk.open_in_place(nonce, &aad, b).unwrap();
                        black_box(&b[..k]);
                    }
                    2 => {
                        let seq = frame_header(&mut pb[HEADER_LEN..HEADER_LEN + fhl], c, size);
                        let len = datapath::seal_datagram(
                            &tx,
                            RECEIVER,
                            c,
                            Scope::Encrypt,
                            &mut pb,
                            body_len,
                        )
                        .unwrap();
                        let (scope, recv, c2) = datapath::parse_data_header(&pb[..len]).unwrap();
                        assert_eq!(recv, RECEIVER);
                        let r = datapath::open_datagram(
                            &rx,
                            &mut replay[0],
                            scope,
                            c2,
                            false,
                            &mut pb[..len],
                        )
                        .unwrap();
                        assert_eq!(parse(&pb[r], Some(seq)), size);
                    }
                    7 => {
                        black_box(parse(black_box(&plain_body), None));
                    }
                    9 => {
                        black_box(parse_fixed(black_box(&fixed_body)));
                    }
                    8 => {
                        let mut f = Frames::new(black_box(&plain_body));
                        match f.next() {
                            Some(Ok(Frame::Msg { data, .. })) => {
                                black_box(data);
                            }
                            _ => panic!(),
                        }
                    }
                    _ => {
                        if v == 5 {
                            frame_header(&mut pc[HEADER_LEN..HEADER_LEN + fhl], c, size);
                        }
                        let len = datapath::seal_datagram(
                            &tx,
                            RECEIVER,
                            c,
                            Scope::Encrypt,
                            &mut pc,
                            body_len,
                        )
                        .unwrap();
                        let r = if v == 4 {
                            let (scope, recv, c2) =
                                datapath::parse_data_header(&pc[..len]).unwrap();
                            assert_eq!(recv, RECEIVER);
                            datapath::open_datagram(
                                &rx,
                                &mut replay[1],
                                scope,
                                c2,
                                false,
                                &mut pc[..len],
                            )
                            .unwrap()
                        } else {
                            datapath::open_in_place(&rx, Scope::Encrypt, c, false, &mut pc[..len])
                                .unwrap()
                        };
                        if v == 6 {
                            assert_eq!(parse(&pc[r], None), size);
                        } else {
                            black_box(r);
                        }
                    }
                }
            }
            res[v].push(t.elapsed().as_nanos() as f64 / SLICE as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let raw = median(&mut res[0].clone());
    println!(
        "{size} B payload, {body_len} B sealed body; ns per round trip (median of {ROUNDS} slices)"
    );
    for (name, v) in names.iter().zip(res.iter_mut()) {
        let m = median(v);
        println!("{name:<26} {m:8.1} ns   raw / this {:.3}", raw / m);
    }
}
