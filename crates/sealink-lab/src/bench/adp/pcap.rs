//! `--pcap FILE`: a real packet capture (pcap or pcapng, told apart by their magic numbers and
//! parsed by the `pcap-file` crate from memory) as a message trace.
//!
//! Each IPv4 or IPv6 packet carrying a UDP or TCP payload becomes one message: its size is the
//! payload length the IP and UDP/TCP headers state (so a capture cut short by its snap length
//! still gives the sizes that crossed the wire), capped at [`MAX_SIZE`]; its arrival time is
//! the packet's timestamp relative to the first message's. Packets without a payload (TCP
//! acknowledgements alone), non-first IPv4 fragments, other protocols and IPv6 extension
//! headers are skipped and counted. Link types: Ethernet (with 802.1Q tags), raw IP, IPv4,
//! IPv6, Linux cooked (SLL).
//!
//! Flows (5-tuples) map to the paper's protocol streams: port 2049 (NFS) to NFS, other TCP to
//! TCP, other UDP to ND (the remaining stream; ND itself, Sun's Network Disk, is extinct). A
//! capture carries no priority marks, so no message is low priority: policies U2 and U3 see
//! every message as a candidate.
//!
//! Bad input (unknown magic, a truncated or malformed block, an unsupported link type, no
//! payload at all, a file past [`MAX_CAPTURE_BYTES`]) is a [`PcapError`], never a panic
//! (fuzz/fuzz_targets/pcap_import.rs and a proptest check this).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{DataLink, TsResolution};

use super::trace::{MAX_SIZE, Msg, Proto, Trace, TraceKind};

/// The largest capture read (it is parsed from memory).
pub const MAX_CAPTURE_BYTES: u64 = 256 << 20;

/// Why a capture could not be turned into a trace.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("cannot read the capture")]
    Read(#[source] std::io::Error),
    #[error("the capture has {0} bytes; at most {MAX_CAPTURE_BYTES} are read")]
    TooLarge(u64),
    #[error("not a pcap or pcapng capture (magic {0:02x?})")]
    UnknownFormat([u8; 4]),
    #[error("malformed capture at byte {offset}")]
    Malformed {
        offset: usize,
        #[source]
        source: pcap_file::PcapError,
    },
    #[error(
        "malformed capture at byte {offset}: a packet record's length or timestamp is out of range"
    )]
    BadRecord { offset: usize },
    #[error("packet of interface {0}, which the capture does not describe")]
    NoInterface(u32),
    #[error("unsupported link type {0:?} (Ethernet, raw IP and Linux cooked are read)")]
    LinkType(DataLink),
    #[error("no UDP or TCP packet with a payload in the capture ({skipped} packets skipped)")]
    Empty { skipped: usize },
}

/// What the import kept and skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    pub trace: Trace,
    pub packets: usize,
    /// Packets that gave no message (no payload, not UDP/TCP, fragments, unreadable headers).
    pub skipped: usize,
    pub flows: usize,
    /// Messages past the `limit` of [`import`], left out.
    pub left_out: usize,
}

/// Reads and imports the capture at `path`, keeping the first `limit` messages.
pub fn read(path: &Path, limit: usize) -> Result<Imported, PcapError> {
    let len = std::fs::metadata(path).map_err(PcapError::Read)?.len();
    if len > MAX_CAPTURE_BYTES {
        return Err(PcapError::TooLarge(len));
    }
    import(&std::fs::read(path).map_err(PcapError::Read)?, limit)
}

/// Imports a capture held in memory, keeping the first `limit` messages (by time).
pub fn import(bytes: &[u8], limit: usize) -> Result<Imported, PcapError> {
    let mut magic = [0u8; 4];
    let n = bytes.len().min(4);
    magic[..n].copy_from_slice(&bytes[..n]);
    let mut acc = Acc::default();
    match magic {
        [0xa1, 0xb2, 0xc3, 0xd4]
        | [0xd4, 0xc3, 0xb2, 0xa1]
        | [0xa1, 0xb2, 0x3c, 0x4d]
        | [0x4d, 0x3c, 0xb2, 0xa1] => pcap(bytes, &mut acc)?,
        [0x0a, 0x0d, 0x0d, 0x0a] => pcapng(bytes, &mut acc)?,
        _ => return Err(PcapError::UnknownFormat(magic)),
    }
    acc.finish(limit)
}

