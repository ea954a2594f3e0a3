//! The real `monolock serve` as a child process: free loopback ports
//! learnt from its JSON startup log, its admin API, and signals.

use std::{
    net::SocketAddr,
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use monolock_testkit::process::{ServeLog, StartError, serve};
use serde_json::Value;

use crate::{Check, Failure, PATIENCE, admin::Admin};

/// A `monolock serve` child; killed (after a SIGCONT) when dropped.
pub struct Server {
    child: Child,
    /// The protocol address (`127.0.0.1:PORT`).
    pub addr: SocketAddr,
    /// The admin API.
    pub admin: Admin,
    log: ServeLog,
}

impl Server {
    /// Starts `monolock serve` on `127.0.0.1:0` with an admin listener on
    /// `127.0.0.1:0` and `extra` flags, and learns both ports from its log.
    pub fn start(monolock: &Path, extra: &[&str]) -> Check<Self> {
        let mut command = Command::new(monolock);
        command.stdout(Stdio::null());
        let args: Vec<&str> = ["--admin-listen", "127.0.0.1:0", "--log-format", "json"]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        let serving = serve(command, &args, PATIENCE).map_err(|err| match err {
            StartError::Spawn(err) => {
                Failure::new(format!("cannot start {}: {err}", monolock.display()))
            }
            silent => Failure::new(silent.to_string()),
        })?;
        let Some(admin) = serving.admin else {
            unreachable!("serve waits for the admin listener it was given")
        };
        Ok(Self {
            child: serving.child,
            addr: serving.addr,
            admin: Admin::new(admin),
            log: serving.log,
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
        self.log.tail()
    }

    /// Waits for a log line whose message contains `text`.
    pub fn wait_log(&self, text: &str) -> Check<Value> {
        self.log.wait_log(text, PATIENCE).ok_or_else(|| {
            Failure::new(format!(
                "the server logged no line with {text:?} within {PATIENCE:?}; its log: {:?}",
                self.log_tail()
            ))
        })
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
