//! The session floor: the least any server can do for a protocol v2 lock
//! cycle on a persistent connection, measured next to monolock's own.
//!
//! A v2 cycle as the client libraries make it is two round trips on an
//! open session: RELEASE, RELEASED, then ACQUIRE, ACQUIRED. This child
//! (`monolock-bench session-floor`) answers those frames and nothing else:
//! OPENED to the OPEN, ACQUIRED (token 1) to every ACQUIRE, RELEASED to
//! every RELEASE, PONG to PING. It decodes with `monolock_proto::v2` as the
//! server does, but keeps no lock table, no session table, no lease wheel,
//! no log and no metrics. It is built the way `monolock serve` is (tokio's
//! default runtime, pinned to the one server CPU, so one worker thread; a
//! task per connection; `TCP_NODELAY`), so its server CPU per cycle is the
//! floor of monolock's: what reading, decoding, encoding and writing the
//! two round trips cost on this machine.

use std::{net::SocketAddr, time::Duration};

use anyhow::{Context, Result};
use clap::Args;
use monolock_proto::v2::{self, Request, ServerFrame};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// Arguments of `monolock-bench session-floor`.
#[derive(Args, Debug)]
pub struct SessionFloorArgs {
    /// Where to listen.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Exit after this many seconds whatever happens (the bench kills it
    /// sooner).
    #[arg(long, default_value_t = 3600)]
    pub max_secs: u64,
}

/// Runs `session-floor` until killed or `max_secs` pass.
pub fn serve(args: SessionFloorArgs) -> Result<()> {
    // The same constructor as `monolock serve`'s runtime.
    let runtime = tokio::runtime::Runtime::new().context("start the runtime")?;
    runtime.block_on(async {
        let listener = TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("bind {}", args.listen))?;
        let give_up = tokio::time::sleep(Duration::from_secs(args.max_secs));
        tokio::pin!(give_up);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    if let Ok((stream, _)) = accepted {
                        tokio::spawn(session(stream));
                    }
                }
                () = &mut give_up => return Ok(()),
            }
        }
    })
}

/// One session: OPEN, then answer every frame until the client closes or
/// sends something this floor does not answer.
async fn session(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(4096);
    let mut out = Vec::with_capacity(4096);
    // OPEN.
    loop {
        match v2::decode_open(&buf) {
            Ok(Some((_lease, used))) => {
                buf.drain(..used);
                break;
            }
            Ok(None) => {}
            Err(_) => return,
        }
        if !matches!(stream.read_buf(&mut buf).await, Ok(n) if n > 0) {
            return;
        }
    }
    ServerFrame::Opened {
        session: 1,
        max_claims: u32::MAX,
    }
    .encode(&mut out);
    loop {
        // Every whole frame read so far, answered in one write.
        let mut used_total = 0;
        loop {
            match v2::decode_request(&buf[used_total..]) {
                Ok(Some((request, used))) => {
                    used_total += used;
                    let reply = match request {
                        Request::Acquire { claim, .. } => ServerFrame::Acquired { claim, token: 1 },
                        Request::Release { claim } => ServerFrame::Released { claim },
                        Request::Ping => ServerFrame::Pong,
                        Request::BadAcquire { .. } => return,
                    };
                    reply.encode(&mut out);
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
        buf.drain(..used_total);
        if !out.is_empty() {
            if stream.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        if !matches!(stream.read_buf(&mut buf).await, Ok(n) if n > 0) {
            return;
        }
    }
}
