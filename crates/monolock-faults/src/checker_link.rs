//! A worker process's line to the checker, the same for every worker (the
//! monolock worker and the peers' holders): one JSON message a line each
//! way, a hello first, and a stop signal the worker's loop watches.

use std::time::Duration;

use anyhow::Context as _;
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::{TcpStream, tcp::OwnedWriteHalf},
    signal::unix::{SignalKind, signal},
    sync::{mpsc, watch},
    time::sleep,
};

use crate::{
    clock::mono_ns,
    messages::{WorkerMsg, WriteReply},
};

/// The worker's half of the line: it reports and asks the checker to write.
pub struct CheckerLink {
    out: OwnedWriteHalf,
    replies: mpsc::Receiver<WriteReply>,
}

impl CheckerLink {
    /// Connects to the checker at `checker` and says hello as `worker`.
    /// The returned signal turns true when the checker hangs up, on
    /// SIGTERM, or after `max_runtime`, whichever comes first.
    pub async fn connect(
        checker: &str,
        worker: &str,
        max_runtime: Duration,
    ) -> anyhow::Result<(Self, watch::Receiver<bool>)> {
        let (stop_tx, stop) = watch::channel(false);
        let stream = TcpStream::connect(checker)
            .await
            .context("connecting to the checker")?;
        stream.set_nodelay(true)?;
        let (read, out) = stream.into_split();
        let (reply_tx, replies) = mpsc::channel(16);
        // The checker's replies; its hanging up is the signal to finish.
        let stop_on_hangup = stop_tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(reply) = serde_json::from_str::<WriteReply>(&line)
                    && reply_tx.send(reply).await.is_err()
                {
                    break;
                }
            }
            let _ = stop_on_hangup.send(true);
        });
        let mut sigterm = signal(SignalKind::terminate())?;
        let stop_on_term = stop_tx.clone();
        tokio::spawn(async move {
            sigterm.recv().await;
            let _ = stop_on_term.send(true);
        });
        tokio::spawn(async move {
            sleep(max_runtime).await;
            let _ = stop_tx.send(true);
        });
        let mut link = Self { out, replies };
        link.send(&WorkerMsg::Hello {
            worker: worker.to_owned(),
            pid: std::process::id(),
        })
        .await?;
        Ok((link, stop))
    }

    /// Sends one message.
    pub async fn send(&mut self, msg: &WorkerMsg) -> anyhow::Result<()> {
        let mut line = serde_json::to_string(msg)?;
        line.push('\n');
        self.out.write_all(line.as_bytes()).await?;
        Ok(())
    }

    /// Asks the checker's resource to accept a write under `token`; true
    /// if it did.
    pub async fn write(&mut self, lock: &str, token: u64, seq: u64) -> anyhow::Result<bool> {
        self.send(&WorkerMsg::Write {
            lock: lock.to_owned(),
            token,
            seq,
            sent_ns: mono_ns(),
        })
        .await?;
        let reply = self.replies.recv().await.context("the checker hung up")?;
        Ok(reply.accepted)
    }
}
