//! `monolock-fault-worker`: a lock holder driven by the fault scenarios.
//!
//! It takes a lock with the official client, writes to the fenced resource
//! under the token while `is_held()` says so, and reports to the checker
//! when it began to believe it held the lock and until when it was entitled
//! to believe so: `min(the moment the client reported the loss, the client's
//! deadline)`. Then it takes the lock again, until the checker hangs up,
//! SIGTERM arrives, or `--max-runtime` passes.
#![deny(unsafe_code)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use clap::Parser;
use monolock_client::{Client, ErrorCode, LockGuard};
use monolock_faults::{
    checker_link::{CheckerLink, HolderArgs, stopped},
    clock::{instant_to_mono_ns, mono_ns},
    messages::WorkerMsg,
};
use tokio::{
    sync::watch,
    time::{Instant, sleep},
};

/// A lock holder for fault scenarios.
#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    holder: HolderArgs,
    /// The lease in milliseconds.
    #[arg(long)]
    lease_ms: u64,
    /// Release after holding this long (0: hold until lost).
    #[arg(long, default_value_t = 0)]
    hold_ms: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (mut report, stop) = CheckerLink::connect_holder(&args.holder).await?;
    run(&args, &mut report, stop).await
}

/// An error and its sources, `outer: inner: ...`: what the checker's
/// journal shows of a failure (a timeline of a slow failover says which
/// connect failed how).
fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

async fn run(
    args: &Args,
    report: &mut CheckerLink,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let lock = &args.holder.lock;
    let client =
        Client::new(args.holder.server.clone()).with_connect_timeout(Duration::from_secs(2));
    let lease = Duration::from_millis(args.lease_ms);
    let mut paused_once = false;
    let mut seq = 0u64;
    while !*stop.borrow() {
        let acquired = tokio::select! {
            () = stopped(&mut stop) => break,
            acquired = client.acquire(lock, lease) => acquired,
        };
        let guard = match acquired {
            Ok(guard) => guard,
            Err(err) => {
                report
                    .send(&WorkerMsg::AcquireFailed {
                        lock: lock.clone(),
                        error: with_causes(&err),
                    })
                    .await?;
                // At once after a shutdown notice (a fresh server may be
                // up), with a short pause otherwise.
                let pause = if err.server_code() == Some(ErrorCode::SHUTTING_DOWN) {
                    Duration::from_millis(5)
                } else {
                    Duration::from_millis(50)
                };
                tokio::select! {
                    () = stopped(&mut stop) => break,
                    () = sleep(pause) => continue,
                }
            }
        };
        let from_ns = mono_ns();
        let token = guard.token();
        report
            .send(&WorkerMsg::Held {
                lock: lock.clone(),
                token,
                from_ns,
            })
            .await?;
        let ended = hold(args, report, &guard, &mut stop, &mut paused_once, &mut seq).await;
        let (detected_ns, reason) = match ended {
            Ok(Ended::Lost(at, reason)) => (at, reason),
            Ok(Ended::Release(reason)) => (mono_ns(), reason),
            Err(err) => (mono_ns(), format!("worker error: {err}")),
        };
        let deadline_ns = instant_to_mono_ns(guard.deadline());
        drop(guard);
        report
            .lost(lock, token, detected_ns, deadline_ns, reason)
            .await?;
    }
    Ok(())
}

enum Ended {
    /// The client reported the loss at this CLOCK_MONOTONIC instant.
    Lost(u64, String),
    /// The worker let go itself.
    Release(String),
}

/// Stamps the moment the client reports the loss, from a task of its own,
/// so the stamp does not wait for the work loop to look.
fn watch_loss(guard: &LockGuard) -> Arc<AtomicU64> {
    let stamp = Arc::new(AtomicU64::new(0));
    let token = guard.loss_token();
    let writer = Arc::clone(&stamp);
    tokio::spawn(async move {
        token.cancelled().await;
        writer.store(mono_ns(), Ordering::Release);
    });
    stamp
}

fn loss_at(stamp: &AtomicU64) -> u64 {
    match stamp.load(Ordering::Acquire) {
        0 => mono_ns(),
        at => at,
    }
}

async fn hold(
    args: &Args,
    report: &mut CheckerLink,
    guard: &LockGuard,
    stop: &mut watch::Receiver<bool>,
    paused_once: &mut bool,
    seq: &mut u64,
) -> anyhow::Result<Ended> {
    let stamp = watch_loss(guard);
    let release_at =
        (args.hold_ms > 0).then(|| Instant::now() + Duration::from_millis(args.hold_ms));
    let lock = &args.holder.lock;
    let write_every = Duration::from_millis(args.holder.write_every_ms);
    let token = guard.token();
    loop {
        if *stop.borrow() {
            return Ok(Ended::Release("stopped".into()));
        }
        if !guard.is_held() {
            let reason = guard
                .loss()
                .map_or_else(|| "lost".into(), |reason| with_causes(&reason));
            return Ok(Ended::Lost(loss_at(&stamp), reason));
        }
        // `is_held()` was true: the write below is allowed by it.
        *seq += 1;
        if args.holder.pause_once && !*paused_once {
            *paused_once = true;
            report
                .pause_before_write(lock, token, *seq, || guard.is_held())
                .await?;
            continue;
        }
        if !report.write(lock, token, *seq).await? {
            // The resource saw a newer token: someone else holds the lock.
            return Ok(Ended::Lost(mono_ns(), "fenced by the resource".into()));
        }
        if release_at.is_some_and(|at| Instant::now() >= at) {
            return Ok(Ended::Release("released".into()));
        }
        tokio::select! {
            () = sleep(write_every) => {}
            _ = guard.lost() => {}
            () = stopped(stop) => {}
        }
    }
}
