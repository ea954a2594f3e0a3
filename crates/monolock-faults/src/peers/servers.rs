//! The lock servers of the side-by-side scenarios as child processes: the
//! real `monolock`, `redis-server`, a single etcd member and a standalone
//! ZooKeeper, each on loopback with its documented defaults except where
//! [`super::System::settings`] says otherwise.

use std::{
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    process::{Child, Command},
    time::{Instant, sleep, timeout},
};

use super::System;
use crate::process::{ServerProcess, ServerSpec};

/// The ZooKeeper server jar of Debian's `zookeeper` package.
pub const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";

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
            redis: on_path("redis-server"),
            etcd: on_path("etcd"),
            zookeeper: on_path("java")
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

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
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

/// How long a JVM or an etcd member electing itself may take on a loaded
/// machine.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

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
        let data = scratch_dir(system.name(), port)?;
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
                let peer_url = format!("http://127.0.0.1:{}", free_port()?);
                let client_url = format!("http://{addr}");
                let mut c = Command::new(installs.etcd.clone().unwrap_or_default());
                c.args(["--name", "faults"])
                    .arg("--data-dir")
                    .arg(data.join("etcd"))
                    .args(["--listen-client-urls", &client_url])
                    .args(["--advertise-client-urls", &client_url])
                    .args(["--listen-peer-urls", &peer_url])
                    .args(["--initial-advertise-peer-urls", &peer_url])
                    .args(["--initial-cluster", &format!("faults={peer_url}")])
                    .args(["--log-level", "warn"]);
                c
            }
            System::Zookeeper => {
                let (java, jar) = installs.zookeeper.clone().unwrap_or_default();
                // Debian's zoo.cfg defaults (tickTime 2000 ms: sessions of
                // 4-40 s), on loopback, the admin HTTP server off.
                let cfg = data.join("zoo.cfg");
                std::fs::write(
                    &cfg,
                    format!(
                        "tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort={port}\n\
                         clientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
                         4lw.commands.whitelist=ruok\n",
                        data.join("data").display()
                    ),
                )?;
                let mut c = Command::new(java);
                c.args(["-Xms128m", "-Xmx512m", "-cp"])
                    .arg(jar)
                    .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
                    .arg(&cfg);
                c
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
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let ready = match self.system {
                System::Monolock => true,
                System::Redis => ask(self.addr, b"PING\r\n", b"+PONG", false).await,
                System::Etcd => {
                    ask(
                        self.addr,
                        b"GET /health HTTP/1.0\r\n\r\n",
                        b"\"health\":\"true\"",
                        true,
                    )
                    .await
                }
                System::Zookeeper => ask(self.addr, b"ruok", b"imok", true).await,
            };
            if ready {
                return Ok(());
            }
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "{} did not answer on {} within {READY_TIMEOUT:?}",
                    self.system.name(),
                    self.addr
                );
            }
            // A readiness probe of a process that sends no event.
            sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Sends `request` on a fresh connection: whether the answer (to EOF, or
/// the first read) contains `expect`.
async fn ask(addr: SocketAddr, request: &[u8], expect: &[u8], to_eof: bool) -> bool {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request).await?;
        let mut answer = Vec::new();
        if to_eof {
            stream.read_to_end(&mut answer).await?;
        } else {
            let mut buf = [0u8; 64];
            let n = stream.read(&mut buf).await?;
            answer.extend_from_slice(&buf[..n]);
        }
        std::io::Result::Ok(answer)
    };
    match timeout(Duration::from_secs(1), exchange).await {
        Ok(Ok(answer)) => answer.windows(expect.len()).any(|w| w == expect),
        _ => false,
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A fresh data directory on tmpfs (`/dev/shm`) where there is one.
fn scratch_dir(system: &str, port: u16) -> std::io::Result<PathBuf> {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!(
        "monolock-peer-faults-{system}-{}-{port}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
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
