//! WireGuard's UAPI (issue 33): any bytes on the socket are parsed without a panic; a request
//! refused has an errno; a `set` that parses names only 32-byte keys; the end of a request is
//! found or the request is too long.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sealink_proto::tunnel::uapi::{self, Request};

fuzz_target!(|data: &[u8]| {
    match uapi::request_end(data) {
        Ok(Some(end)) => assert!(end <= data.len() && data[..end].ends_with(b"\n\n")),
        Ok(None) => assert!(data.len() <= uapi::MAX_REQUEST),
        Err(_) => assert!(data.len() > uapi::MAX_REQUEST),
    }
    match uapi::parse_request(data) {
        Ok(Request::Get) => {
            assert!(uapi::format_get(&uapi::Device::default()).ends_with("errno=0\n\n"));
        }
        Ok(Request::Set(s)) => {
            for p in &s.peers {
                assert_eq!(p.public_key.len(), 32);
            }
        }
        Err(e) => assert!(e.errno() > 0),
    }
});
