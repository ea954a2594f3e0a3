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

/// The events of a lock state (`state.event` in replies, DRIVER.md): the
/// wire's state event of docs/protocol.md's extension.
pub const STATE_EVENTS: &[&str] = &["free", "held", "granted", "value", "released"];

/// Why a holder's claim ended, as a `released` state says (`state.reason`).
pub const RELEASE_REASONS: &[&str] = &["released", "expired", "forced", "ended_by_server"];

/// A lock's state as a driver reports it (`state` in the replies to
/// `observe`, `next_state` and `holder`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockState {
    /// Someone holds the lock (`held`, `granted`, `value`).
    pub held: bool,
    /// The holder's token, or the token whose claim ended; 0 when unknown.
    pub token: u64,
    /// The holder's value; empty when not held.
    pub value: String,
    /// One of [`STATE_EVENTS`].
    pub event: String,
    /// The first state of an observation.
    pub initial: bool,
    /// Changes before this state were dropped (a slow reader).
    pub coalesced: bool,
    /// For `released`, one of [`RELEASE_REASONS`].
    pub reason: Option<String>,
}

/// What a command that waits a bounded time for something answered.
#[derive(Debug)]
pub enum Next<T> {
    /// The thing awaited.
    Got(T),
    /// `timeout: true`: nothing came within the command's `timeout_ms`.
    Timeout,
    /// The error reply (the observation or election ended).
    Ended(Reply),
}

