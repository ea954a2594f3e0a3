//! The hidden subcommands the bench re-executes itself with, so that a lock
//! holder or a block of sessions lives in a process of its own:
//!
//! - `hold`: take one lock and keep it alive (monolock heartbeats at
//!   lease/4; Redis watchdog renewal at TTL/3, as Redisson does; etcd
//!   lease keep-alives at TTL/3, as Go's `concurrency.Session` does;
//!   ZooKeeper's client pings by itself) until killed. The parent SIGKILLs
//!   or SIGSTOPs it.
//! - `sessions-worker`: open many monolock sessions from one loopback
//!   source address and heartbeat each of them at lease/4.
//!
//! Both talk to the parent through stdout lines (`HELD`, `READY`, `DONE`)
//! and stop by themselves after `--max-secs`.

use std::{
    io::Write,
    net::{Ipv4Addr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use monolock_proto::ServerFrame;
use rand::Rng;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    sync::{Semaphore, mpsc, watch},
    time::{sleep, sleep_until, timeout},
};

use crate::{cycles::OP_TIMEOUT, mono, resp::RedisLock, sys};

/// Which lock a `hold` child takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HoldSystem {
    /// A monolock session.
    Monolock,
    /// A Redis key set with NX PX.
    Redis,
    /// etcd's `concurrency.Mutex` algorithm, on a lease kept alive every
    /// TTL/3 (as Go's `concurrency.Session` does).
    Etcd,
    /// ZooKeeper's lock recipe, in a session of `--lease-ms`.
    Zookeeper,
}

/// Arguments of `monolock-bench hold`.
#[derive(Args, Debug)]
pub struct HoldArgs {
    /// Which system.
    #[arg(long, value_enum)]
    pub system: HoldSystem,
    /// Server address.
    #[arg(long)]
    pub addr: SocketAddr,
    /// Lock name / key.
    #[arg(long)]
    pub name: String,
    /// monolock lease or Redis TTL, in milliseconds.
    #[arg(long)]
    pub lease_ms: u64,
    /// Give up and exit after this many seconds whatever happens.
    #[arg(long, default_value_t = 120)]
    pub max_secs: u64,
}

/// Runs `hold`: prints `HELD <token>` once the lock is held, then keeps it.
pub async fn hold(args: HoldArgs) -> Result<()> {
    let lease = Duration::from_millis(args.lease_ms.max(1));
    let give_up = Instant::now() + Duration::from_secs(args.max_secs);
    match args.system {
        HoldSystem::Monolock => {
            let mut conn = mono::Conn::connect(args.addr, None).await?;
            conn.send(&mono::acquire_bytes(&args.name, lease)?).await?;
            let (token, _) = timeout(OP_TIMEOUT, conn.until_acquired())
                .await
                .context("no ACQUIRED in time")??;
            announce(&format!("HELD {token}"))?;
            // The client contract's interval is lease/4 minus twice the
            // round trip; on loopback that is lease/4.
            let every = lease / 4;
            while Instant::now() < give_up {
                sleep(every).await;
                match timeout(OP_TIMEOUT, conn.heartbeat()).await?? {
                    ServerFrame::Acquired { .. } => {}
                    other => bail!("holder heartbeat answered {other:?}"),
                }
            }
        }
        HoldSystem::Redis => {
            let mut lock = RedisLock::connect(args.addr, lease).await?;
            let token = crate::resp::new_token(&mut rand::rng());
            let deadline = Instant::now() + OP_TIMEOUT;
            while !lock.try_acquire(&args.name, &token).await? {
                if Instant::now() > deadline {
                    bail!("could not take {} within {OP_TIMEOUT:?}", args.name);
                }
                sleep(Duration::from_millis(1)).await;
            }
            announce(&format!("HELD {token}"))?;
            let every = lease / 3;
            while Instant::now() < give_up {
                sleep(every).await;
                if !lock.extend(&args.name, &token).await? {
                    bail!("holder lost {} before being stopped", args.name);
                }
            }
        }
        HoldSystem::Etcd => {
            let mut client = crate::peers::etcd_connect(args.addr).await?;
            let ttl = i64::try_from(lease.as_secs_f64().ceil() as u64)
                .unwrap_or(i64::MAX)
                .max(1);
            let granted = client.lease_grant(ttl, None).await?;
            let (mut keeper, mut answers) = client.lease_keep_alive(granted.id()).await?;
            let key = timeout(
                OP_TIMEOUT,
                crate::peers::etcd_lock(&mut client, &args.name, granted.id()),
            )
            .await
            .context("no lock in time")??;
            announce(&format!("HELD {}", String::from_utf8_lossy(&key)))?;
            let every = Duration::from_secs(u64::try_from(granted.ttl()).unwrap_or(1).max(1)) / 3;
            while Instant::now() < give_up {
                sleep(every).await;
                keeper.keep_alive().await?;
                match timeout(OP_TIMEOUT, answers.message()).await?? {
                    Some(answer) if answer.ttl() > 0 => {}
                    _ => bail!("holder lost its lease before being stopped"),
                }
            }
        }
        HoldSystem::Zookeeper => {
            // The client library pings the server every third of the
            // session timeout by itself.
            let client = crate::peers::zk_connect(args.addr, lease).await?;
            let node = crate::peers::zk_lock(&client, &args.name).await?;
            announce(&format!("HELD {node}"))?;
            sleep_until(give_up.into()).await;
        }
    }
    Ok(())
}

