//! Shared helpers for the recipes' tests: a monolock server, a throwaway
//! PostgreSQL cluster, and child processes whose output is followed line by
//! line.
#![allow(dead_code)] // each test binary uses a different subset

pub mod java;
pub mod node;
pub mod postgres;
pub mod python;

use std::{
    io::{BufRead, BufReader, Read},
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use monolock_server::{ServerConfig, ServerHandle};
use tokio::runtime::Runtime;

pub use postgres::{Postgres, free_port};

/// Long enough that only a real hang trips it.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A monolock server on a free loopback port, on its own runtime, and a
/// connection to a throwaway PostgreSQL cluster driven by the same runtime.
pub struct Lab {
    pub runtime: Runtime,
    pub addr: SocketAddr,
    pub handle: ServerHandle,
    pub db: tokio_postgres::Client,
    // Dropped last: the cluster outlives the connection.
    pub postgres: Postgres,
}

impl Lab {
    /// Starts the server and the cluster, and runs `schema` (SQL) once.
    pub fn start(schema: &str) -> Self {
        let runtime = Runtime::new().expect("tokio runtime");
        let (addr, handle, _) =
            runtime.block_on(monolock_testkit::spawn_server(ServerConfig::default()));
        let postgres = Postgres::start();
        let db = runtime
            .block_on(monolock_examples::db::connect(&postgres.url()))
            .unwrap_or_else(|failure| panic!("{failure}"));
        runtime
            .block_on(db.batch_execute(schema))
            .expect("create the schema");
        Self {
            runtime,
            addr,
            handle,
            db,
            postgres,
        }
    }

    /// Runs a query on the lab's database connection.
    pub fn query(&self, sql: &str) -> Vec<tokio_postgres::Row> {
        self.runtime
            .block_on(self.db.query(sql, &[]))
            .unwrap_or_else(|err| panic!("{sql}: {err}"))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

/// A binary next to the test executable: `target/<profile>/<name>`.
/// Cargo builds the `monolock` executable for `cargo test --workspace`;
/// run `cargo build -p monolock` first when testing this crate alone.
pub fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join(name))
        .expect("target directory");
    assert!(
        path.is_file(),
        "{} is missing: `cargo build -p {name}` (cargo test --workspace builds it)",
        path.display()
    );
    path
}

/// One line of a child's output.
#[derive(Debug, Clone)]
pub struct Line {
    pub stderr: bool,
    pub text: String,
}

/// A child process whose stdout and stderr are read line by line; killed on
/// drop.
pub struct Proc {
    pub child: Child,
    pub name: String,
    lines: mpsc::Receiver<Line>,
    /// Every line read so far, for failure messages.
    pub seen: Vec<Line>,
    /// Lines read but not yet returned by [`Proc::expect_line`].
    unmatched: Vec<Line>,
}

impl Proc {
    /// Spawns `command` with its output piped.
    pub fn spawn(name: &str, mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|err| panic!("spawn {name}: {err}"));
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        forward(stdout, false, tx.clone());
        forward(stderr, true, tx);
        Self {
            child,
            name: name.to_owned(),
            lines,
            seen: Vec::new(),
            unmatched: Vec::new(),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a line containing `text` and returns it. stdout and stderr
    /// are read by two threads, so lines of the two streams may arrive in
    /// any order: a line read while waiting for another one stays
    /// available to a later call.
    pub fn expect_line(&mut self, text: &str) -> String {
        if let Some(at) = self
            .unmatched
            .iter()
            .position(|line| line.text.contains(text))
        {
            return self.unmatched.remove(at).text;
        }
        let deadline = Instant::now() + PATIENCE;
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(wait) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.text.contains(text) {
                        return line.text;
                    }
                    self.unmatched.push(line);
                }
                Err(_) => panic!(
                    "{}: no line with {text:?}; output so far: {:#?}",
                    self.name, self.seen
                ),
            }
        }
    }

    /// A line containing `text` if one has arrived, without waiting.
    pub fn try_line(&mut self, text: &str) -> Option<String> {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line.clone());
            self.unmatched.push(line);
        }
        let at = self
            .unmatched
            .iter()
            .position(|line| line.text.contains(text))?;
        Some(self.unmatched.remove(at).text)
    }

    /// Waits for the process to exit (at most [`PATIENCE`]) and collects
    /// the rest of its output.
    pub fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit; output so far: {:#?}",
                self.name,
                self.seen
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        // The readers end at EOF, once every holder of the pipes has exited.
        while let Ok(line) = self.lines.recv_timeout(PATIENCE) {
            self.seen.push(line);
        }
        status
    }

    /// Everything read so far, one string.
    pub fn output(&self) -> String {
        self.seen
            .iter()
            .map(|line| line.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn forward(stream: impl Read + Send + 'static, stderr: bool, tx: mpsc::Sender<Line>) {
    std::thread::spawn(move || {
        for text in BufReader::new(stream).lines() {
            let Ok(text) = text else { break };
            if tx.send(Line { stderr, text }).is_err() {
                break;
            }
        }
    });
}

/// Polls `check` every few milliseconds until it returns `Some`; panics
/// with `what` after [`PATIENCE`].
pub fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends `signal` to process `pid`.
pub fn signal(pid: u32, signal: libc::c_int) {
    if let Err(err) = monolock_testkit::sys::send_signal(pid, signal) {
        panic!("kill({pid}, {signal}) failed: {err}");
    }
}

/// Waits until process `pid` is stopped (state `T` in /proc), as it is
/// after a SIGSTOP has been delivered.
pub fn wait_stopped(pid: u32) {
    assert!(
        monolock_testkit::sys::wait_until_stopped(pid, PATIENCE),
        "process {pid} never stopped"
    );
}

/// The number in `line` after `word` (e.g. the token after "token ").
pub fn number_after(line: &str, word: &str) -> u64 {
    line.split_once(word)
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no number after {word:?} in {line:?}"))
}
