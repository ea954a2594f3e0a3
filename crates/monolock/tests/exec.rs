//! `monolock exec` as a process, against a server running in the test.

use std::{
    os::unix::process::ExitStatusExt,
    path::PathBuf,
    process::{ExitStatus, Stdio},
    time::Duration,
};

use monolock_testkit::{PATIENCE, TestServer, eventually, sys};
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

const LEASE: Duration = Duration::from_secs(2);

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
        let pid = self.child.id().expect("running");
        monolock_testkit::sys::send_signal(pid, signal).expect("kill");
    }

    /// SIGKILL, then waits for the exit status only (an orphan of the
    /// command may hold stdout open).
    async fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        let status = tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("exec exits in time")
            .expect("wait");
        assert_eq!(status.code(), None, "killed by a signal");
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

/// Runs a `monolock` command with no input to its end, within patience.
async fn finished(command: &mut Command) -> std::process::Output {
    tokio::time::timeout(PATIENCE, command.stdin(Stdio::null()).output())
        .await
        .expect("monolock exits in time")
        .expect("monolock ran")
}

/// An address nothing listens on: a port whose listener was closed.
async fn closed_port() -> String {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap().to_string();
    drop(closed);
    addr
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
    process_ends("the background process to die", background).await;
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
    running.kill().await;
    let guard = tokio::time::timeout(PATIENCE, next)
        .await
        .expect("lock handed on")
        .expect("task")
        .expect("acquired");
    assert!(guard.is_held());
    process_ends("the orphaned command to die", command).await;
}