/// An event of a client's election helper (`next_election_event`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ElectionEvent {
    /// on_started_leading, with the token of the lock.
    StartedLeading(u64),
    /// on_stopped_leading.
    StoppedLeading,
    /// on_new_leader: the observed holder changed to this token and value.
    NewLeader {
        /// The new leader's token.
        token: u64,
        /// The new leader's value.
        value: String,
    },
}

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
        let shown = abbreviated(&cmd);
        let reply = self.call(cmd)?;
        if !reply.ok() {
            return Err(self.failure(format!("{shown} failed: {}", reply.0["error"])));
        }
        Ok(reply)
    }

    /// Sends `cmd` and requires a failure whose kind is one of `kinds`.
    pub fn fails(&mut self, cmd: Value, kinds: &[&str]) -> Check<Reply> {
        let shown = abbreviated(&cmd);
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

    /// Sends `cmd` and returns its reply, waiting at most `wait` beyond
    /// [`PATIENCE`] (for commands that wait `wait` themselves).
    pub fn call_waiting(&mut self, cmd: Value, wait: Duration) -> Check<Reply> {
        self.send(cmd)?;
        match self.reply_within(PATIENCE + wait)? {
            Some(reply) => Ok(reply),
            None => {
                let cmd = self.in_flight.as_ref().map(|(_, cmd)| cmd.to_string());
                Err(self.failure(format!(
                    "no reply to {} within {:?}",
                    cmd.unwrap_or_default(),
                    PATIENCE + wait
                )))
            }
        }
    }

    /// `lock` with a `value`, without a bound on the wait; returns the
    /// token.
    pub fn lock_with_value(
        &mut self,
        handle: &str,
        name: &str,
        lease_ms: u64,
        value: &str,
    ) -> Check<u64> {
        let reply = self.ok(lock_value_cmd(handle, name, lease_ms, value))?;
        self.token_of(&reply)
    }

    /// `set_value`, which must succeed.
    pub fn set_value(&mut self, handle: &str, value: &str) -> Check {
        self.ok(json!({"cmd": "set_value", "handle": handle, "value": value}))
            .map(drop)
    }

    /// `observe`: registers the watch `handle` on `name` and returns the
    /// initial state.
    pub fn observe(&mut self, handle: &str, name: &str) -> Check<LockState> {
        let reply = self.ok(json!({"cmd": "observe", "handle": handle, "name": name}))?;
        self.state_of(&reply)
    }

    /// `next_state` of watch `handle`, waiting at most `timeout`.
    pub fn next_state(&mut self, handle: &str, timeout: Duration) -> Check<Next<LockState>> {
        let cmd = json!({
            "cmd": "next_state", "handle": handle, "timeout_ms": millis(timeout),
        });
        let reply = self.call_waiting(cmd, timeout)?;
        if !reply.ok() {
            return Ok(Next::Ended(reply));
        }
        if reply.flag("timeout") == Some(true) {
            return Ok(Next::Timeout);
        }
        self.state_of(&reply).map(Next::Got)
    }

    /// The next state of watch `handle`, which must come within
    /// [`PATIENCE`].
    pub fn expect_state(&mut self, handle: &str) -> Check<LockState> {
        match self.next_state(handle, PATIENCE)? {
            Next::Got(state) => Ok(state),
            Next::Timeout => {
                Err(self.failure(format!("watch {handle:?}: no state within {PATIENCE:?}")))
            }
            Next::Ended(reply) => Err(self.failure(format!(
                "watch {handle:?}: the observation ended where a state was expected: {}",
                reply.0
            ))),
        }
    }

    /// `unobserve`, which must succeed.
    pub fn unobserve(&mut self, handle: &str) -> Check {
        self.ok(json!({"cmd": "unobserve", "handle": handle}))
            .map(drop)
    }

    /// `holder`: the state of `name` now.
    pub fn holder(&mut self, name: &str) -> Check<LockState> {
        let reply = self.ok(json!({"cmd": "holder", "name": name}))?;
        self.state_of(&reply)
    }

    /// `elect`: starts the client's election helper `handle` on `name`.
    pub fn elect(&mut self, handle: &str, name: &str, lease_ms: u64, value: &str) -> Check {
        self.ok(elect_cmd(handle, name, lease_ms, value)).map(drop)
    }

    /// `next_election_event` of election `handle`, waiting at most
    /// `timeout`.
    pub fn next_election_event(
        &mut self,
        handle: &str,
        timeout: Duration,
    ) -> Check<Next<ElectionEvent>> {
        let cmd = json!({
            "cmd": "next_election_event", "handle": handle, "timeout_ms": millis(timeout),
        });
        let reply = self.call_waiting(cmd, timeout)?;
        if !reply.ok() {
            return Ok(Next::Ended(reply));
        }
        if reply.flag("timeout") == Some(true) {
            return Ok(Next::Timeout);
        }
        let event = &reply.0["event"];
        let token = |event: &Value| match &event["token"] {
            Value::String(text) => text.parse::<u64>().ok(),
            _ => None,
        };
        let parsed = match event["kind"].as_str() {
            Some("started_leading") => token(event).map(ElectionEvent::StartedLeading),
            Some("stopped_leading") => Some(ElectionEvent::StoppedLeading),
            Some("new_leader") => match (token(event), event["value"].as_str()) {
                (Some(token), Some(value)) => Some(ElectionEvent::NewLeader {
                    token,
                    value: value.to_owned(),
                }),
                _ => None,
            },
            _ => None,
        };
        parsed.map(Next::Got).ok_or_else(|| {
            self.failure(format!(
                "next_election_event answered an event that is not one of DRIVER.md's \
                 (kind started_leading with a decimal token, stopped_leading, new_leader \
                 with a decimal token and a value): {}",
                reply.0
            ))
        })
    }

    /// `resign`, which must succeed.
    pub fn resign(&mut self, handle: &str) -> Check {
        self.ok(json!({"cmd": "resign", "handle": handle}))
            .map(drop)
    }

    /// Sends `signal` to the driver process (`libc::SIGSTOP`, ...).
    pub fn signal(&self, signal: libc::c_int) -> Check {
        crate::server::send_signal(self.pid(), signal)
    }

    /// Kills the driver process (SIGKILL) and waits for it: its
    /// connections are closed by the kernel, as when a process crashes.
    pub fn kill(&mut self) -> Check {
        self.child
            .kill()
            .and_then(|()| self.child.wait().map(drop))
            .map_err(|err| Failure::new(format!("cannot kill {}: {err}", self.label)))
    }

    /// The `state` object of a reply, checked against DRIVER.md: every
    /// field present with its type, `event` one of [`STATE_EVENTS`],
    /// `held` true exactly for `held`, `granted` and `value`, `reason` set
    /// exactly for `released` (one of [`RELEASE_REASONS`]), `value` empty
    /// when not held.
    pub fn state_of(&self, reply: &Reply) -> Check<LockState> {
        let state = &reply.0["state"];
        let bad = |why: &str| {
            self.failure(format!(
                "the reply's `state` does not follow DRIVER.md ({why}): {}",
                reply.0
            ))
        };
        let (Some(held), Some(value), Some(event), Some(initial), Some(coalesced)) = (
            state["held"].as_bool(),
            state["value"].as_str(),
            state["event"].as_str(),
            state["initial"].as_bool(),
            state["coalesced"].as_bool(),
        ) else {
            return Err(bad(
                "held, value, event, initial and coalesced are required, with their types",
            ));
        };
        let token = match &state["token"] {
            Value::String(text) => text
                .parse::<u64>()
                .map_err(|_| bad("the token is not a decimal u64"))?,
            _ => return Err(bad("the token must be a decimal string")),
        };
        if !STATE_EVENTS.contains(&event) {
            return Err(bad("unknown event"));
        }
        let reason = match &state["reason"] {
            Value::Null => None,
            Value::String(reason) if RELEASE_REASONS.contains(&reason.as_str()) => {
                Some(reason.clone())
            }
            _ => return Err(bad("reason must be null or one of the release reasons")),
        };
        if reason.is_some() != (event == "released") {
            return Err(bad("reason is set exactly for a released state"));
        }
        if held != matches!(event, "held" | "granted" | "value") {
            return Err(bad("held must be true exactly for held, granted and value"));
        }
        if !held && !value.is_empty() {
            return Err(bad("a lock nobody holds has no value"));
        }
        Ok(LockState {
            held,
            token,
            value: value.to_owned(),
            event: event.to_owned(),
            initial,
            coalesced,
            reason,
        })
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

/// A `lock` command with a `value`, waiting without bound.
pub fn lock_value_cmd(handle: &str, name: &str, lease_ms: u64, value: &str) -> Value {
    json!({"cmd": "lock", "handle": handle, "name": name, "lease_ms": lease_ms, "value": value})
}

/// An `elect` command.
pub fn elect_cmd(handle: &str, name: &str, lease_ms: u64, value: &str) -> Value {
    json!({"cmd": "elect", "handle": handle, "name": name, "lease_ms": lease_ms, "value": value})
}

/// A duration as the whole milliseconds a command's `timeout_ms` takes.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A command as failure messages show it: strings longer than 64
/// characters (a value of 1,025 bytes) cut, with their length in bytes.
pub fn abbreviated(cmd: &Value) -> String {
    match cmd {
        Value::Object(fields) => {
            let mut shown = serde_json::Map::new();
            for (key, value) in fields {
                let value = match value {
                    Value::String(text) if text.chars().count() > 64 => {
                        let head: String = text.chars().take(16).collect();
                        Value::String(format!("{head}... ({} bytes)", text.len()))
                    }
                    other => other.clone(),
                };
                shown.insert(key.clone(), value);
            }
            Value::Object(shown).to_string()
        }
        other => other.to_string(),
    }
}
