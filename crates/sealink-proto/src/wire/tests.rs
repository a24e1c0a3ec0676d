use super::frames::{equal_items, run_items_len};
use super::*;
use proptest::prelude::*;

#[test]
fn header_round_trip() {
    for h in [
        Header::Init { sender: 7 },
        Header::Response {
            receiver: 1,
            sender: u32::MAX,
        },
        Header::Data {
            scope: Scope::AuthOnly,
            receiver: 42,
            counter: u64::MAX,
        },
    ] {
        let mut b = [0u8; HEADER_LEN];
        write_header(&h, &mut b);
        assert_eq!(parse_header(&b), Ok(h));
    }
}

#[test]
fn header_rejects() {
    assert_eq!(parse_header(&[1u8; 3]), Err(DropReason::MalformedHeader));
    let mut b = [0u8; HEADER_LEN];
    write_header(&Header::Init { sender: 1 }, &mut b);
    b[0] = 2;
    assert_eq!(parse_header(&b), Err(DropReason::BadVersion));
    b[0] = 1;
    b[3] = 1;
    assert_eq!(parse_header(&b), Err(DropReason::MalformedHeader));
    b[3] = 0;
    b[9] = 1; // init must carry zero counter
    assert_eq!(parse_header(&b), Err(DropReason::MalformedHeader));
    b[9] = 0;
    b[1] = 9;
    assert_eq!(parse_header(&b), Err(DropReason::MalformedHeader));
    b[1] = TYPE_DATA;
    b[2] = 3;
    assert_eq!(parse_header(&b), Err(DropReason::MalformedHeader));
}

/// Byte 3 is a data header's lane (any value) and must be 0 in every handshake message.
#[test]
fn lane_byte_only_in_data() {
    for lane in [1u8, 2, 255] {
        let mut b = [0u8; HEADER_LEN];
        let data = Header::Data {
            scope: Scope::Encrypt,
            receiver: 7,
            counter: 9,
        };
        write_header(&data, &mut b);
        b[LANE_OFFSET] = lane;
        assert_eq!(parse_header(&b), Ok(data));
        for h in [
            Header::Init { sender: 1 },
            Header::Response {
                receiver: 1,
                sender: 2,
            },
            Header::CookieReply { receiver: 1 },
        ] {
            write_header(&h, &mut b);
            assert_eq!(parse_header(&b), Ok(h));
            b[LANE_OFFSET] = lane;
            assert_eq!(parse_header(&b), Err(DropReason::MalformedHeader), "{h:?}");
        }
    }
}

/// RFC 9000 Appendix A.1's examples, both ways, and truncations of each.
#[test]
fn varint_known_answers() {
    let cases: [(&[u8], u64); 4] = [
        (
            &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c],
            151_288_809_941_952_652,
        ),
        (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
        (&[0x7b, 0xbd], 15_293),
        (&[0x25], 37),
    ];
    for (enc, v) in cases {
        let mut r = Reader::new(enc);
        assert_eq!(r.varint(), Some(v), "{enc:02x?}");
        assert!(r.is_empty());
        let (bytes, n) = varint_bytes(v);
        assert_eq!(&bytes[..n], enc);
        for cut in 0..enc.len() {
            assert_eq!(
                Reader::new(&enc[..cut]).varint(),
                None,
                "{enc:02x?} cut at {cut}"
            );
        }
    }
    // Two varints back to back: the reader stops exactly after the first.
    let mut r = Reader::new(&[0x7b, 0xbd, 0x25]);
    assert_eq!(
        (r.varint(), r.varint(), r.varint()),
        (Some(15_293), Some(37), None)
    );
}

#[test]
fn varint_rejects_non_minimal() {
    // 5 encoded in two bytes.
    let mut r = Reader::new(&[0x40, 0x05]);
    assert_eq!(r.varint(), None);
}

