//! The receive half of a data path, shared by datagram mode's node (`sealink-datagram`) and the
//! tunnel (`sealink-tunnel`): one `recvmmsg` into a batch's buffers, each datagram's serial first
//! half run under the caller's lock as it arrives, the opens run later on any thread with no lock
//! held, and the results finished in arrival order.
//!
//! The caller's lock is taken at the batch's first datagram and held until the last is reserved:
//! the callbacks run back to back once the system call returns, so taking it once per batch
//! costs nothing in latency and saves a lock round per datagram. A batch that received nothing
//! never takes it.

use std::io;
use std::ops::Range;
use std::time::Duration;

use crate::{RecvBuffers, Segment, UdpIo};

/// One reserved datagram: where it lies, the job that opens it and, once opened, the result.
#[derive(Debug)]
struct Opening<J, E> {
    seg: Segment,
    job: J,
    /// `None` until [`Received::open_all`] ran.
    opened: Option<Result<Range<usize>, E>>,
}

/// A batch of received datagrams, reserved by the caller and opened in place later.
///
/// `J` is the parallel half of receiving one datagram (the protocol's open job), `E` what an
/// open that fails gives.
#[derive(Debug)]
pub struct Received<J, E> {
    rb: RecvBuffers,
    openings: Vec<Opening<J, E>>,
}

impl<J, E> Received<J, E> {
    /// A batch of `batch` receive buffers (see [`RecvBuffers::new`]).
    pub fn new(batch: usize) -> Self {
        Received {
            rb: RecvBuffers::new(batch),
            openings: Vec::new(),
        }
    }

    /// One receive (waiting up to `timeout`, as [`UdpIo::recv_timeout`]). Every datagram is
    /// handed to `reserve` together with the guard `lock` returns, taken at the first datagram
    /// and held until the last; a datagram for which `reserve` returns a job is kept for
    /// [`Received::open_all`], in arrival order. Returns the receive's result (the datagrams
    /// received) and the guard, still held, if a datagram took it.
    pub fn recv_reserving<G>(
        &mut self,
        io: &UdpIo,
        timeout: Option<Duration>,
        mut lock: impl FnMut() -> G,
        mut reserve: impl FnMut(&mut G, &Segment, &[u8]) -> Option<J>,
    ) -> (io::Result<usize>, Option<G>) {
        let mut held: Option<G> = None;
        let Received { rb, openings } = self;
        let r = io.recv_segments(rb, timeout, |seg, d| {
            let guard = held.get_or_insert_with(&mut lock);
            if let Some(job) = reserve(guard, &seg, d) {
                openings.push(Opening {
                    seg,
                    job,
                    opened: None,
                });
            }
        });
        (r, held)
    }

    /// Opens every reserved datagram in place with `open` (on any thread, no lock held), which
    /// returns the range of the datagram's body.
    pub fn open_all(&mut self, open: impl Fn(&J, &mut [u8]) -> Result<Range<usize>, E>) {
        for o in &mut self.openings {
            let d = &mut self.rb.buf_mut(o.seg.buf)[o.seg.range.clone()];
            o.opened = Some(open(&o.job, d));
        }
    }

    /// Hands every reserved datagram to `finish` in arrival order, with its job, the open's
    /// result and the whole datagram (opened in place), and empties the batch. A datagram that
    /// was never opened (no [`Received::open_all`] since it was reserved) is never handed on.
    pub fn finish_each(
        &mut self,
        mut finish: impl FnMut(&Segment, &J, Result<Range<usize>, E>, &[u8]),
    ) {
        let Received { rb, openings } = self;
        for o in openings.drain(..) {
            let Some(opened) = o.opened else {
                debug_assert!(false, "a received datagram finished before it was opened");
                continue;
            };
            finish(
                &o.seg,
                &o.job,
                opened,
                &rb.buf_mut(o.seg.buf)[o.seg.range.clone()],
            );
        }
    }

    /// No datagram is waiting to be opened or finished.
    pub fn is_empty(&self) -> bool {
        self.openings.is_empty()
    }

    /// Reserved datagrams waiting to be opened or finished.
    pub fn len(&self) -> usize {
        self.openings.len()
    }

    /// Drops every reserved datagram (the buffers stay for the next receive).
    pub fn clear(&mut self) {
        self.openings.clear();
    }

