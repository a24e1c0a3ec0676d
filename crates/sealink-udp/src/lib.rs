//! sealink's batched UDP socket: [`UdpIo`] (GSO/GRO and `recvmmsg` through quinn-udp) and its
//! receive buffers, [`GsoRuns`], which groups datagrams into runs for its GSO sends, and
//! [`Received`], the receive half both data paths drive (reserve under a lock as datagrams
//! arrive, open in place on any thread, finish in arrival order). Datagram mode's node
//! (`sealink-datagram`) and the tunnel (`sealink-tunnel`) both send and receive through it.

pub mod batch;
pub mod gso;
pub mod io;
pub mod sched;
pub mod steer;

pub use batch::{Received, Sending};
pub use gso::{GsoRuns, Run};
pub use io::{RecvBuffers, Segment, UdpIo, UdpOptions};
