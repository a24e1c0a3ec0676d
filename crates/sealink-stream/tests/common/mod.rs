//! Helpers shared by the receiver's integration tests (and the CLI's, which include this file).
#![allow(dead_code)]

use std::io::Read;
use std::net::TcpStream;
use std::time::Duration;

/// Whether the other end has closed `s` (end of stream or reset), waiting at most `wait` for a
/// byte or the close.
pub fn closed_within(mut s: &TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    match s.read(&mut [0u8; 1]) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}
