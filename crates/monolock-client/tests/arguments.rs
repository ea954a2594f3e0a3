//! Bad arguments are refused before anything is dialed, by every entry
//! point, async and blocking: no connection is opened, so no claim can be
//! left behind in a queue by an argument found bad later.

use std::{
    net::{SocketAddr, TcpListener},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use monolock_client::{Client, Error, RetryPolicy, blocking};

/// A listener that counts the connections it accepts (and holds them).
fn counting_listener() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            counter.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    (addr, accepted)
}

fn is_bad_argument(err: &Error) -> bool {
    matches!(err, Error::InvalidName(_) | Error::InvalidLease { .. })
}

const BAD: [(&str, Duration); 3] = [
    ("", Duration::from_secs(2)),
    ("x", Duration::ZERO),
    ("x", Duration::from_secs(60 * 24 * 3600)),
];

#[tokio::test]
async fn async_entry_points_refuse_bad_arguments_before_dialing() {
    let (addr, accepted) = counting_listener();
    let client =
        Client::new(addr.to_string()).with_retry_policy(RetryPolicy::new().with_max_attempts(3));
    let long = "n".repeat(256);
    let mut cases = BAD.to_vec();
    cases.push((long.as_str(), Duration::from_secs(2)));
    for (name, lease) in cases {
        let errors = [
            client.acquire(name, lease).await.err(),
            client.try_acquire(name, lease).await.err(),
            client
                .acquire_timeout(name, lease, Duration::from_secs(5))
                .await
                .err(),
            client.acquire_retrying(name, lease).await.err(),
            client.enqueue(name, lease).await.err(),
            client.run_locked(name, lease, |_| async {}).await.err(),
        ];
        for err in errors {
            let err = err.expect("refused");
            assert!(is_bad_argument(&err), "{name:?} {lease:?}: {err}");
        }
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "nothing was dialed");
}

#[test]
fn blocking_entry_points_refuse_bad_arguments_before_dialing() {
    let (addr, accepted) = counting_listener();
    let client = blocking::Client::new(addr.to_string()).expect("client");
    for (name, lease) in BAD {
        let errors = [
            client.acquire(name, lease).err(),
            client.try_acquire(name, lease).err(),
            client
                .acquire_timeout(name, lease, Duration::from_secs(5))
                .err(),
            client.acquire_retrying(name, lease).err(),
            client.run_locked(name, lease, |_| ()).err(),
        ];
        for err in errors {
            let err = err.expect("refused");
            assert!(is_bad_argument(&err), "{name:?} {lease:?}: {err}");
        }
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "nothing was dialed");
}
