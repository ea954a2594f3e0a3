//! Test support shared by the monolock crates' tests (never a runtime
//! dependency): a lab PKI made at test time with rcgen, the server's TLS
//! files on disk, rustls clients, a raw protocol v2 client ([`v2`]), and an
//! in-process server on a free port.
#![forbid(unsafe_code)]

pub mod pki;
pub mod v2;

use std::net::SocketAddr;

use monolock_server::{Server, ServerConfig, ServerHandle};
use tokio::{net::TcpListener, task::JoinHandle};

/// Starts a server on 127.0.0.1 with a free port, on the current runtime.
/// Returns its address, its handle, and the task running it.
pub async fn spawn_server(
    config: ServerConfig,
) -> (SocketAddr, ServerHandle, JoinHandle<std::io::Result<()>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let server = Server::new(config);
    let handle = server.handle();
    (addr, handle, tokio::spawn(server.run(listener)))
}
