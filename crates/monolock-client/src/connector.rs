//! How a client reaches the server: a [`Connector`] dials and hands back a
//! [`Connection`], a byte stream plus (for sockets) a way to shut the socket
//! down from `Drop`.
//!
//! The protocol runs over any `AsyncRead + AsyncWrite` stream, so TLS is a
//! connector that dials TCP, takes the socket's [`SocketShutdown`], and
//! wraps the stream before handing it back.

use std::{
    future::Future,
    io,
    net::Shutdown,
    os::fd::{AsFd, OwnedFd},
};

use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpStream,
};

/// A byte stream the protocol can run over.
pub trait Transport: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Transport for T {}

/// Opens connections to a server address.
///
/// Implement this to add a transport (TLS, a Unix socket, a test double).
/// Return [`Connection::with_socket`] whenever the stream sits on a socket,
/// so that dropping a guard releases the lock immediately.
pub trait Connector: Send + Sync + 'static {
    /// The stream a connection runs over.
    type Stream: Transport;

    /// Opens one connection to `addr`. The client applies its connect
    /// timeout around this future.
    fn connect(
        &self,
        addr: &str,
    ) -> impl Future<Output = io::Result<Connection<Self::Stream>>> + Send;
}

/// An open stream to the server.
#[derive(Debug)]
pub struct Connection<S> {
    pub(crate) stream: S,
    pub(crate) shutdown: Option<SocketShutdown>,
}

impl<S: Transport> Connection<S> {
    /// A connection without a socket handle: dropping a guard closes it
    /// when its background task is next polled (promptly, on a running
    /// runtime) instead of inside `Drop` itself.
    pub fn new(stream: S) -> Self {
        Self {
            stream,
            shutdown: None,
        }
    }

    /// A connection over `stream` whose socket `socket` can be shut down
    /// from `Drop`, so that the server sees the close at once.
    ///
    /// # Errors
    /// Duplicating the socket's descriptor failed (descriptor limit).
    pub fn with_socket(stream: S, socket: &impl AsFd) -> io::Result<Self> {
        Ok(Self {
            stream,
            shutdown: Some(SocketShutdown::new(socket)?),
        })
    }

    /// The stream itself, for a caller that speaks another protocol over
    /// the connector's transport (the operator commands speak HTTP over
    /// the TLS connector).
    pub fn into_stream(self) -> S {
        self.stream
    }
}

/// A duplicate of a socket's descriptor, kept to shut the socket down in
/// both directions from synchronous code (`Drop`).
///
/// `shutdown(2)` acts on the socket, not the descriptor, so shutting down
/// the duplicate sends the FIN at once, whatever task owns the stream.
#[derive(Debug)]
pub struct SocketShutdown(OwnedFd);

impl SocketShutdown {
    /// Duplicates `socket`'s descriptor.
    ///
    /// # Errors
    /// `dup` failed (descriptor limit).
    pub fn new(socket: &impl AsFd) -> io::Result<Self> {
        socket.as_fd().try_clone_to_owned().map(Self)
    }

    /// Shuts the socket down in both directions. Errors (the socket is
    /// already shut down or reset) are of no interest to a closer.
    pub(crate) fn shutdown(&self) {
        let _ = socket2::SockRef::from(&self.0).shutdown(Shutdown::Both);
    }
}

/// Plain TCP with `TCP_NODELAY` (frames are a few bytes and must not wait).
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpConnector;

impl Connector for TcpConnector {
    type Stream = TcpStream;

    async fn connect(&self, addr: &str) -> io::Result<Connection<TcpStream>> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let shutdown = SocketShutdown::new(&stream)?;
        Ok(Connection {
            stream,
            shutdown: Some(shutdown),
        })
    }
}
