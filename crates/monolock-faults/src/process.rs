//! Child processes: the real `monolock` server (launched by the testkit's
//! [`serve_async`], which learns its address) and the fault workers.
//!
//! Every child is killed when its handle is dropped, so a failing scenario
//! leaves nothing running. Diagnostic output is captured line by line, so
//! a scenario can wait for a log line (with a deadline) instead of sleeping.

use std::{
    ffi::OsString,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::{
    io::{AsyncBufRead, AsyncBufReadExt, BufReader},
    process::{Child, Command},
    sync::watch,
    time::Instant,
};

use monolock_testkit::{
    process::{AsyncServing, StartError, serve_async},
    sys::{die_with_parent, limit_nofile_in_child},
};

use crate::{checker::WaitTimeout, clock::mono_ns, task::AbortOnDrop};

/// A child process of the harness could not be found or started.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// No such binary where it was looked for.
    #[error(
        "cannot find the `{name}` binary (tried {tried:?}); build it with the same profile \
         (e.g. `cargo build -p monolock`) or set {env_var}"
    )]
    NotFound {
        /// The binary's name.
        name: String,
        /// Where it was looked for.
        tried: Vec<PathBuf>,
        /// The variable that would name it.
        env_var: String,
    },
    /// Spawning failed.
    #[error("spawning {}: {source}", binary.display())]
    Spawn {
        /// The binary.
        binary: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The server never said where it listens.
    #[error("{source}; stderr: {stderr:?}")]
    NotListening {
        /// The wait that ran out.
        source: WaitTimeout,
        /// What the server wrote meanwhile.
        stderr: String,
    },
}

/// Finds a binary built by cargo: `$env_var` if set, else next to the
/// running executable (a binary of this crate), else one directory up (a
/// test executable lives in `target/<profile>/deps`).
///
/// # Errors
/// [`ProcessError::NotFound`], naming where it looked and how to build
/// the binary.
pub fn locate_binary(name: &str, env_var: &str) -> Result<PathBuf, ProcessError> {
    if let Some(path) = std::env::var_os(env_var) {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().ok();
    let mut tried = Vec::new();
    let mut dir = exe.as_deref().and_then(Path::parent);
    for _ in 0..2 {
        let Some(d) = dir else { break };
        let candidate = d.join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
        tried.push(candidate);
        dir = d.parent();
    }
    Err(ProcessError::NotFound {
        name: name.to_owned(),
        tried,
        env_var: env_var.to_owned(),
    })
}

/// Lines a child wrote to one of its pipes, shared with a reader task.
#[derive(Clone)]
pub struct Lines {
    lines: Arc<Mutex<Vec<String>>>,
    changed: watch::Sender<usize>,
}

impl Lines {
    /// Starts with the lines already read.
    fn new(early: Vec<String>) -> Self {
        Self {
            lines: Arc::new(Mutex::new(early)),
            changed: watch::channel(0).0,
        }
    }

    fn capture<R>(&self, mut lines: tokio::io::Lines<R>) -> AbortOnDrop<()>
    where
        R: AsyncBufRead + Unpin + Send + 'static,
    {
        let this = self.clone();
        AbortOnDrop(tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                this.lines
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(line);
                this.changed.send_modify(|n| *n += 1);
            }
        }))
    }

    /// Everything captured so far.
    pub fn snapshot(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until `find` returns `Some` for the lines, at most `limit`.
    ///
    /// # Errors
    /// [`WaitTimeout`] naming `what`.
    pub async fn wait_for<T>(
        &self,
        limit: Duration,
        what: &str,
        mut find: impl FnMut(&[String]) -> Option<T>,
    ) -> Result<T, WaitTimeout> {
        let deadline = Instant::now() + limit;
        let mut changed = self.changed.subscribe();
        loop {
            {
                let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(found) = find(&lines) {
                    return Ok(found);
                }
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                _ => return Err(WaitTimeout(limit, what.to_owned())),
            }
        }
    }
}

/// A running child, killed (SIGKILL) when dropped.
pub struct ChildProcess {
    name: String,
    child: Child,
    pid: u32,
    stderr: Lines,
    _readers: Vec<AbortOnDrop<()>>,
}

