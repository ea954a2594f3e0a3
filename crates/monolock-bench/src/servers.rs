//! The servers under test, started as child processes (so their RSS and CPU
//! can be read from `/proc/PID`), each on a free loopback port and pinned to
//! the server CPU.

use std::{
    fs::File,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use monolock_testkit::peers::{
    PEER_READY_TIMEOUT, etcd_answers, etcd_command, scratch_dir, zookeeper_answers,
    zookeeper_command,
};
pub use monolock_testkit::peers::{ZOOKEEPER_JAR, find_on_path, free_port};
use tokio::net::TcpStream;

use crate::{
    resp::{Reply, RespConn},
    sys::{self, ProcSample},
};

/// How long a server may take to accept connections after it was started.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// The first part of the peers' data directories' names.
const SCRATCH_OWNER: &str = "monolock-bench";
/// Pause between readiness probes.
const READY_POLL: Duration = Duration::from_millis(20);

/// Which system a figure belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    /// monolock
    Monolock,
    /// Redis with the SET NX PX recipe
    Redis,
    /// A single etcd member, through its lock service.
    Etcd,
    /// A standalone ZooKeeper, through the lock recipe.
    Zookeeper,
}

impl System {
    /// The lower-case name used in metric keys.
    pub fn key(self) -> &'static str {
        match self {
            Self::Monolock => "monolock",
            Self::Redis => "redis",
            Self::Etcd => "etcd",
            Self::Zookeeper => "zookeeper",
        }
    }
}

/// A running server child; killed and reaped on drop.
pub struct Server {
    /// The protocol it speaks.
    pub system: System,
    /// The series its figures are recorded under: the system's key, or
    /// `floor` for the connection floor (which speaks a sliver of
    /// monolock's protocol).
    pub series: &'static str,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its process id (for /proc).
    pub pid: u32,
    child: Child,
    /// Where its stdout/stderr go.
    pub log: PathBuf,
    /// Its data directory (on tmpfs), removed when it stops.
    data_dir: Option<PathBuf>,
}

impl Server {
    /// Starts `monolock serve --listen 127.0.0.1:PORT --log-format json`.
    pub async fn start_monolock(bin: &Path, cpu: Option<usize>, log_dir: &Path) -> Result<Self> {
        Self::start_monolock_with(bin, cpu, log_dir, &[]).await
    }

    /// [`Server::start_monolock`] with extra flags (e.g. TLS files).
    pub async fn start_monolock_with(
        bin: &Path,
        cpu: Option<usize>,
        log_dir: &Path,
        extra: &[std::ffi::OsString],
    ) -> Result<Self> {
        Self::start_monolock_as("monolock", bin, cpu, log_dir, extra).await
    }

    /// [`Server::start_monolock_with`], its figures recorded under
    /// `series` (`monolock_base` for the `--baseline-bin` build).
    pub async fn start_monolock_as(
        series: &'static str,
        bin: &Path,
        cpu: Option<usize>,
        log_dir: &Path,
        extra: &[std::ffi::OsString],
    ) -> Result<Self> {
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--log-format")
            .arg("json");
        cmd.args(extra);
        Self::spawn(System::Monolock, series, cmd, addr, cpu, log_dir).await
    }

    /// Starts the connection floor, `monolock-bench conn-floor` (`exe` is
    /// this binary): see [`crate::conn_floor`].
    pub async fn start_conn_floor(exe: &Path, cpu: Option<usize>, log_dir: &Path) -> Result<Self> {
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut cmd = Command::new(exe);
        cmd.arg("conn-floor").arg("--listen").arg(addr.to_string());
        Self::spawn(System::Monolock, "floor", cmd, addr, cpu, log_dir).await
    }

    /// Starts the session floor, `monolock-bench session-floor` (`exe` is
    /// this binary): see [`crate::session_floor`].
    pub async fn start_session_floor(
        exe: &Path,
        cpu: Option<usize>,
        log_dir: &Path,
    ) -> Result<Self> {
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut cmd = Command::new(exe);
        cmd.arg("session-floor")
            .arg("--listen")
            .arg(addr.to_string());
        Self::spawn(System::Monolock, "session_floor", cmd, addr, cpu, log_dir).await
    }

    /// Starts `redis-server` with persistence off, on loopback only.
    pub async fn start_redis(bin: &Path, cpu: Option<usize>, log_dir: &Path) -> Result<Self> {
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut cmd = Command::new(bin);
        cmd.args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            // Bound to 127.0.0.1 only; protected mode would refuse the
            // sessions calibration's other loopback source addresses.
            .args(["--protected-mode", "no"])
            .args(["--logfile", ""])
            // Room for the sessions calibration (the descriptor limit caps it).
            .args(["--maxclients", "19900"])
            .arg("--dir")
            .arg(log_dir);
        Self::spawn(System::Redis, "redis", cmd, addr, cpu, log_dir).await
    }

