//! The invariants, checked as the simulation runs.
//!
//! Beliefs come from the clients: every millisecond each client host reads
//! `is_held()` on the guard it holds (if any) and reports it with the
//! simulated instant. Once every client has reported an instant, that
//! instant is checked: among the holders of one lock whose tokens one and
//! the same server process issued, at most one may believe, except for the
//! documented cases (the holder of a force-released lock believes until the
//! ERROR arrives; the holder of a connection reset on the server's end
//! believes until its own end sees the reset).
//!
//! Grants come from the server's observer, in the order they took effect:
//! tokens strictly increase across every grant of every server process; a
//! lock is granted only when it has no holder; a waiter is granted only from
//! the head of its queue (FIFO among the waiters that stayed); and a session
//! is never granted once it has been silent for its whole lease.
//!
//! A client whose reader stalls while its writer goes on (`stalled.rs`)
//! tells the checker the deadline it counts on: its last confirmed send
//! plus 0.8 x lease. No other claim of the server process that granted it
//! may be granted that lock before that instant, however the server ended
//! the connection meanwhile (docs/protocol.md, "How a claim ends": a claim
//! the server ends on its own is handed on at its last frame plus lease).
//!
//! Version 2 adds two rules of docs/protocol.md that a client sees: a
//! RELEASED means released (when a client reads it, the server no longer
//! holds the claim's token), and claims die with
//! their session (no grant to a connection once the server has read its
//! end).
//!
//! Observers (`observers.rs`) add the rules of watches: per observation,
//! tokens never go back and no state is told before the server made it;
//! once the faults stop and the table is empty, every observer's last
//! state is the table's; and an observation never ends because the server
//! broke the protocol (the shipped client ends a session whose STATE goes
//! back).

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    net::SocketAddr,
    time::Duration,
};

use crate::observers::{ClaimId, Observers, Seen};

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Simulated time since the start.
    pub at: Duration,
    /// What broke, with the clients and tokens involved.
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at {:.3} s: {}", self.at.as_secs_f64(), self.what)
    }
}

/// A grant as the server made it.
#[derive(Clone, Debug)]
pub(crate) struct Grant {
    pub(crate) lock: String,
    pub(crate) peer: SocketAddr,
    pub(crate) token: u64,
    pub(crate) lease: Duration,
    /// Whether the session had been silent for its whole lease.
    pub(crate) silent: bool,
    /// Which claim of the connection (see [`Checker::joined`]).
    pub(crate) slot: usize,
}

struct Belief {
    client: usize,
    /// The claim id, for a version 2 session.
    claim: Option<u32>,
    lock: String,
    token: u64,
}

impl std::fmt::Display for Belief {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}", self.client)?;
        if let Some(claim) = self.claim {
            write!(f, " claim {claim}")?;
        }
        write!(f, " (token {})", self.token)
    }
}

/// Counts for the report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    /// Grants made by the server (all processes).
    pub grants: u64,
    /// Instants checked for exclusion.
    pub instants: u64,
    /// Instants at which two clients believed in one lock, all excused.
    pub excused_overlaps: u64,
    /// Server processes started.
    pub server_processes: u32,
    /// States observers read.
    pub states_read: u64,
    /// Of which flagged coalesced.
    pub coalesced_read: u64,
    /// Observers' last states compared with the lock table once the run
    /// was quiet.
    pub final_views: u64,
}

pub(crate) struct Checker {
    reported: Vec<Duration>,
    beliefs: BTreeMap<Duration, Vec<Belief>>,
    /// Token -> the server process that issued it.
    issued_by: BTreeMap<u64, u32>,
    last_token: u64,
    excused: BTreeSet<u64>,
    incarnation: u32,
    holders: BTreeMap<String, u64>,
    /// (client address, token) -> the lock and lease, for every grant of
    /// the current process still held (a version 2 session holds several).
    held_by: BTreeMap<(SocketAddr, u64), (String, Duration)>,
    /// Waiters by lock: the client address, the claim's slot (a version 2
    /// session may queue two claims on one lock), the lease.
    queues: BTreeMap<String, VecDeque<(SocketAddr, usize, Duration)>>,
    /// Connections whose end (EOF or reset) the current server process
    /// has read: none of their claims may be granted any more.
    ended: BTreeSet<SocketAddr>,
    /// Clients whose reader stalled with a lock held, by client: the lock,
    /// its token and the instant until which the client counts on it.
    counting: BTreeMap<usize, (String, u64, Duration)>,
    violation: Option<Violation>,
    tally: Tally,
    /// Token -> the lock it was granted for.
    lock_of: BTreeMap<u64, String>,
    /// The last token the current server process granted for each lock.
    last_granted: BTreeMap<String, u64>,
    /// The observer rules.
    observers: Observers,
    /// Observer hosts still running.
    observing: BTreeSet<usize>,
    /// Since when every client has finished and the table has been empty.
    quiet_since: Option<Duration>,
}