#[test]
fn frames_round_trip() {
    let mut buf = [0u8; 512];
    let sig = [7u8; 64];
    let mut w = Writer::new(&mut buf);
    write_ack(&mut w, 10, &[(12, 15), (20, 21)]).unwrap();
    write_owner_intro(&mut w, 1, "alice@a", &sig).unwrap();
    write_dest(&mut w, 2, "bob").unwrap();
    write_msg(&mut w, 99, 1, 2, b"hello").unwrap();
    w.u8(FRAME_PING).unwrap();
    write_abandon(&mut w, 70_000).unwrap();
    write_refused(&mut w, 3, RefuseReason::UnknownOwner).unwrap();
    let n = w.pos();
    let frames: Vec<_> = Frames::new(&buf[..n]).collect::<Result<_, _>>().unwrap();
    assert_eq!(frames.len(), 7);
    match frames[0] {
        Frame::Ack(a) => {
            assert_eq!(a.cumulative, 10);
            assert_eq!(a.ranges().collect::<Vec<_>>(), vec![(12, 15), (20, 21)]);
        }
        _ => panic!(),
    }
    assert_eq!(
        frames[1],
        Frame::OwnerIntro {
            id: 1,
            name: "alice@a",
            sig: &sig
        }
    );
    assert_eq!(frames[2], Frame::Dest { id: 2, name: "bob" });
    assert_eq!(
        frames[3],
        Frame::Msg {
            seq: 99,
            from: 1,
            to: 2,
            data: b"hello"
        }
    );
    assert_eq!(frames[4], Frame::Ping);
    assert_eq!(frames[5], Frame::Abandon { below: 70_000 });
    assert_eq!(
        frames[6],
        Frame::Refused {
            seq: 3,
            reason: RefuseReason::UnknownOwner
        }
    );
    assert_eq!(abandon_len(70_000), 1 + 4);
    assert_eq!(refused_len(3), 3);
    for r in [1u8, 2, 3, 4] {
        let reason = RefuseReason::from_u8(r).unwrap();
        assert_eq!(reason as u8, r);
        assert_eq!(RefuseReason::from_drop(reason.drop_reason()), Some(reason));
    }
    assert_eq!(ack_len(10, &[(12, 15), (20, 21)]), 7);
    assert_eq!(msg_frame_len(99, 1, 2, 5), 1 + 2 + 1 + 1 + 1 + 5);
}

#[test]
fn a_msg_run_reads_as_consecutive_msgs() {
    let mut buf = [0u8; 256];
    let mut w = Writer::new(&mut buf);
    let items: [&[u8]; 3] = [b"one", b"", b"three"];
    let at = write_msg_run_header(&mut w, 16_383, 3, 0).unwrap();
    for d in items {
        write_run_item(&mut w, d).unwrap();
    }
    set_run_count(&mut w, at, 3).unwrap();
    w.u8(FRAME_PING).unwrap();
    let n = w.pos();
    assert_eq!(
        n,
        msg_run_header_len(16_383, 3, 0)
            + items.iter().map(|d| run_item_len(d.len())).sum::<usize>()
            + 1
    );
    let frames: Vec<_> = Frames::new(&buf[..n]).collect::<Result<_, _>>().unwrap();
    let want: Vec<Frame<'_>> = items
        .iter()
        .zip(16_383..)
        .map(|(&data, seq)| Frame::Msg {
            seq,
            from: 3,
            to: 0,
            data,
        })
        .chain([Frame::Ping])
        .collect();
    assert_eq!(frames, want);
    // The example of docs/PROTOCOL.md §3.
    let doc = [0x08, 0x05, 0x01, 0x00, 0x00, 0x02, 0x02, 0x68, 0x69, 0x00];
    let frames: Vec<_> = Frames::new(&doc).collect::<Result<_, _>>().unwrap();
    assert_eq!(
        frames,
        [
            Frame::Msg {
                seq: 5,
                from: 1,
                to: 0,
                data: b"hi"
            },
            Frame::Msg {
                seq: 6,
                from: 1,
                to: 0,
                data: b""
            }
        ]
    );
    // A run whose count says more than it holds is malformed at the end of the body.
    set_run_count(&mut Writer::new(&mut buf), at, 4).unwrap();
    let r: Result<Vec<_>, _> = Frames::new(&buf[..n - 1]).collect();
    assert_eq!(r, Err(DropReason::MalformedFrame));
}

