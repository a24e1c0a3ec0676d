//! CPU/GPU dispatch: which device seals a batch of a given size, from throughputs measured
//! on this machine, and the in-order release of batches that finish on either device.

use std::collections::BTreeMap;

/// Where a batch is sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Gpu,
}

/// Measured throughput (any unit, the same for both) per batch size in bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dispatch {
    cpu: BTreeMap<usize, f64>,
    gpu: BTreeMap<usize, f64>,
}

impl Dispatch {
    /// From `(batch bytes, throughput)` points; points that are not finite and positive are
    /// ignored (a failed or missing measurement never attracts work).
    pub fn new(cpu: &[(usize, f64)], gpu: &[(usize, f64)]) -> Self {
        let keep = |v: &[(usize, f64)]| {
            v.iter()
                .filter(|(_, t)| t.is_finite() && *t > 0.0)
                .copied()
                .collect()
        };
        Dispatch {
            cpu: keep(cpu),
            gpu: keep(gpu),
        }
    }

    /// The measured point at or below `bytes` (the largest measured batch not larger), else
    /// the smallest measured one: a batch is judged by what was measured for its size class,
    /// never extrapolated upward.
    fn at(m: &BTreeMap<usize, f64>, bytes: usize) -> Option<f64> {
        m.range(..=bytes)
            .next_back()
            .or_else(|| m.iter().next())
            .map(|(_, t)| *t)
    }

    /// The device for a batch of `bytes`: the GPU only where it was measured faster than the
    /// CPU for that size; the CPU when anything is unmeasured.
    pub fn choose(&self, bytes: usize) -> Device {
        match (Self::at(&self.cpu, bytes), Self::at(&self.gpu, bytes)) {
            (Some(c), Some(g)) if g > c => Device::Gpu,
            (None, Some(_)) => Device::Gpu,
            _ => Device::Cpu,
        }
    }

    /// The smallest measured batch size from which the GPU is faster at every measured size
    /// (the crossover), or `None` if it never is.
    pub fn crossover(&self) -> Option<usize> {
        let mut sizes: Vec<usize> = self.cpu.keys().chain(self.gpu.keys()).copied().collect();
        sizes.sort_unstable();
        sizes.dedup();
        let mut cross = None;
        for &s in sizes.iter().rev() {
            if self.choose(s) == Device::Gpu {
                cross = Some(s);
            } else {
                break;
            }
        }
        cross
    }
}

/// Releases items in sequence order whatever order they finish in (per flow; one `Reorder`
/// per flow). Sequence numbers are given at submission, from 0 up.
#[derive(Debug)]
pub struct Reorder<T> {
    next: u64,
    waiting: BTreeMap<u64, T>,
}

impl<T> Default for Reorder<T> {
    fn default() -> Self {
        Reorder {
            next: 0,
            waiting: BTreeMap::new(),
        }
    }
}

impl<T> Reorder<T> {
    /// Files finished item `seq`; returns the items now releasable, in order. A sequence
    /// number already released or already waiting is refused (returned as `Err`).
    pub fn finish(&mut self, seq: u64, item: T) -> Result<Vec<T>, T> {
        if seq < self.next || self.waiting.contains_key(&seq) {
            return Err(item);
        }
        self.waiting.insert(seq, item);
        let mut out = Vec::new();
        while let Some(i) = self.waiting.remove(&self.next) {
            out.push(i);
            self.next += 1;
        }
        Ok(out)
    }

    /// Items finished but held back behind a missing one.
    pub fn held(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn chooses_the_faster_device_per_size() {
        let d = Dispatch::new(
            &[(4096, 10.0), (65536, 10.0), (131072, 10.0)],
            &[(4096, 1.0), (65536, 12.0), (131072, 30.0)],
        );
        assert_eq!(d.choose(4096), Device::Cpu);
        assert_eq!(d.choose(60_000), Device::Cpu, "judged by the 4 KiB point");
        assert_eq!(d.choose(65536), Device::Gpu);
        assert_eq!(d.choose(1 << 20), Device::Gpu);
        assert_eq!(
            d.choose(100),
            Device::Cpu,
            "below every point: the smallest"
        );
        assert_eq!(d.crossover(), Some(65536));
    }

    #[test]
    fn unmeasured_or_failed_gpu_never_gets_work() {
        let d = Dispatch::new(&[(4096, 10.0)], &[]);
        assert_eq!(d.choose(1 << 20), Device::Cpu);
        assert_eq!(d.crossover(), None);
        let d = Dispatch::new(&[(4096, 10.0)], &[(4096, f64::NAN), (8192, 0.0)]);
        assert_eq!(d.choose(8192), Device::Cpu);
        // A GPU faster only at one middle size is not a crossover.
        let d = Dispatch::new(
            &[(1, 5.0), (2, 5.0), (3, 5.0)],
            &[(1, 1.0), (2, 9.0), (3, 1.0)],
        );
        assert_eq!(d.choose(2), Device::Gpu);
        assert_eq!(d.crossover(), None);
    }

    proptest! {
        /// Batches sealed on two devices that finish in any order leave in submission order,
        /// each exactly once.
        #[test]
        fn release_is_in_order_across_devices(order in Just((0u64..64).collect::<Vec<_>>()).prop_shuffle()) {
            let mut r = Reorder::default();
            let mut out = Vec::new();
            for &s in &order {
                let dev = if s % 3 == 0 { Device::Gpu } else { Device::Cpu };
                out.extend(r.finish(s, (s, dev)).unwrap());
            }
            prop_assert_eq!(r.held(), 0);
            let seqs: Vec<u64> = out.iter().map(|x| x.0).collect();
            prop_assert_eq!(seqs, (0u64..64).collect::<Vec<_>>());
        }
    }

    #[test]
    fn duplicate_or_stale_sequence_is_refused() {
        let mut r = Reorder::default();
        assert_eq!(r.finish(1, "b").unwrap(), Vec::<&str>::new());
        assert_eq!(r.finish(1, "b2"), Err("b2"));
        assert_eq!(r.finish(0, "a").unwrap(), vec!["a", "b"]);
        assert_eq!(r.finish(0, "again"), Err("again"));
    }
}