impl Checker {
    pub(crate) fn new(clients: usize) -> Self {
        Self {
            reported: vec![Duration::ZERO; clients],
            beliefs: BTreeMap::new(),
            issued_by: BTreeMap::new(),
            last_token: 0,
            excused: BTreeSet::new(),
            incarnation: 0,
            holders: BTreeMap::new(),
            held_by: BTreeMap::new(),
            queues: BTreeMap::new(),
            ended: BTreeSet::new(),
            counting: BTreeMap::new(),
            violation: None,
            tally: Tally::default(),
            lock_of: BTreeMap::new(),
            last_granted: BTreeMap::new(),
            observers: Observers::default(),
            observing: BTreeSet::new(),
            quiet_since: None,
        }
    }

    pub(crate) fn tally(&self) -> Tally {
        self.tally
    }

    pub(crate) fn violation(&self) -> Option<&Violation> {
        self.violation.as_ref()
    }

    pub(crate) fn fail(&mut self, at: Duration, what: String) {
        if self.violation.is_none() {
            self.violation = Some(Violation { at, what });
        }
    }

    /// Client `client` read its guard at `at`: `held` is the lock and token
    /// if `is_held()` was true.
    pub(crate) fn probe(&mut self, client: usize, at: Duration, held: Option<(String, u64)>) {
        if let Some(reported) = self.reported.get_mut(client) {
            *reported = (*reported).max(at);
        }
        if let Some((lock, token)) = held {
            self.beliefs.entry(at).or_default().push(Belief {
                client,
                claim: None,
                lock,
                token,
            });
        }
    }

    /// Version 2 client `client` read its session at `at`: `held` is every
    /// claim it believed in, as (claim id, lock, token).
    pub(crate) fn probe_claims(
        &mut self,
        client: usize,
        at: Duration,
        held: Vec<(u32, String, u64)>,
    ) {
        if let Some(reported) = self.reported.get_mut(client) {
            *reported = (*reported).max(at);
        }
        if held.is_empty() {
            return;
        }
        let beliefs = self.beliefs.entry(at).or_default();
        for (claim, lock, token) in held {
            beliefs.push(Belief {
                client,
                claim: Some(claim),
                lock,
                token,
            });
        }
    }

    /// Client `client` has finished; it believes nothing from now on.
    pub(crate) fn client_done(&mut self, client: usize) {
        if let Some(reported) = self.reported.get_mut(client) {
            *reported = Duration::MAX;
        }
    }

    /// Clients that have not finished.
    pub(crate) fn unfinished(&self) -> Vec<usize> {
        (0..self.reported.len())
            .filter(|c| self.reported[*c] != Duration::MAX)
            .collect()
    }

    /// Checks every instant that all clients have reported.
    pub(crate) fn settle(&mut self) {
        let upto = self.reported.iter().copied().min().unwrap_or(Duration::MAX);
        while let Some(entry) = self.beliefs.first_entry() {
            if *entry.key() > upto {
                break;
            }
            let (at, beliefs) = entry.remove_entry();
            self.tally.instants += 1;
            self.check_instant(at, &beliefs);
        }
    }

    fn check_instant(&mut self, at: Duration, beliefs: &[Belief]) {
        for (i, a) in beliefs.iter().enumerate() {
            let Some(&inc_a) = self.issued_by.get(&a.token) else {
                let what = format!(
                    "client {a} believes it holds {}, a token no server issued",
                    a.lock
                );
                self.fail(at, what);
                return;
            };
            for b in &beliefs[i + 1..] {
                if a.lock != b.lock || self.issued_by.get(&b.token) != Some(&inc_a) {
                    continue;
                }
                if self.excused.contains(&a.token) || self.excused.contains(&b.token) {
                    self.tally.excused_overlaps += 1;
                    continue;
                }
                let what = format!(
                    "two holders of {}: {a} and {b}, both granted by server process {inc_a}",
                    a.lock
                );
                self.fail(at, what);
                return;
            }
        }
    }

