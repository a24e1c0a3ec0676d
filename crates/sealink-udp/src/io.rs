//! Batched UDP I/O: UDP GSO on send and GRO + `recvmmsg` on receive through quinn-udp, large socket
//! buffers, optional `SO_REUSEPORT`, and a blocking interface (with an optional read timeout) that
//! several threads may share through `&self`.
//!
//! quinn-udp wants a non-blocking socket (`recvmmsg` on a blocking socket would wait for the whole
//! batch), so the socket stays non-blocking and the blocking behaviour is built with `poll(2)`. An
//! eventfd polled next to the socket lets another thread interrupt a blocked [`UdpIo::recv`]
//! ([`UdpIo::wake`]), which drivers use to hand new work to their I/O thread.

use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV6};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quinn_udp::{RecvMeta, Transmit, UdpSockRef, UdpSocketState};
use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec};
use socket2::{Domain, Protocol, Socket, Type};

/// Largest UDP payload one `sendmsg` may carry (IPv4: 65535 - 20 - 8); GSO batches stay below it.
const MAX_SEND: usize = 65_507;
/// Size of one receive buffer: room for a full GRO super-buffer.
const RECV_BUF: usize = 64 * 1024;
/// `read_timeout` value meaning "no timeout".
const NO_TIMEOUT: u64 = u64::MAX;

/// Socket options for [`UdpIo::bind`].
#[derive(Debug, Clone)]
pub struct UdpOptions {
    /// Requested `SO_SNDBUF` in bytes (forced past `wmem_max` when the process may, else capped).
    pub send_buffer: usize,
    /// Requested `SO_RCVBUF` in bytes (forced past `rmem_max` when the process may, else capped).
    pub recv_buffer: usize,
    /// Set `SO_REUSEPORT` so several sockets (one per worker) can share the port.
    pub reuse_port: bool,
    /// A receive that finds nothing keeps asking, without sleeping, for up to this long before
    /// it sleeps (zero: sleeps at once). Like Linux's `SO_BUSY_POLL`, for hosts with a core to
    /// spare: a datagram that arrives meanwhile is taken without a wake-up, which the sending
    /// CPU pays for (an inter-processor interrupt, and a VM exit on a virtual machine).
    pub busy_poll: Duration,
    /// `SO_MARK` (needs CAP_NET_ADMIN): a full tunnel marks its own datagrams so that policy
    /// routing sends them around the tunnel, not into it.
    pub mark: Option<u32>,
}

impl Default for UdpOptions {
    fn default() -> Self {
        Self {
            send_buffer: 8 << 20,
            recv_buffer: 8 << 20,
            reuse_port: false,
            busy_poll: Duration::ZERO,
            mark: None,
        }
    }
}

/// A UDP socket with batched, offloaded I/O. `Send + Sync`: share it by reference or `Arc`.
#[derive(Debug)]
pub struct UdpIo {
    socket: Socket,
    state: UdpSocketState,
    /// Written by [`UdpIo::wake`]; polled by [`UdpIo::recv`] next to the socket.
    wake: OwnedFd,
    /// Read timeout in nanoseconds, `NO_TIMEOUT` for none.
    read_timeout: AtomicU64,
    /// The socket is IPv6 (possibly dual-stack): IPv4 destinations are sent as v4-mapped addresses.
    is_v6: bool,
    /// [`UdpOptions::busy_poll`].
    busy_poll: Duration,
}

/// Receive buffers for [`UdpIo::recv`]: `batch` buffers of 64 KiB each, reused across calls.
#[derive(Debug)]
pub struct RecvBuffers {
    bufs: Vec<Box<[u8]>>,
    meta: Vec<RecvMeta>,
}

/// Where a received datagram lies: its source, the buffer of [`RecvBuffers`] and the range in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub source: SocketAddr,
    pub buf: usize,
    pub range: std::ops::Range<usize>,
}

