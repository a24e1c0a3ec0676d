//! Where a small datagram's protocol time goes beyond the raw AEAD: the parts of `bench seal`'s
//! protocol side timed one by one, interleaved in one process (each variant runs a slice of
//! 4,000 round trips in turn, 40 rounds; medians), against raw aws-lc-rs on the same payload;
//! then the frame parse alone: the MSG_FIXED frame the sender now writes for a datagram's only
//! message, the one-message MSG_RUN and PADDING it wrote before, and the MSG and PADDING that
//! `bench seal` read before; and the whole protocol round trip with the former MSG_RUN and with
//! the MSG frame `bench seal` used before, for an in-process before/after; and the sender's side
//! of a datagram's only message: its MSG_RUN written from the send arena, and the same then
//! rewritten as MSG_FIXED (`wire::one_run_as_fixed`, the message copied again from the arena),
//! as `Channel::build_data` does. Frames are written with the sender's encoders and read with the
//! receive path's parser (`Frames::with_runs`). Behind RESULTS §25, §28e and §34.
//!
//! `cargo run --release -p sealink-proto --example seal_parts -- [SIZE]` (default 64).

use std::hint::black_box;
use std::time::Instant;

use sealink_crypto::raw::{self, ChosenRaw as RawAead};
use sealink_crypto::{PacketKey, Scope, SuiteId, kdf};
use sealink_proto::datapath;
use sealink_proto::replay::{ReplayVerdict, ReplayWindow};
use sealink_proto::wire::{self, Frame, Frames, HEADER_LEN, Writer};

const RECEIVER: u32 = 0x5EA1_0001;
const SEQ_BASE: u64 = 1 << 14;
const SEQ_MASK: u64 = (1 << 29) - 1;
const FROM: u64 = 1;
const TO: u64 = 1;
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

/// The frame a datagram's only message travels in.
#[derive(Clone, Copy, PartialEq)]
enum Form {
    /// MSG_FIXED: what the sender writes now (when the fields fit).
    Fixed,
    /// A one-message MSG_RUN: what the sender wrote before.
    Run,
    /// A MSG frame: what `bench seal` wrote before (no sender writes it).
    Msg,
}

impl Form {
    fn header_len(self, size: usize) -> usize {
        let v = wire::varint_len(size as u64);
        match self {
            Form::Fixed => wire::MSG_FIXED_HEADER_LEN,
            Form::Run => wire::msg_run_header_len(SEQ_BASE, FROM, TO) + v,
            Form::Msg => wire::msg_frame_len(SEQ_BASE, FROM, TO, size) - size,
        }
    }

    /// Writes the frame header of round trip `c` (as `bench seal` does each time); its seq.
    #[inline]
    fn write_header(self, out: &mut [u8], c: u64, size: usize) -> u64 {
        let seq = SEQ_BASE + (c & SEQ_MASK);
        match self {
            Form::Fixed => wire::write_msg_fixed_header(out, seq, FROM, TO, size).unwrap(),
            Form::Run => {
                let mut w = Writer::new(out);
                let at = wire::write_msg_run_header(&mut w, seq, FROM, TO).unwrap();
                wire::set_run_count(&mut w, at, 1).unwrap();
                w.varint(size as u64).unwrap();
            }
            Form::Msg => {
                let mut w = Writer::new(out);
                w.u8(wire::FRAME_MSG).unwrap();
                w.varint(seq).unwrap();
                w.varint(FROM).unwrap();
                w.varint(TO).unwrap();
                w.varint(size as u64).unwrap();
            }
        }
        seq
    }

    /// A padded body carrying `payload` in this form, and its length.
    fn body(self, out: &mut [u8], payload: &[u8]) -> usize {
        let mut w = Writer::new(out);
        match self {
            Form::Fixed => wire::write_msg_fixed(&mut w, SEQ_BASE, FROM, TO, payload),
            Form::Run => {
                let (p, n) = wire::varint_bytes(payload.len() as u64);
                let item = [&p[..n], payload].concat();
                wire::write_msg_run(&mut w, SEQ_BASE, FROM, TO, 1, &item)
            }
            Form::Msg => wire::write_msg(&mut w, SEQ_BASE, FROM, TO, payload),
        }
        .unwrap();
        wire::pad_to_block(&mut w);
        w.pos()
    }
}

