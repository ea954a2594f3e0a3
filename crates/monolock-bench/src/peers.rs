//! Side by side with the lock services users would pick instead: monolock
//! and Redis beside a single etcd member and a standalone ZooKeeper, each
//! driven through the lock recipe its own users use, on the same rows.
//!
//! The patterns (one [`Series`] each):
//!
//! - `mono_2rt`: a monolock v2 session as the client libraries drive it:
//!   RELEASE, wait for RELEASED, then ACQUIRE, wait for the grant (two
//!   round trips per cycle).
//! - `mono_pipelined`: the same session writing RELEASE and the next
//!   ACQUIRE in one write (one round trip per cycle); throughput only.
//! - `redis`: `SET NX PX` and the check-and-delete script on one
//!   connection; waiters retry every 1 ms (jittered).
//! - `etcd`: the algorithm of etcd's `concurrency.Mutex` (Go, the client
//!   etcd ships), step for step ([`etcd_lock`]), on a lease granted once
//!   per client as its `concurrency.Session` does: one transaction puts our
//!   key under the lock's prefix and reads the oldest; if that is not ours,
//!   wait for the deletion of the key created just before ours. Release
//!   deletes our key. Two round trips per uncontended cycle. (etcd's `Lock`
//!   RPC runs the same algorithm inside the server through an in-process
//!   client; driven with 64 contenders here, it stopped granting any lock
//!   and stopped letting a dead holder's lease expire, so the bench uses
//!   the algorithm its Go users run.)
//! - `zookeeper`: the lock recipe of ZooKeeper's documentation, as
//!   Curator's `InterProcessMutex` makes it: create an ephemeral sequential
//!   node under the lock's node, list the children, hold if ours is the
//!   lowest, else watch (getData) the one just before ours and look again
//!   when it goes; release deletes our node. Three round trips per
//!   uncontended cycle.
//!
//! Rows, keyed `peers.<row>.<series>.<figure>`: `tp.c<N>` (N clients each
//! cycling on its own lock: cycles/s, server CPU µs per cycle), `cont.c<N>`
//! (N clients on one lock: acquisitions/s, handover p50/p99, fairness),
//! `dead` (a holder in a child process SIGKILLed: ms to the next grant, and
//! the lease or session timeout in force) and `mem` (locks held by one
//! session on a fresh server: server RSS per lock).

use std::{
    net::SocketAddr,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use monolock_testkit::zk_lock;
use rand::{SeedableRng, rngs::StdRng};
use tokio::time::{sleep, sleep_until, timeout, timeout_at};
use zookeeper_client as zk;

use crate::{
    contention::{self, ClientLog},
    cycles::{OP_TIMEOUT, Window},
    mono_v2,
    report::Metrics,
    resp::{self, RedisLock},
    servers::{Server, System},
};

/// Lease (monolock), TTL (Redis, etcd) or session timeout (ZooKeeper) of
/// the cycling and contending clients: longer than any window, so no
/// keep-alive runs while figures count.
const LONG_LEASE: Duration = Duration::from_secs(60);
/// ZooKeeper's longest session timeout as configured here (its default cap
/// is 20 ticks, 4 s at the bench's 200 ms tick; raised to 60 s).
const ZK_LONG_SESSION: Duration = Duration::from_secs(60);
/// Mean sleep between a Redis waiter's attempts.
const REDIS_RETRY: Duration = Duration::from_millis(1);
/// Upper bound on cycles or attempts per client per window.
const MAX_LOOPS: u64 = 10_000_000;
/// Acquisitions in flight at once while one session takes many locks.
const MANY_IN_FLIGHT: usize = 16;
/// The root of every ZooKeeper lock node.
const ZK_ROOT: &str = "/bench-locks";

/// A system and the pattern it is driven with: one column of the tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Series {
    /// monolock v2, release confirmed then acquire.
    MonoTwoTrips,
    /// monolock v2, RELEASE and the next ACQUIRE in one write.
    MonoPipelined,
    /// Redis SET NX PX.
    Redis,
    /// etcd's lock service.
    Etcd,
    /// ZooKeeper's lock recipe.
    Zookeeper,
    /// The session floor (`crate::session_floor`) driven like
    /// [`Series::MonoTwoTrips`]; throughput only.
    Floor,
}

impl Series {
    /// Every series, in table order.
    pub const ALL: [Self; 6] = [
        Self::MonoTwoTrips,
        Self::MonoPipelined,
        Self::Redis,
        Self::Etcd,
        Self::Zookeeper,
        Self::Floor,
    ];