    /// Starts a single etcd member on loopback, its data on tmpfs
    /// (`/dev/shm`): the bench measures the lock service, not the disk,
    /// which favours etcd (every write is a fsync'd WAL append).
    pub async fn start_etcd(bin: &Path, cpu: Option<usize>, log_dir: &Path) -> Result<Self> {
        let port = free_port()?;
        let peer_port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let data = scratch_dir(SCRATCH_OWNER, "etcd", port)?;
        let mut cmd = etcd_command(bin, "bench", &data, addr, peer_port);
        cmd.args(["--logger", "zap", "--log-outputs", "stderr"]);
        Self::spawn_with_data(System::Etcd, "etcd", cmd, addr, cpu, log_dir, data).await
    }

    /// Starts a standalone ZooKeeper (`java ... QuorumPeerMain`, the class
    /// Debian's `zkServer.sh` runs) on loopback, its data on tmpfs. A tick
    /// of 200 ms lets sessions as short as the bench's leases (the
    /// smallest session timeout is two ticks); the admin HTTP server is off
    /// and the per-address connection cap is lifted (every client is on
    /// 127.0.0.1).
    pub async fn start_zookeeper(
        java: &Path,
        jar: &Path,
        cpu: Option<usize>,
        log_dir: &Path,
    ) -> Result<Self> {
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let data = scratch_dir(SCRATCH_OWNER, "zookeeper", port)?;
        let cmd = zookeeper_command(
            java,
            jar,
            &data,
            port,
            "tickTime=200\nmaxSessionTimeout=60000\nmaxClientCnxns=0\n",
            // A fixed heap, as ZooKeeper's administrator's guide asks, far
            // above what 10,000 locks need.
            &["-Xms256m", "-Xmx1g"],
        );
        let cmd = match cmd {
            Ok(cmd) => cmd,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&data);
                return Err(e.into());
            }
        };
        Self::spawn_with_data(
            System::Zookeeper,
            "zookeeper",
            cmd,
            addr,
            cpu,
            log_dir,
            data,
        )
        .await
    }

    async fn spawn_with_data(
        system: System,
        series: &'static str,
        cmd: Command,
        addr: SocketAddr,
        cpu: Option<usize>,
        log_dir: &Path,
        data: PathBuf,
    ) -> Result<Self> {
        let started = Self::spawn(system, series, cmd, addr, cpu, log_dir).await;
        match started {
            Ok(mut server) => {
                server.data_dir = Some(data);
                Ok(server)
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&data);
                Err(e)
            }
        }
    }

    async fn spawn(
        system: System,
        series: &'static str,
        mut cmd: Command,
        addr: SocketAddr,
        cpu: Option<usize>,
        log_dir: &Path,
    ) -> Result<Self> {
        let log = log_dir.join(format!("{series}-{}.log", addr.port()));
        let out = File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        if let Some(cpu) = cpu {
            sys::pin_command(&mut cmd, cpu);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("start {:?}", cmd.get_program()))?;
        let mut server = Self {
            system,
            series,
            addr,
            pid: child.id(),
            child,
            log,
            data_dir: None,
        };
        server.wait_ready().await?;
        Ok(server)
    }

    /// Connects in a bounded retry loop until the server answers.
    async fn wait_ready(&mut self) -> Result<()> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} exited during startup ({status}); see {}",
                    self.series,
                    self.log.display()
                );
            }
            let ready = match self.system {
                System::Monolock => TcpStream::connect(self.addr).await.is_ok(),
                System::Redis => match RespConn::connect(self.addr).await {
                    Ok(mut c) => matches!(c.cmd(&[b"PING"]).await, Ok(Reply::Simple(_))),
                    Err(_) => false,
                },
                System::Etcd => etcd_answers(self.addr).await,
                System::Zookeeper => zookeeper_answers(self.addr).await,
            };
            if ready {
                return Ok(());
            }
            let ready_timeout = match self.system {
                // A JVM, or a member that elects itself, on a loaded machine.
                System::Etcd | System::Zookeeper => PEER_READY_TIMEOUT,
                System::Monolock | System::Redis => READY_TIMEOUT,
            };
            if started.elapsed() > ready_timeout {
                bail!(
                    "{} did not accept connections on {} within {ready_timeout:?}; see {}",
                    self.series,
                    self.addr,
                    self.log.display()
                );
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// CPU and RSS of the server right now.
    pub fn sample(&self) -> Result<ProcSample> {
        sys::proc_sample(self.pid)
            .with_context(|| format!("read /proc/{} of {}", self.pid, self.series))
    }

    /// Fails if the server has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} exited ({status}); see {}",
                self.series,
                self.log.display()
            );
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Best effort: the child may already be gone.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.data_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The first line of `bin ARG`, for the report.
pub fn first_line(bin: &Path, arg: &str) -> Option<String> {
    let out = Command::new(bin).arg(arg).output().ok()?;
    let text = if out.stdout.is_empty() {
        out.stderr
    } else {
        out.stdout
    };
    String::from_utf8_lossy(&text)
        .lines()
        .next()
        .map(str::to_owned)
}

/// The version line of `redis-server --version`, for the report.
pub fn redis_version(bin: &Path) -> Option<String> {
    let out = Command::new(bin).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("v="))
        .map(str::to_owned)
}
