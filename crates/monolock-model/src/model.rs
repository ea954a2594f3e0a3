//! The protocol as a transition system over integer ticks.

use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::check::Model;
use crate::sessions::{Answer, Frame};

/// A known mistake the model can be switched to, to show the checker finds
/// what the simulation finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The protocol as specified.
    Correct,
    /// A push confirms the heartbeat in flight.
    PushConfirmsHeartbeat,
    /// The deadline counts from a reply's arrival, not its request's send.
    DeadlineFromReceive,
    /// Promotion does not skip a waiter whose lease ran out.
    PromoteExpiredWaiter,
    /// Version 2: the server writes RELEASED before the lock table has
    /// released the claim and handed the lock on (a separate, later step).
    ReleasedBeforeHandOn,
    /// Version 2: a session's end leaves its waiting claims in their queues,
    /// and promotion grants them.
    ClaimOutlivesSession,
    /// Version 2: the client counts a GRANTED push as the reply to its PING
    /// in flight, and moves its session deadline.
    GrantedConfirmsPing,
    /// Version 2: a GRANTED read after the claim's RELEASE was written (the
    /// RELEASE crossed the push) makes the client believe it holds the
    /// claim, until RELEASED arrives.
    GrantedAfterRelease,
    /// When the server ends a session on its own (a write blocked past
    /// io-timeout: the client's reader stalled), it hands the session's
    /// held locks on at once, not at its last frame plus its lease (both
    /// protocol versions).
    HandOnAtIoTimeout,
}

impl Variant {
    /// The known mistakes of the version 1 model.
    pub const ALL: [Self; 4] = [
        Self::PushConfirmsHeartbeat,
        Self::DeadlineFromReceive,
        Self::PromoteExpiredWaiter,
        Self::HandOnAtIoTimeout,
    ];

    /// The known mistakes of the version 2 model.
    pub const SESSIONS: [Self; 5] = [
        Self::ReleasedBeforeHandOn,
        Self::ClaimOutlivesSession,
        Self::GrantedConfirmsPing,
        Self::GrantedAfterRelease,
        Self::HandOnAtIoTimeout,
    ];

    /// Whether the mistake shows only when a client's reader may stall (see
    /// [`Params::with_reader_stall`]).
    pub fn needs_reader_stall(self) -> bool {
        self == Self::HandOnAtIoTimeout
    }

    /// The known mistakes of the model of protocol version `protocol`.
    pub fn mistakes(protocol: u8) -> &'static [Self] {
        if protocol == 2 {
            &Self::SESSIONS
        } else {
            &Self::ALL
        }
    }
}

/// The model's parameters, in ticks and thousandths.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// The lease.
    pub lease: u32,
    /// Most ticks a message spends in flight (TCP: in order).
    pub max_delay: u32,
    /// The abandon fraction, in thousandths (the protocol: 800).
    pub fraction: u32,
    /// How much slower a client's clock may run than the server's, in
    /// thousandths: its deadline falls `drift` later in real time.
    pub drift: u32,
    /// Ticks explored.
    pub horizon: u32,
    /// Clients, each on its own connection (2 or 3).
    pub clients: u8,
    /// Pauses each client may take (no I/O; its clock runs on).
    pub pauses: u8,
    /// Server restarts.
    pub restarts: u8,
    /// Uplinks that may stall for good (segments dropped: the connection
    /// lives on in both ends but nothing more reaches the server on it).
    pub stalls: u8,
    /// Acquires each client may make.
    pub acquires: u8,
    /// Ticks per wall-clock second, for the token epoch.
    pub second: u32,
    /// Correct, or a known mistake.
    pub variant: Variant,
    /// The protocol version modelled: 1 (a connection is a claim) or 2
    /// (sessions carrying many claims).
    pub protocol: u8,
    /// Version 2: claims each session may have in use at once (1 or 2).
    pub claims: u8,
    /// Version 2: locks the claims choose from (1 or 2).
    pub locks: u8,
    /// Version 2: administrator acts (force-release of a held claim, kick
    /// of a waiting one), over all sessions.
    pub revokes: u8,
    /// Version 2: sessions a client may close with claims in use, over all
    /// sessions.
    pub closes: u8,
    /// Readers that may stall for good, over all sessions: the client
    /// reads nothing more while its writer goes on (a heartbeat or PING
    /// every tick if it likes).
    pub read_stalls: u8,
    /// Ticks a frame for a client whose reader stalled may wait unread
    /// before the server may end its session (io-timeout).
    pub io_timeout: u32,
}

impl Params {
    /// The bounds of the figures in RELIABILITY.md: lease 5 ticks, delays
    /// of at most 1 tick, horizon 10 ticks, one pause per client, one
    /// acquire each, no restart (restarts are checked separately, see
    /// docs/safety.md).
    pub const fn small() -> Self {
        Self {
            lease: 5,
            max_delay: 1,
            fraction: 800,
            drift: 0,
            horizon: 10,
            clients: 2,
            pauses: 1,
            restarts: 0,
            stalls: 0,
            acquires: 1,
            second: 5,
            variant: Variant::Correct,
            protocol: 1,
            claims: 2,
            locks: 1,
            revokes: 1,
            closes: 1,
            read_stalls: 0,
            io_timeout: 1,
        }
    }

