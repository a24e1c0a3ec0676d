//! Service-time profiles for the simulated hosts: what a datagram and a message cost on the
//! CPU and the wire, for paper 002's Sun 3/50s on a 10 Mb/s Ethernet ("1987") and for today's
//! machine ("today"). Each number says where it comes from.

use std::time::Duration;

use sealink_proto::Scope;
use sealink_proto::sim::ServiceModel;

/// Encryption scope E (Table 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope3 {
    /// NE: no encryption.
    None,
    /// PE: partial encryption; sealink's authenticate-only scope.
    Partial,
    /// FE: full encryption.
    Full,
}

impl Scope3 {
    pub const EVERY: [Scope3; 3] = [Scope3::None, Scope3::Partial, Scope3::Full];
    pub fn name(self) -> &'static str {
        match self {
            Scope3::None => "NE",
            Scope3::Partial => "PE",
            Scope3::Full => "FE",
        }
    }
    pub fn scope(self) -> Scope {
        match self {
            Scope3::None => Scope::None,
            Scope3::Partial => Scope::AuthOnly,
            Scope3::Full => Scope::Encrypt,
        }
    }
}

/// Encryption technology Y (Table 1): hardware single-key crypto, or a software routine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tech {
    /// HW: the DES chip (1987), the AES-GCM instructions (today).
    Hw,
    /// SW: DES in software (1987), 3DES-CBC in software (today), over the whole datagram.
    Sw,
}

impl Tech {
    pub fn name(self) -> &'static str {
        match self {
            Tech::Hw => "HW",
            Tech::Sw => "SW",
        }
    }
}

/// The machine being simulated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    pub name: &'static str,
    /// Wire bandwidth, bytes/s, and bytes added per datagram on it.
    pub bandwidth: f64,
    pub wire_overhead: usize,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Host CPU per datagram (each side), without cryptography.
    pub per_datagram: Duration,
    /// Host CPU per message (each side: hand-off, queueing, delivery).
    pub per_message: Duration,
    /// Host CPU per byte of datagram (each side), ns.
    pub per_byte_ns: f64,
    /// Cryptography per datagram when E is PE or FE (each side).
    pub crypto_fixed: Duration,
    /// Cryptography per byte, ns: authenticate only (PE) and full encryption (FE).
    pub pe_per_byte_ns: f64,
    pub fe_per_byte_ns: f64,
    /// Software crypto per byte of the whole datagram (Y = SW, scope PE or FE), ns.
    pub sw_per_byte_ns: f64,
    /// Host CPU to establish (and later delete) one secure channel, each side: the public-key
    /// work of a handshake. Only transport-level security (Table 4's TR) pays it per
    /// connection; SUB's one channel is in place before a run starts.
    pub establish: Duration,
}

impl Profile {
    /// Paper 002's setup. Wire: 10 Mb/s Ethernet (section 3), 58 bytes of Ethernet and IP
    /// header per datagram (IP fragments past the first are not charged: about 4 % at 64 KB).
    /// Host costs: per datagram 2.28 ms, per message 0.93 ms, per byte 0.15 us, the solution of
    /// three of the paper's throughputs taken as one-host bottlenecks at Table 3's mean ADP
    /// message sizes: ALL NE Q=OFF 344 kB/s (1166 B datagrams of one message), ALL NE Q=ON 760
    /// kB/s (6247 B, 5.36 messages), TCP PE Q=ON 180 kB/s (2104 B, 9.6 messages). The paper
    /// gives no CPU costs, so these are fitted, not measured; every other cell is a prediction.
    /// PE: 0.15 ms per datagram to put one sequence number through the DES chip (ALL's PE
    /// against NE in Table 8: 3.55 against 3.39 ms per 1166 B datagram). FE: the DES chip's
    /// 400 kB/s through its interface (section 5(a): "from 3.24 Mbytes/s ... to 400 Kbytes/s"),
    /// 2.5 us per byte on each side, not overlapped with the CPU [5]. Software DES (Y = SW):
    /// 18.7 us per byte of every datagram, fitted to Table 6's ALL SW throughput (50 kB/s at
    /// 6247 B datagrams); the paper states no routine speed, and only a routine that touches
    /// every byte (a DES checksum) explains how low Table 6's SW figures are under PE.
    pub const Y1987: Profile = Profile {
        name: "1987",
        bandwidth: 1.25e6,
        wire_overhead: 58,
        delay: Duration::from_micros(10),
        per_datagram: Duration::from_micros(2280),
        per_message: Duration::from_micros(930),
        per_byte_ns: 150.0,
        crypto_fixed: Duration::from_micros(150),
        pe_per_byte_ns: 0.0,
        fe_per_byte_ns: 2500.0,
        sw_per_byte_ns: 18_700.0,
        // Section 5(b): "each [establishment/deletion] costs about 1.75 s".
        establish: Duration::from_millis(1750),
    };

