//! Reaching the server: TLS and mTLS with the lab PKI, input refused
//! before any connection, and an unreachable address named in the error.

use std::{
    io::ErrorKind,
    net::{SocketAddr, TcpListener},
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use socket2::{Domain, Socket, Type};

use crate::{
    Check, Failure, Lab,
    clients::Prepared,
    driver::{Driver, Reply, lock_cmd},
    ensure,
    pki::CLIENT_IDENTITY,
    server::Server,
};

/// The lease where nothing waits for one to run out.
const LEASE_MS: u64 = 5_000;

/// The bound on a lock attempt that must fail (a refused handshake, an
/// unreachable address): it must fail on its own, well before this.
const WAIT_MS: u64 = 5_000;

fn path(path: &std::path::Path) -> Value {
    Value::from(path.to_string_lossy().into_owned())
}

/// A server with the lab's certificate; with `client_ca`, it asks every
/// client for a certificate of the lab's clients' CA (mTLS).
fn tls_server(lab: &Lab, client_ca: bool) -> Result<Server, Failure> {
    let pki = &lab.pki;
    let mut args = vec![
        "--tls-cert".to_owned(),
        pki.server_cert.to_string_lossy().into_owned(),
        "--tls-key".to_owned(),
        pki.server_key.to_string_lossy().into_owned(),
    ];
    if client_ca {
        args.push("--tls-client-ca".to_owned());
        args.push(pki.clients_ca.to_string_lossy().into_owned());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start(&lab.monolock, &args)
}

/// Requires a failure's `temporary` flag to be `expected`.
pub(super) fn temporary_is(driver: &Driver, reply: &Reply, expected: bool, what: &str) -> Check {
    ensure!(
        driver.client,
        reply.temporary() == Some(expected),
        "{}: {what} must be temporary: {expected}, the client says {:?}: {}",
        driver.label,
        reply.temporary(),
        reply.0["error"]
    );
    Ok(())
}

/// Requires a failure's message to contain every one of `parts`.
pub(super) fn message_has(driver: &Driver, reply: &Reply, parts: &[&str], what: &str) -> Check {
    let message = reply.message();
    for part in parts {
        ensure!(
            driver.client,
            message.contains(part),
            "{}: the error for {what} must contain {part:?}: {message:?}",
            driver.label
        );
    }
    Ok(())
}

/// TLS with the lab PKI: a driver trusting the server's CA takes and
/// releases a lock (with and without an explicit server name); one that
/// trusts another CA fails with `tls`, not temporary (a certificate that
/// fails verification fails the same way every time).
pub fn tls(lab: &Lab, client: &Prepared) -> Check {
    let name = client.name();
    let pki = &lab.pki;
    let server = tls_server(lab, false)?;
    let address = server.address();
    // Each `open` replaces the driver's client.
    let mut driver = client.driver(lab, 1)?;
    let lock = "conformance/tls";
    for settings in [
        json!({"ca": path(&pki.ca)}),
        json!({"ca": path(&pki.ca), "server_name": "localhost"}),
    ] {
        driver.open_tls(&address, settings.clone())?;
        let token = driver.lock("h", lock, LEASE_MS)?;
        let shown = server.admin.holder_token(lock)?;
        ensure!(
            name,
            shown == Some(token),
            "holding token {token} over TLS with {settings}, the admin API shows {shown:?}"
        );
        driver.release("h")?;
    }
    driver.open_tls(&address, json!({"ca": path(&pki.foreign_ca)}))?;
    let refused = driver.fails(lock_cmd("h", lock, LEASE_MS, Some(WAIT_MS)), &["tls"])?;
    temporary_is(
        &driver,
        &refused,
        false,
        "a certificate that fails verification",
    )?;
    driver.exit()
}

/// mTLS with the lab PKI: a driver presenting the client certificate holds
/// the lock under the certificate's identity (as the admin API shows it);
/// one without a client certificate is refused with `tls`, not temporary.
pub fn mtls(lab: &Lab, client: &Prepared) -> Check {
    let name = client.name();
    let pki = &lab.pki;
    let server = tls_server(lab, true)?;
    let address = server.address();
    let mut driver = client.driver(lab, 1)?;
    driver.open_tls(
        &address,
        json!({
            "ca": path(&pki.ca),
            "cert": path(&pki.client_cert),
            "key": path(&pki.client_key),
        }),
    )?;
    let lock = "conformance/mtls";
    let token = driver.lock("h", lock, LEASE_MS)?;
    let view = server
        .admin
        .lock(lock)?
        .ok_or_else(|| Failure::of(name, "the admin API shows no holder of the mTLS lock"))?;
    ensure!(
        name,
        view["holder"]["token"].as_u64() == Some(token)
            && view["holder"]["identity"].as_str() == Some(CLIENT_IDENTITY),
        "the holder over mTLS should be token {token} with identity {CLIENT_IDENTITY:?}; \
         the admin API shows {}",
        view["holder"]
    );
    driver.release("h")?;
    driver.open_tls(&address, json!({"ca": path(&pki.ca)}))?;
    let refused = driver.fails(lock_cmd("h", lock, LEASE_MS, Some(WAIT_MS)), &["tls"])?;
    temporary_is(&driver, &refused, false, "a refused client certificate")?;
    driver.exit()
}

/// A listener of the runner's that must see no connection, and its
/// address.
pub(super) fn untouched_listener() -> Check<(TcpListener, String)> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|err| Failure::new(format!("cannot bind a listener: {err}")))?;
    let address = listener
        .local_addr()
        .map_err(|err| Failure::new(format!("listener address: {err}")))?
        .to_string();
    Ok((listener, address))
}