impl RecvBuffers {
    /// Buffer `i` (see [`Segment::buf`]).
    pub fn buf_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.bufs[i]
    }
    /// All buffers, for callers that split them into disjoint regions.
    pub fn bufs_mut(&mut self) -> &mut [Box<[u8]>] {
        &mut self.bufs
    }
    /// All buffers, to read.
    pub fn bufs(&self) -> &[Box<[u8]>] {
        &self.bufs
    }

    /// `batch` buffers (at least one) of 64 KiB each; one `recvmmsg` fills at most `batch` of them.
    pub fn new(batch: usize) -> Self {
        let batch = batch.clamp(1, quinn_udp::BATCH_SIZE.max(1));
        Self {
            bufs: (0..batch)
                .map(|_| vec![0u8; RECV_BUF].into_boxed_slice())
                .collect(),
            meta: vec![RecvMeta::default(); batch],
        }
    }
}

impl UdpIo {
    /// Binds a UDP socket to `addr` (port 0 picks one) with the given options.
    pub fn bind(addr: SocketAddr, opts: &UdpOptions) -> io::Result<Self> {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if opts.reuse_port {
            socket.set_reuse_port(true)?;
        }
        if addr.is_ipv6() {
            // Accept IPv4 too on a wildcard v6 socket, whatever the sysctl default is.
            let _ = socket.set_only_v6(false);
        }
        set_buffers(&socket, opts);
        if let Some(m) = opts.mark {
            socket.set_mark(m)?;
        }
        socket.bind(&addr.into())?;
        let state = UdpSocketState::new(UdpSockRef::from(&socket))?;
        socket.set_nonblocking(true)?;
        let wake = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Self {
            socket,
            state,
            wake,
            read_timeout: AtomicU64::new(NO_TIMEOUT),
            is_v6: addr.is_ipv6(),
            busy_poll: opts.busy_poll,
        })
    }

    /// Steers the datagrams of this socket's `SO_REUSEPORT` group (`sockets` of them, bound in
    /// order) by their payload byte `offset`: see [`crate::steer::lane_program`].
    pub fn steer_by_lane(&self, offset: u32, sockets: usize) -> io::Result<()> {
        crate::steer::attach_lane_program(&self.socket, offset, sockets)
    }

    /// The bound address (with the port the kernel picked for port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "socket has no IP address"))
    }

    /// How long [`UdpIo::recv`] blocks before returning `Ok(0)`; `None` blocks until data arrives.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        if t == Some(Duration::ZERO) {
            // Same rule as std: a zero timeout is an error, not "non-blocking".
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "zero read timeout",
            ));
        }
        let ns = t.map_or(NO_TIMEOUT, |t| {
            u64::try_from(t.as_nanos()).unwrap_or(NO_TIMEOUT - 1)
        });
        self.read_timeout.store(ns, Ordering::Relaxed);
        Ok(())
    }

    /// Most segments one GSO send may carry (1 if the kernel has no UDP GSO).
    pub fn max_gso_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    /// Segments the kernel may coalesce into one received buffer (1 without UDP GRO).
    pub fn gro_segments(&self) -> usize {
        self.state.gro_segments()
    }

    /// Actual `SO_SNDBUF` / `SO_RCVBUF` sizes as the kernel reports them.
    pub fn buffer_sizes(&self) -> io::Result<(usize, usize)> {
        Ok((
            self.socket.send_buffer_size()?,
            self.socket.recv_buffer_size()?,
        ))
    }

    /// Sends `contents` to `dest` as datagrams of `segment_size` bytes (the last may be shorter) in as
    /// few system calls as GSO allows. `segment_size == contents.len()` sends one datagram.
    /// Blocks while the socket's send buffer is full. Returns the system calls it took.
    pub fn send(
        &self,
        dest: SocketAddr,
        contents: &[u8],
        segment_size: usize,
    ) -> io::Result<usize> {
        if contents.is_empty() {
            return Ok(0);
        }
        if segment_size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "segment_size is zero",
            ));
        }
        let dest = self.map_dest(dest);
        let seg = segment_size.min(contents.len());
        let mut rest = contents;
        let mut calls = 0;
        while !rest.is_empty() {
            // One syscall carries at most max_gso_segments segments and MAX_SEND bytes.
            let segs = self.max_gso_segments().min(MAX_SEND / seg).max(1);
            let take = rest.len().min(segs * seg);
            let (chunk, tail) = rest.split_at(take);
            let gso = chunk.len() > seg;
            match self.send_one(dest, chunk, gso.then_some(seg)) {
                Ok(()) => {
                    rest = tail;
                    calls += 1;
                }
                // quinn-udp turns GSO off after EIO/EINVAL from a device without it: resend the
                // chunk one datagram per call.
                Err(e) if gso && self.max_gso_segments() == 1 => {
                    tracing::debug!(error = %e, "GSO send failed; falling back to one datagram per call");
                    for d in chunk.chunks(seg) {
                        self.send_one(dest, d, None)?;
                        calls += 1;
                    }
                    rest = tail;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(calls)
    }

    fn send_one(
        &self,
        dest: SocketAddr,
        contents: &[u8],
        segment_size: Option<usize>,
    ) -> io::Result<()> {
        let t = Transmit {
            destination: dest,
            ecn: None,
            contents,
            segment_size,
            src_ip: None,
        };
        loop {
            match self.state.try_send(UdpSockRef::from(&self.socket), &t) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Send buffer full: wait until it drains (the socket itself is non-blocking).
                    let mut fds = [PollFd::new(&self.socket, PollFlags::OUT)];
                    retry_poll(&mut fds, None)?;
                }
                other => return other,
            }
        }
    }

    /// Blocks (up to the read timeout) for at least one datagram, then calls `f(source, datagram)` for
    /// every datagram received in this batch (GRO super-buffers split into their segments). Returns
    /// how many. WouldBlock/TimedOut is returned as Ok(0), as is an interruption by [`UdpIo::wake`].
    pub fn recv(
        &self,
        bufs: &mut RecvBuffers,
        f: impl FnMut(SocketAddr, &mut [u8]),
    ) -> io::Result<usize> {
        let ns = self.read_timeout.load(Ordering::Relaxed);
        let timeout = (ns != NO_TIMEOUT).then(|| Duration::from_nanos(ns));
        self.recv_timeout(bufs, timeout, f)
    }

    /// [`UdpIo::recv`] with an explicit timeout for this call (`None`: block until data or a wake-up;
    /// `Some(ZERO)`: do not block), ignoring the socket's read timeout.
    pub fn recv_timeout(
        &self,
        bufs: &mut RecvBuffers,
        timeout: Option<Duration>,
        mut f: impl FnMut(SocketAddr, &mut [u8]),
    ) -> io::Result<usize> {
        self.recv_inner(bufs, timeout, &mut |seg: Segment, d: &mut [u8]| {
            f(seg.source, d)
        })
    }

    fn recv_inner(
        &self,
        bufs: &mut RecvBuffers,
        timeout: Option<Duration>,
        f: &mut impl FnMut(Segment, &mut [u8]),
    ) -> io::Result<usize> {
        let deadline = timeout.map(|t| Instant::now() + t);
        // Until when this call asks without sleeping (set at its first empty receive).
        let mut spin_until: Option<Instant> = None;
        loop {
            let n = {
                let mut slices: Vec<IoSliceMut<'_>> =
                    bufs.bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
                self.state
                    .recv(UdpSockRef::from(&self.socket), &mut slices, &mut bufs.meta)
            };
            match n {
                Ok(n) => return Ok(self.deliver(bufs, n, f)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // An ICMP error queued for an earlier send: not a datagram; keep receiving.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionReset
                    ) =>
                {
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::TimedOut => return Ok(0),
                Err(e) => return Err(e),
            }
            let left = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(0),
                },
            };
            let mut fds = [
                PollFd::new(&self.socket, PollFlags::IN),
                PollFd::new(&self.wake, PollFlags::IN),
            ];
            let spinning = !self.busy_poll.is_zero() && {
                let now = Instant::now();
                now < *spin_until.get_or_insert_with(|| {
                    now + left.map_or(self.busy_poll, |l| l.min(self.busy_poll))
                })
            };
            if spinning {
                // Both the socket and the wake-up, without sleeping.
                if retry_poll(&mut fds, Some(Duration::ZERO))? == 0 {
                    std::hint::spin_loop();
                    continue;
                }
            } else if retry_poll(&mut fds, left)? == 0 {
                return Ok(0);
            }
            if !fds[1].revents().is_empty() {
                // Drain the eventfd counter (several wakes collapse into one) and return to the caller.
                let mut b = [0u8; 8];
                let _ = rustix::io::read(&self.wake, &mut b);
                return Ok(0);
            }
        }
    }

    /// Waits until the socket or `other` (a descriptor the same thread also reads, such as a TUN
    /// queue) is readable, [`UdpIo::wake`] is called, or `timeout` passes. Returns whether a
    /// wake was consumed. The caller then reads both without blocking: one thread serves both
    /// and wakes once for whichever has work.
    pub fn wait_readable_with(
        &self,
        other: BorrowedFd<'_>,
        timeout: Option<Duration>,
    ) -> io::Result<bool> {
        let mut fds = [
            PollFd::new(&self.socket, PollFlags::IN),
            PollFd::from_borrowed_fd(other, PollFlags::IN),
            PollFd::new(&self.wake, PollFlags::IN),
        ];
        retry_poll(&mut fds, timeout)?;
        if fds[2].revents().is_empty() {
            return Ok(false);
        }
        let mut b = [0u8; 8];
        let _ = rustix::io::read(&self.wake, &mut b);
        Ok(true)
    }

    /// Interrupts a [`UdpIo::recv`] blocked in another thread (or makes the next one return at once
    /// with `Ok(0)` if none is blocked).
    pub fn wake(&self) {
        // A full counter (2^64 - 2 pending wakes) would return EAGAIN: the wake is pending anyway.
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }

    fn deliver(
        &self,
        bufs: &mut RecvBuffers,
        n: usize,
        f: &mut impl FnMut(Segment, &mut [u8]),
    ) -> usize {
        let mut count = 0;
        for (i, (meta, buf)) in bufs
            .meta
            .iter()
            .zip(bufs.bufs.iter_mut())
            .take(n)
            .enumerate()
        {
            let src = unmap(meta.addr);
            let len = meta.len.min(buf.len());
            let stride = if meta.stride == 0 {
                len.max(1)
            } else {
                meta.stride
            };
            for (k, d) in buf[..len].chunks_mut(stride).enumerate() {
                let start = k * stride;
                let seg = Segment {
                    source: src,
                    buf: i,
                    range: start..start + d.len(),
                };
                f(seg, d);
                count += 1;
            }
        }
        count
    }

    /// [`UdpIo::recv_timeout`] that also tells where each datagram lies in `bufs`, so that a
    /// caller can keep the buffers and work on the datagrams in place later
    /// ([`RecvBuffers::buf_mut`]).
    pub fn recv_segments(
        &self,
        bufs: &mut RecvBuffers,
        timeout: Option<Duration>,
        mut f: impl FnMut(Segment, &mut [u8]),
    ) -> io::Result<usize> {
        self.recv_inner(bufs, timeout, &mut f)
    }

    fn map_dest(&self, dest: SocketAddr) -> SocketAddr {
        match dest {
            SocketAddr::V4(v4) if self.is_v6 => {
                SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
            }
            d => d,
        }
    }
}

