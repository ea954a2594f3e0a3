//! The checker service: a loopback TCP endpoint in the test process that
//! workers report to, and the fenced resource they write to.
//!
//! Why a TCP service rather than a shared file with `flock`: the resource
//! must decide each write atomically and in one order for every process,
//! and the harness must see events as they happen (to time faults, e.g.
//! resume a paused worker only after its successor has written). One task
//! per worker connection, one mutex around the resource and the journal,
//! and a watch channel that wakes anyone waiting for an event.

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinSet,
    time::Instant,
};

use crate::{
    belief::Belief,
    clock::mono_ns,
    messages::{WorkerMsg, WriteReply},
    resource::{FencedResource, ResourceStats, Write},
    task::AbortOnDrop,
};

/// One message as the checker received it.
#[derive(Clone, Debug)]
pub struct Record {
    /// The worker that sent it.
    pub worker: String,
    /// CLOCK_MONOTONIC when it arrived.
    pub at_ns: u64,
    /// The message.
    pub msg: WorkerMsg,
    /// For writes: the resource's decision.
    pub accepted: Option<bool>,
}

#[derive(Default)]
struct State {
    journal: Vec<Record>,
    resource: FencedResource,
    /// Beliefs closed by the harness (e.g. the worker was SIGKILLed):
    /// (worker, token) -> (until_ns, how).
    closed: HashMap<(String, u64), (u64, String)>,
    /// Workers whose connection has ended (everything they sent is in).
    disconnected: HashSet<String>,
}

struct Inner {
    state: Mutex<State>,
    /// Bumped after every change to the journal.
    changed: watch::Sender<u64>,
}

impl Inner {
    // A std mutex: held only for short, non-async sections.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A waiting call ran out of time.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {0:?} waiting for {1}")]
pub struct WaitTimeout(pub Duration, pub String);

/// The running checker. Dropping it closes every worker connection (the
/// workers then release and exit).
pub struct Checker {
    addr: SocketAddr,
    inner: Arc<Inner>,
    _accept: AbortOnDrop<()>,
}

impl Checker {
    /// Binds `127.0.0.1:0` and starts serving on the current runtime.
    ///
    /// # Errors
    /// The bind error.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST.into()).await
    }

