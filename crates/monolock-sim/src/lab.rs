//! What the hosts of one simulation share with the loop that drives it:
//! the trace, the checker, the connections (for fault injection) and the
//! server's admin channel.
//!
//! Every host runs on the simulation's one thread, so the mutex is never
//! contended; it is held only for a few field updates, never across a call
//! into the server or the client (the server's observer takes it too).

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use tokio::{sync::mpsc, time::Instant};

use crate::{checker::Checker, conn::Conn};

/// An order for the server's admin side, run inside the server host.
#[derive(Clone, Debug)]
pub(crate) enum Admin {
    /// Force-release this lock now.
    ForceRelease(String),
    /// Force-release this lock at the instant its first waiter's lease runs
    /// out (the boundary where promotion must skip that waiter).
    ForceReleaseAtLeaseEnd(String),
    /// Kick the waiter at this position of this lock's queue.
    Kick(String, usize),
}

pub(crate) struct Lab {
    trace: Vec<String>,
    pub(crate) checker: Checker,
    conns: BTreeMap<SocketAddr, Conn>,
    /// Server end: when bytes last arrived from each client address, in the
    /// current server incarnation's clock.
    last_heard: BTreeMap<SocketAddr, Instant>,
    /// The same instants in simulated time, for the nemesis.
    heard_at: BTreeMap<SocketAddr, Duration>,
    admin: Option<mpsc::UnboundedSender<Admin>>,
    incarnation: u32,
    /// Version 2 and stalled-reader events of the run, by name (each must
    /// happen in CI).
    v2_events: BTreeMap<&'static str, u64>,
    /// Version 2 hosts asked by the nemesis to write one more ACQUIRE now.
    pokes: BTreeSet<usize>,
    /// The send window of every connection's server end (`stream.rs`).
    window: Option<usize>,
}

/// The lab, shared.
#[derive(Clone)]
pub(crate) struct SharedLab(Arc<Mutex<Lab>>);

impl SharedLab {
    pub(crate) fn new(clients: usize) -> Self {
        Self(Arc::new(Mutex::new(Lab {
            trace: Vec::new(),
            checker: Checker::new(clients),
            conns: BTreeMap::new(),
            last_heard: BTreeMap::new(),
            heard_at: BTreeMap::new(),
            admin: None,
            incarnation: 0,
            v2_events: BTreeMap::new(),
            pokes: BTreeSet::new(),
            window: None,
        })))
    }

    /// Bounds what the server may write ahead of each client's reads, on
    /// every connection from now on.
    pub(crate) fn set_window(&self, window: Option<usize>) {
        self.lock().window = window;
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Lab> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends a line to the trace, stamped with simulated time.
    pub(crate) fn trace(&self, line: std::fmt::Arguments<'_>) {
        let at = turmoil::sim_elapsed().unwrap_or_default();
        self.lock().push_trace(at, line);
    }

    /// The connection whose client end is `client_addr` (made on first use).
    pub(crate) fn conn(&self, client_addr: SocketAddr) -> Conn {
        let mut lab = self.lock();
        let window = lab.window;
        lab.conns
            .entry(client_addr)
            .or_insert_with(|| {
                let conn = Conn::default();
                conn.set_window(window);
                conn
            })
            .clone()
    }

    /// The open connection whose client end is `client_addr`, if any.
    pub(crate) fn open_conn(&self, client_addr: SocketAddr) -> Option<Conn> {
        self.lock().conns.get(&client_addr).cloned()
    }

    pub(crate) fn forget_conn(&self, client_addr: SocketAddr) {
        self.lock().conns.remove(&client_addr);
    }

    /// Open connections, by client address (deterministic order).
    pub(crate) fn conns(&self) -> Vec<(SocketAddr, Conn)> {
        let lab = self.lock();
        lab.conns
            .iter()
            .map(|(addr, conn)| (*addr, conn.clone()))
            .collect()
    }

    pub(crate) fn heard_from(&self, peer: SocketAddr) {
        let at = turmoil::sim_elapsed().unwrap_or_default();
        let mut lab = self.lock();
        lab.last_heard.insert(peer, Instant::now());
        lab.heard_at.insert(peer, at);
    }

    /// When bytes from `peer` last reached the server, in simulated time.
    pub(crate) fn heard_at(&self, peer: SocketAddr) -> Option<Duration> {
        self.lock().heard_at.get(&peer).copied()
    }

    pub(crate) fn last_heard(&self, peer: SocketAddr) -> Option<Instant> {
        self.lock().last_heard.get(&peer).copied()
    }

    /// A server process starts: a new clock, no sessions. Returns its number.
    pub(crate) fn server_started(&self, admin: mpsc::UnboundedSender<Admin>) -> u32 {
        let mut lab = self.lock();
        lab.incarnation += 1;
        lab.last_heard.clear();
        lab.heard_at.clear();
        lab.admin = Some(admin);
        let incarnation = lab.incarnation;
        lab.checker.server_started(incarnation);
        incarnation
    }

    /// Sends an admin order to the running server, if there is one.
    pub(crate) fn admin(&self, order: Admin) -> bool {
        self.lock()
            .admin
            .as_ref()
            .is_some_and(|admin| admin.send(order).is_ok())
    }
}

impl Lab {
    pub(crate) fn push_trace(&mut self, at: Duration, line: std::fmt::Arguments<'_>) {
        let mut text = String::new();
        let _ = write!(text, "{:>10.3} {line}", at.as_secs_f64());
        self.trace.push(text);
    }

    /// Records a broken invariant found outside the checker's own checks.
    pub(crate) fn fail(&mut self, at: Duration, what: String) {
        self.checker.fail(at, what);
    }

    pub(crate) fn take_trace(&mut self) -> Vec<String> {
        std::mem::take(&mut self.trace)
    }

    /// Counts one version 2 event.
    pub(crate) fn count_v2(&mut self, event: &'static str) {
        *self.v2_events.entry(event).or_default() += 1;
    }

    pub(crate) fn v2_events(&self) -> BTreeMap<&'static str, u64> {
        self.v2_events.clone()
    }

    /// Asks version 2 host `client` to place one more claim now.
    pub(crate) fn poke(&mut self, client: usize) {
        self.pokes.insert(client);
    }

    /// Whether the nemesis asked `client` to place one more claim.
    pub(crate) fn take_poke(&mut self, client: usize) -> bool {
        self.pokes.remove(&client)
    }
}
