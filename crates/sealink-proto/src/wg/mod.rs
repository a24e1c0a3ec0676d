//! WireGuard's wire: the four messages' codec ([`message`]), transport data sealed and opened
//! in place ([`transport`]), and the whitepaper's timer constants. The handshake is [`crate::handshake::wg`]; sessions, the replay window and
//! cookies are the product's own ([`crate::session`], [`crate::replay`],
//! [`crate::handshake::cookie`]), run by the tunnel core on its WireGuard wire
//! ([`crate::tunnel::Wire::WireGuard`]).
//!
//! With the `reference-peer` feature (and in this crate's tests), `wg_reference::WgPeer` is a second,
//! independent WireGuard peer built for tests as an oracle: its own sessions and AEAD. No
//! product crate enables it.

pub mod message;
pub(crate) mod transport;

use std::time::Duration;

/// Whitepaper §6.1 constants. The tunnel core runs every timer they name
/// (`TunnelConfig::wireguard()`, `tunnel/wg.rs`).
pub const REKEY_AFTER_MESSAGES: u64 = 1 << 60;
pub const REJECT_AFTER_MESSAGES: u64 = u64::MAX - (1 << 13);
pub const REKEY_AFTER_TIME: Duration = Duration::from_secs(120);
pub const REJECT_AFTER_TIME: Duration = Duration::from_secs(180);
pub const REKEY_ATTEMPT_TIME: Duration = Duration::from_secs(90);
pub const REKEY_TIMEOUT: Duration = Duration::from_secs(5);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most a retry waits past REKEY_TIMEOUT (wireguard-go's `RekeyTimeoutJitterMaxMs`, the
/// kernel's `REKEY_TIMEOUT_JITTER_MAX_JIFFIES`: a third of a second).
pub const REKEY_TIMEOUT_JITTER_MAX: Duration = Duration::from_millis(333);

/// The length of the IP packet at the start of `plain` (IPv4 total length or IPv6 payload
/// length + 40), if it fits; the rest is padding.
pub fn inner_len(plain: &[u8]) -> Option<usize> {
    let n = match plain.first()? >> 4 {
        4 => usize::from(u16::from_be_bytes([*plain.get(2)?, *plain.get(3)?])),
        6 => 40 + usize::from(u16::from_be_bytes([*plain.get(4)?, *plain.get(5)?])),
        _ => return None,
    };
    let min = if plain[0] >> 4 == 4 { 20 } else { 40 };
    (n >= min && n <= plain.len()).then_some(n)
}
