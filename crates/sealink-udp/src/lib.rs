//! sealink's batched UDP socket: [`UdpIo`] (GSO/GRO and `recvmmsg` through quinn-udp) and its
//! receive buffers. Datagram mode's node (`sealink-datagram`) and the tunnel (`sealink-tunnel`)
//! both send and receive through it.

pub mod io;

pub use io::{RecvBuffers, Segment, UdpIo, UdpOptions};
