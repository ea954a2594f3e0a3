//! The behaviour every monolock client shares (a confirmed release, leases
//! and addresses checked before dialing, wrong ports as connect errors,
//! loss messages naming the lock), against the real server over TCP.

mod common;

use std::time::Duration;

use common::{TestServer, within};
use monolock_client::{Client, Error, LossReason, Protocol, WrongPeer};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

const LEASE: Duration = Duration::from_secs(5);

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_right_after_a_release_succeeds_at_the_first_attempt(protocol) {
    // v2 reads RELEASED; v1 half-closes and reads until the server's EOF.
    // A release that returned before the server released loses this race
    // now and then: 100 handovers between two clients catch it.
    let server = TestServer::start().await;
    let clients = [
        server.client().with_protocol(protocol),
        server.client().with_protocol(protocol),
    ];
    let mut holder = clients[0].acquire("handover", LEASE).await.expect("acquire");
    for round in 0..100 {
        let previous = holder.token();
        holder.release().await.expect("release");
        holder = clients[(round + 1) % 2]
            .try_acquire("handover", LEASE)
            .await
            .expect("try_acquire")
            .unwrap_or_else(|| panic!("busy right after a release returned (round {round})"));
        assert!(holder.token() > previous);
    }
    holder.release().await.expect("release");
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_try_has_left_the_queue_when_it_returns(protocol) {
    let server = TestServer::start().await;
    let client = server.client().with_protocol(protocol);
    let holder = client.acquire("busy", LEASE).await.expect("acquire");
    for _ in 0..20 {
        assert!(client.try_acquire("busy", LEASE).await.expect("try").is_none());
        // No `eventually`: v1 waits for the server's EOF before returning.
        assert_eq!(server.waiters("busy"), 0, "a busy try is still queued");
    }
    holder.release().await.expect("release");
    assert!(server.lock("busy").is_none(), "a busy try was promoted");
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_names_the_lock_and_its_reason(protocol) {
    let server = TestServer::start().await;
    let guard = server
        .client()
        .with_protocol(protocol)
        .acquire("named/loss", LEASE)
        .await
        .expect("acquire");
    server.handle.force_release("named/loss").expect("held");
    let reason = within("the loss", guard.lost()).await;
    assert_eq!(reason.name(), "forced");
    let lost = guard.check().expect_err("lost");
    let message = lost.to_string();
    assert!(message.starts_with("lock \"named/loss\" lost (forced): "), "{message}");
    assert_eq!(lost.name().as_str(), "named/loss");
    let err = guard.release().await.expect_err("a lost lock");
    assert!(matches!(err, Error::LockLost(_)), "{err:?}");
    assert!(err.to_string().starts_with("lock \"named/loss\" lost (forced): "), "{err}");
}
}

#[test]
fn loss_reasons_have_the_shared_names() {
    use monolock_client::ErrorCode;
    let server = |code| LossReason::Server {
        code,
        reason: String::new(),
    };
    assert_eq!(
        LossReason::HeartbeatTimeout { lease: LEASE }.name(),
        "expired"
    );
    assert_eq!(server(ErrorCode::CLOSED_BY_ADMIN).name(), "forced");
    assert_eq!(server(ErrorCode::SHUTTING_DOWN).name(), "shutdown");
    assert_eq!(server(ErrorCode::NOT_AUTHORIZED).name(), "server_error");
    assert_eq!(LossReason::ConnectionClosed.name(), "connection");
}

/// A listener that counts nothing and must see no connection: its address
/// refuses (nothing is bound to it once the socket is dropped).
async fn untouched() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    (listener, addr)
}

/// Fails if anything connected to `listener`.
async fn assert_untouched(listener: &TcpListener) {
    let accepted = tokio::time::timeout(Duration::from_millis(20), listener.accept()).await;
    assert!(accepted.is_err(), "something connected before the refusal");
}

