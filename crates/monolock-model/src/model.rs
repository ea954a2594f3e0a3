//! The protocol as a transition system over integer ticks.

use std::hash::{DefaultHasher, Hash, Hasher};

use crate::check::Model;
use crate::params::{Params, Step, Variant};

/// Client to server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Up {
    Acquire,
    Heartbeat,
    Close,
}

/// Server to client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Down {
    Waiting,
    Acquired(u32),
    Closed,
}

/// A message in flight: the connection it belongs to, when it was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Msg<T> {
    pub(crate) conn: u8,
    pub(crate) sent: u32,
    pub(crate) body: T,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Phase {
    Idle,
    Unanswered,
    Waiting,
    Held { token: u32, process: u8 },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Client {
    pub(crate) phase: Phase,
    pub(crate) conn: u8,
    /// Send instant of the request in flight.
    pub(crate) in_flight: Option<u32>,
    /// `S`.
    pub(crate) confirmed: u32,
    pub(crate) last_send: u32,
    pub(crate) paused: bool,
    /// The uplink of this connection is stalled for good.
    pub(crate) stalled: bool,
    /// This connection's reader stalled for good: the client reads
    /// nothing more, and may heartbeat every tick.
    pub(crate) deaf: bool,
    pub(crate) pauses_left: u8,
    pub(crate) acquires_left: u8,
    pub(crate) up: Vec<Msg<Up>>,
    pub(crate) down: Vec<Msg<Down>>,
}

impl Client {
    /// Back to idle. The send instants mean nothing until the next acquire
    /// sets them, so they are cleared: states that differ only there are
    /// one state (a sound reduction, the variables being dead).
    fn go_idle(&mut self) {
        self.phase = Phase::Idle;
        self.in_flight = None;
        self.confirmed = 0;
        self.last_send = 0;
        self.deaf = false;
        self.down.clear();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Session {
    pub(crate) conn: u8,
    pub(crate) last_seen: u32,
    pub(crate) token: Option<u32>,
    /// The server ended the connection on its own (io-timeout): it reads
    /// nothing more from it, and a lock held stays held until
    /// `last_seen + lease`.
    pub(crate) closed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Server {
    pub(crate) sessions: Vec<Option<Session>>,
    pub(crate) queue: Vec<u8>,
    pub(crate) holder: Option<u8>,
    pub(crate) last_token: u32,
    pub(crate) last_grant: u32,
    pub(crate) process: u8,
    pub(crate) restarts_left: u8,
}

/// One state of the whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub(crate) now: u32,
    pub(crate) server: Server,
    pub(crate) clients: Vec<Client>,
    /// Every token issued is above this.
    pub(crate) max_token: u32,
    /// Stalls still allowed.
    pub(crate) stalls_left: u8,
    /// Reader stalls still allowed.
    pub(crate) read_stalls_left: u8,
    /// A broken rule seen on the way here (tokens, FIFO).
    pub(crate) broken: Option<&'static str>,
}

impl Model for State {
    fn initial(p: &Params) -> Self {
        let client = Client {
            phase: Phase::Idle,
            conn: 0,
            in_flight: None,
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
        Self {
            now: 0,
            server: Server {
                sessions: vec![None; usize::from(p.clients)],
                queue: Vec::new(),
                holder: None,
                last_token: 0,
                last_grant: 0,
                process: 0,
                restarts_left: p.restarts,
            },
            clients: vec![client; usize::from(p.clients)],
            max_token: 0,
            stalls_left: p.stalls,
            read_stalls_left: p.read_stalls,
            broken: None,
        }
    }

    /// The first rule this state breaks, if any.
    fn violation(&self, p: &Params) -> Option<String> {
        if let Some(broken) = self.broken {
            return Some(broken.to_owned());
        }
        let believers: Vec<(u32, u8)> = (0..self.clients.len())
            .filter_map(|c| self.believes(p, c))
            .collect();
        for (i, (ta, pa)) in believers.iter().enumerate() {
            for (tb, pb) in &believers[i + 1..] {
                if pa == pb {
                    return Some(format!(
                        "two clients believe they hold the lock (tokens {ta} and {tb}) at tick {}",
                        self.now
                    ));
                }
            }
        }
        None
    }

    /// A 64-bit fingerprint of the state up to a renaming of the clients.
    ///
    /// Clients are identical processes, and nothing the server does
    /// depends on their numbers except through the queue and the holder,
    /// which are renamed with them; the rules are symmetric too. So the
    /// clients are sorted (each with its server session) and the queue and
    /// holder renamed before hashing: states that differ only by a
    /// renaming share one fingerprint, and the search visits one of them.
    fn fingerprint(&self) -> u64 {
        let (order, rename) = crate::check::client_renaming(&self.clients, &self.server.sessions);
        let mut h = DefaultHasher::new();
        self.now.hash(&mut h);
        self.max_token.hash(&mut h);
        self.stalls_left.hash(&mut h);
        self.read_stalls_left.hash(&mut h);
        self.broken.hash(&mut h);
        let server = &self.server;
        (
            server.last_token,
            server.last_grant,
            server.process,
            server.restarts_left,
        )
            .hash(&mut h);
        server.holder.map(|c| rename[usize::from(c)]).hash(&mut h);
        server.queue.len().hash(&mut h);
        for w in &server.queue {
            rename[usize::from(*w)].hash(&mut h);
        }
        for &old in &order {
            self.clients[old].hash(&mut h);
            server.sessions[old].hash(&mut h);
        }
        h.finish()
    }

    /// Every state one step away.
    fn successors(&self, p: &Params, out: &mut Vec<(Step, Self)>) {
        for c in 0..self.clients.len() {
            if !self.clients[c].up.is_empty() && !self.clients[c].stalled {
                let mut next = self.clone();
                next.server_reads(p, c);
                out.push((Step::ServerReads(c), next));
            }
            let client = &self.clients[c];
            if !client.down.is_empty() && !client.paused && !client.deaf {
                let mut next = self.clone();
                next.client_reads(p, c);
                out.push((Step::ClientReads(c), next));
            }
            if !client.paused && self.may_heartbeat(p, c) {
                let mut next = self.clone();
                next.heartbeat(c);
                out.push((Step::Heartbeat(c), next));
            }
            // The model has one session per client: its next ACQUIRE waits
            // until a lock the server kept for its ended session is
            // released.
            let kept = self.server.sessions[c].is_some_and(|s| s.closed);
            if !client.paused && client.phase == Phase::Idle && client.acquires_left > 0 && !kept {
                let mut next = self.clone();
                next.acquire(c);
                out.push((Step::Acquire(c), next));
            }
            if client.paused || client.pauses_left > 0 {
                let mut next = self.clone();
                next.toggle_pause(p, c);
                out.push((Step::Pause(c), next));
            }
            if self.stalls_left > 0 && client.phase != Phase::Idle && !client.stalled {
                let mut next = self.clone();
                next.stalls_left -= 1;
                next.clients[c].stalled = true;
                next.clients[c].up.clear();
                out.push((Step::Stall(c), next));
            }
            if self.read_stalls_left > 0 && client.phase != Phase::Idle && !client.deaf {
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
            let live = self.server.sessions[c].is_some_and(|s| s.conn == client.conn && !s.closed);
            if write_blocked && live {
                let mut next = self.clone();
                next.server_ends(p, c);
                out.push((Step::IoTimeout(c), next));
            }
        }
        // Today's token rule holds across a restart only more than a second
        // after the last grant: the model restarts only then.
        if self.server.restarts_left > 0 && self.now >= self.server.last_grant + p.second {
            for machine in [false, true] {
                let mut next = self.clone();
                next.restart(machine);
                out.push((Step::Restart { machine }, next));
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
    /// Whether client `c` believes it holds the lock now (`is_held()`: the
    /// clock is read against the deadline, so a paused client believes
    /// only until its deadline too).
    pub(crate) fn believes(&self, p: &Params, c: usize) -> Option<(u32, u8)> {
        let client = &self.clients[c];
        match client.phase {
            Phase::Held { token, process } if self.now < client.confirmed + p.abandon_after() => {
                Some((token, process))
            }
            _ => None,
        }
    }

    fn may_heartbeat(&self, p: &Params, c: usize) -> bool {
        let client = &self.clients[c];
        let writing = matches!(client.phase, Phase::Waiting | Phase::Held { .. });
        if client.deaf {
            // Its writer goes on, whatever it has not read: one a tick.
            return writing && self.now > client.last_send;
        }
        writing && client.in_flight.is_none() && self.now >= client.last_send + p.floor()
    }

    /// Time may pass unless a message is due or a running client owes a
    /// heartbeat.
    fn may_tick(&self, p: &Params) -> bool {
        if self.now >= p.horizon {
            return false;
        }
        self.clients.iter().all(|client| {
            let up_due = client
                .up
                .first()
                .is_some_and(|m| m.sent + p.max_delay <= self.now);
            let down_due = !client.paused
                && !client.deaf
                && client
                    .down
                    .first()
                    .is_some_and(|m| m.sent + p.max_delay <= self.now);
            let heartbeat_due = !client.paused
                && !client.deaf
                && matches!(client.phase, Phase::Waiting | Phase::Held { .. })
                && client.in_flight.is_none()
                && self.now >= client.last_send + p.base();
            !up_due && !down_due && !heartbeat_due
        })
    }

    fn send_up(&mut self, c: usize, body: Up) {
        let client = &mut self.clients[c];
        if client.stalled {
            return;
        }
        let conn = client.conn;
        client.up.push(Msg {
            conn,
            sent: self.now,
            body,
        });
    }

    fn send_down(&mut self, c: usize, conn: u8, body: Down) {
        let now = self.now;
        self.clients[c].down.push(Msg {
            conn,
            sent: now,
            body,
        });
    }

    fn acquire(&mut self, c: usize) {
        let now = self.now;
        let client = &mut self.clients[c];
        client.acquires_left -= 1;
        client.conn += 1;
        // A new connection: the stalled one's bytes never arrive.
        client.stalled = false;
        client.deaf = false;
        client.up.clear();
        client.phase = Phase::Unanswered;
        client.in_flight = Some(now);
        client.confirmed = now;
        client.last_send = now;
        self.send_up(c, Up::Acquire);
    }

    fn heartbeat(&mut self, c: usize) {
        let now = self.now;
        let client = &mut self.clients[c];
        client.in_flight = Some(now);
        client.last_send = now;
        self.send_up(c, Up::Heartbeat);
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

    /// The client gives its claim up once its clock reaches the deadline.
    fn check_deadline(&mut self, p: &Params, c: usize) {
        let client = &self.clients[c];
        if client.phase != Phase::Idle && self.now >= client.confirmed + p.abandon_after() {
            self.abandon(c);
        }
    }

    fn abandon(&mut self, c: usize) {
        self.send_up(c, Up::Close);
        let client = &mut self.clients[c];
        client.go_idle();
    }

    fn client_reads(&mut self, p: &Params, c: usize) {
        let msg = self.clients[c].down.remove(0);
        let now = self.now;
        let client = &mut self.clients[c];
        if msg.conn != client.conn || client.phase == Phase::Idle {
            return;
        }
        let confirm = |client: &mut Client| match client.in_flight.take() {
            Some(sent) => {
                client.confirmed = if p.variant == Variant::DeadlineFromReceive {
                    now
                } else {
                    sent
                };
                true
            }
            None => false,
        };
        match (msg.body, client.phase) {
            (Down::Closed, _) => client.go_idle(),
            (Down::Waiting, Phase::Unanswered | Phase::Waiting) => {
                confirm(client);
                client.phase = Phase::Waiting;
            }
            (Down::Acquired(token), Phase::Unanswered) => {
                confirm(client);
                client.phase = Phase::Held {
                    token,
                    process: self.server.process,
                };
            }
            (Down::Acquired(token), Phase::Waiting) => {
                // The push confirms nothing.
                if p.variant == Variant::PushConfirmsHeartbeat {
                    confirm(client);
                }
                client.phase = Phase::Held {
                    token,
                    process: self.server.process,
                };
            }
            (Down::Acquired(_), Phase::Held { .. }) => {
                confirm(client);
            }
            _ => {}
        }
        self.check_deadline(p, c);
    }

    fn server_reads(&mut self, p: &Params, c: usize) {
        let msg = self.clients[c].up.remove(0);
        let now = self.now;
        let session = self.server.sessions[c].filter(|s| s.conn == msg.conn);
        if session.is_some_and(|s| s.closed) {
            // The server closed this connection: nothing more is read.
            return;
        }
        let live = session;
        match (msg.body, live) {
            (Up::Acquire, None) => {
                self.server.sessions[c] = Some(Session {
                    conn: msg.conn,
                    last_seen: now,
                    token: None,
                    closed: false,
                });
                if self.server.holder.is_none() {
                    self.grant(p, c, msg.conn);
                } else {
                    self.server.queue.push(c as u8);
                    self.send_down(c, msg.conn, Down::Waiting);
                }
            }
            (Up::Heartbeat, Some(mut session)) => {
                session.last_seen = now;
                self.server.sessions[c] = Some(session);
                let reply = session.token.map_or(Down::Waiting, Down::Acquired);
                self.send_down(c, msg.conn, reply);
            }
            (Up::Close, Some(_)) => self.end_session(p, c),
            // Bytes for a connection this process does not know: a reset.
            (Up::Heartbeat, None) => self.send_down(c, msg.conn, Down::Closed),
            _ => {}
        }
    }

    /// Issues `max(previous + 1, seconds << k)` (here `seconds x 1000`).
    fn grant(&mut self, p: &Params, c: usize, conn: u8) {
        let floor = (self.now / p.second) * 1000;
        let token = floor.max(self.server.last_token + 1);
        if token <= self.max_token {
            self.broken = Some("a token not above every earlier one");
        }
        self.max_token = self.max_token.max(token);
        self.server.last_token = token;
        self.server.last_grant = self.now;
        self.server.holder = Some(c as u8);
        if let Some(session) = &mut self.server.sessions[c] {
            session.token = Some(token);
        }
        self.send_down(c, conn, Down::Acquired(token));
    }

    /// A session ends (close, expiry): a holder's lock goes to the first
    /// waiter whose lease still runs.
    fn end_session(&mut self, p: &Params, c: usize) {
        self.server.sessions[c] = None;
        self.server.queue.retain(|w| usize::from(*w) != c);
        if self.server.holder == Some(c as u8) {
            self.server.holder = None;
            while !self.server.queue.is_empty() {
                let next = usize::from(self.server.queue.remove(0));
                let Some(session) = self.server.sessions[next] else {
                    continue;
                };
                let silent = session.last_seen + p.lease <= self.now;
                if silent && p.variant != Variant::PromoteExpiredWaiter {
                    self.server.sessions[next] = None;
                    self.send_down(next, session.conn, Down::Closed);
                    continue;
                }
                if silent {
                    self.broken = Some("a waiter silent for its whole lease was granted");
                }
                self.grant(p, next, session.conn);
                break;
            }
        }
    }

    /// The server ends a session on its own (io-timeout): the connection
    /// closes now and a waiter leaves its queue, but a held lock stays held
    /// until the session's last frame plus its lease (the client may count
    /// on it until its own deadline, which is earlier).
    fn server_ends(&mut self, p: &Params, c: usize) {
        if p.variant == Variant::HandOnAtIoTimeout {
            self.end_session(p, c);
            return;
        }
        let Some(session) = &mut self.server.sessions[c] else {
            return;
        };
        session.closed = true;
        if self.server.holder != Some(c as u8) {
            self.server.sessions[c] = None;
            self.server.queue.retain(|w| usize::from(*w) != c);
        }
    }

    fn restart(&mut self, machine: bool) {
        for c in 0..self.clients.len() {
            if let Some(session) = self.server.sessions[c].take()
                && !machine
            {
                self.send_down(c, session.conn, Down::Closed);
            }
            self.clients[c].up.clear();
        }
        self.server.queue.clear();
        self.server.holder = None;
        self.server.last_token = 0;
        self.server.process += 1;
        self.server.restarts_left -= 1;
    }

    fn tick(&mut self, p: &Params) {
        self.now += 1;
        // The lease wheel: expired at `last_seen + lease`, never earlier.
        for c in 0..self.clients.len() {
            if let Some(session) = self.server.sessions[c]
                && session.last_seen + p.lease <= self.now
            {
                self.end_session(p, c);
                // A connection the server closed already has its end.
                if !session.closed {
                    self.send_down(c, session.conn, Down::Closed);
                }
            }
        }
        for c in 0..self.clients.len() {
            if !self.clients[c].paused {
                self.check_deadline(p, c);
            }
        }
    }
}
