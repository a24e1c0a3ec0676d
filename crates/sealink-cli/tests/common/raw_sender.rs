//! A stream sender of our own, built from the proto crate's handshake, record and body code,
//! for what `sealink send` never sends (huge announced sizes, tiny records, setuid modes,
//! escaping links).

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

/// A sender of our own, built from the proto crate's handshake, record and body code, for what
/// `sealink send` never sends (huge announced sizes, tiny records, setuid modes).
pub struct RawSender {
    pub sock: TcpStream,
    pub keys: sealink_proto::stream::SessionKeys,
    pub owner: sealink_crypto::sign::OwnerSigningKey,
    pub host: [u8; 32],
    pub peer: [u8; 32],
}

pub fn key_file(p: &Path) -> [u8; 32] {
    use base64::Engine as _;
    let t = fs::read_to_string(p).unwrap();
    let b64 = t.split_whitespace().nth(1).unwrap();
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap()
        .try_into()
        .unwrap()
}

impl RawSender {
    /// Connects to `to` as host `a` (its `host.key` and `owner.key` in `a`), trusting the
    /// receiver's host key in `b/host.key.pub`.
    pub fn connect(a: &Path, b: &Path, to: SocketAddr) -> Self {
        use sealink_proto::stream::handshake::{Initiator, RESPONSE_MESSAGE_LEN};
        let host = sealink_proto::HostKey::from_private(key_file(&a.join("host.key"))).unwrap();
        let peer = key_file(&b.join("host.key.pub"));
        let owner =
            sealink_crypto::sign::OwnerSigningKey::from_seed(&key_file(&a.join("owner.key")))
                .unwrap();
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let (init, msg) =
            Initiator::new(&host, &peer, sealink_crypto::SuiteId::Aes128Gcm, ts).unwrap();
        let mut sock = TcpStream::connect(to).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        sock.write_all(&sealink_proto::stream::handshake::INIT_PREAMBLE)
            .unwrap();
        sock.write_all(&msg).unwrap();
        let mut resp = [0u8; RESPONSE_MESSAGE_LEN];
        sock.read_exact(&mut resp).unwrap();
        let keys = init.finish(&resp).unwrap();
        RawSender {
            sock,
            keys,
            owner,
            host: *host.public(),
            peer,
        }
    }

    pub fn hello(&self, record_data: u32, files: Vec<sealink_proto::stream::FileEntry>) -> Vec<u8> {
        let intro = sealink_proto::stream::owner_intro(&self.keys.binding, &self.host, &self.peer);
        sealink_proto::stream::Hello {
            owner_public: self.owner.public_key(),
            owner_signature: self.owner.sign(&intro),
            record_data,
            stripes: 1,
            fresh: false,
            update: false,
            more: false,
            delete: false,
            files,
        }
        .encode()
    }

    pub fn write(&mut self, kind: sealink_proto::stream::RecordType, seq: u64, body: &[u8]) {
        use sealink_proto::stream::record;
        let mut buf = vec![0u8; record::wire_len(body.len())];
        buf[record::RECORD_HEADER_LEN..][..body.len()].copy_from_slice(body);
        let n = record::seal_record(
            &self.keys.send,
            &mut buf,
            kind,
            sealink_crypto::Scope::Encrypt,
            seq,
            body.len(),
        )
        .unwrap();
        self.sock.write_all(&buf[..n]).unwrap();
    }

    /// The receiver's next record: its type and body, or `None` if it closed instead.
    pub fn read(&mut self) -> Option<(sealink_proto::stream::RecordType, Vec<u8>)> {
        use sealink_proto::stream::record::{self, RECORD_HEADER_LEN, RecordHeader};
        let mut h = [0u8; RECORD_HEADER_LEN];
        self.sock.read_exact(&mut h).ok()?;
        let hdr = RecordHeader::parse(&h).unwrap();
        let mut buf = h.to_vec();
        buf.resize(hdr.record_len(), 0);
        self.sock.read_exact(&mut buf[RECORD_HEADER_LEN..]).ok()?;
        let n = record::open_record(&self.keys.recv, &hdr, &mut buf).unwrap();
        Some((hdr.kind, buf[RECORD_HEADER_LEN..][..n].to_vec()))
    }

    /// Sends a hello; returns the receiver's abort message, or `None` if it said ready.
    pub fn offer(
        &mut self,
        record_data: u32,
        files: Vec<sealink_proto::stream::FileEntry>,
    ) -> Option<String> {
        use sealink_proto::stream::{Abort, RecordType};
        let hello = self.hello(record_data, files);
        self.write(RecordType::Hello, 0, &hello);
        match self.read() {
            Some((RecordType::Ready, _)) => None,
            Some((RecordType::Abort, b)) => Some(Abort::decode(&b).unwrap().message),
            other => panic!("unexpected answer to the hello: {other:?}"),
        }
    }
}
