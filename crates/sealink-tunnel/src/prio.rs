//! Scheduling priority of the threads off the data path.
//!
//! The I/O threads carry the established peers' packets; the handshake threads, the timer,
//! the control thread (`show`, reload: parsing a hub's config of thousands of peers takes a
//! core for a fraction of a second), the resolver and the UAPI server can wait. On a machine
//! with few cores, work of theirs that became runnable at the same time as an I/O thread's
//! used to share the core with it equally, and established peers' packets waited behind a
//! storm's public-key work. A higher nice value (a lower weight for the scheduler) gives the
//! data path the larger share of a core; idle cores still run the off-path work at full speed.
//! A weight alone does not make a woken I/O thread preempt a niced one in the middle of its
//! slice, so the data-path threads also ask for short slices ([`data_path`]).

/// Nice increment of the off-path threads: a weight of about a tenth of a nice-0 thread's.
pub(crate) const OFF_PATH_NICE: i32 = 10;

/// Lowers the calling thread's scheduling priority by [`OFF_PATH_NICE`] (never above 19, the
/// lowest). On Linux `setpriority(PRIO_PROCESS, tid)` applies to that one thread; threads it
/// starts later inherit the value. A failure only costs the data path its precedence.
pub(crate) fn off_path(what: &str) {
    let me = rustix::thread::gettid();
    let r = rustix::process::getpriority_process(Some(me)).and_then(|now| {
        rustix::process::setpriority_process(Some(me), (now + OFF_PATH_NICE).min(19))
    });
    if let Err(e) = r {
        tracing::debug!(thread = what, error = %e, "cannot lower the thread's priority");
    }
}

/// Asks for short scheduler slices on the calling data-path thread
/// ([`sealink_udp::sched::prefer_short_slice`]): woken by a packet, it then takes its core
/// back from an off-path thread at once instead of after that thread's slice.
pub(crate) fn data_path(what: &str) {
    // Test builds only (feature `test-timers`, as the lab's benchmarks build it): the A/B of
    // RESULTS §54 turns the request off with `SEALINK_TEST_NO_SLICE`.
    #[cfg(feature = "test-timers")]
    if std::env::var_os("SEALINK_TEST_NO_SLICE").is_some() {
        return;
    }
    if let Err(e) = sealink_udp::sched::prefer_short_slice(sealink_udp::sched::DATA_PATH_SLICE) {
        tracing::debug!(thread = what, error = %e, "cannot ask for short slices");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_calling_thread_is_lowered() {
        let me = rustix::thread::gettid();
        let before = rustix::process::getpriority_process(Some(me)).unwrap();
        let (theirs, theirs_before) = std::thread::spawn(|| {
            let t = rustix::thread::gettid();
            let b = rustix::process::getpriority_process(Some(t)).unwrap();
            super::off_path("test");
            (rustix::process::getpriority_process(Some(t)).unwrap(), b)
        })
        .join()
        .unwrap();
        assert_eq!(theirs, (theirs_before + super::OFF_PATH_NICE).min(19));
        assert_eq!(
            rustix::process::getpriority_process(Some(me)).unwrap(),
            before
        );
    }
}
