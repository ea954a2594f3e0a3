//! The conformance driver of the Rust client (`monolock-client`): reads
//! commands as JSON lines on stdin and answers each with one JSON line on
//! stdout, as `clients/conformance/DRIVER.md` specifies.
//!
//! A thin shell around the client's public API (`Client::acquire`,
//! `try_acquire`, `acquire_timeout`, their `_with_value` forms, `observe`,
//! `holder`, `elect`, `LockGuard::is_held`, `lost`, `loss`, `set_value`,
//! `release`, `TlsConnector`): it decides nothing the client should
//! decide, so what the suite checks is the client itself.
#![forbid(unsafe_code)]

use std::{collections::HashMap, error::Error as StdError, time::Duration};

use monolock_client::{
    Client, Election, ElectionEvent, Error, LockGuard, LockLost, LockState, Observation, Protocol,
    TlsConnector, WrongPeer,
};
use monolock_testkit::sys;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The driver's one client, over plain TCP or TLS.
enum AnyClient {
    Tcp(Client),
    Tls(Client<TlsConnector>),
}

/// Runs the same expression on whichever client is open.
macro_rules! with_client {
    ($client:expr, $c:ident => $body:expr) => {
        match $client {
            AnyClient::Tcp($c) => $body,
            AnyClient::Tls($c) => $body,
        }
    };
}

/// A failed command: the `error` object of the reply.
struct Failure {
    kind: &'static str,
    reason: Option<&'static str>,
    message: String,
    /// The client's own `is_temporary` (false for the driver's own errors).
    temporary: bool,
}

impl Failure {
    fn new(kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind,
            reason: None,
            message: message.into(),
            temporary: false,
        }
    }
}

impl Failure {
    /// A failed `observe` or `holder`: a REFUSED from the server (a
    /// watch bound, the ACL) is the server's refusal, never a loss.
    fn refused(err: Error) -> Self {
        let mut failure = Self::from(err);
        if failure.kind == "lost" && failure.reason == Some("server_error") {
            failure.kind = "server";
            failure.reason = None;
        }
        failure
    }
}

impl From<LockLost> for Failure {
    fn from(lost: LockLost) -> Self {
        Error::from(lost).into()
    }
}

impl From<Error> for Failure {
    fn from(err: Error) -> Self {
        let message = chain(&err);
        let temporary = err.is_temporary();
        let (kind, reason) = match &err {
            Error::InvalidName(_)
            | Error::InvalidLease { .. }
            | Error::InvalidAddress { .. }
            | Error::InvalidValue { .. } => ("invalid_argument", None),
            Error::Unsupported(_) => ("unsupported", None),
            Error::ObservationEnded(ended) => ("lost", Some(ended.reason().name())),
            Error::Connect { source, .. }
                if source
                    .get_ref()
                    .is_some_and(|inner| inner.is::<monolock_client::rustls::Error>()) =>
            {
                ("tls", None)
            }
            Error::WrongPeer {
                problem: WrongPeer::NoTls,
                ..
            }
            | Error::Tls(_) => ("tls", None),
            Error::Connect { .. } | Error::ConnectTimeout { .. } | Error::WrongPeer { .. } => {
                ("connect", None)
            }
            Error::Lost(_) if err.server_code().is_some_and(|code| !code.is_temporary()) => {
                ("server", None)
            }
            Error::Lost(reason) => ("lost", Some(reason.name())),
            Error::LockLost(lost) => ("lost", Some(lost.reason().name())),
            _ => ("other", None),
        };
        Self {
            kind,
            reason,
            message,
            temporary,
        }
    }
}

fn unknown_handle(handle: &str) -> Failure {
    Failure::new("unknown_handle", format!("no handle {handle:?}"))
}

/// An error and its causes on one line.
fn chain(err: &(dyn StdError + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The driver's state: its client and the locks, observations and
/// elections it holds, by handle (one namespace, kept distinct by the
/// runner).
#[derive(Default)]
struct Driver {
    client: Option<AnyClient>,
    handles: HashMap<String, LockGuard>,
    observations: HashMap<String, Observation>,
    elections: HashMap<String, Election>,
}

type Fields = Map<String, Value>;

fn str_field<'a>(cmd: &'a Value, name: &str) -> Result<&'a str, Failure> {
    cmd.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| Failure::new("other", format!("the command needs a string {name:?}")))
}

fn u64_field(cmd: &Value, name: &str) -> Result<u64, Failure> {
    cmd.get(name).and_then(Value::as_u64).ok_or_else(|| {
        Failure::new(
            "other",
            format!("the command needs a non-negative integer {name:?}"),
        )
    })
}