#[test]
fn with_runs_yields_a_run_whole_with_the_same_messages() {
    let mut buf = [0u8; 256];
    let mut w = Writer::new(&mut buf);
    let items = run_items(&[b"one", b"", b"three"]);
    write_msg_run(&mut w, 70, 2, 5, 3, &items).unwrap();
    w.u8(FRAME_PING).unwrap();
    let n = w.pos();
    let whole: Vec<_> = Frames::with_runs(&buf[..n])
        .collect::<Result<_, _>>()
        .unwrap();
    let Frame::MsgRun(run) = whole[0] else {
        panic!("a MSG_RUN comes out whole: {whole:?}")
    };
    assert_eq!((run.seq, run.from, run.to, run.count), (70, 2, 5, 3));
    assert_eq!(run.items, &items[..]);
    assert_eq!(whole[1], Frame::Ping);
    // Its messages are exactly what `Frames::new` yields one by one.
    let split: Vec<_> = Frames::new(&buf[..n]).collect::<Result<_, _>>().unwrap();
    let expanded: Vec<Frame<'_>> = run
        .iter()
        .map(|(seq, data)| Frame::Msg {
            seq,
            from: 2,
            to: 5,
            data,
        })
        .chain([Frame::Ping])
        .collect();
    assert_eq!(split, expanded);
    // A run whose count says more than it holds is malformed whole too.
    let mut short = buf;
    let at = 1 + varint_len(70) + 2;
    short[at..at + 2].copy_from_slice(&4u16.to_be_bytes());
    let r: Result<Vec<_>, _> = Frames::with_runs(&short[..n - 1]).collect();
    assert_eq!(r, Err(DropReason::MalformedFrame));
}

/// Messages encoded as MSG_RUN items, back to back.
fn run_items(msgs: &[&[u8]]) -> Vec<u8> {
    let mut items = Vec::new();
    for d in msgs {
        let (p, n) = varint_bytes(d.len() as u64);
        items.extend_from_slice(&p[..n]);
        items.extend_from_slice(d);
    }
    items
}

#[test]
fn run_item_data_len_inverts_run_item_len() {
    for len in (0..20_000).chain([1 << 30, (1 << 30) - 1, 1 << 40]) {
        assert_eq!(run_item_data_len(run_item_len(len)), Some(len), "{len}");
    }
    // 64 bytes take a two-byte length: no message makes a 65-byte item.
    assert_eq!(run_item_data_len(65), None);
    assert_eq!(run_item_data_len(0), None);
}

#[test]
fn padding_fills_to_whole_blocks_and_parses_as_one_frame() {
    for msg_len in 0..80usize {
        let mut buf = vec![0xAAu8; 256];
        let mut w = Writer::new(&mut buf);
        write_msg(&mut w, 20_000, 1, 0, &vec![7u8; msg_len]).unwrap();
        let before = w.pos();
        pad_to_block(&mut w);
        let len = w.pos();
        assert_eq!(len % PAD_BLOCK, 0, "msg {msg_len}");
        assert_eq!(len - before, block_padding(before));
        let frames: Vec<_> = Frames::new(&buf[..len]).collect();
        assert!(matches!(frames[0], Ok(Frame::Msg { .. })));
        if len > before {
            assert_eq!(frames.len(), 2);
            assert!(matches!(frames[1], Ok(Frame::Padding)));
        } else {
            assert_eq!(frames.len(), 1);
        }
    }
    // No room: the body is left as it is, never cut or overrun.
    let mut buf = [0xAAu8; 20];
    let mut w = Writer::new(&mut buf);
    write_msg(&mut w, 1, 1, 0, &[5u8; 12]).unwrap();
    assert_eq!(w.pos(), 17);
    pad_to_block(&mut w);
    assert_eq!(w.pos(), 17);
    // Padding with a non-zero byte in it is malformed.
    let mut buf = [0u8; 32];
    let mut w = Writer::new(&mut buf);
    write_msg(&mut w, 1, 1, 0, &[5u8; 12]).unwrap();
    pad_to_block(&mut w);
    buf[30] = 1;
    assert!(Frames::new(&buf).any(|f| f == Err(DropReason::MalformedFrame)));
}

