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
    Check, Failure, Lab, clients::Prepared, driver::lock_cmd, ensure, pki::CLIENT_IDENTITY,
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

/// TLS with the lab PKI: a driver trusting the server's CA takes and
/// releases a lock (with and without an explicit server name); one that
/// trusts another CA fails with `tls`.
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
    driver.fails(lock_cmd("h", lock, LEASE_MS, Some(WAIT_MS)), &["tls"])?;
    driver.exit()
}

/// mTLS with the lab PKI: a driver presenting the client certificate holds
/// the lock under the certificate's identity (as the admin API shows it);
/// one without a client certificate is refused with `tls`.
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
    driver.fails(lock_cmd("h", lock, LEASE_MS, Some(WAIT_MS)), &["tls"])?;
    driver.exit()
}

/// Bad names and leases are refused with `invalid_argument` before any
/// connection: the driver's address is a listener of the runner's that
/// must see no connection at all.
pub fn bad_input_rejected_before_connecting(lab: &Lab, client: &Prepared) -> Check {
    let listener = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|err| Failure::new(format!("cannot bind a listener: {err}")))?;
    let address = listener
        .local_addr()
        .map_err(|err| Failure::new(format!("listener address: {err}")))?
        .to_string();
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
        driver.fails(cmd, &["invalid_argument"])?;
        match listener.accept() {
            Err(err) if err.kind() == ErrorKind::WouldBlock => {}
            Ok((_, peer)) => {
                return Err(
                    driver.failure(format!("connected (from {peer}) before refusing bad input"))
                );
            }
            Err(err) => return Err(Failure::new(format!("accept: {err}"))),
        }
    }
    driver.exit()
}

/// A lock on an address where nothing listens fails with `connect`, names
/// the address, and does not hang: the port is bound by the runner but not
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
