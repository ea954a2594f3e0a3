//! One session with values and watches against a reference model, on
//! random frame sequences over a real socket: every frame gets the reply
//! the model says, in order; every watch is told exactly the changes the
//! model makes to its lock, in order (INITIAL first, a hand-on as RELEASED
//! then GRANTED, each with its value), its tokens never going back; a
//! waiting claim's GRANTED push comes for exactly the claims the model
//! promotes, in order (docs/protocol.md, "Version 2 extension: values and
//! observers").

mod common;
#[path = "common/ext.rs"]
mod ext_client;

use std::collections::{HashMap, VecDeque};

use common::TestServer;
use ext_client::RawExt;
use monolock_proto::{
    ErrorCode, LockName,
    ext::{ClientFrame as ExtFrame, Response, ServerFrame as ExtServer, StateEvent},
    v2::{self, ClientFrame, Mode, ServerFrame},
};
use monolock_server::ServerConfig;
use proptest::prelude::*;

const NAMES: [&str; 2] = ["a", "b"];
const VALUES: [&str; 3] = ["", "10.0.0.7:9000", "{\"id\":2}"];
const MAX_WATCHES: u32 = 2;

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        claim: u32,
        try_only: bool,
        name: usize,
        value: usize,
    },
    Proclaim {
        claim: u32,
        value: usize,
    },
    Release(u32),
    Observe {
        watch: u32,
        name: usize,
    },
    Unobserve(u32),
    Lookup(usize),
    Ping,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..=4u32, any::<bool>(), 0..NAMES.len(), 0..VALUES.len()).prop_map(
            |(claim, try_only, name, value)| Op::Acquire { claim, try_only, name, value }
        ),
        2 => (1..=4u32, 0..VALUES.len()).prop_map(|(claim, value)| Op::Proclaim { claim, value }),
        3 => (1..=4u32).prop_map(Op::Release),
        2 => (1..=3u32, 0..NAMES.len()).prop_map(|(watch, name)| Op::Observe { watch, name }),
        1 => (1..=3u32).prop_map(Op::Unobserve),
        1 => (0..NAMES.len()).prop_map(Op::Lookup),
        1 => Just(Op::Ping),
    ]
}

/// What a frame is expected to be answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reply {
    Acquired(u32),
    Waiting(u32),
    Busy(u32),
    Released(u32),
    Refused(u32, ErrorCode),
    Proclaimed(u32),
    Observing(u32),
    Unobserved(u32),
    /// LOCK_STATE: held (with this value) or free.
    LockState(Option<String>),
    Pong,
}

/// A change or state as a watch is told it, without token and time.
type Told = (StateEvent, String, bool);

#[derive(Default)]
struct Model {
    /// Claim id -> (lock, value, held).
    claims: HashMap<u32, (usize, String, bool)>,
    /// Lock -> its holder's claim id and its queue.
    locks: HashMap<usize, (u32, VecDeque<u32>)>,
    /// Watch id -> (lock, index of its instance in `told`).
    watches: HashMap<u32, (usize, usize)>,
    /// What each watch instance must be told, in order, by instance.
    told: Vec<(u32, Vec<Told>)>,
    /// Claims the model promoted, in order (their GRANTED pushes).
    promoted: Vec<u32>,
}

impl Model {
    fn tell(&mut self, lock: usize, told: Told) {
        for (watched, instance) in self.watches.values() {
            if *watched == lock {
                self.told[*instance].1.push(told.clone());
            }
        }
    }

    fn state_of(&self, lock: usize) -> Option<String> {
        self.locks
            .get(&lock)
            .map(|(holder, _)| self.claims[holder].1.clone())
    }