/// The layout of docs/PROTOCOL.md §3's MSG_FIXED example, and a round trip with frames
/// before it and padding after it, through both parsers.
#[test]
fn msg_fixed_round_trips_and_matches_the_documented_layout() {
    let doc = [
        0x09, 0x01, 0x00, 0x02, 0x00, 0x05, 0, 0, 0, 0, 0, 0, 0, 0x68, 0x69, 0, 0, 0,
    ];
    let mut buf = [0u8; 18];
    let mut w = Writer::new(&mut buf);
    write_msg_fixed(&mut w, 5, 1, 0, b"hi").unwrap();
    assert_eq!(w.pos(), msg_fixed_len(2));
    assert_eq!(&buf[..15], &doc[..15]);
    let want = Frame::Msg {
        seq: 5,
        from: 1,
        to: 0,
        data: b"hi",
    };
    for body in [&doc[..], &doc[..15], &doc[..16]] {
        let mut f = Frames::new(body);
        assert_eq!(f.next(), Some(Ok(want)), "{body:02x?}");
        assert_eq!(f.next(), None, "the padding is part of the frame");
        assert_eq!((f.fixed_msgs(), f.runs()), (1, 0));
        let whole: Vec<_> = Frames::with_runs(body).collect();
        assert_eq!(whole, [Ok(want)]);
    }
    // After other frames, padded to whole blocks as a sender leaves it.
    for (seq, from, to, len) in [
        (0, 1, 0, 0),
        (VARINT_MAX, 255, 255, 1),
        (1 << 40, 7, 3, 64),
        (16_384, 1, 1, 1400),
        (3, 2, 0, 65_535),
    ] {
        let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut buf = vec![0xAAu8; len + 200];
        let mut w = Writer::new(&mut buf);
        write_ack(&mut w, 10, &[(12, 15)]).unwrap();
        write_abandon(&mut w, 9).unwrap();
        write_msg_fixed(&mut w, seq, from, to, &data).unwrap();
        pad_to_block(&mut w);
        let n = w.pos();
        for frames in [Frames::new(&buf[..n]), Frames::with_runs(&buf[..n])] {
            let got: Vec<_> = frames.collect::<Result<_, _>>().unwrap();
            assert_eq!(got.len(), 3);
            assert_eq!(got[1], Frame::Abandon { below: 9 });
            assert_eq!(
                got[2],
                Frame::Msg {
                    seq,
                    from,
                    to,
                    data: &data
                }
            );
        }
    }
}

/// Every truncation of a MSG_FIXED frame short of its message's last byte is malformed
/// (the drop the receiver counts as `malformed-frame`), never a panic; so is a message from
/// owner 0, a seq past 2^62, and anything but zeros after the message (a frame included).
#[test]
fn msg_fixed_truncations_and_bad_fields_are_malformed() {
    for len in [0usize, 1, 64, 300] {
        let data = vec![0x5Au8; len];
        let mut buf = vec![0u8; len + 64];
        let mut w = Writer::new(&mut buf);
        write_msg_fixed(&mut w, 1 << 20, 4, 2, &data).unwrap();
        let end = w.pos();
        for cut in 1..end {
            for r in [
                Frames::new(&buf[..cut]).collect::<Result<Vec<_>, _>>(),
                Frames::with_runs(&buf[..cut]).collect::<Result<Vec<_>, _>>(),
            ] {
                assert_eq!(r, Err(DropReason::MalformedFrame), "len {len} cut at {cut}");
            }
        }
        // Cutting into the padding only leaves less padding.
        for cut in end..buf.len() {
            assert!(
                Frames::new(&buf[..cut]).all(|f| f.is_ok()),
                "len {len} cut {cut}"
            );
        }
    }
    let good = {
        let mut b = [0u8; 32];
        write_msg_fixed(&mut Writer::new(&mut b), 9, 1, 0, b"abc").unwrap();
        b
    };
    let mut bad = Vec::new();
    let mut owner0 = good;
    owner0[1] = 0;
    bad.push(owner0.to_vec());
    let mut big_seq = good;
    big_seq[5..13].copy_from_slice(&(VARINT_MAX + 1).to_le_bytes());
    bad.push(big_seq.to_vec());
    let mut top_seq = good;
    top_seq[5..13].copy_from_slice(&u64::MAX.to_le_bytes());
    bad.push(top_seq.to_vec());
    for at in 16..32 {
        let mut b = good;
        b[at] = if at == 16 { FRAME_PING } else { 0x80 };
        bad.push(b.to_vec());
    }
    // A length past the body.
    let mut long = good;
    long[3..5].copy_from_slice(&20u16.to_le_bytes());
    bad.push(long.to_vec());
    for b in &bad {
        let r: Result<Vec<_>, _> = Frames::new(b).collect();
        assert_eq!(r, Err(DropReason::MalformedFrame), "{b:02x?}");
        let r: Result<Vec<_>, _> = Frames::with_runs(b).collect();
        assert_eq!(r, Err(DropReason::MalformedFrame), "with runs {b:02x?}");
    }
    // The largest seq a varint holds is accepted.
    let mut top = good;
    top[5..13].copy_from_slice(&VARINT_MAX.to_le_bytes());
    assert!(Frames::new(&top).all(|f| f.is_ok()));
}

