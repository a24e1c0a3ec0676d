//! The layered pipeline: one thread per layer handing packets on (the lab's comparison point).
//!
//! Send: framing thread (serial step: counter, then the datagram header) -> crypto thread
//! (seal) -> caller. Receive: framing thread (parse and check the header) -> crypto thread
//! (open) -> caller (in-order replay accept and delivery). The bytes are the same as
//! [`seal_serial`](crate::seal_serial)'s.

use std::sync::mpsc;
use std::thread::JoinHandle;

use sealink_crypto::Scope;
use sealink_proto::DropReason;
use sealink_proto::wire::{self, HEADER_LEN, Header};

use crate::packet::{Channel, Op, Packet, PacketError};
use crate::{Batch, Engine};

/// One thread per layer; every channel goes through the same two threads.
#[derive(Debug)]
pub struct Layered {
    channels: Vec<Channel>,
    to_framing: Option<mpsc::Sender<Batch>>,
    done_rx: mpsc::Receiver<Batch>,
    threads: Vec<JoinHandle<()>>,
    /// Per channel, for each open batch in flight: restart the window before accepting it.
    restart: Vec<std::collections::VecDeque<bool>>,
    restart_next: Vec<bool>,
    in_flight: usize,
}

impl Layered {
    pub fn new(channels: Vec<Channel>) -> Self {
        let (to_framing, framing_rx) = mpsc::channel::<Batch>();
        let (to_crypto, crypto_rx) = mpsc::channel::<Batch>();
        let (done_tx, done_rx) = mpsc::channel::<Batch>();
        let keys: Vec<_> = channels.iter().map(|c| (c.clone(), c.receiver)).collect();
        let framing_keys = keys.clone();
        let framing = std::thread::spawn(move || {
            while let Ok(mut b) = framing_rx.recv() {
                let (ch, receiver) = &framing_keys[b.channel];
                for p in &mut b.packets {
                    match b.op {
                        Op::Seal => {
                            let hdr = Header::Data {
                                scope: ch.scope,
                                receiver: *receiver,
                                counter: p.counter,
                            };
                            match p.buf.get_mut(..HEADER_LEN).and_then(|h| h.try_into().ok()) {
                                Some(h) => wire::write_header(&hdr, h),
                                None => p.status = Err(PacketError::SealFailed),
                            }
                        }
                        Op::Open => {
                            if let Some(src) = &p.device {
                                if p.buf.len() < src.len() {
                                    p.buf.resize(src.len(), 0);
                                }
                                p.buf[..src.len()].copy_from_slice(src);
                                p.len = src.len();
                            }
                            p.status = check_header(ch, p).map_err(PacketError::from);
                        }
                    }
                }
                if to_crypto.send(b).is_err() {
                    return;
                }
            }
        });
        let crypto = std::thread::spawn(move || {
            while let Ok(mut b) = crypto_rx.recv() {
                let ch = &keys[b.channel].0;
                for p in &mut b.packets {
                    if p.status.is_err() {
                        continue;
                    }
                    let (scope, _, _) = match b.op {
                        Op::Seal => (ch.scope, 0, 0),
                        Op::Open => match sealink_proto::datapath::parse_data_header(&p.buf) {
                            Ok(h) => h,
                            Err(e) => {
                                p.status = Err(e.into());
                                continue;
                            }
                        },
                    };
                    let r = match b.op {
                        Op::Seal => ch
                            .tx
                            .seal_contiguous(p.counter, scope, &mut p.buf, HEADER_LEN, p.len)
                            .map(|n| HEADER_LEN + n)
                            .map_err(|_| PacketError::SealFailed),
                        Op::Open => ch
                            .rx
                            .open_contiguous(
                                p.counter,
                                scope,
                                &mut p.buf[..p.len],
                                HEADER_LEN,
                                p.len - HEADER_LEN,
                            )
                            .map_err(|_| PacketError::Dropped(DropReason::AuthFailed)),
                    };
                    match r {
                        Ok(n) => p.len = n,
                        Err(e) => p.status = Err(e),
                    }
                }
                if done_tx.send(b).is_err() {
                    return;
                }
            }
        });
        Layered {
            restart: vec![Default::default(); channels.len()],
            restart_next: vec![false; channels.len()],
            channels,
            to_framing: Some(to_framing),
            done_rx,
            threads: vec![framing, crypto],
            in_flight: 0,
        }
    }
}

fn check_header(ch: &Channel, p: &mut Packet) -> Result<(), DropReason> {
    let (scope, index, counter) =
        sealink_proto::datapath::parse_data_header(p.buf.get(..p.len).unwrap_or(&[]))?;
    if index != ch.receiver {
        return Err(DropReason::UnknownIndex);
    }
    if scope == Scope::None && !ch.allow_plaintext {
        return Err(DropReason::ScopeRefused);
    }
    p.counter = counter;
    Ok(())
}

impl Engine for Layered {
    fn submit(&mut self, op: Op, channel: usize, mut packets: Vec<Packet>) {
        if op == Op::Seal {
            let ch = &mut self.channels[channel];
            for p in &mut packets {
                p.counter = ch.take_counter();
                p.status = Ok(());
            }
        }
        if op == Op::Open {
            let r = std::mem::take(&mut self.restart_next[channel]);
            self.restart[channel].push_back(r);
        }
        self.in_flight += 1;
        if let Some(tx) = &self.to_framing {
            let _ = tx.send(Batch {
                channel,
                op,
                packets,
            });
        }
    }

    fn recv(&mut self) -> Option<Batch> {
        if self.in_flight == 0 {
            return None;
        }
        let mut b = self.done_rx.recv().ok()?;
        self.in_flight -= 1;
        if b.op == Op::Open {
            let ch = &mut self.channels[b.channel];
            if self.restart[b.channel].pop_front().unwrap_or(false) {
                ch.replay = Default::default();
            }
            for p in &mut b.packets {
                ch.accept(p);
            }
        }
        Some(b)
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }
}

impl Drop for Layered {
    fn drop(&mut self) {
        self.to_framing = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl crate::lab::LabEngine for Layered {
    fn restart_replay_window(&mut self, channel: usize) {
        self.restart_next[channel] = true;
    }
}
