//! The header and frame parsers never panic, and whatever parses re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealink_proto::wire::{self, Frame, Frames, Writer};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = wire::parse_header(data) {
        let mut out = [0u8; wire::HEADER_LEN];
        wire::write_header(&h, &mut out);
        assert_eq!(&out[..], &data[..wire::HEADER_LEN]);
    }
    let body = data.get(wire::HEADER_LEN..).unwrap_or(data);
    let mut buf = vec![0u8; body.len() + 16];
    let mut w = Writer::new(&mut buf);
    let mut all_ok = true;
    for f in Frames::new(body) {
        match f {
            Ok(Frame::Ack(a)) => {
                let ranges: Vec<_> = a.ranges().collect();
                wire::write_ack(&mut w, a.cumulative, &ranges).unwrap();
            }
            Ok(Frame::OwnerIntro { id, name, sig }) => wire::write_owner_intro(&mut w, id, name, sig).unwrap(),
            Ok(Frame::Dest { id, name }) => wire::write_dest(&mut w, id, name).unwrap(),
            Ok(Frame::Msg { seq, from, to, data }) => wire::write_msg(&mut w, seq, from, to, data).unwrap(),
            Ok(Frame::Ping) => w.u8(wire::FRAME_PING).unwrap(),
            Ok(Frame::Abandon { below }) => wire::write_abandon(&mut w, below).unwrap(),
            Ok(Frame::Refused { seq, reason }) => wire::write_refused(&mut w, seq, reason).unwrap(),
            Ok(Frame::Padding) => {
                w.u8(wire::FRAME_PADDING).unwrap();
                while w.pos() < body.len() {
                    w.u8(0).unwrap();
                }
            }
            Err(_) => {
                all_ok = false;
                break;
            }
        }
    }
    if all_ok {
        let n = w.pos();
        assert_eq!(&buf[..n], body, "frames re-encode differently");
    }
});