#[test]
fn msg_fixed_header_refuses_what_does_not_fit() {
    let mut out = [0xEEu8; MSG_FIXED_HEADER_LEN];
    for (seq, from, to, len) in [
        (1, 0, 0, 1),
        (1, 256, 0, 1),
        (1, 1, 256, 1),
        (1, 1, 0, 65_536),
        (VARINT_MAX + 1, 1, 0, 1),
    ] {
        assert!(!msg_fixed_fits(seq, from, to, len));
        assert_eq!(write_msg_fixed_header(&mut out, seq, from, to, len), None);
        assert_eq!(out, [0xEE; MSG_FIXED_HEADER_LEN], "nothing written");
    }
    assert_eq!(
        write_msg_fixed_header(&mut out[..12], 1, 1, 0, 1),
        None,
        "no room"
    );
    assert!(msg_fixed_fits(VARINT_MAX, 255, 255, 65_535));
    assert_eq!(write_msg_fixed_header(&mut out, 1, 1, 0, 1), Some(()));
    let mut w = Writer::new(&mut out);
    assert_eq!(write_msg_fixed(&mut w, 1, 1, 0, b"x"), None, "no room");
    assert_eq!(w.pos(), 0);
}

/// The sender's rewrite: a one-message MSG_RUN ending the writer's bytes becomes the
/// MSG_FIXED frame of the same message, at every seq, id and length form; where the fields
/// do not fit or the datagram has no room for the longer header, the run stays as it was.
#[test]
fn one_run_as_fixed_rewrites_a_one_message_run_or_leaves_it() {
    let seqs = [
        0,
        63,
        64,
        16_383,
        16_384,
        (1 << 30) - 1,
        1 << 30,
        VARINT_MAX,
    ];
    let ids = [
        (1, 0),
        (1, 1),
        (63, 64),
        (255, 255),
        (256, 0),
        (1, 256),
        (300, 70_000),
    ];
    for &seq in &seqs {
        for &(from, to) in &ids {
            for len in [0usize, 1, 63, 64, 1400, 16_383, 16_384, 65_535] {
                let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
                let items = run_items(&[&data]);
                let mut buf = vec![0u8; 2 + len + 40];
                let mut w = Writer::new(&mut buf);
                write_abandon(&mut w, 3).unwrap();
                let start = w.pos();
                write_msg_run(&mut w, seq, from, to, 1, &items).unwrap();
                let run_end = w.pos();
                let before = w.buf[..run_end].to_vec();
                let fits = msg_fixed_fits(seq, from, to, len);
                // Room only for the run: the rewrite must not overrun.
                for cap in [run_end, start + msg_fixed_len(len), buf.len()] {
                    let mut b = buf.clone();
                    let cap = cap.min(b.len());
                    if cap < run_end {
                        continue;
                    }
                    // Another message (one byte shorter) is refused: `data` must be the
                    // run's own.
                    if len > 0 {
                        let mut other = b.clone();
                        let mut wo = Writer::new(&mut other[..cap]);
                        wo.pos = run_end;
                        assert!(!one_run_as_fixed(&mut wo, start, seq, from, to, &data[1..]));
                        assert_eq!(wo.pos(), run_end);
                        assert_eq!(other, b);
                    }
                    let mut w = Writer::new(&mut b[..cap]);
                    w.pos = run_end;
                    let done = one_run_as_fixed(&mut w, start, seq, from, to, &data);
                    let room = start + msg_fixed_len(len) <= cap;
                    assert_eq!(
                        done,
                        fits && room,
                        "seq {seq} ids {from},{to} len {len} cap {cap}"
                    );
                    let n = w.pos();
                    if !done {
                        assert_eq!(&b[..n], &before[..], "left as it was");
                        continue;
                    }
                    assert_eq!(n, start + msg_fixed_len(len));
                    let mut f = Frames::with_runs(&b[..n]);
                    assert_eq!(f.next(), Some(Ok(Frame::Abandon { below: 3 })));
                    assert_eq!(
                        f.next(),
                        Some(Ok(Frame::Msg {
                            seq,
                            from,
                            to,
                            data: &data
                        }))
                    );
                    assert_eq!((f.next(), f.fixed_msgs()), (None, 1));
                }
            }
        }
    }
}

