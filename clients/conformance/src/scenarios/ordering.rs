//! Order across clients of different languages on one lock: fencing tokens
//! and the FIFO queue.

use std::time::{Duration, Instant};

use crate::{
    Check, Failure, Lab, PATIENCE,
    clients::Prepared,
    driver::{Driver, lock_cmd},
    ensure, fail,
    scenarios::{exit_all, open_all},
    server::Server,
};

/// The lease of these scenarios: long enough that no claim expires on a
/// loaded machine; nothing here waits for a lease to run out.
const LEASE_MS: u64 = 5_000;

/// Two drivers of every client take one lock in turns, twice round: every
/// token a driver reports is the token the admin API shows for the holder,
/// and each is strictly greater than the one before, whichever language
/// held the lock before.
pub fn tokens_increase_across_clients(lab: &Lab, clients: &[&Prepared]) -> Check {
    let server = Server::start(&lab.monolock, &[])?;
    let mut drivers = Vec::new();
    for client in clients {
        drivers.extend(client.drivers(lab, 1, 2)?);
    }
    open_all(&mut drivers, &server.address())?;
    let name = "conformance/tokens";
    let mut last: Option<(u64, String)> = None;
    for _round in 0..2 {
        for driver in &mut drivers {
            let token = driver.lock("h", name, LEASE_MS)?;
            let shown = server.admin.holder_token(name)?;
            ensure!(
                driver.client,
                shown == Some(token),
                "{} reported token {token}, the admin API shows the holder's token as {shown:?}",
                driver.label
            );
            ensure!(
                driver.client,
                driver.token("h")? == token,
                "{}: `token` differs from the token `lock` reported ({token})",
                driver.label
            );
            if let Some((previous, by)) = &last
                && token <= *previous
            {
                fail!(
                    "{} was granted token {token}, not above {previous} granted to {by} before",
                    driver.label
                );
            }
            last = Some((token, driver.label.clone()));
            driver.release("h")?;
        }
    }
    exit_all(drivers)
}

/// One holder and five waiters, the waiters taken from every client in
/// turn, each queued only once the admin API shows the one before it in
/// the queue. Released one by one, the lock must go to the waiters in
/// exactly the order they queued, each with a greater token, and no other
/// waiter may be answered before the one whose turn it is.
pub fn fifo_five_waiters(lab: &Lab, clients: &[&Prepared]) -> Check {
    let server = Server::start(&lab.monolock, &[])?;
    let name = "conformance/fifo";
    let mut holder = clients[0].driver(lab, 0)?;
    let mut waiters = Vec::new();
    for i in 0..5 {
        waiters.push(clients[i % clients.len()].driver(lab, i + 1)?);
    }
    holder.open(&server.address())?;
    open_all(&mut waiters, &server.address())?;
    let mut token = holder.lock("h", name, LEASE_MS)?;
    for (i, waiter) in waiters.iter_mut().enumerate() {
        waiter.send(lock_cmd("h", name, LEASE_MS, None))?;
        server.admin.until(
            &format!("waiter {} queued", waiter.label),
            PATIENCE,
            |admin| Ok((admin.waiters(name)? == i + 1).then_some(())),
        )?;
    }
    holder.release("h")?;
    let mut pending: Vec<usize> = (0..waiters.len()).collect();
    while let Some(&expected) = pending.first() {
        let (first, reply) = first_reply(&mut waiters, &pending)?;
        // Pinned on the waiter whose turn it was: a client that left the
        // queue (and joined it again) is the usual way to lose a turn.
        ensure!(
            waiters[expected].client,
            first == expected,
            "it was the turn of {} (number {} in the queue), but {} (number {}) was \
             answered first: {}",
            waiters[expected].label,
            expected + 1,
            waiters[first].label,
            first + 1,
            reply.0
        );
        let driver = &waiters[first];
        if !reply.ok() {
            return Err(driver.failure(format!("its queued lock failed: {}", reply.0)));
        }
        let granted = driver.token_of(&reply)?;
        if granted <= token {
            fail!(
                "{} was granted token {granted}, not above the previous holder's {token}",
                driver.label
            );
        }
        token = granted;
        pending.remove(0);
        waiters[first].release("h")?;
    }
    holder.exit()?;
    exit_all(waiters)
}

/// The first of the `pending` drivers to answer its command in flight,
/// within [`PATIENCE`].
fn first_reply(drivers: &mut [Driver], pending: &[usize]) -> Check<(usize, crate::driver::Reply)> {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        for &i in pending {
            if let Some(reply) = drivers[i].reply_within(Duration::from_millis(2))? {
                return Ok((i, reply));
            }
        }
    }
    Err(Failure::new(format!(
        "no queued waiter was granted the lock within {PATIENCE:?} of the release"
    )))
}
