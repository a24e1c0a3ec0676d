//! sealink datagram mode over UDP: [`UdpIo`] (batched UDP with GSO/GRO through quinn-udp) and
//! [`Node`], which drives one sans-IO [`sealink_proto::Endpoint`] over a socket on a background
//! thread: owner-authenticated messages with urgency, piggybacking and per-channel statistics.

pub mod io;
pub mod node;
mod node_path;

pub use io::{RecvBuffers, Segment, UdpIo, UdpOptions};
pub use node::{
    Delivery, Node, NodeConfig, NodeError, NodeStats, Outgoing, PeerConfig, PeerRef, Queued,
};
pub use sealink_proto::channel::ChannelStats;
pub use sealink_proto::ratelimit::LimiterConfig;
pub use sealink_proto::{
    Config, Directory, HostKey, LocalOwner, MessageId, OwnerId, PeerId, Scope, Urgency,
};