/// Waits until process `pid` has ended (gone, or a zombie nobody reaped).
async fn process_ends(what: &str, pid: i32) {
    let pid = u32::try_from(pid).expect("a positive pid");
    eventually(what, || {
        !monolock_testkit::sys::exists(pid)
            || monolock_testkit::sys::process_state(pid) == Some('Z')
    })
    .await;
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
    let closed_addr = closed_port().await;
    let (status, _, err) = exec(&server, &["--server", &closed_addr, "x", "--", "true"]).await;
    assert_eq!(status.code(), Some(EXIT_UNAVAILABLE), "{err}");
    assert!(err.contains("could not connect"), "{err}");

    let long = "n".repeat(256);
    let (status, _, err) = exec(&server, &[&long, "--", "true"]).await;
    assert_eq!(status.code(), Some(EXIT_USAGE), "{err}");

    let (status, _, _) = exec(&server, &["--lease", "0s", "x", "--", "true"]).await;
    assert_eq!(status.code(), Some(EXIT_USAGE));
    // A malformed --server is a usage error, with clap's whole message.
    let (status, _, err) = exec(&server, &["--server", "nope", "x", "--", "true"]).await;
    assert_eq!(status.code(), Some(EXIT_USAGE), "{err}");
    assert!(
        err.contains("is not HOST:PORT") && err.contains("--help"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let (status, _, err) = exec(&server, &[]).await;
    assert_eq!(status.code(), Some(EXIT_USAGE), "{err}");
    assert!(err.contains("<NAME>") && err.contains("--help"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_lists_the_exit_codes() {
    let server = TestServer::start().await;
    let (status, out, _) = exec(&server, &["-h"]).await;
    assert!(status.success());
    for code in [
        "64",
        "69",
        "75",
        "79",
        "126 / 127",
        "128+N               exec got signal N",
        "without CMD",
    ] {
        assert!(out.contains(code), "{code} missing from:\n{out}");
    }
}

/// `sh -c 'sleep 300 & ...'`: the shell dies with exec through the
/// parent-death signal, and `sleep`, its child in the same process group,
/// must die too (the sentinel kills the group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_group_dies_when_exec_is_killed() {
    let server = TestServer::start().await;
    let mut running = Exec::spawn(
        &server,
        &["orphans", "--", "sh", "-c", "sleep 300 & echo $!; wait"],
    );
    let grandchild: i32 = running.line().await.trim().parse().expect("pid");
    running.kill().await;
    process_ends("the command's child to die", grandchild).await;
}

/// The same when exec dies the instant its command starts: the command
/// kills exec as soon as it has a child of its own. The sentinel knows the
/// command's group before the command runs anything, so no instant exists
/// where exec could die and leave the group running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_group_dies_when_exec_dies_as_the_command_starts() {
    let server = TestServer::start().await;
    let mut running = Exec::spawn(
        &server,
        &[
            "orphans-at-once",
            "--",
            "sh",
            "-c",
            "sleep 300 & echo $!; kill -KILL $PPID; wait",
        ],
    );
    let grandchild: i32 = running.line().await.trim().parse().expect("pid");
    let status = tokio::time::timeout(PATIENCE, running.child.wait())
        .await
        .expect("exec dies in time")
        .expect("wait");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    process_ends("the command's child to die", grandchild).await;
}

/// The cron recipe against a server that is down: retries are logged and
/// bounded by --retry-for (here from its environment variable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_an_unreachable_server_is_bounded_and_logged() {
    let closed_addr = closed_port().await;
    let started = Instant::now();
    let out = finished(
        Command::new(MONOLOCK)
            .args(["exec", "--server", &closed_addr, "--no-wait", "--retry"])
            .args(["nightly", "--", "echo", "RAN"])
            .env("MONOLOCK_RETRY_FOR", "1s"),
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_UNAVAILABLE), "{err}");
    assert!(out.stdout.is_empty(), "the command ran");
    // Backoff from 100 ms, doubling, jittered to half or more: the fourth
    // delay is the first that can cross the bound of 1 s.
    assert!(started.elapsed() >= Duration::from_millis(300), "{err}");
    let retries = err.matches("; retrying in ").count();
    assert!(retries >= 3, "every retry is logged:\n{err}");
    assert!(
        err.contains("Connection refused"),
        "with its reason:\n{err}"
    );
    assert!(err.contains("(gave up: --retry-for 1s"), "{err}");
}

/// Serves `reply` to every connection: what a TLS port or an HTTP port
/// sends back to a plain monolock client.
async fn wrong_port(reply: &'static [u8]) -> String {
    use tokio::io::AsyncWriteExt;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream.write_all(reply).await;
            let _ = stream.shutdown().await;
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_port_is_named_and_never_retried() {
    let server = TestServer::start().await;
    // A TLS alert record, as a TLS server answers a plaintext ACQUIRE.
    let tls = wrong_port(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32]).await;
    let http = wrong_port(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
    for (addr, says) in [
        (tls, "the server speaks TLS"),
        (
            http,
            "is not a monolock protocol port (it answered like HTTP)",
        ),
    ] {
        let (status, out, err) = exec(
            &server,
            &["--server", &addr, "--retry", "x", "--", "echo", "RAN"],
        )
        .await;
        assert_eq!(status.code(), Some(EXIT_USAGE), "{err}");
        assert!(err.contains(says), "{err}");
        assert!(!err.contains("retrying"), "{err}");
        assert!(out.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_reachable_server_of_a_list_is_used() {
    let server = TestServer::start().await;
    let closed_addr = closed_port().await;
    let list = format!("{closed_addr},{}", server.addr);
    let (status, out, err) = exec(
        &server,
        &[
            "--server",
            &list,
            "listed",
            "--",
            "sh",
            "-c",
            "echo $MONOLOCK_TOKEN",
        ],
    )
    .await;
    assert!(status.success(), "{err}");
    assert!(out.trim().parse::<u64>().is_ok(), "{out}");
}

/// Paused between the grant and the spawn (here: blocked writing to a
/// full stderr pipe, so not even the heartbeat task runs) for longer than
/// the lease: the server hands the lock on, and exec must not start the
/// command when it resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_between_grant_and_spawn_does_not_start_the_command() {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    let server = TestServer::start().await;
    let marker = scratch("paused");
    let (mut reader, mut writer) = std::io::pipe().expect("pipe");
    set_nonblocking(writer.as_raw_fd(), true);
    let chunk = [b'.'; 4096];
    while writer.write(&chunk).is_ok() {}
    while writer.write(&chunk[..1]).is_ok() {}
    set_nonblocking(writer.as_raw_fd(), false);
    let script = format!("touch '{}'", marker.display());
    let mut child = Command::new(MONOLOCK)
        .args([
            "exec", "-v", "--lease", "1s", "paused", "--", "sh", "-c", &script,
        ])
        .env("MONOLOCK_ADDRESS", server.addr.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(writer)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    eventually("the grant", || server.handle.lock("paused").is_some()).await;
    // exec is stuck writing "acquired ..." and cannot heartbeat.
    eventually("the server to expire the silent holder", || {
        server.handle.lock("paused").is_none()
    })
    .await;
    let drain = std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = reader.read_to_end(&mut all);
        // Without the filler written before exec started.
        String::from_utf8_lossy(&all)
            .trim_start_matches('.')
            .to_owned()
    });
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("exec exits in time")
        .expect("wait");
    let err = drain.join().expect("drained");
    assert!(!marker.exists(), "the command ran without the lock:\n{err}");
    assert_eq!(status.code(), Some(EXIT_UNAVAILABLE), "{err}");
    assert!(err.contains("lost before the command started"), "{err}");
}

fn set_nonblocking(fd: i32, on: bool) {
    // SAFETY: fcntl(2) on a descriptor this test owns, with integer
    // arguments only; no memory is passed.
    #[allow(unsafe_code)]
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        let flags = if on {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, flags), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_durations_are_refused_at_parse_time() {
    let server = TestServer::start().await;
    for flag in ["--kill-grace", "--lease", "--wait", "--retry-for"] {
        let (status, out, err) =
            exec(&server, &[flag, "580000000000y", "x", "--", "echo", "RAN"]).await;
        assert_eq!(status.code(), Some(EXIT_USAGE), "{flag}: {err}");
        assert!(err.contains(flag), "{flag}: {err}");
        assert!(out.is_empty(), "{flag}: the command ran");
    }
    let out =
        finished(Command::new(MONOLOCK).args(["serve", "--io-timeout", "580000000000y"])).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_USAGE), "{err}");
    assert!(err.contains("too long"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_command_exec_holds_the_lock_until_a_signal() {
    let server = TestServer::start().await;
    let mut holding = Exec::spawn(&server, &["held"]);
    let token: u64 = holding.line().await.trim().parse().expect("the token");
    assert_eq!(
        server.handle.lock("held").map(|l| l.holder.token),
        Some(token)
    );
    holding.signal(libc::SIGTERM);
    let (status, _, err) = holding.finish().await;
    assert_eq!(status.code(), Some(0), "{err}");
    eventually("the release", || server.handle.lock("held").is_none()).await;

    // Held with no command, then force-released: the loss is the exit.
    let mut holding = Exec::spawn(&server, &["held"]);
    holding.line().await;
    server.handle.force_release("held").expect("held");
    let (status, _, err) = holding.finish().await;
    assert_eq!(status.code(), Some(EXIT_LOST), "{err}");
    assert!(err.contains("0x02"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_strings_and_commands_without_a_separator() {
    let server = TestServer::start().await;
    let (status, out, err) = exec(
        &server,
        &["-c", "echo \"$MONOLOCK_LOCK\"; exit 4", "shelled"],
    )
    .await;
    assert_eq!(status.code(), Some(4), "{err}");
    assert_eq!(out, "shelled\n");
    let (status, out, err) = exec(&server, &["bare", "echo", "-n", "hi"]).await;
    assert!(status.success(), "{err}");
    assert_eq!(out, "hi\n", "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_exits_with_the_conflict_code() {
    let server = TestServer::start().await;
    let _holder = server.client().acquire("busy-e", LEASE).await.unwrap();
    let (status, _, err) = exec(&server, &["--wait", "0", "busy-e", "true"]).await;
    assert_eq!(status.code(), Some(EXIT_NOT_ACQUIRED), "{err}");
    let (status, _, err) = exec(&server, &["-n", "-E", "3", "busy-e", "true"]).await;
    assert_eq!(status.code(), Some(3), "{err}");
    let (status, _, err) = exec(
        &server,
        &["-v", "--wait", "200ms", "-E", "5", "busy-e", "true"],
    )
    .await;
    assert_eq!(status.code(), Some(5), "{err}");
    assert!(err.contains("queued"), "--verbose says so: {err}");
    // exec has exited; the server learns of its closed connection on its own time.
    eventually("the given-up place to leave the queue", || {
        server.waiters("busy-e") == 0
    })
    .await;
}

/// On a terminal the command is the foreground job: `read` gets the line
/// typed instead of stopping on SIGTTIN. `script` gives exec a
/// pseudo-terminal and types what it reads from its stdin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_command_reads_the_terminal() {
    use tokio::io::AsyncWriteExt;
    let server = TestServer::start().await;
    let inner = format!("{MONOLOCK} exec maint -- sh -c 'read x; echo got:$x'");
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", &inner, "/dev/null"])
        .env("MONOLOCK_ADDRESS", server.addr.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("script(1) from util-linux");
    let mut stdin = child.stdin.take().expect("stdin");
    eventually("exec to hold the lock", || {
        server.handle.lock("maint").is_some()
    })
    .await;
    stdin.write_all(b"typed\n").await.expect("typed");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    loop {
        let line = tokio::time::timeout(PATIENCE, stdout.next_line())
            .await
            .unwrap_or_else(|_| panic!("the command never read the terminal: {seen:?}"))
            .expect("readable");
        match line {
            Some(line) if line.contains("got:typed") => break,
            Some(line) => seen.push(line),
            None => panic!("no answer from the command: {seen:?}"),
        }
    }
    drop(stdin);
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("exits")
        .expect("wait");
    assert!(status.success());
}

/// Whether this process may create PID namespaces (root, as in CI).
fn pid_namespaces_allowed() -> bool {
    std::process::Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .status()
        .is_ok_and(|status| status.success())
}

/// With --pid-namespace, a descendant that left the process group
/// (`setsid`) dies with exec too, and so does one the command left behind
/// when it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pid_namespace_takes_escaped_descendants_down() {
    if !pid_namespaces_allowed() {
        // CI runs as root, where PID namespaces always work: there a
        // refusal is a broken machine, not a reason to pass.
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but this process may not create PID namespaces (unshare --pid failed)"
        );
        eprintln!("skipped: this process may not create PID namespaces");
        return;
    }
    // The escaped process prints its PID as seen from outside (the first
    // field of /proc/self/stat, read by the shell's own `read`).
    let escape = "setsid sh -c 'read p rest < /proc/self/stat; echo $p; exec sleep 300' & wait";
    let server = TestServer::start().await;
    for kill_exec in [true, false] {
        let mut running = Exec::spawn(
            &server,
            &["--pid-namespace", "isolated", "--", "sh", "-c", escape],
        );
        let escaped: i32 = running.line().await.trim().parse().expect("pid");
        if kill_exec {
            running.kill().await;
        } else {
            let pid = u32::try_from(escaped).expect("a positive pid");
            monolock_testkit::sys::send_signal(pid, libc::SIGTERM).expect("kill");
            let status = tokio::time::timeout(PATIENCE, running.child.wait())
                .await
                .expect("exec exits in time")
                .expect("wait");
            assert_eq!(status.code(), Some(0));
        }
        process_ends("the escaped process to die", escaped).await;
    }
}

/// `--retry-for` is used to its end: the last attempt is made when it runs
/// out, not a whole backoff earlier (at 1.5 s or less of 2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_for_is_used_to_its_end() {
    let closed_addr = closed_port().await;
    let started = Instant::now();
    let out = finished(
        Command::new(MONOLOCK)
            .args(["exec", "--server", &closed_addr, "--retry", "--retry-for"])
            .args(["2s", "x", "--", "echo", "RAN"]),
    )
    .await;
    let elapsed = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_UNAVAILABLE), "{err}");
    assert!(err.contains("(gave up: --retry-for 2s"), "{err}");
    assert!(elapsed >= Duration::from_secs(2), "{elapsed:?}:\n{err}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}:\n{err}");
}

/// `-q`: a busy lock, a `--wait` that runs out and the retries of
/// `--retry` print nothing; a real failure still does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_prints_nothing_for_the_expected_outcomes() {
    let server = TestServer::start().await;
    let _holder = server.client().acquire("quiet", LEASE).await.unwrap();
    for args in [
        &["-q", "-n", "quiet", "--", "echo", "RAN"][..],
        &["--quiet", "--wait", "100ms", "quiet", "--", "echo", "RAN"][..],
    ] {
        let (status, out, err) = exec(&server, args).await;
        assert_eq!(status.code(), Some(EXIT_NOT_ACQUIRED), "{args:?}: {err}");
        assert_eq!(err, "", "{args:?}");
        assert_eq!(out, "", "{args:?}");
    }
    let closed_addr = closed_port().await;
    let (status, _, err) = exec(
        &server,
        &[
            "-q",
            "--server",
            &closed_addr,
            "--retry",
            "--retry-for",
            "300ms",
            "x",
            "true",
        ],
    )
    .await;
    assert_eq!(status.code(), Some(EXIT_UNAVAILABLE), "{err}");
    assert!(!err.contains("retrying"), "{err}");
    assert_eq!(err.lines().count(), 1, "the failure itself: {err}");
    let (status, _, err) = exec(&server, &["-q", "-v", "quiet", "true"]).await;
    assert_eq!(status.code(), Some(EXIT_USAGE), "{err}");
}

/// The crontab line of the recipes, run as cron runs it (`/bin/sh -c`, an
/// empty environment but for the address): on a host that finds the lock
/// busy, it exits 0 and prints nothing, so cron mails nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crontab_line_is_silent_on_a_busy_host() {
    let server = TestServer::start().await;
    let crontab = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/cron/nightly-import.crontab"
    ))
    .expect("read the crontab");
    let line = crontab
        .lines()
        .find(|line| line.contains("monolock exec"))
        .expect("a job line");
    // Five time fields and a user, then the command.
    let command = line.splitn(7, ' ').nth(6).expect("a command field");
    let command = command
        .replacen("monolock exec", &format!("{MONOLOCK} exec"), 1)
        .replace("/usr/local/bin/fenced-postgres.sh", "echo RAN");
    let _holder = server
        .client()
        .acquire("nightly-import", LEASE)
        .await
        .unwrap();
    let out = Command::new("env")
        .args(["-i", &format!("MONOLOCK_ADDRESS={}", server.addr)])
        .args(["/bin/sh", "-c", &command])
        .output()
        .await
        .expect("ran sh");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
}