    fn apply(&mut self, op: &Op) -> Reply {
        match *op {
            Op::Acquire {
                claim,
                try_only,
                name,
                value,
            } => {
                if self.claims.contains_key(&claim) {
                    return Reply::Refused(claim, ErrorCode::CLAIM_IN_USE);
                }
                if let Some((_, queue)) = self.locks.get_mut(&name) {
                    if try_only {
                        return Reply::Busy(claim);
                    }
                    queue.push_back(claim);
                    self.claims
                        .insert(claim, (name, VALUES[value].to_owned(), false));
                    return Reply::Waiting(claim);
                }
                self.locks.insert(name, (claim, VecDeque::new()));
                self.claims
                    .insert(claim, (name, VALUES[value].to_owned(), true));
                self.tell(name, (StateEvent::Granted, VALUES[value].to_owned(), false));
                Reply::Acquired(claim)
            }
            Op::Proclaim { claim, value } => {
                let Some((lock, old, held)) = self.claims.get_mut(&claim) else {
                    return Reply::Refused(claim, ErrorCode::UNKNOWN_CLAIM);
                };
                VALUES[value].clone_into(old);
                if *held {
                    let lock = *lock;
                    self.tell(lock, (StateEvent::Value, VALUES[value].to_owned(), false));
                }
                Reply::Proclaimed(claim)
            }
            Op::Release(claim) => {
                let Some((lock, _, held)) = self.claims.remove(&claim) else {
                    return Reply::Refused(claim, ErrorCode::UNKNOWN_CLAIM);
                };
                if !held {
                    if let Some((_, queue)) = self.locks.get_mut(&lock) {
                        queue.retain(|waiting| *waiting != claim);
                    }
                    return Reply::Released(claim);
                }
                self.tell(lock, (StateEvent::Released, String::new(), false));
                let next = self
                    .locks
                    .get_mut(&lock)
                    .and_then(|(_, queue)| queue.pop_front());
                match next {
                    Some(next) => {
                        let queue = self.locks.remove(&lock).map(|(_, q)| q).unwrap_or_default();
                        self.locks.insert(lock, (next, queue));
                        let entry = self.claims.get_mut(&next).expect("a queued claim");
                        entry.2 = true;
                        let value = entry.1.clone();
                        self.promoted.push(next);
                        self.tell(lock, (StateEvent::Granted, value, false));
                    }
                    None => {
                        self.locks.remove(&lock);
                    }
                }
                Reply::Released(claim)
            }
            Op::Observe { watch, name } => {
                if self.watches.contains_key(&watch) {
                    return Reply::Refused(watch, ErrorCode::CLAIM_IN_USE);
                }
                if self.watches.len() >= MAX_WATCHES as usize {
                    return Reply::Refused(watch, ErrorCode::TOO_MANY_WATCHES);
                }
                let initial = match self.state_of(name) {
                    Some(value) => (StateEvent::Held, value, true),
                    None => (StateEvent::Free, String::new(), true),
                };
                self.told.push((watch, vec![initial]));
                self.watches.insert(watch, (name, self.told.len() - 1));
                Reply::Observing(watch)
            }
            Op::Unobserve(watch) => {
                if self.watches.remove(&watch).is_none() {
                    return Reply::Refused(watch, ErrorCode::UNKNOWN_CLAIM);
                }
                Reply::Unobserved(watch)
            }
            Op::Lookup(name) => Reply::LockState(self.state_of(name)),
            Op::Ping => Reply::Pong,
        }
    }
}

fn frame_of(op: &Op) -> Vec<u8> {
    match *op {
        Op::Acquire {
            claim,
            try_only,
            name,
            value,
        } => ExtFrame::AcquireValue {
            claim,
            mode: if try_only { Mode::Try } else { Mode::Wait },
            name: LockName::new(NAMES[name]).expect("name"),
            value: VALUES[value].to_owned(),
        }
        .to_bytes(),
        Op::Proclaim { claim, value } => ExtFrame::Proclaim {
            claim,
            value: VALUES[value].to_owned(),
        }
        .to_bytes(),
        Op::Release(claim) => v2::release_frame(claim).to_vec(),
        Op::Observe { watch, name } => ExtFrame::Observe {
            watch,
            name: LockName::new(NAMES[name]).expect("name"),
        }
        .to_bytes(),
        Op::Unobserve(watch) => ExtFrame::Unobserve { watch }.to_bytes(),
        Op::Lookup(name) => ExtFrame::Lookup {
            name: LockName::new(NAMES[name]).expect("name"),
        }
        .to_bytes(),
        Op::Ping => ClientFrame::Ping.to_bytes(),
    }
}

