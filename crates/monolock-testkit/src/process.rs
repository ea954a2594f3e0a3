//! The real `monolock serve` as a child process, for the tests and suites
//! that need the binary itself (signals, exit codes, its log): started on
//! `127.0.0.1:0`, its free ports learnt from the lines that announce its
//! listeners, its diagnostics followed line by line so a test waits for a
//! line instead of sleeping.
//!
//! [`serve`] blocks the thread and follows the log with a thread of its
//! own; [`serve_async`] is the same launch on tokio, and hands the rest of
//! the log over to the caller (the fault suite keeps every line of it).
//!
//! ```no_run
//! # fn demo(monolock: &str) {
//! use std::{process::Command, time::Duration};
//! use monolock_testkit::process::serve;
//!
//! let mut command = Command::new(monolock);
//! command.stdout(std::process::Stdio::null());
//! let mut serving = serve(command, &["--log-format", "json"], Duration::from_secs(20))
//!     .unwrap_or_else(|err| panic!("{err}"));
//! let stopped = serving.log.wait_log("stopped accepting", Duration::from_secs(20));
//! # let _ = (stopped, serving.child.kill());
//! # }
//! ```

use std::{
    collections::VecDeque,
    ffi::OsStr,
    fmt,
    io::{BufRead, BufReader},
    net::SocketAddr,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, PoisonError, mpsc},
    time::{Duration, Instant},
};

use serde_json::Value;
use tokio::{
    io::AsyncBufReadExt,
    process::{Child as AsyncChild, ChildStderr, Command as AsyncCommand},
};

/// How many of the server's last diagnostic lines a failure shows.
const TAIL: usize = 30;

/// A listener `monolock serve` announces at startup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    /// The lock protocol (`--listen`).
    Protocol,
    /// The admin API (`--admin-listen`).
    Admin,
    /// The ops endpoint (`--ops-listen`).
    Ops,
}

/// The listener a startup line announces and its address, in either log
/// format: JSON (`"message":"listening","addr":"127.0.0.1:7070"`) or text
/// (`TIMESTAMP  INFO listening addr=127.0.0.1:7070`). `None` for every
/// other line.
pub fn announced(line: &str) -> Option<(Listener, SocketAddr)> {
    let (message, addr) = match serde_json::from_str::<Value>(line) {
        Ok(json) => (
            json.get("message")?.as_str()?.to_owned(),
            json.get("addr")?.as_str()?.parse().ok()?,
        ),
        Err(_) => {
            let (head, fields) = line.split_once(" addr=")?;
            // The head is the timestamp, the level, then the message.
            let message: Vec<&str> = head.split_whitespace().skip(2).collect();
            (
                message.join(" "),
                fields.split_whitespace().next()?.parse().ok()?,
            )
        }
    };
    let listener = match message.as_str() {
        "listening" => Listener::Protocol,
        "admin API listening" => Listener::Admin,
        "ops endpoint listening" => Listener::Ops,
        _ => return None,
    };
    Some((listener, addr))
}

/// The listeners a launch waits for and those announced so far.
struct Announcements {
    wants_admin: bool,
    wants_ops: bool,
    protocol: Option<SocketAddr>,
    admin: Option<SocketAddr>,
    ops: Option<SocketAddr>,
}

impl Announcements {
    /// Waits for the protocol listener, and for the admin and ops ones
    /// when `extra` asks for them.
    fn expected_by<S: AsRef<OsStr>>(extra: &[S]) -> Self {
        let asks = |flag: &str| extra.iter().any(|arg| arg.as_ref() == flag);
        Self {
            wants_admin: asks("--admin-listen"),
            wants_ops: asks("--ops-listen"),
            protocol: None,
            admin: None,
            ops: None,
        }
    }

    fn see(&mut self, line: &str) {
        match announced(line) {
            Some((Listener::Protocol, addr)) => self.protocol = Some(addr),
            Some((Listener::Admin, addr)) => self.admin = Some(addr),
            Some((Listener::Ops, addr)) => self.ops = Some(addr),
            None => {}
        }
    }

    /// The protocol address, once every listener waited for is known.
    fn complete(&self) -> Option<SocketAddr> {
        let admin_known = !self.wants_admin || self.admin.is_some();
        let ops_known = !self.wants_ops || self.ops.is_some();
        self.protocol.filter(|_| admin_known && ops_known)
    }
}

/// Makes `command` run `serve --listen 127.0.0.1:0 EXTRA` (a free port)
/// with stdin closed and stderr piped, for either launcher.
fn serve_on_a_free_port<S: AsRef<OsStr>>(command: &mut Command, extra: &[S]) {
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(extra)
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
}