/// Boolean variables take 1/0, true/false, yes/no, on/off in any case; a
/// bad value names its variable, not the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switch_variables_take_the_usual_spellings() {
    let closed_addr = closed_port().await;
    let run = |env: Vec<(&'static str, String)>| {
        let closed_addr = closed_addr.clone();
        async move {
            let out = finished(
                Command::new(MONOLOCK)
                    .args(["exec", "--server", &closed_addr, "x", "--", "true"])
                    .env("MONOLOCK_RETRY_FOR", "200ms")
                    .envs(env),
            )
            .await;
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    for on in ["1", "true", "YES", "On"] {
        let (code, err) = run(vec![("MONOLOCK_RETRY", on.to_owned())]).await;
        assert_eq!(code, Some(EXIT_UNAVAILABLE), "{on}: {err}");
        assert!(err.contains("retrying"), "{on}: {err}");
    }
    for off in ["0", "false", "no", "OFF"] {
        let (code, err) = run(vec![("MONOLOCK_RETRY", off.to_owned())]).await;
        assert_eq!(code, Some(EXIT_UNAVAILABLE), "{off}: {err}");
        assert!(!err.contains("retrying"), "{off}: {err}");
    }
    let (code, err) = run(vec![("MONOLOCK_PID_NAMESPACE", "0".to_owned())]).await;
    assert_eq!(code, Some(EXIT_UNAVAILABLE), "{err}");
    let (code, err) = run(vec![("MONOLOCK_RETRY", "maybe".to_owned())]).await;
    assert_eq!(code, Some(EXIT_USAGE), "{err}");
    assert!(
        err.starts_with("monolock exec: ")
            && err.contains("$MONOLOCK_RETRY")
            && err.contains("yes or no"),
        "{err}"
    );
    let out = finished(
        Command::new(MONOLOCK)
            .args(["exec", "x", "true"])
            .env("MONOLOCK_ADDRESS", "localhost"),
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_USAGE), "{err}");
    assert!(err.contains("$MONOLOCK_ADDRESS (--server)"), "{err}");
    // Given on the command line, the flag is named.
    let out =
        finished(Command::new(MONOLOCK).args(["exec", "--server", "localhost", "x", "true"])).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("'--server") && !err.contains("$MONOLOCK"),
        "{err}"
    );
    // The server's switches too: MONOLOCK_ADMIN_TLS=on is read as set.
    let out = finished(
        Command::new(MONOLOCK)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("MONOLOCK_ADMIN_TLS", "on"),
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_USAGE), "{err}");
    assert!(err.contains("--admin-tls requires --tls-cert"), "{err}");
}

