//! The v2 session state machine against a reference model, on random
//! frame sequences (valid frames, refused ones, and bytes that end the
//! session), delivered in random chunks over an in-memory pipe.
//!
//! For one session alone on a server the replies are fully determined:
//! every frame gets exactly one reply, in order, exactly as the model says;
//! every grant's token is greater than the one before; a claim's GRANTED
//! never follows its RELEASED; and when the connection closes, nothing is
//! left in the table but, after a byte that ended the session, the locks
//! its claims held (kept to the end of its lease: docs/protocol.md, "How a
//! claim ends"). No input panics the server.

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    time::Duration,
};

use monolock_proto::{
    ErrorCode, LockName,
    v2::{self, ClientFrame, Mode, ServerFrame},
};
use monolock_server::{Server, ServerConfig};
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MAX_CLAIMS: u32 = 4;
const NAMES: [&str; 3] = ["a", "b", "c"];

#[derive(Clone, Debug)]
enum Op {
    Acquire(u32, bool, usize),
    Release(u32),
    Ping,
    /// Raw bytes: a refused ACQUIRE, or a byte that ends the session.
    Raw(Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u32..6, any::<bool>(), 0..NAMES.len()).prop_map(|(c, t, n)| Op::Acquire(c, t, n)),
        6 => (0u32..6).prop_map(Op::Release),
        2 => Just(Op::Ping),
        1 => prop_oneof![
            Just(vec![0x21, 0, 0, 0, 1, 9, 1, b'a']),
            Just(vec![0x21, 0, 0, 0, 2, 0, 0]),
            Just(vec![0x21, 0, 0, 0, 3, 1, 1, 0xff]),
        ]
        .prop_map(Op::Raw),
        1 => prop_oneof![Just(vec![0x02]), Just(vec![0x7f]), Just(vec![0x01])].prop_map(Op::Raw),
    ]
}

/// What the server must answer, frame by frame, and the grants it pushes.
#[derive(Default)]
struct Model {
    claims: HashMap<u32, (usize, bool)>,
    holder: HashMap<usize, u32>,
    queues: HashMap<usize, VecDeque<u32>>,
    replies: Vec<ServerFrame>,
    pushes: Vec<u32>,
    ended: Option<ErrorCode>,
}

impl Model {
    fn apply(&mut self, op: &Op) {
        if self.ended.is_some() {
            return;
        }
        match op {
            Op::Ping => self.replies.push(ServerFrame::Pong),
            Op::Raw(bytes) => match v2::decode_request(bytes) {
                Ok(Some((v2::Request::BadAcquire { claim, code, .. }, _))) => {
                    self.refuse(claim, code);
                }
                Err(err) => self.ended = Some(err.code),
                other => panic!("unexpected raw frame {other:?}"),
            },
            &Op::Acquire(claim, try_only, name) => {
                if self.claims.contains_key(&claim) {
                    self.refuse(claim, ErrorCode::CLAIM_IN_USE);
                } else if self.claims.len() >= MAX_CLAIMS as usize {
                    self.refuse(claim, ErrorCode::TOO_MANY_CLAIMS);
                } else if self.holder.contains_key(&name) {
                    if try_only {
                        self.replies.push(ServerFrame::Busy { claim });
                    } else {
                        self.replies.push(ServerFrame::Waiting { claim });
                        self.claims.insert(claim, (name, false));
                        self.queues.entry(name).or_default().push_back(claim);
                    }
                } else {
                    // The token is checked apart.
                    self.replies.push(ServerFrame::Acquired { claim, token: 0 });
                    self.claims.insert(claim, (name, true));
                    self.holder.insert(name, claim);
                }
            }
            &Op::Release(claim) => {
                let Some((name, held)) = self.claims.remove(&claim) else {
                    self.refuse(claim, ErrorCode::UNKNOWN_CLAIM);
                    return;
                };
                self.replies.push(ServerFrame::Released { claim });
                let queue = self.queues.entry(name).or_default();
                if held {
                    self.holder.remove(&name);
                    if let Some(next) = queue.pop_front() {
                        self.holder.insert(name, next);
                        self.claims.insert(next, (name, true));
                        self.pushes.push(next);
                    }
                } else {
                    queue.retain(|&c| c != claim);
                }
            }
        }
    }

    fn refuse(&mut self, claim: u32, code: ErrorCode) {
        self.replies.push(ServerFrame::Refused {
            claim,
            code,
            reason: String::new(),
        });
    }
}

fn encode(op: &Op, out: &mut Vec<u8>) {
    match op {
        &Op::Acquire(claim, try_only, name) => ClientFrame::Acquire {
            claim,
            mode: if try_only { Mode::Try } else { Mode::Wait },
            name: LockName::new(NAMES[name]).expect("name"),
        }
        .encode(out),
        &Op::Release(claim) => out.extend_from_slice(&v2::release_frame(claim)),
        Op::Ping => out.push(v2::msg::PING),
        Op::Raw(bytes) => out.extend_from_slice(bytes),
    }
}