fn malformed(bytes: &[u8], rest: &[u8]) -> impl FnOnce(pcap_file::PcapError) -> PcapError {
    let offset = bytes.len() - rest.len();
    move |source| PcapError::Malformed { offset, source }
}

fn pcap(bytes: &[u8], acc: &mut Acc) -> Result<(), PcapError> {
    let (mut rest, parser) = PcapParser::new(bytes).map_err(malformed(bytes, bytes))?;
    let header = parser.header();
    let (link, snaplen) = (header.datalink, header.snaplen);
    let frac = match header.ts_resolution {
        TsResolution::MicroSecond => 1e6,
        TsResolution::NanoSecond => 1e9,
    };
    while !rest.is_empty() {
        // The raw record, checked here: pcap-file's `next_packet` refuses a packet longer on
        // the wire than the snap length (`orig_len > snap_len`), which is every packet that
        // `tcpdump -s N` cut short, the captures this import is meant for.
        let (next, p) = parser
            .next_raw_packet(rest)
            .map_err(malformed(bytes, rest))?;
        if p.incl_len > snaplen.max(p.orig_len) || f64::from(p.ts_frac) >= frac {
            return Err(PcapError::BadRecord {
                offset: bytes.len() - rest.len(),
            });
        }
        let at = f64::from(p.ts_sec) + f64::from(p.ts_frac) / frac;
        acc.packet(link, at, &p.data)?;
        rest = next;
    }
    Ok(())
}

fn pcapng(bytes: &[u8], acc: &mut Acc) -> Result<(), PcapError> {
    let (mut rest, mut parser) = PcapNgParser::new(bytes).map_err(malformed(bytes, bytes))?;
    while !rest.is_empty() {
        let (next, block) = parser.next_block(rest).map_err(malformed(bytes, rest))?;
        if next.len() >= rest.len() {
            // A block that consumes nothing would loop forever.
            return Err(PcapError::Malformed {
                offset: bytes.len() - rest.len(),
                source: pcap_file::PcapError::InvalidField("empty block"),
            });
        }
        match block {
            Block::EnhancedPacket(p) => {
                let link = parser
                    .interfaces()
                    .get(p.interface_id as usize)
                    .map(|i| i.linktype)
                    .ok_or(PcapError::NoInterface(p.interface_id))?;
                acc.packet(link, p.timestamp.as_secs_f64(), &p.data)?;
            }
            // No timestamp: a simple packet is counted but gives no arrival.
            Block::SimplePacket(_) => acc.skipped += 1,
            _ => {}
        }
        rest = next;
    }
    Ok(())
}

/// A flow: addresses, IP protocol, ports.
type Flow = (IpAddr, IpAddr, u8, u16, u16);

#[derive(Default)]
struct Acc {
    msgs: Vec<Msg>,
    packets: usize,
    skipped: usize,
    flows: HashMap<Flow, ()>,
}

impl Acc {
    fn packet(&mut self, link: DataLink, at: f64, frame: &[u8]) -> Result<(), PcapError> {
        self.packets += 1;
        let ip = match link {
            DataLink::ETHERNET => ethernet(frame),
            DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Some(frame),
            // Linux cooked capture: a 16-byte header ending in the EtherType.
            DataLink::LINUX_SLL => frame.get(16..),
            other => return Err(PcapError::LinkType(other)),
        };
        match ip.and_then(payload) {
            Some((flow, size)) if size > 0 && at.is_finite() => {
                let proto = match flow {
                    (_, _, _, 2049, _) | (_, _, _, _, 2049) => Proto::Nfs,
                    (_, _, TCP, _, _) => Proto::Tcp,
                    _ => Proto::Nd,
                };
                self.flows.insert(flow, ());
                self.msgs.push(Msg {
                    at,
                    size: size.min(MAX_SIZE),
                    proto,
                    low_priority: false,
                });
            }
            _ => self.skipped += 1,
        }
        Ok(())
    }

    fn finish(mut self, limit: usize) -> Result<Imported, PcapError> {
        if self.msgs.is_empty() {
            return Err(PcapError::Empty {
                skipped: self.skipped,
            });
        }
        // Captures are in capture order, which is not always time order.
        self.msgs.sort_by(|a, b| a.at.total_cmp(&b.at));
        let left_out = self.msgs.len().saturating_sub(limit);
        self.msgs.truncate(limit);
        let first = self.msgs.first().map_or(0.0, |m| m.at);
        for m in &mut self.msgs {
            m.at -= first;
        }
        Ok(Imported {
            trace: Trace {
                kind: TraceKind::All,
                msgs: self.msgs,
            },
            packets: self.packets,
            skipped: self.skipped,
            flows: self.flows.len(),
            left_out,
        })
    }
}