/// Fails unless `listener` has accepted nothing.
pub(super) fn no_connection(driver: &Driver, listener: &TcpListener, what: &str) -> Check {
    match listener.accept() {
        Err(err) if err.kind() == ErrorKind::WouldBlock => Ok(()),
        Ok((_, peer)) => Err(driver.failure(format!("connected (from {peer}) before {what}"))),
        Err(err) => Err(Failure::new(format!("accept: {err}"))),
    }
}

/// Bad names and leases are refused with `invalid_argument`, not
/// temporary, before any connection: the driver's address is a listener
/// of the runner's that must see no connection at all.
pub fn bad_input_rejected_before_connecting(lab: &Lab, client: &Prepared) -> Check {
    let (listener, address) = untouched_listener()?;
    let mut driver = client.driver(lab, 1)?;
    driver.open(&address)?;
    let long = "n".repeat(256);
    let long_utf8 = "é".repeat(128); // 256 bytes in 128 characters
    let cases = [
        lock_cmd("h", "", LEASE_MS, None),
        lock_cmd("h", &long, LEASE_MS, None),
        lock_cmd("h", &long_utf8, LEASE_MS, None),
        lock_cmd("h", "conformance/bad", 0, None),
        lock_cmd("h", "conformance/bad", 1 << 32, None),
        json!({"cmd": "try_lock", "handle": "h", "name": "", "lease_ms": LEASE_MS}),
        json!({"cmd": "try_lock", "handle": "h", "name": "conformance/bad", "lease_ms": 0}),
    ];
    for cmd in cases {
        let refused = driver.fails(cmd, &["invalid_argument"])?;
        temporary_is(&driver, &refused, false, "an invalid argument")?;
        no_connection(&driver, &listener, "refusing bad input")?;
    }
    driver.exit()
}

/// The bounds every client puts on a lease (docs/protocol.md): at least
/// 100 ms, at most 1 hour, a whole number of milliseconds. A lease of
/// 99 ms, 3,600,001 ms or 1,500.5 ms is refused with `invalid_argument`,
/// not temporary, before any connection, and the message says which bound
/// and names the unit the client's API takes (`minimum of 100 ms`,
/// `maximum of 1 hour`, `whole number of milliseconds`, and
/// `(leases are in ...)`). The bounds themselves are accepted: 100 ms and
/// 3,600,000 ms take a lock on a live server, shown in the admin API with
/// that lease (a 100 ms lock the client itself reports lost before the
/// admin API could be asked is taken again, up to five times).
pub fn lease_bounds_refused_before_connecting(lab: &Lab, client: &Prepared) -> Check {
    let (listener, address) = untouched_listener()?;
    let mut driver = client.driver(lab, 1)?;
    driver.open(&address)?;
    let lock = "conformance/lease";
    let cases: [(Value, &str); 3] = [
        (json!(99), "minimum of 100 ms"),
        (json!(3_600_001), "maximum of 1 hour"),
        (json!(1_500.5), "whole number of milliseconds"),
    ];
    for (lease_ms, bound) in cases {
        for cmd in ["lock", "try_lock"] {
            let sent = json!({"cmd": cmd, "handle": "h", "name": lock, "lease_ms": lease_ms});
            let refused = driver.fails(sent, &["invalid_argument"])?;
            let what = format!("a lease of {lease_ms} ms ({cmd})");
            temporary_is(&driver, &refused, false, &what)?;
            message_has(&driver, &refused, &[bound, "(leases are in "], &what)?;
            no_connection(&driver, &listener, &format!("refusing {what}"))?;
        }
    }
    let server = Server::start(&lab.monolock, &[])?;
    driver.open(&server.address())?;
    for lease_ms in [100, 3_600_000] {
        // A 100 ms lease ends at the client's deadline (80 ms) if its
        // heartbeats are not answered in time, which a loaded machine can
        // cause. Such a lock is gone before the admin API is asked; that
        // attempt counts only if the client says it lost the lock, and
        // another is made. A server or client that got the lease wrong
        // fails every attempt.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let token = driver.lock("h", lock, lease_ms)?;
            let shown = server.admin.lock(lock)?;
            if shown.is_none() && attempts < 5 && !driver.is_held("h")? {
                let _ = driver.call(json!({"cmd": "release", "handle": "h"}))?;
                continue;
            }
            ensure!(
                client.name(),
                shown.as_ref().and_then(|l| l["holder"]["token"].as_u64()) == Some(token)
                    && shown
                        .as_ref()
                        .and_then(|l| l["holder"]["lease_ms"].as_u64())
                        == Some(lease_ms),
                "a lock with a lease of {lease_ms} ms (token {token}, attempt {attempts}): the admin API shows {shown:?}"
            );
            driver.release("h")?;
            break;
        }
    }
    driver.exit()
}

