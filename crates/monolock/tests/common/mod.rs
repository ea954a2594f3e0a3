//! Shared helpers for tests that run the real `monolock` binary.
#![allow(dead_code)] // each test binary uses a different subset

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpStream},
    process::{Child, ChildStdout, Command, ExitStatus, Output, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use monolock_proto::{ClientFrame, Lease, LockName, ServerFrame, decode_response};
use monolock_testkit::process::{ServeLog, serve};
use serde_json::Value;

/// The `monolock` executable under test.
pub const MONOLOCK: &str = env!("CARGO_BIN_EXE_monolock");

/// Long enough that only a real hang trips it.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A `monolock serve` child on free loopback ports whose JSON diagnostics are
/// followed line by line.
pub struct ServerProcess {
    pub child: Child,
    /// Every diagnostic line after the startup announcements.
    log: ServeLog,
    /// The child's stdout (where `--audit-log -` writes).
    pub stdout: Option<ChildStdout>,
    /// The protocol address.
    pub addr: SocketAddr,
    /// The admin API address, when `--admin-listen` was given.
    pub admin: Option<SocketAddr>,
    /// The ops address, when `--ops-listen` was given.
    pub ops: Option<SocketAddr>,
}

impl ServerProcess {
    /// Starts `monolock serve --listen 127.0.0.1:0` with extra arguments and
    /// learns the bound addresses from its startup log.
    pub fn start(extra: &[&str]) -> Self {
        Self::start_with_env(extra, &[])
    }

    /// As [`ServerProcess::start`], with extra environment variables.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(MONOLOCK);
        command.envs(env.iter().copied());
        Self::start_with_command(command, extra)
    }

    /// As [`ServerProcess::start`], run by `command` (the binary itself, or
    /// a wrapper such as `prlimit ... -- monolock`).
    pub fn start_with_command(mut command: Command, extra: &[&str]) -> Self {
        command.stdout(Stdio::piped());
        let args: Vec<&str> = ["--log-format", "json"]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        let mut serving = serve(command, &args, PATIENCE).unwrap_or_else(|err| panic!("{err}"));
        Self {
            stdout: serving.child.stdout.take(),
            child: serving.child,
            log: serving.log,
            addr: serving.addr,
            admin: serving.admin,
            ops: serving.ops,
        }
    }

    /// Waits for a diagnostic line whose message contains `text`.
    pub fn wait_log(&self, text: &str) -> Value {
        self.log
            .wait_log(text, PATIENCE)
            .unwrap_or_else(|| panic!("no log line with {text:?}"))
    }

    /// Sends a signal by name (`TERM`, `INT`, `HUP`, ...).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args(["-s", name, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s {name} failed");
    }

    /// Waits for the process to exit, at most [`PATIENCE`].
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "server did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Runs an operator command against this server's admin API.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(MONOLOCK)
            .args(args)
            .env(
                "MONOLOCK_ADMIN_ADDRESS",
                self.admin.expect("admin").to_string(),
            )
            .output()
            .expect("run monolock")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads one whole server frame (blocking, bounded by the stream's timeout).
pub fn read_frame(stream: &mut TcpStream) -> ServerFrame {
    let mut buf = Vec::new();
    loop {
        if let Some((frame, _)) = decode_response(&buf).expect("valid frame") {
            return frame;
        }
        let mut chunk = [0u8; 512];
        let n = stream.read(&mut chunk).expect("read");
        assert!(n > 0, "connection closed before a whole frame");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Connects, sends ACQUIRE with a 30 s lease, returns the first reply.
pub fn acquire(addr: SocketAddr, name: &str) -> (TcpStream, ServerFrame) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let frame = ClientFrame::acquire(
        Lease::from_millis(30_000).expect("lease"),
        LockName::new(name).expect("name"),
    );
    stream.write_all(&frame.to_bytes()).expect("send");
    let reply = read_frame(&mut stream);
    (stream, reply)
}

/// A child's stdout, line by line, through a channel (read by a thread, so
/// a test can wait for a line with a timeout).
pub fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    lines_from(child.stdout.take().expect("stdout"))
}

/// Any pipe (a child's stderr, say), line by line, as [`lines_of`].
pub fn lines_from(pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// A command that prints lines as things happen (`monolock events`),
/// followed line by line; killed when dropped.
pub struct Follower {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Follower {
    /// Starts `command` with its stdout piped and stderr discarded.
    pub fn spawn(command: &mut std::process::Command) -> Self {
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the command");
        let lines = lines_of(&mut child);
        Self { child, lines }
    }

    /// The next line, within [`PATIENCE`].
    pub fn next_line(&self) -> String {
        self.lines
            .recv_timeout(PATIENCE)
            .expect("the command prints a line")
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