/// Shows v4-mapped IPv6 sources (dual-stack sockets) as plain IPv4 so peers compare equal however
/// they were configured.
fn unmap(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => a,
        },
        a => a,
    }
}

/// `poll(2)`, retried on EINTR with the remaining time.
fn retry_poll(fds: &mut [PollFd<'_>], timeout: Option<Duration>) -> io::Result<usize> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let ts = deadline.map(|d| {
            let left = d.saturating_duration_since(Instant::now());
            Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            }
        });
        match rustix::event::poll(fds, ts.as_ref()) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Large buffers absorb bursts at line rate. Root may exceed `net.core.[rw]mem_max` with the FORCE
/// variants; everyone else gets what the sysctl allows (failures here are not fatal).
fn set_buffers(socket: &Socket, opts: &UdpOptions) {
    if rustix::net::sockopt::set_socket_send_buffer_size_force(socket.as_fd(), opts.send_buffer)
        .is_err()
    {
        let _ = socket.set_send_buffer_size(opts.send_buffer);
    }
    if rustix::net::sockopt::set_socket_recv_buffer_size_force(socket.as_fd(), opts.recv_buffer)
        .is_err()
    {
        let _ = socket.set_recv_buffer_size(opts.recv_buffer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::sync::Arc;

    fn loopback() -> UdpIo {
        UdpIo::bind((Ipv4Addr::LOCALHOST, 0).into(), &UdpOptions::default()).unwrap()
    }

    /// Receives until `want` datagrams arrived (or two seconds passed).
    fn recv_n(io: &UdpIo, want: usize) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut bufs = RecvBuffers::new(32);
        let mut got = Vec::new();
        let end = Instant::now() + Duration::from_secs(2);
        while got.len() < want && Instant::now() < end {
            io.recv_timeout(&mut bufs, Some(Duration::from_millis(200)), |a, d| {
                got.push((a, d.to_vec()))
            })
            .unwrap();
        }
        got
    }

    /// A real `SO_REUSEPORT` group with the lane program: lane `n` reaches socket
    /// `(n - 1) % 3`; lane 0 falls back to the kernel's hash (one client, one socket).
    #[test]
    fn the_lane_program_spreads_datagrams_by_their_lane_byte() {
        let opts = UdpOptions {
            reuse_port: true,
            ..UdpOptions::default()
        };
        let first = UdpIo::bind((Ipv4Addr::LOCALHOST, 0).into(), &opts).unwrap();
        let addr = first.local_addr().unwrap();
        let mut group = vec![first];
        for _ in 0..2 {
            group.push(UdpIo::bind(addr, &opts).unwrap());
        }
        group[0].steer_by_lane(3, group.len()).unwrap();
        let client = loopback();
        let datagram = |lane: u8, tag: u8| {
            let mut d = [tag; 20];
            d[3] = lane;
            d
        };
        for lane in 1..=6u8 {
            client.send(addr, &datagram(lane, lane), 20).unwrap();
        }
        for (k, s) in group.iter().enumerate() {
            let got = recv_n(s, 2);
            let lanes: Vec<u8> = got.iter().map(|(_, d)| d[3]).collect();
            assert_eq!(lanes, [k as u8 + 1, k as u8 + 4], "socket {k}");
            for (_, d) in &got {
                assert_eq!(
                    crate::steer::lane_socket(d, 3, 3),
                    Some(k),
                    "the mirror agrees"
                );
            }
        }
        for _ in 0..8 {
            client.send(addr, &datagram(0, 9), 20).unwrap();
        }
        let mut bufs = RecvBuffers::new(32);
        let per_socket: Vec<usize> = group
            .iter()
            .map(|s| {
                let mut n = 0;
                let _ = s.recv_timeout(&mut bufs, Some(Duration::from_millis(300)), |_, _| n += 1);
                n
            })
            .collect();
        let mut sorted = per_socket.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 0, 8], "{per_socket:?}");
    }

    #[test]
    fn gso_send_arrives_as_separate_datagrams() {
        let (a, b) = (loopback(), loopback());
        // 200 segments of 1200 bytes: more than one GSO batch (64 segments) and a short last one.
        let seg = 1200;
        let mut data: Vec<u8> = (0..200 * seg - 500).map(|_| rand::random::<u8>()).collect();
        data[0] = 1;
        a.send(b.local_addr().unwrap(), &data, seg).unwrap();
        let got = recv_n(&b, 200);
        assert_eq!(got.len(), 200, "gso segments {}", a.max_gso_segments());
        let mut joined = Vec::new();
        for (i, (src, d)) in got.iter().enumerate() {
            assert_eq!(*src, a.local_addr().unwrap());
            assert_eq!(d.len(), if i == 199 { seg - 500 } else { seg });
            joined.extend_from_slice(d);
        }
        assert_eq!(joined, data, "loopback keeps order and bytes");
    }

    #[test]
    fn one_datagram_when_segment_equals_len() {
        let (a, b) = (loopback(), loopback());
        a.send(b.local_addr().unwrap(), b"hello", 5).unwrap();
        let got = recv_n(&b, 1);
        assert_eq!(got, vec![(a.local_addr().unwrap(), b"hello".to_vec())]);
    }

    #[test]
    fn recv_timeout_returns_zero() {
        let a = loopback();
        a.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut bufs = RecvBuffers::new(4);
        let t = Instant::now();
        assert_eq!(
            a.recv(&mut bufs, |_, _| panic!("no datagram expected"))
                .unwrap(),
            0
        );
        assert!(
            t.elapsed() >= Duration::from_millis(45),
            "{:?}",
            t.elapsed()
        );
        assert!(a.set_read_timeout(Some(Duration::ZERO)).is_err());
    }

    #[test]
    fn wake_interrupts_blocking_recv() {
        let a = Arc::new(loopback());
        let a2 = Arc::clone(&a);
        let t = std::thread::spawn(move || {
            let mut bufs = RecvBuffers::new(4);
            let start = Instant::now();
            let n = a2.recv_timeout(&mut bufs, None, |_, _| {}).unwrap();
            (n, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        a.wake();
        let (n, waited) = t.join().unwrap();
        assert_eq!(n, 0);
        assert!(waited < Duration::from_secs(2));
    }

    fn busy(spin: Duration) -> UdpIo {
        let opts = UdpOptions {
            busy_poll: spin,
            ..UdpOptions::default()
        };
        UdpIo::bind((Ipv4Addr::LOCALHOST, 0).into(), &opts).unwrap()
    }

    /// Receives on `io` in a thread, for at most `timeout`: (datagrams, time taken).
    fn recv_in_thread(
        io: &Arc<UdpIo>,
        timeout: Option<Duration>,
    ) -> std::thread::JoinHandle<(Vec<Vec<u8>>, Duration)> {
        let io = Arc::clone(io);
        std::thread::spawn(move || {
            let mut bufs = RecvBuffers::new(4);
            let mut got = Vec::new();
            let start = Instant::now();
            io.recv_timeout(&mut bufs, timeout, |_, d| got.push(d.to_vec()))
                .unwrap();
            (got, start.elapsed())
        })
    }

    /// A datagram that arrives while the receive spins is taken by the spin; one that arrives
    /// after a short spin ended is taken from the sleep that follows.
    #[test]
    fn busy_poll_takes_datagrams_during_and_after_the_spin() {
        let a = loopback();
        for (spin, send_after) in [(10_000, 50), (20, 150)] {
            let b = Arc::new(busy(Duration::from_millis(spin)));
            let t = recv_in_thread(&b, Some(Duration::from_secs(5)));
            std::thread::sleep(Duration::from_millis(send_after));
            a.send(b.local_addr().unwrap(), b"spun", 4).unwrap();
            let (got, took) = t.join().unwrap();
            assert_eq!(got, vec![b"spun".to_vec()], "spin {spin} ms");
            assert!(took < Duration::from_secs(2), "spin {spin} ms: {took:?}");
        }
    }

    /// The receive's own timeout ends a longer spin, and a wake-up interrupts one.
    #[test]
    fn busy_poll_keeps_the_timeout_and_the_wake_up() {
        let b = Arc::new(busy(Duration::from_secs(10)));
        let (got, took) = recv_in_thread(&b, Some(Duration::from_millis(50)))
            .join()
            .unwrap();
        assert!(got.is_empty());
        assert!(
            took >= Duration::from_millis(45) && took < Duration::from_secs(2),
            "{took:?}"
        );
        let t = recv_in_thread(&b, None);
        std::thread::sleep(Duration::from_millis(50));
        b.wake();
        let (got, took) = t.join().unwrap();
        assert!(got.is_empty());
        assert!(took < Duration::from_secs(2), "{took:?}");
    }

    #[test]
    fn dual_stack_socket_talks_to_ipv4() {
        let Ok(v6) = UdpIo::bind((Ipv6Addr::UNSPECIFIED, 0).into(), &UdpOptions::default()) else {
            eprintln!("skipping: no IPv6 on this host");
            return;
        };
        let v4 = loopback();
        let v6_port = v6.local_addr().unwrap().port();
        v6.send(v4.local_addr().unwrap(), b"x", 1).unwrap();
        let got = recv_n(&v4, 1);
        assert_eq!(got.len(), 1);
        v4.send((Ipv4Addr::LOCALHOST, v6_port).into(), b"y", 1)
            .unwrap();
        let got = recv_n(&v6, 1);
        assert_eq!(
            got,
            vec![(v4.local_addr().unwrap(), b"y".to_vec())],
            "source shown as plain IPv4"
        );
    }

    #[test]
    fn large_buffers_as_root_or_capped() {
        let a = loopback();
        let (s, r) = a.buffer_sizes().unwrap();
        assert!(s > 0 && r > 0);
    }
}
