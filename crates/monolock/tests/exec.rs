//! `monolock exec` as a process, against a server running in the test.

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{ExitStatus, Stdio},
    time::Duration,
};

use monolock_client::Client;
use monolock_server::{ServerConfig, ServerHandle};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, BufReader, Lines},
    net::TcpListener,
    process::{Child, ChildStdout, Command},
    time::Instant,
};

const MONOLOCK: &str = env!("CARGO_BIN_EXE_monolock");

const EXIT_USAGE: i32 = 64;
const EXIT_UNAVAILABLE: i32 = 69;
const EXIT_NOT_ACQUIRED: i32 = 75;
const EXIT_LOST: i32 = 79;

/// How long a test waits for something that should happen at once.
const PATIENCE: Duration = Duration::from_secs(10);

const LEASE: Duration = Duration::from_secs(2);

struct TestServer {
    addr: SocketAddr,
    handle: ServerHandle,
}

impl TestServer {
    async fn start() -> Self {
        let (addr, handle, _) = monolock_testkit::spawn_server(ServerConfig::default()).await;
        Self { addr, handle }
    }

    fn client(&self) -> Client {
        Client::new(self.addr.to_string())
    }

    fn waiters(&self, name: &str) -> usize {
        self.handle.lock(name).map_or(0, |lock| lock.waiters.len())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

/// Polls `check` every few milliseconds until it holds; panics after
/// [`PATIENCE`].
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A running `monolock exec`.
struct Exec {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Exec {
    fn spawn(server: &TestServer, args: &[&str]) -> Self {
        let mut child = Command::new(MONOLOCK)
            .arg("exec")
            .args(args)
            .env("MONOLOCK_ADDRESS", server.addr.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn monolock exec");
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Self { child, stdout }
    }

    /// The next line the command printed.
    async fn line(&mut self) -> String {
        tokio::time::timeout(PATIENCE, self.stdout.next_line())
            .await
            .expect("a line in time")
            .expect("stdout readable")
            .expect("a line before EOF")
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id().expect("running")).expect("pid");
        // SAFETY: kill(2) reads no memory; the pid is our unreaped child.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill failed");
    }

    /// Waits for exit; returns the status, the rest of stdout, and stderr.
    async fn finish(mut self) -> (ExitStatus, String, String) {
        let mut stderr = self.child.stderr.take().expect("stderr");
        let status = tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("exec exits in time")
            .expect("wait");
        let mut rest = String::new();
        while let Ok(Some(line)) = self.stdout.next_line().await {
            rest.push_str(&line);
            rest.push('\n');
        }
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err).await;
        (status, rest, err)
    }
}

/// Runs `monolock exec` to the end.
async fn exec(server: &TestServer, args: &[&str]) -> (ExitStatus, String, String) {
    Exec::spawn(server, args).finish().await
}

/// A path in the test's scratch directory that does not exist yet.
fn scratch(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("exec-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_sees_the_lock_name_and_token() {
    let server = TestServer::start().await;
    let (status, out, err) = exec(
        &server,
        &[
            "env-check",
            "--",
            "sh",
            "-c",
            r#"printf '%s %s\n' "$MONOLOCK_LOCK" "$MONOLOCK_TOKEN""#,
        ],
    )
    .await;
    assert!(status.success(), "{status:?} {err}");
    let (name, token) = out.trim().split_once(' ').expect("two words");
    assert_eq!(name, "env-check");
    let token: u64 = token.parse().expect("a decimal token");
    assert!(token > 0);
    // The lock is released when the command ends.
    eventually("the release", || server.handle.lock("env-check").is_none()).await;
    // Tokens keep increasing from one run to the next.
    let (_, out, _) = exec(
        &server,
        &["env-check", "--", "sh", "-c", r#"echo "$MONOLOCK_TOKEN""#],
    )
    .await;
    assert!(out.trim().parse::<u64>().unwrap() > token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_exit_status_is_passed_through() {
    let server = TestServer::start().await;
    let (status, _, _) = exec(&server, &["pass", "--", "sh", "-c", "exit 7"]).await;
    assert_eq!(status.code(), Some(7));
    let (status, _, _) = exec(&server, &["pass", "--", "sh", "-c", "kill -KILL $$"]).await;
    assert_eq!(status.code(), Some(128 + libc::SIGKILL));
    let (status, _, err) = exec(&server, &["pass", "--", "/nonexistent/command"]).await;
    assert_eq!(status.code(), Some(127), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_wait_on_a_held_lock_exits_not_acquired_without_running_the_command() {
    let server = TestServer::start().await;
    let _holder = server.client().acquire("busy", LEASE).await.unwrap();
    let marker = scratch("no-wait");
    let script = format!("touch '{}'", marker.display());
    let (status, _, err) = exec(&server, &["--no-wait", "busy", "--", "sh", "-c", &script]).await;
    assert_eq!(status.code(), Some(EXIT_NOT_ACQUIRED), "{err}");
    assert!(err.contains("held by someone else"), "{err}");
    assert!(!marker.exists(), "the command ran");
    eventually("the busy claim to leave the queue", || {
        server.waiters("busy") == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_gives_up_with_not_acquired() {
    let server = TestServer::start().await;
    let _holder = server.client().acquire("slow", LEASE).await.unwrap();
    let started = Instant::now();
    let (status, _, err) = exec(&server, &["--wait", "300ms", "slow", "--", "true"]).await;
    assert_eq!(status.code(), Some(EXIT_NOT_ACQUIRED), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_exec_runs_once_the_lock_is_free() {
    let server = TestServer::start().await;
    let holder = server.client().acquire("queue", LEASE).await.unwrap();
    let mut waiting = Exec::spawn(&server, &["queue", "--", "echo", "ran"]);
    eventually("exec to queue", || server.waiters("queue") == 1).await;
    drop(holder);
    assert_eq!(waiting.line().await, "ran");
    let (status, _, _) = waiting.finish().await;
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_released_lock_stops_the_command() {
    let server = TestServer::start().await;
    let mut running = Exec::spawn(
        &server,
        &[
            "--kill-grace",
            "5s",
            "forced",
            "--",
            "sh",
            "-c",
            "echo started; exec sleep 60",
        ],
    );
    assert_eq!(running.line().await, "started");
    let forced_at = Instant::now();
    server.handle.force_release("forced").expect("held");
    let (status, _, err) = running.finish().await;
    assert_eq!(status.code(), Some(EXIT_LOST), "{err}");
    // SIGTERM ends `sleep` at once: well within the grace.
    assert!(forced_at.elapsed() < Duration::from_secs(5));
    assert!(err.contains("lost lock \"forced\""), "{err}");
    assert!(err.contains("0x02"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let server = TestServer::start().await;
    let pid_file = scratch("ignores-term");
    let script = format!(
        "trap '' TERM; sleep 60 & echo $! > '{}'; echo started; wait",
        pid_file.display()
    );
    let mut running = Exec::spawn(
        &server,
        &[
            "--kill-grace",
            "400ms",
            "stubborn",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    assert_eq!(running.line().await, "started");
    let background: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let lost_at = Instant::now();
    // The server shuts down: ERROR 0x01 to every session.
    server.handle.shutdown();
    let (status, _, err) = running.finish().await;
    let took = lost_at.elapsed();
    assert_eq!(status.code(), Some(EXIT_LOST), "{err}");
    assert!(
        took >= Duration::from_millis(400),
        "killed before the grace: {took:?}"
    );
    assert!(err.contains("SIGKILL"), "{err}");
    assert!(err.contains("0x01"), "{err}");
    // The whole process group went, the background `sleep` included.
    eventually("the background process to die", || {
        // SAFETY: kill(2) with signal 0 only probes; it reads no memory.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::kill(background, 0) };
        rc != 0 || is_zombie(background)
    })
    .await;
}

/// `monolock exec` killed outright (no chance to clean up): its connection
/// closes, the server hands the lock on, so the command must die with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_dies_when_exec_is_killed() {
    let server = TestServer::start().await;
    let mut running = Exec::spawn(
        &server,
        &["orphan", "--", "sh", "-c", "echo $$; exec sleep 60"],
    );
    let command: i32 = running.line().await.trim().parse().expect("pid");
    let waiter = server.client();
    let next = tokio::spawn(async move { waiter.acquire("orphan", LEASE).await });
    eventually("a waiter", || server.waiters("orphan") == 1).await;
    running.signal(libc::SIGKILL);
    // Only the exit status: the orphan would hold stdout open.
    let status = tokio::time::timeout(PATIENCE, running.child.wait())
        .await
        .expect("exec exits in time")
        .expect("wait");
    assert_eq!(status.code(), None, "killed by a signal");
    let guard = tokio::time::timeout(PATIENCE, next)
        .await
        .expect("lock handed on")
        .expect("task")
        .expect("acquired");
    assert!(guard.is_held());
    eventually("the orphaned command to die", || {
        // SAFETY: kill(2) with signal 0 only probes; it reads no memory.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::kill(command, 0) };
        rc != 0 || is_zombie(command)
    })
    .await;
}

/// A killed process that init has not reaped yet still answers signal 0.
fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(|s| s == "Z"))
        })
        .unwrap_or(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_exec_reaches_the_command() {
    let server = TestServer::start().await;
    let mut running = Exec::spawn(
        &server,
        &[
            "forward",
            "--",
            "sh",
            "-c",
            "trap 'echo got TERM; exit 3' TERM; echo started; while :; do sleep 0.05; done",
        ],
    );
    assert_eq!(running.line().await, "started");
    running.signal(libc::SIGTERM);
    assert_eq!(running.line().await, "got TERM");
    let (status, _, err) = running.finish().await;
    assert_eq!(status.code(), Some(3), "{err}");
    eventually("the release", || server.handle.lock("forward").is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_before_the_grant_aborts_the_wait() {
    let server = TestServer::start().await;
    let _holder = server.client().acquire("abort", LEASE).await.unwrap();
    let marker = scratch("abort");
    let script = format!("touch '{}'", marker.display());
    let waiting = Exec::spawn(&server, &["abort", "--", "sh", "-c", &script]);
    eventually("exec to queue", || server.waiters("abort") == 1).await;
    waiting.signal(libc::SIGINT);
    let (status, _, err) = waiting.finish().await;
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{err}");
    assert!(!marker.exists(), "the command ran");
    eventually("the waiter to leave the queue", || {
        server.waiters("abort") == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_before_the_grant_have_their_own_codes() {
    let server = TestServer::start().await;
    // Nothing listens on a port whose listener was closed.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_addr = closed.local_addr().unwrap().to_string();
    drop(closed);
    let (status, _, err) = exec(&server, &["--server", &closed_addr, "x", "--", "true"]).await;
    assert_eq!(status.code(), Some(EXIT_UNAVAILABLE), "{err}");
    assert!(err.contains("could not connect"), "{err}");

    let long = "n".repeat(256);
    let (status, _, err) = exec(&server, &[&long, "--", "true"]).await;
    assert_eq!(status.code(), Some(EXIT_USAGE), "{err}");

    let (status, _, _) = exec(&server, &["--lease", "0s", "x", "--", "true"]).await;
    assert_eq!(status.code(), Some(EXIT_USAGE));
    let (status, _, _) = exec(&server, &["x"]).await;
    assert_eq!(status.code(), Some(EXIT_USAGE), "a command is required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_lists_the_exit_codes() {
    let server = TestServer::start().await;
    let (status, out, _) = exec(&server, &["-h"]).await;
    assert!(status.success());
    for code in ["64", "69", "75", "79", "126 / 127"] {
        assert!(out.contains(code), "{code} missing from:\n{out}");
    }
}