    /// Binds a free port on `ip` (for workers in another network namespace)
    /// and starts serving on the current runtime.
    ///
    /// # Errors
    /// The bind error.
    pub async fn start_on(ip: std::net::IpAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind((ip, 0)).await?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            state: Mutex::new(State::default()),
            changed: watch::channel(0).0,
        });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&inner)));
        Ok(Self {
            addr,
            inner,
            _accept: AbortOnDrop(accept),
        })
    }

    /// Where workers report.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A copy of the journal.
    pub fn records(&self) -> Vec<Record> {
        self.inner.lock().journal.clone()
    }

    /// Accepted and rejected counts of the resource.
    pub fn resource_stats(&self) -> ResourceStats {
        self.inner.lock().resource.stats()
    }

    /// Violations of the resource's own invariant (none expected).
    pub fn resource_problems(&self) -> Vec<String> {
        self.inner.lock().resource.check_log()
    }

    /// Ends a belief the worker can no longer report (it was killed):
    /// every open belief of `worker` ends at `until_ns`.
    pub fn close_beliefs_of(&self, worker: &str, until_ns: u64, how: &str) {
        let mut state = self.inner.lock();
        let open: Vec<u64> = open_tokens(&state.journal, worker);
        for token in open {
            state
                .closed
                .entry((worker.to_owned(), token))
                .or_insert((until_ns, how.to_owned()));
        }
    }

    /// Waits until `find` returns `Some` for the journal, at most `limit`.
    ///
    /// # Errors
    /// [`WaitTimeout`] naming `what`.
    pub async fn wait_for<T>(
        &self,
        limit: Duration,
        what: &str,
        mut find: impl FnMut(&[Record]) -> Option<T>,
    ) -> Result<T, WaitTimeout> {
        let deadline = Instant::now() + limit;
        let mut changed = self.inner.changed.subscribe();
        loop {
            if let Some(found) = find(&self.inner.lock().journal) {
                return Ok(found);
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                _ => return Err(WaitTimeout(limit, what.to_owned())),
            }
        }
    }

    /// Waits until `worker`'s connection has ended, so that everything it
    /// sent is in the journal (a process that exited may still have lines
    /// in flight).
    ///
    /// # Errors
    /// [`WaitTimeout`].
    pub async fn wait_disconnected(
        &self,
        worker: &str,
        limit: Duration,
    ) -> Result<(), WaitTimeout> {
        let deadline = Instant::now() + limit;
        let mut changed = self.inner.changed.subscribe();
        loop {
            if self.inner.lock().disconnected.contains(worker) {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                _ => return Err(WaitTimeout(limit, format!("{worker} to hang up"))),
            }
        }
    }

    /// Builds the belief intervals. `server_of(lock, token)` labels the
    /// server that granted each token. Beliefs neither reported lost nor
    /// closed by the harness are returned separately (still open).
    pub fn beliefs(&self, server_of: impl Fn(&str, u64) -> String) -> (Vec<Belief>, Vec<Belief>) {
        let state = self.inner.lock();
        let mut done = Vec::new();
        let mut open = Vec::new();
        for r in &state.journal {
            let WorkerMsg::Held {
                lock,
                token,
                from_ns,
            } = &r.msg
            else {
                continue;
            };
            let end = state.journal.iter().find_map(|l| match &l.msg {
                WorkerMsg::Lost {
                    token: t,
                    until_ns,
                    reason,
                    ..
                } if l.worker == r.worker && t == token => Some((*until_ns, reason.clone())),
                _ => None,
            });
            let end = end.or_else(|| state.closed.get(&(r.worker.clone(), *token)).cloned());
            let mut belief = Belief {
                lock: lock.clone(),
                worker: r.worker.clone(),
                token: *token,
                server: server_of(lock, *token),
                from_ns: *from_ns,
                until_ns: u64::MAX,
                end: String::new(),
            };
            match end {
                Some((until_ns, how)) => {
                    belief.until_ns = until_ns;
                    belief.end = how;
                    done.push(belief);
                }
                None => open.push(belief),
            }
        }
        (done, open)
    }
}

/// Tokens `worker` reported holding and not yet losing, oldest first.
fn open_tokens(journal: &[Record], worker: &str) -> Vec<u64> {
    let mut open = Vec::new();
    for r in journal.iter().filter(|r| r.worker == worker) {
        match &r.msg {
            WorkerMsg::Held { token, .. } => open.push(*token),
            WorkerMsg::Lost { token, .. } => open.retain(|t| t != token),
            _ => {}
        }
    }
    open
}

async fn accept_loop(listener: TcpListener, inner: Arc<Inner>) {
    // Owned here: aborting this task aborts every connection task.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    connections.spawn(serve_worker(stream, Arc::clone(&inner)));
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_worker(stream: TcpStream, inner: Arc<Inner>) {
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let mut worker = String::from("?");
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(msg) = serde_json::from_str::<WorkerMsg>(&line) else {
            continue;
        };
        if let WorkerMsg::Hello { worker: name, .. } = &msg {
            worker.clone_from(name);
        }
        let accepted = {
            // The decision and its record go in together, so the journal
            // shows writes in the order the resource decided them.
            let mut state = inner.lock();
            let accepted = match &msg {
                WorkerMsg::Write {
                    lock,
                    token,
                    seq,
                    sent_ns,
                } => Some(state.resource.write(
                    &Write {
                        lock,
                        worker: &worker,
                        token: *token,
                        seq: *seq,
                        sent_ns: *sent_ns,
                    },
                    mono_ns(),
                )),
                _ => None,
            };
            state.journal.push(Record {
                worker: worker.clone(),
                at_ns: mono_ns(),
                msg,
                accepted,
            });
            accepted
        };
        inner.changed.send_modify(|n| *n += 1);
        if let Some(accepted) = accepted {
            let mut reply = serde_json::to_string(&WriteReply { accepted }).unwrap_or_default();
            reply.push('\n');
            if write.write_all(reply.as_bytes()).await.is_err() {
                break;
            }
        }
    }
    inner.lock().disconnected.insert(worker);
    inner.changed.send_modify(|n| *n += 1);
}
