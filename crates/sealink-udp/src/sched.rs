//! How the scheduler treats a data-path thread beside busy off-path work.
//!
//! Linux's EEVDF scheduler may let a running thread go on for up to its slice (1.4 ms by
//! default on the two-vCPU VM of RESULTS §54, "run to parity") before a thread that just woke gets the CPU,
//! however much higher the woken one's weight: a niced handshake thread in the middle of its
//! public-key work can hold a packet's thread back that long. A thread that asks for a shorter slice
//! (`sched_attr.sched_runtime`, Linux 6.12 and later) preempts a running thread with a longer
//! one when it wakes, so the data path gets its core back within a short slice.

use std::time::Duration;

/// The slice a data-path thread asks for: a packet's work is a few microseconds, a batch a few
/// tens, so this only bounds how long a woken data-path thread waits behind other work.
pub const DATA_PATH_SLICE: Duration = Duration::from_micros(100);

/// `struct sched_attr` (include/uapi/linux/sched/types.h), its first version's 48 bytes plus
/// the utilisation clamps: 56 bytes.
#[repr(C)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

/// Asks that the calling thread (staying `SCHED_OTHER`, at its nice value) run in slices of
/// `slice` (the kernel keeps it between 0.1 and 100 ms). Older kernels ignore the request or
/// refuse it; either way the thread runs as before, so callers may ignore the error.
pub fn prefer_short_slice(slice: Duration) -> std::io::Result<()> {
    let me = rustix::thread::gettid();
    let nice = rustix::process::getpriority_process(Some(me))?;
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: 0, // SCHED_OTHER
        sched_flags: 0,
        sched_nice: nice,
        sched_priority: 0,
        sched_runtime: slice.as_nanos().min(u128::from(u64::MAX)) as u64,
        sched_deadline: 0,
        sched_period: 0,
        sched_util_min: 0,
        sched_util_max: 0,
    };
    #[allow(unsafe_code)]
    // SAFETY: `sched_setattr(0, attr, 0)` reads `attr.size` bytes from a live, initialised
    // `repr(C)` struct laid out as the kernel's `struct sched_attr`, and writes nothing.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_struct_is_the_kernels_size() {
        assert_eq!(std::mem::size_of::<super::SchedAttr>(), 56);
    }

    #[test]
    fn a_thread_may_ask_for_a_short_slice() {
        // Only the calling thread is changed; a kernel before 6.12 may refuse it (EINVAL, E2BIG).
        let (theirs, mine_before) = (
            std::thread::spawn(|| {
                let r = super::prefer_short_slice(super::DATA_PATH_SLICE);
                (r.map_err(|e| e.raw_os_error()), slice_ns())
            })
            .join()
            .unwrap(),
            slice_ns(),
        );
        match theirs {
            (Ok(()), Some(ns)) => assert_eq!(ns, super::DATA_PATH_SLICE.as_nanos() as u64),
            (Ok(()), None) => {} // a kernel that does not show it
            (Err(e), _) => assert!(matches!(e, Some(libc::EINVAL | libc::E2BIG)), "{e:?}"),
        }
        assert_eq!(
            slice_ns(),
            mine_before,
            "the test's own thread is not changed"
        );
    }

    /// The calling thread's slice as /proc shows it (`se.slice`, in ns), where it does.
    fn slice_ns() -> Option<u64> {
        let s = std::fs::read_to_string("/proc/thread-self/sched").ok()?;
        let line = s.lines().find(|l| l.starts_with("se.slice"))?;
        line.rsplit(':').next()?.trim().parse().ok()
    }
}
