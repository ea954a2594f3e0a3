//! Lock values, observers, lookups and the election helper against the
//! real `monolock` binary (`MONOLOCK_BIN`, else the one built next to this
//! test), and the fallback against a small fake server that predates the
//! extension.

mod common;

use std::time::Duration;

use common::{BinaryServer as Server, PATIENCE, within};
use monolock_client::{
    Client, ElectionEvent, Error, LockState, LossReason, Observation, Protocol, ReleaseReason,
    StateEvent, Unsupported,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    time::{Instant, timeout},
};

const LEASE: Duration = Duration::from_secs(2);

async fn next_state(observation: &mut Observation) -> LockState {
    within("a state", observation.next())
        .await
        .expect("the observation goes on")
        .expect("a state")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_is_told_to_observers_and_lookups_and_set_value_replaces_it() {
    let server = Server::start().await;
    let holder = server.client();
    let follower = server.client();
    let lock = holder
        .acquire_with_value("leader", LEASE, "10.0.0.7:9000")
        .await
        .expect("acquire");

    let mut observation = follower.observe("leader").await.expect("observe");
    let initial = next_state(&mut observation).await;
    assert_eq!(
        (initial.event, initial.initial, initial.held, initial.token),
        (StateEvent::Held, true, true, lock.token())
    );
    assert_eq!(initial.value, "10.0.0.7:9000");
    assert!(initial.since.is_some(), "the grant's wall clock");

    lock.set_value("10.0.0.7:9001").await.expect("set_value");
    let replaced = next_state(&mut observation).await;
    assert_eq!(
        (replaced.event, replaced.token, replaced.value.as_str()),
        (StateEvent::Value, lock.token(), "10.0.0.7:9001")
    );
    // PROCLAIMED was read: every answer from now on carries the new value.
    let now = follower.holder("leader").await.expect("holder");
    assert_eq!(
        (now.event, now.held, now.token, now.value.as_str()),
        (StateEvent::Held, true, lock.token(), "10.0.0.7:9001")
    );
    assert!(!now.initial && !now.coalesced);

    let token = lock.token();
    lock.release().await.expect("release");
    let released = next_state(&mut observation).await;
    assert_eq!(
        (released.event, released.token, released.held),
        (StateEvent::Released, token, false)
    );
    assert_eq!(released.reason, Some(ReleaseReason::Released));
    assert_eq!(released.value, "", "a value is gone with its claim");
    let free = follower.holder("leader").await.expect("holder");
    assert_eq!(
        (free.event, free.held, free.value.as_str()),
        (StateEvent::Free, false, "")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_sees_every_hand_on_in_token_order() {
    let server = Server::start().await;
    let observer = server.client();
    let mut observation = observer.observe("queue").await.expect("observe");
    let initial = next_state(&mut observation).await;
    assert_eq!((initial.event, initial.initial), (StateEvent::Free, true));

    // Three holders in FIFO order, each on a client (a process) of its own.
    let clients: Vec<Client> = (0..3).map(|_| server.client()).collect();
    let first = clients[0]
        .acquire_with_value("queue", LEASE, "a")
        .await
        .expect("first");
    let mut waiters = Vec::new();
    for (client, value) in clients[1..].iter().zip(["b", "c"]) {
        let waiting = client
            .enqueue_with_value("queue", LEASE, value)
            .await
            .expect("enqueue");
        waiters.push(waiting);
    }
    let mut told = vec![next_state(&mut observation).await];
    drop(first);
    for waiter in waiters {
        let monolock_client::Enqueued::Waiting(waiter) = waiter else {
            panic!("the lock is held: the others wait");
        };
        let guard = within("the grant", waiter.granted())
            .await
            .expect("granted");
        told.push(next_state(&mut observation).await);
        told.push(next_state(&mut observation).await);
        drop(guard); // hands the lock on to the next waiter
    }
    told.push(next_state(&mut observation).await);
    let seen: Vec<(StateEvent, &str)> = told
        .iter()
        .map(|state| (state.event, state.value.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (StateEvent::Granted, "a"),
            (StateEvent::Released, ""),
            (StateEvent::Granted, "b"),
            (StateEvent::Released, ""),
            (StateEvent::Granted, "c"),
            (StateEvent::Released, ""),
        ]
    );
    let tokens: Vec<u64> = told.iter().map(|state| state.token).collect();
    assert!(
        tokens.windows(2).all(|pair| pair[0] <= pair[1]),
        "never an older holder after a newer one: {tokens:?}"
    );
    assert!(told.iter().all(|state| !state.coalesced));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observation_ends_with_an_error_naming_the_lock_when_the_server_goes() {
    let mut server = Server::start().await;
    let client = server.client();
    let mut observation = client.observe("gone").await.expect("observe");
    next_state(&mut observation).await;
    server.kill().await;
    let ended = within("the end", observation.next())
        .await
        .expect("one error")
        .expect_err("the session ended");
    let Error::ObservationEnded(ended_with) = &ended else {
        panic!("not an ObservationEnded: {ended:?}");
    };
    assert_eq!(ended_with.reason().name(), "connection");
    assert!(
        ended
            .to_string()
            .starts_with("observation of lock \"gone\" ended (connection): "),
        "{ended}"
    );
    assert!(observation.next().await.is_none(), "nothing after the end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_above_1024_bytes_is_refused_before_connecting() {
    // Nothing listens there: a connect would fail differently.
    let client = Client::new("127.0.0.1:9");
    let err = client
        .acquire_with_value("x", LEASE, "v".repeat(1025))
        .await
        .expect_err("too long");
    assert!(matches!(err, Error::InvalidValue { len: 1025 }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "value of 1025 bytes is above the maximum of 1024 bytes"
    );
    assert!(!err.is_temporary());
    let v1 = Client::new("127.0.0.1:9").with_protocol(Protocol::V1);
    let err = v1.observe("x").await.expect_err("v1 has no observers");
    assert!(
        matches!(err, Error::Unsupported(Unsupported::ProtocolV1)),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "protocol version 1 has no lock values or observers"
    );
    assert!(!err.is_temporary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_election_hands_leadership_on_and_every_candidate_names_the_new_leader() {
    let server = Server::start().await;
    let first = server.client();
    let second = server.client();
    let mut leading = first
        .elect("election", LEASE, "10.0.0.1:80")
        .expect("elect");
    let term = loop {
        match within("the first term", leading.next()).await {
            Some(Ok(ElectionEvent::StartedLeading(term))) => break term,
            Some(Ok(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    let mut following = second
        .elect("election", LEASE, "10.0.0.2:80")
        .expect("elect");
    let leader = match within("the leader named", following.next()).await {
        Some(Ok(ElectionEvent::NewLeader(leader))) => leader,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(
        (leader.token, leader.value.as_str()),
        (term.token(), "10.0.0.1:80")
    );

    let resigned_at = Instant::now();
    leading.resign().await;
    assert!(term.is_ended(), "the term ended with the resignation");
    let mut events = Vec::new();
    let new_term = loop {
        match within("the second term", following.next()).await {
            Some(Ok(ElectionEvent::StartedLeading(term))) => break term,
            Some(Ok(ElectionEvent::NewLeader(leader))) => events.push(leader),
            other => panic!("unexpected {other:?}"),
        }
    };
    println!(
        "leadership handed on {:?} after the resignation",
        resigned_at.elapsed()
    );
    assert!(new_term.token() > term.token());
    let named = match events.pop() {
        Some(leader) => leader,
        None => match within("itself named", following.next()).await {
            Some(Ok(ElectionEvent::NewLeader(leader))) => leader,
            other => panic!("unexpected {other:?}"),
        },
    };
    assert_eq!(
        (named.token, named.value.as_str()),
        (new_term.token(), "10.0.0.2:80")
    );
    following
        .set_value("10.0.0.2:81")
        .await
        .expect("set_value while leading");
    assert_eq!(
        second.holder("election").await.expect("holder").value,
        "10.0.0.2:81"
    );
    following.resign().await;
    assert!(new_term.is_ended());
}

/// A server of the version before the extension, as far as a client sees
/// it: OPENED, then ERROR 0x13 for the HELLO and the close; a session
/// without HELLO takes one plain ACQUIRE (ACQUIRED, token 7).
async fn older_server() -> (String, tokio::task::JoinHandle<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let task = tokio::spawn(async move {
        let mut connections = 0;
        while let Ok((stream, _)) = listener.accept().await {
            connections += 1;
            tokio::spawn(older_session(stream));
        }
        connections
    });
    (addr, task)
}

async fn older_session(mut stream: TcpStream) {
    let mut open = [0u8; 6];
    if stream.read_exact(&mut open).await.is_err() || open[..2] != [0x01, 0x02] {
        return;
    }
    let opened = [0x30, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 4, 0];
    let _ = stream.write_all(&opened).await;
    let mut kind = [0u8; 1];
    if stream.read_exact(&mut kind).await.is_err() {
        return;
    }
    if kind[0] == 0x24 {
        let _ = stream.write_all(b"\x13\x13\x14unknown message type").await;
        return;
    }
    // A plain ACQUIRE: claim u32, mode u8, name_len u8, name.
    let mut head = [0u8; 6];
    if kind[0] != 0x21 || stream.read_exact(&mut head).await.is_err() {
        return;
    }
    let mut name = vec![0u8; usize::from(head[5])];
    if stream.read_exact(&mut name).await.is_err() {
        return;
    }
    let mut acquired = vec![0x31];
    acquired.extend_from_slice(&head[..4]);
    acquired.extend_from_slice(&7u64.to_be_bytes());
    let _ = stream.write_all(&acquired).await;
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_server_is_unsupported_for_values_and_observers_and_plain_locks_still_work() {
    let (addr, _server) = older_server().await;
    let client = Client::new(addr.clone());
    let message = format!(
        "{addr} does not support lock values and observers (the server is older than this \
         client): upgrade the server"
    );
    let err = client
        .acquire_with_value("a", LEASE, "10.0.0.7:9000")
        .await
        .expect_err("no values there");
    assert!(matches!(err, Error::Unsupported(_)), "{err:?}");
    assert_eq!(err.to_string(), message);
    assert!(!err.is_temporary(), "upgrade the server: not a retry");
    // Remembered: a plain lock opens a plain session at once.
    let lock = within("a plain lock", client.acquire("a", LEASE))
        .await
        .expect("plain locks work as before");
    assert_eq!(lock.token(), 7);
    let err = lock.set_value("x").await.expect_err("no PROCLAIM there");
    assert_eq!(err.to_string(), message);
    let err = client.observe("a").await.expect_err("no observers there");
    assert!(matches!(err, Error::Unsupported(_)), "{err:?}");
    let err = client.holder("a").await.expect_err("no lookups there");
    assert_eq!(err.to_string(), message);
    assert!(lock.is_held(), "never a loss");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_client_learns_the_fallback_on_its_first_plain_lock() {
    let (addr, _server) = older_server().await;
    let client = Client::new(addr);
    // The first session asks (HELLO), is told 0x13, and the claim goes to
    // a plain session: the caller sees a grant, not an error.
    let lock = timeout(PATIENCE, client.acquire("a", LEASE))
        .await
        .expect("in time")
        .expect("granted on the plain session");
    assert_eq!(lock.token(), 7);
    assert!(
        !matches!(lock.loss(), Some(LossReason::Server { .. })),
        "the refused HELLO is no loss"
    );
}

#[test]
fn the_blocking_client_has_values_observations_lookups_and_elections() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime to start the server");
    let server = runtime.block_on(Server::start());
    let addr = server.serving.addr.to_string();
    let client = monolock_client::blocking::Client::new(addr.clone()).expect("client");
    let mut observation = client.observe("blocking").expect("observe");
    let mut next = || observation.next().expect("a state").expect("no error");
    assert_eq!(next().event, StateEvent::Free);
    let lock = client
        .acquire_with_value("blocking", LEASE, "h:1")
        .expect("acquire");
    let granted = next();
    assert_eq!(
        (granted.event, granted.value.as_str()),
        (StateEvent::Granted, "h:1")
    );
    lock.set_value("h:2").expect("set_value");
    let replaced = next();
    assert_eq!(
        (replaced.event, replaced.value.as_str()),
        (StateEvent::Value, "h:2")
    );
    assert_eq!(client.holder("blocking").expect("holder").value, "h:2");
    drop(lock);
    assert_eq!(next().event, StateEvent::Released);

    let candidate = monolock_client::blocking::Client::new(addr).expect("client");
    let mut election = candidate.elect("blocking", LEASE, "h:3").expect("elect");
    let term = loop {
        match election.next() {
            Some(Ok(ElectionEvent::StartedLeading(term))) => break term,
            Some(Ok(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    let granted = next();
    assert_eq!(
        (granted.token, granted.value.as_str()),
        (term.token(), "h:3")
    );
    election.resign().expect("resign");
    assert!(term.is_ended());
    assert_eq!(next().event, StateEvent::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_stops_leading_before_the_next_one_starts() {
    let server = Server::start().await;
    let proxy = common::Proxy::start(server.serving.addr).await;
    let mut cut_off = proxy
        .client()
        .elect("cut", LEASE, "10.0.0.1:80")
        .expect("elect");
    let term = loop {
        match within("the first term", cut_off.next()).await {
            Some(Ok(ElectionEvent::StartedLeading(term))) => break term,
            Some(Ok(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    let mut next = server
        .client()
        .elect("cut", LEASE, "10.0.0.2:80")
        .expect("elect");
    match within("the leader named", next.next()).await {
        Some(Ok(ElectionEvent::NewLeader(leader))) => assert_eq!(leader.token, term.token()),
        other => panic!("unexpected {other:?}"),
    }
    // A partition: the leader's heartbeats no longer reach the server.
    proxy.go_silent();
    let silent_at = Instant::now();
    let mut order = Vec::new();
    let mut stopped = false;
    let new_term = loop {
        tokio::select! {
            event = cut_off.next(), if !stopped => match event {
                Some(Ok(ElectionEvent::StoppedLeading)) => {
                    stopped = true;
                    order.push(("stopped", silent_at.elapsed()));
                }
                Some(Ok(_)) => {}
                other => panic!("unexpected {other:?}"),
            },
            event = next.next() => match event {
                Some(Ok(ElectionEvent::StartedLeading(term))) => {
                    order.push(("started", silent_at.elapsed()));
                    break term;
                }
                Some(Ok(_)) => {}
                other => panic!("unexpected {other:?}"),
            },
            () = tokio::time::sleep(PATIENCE) => panic!("nothing happened: {order:?}"),
        }
    };
    println!("after the partition (lease {LEASE:?}): {order:?}");
    assert!(term.is_ended());
    assert!(new_term.token() > term.token());
    assert_eq!(
        order.iter().map(|(what, _)| *what).collect::<Vec<_>>(),
        ["stopped", "started"],
        "the cut-off leader knows it lost before the next one leads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_past_the_bounds_is_refused_and_the_others_go_on() {
    let server =
        Server::start_with(&["--max-watches-per-session", "2", "--max-watches", "2"]).await;
    let client = server.client();
    let mut first = client.observe("a").await.expect("first");
    let _second = client.observe("b").await.expect("second");
    let err = client.observe("c").await.expect_err("past both bounds");
    // The session's bound moves the watch to a new session, where the
    // server's bound refuses it.
    assert_eq!(
        err.server_code(),
        Some(monolock_client::ErrorCode::SERVER_WATCH_LIMIT),
        "{err:?}"
    );
    assert_eq!(
        client.session_loads().len(),
        2,
        "a second session was tried"
    );
    next_state(&mut first).await;
    let lock = server
        .client()
        .acquire_with_value("a", LEASE, "x")
        .await
        .expect("acquire");
    let granted = next_state(&mut first).await;
    assert_eq!(
        (granted.event, granted.token),
        (StateEvent::Granted, lock.token())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_election_ends_its_term_and_releases_the_lock() {
    let server = Server::start().await;
    let client = server.client();
    let mut election = client.elect("dropped", LEASE, "a").expect("elect");
    let term = loop {
        match within("the term", election.next()).await {
            Some(Ok(ElectionEvent::StartedLeading(term))) => break term,
            Some(Ok(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    drop(election);
    within("the term ends with the election", term.ended()).await;
    let next = within("the lock is free again", client.acquire("dropped", LEASE))
        .await
        .expect("acquire");
    assert!(next.token() > term.token());
}
