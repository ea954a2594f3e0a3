//! What the in-process benches share: sessions over in-memory streams
//! ([`ServerHandle::serve_stream`]), so their figures are the server's own
//! work and not the kernel's.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use monolock_proto::{ClientFrame, Lease, LockName, msg};
use monolock_server::ServerHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

/// A runtime of two workers, as a 2-core server would have.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The bytes of ACQUIRE for `name` with `lease`.
pub fn acquire_bytes(name: &str, lease: Duration) -> Vec<u8> {
    ClientFrame::acquire(
        Lease::from_duration(lease).expect("lease"),
        LockName::new(name).expect("name"),
    )
    .to_bytes()
}

/// Opens an in-memory session served by `handle`, as if from
/// 127.0.0.1:`port`; returns the client end.
pub fn open(handle: &ServerHandle, port: u16) -> DuplexStream {
    let (client, server) = tokio::io::duplex(256);
    let handle = handle.clone();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    tokio::spawn(async move { handle.serve_stream(server, addr, "").await });
    client
}

/// Reads until an ACQUIRED frame (9 bytes) has arrived, skipping WAITING.
pub async fn until_acquired(stream: &mut DuplexStream) {
    let mut buf = [0u8; 64];
    let mut pending = Vec::new();
    loop {
        let n = stream.read(&mut buf).await.expect("read");
        assert!(n > 0, "closed");
        pending.extend_from_slice(&buf[..n]);
        while let Some(&first) = pending.first() {
            match first {
                msg::WAITING => {
                    pending.remove(0);
                }
                msg::ACQUIRED if pending.len() >= 9 => return,
                msg::ACQUIRED => break,
                other => panic!("unexpected frame type {other:#x}"),
            }
        }
    }
}

/// The grant probe's one cycle on the free lock `probe/grant`: a new
/// session acquires it (`acquire` is its ACQUIRE frame) and is granted;
/// returns how long that took. The session then closes, and this returns
/// once the lock is released (else the next cycle would queue).
pub async fn grant_cycle(handle: &ServerHandle, acquire: &[u8]) -> Duration {
    let start = Instant::now();
    let mut session = open(handle, 2);
    session.write_all(acquire).await.expect("acquire");
    until_acquired(&mut session).await;
    let took = start.elapsed();
    drop(session);
    while handle.lock("probe/grant").is_some() {
        tokio::task::yield_now().await;
    }
    took
}
