//! Values on claims (docs/protocol.md, "Version 2 extension: values and
//! observers"): shown to the admin API and to every client's `holder`,
//! bounded before connecting, and reported as `unsupported` where the
//! protocol cannot carry them (version 1, a server older than the
//! extension).

use serde_json::{Value, json};

use crate::{
    Check, Failure, Lab,
    clients::Prepared,
    driver::{Driver, LockState, lock_value_cmd},
    ensure,
    older::{OlderServer, Seen},
    scenarios::{
        exit_all, open_all,
        transport::{message_has, no_connection, temporary_is, untouched_listener},
    },
    server::Server,
};

/// The lease where nothing waits for one to run out.
const LEASE_MS: u64 = 5_000;

/// What every client says when forced to protocol version 1 and asked for
/// a value, an observation or a holder lookup (EXT-RULES, kind
/// `unsupported`).
pub(super) const V1_UNSUPPORTED: &str = "protocol version 1 has no lock values or observers";

/// The start of what every client says when the server lacks the
/// extension (OPENED, then ERROR `0x13` answering HELLO).
fn older_unsupported(address: &str) -> String {
    format!("{address} does not support lock values and observers")
}

/// Sends `cmd` and requires the error `unsupported`, not temporary, its
/// message containing `part`.
pub(super) fn unsupported(driver: &mut Driver, cmd: Value, what: &str, part: &str) -> Check {
    let refused = driver.fails(cmd, &["unsupported"])?;
    temporary_is(driver, &refused, false, what)?;
    message_has(driver, &refused, &[part], what)
}

/// Requires the admin API to show `name` held under `token` with `value`
/// (`holder.value`, "" for none); a wrong token or value is pinned on
/// `holder`'s client, a missing field on the server.
pub(super) fn admin_shows(
    server: &Server,
    name: &str,
    holder: &Driver,
    token: u64,
    value: &str,
) -> Check {
    let lock = server.admin.lock(name)?;
    let shown = lock.as_ref().map(|lock| &lock["holder"]);
    let Some(shown) = shown else {
        return Err(holder.failure(format!(
            "holds {name:?} (token {token}), but the admin API shows no holder"
        )));
    };
    ensure!(
        holder.client,
        shown["token"].as_u64() == Some(token),
        "{} holds {name:?} under token {token}; the admin API shows {shown}",
        holder.label
    );
    let Some(shown_value) = shown["value"].as_str() else {
        return Err(Failure::new(format!(
            "the admin API shows no `value` (a string) for the holder of {name:?}: {shown}"
        )));
    };
    ensure!(
        holder.client,
        shown_value == value,
        "{} holds {name:?} with the value {value:?}; the admin API shows {shown_value:?}",
        holder.label
    );
    Ok(())
}

/// Requires `state` to be a lookup's answer for a lock held under `token`
/// with `value`.
fn held_as(looker: &Driver, state: &LockState, name: &str, token: u64, value: &str) -> Check {
    ensure!(
        looker.client,
        state.held
            && state.event == "held"
            && state.token == token
            && state.value == value
            && !state.initial
            && !state.coalesced,
        "{}: holder({name:?}) must answer held, event \"held\", token {token}, value {value:?}, \
         initial and coalesced false; it answered {state:?}",
        looker.label
    );
    Ok(())
}

