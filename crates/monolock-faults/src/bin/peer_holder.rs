//! `monolock-peer-holder`: a lock holder of etcd, ZooKeeper or Redis
//! driven by the side-by-side fault scenarios (`monolock_faults::peers`).
//!
//! It takes the lock through the recipe each system's users are told to
//! use, believes it holds the lock only as long as its client library's own
//! signals allow, and writes to the fenced resource under the system's
//! token while it believes so:
//!
//! - etcd: a lease kept alive every TTL/3 (as Go's `clientv3` does) and
//!   the lock service's key under the lock's prefix (the `concurrency`
//!   algorithm: wait for the deletion of the key before ours). The belief
//!   ends when the keep-alive stream fails or the TTL of the last
//!   keep-alive answer passes (Go's `Session.Done()`); the token is the
//!   key's create revision.
//! - ZooKeeper: the lock recipe (ephemeral sequential node, watch the one
//!   before ours). The belief ends when the connection state leaves
//!   `SyncConnected` (Curator's advice: treat SUSPENDED as lost) or the
//!   session expires; the token is the node's czxid.
//! - Redis: `SET key value NX PX ttl`, extended every TTL/3 by a
//!   compare-and-`PEXPIRE` script (a watchdog as Redisson's). The belief
//!   lasts until TTL after the send of the last `SET` or extension that
//!   succeeded; Redis has no token, so writes carry 0 (never refused).
//!
//! It speaks the fault worker's protocol to the checker
//! ([`monolock_faults::messages`]).
#![deny(unsafe_code)]

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use anyhow::{Context as _, bail};
use clap::{Parser, ValueEnum};
use monolock_faults::{
    checker_link::{CheckerLink, HolderArgs, stopped},
    clock::{mono_ns, nanos},
    messages::WorkerMsg,
};
use monolock_testkit::zk_lock;
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::TcpStream,
    sync::{mpsc, watch},
    task::JoinHandle,
    time::{sleep, timeout},
};
use zookeeper_client as zk;

/// The lock service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum System {
    Etcd,
    Zookeeper,
    Redis,
}

/// A lock holder of a peer lock service for fault scenarios.
#[derive(Debug, Parser)]
struct Args {
    /// The lock service.
    #[arg(long, value_enum)]
    system: System,
    #[command(flatten)]
    holder: HolderArgs,
    /// Lease TTL (etcd, Redis) or session timeout (ZooKeeper), ms.
    #[arg(long)]
    ttl_ms: u64,
}

/// What the client library has said about one hold so far.
#[derive(Debug)]
struct Signals {
    /// CLOCK_MONOTONIC after which the hold may no longer be believed
    /// (`u64::MAX`: the library keeps no deadline).
    deadline_ns: u64,
    /// When and why the library reported the loss.
    lost: Option<(u64, String)>,
}

/// Shared between the hold's background task and the work loop.
#[derive(Clone, Debug)]
struct Belief(Arc<Mutex<Signals>>);

impl Belief {
    fn new(deadline_ns: u64) -> Self {
        Self(Arc::new(Mutex::new(Signals {
            deadline_ns,
            lost: None,
        })))
    }

    fn with<T>(&self, f: impl FnOnce(&mut Signals) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn extend(&self, deadline_ns: u64) {
        self.with(|s| {
            if s.lost.is_none() {
                s.deadline_ns = s.deadline_ns.max(deadline_ns);
            }
        });
    }

    fn lose(&self, reason: String) {
        let at = mono_ns();
        self.with(|s| {
            s.lost.get_or_insert((at, reason));
        });
    }

    fn holds(&self) -> bool {
        let now = mono_ns();
        self.with(|s| s.lost.is_none() && now < s.deadline_ns)
    }

    /// (detected, deadline, reason) once the belief has ended.
    fn ended(&self) -> (u64, u64, String) {
        let now = mono_ns();
        self.with(|s| match &s.lost {
            Some((at, reason)) => (*at, s.deadline_ns, reason.clone()),
            None => (now, s.deadline_ns, "the deadline passed".into()),
        })
    }
}

/// One hold: its token, its belief and what keeps it alive.
struct Hold {
    token: u64,
    belief: Belief,
    keeper: Keeper,
}

enum Keeper {
    Etcd {
        client: Box<etcd_client::Client>,
        key: Vec<u8>,
        lease: i64,
        task: JoinHandle<()>,
    },
    Zookeeper {
        client: zk::Client,
        node: String,
        task: JoinHandle<()>,
    },
    Redis {
        release: mpsc::Sender<()>,
        task: JoinHandle<()>,
    },
}

impl Hold {
    /// Lets go, bounded: a dead server must not keep the holder from
    /// exiting.
    async fn release(self) {
        let bound = Duration::from_secs(1);
        match self.keeper {
            Keeper::Etcd {
                mut client,
                key,
                lease,
                task,
            } => {
                task.abort();
                let _ = timeout(bound, client.unlock(key)).await;
                let _ = timeout(bound, client.lease_revoke(lease)).await;
            }
            Keeper::Zookeeper { client, node, task } => {
                task.abort();
                let _ = timeout(bound, client.delete(&node, None)).await;
            }
            Keeper::Redis { release, task } => {
                let _ = release.send(()).await;
                let _ = timeout(bound, task).await;
            }
        }
    }