    /// A new server process: it knows no sessions.
    pub(crate) fn server_started(&mut self, incarnation: u32) {
        self.incarnation = incarnation;
        self.holders.clear();
        self.held_by.clear();
        self.queues.clear();
        self.ended.clear();
        self.last_granted.clear();
        self.tally.server_processes += 1;
    }

    pub(crate) fn granted(&mut self, at: Duration, grant: Grant) {
        self.tally.grants += 1;
        let Grant {
            lock,
            peer,
            token,
            lease,
            silent,
            slot,
        } = grant;
        if token <= self.last_token {
            let what = format!(
                "token {token} for {lock} is not above the last token issued, {}",
                self.last_token
            );
            self.fail(at, what);
        }
        self.last_token = self.last_token.max(token);
        self.issued_by.insert(token, self.incarnation);
        self.lock_of.insert(token, lock.clone());
        self.last_granted.insert(lock.clone(), token);
        self.held_by.insert((peer, token), (lock.clone(), lease));
        if let Some(holder) = self.holders.insert(lock.clone(), token) {
            let what = format!("{lock} granted (token {token}) while token {holder} holds it");
            self.fail(at, what);
        }
        if silent {
            let what =
                format!("{lock} granted (token {token}) to {peer}, silent for its whole lease");
            self.fail(at, what);
        }
        let counted_on = self.counting.iter().find(|(_, (held, held_token, until))| {
            *held == lock
                && *held_token != token
                && *until > at
                && self.issued_by.get(held_token) == Some(&self.incarnation)
                && !self.excused.contains(held_token)
        });
        if let Some((client, (_, held_token, until))) = counted_on {
            let what = format!(
                "{lock} granted (token {token}) to {peer} while c{client} counts on its token {held_token} until {:.3} s",
                until.as_secs_f64()
            );
            self.fail(at, what);
        }
        if self.ended.contains(&peer) {
            let what = format!(
                "{lock} granted (token {token}) to {peer} after the server read the end of its connection"
            );
            self.fail(at, what);
        }
        let queue = self.queues.entry(lock.clone()).or_default();
        match queue.iter().position(|(w, s, _)| (*w, *s) == (peer, slot)) {
            Some(0) => {
                queue.pop_front();
            }
            Some(pos) => {
                let ahead = queue[0].0;
                queue.remove(pos);
                let what = format!(
                    "{lock} granted to {peer}, position {pos} of its queue, while {ahead} waits ahead of it"
                );
                self.fail(at, what);
            }
            None if !queue.is_empty() => {
                let what = format!(
                    "{lock} granted to {peer}, not queued, past {} waiters",
                    queue.len()
                );
                self.fail(at, what);
            }
            None => {}
        }
    }

    pub(crate) fn released(&mut self, lock: &str, peer: SocketAddr, token: u64) {
        if self.holders.get(lock) == Some(&token) {
            self.holders.remove(lock);
        }
        self.held_by.remove(&(peer, token));
    }

    /// A claim joined the queue of `lock`. `slot` tells the claims of one
    /// connection apart: the server's `SessionInfo` of the claim is the
    /// same object from its queueing to its grant or its leaving, so its
    /// address serves (compared only for equality, never ordered or shown,
    /// so it does not touch the replay).
    pub(crate) fn joined(&mut self, lock: &str, peer: SocketAddr, slot: usize, lease: Duration) {
        self.queues
            .entry(lock.to_owned())
            .or_default()
            .push_back((peer, slot, lease));
    }

    pub(crate) fn left(&mut self, lock: &str, peer: SocketAddr, slot: usize) {
        if let Some(queue) = self.queues.get_mut(lock) {
            queue.retain(|(w, s, _)| (*w, *s) != (peer, slot));
        }
    }

    /// The server accepted a connection from `peer` (a new one, whatever
    /// connection had that address before).
    pub(crate) fn connection_opened(&mut self, peer: SocketAddr) {
        self.ended.remove(&peer);
    }

    /// The server read the end of the connection from `peer` (EOF or a
    /// reset): its session ends, and every claim with it.
    pub(crate) fn connection_ended(&mut self, peer: SocketAddr) {
        self.ended.insert(peer);
    }

