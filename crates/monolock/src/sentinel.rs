//! The sentinel: a small process that outlives `monolock exec` and kills
//! the command's process group if exec dies without saying goodbye.
//!
//! The claim is exec's connection: when exec dies (SIGKILL, OOM killer, a
//! crash), the server releases the lock at once and may hand it on. The
//! parent-death signal kills the command itself, but not what the command
//! started (`sh -c 'sleep 30; ...'` leaves `sleep` running). The sentinel
//! closes that gap for the whole process group: the command itself writes
//! its group id into a pipe before it runs anything (so no instant exists
//! where the group runs unguarded), and exec keeps the write end; the kernel closes that end when
//! exec dies, however it dies, and the sentinel then sends SIGKILL to the
//! group. When exec ends normally it writes a goodbye first, and the
//! sentinel exits without touching anything.
//!
//! The sentinel runs in a session of its own with SIGINT, SIGTERM and
//! SIGHUP ignored, so that a terminal's Ctrl-C or hangup, or a signal to
//! exec's process group, cannot take it down with exec. Only SIGKILL sent
//! to the sentinel itself does.
//!
//! With `--pid-namespace`, exec moves its later children into a new PID
//! namespace before starting the sentinel, so the sentinel is that
//! namespace's init (PID 1) and the command is its sibling inside. When
//! the sentinel exits (dismissed, or after exec's death) the kernel kills
//! every process left in the namespace, including descendants that left
//! the process group with `setsid`. SIGCHLD is ignored so that the
//! orphans the namespace hands to its init are reaped by the kernel.

use std::{
    io::{self, Read, Write},
    process::{ExitCode, Stdio},
};

use clap::Args;
use tokio::process::{Child, ChildStdin, Command};

use crate::process::{detach, signal_group};

/// The byte exec writes when it ends normally.
const GOODBYE: u8 = b'.';

/// Flags of the hidden `monolock exec-sentinel` (started by exec only).
#[derive(Debug, Args)]
pub struct SentinelArgs {}

/// A running sentinel, owned by exec.
pub struct Sentinel {
    child: Child,
    pipe: Option<ChildStdin>,
}

impl Sentinel {
    /// Starts the sentinel (this same executable, `exec-sentinel`).
    pub fn start() -> io::Result<Self> {
        let mut command = Command::new("/proc/self/exe");
        // `ps` shows `monolock exec-sentinel`, not `/proc/self/exe ...`.
        command
            .arg0("monolock")
            .arg("exec-sentinel")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        detach(&mut command);
        let mut child = command.spawn()?;
        let pipe = child.stdin.take();
        Ok(Self { child, pipe })
    }

    /// The write end of the sentinel's pipe, for the command to announce
    /// its process group on (`process::announce_group`).
    pub fn pipe_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.pipe.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Exec ends normally: the sentinel leaves the group alone and exits.
    pub async fn dismiss(mut self) {
        use tokio::io::AsyncWriteExt;
        if let Some(mut pipe) = self.pipe.take() {
            let _ = pipe.write_all(&[GOODBYE]).await;
        }
        let _ = self.child.wait().await;
    }
}

/// The sentinel's own program: read the group id, then wait for the
/// goodbye or for end of file.
pub fn main(_args: SentinelArgs) -> ExitCode {
    let mut input = io::stdin().lock();
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    let mut group = None;
    loop {
        match input.read(&mut byte) {
            Ok(0) => break,
            Ok(_) if byte[0] == GOODBYE => return ExitCode::SUCCESS,
            Ok(_) if byte[0] == b'\n' => {
                group = std::str::from_utf8(&bytes)
                    .ok()
                    .and_then(|text| text.parse::<i32>().ok());
                bytes.clear();
            }
            Ok(_) => bytes.push(byte[0]),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    // End of file without a goodbye: exec is gone, and so is its claim.
    let Some(group) = group else {
        return ExitCode::SUCCESS;
    };
    match signal_group(group, libc::SIGKILL) {
        Ok(()) => {
            let _ = writeln!(
                io::stderr(),
                "monolock exec-sentinel: monolock exec died holding the lock; killed the command's process group {group}"
            );
        }
        Err(err) if err.raw_os_error() == Some(libc::ESRCH) => {}
        Err(err) => {
            let _ = writeln!(
                io::stderr(),
                "monolock exec-sentinel: cannot kill process group {group}: {err}"
            );
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