    /// Its name in metric keys.
    pub fn key(self) -> &'static str {
        match self {
            Self::MonoTwoTrips => "mono_2rt",
            Self::MonoPipelined => "mono_pipelined",
            Self::Redis => "redis",
            Self::Etcd => "etcd",
            Self::Zookeeper => "zookeeper",
            Self::Floor => "session_floor",
        }
    }

    /// Its column heading: the system and the pattern.
    pub fn heading(self) -> &'static str {
        match self {
            Self::MonoTwoTrips => "monolock v2: release confirmed, then acquire (2 round trips)",
            Self::MonoPipelined => "monolock v2, pipelined: RELEASE + next ACQUIRE in one write",
            Self::Redis => "Redis: SET NX PX + check-and-delete script, retry 1 ms",
            Self::Etcd => "etcd: concurrency.Mutex algorithm on a lease",
            Self::Zookeeper => "ZooKeeper: lock recipe (ephemeral sequential, watch predecessor)",
            Self::Floor => "session floor: a bare tokio server answering the same 2 round trips",
        }
    }

    /// The system whose server it runs on.
    pub fn system(self) -> System {
        match self {
            Self::MonoTwoTrips | Self::MonoPipelined | Self::Floor => System::Monolock,
            Self::Redis => System::Redis,
            Self::Etcd => System::Etcd,
            Self::Zookeeper => System::Zookeeper,
        }
    }

    /// Whether it has a contention row (pipelining a release into the
    /// next acquire is a throughput pattern, not a waiter's).
    pub fn contends(self) -> bool {
        !matches!(self, Self::MonoPipelined | Self::Floor)
    }
}

/// One client of one series: a connection (session, lease) and what it holds.
pub enum Locker {
    /// A monolock v2 session; claim 1 is the lock.
    Mono {
        /// The session.
        session: mono_v2::Session,
        /// ACQUIRE (wait) of the lock.
        acquire: Vec<u8>,
        /// RELEASE of claim 1, then ACQUIRE again.
        release_acquire: Vec<u8>,
        /// Whether claim 1 is held.
        held: bool,
    },
    /// A Redis connection.
    Redis {
        /// The connection.
        lock: RedisLock,
        /// The key.
        key: String,
        /// The token of the current hold.
        token: String,
        /// Retry jitter and tokens (boxed: a few hundred bytes).
        rng: Box<StdRng>,
    },
    /// An etcd client with its lease.
    Etcd {
        /// The client (one HTTP/2 connection), boxed: it is several
        /// kilobytes, the other variants a few hundred bytes.
        client: Box<etcd_client::Client>,
        /// The lock's name.
        name: String,
        /// The lease every key of this client is attached to.
        lease: i64,
        /// The key of the current hold.
        key: Option<Vec<u8>>,
    },
    /// A ZooKeeper session.
    Zookeeper {
        /// The session.
        client: zk::Client,
        /// The lock's node.
        dir: String,
        /// Our node of the current hold.
        node: Option<String>,
    },
}

/// An etcd client of the server at `addr`.
pub async fn etcd_connect(addr: SocketAddr) -> Result<etcd_client::Client> {
    etcd_client::Client::connect([format!("http://{addr}")], None)
        .await
        .with_context(|| format!("connect to etcd at {addr}"))
}

/// A ZooKeeper session with the server at `addr`, of `session_timeout`.
pub async fn zk_connect(addr: SocketAddr, session_timeout: Duration) -> Result<zk::Client> {
    zk::Client::connector()
        .with_session_timeout(session_timeout)
        .connect(&addr.to_string())
        .await
        .with_context(|| format!("connect to ZooKeeper at {addr}"))
}

/// The node of lock `name` in ZooKeeper (one level under [`ZK_ROOT`]).
fn zk_dir(name: &str) -> String {
    zk_lock::lock_dir(ZK_ROOT, name)
}

/// The ZooKeeper lock recipe's acquire: our node, then wait until no
/// lower node is left. Returns our node's path.
async fn zk_acquire(client: &zk::Client, dir: &str) -> Result<String> {
    Ok(zk_lock::acquire(client, dir).await?.path)
}

/// Takes lock `name` through the ZooKeeper recipe (its node made if
/// needed); returns our node's path.
pub async fn zk_lock(client: &zk::Client, name: &str) -> Result<String> {
    let dir = zk_dir(name);
    zk_lock::ensure(client, ZK_ROOT).await?;
    zk_lock::ensure(client, &dir).await?;
    zk_acquire(client, &dir).await
}