#[tokio::test]
async fn leases_out_of_bounds_are_refused_before_dialing_naming_the_unit() {
    let (listener, addr) = untouched().await;
    let client = Client::new(&addr);
    for (lease, says) in [
        (
            Duration::from_millis(99),
            "lease 99 ms is below the minimum of 100 ms (leases are in milliseconds",
        ),
        (
            Duration::from_millis(3_600_001),
            "lease 3600001 ms is above the maximum of 1 hour (leases are in milliseconds",
        ),
        (
            Duration::from_micros(1_500_500),
            "lease 1.5005s is not a whole number of milliseconds (leases are in milliseconds",
        ),
    ] {
        for err in [
            client.acquire("x", lease).await.err(),
            client.try_acquire("x", lease).await.err(),
        ] {
            let err = err.expect("refused");
            assert!(matches!(err, Error::InvalidLease { .. }), "{err:?}");
            assert!(err.to_string().starts_with(says), "{err}");
            assert!(!err.is_temporary());
        }
    }
    assert_untouched(&listener).await;
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_bounds_themselves_are_taken(protocol) {
    let server = TestServer::start().await;
    let client = server.client().with_protocol(protocol);
    for lease in [Duration::from_millis(100), Duration::from_secs(3600)] {
        let guard = client.acquire("bounds", lease).await.expect("acquire");
        assert_eq!(guard.lease(), lease);
        guard.release().await.expect("release");
    }
}
}

#[tokio::test]
async fn an_address_with_a_scheme_is_refused_before_dialing() {
    let (listener, addr) = untouched().await;
    for scheme in ["http", "tcp"] {
        let written = format!("{scheme}://{addr}");
        let err = Client::new(&written)
            .acquire("x", LEASE)
            .await
            .expect_err("refused");
        assert_eq!(
            err.to_string(),
            format!("address \"{written}\": write host:port, without a scheme")
        );
        assert!(!err.is_temporary());
    }
    assert_untouched(&listener).await;
}

/// A listener answering every connection as `answer` does, until dropped.
async fn listener(answer: Option<&'static [u8]>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            if let Some(answer) = answer {
                let mut request = [0u8; 64];
                let _ = stream.read(&mut request).await;
                let _ = stream.write_all(answer).await;
            }
            held.push(stream);
        }
    });
    addr
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_port_is_a_connect_error_naming_it(protocol) {
    let addr = listener(Some(b"HTTP/1.1 400 Bad Request\r\n\r\n")).await;
    let client = Client::new(&addr).with_protocol(protocol);
    for err in [
        client.acquire("x", LEASE).await.err(),
        client.try_acquire("x", LEASE).await.err(),
    ] {
        let err = err.expect("refused");
        assert!(
            matches!(err, Error::WrongPeer { problem: WrongPeer::Http, .. }),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("{addr} is not a monolock server: an HTTP server answered")),
            "{err}"
        );
        assert!(!err.is_temporary());
    }
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_that_never_answers_is_a_temporary_connect_error(protocol) {
    // The lease's deadline (8 s) is far off: the connect timeout bounds
    // the wait for the first answer.
    let addr = listener(None).await;
    let client = Client::new(&addr)
        .with_protocol(protocol)
        .with_connect_timeout(Duration::from_millis(300));
    let err = client
        .acquire("x", Duration::from_secs(10))
        .await
        .expect_err("silent");
    assert!(
        matches!(err, Error::WrongPeer { problem: WrongPeer::Silent { .. }, .. }),
        "{err:?}"
    );
    assert_eq!(err.to_string(), format!("{addr} did not answer within 0.3 s"));
    assert!(err.is_temporary());
}
}

#[tokio::test]
async fn the_v1_protocol_is_one_connection_per_lock_and_v2_shares_one() {
    let server = TestServer::start().await;
    let v2 = server.client();
    let mut held = Vec::new();
    for i in 0..50 {
        held.push(
            v2.acquire(format!("many/{i}"), LEASE)
                .await
                .expect("acquire"),
        );
    }
    assert_eq!(v2.session_loads(), [50]);
    let v1 = server.client().with_protocol(Protocol::V1);
    for i in 50..60 {
        held.push(
            v1.acquire(format!("many/{i}"), LEASE)
                .await
                .expect("acquire"),
        );
    }
    assert!(v1.session_loads().is_empty());
    for guard in held {
        guard.release().await.expect("release");
    }
}