/// What the session saw: replies in order, what each watch instance was
/// told (with tokens), and the claims pushed GRANTED.
#[derive(Default)]
struct Seen {
    replies: Vec<Reply>,
    told: Vec<(u32, Vec<(Told, u64)>)>,
    open: HashMap<u32, usize>,
    granted: Vec<u32>,
}

impl Seen {
    /// Records `frame`; true when it is a reply.
    fn record(&mut self, frame: Response) -> bool {
        let reply = match frame {
            Response::Ext(ExtServer::State { watch, state }) => {
                let instance = *self.open.get(&watch).expect("STATE of a watch in use");
                let told = (state.event, state.value.clone(), state.initial());
                assert!(!state.coalesced(), "nothing to coalesce here: {state:?}");
                self.told[instance].1.push((told, state.token));
                return false;
            }
            Response::Base(ServerFrame::Granted { claim, .. }) => {
                self.granted.push(claim);
                return false;
            }
            Response::Base(ServerFrame::Acquired { claim, .. }) => Reply::Acquired(claim),
            Response::Base(ServerFrame::Waiting { claim }) => Reply::Waiting(claim),
            Response::Base(ServerFrame::Busy { claim }) => Reply::Busy(claim),
            Response::Base(ServerFrame::Released { claim }) => Reply::Released(claim),
            Response::Base(ServerFrame::Refused { claim, code, .. }) => Reply::Refused(claim, code),
            Response::Base(ServerFrame::Pong) => Reply::Pong,
            Response::Ext(ExtServer::Proclaimed { claim }) => Reply::Proclaimed(claim),
            Response::Ext(ExtServer::Observing { watch }) => {
                self.told.push((watch, Vec::new()));
                self.open.insert(watch, self.told.len() - 1);
                Reply::Observing(watch)
            }
            Response::Ext(ExtServer::Unobserved { watch }) => {
                self.open.remove(&watch);
                Reply::Unobserved(watch)
            }
            Response::Ext(ExtServer::LockState(state)) => {
                Reply::LockState((state.event == StateEvent::Held).then(|| state.value.clone()))
            }
            other => panic!("unexpected frame {other:?}"),
        };
        self.replies.push(reply);
        true
    }
}

async fn run(ops: Vec<Op>) {
    let config = ServerConfig::default().with_max_watches_per_session(MAX_WATCHES);
    let server = TestServer::start_with(config).await;
    let (mut client, _) = RawExt::open(server.addr, 60_000).await;
    let mut model = Model::default();
    let mut expected = Vec::new();
    let mut seen = Seen::default();
    for op in &ops {
        expected.push(model.apply(op));
        client.send_raw(&frame_of(op)).await;
        while !seen.record(client.recv().await) {}
    }
    // Every watch's pushes come before its UNOBSERVED.
    let mut open: Vec<u32> = model.watches.keys().copied().collect();
    open.sort_unstable();
    for watch in open {
        let op = Op::Unobserve(watch);
        expected.push(model.apply(&op));
        client.send_raw(&frame_of(&op)).await;
        while !seen.record(client.recv().await) {}
    }
    assert_eq!(seen.replies, expected, "replies for {ops:?}");
    assert_eq!(seen.granted, model.promoted, "GRANTED pushes for {ops:?}");
    assert_eq!(seen.told.len(), model.told.len());
    for ((watch, got), (model_watch, want)) in seen.told.iter().zip(&model.told) {
        assert_eq!(watch, model_watch);
        let told: Vec<Told> = got.iter().map(|(told, _)| told.clone()).collect();
        assert_eq!(&told, want, "watch {watch} for {ops:?}");
        let tokens: Vec<u64> = got.iter().map(|(_, token)| *token).collect();
        assert!(tokens.is_sorted(), "watch {watch} went back: {tokens:?}");
    }
    server.stop_and_drop(client).await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn one_session_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(run(ops));
    }
}
