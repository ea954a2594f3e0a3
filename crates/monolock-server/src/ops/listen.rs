//! Binding the protocol listener.

use std::{io, net::SocketAddr};

use tokio::net::{TcpListener, TcpSocket};

/// Pending-connection queue length asked of the kernel (it caps this at
/// `net.core.somaxconn`). Larger than tokio's default of 1024 so that a
/// fleet reconnecting at once after a failover is not met with dropped SYNs
/// and one-second retransmits.
pub const LISTEN_BACKLOG: u32 = 8192;

/// Binds `addr` for the protocol: `SO_REUSEADDR` (a restart does not wait
/// for old connections in TIME_WAIT) and a [`LISTEN_BACKLOG`] queue.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// let listener = monolock_server::bind("127.0.0.1:0".parse().unwrap())?;
/// assert!(listener.local_addr()?.port() != 0);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// The OS error from socket, bind or listen.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}