#[test]
fn run_items_fitting_counts_whole_items() {
    let items = run_items(&[b"abc", b"", &[7u8; 100]]);
    assert_eq!(run_items_fitting(&items, 9, 0), (0, 0));
    assert_eq!(run_items_fitting(&items, 9, 4), (1, 4));
    assert_eq!(run_items_fitting(&items, 9, 5), (2, 5));
    assert_eq!(run_items_fitting(&items, 9, 106), (2, 5));
    assert_eq!(run_items_fitting(&items, 9, 107), (3, 107));
    assert_eq!(run_items_fitting(&items, 1, 107), (1, 4));
    // A truncated item ends the count.
    assert_eq!(run_items_fitting(&items[..50], 9, 999), (2, 5));
    // So does a length not in its shortest form (5 in two bytes), as when reading it.
    assert_eq!(
        run_items_fitting(&[1, b'a', 0x40, 5, 1, 2, 3, 4, 5], 9, 99),
        (1, 2)
    );
    assert_eq!(
        run_items_fitting(&[0x40, 64], 9, 99),
        (0, 0),
        "64 bytes announced"
    );
}

#[test]
fn bad_frames() {
    for bad in [
        &[0x0au8][..],                                   // unknown type
        &[FRAME_MSG_FIXED],                              // MSG_FIXED without fields
        &[FRAME_MSG, 1, 0, 0, 5, b'a'],                  // from = 0
        &[FRAME_MSG, 1, 1, 0, 5, b'a'],                  // truncated data
        &[FRAME_DEST, 1, 0],                             // empty name
        &[FRAME_DEST, 1, 1, b' '],                       // bad char
        &[FRAME_ACK, 5, 1, 0, 1],                        // zero gap above non-zero cumulative
        &[FRAME_ACK, 5, 1, 1, 0],                        // empty range
        &[FRAME_ACK, 0, 40],                             // too many ranges
        &[FRAME_PADDING, 0, 1],                          // padding with data
        &[FRAME_ABANDON],                                // no value
        &[FRAME_ABANDON, 0x40, 0x05],                    // non-minimal varint
        &[FRAME_REFUSED, 1],                             // no reason
        &[FRAME_REFUSED, 1, 0],                          // reason 0
        &[FRAME_REFUSED, 1, 5],                          // unknown reason
        &[FRAME_MSG_RUN, 1, 1, 0, 0, 0],                 // no messages
        &[FRAME_MSG_RUN, 1, 0, 0, 0, 1, 1, b'a'],        // from = 0
        &[FRAME_MSG_RUN, 1, 1, 0, 0, 2, 1, b'a'],        // second message missing
        &[FRAME_MSG_RUN, 1, 1, 0, 0, 1, 2, b'a'],        // truncated message
        &[FRAME_MSG_RUN, 1, 1, 0, 0],                    // truncated count
        &[FRAME_MSG_RUN, 1, 1, 0, 0, 1, 0x40, 1, b'a'],  // non-minimal length
        &[FRAME_MSG_RUN, 1, 1, 0, 0, 1, 0x40],           // truncated two-byte length
        &[FRAME_MSG_RUN, 1, 1, 0, 0, 1, 0x40, 64, b'a'], // 64 bytes announced, 1 there
        &[FRAME_MSG_RUN, 1, 1, 0, 0, 1, 0x80, 0, 0, 1],  // non-minimal four-byte length
        &[
            FRAME_MSG_RUN,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            1,
            0,
            0,
            2,
            0,
            0,
        ], // seq past 2^62
    ] {
        let r: Result<Vec<_>, _> = Frames::new(bad).collect();
        assert_eq!(r, Err(DropReason::MalformedFrame), "{bad:?}");
        // The receive path's form refuses the same bodies.
        let r: Result<Vec<_>, _> = Frames::with_runs(bad).collect();
        assert_eq!(r, Err(DropReason::MalformedFrame), "with runs: {bad:?}");
    }
}

