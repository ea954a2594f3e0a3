//! Protocol version 2 as a transition system over integer ticks: sessions
//! carrying many claims (docs/protocol.md, "Protocol version 2").
//!
//! Each client has one session on its own connection (two FIFO channels,
//! every message delivered within `max_delay` ticks), with up to
//! `Params::claims` claims in use on `Params::locks` locks. The session
//! heartbeats on the version 1 schedule (PING, and every ACQUIRE and
//! RELEASE counts), at most one PING in flight; the client gives up every
//! claim at `S + f x lease`, `S` the send instant of the latest frame whose
//! reply arrived; pushes (GRANTED, REVOKED) confirm nothing. The server
//! keeps one FIFO queue per lock, writes RELEASED only once the table has
//! released the claim and handed the lock on, ends every claim of a session
//! in the step that ends the session (close, lease expiry), and lets an
//! administrator revoke one claim.

use std::hash::{DefaultHasher, Hash, Hasher};

use crate::check::Model;
use crate::frames::{Answer, Frame, lock_name};
use crate::params::{Params, Step, Variant};

/// Claim ids a session may use (`Params::claims` of them).
const CLAIM_IDS: usize = 2;
/// Locks the model knows (`Params::locks` of them).
const LOCKS: usize = 2;

/// A message in flight and its send instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Sent<T> {
    sent: u32,
    body: T,
}

/// The client's session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Link {
    Unopened,
    Opening,
    Open,
    /// Closed, given up, or closed by the server: every claim is lost.
    Gone,
}

/// One claim id, as the client sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Claim {
    Free,
    /// ACQUIRE written, no reply yet.
    Asked(u8),
    Waiting(u8),
    Held {
        lock: u8,
        token: u32,
    },
    /// RELEASE written: the work stopped when it was written.
    Releasing(u8),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Client {
    link: Link,
    claims: [Claim; CLAIM_IDS],
    /// Frames written and not answered yet, oldest first, with their send
    /// instants: each reply answers the oldest.
    pending: Vec<Sent<Frame>>,
    /// `S`.
    confirmed: u32,
    last_send: u32,
    paused: bool,
    /// The uplink is stalled for good.
    stalled: bool,
    /// The reader is stalled for good: nothing more is read, while the
    /// writer goes on.
    deaf: bool,
    pauses_left: u8,
    acquires_left: u8,
    up: Vec<Sent<Frame>>,
    down: Vec<Sent<Answer>>,
}

impl Client {
    fn ping_in_flight(&self) -> bool {
        self.pending.iter().any(|m| m.body == Frame::Ping)
    }

    /// Every claim lost. The send instants and the paused state mean
    /// nothing any more and are cleared (dead variables).
    fn go(&mut self) {
        self.link = Link::Gone;
        self.claims = [Claim::Free; CLAIM_IDS];
        self.pending.clear();
        self.down.clear();
        self.confirmed = 0;
        self.last_send = 0;
        self.paused = false;
        self.pauses_left = 0;
        self.acquires_left = 0;
        self.deaf = false;
    }
}

/// The server's view of a client's session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Life {
    Unopened,
    Live {
        last_seen: u32,
    },
    /// The server closed the connection on its own (io-timeout): its held
    /// claims stay in the table until `last_seen + lease`, its waiting ones
    /// are gone.
    Closed {
        last_seen: u32,
    },
    Ended,
}

/// A claim in the table: the client (session) and the claim id.
type Key = (u8, u8);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Server {
    sessions: Vec<Life>,
    /// Per lock: the holding claim and its token.
    holders: [Option<(Key, u32)>; LOCKS],
    /// Per lock: the waiting claims, FIFO.
    queues: [Vec<Key>; LOCKS],
    last_token: u32,
    revokes_left: u8,
    /// `ReleasedBeforeHandOn` only: claims whose RELEASED is written and
    /// that the table still has.
    deferred: Vec<Key>,
}

impl Server {
    fn has(&self, key: Key) -> bool {
        self.holders.iter().flatten().any(|(k, _)| *k == key)
            || self.queues.iter().any(|q| q.contains(&key))
    }
}

/// A lock's state or change as a watch is told (GRANTED and HELD alike,
/// RELEASED and FREE alike: the rule reads the token only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Push {
    held: bool,
    token: u32,
    coalesced: bool,
}

