//! The server host: the real `monolock-server` (table, sessions, lease
//! wheel) behind a simulated listener, with its admin side driven by the
//! simulation and its events fed to the checker.
//!
//! A restart is the host's software starting again: a new process with a
//! new monotonic clock and an empty table. Tokens follow today's rule
//! (`max(previous + 1, unix_seconds << 20)`, the wall clock being the
//! simulation's); whatever must survive a restart (a token floor file, for
//! instance) belongs in [`Durable`], which outlives every process.

use std::{net::Ipv4Addr, sync::Arc};

use monolock_server::{
    Event, Observer, Server, ServerConfig, ServerHandle, SessionInfo, WallClock,
};
use tokio::{sync::mpsc, time::Instant};

use crate::{
    checker::Grant,
    lab::{Admin, SharedLab},
    stream::SimStream,
};

/// The server's host name in the simulation.
pub(crate) const SERVER_HOST: &str = "server";
/// Its protocol port.
pub(crate) const PORT: u16 = 7070;

/// What survives a server restart: the disk. Empty under today's token
/// rules, which need only the wall clock; a token floor file would live
/// here and be read by every process at start.
#[derive(Clone, Default)]
pub(crate) struct Durable;

/// The simulation's wall clock (its epoch plus simulated time).
struct SimWallClock;

impl WallClock for SimWallClock {
    fn unix_seconds(&self) -> u64 {
        turmoil::since_epoch().map_or(0, |since| since.as_secs())
    }
}

/// Feeds the server's ownership events to the checker and the trace.
struct SimObserver {
    lab: SharedLab,
}

impl Observer for SimObserver {
    fn observe(&self, event: &Event<'_>) {
        let at = turmoil::sim_elapsed().unwrap_or_default();
        match event {
            Event::Granted { session, token, .. } => {
                let peer = session.remote_addr;
                let lease = session.lease.as_duration();
                let silent = self
                    .lab
                    .last_heard(peer)
                    .is_some_and(|heard| heard + lease <= Instant::now());
                let mut lab = self.lab.lock();
                lab.push_trace(
                    at,
                    format_args!("server grants {} to {peer} token {token}", session.lock),
                );
                lab.checker.granted(
                    at,
                    Grant {
                        lock: session.lock.as_str().to_owned(),
                        peer,
                        token: *token,
                        lease,
                        silent,
                        slot: slot_of(session),
                    },
                );
            }
            Event::Released {
                session,
                token,
                reason,
                ..
            } => {
                let mut lab = self.lab.lock();
                lab.push_trace(
                    at,
                    format_args!(
                        "server releases {} token {token} ({})",
                        session.lock,
                        reason.as_str()
                    ),
                );
                if reason.as_str() == "io_timeout" {
                    lab.count_v2("held lock released after an io-timeout ending");
                }
                lab.checker
                    .released(session.lock.as_str(), session.remote_addr, *token);
                lab.checker
                    .released_for(at, *token, told_as(reason.as_str()));
            }
            Event::ForceRelease { token, .. } => self.lab.lock().checker.force_released(at, *token),
            Event::WaiterJoined(session) => {
                let mut lab = self.lab.lock();
                lab.push_trace(
                    at,
                    format_args!("server queues {} for {}", session.remote_addr, session.lock),
                );
                lab.checker.joined(
                    session.lock.as_str(),
                    session.remote_addr,
                    slot_of(session),
                    session.lease.as_duration(),
                );
            }
            Event::WaiterLeft(session) | Event::KickWaiter(session) => {
                let mut lab = self.lab.lock();
                lab.push_trace(
                    at,
                    format_args!(
                        "server unqueues {} from {}",
                        session.remote_addr, session.lock
                    ),
                );
                lab.checker
                    .left(session.lock.as_str(), session.remote_addr, slot_of(session));
            }
            _ => {}
        }
    }
}

/// How watches are told of a release for the server's `reason`
/// (docs/protocol.md, "The state": `reason`).
fn told_as(reason: &str) -> &'static str {
    match reason {
        "graceful" => "released",
        "expired" => "expired",
        "force" => "forced",
        _ => "ended_by_server",
    }
}

/// Which claim an event is about: the server keeps one `SessionInfo` per
/// claim (a version 1 session is one claim) from its ACQUIRE to its end,
/// so its address tells apart two claims of one connection on one lock.
fn slot_of(session: &SessionInfo) -> usize {
    std::ptr::from_ref(session) as usize
}

/// One server process, from start to crash; `io_timeout` replaces the
/// default one.
pub(crate) async fn process(
    lab: SharedLab,
    _durable: Durable,
    io_timeout: Option<std::time::Duration>,
) -> turmoil::Result {
    let (admin_tx, mut admin_rx) = mpsc::unbounded_channel();
    let incarnation = lab.server_started(admin_tx);
    lab.trace(format_args!("server process {incarnation} starts"));
    let mut config = ServerConfig::default()
        .with_wall_clock(Arc::new(SimWallClock))
        .with_observer(Arc::new(SimObserver { lab: lab.clone() }));
    if let Some(io_timeout) = io_timeout {
        config = config.with_io_timeout(io_timeout);
    }
    let handle = Server::new(config).handle();
    let listener = turmoil::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT)).await?;
    loop {
        tokio::select! {
            biased;
            Some(order) = admin_rx.recv() => admin(&handle, &lab, order),
            accepted = listener.accept() => {
                let (stream, peer) = accepted?;
                let stream = SimStream::server(stream, peer, lab.clone());
                let handle = handle.clone();
                let session = tokio::task::spawn_local(async move {
                    handle.serve_stream(stream, peer, "").await;
                });
                // A panic in a session task would otherwise pass unseen.
                let lab = lab.clone();
                tokio::task::spawn_local(async move {
                    if let Err(err) = session.await
                        && err.is_panic()
                    {
                        let at = turmoil::sim_elapsed().unwrap_or_default();
                        let what = format!("the server's session for {peer} panicked");
                        lab.lock().fail(at, what);
                    }
                });
            }
        }
    }
}

/// Carries out an admin order, as the admin API would.
fn admin(handle: &ServerHandle, lab: &SharedLab, order: Admin) {
    match order {
        Admin::ForceRelease(lock) => force_release(handle, lab, &lock),
        Admin::ForceReleaseAtLeaseEnd(lock) => {
            let Some(first) = handle
                .lock(&lock)
                .and_then(|l| l.waiters.into_iter().next())
            else {
                return;
            };
            let Some(heard) = lab.last_heard(first.remote_addr) else {
                return;
            };
            let at = heard + first.lease.as_duration();
            let (handle, lab) = (handle.clone(), lab.clone());
            tokio::task::spawn_local(async move {
                tokio::time::sleep_until(at).await;
                force_release(&handle, &lab, &lock);
            });
        }
        Admin::Kick(lock, position) => {
            let Some(waiter) = handle
                .lock(&lock)
                .and_then(|l| l.waiters.into_iter().nth(position))
            else {
                return;
            };
            let kicked = handle.kick_waiter(&lock, waiter.remote_addr);
            lab.trace(format_args!(
                "admin kicks {} from {lock}: {}",
                waiter.remote_addr,
                kicked.is_ok()
            ));
        }
    }
}

fn force_release(handle: &ServerHandle, lab: &SharedLab, lock: &str) {
    let released = handle.force_release(lock);
    lab.trace(format_args!(
        "admin force-releases {lock}: token {:?}",
        released.map(|h| h.token)
    ));
}

/// The address clients dial.
pub(crate) fn address() -> String {
    format!("{SERVER_HOST}:{PORT}")
}
