//! The GPU against aws-lc-rs: a known-answer batch and random batches. Both skip, saying why,
//! when there is no device (or the crate was built without the `cuda` feature).

use aws_lc_rs::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use proptest::prelude::*;
use sealink_gpu::{Availability, GpuSealer, Strategy};

fn device(test: &str) -> Option<GpuSealer> {
    match sealink_gpu::open().expect("a device that exists must open") {
        Availability::Ready(s) => Some(*s),
        Availability::Absent(why) => {
            eprintln!("SKIP {test}: no GPU ({why})");
            None
        }
    }
}

fn aws_seal(key: &[u8; 16], nonce: [u8; 12], aad: &[u8], data: &mut [u8]) -> [u8; 16] {
    let k = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, key).unwrap());
    let t = k
        .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), data)
        .unwrap();
    t.as_ref().try_into().unwrap()
}

/// Seals `items` on the GPU (one batch, or a run in batches of `per` packets) and with
/// aws-lc-rs; asserts every byte and tag agree.
fn compare(
    gpu: &mut GpuSealer,
    key: &[u8; 16],
    items: &[([u8; 12], Vec<u8>, Vec<u8>)],
    per: Option<usize>,
) {
    let nonces: Vec<[u8; 12]> = items.iter().map(|i| i.0).collect();
    let aads: Vec<&[u8]> = items.iter().map(|i| &i.1[..]).collect();
    let mut ours: Vec<Vec<u8>> = items.iter().map(|i| i.2.clone()).collect();
    let mut refs: Vec<&mut [u8]> = ours.iter_mut().map(|v| &mut v[..]).collect();
    let tags = match per {
        None => gpu.seal_batch(key, &nonces, &aads, &mut refs).unwrap(),
        Some(p) => gpu.seal_batches(key, &nonces, &aads, &mut refs, p).unwrap(),
    };
    assert_eq!(tags.len(), items.len());
    for (k, it) in items.iter().enumerate() {
        let mut want = it.2.clone();
        let t = aws_seal(key, it.0, &it.1, &mut want);
        assert_eq!(
            ours[k],
            want,
            "ciphertext of packet {k} ({} bytes)",
            want.len()
        );
        assert_eq!(
            tags[k],
            t,
            "tag of packet {k} (GHASH on the {})",
            if gpu.gpu_ghash() { "GPU" } else { "CPU" }
        );
    }
}

/// [`compare`] with every strategy (paper 004's Figure 12), GHASH on the GPU and on the CPU,
/// as one batch and as runs of small batches (several in flight over the streams where the
/// strategy has them).
fn compare_all(gpu: &mut GpuSealer, key: &[u8; 16], items: &[([u8; 12], Vec<u8>, Vec<u8>)]) {
    for strategy in Strategy::ALL {
        gpu.set_strategy(strategy);
        for on_gpu in [true, false] {
            gpu.set_gpu_ghash(on_gpu);
            for per in [None, Some(1), Some(3), Some(7)] {
                compare(gpu, key, items, per);
            }
        }
    }
    gpu.set_gpu_ghash(true);
    gpu.set_strategy(Strategy::default());
}

/// The kernel source compiles with NVRTC for the Hopper chips the device machines have, and
/// has its five entry points: needs only the NVRTC library, no GPU or driver.
#[test]
fn kernels_compile_with_nvrtc() {
    let Some(ptx) = sealink_gpu::compile_kernels("compute_90").expect("the kernels compile") else {
        eprintln!("SKIP kernels_compile_with_nvrtc: no NVRTC library (or no `cuda` feature)");
        return;
    };
    for entry in [
        "aes128_setup",
        "ghash_powers",
        "gcm_seal",
        "gcm_ctr_spread",
        "gcm_ghash",
    ] {
        assert!(
            ptx.contains(&format!(".entry {entry}")),
            "no entry point {entry} in the PTX"
        );
    }
    eprintln!(
        "PTX: {} bytes, {} lines declaring local memory",
        ptx.len(),
        ptx.lines().filter(|l| l.contains(".local")).count()
    );
}

#[test]
fn gpu_known_answer_against_aws_lc() {
    let Some(mut gpu) = device("gpu_known_answer_against_aws_lc") else {
        return;
    };
    eprintln!("device: {}", gpu.name());
    let key = [0x2Bu8; 16];
    // Sizes around block, thread-count and stream-split boundaries, 1400-byte packets.
    let sizes = [0usize, 1, 15, 16, 17, 1400, 2047, 2048, 2049, 4096, 65_535];
    let items: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut nonce = [0u8; 12];
            nonce[4..].copy_from_slice(&(i as u64).to_le_bytes());
            // AADs of 0 to 100 bytes: empty, partial and whole GHASH blocks.
            let aad = vec![i as u8; [0, 1, 15, 16, 17, 100][i % 6]];
            let data: Vec<u8> = (0..n).map(|b| (b * 7 + i) as u8).collect();
            (nonce, aad, data)
        })
        .collect();
    compare_all(&mut gpu, &key, &items);
    // A second key on the same device, and a batch of 1400-byte packets (the bench's shape).
    let items: Vec<_> = (0..300u32)
        .map(|i| {
            let mut nonce = [0u8; 12];
            nonce[..4].copy_from_slice(&i.to_be_bytes());
            (nonce, vec![], vec![i as u8; 1400])
        })
        .collect();
    compare_all(&mut gpu, &[0x7Eu8; 16], &items);
}

/// The largest packet and AAD the layout accepts: the GHASH uses every power of H the
/// device holds.
#[test]
fn gpu_largest_packet_and_aad_against_aws_lc() {
    let Some(mut gpu) = device("gpu_largest_packet_and_aad_against_aws_lc") else {
        return;
    };
    let big = (
        [9u8; 12],
        (0..sealink_gpu::layout::MAX_AAD).map(|b| b as u8).collect(),
        (0..sealink_gpu::layout::MAX_PACKET)
            .map(|b| (b / 3) as u8)
            .collect(),
    );
    let small = ([1u8; 12], vec![1u8; 5], vec![2u8; 33]);
    // Both kernels: the naive one spreads the 1 MiB packet over 2049 blocks.
    for strategy in [Strategy::Naive, Strategy::Streams] {
        gpu.set_strategy(strategy);
        gpu.set_gpu_ghash(true);
        compare(&mut gpu, &[0x11u8; 16], &[big.clone(), small.clone()], None);
        gpu.set_gpu_ghash(false);
        compare(&mut gpu, &[0x11u8; 16], &[small.clone(), big.clone()], None);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    #[test]
    fn gpu_random_batches_match_aws_lc(
        key in any::<[u8; 16]>(),
        items in proptest::collection::vec(
            (any::<[u8; 12]>(), proptest::collection::vec(any::<u8>(), 0..32),
             proptest::collection::vec(any::<u8>(), 0..5000)), 1..40),
        on_gpu in any::<bool>(),
        per in proptest::option::of(1usize..12),
        strategy in proptest::sample::select(Strategy::ALL.to_vec()),
    ) {
        let Some(mut gpu) = device("gpu_random_batches_match_aws_lc") else {
            return Ok(());
        };
        gpu.set_gpu_ghash(on_gpu);
        gpu.set_strategy(strategy);
        compare(&mut gpu, &key, &items, per);
    }
}
