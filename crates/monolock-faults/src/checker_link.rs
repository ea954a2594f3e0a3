//! A worker process's line to the checker, the same for every worker (the
//! monolock worker and the peers' holders): one JSON message a line each
//! way, a hello first, and a stop signal the worker's loop watches; the
//! command line the workers share, and the reports of a hold's life.

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

/// The command line every holder shares (`monolock-fault-worker` and
/// `monolock-peer-holder`).
#[derive(Debug, clap::Args)]
pub struct HolderArgs {
    /// Name in reports.
    #[arg(long)]
    pub name: String,
    /// The lock server (or a proxy in front of it).
    #[arg(long)]
    pub server: String,
    /// The checker (journal and fenced resource).
    #[arg(long)]
    pub checker: String,
    /// The lock.
    #[arg(long)]
    pub lock: String,
    /// Pause between writes.
    #[arg(long, default_value_t = 20)]
    pub write_every_ms: u64,
    /// Stop itself once with SIGSTOP between a belief check (`is_held()`
    /// for monolock) and the write it allowed (an in-flight write under an
    /// old token).
    #[arg(long)]
    pub pause_once: bool,
    /// Exit after this long whatever happens.
    #[arg(long, default_value_t = 600)]
    pub max_runtime_s: u64,
}

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

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

    /// [`CheckerLink::connect`] with a holder's command line.
    ///
    /// # Errors
    /// The checker cannot be reached.
    pub async fn connect_holder(
        args: &HolderArgs,
    ) -> anyhow::Result<(Self, watch::Receiver<bool>)> {
        let max_runtime = Duration::from_secs(args.max_runtime_s);
        Self::connect(&args.checker, &args.name, max_runtime).await
    }

    /// Reports that the hold of `lock` under `token` is over: the belief
    /// was entitled to last until the earlier of when the loss was
    /// detected and the client's deadline.
    ///
    /// # Errors
    /// The checker hung up.
    pub async fn lost(
        &mut self,
        lock: &str,
        token: u64,
        detected_ns: u64,
        deadline_ns: u64,
        reason: String,
    ) -> anyhow::Result<()> {
        self.send(&WorkerMsg::Lost {
            lock: lock.to_owned(),
            token,
            until_ns: detected_ns.min(deadline_ns),
            detected_ns,
            deadline_ns,
            reason,
        })
        .await
    }

    /// The in-flight write under an old token: says so, stops this process
    /// (SIGSTOP) between a belief check and the write it allowed, and once
    /// continued asks `held` again and makes the write anyway, reporting
    /// both. Whether the resource accepted the write.
    ///
    /// # Errors
    /// The checker hung up.
    pub async fn pause_before_write(
        &mut self,
        lock: &str,
        token: u64,
        seq: u64,
        held: impl FnOnce() -> bool,
    ) -> anyhow::Result<bool> {
        self.send(&WorkerMsg::Pausing {
            lock: lock.to_owned(),
            token,
        })
        .await?;
        stop_self();
        let held_after_resume = held();
        let write_accepted = self.write(lock, token, seq).await?;
        self.send(&WorkerMsg::Resumed {
            lock: lock.to_owned(),
            token,
            held_after_resume,
            write_accepted,
        })
        .await?;
        Ok(write_accepted)
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

/// SIGSTOP to this very process; returns once SIGCONT arrives.
#[allow(unsafe_code)]
fn stop_self() {
    // SAFETY: raise(3) takes a plain integer and touches no memory of ours.
    unsafe {
        libc::raise(libc::SIGSTOP);
    }
}