proptest! {
    #[test]
    fn varint_round_trip(v in prop_oneof![0u64..64, 64u64..16_384, 16_384u64..1 << 30, (1u64 << 30)..=VARINT_MAX]) {
        let mut b = [0u8; 8];
        let mut w = Writer::new(&mut b);
        w.varint(v).unwrap();
        let n = w.pos();
        prop_assert_eq!(n, varint_len(v));
        let mut r = Reader::new(&b[..n]);
        prop_assert_eq!(r.varint(), Some(v));
    }

    /// The receive path's whole-run parse accepts exactly what the frame-by-frame parse
    /// accepts, with the same messages: well-formed runs of every length form, and the
    /// same bytes damaged.
    #[test]
    fn whole_runs_parse_as_their_messages(
        lens in proptest::collection::vec(prop_oneof![0usize..64, 64usize..300, 16_384usize..16_400], 1..6),
        cut in 0usize..64,
        flip in any::<(usize, u8)>(),
        same in any::<bool>(),
    ) {
        // Equal sizes take the receiver's stride path, others its walk.
        let lens: Vec<usize> = if same { vec![lens[0]; lens.len()] } else { lens };
        let msgs: Vec<Vec<u8>> = lens.iter().map(|&l| vec![0xa5; l]).collect();
        let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        let items = run_items(&refs);
        let mut buf = vec![0u8; items.len() + 32];
        let mut w = Writer::new(&mut buf);
        write_msg_run(&mut w, 9, 1, 0, msgs.len() as u16, &items).unwrap();
        let n = w.pos();
        let mut damaged = buf[..n].to_vec();
        let at = 6 + flip.0 % (n - 6).max(1);
        if let Some(b) = damaged.get_mut(at) { *b ^= flip.1; }
        for body in [&buf[..n], &buf[..n.saturating_sub(cut)], &damaged[..]] {
            let one: Result<Vec<_>, _> = Frames::new(body).collect();
            let whole: Result<Vec<_>, _> = Frames::with_runs(body).collect();
            match (one, whole) {
                (Ok(one), Ok(whole)) => {
                    let expanded: Vec<Frame<'_>> = whole.iter().flat_map(|f| match f {
                        Frame::MsgRun(r) => r.iter().map(|(seq, data)| Frame::Msg { seq, from: r.from, to: r.to, data }).collect::<Vec<_>>(),
                        other => vec![*other],
                    }).collect();
                    prop_assert_eq!(one, expanded);
                }
                (Err(a), Err(b)) => prop_assert_eq!(a, b),
                (a, b) => prop_assert!(false, "frame by frame {a:?}, whole {b:?}"),
            }
        }
    }

    /// The receive path's in-line walk finds what the general one finds, on any bytes:
    /// every length form, non-shortest forms, truncations.
    #[test]
    fn run_items_len_agrees_with_run_items_fitting(
        items in proptest::collection::vec(any::<u8>(), 0..200),
        count in 1u16..8,
    ) {
        let (n, used) = run_items_fitting(&items, usize::from(count), usize::MAX);
        let want = (n == usize::from(count)).then_some(used);
        prop_assert_eq!(run_items_len(&items, count), want);
        // Where the stride check accepts, it finds the same bytes.
        if let Some(stride) = equal_items(&items, count) {
            prop_assert_eq!(Some(stride * usize::from(count)), want);
        }
    }

    /// Any fitting message encodes as MSG_FIXED and parses back as itself, with any padding
    /// after it; the sender's rewrite of its one-message MSG_RUN gives the same bytes. A
    /// message whose ids do not fit keeps the MSG_RUN, which parses as the same message.
    #[test]
    fn msg_fixed_encodes_and_parses_back(
        seq in prop_oneof![0u64..16_384, 0u64..=VARINT_MAX],
        from in prop_oneof![1u64..=255, 256u64..100_000],
        to in prop_oneof![0u64..=255, 256u64..100_000],
        len in prop_oneof![0usize..100, 0usize..20_000],
        pad in 0usize..40,
    ) {
        let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        let want = Frame::Msg { seq, from, to, data: &data };
        let fits = from <= 255 && to <= 255;
        prop_assert_eq!(msg_fixed_fits(seq, from, to, len), fits);
        let mut fixed = vec![0u8; msg_fixed_len(len) + pad];
        let written = write_msg_fixed(&mut Writer::new(&mut fixed), seq, from, to, &data);
        prop_assert_eq!(written.is_some(), fits);
        if fits {
            let got: Vec<_> = Frames::new(&fixed).collect();
            prop_assert_eq!(&got, &[Ok(want)]);
            let got: Vec<_> = Frames::with_runs(&fixed).collect();
            prop_assert_eq!(&got, &[Ok(want)]);
        }
        // The sender's path: a one-message MSG_RUN, rewritten when it fits.
        let items = run_items(&[&data]);
        let mut buf = vec![0u8; msg_run_header_len(seq, from, to) + items.len() + 16 + pad];
        let mut w = Writer::new(&mut buf);
        write_msg_run(&mut w, seq, from, to, 1, &items).unwrap();
        let run_len = w.pos();
        prop_assert_eq!(run_item_message(&items), Some(&data[..]));
        prop_assert_eq!(one_run_as_fixed(&mut w, 0, seq, from, to, &data), fits);
        let n = w.pos();
        if fits {
            prop_assert_eq!(&buf[..n], &fixed[..msg_fixed_len(len)]);
        } else {
            prop_assert_eq!(n, run_len);
            prop_assert_eq!(buf[0], FRAME_MSG_RUN);
            let mut f = Frames::new(&buf[..n]);
            prop_assert_eq!(f.next(), Some(Ok(want)));
            prop_assert_eq!((f.next(), f.runs(), f.fixed_msgs()), (None, 1, 0));
        }
    }

    #[test]
    fn frames_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        for f in Frames::new(&data) {
            if let Ok(Frame::Ack(a)) = f { let _ = a.ranges().count(); }
        }
        let _ = parse_header(&data);
    }

    #[test]
    fn ack_round_trip(cum in 0u64..1_000_000, spans in proptest::collection::vec((1u64..50, 1u64..50), 0..MAX_ACK_RANGES)) {
        let mut ranges = Vec::new();
        let mut prev = cum;
        for (gap, len) in spans { let s = prev + gap; ranges.push((s, s + len)); prev = s + len; }
        let mut b = [0u8; 1024];
        let mut w = Writer::new(&mut b);
        write_ack(&mut w, cum, &ranges).unwrap();
        let n = w.pos();
        prop_assert_eq!(n, ack_len(cum, &ranges));
        let f: Vec<_> = Frames::new(&b[..n]).collect::<Result<_, _>>().unwrap();
        match f[0] { Frame::Ack(a) => { prop_assert_eq!(a.cumulative, cum); prop_assert_eq!(a.ranges().collect::<Vec<_>>(), ranges); } _ => prop_assert!(false) }
    }
}