/// An address with a scheme (`http://...`, `tcp://...`) is refused with
/// `invalid_argument` before any connection, at `open` or at the first
/// lock, and the message quotes the address and says to write
/// `host:port` without a scheme.
pub fn address_with_scheme_refused(lab: &Lab, client: &Prepared) -> Check {
    let (listener, address) = untouched_listener()?;
    let mut driver = client.driver(lab, 1)?;
    for scheme in ["http", "tcp"] {
        let written = format!("{scheme}://{address}");
        let what = format!("the address {written:?}");
        let opened = driver.call(driver.open_cmd(&written))?;
        let refused = if opened.ok() {
            driver.fails(
                lock_cmd("h", "conformance/scheme", LEASE_MS, None),
                &["invalid_argument"],
            )?
        } else {
            ensure!(
                client.name(),
                opened.kind() == Some("invalid_argument"),
                "{}: `open` of {what} failed with kind {:?}, expected invalid_argument: {}",
                driver.label,
                opened.kind(),
                opened.0["error"]
            );
            opened
        };
        temporary_is(&driver, &refused, false, &what)?;
        message_has(
            &driver,
            &refused,
            &[&format!("address \"{written}\""), "without a scheme"],
            &what,
        )?;
        no_connection(&driver, &listener, &format!("refusing {what}"))?;
    }
    driver.exit()
}

/// How long a client waits for the first answer of a server that
/// accepted the connection (DRIVER.md): its connect bound, 5 s.
const FIRST_ANSWER: Duration = Duration::from_secs(5);

/// A listener that accepts every connection and never writes a byte,
/// until dropped.
struct SilentListener {
    address: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SilentListener {
    fn start() -> Check<Self> {
        use std::sync::{Arc, atomic::AtomicBool, atomic::Ordering};
        let listener = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|err| Failure::new(format!("cannot bind a listener: {err}")))?;
        let address = listener
            .local_addr()
            .map_err(|err| Failure::new(format!("listener address: {err}")))?
            .to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => held.push(stream),
                    // Polled, not synchronised on: it only bounds how late
                    // the thread notices `stop`.
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Self { address, stop })
    }
}

