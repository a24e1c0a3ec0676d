//! The demo's synthetic trace: messages both ways with their owners, scopes and urgencies,
//! and the throwaway keys of the two hosts and their owners.

use super::*;

/// One message of the trace.
#[derive(Debug, Clone)]
pub(super) struct TraceMsg {
    /// Message number; also the first 8 bytes of the payload (little endian).
    pub(super) num: u64,
    pub(super) from_a: bool,
    pub(super) at: Time,
    /// Index of the sending owner on its host.
    pub(super) owner: usize,
    pub(super) to: &'static str,
    pub(super) urgency: Urgency,
    pub(super) scope: Scope,
    pub(super) data: Vec<u8>,
}

impl TraceMsg {
    pub(super) fn sender_name(&self) -> &'static str {
        if self.from_a {
            A_OWNERS[self.owner]
        } else {
            B_OWNERS[self.owner]
        }
    }
}

/// Keys shared by both runs so that they differ only in the piggyback setting. They are derived
/// from the demo seed so that a seed replays a run exactly: which host wins a simultaneous
/// open depends on the order of the static keys. (Demo keys only: `SimRng` is not a CSPRNG.)
pub(super) struct Keys {
    pub(super) host_a: HostKey,
    pub(super) host_b: HostKey,
    pub(super) owner_seeds: Vec<(&'static str, [u8; 32])>,
}

/// Mixed into the seed for the key stream, so that keys and trace draw different numbers.
pub(super) const KEY_STREAM: u64 = 0x6B65_7973_6B65_7973;

impl Keys {
    pub(super) fn derive(seed: u64) -> Result<Self> {
        let mut rng = SimRng::new(seed ^ KEY_STREAM);
        let mut key = || {
            let mut k = [0u8; 32];
            fill(&mut rng, &mut k);
            k
        };
        let host_a = HostKey::from_private(key())
            .map_err(|e| Error::bench_by("cannot make host key A", e))?;
        let host_b = HostKey::from_private(key())
            .map_err(|e| Error::bench_by("cannot make host key B", e))?;
        let owner_seeds = A_OWNERS
            .iter()
            .chain(&B_OWNERS)
            .map(|n| (*n, key()))
            .collect();
        Ok(Keys {
            host_a,
            host_b,
            owner_seeds,
        })
    }
    pub(super) fn owner_key(&self, name: &str) -> Result<OwnerSigningKey> {
        let seed = self
            .owner_seeds
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| s)
            .ok_or_else(|| Error::bench(format!("no key for owner {name}")))?;
        Ok(OwnerSigningKey::from_seed(seed)?)
    }
}

/// Fills `buf` from the generator.
pub(super) fn fill(rng: &mut SimRng, buf: &mut [u8]) {
    for chunk in buf.chunks_mut(8) {
        let r = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
}

/// Builds the trace: each direction independently, then merged by arrival time.
pub(super) fn make_trace(rng: &mut SimRng, per_direction: usize, max_len: usize) -> Vec<TraceMsg> {
    let mut all = Vec::with_capacity(per_direction * 2);
    let mut num = 0u64;
    for from_a in [true, false] {
        let mut t = 0f64;
        let dests = if from_a { B_OWNERS } else { A_OWNERS };
        for _ in 0..per_direction {
            t += -MEAN_GAP_NS * (1.0 - rng.unit()).ln();
            let owner = rng.below(2) as usize;
            let to = dests[rng.below(2) as usize];
            let r = rng.unit();
            let (lo, hi) = if r < 0.4 {
                (32, 128)
            } else if r < 0.7 {
                (256, 512)
            } else if r < 0.9 {
                (512, 1024)
            } else {
                (1024, max_len)
            };
            let (lo, hi) = (lo.min(max_len), hi.min(max_len));
            let len = (lo + rng.below((hi - lo + 1) as u64) as usize).max(8);
            let r = rng.unit();
            let urgency = if r < 0.2 {
                Urgency::Urgent
            } else if r < 0.3 {
                Urgency::Deadline(Duration::from_nanos(2_000_000 + rng.below(48_000_000)))
            } else {
                Urgency::Default
            };
            let scope = if rng.chance(0.5) {
                Scope::AuthOnly
            } else {
                Scope::Encrypt
            };
            let mut data = vec![0u8; len];
            data[..8].copy_from_slice(&num.to_le_bytes());
            fill(rng, &mut data[8..]);
            all.push(TraceMsg {
                num,
                from_a,
                at: Time::from_nanos(t as u64),
                owner,
                to,
                urgency,
                scope,
                data,
            });
            num += 1;
        }
    }
    all.sort_by_key(|m| (m.at, m.num));
    all
}
