//! A throwaway PostgreSQL cluster: `initdb` in a temporary directory, started
//! with `pg_ctl` on a free loopback port, stopped and removed on drop.
//!
//! PostgreSQL refuses to run as root, and CI runs as root: then the cluster
//! runs as the `postgres` system user that Debian's package creates.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::Command,
};

use tempfile::TempDir;

/// The unprivileged user the cluster runs as when the test runs as root.
const SYSTEM_USER: &str = "postgres";

/// The superuser the cluster is created with, and the user of [`Postgres::url`].
pub const SUPERUSER: &str = "monolock";

/// A running cluster; dropping it stops the server and removes its files.
pub struct Postgres {
    dir: TempDir,
    bin: PathBuf,
    /// The loopback port the server listens on.
    pub port: u16,
}

impl Postgres {
    /// Creates and starts a cluster; panics with the reason if it cannot.
    pub fn start() -> Self {
        let bin = server_bindir();
        let dir = tempfile::Builder::new()
            .prefix("monolock-pg-")
            .tempdir()
            .expect("temporary directory");
        if is_root() {
            let status = Command::new("chown")
                .args([SYSTEM_USER, &dir.path().display().to_string()])
                .status()
                .expect("run chown");
            assert!(
                status.success(),
                "chown {SYSTEM_USER} of the cluster directory failed"
            );
        }
        let data = dir.path().join("data");
        run(
            as_cluster_user(&bin.join("initdb"))
                .arg("-D")
                .arg(&data)
                .args([
                    "-U",
                    SUPERUSER,
                    "--auth=trust",
                    "-N",
                    "-E",
                    "UTF8",
                    "--locale=C",
                ]),
            "initdb",
        );
        let mut cluster = None;
        // Another process may take the free port before the server binds it.
        for _ in 0..5 {
            let port = free_port();
            let options = format!(
                "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off",
                dir.path().display()
            );
            let started = as_cluster_user(&bin.join("pg_ctl"))
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(dir.path().join("server.log"))
                .args(["-w", "-t", "60", "-o", &options, "start"])
                .output()
                .expect("run pg_ctl start");
            if started.status.success() {
                cluster = Some(port);
                break;
            }
        }
        let Some(port) = cluster else {
            let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
            panic!("the PostgreSQL server did not start:\n{log}");
        };
        Self { dir, bin, port }
    }

    /// The URL of the cluster's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = as_cluster_user(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// The directory of `initdb` and `pg_ctl`: on `PATH`, else the newest
/// `/usr/lib/postgresql/N/bin` (Debian keeps the server binaries there).
fn server_bindir() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file());
    if let Some(dir) = on_path {
        return dir;
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).expect(
        "the PostgreSQL server binaries (initdb, pg_ctl) are not installed: \
         apt-get install postgresql (.ci/setup.d/postgresql.sh does)",
    )
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

/// `program` run as the cluster's owner: the `postgres` user under root.
fn as_cluster_user(program: &Path) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", SYSTEM_USER, "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn run(command: &mut Command, what: &str) {
    let out = command
        .output()
        .unwrap_or_else(|err| panic!("run {what}: {err}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A loopback port nothing listens on (it was free a moment ago).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}
