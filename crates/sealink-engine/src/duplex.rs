//! The work of a two-way data path: batches received (to open) and batches read for sending (to
//! seal) share one [`Pipeline`](crate::Pipeline), each kind with its own parallel step and
//! ordered release.

use crate::Work;

/// One kind of batch: its parallel step and its release.
pub trait Half: Send + 'static {
    /// What the release reads (the sockets, the core behind its lock).
    type Ctx: Send + Sync + 'static;
    /// Seal or open, on any thread, with no lock held.
    fn run(&mut self);
    /// In submission order within the batch's lane; hands the batch back to its reader.
    fn release(self: Box<Self>, ctx: &Self::Ctx);
}

/// A received batch or a batch to send, boxed so that the pipeline moves pointers.
#[derive(Debug)]
pub enum Duplex<R, T> {
    Rx(Box<R>),
    Tx(Box<T>),
}

impl<R: Half, T: Half<Ctx = R::Ctx>> Work for Duplex<R, T> {
    type Ctx = R::Ctx;
    fn run(&mut self, _: &R::Ctx) {
        match self {
            Duplex::Rx(b) => b.run(),
            Duplex::Tx(b) => b.run(),
        }
    }
    fn release(self, ctx: &R::Ctx) {
        match self {
            Duplex::Rx(b) => b.release(ctx),
            Duplex::Tx(b) => b.release(ctx),
        }
    }
}