/// IP protocol numbers.
pub const TCP: u8 = 6;
pub const UDP: u8 = 17;

/// The IP packet in an Ethernet frame (skipping 802.1Q tags), if it is IPv4 or IPv6.
fn ethernet(frame: &[u8]) -> Option<&[u8]> {
    let mut at = 12;
    loop {
        let ty = u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]);
        match ty {
            0x8100 | 0x88a8 => at += 4,
            0x0800 | 0x86dd => return frame.get(at + 2..),
            _ => return None,
        }
    }
}

fn be16(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]))
}

/// The flow and payload length of an IP packet carrying UDP or TCP, from its headers.
fn payload(ip: &[u8]) -> Option<(Flow, usize)> {
    let (src, dst, proto, transport, ip_payload) = match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip.first()? & 0x0f) * 4;
            let total = usize::from(be16(ip, 2)?);
            // Non-first fragments carry no transport header.
            if be16(ip, 6)? & 0x1fff != 0 || ihl < 20 || total < ihl {
                return None;
            }
            let a: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
            let b: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
            (a.into(), b.into(), *ip.get(9)?, ip.get(ihl..)?, total - ihl)
        }
        6 => {
            let len = usize::from(be16(ip, 4)?);
            let a: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
            let b: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            (a.into(), b.into(), *ip.get(6)?, ip.get(40..)?, len)
        }
        _ => return None,
    };
    let (sport, dport) = (be16(transport, 0)?, be16(transport, 2)?);
    let size = match proto {
        UDP => usize::from(be16(transport, 4)?).checked_sub(8)?,
        TCP => {
            let off = usize::from(transport.get(12)? >> 4) * 4;
            ip_payload.checked_sub(off.max(20))?
        }
        _ => return None,
    };
    Some(((src, dst, proto, sport, dport), size))
}

/// Synthesized captures, for tests: frames built by hand, written by `pcap-file`'s writer.
pub mod synth {
    use std::time::Duration;

    use pcap_file::pcap::{PcapPacket, PcapWriter};

    pub use super::{TCP, UDP};

    /// An Ethernet/IPv4 frame carrying UDP or TCP with `len` (below 65,000) payload bytes.
    pub fn frame(proto: u8, sport: u16, dport: u16, len: usize) -> Vec<u8> {
        let th = if proto == UDP { 8 } else { 20 };
        let total = 20 + th + len;
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        f.extend(ip);
        f.extend(sport.to_be_bytes());
        f.extend(dport.to_be_bytes());
        if proto == UDP {
            f.extend(((8 + len) as u16).to_be_bytes());
            f.extend([0, 0]);
        } else {
            f.extend([0u8; 8]);
            f.extend([5 << 4, 0x18]);
            f.extend([0u8; 6]);
        }
        f.extend(std::iter::repeat_n(0xab, len));
        f
    }

