//! Stream mode's parsers (record header, hello, end, done, abort) and the receiver's record
//! accounting never panic; whatever decodes re-encodes to something that decodes the same.
//! The receiver's first check of an initiation (mac1) lets nothing random through, and an
//! initiation stamped with a valid mac1 reaches the Noise parser and is refused, not a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealink_proto::SuiteId;
use sealink_proto::stream::body::UNKNOWN_SIZE;
use sealink_proto::stream::limits::DEFAULT_MAX_BITMAP_BYTES;
use sealink_proto::stream::{
    Abort, Assembly, Done, End, Hello, Layout, RECORD_HEADER_LEN, Ready, RecordBound, RecordHeader,
    StreamError, StreamLimits,
};
use sealink_proto::stream::resume::RecordMap;

fuzz_target!(|data: &[u8]| {
    initiation(data);
    if let Ok(h) = RecordHeader::parse(data) {
        let mut out = [0u8; RECORD_HEADER_LEN];
        h.encode(&mut out);
        assert_eq!(RecordHeader::parse(&out).unwrap(), h);
        let _ = (h.record_len(), h.data_len());
    }
    let body = data.get(1..).unwrap_or_default();
    match data.first().map(|b| b % 7) {
        Some(0) => {
            if let Ok(x) = Hello::decode(body) {
                assert_eq!(Hello::decode(&x.encode()).unwrap(), x);
                // What a receiver does next: bound the announcement (real default limits).
                let layout = Layout::new(x.record_data, x.files.iter().map(|f| f.size));
                let bound = StreamLimits::default().bound(SuiteId::Aes128Gcm, x.record_data);
                admit(layout, bound);
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
        Some(4) => {
            if let Ok(x) = Ready::decode(body) {
                assert_eq!(Ready::decode(&x.encode()).unwrap(), x);
            }
        }
        Some(5) => {
            // A record map from disk: never trusted, never a panic.
            if let Ok(x) = RecordMap::decode(body) {
                assert!(x.held <= x.size);
                assert_eq!(RecordMap::decode(&x.encode()).unwrap(), x);
            }
        }
        Some(_) => assembly(body),
        None => {}
    }
});

/// Whatever a hello announces, building the receiver's accounting for it either fits the
/// limits or is refused with `LimitExceeded`; it never panics or allocates past them.
fn admit(layout: Layout, bound: RecordBound) -> Option<Assembly> {
    match Assembly::new(layout, bound) {
        Ok(a) => Some(a),
        Err(StreamError::LimitExceeded { needed, limit, .. }) => {
            assert!(needed > limit || limit == bound.max);
            None
        }
        Err(e) => panic!("unexpected refusal: {e}"),
    }
}

fn u64_at(d: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    for (k, x) in b.iter_mut().enumerate() {
        *x = d.get(i + k).copied().unwrap_or(0);
    }
    u64::from_le_bytes(b)
}

/// A layout from the first bytes (record sizes from 1 byte up, file sizes from tiny to huge,
/// bitmap and key limits from tiny to the defaults), then records (seq, length) accepted in the
/// order the input gives, then an end record checked against what arrived.
fn assembly(d: &[u8]) {
    if d.len() < 6 {
        return;
    }
    // Tiny records (the hello decoder refuses them, the accounting must cope anyway) or any size.
    let record_data = if d[0] & 0x80 == 0 {
        1 + u32::from(d[0] % 32)
    } else {
        u32::from_le_bytes([d[1], d[2], d[3], 0]).max(1)
    };
    let files = 1 + usize::from(d[1] % 3);
    let huge = d[2] & 0x80 != 0;
    let mut sizes: Vec<u64> = (0..files)
        .map(|i| {
            if huge {
                // Announced sizes up to 2^64 - 2: the limits, not the input, must bound them.
                u64_at(d, 6 + 8 * i) % UNKNOWN_SIZE
            } else {
                u64::from(d[2].rotate_left(i as u32 * 3)) % 200
            }
        })
        .collect();
    if d[3] & 1 == 1 {
        *sizes.last_mut().unwrap() = UNKNOWN_SIZE;
    }
    let limits = StreamLimits {
        // The real default now and then; otherwise small enough to reach quickly.
        max_bitmap_bytes: if d[4] == 0xff {
            DEFAULT_MAX_BITMAP_BYTES
        } else {
            u64::from(d[4])
        },
        key_data_records: (d[5] & 1 == 1).then(|| u64::from(d[5] >> 1)),
    };
    let suite = if d[5] & 2 == 0 {
        SuiteId::Aes128Gcm
    } else {
        SuiteId::ChaCha20Poly1305
    };
    let bound = limits.bound(suite, record_data);
    let Some(mut a) = admit(Layout::new(record_data, sizes.iter().copied()), bound) else {
        return;
    };
    let mut rest = d.get(6 + if huge { 8 * files } else { 0 }..).unwrap_or_default();
    while rest.len() >= 3 && rest[0] != 0xff {
        // Mostly small seqs, sometimes far ones (past the bound, past the bitmap).
        let seq = if rest[2] & 0x80 == 0 {
            u64::from(rest[0])
        } else {
            u64::from(rest[0]) << (rest[2] & 0x3f)
        };
        let len = usize::from(rest[1]) % (record_data as usize + 2);
        if a.accept(seq, len).is_ok() {
            assert!(seq <= bound.max, "accepted record {seq} past the bound {}", bound.max);
        }
        rest = &rest[3..];
    }
    let end_sizes = sizes
        .iter()
        .map(|&s| if s == UNKNOWN_SIZE { u64::from(rest.get(1).copied().unwrap_or(0)) } else { s })
        .collect();
    // What a resumed session does first: hold a prefix of the first file (may be refused).
    if let Some(&k) = rest.first() {
        let held = u64::from(k) % 4;
        if a.hold(0, held).is_ok() {
            assert!(a.held_prefix(0) >= held.min(a.layout().file_records(0).unwrap_or(0)));
        }
    }
    let end = End { data_records: a.received(), sizes: end_sizes, hashes: vec![], left_out: vec![] };
    let _ = a.end_seq(&end);
    let _ = a.finish(&end);
}

/// What a stream receiver does with the bytes after an initiation preamble: mac1 first (before
/// its rate limiter), then, only for a valid mac1, the handshake.
fn initiation(d: &[u8]) {
    use sealink_proto::HostKey;
    use sealink_proto::cookie::Mac1;
    use sealink_proto::handshake::NOISE_INIT_LEN;
    use sealink_proto::stream::handshake::{INIT_MESSAGE_LEN, accept, mac1_ok};
    static HOST: std::sync::OnceLock<HostKey> = std::sync::OnceLock::new();
    let host = HOST.get_or_init(|| HostKey::from_private([7; 32]).unwrap());
    let gate = Mac1::new(host.public());
    // Random bytes never carry a valid mac1, so they never reach the limiter or a DH.
    assert!(!mac1_ok(&gate, d), "random mac1 accepted");
    assert!(matches!(accept(host, d, |_| true), Err(StreamError::BadMac1)));
    if d.len() < NOISE_INIT_LEN {
        return;
    }
    // Stamped with a valid mac1 (as someone who knows the receiver's key could): the check
    // passes and the Noise parser refuses the rest.
    let mut m = d[..NOISE_INIT_LEN].to_vec();
    let tag = gate.compute(&m);
    m.extend_from_slice(&tag);
    assert_eq!(m.len(), INIT_MESSAGE_LEN);
    assert!(mac1_ok(&gate, &m));
    // Refused by the Noise parser (or answered, for a real initiation to this host such as a
    // corpus could hold): never a panic, and never for want of a mac1.
    let r = accept(host, &m, |_| true);
    assert!(!matches!(r, Err(StreamError::BadMac1)), "a valid mac1 refused");
}
