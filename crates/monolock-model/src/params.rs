//! What both models share: their parameters, the mistakes they can be
//! switched to, and the steps of a trace.

use std::fmt;

use crate::frames::{Answer, Frame};

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
    /// Version 2, with an observer: a watch whose changes were dropped (its
    /// outbox was full) is pushed, once its queue is taken, the state as of
    /// when it was marked, while the changes queued since go out first:
    /// an older holder after a newer one.
    CoalescedPushGoesBack,
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
    pub const SESSIONS: [Self; 6] = [
        Self::ReleasedBeforeHandOn,
        Self::ClaimOutlivesSession,
        Self::GrantedConfirmsPing,
        Self::GrantedAfterRelease,
        Self::HandOnAtIoTimeout,
        Self::CoalescedPushGoesBack,
    ];

    /// Whether the mistake shows only when a client's reader may stall (see
    /// [`Params::with_reader_stall`]).
    pub fn needs_reader_stall(self) -> bool {
        self == Self::HandOnAtIoTimeout
    }

    /// Whether the mistake shows only with an observer (see
    /// [`Params::with_observer`]).
    pub fn needs_observer(self) -> bool {
        self == Self::CoalescedPushGoesBack
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
    /// Version 2: observers of lock `A` (0 or 1), a session of their own
    /// with one watch, reading (and its connection taking the server's
    /// pushes) at any pace, however slow.
    pub observers: u8,
    /// Version 2: STATE pushes the server keeps queued for a session and
    /// not yet taken by its connection (the protocol's 256, scaled down);
    /// a change past it marks the watch, which is later told the state
    /// then, coalesced.
    pub outbox: u8,
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
            observers: 0,
            outbox: 1,
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

    /// These bounds with an observer of lock `A` whose outbox holds one
    /// push, and without the administrator's acts, closes and uplink
    /// stalls (the observer's own steps multiply the states).
    pub const fn with_observer(self) -> Self {
        Self {
            observers: 1,
            outbox: 1,
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
    /// Version 2: the observer's connection took what the server queued
    /// for its watch (and the coalesced state, if it was marked).
    ObserverTakes,
    /// Version 2: the observer read its next STATE.
    ObserverReads {
        /// Held (GRANTED, HELD) or not (RELEASED, FREE).
        held: bool,
        /// Its token.
        token: u32,
        /// Flagged COALESCED.
        coalesced: bool,
    },
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
            Self::ObserverTakes => write!(f, "the observer's connection takes its pushes"),
            Self::ObserverReads {
                held,
                token,
                coalesced,
            } => write!(
                f,
                "the observer reads STATE {} token={token}{}",
                if *held { "HELD" } else { "FREE" },
                if *coalesced { " COALESCED" } else { "" }
            ),
        }
    }
}