    /// A pcap capture of `frames` at the given times (seconds).
    pub fn capture(frames: &[(f64, Vec<u8>)]) -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new()).expect("writing to memory");
        for (t, f) in frames {
            let p = PcapPacket::new(Duration::from_secs_f64(*t), f.len() as u32, f);
            w.write_packet(&p).expect("writing to memory");
        }
        w.into_writer()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::synth::{capture, frame};
    use super::*;

    fn sample() -> Vec<u8> {
        capture(&[
            (100.0, frame(TCP, 40_000, 22, 1)),
            (100.002, frame(TCP, 22, 40_000, 0)), // a bare acknowledgement
            (100.001, frame(UDP, 1023, 2049, 8300)),
            (100.010, frame(UDP, 5353, 5353, 40)),
            (100.020, frame(TCP, 40_000, 22, 700)),
        ])
    }

    #[test]
    fn udp_and_tcp_payloads_become_messages_by_flow() {
        let bytes = sample();
        assert!(bytes.len() < 16 * 1024);
        let got = import(&bytes, 100).unwrap();
        let m = &got.trace.msgs;
        assert_eq!(
            (got.packets, got.skipped, got.flows, got.left_out),
            (5, 1, 3, 0)
        );
        let sizes: Vec<(usize, Proto)> = m.iter().map(|m| (m.size, m.proto)).collect();
        assert_eq!(
            sizes,
            [
                (1, Proto::Tcp),
                (MAX_SIZE, Proto::Nfs),
                (40, Proto::Nd),
                (700, Proto::Tcp)
            ]
        );
        // Sorted by time, from the first message.
        assert_eq!(m[0].at, 0.0);
        assert!(
            (m[1].at - 0.001).abs() < 1e-6 && (m[3].at - 0.020).abs() < 1e-6,
            "{m:?}"
        );
        let two = import(&bytes, 2).unwrap();
        assert_eq!((two.trace.msgs.len(), two.left_out), (2, 2));
    }

    #[test]
    fn truncated_and_foreign_captures_are_typed_errors() {
        let bytes = sample();
        assert!(matches!(
            import(&bytes[..bytes.len() - 3], 100),
            Err(PcapError::Malformed { .. })
        ));
        assert!(matches!(
            import(&bytes[..10], 100),
            Err(PcapError::Malformed { .. })
        ));
        assert!(matches!(
            import(b"GIF89a", 100),
            Err(PcapError::UnknownFormat(_))
        ));
        assert!(matches!(import(&[], 100), Err(PcapError::UnknownFormat(_))));
        let acks = capture(&[(1.0, frame(TCP, 1, 2, 0))]);
        assert!(matches!(
            import(&acks, 100),
            Err(PcapError::Empty { skipped: 1 })
        ));
    }

    /// `tcpdump -s 128`: each record keeps 128 bytes of a longer packet (orig_len above the snap
    /// length); the sizes still come from the headers.
    #[test]
    fn packets_cut_short_by_the_snap_length_are_read() {
        let long = frame(TCP, 40_000, 80, 1400);
        let mut w = pcap_file::pcap::PcapWriter::with_header(
            Vec::new(),
            pcap_file::pcap::PcapHeader {
                snaplen: 128,
                ..Default::default()
            },
        )
        .unwrap();
        for (k, f) in [frame(UDP, 5000, 53, 40), long.clone()].iter().enumerate() {
            let kept = &f[..f.len().min(128)];
            let p = pcap_file::pcap::PcapPacket::new(
                Duration::from_millis(10 * k as u64),
                f.len() as u32,
                kept,
            );
            w.write_packet(&p).unwrap();
        }
        let got = import(&w.into_writer(), 100).unwrap();
        let sizes: Vec<usize> = got.trace.msgs.iter().map(|m| m.size).collect();
        assert_eq!(sizes, vec![40, 1400]);
        assert!((got.trace.msgs[1].at - 0.010).abs() < 1e-9);
    }

    #[test]
    fn pcapng_captures_are_read() {
        use pcap_file::pcapng::PcapNgWriter;
        use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
        use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
        let mut w = PcapNgWriter::new(Vec::new()).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0xffff,
            options: vec![],
        })
        .unwrap();
        for (i, len) in [10usize, 20].into_iter().enumerate() {
            let f = frame(UDP, 9, 9, len);
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::from_millis(5 + i as u64),
                original_len: f.len() as u32,
                data: f.into(),
                options: vec![],
            })
            .unwrap();
        }
        let got = import(&w.into_inner(), 10).unwrap();
        let sizes: Vec<usize> = got.trace.msgs.iter().map(|m| m.size).collect();
        assert_eq!(sizes, [10, 20]);
        assert!((got.trace.msgs[1].at - 0.001).abs() < 1e-6);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..600),
                                       kind in 0u8..3) {
            // Mostly behind a valid magic number, so the parsers see the bytes.
            match kind {
                0 => bytes.splice(0..0, [0xd4, 0xc3, 0xb2, 0xa1]).for_each(drop),
                1 => bytes.splice(0..0, [0x0a, 0x0d, 0x0d, 0x0a]).for_each(drop),
                _ => {}
            }
            let _ = import(&bytes, 1000);
        }

        #[test]
        fn mutated_captures_never_panic(i in 0usize..4096, x in any::<u8>(), cut in 0usize..4096) {
            let mut bytes = sample();
            let n = bytes.len();
            bytes[i % n] ^= x;
            bytes.truncate(n - cut % n);
            let _ = import(&bytes, 1000);
        }
    }
}
