//! The lock servers of the side-by-side scenarios as child processes: the
//! real `monolock`, `redis-server`, a single etcd member and a standalone
//! ZooKeeper, each on loopback with its documented defaults except where
//! [`super::System::settings`] says otherwise.

use std::{net::SocketAddr, path::PathBuf, process::Stdio, time::Duration};

pub use monolock_testkit::peers::ZOOKEEPER_JAR;
use monolock_testkit::peers::{
    PEER_READY_TIMEOUT, ask, etcd_answers, etcd_command, find_on_path, free_port, scratch_dir,
    zookeeper_answers, zookeeper_command,
};
use tokio::{
    process::{Child, Command},
    time::{Instant, sleep},
};

use super::System;
use crate::process::{ServerProcess, ServerSpec};

/// Where each server's binary is (`None`: not installed here).
#[derive(Clone, Debug, Default)]
pub struct Installs {
    /// `monolock`.
    pub monolock: Option<PathBuf>,
    /// `redis-server`.
    pub redis: Option<PathBuf>,
    /// `etcd`.
    pub etcd: Option<PathBuf>,
    /// `java` and the ZooKeeper jar.
    pub zookeeper: Option<(PathBuf, PathBuf)>,
}

impl Installs {
    /// Looks on `PATH` (and `MONOLOCK_BIN` / next to this executable for
    /// `monolock`).
    pub fn find() -> Self {
        let jar = PathBuf::from(ZOOKEEPER_JAR);
        Self {
            monolock: crate::process::locate_binary("monolock", "MONOLOCK_BIN").ok(),
            redis: find_on_path("redis-server"),
            etcd: find_on_path("etcd"),
            zookeeper: find_on_path("java")
                .filter(|_| jar.is_file())
                .map(|java| (java, jar)),
        }
    }

    /// Why `system` cannot run here, if it cannot.
    pub fn missing(&self, system: System) -> Option<String> {
        let found = match system {
            System::Monolock => self.monolock.is_some(),
            System::Redis => self.redis.is_some(),
            System::Etcd => self.etcd.is_some(),
            System::Zookeeper => self.zookeeper.is_some(),
        };
        (!found).then(|| match system {
            System::Monolock => "monolock not built (cargo build -p monolock, or MONOLOCK_BIN)".into(),
            System::Redis => "redis-server not installed".into(),
            System::Etcd | System::Zookeeper => format!(
                "{} not installed (apt-get install etcd-server zookeeperd, or .ci/setup.d/peers.sh)",
                system.name()
            ),
        })
    }
}

/// A running server, killed (and its data directory removed) when dropped.
pub struct PeerServer {
    /// Its system.
    pub system: System,
    /// Where clients connect.
    pub addr: SocketAddr,
    /// Its process id (to pause it).
    pub pid: u32,
    _process: Running,
}

/// What keeps the server running until dropped.
enum Running {
    #[expect(dead_code, reason = "held only to be dropped with the server")]
    Monolock(Box<ServerProcess>),
    Child(Box<Child>, PathBuf),
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Self::Child(child, dir) = self {
            if let Some(pid) = child.id() {
                let _ = crate::process::send_signal(pid, libc::SIGCONT);
            }
            let _ = child.start_kill();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl PeerServer {
    /// Starts `system`'s server and waits until it answers.
    ///
    /// # Errors
    /// Not installed, spawn failure, or not ready in time.
    pub async fn start(system: System, installs: &Installs) -> anyhow::Result<Self> {
        if let Some(why) = installs.missing(system) {
            anyhow::bail!("{why}");
        }
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let data = scratch_dir("monolock-peer-faults", system.name(), port)?;
        let mut command = match system {
            System::Monolock => {
                let binary = installs.monolock.clone().unwrap_or_default();
                let server = ServerProcess::start(&ServerSpec {
                    binary,
                    label: "monolock".into(),
                    io_timeout: Duration::from_secs(5),
                    log_level: "info",
                    nofile: None,
                    audit_log: None,
                })
                .await?;
                let _ = std::fs::remove_dir_all(&data);
                return Ok(Self {
                    system,
                    addr: server.addr,
                    pid: server.process.pid(),
                    _process: Running::Monolock(Box::new(server)),
                });
            }
            System::Redis => {
                let mut c = Command::new(installs.redis.clone().unwrap_or_default());
                c.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no"])
                    .arg("--dir")
                    .arg(&data);
                c
            }
            System::Etcd => {
                let etcd = installs.etcd.clone().unwrap_or_default();
                let peer_port = free_port()?;
                Command::from(etcd_command(
                    &etcd,
                    "faults",
                    &data.join("etcd"),
                    addr,
                    peer_port,
                ))
            }
            System::Zookeeper => {
                let (java, jar) = installs.zookeeper.clone().unwrap_or_default();
                // Debian's zoo.cfg defaults (tickTime 2000 ms: sessions of
                // 4-40 s), on loopback, the admin HTTP server off.
                Command::from(zookeeper_command(
                    &java,
                    &jar,
                    &data,
                    port,
                    "tickTime=2000\ninitLimit=10\nsyncLimit=5\n",
                    &["-Xms128m", "-Xmx512m"],
                )?)
            }
        };
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        die_with_parent(&mut command);
        let child = command.spawn()?;
        let pid = child.id().unwrap_or_default();
        let server = Self {
            system,
            addr,
            pid,
            _process: Running::Child(Box::new(child), data),
        };
        server.wait_ready().await?;
        Ok(server)
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + PEER_READY_TIMEOUT;
        loop {
            let ready = match self.system {
                System::Monolock => true,
                System::Redis => ask(self.addr, b"PING\r\n", b"+PONG", false).await,
                System::Etcd => etcd_answers(self.addr).await,
                System::Zookeeper => zookeeper_answers(self.addr).await,
            };
            if ready {
                return Ok(());
            }
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "{} did not answer on {} within {PEER_READY_TIMEOUT:?}",
                    self.system.name(),
                    self.addr
                );
            }
            // A readiness probe of a process that sends no event.
            sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Has the kernel SIGKILL the child if this process dies first.
#[allow(unsafe_code)]
pub(crate) fn die_with_parent(command: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec and only
    // calls prctl(2), which is async-signal-safe; it allocates nothing.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
