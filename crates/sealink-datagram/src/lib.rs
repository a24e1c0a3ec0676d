//! sealink datagram mode: [`Node`] drives one sans-IO [`sealink_proto::Endpoint`] over a
//! batched UDP socket ([`sealink_udp::UdpIo`]) on a background thread: owner-authenticated
//! messages with urgency, piggybacking and per-channel statistics. The seals and opens run on
//! [`sealink_engine::Pipeline`] workers outside the endpoint's lock (see `node::path`).
#![forbid(unsafe_code)]

pub mod demo;
pub mod lines;
pub mod node;
mod signal;

pub use bytes::Bytes;
pub use node::source::{Outbox, Source, Supply};
pub use node::{
    Arrival, Delivery, Handoff, Node, NodeConfig, NodeError, NodeStats, OnArrival, PeerConfig,
    PeerRef, Queued,
};
pub use sealink_proto::channel::ChannelStats;
pub use sealink_proto::ratelimit::LimiterConfig;
pub use sealink_proto::{
    Config, Directory, HostKey, LocalOwner, MessageId, Messages, Outgoing, OwnerId, PeerId, Scope,
    Urgency,
};
pub use sealink_udp::UdpOptions;
