//! The etcd and ZooKeeper servers the bench and the fault suite set
//! monolock beside: where they are installed, the command line (and
//! `zoo.cfg`) of a single loopback member with its data on tmpfs, and the
//! probes that say when it answers. Only processes and ports: the client
//! crates stay with their users.

use std::{
    io,
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::timeout,
};

/// The ZooKeeper server jar of Debian's `zookeeper` package.
pub const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";

/// How long a JVM, or an etcd member electing itself, may take to answer
/// on a loaded machine.
pub const PEER_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The bound on one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// `name` found on `PATH`, if any.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A port that was free a moment ago: bind 127.0.0.1:0, read it, release it.
///
/// # Errors
/// The bind fails.
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A fresh, empty data directory `OWNER-SYSTEM-PID-PORT` on tmpfs
/// (`/dev/shm`), or in the temporary directory where there is no
/// `/dev/shm`: the figures and faults are about the lock service, not the
/// disk.
///
/// # Errors
/// The directory cannot be created.
pub fn scratch_dir(owner: &str, system: &str, port: u16) -> io::Result<PathBuf> {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("{owner}-{system}-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| io::Error::new(e.kind(), format!("create {}: {e}", dir.display())))?;
    Ok(dir)
}

/// A single etcd member called `name`, serving clients on `addr` (and
/// peers on 127.0.0.1:`peer_port`), its data in `data_dir`, logging
/// warnings only.
pub fn etcd_command(
    bin: &Path,
    name: &str,
    data_dir: &Path,
    addr: SocketAddr,
    peer_port: u16,
) -> Command {
    let client_url = format!("http://{addr}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let mut command = Command::new(bin);
    command
        .args(["--name", name])
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("{name}={peer_url}")])
        .args(["--log-level", "warn"]);
    command
}

/// A standalone ZooKeeper (`java ... QuorumPeerMain`, the class Debian's
/// `zkServer.sh` runs) on 127.0.0.1:`port`, its `zoo.cfg` and data in
/// `data_dir`. `settings` are the caller's `zoo.cfg` lines (the tick, the
/// session bounds); the admin HTTP server is always off and `ruok` allowed,
/// for [`zookeeper_answers`]. `jvm` are the JVM's flags (its heap).
///
/// # Errors
/// `zoo.cfg` cannot be written.
pub fn zookeeper_command(
    java: &Path,
    jar: &Path,
    data_dir: &Path,
    port: u16,
    settings: &str,
    jvm: &[&str],
) -> io::Result<Command> {
    let cfg = data_dir.join("zoo.cfg");
    let contents = format!(
        "{settings}dataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
         admin.enableServer=false\n4lw.commands.whitelist=ruok\n",
        data_dir.join("data").display()
    );
    std::fs::write(&cfg, contents)
        .map_err(|e| io::Error::new(e.kind(), format!("write {}: {e}", cfg.display())))?;
    let mut command = Command::new(java);
    command
        .args(jvm)
        .arg("-cp")
        .arg(jar)
        .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
        .arg(&cfg);
    Ok(command)
}

/// Whether the etcd member on `addr` says it is healthy.
pub async fn etcd_answers(addr: SocketAddr) -> bool {
    ask(
        addr,
        b"GET /health HTTP/1.0\r\n\r\n",
        b"\"health\":\"true\"",
        true,
    )
    .await
}

/// Whether the ZooKeeper on `addr` answers `ruok` with `imok`.
pub async fn zookeeper_answers(addr: SocketAddr) -> bool {
    ask(addr, b"ruok", b"imok", true).await
}

/// Sends `request` on a fresh connection: whether the answer (read to EOF,
/// or only its first read) contains `expect`. Any failure, or no answer
/// within a second, is "not ready yet".
pub async fn ask(addr: SocketAddr, request: &[u8], expect: &[u8], to_eof: bool) -> bool {
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
        io::Result::Ok(answer)
    };
    match timeout(PROBE_TIMEOUT, exchange).await {
        Ok(Ok(answer)) => answer.windows(expect.len()).any(|w| w == expect),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_command_names_the_member_and_its_urls() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 2379));
        let command = etcd_command(Path::new("etcd"), "m", Path::new("/d"), addr, 2380);
        let args: Vec<_> = command.get_args().map(|a| a.to_string_lossy()).collect();
        let joined = args.join(" ");
        assert!(joined.contains("--listen-client-urls http://127.0.0.1:2379"));
        assert!(joined.contains("--initial-cluster m=http://127.0.0.1:2380"));
        assert!(joined.contains("--data-dir /d"));
    }

    #[test]
    fn zookeeper_config_keeps_the_callers_settings() {
        let dir = tempfile::tempdir().unwrap();
        let command = zookeeper_command(
            Path::new("java"),
            Path::new("zk.jar"),
            dir.path(),
            2181,
            "tickTime=200\n",
            &["-Xmx1g"],
        )
        .unwrap();
        let cfg = std::fs::read_to_string(dir.path().join("zoo.cfg")).unwrap();
        assert!(cfg.starts_with("tickTime=200\ndataDir="));
        assert!(cfg.contains("clientPort=2181\n"));
        assert!(cfg.contains("4lw.commands.whitelist=ruok\n"));
        let args: Vec<_> = command.get_args().map(|a| a.to_string_lossy()).collect();
        assert_eq!(args[0], "-Xmx1g");
        assert_eq!(args[1], "-cp");
    }

    #[tokio::test]
    async fn ask_reads_the_answer_of_a_real_socket() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let serve = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 4];
            stream.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"ruok");
            stream.write_all(b"imok").await.unwrap();
        });
        assert!(zookeeper_answers(addr).await);
        serve.await.unwrap();
        assert!(!zookeeper_answers(addr).await, "nothing listens any more");
    }
}
