//! Scenario 4: a dead holder. The holder is a child process (this binary's
//! hidden `hold` subcommand); a waiter in this process is already queued
//! (monolock; etcd's Lock RPC and ZooKeeper's watch on the predecessor
//! after the phase below) or polling (Redis) when the holder is SIGKILLed
//! or SIGSTOPped.
//! Measured: from just before the signal to the waiter's grant.

use std::{
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use monolock_proto::ServerFrame;
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    time::{sleep, timeout},
};

use crate::{
    cycles::OP_TIMEOUT,
    mono,
    resp::{self, RedisLock},
    servers::{Server, System},
    sys,
};

/// How the holder dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Crash: the kernel closes its sockets.
    Kill,
    /// Pause: sockets stay open, nothing is sent.
    Stop,
}

impl Fault {
    /// Key used in metric names.
    pub fn key(self) -> &'static str {
        match self {
            Self::Kill => "kill",
            Self::Stop => "stop",
        }
    }

    fn signal(self) -> libc::c_int {
        match self {
            Self::Kill => libc::SIGKILL,
            Self::Stop => libc::SIGSTOP,
        }
    }
}

/// Mean sleep between a Redis waiter's SET NX attempts here: the shortest
/// delay of the contention runs, the most favourable to Redis.
const REDIS_WAITER_DELAY: Duration = Duration::from_millis(1);

/// One trial: returns the time from the signal to the next grant.
pub async fn trial(
    server: &Server,
    exe: &Path,
    name: &str,
    fault: Fault,
    lease: Duration,
) -> Result<Duration> {
    let system = server.system.key();
    let bound = lease * 3 + Duration::from_secs(5);
    let mut holder = Command::new(exe)
        .arg("hold")
        .args(["--system", system])
        .args(["--addr", &server.addr.to_string()])
        .args(["--name", name])
        .args(["--lease-ms", &lease.as_millis().to_string()])
        .args(["--max-secs", &(bound.as_secs() + 30).to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("start the holder child")?;
    let result = run_trial(server, &mut holder, name, fault, lease, bound).await;
    // A stopped process still dies of SIGKILL.
    let _ = holder.start_kill();
    let _ = timeout(OP_TIMEOUT, holder.wait()).await;
    result
}

async fn run_trial(
    server: &Server,
    holder: &mut Child,
    name: &str,
    fault: Fault,
    lease: Duration,
    bound: Duration,
) -> Result<Duration> {
    let stdout = holder.stdout.take().context("holder stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = timeout(OP_TIMEOUT * 2, lines.next_line())
        .await
        .context("holder did not report HELD in time")??
        .context("holder exited before holding")?;
    if !line.starts_with("HELD") {
        bail!("holder said {line:?}");
    }
    let pid = holder.id().context("holder pid")?;

    let waiter = match server.system {
        System::Monolock => {
            let mut conn = mono::Conn::connect(server.addr, None).await?;
            // A lease far longer than the trial: the waiter never needs a heartbeat.
            conn.send(&mono::acquire_bytes(name, bound * 4)?).await?;
            match timeout(OP_TIMEOUT, conn.read_frame()).await?? {
                ServerFrame::Waiting => {}
                other => bail!("waiter expected WAITING, got {other:?}"),
            }
            tokio::spawn(async move {
                conn.until_acquired().await?;
                anyhow::Ok(Instant::now())
            })
        }
        System::Redis => {
            let addr = server.addr;
            let key = name.to_owned();
            let deadline = Instant::now() + bound;
            let mut lock = RedisLock::connect(addr, lease).await?;
            tokio::spawn(async move {
                let mut rng = StdRng::from_rng(&mut rand::rng());
                let token = resp::new_token(&mut rng);
                while Instant::now() < deadline {
                    if lock.try_acquire(&key, &token).await? {
                        return Ok(Instant::now());
                    }
                    sleep(resp::jittered(REDIS_WAITER_DELAY, &mut rng)).await;
                }
                bail!("waiter never got {key}")
            })
        }
        System::Etcd | System::Zookeeper => {
            let series = if server.system == System::Etcd {
                crate::peers::Series::Etcd
            } else {
                crate::peers::Series::Zookeeper
            };
            // Its own lease or session, far longer than the trial.
            let mut waiter =
                crate::peers::Locker::connect(series, server.addr, name, bound * 4).await?;
            let deadline = Instant::now() + bound;
            tokio::spawn(async move {
                waiter.acquire(deadline).await?;
                anyhow::Ok(Instant::now())
            })
        }
    };
    // Strike at a random phase of the holder's heartbeat/renewal cycle.
    let phase = Duration::from_millis(rand::rng().random_range(100..400));
    sleep(phase).await;
    let struck = Instant::now();
    sys::send_signal(pid, fault.signal()).context("signal the holder")?;
    let granted = tokio::time::timeout_at((struck + bound).into(), waiter)
        .await
        .with_context(|| format!("no handover within {bound:?}"))?
        .context("waiter task panicked")??;
    Ok(granted.saturating_duration_since(struck))
}