/// The message's frame and any padding, read by the receive path's parser as `bench seal`
/// checks them; the payload's length. Not inlined, so that every form is timed alike.
#[inline(never)]
fn parse(body: &[u8], seq: Option<u64>) -> usize {
    let mut got = None;
    for f in Frames::with_runs(body) {
        match f.expect("frames parse") {
            Frame::Msg { seq: s, data, .. } if seq.is_none_or(|q| q == s) && got.is_none() => {
                got = Some(data)
            }
            Frame::MsgRun(r) if seq.is_none_or(|q| q == r.seq) && got.is_none() => {
                got = r.iter().next().map(|(_, d)| d)
            }
            Frame::Padding if got.is_some() => {}
            _ => panic!("unexpected frame"),
        }
    }
    got.expect("a message").len()
}

/// One protocol side: a datagram buffer with the message in `form`, sealed and opened in place.
struct Side {
    form: Form,
    buf: Aligned,
    body_len: usize,
    fhl: usize,
    replay: ReplayWindow,
}

impl Side {
    fn new(form: Form, payload: &[u8]) -> Self {
        let room = form.header_len(payload.len()) + payload.len() + wire::PAD_BLOCK;
        let mut buf = Aligned::new(HEADER_LEN + room + 16, HEADER_LEN);
        let body_len = form.body(&mut buf[HEADER_LEN..HEADER_LEN + room], payload);
        Side {
            form,
            buf,
            body_len,
            fhl: form.header_len(payload.len()),
            replay: ReplayWindow::new(),
        }
    }

    /// `bench seal`'s protocol round trip.
    #[inline]
    fn round_trip(&mut self, tx: &PacketKey, rx: &PacketKey, c: u64, size: usize) {
        let seq = self
            .form
            .write_header(&mut self.buf[HEADER_LEN..HEADER_LEN + self.fhl], c, size);
        let len = datapath::seal_datagram(
            tx,
            RECEIVER,
            c,
            Scope::Encrypt,
            &mut self.buf,
            self.body_len,
            0,
        )
        .unwrap();
        let (scope, recv, c2) = datapath::parse_data_header(&self.buf[..len]).unwrap();
        assert_eq!(recv, RECEIVER);
        assert_eq!(self.replay.check(c2), ReplayVerdict::Fresh);
        let r = datapath::open_in_place(rx, scope, c2, false, &mut self.buf[..len]).unwrap();
        self.replay.accept(c2);
        assert_eq!(parse(&self.buf[r], Some(seq)), size);
    }
}

const NAMES: [&str; 14] = [
    "raw, payload",
    "raw, sealed body size",
    "protocol (bench seal)",
    "seal+open via PacketKey",
    "  + header parse, replay",
    "  + frame header write",
    "  + frame parse",
    "MSG_FIXED parse alone",
    "MSG_RUN+PADDING parse",
    "MSG+PADDING parse",
    "protocol, with MSG_RUN",
    "protocol, with MSG",
    "sender: write MSG_RUN",
    "sender: + as MSG_FIXED",
];

/// The variants' state: keys, the three protocol sides, the raw buffers, the plain bodies
/// the parse variants read and the sender's arena item.
struct Parts {
    size: usize,
    tx: PacketKey,
    rx: PacketKey,
    rk: RawAead,
    aad: [u8; HEADER_LEN],
    fixed: Side,
    run: Side,
    msg: Side,
    body_len: usize,
    fhl: usize,
    /// The raw side at the payload's size, and at the protocol's sealed body size.
    raw_bufs: [Aligned; 2],
    pc: Aligned,
    replay: ReplayWindow,
    bodies: [Vec<u8>; 3],
    /// The send arena's form of the message (a MSG_RUN item).
    item: Vec<u8>,
    /// A datagram body to write into.
    scratch: Vec<u8>,
}

impl Parts {
    fn new(size: usize) -> Self {
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
        let payload = vec![3u8; size];
        let fixed = Side::new(Form::Fixed, &payload);
        let run = Side::new(Form::Run, &payload);
        let msg = Side::new(Form::Msg, &payload);
        let body_len = fixed.body_len;
        let fhl = fixed.fhl;
        // The raw side at the payload's size, and at the protocol's sealed body size.
        let raw_bufs = [Aligned::new(size + 16, 0), Aligned::new(body_len + 16, 0)];
        let mut pc = Aligned::new(fixed.buf.len(), HEADER_LEN);
        pc.copy_from_slice(&fixed.buf);
        let plain = |form: Form| {
            let mut b = vec![0u8; form.header_len(size) + size + wire::PAD_BLOCK];
            let n = form.body(&mut b, &payload);
            b.truncate(n);
            b
        };
        let bodies = [plain(Form::Fixed), plain(Form::Run), plain(Form::Msg)];
        let item = {
            let (p, n) = wire::varint_bytes(size as u64);
            [&p[..n], &payload[..]].concat()
        };
        Parts {
            size,
            tx,
            rx,
            rk,
            aad,
            fixed,
            run,
            msg,
            body_len,
            fhl,
            raw_bufs,
            pc,
            replay: ReplayWindow::new(),
            bodies,
            item,
            scratch: vec![0u8; size + 64],
        }
    }

