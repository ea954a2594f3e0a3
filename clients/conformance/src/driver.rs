//! A client's driver as a child process: commands out as JSON lines, one
//! reply line back per command (`DRIVER.md`).
//!
//! Every wait for a reply is bounded; a reply that is not JSON, echoes the
//! wrong `id`, or never comes fails the scenario with the driver's last
//! lines of standard error attached.

use std::{
    collections::VecDeque,
    ffi::OsString,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::{Arc, Mutex, mpsc},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::{Check, Failure, PATIENCE};

/// How many of a driver's last standard-error lines a failure shows.
const STDERR_TAIL: usize = 40;

/// The one list of loss reasons (DRIVER.md): the same strings in every
/// client's API and in every reply.
pub const REASONS: &[&str] = &[
    "expired",
    "forced",
    "shutdown",
    "connection",
    "protocol",
    "server_error",
];

/// How to start one driver process.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Its working directory (the runner's when `None`).
    pub cwd: Option<PathBuf>,
    /// Extra environment variables.
    pub env: Vec<(OsString, OsString)>,
}

impl Launch {
    /// `program` with no arguments.
    pub fn program(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            cwd: None,
            env: Vec::new(),
        }
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
}

/// One reply line.
#[derive(Clone, Debug)]
pub struct Reply(pub Value);

impl Reply {
    /// `ok` of the reply.
    pub fn ok(&self) -> bool {
        self.0["ok"].as_bool() == Some(true)
    }

    /// `error.kind`, on a failed command.
    pub fn kind(&self) -> Option<&str> {
        self.0["error"]["kind"].as_str()
    }

    /// `error.reason`, on a `lost` error.
    pub fn reason(&self) -> Option<&str> {
        self.0["error"]["reason"].as_str()
    }

    /// `error.message`, on a failed command.
    pub fn message(&self) -> &str {
        self.0["error"]["message"].as_str().unwrap_or_default()
    }

    /// `error.temporary`: the client's own classification of the error.
    pub fn temporary(&self) -> Option<bool> {
        self.0["error"]["temporary"].as_bool()
    }

    /// A boolean field of a successful reply.
    pub fn flag(&self, field: &str) -> Option<bool> {
        self.0[field].as_bool()
    }
}

/// A running driver. Dropping it closes its standard input and kills it
/// if it has not exited shortly after.
pub struct Driver {
    /// The client it drives (`rust`, `python`, ...).
    pub client: &'static str,
    /// `client#n`, for messages.
    pub label: String,
    /// Every `open` asks for protocol v1.
    pub force_v1: bool,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    next_id: u64,
    in_flight: Option<(u64, Value)>,
}