/// An observer of lock `A`: its watch as the server queues for it, and
/// the pushes its connection took, in order, until it reads them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Observer {
    /// Pushed by the table, not yet taken by the connection.
    queued: Vec<Push>,
    /// Changes were dropped: the watch is marked. The state the first
    /// dropped change left (read only by `CoalescedPushGoesBack`).
    marked: Option<Push>,
    /// Taken by the connection, not yet read.
    taken: Vec<Push>,
    /// The token of the last STATE read.
    last_read: u32,
    /// The token of `A`'s last release (what FREE names).
    last_freed: u32,
}

/// One state of the whole system, version 2.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct State {
    now: u32,
    server: Server,
    clients: Vec<Client>,
    /// Every token issued is at most this.
    max_token: u32,
    stalls_left: u8,
    closes_left: u8,
    read_stalls_left: u8,
    /// A broken rule seen on the way here.
    broken: Option<&'static str>,
    /// The observer of lock `A`, with `Params::observers`.
    observer: Option<Observer>,
}

impl Model for State {
    fn initial(p: &Params) -> Self {
        let client = Client {
            link: Link::Unopened,
            claims: [Claim::Free; CLAIM_IDS],
            pending: Vec::new(),
            confirmed: 0,
            last_send: 0,
            paused: false,
            stalled: false,
            deaf: false,
            pauses_left: p.pauses,
            acquires_left: p.acquires,
            up: Vec::new(),
            down: Vec::new(),
        };
        let mut state = Self {
            now: 0,
            server: Server {
                sessions: vec![Life::Unopened; usize::from(p.clients)],
                holders: [None; LOCKS],
                queues: Default::default(),
                last_token: 0,
                revokes_left: p.revokes,
                deferred: Vec::new(),
            },
            clients: vec![client; usize::from(p.clients)],
            max_token: 0,
            stalls_left: p.stalls,
            closes_left: p.closes,
            read_stalls_left: p.read_stalls,
            broken: None,
            // Registered before any grant: its INITIAL state, FREE, read.
            observer: (p.observers > 0).then(Observer::default),
        };
        // Every session writes its OPEN at tick 0: a session opened later
        // is the same up to a shift of time (no rule reads the absolute
        // tick in version 2), within the horizon left.
        for c in 0..state.clients.len() {
            state.client_sends(c, Frame::Open);
        }
        state
    }

    fn violation(&self, p: &Params) -> Option<String> {
        if let Some(broken) = self.broken {
            return Some(format!("{broken} (tick {})", self.now));
        }
        for lock in 0..LOCKS {
            if !self.server.queues[lock].is_empty() && self.server.holders[lock].is_none() {
                return Some(format!(
                    "lock {} free with claims waiting at tick {}",
                    lock_name(lock as u8),
                    self.now
                ));
            }
        }
        // A session the server closed keeps its held claims until its lease
        // would have run out, and nothing else.
        let held = self
            .server
            .holders
            .iter()
            .flatten()
            .map(|&(k, _)| (k, true));
        let queued = self.server.queues.iter().flatten().map(|&k| (k, false));
        for ((c, claim), holds) in held.chain(queued) {
            let in_table = match self.server.sessions[usize::from(c)] {
                Life::Live { .. } => true,
                Life::Closed { last_seen } => holds && self.now < last_seen + p.lease,
                Life::Unopened | Life::Ended => false,
            };
            if !in_table {
                return Some(format!(
                    "c{c}'s claim {claim} is in the table after its session ended, at tick {}",
                    self.now
                ));
            }
        }
        let mut believers: [Option<(usize, u32)>; LOCKS] = [None; LOCKS];
        for c in 0..self.clients.len() {
            for (lock, token) in self.beliefs(p, c) {
                let slot = &mut believers[usize::from(lock)];
                if let Some((other, earlier)) = *slot {
                    return Some(format!(
                        "c{other} and c{c} believe they hold {} (tokens {earlier} and {token}) \
                         at tick {}",
                        lock_name(lock),
                        self.now
                    ));
                }
                *slot = Some((c, token));
            }
        }
        None
    }

