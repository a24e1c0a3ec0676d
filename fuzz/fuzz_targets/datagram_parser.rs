//! The header and frame parsers never panic, and whatever parses re-encodes to the same bytes
//! (a data header's lane byte, which only the sender chooses, put back; a MSG_FIXED frame
//! included, with the padding it ends the body with); a MSG_FIXED frame built
//! from the input's bytes parses back as itself and is malformed when cut short of its message;
//! the handshake MAC checks and the cookie-reply reader never panic on any input, and nothing
//! random passes them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealink_proto::Time;
use sealink_proto::cookie::{CookieChecker, CookieGenerator};
use sealink_proto::wire::{self, Frame, Frames, Header, Writer};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = wire::parse_header(data) {
        let mut out = [0u8; wire::HEADER_LEN];
        wire::write_header(&h, &mut out);
        // A data header's lane byte is the sender's (any value), not part of `Header`; every
        // other header has 0 there.
        match h {
            Header::Data { .. } => out[wire::LANE_OFFSET] = data[wire::LANE_OFFSET],
            _ => assert_eq!(data[wire::LANE_OFFSET], 0, "a handshake with a lane byte"),
        }
        assert_eq!(&out[..], &data[..wire::HEADER_LEN]);
        let key = [7u8; 32];
        match h {
            Header::Init { .. } => {
                let c = CookieChecker::new(&key);
                assert!(!c.check_mac1(data), "random mac1 accepted");
                let src = "192.0.2.1:9".parse().unwrap();
                assert!(!c.check_mac2(Time::ZERO, data, src));
                // Stamped by the initiator's side, the same bytes pass mac1.
                let mut stamped = data.to_vec();
                CookieGenerator::new(&key).add_macs(Time::ZERO, &mut stamped);
                assert_eq!(c.check_mac1(&stamped), stamped.len() >= wire::HEADER_LEN + 32);
            }
            Header::CookieReply { .. } => {
                let mut g = CookieGenerator::new(&key);
                g.add_macs(Time::ZERO, &mut [0u8; 64]);
                assert!(g.consume_reply(Time::ZERO, data).is_err(), "forged cookie accepted");
            }
            _ => {}
        }
    }
    let body = data.get(wire::HEADER_LEN..).unwrap_or(data);
    // A MSG_RUN re-encodes as its MSGs: up to 26 bytes for each byte of the run.
    let mut buf = vec![0u8; body.len() * 26 + 16];
    let mut w = Writer::new(&mut buf);
    let mut all_ok = true;
    let mut frames = Frames::new(body);
    let mut parsed = Vec::new();
    while let Some(f) = frames.next() {
        if let Ok(f) = f {
            parsed.push(f);
        }
        match f {
            // A MSG_FIXED frame comes out as a MSG and ends the body: the rest is its padding.
            Ok(Frame::Msg { seq, from, to, data }) if frames.fixed_msgs() > 0 => {
                wire::write_msg_fixed(&mut w, seq, from, to, data).unwrap();
                while w.pos() < body.len() {
                    w.u8(0).unwrap();
                }
            }
            Ok(Frame::Ack(a)) => {
                let ranges: Vec<_> = a.ranges().collect();
                wire::write_ack(&mut w, a.cumulative, &ranges).unwrap();
            }
            Ok(Frame::OwnerIntro { id, name, sig }) => wire::write_owner_intro(&mut w, id, name, sig).unwrap(),
            Ok(Frame::Dest { id, name }) => wire::write_dest(&mut w, id, name).unwrap(),
            Ok(Frame::Msg { seq, from, to, data }) => wire::write_msg(&mut w, seq, from, to, data).unwrap(),
            Ok(Frame::MsgRun(_)) => unreachable!("Frames::new yields a run's messages one by one"),
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
    // The receive path reads runs whole (`Frames::with_runs`): the same frames, a run's
    // messages expanded, and malformed exactly when the one-by-one reading is.
    let whole: Result<Vec<Frame<'_>>, _> = Frames::with_runs(body).collect();
    let one_by_one: Result<Vec<Frame<'_>>, _> = Frames::new(body).collect();
    match (whole, one_by_one) {
        (Ok(whole), Ok(one_by_one)) => {
            let expanded: Vec<Frame<'_>> = whole
                .into_iter()
                .flat_map(|f| match f {
                    Frame::MsgRun(r) => r
                        .iter()
                        .map(|(seq, data)| Frame::Msg { seq, from: r.from, to: r.to, data })
                        .collect(),
                    f => vec![f],
                })
                .collect();
            assert_eq!(expanded, one_by_one, "a run read whole differs from its messages");
        }
        (Err(_), Err(_)) => {}
        (w, o) => panic!("whole runs {:?} but one by one {:?}", w.is_ok(), o.is_ok()),
    }
    if all_ok {
        let n = w.pos();
        if frames.runs() == 0 {
            assert_eq!(&buf[..n], body, "frames re-encode differently");
        } else {
            // Runs came out as MSGs: the MSGs read back as the same frames.
            let again: Vec<Frame<'_>> = Frames::new(&buf[..n]).collect::<Result<_, _>>().unwrap();
            assert_eq!(again, parsed, "a MSG_RUN's messages re-encode differently");
        }
    }
    msg_fixed_from(data);
});

/// A MSG_FIXED frame with fields, message and padding taken from `data`: both parsers read it
/// back as the message, and the same bytes cut short of the message's end are malformed.
fn msg_fixed_from(data: &[u8]) {
    let Some((head, rest)) = data.split_first_chunk::<12>() else {
        return;
    };
    let seq = u64::from_le_bytes(head[..8].try_into().unwrap()) & wire::VARINT_MAX;
    let (from, to) = (u64::from(head[8].max(1)), u64::from(head[9]));
    let pad = usize::from(head[10] % 32);
    let msg = &rest[..rest.len().min(usize::from(u16::MAX))];
    let end = wire::msg_fixed_len(msg.len());
    let mut buf = vec![0u8; end + pad];
    wire::write_msg_fixed(&mut Writer::new(&mut buf), seq, from, to, msg).unwrap();
    let want = Frame::Msg { seq, from, to, data: msg };
    assert_eq!(Frames::new(&buf).collect::<Vec<_>>(), [Ok(want)]);
    assert_eq!(Frames::with_runs(&buf).collect::<Vec<_>>(), [Ok(want)]);
    let cut = 1 + (usize::from(head[11]) * 257 + msg.len()) % (end - 1);
    let r: Result<Vec<_>, _> = Frames::with_runs(&buf[..cut]).collect();
    assert_eq!(r, Err(sealink_proto::DropReason::MalformedFrame), "cut at {cut} of {end}");
}
