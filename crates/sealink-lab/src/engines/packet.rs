//! Channels, packets and the per-packet work (the single-threaded reference path).

use std::sync::Arc;

use sealink_crypto::{PacketKey, Scope};
use sealink_proto::DropReason;
use sealink_proto::datapath;
use sealink_proto::replay::{ReplayVerdict, ReplayWindow};
use sealink_proto::wire::HEADER_LEN;

/// Bytes of header room in front of every packet's body.
pub const HEADER_ROOM: usize = HEADER_LEN;

/// Seal (send side) or open (receive side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Seal,
    Open,
}

/// One channel's data-path state: keys, receiver index, next send counter, receive window.
#[derive(Debug, Clone)]
pub struct Channel {
    pub tx: Arc<PacketKey>,
    pub rx: Arc<PacketKey>,
    /// Receiver index written into sealed headers and expected in opened ones.
    pub receiver: u32,
    /// Scope of sealed packets.
    pub scope: Scope,
    /// Accept scope "none" on receive (insecure lab opt-in).
    pub allow_plaintext: bool,
    pub next_counter: u64,
    pub replay: ReplayWindow,
    /// Extra time each packet's serial step takes (`bench stacks --serial-ns`): a busy wait in
    /// [`Channel::take_counter`] and [`Channel::accept`], under the channel's lock where the
    /// engine takes one, standing in for paper 000's locked TCP/IP processing. Zero by default.
    pub serial_spin: std::time::Duration,
}

impl Channel {
    pub fn new(tx: Arc<PacketKey>, rx: Arc<PacketKey>, receiver: u32, scope: Scope) -> Self {
        Channel {
            tx,
            rx,
            receiver,
            scope,
            allow_plaintext: false,
            next_counter: 0,
            replay: ReplayWindow::new(),
            serial_spin: std::time::Duration::ZERO,
        }
    }
    /// Makes each packet's serial step take `ns` nanoseconds more (see `serial_spin`).
    pub fn with_serial_ns(mut self, ns: u64) -> Self {
        self.serial_spin = std::time::Duration::from_nanos(ns);
        self
    }
    /// The busy wait of `serial_spin`.
    fn spin(&self) {
        if self.serial_spin.is_zero() {
            return;
        }
        let t = std::time::Instant::now();
        while t.elapsed() < self.serial_spin {
            std::hint::spin_loop();
        }
    }
    /// Accepts scope "none" on receive (the lab's baseline stack only).
    pub fn with_insecure_plaintext(mut self, allow: bool) -> Self {
        self.allow_plaintext = allow;
        self
    }
    /// The serial step of the send side: the next counter.
    pub fn take_counter(&mut self) -> u64 {
        self.spin();
        let c = self.next_counter;
        self.next_counter += 1;
        c
    }
    /// The serial step of the receive side, after authentication and in order: records the
    /// counter in the replay window or refuses the packet.
    pub fn accept(&mut self, p: &mut Packet) {
        self.spin();
        if p.status.is_ok() {
            match self.replay.accept(p.counter) {
                ReplayVerdict::Fresh => {}
                ReplayVerdict::Replayed => p.status = Err(DropReason::Replayed.into()),
                ReplayVerdict::TooOld => p.status = Err(DropReason::TooOld.into()),
            }
        }
    }
}

/// A packet laid out as its datagram: `HEADER_ROOM` bytes of header, the body, room for the tag.
///
/// * before sealing, `len` is the body length (body at `buf[HEADER_ROOM..HEADER_ROOM + len]`);
///   after sealing, `len` is the datagram length (`buf[..len]` is what goes on the wire);
/// * before opening, `len` is the datagram length; after opening, `len` is the plaintext
///   length (at `buf[HEADER_ROOM..HEADER_ROOM + len]`) and `counter` the datagram's counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub buf: Vec<u8>,
    pub len: usize,
    pub counter: u64,
    pub status: Result<(), PacketError>,
    /// In-memory device only ([`super::from_device`]): a sealed datagram the worker first copies
    /// into `buf`.
    pub(crate) device: Option<Arc<[u8]>>,
}