    /// One round trip of variant `v` (an index into [`NAMES`]) with counter `c`.
    #[inline(always)]
    fn step(&mut self, v: usize, c: u64) {
        let size = self.size;
        match v {
            0 | 1 => {
                let b = &mut self.raw_bufs[v];
                let l = b.len - 16;
                let mut nonce = [0u8; raw::NONCE_LEN];
                nonce[4..].copy_from_slice(&c.to_le_bytes());
                let (d, tr) = b.split_at_mut(l);
                let tag = self.rk.seal_in_place(nonce, &self.aad, d);
                tr.copy_from_slice(&tag);
                let k = self.rk.open_in_place(nonce, &self.aad, b).unwrap();
                black_box(&b[..k]);
            }
            2 => self.fixed.round_trip(&self.tx, &self.rx, c, size),
            10 => self.run.round_trip(&self.tx, &self.rx, c, size),
            11 => self.msg.round_trip(&self.tx, &self.rx, c, size),
            12 | 13 => {
                // What `build_data` does with a datagram's only message (padding left
                // out): its run written from the send arena's item, then (13)
                // rewritten as MSG_FIXED.
                let seq = SEQ_BASE + (c & SEQ_MASK);
                let mut w = Writer::new(&mut self.scratch);
                let at = wire::write_msg_run_header(&mut w, seq, FROM, TO).unwrap();
                w.bytes(black_box(&self.item)).unwrap();
                wire::set_run_count(&mut w, at, 1).unwrap();
                let mut n = w.pos();
                if v == 13 {
                    let data = wire::run_item_message(&self.item).unwrap();
                    assert!(wire::one_run_as_fixed(&mut w, 0, seq, FROM, TO, data));
                    n = w.pos();
                }
                black_box((&self.scratch, n));
            }
            7..=9 => {
                black_box(parse(black_box(&self.bodies[v - 7]), None));
            }
            _ => {
                if v == 5 {
                    Form::Fixed.write_header(
                        &mut self.pc[HEADER_LEN..HEADER_LEN + self.fhl],
                        c,
                        size,
                    );
                }
                let len = datapath::seal_datagram(
                    &self.tx,
                    RECEIVER,
                    c,
                    Scope::Encrypt,
                    &mut self.pc,
                    self.body_len,
                    0,
                )
                .unwrap();
                let r = if v == 4 {
                    let (scope, recv, c2) = datapath::parse_data_header(&self.pc[..len]).unwrap();
                    assert_eq!(recv, RECEIVER);
                    assert_eq!(self.replay.check(c2), ReplayVerdict::Fresh);
                    let r =
                        datapath::open_in_place(&self.rx, scope, c2, false, &mut self.pc[..len])
                            .unwrap();
                    self.replay.accept(c2);
                    r
                } else {
                    datapath::open_in_place(&self.rx, Scope::Encrypt, c, false, &mut self.pc[..len])
                        .unwrap()
                };
                if v == 6 {
                    assert_eq!(parse(&self.pc[r], None), size);
                } else {
                    black_box(r);
                }
            }
        }
    }
}

fn main() {
    let size: usize = std::env::args()
        .nth(1)
        .map_or(64, |s| s.parse().expect("SIZE"));
    assert!(
        wire::msg_fixed_fits(SEQ_BASE + SEQ_MASK, FROM, TO, size),
        "a datagram carries at most 65535 bytes"
    );
    let mut parts = Parts::new(size);
    let mut ctr = [0u64; NAMES.len()];
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); NAMES.len()];
    for _ in 0..ROUNDS {
        for v in 0..NAMES.len() {
            let t = Instant::now();
            for _ in 0..SLICE {
                let c = ctr[v];
                ctr[v] += 1;
                parts.step(v, c);
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
        "{size} B payload, {} B sealed body with MSG_FIXED ({} B with the one-message MSG_RUN); ns per round trip (median of {ROUNDS} slices)",
        parts.body_len, parts.run.body_len
    );
    for (name, v) in NAMES.iter().zip(res.iter_mut()) {
        let m = median(v);
        println!("{name:<26} {m:8.1} ns   raw / this {:.3}", raw / m);
    }
}
