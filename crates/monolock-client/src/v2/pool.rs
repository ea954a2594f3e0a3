//! The sessions of one client, and what it learned of each address.
//!
//! A claim goes to a live session of its lease with room for it (the
//! first one found: claims gather on few sessions), else to a new session
//! on the first address that answers. At most [`MAX_SESSIONS`] sessions
//! are open at once. An address that answered OPEN with ERROR 0x10 speaks
//! version 1 only: the client remembers that for [`V1_MEMORY`], or until
//! connecting to it fails, and speaks version 1 to it meanwhile. An
//! address that answered HELLO with ERROR 0x13 lacks values and
//! observers: remembered the same way, and its sessions open without
//! HELLO meanwhile.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use monolock_proto::Lease;
use tokio::time::Instant;

use super::session::{ExtensionStatus, SessionHandle};

/// The most sessions a client keeps open at once. With the server's
/// default bound of 1,024 claims per session that is 65,536 claims.
pub(crate) const MAX_SESSIONS: usize = 64;

/// How long an address that answered ERROR 0x10 to an OPEN is spoken to in
/// version 1 before version 2 is tried again (an upgraded server); and an
/// address that answered HELLO with ERROR 0x13, without the extension.
pub(crate) const V1_MEMORY: Duration = Duration::from_secs(300);

/// The sessions of one client (shared by its clones).
#[derive(Debug, Default)]
pub(crate) struct Pool {
    /// A std mutex: held for a scan of a short list, never across an
    /// await, and never on the heartbeat path (the sessions' tasks do not
    /// touch it).
    state: Mutex<State>,
    /// Held while a session is opened, so that concurrent first claims
    /// share one session instead of each opening their own.
    pub(crate) opening: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct State {
    sessions: Vec<Arc<SessionHandle>>,
    v1_only: HashMap<Arc<str>, Instant>,
    /// Addresses whose server lacks the extension.
    plain_only: HashMap<Arc<str>, Instant>,
}

/// Whether `addr` is in `memory` and not yet forgotten.
fn remembered(memory: &mut HashMap<Arc<str>, Instant>, addr: &str) -> bool {
    match memory.get(addr) {
        Some(until) if Instant::now() < *until => true,
        Some(_) => {
            memory.remove(addr);
            false
        }
        None => false,
    }
}

impl Pool {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A live session of `lease` with room for one more claim, and the
    /// claim's id; with `extension`, only a session that has (or may
    /// have) values and observers.
    pub(crate) fn pick(&self, lease: Lease, extension: bool) -> Option<(Arc<SessionHandle>, u32)> {
        let mut state = self.state();
        state.sessions.retain(|session| session.is_open());
        state
            .sessions
            .iter()
            .filter(|session| session.lease() == lease && session.is_usable())
            .filter(|session| !extension || session.extension() != ExtensionStatus::Absent)
            .find_map(|session| Some((session.clone(), session.take_slot()?)))
    }

    /// A live session of any lease that has (or may have) values and
    /// observers, and with `watch`, a watch id on it.
    pub(crate) fn pick_extended(&self, watch: bool) -> Option<(Arc<SessionHandle>, Option<u32>)> {
        let mut state = self.state();
        state.sessions.retain(|session| session.is_open());
        state
            .sessions
            .iter()
            .filter(|session| session.is_usable() && session.extension() != ExtensionStatus::Absent)
            .find_map(|session| {
                if !watch {
                    return Some((session.clone(), None));
                }
                Some((session.clone(), Some(session.take_watch_slot()?)))
            })
    }

    /// Sessions open now.
    pub(crate) fn open_sessions(&self) -> usize {
        let mut state = self.state();
        state.sessions.retain(|session| session.is_open());
        state.sessions.len()
    }

    /// Claims carried by the open sessions, per session (for figures).
    pub(crate) fn loads(&self) -> Vec<u32> {
        let state = self.state();
        state
            .sessions
            .iter()
            .filter(|session| session.is_open())
            .map(|session| session.load())
            .collect()
    }

    /// Keeps `session` for the claims that follow.
    pub(crate) fn insert(&self, session: Arc<SessionHandle>) {
        self.state().sessions.push(session);
    }

    /// Whether `addr` is known to speak version 1 only.
    pub(crate) fn is_v1_only(&self, addr: &str) -> bool {
        remembered(&mut self.state().v1_only, addr)
    }

    /// Whether `addr` is known to lack values and observers.
    pub(crate) fn is_plain_only(&self, addr: &str) -> bool {
        remembered(&mut self.state().plain_only, addr)
    }

    /// `addr` answered HELLO with ERROR 0x13.
    pub(crate) fn remember_plain(&self, addr: Arc<str>) {
        let until = Instant::now() + V1_MEMORY;
        self.state().plain_only.insert(addr, until);
    }

    /// `addr` answered OPEN with ERROR 0x10.
    pub(crate) fn remember_v1_only(&self, addr: Arc<str>) {
        let until = Instant::now() + V1_MEMORY;
        self.state().v1_only.insert(addr, until);
    }

    /// Connecting to `addr` failed: try version 2 again when it answers.
    pub(crate) fn forget(&self, addr: &str) {
        let mut state = self.state();
        state.v1_only.remove(addr);
        state.plain_only.remove(addr);
    }
}