    /// Version 2 client `client` read RELEASED for `claim` on `lock`,
    /// which it held under `token`: the server must no longer hold that
    /// token (docs/protocol.md, "Claims": RELEASED means released).
    pub(crate) fn released_read(
        &mut self,
        at: Duration,
        client: usize,
        claim: u32,
        lock: &str,
        token: u64,
    ) {
        if let Some(what) = self.observers.known_end(token, "released") {
            self.fail(at, what);
        }
        if self.holders.get(lock) == Some(&token) {
            let what = format!(
                "c{client} claim {claim} read RELEASED while the server still holds {lock} under its token {token}"
            );
            self.fail(at, what);
        }
    }

    /// Client `client` counts on holding `lock` under `token` until
    /// `until` (its deadline), whatever it hears meanwhile; `None`: it has
    /// given the lock up.
    pub(crate) fn counts_on(&mut self, client: usize, held: Option<(String, u64, Duration)>) {
        match held {
            Some(held) => self.counting.insert(client, held),
            None => self.counting.remove(&client),
        };
    }

    /// An administrator force-released `token`: its holder may keep
    /// believing until it reads the ERROR, and its observers must be told
    /// it was forced.
    pub(crate) fn force_released(&mut self, at: Duration, token: u64) {
        self.excuse(token);
        if let Some(what) = self.observers.known_end(token, "forced") {
            self.fail(at, what);
        }
    }

    /// The server's table released `token` for `reason` (the wire's name
    /// of it, as its watches must be told).
    pub(crate) fn released_for(&mut self, at: Duration, token: u64, reason: &'static str) {
        if let Some(what) = self.observers.table_released(token, reason) {
            self.fail(at, what);
        }
    }

    /// Host `client` writes `value` for `claim` (host, slot, ask), replaced
    /// `n` times before.
    pub(crate) fn value_written(&mut self, value: String, claim: ClaimId, n: u32) {
        self.observers.written(value, claim, n);
    }

    /// The claim `claim` learned it holds under `token`.
    pub(crate) fn holder_learned(&mut self, at: Duration, token: u64, claim: ClaimId) {
        if let Some(what) = self.observers.holder_learned(token, claim) {
            self.fail(at, what);
        }
    }

    /// An observer host starts: the run is not over until it is done.
    pub(crate) fn observer_started(&mut self, client: usize) {
        self.observing.insert(client);
    }

    /// An observer host has compared its last states and stops.
    pub(crate) fn observer_done(&mut self, client: usize) {
        self.observing.remove(&client);
    }

    /// Observer hosts still running.
    pub(crate) fn observing(&self) -> Vec<usize> {
        self.observing.iter().copied().collect()
    }

    /// Observer `client` read `seen` on its watch `watch` of `lock`.
    pub(crate) fn observed(
        &mut self,
        at: Duration,
        client: usize,
        watch: u64,
        lock: &str,
        seen: &Seen,
    ) {
        self.tally.states_read += 1;
        if seen.coalesced {
            self.tally.coalesced_read += 1;
        }
        let lock_of = &self.lock_of;
        let holder = self.holders.get(lock).copied();
        let broken = self.observers.read(
            client,
            watch,
            lock,
            seen,
            |token| lock_of.get(&token).cloned(),
            holder,
        );
        if let Some(what) = broken {
            self.fail(at, what);
        }
    }

    /// Observer `client`'s watch `watch` of `lock` ended with `error`;
    /// `protocol`: the client ended its session because the server broke
    /// the protocol (a STATE going back, for one).
    pub(crate) fn observation_ended(
        &mut self,
        at: Duration,
        client: usize,
        watch: u64,
        lock: &str,
        protocol: bool,
        error: &str,
    ) {
        let last = self.observers.ended(client, watch);
        if protocol {
            let what = format!(
                "c{client}'s watch {watch} of {lock} ended: the server broke the protocol \
                 (the last token read was {last}): {error}"
            );
            self.fail(at, what);
        }
    }

    /// Since when every client has finished and the lock table has held
    /// and queued nothing (`None`: not yet).
    pub(crate) fn quiet_since(&self) -> Option<Duration> {
        self.quiet_since
    }

