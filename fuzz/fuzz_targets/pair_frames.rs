//! Pairing (`sealink_keys::pair`): whatever a peer sends, either side of the exchange ends with
//! an error and never panics; a pairing code that parses prints a text that parses back to it;
//! and a payload that decodes encodes back to the same bytes.
#![no_main]

use std::io::{self, Read, Write};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sealink_keys::pair::{Code, Payload, initiate, respond};

/// The peer: `input` is everything it sends; what this side writes is dropped.
struct Peer<'a> {
    input: &'a [u8],
}

impl Read for Peer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Peer<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// This side's payload: real keys, made once.
fn mine() -> &'static Payload {
    static MINE: OnceLock<Payload> = OnceLock::new();
    MINE.get_or_init(|| Payload {
        name: "ant".into(),
        owner_name: "alice".into(),
        host: sealink_crypto::kx::x25519_public_key(&[1; 32]).unwrap(),
        owner: sealink_crypto::sign::OwnerSigningKey::from_seed(&[1; 32])
            .unwrap()
            .public_key(),
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&what, rest)) = data.split_first() else {
        return;
    };
    match what % 4 {
        0 => {
            // Random frames cannot pass SPAKE2's confirmation: every run ends in an error.
            let code = Code::parse("7-guitar-ocean").unwrap();
            let r = respond(&mut Peer { input: rest }, &code, mine(), |_| Ok(()));
            assert!(r.is_err());
        }
        1 => {
            let code = Code::parse("7-guitar-ocean").unwrap();
            let r = initiate(&mut Peer { input: rest }, &code, mine(), |_| Ok(()));
            assert!(r.is_err());
        }
        2 => {
            if let Ok(p) = Payload::decode(rest) {
                assert_eq!(p.encode(), rest);
            }
        }
        _ => {
            let text = String::from_utf8_lossy(rest);
            if let Ok(c) = Code::parse(&text) {
                // The canonical text parses back to the same code (the input may differ from
                // it: case, blanks, a `+` before the number).
                assert_eq!(Code::parse(&c.text()).unwrap(), c);
            }
        }
    }
});