    /// Sessions are identical processes and every rule is symmetric in
    /// them: the clients are sorted (each with its server session) and the
    /// table's claims renamed with them before hashing.
    fn fingerprint(&self) -> u64 {
        let (order, rename) = crate::check::client_renaming(&self.clients, &self.server.sessions);
        let key = |(c, claim): Key| (rename[usize::from(c)], claim);
        let mut h = DefaultHasher::new();
        (
            self.now,
            self.max_token,
            self.stalls_left,
            self.closes_left,
            self.read_stalls_left,
            self.broken,
        )
            .hash(&mut h);
        let server = &self.server;
        (server.last_token, server.revokes_left).hash(&mut h);
        for lock in 0..LOCKS {
            server.holders[lock]
                .map(|(k, token)| (key(k), token))
                .hash(&mut h);
            server.queues[lock].len().hash(&mut h);
            for &k in &server.queues[lock] {
                key(k).hash(&mut h);
            }
        }
        server.deferred.len().hash(&mut h);
        for &k in &server.deferred {
            key(k).hash(&mut h);
        }
        for &old in &order {
            self.clients[old].hash(&mut h);
            server.sessions[old].hash(&mut h);
        }
        self.observer.hash(&mut h);
        h.finish()
    }

    fn successors(&self, p: &Params, out: &mut Vec<(Step, Self)>) {
        for c in 0..self.clients.len() {
            let client = &self.clients[c];
            if let Some(msg) = client.up.first()
                && !client.stalled
            {
                let mut next = self.clone();
                next.server_reads(p, c);
                out.push((
                    Step::Takes {
                        client: c,
                        frame: msg.body,
                    },
                    next,
                ));
            }
            if let Some(msg) = client.down.first()
                && !client.paused
                && !client.deaf
            {
                let mut next = self.clone();
                next.client_reads(p, c);
                out.push((
                    Step::Reads {
                        client: c,
                        answer: msg.body,
                    },
                    next,
                ));
            }
            if !client.paused {
                for frame in self.may_send(p, c) {
                    let mut next = self.clone();
                    next.client_sends(c, frame);
                    out.push((Step::Sends { client: c, frame }, next));
                }
            }
            let connected = matches!(client.link, Link::Opening | Link::Open);
            if client.paused || (client.pauses_left > 0 && connected) {
                let mut next = self.clone();
                next.toggle_pause(p, c);
                out.push((Step::Pause(c), next));
            }
            if self.stalls_left > 0 && connected && !client.stalled {
                let mut next = self.clone();
                next.stalls_left -= 1;
                next.clients[c].stalled = true;
                next.clients[c].up.clear();
                out.push((Step::Stall(c), next));
            }
            if self.read_stalls_left > 0 && client.link == Link::Open && !client.deaf {
                let mut next = self.clone();
                next.read_stalls_left -= 1;
                next.clients[c].deaf = true;
                out.push((Step::ReadStall(c), next));
            }
            // The server's write of the oldest unread frame has waited
            // io-timeout: the server may end the session (the buffers in
            // between fill at a pace the model leaves open).
            let write_blocked = client.deaf
                && client
                    .down
                    .first()
                    .is_some_and(|m| m.sent + p.io_timeout <= self.now);
            if write_blocked && matches!(self.server.sessions[c], Life::Live { .. }) {
                let mut next = self.clone();
                next.server_ends(p, c);
                out.push((Step::IoTimeout(c), next));
            }
        }
        if self.server.revokes_left > 0 {
            let held = self.server.holders.iter().flatten().map(|(k, _)| k);
            let queued = self.server.queues.iter().flatten();
            for &(c, claim) in held.chain(queued) {
                let mut next = self.clone();
                next.server.revokes_left -= 1;
                next.revoke(p, (c, claim));
                out.push((
                    Step::Revoke {
                        client: usize::from(c),
                        claim,
                    },
                    next,
                ));
            }
        }
        if !self.server.deferred.is_empty() {
            let mut next = self.clone();
            let key = next.server.deferred.remove(0);
            next.end_claim(p, key);
            out.push((Step::HandOn, next));
        }
        if let Some(observer) = &self.observer {
            if !observer.queued.is_empty() || observer.marked.is_some() {
                let mut next = self.clone();
                next.observer_takes(p);
                out.push((Step::ObserverTakes, next));
            }
            if let Some(&push) = observer.taken.first() {
                let mut next = self.clone();
                next.observer_reads();
                out.push((
                    Step::ObserverReads {
                        held: push.held,
                        token: push.token,
                        coalesced: push.coalesced,
                    },
                    next,
                ));
            }
        }
        if self.may_tick(p) {
            let mut next = self.clone();
            next.tick(p);
            out.push((Step::Tick, next));
        }
    }
}

