//! The lock servers of the side-by-side scenarios as child processes: the
//! real `monolock`, `redis-server`, a single etcd member and a standalone
//! ZooKeeper, each on loopback with its documented defaults except where
//! [`super::System::settings`] says otherwise.

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::Stdio,
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

pub use monolock_testkit::peers::ZOOKEEPER_JAR;
use monolock_testkit::peers::{
    PEER_READY_TIMEOUT, ask, etcd_answers, etcd_command, find_on_path, free_port, scratch_dir,
    zookeeper_answers, zookeeper_command,
};
use tokio::{
    process::{Child, Command},
    sync::Mutex,
    time::{Instant, sleep, timeout},
};

use super::System;
use crate::{clock::mono_ns, process::send_signal};

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
/// It can be stopped and started again on the same port and data
/// directory, as a service manager restarts a service.
pub struct PeerServer {
    /// Its system.
    pub system: System,
    /// Where clients connect.
    pub addr: SocketAddr,
    /// The second port: etcd's peer URL, monolock's ops endpoint (whose
    /// `/readyz` says when it serves).
    side_port: u16,
    data: PathBuf,
    installs: Installs,
    pid: AtomicU32,
    child: Mutex<Option<Child>>,
}

/// When a restart stopped the server and when the new process served.
#[derive(Clone, Copy, Debug)]
pub struct Restarted {
    /// CLOCK_MONOTONIC right before the signal.
    pub signalled_ns: u64,
    /// CLOCK_MONOTONIC once the new process answered as ready.
    pub ready_ns: u64,
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.get_mut() {
            if let Some(pid) = child.id() {
                let _ = crate::process::send_signal(pid, libc::SIGCONT);
            }
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.data);
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
        let side_port = loop {
            let side = free_port()?;
            if side != port {
                break side;
            }
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let data = scratch_dir("monolock-peer-faults", system.name(), port)?;
        let server = Self {
            system,
            addr,
            side_port,
            data,
            installs: installs.clone(),
            pid: AtomicU32::new(0),
            child: Mutex::new(None),
        };
        server.launch().await?;
        Ok(server)
    }

