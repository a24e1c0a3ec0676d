//! Receiving a batch's stripes: records opened in place, their data written where it belongs.

use std::io::{IoSlice, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sealink_proto::stream::record::RecordType;
use sealink_proto::stream::{Abort, End, Placement, SENDER_ABORT_SEQ, StreamError};

use super::batch::{Batch, Out, Reorder};
use super::lock;
use crate::conn::secs;
use crate::error::{IoContext, TransferError, is_timeout, socket_error};
use crate::files::write_all_at;
use crate::place::Slot;
use crate::records::RecordReader;

const MAX_REORDER_BYTES: usize = 256 << 20;

impl Batch<'_> {
    /// Receives one stripe to its end: read big chunks, open records where they lie, write
    /// their data straight into place.
    pub(super) fn stripe(
        &self,
        mut sock: &TcpStream,
        reader: &mut RecordReader,
        control: bool,
    ) -> Result<(), TransferError> {
        // Reads wake up every tick to check the whole session's progress: one stripe may
        // idle while others carry the data, and a batch may be complete.
        let tick =
            (self.timeouts.idle / 4).clamp(Duration::from_millis(5), Duration::from_millis(50));
        sock.set_read_timeout(Some(tick))
            .ctx(|| "setting a receive timeout".into())?;
        // The other stripes read without blocking and, when nothing is there, wait for data or
        // for the batch to be complete (seen by another stripe), whichever comes first: no
        // extra system call while data flows, no sleep to the next tick once the batch is in.
        if !control {
            sock.set_nonblocking(true)
                .ctx(|| "setting a stripe non-blocking".into())?;
        }
        let mut ended = false;
        let mut recs: Vec<(u64, usize, usize)> = Vec::new();
        loop {
            recs.clear();
            // The control stripe reads no further than a batch's end (the next batch's
            // manifest may follow it at once); after the last batch's, nothing may follow.
            while (!ended || self.last)
                && let Some(r) = reader.next_record(&self.keys.recv)?
            {
                let hdr = r.header;
                if ended {
                    return Err(StreamError::OutOfRange {
                        seq: hdr.seq,
                        why: "after the end record of the manifest's last batch",
                    }
                    .into());
                }
                match hdr.kind {
                    RecordType::Data => recs.push((hdr.seq, r.start, r.len)),
                    RecordType::End if control => {
                        let end = End::decode(reader.data(&r))?;
                        if hdr.seq != lock(&self.assembly).end_seq(&end) {
                            return Err(StreamError::OutOfRange {
                                seq: hdr.seq,
                                why: "end record out of place",
                            }
                            .into());
                        }
                        *lock(&self.end) = Some(end);
                        ended = true;
                    }
                    RecordType::Abort if control && hdr.seq == SENDER_ABORT_SEQ => {
                        let a = Abort::decode(reader.data(&r))?;
                        return Err(TransferError::SenderAborted(a.message));
                    }
                    _ => {
                        return Err(StreamError::MalformedHeader("unexpected record type").into());
                    }
                }
            }
            if !recs.is_empty() {
                self.deliver(reader.buffer(), &recs)?;
            }
            // Whichever stripe sees the batch complete (the control one, with the end
            // record, or one delivering the last data) wakes the others.
            // After another stripe failed, what this one already holds is still taken: its
            // reads no longer wait (the failing stripe shut them down), they return what is
            // queued and then nothing. So a failed transfer keeps, as resume state, every
            // record that reached this host, not only what each stripe had read by then.
            let complete = self.complete();
            if (ended && !self.last) || (!control && complete) {
                return Ok(());
            }
            let n = loop {
                match reader.fill(&mut sock) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) if is_timeout(&e) => {
                        if !control {
                            self.done.wait(sock, tick);
                        }
                        if self.failed.load(Ordering::Relaxed) || (!control && self.complete()) {
                            return Ok(());
                        }
                        // A stalled transfer still records what it holds, in case the
                        // receiver is killed before the sender comes back.
                        if self.resumable {
                            self.maybe_checkpoint()?;
                        }
                        if self.stalled() {
                            return Err(TransferError::TimedOut(format!(
                                "nothing received from the sender for {}",
                                secs(self.timeouts.idle)
                            )));
                        }
                    }
                    Err(e) => return Err(socket_error(e, "receiving", String::new)),
                }
            };
            if n == 0 {
                if self.failed.load(Ordering::Relaxed) {
                    return Ok(());
                }
                if reader.pending() != 0 {
                    return Err(TransferError::PeerClosed(
                        "in the middle of a record".into(),
                    ));
                }
                if control && !ended {
                    let got = lock(&self.assembly).bytes();
                    return Err(TransferError::PeerClosed(format!(
                        "after {got} bytes, before the authenticated end of the stream"
                    )));
                }
                return Ok(());
            }
            self.touch();
        }
    }

    /// Accepts a chunk's data records (each once) and writes them where they belong.
    pub(super) fn deliver(
        &self,
        buf: &[u8],
        recs: &[(u64, usize, usize)],
    ) -> Result<(), TransferError> {
        let writing = self.writes.read().unwrap_or_else(|p| p.into_inner());
        // Records up to the first refused one are accepted (and written below); the refusal
        // ends the session after that.
        let mut refused = None;
        let mut places = Vec::with_capacity(recs.len());
        {
            let mut a = lock(&self.assembly);
            for &(seq, _, len) in recs {
                match a.accept(seq, len) {
                    Ok(p) => places.push(p),
                    Err(e) => {
                        refused = Some(e);
                        break;
                    }
                }
            }
        }
        let recs = &recs[..places.len()];
        match &self.out {
            Out::Files(slots) => self.write_runs(slots, buf, recs, &places)?,
            Out::Stdout(r) => lock(r).write(buf, recs)?,
        }
        drop(writing);
        self.progress
            .add(recs.iter().map(|&(_, _, n)| n as u64).sum());
        if let Some(e) = refused {
            return Err(e.into());
        }
        self.touch();
        if self.resumable {
            self.maybe_checkpoint()?;
        }
        Ok(())
    }

    /// Writes accepted records (at `places`) into their files, one positional vectored write
    /// per run of records.
    fn write_runs(
        &self,
        slots: &[Slot],
        buf: &[u8],
        recs: &[(u64, usize, usize)],
        places: &[Placement],
    ) -> Result<(), TransferError> {
        // Whatever is accepted and not written by the end of this is noted, so no
        // checkpoint claims it.
        let mut i = 0;
        let not_written = |from: usize| {
            let mut u = lock(&self.unwritten);
            for p in &places[from..] {
                if let Some(x) = u.get_mut(p.file) {
                    *x = (*x).min(p.offset);
                }
            }
        };
        while i < recs.len() {
            // A run: consecutive records of one file at consecutive offsets.
            let (file, off) = (places[i].file, places[i].offset);
            let mut j = i + 1;
            let mut next = off + recs[i].2 as u64;
            while j < recs.len()
                && places[j].file == file
                && places[j].offset == next
                && j - i < 1024
            {
                next += recs[j].2 as u64;
                j += 1;
            }
            let mut iov: Vec<IoSlice<'_>> = recs[i..j]
                .iter()
                .map(|&(_, s, n)| IoSlice::new(&buf[s..s + n]))
                .collect();
            // Only files of known size have records; each has its part file (a lazy one is
            // created by its first record).
            let slot = slots.get(file);
            let made = match slot.map(Slot::make) {
                Some(Ok(p)) => p,
                Some(Err(e)) => {
                    not_written(i);
                    return Err(TransferError::Io {
                        context: format!(
                            "cannot create a file for {}",
                            slot.and_then(Slot::path)
                                .unwrap_or(Path::new("?"))
                                .display()
                        ),
                        source: e,
                    });
                }
                None => None,
            };
            let Some(p) = made else {
                not_written(i);
                return Err(StreamError::OutOfRange {
                    seq: recs[i].0,
                    why: "data for an entry that takes none",
                }
                .into());
            };
            if let Err(e) = write_all_at(&p.file, &mut iov, off) {
                not_written(i);
                return Err(TransferError::Io {
                    context: format!("cannot write {}", p.path.display()),
                    source: e,
                });
            }
            i = j;
        }
        Ok(())
    }
}

impl Reorder {
    /// Writes in-order records' data to standard output at once, and keeps the rest until its
    /// turn comes (bounded).
    fn write(&mut self, buf: &[u8], recs: &[(u64, usize, usize)]) -> Result<(), TransferError> {
        let r = self;
        for &(seq, s, n) in recs {
            let data = &buf[s..s + n];
            if seq == r.next {
                r.out
                    .write_all(data)
                    .ctx(|| "cannot write standard output".into())?;
                r.next += 1;
                while let Some(d) = r.pending.remove(&r.next) {
                    r.pending_bytes -= d.len();
                    r.out
                        .write_all(&d)
                        .ctx(|| "cannot write standard output".into())?;
                    r.next += 1;
                }
            } else {
                r.pending_bytes += n;
                if r.pending_bytes > MAX_REORDER_BYTES {
                    return Err(StreamError::OutOfRange {
                        seq,
                        why: "too far ahead of the output",
                    }
                    .into());
                }
                r.pending.insert(seq, data.to_vec());
            }
        }
        Ok(())
    }
}
