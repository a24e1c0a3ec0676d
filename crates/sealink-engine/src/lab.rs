//! Hooks for the lab's in-memory drivers only, kept out of the engines' ordinary interface:
//! they break the protocol's guarantees on purpose (a replay window restarted under the same
//! key, a receive "DMA" copy from a pool of sealed datagrams) so that a bench can open the same
//! packets again and again. Never use them on a real channel.

use std::sync::Arc;

use crate::{Engine, Packet};

/// An engine the lab can drive with replayed pools.
pub trait LabEngine: Engine {
    /// The next open batch submitted for `channel` starts from an empty replay window, as if the
    /// sender had restarted its counters under the same key.
    fn restart_replay_window(&mut self, channel: usize);
}

/// A receive slot that the worker first fills by copying `src` (the in-memory device's receive
/// DMA), so that a pool of sealed datagrams can be opened repeatedly without skipping work.
pub fn from_device(src: Arc<[u8]>) -> Packet {
    let mut p = Packet::new(vec![0; src.len()], 0);
    p.device = Some(src);
    p
}

/// Points an existing packet at a new device datagram (see [`from_device`]).
pub fn set_device(p: &mut Packet, src: Arc<[u8]>) {
    p.device = Some(src);
}
