//! Where a loopback bench's two hosts run on this machine's CPUs.
//!
//! Both hosts of a loopback bench share one machine. Left to the scheduler (`shared`), their
//! threads move between the CPUs, and a host's application and its I/O thread often run on
//! different cores, so every message the application writes is pulled across to the other
//! core's cache. `split` gives each host a CPU of its own, as two one-core machines would have:
//! the sending host's threads on the first CPU, the receiving host's on the second. Every system
//! measured runs under the same placement in the same run (sealink's application thread and
//! node I/O thread; quinn's endpoint and tasks on one single-threaded runtime per host).

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// The scheduler places every thread of both hosts on any CPU.
    Shared,
    /// Each host on a CPU of its own.
    Split,
}

/// The CPUs of a split placement: the sending host's, then the receiving host's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cpus {
    pub sender: usize,
    pub receiver: usize,
}

impl Placement {
    /// Both placements where there are two CPUs, else `shared` alone.
    pub fn defaults() -> Vec<Placement> {
        if sealink_engine::cpus().len() >= 2 {
            vec![Placement::Shared, Placement::Split]
        } else {
            vec![Placement::Shared]
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Placement::Shared => "shared",
            Placement::Split => "split",
        }
    }

    /// The CPUs each host is pinned to (`None` for `shared`): the first two this process may use.
    pub fn cpus(self) -> Result<Option<Cpus>> {
        match self {
            Placement::Shared => Ok(None),
            Placement::Split => match sealink_engine::cpus()[..] {
                [sender, receiver, ..] => Ok(Some(Cpus { sender, receiver })),
                ref allowed => Err(Error::Usage(format!(
                    "--placement split needs two CPUs; this process may use {allowed:?}"
                ))),
            },
        }
    }
}

pub fn parse_placement(s: &str) -> std::result::Result<Placement, String> {
    match s.trim() {
        "shared" => Ok(Placement::Shared),
        "split" => Ok(Placement::Split),
        other => Err(format!("{other:?} is not a placement: shared or split")),
    }
}

/// Runs `f` on a thread of its own pinned to `cpu` (`None`: not pinned) and returns its result,
/// so that pinning never outlives the work it was for.
pub fn on_cpu<T: Send>(cpu: Option<usize>, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            if let Some(c) = cpu {
                sealink_engine::pin_current_thread(c)
                    .map_err(|e| Error::bench_by("placement", e))?;
            }
            f()
        })
        .join()
        .map_err(|_| Error::bench("a pinned bench thread panicked"))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed_here() -> String {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_owned()
    }

    #[test]
    fn on_cpu_pins_only_its_own_thread() {
        let before = allowed_here();
        let cpu = *sealink_engine::cpus().last().unwrap();
        let inside = on_cpu(Some(cpu), || Ok(allowed_here())).unwrap();
        assert_eq!(inside, cpu.to_string());
        assert_eq!(allowed_here(), before, "the caller is not pinned");
        assert!(on_cpu(Some(1 << 20), || Ok(())).is_err());
    }

    #[test]
    fn placements_parse_and_split_names_two_cpus() {
        assert_eq!(parse_placement("split"), Ok(Placement::Split));
        assert_eq!(parse_placement(" shared"), Ok(Placement::Shared));
        assert!(parse_placement("both").is_err());
        assert_eq!(Placement::Shared.cpus().unwrap(), None);
        match (sealink_engine::cpus().len(), Placement::Split.cpus()) {
            (1, r) => assert!(r.is_err()),
            (_, r) => {
                let c = r.unwrap().unwrap();
                assert_ne!(c.sender, c.receiver);
            }
        }
    }
}
