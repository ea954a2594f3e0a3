//! The stage of the scenarios that need no server binary: a server in this
//! process (so its grants can be observed as they happen) and a [`Lab`] of
//! worker processes around it.

use std::{net::SocketAddr, sync::Arc, thread, time::Duration};

use monolock_server::{Server, ServerConfig, ServerHandle};

use super::{Env, Lab, Report, error::Result};
use crate::{
    audit::{EventRecorder, alternation_problems},
    checker::WaitTimeout,
};

/// A server running in this process on a runtime of its own (so that the
/// harness's own load does not delay it), with an event recorder.
pub struct InProcessServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its control handle.
    pub handle: ServerHandle,
    /// Grants and releases, in order.
    pub events: EventRecorder,
    thread: Option<thread::JoinHandle<()>>,
}

impl InProcessServer {
    /// Starts a server with this io-timeout on a 2-thread runtime.
    ///
    /// # Errors
    /// Runtime or bind errors.
    pub fn start(io_timeout: Duration) -> std::io::Result<Self> {
        let events = EventRecorder::default();
        let config = ServerConfig::default()
            .with_io_timeout(io_timeout)
            .with_observer(Arc::new(events.clone()));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        // Bound here with std, so this works from inside another runtime.
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let server = Server::new(config);
        let handle = server.handle();
        let thread = thread::Builder::new()
            .name("monolock-server".into())
            .spawn(move || {
                runtime.block_on(async move {
                    if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
                        let _ = server.run(listener).await;
                    }
                });
            })?;
        Ok(Self {
            addr,
            handle,
            events,
            thread: Some(thread),
        })
    }

    /// Waits until `name` has `waiters` waiters, at most `limit`. The table
    /// has no change notification, so this polls every 2 ms, bounded.
    ///
    /// # Errors
    /// [`WaitTimeout`].
    pub async fn wait_waiters(
        &self,
        name: &str,
        waiters: usize,
        limit: Duration,
    ) -> Result<(), WaitTimeout> {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if self
                .handle
                .lock(name)
                .is_some_and(|l| l.waiters.len() >= waiters)
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Err(WaitTimeout(
            limit,
            format!("{waiters} waiter(s) on {name:?}"),
        ))
    }

    /// When the server granted `token` for `lock` (CLOCK_MONOTONIC, stamped
    /// inside the lock table), if it did.
    pub fn granted_at(&self, lock: &str, token: u64) -> Option<u64> {
        self.events.events().iter().find_map(|e| {
            (e.kind == crate::audit::EventKind::Granted && e.lock == lock && e.token == token)
                .then_some(e.at_ns)
        })
    }

    /// Checks the grant/release alternation of everything it recorded.
    pub fn audit_problems(&self) -> Vec<String> {
        alternation_problems(&self.events.events())
    }
}

impl Drop for InProcessServer {
    fn drop(&mut self) {
        self.handle.shutdown();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// An in-process server and a lab: what crash, pause and partition
/// scenarios share from their first line to their last.
pub struct InProcessStage {
    /// The server.
    pub server: InProcessServer,
    /// The workers and the checker.
    pub lab: Lab,
}

impl InProcessStage {
    /// Starts the server (with `io_timeout`) and the lab, and records the
    /// scenario's `lease` in `report`.
    ///
    /// # Errors
    /// The server or the checker could not start.
    pub async fn open(
        env: &Env,
        lease: Duration,
        io_timeout: Duration,
        report: &mut Report,
    ) -> Result<Self> {
        report.lease_ms = lease.as_millis() as u64;
        let server = InProcessServer::start(io_timeout)
            .map_err(super::ScenarioError::io("starting the in-process server"))?;
        let lab = Lab::new(env)
            .await
            .map_err(super::ScenarioError::io("starting the checker"))?;
        Ok(Self { server, lab })
    }

    /// Starts a worker on `lock` against the server, directly.
    ///
    /// # Errors
    /// The spawn error.
    pub fn spawn(&mut self, lock: &str, lease: Duration, pause_once: bool) -> Result<String> {
        self.lab
            .spawn(self.server.addr, lock, lease, Duration::ZERO, pause_once)
    }

    /// Ends the scenario whatever `outcome` was: stops the workers, runs
    /// the lab's checks and the server's audit check into `report`, and
    /// returns `outcome`.
    pub async fn finish(mut self, report: &mut Report, outcome: Result<()>) -> Result<()> {
        self.lab
            .finish(report, |_, _| "in-process".to_owned())
            .await;
        for p in self.server.audit_problems() {
            report.problem(format!("audit: {p}"));
        }
        outcome
    }
}
