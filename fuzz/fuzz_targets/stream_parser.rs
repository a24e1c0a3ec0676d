//! Stream mode's parsers (record header, hello, end, done, abort) and the receiver's record
//! accounting never panic; whatever decodes re-encodes to something that decodes the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealink_proto::stream::body::UNKNOWN_SIZE;
use sealink_proto::stream::{Abort, Assembly, Done, End, Hello, Layout, RECORD_HEADER_LEN, RecordHeader};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = RecordHeader::parse(data) {
        let mut out = [0u8; RECORD_HEADER_LEN];
        h.encode(&mut out);
        assert_eq!(RecordHeader::parse(&out).unwrap(), h);
        let _ = (h.record_len(), h.data_len());
    }
    let body = data.get(1..).unwrap_or_default();
    match data.first().map(|b| b % 5) {
        Some(0) => {
            if let Ok(x) = Hello::decode(body) {
                assert_eq!(Hello::decode(&x.encode()).unwrap(), x);
            }
        }
        Some(1) => {
            if let Ok(x) = End::decode(body) {
                assert_eq!(End::decode(&x.encode()).unwrap(), x);
            }
        }
        Some(2) => {
            if let Ok(x) = Done::decode(body) {
                assert_eq!(Done::decode(&x.encode()).unwrap(), x);
            }
        }
        Some(3) => {
            if let Ok(x) = Abort::decode(body) {
                assert_eq!(Abort::decode(&x.encode()).unwrap(), x);
            }
        }
        Some(_) => assembly(body),
        None => {}
    }
});

/// A small layout from the first bytes, then records (seq, length) accepted in the order the
/// input gives, then an end record checked against what arrived.
fn assembly(d: &[u8]) {
    if d.len() < 4 {
        return;
    }
    let record_data = 1 + u32::from(d[0] % 32);
    let files = 1 + usize::from(d[1] % 3);
    let mut sizes: Vec<u64> = (0..files).map(|i| u64::from(d[2].rotate_left(i as u32 * 3)) % 200).collect();
    if d[3] & 1 == 1 {
        *sizes.last_mut().unwrap() = UNKNOWN_SIZE;
    }
    let mut a = Assembly::new(Layout::new(record_data, sizes.iter().copied()));
    let mut rest = &d[4..];
    while rest.len() >= 3 && rest[0] != 0xff {
        let seq = u64::from(rest[0]);
        let len = usize::from(rest[1]) % (record_data as usize + 2);
        let _ = a.accept(seq, len);
        rest = &rest[3..];
    }
    let end_sizes = sizes.iter().map(|&s| if s == UNKNOWN_SIZE { u64::from(rest.get(1).copied().unwrap_or(0)) } else { s }).collect();
    let end = End { data_records: a.received(), sizes: end_sizes };
    let _ = Assembly::end_seq(&end);
    let _ = a.finish(&end);
}