    /// Today's development VM (docs/RESULTS.md). Wire: a 10 Gb/s LAN (chosen; loopback has no
    /// wire), Ethernet + IPv4 + UDP headers 66 B, 20 us one way. Host: 0.3 us per datagram and
    /// 0.3 us per message on each side, from section 8b's "about 0.9 us of CPU" per datagram
    /// (seal, open, kernel) and "about 0.6 us" per message, split evenly between the sides with
    /// the 0.15 us of AEAD set apart; 0.1 ns per byte for one copy (about 10 GB/s; chosen).
    /// Crypto: `sealink-lab bench seal` in section 10a, AES-128-GCM on ring, seal + open: 1.589
    /// Gbit/s at 64 B and 25.237 Gbit/s at 16 KiB give 303 ns + 0.2985 ns/B per seal and open,
    /// so 0.15 us + 0.15 ns/B on each side for FE. PE (authenticate only: GHASH, no AES-CTR) is
    /// taken at half FE's per-byte cost; section 10a has no authenticate-only figure. Y = SW:
    /// 3DES-CBC through RustCrypto at 49.6 Mbit/s (section 4, `sealink-lab bench crypto`), 161 ns
    /// per byte of every datagram.
    pub const TODAY: Profile = Profile {
        name: "today",
        bandwidth: 1.25e9,
        wire_overhead: 66,
        delay: Duration::from_micros(20),
        per_datagram: Duration::from_nanos(300),
        per_message: Duration::from_nanos(300),
        per_byte_ns: 0.1,
        crypto_fixed: Duration::from_nanos(150),
        pe_per_byte_ns: 0.075,
        fe_per_byte_ns: 0.15,
        sw_per_byte_ns: 161.0,
        // Chosen, not measured here: a handshake's X25519 agreements and the owner's Ed25519
        // signature and check are tens of microseconds each on this class of machine.
        establish: Duration::from_micros(200),
    };

    pub fn by_name(name: &str) -> Option<Profile> {
        [Profile::Y1987, Profile::TODAY]
            .into_iter()
            .find(|p| p.name == name)
    }

    /// The simulator's service model for scope `e` with hardware crypto.
    pub fn service(&self, e: Scope3) -> ServiceModel {
        self.service_with(e, Tech::Hw)
    }

    /// The simulator's service model for scope `e` and technology `y`.
    pub fn service_with(&self, e: Scope3, y: Tech) -> ServiceModel {
        let (fixed, per_byte) = match (e, y) {
            (Scope3::None, _) => (Duration::ZERO, 0.0),
            (Scope3::Partial, Tech::Hw) => (self.crypto_fixed, self.pe_per_byte_ns),
            (Scope3::Full, Tech::Hw) => (self.crypto_fixed, self.fe_per_byte_ns),
            (_, Tech::Sw) => (self.crypto_fixed, self.sw_per_byte_ns),
        };
        ServiceModel {
            bandwidth: self.bandwidth,
            wire_overhead: self.wire_overhead,
            // One full datagram may wait for the wire besides the one on it, as a socket
            // buffer would hold; a sender faster than its wire then blocks (see `Pair`).
            tx_queue_bytes: 65_536,
            send_fixed: self.per_datagram + fixed,
            send_per_byte_ns: self.per_byte_ns + per_byte,
            recv_fixed: self.per_datagram + fixed,
            recv_per_byte_ns: self.per_byte_ns + per_byte,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_1987_fit_reproduces_its_three_anchors() {
        // Per-datagram time on one host, as the fit assumed: datagram + messages + bytes.
        let p = Profile::Y1987;
        let host = |e: Scope3, bytes: f64, msgs: f64| {
            let s = p.service(e);
            s.send_cost(bytes as usize).as_secs_f64() + msgs * p.per_message.as_secs_f64()
        };
        let kbs = |bytes: f64, secs: f64| bytes / secs / 1000.0;
        let all_off = kbs(1166.0, host(Scope3::None, 1166.0, 1.0));
        let all_on = kbs(6247.0, host(Scope3::None, 6247.0, 6247.0 / 1166.0));
        let tcp_on = kbs(2104.0, host(Scope3::Partial, 2104.0, 2104.0 / 219.0));
        for (got, want) in [(all_off, 344.0), (all_on, 760.0), (tcp_on, 180.0)] {
            assert!((got / want - 1.0).abs() < 0.03, "{got} against {want}");
        }
        // FE is bounded by the DES chip's 400 kB/s on each side.
        assert!(p.service(Scope3::Full).send_cost(65_000).as_secs_f64() > 65_000.0 / 400e3);
    }

    #[test]
    fn costs_grow_with_scope() {
        for p in [Profile::Y1987, Profile::TODAY] {
            let c: Vec<Duration> = Scope3::EVERY
                .iter()
                .map(|e| p.service(*e).send_cost(8192))
                .collect();
            assert!(c[0] < c[1] && c[1] < c[2], "{}: {c:?}", p.name);
        }
        for p in [Profile::Y1987, Profile::TODAY] {
            let hw = p.service_with(Scope3::Partial, Tech::Hw).send_cost(8192);
            let sw = p.service_with(Scope3::Partial, Tech::Sw).send_cost(8192);
            assert!(sw > 2 * hw, "{}: {sw:?} against {hw:?}", p.name);
            assert_eq!(
                p.service_with(Scope3::None, Tech::Sw),
                p.service(Scope3::None)
            );
        }
        assert!(Profile::by_name("1987").is_some() && Profile::by_name("1990").is_none());
    }
}
