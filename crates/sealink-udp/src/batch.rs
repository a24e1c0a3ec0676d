//! The two halves of a data path, shared by datagram mode's node (`sealink-datagram`) and the
//! tunnel (`sealink-tunnel`).
//!
//! [`Received`], the receive half: one `recvmmsg` into a batch's buffers, each datagram's serial
//! first half run under the caller's lock as it arrives, the opens run later on any thread with
//! no lock held, and the results finished in arrival order.
//!
//! [`Sending`], the transmit half: datagrams written (unsealed) into one batch buffer under the
//! caller's lock, in send order, the seals run later on any thread with no lock held, and the
//! sealed datagrams sent in that order, runs of equal-sized ones to one destination as one GSO
//! call ([`GsoRuns`]).
//!
//! The caller's lock is taken at the batch's first datagram and held until the last is reserved:
//! the callbacks run back to back once the system call returns, so taking it once per batch
//! costs nothing in latency and saves a lock round per datagram. A batch that received nothing
//! never takes it.

use std::io;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use crate::{GsoRuns, RecvBuffers, Run, Segment, UdpIo};

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

/// One datagram to send: where it lies in the batch buffer, where it goes, and its seal.
#[derive(Debug)]
struct Outgoing<J> {
    start: usize,
    /// Bytes the seal may use before it ran; the datagram's length once it ran (0: it failed).
    len: usize,
    dest: SocketAddr,
    /// The seal, kept after it ran so that the caller can look at what it sent
    /// ([`Sending::jobs`]); `None`: the datagram is final as written.
    job: Option<J>,
    sealed: bool,
    /// Sent in a GSO run of its own that nothing joins (a cookie reply).
    alone: bool,
}

/// A batch of datagrams to send, written unsealed into one buffer and sealed in place later.
///
/// The buffer has two parts: a fixed area at the front whose layout is the caller's (the
/// tunnel reads a TUN super-packet into fixed-stride slots there, and names each datagram with
/// [`Sending::push`]), and an append area after it that [`Sending::append`] fills back to back
/// straight from the protocol core's `poll_transmit` (it grows as needed and keeps its size).
/// Datagrams leave in the order they were pushed or appended, whichever part they lie in.
///
/// `J` is the parallel half of sending one datagram (the protocol's seal job, with whatever the
/// caller needs beside it).
#[derive(Debug)]
pub struct Sending<J> {
    buf: Vec<u8>,
    /// Bytes of the fixed area.
    fixed: usize,
    /// Where the next appended datagram goes.
    cursor: usize,
    items: Vec<Outgoing<J>>,
    runs: GsoRuns,
}

impl<J> Sending<J> {
    /// A batch with a fixed area of `fixed` bytes and room for `append` bytes after it (more
    /// is added when needed), sending at most `max_segments` datagrams per GSO call.
    pub fn new(fixed: usize, append: usize, max_segments: usize) -> Self {
        Sending {
            buf: vec![0u8; fixed + append],
            fixed,
            cursor: fixed,
            items: Vec::new(),
            runs: GsoRuns::new(max_segments),
        }
    }

