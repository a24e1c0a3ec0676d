//! sealink's batched UDP socket: [`UdpIo`] (GSO/GRO and `recvmmsg` through quinn-udp) and its
//! receive buffers, and [`GsoRuns`], which groups datagrams into runs for its GSO sends. Datagram mode's node (`sealink-datagram`) and the tunnel (`sealink-tunnel`)
//! both send and receive through it.

pub mod gso;
pub mod io;

pub use gso::{GsoRuns, Run};
pub use io::{RecvBuffers, Segment, UdpIo, UdpOptions};