/// etcd's `concurrency.Mutex` (Go, etcd 3.4), step for step: one
/// transaction puts our key (`<name>/<lease in hex>`, on our lease) unless
/// it exists and reads the oldest key under the prefix; if the oldest is
/// not ours, wait for the deletion of the newest key created before ours,
/// again until none is left. Returns our key.
pub async fn etcd_lock(
    client: &mut etcd_client::Client,
    name: &str,
    lease: i64,
) -> Result<Vec<u8>> {
    use etcd_client::{
        Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
        TxnOpResponse, WatchOptions,
    };
    let prefix = format!("{name}/");
    let key = format!("{prefix}{lease:x}").into_bytes();
    let oldest = || {
        GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1)
    };
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(key.clone(), "", Some(PutOptions::new().with_lease(lease))),
            TxnOp::get(prefix.clone(), Some(oldest())),
        ])
        .or_else([
            TxnOp::get(key.clone(), None),
            TxnOp::get(prefix.clone(), Some(oldest())),
        ]);
    let answer = client.txn(txn).await.context("etcd Txn")?;
    let responses = answer.op_responses();
    let ours = if answer.succeeded() {
        answer.header().map_or(0, |h| h.revision())
    } else {
        match responses.first() {
            Some(TxnOpResponse::Get(got)) => got.kvs().first().map_or(0, |kv| kv.create_revision()),
            _ => 0,
        }
    };
    let owner = match responses.get(1) {
        Some(TxnOpResponse::Get(got)) => got.kvs().first().map(|kv| kv.create_revision()),
        _ => None,
    };
    if owner.is_none_or(|rev| rev == ours) {
        return Ok(key);
    }
    // Wait for the deletion of every key created before ours.
    loop {
        let newest_before = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
            .with_max_create_revision(ours - 1);
        let got = client
            .get(prefix.clone(), Some(newest_before))
            .await
            .context("etcd Range")?;
        let Some(before) = got.kvs().first() else {
            return Ok(key);
        };
        let at = got.header().map_or(0, |h| h.revision());
        let mut watch = client
            .watch(
                before.key().to_vec(),
                Some(WatchOptions::new().with_start_revision(at)),
            )
            .await
            .context("etcd Watch")?;
        'deleted: loop {
            let Some(changes) = watch.message().await.context("etcd Watch")? else {
                bail!("etcd ended the watch of the key before ours");
            };
            if changes
                .events()
                .iter()
                .any(|e| e.event_type() == EventType::Delete)
            {
                break 'deleted;
            }
        }
    }
}

impl Locker {
    /// A client of `series` for lock `name`, with its own connection,
    /// session or lease of `lease`.
    pub async fn connect(
        series: Series,
        addr: SocketAddr,
        name: &str,
        lease: Duration,
    ) -> Result<Self> {
        Ok(match series {
            Series::MonoTwoTrips | Series::MonoPipelined | Series::Floor => {
                const CLAIM: u32 = 1;
                let session = mono_v2::Session::open(addr, lease).await?;
                let acquire = mono_v2::acquire_bytes(CLAIM, name)?;
                let mut release_acquire = monolock_proto::v2::release_frame(CLAIM).to_vec();
                release_acquire.extend_from_slice(&acquire);
                Self::Mono {
                    session,
                    acquire,
                    release_acquire,
                    held: false,
                }
            }
            Series::Redis => Self::Redis {
                lock: RedisLock::connect(addr, lease).await?,
                key: name.to_owned(),
                token: String::new(),
                rng: Box::new(StdRng::from_rng(&mut rand::rng())),
            },
            Series::Etcd => {
                let mut client = etcd_connect(addr).await?;
                let ttl = i64::try_from(lease.as_secs().max(1)).unwrap_or(i64::MAX);
                let lease = client
                    .lease_grant(ttl, None)
                    .await
                    .context("etcd LeaseGrant")?
                    .id();
                Self::Etcd {
                    client: Box::new(client),
                    name: name.to_owned(),
                    lease,
                    key: None,
                }
            }
            Series::Zookeeper => {
                let client = zk_connect(addr, lease).await?;
                let dir = zk_dir(name);
                zk_lock::ensure(&client, ZK_ROOT).await?;
                zk_lock::ensure(&client, &dir).await?;
                Self::Zookeeper {
                    client,
                    dir,
                    node: None,
                }
            }
        })
    }