fn millis(cmd: &Value, name: &str) -> Result<Duration, Failure> {
    u64_field(cmd, name).map(Duration::from_millis)
}

/// `lease_ms`, which may carry a fraction of a millisecond (DRIVER.md):
/// converted exactly for whole milliseconds, to the nanosecond otherwise.
fn lease(cmd: &Value) -> Result<Duration, Failure> {
    match cmd.get("lease_ms") {
        Some(value) if value.is_u64() => millis(cmd, "lease_ms"),
        Some(Value::Number(ms)) => ms
            .as_f64()
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0))
            .ok_or_else(|| Failure::new("other", "lease_ms must be a non-negative number")),
        _ => Err(Failure::new(
            "other",
            "the command needs a number \"lease_ms\"",
        )),
    }
}

/// `value`, absent or null being none (the empty value).
fn value_field(cmd: &Value) -> Result<&str, Failure> {
    match cmd.get("value") {
        None | Some(Value::Null) => Ok(""),
        Some(_) => str_field(cmd, "value"),
    }
}

/// A state as DRIVER.md's `state` object (`since` is not sent).
fn state_object(state: &LockState) -> Value {
    json!({
        "held": state.held,
        "token": state.token.to_string(),
        "value": state.value,
        "event": state.event.name(),
        "initial": state.initial,
        "coalesced": state.coalesced,
        "reason": state.reason.map(|reason| reason.name()),
    })
}

fn state_fields(state: &LockState) -> Fields {
    Fields::from_iter([("state".into(), state_object(state))])
}

fn timed_out() -> Fields {
    Fields::from_iter([("timeout".into(), Value::Bool(true))])
}

fn token_fields(token: u64) -> Fields {
    let mut fields = Fields::new();
    fields.insert("token".into(), Value::String(token.to_string()));
    fields
}

impl Driver {
    fn client(&self) -> Result<&AnyClient, Failure> {
        self.client
            .as_ref()
            .ok_or_else(|| Failure::new("other", "no client: send `open` first"))
    }

    fn guard(&self, cmd: &Value) -> Result<&LockGuard, Failure> {
        let handle = str_field(cmd, "handle")?;
        self.handles
            .get(handle)
            .ok_or_else(|| unknown_handle(handle))
    }

    async fn run(&mut self, cmd: &Value) -> Result<Fields, Failure> {
        let name = cmd.get("cmd").and_then(Value::as_str).unwrap_or_default();
        match name {
            "open" => self.open(cmd),
            "lock" => self.lock(cmd).await,
            "try_lock" => self.try_lock(cmd).await,
            "release" => self.release(cmd).await,
            "is_held" => {
                let held = self.guard(cmd)?.is_held();
                Ok(Fields::from_iter([("held".into(), Value::Bool(held))]))
            }
            "check" => {
                self.guard(cmd)?.check()?;
                Ok(Fields::new())
            }
            "token" => Ok(token_fields(self.guard(cmd)?.token())),
            "wait_lost" => self.wait_lost(cmd).await,
            "set_value" => {
                self.guard(cmd)?.set_value(str_field(cmd, "value")?).await?;
                Ok(Fields::new())
            }
            "observe" => self.observe(cmd).await,
            "next_state" => self.next_state(cmd).await,
            "unobserve" => {
                let handle = str_field(cmd, "handle")?;
                let observation = self
                    .observations
                    .remove(handle)
                    .ok_or_else(|| unknown_handle(handle))?;
                drop(observation); // writes the UNOBSERVE
                Ok(Fields::new())
            }
            "holder" => {
                let name = str_field(cmd, "name")?;
                let state = with_client!(self.client()?, client => {
                    client.holder(name).await.map_err(Failure::refused)?
                });
                Ok(state_fields(&state))
            }
            "elect" => self.elect(cmd),
            "next_election_event" => self.next_election_event(cmd).await,
            // The handle stays: the events queued before the resignation
            // (stopped_leading) can still be read; then it is forgotten.
            "resign" => {
                let handle = str_field(cmd, "handle")?;
                let election = self
                    .elections
                    .get_mut(handle)
                    .ok_or_else(|| unknown_handle(handle))?;
                election.resign().await;
                Ok(Fields::new())
            }
            "cycles" => self.cycles(cmd).await,
            "stats" => Ok(stats()),
            other => Err(Failure::new("other", format!("unknown command {other:?}"))),
        }
    }