    /// Drops everything without a word to the server.
    fn abandon(self) {
        match self.keeper {
            Keeper::Etcd { task, .. }
            | Keeper::Zookeeper { task, .. }
            | Keeper::Redis { task, .. } => task.abort(),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (mut report, stop) = CheckerLink::connect_holder(&args.holder).await?;
    run(&args, &mut report, stop).await
}

async fn run(
    args: &Args,
    report: &mut CheckerLink,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let lock = &args.holder.lock;
    let ttl = Duration::from_millis(args.ttl_ms);
    let mut paused_once = false;
    let mut seq = 0u64;
    while !*stop.borrow() {
        let acquired = tokio::select! {
            () = stopped(&mut stop) => break,
            acquired = acquire(args, ttl) => acquired,
        };
        let hold = match acquired {
            Ok(hold) => hold,
            Err(err) => {
                report
                    .send(&WorkerMsg::AcquireFailed {
                        lock: lock.clone(),
                        error: format!("{err:#}"),
                    })
                    .await?;
                tokio::select! {
                    () = stopped(&mut stop) => break,
                    () = sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        if !hold.belief.holds() {
            hold.abandon();
            continue;
        }
        let from_ns = mono_ns();
        report
            .send(&WorkerMsg::Held {
                lock: lock.clone(),
                token: hold.token,
                from_ns,
            })
            .await?;
        let ended = work(args, report, &hold, &mut stop, &mut paused_once, &mut seq).await;
        let (detected_ns, deadline_ns, reason) = match ended {
            Ok(Ended::Lost) => hold.belief.ended(),
            Ok(Ended::Fenced) => {
                let (_, deadline, _) = hold.belief.ended();
                (mono_ns(), deadline, "fenced by the resource".into())
            }
            Ok(Ended::Stopped) => {
                let (_, deadline, _) = hold.belief.ended();
                (mono_ns(), deadline, "stopped".into())
            }
            Err(err) => {
                let (_, deadline, _) = hold.belief.ended();
                (mono_ns(), deadline, format!("holder error: {err:#}"))
            }
        };
        let token = hold.token;
        hold.release().await;
        report
            .lost(lock, token, detected_ns, deadline_ns, reason)
            .await?;
    }
    Ok(())
}

enum Ended {
    Lost,
    Fenced,
    Stopped,
}

async fn work(
    args: &Args,
    report: &mut CheckerLink,
    hold: &Hold,
    stop: &mut watch::Receiver<bool>,
    paused_once: &mut bool,
    seq: &mut u64,
) -> anyhow::Result<Ended> {
    let lock = &args.holder.lock;
    let write_every = Duration::from_millis(args.holder.write_every_ms);
    let mut writes = 0u32;
    loop {
        if *stop.borrow() {
            return Ok(Ended::Stopped);
        }
        if !hold.belief.holds() {
            return Ok(Ended::Lost);
        }
        // The belief check passed: the write below is allowed by it.
        *seq += 1;
        writes += 1;
        if args.holder.pause_once && !*paused_once && writes >= 3 {
            *paused_once = true;
            let write_accepted = report
                .pause_before_write(lock, hold.token, *seq, || hold.belief.holds())
                .await?;
            if !write_accepted {
                return Ok(Ended::Fenced);
            }
            continue;
        }
        if !report.write(lock, hold.token, *seq).await? {
            return Ok(Ended::Fenced);
        }
        tokio::select! {
            () = sleep(write_every) => {}
            () = stopped(stop) => {}
        }
    }
}

async fn acquire(args: &Args, ttl: Duration) -> anyhow::Result<Hold> {
    let HolderArgs {
        server, lock, name, ..
    } = &args.holder;
    match args.system {
        System::Etcd => etcd_acquire(server, lock, ttl).await,
        System::Zookeeper => zk_acquire(server, lock, ttl).await,
        System::Redis => redis_acquire(server, lock, name, ttl).await,
    }
}

// ---- etcd ----

async fn etcd_acquire(server: &str, lock: &str, ttl: Duration) -> anyhow::Result<Hold> {
    let options = etcd_client::ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
    let mut client = etcd_client::Client::connect([format!("http://{server}")], Some(options))
        .await
        .context("connect to etcd")?;
    // Whole seconds: etcd's lease TTLs are in seconds.
    let ttl_s = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
    let granted = client
        .lease_grant(ttl_s, None)
        .await
        .context("etcd LeaseGrant")?;
    let lease = granted.id();
    let belief = Belief::new(mono_ns() + seconds_ns(granted.ttl()));
    let (keeper, stream) = client
        .lease_keep_alive(lease)
        .await
        .context("etcd LeaseKeepAlive")?;
    let task = tokio::spawn(etcd_keep_alive(keeper, stream, ttl / 3, belief.clone()));
    let locked = client
        .lock(
            lock.as_bytes(),
            Some(etcd_client::LockOptions::new().with_lease(lease)),
        )
        .await;
    let key = match locked {
        Ok(locked) => locked.key().to_vec(),
        Err(err) => {
            task.abort();
            let _ = timeout(Duration::from_secs(1), client.lease_revoke(lease)).await;
            return Err(err).context("etcd Lock");
        }
    };
    let got = client.get(key.clone(), None).await.context("etcd Get")?;
    let Some(kv) = got.kvs().first() else {
        task.abort();
        bail!("etcd: our lock key is gone (lease expired?)");
    };
    let token = u64::try_from(kv.create_revision()).unwrap_or_default();
    Ok(Hold {
        token,
        belief,
        keeper: Keeper::Etcd {
            client: Box::new(client),
            key,
            lease,
            task,
        },
    })
}

fn seconds_ns(ttl_s: i64) -> u64 {
    u64::try_from(ttl_s).unwrap_or_default() * 1_000_000_000
}

/// Go's `clientv3` lease keep-alive: a request every TTL/3; each answer
/// moves the deadline to its receipt plus the TTL it carries; an answer
/// with TTL <= 0, or the stream failing, ends the lease.
async fn etcd_keep_alive(
    mut keeper: etcd_client::LeaseKeeper,
    mut stream: etcd_client::LeaseKeepAliveStream,
    every: Duration,
    belief: Belief,
) {
    loop {
        if let Err(err) = keeper.keep_alive().await {
            belief.lose(format!("keep-alive send failed: {err}"));
            return;
        }
        match stream.message().await {
            Ok(Some(answer)) if answer.ttl() > 0 => {
                belief.extend(mono_ns() + seconds_ns(answer.ttl()));
            }
            Ok(Some(_)) => {
                belief.lose("lease expired (keep-alive TTL 0)".into());
                return;
            }
            Ok(None) => {
                belief.lose("keep-alive stream closed".into());
                return;
            }
            Err(err) => {
                belief.lose(format!("keep-alive stream failed: {err}"));
                return;
            }
        }
        sleep(every).await;
    }
}

// ---- ZooKeeper ----

const ZK_ROOT: &str = "/fault-locks";

async fn zk_acquire(server: &str, lock: &str, session: Duration) -> anyhow::Result<Hold> {
    let client = zk::Client::connector()
        .with_session_timeout(session)
        .connect(server)
        .await
        .context("connect to ZooKeeper")?;
    let belief = Belief::new(u64::MAX);
    let mut states = client.state_watcher();
    let watched = belief.clone();
    let task = tokio::spawn(async move {
        loop {
            let state = states.changed().await;
            if state != zk::SessionState::SyncConnected {
                watched.lose(format!("session state {state}"));
                return;
            }
        }
    });
    let dir = zk_lock::lock_dir(ZK_ROOT, lock);
    let acquired = async {
        zk_lock::ensure(&client, ZK_ROOT).await?;
        zk_lock::ensure(&client, &dir).await?;
        let node = zk_lock::acquire(&client, &dir).await?;
        anyhow::Ok((u64::try_from(node.czxid).unwrap_or_default(), node.path))
    }
    .await;
    match acquired {
        Ok((token, node)) => Ok(Hold {
            token,
            belief,
            keeper: Keeper::Zookeeper { client, node, task },
        }),
        Err(err) => {
            task.abort();
            Err(err)
        }
    }
}

// ---- Redis ----

/// A RESP connection, just enough for SET and EVAL.
struct Resp {
    stream: BufReader<TcpStream>,
}

#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Simple(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
}

impl Resp {
    async fn connect(server: &str) -> anyhow::Result<Self> {
        let stream = timeout(Duration::from_secs(2), TcpStream::connect(server))
            .await
            .context("connect to Redis: timed out")?
            .context("connect to Redis")?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream: BufReader::new(stream),
        })
    }

    async fn call(&mut self, parts: &[&[u8]]) -> anyhow::Result<Reply> {
        let mut out = format!("*{}\r\n", parts.len()).into_bytes();
        for part in parts {
            out.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
            out.extend_from_slice(part);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.get_mut().write_all(&out).await?;
        let mut line = String::new();
        if self.stream.read_line(&mut line).await? == 0 {
            bail!("Redis closed the connection");
        }
        let line = line.trim_end();
        let (kind, rest) = line.split_at(line.len().min(1));
        match kind {
            "+" => Ok(Reply::Simple(rest.to_owned())),
            "-" => bail!("Redis error: {rest}"),
            ":" => Ok(Reply::Integer(rest.parse().context("Redis integer")?)),
            "$" => {
                let len: i64 = rest.parse().context("Redis bulk length")?;
                if len < 0 {
                    return Ok(Reply::Bulk(None));
                }
                let len = usize::try_from(len).context("Redis bulk length")?;
                let mut body = vec![0; len + 2];
                self.stream.read_exact(&mut body).await?;
                body.truncate(len);
                Ok(Reply::Bulk(Some(body)))
            }
            _ => bail!("unexpected Redis reply {line:?}"),
        }
    }
}

const REDIS_EXTEND: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
const REDIS_RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

async fn redis_acquire(
    server: &str,
    lock: &str,
    name: &str,
    ttl: Duration,
) -> anyhow::Result<Hold> {
    let mut conn = Resp::connect(server).await?;
    let value = format!("{name}-{}", mono_ns());
    let ttl_ms = ttl.as_millis().to_string();
    loop {
        let sent = mono_ns();
        let reply = conn
            .call(&[
                b"SET",
                lock.as_bytes(),
                value.as_bytes(),
                b"NX",
                b"PX",
                ttl_ms.as_bytes(),
            ])
            .await?;
        if reply == Reply::Simple("OK".into()) {
            let belief = Belief::new(sent + nanos(ttl));
            let (release, released) = mpsc::channel(1);
            let task = tokio::spawn(redis_watchdog(
                conn,
                lock.to_owned(),
                value,
                ttl,
                belief.clone(),
                released,
            ));
            return Ok(Hold {
                token: 0,
                belief,
                keeper: Keeper::Redis { release, task },
            });
        }
        // Taken: try again, as the single-instance recipe's clients do.
        sleep(Duration::from_millis(20)).await;
    }
}

/// Extends the key every TTL/3 while it is still ours; releases it when
/// asked.
async fn redis_watchdog(
    mut conn: Resp,
    key: String,
    value: String,
    ttl: Duration,
    belief: Belief,
    mut released: mpsc::Receiver<()>,
) {
    let ttl_ms = ttl.as_millis().to_string();
    loop {
        tokio::select! {
            _ = released.recv() => {
                let _ = conn.call(&[b"EVAL", REDIS_RELEASE.as_bytes(), b"1", key.as_bytes(), value.as_bytes()]).await;
                return;
            }
            () = sleep(ttl / 3) => {}
        }
        let sent = mono_ns();
        let extended = conn
            .call(&[
                b"EVAL",
                REDIS_EXTEND.as_bytes(),
                b"1",
                key.as_bytes(),
                value.as_bytes(),
                ttl_ms.as_bytes(),
            ])
            .await;
        match extended {
            Ok(Reply::Integer(1)) => belief.extend(sent + nanos(ttl)),
            Ok(_) => {
                belief.lose("the key is no longer ours".into());
                return;
            }
            // The key may still be ours: the belief runs out at its
            // deadline.
            Err(_) => return,
        }
    }
}