    /// Waits until the lock is held (Redis: retries until `give_up`).
    pub async fn acquire(&mut self, give_up: Instant) -> Result<()> {
        match self {
            Self::Mono {
                session,
                acquire,
                held,
                ..
            } => {
                session.send(acquire).await?;
                session.until_granted(1).await?;
                *held = true;
            }
            Self::Redis {
                lock,
                key,
                token,
                rng,
            } => {
                *token = resp::new_token(&mut **rng);
                while !lock.try_acquire(key, token).await? {
                    if Instant::now() >= give_up {
                        bail!("redis: {key} not taken in time");
                    }
                    sleep(resp::jittered(REDIS_RETRY, &mut **rng)).await;
                }
            }
            Self::Etcd {
                client,
                name,
                lease,
                key,
            } => {
                *key = Some(etcd_lock(client, name, *lease).await?);
            }
            Self::Zookeeper { client, dir, node } => {
                *node = Some(zk_acquire(client, dir).await?);
            }
        }
        Ok(())
    }

    /// Releases the lock and waits for the server's confirmation.
    pub async fn release(&mut self) -> Result<()> {
        match self {
            Self::Mono { session, held, .. } => {
                session.send(&monolock_proto::v2::release_frame(1)).await?;
                session.until_released(1).await?;
                *held = false;
            }
            Self::Redis {
                lock, key, token, ..
            } => {
                if !lock.release(key, token).await? {
                    bail!("redis: release of {key} found another token");
                }
            }
            Self::Etcd { client, key, .. } => {
                let key = key.take().context("etcd: release without a hold")?;
                client.delete(key, None).await.context("etcd DeleteRange")?;
            }
            Self::Zookeeper { client, node, .. } => {
                let node = node.take().context("zookeeper: release without a hold")?;
                client
                    .delete(&node, None)
                    .await
                    .with_context(|| format!("delete {node}"))?;
            }
        }
        Ok(())
    }

    /// One uncontended cycle: acquire then release, except for a held
    /// monolock lock in the pipelined pattern, where RELEASE and the next
    /// ACQUIRE go in one write (the lock stays held between cycles).
    async fn cycle(&mut self, pipelined: bool) -> Result<()> {
        if pipelined
            && let Self::Mono {
                session,
                release_acquire,
                held: true,
                ..
            } = self
        {
            session.send(release_acquire).await?;
            session.until_released(1).await?;
            session.until_granted(1).await?;
            return Ok(());
        }
        let give_up = Instant::now() + OP_TIMEOUT;
        self.acquire(give_up).await?;
        if !pipelined {
            self.release().await?;
        }
        Ok(())
    }

    /// Gives back what this client holds on the server (best effort).
    async fn close(self) {
        match self {
            Self::Etcd {
                mut client, lease, ..
            } => {
                let _ = timeout(OP_TIMEOUT, client.lease_revoke(lease)).await;
            }
            // Dropping the last handle of a ZooKeeper client closes its
            // session, and its ephemeral nodes go with it.
            Self::Zookeeper { .. } | Self::Mono { .. } | Self::Redis { .. } => {}
        }
    }
}

/// The servers of one side-by-side run.
pub struct Servers<'a> {
    /// monolock.
    pub mono: &'a Server,
    /// Redis, if it runs.
    pub redis: Option<&'a Server>,
    /// etcd, if it runs.
    pub etcd: Option<&'a Server>,
    /// ZooKeeper, if it runs.
    pub zookeeper: Option<&'a Server>,
    /// The session floor, if it runs.
    pub floor: Option<&'a Server>,
}

impl Servers<'_> {
    /// The server of `series`, if it runs.
    pub fn of(&self, series: Series) -> Option<&Server> {
        match series.system() {
            System::Monolock if series == Series::Floor => self.floor,
            System::Monolock => Some(self.mono),
            System::Redis => self.redis,
            System::Etcd => self.etcd,
            System::Zookeeper => self.zookeeper,
        }
    }
}