/// Runs one session over a pipe: OPEN, `bytes` in `chunks`, then close.
/// Returns every frame the server wrote after OPENED.
async fn session(bytes: Vec<u8>, chunks: Vec<usize>) -> (Vec<ServerFrame>, Server) {
    let server = Server::new(ServerConfig::default().with_max_claims_per_session(MAX_CLAIMS));
    let handle = server.handle();
    let (client, served) = tokio::io::duplex(64 * 1024);
    let addr: SocketAddr = ([127, 0, 0, 1], 4000).into();
    let serving = tokio::spawn(async move { handle.serve_stream(served, addr, "").await });
    let (mut reader, mut writer) = tokio::io::split(client);
    let writing = tokio::spawn(async move {
        let open = ClientFrame::Open {
            lease: monolock_proto::Lease::from_millis(60_000).expect("lease"),
        };
        let _ = writer.write_all(&open.to_bytes()).await;
        let mut at = 0;
        for chunk in chunks.into_iter().chain(std::iter::once(usize::MAX)) {
            let end = at + chunk.max(1).min(bytes.len() - at);
            if writer.write_all(&bytes[at..end]).await.is_err() {
                return;
            }
            at = end;
            if at == bytes.len() {
                break;
            }
            tokio::task::yield_now().await;
        }
        let _ = writer.shutdown().await;
        // Keep the write side's half open until the server closes.
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), reader.read_to_end(&mut out))
        .await
        .expect("the session ends")
        .expect("read");
    tokio::time::timeout(Duration::from_secs(20), serving)
        .await
        .expect("the session's task ends")
        .expect("no panic");
    writing.abort();
    let mut frames = Vec::new();
    let mut buf = out.as_slice();
    while let Some((frame, used)) = v2::decode_response(buf).expect("v2 frames only") {
        frames.push(frame);
        buf = &buf[used..];
    }
    assert!(buf.is_empty(), "a partial frame at the end: {buf:?}");
    assert!(matches!(frames.first(), Some(ServerFrame::Opened { .. })));
    frames.remove(0);
    (frames, server)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn the_session_answers_as_the_model_says(
        ops in proptest::collection::vec(op(), 0..40),
        chunks in proptest::collection::vec(1usize..24, 0..20),
    ) {
        let mut model = Model::default();
        let mut bytes = Vec::new();
        for op in &ops {
            model.apply(op);
            encode(op, &mut bytes);
        }
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let (frames, server) = runtime.block_on(session(bytes, chunks));
        let mut replies = Vec::new();
        let mut pushes = Vec::new();
        let mut last_token = 0;
        let mut waiting = std::collections::HashSet::new();
        let mut ended = None;
        for frame in frames {
            match frame {
                ServerFrame::Granted { claim, token } => {
                    prop_assert!(token > last_token);
                    last_token = token;
                    // Only a claim that is waiting is granted: never one
                    // already released.
                    prop_assert!(waiting.remove(&claim), "GRANTED {} while not waiting", claim);
                    pushes.push(claim);
                }
                ServerFrame::Acquired { claim, token } => {
                    prop_assert!(token > last_token);
                    last_token = token;
                    replies.push(ServerFrame::Acquired { claim, token: 0 });
                }
                ServerFrame::Refused { claim, code, .. } => {
                    replies.push(ServerFrame::Refused { claim, code, reason: String::new() });
                }
                ServerFrame::Released { claim } => {
                    waiting.remove(&claim);
                    replies.push(ServerFrame::Released { claim });
                }
                ServerFrame::Waiting { claim } => {
                    waiting.insert(claim);
                    replies.push(ServerFrame::Waiting { claim });
                }
                ServerFrame::Error { code, .. } => ended = Some(code),
                ServerFrame::Revoked { .. } | ServerFrame::Opened { .. } => {
                    prop_assert!(false, "unexpected {frame:?}");
                }
                other => replies.push(other),
            }
        }
        prop_assert_eq!(replies, model.replies);
        prop_assert_eq!(pushes, model.pushes);
        prop_assert_eq!(ended, model.ended);
        let handle = server.handle();
        // A session the server ended keeps its held locks until its lease
        // would have run out; its waiting claims left their queues.
        let kept = if model.ended.is_some() { model.holder.len() } else { 0 };
        prop_assert_eq!(handle.counts().locks, kept);
        for (&name, &claim) in &model.holder {
            if model.ended.is_some() {
                let lock = handle.lock(NAMES[name]).expect("kept");
                prop_assert_eq!(lock.holder.claim.map(|c| c.claim), Some(claim));
            }
        }
        prop_assert_eq!(handle.counts().waiters, 0);
        prop_assert_eq!(handle.sessions_v2(), 0);
    }
}