impl ChildProcess {
    /// What every child gets: it dies with the harness (and with its
    /// handle), reads nothing, and only its stderr is kept.
    fn prepare(command: &mut Command) {
        die_with_parent(command.as_std_mut());
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
    }

    fn spawn(name: &str, mut command: Command) -> std::io::Result<Self> {
        Self::prepare(&mut command);
        let mut child = command.spawn()?;
        let stderr = child.stderr.take().map(|pipe| BufReader::new(pipe).lines());
        Ok(Self::adopt(name, child, Vec::new(), stderr))
    }

    /// Takes over a started child, the lines of stderr already read and
    /// the reader of the rest.
    fn adopt<R>(
        name: &str,
        child: Child,
        early: Vec<String>,
        rest: Option<tokio::io::Lines<R>>,
    ) -> Self
    where
        R: AsyncBufRead + Unpin + Send + 'static,
    {
        let pid = child.id().unwrap_or_default();
        let stderr = Lines::new(early);
        let readers = rest
            .map(|lines| stderr.capture(lines))
            .into_iter()
            .collect();
        Self {
            name: name.to_owned(),
            child,
            pid,
            stderr,
            _readers: readers,
        }
    }

    /// The child's name in reports.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its stderr, line by line.
    pub fn stderr(&self) -> &Lines {
        &self.stderr
    }

    /// Sends `signal`; returns CLOCK_MONOTONIC right before it was sent
    /// (the fault's time: the signal may take effect before this thread
    /// runs again, so a stamp taken after it could come too late).
    ///
    /// # Errors
    /// The OS error (e.g. the process is gone).
    pub fn signal(&self, signal: i32) -> std::io::Result<u64> {
        let at = mono_ns();
        send_signal(self.pid, signal)?;
        Ok(at)
    }

    /// Waits for the child to exit, at most `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(limit, self.child.wait())
            .await
            .ok()
            .and_then(Result::ok)
    }

    /// Asks the child to stop (SIGTERM), waits at most `limit`, then kills
    /// it. Returns the exit status if it exited by itself.
    pub async fn stop(&mut self, limit: Duration) -> Option<ExitStatus> {
        // A stopped process cannot handle SIGTERM: continue it first.
        let _ = send_signal(self.pid, libc::SIGCONT);
        let _ = send_signal(self.pid, libc::SIGTERM);
        let status = self.wait_exit(limit).await;
        if status.is_none() {
            let _ = self.child.start_kill();
            let _ = self.wait_exit(Duration::from_secs(5)).await;
        }
        status
    }

    /// Kills the child with SIGKILL and reaps it; returns CLOCK_MONOTONIC
    /// right before the signal was sent.
    pub async fn kill(&mut self) -> u64 {
        let at = self.signal(libc::SIGKILL).unwrap_or_else(|_| mono_ns());
        let _ = self.wait_exit(Duration::from_secs(5)).await;
        at
    }
}

pub use monolock_testkit::sys::{process_state, send_signal};

/// Waits until the process is stopped (SIGSTOP took effect), at most
/// `limit`. The kernel sends no event to a non-parent, so this polls
/// `/proc` every few milliseconds, bounded.
///
/// # Errors
/// [`WaitTimeout`].
pub async fn wait_stopped(pid: u32, limit: Duration) -> Result<(), WaitTimeout> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if matches!(process_state(pid), Some('T' | 't')) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Err(WaitTimeout(limit, format!("process {pid} to stop")))
}

/// A `monolock serve` child.
pub struct ServerProcess {
    /// The process.
    pub process: ChildProcess,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its label in reports.
    pub label: String,
}

/// How to start a server child.
#[derive(Clone, Debug)]
pub struct ServerSpec {
    /// The `monolock` binary.
    pub binary: PathBuf,
    /// Its label.
    pub label: String,
    /// `--io-timeout`.
    pub io_timeout: Duration,
    /// `--log-level` (`debug` logs every grant with its token).
    pub log_level: &'static str,
    /// Lower the *hard* (and soft) RLIMIT_NOFILE of the child to this (the
    /// server raises its soft limit to the hard one at startup).
    pub nofile: Option<u64>,
    /// `--audit-log PATH`, when the binary supports it.
    pub audit_log: Option<PathBuf>,
}