/// A `monolock serve` child that has announced its listeners. The caller
/// owns the child (and kills it when done); `serve` kills it only when it
/// fails to start.
pub struct Serving {
    /// The process; its stdout is as the command set it.
    pub child: Child,
    /// The protocol address.
    pub addr: SocketAddr,
    /// The admin API address, when `--admin-listen` was given.
    pub admin: Option<SocketAddr>,
    /// The ops address, when `--ops-listen` was given.
    pub ops: Option<SocketAddr>,
    /// Its diagnostics after the announcements.
    pub log: ServeLog,
}

/// Why `serve` failed.
#[derive(Debug)]
pub enum StartError {
    /// The command could not be spawned.
    Spawn(std::io::Error),
    /// The server did not announce every listener asked for in time (or
    /// exited): its last diagnostic lines.
    Silent {
        /// How long it was given.
        within: Duration,
        /// Its last lines.
        tail: Vec<String>,
    },
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Spawn(err) => write!(f, "cannot start monolock serve: {err}"),
            Self::Silent { within, tail } => write!(
                f,
                "the server did not announce its listeners within {within:?}; its log: {tail:?}"
            ),
        }
    }
}

impl std::error::Error for StartError {}

/// Runs `command` (the `monolock` binary, or a wrapper such as `prlimit
/// ... -- monolock`) as `serve --listen 127.0.0.1:0 EXTRA` with stdin
/// closed and stderr followed, and waits at most `within` until it has
/// announced its protocol listener, and its admin and ops listeners when
/// `extra` asks for them. `extra` chooses the log format; both are read.
///
/// # Errors
/// [`StartError`]: the spawn failed, or the announcements did not come (the
/// child is killed then).
pub fn serve(
    mut command: Command,
    extra: &[&str],
    within: Duration,
) -> Result<Serving, StartError> {
    serve_on_a_free_port(&mut command, extra);
    let mut child = command.spawn().map_err(StartError::Spawn)?;
    let log = ServeLog::follow(&mut child);
    let mut announcements = Announcements::expected_by(extra);
    let deadline = Instant::now() + within;
    let addr = loop {
        if let Some(addr) = announcements.complete() {
            break addr;
        }
        let Some(line) = log.next_line_before(deadline) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(StartError::Silent {
                within,
                tail: log.tail(),
            });
        };
        announcements.see(&line);
    };
    Ok(Serving {
        child,
        addr,
        admin: announcements.admin,
        ops: announcements.ops,
        log,
    })
}

/// A `monolock serve` child started on tokio that has announced its
/// listeners, and the rest of its stderr for the caller to read. The
/// caller owns the child.
pub struct AsyncServing {
    /// The process; its stdout is as the command set it.
    pub child: AsyncChild,
    /// The protocol address.
    pub addr: SocketAddr,
    /// The admin API address, when `--admin-listen` was given.
    pub admin: Option<SocketAddr>,
    /// The ops address, when `--ops-listen` was given.
    pub ops: Option<SocketAddr>,
    /// Every line it wrote up to its last announcement, oldest first.
    pub early_lines: Vec<String>,
    /// The lines it writes from then on.
    pub stderr: tokio::io::Lines<tokio::io::BufReader<ChildStderr>>,
}

/// [`serve`] on tokio: runs `command` as `serve --listen 127.0.0.1:0
/// EXTRA` with stdin closed and stderr piped, and waits at most `within`
/// for the announcements `extra` asks for, without blocking the thread.
/// The lines read meanwhile and the rest of stderr go to the caller.
///
/// # Errors
/// [`StartError`]: the spawn failed, or the announcements did not come (the
/// child is killed then).
pub async fn serve_async<S: AsRef<OsStr>>(
    mut command: AsyncCommand,
    extra: &[S],
    within: Duration,
) -> Result<AsyncServing, StartError> {
    serve_on_a_free_port(command.as_std_mut(), extra);
    let mut child = command.spawn().map_err(StartError::Spawn)?;
    let Some(pipe) = child.stderr.take() else {
        unreachable!("stderr was piped above")
    };
    let mut stderr = tokio::io::BufReader::new(pipe).lines();
    let mut announcements = Announcements::expected_by(extra);
    let mut early_lines = Vec::new();
    let announced = tokio::time::timeout(within, async {
        while let Ok(Some(line)) = stderr.next_line().await {
            announcements.see(&line);
            early_lines.push(line);
            if let Some(addr) = announcements.complete() {
                return Some(addr);
            }
        }
        None
    })
    .await;
    let Ok(Some(addr)) = announced else {
        let _ = child.kill().await;
        let skipped = early_lines.len().saturating_sub(TAIL);
        return Err(StartError::Silent {
            within,
            tail: early_lines.split_off(skipped),
        });
    };
    Ok(AsyncServing {
        child,
        addr,
        admin: announcements.admin,
        ops: announcements.ops,
        early_lines,
        stderr,
    })
}

/// A child's stderr, line by line, read by a thread (so a test can wait
/// for a line with a deadline), the last lines kept for failure messages.
pub struct ServeLog {
    lines: mpsc::Receiver<String>,
    tail: Arc<Mutex<VecDeque<String>>>,
}