    fn open(&mut self, cmd: &Value) -> Result<Fields, Failure> {
        let address = str_field(cmd, "address")?;
        let mut client = Client::new(address);
        if cmd.get("force_v1").and_then(Value::as_bool) == Some(true) {
            client = client.with_protocol(Protocol::V1);
        }
        self.client = Some(match cmd.get("tls").filter(|tls| !tls.is_null()) {
            None => AnyClient::Tcp(client),
            Some(tls) => {
                let mut builder = TlsConnector::builder().with_ca_file(str_field(tls, "ca")?);
                if let (Some(cert), Some(key)) = (
                    tls.get("cert").and_then(Value::as_str),
                    tls.get("key").and_then(Value::as_str),
                ) {
                    builder = builder.with_client_cert_files(cert, key);
                }
                let mut connector = builder.build()?;
                if let Some(name) = tls.get("server_name").and_then(Value::as_str) {
                    connector = connector.with_server_name(name)?;
                }
                AnyClient::Tls(client.with_connector(connector))
            }
        });
        Ok(Fields::new())
    }

    async fn lock(&mut self, cmd: &Value) -> Result<Fields, Failure> {
        let handle = str_field(cmd, "handle")?.to_owned();
        let name = str_field(cmd, "name")?;
        let lease = lease(cmd)?;
        let wait = match cmd.get("wait_ms") {
            None | Some(Value::Null) => None,
            Some(_) => Some(millis(cmd, "wait_ms")?),
        };
        let value = value_field(cmd)?;
        let acquiring = with_client!(self.client()?, client => match wait {
            None => client.acquire_with_value(name, lease, value).await.map(Some),
            Some(wait) => tokio::time::timeout(wait, client.acquire_with_value(name, lease, value))
                .await
                .map_or(Ok(None), |acquired| acquired.map(Some)),
        });
        let guard = acquiring?.ok_or_else(|| {
            Failure::new(
                "not_acquired",
                format!("lock {name:?} was not acquired within {wait:?}"),
            )
        })?;
        let fields = token_fields(guard.token());
        self.handles.insert(handle, guard);
        Ok(fields)
    }

    async fn try_lock(&mut self, cmd: &Value) -> Result<Fields, Failure> {
        let handle = str_field(cmd, "handle")?.to_owned();
        let name = str_field(cmd, "name")?;
        let lease = lease(cmd)?;
        let value = value_field(cmd)?;
        let guard = with_client!(self.client()?, client => {
            client.try_acquire_with_value(name, lease, value).await?
        });
        let mut fields = Fields::new();
        fields.insert("acquired".into(), Value::Bool(guard.is_some()));
        if let Some(guard) = guard {
            fields.extend(token_fields(guard.token()));
            self.handles.insert(handle, guard);
        }
        Ok(fields)
    }

    async fn release(&mut self, cmd: &Value) -> Result<Fields, Failure> {
        let handle = str_field(cmd, "handle")?;
        let guard = self
            .handles
            .remove(handle)
            .ok_or_else(|| Failure::new("unknown_handle", format!("no handle {handle:?}")))?;
        guard.release().await?;
        Ok(Fields::new())
    }

    async fn wait_lost(&self, cmd: &Value) -> Result<Fields, Failure> {
        let guard = self.guard(cmd)?;
        let timeout = millis(cmd, "timeout_ms")?;
        let mut fields = Fields::new();
        match tokio::time::timeout(timeout, guard.lost()).await {
            Ok(reason) => {
                fields.insert("lost".into(), Value::Bool(true));
                fields.insert("reason".into(), Value::from(reason.name()));
                let lost = LockLost::new(guard.name().clone(), reason);
                fields.insert("message".into(), Value::from(lost.to_string()));
            }
            Err(_) => {
                fields.insert("lost".into(), Value::Bool(false));
            }
        }
        Ok(fields)
    }

    async fn observe(&mut self, cmd: &Value) -> Result<Fields, Failure> {
        let handle = str_field(cmd, "handle")?.to_owned();
        let name = str_field(cmd, "name")?;
        let mut observation = with_client!(self.client()?, client => {
            client.observe(name).await.map_err(Failure::refused)?
        });
        let initial = observation.next().await.ok_or_else(|| {
            Failure::new("other", "the observation ended before its first state")
        })??;
        self.observations.insert(handle, observation);
        Ok(state_fields(&initial))
    }

    async fn next_state(&mut self, cmd: &Value) -> Result<Fields, Failure> {
        let handle = str_field(cmd, "handle")?;
        let timeout = millis(cmd, "timeout_ms")?;
        let observation = self
            .observations
            .get_mut(handle)
            .ok_or_else(|| unknown_handle(handle))?;
        match tokio::time::timeout(timeout, observation.next()).await {
            Err(_) => Ok(timed_out()),
            Ok(Some(Ok(state))) => Ok(state_fields(&state)),
            Ok(Some(Err(err))) => Err(err.into()),
            Ok(None) => Err(Failure::new(
                "other",
                format!("the observation {handle:?} has ended"),
            )),
        }
    }

