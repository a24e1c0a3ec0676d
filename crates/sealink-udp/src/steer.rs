//! Steering datagrams among the sockets of one `SO_REUSEPORT` group by a byte of their
//! payload, with a classic BPF program (`SO_ATTACH_REUSEPORT_CBPF`).
//!
//! Without it the kernel picks a group's socket by a hash of the addresses and ports, so all
//! of one peer's datagrams land on one socket, and one thread receives them however many
//! cores there are. sealink's tunnel numbers its data datagrams by lane (the sender's TUN
//! queue + 1, in the header's byte 3; `docs/PROTOCOL.md`), one lane per flow, so the program
//! here can spread one peer over every socket while each flow stays on one.
//!
//! The kernel runs the program on each datagram with the UDP payload at offset 0. For UDP
//! GRO it runs once per coalesced batch, on the first datagram's bytes: datagrams of one
//! 4-tuple that the NIC coalesced across lanes go together to the first one's socket. They
//! stay in order (one socket, one reader); a flow of a later lane may then reach two sockets.

use std::io;

use socket2::Socket;

// Classic BPF opcodes (linux/bpf_common.h): class | size or operation | source.
const BPF_LD_B_ABS: u16 = 0x10 | 0x20; // BPF_LD is 0
const BPF_JEQ_K: u16 = 0x05 | 0x10;
const BPF_SUB_K: u16 = 0x04 | 0x10;
const BPF_MOD_K: u16 = 0x04 | 0x90;
const BPF_RET_A: u16 = 0x06 | 0x10;
const BPF_RET_K: u16 = 0x06;
/// An index past any group: the kernel then falls back to its hash.
const FALL_BACK: u32 = u32::MAX;

/// The program for a group of `sockets` (at least 1): a datagram whose payload byte `offset`
/// is `n > 0` goes to socket `(n - 1) % sockets` (sockets are numbered in the order they
/// joined the group); one whose byte is 0 goes where the kernel's hash says. A datagram too
/// short to have the byte ends the program at the load, which returns 0: socket 0.
pub fn lane_program(offset: u32, sockets: u32) -> [(u16, u8, u8, u32); 6] {
    [
        (BPF_LD_B_ABS, 0, 0, offset),
        // 0: no lane; jump to the fall-back.
        (BPF_JEQ_K, 3, 0, 0),
        (BPF_SUB_K, 0, 0, 1),
        (BPF_MOD_K, 0, 0, sockets.max(1)),
        (BPF_RET_A, 0, 0, 0),
        (BPF_RET_K, 0, 0, FALL_BACK),
    ]
}

/// The socket [`lane_program`] picks for `datagram` in a group of `sockets`, worked out here:
/// `None` where the kernel's hash decides (lane 0). A reader that receives a datagram whose
/// socket this says is another one got it in a receive GRO batch led by another lane (see the
/// module's note): the tunnel counts those (`lane_strays`).
pub fn lane_socket(datagram: &[u8], offset: usize, sockets: usize) -> Option<usize> {
    match datagram.get(offset) {
        None => Some(0),
        Some(0) => None,
        Some(&lane) => Some((usize::from(lane) - 1) % sockets.max(1)),
    }
}

/// Attaches [`lane_program`] to the `SO_REUSEPORT` group `sock` belongs to (every socket of
/// the group, present and future, is steered by it).
pub fn attach_lane_program(sock: &Socket, offset: u32, sockets: usize) -> io::Result<()> {
    let sockets = u32::try_from(sockets)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "socket count"))?;
    let mut code: Vec<libc::sock_filter> = lane_program(offset, sockets)
        .iter()
        .map(|&(code, jt, jf, k)| libc::sock_filter { code, jt, jf, k })
        .collect();
    // The kernel copies the program during the call; `code` outlives it.
    let prog = libc::sock_fprog {
        len: code.len() as u16,
        filter: code.as_mut_ptr(),
    };
    nix::sys::socket::setsockopt(sock, nix::sys::socket::sockopt::AttachReusePortCbpf, &prog)
        .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_socket_mirrors_the_program() {
        assert_eq!(
            lane_socket(&[9, 9, 9, 0, 9], 3, 3),
            None,
            "lane 0: the hash"
        );
        assert_eq!(
            lane_socket(&[9, 9, 9], 3, 3),
            Some(0),
            "too short: the load fails"
        );
        let got: Vec<_> = (1..=7u8)
            .map(|lane| lane_socket(&[0, 0, 0, lane], 3, 3))
            .collect();
        assert_eq!(got, [0, 1, 2, 0, 1, 2, 0].map(Some));
        assert_eq!(lane_socket(&[0, 0, 0, 255], 3, 1), Some(0));
        assert_eq!(
            lane_socket(&[0, 0, 0, 5], 3, 0),
            Some(0),
            "no sockets read as one"
        );
    }
}