impl ServeLog {
    /// Takes `child`'s stderr (which must be piped) and follows it.
    ///
    /// # Panics
    /// If the child's stderr was not piped.
    pub fn follow(child: &mut Child) -> Self {
        let stderr = child.stderr.take().expect("the child's stderr is piped");
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL)));
        let (tx, lines) = mpsc::channel();
        let kept = Arc::clone(&tail);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                {
                    let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
                    if kept.len() == TAIL {
                        kept.pop_front();
                    }
                    kept.push_back(line.clone());
                }
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { lines, tail }
    }

    /// The next line, or `None` if none comes before `deadline` (or the
    /// child closed its stderr).
    pub fn next_line_before(&self, deadline: Instant) -> Option<String> {
        self.lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .ok()
    }

    /// The next JSON line whose message contains `text` (the lines before
    /// it are consumed), or `None` if none comes within `within`.
    pub fn wait_log(&self, text: &str, within: Duration) -> Option<Value> {
        let deadline = Instant::now() + within;
        loop {
            let line = self.next_line_before(deadline)?;
            let Ok(json) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if json["message"].as_str().is_some_and(|m| m.contains(text)) {
                return Some(json);
            }
        }
    }

    /// The last lines the child wrote (at most 30), oldest first.
    pub fn tail(&self) -> Vec<String> {
        self.tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for `monolock` that prints `lines` on stderr then waits.
    fn fake_server(lines: &str) -> AsyncCommand {
        let mut command = AsyncCommand::new("sh");
        let script = format!("printf '{lines}' >&2; exec sleep 30");
        command.args(["-c", &script, "fake-monolock"]);
        command.kill_on_drop(true);
        command
    }

    #[tokio::test]
    async fn serve_async_waits_for_every_listener_asked_for_and_hands_over_the_rest() {
        let lines = "starting\\n\
            {\"message\":\"listening\",\"addr\":\"127.0.0.1:4242\"}\\n\
            {\"message\":\"admin API listening\",\"addr\":\"127.0.0.1:4343\"}\\n\
            after\\n";
        let extra = ["--admin-listen", "127.0.0.1:0"];
        let mut serving = serve_async(fake_server(lines), &extra, Duration::from_secs(20))
            .await
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(serving.addr, "127.0.0.1:4242".parse().expect("addr"));
        assert_eq!(serving.admin, Some("127.0.0.1:4343".parse().expect("addr")));
        assert_eq!(serving.ops, None);
        assert_eq!(serving.early_lines.len(), 3);
        let next = serving.stderr.next_line().await.expect("read stderr");
        assert_eq!(next.as_deref(), Some("after"));
    }

    #[tokio::test]
    async fn serve_async_fails_with_the_log_when_a_listener_is_never_announced() {
        let lines = "{\"message\":\"listening\",\"addr\":\"127.0.0.1:4242\"}\\n";
        let extra = ["--ops-listen", "127.0.0.1:0"];
        let started = serve_async(fake_server(lines), &extra, Duration::from_secs(3)).await;
        match started {
            Err(StartError::Silent { tail, .. }) => assert_eq!(tail.len(), 1, "{tail:?}"),
            Err(err) => panic!("{err}"),
            Ok(serving) => panic!("started without ops: {:?}", serving.addr),
        }
    }

    #[test]
    fn reads_the_announcements_of_both_formats() {
        let addr: SocketAddr = "127.0.0.1:4242".parse().expect("addr");
        let json =
            r#"{"timestamp":"x","level":"INFO","message":"listening","addr":"127.0.0.1:4242"}"#;
        assert_eq!(announced(json), Some((Listener::Protocol, addr)));
        let admin = r#"{"message":"admin API listening","addr":"127.0.0.1:4242","auth":"none"}"#;
        assert_eq!(announced(admin), Some((Listener::Admin, addr)));
        let text = "2026-12-03T13:40:43.875952Z  INFO listening addr=127.0.0.1:4242";
        assert_eq!(announced(text), Some((Listener::Protocol, addr)));
        let ops = "2026-12-03T13:40:43.876226Z  INFO ops endpoint listening addr=127.0.0.1:4242";
        assert_eq!(announced(ops), Some((Listener::Ops, addr)));
        let admin = "2026-12-03T13:40:43.875851Z  INFO admin API listening addr=127.0.0.1:4242 \
                     auth=\"none\" scheme=\"http\"";
        assert_eq!(announced(admin), Some((Listener::Admin, addr)));
        assert_eq!(
            announced(r#"{"message":"other","addr":"127.0.0.1:1"}"#),
            None
        );
        assert_eq!(
            announced("2026-12-03T13:40:43Z  INFO granted addr=127.0.0.1:1"),
            None
        );
    }
}