/// A lock held with a value, seen everywhere a holder is shown.
///
/// One holder and one looker driver for every run of every client, on
/// one server. In turn, each holder takes the lock: a protocol v2 run with
/// a value (`"<label> 10.0.0.7:9000 ✓"`, not ASCII); a run forced to v1
/// first asks with a value and must be told `unsupported` (not
/// temporary, `protocol version 1 has no lock values or observers`), then
/// takes it plainly (its value is empty). Then:
///
/// - the admin API (`/api/locks/{name}`) shows the holder's token and
///   `holder.value`;
/// - `holder` from the looker of every v2 run answers `held`, that token
///   and that value (initial and coalesced false); the v1 runs' lookers
///   answer `unsupported`;
/// - a v2 holder's `set_value` replaces it: once it returns, the admin API
///   and every v2 looker's `holder` show the new value under the same
///   token;
/// - after `release` returns, every v2 looker's `holder` answers `free`.
pub fn value_shown_to_holder_lookups(lab: &Lab, clients: &[&Prepared]) -> Check {
    let server = Server::start(&lab.monolock, &[])?;
    let name = "conformance/value";
    let mut holders = Vec::new();
    let mut lookers = Vec::new();
    for client in clients {
        holders.push(client.driver(lab, 1)?);
        lookers.push(client.driver(lab, 2)?);
    }
    open_all(&mut holders, &server.address())?;
    open_all(&mut lookers, &server.address())?;
    for looker in lookers.iter_mut().filter(|d| d.force_v1) {
        let what = format!("{}: holder under protocol version 1", looker.label);
        unsupported(
            looker,
            json!({"cmd": "holder", "name": name}),
            &what,
            V1_UNSUPPORTED,
        )?;
    }
    for holder in &mut holders {
        let (token, value) = if holder.force_v1 {
            let what = format!("{}: a value under protocol version 1", holder.label);
            let cmd = lock_value_cmd("h", name, LEASE_MS, "10.0.0.7:9000");
            unsupported(holder, cmd, &what, V1_UNSUPPORTED)?;
            (holder.lock("h", name, LEASE_MS)?, String::new())
        } else {
            let value = format!("{} 10.0.0.7:9000 ✓", holder.label);
            let token = holder.lock_with_value("h", name, LEASE_MS, &value)?;
            (token, value)
        };
        admin_shows(&server, name, holder, token, &value)?;
        for looker in lookers.iter_mut().filter(|d| !d.force_v1) {
            let state = looker.holder(name)?;
            held_as(looker, &state, name, token, &value)?;
        }
        if !holder.force_v1 {
            let replaced = format!("{} 10.0.0.8:9001", holder.label);
            holder.set_value("h", &replaced)?;
            admin_shows(&server, name, holder, token, &replaced)?;
            for looker in lookers.iter_mut().filter(|d| !d.force_v1) {
                let state = looker.holder(name)?;
                held_as(looker, &state, name, token, &replaced)?;
            }
        }
        holder.release("h")?;
        for looker in lookers.iter_mut().filter(|d| !d.force_v1) {
            let state = looker.holder(name)?;
            ensure!(
                looker.client,
                !state.held && state.event == "free" && !state.initial && !state.coalesced,
                "{}: holder({name:?}) right after {}'s release returned must answer free; \
                 it answered {state:?}",
                looker.label,
                holder.label
            );
        }
    }
    exit_all(holders)?;
    exit_all(lookers)
}

/// Values are bounded before any connection: a value of 1,025 bytes
/// (`a` x 1,025) and one of 1,026 bytes in 513 characters (`é` x 513), to
/// `lock` and to `try_lock`, fail with `invalid_argument`, not temporary,
/// with `value of N bytes is above the maximum of 1024 bytes`, and no
/// connection reaches the address (a listener of the runner's). A run
/// forced to v1 may answer `unsupported` instead (it has no values at
/// all), still without connecting.
///
/// At the bound, on a live server: a v2 run takes a lock with a value of
/// exactly 1,024 bytes (`é` x 512), shown whole by the admin API; a
/// `set_value` of 1,025 bytes then fails with `invalid_argument` and the
/// lock keeps its value. A v1 run is told `unsupported`.
pub fn value_too_long_refused_before_connecting(lab: &Lab, client: &Prepared) -> Check {
    let (listener, address) = untouched_listener()?;
    let mut driver = client.driver(lab, 1)?;
    driver.open(&address)?;
    let name = "conformance/long-value";
    let kinds: &[&str] = if client.force_v1 {
        &["invalid_argument", "unsupported"]
    } else {
        &["invalid_argument"]
    };
    for (value, bytes) in [("a".repeat(1025), 1025), ("é".repeat(513), 1026)] {
        let cmds = [
            lock_value_cmd("h", name, LEASE_MS, &value),
            json!({"cmd": "try_lock", "handle": "h", "name": name, "lease_ms": LEASE_MS, "value": value}),
        ];
        for cmd in cmds {
            let what = format!("a value of {bytes} bytes ({})", cmd["cmd"]);
            let refused = driver.fails(cmd, kinds)?;
            temporary_is(&driver, &refused, false, &what)?;
            if refused.kind() == Some("invalid_argument") {
                let bound = format!("value of {bytes} bytes is above the maximum of 1024 bytes");
                message_has(&driver, &refused, &[&bound], &what)?;
            }
            no_connection(&driver, &listener, &format!("refusing {what}"))?;
        }
    }
    let server = Server::start(&lab.monolock, &[])?;
    driver.open(&server.address())?;
    let longest = "é".repeat(512);
    if client.force_v1 {
        let cmd = lock_value_cmd("h", name, LEASE_MS, &longest);
        unsupported(
            &mut driver,
            cmd,
            "a value under protocol version 1",
            V1_UNSUPPORTED,
        )?;
        return driver.exit();
    }
    let token = driver.lock_with_value("h", name, LEASE_MS, &longest)?;
    admin_shows(&server, name, &driver, token, &longest)?;
    let what = "set_value of 1025 bytes";
    let refused = driver.fails(
        json!({"cmd": "set_value", "handle": "h", "value": "a".repeat(1025)}),
        &["invalid_argument"],
    )?;
    temporary_is(&driver, &refused, false, what)?;
    message_has(
        &driver,
        &refused,
        &["value of 1025 bytes is above the maximum of 1024 bytes"],
        what,
    )?;
    ensure!(
        client.name(),
        driver.is_held("h")?,
        "{}: the lock is not held after a refused set_value",
        driver.label
    );
    admin_shows(&server, name, &driver, token, &longest)?;
    driver.release("h")?;
    driver.exit()
}