/// Throughput row: `clients` clients of `series`, each cycling on its own
/// lock. Records `peers.tp.c<N>.<series>.{cycles_per_s,server_cpu_us_per_cycle}`.
pub async fn throughput(
    series: Series,
    server: &Server,
    run_id: u64,
    clients: usize,
    warmup: Duration,
    length: Duration,
    m: &mut Metrics,
) -> Result<()> {
    let mut lockers = Vec::with_capacity(clients);
    for i in 0..clients {
        let name = format!("bench/peers-tp/{run_id}/{i}");
        let lease = if series == Series::Zookeeper {
            ZK_LONG_SESSION
        } else {
            LONG_LEASE
        };
        let locker = timeout(
            OP_TIMEOUT,
            Locker::connect(series, server.addr, &name, lease),
        )
        .await
        .context("connect timed out")??;
        lockers.push(locker);
    }
    let win = Window::new(warmup, length);
    let pipelined = series == Series::MonoPipelined;
    let mut tasks = tokio::task::JoinSet::new();
    for mut locker in lockers {
        tasks.spawn(async move {
            sleep_until(win.start.into()).await;
            let mut count = 0u64;
            let mut result = Ok(());
            for _ in 0..MAX_LOOPS {
                let t0 = Instant::now();
                if t0 >= win.end {
                    break;
                }
                match timeout(OP_TIMEOUT, locker.cycle(pipelined)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        result = Err(e);
                        break;
                    }
                    Err(_) => {
                        result = Err(anyhow::anyhow!("a lock cycle took over {OP_TIMEOUT:?}"));
                        break;
                    }
                }
                if t0 >= win.measure_from && Instant::now() <= win.end {
                    count += 1;
                }
            }
            locker.close().await;
            result.map(|()| count)
        });
    }
    let cpu = win.measure_cpu(server).await?;
    let mut total = 0u64;
    while let Some(joined) = tasks.join_next().await {
        total += joined.context("client task panicked")??;
    }
    if total == 0 {
        bail!(
            "{}: no lock cycle completed with {clients} clients",
            series.key()
        );
    }
    let secs = win.secs();
    let pre = format!("peers.tp.c{clients}.{}", series.key());
    m.put(&format!("{pre}.cycles_per_s"), total as f64 / secs);
    m.put(
        &format!("{pre}.server_cpu_us_per_cycle"),
        cpu.server.as_secs_f64() * 1e6 / total as f64,
    );
    m.put(
        &format!("{pre}.server_cpu_cores"),
        cpu.server.as_secs_f64() / secs,
    );
    // Near 1.0 the one-thread load generator, not the server, is the limit.
    m.put(
        &format!("{pre}.client_cpu_cores"),
        cpu.client.as_secs_f64() / secs,
    );
    Ok(())
}

/// Contention row: `clients` clients of `series` on one lock, each asking
/// again as soon as it released. Records
/// `peers.cont.c<N>.<series>.{acq_per_s,handover_p50_us,handover_p99_us,fairness,...}`.
pub async fn contention(
    series: Series,
    server: &Server,
    run_id: u64,
    clients: usize,
    warmup: Duration,
    length: Duration,
    m: &mut Metrics,
) -> Result<()> {
    let name = format!("bench/peers-cont/{run_id}");
    let lease = if series == Series::Zookeeper {
        ZK_LONG_SESSION
    } else {
        LONG_LEASE
    };
    let mut lockers = Vec::with_capacity(clients);
    for _ in 0..clients {
        let locker = timeout(
            OP_TIMEOUT,
            Locker::connect(series, server.addr, &name, lease),
        )
        .await
        .context("connect timed out")??;
        lockers.push(locker);
    }
    let win = Window::new(warmup, length);
    let mut tasks = tokio::task::JoinSet::new();
    for mut locker in lockers {
        tasks.spawn(async move {
            let log = contend(&mut locker, win).await;
            locker.close().await;
            log
        });
    }
    let cpu = win.measure_cpu(server).await?;
    let mut logs = Vec::with_capacity(clients);
    while let Some(joined) = tasks.join_next().await {
        logs.push(joined.context("client task panicked")??);
    }
    let secs = win.secs();
    let a = contention::analyse(&logs, win);
    if a.acquisitions == 0 {
        bail!(
            "{}: no acquisition with {clients} clients on one lock",
            series.key()
        );
    }
    if a.overlaps > 0 {
        bail!(
            "{}: {} overlapping holds with {clients} clients on one lock",
            series.key(),
            a.overlaps
        );
    }
    let pre = format!("peers.cont.c{clients}.{}", series.key());
    let mut handover = a.handover;
    m.put(&format!("{pre}.acq_per_s"), a.acquisitions as f64 / secs);
    m.put_opt(
        &format!("{pre}.handover_p50_us"),
        handover.percentile_us(50.0),
    );
    m.put_opt(
        &format!("{pre}.handover_p99_us"),
        handover.percentile_us(99.0),
    );
    m.put(&format!("{pre}.fairness"), a.fairness);
    let transitions = (handover.len() + a.regrant.len()).max(1) as f64;
    m.put(
        &format!("{pre}.regrant_pct"),
        a.regrant.len() as f64 * 100.0 / transitions,
    );
    m.put(
        &format!("{pre}.server_cpu_us_per_acq"),
        cpu.server.as_secs_f64() * 1e6 / a.acquisitions as f64,
    );
    Ok(())
}