    fn elect(&mut self, cmd: &Value) -> Result<Fields, Failure> {
        let handle = str_field(cmd, "handle")?.to_owned();
        let name = str_field(cmd, "name")?;
        let lease = lease(cmd)?;
        let value = value_field(cmd)?;
        let election = with_client!(self.client()?, client => client.elect(name, lease, value)?);
        self.elections.insert(handle, election);
        Ok(Fields::new())
    }

    async fn next_election_event(&mut self, cmd: &Value) -> Result<Fields, Failure> {
        let handle = str_field(cmd, "handle")?;
        let timeout = millis(cmd, "timeout_ms")?;
        let election = self
            .elections
            .get_mut(handle)
            .ok_or_else(|| unknown_handle(handle))?;
        let event = match tokio::time::timeout(timeout, election.next()).await {
            Err(_) => return Ok(timed_out()),
            Ok(None) => {
                self.elections.remove(handle);
                return Err(Failure::new(
                    "unknown_handle",
                    format!("the election {handle:?} has stopped; its handle is gone"),
                ));
            }
            Ok(Some(event)) => event?,
        };
        let event = match event {
            ElectionEvent::StartedLeading(term) => {
                json!({"kind": "started_leading", "token": term.token().to_string()})
            }
            ElectionEvent::StoppedLeading => json!({"kind": "stopped_leading"}),
            ElectionEvent::NewLeader(leader) => json!({
                "kind": "new_leader",
                "token": leader.token.to_string(),
                "value": leader.value,
            }),
            other => {
                return Err(Failure::new(
                    "other",
                    format!("an election event this driver does not know: {other:?}"),
                ));
            }
        };
        Ok(Fields::from_iter([("event".into(), event)]))
    }

    async fn cycles(&self, cmd: &Value) -> Result<Fields, Failure> {
        let name = str_field(cmd, "name")?;
        let lease = millis(cmd, "lease_ms")?;
        let count = u64_field(cmd, "count")?;
        let client = self.client()?;
        for _ in 0..count {
            let guard = with_client!(client, c => c.acquire(name, lease).await?);
            guard.release().await?;
        }
        Ok(Fields::from_iter([("count".into(), Value::from(count))]))
    }
}

/// What this process can tell about itself: descriptors and threads from
/// /proc, and the tasks alive on the runtime.
fn stats() -> Fields {
    let mut fields = Fields::new();
    let me = std::process::id();
    if let Ok(fds) = sys::open_descriptors(me) {
        fields.insert("fds".into(), Value::from(fds));
    }
    if let Ok(threads) = sys::thread_count(me) {
        fields.insert("threads".into(), Value::from(threads));
    }
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    fields.insert("tasks".into(), Value::from(tasks));
    fields
}

fn reply(id: &Value, result: Result<Fields, Failure>) -> Value {
    let mut object = Fields::new();
    object.insert("id".into(), id.clone());
    match result {
        Ok(fields) => {
            object.insert("ok".into(), Value::Bool(true));
            object.extend(fields);
        }
        Err(failure) => {
            object.insert("ok".into(), Value::Bool(false));
            object.insert(
                "error".into(),
                json!({
                    "kind": failure.kind,
                    "reason": failure.reason,
                    "message": failure.message,
                    "temporary": failure.temporary,
                }),
            );
        }
    }
    Value::Object(object)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    let mut driver = Driver::default();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let (id, exit, result) = match serde_json::from_str::<Value>(&line) {
            Ok(cmd) => {
                let id = cmd.get("id").cloned().unwrap_or(Value::Null);
                let exit = cmd.get("cmd").and_then(Value::as_str) == Some("exit");
                let result = if exit {
                    Ok(Fields::new())
                } else {
                    driver.run(&cmd).await
                };
                (id, exit, result)
            }
            Err(err) => (
                Value::Null,
                false,
                Err(Failure::new("other", format!("not a JSON command: {err}"))),
            ),
        };
        let mut text = reply(&id, result).to_string();
        text.push('\n');
        stdout.write_all(text.as_bytes()).await?;
        stdout.flush().await?;
        if exit {
            break;
        }
    }
    // Release what is still held: dropping a guard closes its connection.
    for (_, mut election) in driver.elections.drain() {
        election.resign().await;
    }
    driver.observations.clear();
    driver.handles.clear();
    Ok(())
}
