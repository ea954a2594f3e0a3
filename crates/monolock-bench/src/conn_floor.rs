//! The connection floor: the least any server can do for one
//! connection-per-claim cycle, measured next to monolock's own.
//!
//! A monolock cycle is connect, ACQUIRE, ACQUIRED, close. Whatever the
//! lock table costs, the server cannot do less than accept the connection,
//! read the request, write the reply, and close when the client does: the
//! kernel's TCP handshake and teardown, four system calls and a task. This
//! child (`monolock-bench conn-floor`) does exactly that and nothing else:
//! it answers every connection's first read with the same canned ACQUIRED
//! frame, parses nothing and keeps no state. It is built the way `monolock
//! serve` is (tokio's default runtime, which on the one server CPU it is
//! pinned to has one worker thread; a task per connection; `TCP_NODELAY`),
//! so the throughput scenario can drive it with the very client loop it
//! drives monolock with, and its server CPU per cycle is the denominator of
//! monolock's: how far the connect-per-claim path is from the machine's
//! limit, next to how far it is from Redis.

use std::{net::SocketAddr, time::Duration};

use anyhow::{Context, Result};
use clap::Args;
use monolock_proto::ServerFrame;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// Arguments of `monolock-bench conn-floor`.
#[derive(Args, Debug)]
pub struct ConnFloorArgs {
    /// Where to listen.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Exit after this many seconds whatever happens (the bench kills it
    /// sooner).
    #[arg(long, default_value_t = 3600)]
    pub max_secs: u64,
}

/// The largest request read at once; an ACQUIRE is 8 bytes plus its name.
const READ_BUF: usize = 512;

/// Runs `conn-floor` until killed or `max_secs` pass.
pub fn serve(args: ConnFloorArgs) -> Result<()> {
    // The same constructor as `monolock serve`'s runtime.
    let runtime = tokio::runtime::Runtime::new().context("start the runtime")?;
    runtime.block_on(async {
        let listener = TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("bind {}", args.listen))?;
        // Built once and kept for the life of the process, so a cycle
        // copies nothing and counts no references.
        let reply: &'static [u8] = ServerFrame::Acquired { token: 1 }.to_bytes().leak();
        let give_up = tokio::time::sleep(Duration::from_secs(args.max_secs));
        tokio::pin!(give_up);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    // Like monolock, a failed accept (EMFILE, a reset before
                    // accept) ends that connection, not the server.
                    if let Ok((stream, _)) = accepted {
                        tokio::spawn(cycle(stream, reply));
                    }
                }
                () = &mut give_up => return Ok(()),
            }
        }
    })
}

/// One cycle: read the request, write the canned reply, wait for the
/// client's close, close.
async fn cycle(mut stream: TcpStream, reply: &'static [u8]) {
    let _ = stream.set_nodelay(true);
    let mut buf = [0u8; READ_BUF];
    // The client sends its ACQUIRE in one write, so one read has it.
    if !matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {
        return;
    }
    if stream.write_all(reply).await.is_err() {
        return;
    }
    // The client's close is the release; anything else it sends is ignored.
    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
}
