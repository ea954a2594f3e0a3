//! Helpers for tests against the real server, in-process on 127.0.0.1:0.
#![allow(dead_code, unused_imports)] // each test binary uses a different subset

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use monolock_client::Client;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        TcpListener, TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
    task::JoinHandle,
    time::Instant,
};

use monolock_testkit::process::{AsyncServing, serve_async};
pub use monolock_testkit::{PATIENCE, TestServer, eventually, within};

/// A TCP proxy in front of a server that can go silent: while silenced it
/// keeps every connection open but forwards nothing, in either direction,
/// like a partitioned network or a frozen server. Its upstream can be
/// switched for new connections (a failover address).
pub struct Proxy {
    pub addr: SocketAddr,
    state: Arc<ProxyState>,
    task: JoinHandle<()>,
}

struct ProxyState {
    upstream: Mutex<SocketAddr>,
    silent: AtomicBool,
    /// Go silent right before forwarding the next chunk from the server.
    silent_after_reply: AtomicBool,
    /// When the last chunk from a client was read and forwarded.
    last_upstream: Mutex<Option<Instant>>,
    /// Bytes forwarded from the server to clients.
    downstream_bytes: AtomicUsize,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(ProxyState {
            upstream: Mutex::new(upstream),
            silent: AtomicBool::new(false),
            silent_after_reply: AtomicBool::new(false),
            last_upstream: Mutex::new(None),
            downstream_bytes: AtomicUsize::new(0),
        });
        let task = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let upstream = *state.upstream.lock().expect("lock");
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        continue; // dropping `client` refuses it
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (client_rd, client_wr) = client.into_split();
                    let (server_rd, server_wr) = server.into_split();
                    tokio::spawn(pump(client_rd, server_wr, state.clone(), false));
                    tokio::spawn(pump(server_rd, client_wr, state.clone(), true));
                }
            }
        });
        Self { addr, state, task }
    }

    pub fn client(&self) -> Client {
        Client::new(self.addr.to_string())
    }

    /// Stops forwarding; connections stay open.
    pub fn go_silent(&self) {
        self.state.silent.store(true, Ordering::SeqCst);
    }

    /// Forwards the next chunk from the server (a reply), then goes
    /// silent: the server sees no later frame of the client, so the last
    /// one it saw is the one that reply confirmed.
    pub fn go_silent_after_next_reply(&self) {
        self.state.silent_after_reply.store(true, Ordering::SeqCst);
    }

    /// When the proxy last read a chunk from a client and forwarded it: the
    /// client sent it before, the server received it after.
    pub fn last_forwarded_upstream(&self) -> Option<Instant> {
        *self.state.last_upstream.lock().expect("lock")
    }

    /// New connections go to `upstream` from now on.
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *self.state.upstream.lock().expect("lock") = upstream;
    }

    /// Bytes forwarded from the server to clients so far.
    pub fn downstream_bytes(&self) -> usize {
        self.state.downstream_bytes.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    state: Arc<ProxyState>,
    downstream: bool,
) {
    let mut buf = [0u8; 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let read_at = Instant::now();
        if downstream && state.silent_after_reply.swap(false, Ordering::SeqCst) {
            state.silent.store(true, Ordering::SeqCst);
        } else if state.silent.load(Ordering::SeqCst) {
            continue;
        }
        if !downstream {
            *state.last_upstream.lock().expect("lock") = Some(read_at);
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        if downstream {
            state.downstream_bytes.fetch_add(n, Ordering::SeqCst);
        }
    }
    if !state.silent.load(Ordering::SeqCst) {
        let _ = to.shutdown().await;
    } else {
        // Silence means silence: keep the other side open, say nothing.
        std::future::pending::<()>().await;
    }
}

/// Runs one test body under each protocol version: `NAME::v2` (the
/// client's default) and `NAME::v1` (forced with `Protocol::V1`). The body
/// names the protocol it is given and builds its clients with it.
#[macro_export]
macro_rules! for_each_protocol {
    ($(#[$attr:meta])* async fn $name:ident($protocol:ident) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn run($protocol: monolock_client::Protocol) $body

            $(#[$attr])*
            async fn v2() {
                run(monolock_client::Protocol::V2).await
            }

            $(#[$attr])*
            async fn v1() {
                run(monolock_client::Protocol::V1).await
            }
        }
    };
    ($(#[$attr:meta])* fn $name:ident($protocol:ident) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn run($protocol: monolock_client::Protocol) $body

            $(#[$attr])*
            fn v2() {
                run(monolock_client::Protocol::V2)
            }

            $(#[$attr])*
            fn v1() {
                run(monolock_client::Protocol::V1)
            }
        }
    };
}

/// The `monolock` binary: `MONOLOCK_BIN`, else `target/<profile>/monolock`
/// next to this test's own directory (`target/<profile>/deps`).
pub fn monolock_bin() -> std::path::PathBuf {
    if let Some(bin) = std::env::var_os("MONOLOCK_BIN") {
        return bin.into();
    }
    let exe = std::env::current_exe().expect("the test's path");
    let built = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("monolock"));
    match built {
        Some(bin) if bin.exists() => bin,
        _ => panic!("no monolock binary: set MONOLOCK_BIN or run `cargo build -p monolock`"),
    }
}

/// The real `monolock serve` (the binary of [`monolock_bin`]) on a free
/// port, for what the in-process server of this branch may lack (lock
/// values and observers); killed when dropped.
pub struct BinaryServer {
    pub serving: AsyncServing,
}

impl BinaryServer {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    pub async fn start_with(extra: &[&str]) -> Self {
        let mut command = tokio::process::Command::new(monolock_bin());
        command
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true);
        let args: Vec<&str> = ["--log-format", "json"]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        let serving = serve_async(command, &args, PATIENCE)
            .await
            .unwrap_or_else(|err| panic!("{err}"));
        Self { serving }
    }

    pub fn client(&self) -> Client {
        Client::new(self.serving.addr.to_string())
    }

    pub async fn kill(&mut self) {
        let _ = self.serving.child.kill().await;
    }
}