impl Drop for SilentListener {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Connecting to the wrong thing is a `connect` error naming the address
/// and the problem, never a loss:
///
/// - the admin API's HTTP port: `connect`, `is not a monolock server: an
///   HTTP server answered`, not temporary;
/// - a plain client to a TLS port: `connect`, `expects TLS`, not
///   temporary;
/// - TLS to a plain monolock port: `tls`, `does not speak TLS`, not
///   temporary.
///
/// A port that accepts and never answers is
/// `silent_port_is_a_temporary_connect_error`.
pub fn wrong_port_is_a_connect_error(lab: &Lab, client: &Prepared) -> Check {
    let plain = Server::start(&lab.monolock, &[])?;
    let tls = tls_server(lab, false)?;
    let mut driver = client.driver(lab, 1)?;
    let admin = plain.admin.addr().to_string();
    driver.open(&admin)?;
    let refused = driver.fails(
        lock_cmd("h", "conformance/wrong", LEASE_MS, None),
        &["connect"],
    )?;
    let what = format!("the admin HTTP port {admin}");
    message_has(
        &driver,
        &refused,
        &[&format!(
            "{admin} is not a monolock server: an HTTP server answered"
        )],
        &what,
    )?;
    temporary_is(&driver, &refused, false, &what)?;

    let tls_address = tls.address();
    driver.open(&tls_address)?;
    let refused = driver.fails(
        lock_cmd("h", "conformance/wrong", LEASE_MS, None),
        &["connect"],
    )?;
    let what = format!("a plain client to the TLS port {tls_address}");
    message_has(&driver, &refused, &[&tls_address, "expects TLS"], &what)?;
    temporary_is(&driver, &refused, false, &what)?;

    let plain_address = plain.address();
    driver.open_tls(&plain_address, json!({"ca": path(&lab.pki.ca)}))?;
    let refused = driver.fails(lock_cmd("h", "conformance/wrong", LEASE_MS, None), &["tls"])?;
    let what = format!("TLS to the plain port {plain_address}");
    message_has(
        &driver,
        &refused,
        &[&plain_address, "does not speak TLS"],
        &what,
    )?;
    temporary_is(&driver, &refused, false, &what)?;
    driver.exit()
}

/// A port that accepts the connection and never answers (a listener of
/// the runner's) is a `connect` error naming the address and saying `did
/// not answer within 5 s` (the client's default connect bound), temporary
/// (a server may answer later), reported between 5 s and 8 s after the
/// `lock` was sent: the lease is 10 s, so the client's own connect bound
/// must end the wait, not the lease's 0.8 x 10 s. Never a loss. It runs
/// beside the client's other scenarios.
pub fn silent_port_is_a_temporary_connect_error(lab: &Lab, client: &Prepared) -> Check {
    let silent = SilentListener::start()?;
    let mut driver = client.driver(lab, 1)?;
    driver.open(&silent.address)?;
    let sent = Instant::now();
    let reply = driver.call(lock_cmd("h", "conformance/silent", 10_000, None))?;
    let took = sent.elapsed();
    let what = format!("a port that never answers ({})", silent.address);
    ensure!(
        client.name(),
        !reply.ok() && reply.kind() == Some("connect"),
        "{}: {what} must fail with `connect`: {}",
        driver.label,
        reply.0
    );
    message_has(
        &driver,
        &reply,
        &[&silent.address, "did not answer within 5 s"],
        &what,
    )?;
    temporary_is(&driver, &reply, true, &what)?;
    ensure!(
        client.name(),
        took >= FIRST_ANSWER && took < FIRST_ANSWER + Duration::from_secs(3),
        "{what} was reported after {took:?}, expected between {FIRST_ANSWER:?} and 3 s more"
    );
    driver.exit()
}

/// A lock on an address where nothing listens fails with `connect`,
/// temporary, names the address, and does not hang: the port is bound by the runner but not
/// listening, so the kernel refuses the connection. Listed before a live
/// server (`dead,live`), the same address is passed over and the lock is
/// taken on the live one.
pub fn dead_address_named(lab: &Lab, client: &Prepared) -> Check {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)
        .map_err(|err| Failure::new(format!("socket: {err}")))?;
    let any: SocketAddr = ([127, 0, 0, 1], 0).into();
    socket
        .bind(&any.into())
        .map_err(|err| Failure::new(format!("bind: {err}")))?;
    let dead = socket
        .local_addr()
        .ok()
        .and_then(|addr| addr.as_socket())
        .ok_or_else(|| Failure::new("the bound socket has no address"))?
        .to_string();
    let mut driver = client.driver(lab, 1)?;
    driver.open(&dead)?;
    let sent = Instant::now();
    let reply = driver.fails(
        lock_cmd("h", "conformance/dead", LEASE_MS, Some(WAIT_MS)),
        &["connect"],
    )?;
    let took = sent.elapsed();
    temporary_is(&driver, &reply, true, "a refused connection")?;
    ensure!(
        client.name(),
        reply.message().contains(&dead),
        "the connect error does not name the address {dead}: {:?}",
        reply.message()
    );
    ensure!(
        client.name(),
        took < Duration::from_secs(3),
        "a refused connection took {took:?} to report"
    );
    // Listed before a live server, the dead address is passed over.
    let server = Server::start(&lab.monolock, &[])?;
    driver.open(&format!("{dead},{}", server.address()))?;
    let token = driver.lock("h", "conformance/dead", LEASE_MS)?;
    let shown = server.admin.holder_token("conformance/dead")?;
    ensure!(
        client.name(),
        shown == Some(token),
        "with {dead} listed before a live server, the lock reported token {token}, \
         the live server shows {shown:?}"
    );
    driver.release("h")?;
    driver.exit()
}