impl ServerProcess {
    /// Starts `monolock serve --listen 127.0.0.1:0` and waits (at most 20 s)
    /// for its `listening` line.
    ///
    /// # Errors
    /// Spawning failed or the server did not report its address.
    pub async fn start(spec: &ServerSpec) -> Result<Self, ProcessError> {
        let mut command = Command::new(&spec.binary);
        ChildProcess::prepare(&mut command);
        if let Some(limit) = spec.nofile {
            limit_nofile_in_child(command.as_std_mut(), limit);
        }
        let mut extra: Vec<OsString> = ["--log-format", "json", "--log-level", spec.log_level]
            .map(OsString::from)
            .into();
        extra.push("--io-timeout".into());
        extra.push(format!("{}ms", spec.io_timeout.as_millis()).into());
        if let Some(path) = &spec.audit_log {
            extra.push("--audit-log".into());
            extra.push(path.into());
        }
        let within = Duration::from_secs(20);
        let AsyncServing {
            child,
            addr,
            early_lines,
            stderr,
            ..
        } = serve_async(command, &extra, within)
            .await
            .map_err(|err| match err {
                StartError::Spawn(source) => ProcessError::Spawn {
                    binary: spec.binary.clone(),
                    source,
                },
                StartError::Silent { within, tail } => ProcessError::NotListening {
                    source: WaitTimeout(within, "the server's listening line".to_owned()),
                    stderr: tail.join("\n"),
                },
            })?;
        Ok(Self {
            process: ChildProcess::adopt(&spec.label, child, early_lines, Some(stderr)),
            addr,
            label: spec.label.clone(),
        })
    }

    /// Tokens this server granted, from its debug log (`granted` and
    /// `promoted` lines carry the token), as `(lock, token)`.
    pub fn logged_grants(&self) -> Vec<(String, u64)> {
        self.process
            .stderr()
            .snapshot()
            .iter()
            .filter_map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).ok()?;
                let message = v.get("message")?.as_str()?;
                if message != "granted" && message != "promoted" {
                    return None;
                }
                Some((
                    v.get("lock")?.as_str()?.to_owned(),
                    v.get("token")?.as_u64()?,
                ))
            })
            .collect()
    }

    /// Lines of its log whose message is `message`.
    pub fn count_log(&self, message: &str) -> usize {
        self.process
            .stderr()
            .snapshot()
            .iter()
            .filter(|line| {
                serde_json::from_str::<serde_json::Value>(line)
                    .ok()
                    .and_then(|v| v.get("message")?.as_str().map(|m| m.starts_with(message)))
                    .unwrap_or(false)
            })
            .count()
    }
}

/// How to start a worker.
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    /// The worker binary.
    pub binary: PathBuf,
    /// Its name.
    pub name: String,
    /// The lock server (or a proxy in front of it).
    pub server: SocketAddr,
    /// The checker.
    pub checker: SocketAddr,
    /// The lock.
    pub lock: String,
    /// The lease.
    pub lease: Duration,
    /// Release after holding this long (0: hold until lost).
    pub hold: Duration,
    /// Pause between writes.
    pub write_every: Duration,
    /// Stop itself (SIGSTOP) once, between a successful `is_held()` check
    /// and the write it allowed.
    pub pause_once: bool,
}

impl WorkerSpec {
    /// Starts the worker.
    ///
    /// # Errors
    /// The spawn error.
    pub fn start(&self) -> std::io::Result<ChildProcess> {
        let mut command = Command::new(&self.binary);
        command
            .arg("--name")
            .arg(&self.name)
            .arg("--server")
            .arg(self.server.to_string())
            .arg("--checker")
            .arg(self.checker.to_string())
            .arg("--lock")
            .arg(&self.lock)
            .arg("--lease-ms")
            .arg(self.lease.as_millis().to_string())
            .arg("--hold-ms")
            .arg(self.hold.as_millis().to_string())
            .arg("--write-every-ms")
            .arg(self.write_every.as_millis().to_string());
        if self.pause_once {
            command.arg("--pause-once");
        }
        ChildProcess::spawn(&self.name, command)
    }
}

/// A path for a scratch file, unique to this process and `tag`.
pub fn scratch_path(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir();
    Path::new(&dir).join(format!("monolock-faults-{}-{tag}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_proc_state() {
        assert!(matches!(process_state(std::process::id()), Some('R' | 'S')));
    }
}