    /// The receive buffers, for a caller that works on finished datagrams in place (the tunnel
    /// writes their packets to its TUN device straight from here).
    pub fn buffers_mut(&mut self) -> &mut RecvBuffers {
        &mut self.rb
    }

    /// The receive buffers, to read.
    pub fn buffers(&self) -> &RecvBuffers {
        &self.rb
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UdpOptions;
    use std::net::SocketAddr;
    use std::sync::Mutex;

    /// A toy open: a datagram opens when its first byte is 0xAA; its body is the rest.
    fn open(job: &u8, d: &mut [u8]) -> Result<Range<usize>, &'static str> {
        match d.first() {
            Some(0xAA) => {
                d[0] = *job;
                Ok(1..d.len())
            }
            _ => Err("bad"),
        }
    }

    fn pair() -> (UdpIo, UdpIo, SocketAddr) {
        let opts = UdpOptions::default();
        let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let a = UdpIo::bind(lo, &opts).unwrap();
        let b = UdpIo::bind(lo, &opts).unwrap();
        let to = b.local_addr().unwrap();
        (a, b, to)
    }

    /// Receives until `want` datagrams were seen (loopback may split them over receives).
    fn recv_all(
        rx: &mut Received<u8, &'static str>,
        b: &UdpIo,
        state: &Mutex<Vec<u8>>,
        want: usize,
    ) -> usize {
        let mut seen = 0;
        let mut locks = 0;
        while seen < want {
            let (r, held) = rx.recv_reserving(
                b,
                Some(Duration::from_secs(5)),
                || {
                    locks += 1;
                    state.lock().unwrap()
                },
                |st, _seg, d| {
                    // The serial half: record the arrival, keep every other datagram.
                    st.push(d[1]);
                    (d[1] % 2 == 0).then_some(d[1])
                },
            );
            let n = r.unwrap();
            assert!(n > 0, "timed out with {seen} of {want} datagrams");
            assert!(held.is_some(), "a receive with datagrams took the lock");
            seen += n;
        }
        assert!(locks <= seen, "at most one lock per receive");
        seen
    }

    #[test]
    fn reserved_datagrams_open_and_finish_in_arrival_order() {
        let (a, b, to) = pair();
        for i in 0..8u8 {
            // Odd ones are reserved away by the caller; datagram 4 fails to open.
            let first = if i == 4 { 0x00 } else { 0xAA };
            a.send(to, &[first, i, i, i], 4).unwrap();
        }
        let state = Mutex::new(Vec::new());
        let mut rx = Received::new(8);
        assert_eq!(recv_all(&mut rx, &b, &state, 8), 8);
        assert_eq!(*state.lock().unwrap(), (0..8).collect::<Vec<u8>>());
        assert_eq!(rx.len(), 4);
        rx.open_all(open);
        let mut got = Vec::new();
        rx.finish_each(|seg, job, opened, d| {
            assert_eq!(seg.source, a.local_addr().unwrap());
            match opened {
                Ok(body) => {
                    // Opened in place: the toy open wrote the job into byte 0.
                    assert_eq!(d[0], *job);
                    got.push((*job, d[body].to_vec()));
                }
                Err(e) => got.push((*job, e.as_bytes().to_vec())),
            }
        });
        assert_eq!(
            got,
            vec![
                (0, vec![0, 0, 0]),
                (2, vec![2, 2, 2]),
                (4, b"bad".to_vec()),
                (6, vec![6, 6, 6]),
            ]
        );
        assert!(rx.is_empty());
    }

    #[test]
    fn an_empty_receive_takes_no_lock_and_unopened_datagrams_are_not_finished() {
        let (a, b, to) = pair();
        let mut rx: Received<u8, &'static str> = Received::new(4);
        let mut locks = 0;
        let (r, held) =
            rx.recv_reserving(&b, Some(Duration::ZERO), || locks += 1, |_, _, _| Some(0));
        assert_eq!(r.unwrap(), 0);
        assert!(held.is_none());
        assert_eq!(locks, 0);

        a.send(to, &[0xAA, 2], 2).unwrap();
        let state = Mutex::new(Vec::new());
        recv_all(&mut rx, &b, &state, 1);
        assert_eq!(rx.len(), 1);
        rx.clear();
        assert!(rx.is_empty());
        let mut finished = 0;
        rx.finish_each(|_, _, _, _| finished += 1);
        assert_eq!(finished, 0);
    }
}