fn announce(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// Arguments of `monolock-bench sessions-worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// monolock sessions, or (calibration) idle Redis connections that PING
    /// at the same rate.
    #[arg(long, value_enum, default_value = "monolock")]
    pub system: HoldSystem,
    /// Server address.
    #[arg(long)]
    pub addr: SocketAddr,
    /// Loopback source address for every connection of this worker.
    #[arg(long)]
    pub source_ip: Ipv4Addr,
    /// Sessions to open.
    #[arg(long)]
    pub count: usize,
    /// Lease of every session, in milliseconds (heartbeats at lease/4).
    #[arg(long)]
    pub lease_ms: u64,
    /// Lock names are `<prefix><n>`.
    #[arg(long)]
    pub prefix: String,
    /// Connection attempts in flight at once.
    #[arg(long, default_value_t = 64)]
    pub connect_concurrency: usize,
    /// Exit after this many seconds even if never told to stop.
    #[arg(long, default_value_t = 300)]
    pub max_secs: u64,
}

/// One idle connection of a sessions worker.
enum Idle {
    /// A monolock session holding its own lock.
    Monolock(mono::Conn),
    /// A Redis connection (calibration).
    Redis(crate::resp::RespConn),
}

impl Idle {
    /// One heartbeat (monolock) or PING (Redis), answered.
    async fn beat(&mut self) -> Result<()> {
        match self {
            Self::Monolock(conn) => match conn.heartbeat().await? {
                ServerFrame::Acquired { .. } => Ok(()),
                other => bail!("heartbeat answered {other:?}"),
            },
            Self::Redis(conn) => conn.ping().await,
        }
    }
}

/// Runs `sessions-worker`: prints `READY <ok> <failed>` once every session
/// has its answer, heartbeats until a line (or EOF) on stdin, then prints
/// `DONE <heartbeats answered> <sessions lost>`.
pub async fn sessions_worker(args: WorkerArgs) -> Result<()> {
    let limit = sys::raise_nofile_limit().context("raise RLIMIT_NOFILE")?;
    if u64::try_from(args.count).unwrap_or(u64::MAX) + 16 > limit {
        bail!(
            "{} sessions need more than the {limit} descriptors this process may open",
            args.count
        );
    }
    let lease = Duration::from_millis(args.lease_ms.max(4));
    let every = lease / 4;
    let give_up = Instant::now() + Duration::from_secs(args.max_secs);
    let (stop_tx, stop_rx) = watch::channel(false);
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel::<Result<(), String>>();
    let answered = Arc::new(AtomicU64::new(0));
    let lost = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(Semaphore::new(args.connect_concurrency.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..args.count {
        let acquire = mono::acquire_bytes(&format!("{}{n}", args.prefix), lease)?;
        let (gate, ready_tx, mut stop_rx) = (gate.clone(), ready_tx.clone(), stop_rx.clone());
        let (answered, lost) = (answered.clone(), lost.clone());
        let (addr, source, system) = (args.addr, args.source_ip, args.system);
        tasks.spawn(async move {
            let opened = async {
                let _permit = gate.acquire().await?;
                let mut conn = match system {
                    HoldSystem::Monolock => {
                        let mut conn = mono::Conn::connect(addr, Some(source)).await?;
                        conn.send(&acquire).await?;
                        timeout(OP_TIMEOUT, conn.until_acquired()).await??;
                        Idle::Monolock(conn)
                    }
                    HoldSystem::Redis => {
                        Idle::Redis(crate::resp::RespConn::connect_from(addr, Some(source)).await?)
                    }
                    HoldSystem::Etcd | HoldSystem::Zookeeper => {
                        bail!("sessions-worker opens monolock sessions or Redis connections only")
                    }
                };
                timeout(OP_TIMEOUT, conn.beat()).await??;
                anyhow::Ok(conn)
            }
            .await;
            let _ = ready_tx.send(opened.as_ref().map_err(|e| format!("{e:#}")).map(|_| ()));
            let Ok(mut conn) = opened else { return };
            // Spread the heartbeats evenly over the interval.
            let mut next = Instant::now() + every.mul_f64(rand::rng().random_range(0.0..1.0));
            loop {
                tokio::select! {
                    _ = stop_rx.changed() => break,
                    _ = sleep_until(next.into()) => {}
                }
                next += every;
                match timeout(OP_TIMEOUT, conn.beat()).await {
                    Ok(Ok(())) => {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        lost.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
        });
    }
    drop(ready_tx);
    let (mut ok, mut failed) = (0usize, 0usize);
    while ok + failed < args.count {
        match tokio::time::timeout_at(give_up.into(), ready_rx.recv()).await {
            Ok(Some(Ok(()))) => ok += 1,
            Ok(Some(Err(e))) => {
                if failed == 0 {
                    eprintln!("sessions-worker {}: first failure: {e}", args.source_ip);
                }
                failed += 1;
            }
            Ok(None) | Err(_) => break,
        }
    }
    announce(&format!("READY {ok} {failed}"))?;

    // Wait for the parent's word (any line or EOF) or the time limit.
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let _ = tokio::time::timeout_at(give_up.into(), stdin.next_line()).await;
    let _ = stop_tx.send(true);
    let _ = timeout(OP_TIMEOUT * 2, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    announce(&format!(
        "DONE {} {}",
        answered.load(Ordering::Relaxed),
        lost.load(Ordering::Relaxed)
    ))?;
    Ok(())
}
