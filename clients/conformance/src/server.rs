//! The real `monolock serve` as a child process: free loopback ports
//! learnt from its JSON startup log, its admin API, and signals.

use std::{
    collections::VecDeque,
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex, mpsc},
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{Check, Failure, PATIENCE, admin::Admin};

/// How many of the server's last log lines a failure shows.
const LOG_TAIL: usize = 30;

/// A `monolock serve` child; killed (after a SIGCONT) when dropped.
pub struct Server {
    child: Child,
    /// The protocol address (`127.0.0.1:PORT`).
    pub addr: SocketAddr,
    /// The admin API.
    pub admin: Admin,
    log: mpsc::Receiver<Value>,
    tail: Arc<Mutex<VecDeque<String>>>,
}

impl Server {
    /// Starts `monolock serve` on `127.0.0.1:0` with an admin listener on
    /// `127.0.0.1:0` and `extra` flags, and learns both ports from its log.
    pub fn start(monolock: &Path, extra: &[&str]) -> Check<Self> {
        let mut child = Command::new(monolock)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(["--admin-listen", "127.0.0.1:0", "--log-format", "json"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|err| Failure::new(format!("cannot start {}: {err}", monolock.display())))?;
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let (tx, log) = mpsc::channel();
        if let Some(stderr) = child.stderr.take() {
            let tail = Arc::clone(&tail);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Ok(mut tail) = tail.lock() {
                        if tail.len() == LOG_TAIL {
                            tail.pop_front();
                        }
                        tail.push_back(line.clone());
                    }
                    let value = serde_json::from_str(&line).unwrap_or(Value::String(line));
                    if tx.send(value).is_err() {
                        break;
                    }
                }
            });
        }
        let (mut protocol, mut admin) = (None, None);
        let deadline = Instant::now() + PATIENCE;
        while protocol.is_none() || admin.is_none() {
            let Ok(line) = log.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            else {
                let _ = child.kill();
                let _ = child.wait();
                let tail = tail.lock().map(|t| t.clone()).unwrap_or_default();
                return Err(Failure::new(format!(
                    "the server did not announce its listeners within {PATIENCE:?}; its log: {tail:?}"
                )));
            };
            let addr = line["addr"].as_str().and_then(|addr| addr.parse().ok());
            match line["message"].as_str() {
                Some("listening") => protocol = addr,
                Some("admin API listening") => admin = addr,
                _ => {}
            }
        }
        let (Some(addr), Some(admin)) = (protocol, admin) else {
            unreachable!("the loop ends once both are known")
        };
        Ok(Self {
            child,
            addr,
            admin: Admin::new(admin),
            log,
            tail,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The protocol address as a driver's `open` takes it.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// The last lines the server logged, for failure messages.
    pub fn log_tail(&self) -> Vec<String> {
        self.tail
            .lock()
            .map(|tail| tail.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Waits for a log line whose message contains `text`.
    pub fn wait_log(&self, text: &str) -> Check<Value> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = self.log.recv_timeout(wait) else {
                return Err(Failure::new(format!(
                    "the server logged no line with {text:?} within {PATIENCE:?}; its log: {:?}",
                    self.log_tail()
                )));
            };
            if line["message"].as_str().is_some_and(|m| m.contains(text)) {
                return Ok(line);
            }
        }
    }

    /// Sends `signal` (`libc::SIGSTOP`, `SIGCONT`, `SIGTERM`, ...).
    pub fn signal(&self, signal: libc::c_int) -> Check {
        send_signal(self.pid(), signal)
    }

    /// Waits until the process is stopped (state `T` in /proc), as it is
    /// once a SIGSTOP has been delivered.
    pub fn wait_stopped(&self) -> Check {
        let pid = self.pid();
        if monolock_testkit::sys::wait_until_stopped(pid, PATIENCE) {
            Ok(())
        } else {
            Err(Failure::new(format!(
                "the server (pid {pid}) did not stop within {PATIENCE:?}"
            )))
        }
    }

    /// Waits for the process to exit, at most [`PATIENCE`].
    pub fn wait_exit(&mut self) -> Check<ExitStatus> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(None) => {
                    return Err(Failure::new(format!(
                        "the server did not exit within {PATIENCE:?}; its log: {:?}",
                        self.log_tail()
                    )));
                }
                Err(err) => return Err(Failure::new(format!("waiting for the server: {err}"))),
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `signal` to process `pid`, a child of this process that has not
/// been waited for.
pub(crate) fn send_signal(pid: u32, signal: libc::c_int) -> Check {
    monolock_testkit::sys::send_signal(pid, signal)
        .map_err(|err| Failure::new(format!("kill({pid}, {signal}) failed: {err}")))
}
