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
    checker_link::CheckerLink,
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
    /// Name in reports.
    #[arg(long)]
    name: String,
    /// The lock server (or a proxy in front of it).
    #[arg(long)]
    server: String,
    /// The checker (journal and fenced resource).
    #[arg(long)]
    checker: String,
    /// The lock.
    #[arg(long)]
    lock: String,
    /// The lease in milliseconds.
    #[arg(long)]
    lease_ms: u64,
    /// Release after holding this long (0: hold until lost).
    #[arg(long, default_value_t = 0)]
    hold_ms: u64,
    /// Pause between writes.
    #[arg(long, default_value_t = 20)]
    write_every_ms: u64,
    /// Stop itself once with SIGSTOP between an `is_held()` check and the
    /// write it allowed (an in-flight write under an old token).
    #[arg(long)]
    pause_once: bool,
    /// Exit after this long whatever happens.
    #[arg(long, default_value_t = 600)]
    max_runtime_s: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let max_runtime = Duration::from_secs(args.max_runtime_s);
    let (mut report, stop) = CheckerLink::connect(&args.checker, &args.name, max_runtime).await?;
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

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn run(
    args: &Args,
    report: &mut CheckerLink,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let client = Client::new(args.server.clone()).with_connect_timeout(Duration::from_secs(2));
    let lease = Duration::from_millis(args.lease_ms);
    let mut paused_once = false;
    let mut seq = 0u64;
    while !*stop.borrow() {
        let acquired = tokio::select! {
            () = stopped(&mut stop) => break,
            acquired = client.acquire(&args.lock, lease) => acquired,
        };
        let guard = match acquired {
            Ok(guard) => guard,
            Err(err) => {
                report
                    .send(&WorkerMsg::AcquireFailed {
                        lock: args.lock.clone(),
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
                lock: args.lock.clone(),
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
            .send(&WorkerMsg::Lost {
                lock: args.lock.clone(),
                token,
                until_ns: detected_ns.min(deadline_ns),
                detected_ns,
                deadline_ns,
                reason,
            })
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
    let write_every = Duration::from_millis(args.write_every_ms);
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
        if args.pause_once && !*paused_once {
            *paused_once = true;
            report
                .send(&WorkerMsg::Pausing {
                    lock: args.lock.clone(),
                    token,
                })
                .await?;
            stop_self();
            let held_after_resume = guard.is_held();
            let write_accepted = report.write(&args.lock, token, *seq).await?;
            report
                .send(&WorkerMsg::Resumed {
                    lock: args.lock.clone(),
                    token,
                    held_after_resume,
                    write_accepted,
                })
                .await?;
            continue;
        }
        if !report.write(&args.lock, token, *seq).await? {
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

/// SIGSTOP to this very process; returns once SIGCONT arrives.
#[allow(unsafe_code)]
fn stop_self() {
    // SAFETY: raise(3) takes a plain integer and touches no memory of ours.
    unsafe {
        libc::raise(libc::SIGSTOP);
    }
}