    /// Notes the first instant at which every client has finished and the
    /// table is empty.
    pub(crate) fn note_quiet(&mut self, now: Duration) {
        if self.quiet_since.is_some() {
            return;
        }
        let done = self.reported.iter().all(|r| *r == Duration::MAX);
        let empty = self.holders.is_empty() && self.queues.values().all(VecDeque::is_empty);
        if done && empty {
            self.quiet_since = Some(now);
        }
    }

    /// Observer `client`'s last state of `lock` once the run is quiet: it
    /// must be the table's (free, or held by that token).
    pub(crate) fn final_view(
        &mut self,
        at: Duration,
        client: usize,
        lock: &str,
        last: Option<&Seen>,
    ) {
        self.tally.final_views += 1;
        let Some(last) = last else {
            let what = format!("c{client} has no state of {lock} once the run is quiet");
            self.fail(at, what);
            return;
        };
        let what = match self.holders.get(lock) {
            Some(&token) if !last.held || last.token != token => Some(format!(
                "c{client}'s last state of {lock} is {last}, but token {token} holds it"
            )),
            Some(_) => None,
            None if last.held => Some(format!(
                "c{client}'s last state of {lock} is {last}, but it is free"
            )),
            None => match self.last_granted.get(lock) {
                Some(&token) if last.token != 0 && last.token != token => Some(format!(
                    "c{client}'s last state of {lock} is {last}, but its last holder was token {token}"
                )),
                None if last.token != 0 => Some(format!(
                    "c{client}'s last state of {lock} is {last}, but this server process never granted it"
                )),
                _ => None,
            },
        };
        if let Some(what) = what {
            self.fail(at, what);
        }
    }