/// One contending client's loop until the window closes.
async fn contend(locker: &mut Locker, win: Window) -> Result<ClientLog> {
    let mut log = ClientLog::default();
    sleep_until(win.start.into()).await;
    for _ in 0..MAX_LOOPS {
        let attempt = Instant::now();
        if attempt >= win.end {
            break;
        }
        match timeout_at(win.end.into(), locker.acquire(win.end)).await {
            Err(_window_closed) => {
                log.open_wait = Some(win.end - attempt);
                break;
            }
            // A Redis waiter stops retrying by itself once the window has
            // closed: still waiting, not an error.
            Ok(Err(_)) if Instant::now() >= win.end && matches!(locker, Locker::Redis { .. }) => {
                log.open_wait = Some(win.end - attempt);
                break;
            }
            Ok(result) => result?,
        }
        let grant = Instant::now();
        let release = Instant::now();
        timeout(OP_TIMEOUT, locker.release())
            .await
            .context("release timed out")??;
        log.holds.push((grant, release));
        log.waits.push(grant - attempt);
    }
    Ok(log)
}

/// The lease, TTL or session timeout each system really applies when
/// asked for `lease`: etcd rounds TTLs up to whole seconds and to its
/// minimum; ZooKeeper negotiates the session timeout within its bounds.
pub async fn effective_lease(
    system: System,
    addr: SocketAddr,
    lease: Duration,
) -> Result<Duration> {
    match system {
        System::Monolock | System::Redis => Ok(lease),
        System::Etcd => {
            let mut client = etcd_connect(addr).await?;
            let ttl = i64::try_from(lease.as_secs_f64().ceil() as u64)
                .unwrap_or(i64::MAX)
                .max(1);
            let granted = client
                .lease_grant(ttl, None)
                .await
                .context("etcd LeaseGrant")?;
            let _ = client.lease_revoke(granted.id()).await;
            Ok(Duration::from_secs(
                u64::try_from(granted.ttl()).unwrap_or(0),
            ))
        }
        System::Zookeeper => {
            let client = zk_connect(addr, lease).await?;
            Ok(client.session_timeout())
        }
    }
}

/// Memory row: `locks` locks held by one session (one connection and one
/// lease for etcd, one connection for Redis), on `server`, fresh. Records
/// `peers.mem.<series>.{locks,rss_growth_mib,rss_bytes_per_lock}`.
pub async fn many_locks(
    series: Series,
    server: &Server,
    run_id: u64,
    locks: usize,
    m: &mut Metrics,
) -> Result<()> {
    let before = server.sample()?;
    let name = |i: usize| format!("bench/peers-many/{run_id}/{i}");
    // What keeps the locks held until the sample is taken.
    let mut keep: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
    match series {
        Series::MonoTwoTrips | Series::MonoPipelined | Series::Floor => {
            let mut session = mono_v2::Session::open(server.addr, LONG_LEASE).await?;
            for first in (0..locks).step_by(512) {
                let last = (first + 512).min(locks);
                let mut batch = Vec::new();
                for claim in first..last {
                    let claim = u32::try_from(claim).context("too many locks")?;
                    batch.extend_from_slice(&mono_v2::acquire_bytes(claim, &name(claim as usize))?);
                }
                session.send(&batch).await?;
                for claim in first..last {
                    timeout(OP_TIMEOUT, session.until_granted(claim as u32))
                        .await
                        .context("ACQUIRE timed out")??;
                }
            }
            keep.push(Box::new(session));
        }
        Series::Redis => {
            let mut lock = RedisLock::connect(server.addr, LONG_LEASE).await?;
            let mut rng = StdRng::from_rng(&mut rand::rng());
            for i in 0..locks {
                let token = resp::new_token(&mut rng);
                if !timeout(OP_TIMEOUT, lock.try_acquire(&name(i), &token))
                    .await
                    .context("SET timed out")??
                {
                    bail!("redis: {} was taken", name(i));
                }
            }
            keep.push(Box::new(lock));
        }
        Series::Etcd => {
            let mut client = etcd_connect(server.addr).await?;
            let lease = client
                .lease_grant(LONG_LEASE.as_secs() as i64, None)
                .await
                .context("etcd LeaseGrant")?
                .id();
            lock_in_lanes(
                &client,
                locks,
                name,
                "etcd",
                move |mut client, n| async move {
                    etcd_lock(&mut client, &n, lease).await?;
                    Ok(client)
                },
            )
            .await?;
            keep.push(Box::new(client));
        }
        Series::Zookeeper => {
            let client = zk_connect(server.addr, ZK_LONG_SESSION).await?;
            zk_lock::ensure(&client, ZK_ROOT).await?;
            lock_in_lanes(&client, locks, name, "ZooKeeper", |client, n| async move {
                let dir = zk_dir(&n);
                zk_lock::ensure(&client, &dir).await?;
                zk_acquire(&client, &dir).await?;
                Ok(client)
            })
            .await?;
            keep.push(Box::new(client));
        }
    }
    let held = server.sample()?;
    drop(keep);
    let growth = held.rss_bytes.saturating_sub(before.rss_bytes) as f64;
    let pre = format!("peers.mem.{}", series.key());
    m.put(&format!("{pre}.locks"), locks as f64);
    m.put(&format!("{pre}.rss_growth_mib"), growth / (1024.0 * 1024.0));
    m.put(&format!("{pre}.rss_bytes_per_lock"), growth / locks as f64);
    Ok(())
}