impl Driver {
    /// Starts a driver of `client` with `MONOLOCK_BIN` set to `monolock`.
    pub fn spawn(
        client: &'static str,
        label: String,
        launch: &Launch,
        monolock: &Path,
        force_v1: bool,
    ) -> Check<Self> {
        let mut command = Command::new(&launch.program);
        command
            .args(&launch.args)
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .env("MONOLOCK_BIN", monolock)
            .env_remove("MONOLOCK_ADDRESS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = &launch.cwd {
            command.current_dir(dir);
        }
        let mut child = command.spawn().map_err(|err| {
            Failure::of(
                client,
                format!(
                    "{label}: cannot start the driver {}: {err}",
                    launch.program.display()
                ),
            )
        })?;
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(pipe) = child.stderr.take() {
            let tail = Arc::clone(&stderr);
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if let Ok(mut tail) = tail.lock() {
                        if tail.len() == STDERR_TAIL {
                            tail.pop_front();
                        }
                        tail.push_back(line);
                    }
                }
            });
        }
        let (tx, lines) = mpsc::channel();
        if let Some(pipe) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Self {
            client,
            label,
            force_v1,
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            next_id: 1,
            in_flight: None,
        })
    }

    /// The driver's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A failure of this driver's client, with its last lines of stderr.
    pub fn failure(&self, message: impl AsRef<str>) -> Failure {
        let tail = self
            .stderr
            .lock()
            .map(|tail| tail.iter().cloned().collect::<Vec<_>>())
            .unwrap_or_default();
        let mut text = format!("{}: {}", self.label, message.as_ref());
        if !tail.is_empty() {
            text.push_str(&format!("; its stderr ends with: {tail:?}"));
        }
        Failure::of(self.client, text)
    }

    /// Sends a command without waiting for its reply (collect it with
    /// [`reply`](Self::reply)). `cmd` is an object without `id`.
    pub fn send(&mut self, mut cmd: Value) -> Check {
        if let Some((_, pending)) = &self.in_flight {
            return Err(Failure::new(format!(
                "runner bug: {} sent {cmd} before the reply to {pending}",
                self.label
            )));
        }
        let id = self.next_id;
        self.next_id += 1;
        cmd["id"] = json!(id);
        let mut line = cmd.to_string();
        line.push('\n');
        let written = match self.stdin.as_mut() {
            Some(stdin) => stdin
                .write_all(line.as_bytes())
                .and_then(|()| stdin.flush()),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        };
        if let Err(err) = written {
            return Err(self.failure(format!("cannot send {cmd}: {err} (did the driver exit?)")));
        }
        self.in_flight = Some((id, cmd));
        Ok(())
    }

    /// The reply to the command in flight, if it arrives within `wait`;
    /// `None` (the command still in flight) otherwise.
    pub fn reply_within(&mut self, wait: Duration) -> Check<Option<Reply>> {
        let Some((id, cmd)) = self.in_flight.clone() else {
            return Err(Failure::new(format!(
                "runner bug: {} awaits a reply with no command in flight",
                self.label
            )));
        };
        let line = match self.lines.recv_timeout(wait) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Timeout) => return Ok(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = self.child.try_wait().ok().flatten();
                return Err(self.failure(format!(
                    "closed its stdout without replying to {cmd} (exit status: {status:?})"
                )));
            }
        };
        self.in_flight = None;
        let value: Value = serde_json::from_str(&line).map_err(|err| {
            self.failure(format!(
                "answered {cmd} with a line that is not JSON ({err}): {line:?}"
            ))
        })?;
        if value["id"] != json!(id) {
            return Err(self.failure(format!(
                "answered {cmd} with id {} instead of {id}: {line}",
                value["id"]
            )));
        }
        if !value["ok"].is_boolean() {
            return Err(self.failure(format!("answered {cmd} without a boolean ok: {line}")));
        }
        if value["ok"] == json!(false) {
            if !value["error"]["kind"].is_string() {
                return Err(self.failure(format!(
                    "answered {cmd} with a failure without error.kind: {line}"
                )));
            }
            if !value["error"]["temporary"].is_boolean() {
                return Err(self.failure(format!(
                    "answered {cmd} with a failure without a boolean error.temporary \
                     (the client's own flag): {line}"
                )));
            }
        }
        // Whatever the command, a reason is one of the one list.
        for reason in [&value["error"]["reason"], &value["reason"]] {
            if let Some(reason) = reason.as_str()
                && !REASONS.contains(&reason)
            {
                return Err(self.failure(format!(
                    "answered {cmd} with the loss reason {reason:?}, which is not one of \
                     {REASONS:?}: {line}"
                )));
            }
        }
        Ok(Some(Reply(value)))
    }

    /// The reply to the command in flight, within [`PATIENCE`].
    pub fn reply(&mut self) -> Check<Reply> {
        match self.reply_within(PATIENCE)? {
            Some(reply) => Ok(reply),
            None => {
                let cmd = self.in_flight.as_ref().map(|(_, cmd)| cmd.to_string());
                Err(self.failure(format!(
                    "no reply to {} within {PATIENCE:?}",
                    cmd.unwrap_or_default()
                )))
            }
        }
    }

    /// Sends `cmd` and returns its reply.
    pub fn call(&mut self, cmd: Value) -> Check<Reply> {
        self.send(cmd)?;
        self.reply()
    }

    /// Sends `cmd` and requires success.
    pub fn ok(&mut self, cmd: Value) -> Check<Reply> {
        let shown = cmd.to_string();
        let reply = self.call(cmd)?;
        if !reply.ok() {
            return Err(self.failure(format!("{shown} failed: {}", reply.0["error"])));
        }
        Ok(reply)
    }

    /// Sends `cmd` and requires a failure whose kind is one of `kinds`.
    pub fn fails(&mut self, cmd: Value, kinds: &[&str]) -> Check<Reply> {
        let shown = cmd.to_string();
        let reply = self.call(cmd)?;
        if reply.ok() {
            return Err(self.failure(format!(
                "{shown} succeeded ({}) where it must fail with {kinds:?}",
                reply.0
            )));
        }
        let kind = reply.kind().unwrap_or_default();
        if !kinds.contains(&kind) {
            return Err(self.failure(format!(
                "{shown} failed with kind {kind:?} where it must be one of {kinds:?}: {}",
                reply.0["error"]
            )));
        }
        Ok(reply)
    }

    /// The `open` command on plain TCP, with `force_v1` as this driver's
    /// run asks.
    pub fn open_cmd(&self, address: &str) -> Value {
        json!({"cmd": "open", "address": address, "force_v1": self.force_v1})
    }

    /// `open` on plain TCP.
    pub fn open(&mut self, address: &str) -> Check {
        let cmd = self.open_cmd(address);
        self.ok(cmd).map(drop)
    }

    /// `open` with a `tls` object.
    pub fn open_tls(&mut self, address: &str, tls: Value) -> Check {
        let mut cmd = self.open_cmd(address);
        cmd["tls"] = tls;
        self.ok(cmd).map(drop)
    }

    /// `lock` without a bound on the wait; returns the token.
    pub fn lock(&mut self, handle: &str, name: &str, lease_ms: u64) -> Check<u64> {
        let reply = self.ok(lock_cmd(handle, name, lease_ms, None))?;
        self.token_of(&reply)
    }

    /// `try_lock`; the token when acquired.
    pub fn try_lock(&mut self, handle: &str, name: &str, lease_ms: u64) -> Check<Option<u64>> {
        let reply = self.ok(json!({
            "cmd": "try_lock", "handle": handle, "name": name, "lease_ms": lease_ms,
        }))?;
        match reply.flag("acquired") {
            Some(true) => self.token_of(&reply).map(Some),
            Some(false) => {
                if !reply.0["token"].is_null() {
                    return Err(self.failure(format!(
                        "try_lock answered acquired: false with a token: {}",
                        reply.0
                    )));
                }
                Ok(None)
            }
            None => Err(self.failure(format!(
                "try_lock answered without a boolean acquired: {}",
                reply.0
            ))),
        }
    }

    /// `release`, which must succeed.
    pub fn release(&mut self, handle: &str) -> Check {
        self.ok(json!({"cmd": "release", "handle": handle}))
            .map(drop)
    }

    /// `is_held`.
    pub fn is_held(&mut self, handle: &str) -> Check<bool> {
        let reply = self.ok(json!({"cmd": "is_held", "handle": handle}))?;
        reply
            .flag("held")
            .ok_or_else(|| self.failure(format!("is_held answered without held: {}", reply.0)))
    }

    /// `token`.
    pub fn token(&mut self, handle: &str) -> Check<u64> {
        let reply = self.ok(json!({"cmd": "token", "handle": handle}))?;
        self.token_of(&reply)
    }

    /// `stats`.
    pub fn stats(&mut self) -> Check<Value> {
        self.ok(json!({"cmd": "stats"})).map(|reply| reply.0)
    }

    /// The `token` of a reply: a decimal string holding a u64.
    pub fn token_of(&self, reply: &Reply) -> Check<u64> {
        match &reply.0["token"] {
            Value::String(text) => text.parse().map_err(|_| {
                self.failure(format!("token {text:?} is not a decimal u64: {}", reply.0))
            }),
            other => Err(self.failure(format!(
                "the token must be a decimal string, got {other}: {}",
                reply.0
            ))),
        }
    }

    /// Sends `exit` without waiting; [`exit`](Self::exit) then collects
    /// the reply and the exit status.
    pub fn ask_exit(&mut self) -> Check {
        self.send(json!({"cmd": "exit"}))
    }

    /// Sends `exit` (unless [`ask_exit`](Self::ask_exit) did) and requires
    /// the reply and then the process to exit 0.
    pub fn exit(mut self) -> Check {
        match &self.in_flight {
            None => self.send(json!({"cmd": "exit"}))?,
            Some((_, cmd)) if cmd["cmd"] == "exit" => {}
            Some((_, cmd)) => {
                return Err(Failure::new(format!(
                    "runner bug: {} asked to exit with {cmd} in flight",
                    self.label
                )));
            }
        }
        let reply = self.reply()?;
        if !reply.ok() {
            return Err(self.failure(format!("`exit` failed: {}", reply.0)));
        }
        let deadline = Instant::now() + PATIENCE;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(self.failure(format!("exited with {status} after `exit`")));
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(None) => {
                    return Err(self.failure(format!("did not exit within {PATIENCE:?} of `exit`")));
                }
                Err(err) => return Err(self.failure(format!("cannot wait for it: {err}"))),
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `lock` command; `wait_ms: None` waits without bound.
pub fn lock_cmd(handle: &str, name: &str, lease_ms: u64, wait_ms: Option<u64>) -> Value {
    json!({"cmd": "lock", "handle": handle, "name": name, "lease_ms": lease_ms, "wait_ms": wait_ms})
}