    /// States read by observers, by event.
    pub(crate) fn states_read(&self) -> BTreeMap<&'static str, u64> {
        self.observers.counts.clone()
    }

    /// The holder of `token` may keep believing for a documented reason.
    pub(crate) fn excuse(&mut self, token: u64) {
        self.excused.insert(token);
    }

    /// The first waiter of each lock that has one, with its lease.
    pub(crate) fn queue_heads(&self) -> Vec<(String, SocketAddr, Duration)> {
        self.queues
            .iter()
            .filter_map(|(lock, queue)| {
                queue
                    .front()
                    .map(|(head, _, lease)| (lock.clone(), *head, *lease))
            })
            .collect()
    }

    /// The first waiter of each lock with another waiter behind it, with
    /// its lease.
    pub(crate) fn queue_heads_with_followers(&self) -> Vec<(String, SocketAddr, Duration)> {
        self.queues
            .iter()
            .filter(|(_, queue)| queue.len() >= 2)
            .filter_map(|(lock, queue)| {
                queue
                    .front()
                    .map(|(head, _, lease)| (lock.clone(), *head, *lease))
            })
            .collect()
    }

    /// Holders that have someone waiting behind them.
    pub(crate) fn holders_with_waiters(&self) -> Vec<(SocketAddr, Duration)> {
        let mut holders: Vec<(SocketAddr, Duration)> = self
            .held_by
            .iter()
            .filter(|(_, (lock, _))| self.queues.get(lock).is_some_and(|q| !q.is_empty()))
            .map(|((peer, _), (_, lease))| (*peer, *lease))
            .collect();
        holders.dedup_by_key(|(peer, _)| *peer);
        holders
    }

    /// The tokens the client at `peer` holds, as the server's current
    /// process sees it (several for a version 2 session).
    pub(crate) fn holder_of(&self, peer: SocketAddr) -> Vec<u64> {
        self.held_by
            .range((peer, 0)..=(peer, u64::MAX))
            .map(|((_, token), _)| *token)
            .collect()
    }

    /// Connections with two claims or more in use (held or queued) of
    /// which at least one holds, with the locks held: where a
    /// force-release ends one claim of a version 2 session and must leave
    /// the others as they are.
    pub(crate) fn multi_holders(&self) -> Vec<(SocketAddr, Vec<String>)> {
        let mut by_peer: BTreeMap<SocketAddr, (Vec<String>, usize)> = BTreeMap::new();
        for ((peer, _), (lock, _)) in &self.held_by {
            by_peer.entry(*peer).or_default().0.push(lock.clone());
        }
        for queue in self.queues.values() {
            for (peer, _, _) in queue {
                if let Some((_, queued)) = by_peer.get_mut(peer) {
                    *queued += 1;
                }
            }
        }
        by_peer
            .into_iter()
            .filter(|(_, (held, queued))| held.len() + queued > 1)
            .map(|(peer, (mut held, _))| {
                // By name, not by token: the server may number the grants
                // of one instant in another order from run to run.
                held.sort();
                (peer, held)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(checker: &mut Checker, lock: &str, port: u16, token: u64) {
        let peer = SocketAddr::from(([10, 0, 0, 1], port));
        checker.granted(
            Duration::ZERO,
            Grant {
                lock: lock.into(),
                peer,
                token,
                lease: Duration::from_secs(1),
                silent: false,
                slot: 0,
            },
        );
    }

    #[test]
    fn two_believers_of_one_server_process_are_a_violation() {
        let mut checker = Checker::new(2);
        checker.server_started(1);
        grant(&mut checker, "a", 1, 10);
        checker.released("a", SocketAddr::from(([10, 0, 0, 1], 1)), 10);
        grant(&mut checker, "a", 2, 11);
        let at = Duration::from_millis(5);
        checker.probe(0, at, Some(("a".into(), 10)));
        checker.probe(1, at, Some(("a".into(), 11)));
        checker.settle();
        assert!(
            checker
                .violation()
                .is_some_and(|v| v.what.contains("two holders"))
        );
    }

    #[test]
    fn excused_and_cross_process_overlaps_are_not() {
        let mut checker = Checker::new(2);
        checker.server_started(1);
        grant(&mut checker, "a", 1, 10);
        checker.server_started(2);
        grant(&mut checker, "a", 2, 20);
        checker.released("a", SocketAddr::from(([10, 0, 0, 1], 2)), 20);
        grant(&mut checker, "a", 3, 21);
        checker.excuse(20);
        let at = Duration::from_millis(5);
        checker.probe(0, at, Some(("a".into(), 10)));
        checker.probe(1, at, Some(("a".into(), 21)));
        checker.settle();
        checker.probe(0, at * 2, Some(("a".into(), 20)));
        checker.probe(1, at * 2, Some(("a".into(), 21)));
        checker.settle();
        assert_eq!(checker.violation(), None);
        assert_eq!(checker.tally().excused_overlaps, 1);
    }

    #[test]
    fn two_claims_of_one_session_on_one_lock_are_told_apart() {
        let mut checker = Checker::new(2);
        checker.server_started(1);
        let lease = Duration::from_secs(1);
        let session = SocketAddr::from(([10, 0, 0, 1], 9));
        let other = SocketAddr::from(([10, 0, 0, 1], 2));
        grant(&mut checker, "a", 1, 10);
        // Claims 1 and 2 of one session queue around another waiter; the
        // later one leaves, and the earlier is still first in line.
        checker.joined("a", session, 1, lease);
        checker.joined("a", other, 0, lease);
        checker.joined("a", session, 2, lease);
        checker.left("a", session, 2);
        checker.released("a", SocketAddr::from(([10, 0, 0, 1], 1)), 10);
        let granted = |slot, token| Grant {
            lock: "a".into(),
            peer: session,
            token,
            lease,
            silent: false,
            slot,
        };
        checker.granted(Duration::ZERO, granted(1, 11));
        assert_eq!(checker.violation(), None);
        assert_eq!(checker.holder_of(session), vec![11]);
        // Two claims of one session believing in one lock at once are two
        // holders like any others.
        let at = Duration::from_millis(5);
        checker.probe_claims(0, at, vec![(1, "a".into(), 11), (2, "a".into(), 10)]);
        checker.probe(1, at, None);
        checker.settle();
        assert!(
            checker
                .violation()
                .is_some_and(|v| v.what.contains("c0 claim 1 (token 11) and c0 claim 2")),
            "{:?}",
            checker.violation()
        );
    }

    #[test]
    fn released_read_while_the_server_still_holds_the_claim_is_a_violation() {
        let session = SocketAddr::from(([10, 0, 0, 1], 9));
        let at = Duration::from_millis(5);
        // Still held under the claim's token.
        let mut checker = Checker::new(1);
        checker.server_started(1);
        grant(&mut checker, "a", 9, 10);
        checker.released_read(at, 0, 1, "a", 10);
        assert!(
            checker
                .violation()
                .is_some_and(|v| v.what.contains("still holds a under its token 10"))
        );
        // Released: the next holder's token is another.
        let mut checker = Checker::new(1);
        checker.server_started(1);
        grant(&mut checker, "a", 9, 10);
        checker.released("a", session, 10);
        grant(&mut checker, "a", 2, 11);
        checker.released_read(at, 0, 1, "a", 10);
        assert_eq!(checker.violation(), None);
    }

    #[test]
    fn a_grant_after_the_server_read_the_connection_end_is_a_violation() {
        let mut checker = Checker::new(1);
        checker.server_started(1);
        let peer = SocketAddr::from(([10, 0, 0, 1], 9));
        checker.connection_opened(peer);
        grant(&mut checker, "a", 9, 10);
        checker.released("a", peer, 10);
        checker.connection_ended(peer);
        // A new process knows nothing of the old one's connections, and a
        // new connection from the same address is another session.
        checker.server_started(2);
        grant(&mut checker, "a", 9, 11);
        checker.released("a", peer, 11);
        checker.connection_ended(peer);
        checker.connection_opened(peer);
        grant(&mut checker, "a", 9, 12);
        assert_eq!(checker.violation(), None);
        checker.released("a", peer, 12);
        checker.connection_ended(peer);
        grant(&mut checker, "a", 9, 13);
        assert!(
            checker
                .violation()
                .is_some_and(|v| v.what.contains("after the server read the end"))
        );
    }

    #[test]
    fn a_grant_before_a_stalled_holders_deadline_is_a_violation() {
        let deadline = Duration::from_millis(800);
        let mut checker = Checker::new(2);
        checker.server_started(1);
        grant(&mut checker, "a", 1, 10);
        checker.counts_on(0, Some(("a".into(), 10, deadline)));
        checker.released("a", SocketAddr::from(([10, 0, 0, 1], 1)), 10);
        // At the deadline, or for another lock, the grant is fine.
        grant(&mut checker, "b", 2, 11);
        checker.granted(
            deadline,
            Grant {
                lock: "a".into(),
                peer: SocketAddr::from(([10, 0, 0, 1], 2)),
                token: 12,
                lease: Duration::from_secs(1),
                silent: false,
                slot: 0,
            },
        );
        assert_eq!(checker.violation(), None);
        // Before it, it is not, unless the holder's token is excused.
        let mut checker = Checker::new(2);
        checker.server_started(1);
        grant(&mut checker, "a", 1, 10);
        checker.counts_on(0, Some(("a".into(), 10, deadline)));
        checker.released("a", SocketAddr::from(([10, 0, 0, 1], 1)), 10);
        checker.excuse(10);
        grant(&mut checker, "a", 2, 11);
        assert_eq!(checker.violation(), None);
        let mut checker = Checker::new(2);
        checker.server_started(1);
        grant(&mut checker, "a", 1, 10);
        checker.counts_on(0, Some(("a".into(), 10, deadline)));
        checker.released("a", SocketAddr::from(([10, 0, 0, 1], 1)), 10);
        grant(&mut checker, "a", 2, 11);
        assert!(
            checker.violation().is_some_and(|v| v
                .what
                .contains("while c0 counts on its token 10 until 0.800 s")),
            "{:?}",
            checker.violation()
        );
    }

    #[test]
    fn grants_out_of_queue_order_or_with_old_tokens_are_violations() {
        let mut checker = Checker::new(1);
        checker.server_started(1);
        grant(&mut checker, "a", 1, 10);
        let lease = Duration::from_secs(1);
        checker.joined("a", SocketAddr::from(([10, 0, 0, 1], 2)), 0, lease);
        checker.joined("a", SocketAddr::from(([10, 0, 0, 1], 3)), 0, lease);
        checker.released("a", SocketAddr::from(([10, 0, 0, 1], 1)), 10);
        grant(&mut checker, "a", 3, 11);
        assert!(
            checker
                .violation()
                .is_some_and(|v| v.what.contains("waits ahead"))
        );
        let mut checker = Checker::new(1);
        checker.server_started(1);
        grant(&mut checker, "a", 1, 10);
        checker.released("a", SocketAddr::from(([10, 0, 0, 1], 1)), 10);
        grant(&mut checker, "a", 1, 10);
        assert!(
            checker
                .violation()
                .is_some_and(|v| v.what.contains("not above"))
        );
    }
}