impl Packet {
    /// A packet over `buf` with `len` (see the type's documentation for what `len` means).
    pub fn new(buf: Vec<u8>, len: usize) -> Self {
        Packet {
            buf,
            len,
            counter: 0,
            status: Ok(()),
            device: None,
        }
    }
    /// A packet to seal carrying `body`, with room for `overhead` bytes of tag/padding.
    pub fn with_body(body: &[u8], overhead: usize) -> Self {
        let mut buf = vec![0u8; HEADER_ROOM + body.len() + overhead];
        buf[HEADER_ROOM..HEADER_ROOM + body.len()].copy_from_slice(body);
        Packet {
            buf,
            len: body.len(),
            counter: 0,
            status: Ok(()),
            device: None,
        }
    }
    /// A received datagram to open.
    pub fn datagram(bytes: &[u8]) -> Self {
        Packet {
            buf: bytes.to_vec(),
            len: bytes.len(),
            counter: 0,
            status: Ok(()),
            device: None,
        }
    }
    /// The sealed datagram (after a successful seal).
    pub fn wire(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    /// The plaintext body (after a successful open).
    pub fn body(&self) -> &[u8] {
        &self.buf[HEADER_ROOM..HEADER_ROOM + self.len]
    }
}

/// Why a packet did not come through the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketError {
    /// Dropped as the receive side drops a datagram from the network.
    Dropped(DropReason),
    /// Sealing failed locally (a buffer too small, a key refused): never a network drop.
    SealFailed,
}

impl From<DropReason> for PacketError {
    fn from(r: DropReason) -> Self {
        PacketError::Dropped(r)
    }
}

impl PacketError {
    /// A short stable name: the drop reason's, or `seal-failed`.
    pub fn name(self) -> &'static str {
        match self {
            PacketError::Dropped(r) => r.name(),
            PacketError::SealFailed => "seal-failed",
        }
    }
}

/// Seals one packet whose counter is already assigned (the parallel part of the send side).
pub fn seal_one(key: &PacketKey, receiver: u32, scope: Scope, p: &mut Packet) {
    match datapath::seal_datagram(key, receiver, p.counter, scope, &mut p.buf, p.len, 0) {
        Ok(n) => {
            p.len = n;
            p.status = Ok(());
        }
        Err(_) => p.status = Err(PacketError::SealFailed),
    }
}

/// Opens one datagram without touching any replay window (the parallel part of the receive
/// side): parse the header, check the receiver index and scope, authenticate and decrypt.
/// The caller must then [`Channel::accept`] the packets serially, in order.
pub fn open_one(key: &PacketKey, receiver: u32, allow_plaintext: bool, p: &mut Packet) {
    if let Some(src) = &p.device {
        if p.buf.len() < src.len() {
            p.buf.resize(src.len(), 0);
        }
        p.buf[..src.len()].copy_from_slice(src);
        p.len = src.len();
    }
    p.status = open_inner(key, receiver, allow_plaintext, p).map_err(PacketError::from);
}

fn open_inner(
    key: &PacketKey,
    receiver: u32,
    allow_plaintext: bool,
    p: &mut Packet,
) -> Result<(), DropReason> {
    let dg = p.buf.get_mut(..p.len).ok_or(DropReason::MalformedHeader)?;
    let (scope, index, counter) = datapath::parse_data_header(dg)?;
    if index != receiver {
        return Err(DropReason::UnknownIndex);
    }
    p.counter = counter;
    let body = datapath::open_in_place(key, scope, counter, allow_plaintext, dg)?;
    p.len = body.len();
    Ok(())
}

/// The single-threaded reference of the send side: counters in order, then seal.
pub fn seal_serial(ch: &mut Channel, packets: &mut [Packet]) {
    for p in packets {
        p.counter = ch.take_counter();
        seal_one(&ch.tx, ch.receiver, ch.scope, p);
    }
}

/// The single-threaded reference of the receive side: open, then the window checked and the
/// counter recorded by `accept`, after authentication.
pub fn open_serial(ch: &mut Channel, packets: &mut [Packet]) {
    for p in packets {
        open_one(&ch.rx, ch.receiver, ch.allow_plaintext, p);
        ch.accept(p);
    }
}