/// An HTTP server that reads a whole request before it answers, as most
/// do: a monolock ACQUIRE never completes one.
async fn http_server_waiting_for_a_request() -> String {
    use tokio::io::AsyncWriteExt;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    let mut byte = [0u8; 1];
                    match stream.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let _ = stream
                    .get_mut()
                    .write_all(b"HTTP/1.0 400 Bad Request\r\n\r\n")
                    .await;
            });
        }
    });
    addr
}

/// Pointed at an HTTP server that waits for a request, exec names the
/// wrong port and exits 64 at once, instead of 69 after a silent lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_http_port_is_named_and_never_retried() {
    let server = TestServer::start().await;
    let http = http_server_waiting_for_a_request().await;
    for extra in [&[][..], &["-n"], &["--retry", "--retry-for", "5s"]] {
        let mut args = vec!["--server", &http, "--lease", "500ms"];
        args.extend_from_slice(extra);
        args.extend(["x", "--", "echo", "RAN"]);
        let (status, out, err) = exec(&server, &args).await;
        assert_eq!(status.code(), Some(EXIT_USAGE), "{err}");
        assert!(
            err.contains("is not a monolock protocol port (it answered like HTTP)"),
            "{err}"
        );
        assert!(!err.contains("retrying"), "{err}");
        assert!(out.is_empty());
    }
}

