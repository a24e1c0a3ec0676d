//! Property tests of the packet layer: round trips, tamper detection, batch == single,
//! split == contiguous, legacy opt-in, and the three AEAD backends (aws-lc-rs, ring, OpenSSL) agreeing
//! byte for byte and opening each other's output.

use proptest::prelude::*;
use sealink_crypto::suite::Backend;
use sealink_crypto::{BatchItem, ContiguousItem, CryptoError, PacketKey, Scope, SuiteId};

const LEGACY: [SuiteId; 2] = [SuiteId::LegacyDesCbcHmacMd5, SuiteId::Legacy3DesCbcHmacMd5];
const SCOPES: [Scope; 3] = [Scope::None, Scope::AuthOnly, Scope::Encrypt];

fn modern() -> impl Strategy<Value = SuiteId> {
    prop::sample::select(SuiteId::MODERN.to_vec())
}
fn legacy() -> impl Strategy<Value = SuiteId> {
    prop::sample::select(LEGACY.to_vec())
}
fn any_suite() -> impl Strategy<Value = SuiteId> {
    prop::sample::select(SuiteId::ALL.to_vec())
}
fn backend() -> impl Strategy<Value = Backend> {
    prop::sample::select(Backend::ALL.to_vec())
}
fn scope() -> impl Strategy<Value = Scope> {
    prop::sample::select(SCOPES.to_vec())
}
fn protecting_scope() -> impl Strategy<Value = Scope> {
    prop::sample::select(vec![Scope::AuthOnly, Scope::Encrypt])
}
fn header() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..64)
}
fn data() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..3000)
}
fn key_bytes(suite: SuiteId, seed: u64) -> Vec<u8> {
    // Deterministic key from a proptest-drawn seed (splitmix64).
    let mut x = seed;
    (0..suite.key_len())
        .map(|_| {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}
fn key(suite: SuiteId, seed: u64) -> PacketKey {
    PacketKey::new(suite, &key_bytes(suite, seed), true).unwrap()
}
fn key_on(backend: Backend, suite: SuiteId, seed: u64) -> PacketKey {
    let k = PacketKey::with_backend(backend, suite, &key_bytes(suite, seed), true).unwrap();
    if !suite.is_legacy() {
        assert_eq!(k.backend(), Some(backend));
    }
    k
}

/// Seals with the split form; returns the sealed body (exactly its sealed length).
fn seal(k: &PacketKey, counter: u64, scope: Scope, header: &[u8], pt: &[u8]) -> Vec<u8> {
    let mut body = vec![0u8; pt.len() + k.suite().max_overhead()];
    body[..pt.len()].copy_from_slice(pt);
    let n = k.seal(counter, scope, header, &mut body, pt.len()).unwrap();
    body.truncate(n);
    body
}

/// Seals with the contiguous form; returns the sealed body.
fn seal_contig(k: &PacketKey, counter: u64, scope: Scope, header: &[u8], pt: &[u8]) -> Vec<u8> {
    let mut buf = header.to_vec();
    buf.extend_from_slice(pt);
    buf.resize(header.len() + pt.len() + k.suite().max_overhead(), 0);
    let n = k
        .seal_contiguous(counter, scope, &mut buf, header.len(), pt.len())
        .unwrap();
    buf[header.len()..header.len() + n].to_vec()
}

/// A batch's bodies: each packet's plaintext with room for `overhead` more bytes.
fn batch_bodies(packets: &[(Vec<u8>, Vec<u8>)], overhead: usize) -> Vec<Vec<u8>> {
    packets
        .iter()
        .map(|(_, p)| {
            let mut b = p.clone();
            b.resize(p.len() + overhead, 0);
            b
        })
        .collect()
}

/// Runs `op` (a batch seal or open) on one item per packet: its header, its body in `bodies`,
/// input length `lens[i]`, counter `counter0 + i`; every outcome, which must be a length.
fn run_batch(
    packets: &[(Vec<u8>, Vec<u8>)],
    bodies: &mut [Vec<u8>],
    lens: &[usize],
    counter0: u64,
    op: impl FnOnce(&mut [BatchItem<'_>]),
) -> Vec<usize> {
    let mut items: Vec<BatchItem<'_>> = packets
        .iter()
        .zip(bodies.iter_mut())
        .zip(lens)
        .enumerate()
        .map(|(i, (((h, _), body), n))| BatchItem {
            counter: counter0.wrapping_add(i as u64),
            header: h,
            body,
            len: *n,
            result: Err(CryptoError::AuthFailed),
        })
        .collect();
    op(&mut items);
    items.iter().map(|it| it.result.clone().unwrap()).collect()
}

/// Each packet's plaintext length: a batch seal's input lengths.
fn plain_lens(packets: &[(Vec<u8>, Vec<u8>)]) -> Vec<usize> {
    packets.iter().map(|(_, p)| p.len()).collect()
}

fn open(
    k: &PacketKey,
    counter: u64,
    scope: Scope,
    header: &[u8],
    sealed: &[u8],
) -> Result<Vec<u8>, CryptoError> {
    let mut body = sealed.to_vec();
    let n = k.open(counter, scope, header, &mut body, sealed.len())?;
    body.truncate(n);
    Ok(body)
}

fn open_contig(
    k: &PacketKey,
    counter: u64,
    scope: Scope,
    header: &[u8],
    sealed: &[u8],
) -> Result<Vec<u8>, CryptoError> {
    let mut buf = header.to_vec();
    buf.extend_from_slice(sealed);
    let n = k.open_contiguous(counter, scope, &mut buf, header.len(), sealed.len())?;
    Ok(buf[header.len()..header.len() + n].to_vec())
}

fn expected_sealed_len(suite: SuiteId, scope: Scope, len: usize) -> usize {
    match (scope, suite.is_legacy()) {
        (Scope::None, _) => len,
        (Scope::AuthOnly, _) | (Scope::Encrypt, false) => len + 16,
        (Scope::Encrypt, true) => (len / 8 + 1) * 8 + 16,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn round_trip_all_suites_and_scopes(
        backend in backend(),
        suite in any_suite(), scope in scope(), seed in any::<u64>(), counter in any::<u64>(),
        header in header(), pt in data(),
    ) {
        let k = key_on(backend, suite, seed);
        let sealed = seal(&k, counter, scope, &header, &pt);
        prop_assert_eq!(sealed.len(), expected_sealed_len(suite, scope, pt.len()));
        prop_assert!(sealed.len() <= pt.len() + suite.max_overhead());
        match scope {
            Scope::None => prop_assert_eq!(&sealed, &pt),
            Scope::AuthOnly => prop_assert_eq!(&sealed[..pt.len()], &pt[..]),
            Scope::Encrypt => {
                if pt.len() >= 16 {
                    prop_assert_ne!(&sealed[..pt.len()], &pt[..]);
                }
            }
        }
        // Split and contiguous forms give the same bytes and open each other's output.
        prop_assert_eq!(&seal_contig(&k, counter, scope, &header, &pt), &sealed);
        prop_assert_eq!(open(&k, counter, scope, &header, &sealed), Ok(pt.clone()));
        prop_assert_eq!(open_contig(&k, counter, scope, &header, &sealed), Ok(pt.clone()));
        // Opening with a room-to-spare body works too (len, not body.len(), counts).
        let mut roomy = sealed.clone();
        roomy.extend_from_slice(&[0xa5; 40]);
        prop_assert_eq!(k.open(counter, scope, &header, &mut roomy, sealed.len()), Ok(pt.len()));
        prop_assert_eq!(&roomy[..pt.len()], &pt[..]);
    }

    #[test]
    fn any_single_bit_flip_fails(
        backend in backend(),
        suite in any_suite(), scope in protecting_scope(), seed in any::<u64>(), counter in any::<u64>(),
        header in header(), pt in data(), pos in any::<prop::sample::Index>(), bit in 0u8..8,
    ) {
        let k = key_on(backend, suite, seed);
        let sealed = seal(&k, counter, scope, &header, &pt);
        // Flip one bit anywhere in header || body || tag.
        let mut h = header.clone();
        let mut b = sealed.clone();
        let i = pos.index(h.len() + b.len());
        if i < h.len() { h[i] ^= 1 << bit } else { b[i - h.len()] ^= 1 << bit }
        prop_assert_eq!(open(&k, counter, scope, &h, &b), Err(CryptoError::AuthFailed));
        prop_assert_eq!(open_contig(&k, counter, scope, &h, &b), Err(CryptoError::AuthFailed));
    }

    #[test]
    fn wrong_counter_scope_or_key_fails(
        backend in backend(),
        suite in any_suite(), scope in protecting_scope(), seed in any::<u64>(), counter in any::<u64>(),
        delta in 1u64.., header in header(), pt in data(),
    ) {
        let k = key_on(backend, suite, seed);
        let sealed = seal(&k, counter, scope, &header, &pt);
        let other = counter.wrapping_add(delta);
        prop_assert_eq!(open(&k, other, scope, &header, &sealed), Err(CryptoError::AuthFailed));
        prop_assert_eq!(open_contig(&k, other, scope, &header, &sealed), Err(CryptoError::AuthFailed));
        let k2 = key_on(backend, suite, seed ^ 1);
        prop_assert_eq!(open(&k2, counter, scope, &header, &sealed), Err(CryptoError::AuthFailed));
        // Truncating the sealed body fails (never panics).
        for cut in [1usize, 8, 16, 17, 24, 25] {
            if cut <= sealed.len() {
                prop_assert_eq!(open(&k, counter, scope, &header, &sealed[..sealed.len() - cut]), Err(CryptoError::AuthFailed));
            }
        }
    }

    #[test]
    fn batch_matches_single(
        backend in backend(),
        suite in any_suite(), scope in scope(), seed in any::<u64>(), counter0 in any::<u64>(),
        packets in prop::collection::vec((header(), prop::collection::vec(any::<u8>(), 0..1500)), 0..8),
    ) {
        let k = key_on(backend, suite, seed);
        let ov = suite.max_overhead();
        let singles: Vec<Vec<u8>> = packets
            .iter()
            .enumerate()
            .map(|(i, (h, p))| seal(&k, counter0.wrapping_add(i as u64), scope, h, p))
            .collect();

        // Split batch.
        let mut bodies = batch_bodies(&packets, ov);
        let lens = run_batch(&packets, &mut bodies, &plain_lens(&packets), counter0, |items| k.seal_batch(scope, items));
        for ((body, n), single) in bodies.iter().zip(&lens).zip(&singles) {
            prop_assert_eq!(&body[..*n], &single[..]);
        }
        let out = run_batch(&packets, &mut bodies, &lens, counter0, |items| k.open_batch(scope, items));
        for ((body, n), (_, p)) in bodies.iter().zip(&out).zip(&packets) {
            prop_assert_eq!(&body[..*n], &p[..]);
        }

        // Contiguous batch.
        let mut bufs: Vec<Vec<u8>> = packets.iter().map(|(h, p)| { let mut b = h.clone(); b.extend_from_slice(p); b.resize(h.len() + p.len() + ov, 0); b }).collect();
        let mut items: Vec<ContiguousItem<'_>> = packets
            .iter()
            .zip(bufs.iter_mut())
            .enumerate()
            .map(|(i, ((h, p), buf))| ContiguousItem { counter: counter0.wrapping_add(i as u64), buf, header_len: h.len(), len: p.len(), result: Err(CryptoError::AuthFailed) })
            .collect();
        k.seal_batch_contiguous(scope, &mut items);
        let lens: Vec<usize> = items.iter().map(|it| it.result.clone().unwrap()).collect();
        drop(items);
        for (((buf, n), single), (h, _)) in bufs.iter().zip(&lens).zip(&singles).zip(&packets) {
            prop_assert_eq!(&buf[h.len()..h.len() + n], &single[..]);
        }
        let mut items: Vec<ContiguousItem<'_>> = packets
            .iter()
            .zip(bufs.iter_mut())
            .zip(&lens)
            .enumerate()
            .map(|(i, (((h, _), buf), n))| ContiguousItem { counter: counter0.wrapping_add(i as u64), buf, header_len: h.len(), len: *n, result: Err(CryptoError::AuthFailed) })
            .collect();
        k.open_batch_contiguous(scope, &mut items);
        let out: Vec<usize> = items.iter().map(|it| it.result.clone().unwrap()).collect();
        drop(items);
        for (((buf, n), (h, p)), _) in bufs.iter().zip(&out).zip(&packets).zip(0..) {
            prop_assert_eq!(&buf[h.len()..h.len() + n], &p[..]);
        }
    }

    #[test]
    fn modern_suites_need_no_opt_in(suite in modern(), seed in any::<u64>()) {
        prop_assert!(PacketKey::new(suite, &key_bytes(suite, seed), false).is_ok());
    }

    #[test]
    fn legacy_refused_without_opt_in(suite in legacy(), seed in any::<u64>()) {
        let kb = key_bytes(suite, seed);
        prop_assert_eq!(PacketKey::new(suite, &kb, false).unwrap_err(), CryptoError::LegacyRefused(suite.name()));
        prop_assert!(PacketKey::new(suite, &kb, true).is_ok());
    }

    #[test]
    fn bad_key_length_rejected(suite in any_suite(), len in 0usize..64) {
        prop_assume!(len != suite.key_len());
        let err = PacketKey::new(suite, &vec![0u8; len], true).unwrap_err();
        prop_assert_eq!(err, CryptoError::BadKeyLength { suite: suite.name(), expected: suite.key_len(), got: len });
    }

    #[test]
    fn short_buffers_are_errors_not_panics(
        backend in backend(),
        suite in any_suite(), scope in protecting_scope(), seed in any::<u64>(), pt in data(), short in 1usize..25,
        header in header(),
    ) {
        let k = key_on(backend, suite, seed);
        let need = expected_sealed_len(suite, scope, pt.len());
        let room = need - short.min(need - pt.len());
        let mut body = pt.clone();
        body.resize(room, 0);
        let r = k.seal(0, scope, &header, &mut body, pt.len());
        prop_assert!(matches!(r, Err(CryptoError::BufferTooSmall { .. })), "{:?}", r);
        let mut buf = header.clone();
        buf.extend_from_slice(&pt);
        buf.resize(header.len() + room, 0);
        let r = k.seal_contiguous(0, scope, &mut buf, header.len(), pt.len());
        prop_assert!(matches!(r, Err(CryptoError::BufferTooSmall { .. })), "{:?}", r);
        // len beyond the buffer is an error as well.
        let r = k.seal(0, scope, &header, &mut body, room + 1);
        prop_assert!(matches!(r, Err(CryptoError::BufferTooSmall { .. })), "{:?}", r);
        let r = k.open(0, scope, &header, &mut body, room + 1);
        prop_assert!(matches!(r, Err(CryptoError::BufferTooSmall { .. })), "{:?}", r);
        let r = k.open_contiguous(0, scope, &mut buf, header.len() + room + 1, 0);
        prop_assert!(matches!(r, Err(CryptoError::BufferTooSmall { .. })), "{:?}", r);
    }

    #[test]
    fn random_garbage_never_opens(
        backend in backend(),
        suite in any_suite(), scope in protecting_scope(), seed in any::<u64>(), counter in any::<u64>(),
        header in header(), garbage in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let k = key_on(backend, suite, seed);
        prop_assert_eq!(open(&k, counter, scope, &header, &garbage), Err(CryptoError::AuthFailed));
        prop_assert_eq!(open_contig(&k, counter, scope, &header, &garbage), Err(CryptoError::AuthFailed));
    }
}

/// Bodies for the backend comparison: mostly 0..2000 bytes, now and then above 16 KiB (the
/// libraries' wide AES-GCM paths and the split form's per-thread AuthOnly scratch buffer).
fn cross_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        12 => prop::collection::vec(any::<u8>(), 0..2000),
        1 => prop::collection::vec(any::<u8>(), 16 * 1024 + 1..20 * 1024),
    ]
}

/// The same key material on each backend: aws-lc-rs first, then ring and OpenSSL.
fn all_backends(suite: SuiteId, seed: u64) -> Vec<PacketKey> {
    Backend::ALL
        .into_iter()
        .map(|b| key_on(b, suite, seed))
        .collect()
}

/// aws-lc-rs, ring and OpenSSL give byte-identical sealed bodies in the split and contiguous
/// forms, and each opens the others' output (and refuses it tampered).
fn check_backends_agree(
    suite: SuiteId,
    scope: Scope,
    seed: u64,
    counter: u64,
    header: &[u8],
    pt: &[u8],
) -> Result<(), TestCaseError> {
    let keys = all_backends(suite, seed);
    let sealed = seal(&keys[0], counter, scope, header, pt);
    prop_assert_eq!(sealed.len(), expected_sealed_len(suite, scope, pt.len()));
    for k in &keys {
        prop_assert!(
            seal(k, counter, scope, header, pt) == sealed,
            "{suite} {scope:?} split on {:?} differs from aws-lc-rs ({} B)",
            k.backend(),
            pt.len()
        );
        prop_assert!(
            seal_contig(k, counter, scope, header, pt) == sealed,
            "{suite} {scope:?} contiguous on {:?} differs ({} B)",
            k.backend(),
            pt.len()
        );
    }
    // Each opens what the others sealed (both forms); same sealed bytes, so this is also "each
    // opens its own".
    for k in &keys {
        prop_assert!(open(k, counter, scope, header, &sealed).as_deref() == Ok(pt));
        prop_assert!(open_contig(k, counter, scope, header, &sealed).as_deref() == Ok(pt));
    }
    if scope != Scope::None {
        let mut bad = sealed.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x80;
        for k in &keys {
            prop_assert_eq!(
                open(k, counter, scope, header, &bad),
                Err(CryptoError::AuthFailed)
            );
            prop_assert_eq!(
                open_contig(k, counter.wrapping_add(1), scope, header, &sealed),
                Err(CryptoError::AuthFailed)
            );
        }
        // A failed open leaves no state behind: the same key opens the good packet next.
        for k in &keys {
            prop_assert!(open(k, counter, scope, header, &sealed).as_deref() == Ok(pt));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn backends_agree_byte_for_byte(
        suite in modern(), scope in scope(), seed in any::<u64>(), counter in any::<u64>(),
        header in header(), pt in cross_body(),
    ) {
        check_backends_agree(suite, scope, seed, counter, &header, &pt)?;
    }

    #[test]
    fn backends_agree_in_batches(
        suite in modern(), scope in protecting_scope(), seed in any::<u64>(), counter0 in any::<u64>(),
        packets in prop::collection::vec((header(), prop::collection::vec(any::<u8>(), 0..1500)), 0..6),
    ) {
        let keys = all_backends(suite, seed);
        let (aws, others) = keys.split_first().expect("three backends");
        for sealer in others {
        // Seal the batch on ring, then on OpenSSL; every packet must equal aws-lc-rs's single
        // seal, and open on aws-lc-rs in a batch.
        let mut bodies = batch_bodies(&packets, 16);
        let lens = run_batch(&packets, &mut bodies, &plain_lens(&packets), counter0, |items| sealer.seal_batch(scope, items));
        for (i, ((body, n), (h, p))) in bodies.iter().zip(&lens).zip(&packets).enumerate() {
            prop_assert_eq!(&body[..*n], &seal(aws, counter0.wrapping_add(i as u64), scope, h, p)[..]);
        }
        let out = run_batch(&packets, &mut bodies, &lens, counter0, |items| aws.open_batch(scope, items));
        for ((body, n), (_, p)) in bodies.iter().zip(&out).zip(&packets) {
            prop_assert_eq!(&body[..*n], &p[..]);
        }
        }
    }
}

/// Every modern suite and scope at sizes around the libraries' block and stride boundaries and
/// above 16 KiB, deterministically (the proptest draws large bodies only now and then).
#[test]
fn backends_agree_at_boundary_and_large_sizes() {
    let sizes = [
        0usize,
        1,
        15,
        16,
        17,
        63,
        64,
        65,
        95,
        96,
        127,
        128,
        129,
        255,
        256,
        257,
        511,
        512,
        1400,
        2032,
        2047,
        2048,
        2049,
        4096,
        16 * 1024,
        16 * 1024 + 1,
        16 * 1024 + 15,
        65_536 + 7,
    ];
    for suite in SuiteId::MODERN {
        for scope in SCOPES {
            for (i, &size) in sizes.iter().enumerate() {
                let pt: Vec<u8> = (0..size).map(|j| (j * 31 + i) as u8).collect();
                let header: Vec<u8> = (0..(i * 5) % 64).map(|j| j as u8 ^ 0xa5).collect();
                let seed = 0x5ea1_0000 + i as u64;
                check_backends_agree(suite, scope, seed, u64::MAX - i as u64, &header, &pt)
                    .unwrap_or_else(|e| panic!("{suite} {scope:?} {size} B: {e}"));
            }
        }
    }
}

#[test]
fn suite_names_and_ids() {
    let names = [
        "aes128-gcm",
        "aes256-gcm",
        "chacha20-poly1305",
        "legacy-des-cbc-hmac-md5",
        "legacy-3des-cbc-hmac-md5",
    ];
    for (suite, name) in SuiteId::ALL.into_iter().zip(names) {
        assert_eq!(suite.name(), name);
        assert_eq!(SuiteId::from_name(name), Ok(suite));
        assert_eq!(SuiteId::from_name(&name.to_ascii_uppercase()), Ok(suite));
        assert_eq!(SuiteId::from_u8(suite as u8), Some(suite));
        assert_eq!(suite.to_string(), name);
        assert_eq!(name.parse::<SuiteId>(), Ok(suite));
    }
    assert_eq!(
        SuiteId::from_name("aes-gcm"),
        Err(CryptoError::UnknownSuite("aes-gcm".into()))
    );
    assert_eq!(SuiteId::from_u8(0), None);
    assert_eq!(SuiteId::from_u8(4), None);
    let lens = [16, 32, 32, 24, 40];
    let overheads = [16, 16, 16, 24, 24];
    for ((suite, len), ov) in SuiteId::ALL.into_iter().zip(lens).zip(overheads) {
        assert_eq!(suite.key_len(), len, "{suite}");
        assert_eq!(suite.max_overhead(), ov, "{suite}");
        assert_eq!(suite.is_legacy(), !SuiteId::MODERN.contains(&suite));
    }
}

#[test]
fn scope_none_is_identity() {
    let k = key(SuiteId::Aes128Gcm, 1);
    let mut body = *b"plain";
    assert_eq!(k.seal(3, Scope::None, b"h", &mut body, 5), Ok(5));
    assert_eq!(&body, b"plain");
    assert_eq!(k.open(3, Scope::None, b"h", &mut body, 5), Ok(5));
    assert_eq!(&body, b"plain");
}

#[test]
fn packet_key_shared_across_threads() {
    let k = std::sync::Arc::new(key(SuiteId::ChaCha20Poly1305, 7));
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let k = k.clone();
            std::thread::spawn(move || {
                for i in 0..100u64 {
                    let pt = vec![t as u8; (i * 37 % 3000) as usize];
                    let s = seal(&k, t << 32 | i, Scope::AuthOnly, b"hdr", &pt);
                    assert_eq!(open(&k, t << 32 | i, Scope::AuthOnly, b"hdr", &s), Ok(pt));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// OpenSSL keeps one context per thread, direction and suite and swaps keys into it: any
    /// interleaving of keys and suites, on one thread or on several sharing the keys, gives
    /// aws-lc-rs's bytes, and every packet opens under its own key only.
    #[test]
    fn openssl_contexts_follow_keys_and_threads(
        ops in prop::collection::vec(
            (0u64..3, modern(), any::<u64>(), prop::collection::vec(any::<u8>(), 0..300)),
            1..40,
        ),
    ) {
        let pair = |seed: u64, suite: SuiteId| {
            (key_on(Backend::OpenSsl, suite, seed), key_on(Backend::AwsLc, suite, seed))
        };
        let keys: Vec<(SuiteId, u64, PacketKey, PacketKey)> = SuiteId::MODERN
            .into_iter()
            .flat_map(|suite| (0..3).map(move |seed| (suite, seed)))
            .map(|(suite, seed)| { let (o, a) = pair(seed, suite); (suite, seed, o, a) })
            .collect();
        let find = |suite: SuiteId, seed: u64| {
            keys.iter().find(|k| k.0 == suite && k.1 == seed).expect("every key made")
        };
        let run = || -> Result<(), TestCaseError> {
            for (seed, suite, counter, pt) in &ops {
                let (_, _, ossl, aws) = find(*suite, *seed);
                let sealed = seal(ossl, *counter, Scope::Encrypt, b"hdr", pt);
                prop_assert!(sealed == seal(aws, *counter, Scope::Encrypt, b"hdr", pt));
                prop_assert!(open(ossl, *counter, Scope::Encrypt, b"hdr", &sealed).as_deref() == Ok(&pt[..]));
                // Another key of the same suite refuses it (and leaves the context usable).
                let (_, _, other, _) = find(*suite, (seed + 1) % 3);
                prop_assert_eq!(open(other, *counter, Scope::Encrypt, b"hdr", &sealed), Err(CryptoError::AuthFailed));
            }
            Ok(())
        };
        run()?;
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..3).map(|_| s.spawn(run)).collect();
            handles.into_iter().try_for_each(|h| h.join().expect("no panic"))
        })?;
    }
}