impl State {
    /// The locks client `c` believes it holds now, with their tokens: a
    /// claim granted, its session's deadline not passed, and no REVOKED
    /// for it already written (the administrator's act is excused until
    /// the holder reads it, as in docs/safety.md's simulation).
    fn beliefs(&self, p: &Params, c: usize) -> impl Iterator<Item = (u8, u32)> + '_ {
        let client = &self.clients[c];
        let live = client.link == Link::Open && self.now < client.confirmed + p.abandon_after();
        client
            .claims
            .iter()
            .enumerate()
            .filter_map(move |(id, claim)| match *claim {
                Claim::Held { lock, token }
                    if live
                        && !client
                            .down
                            .iter()
                            .any(|m| m.body == Answer::Revoked { claim: id as u8 }) =>
                {
                    Some((lock, token))
                }
                _ => None,
            })
    }

    /// The frames client `c` may write now. A new claim takes the lowest
    /// free id (ids are names: any other choice is a renaming); a PING
    /// goes out between `floor` and `base` after the last frame written,
    /// one at a time; a close only while a claim is in use.
    fn may_send(&self, p: &Params, c: usize) -> Vec<Frame> {
        let client = &self.clients[c];
        let mut frames = Vec::new();
        match client.link {
            Link::Unopened => frames.push(Frame::Open),
            // One frame a tick: a client's frames are ordered in time.
            Link::Open if self.now > client.last_send => {
                // A client whose reader stalled writes on regardless of
                // replies: a PING any tick.
                if (client.deaf || !client.ping_in_flight())
                    && self.now >= client.last_send + p.floor()
                {
                    frames.push(Frame::Ping);
                }
                let ids = usize::from(p.claims).min(CLAIM_IDS);
                let free = (0..ids).find(|&id| {
                    client.claims[id] == Claim::Free
                        && !client
                            .pending
                            .iter()
                            .any(|m| m.body == Frame::Release { claim: id as u8 })
                });
                if let Some(id) = free
                    && client.acquires_left > 0
                {
                    for lock in 0..p.locks.min(LOCKS as u8) {
                        frames.push(Frame::Acquire {
                            claim: id as u8,
                            lock,
                        });
                    }
                }
                for (id, claim) in client.claims.iter().enumerate() {
                    let releasing = client
                        .pending
                        .iter()
                        .any(|m| m.body == Frame::Release { claim: id as u8 });
                    if matches!(claim, Claim::Waiting(_) | Claim::Held { .. }) && !releasing {
                        frames.push(Frame::Release { claim: id as u8 });
                    }
                }
                let in_use = client
                    .claims
                    .iter()
                    .any(|claim| matches!(claim, Claim::Waiting(_) | Claim::Held { .. }));
                if in_use && self.closes_left > 0 {
                    frames.push(Frame::Close);
                }
            }
            Link::Open | Link::Opening | Link::Gone => {}
        }
        frames
    }

    /// Time may pass unless a message is due, a running session owes a
    /// PING, or (`ReleasedBeforeHandOn`) the table owes a release: it
    /// comes in the same instant as its RELEASED, only after it.
    fn may_tick(&self, p: &Params) -> bool {
        if self.now >= p.horizon || !self.server.deferred.is_empty() {
            return false;
        }
        self.clients.iter().all(|client| {
            let due = |sent: u32| sent + p.max_delay <= self.now;
            let up_due = client.up.first().is_some_and(|m| due(m.sent));
            let down_due =
                !client.paused && !client.deaf && client.down.first().is_some_and(|m| due(m.sent));
            // A client whose reader stalled writes on, on the schedule,
            // whatever is in flight.
            let ping_due = !client.paused
                && client.link == Link::Open
                && (client.deaf || !client.ping_in_flight())
                && self.now >= client.last_send + p.base();
            !up_due && !down_due && !ping_due
        })
    }

    fn client_sends(&mut self, c: usize, frame: Frame) {
        let now = self.now;
        let client = &mut self.clients[c];
        let msg = Sent {
            sent: now,
            body: frame,
        };
        match frame {
            Frame::Open => {
                client.link = Link::Opening;
                client.confirmed = now;
            }
            Frame::Acquire { claim, lock } => {
                client.acquires_left -= 1;
                client.claims[usize::from(claim)] = Claim::Asked(lock);
            }
            Frame::Release { claim } => {
                let slot = &mut client.claims[usize::from(claim)];
                if let Claim::Waiting(lock) | Claim::Held { lock, .. } = *slot {
                    *slot = Claim::Releasing(lock);
                }
            }
            Frame::Ping => {}
            Frame::Close => {
                self.closes_left -= 1;
                client.go();
            }
        }
        if frame != Frame::Close {
            client.last_send = now;
            client.pending.push(msg);
        }
        if !client.stalled {
            client.up.push(msg);
        }
    }

    fn toggle_pause(&mut self, p: &Params, c: usize) {
        let client = &mut self.clients[c];
        if client.paused {
            client.paused = false;
            // On resuming, the deadline is checked before anything else.
            self.check_deadline(p, c);
        } else {
            client.paused = true;
            client.pauses_left -= 1;
        }
    }

    /// At `S + f x lease` the client closes the session: every claim lost.
    fn check_deadline(&mut self, p: &Params, c: usize) {
        let client = &mut self.clients[c];
        if matches!(client.link, Link::Opening | Link::Open)
            && self.now >= client.confirmed + p.abandon_after()
        {
            if !client.stalled {
                client.up.push(Sent {
                    sent: self.now,
                    body: Frame::Close,
                });
            }
            client.go();
        }
    }

    fn client_reads(&mut self, p: &Params, c: usize) {
        let msg = self.clients[c].down.remove(0);
        if !matches!(self.clients[c].link, Link::Opening | Link::Open) {
            return;
        }
        match msg.body {
            Answer::Closed => {
                self.clients[c].go();
                return;
            }
            Answer::Granted { claim, token } => {
                let client = &mut self.clients[c];
                if p.variant == Variant::GrantedConfirmsPing
                    && let Some(ping) = client.pending.iter().find(|m| m.body == Frame::Ping)
                {
                    client.confirmed = client.confirmed.max(ping.sent);
                }
                match client.claims[usize::from(claim)] {
                    Claim::Waiting(lock) => {
                        client.claims[usize::from(claim)] = Claim::Held { lock, token };
                    }
                    Claim::Releasing(lock) if p.variant == Variant::GrantedAfterRelease => {
                        client.claims[usize::from(claim)] = Claim::Held { lock, token };
                    }
                    // A RELEASE crossed the GRANTED: the claim was held,
                    // and is released again; the work stays stopped.
                    Claim::Releasing(_) => {}
                    _ => self.broken = Some("GRANTED for a claim that does not wait"),
                }
            }
            Answer::Revoked { claim } => {
                let slot = &mut self.clients[c].claims[usize::from(claim)];
                match *slot {
                    Claim::Waiting(_) | Claim::Held { .. } | Claim::Releasing(_) => {
                        *slot = Claim::Free;
                    }
                    _ => self.broken = Some("REVOKED for a claim not in use"),
                }
            }
            reply => self.match_reply(c, reply),
        }
        self.check_deadline(p, c);
    }

    /// A reply answers the oldest frame in flight and confirms its send
    /// instant.
    fn match_reply(&mut self, c: usize, reply: Answer) {
        let client = &mut self.clients[c];
        if client.pending.is_empty() {
            self.broken = Some("a reply with no frame in flight");
            return;
        }
        let asked = client.pending.remove(0);
        client.confirmed = asked.sent;
        match (reply, asked.body) {
            (Answer::Opened, Frame::Open) => client.link = Link::Open,
            (Answer::Pong, Frame::Ping) => {}
            (Answer::Acquired { claim, token }, Frame::Acquire { claim: id, lock })
                if claim == id =>
            {
                client.claims[usize::from(claim)] = Claim::Held { lock, token };
            }
            (Answer::Waiting { claim }, Frame::Acquire { claim: id, lock }) if claim == id => {
                client.claims[usize::from(claim)] = Claim::Waiting(lock);
            }
            (Answer::Released { claim }, Frame::Release { claim: id }) if claim == id => {
                client.claims[usize::from(claim)] = Claim::Free;
                // RELEASED means handed on.
                if self.server.has((c as u8, claim)) {
                    self.broken = Some("RELEASED read while the table still has the claim");
                }
            }
            (Answer::Refused { claim }, Frame::Release { claim: id })
                if claim == id && client.claims[usize::from(claim)] == Claim::Free => {}
            _ => self.broken = Some("a reply that answers no frame in flight"),
        }
    }

    fn send_down(&mut self, c: usize, body: Answer) {
        let now = self.now;
        self.clients[c].down.push(Sent { sent: now, body });
    }

    fn server_reads(&mut self, p: &Params, c: usize) {
        let msg = self.clients[c].up.remove(0);
        let now = self.now;
        match (msg.body, self.server.sessions[c]) {
            (Frame::Open, Life::Unopened) => {
                self.server.sessions[c] = Life::Live { last_seen: now };
                self.send_down(c, Answer::Opened);
            }
            (Frame::Close, Life::Live { .. }) => self.end_session(p, c),
            (frame, Life::Live { .. }) => {
                // Every frame read restarts the silence window.
                self.server.sessions[c] = Life::Live { last_seen: now };
                match frame {
                    Frame::Acquire { claim, lock } => {
                        let lock_ = usize::from(lock);
                        if self.server.holders[lock_].is_none() {
                            let token = self.grant(p, (c as u8, claim), lock_);
                            self.send_down(c, Answer::Acquired { claim, token });
                        } else {
                            self.server.queues[lock_].push((c as u8, claim));
                            self.send_down(c, Answer::Waiting { claim });
                        }
                    }
                    Frame::Release { claim } => {
                        let key = (c as u8, claim);
                        if !self.server.has(key) || self.server.deferred.contains(&key) {
                            self.send_down(c, Answer::Refused { claim });
                        } else if p.variant == Variant::ReleasedBeforeHandOn {
                            self.send_down(c, Answer::Released { claim });
                            self.server.deferred.push(key);
                        } else {
                            // In one step of the table: released, handed on;
                            // then RELEASED is written.
                            self.send_down(c, Answer::Released { claim });
                            self.end_claim(p, key);
                        }
                    }
                    Frame::Ping => self.send_down(c, Answer::Pong),
                    Frame::Open | Frame::Close => {}
                }
            }
            // Bytes after the session's end reach a closed connection.
            _ => {}
        }
    }

    /// Grants `lock` to `key`, with the next token.
    fn grant(&mut self, p: &Params, key: Key, lock: usize) -> u32 {
        let token = self.server.last_token + 1;
        if token <= self.max_token {
            self.broken = Some("a token not above every earlier one");
        }
        match self.server.sessions[usize::from(key.0)] {
            Life::Live { last_seen } if last_seen + p.lease > self.now => {}
            Life::Live { .. } => self.broken = Some("a claim of a silent session was granted"),
            _ => self.broken = Some("a claim of an ended session was granted"),
        }
        self.max_token = token;
        self.server.last_token = token;
        self.server.holders[lock] = Some((key, token));
        self.tell_observer(p, lock, true, token);
        token
    }

    /// The table changed `lock` (a grant of `token`, or its release): the
    /// change is pushed to the observer's watch of `A`, in the table's
    /// order, unless its outbox is full (the watch is then marked).
    fn tell_observer(&mut self, p: &Params, lock: usize, held: bool, token: u32) {
        let Some(observer) = self.observer.as_mut().filter(|_| lock == 0) else {
            return;
        };
        if !held {
            observer.last_freed = token;
        }
        let change = Push {
            held,
            token,
            coalesced: false,
        };
        let full = observer.queued.len() >= usize::from(p.outbox);
        let planted = p.variant == Variant::CoalescedPushGoesBack;
        if full || (observer.marked.is_some() && !planted) {
            if observer.marked.is_none() {
                observer.marked = Some(Push {
                    coalesced: true,
                    ..change
                });
            }
        } else {
            observer.queued.push(change);
        }
    }

    /// The observer's connection takes its outbox: what was queued, in
    /// order, then for a marked watch the state of `A` now, coalesced
    /// (read in the same step, so every later push is newer).
    fn observer_takes(&mut self, p: &Params) {
        let now = match self.server.holders[0] {
            Some((_, token)) => (true, token),
            None => (false, self.observer.as_ref().map_or(0, |o| o.last_freed)),
        };
        let Some(observer) = self.observer.as_mut() else {
            return;
        };
        if p.variant == Variant::CoalescedPushGoesBack {
            // The queue alone while it has pushes; the mark, with the state
            // as of the marking, once it is empty.
            if observer.queued.is_empty() {
                observer.taken.extend(observer.marked.take());
            } else {
                observer.taken.append(&mut observer.queued);
            }
            return;
        }
        observer.taken.append(&mut observer.queued);
        if observer.marked.take().is_some() {
            observer.taken.push(Push {
                held: now.0,
                token: now.1,
                coalesced: true,
            });
        }
    }

    /// The observer reads its next STATE: its token must not be below the
    /// last one of its watch.
    fn observer_reads(&mut self) {
        let Some(observer) = self.observer.as_mut() else {
            return;
        };
        let push = observer.taken.remove(0);
        if push.token < observer.last_read {
            self.broken = Some("a STATE's token below the last one of its watch");
        }
        observer.last_read = observer.last_read.max(push.token);
    }

    /// Takes `key` out of the table: out of its queue if it waits; if it
    /// holds, the lock goes to the first waiter whose session is live,
    /// which is pushed GRANTED.
    fn end_claim(&mut self, p: &Params, key: Key) {
        for queue in &mut self.server.queues {
            queue.retain(|k| *k != key);
        }
        for lock in 0..LOCKS {
            if self.server.holders[lock].is_some_and(|(k, _)| k == key) {
                self.hand_on(p, lock);
            }
        }
    }

    fn hand_on(&mut self, p: &Params, lock: usize) {
        if let Some((_, token)) = self.server.holders[lock].take() {
            self.tell_observer(p, lock, false, token);
        }
        while !self.server.queues[lock].is_empty() {
            let (w, claim) = self.server.queues[lock].remove(0);
            let silent = matches!(
                self.server.sessions[usize::from(w)],
                Life::Live { last_seen } if last_seen + p.lease <= self.now
            );
            if silent {
                // Its session ends on this very tick (the wheel).
                continue;
            }
            let token = self.grant(p, (w, claim), lock);
            self.send_down(usize::from(w), Answer::Granted { claim, token });
            break;
        }
    }

    fn revoke(&mut self, p: &Params, key: Key) {
        self.server.deferred.retain(|k| *k != key);
        self.end_claim(p, key);
        self.send_down(usize::from(key.0), Answer::Revoked { claim: key.1 });
    }

    /// Every claim of the session ends in this step: its waiting claims
    /// leave their queues first, then each lock it held is handed on.
    fn end_session(&mut self, p: &Params, c: usize) {
        self.server.sessions[c] = Life::Ended;
        let mine = |k: &Key| usize::from(k.0) == c;
        self.server.deferred.retain(|k| !mine(k));
        if p.variant != Variant::ClaimOutlivesSession {
            for queue in &mut self.server.queues {
                queue.retain(|k| !mine(k));
            }
        }
        for lock in 0..LOCKS {
            if self.server.holders[lock].is_some_and(|(k, _)| mine(&k)) {
                self.hand_on(p, lock);
            }
        }
    }

    /// The server ends a session on its own (io-timeout): the connection
    /// closes now and the waiting claims leave their queues, but the held
    /// claims stay held until the session's last frame plus its lease (the
    /// client may count on them until its own deadline, which is earlier).
    fn server_ends(&mut self, p: &Params, c: usize) {
        let Life::Live { last_seen } = self.server.sessions[c] else {
            return;
        };
        if p.variant == Variant::HandOnAtIoTimeout {
            self.end_session(p, c);
            return;
        }
        self.server.sessions[c] = Life::Closed { last_seen };
        let mine = |k: &Key| usize::from(k.0) == c;
        self.server.deferred.retain(|k| !mine(k));
        for queue in &mut self.server.queues {
            queue.retain(|k| !mine(k));
        }
    }

    fn tick(&mut self, p: &Params) {
        self.now += 1;
        // A session the server closed: its held claims are released when
        // its lease would have run out.
        for c in 0..self.clients.len() {
            if let Life::Closed { last_seen } = self.server.sessions[c]
                && last_seen + p.lease <= self.now
            {
                self.end_session(p, c);
            }
        }
        // The lease wheel: a session silent for its lease ends, never
        // earlier; the client sees its connection closed.
        for c in 0..self.clients.len() {
            if let Life::Live { last_seen } = self.server.sessions[c]
                && last_seen + p.lease <= self.now
            {
                self.end_session(p, c);
                self.send_down(c, Answer::Closed);
            }
        }
        for c in 0..self.clients.len() {
            if !self.clients[c].paused {
                self.check_deadline(p, c);
            }
        }
    }
}