/// Flags that are wrong in themselves: a negative duration says so, and a
/// usage error names the subcommand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_name_exec_and_negative_durations() {
    let server = TestServer::start().await;
    for flag in ["--wait", "--lease", "--kill-grace", "--retry-for"] {
        let (status, _, err) = exec(&server, &[flag, "-1s", "x", "true"]).await;
        assert_eq!(status.code(), Some(EXIT_USAGE), "{flag}: {err}");
        assert!(err.contains("cannot be negative"), "{flag}: {err}");
        assert!(!err.contains("tip:"), "{flag}: {err}");
    }
    let (status, _, err) = exec(&server, &["-c", "true"]).await;
    assert_eq!(status.code(), Some(EXIT_USAGE), "{err}");
    assert!(err.starts_with("monolock exec: "), "{err}");
}

/// During the server's startup grace, WAITING means "not granted yet"
/// without a holder: exec -v says it may be the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verbose_names_the_startup_grace_as_a_reason_to_wait() {
    let server = TestServer::start_with(
        monolock_server::ServerConfig::default().with_startup_grace(Duration::from_secs(30)),
    )
    .await;
    let (status, _, err) = exec(&server, &["-v", "--wait", "200ms", "graced", "true"]).await;
    assert_eq!(status.code(), Some(EXIT_NOT_ACQUIRED), "{err}");
    assert!(err.contains("startup grace"), "{err}");
}

/// The sentinel reads as itself in `ps`: `monolock exec-sentinel`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentinel_has_a_readable_command_line() {
    let server = TestServer::start().await;
    let mut running = Exec::spawn(&server, &["named", "--", "sh", "-c", "echo go; sleep 300"]);
    assert_eq!(running.line().await, "go");
    let exec_pid = running.child.id().expect("running");
    let lines: Vec<String> = sys::children(exec_pid)
        .into_iter()
        .filter_map(sys::command_line)
        .collect();
    assert!(
        lines
            .iter()
            .any(|line| line.trim_end() == "monolock exec-sentinel"),
        "{lines:?}"
    );
    running.kill().await;
}