    /// The version 2 bounds of CI and of `monolock-model --protocol 2`:
    /// two sessions on one lock, lease 4 ticks, every message read within
    /// the tick it is written (`max_delay` 0), horizon 5 ticks, two claims
    /// in use and two ACQUIREs per session, one administrator act, one
    /// close, one stalled uplink, no pause.
    pub const fn sessions() -> Self {
        Self {
            lease: 4,
            second: 4,
            max_delay: 0,
            horizon: 5,
            pauses: 0,
            stalls: 1,
            acquires: 2,
            protocol: 2,
            ..Self::small()
        }
    }

    /// These bounds with one reader that may stall (its writer going on)
    /// and the server ending that session at io-timeout, and without the
    /// administrator's acts, closes and uplink stalls: together with those,
    /// the reader's stall takes the version 2 check from 0.3 to 8 million
    /// states, past what CI affords. In version 1 it keeps the pauses.
    pub const fn with_reader_stall(self) -> Self {
        Self {
            read_stalls: 1,
            revokes: 0,
            closes: 0,
            stalls: 0,
            ..self
        }
    }

    /// The heartbeat interval's upper end: a quarter lease.
    pub fn base(&self) -> u32 {
        (self.lease / 4).max(1)
    }

    /// The interval's floor (`min(100 ms, base / 4)`; at these scales the
    /// quarter of base).
    pub fn floor(&self) -> u32 {
        (self.base() / 4).max(1)
    }

    /// Ticks from `S` to the client's deadline, in real time: `f x lease`,
    /// stretched by the client's slow clock, rounded up: at an integer
    /// tick `t`, `t < S + x` exactly when `t < S + ceil(x)`, so the client
    /// believes on every tick it really believes on (rounding down, as an
    /// earlier version did, ended beliefs early and inflated the margins).
    pub fn abandon_after(&self) -> u32 {
        let scaled =
            u64::from(self.lease) * u64::from(self.fraction) * (1000 + u64::from(self.drift));
        u32::try_from(scaled.div_ceil(1_000_000)).unwrap_or(u32::MAX)
    }
}

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

/// What happened, for counterexamples.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// The server received the next message from a client.
    ServerReads(usize),
    /// A client received the next message from the server.
    ClientReads(usize),
    /// A client sent a heartbeat.
    Heartbeat(usize),
    /// A client opened a connection and sent ACQUIRE.
    Acquire(usize),
    /// A client stopped, or resumed.
    Pause(usize),
    /// A client's uplink stalled for good.
    Stall(usize),
    /// A client's reader stalled for good (its writer goes on).
    ReadStall(usize),
    /// The server ended a session on its own, a write to it blocked past
    /// io-timeout.
    IoTimeout(usize),
    /// The server process restarted (machine: without resetting peers).
    Restart {
        /// True: the machine, no reset reaches the clients.
        machine: bool,
    },
    /// One tick passed.
    Tick,
    /// Version 2: a client wrote a frame.
    Sends {
        /// The client.
        client: usize,
        /// What it wrote.
        frame: Frame,
    },
    /// Version 2: the server read a client's next frame.
    Takes {
        /// The client.
        client: usize,
        /// What the server read.
        frame: Frame,
    },
    /// Version 2: a client read the server's next frame.
    Reads {
        /// The client.
        client: usize,
        /// What it read.
        answer: Answer,
    },
    /// Version 2: an administrator force-released (held) or kicked
    /// (waiting) one claim.
    Revoke {
        /// The client whose session has the claim.
        client: usize,
        /// The claim id.
        claim: u8,
    },
    /// Version 2, the mistake `ReleasedBeforeHandOn` only: the table
    /// releases a claim whose RELEASED was already written.
    HandOn,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ServerReads(c) => write!(f, "server reads from c{c}"),
            Self::ClientReads(c) => write!(f, "c{c} reads"),
            Self::Heartbeat(c) => write!(f, "c{c} heartbeats"),
            Self::Acquire(c) => write!(f, "c{c} acquires"),
            Self::Pause(c) => write!(f, "c{c} pauses or resumes"),
            Self::Stall(c) => write!(f, "c{c}'s uplink stalls"),
            Self::ReadStall(c) => write!(f, "c{c}'s reader stalls (it goes on writing)"),
            Self::IoTimeout(c) => write!(f, "the server ends c{c}'s session at io-timeout"),
            Self::Restart { machine } => write!(f, "server restarts (machine: {machine})"),
            Self::Tick => write!(f, "tick"),
            Self::Sends { client, frame } => write!(f, "c{client} sends {frame}"),
            Self::Takes { client, frame } => write!(f, "server reads {frame} from c{client}"),
            Self::Reads { client, answer } => write!(f, "c{client} reads {answer}"),
            Self::Revoke { client, claim } => {
                write!(f, "administrator revokes c{client}'s claim {claim}")
            }
            Self::HandOn => write!(f, "server's table releases and hands on"),
        }
    }
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
