//! Readiness for systemd's `Type=notify`: one `READY=1` datagram to
//! `$NOTIFY_SOCKET` once every listener is bound.
//!
//! Written out rather than taken from a crate: the protocol is one datagram
//! on a Unix socket (sd_notify(3)), a path or an abstract name starting
//! with `@`, and std has both.

use std::os::unix::net::{SocketAddr, UnixDatagram};

use tracing::{debug, warn};

/// Tells the service manager that the server is ready, if it asked
/// (`NOTIFY_SOCKET` is set); does nothing otherwise.
pub fn notify_ready() {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    match send(&socket, b"READY=1\nSTATUS=serving\n") {
        Ok(()) => debug!("notified the service manager: ready"),
        Err(err) => warn!(error = %err, "cannot notify the service manager"),
    }
}

fn send(socket: &std::ffi::OsStr, message: &[u8]) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    let bytes = socket.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => abstract_addr(name)?,
        None => SocketAddr::from_pathname(socket)?,
    };
    let datagram = UnixDatagram::unbound()?;
    datagram.send_to_addr(message, &addr)?;
    Ok(())
}

#[cfg(target_os = "linux")]
fn abstract_addr(name: &[u8]) -> std::io::Result<SocketAddr> {
    use std::os::linux::net::SocketAddrExt as _;
    SocketAddr::from_abstract_name(name)
}

#[cfg(not(target_os = "linux"))]
fn abstract_addr(_: &[u8]) -> std::io::Result<SocketAddr> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "abstract socket names exist on Linux only",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_reaches_a_path_socket_and_an_abstract_one() {
        let dir = std::env::temp_dir().join(format!("monolock-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("notify");
        let receiver = UnixDatagram::bind(&path).expect("bind");
        send(path.as_os_str(), b"READY=1\n").expect("send");
        let mut buf = [0u8; 64];
        let n = receiver.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1\n");
        std::fs::remove_dir_all(&dir).expect("cleanup");

        let name = format!("monolock-notify-{}", std::process::id());
        let addr = abstract_addr(name.as_bytes()).expect("abstract");
        let receiver = UnixDatagram::bind_addr(&addr).expect("bind abstract");
        send(std::ffi::OsStr::new(&format!("@{name}")), b"READY=1\n").expect("send");
        let n = receiver.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1\n");
    }
}