    /// Its process id now (it changes with a restart).
    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::SeqCst)
    }

    /// Stops the server (SIGTERM, at most 30 s, or SIGKILL when `kill`)
    /// and starts it again on the same port and data directory, then waits
    /// until it answers as its documentation says a ready server does.
    ///
    /// # Errors
    /// It did not exit, or did not start or answer again in time.
    pub async fn restart(&self, kill: bool) -> anyhow::Result<Restarted> {
        let mut slot = self.child.lock().await;
        let Some(mut child) = slot.take() else {
            anyhow::bail!("{} is not running", self.system.name());
        };
        let pid = child.id().unwrap_or_default();
        let signalled_ns = mono_ns();
        if kill {
            send_signal(pid, libc::SIGKILL)?;
        } else {
            // A paused server cannot handle SIGTERM.
            send_signal(pid, libc::SIGCONT)?;
            send_signal(pid, libc::SIGTERM)?;
        }
        if timeout(Duration::from_secs(30), child.wait())
            .await
            .is_err()
        {
            let _ = child.start_kill();
            let _ = timeout(Duration::from_secs(5), child.wait()).await;
            drop(slot);
            // Started again all the same, so that the next rounds can run.
            self.launch().await?;
            anyhow::bail!(
                "{} did not exit within 30 s of SIGTERM (killed)",
                self.system.name()
            );
        }
        drop(slot);
        self.launch().await?;
        Ok(Restarted {
            signalled_ns,
            ready_ns: mono_ns(),
        })
    }

    /// The server's command line: always the same port and data directory.
    fn command(&self) -> anyhow::Result<Command> {
        let port = self.addr.port();
        let data = &self.data;
        Ok(match self.system {
            System::Monolock => {
                let mut c = Command::new(self.installs.monolock.clone().unwrap_or_default());
                // A service's settings: tokens rise across restarts through
                // the token floor on its state directory.
                c.args(["serve", "--listen", &self.addr.to_string()])
                    .args(["--ops-listen", &format!("127.0.0.1:{}", self.side_port)])
                    .arg("--token-floor")
                    .arg(data.join("token-floor"))
                    .args(["--io-timeout", "5s", "--log-level", "warn"]);
                c
            }
            System::Redis => {
                let mut c = Command::new(self.installs.redis.clone().unwrap_or_default());
                c.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no"])
                    .arg("--dir")
                    .arg(data);
                c
            }
            System::Etcd => Command::from(etcd_command(
                &self.installs.etcd.clone().unwrap_or_default(),
                "faults",
                &data.join("etcd"),
                self.addr,
                self.side_port,
            )),
            System::Zookeeper => {
                let (java, jar) = self.installs.zookeeper.clone().unwrap_or_default();
                // Debian's zoo.cfg defaults (tickTime 2000 ms: sessions of
                // 4-40 s), on loopback, the admin HTTP server off.
                Command::from(zookeeper_command(
                    &java,
                    &jar,
                    data,
                    port,
                    "tickTime=2000\ninitLimit=10\nsyncLimit=5\n",
                    &["-Xms128m", "-Xmx512m"],
                )?)
            }
        })
    }

    /// Spawns the server and waits until it is ready.
    async fn launch(&self) -> anyhow::Result<()> {
        let mut command = self.command()?;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        isolate(&mut command);
        let child = command.spawn()?;
        self.pid
            .store(child.id().unwrap_or_default(), Ordering::SeqCst);
        *self.child.lock().await = Some(child);
        self.wait_ready().await
    }

    /// Waits for the readiness each system's documentation gives: monolock's
    /// `/readyz` answering 200, Redis's `PING`, etcd's `/health`, and for
    /// ZooKeeper `ruok` then a session (`ruok` answers before a restarted
    /// server serves requests).
    async fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + PEER_READY_TIMEOUT;
        loop {
            let ready = match self.system {
                System::Monolock => {
                    let ops = SocketAddr::from(([127, 0, 0, 1], self.side_port));
                    ask(ops, b"GET /readyz HTTP/1.0\r\n\r\n", b" 200 ", true).await
                }
                System::Redis => ask(self.addr, b"PING\r\n", b"+PONG", false).await,
                System::Etcd => etcd_answers(self.addr).await,
                System::Zookeeper => {
                    zookeeper_answers(self.addr).await && zookeeper_serves(self.addr).await
                }
            };
            if ready {
                return Ok(());
            }
            if let Some(child) = self.child.lock().await.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                anyhow::bail!("{} exited at start: {status}", self.system.name());
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

/// Whether a ZooKeeper client gets a session on `addr` and an answer to a
/// read within a few seconds.
async fn zookeeper_serves(addr: SocketAddr) -> bool {
    let session = async {
        let client = zookeeper_client::Client::connector()
            .with_session_timeout(Duration::from_secs(4))
            .connect(&addr.to_string())
            .await
            .ok()?;
        Some(client.check_stat("/").await.is_ok())
    };
    timeout(Duration::from_secs(5), session)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Puts the child in a process group of its own, and has the kernel SIGKILL
/// it if this process dies first.
///
/// Its own group, because the scenarios SIGSTOP holders and servers and
/// only they may continue them: in the harness's group, job control would
/// continue them too (a shell's `bg` or `fg`, or the kernel's SIGCONT to
/// every process of a group orphaned with a stopped member, as when the
/// shell that started the harness in the background exits).
pub(crate) fn isolate(command: &mut Command) {
    command.process_group(0);
    die_with_parent(command);
}

/// Has the kernel SIGKILL the child if this process dies first.
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{process_state, wait_stopped};

    /// What a shell's `bg` does, and the kernel when a group with a stopped
    /// member is orphaned: SIGCONT to every process of the harness's group.
    /// A child the harness stopped must stay stopped.
    #[tokio::test]
    async fn a_stopped_child_is_not_continued_with_the_harness_group() {
        let mut command = Command::new("sleep");
        command.arg("30").kill_on_drop(true);
        isolate(&mut command);
        let mut child = command.spawn().expect("spawning sleep");
        let pid = child.id().expect("the child's pid");
        send_signal(pid, libc::SIGSTOP).expect("SIGSTOP");
        wait_stopped(pid, Duration::from_secs(10))
            .await
            .expect("the child stops");
        // kill(0, ...): every process of this process's group. SIGCONT
        // takes effect when it is sent, so the state can be read at once.
        send_signal(0, libc::SIGCONT).expect("SIGCONT to the group");
        let state = process_state(pid);
        let _ = child.start_kill();
        let _ = child.wait().await;
        assert_eq!(state, Some('T'), "the stopped child was continued");
    }
}