/// Takes locks `0..locks` (named by `name`) over [`MANY_IN_FLIGHT`]
/// lanes, each lane one lock at a time through `lock` on its own clone of
/// `client`, each lock within [`OP_TIMEOUT`].
async fn lock_in_lanes<C, F, Fut>(
    client: &C,
    locks: usize,
    name: impl Fn(usize) -> String,
    system: &'static str,
    lock: F,
) -> Result<()>
where
    C: Clone + Send + 'static,
    F: Fn(C, String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<C>> + Send,
{
    let mut tasks = tokio::task::JoinSet::new();
    for lane in 0..MANY_IN_FLIGHT {
        let mut client = client.clone();
        let lock = lock.clone();
        let names: Vec<String> = (lane..locks).step_by(MANY_IN_FLIGHT).map(&name).collect();
        tasks.spawn(async move {
            for n in names {
                client = timeout(OP_TIMEOUT, lock(client, n))
                    .await
                    .with_context(|| format!("{system} lock timed out"))??;
            }
            anyhow::Ok(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.context("lock task panicked")??;
    }
    Ok(())
}

/// The markdown table of the side-by-side rows: one column per series
/// (system and pattern), medians over the rounds.
pub fn table(
    s: &crate::report::Summary,
    throughput_clients: &[usize],
    contention_clients: &[usize],
) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let _ = write!(md, "| row |");
    for series in Series::ALL {
        let _ = write!(md, " {} |", series.heading());
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "|---|{}", "---:|".repeat(Series::ALL.len()));
    let mut row = |label: String, key: &dyn Fn(Series) -> String| {
        let cells: Vec<String> = Series::ALL
            .iter()
            .map(|&series| {
                s.get(&key(series))
                    .map_or_else(|| "–".to_owned(), crate::report::fmt_spread)
            })
            .collect();
        if cells.iter().all(|c| c == "–") {
            return;
        }
        let _ = writeln!(md, "| {label} | {} |", cells.join(" | "));
    };
    for c in throughput_clients {
        row(format!("short-lock cycles/s, {c} client(s)"), &|se| {
            format!("peers.tp.c{c}.{}.cycles_per_s", se.key())
        });
        row(format!("server CPU µs per cycle, {c} client(s)"), &|se| {
            format!("peers.tp.c{c}.{}.server_cpu_us_per_cycle", se.key())
        });
        row(
            format!("server CPU per cycle ÷ the session floor's, {c} client(s)"),
            &|se| format!("peers.tp.c{c}.{}.cpu_vs_floor", se.key()),
        );
        row(
            format!("load generator CPU (cores), {c} client(s)"),
            &|se| format!("peers.tp.c{c}.{}.client_cpu_cores", se.key()),
        );
    }
    for c in contention_clients {
        for (figure, label) in [
            ("acq_per_s", "acquisitions/s"),
            ("handover_p50_us", "handover p50 (µs)"),
            ("handover_p99_us", "handover p99 (µs)"),
            (
                "fairness",
                "fairness (most ÷ fewest acquisitions per client)",
            ),
        ] {
            row(format!("one lock, {c} clients: {label}"), &|se| {
                format!("peers.cont.c{c}.{}.{figure}", se.key())
            });
        }
    }
    row("SIGKILLed holder → next grant (ms)".to_owned(), &|se| {
        format!("peers.dead.{}.handover_ms", se.key())
    });
    row(
        "lease / TTL / session timeout in force (ms)".to_owned(),
        &|se| format!("peers.dead.{}.lease_ms", se.key()),
    );
    row("server RSS per held lock (bytes)".to_owned(), &|se| {
        format!("peers.mem.{}.rss_bytes_per_lock", se.key())
    });
    row("locks held for the memory row".to_owned(), &|se| {
        format!("peers.mem.{}.locks", se.key())
    });
    md
}

/// `java` on PATH and Debian's ZooKeeper jar, if both are there.
pub fn zookeeper_install() -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let java = crate::servers::find_on_path("java")?;
    let jar = Path::new(crate::servers::ZOOKEEPER_JAR);
    jar.is_file().then(|| (java, jar.to_path_buf()))
}

/// Smoke mode: the figures every series that ran must have produced.
pub fn smoke_checks(
    s: &crate::report::Summary,
    plan: &crate::plan::Plan,
    ran: &[Series],
) -> Vec<String> {
    let mut keys = Vec::new();
    for &se in ran {
        let k = se.key();
        for c in &plan.throughput_clients {
            keys.push(format!("peers.tp.c{c}.{k}.cycles_per_s"));
        }
        if se.contends() {
            for c in &plan.peer_contention_clients {
                keys.push(format!("peers.cont.c{c}.{k}.acq_per_s"));
                keys.push(format!("peers.cont.c{c}.{k}.handover_p50_us"));
            }
            keys.push(format!("peers.dead.{k}.handover_ms"));
            keys.push(format!("peers.dead.{k}.lease_ms"));
            keys.push(format!("peers.mem.{k}.locks"));
        }
    }
    keys.into_iter()
        .filter_map(|key| match s.get(&key) {
            Some(sp) if sp.median > 0.0 && sp.median.is_finite() => None,
            Some(sp) => Some(format!("{key} = {}", sp.median)),
            None => Some(format!("{key} missing")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        plan::{Mode, Plan},
        report::summarize,
    };

    #[test]
    fn zookeeper_lock_nodes_sit_one_level_under_the_root() {
        assert_eq!(zk_dir("bench/a/b"), "/bench-locks/bench_a_b");
        assert_eq!(zk_dir("plain"), "/bench-locks/plain");
    }

    #[test]
    fn smoke_checks_name_every_missing_figure_of_a_series_that_ran() {
        let plan = Plan::for_mode(Mode::Smoke, None);
        let mut m = Metrics::default();
        for c in &plan.throughput_clients {
            m.put(&format!("peers.tp.c{c}.etcd.cycles_per_s"), 10.0);
        }
        for c in &plan.peer_contention_clients {
            m.put(&format!("peers.cont.c{c}.etcd.acq_per_s"), 5.0);
            m.put(&format!("peers.cont.c{c}.etcd.handover_p50_us"), 0.0);
        }
        m.put("peers.dead.etcd.handover_ms", 2000.0);
        m.put("peers.dead.etcd.lease_ms", 2000.0);
        let summary = summarize(&[m]);
        let problems = smoke_checks(&summary, &plan, &[Series::Etcd]);
        assert_eq!(
            problems,
            vec![
                "peers.cont.c4.etcd.handover_p50_us = 0".to_owned(),
                "peers.mem.etcd.locks missing".to_owned(),
            ]
        );
        // A series that did not run is not asked for.
        assert!(smoke_checks(&summary, &plan, &[]).is_empty());
        // The pipelined pattern and the floor have throughput rows only.
        let problems = smoke_checks(&summary, &plan, &[Series::MonoPipelined]);
        assert!(problems.iter().all(|p| p.contains(".tp.")), "{problems:?}");
    }

    #[test]
    fn the_table_has_a_column_per_series_and_skips_rows_nobody_has() {
        let mut m = Metrics::default();
        m.put("peers.tp.c1.zookeeper.cycles_per_s", 2738.0);
        m.put("peers.dead.mono_2rt.handover_ms", 0.67);
        let md = table(&summarize(&[m]), &[1], &[16]);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 4, "{md}");
        assert_eq!(lines[0].matches(" | ").count(), Series::ALL.len());
        assert!(
            lines[2].starts_with("| short-lock cycles/s, 1 client(s) | – | – | – | – | 2738 | – |")
        );
        assert!(lines[3].starts_with("| SIGKILLed holder → next grant (ms) | 0.670 |"));
    }
}
