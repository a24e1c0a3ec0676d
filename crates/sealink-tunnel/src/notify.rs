//! systemd's readiness notification (`Type=notify`, NOTIFY_SOCKET set): READY=1 and a status
//! line once the tunnel is up and serving.

use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;

/// The notify socket, connected during set-up, while the process still runs as the user that
/// started it: READY=1 is sent once the tunnel runs as its unprivileged `user`, who may not be
/// allowed to write the socket (the permission is checked at connect).
#[derive(Debug)]
pub struct Notifier(Option<UnixDatagram>);

impl Notifier {
    /// Connects to NOTIFY_SOCKET; holds nothing without it, or if it cannot be reached now
    /// (then [`ready`](Self::ready) tries again the ordinary way).
    pub fn connect() -> Self {
        let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
            return Self(None);
        };
        let connect = || -> std::io::Result<UnixDatagram> {
            let sock = UnixDatagram::unbound()?;
            match path.as_encoded_bytes().strip_prefix(b"@") {
                // An abstract socket (systemd may name one so).
                Some(name) => {
                    use std::os::linux::net::SocketAddrExt;
                    sock.connect_addr(&std::os::unix::net::SocketAddr::from_abstract_name(name)?)?
                }
                None => sock.connect(&path)?,
            }
            Ok(sock)
        };
        Self(
            connect()
                .inspect_err(
                    |e| tracing::warn!(error = %e, "cannot connect to NOTIFY_SOCKET during set-up"),
                )
                .ok(),
        )
    }

    /// Tells systemd that the tunnel `name` is up and serving on `listen`. Without
    /// NOTIFY_SOCKET this does nothing.
    pub fn ready(&self, name: &str, listen: SocketAddr) {
        let status = format!("up: {name}, listening on {listen}");
        let sent = match &self.0 {
            Some(sock) => sock
                .send(format!("READY=1\nSTATUS={status}\n").as_bytes())
                .map(drop),
            None => sd_notify::notify(&[
                sd_notify::NotifyState::Ready,
                sd_notify::NotifyState::Status(&status),
            ]),
        };
        if let Err(e) = sent {
            tracing::warn!(error = %e, "cannot notify the service manager (NOTIFY_SOCKET)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_reaches_the_connected_socket() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("notify");
        let server = UnixDatagram::bind(&path).unwrap();
        let client = UnixDatagram::unbound().unwrap();
        client.connect(&path).unwrap();
        Notifier(Some(client)).ready("sl0", "127.0.0.1:51820".parse().unwrap());
        let mut buf = [0u8; 128];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(
            &buf[..n],
            b"READY=1\nSTATUS=up: sl0, listening on 127.0.0.1:51820\n"
        );
    }
}
