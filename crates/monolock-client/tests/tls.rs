//! TLS and mTLS through `TlsConnector`, against the real server with
//! certificates made at test time.
#![cfg(feature = "tls")]

mod common;
#[path = "common/pki.rs"]
mod pki;

use std::{
    error::Error as _,
    io,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::{TestServer, eventually, within};
use monolock_client::{
    Client, Enqueued, Error, ErrorCode, LossReason, Protocol, RetryPolicy, TlsConnector,
    TlsConnectorBuilder, TlsError,
    rustls::{self, CertificateError, ClientConfig, RootCertStore},
};
use monolock_server::{Acl, Event, Observer, ServerConfig};
use pki::{Ca, Files};
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(2);

/// The longest a promotion may take on loopback.
const PROMPT: Duration = Duration::from_millis(50);

/// Counts the handshakes the server refused.
#[derive(Default)]
struct HandshakeFailures(AtomicUsize);

impl Observer for HandshakeFailures {
    fn observe(&self, event: &Event<'_>) {
        if matches!(event, Event::TlsHandshakeFailed) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A TLS (or mTLS) server, its PKI and the files a client reads.
struct Lab {
    server: TestServer,
    /// Signed the server's certificate.
    server_ca: Ca,
    /// Signs client certificates (trusted by the server in mTLS).
    client_ca: Ca,
    files: Files,
    /// `server_ca` as a PEM file.
    ca_file: PathBuf,
    refused: Arc<HandshakeFailures>,
    protocol: Protocol,
}

impl Lab {
    async fn start(mutual: bool, protocol: Protocol) -> Self {
        Self::start_with(mutual, protocol, |config| config).await
    }

    /// As [`start`](Self::start), with more server settings.
    async fn start_with(
        mutual: bool,
        protocol: Protocol,
        configure: impl FnOnce(ServerConfig) -> ServerConfig,
    ) -> Self {
        let server_ca = Ca::new("server CA");
        let client_ca = Ca::new("client CA");
        let files = Files::new();
        let tls = files.server_tls(&server_ca.server(), mutual.then_some(&client_ca));
        let ca_file = files.ca("server-ca.pem", &server_ca);
        let refused = Arc::new(HandshakeFailures::default());
        let server = TestServer::start_with(configure(
            ServerConfig::default()
                .with_tls(tls)
                .with_observer(refused.clone()),
        ))
        .await;
        Self {
            server,
            server_ca,
            client_ca,
            files,
            ca_file,
            refused,
            protocol,
        }
    }

    /// Trusts the server's CA.
    fn tls(&self) -> TlsConnectorBuilder {
        TlsConnector::builder().with_ca_file(&self.ca_file)
    }

    /// Trusts the server's CA and presents a certificate for `uri`.
    fn mtls(&self, uri: &str) -> TlsConnectorBuilder {
        let (cert, key) = self.files.leaf("client", &self.client_ca.client_uri(uri));
        self.tls().with_client_cert_files(cert, key)
    }

    /// A client of the server at 127.0.0.1:port over `tls`.
    fn client(&self, tls: TlsConnector) -> Client<TlsConnector> {
        Client::new(self.server.addr.to_string())
            .with_connector(tls)
            .with_protocol(self.protocol)
    }

    fn refused(&self) -> usize {
        self.refused.0.load(Ordering::SeqCst)
    }
}

/// The rustls error behind a failed connect.
fn handshake_error(err: &Error) -> &rustls::Error {
    let Error::Connect { source, .. } = err else {
        panic!("expected a connect error, got {err:?}");
    };
    source
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .unwrap_or_else(|| panic!("expected a TLS error, got {source:?}"))
}

/// Retries at once, at most `attempts` times.
fn quick_retries(attempts: u32) -> RetryPolicy {
    RetryPolicy::new()
        .with_initial_backoff(Duration::from_millis(1))
        .with_max_backoff(Duration::from_millis(1))
        .with_max_attempts(attempts)
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_grants_and_hands_over_with_increasing_tokens(protocol) {
    let lab = Lab::start(false, protocol).await;
    let name = "tls-handover";
    // The address is an IP literal: checked against the IP SAN.
    let client = lab.client(lab.tls().build().expect("TLS settings"));
    let holder = client.acquire(name, LEASE).await.expect("acquire");
    assert!(holder.is_held());
    let held = lab.server.lock(name).expect("held");
    assert_eq!(held.holder.token, holder.token());
    assert_eq!(&*held.holder.identity, "", "no client certificate");
    assert!(client.try_acquire(name, LEASE).await.unwrap().is_none());

    // Trust given as DER, the name checked as a DNS name.
    let by_name = lab.client(
        TlsConnector::builder()
            .with_root_certificates([lab.server_ca.der()])
            .with_server_name("localhost")
            .build()
            .expect("TLS settings"),
    );
    let Enqueued::Waiting(waiter) = by_name.enqueue(name, LEASE).await.expect("enqueue") else {
        panic!("{name} should be held");
    };
    lab.server.wait_for_waiters(name, 1).await;
    let granted = tokio::spawn(waiter.granted());
    let first = holder.token();
    holder.release().await.expect("release");
    let next = within("promotion", granted)
        .await
        .unwrap()
        .expect("granted");
    assert!(next.token() > first, "tokens strictly increase");
    assert_eq!(lab.server.lock(name).unwrap().holder.token, next.token());
    next.release().await.expect("release");

    let third = client.acquire(name, LEASE).await.expect("acquire");
    assert!(third.token() > first);
    third.release().await.expect("release");
    eventually("the lock to be free", || lab.server.lock(name).is_none()).await;
    assert_eq!(lab.refused(), 0);
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_presents_the_certificate_identity_to_the_server(protocol) {
    let lab = Lab::start(true, protocol).await;
    let name = "mtls-identity";
    let uri = "spiffe://prod/worker/1";
    let client = lab.client(lab.mtls(uri).build().expect("TLS settings"));
    let guard = client.acquire(name, LEASE).await.expect("acquire");
    let held = lab.server.lock(name).expect("held");
    assert_eq!(&*held.holder.identity, uri);
    assert_eq!(held.holder.token, guard.token());
    guard.release().await.expect("release");

    // The identity given as DER.
    let uri = "spiffe://prod/worker/2";
    let leaf = lab.client_ca.client_uri(uri);
    let client = lab.client(
        lab.tls()
            .with_client_cert(vec![leaf.der.clone()], leaf.key_der())
            .build()
            .expect("TLS settings"),
    );
    let guard = client.acquire(name, LEASE).await.expect("acquire");
    assert_eq!(&*lab.server.lock(name).expect("held").holder.identity, uri);
    drop(guard);
    assert_eq!(lab.refused(), 0);
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_without_a_client_certificate_is_a_connect_error(protocol) {
    let lab = Lab::start(true, protocol).await;
    let name = "mtls-anonymous";
    let client = lab.client(lab.tls().build().expect("TLS settings"));
    // TLS 1.3: the client finishes its side of the handshake, and the
    // server's refusal arrives as an alert in place of the first reply.
    let err = client.acquire(name, LEASE).await.unwrap_err();
    assert!(
        matches!(handshake_error(&err), rustls::Error::AlertReceived(_)),
        "{err:?}"
    );
    assert!(
        !err.is_temporary(),
        "a refused certificate fails every time"
    );
    assert!(err.to_string().starts_with("could not connect to"), "{err}");
    eventually("the refusal to be counted", || lab.refused() == 1).await;

    // Not retried: the same handshake is refused the same way.
    let err = client
        .clone()
        .with_retry_policy(quick_retries(3))
        .acquire_retrying(name, LEASE)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    eventually("one more refusal", || lab.refused() == 2).await;

    // TLS 1.2: the server refuses within the handshake itself.
    let mut roots = RootCertStore::empty();
    roots.add(lab.server_ca.der()).expect("trust anchor");
    let tls12 =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS12])
            .expect("TLS 1.2")
            .with_root_certificates(roots)
            .with_no_client_auth();
    let err = lab
        .client(TlsConnector::from_config(Arc::new(tls12)))
        .acquire(name, LEASE)
        .await
        .unwrap_err();
    assert!(
        matches!(handshake_error(&err), rustls::Error::AlertReceived(_)),
        "{err:?}"
    );
    assert!(lab.server.lock(name).is_none(), "nobody was served");
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_fails_the_handshake(protocol) {
    let lab = Lab::start(true, protocol).await;
    let name = "untrusted";
    let strangers = Ca::new("someone else's CA");

    // The client does not trust the server's CA.
    let stranger_file = lab.files.ca("stranger-ca.pem", &strangers);
    let (cert, key) = lab
        .files
        .leaf("good", &lab.client_ca.client_uri("spiffe://prod/worker/1"));
    let wrong_ca = TlsConnector::builder()
        .with_ca_file(&stranger_file)
        .with_client_cert_files(&cert, &key)
        .build()
        .expect("TLS settings");
    let err = lab.client(wrong_ca).acquire(name, LEASE).await.unwrap_err();
    assert!(
        matches!(
            handshake_error(&err),
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
        ),
        "{err:?}"
    );
    assert!(!err.is_temporary(), "a certificate error is not retried");

    // The server's certificate is not for the name the client expects.
    let wrong_name = lab
        .tls()
        .with_client_cert_files(&cert, &key)
        .with_server_name("locks.elsewhere")
        .build()
        .expect("TLS settings");
    let err = lab
        .client(wrong_name)
        .acquire(name, LEASE)
        .await
        .unwrap_err();
    assert!(
        matches!(handshake_error(&err), rustls::Error::InvalidCertificate(_)),
        "{err:?}"
    );

    // The server does not trust the client's CA.
    let (cert, key) = lab
        .files
        .leaf("stranger", &strangers.client_uri("spiffe://prod/worker/1"));
    let stranger = lab
        .tls()
        .with_client_cert_files(cert, key)
        .build()
        .expect("TLS settings");
    let err = lab.client(stranger).acquire(name, LEASE).await.unwrap_err();
    assert!(
        matches!(handshake_error(&err), rustls::Error::AlertReceived(_)),
        "{err:?}"
    );
    eventually("every refusal to be counted", || lab.refused() == 3).await;
    assert!(lab.server.lock(name).is_none(), "nobody was served");
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_tls_guard_promotes_the_next_waiter_at_once(protocol) {
    let lab = Lab::start(true, protocol).await;
    let name = "tls-drop";
    let client = lab.client(
        lab.mtls("spiffe://prod/worker/1")
            .build()
            .expect("TLS settings"),
    );
    // Version 1: the holder lives on a runtime of its own that stands
    // still once the lock is granted: its session task cannot run, so only
    // `Drop` itself can close the connection. Version 2: the claim shares
    // a session whose task writes the RELEASE the moment the guard drops.
    let holder_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (holder_runtime, holder) = if protocol == Protocol::V1 {
        let holder_client = client.clone();
        tokio::task::spawn_blocking(move || {
            let holder = holder_runtime.block_on(holder_client.acquire(name, LEASE));
            (holder_runtime, holder.expect("acquire"))
        })
        .await
        .expect("holder thread")
    } else {
        (holder_runtime, client.acquire(name, LEASE).await.expect("acquire"))
    };
    let Enqueued::Waiting(waiter) = client.enqueue(name, LEASE).await.expect("enqueue") else {
        panic!("{name} should be held");
    };
    lab.server.wait_for_waiters(name, 1).await;
    let granted = tokio::spawn(async move {
        let guard = waiter.granted().await.expect("granted");
        (Instant::now(), guard)
    });
    let dropped_at = Instant::now();
    // Version 1: no close_notify, no task run: `Drop` shuts the TCP
    // socket down. Version 2: `Drop` hands the RELEASE to the session task.
    drop(holder);
    let (granted_at, guard) = within("promotion", granted).await.unwrap();
    let took = granted_at - dropped_at;
    assert!(took < PROMPT, "promotion took {took:?}");
    assert!(guard.is_held());
    assert_eq!(lab.server.lock(name).unwrap().holder.token, guard.token());
    holder_runtime.shutdown_background();
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_over_tls_is_reported_by_lost(protocol) {
    let lab = Lab::start(true, protocol).await;
    let name = "tls-forced";
    let client = lab.client(
        lab.mtls("spiffe://prod/worker/1")
            .build()
            .expect("TLS settings"),
    );
    let guard = client.acquire(name, LEASE).await.expect("acquire");
    let forced = lab.server.handle.force_release(name).expect("held");
    assert_eq!(forced.token, guard.token());
    match within("the loss", guard.lost()).await {
        LossReason::Server { code, .. } => assert_eq!(code, ErrorCode::CLOSED_BY_ADMIN),
        other => panic!("expected ERROR 0x02, got {other:?}"),
    }
    assert!(!guard.is_held());
    let err = guard.release().await.unwrap_err();
    assert_eq!(err.server_code(), Some(ErrorCode::CLOSED_BY_ADMIN));
}
}

#[tokio::test]
async fn unusable_tls_settings_are_invalid_input_naming_the_file() {
    let ca = Ca::new("CA");
    let files = Files::new();
    let ca_file = files.ca("ca.pem", &ca);
    let (cert, key) = files.leaf("client", &ca.client_uri("spiffe://prod/worker/1"));
    let (_, other_key) = files.leaf("other", &ca.client_uri("spiffe://prod/worker/2"));
    let garbage = files.write("garbage.pem", "not PEM at all\n");
    let missing = files.path("missing.pem");

    let tls_error = |builder: TlsConnectorBuilder| match builder.build() {
        Ok(_) => panic!("settings accepted"),
        Err(err) => {
            assert!(!err.is_temporary(), "invalid input is not retried");
            assert_eq!(err.to_string(), "invalid TLS configuration");
            let Error::Tls(tls) = err else {
                panic!("expected Error::Tls, got {err:?}");
            };
            tls
        }
    };
    let base = || TlsConnector::builder().with_ca_file(&ca_file);

    match tls_error(TlsConnector::builder().with_ca_file(&missing)) {
        TlsError::Read { what, path, source } => {
            assert_eq!((what, &path), ("CA", &missing));
            assert_eq!(source.kind(), io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
    let err = tls_error(TlsConnector::builder().with_ca_file(&garbage));
    assert!(matches!(&err, TlsError::Pem { what: "CA", path, .. } if *path == garbage));
    assert!(
        err.to_string().contains(&*garbage.to_string_lossy()),
        "{err}"
    );
    assert!(err.source().is_some());

    let err = tls_error(base().with_client_cert_files(&cert, &missing));
    assert!(matches!(&err, TlsError::Read { what: "client key", path, .. } if *path == missing));
    let err = tls_error(base().with_client_cert_files(&garbage, &key));
    assert!(
        matches!(&err, TlsError::Pem { what: "client certificate", path, .. } if *path == garbage)
    );
    // A key file with no key in it (a certificate instead).
    let err = tls_error(base().with_client_cert_files(&cert, &cert));
    assert!(matches!(
        &err,
        TlsError::Pem {
            what: "client key",
            expected: "private key",
            ..
        }
    ));
    // Someone else's key.
    let err = tls_error(base().with_client_cert_files(&cert, &other_key));
    assert!(matches!(&err, TlsError::ClientIdentity { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&*other_key.to_string_lossy()),
        "{err}"
    );

    let err = tls_error(base().with_server_name("not a name"));
    assert!(matches!(&err, TlsError::ServerName { name, .. } if name == "not a name"));
    assert!(matches!(
        tls_error(TlsConnector::builder()),
        TlsError::NoTrustRoots
    ));
    assert!(matches!(
        TlsConnector::from_config(base().build().unwrap().config().clone())
            .with_server_name("")
            .unwrap_err(),
        Error::Tls(TlsError::ServerName { .. })
    ));

    // The retrying forms return it at once.
    let calls = AtomicUsize::new(0);
    let err = RetryPolicy::new()
        .retry(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(Error::from(TlsError::NoTrustRoots))
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Tls(TlsError::NoTrustRoots)));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

for_each_protocol! {
/// The ACL judges every claim by the certificate's identity: a refusal is
/// 0x18 (a client error, not retried), and the client's other claims and
/// later ones go on as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acl_refuses_a_lock_with_0x18_and_other_claims_go_on(protocol) {
    let acl = Acl::from_json(
        r#"{"rules":[{"identity":"spiffe://prod/worker/*","locks":["allowed/*"]}]}"#,
    )
    .expect("ACL");
    let lab = Lab::start_with(true, protocol, |config| {
        config.with_authorizer(Arc::new(acl))
    })
    .await;
    let client = lab.client(
        lab.mtls("spiffe://prod/worker/1")
            .build()
            .expect("TLS settings"),
    );
    let held = client.acquire("allowed/a", LEASE).await.expect("allowed");
    let err = client.acquire("denied", LEASE).await.unwrap_err();
    assert_eq!(err.server_code(), Some(ErrorCode::NOT_AUTHORIZED), "{err:?}");
    assert!(!err.is_temporary(), "the same claim fails the same way");
    let err = client
        .clone()
        .with_retry_policy(quick_retries(3))
        .acquire_retrying("denied", LEASE)
        .await
        .unwrap_err();
    assert_eq!(err.server_code(), Some(ErrorCode::NOT_AUTHORIZED));
    assert!(lab.server.lock("denied").is_none());
    assert!(held.is_held(), "a refused claim leaves the others as they were");
    let other = client.acquire("allowed/b", LEASE).await.expect("allowed");
    assert!(other.token() > held.token());
    other.release().await.expect("released");
    held.release().await.expect("released");
}
}