/// Against a server that predates the extension (the runner's
/// [`OlderServer`]: OPENED, then ERROR `0x13` `unknown message type:
/// 0x24` answering HELLO, and the close; plain version 2 and version 1
/// otherwise):
///
/// - a plain `lock` works (twice, the second token above the first);
/// - `holder`, `observe` and `lock` with a value fail with `unsupported`,
///   not temporary, the message saying `ADDR does not support lock values
///   and observers` (v2) or `protocol version 1 has no lock values or
///   observers` (a run forced to v1), and the plain lock stays held;
/// - a second driver whose first command is `observe` is told the same,
///   and then takes a plain lock.
///
/// The server saw, from a v2 run: exactly two HELLOs (one per driver
/// process: a client remembers the answer for the address), no other
/// frame of the extension, and three plain ACQUIREs; from a v1 run: three
/// version 1 ACQUIREs and nothing else.
pub fn older_server_is_unsupported(lab: &Lab, client: &Prepared) -> Check {
    let older = OlderServer::start()?;
    let name = "conformance/older";
    let expected = if client.force_v1 {
        V1_UNSUPPORTED.to_owned()
    } else {
        older_unsupported(&older.address)
    };
    let mut driver = client.driver(lab, 1)?;
    driver.open(&older.address)?;
    let first = driver.lock("h", name, LEASE_MS)?;
    let asks = [
        (json!({"cmd": "holder", "name": name}), "holder"),
        (
            json!({"cmd": "observe", "handle": "w", "name": name}),
            "observe",
        ),
        (
            lock_value_cmd("v", name, LEASE_MS, "10.0.0.7:9000"),
            "a lock with a value",
        ),
    ];
    for (cmd, what) in asks {
        let what = format!("{what} against a server without the extension");
        unsupported(&mut driver, cmd, &what, &expected)?;
    }
    ensure!(
        client.name(),
        driver.is_held("h")?,
        "{}: the plain lock is not held after the unsupported requests",
        driver.label
    );
    driver.release("h")?;
    let second = driver.lock("h", name, LEASE_MS)?;
    ensure!(
        client.name(),
        second > first,
        "{}: the second plain lock's token {second} is not above the first's {first}",
        driver.label
    );
    driver.release("h")?;

    let mut fresh = client.driver(lab, 2)?;
    fresh.open(&older.address)?;
    let cmd = json!({"cmd": "observe", "handle": "w", "name": name});
    let what = "observe as the first command, against a server without the extension";
    unsupported(&mut fresh, cmd, what, &expected)?;
    fresh.lock("h", name, LEASE_MS)?;
    fresh.release("h")?;

    let seen = older.seen();
    let wanted = if client.force_v1 {
        Seen {
            v1_grants: 3,
            ..Seen::default()
        }
    } else {
        Seen {
            hellos_refused: 2,
            v2_grants: 3,
            v2_releases: 3,
            ..Seen::default()
        }
    };
    ensure!(
        client.name(),
        seen == wanted,
        "the server without the extension saw {seen:?}, expected {wanted:?} (v2: one HELLO \
         per driver process, then plain sessions only; v1: plain version 1 only)"
    );
    driver.exit()?;
    fresh.exit()
}