    /// The fixed area, for the caller to write its datagrams into.
    pub fn fixed_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.fixed]
    }

    /// Sends `buf[start..start + len]` of the fixed area to `dest` next, sealed by `job` (which
    /// may use all `len` bytes and returns the final length), or as it is (`None`).
    pub fn push(&mut self, dest: SocketAddr, start: usize, len: usize, job: Option<J>) {
        debug_assert!(
            start + len <= self.fixed,
            "a pushed datagram outside the fixed area"
        );
        self.queue(dest, start, len, job, false);
    }

    fn queue(&mut self, dest: SocketAddr, start: usize, len: usize, job: Option<J>, alone: bool) {
        self.items.push(Outgoing {
            start,
            len,
            dest,
            job,
            sealed: false,
            alone,
        });
    }

    /// Lets `fill` write the next datagram into the append area, up to `room` bytes: it returns
    /// the destination, the bytes written and the seal still to run, or `None` when it has
    /// nothing to send. Returns whether a datagram was appended.
    pub fn append(
        &mut self,
        room: usize,
        fill: impl FnOnce(&mut [u8]) -> Option<(SocketAddr, usize, Option<J>)>,
    ) -> bool {
        self.append_inner(room, false, fill)
    }

    /// [`Sending::append`] for a datagram that leaves in a GSO call of its own.
    pub fn append_alone(
        &mut self,
        room: usize,
        fill: impl FnOnce(&mut [u8]) -> Option<(SocketAddr, usize, Option<J>)>,
    ) -> bool {
        self.append_inner(room, true, fill)
    }

    fn append_inner(
        &mut self,
        room: usize,
        alone: bool,
        fill: impl FnOnce(&mut [u8]) -> Option<(SocketAddr, usize, Option<J>)>,
    ) -> bool {
        let start = self.cursor;
        if self.buf.len() < start + room {
            // Grows once, to what a burst needed; later batches reuse it.
            self.buf.resize(start + room, 0);
        }
        let Some((dest, len, job)) = fill(&mut self.buf[start..start + room]) else {
            return false;
        };
        let len = len.min(room);
        self.cursor += len;
        self.queue(dest, start, len, job, alone);
        true
    }

    /// Bytes the appended datagrams take.
    pub fn appended(&self) -> usize {
        self.cursor - self.fixed
    }

    /// Seals every datagram that has a seal (on any thread, no lock held): `seal` gets the job
    /// and the datagram's bytes and returns the final length. Returns how many seals failed;
    /// those datagrams are never sent.
    pub fn seal_all<E>(&mut self, mut seal: impl FnMut(&J, &mut [u8]) -> Result<usize, E>) -> u64 {
        let mut failed = 0;
        for o in &mut self.items {
            if o.sealed {
                continue;
            }
            o.sealed = true;
            if let Some(job) = &o.job {
                let d = &mut self.buf[o.start..o.start + o.len];
                o.len = match seal(job, d) {
                    Ok(n) => n.min(o.len),
                    Err(_) => {
                        failed += 1;
                        0
                    }
                };
            }
        }
        failed
    }

    /// The jobs of the datagrams in send order, each with whether it was sealed and sent
    /// (false after a failed seal).
    pub fn jobs(&self) -> impl Iterator<Item = (&J, bool)> {
        self.items
            .iter()
            .filter_map(|o| o.job.as_ref().map(|j| (j, o.len > 0)))
    }

    /// Hands the sealed datagrams to `send` in order, grouped into GSO runs: each run with its
    /// bytes, for one [`UdpIo::send`]. A datagram whose seal failed, or never ran, is left out.
    pub fn send_runs(&mut self, mut send: impl FnMut(&Run, &[u8])) {
        let Sending {
            buf, items, runs, ..
        } = self;
        runs.clear();
        for o in items.iter() {
            if o.len == 0 || (o.job.is_some() && !o.sealed) {
                debug_assert!(o.len == 0, "a datagram sent before its seal ran");
                continue;
            }
            if o.alone {
                runs.push_alone(o.dest, o.start, o.len);
            } else {
                runs.push(o.dest, o.start, o.len);
            }
        }
        for r in runs.drain() {
            send(&r, r.bytes(buf));
        }
    }

    /// Nothing to send.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Datagrams to send.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Drops every datagram (the buffer stays, at its size, for the next batch).
    pub fn clear(&mut self) {
        self.items.clear();
        self.runs.clear();
        self.cursor = self.fixed;
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
    fn addr(k: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, k], 4000))
    }

    /// A toy seal: job 0 fails; any other writes the job into every byte; job 1 uses all the
    /// room it was given, the others end one byte short of it (as a slot whose packet is
    /// shorter than the MTU).
    fn seal(job: &u8, d: &mut [u8]) -> Result<usize, ()> {
        if *job == 0 {
            return Err(());
        }
        d.fill(*job);
        Ok(if *job == 1 { d.len() } else { d.len() - 1 })
    }

    /// (destination, bytes, segment) of each run `send_runs` hands over.
    fn sent(tx: &mut Sending<u8>) -> Vec<(SocketAddr, Vec<u8>, usize)> {
        let mut out = Vec::new();
        tx.send_runs(|r, b| out.push((r.dest, b.to_vec(), r.segment)));
        out
    }

    #[test]
    fn pushed_and_appended_datagrams_leave_in_order_in_runs() {
        // A fixed area of four 5-byte slots, as the tunnel lays a TUN read out.
        let mut tx: Sending<u8> = Sending::new(20, 0, 64);
        tx.fixed_mut().fill(0xEE);
        tx.push(addr(1), 0, 5, Some(1));
        tx.push(addr(1), 5, 5, Some(1));
        // Appended between the slots (a queued datagram that must leave before slot 2): final
        // as written, and the buffer grows for it.
        assert!(tx.append(8, |b| {
            b[..3].copy_from_slice(b"abc");
            Some((addr(2), 3, None))
        }));
        assert!(!tx.append(8, |_| None), "nothing to append");
        tx.push(addr(1), 10, 5, Some(0));
        tx.push(addr(1), 15, 5, Some(3));
        assert!(tx.append_alone(8, |b| {
            b[..2].copy_from_slice(b"zz");
            Some((addr(1), 2, None))
        }));
        assert_eq!(tx.appended(), 5);
        assert_eq!(tx.len(), 6);
        assert_eq!(tx.seal_all(seal), 1, "job 0 failed");
        let jobs: Vec<(u8, bool)> = tx.jobs().map(|(j, ok)| (*j, ok)).collect();
        assert_eq!(jobs, vec![(1, true), (1, true), (0, false), (3, true)]);
        assert_eq!(
            sent(&mut tx),
            vec![
                // Slots 0 and 1: full, adjacent, one destination: one GSO call.
                (addr(1), vec![1; 10], 5),
                (addr(2), b"abc".to_vec(), 3),
                // Slot 2's seal failed: never on the wire.
                (addr(1), vec![3, 3, 3, 3], 4),
                (addr(1), b"zz".to_vec(), 2),
            ]
        );
        tx.clear();
        assert!(tx.is_empty());
        assert_eq!(tx.appended(), 0);
        assert!(sent(&mut tx).is_empty());
    }

    #[test]
    fn appended_datagrams_pack_back_to_back_into_gso_runs() {
        let mut tx: Sending<u8> = Sending::new(0, 64, 2);
        for k in 0..5u8 {
            // Room for 10; 7 written, sealed down to 6: the next starts right after.
            assert!(tx.append(10, |b| {
                b[..7].fill(k);
                Some((addr(1), 7, Some(9)))
            }));
        }
        assert_eq!(tx.appended(), 35);
        assert_eq!(tx.seal_all(seal), 0);
        let runs = sent(&mut tx);
        // Sealing shortened each datagram: the next no longer starts where it ends, so each
        // is its own run (a caller that packs seals to the length it wrote).
        assert_eq!(runs.len(), 5);
        assert!(
            runs.iter()
                .all(|(d, b, s)| *d == addr(1) && b.len() == 6 && *s == 6)
        );

        // Datagrams that keep their length join, up to max_segments per run.
        let mut tx: Sending<u8> = Sending::new(0, 0, 2);
        for _ in 0..5 {
            tx.append(4, |b| {
                b.fill(7);
                Some((addr(1), 4, None))
            });
        }
        tx.seal_all(seal);
        let segs: Vec<usize> = sent(&mut tx).iter().map(|(_, b, _)| b.len()).collect();
        assert_eq!(segs, vec![8, 8, 4]);
    }

    #[test]
    fn a_sent_batch_arrives_through_received() {
        let (a, b, to) = pair();
        let mut tx: Sending<u8> = Sending::new(0, 0, 64);
        for i in 0..4u8 {
            tx.append(16, |d| {
                d[..4].copy_from_slice(&[0xAA, i, i, i]);
                Some((to, 4, None))
            });
        }
        tx.seal_all(seal);
        tx.send_runs(|r, bytes| {
            a.send(r.dest, bytes, r.segment).unwrap();
        });
        let state = Mutex::new(Vec::new());
        let mut rx = Received::new(8);
        assert_eq!(recv_all(&mut rx, &b, &state, 4), 4);
        assert_eq!(*state.lock().unwrap(), vec![0, 1, 2, 3]);
    }
}
