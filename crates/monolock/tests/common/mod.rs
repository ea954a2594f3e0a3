//! Shared helpers for tests that run the real `monolock` binary.
#![allow(dead_code)] // each test binary uses a different subset

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    process::{Child, ChildStderr, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

/// The `monolock` executable under test.
pub const MONOLOCK: &str = env!("CARGO_BIN_EXE_monolock");

/// A `monolock serve` child process on a free loopback port.
pub struct ServerProcess {
    pub child: Child,
    pub addr: SocketAddr,
    /// Every stderr line after the one announcing the address.
    pub log: mpsc::Receiver<String>,
}

impl ServerProcess {
    /// Starts `monolock serve --listen 127.0.0.1:0` with extra arguments and
    /// waits for its `listening` log line.
    pub fn start(extra: &[&str]) -> Self {
        Self::start_with_env(extra, &[])
    }

    /// As [`ServerProcess::start`], with extra environment variables.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(MONOLOCK)
            .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn monolock serve");
        let stderr = child.stderr.take().expect("stderr");
        let (addr, log) = follow_log(stderr);
        let addr = addr
            .recv_timeout(Duration::from_secs(20))
            .expect("server announced its address");
        Self { child, addr, log }
    }

    /// Sends `signal` to the server process.
    pub fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid");
        // SAFETY: kill has no memory-safety preconditions; the pid is our
        // own child, which has not been reaped yet.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill failed");
    }

    /// Waits for the process to exit, at most `patience`.
    pub fn wait_exit(&mut self, patience: Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + patience;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "server did not exit within {patience:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads JSON log lines in a thread: the first `listening` line's `addr` goes
/// to the first channel, every later line to the second.
fn follow_log(stderr: ChildStderr) -> (mpsc::Receiver<SocketAddr>, mpsc::Receiver<String>) {
    let (addr_tx, addr_rx) = mpsc::channel();
    let (line_tx, line_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut announced = false;
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if !announced
                && let Ok(value) = serde_json::from_str::<serde_json::Value>(&line)
                && value["message"] == "listening"
                && let Some(addr) = value["addr"].as_str().and_then(|a| a.parse().ok())
            {
                announced = true;
                let _ = addr_tx.send(addr);
                continue;
            }
            let _ = line_tx.send(line);
        }
    });
    (addr_rx, line_rx)
}
