//! wg-quick configs (issue 33): any text as a `NAME.conf` file gives a config or an error
//! naming a line or key, never a panic; what parses is WireGuard's wire, named after the file.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use sealink_proto::tunnel::Wire;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = sealink_tunnel::Config::parse_at(text, Path::new("/etc/wireguard/wgf0.conf")) {
        assert_eq!(c.core.wire, Wire::WireGuard);
        assert_eq!(c.name, "wgf0");
    }
    let _ = sealink_tunnel::wgquick::private_key(text);
});
