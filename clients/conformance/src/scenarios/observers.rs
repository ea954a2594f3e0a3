//! Observing a lock and electing a leader (docs/protocol.md, "Version 2
//! extension: values and observers"): every change pushed in token order,
//! each release with its reason, the per-session bound on watches, and
//! every client's election helper failing over.

use std::{collections::BTreeSet, time::Duration};

use serde_json::json;

use crate::{
    Check, Lab, PATIENCE,
    clients::Prepared,
    driver::{Driver, ElectionEvent, LockState, Next, elect_cmd, lock_cmd, lock_value_cmd},
    ensure, fail,
    scenarios::{
        exit_all, open_all,
        transport::{message_has, no_connection, temporary_is, untouched_listener},
        values::{V1_UNSUPPORTED, unsupported},
    },
    server::Server,
};

/// The lease where nothing waits for one to run out.
const LEASE_MS: u64 = 5_000;

/// The lease of a holder whose process is stopped so that it expires:
/// short, so the scenario waits little, and long against the scheduling
/// noise of a loaded machine (a heartbeat every ~500 ms).
const EXPIRING_LEASE_MS: u64 = 2_000;

/// How long a driver is asked to wait for an election event in one poll
/// while the scenario watches several drivers in turn.
const POLL: Duration = Duration::from_millis(50);

/// How long the scenarios wait, after the last expected state or event,
/// to make sure no other one follows: a check that nothing more came, not
/// a synchronisation.
const QUIET: Duration = Duration::from_millis(200);

/// A change an observer must be told, in order.
struct Expected {
    event: &'static str,
    token: u64,
    value: String,
    reason: Option<&'static str>,
}

impl Expected {
    fn granted(token: u64, value: &str) -> Self {
        Self {
            event: "granted",
            token,
            value: value.to_owned(),
            reason: None,
        }
    }

    fn released(token: u64, reason: &'static str) -> Self {
        Self {
            event: "released",
            token,
            value: String::new(),
            reason: Some(reason),
        }
    }

    fn matches(&self, state: &LockState) -> bool {
        state.event == self.event
            && state.held == (self.event == "granted")
            && state.token == self.token
            && state.value == self.value
            && state.reason.as_deref() == self.reason
            && !state.initial
            && !state.coalesced
    }
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} token {}", self.event, self.token)?;
        if let Some(reason) = self.reason {
            write!(f, " ({reason})")?;
        }
        if !self.value.is_empty() {
            write!(f, " value {:?}", self.value)?;
        }
        Ok(())
    }
}

/// The next state of `watch` must be `expected` (initial and coalesced
/// false).
fn told(observer: &mut Driver, watch: &str, expected: &Expected) -> Check {
    let state = observer.expect_state(watch)?;
    ensure!(
        observer.client,
        expected.matches(&state),
        "{}: the observer's next state must be {expected} (initial and coalesced false); \
         it is {state:?}",
        observer.label
    );
    Ok(())
}

/// An observation's first state must be the INITIAL free state.
fn initially_free(observer: &Driver, state: &LockState, name: &str) -> Check {
    ensure!(
        observer.client,
        state.initial && !state.held && state.event == "free" && !state.coalesced,
        "{}: observe({name:?}) of a lock nobody holds must answer the initial state free \
         (initial true, coalesced false); it answered {state:?}",
        observer.label
    );
    Ok(())
}

/// Nothing more may come on `watch` within [`QUIET`].
fn nothing_more(observer: &mut Driver, watch: &str) -> Check {
    match observer.next_state(watch, QUIET)? {
        Next::Timeout => Ok(()),
        Next::Got(state) => Err(observer.failure(format!(
            "the observer was told a state no change caused: {state:?}"
        ))),
        Next::Ended(reply) => {
            Err(observer.failure(format!("the observation ended on its own: {}", reply.0)))
        }
    }
}

/// The value a taker of the observed lock sets: its label for a v2 run,
/// none for a run forced to v1.
fn value_of(driver: &Driver) -> String {
    if driver.force_v1 {
        String::new()
    } else {
        format!("{} at 10.0.0.7:9000", driver.label)
    }
}

/// `lock` (with the driver's value on v2), sent without waiting.
fn send_take(driver: &mut Driver, name: &str, lease_ms: u64) -> Check {
    let value = value_of(driver);
    if driver.force_v1 {
        driver.send(lock_cmd("h", name, lease_ms, None))
    } else {
        driver.send(lock_value_cmd("h", name, lease_ms, &value))
    }
}

/// `lock` (with the driver's value on v2); returns the token and value.
fn take(driver: &mut Driver, name: &str, lease_ms: u64) -> Check<(u64, String)> {
    send_take(driver, name, lease_ms)?;
    let reply = driver.reply()?;
    if !reply.ok() {
        return Err(driver.failure(format!("its lock of {name:?} failed: {}", reply.0)));
    }
    Ok((driver.token_of(&reply)?, value_of(driver)))
}

/// The token the admin API shows for `name` must be `token`.
fn admin_token_is(server: &Server, name: &str, holder: &Driver, token: u64) -> Check {
    let shown = server.admin.holder_token(name)?;
    ensure!(
        holder.client,
        shown == Some(token),
        "{} reported token {token} for {name:?}; the admin API shows {shown:?}",
        holder.label
    );
    Ok(())
}

/// One observer on every v2 run; two takers on every run (v1 included),
/// which take the lock in a chain of hand-ons: each next taker queues
/// (the admin API shows it waiting) before the holder releases, and each
/// grant's token must equal the admin API's and be above the one before.
/// A v2 taker locks with a value, a v1 taker plainly (after a value asked
/// for under v1 is refused as `unsupported`).
///
/// Every observer is told exactly: the INITIAL state (free), then for the
/// chain GRANTED (token, value), then for every hand-on RELEASED (the old
/// token, reason `released`) followed by GRANTED (the new token and its
/// value), and RELEASED of the last; nothing coalesced, nothing else
/// within 200 ms after.
pub fn observers_see_every_hand_on_in_token_order(lab: &Lab, clients: &[&Prepared]) -> Check {
    let server = Server::start(&lab.monolock, &[])?;
    let name = "conformance/observed";
    let mut observers = Vec::new();
    let mut takers = Vec::new();
    for client in clients {
        if !client.force_v1 {
            observers.push(client.driver(lab, 0)?);
        }
        takers.extend(client.drivers(lab, 1, 2)?);
    }
    open_all(&mut observers, &server.address())?;
    open_all(&mut takers, &server.address())?;
    for taker in takers.iter_mut().filter(|d| d.force_v1) {
        let what = format!("{}: observe under protocol version 1", taker.label);
        let cmd = json!({"cmd": "observe", "handle": "w", "name": name});
        unsupported(taker, cmd, &what, V1_UNSUPPORTED)?;
    }
    for observer in &mut observers {
        let initial = observer.observe("w", name)?;
        initially_free(observer, &initial, name)?;
    }
    let mut expected = Vec::new();
    let (mut token, value) = take(&mut takers[0], name, LEASE_MS)?;
    admin_token_is(&server, name, &takers[0], token)?;
    expected.push(Expected::granted(token, &value));
    for next in 1..takers.len() {
        send_take(&mut takers[next], name, LEASE_MS)?;
        let label = takers[next].label.clone();
        server
            .admin
            .until(&format!("{label} queued"), PATIENCE, |admin| {
                Ok((admin.waiters(name)? == 1).then_some(()))
            })?;
        takers[next - 1].release("h")?;
        let reply = takers[next].reply()?;
        let taker = &takers[next];
        if !reply.ok() {
            return Err(taker.failure(format!("its queued lock failed: {}", reply.0)));
        }
        let granted = taker.token_of(&reply)?;
        admin_token_is(&server, name, taker, granted)?;
        if granted <= token {
            fail!(
                "{} was granted token {granted}, not above the previous holder's {token}",
                taker.label
            );
        }
        expected.push(Expected::released(token, "released"));
        expected.push(Expected::granted(granted, &value_of(taker)));
        token = granted;
    }
    if let Some(last) = takers.last_mut() {
        last.release("h")?;
    }
    expected.push(Expected::released(token, "released"));
    for observer in &mut observers {
        for change in &expected {
            told(observer, "w", change)?;
        }
        nothing_more(observer, "w")?;
        observer.unobserve("w")?;
    }
    exit_all(observers)?;
    exit_all(takers)
}

/// One observer is told why each claim on the lock ended (the `reason`
/// of RELEASED): `released` for a `release`, `forced` for the admin API's
/// force-release, `released` again when the holder's driver process is
/// killed (SIGKILL: the kernel closes its connections, a client's close),
/// and `expired` when the holder's process is stopped (SIGSTOP) and its
/// lease (2 s) runs out. Each GRANTED before carries the holder's token
/// (the admin API's) and value.
///
/// The holders are drivers of the run; the observer is a driver of the
/// same client on protocol v2 (in a run forced to v1 the holders speak v1
/// and their value is empty, and the run's own `observe` must answer
/// `unsupported`).
pub fn observer_sees_release_reasons(lab: &Lab, client: &Prepared) -> Check {
    let server = Server::start(&lab.monolock, &[])?;
    let name = "conformance/reasons";
    let on_v2 = Prepared {
        force_v1: false,
        ..client.clone()
    };
    let mut observer = on_v2.driver(lab, 0)?;
    let mut holder = client.driver(lab, 1)?;
    let mut killed = client.driver(lab, 2)?;
    let mut stopped = client.driver(lab, 3)?;
    observer.open(&server.address())?;
    holder.open(&server.address())?;
    killed.open(&server.address())?;
    stopped.open(&server.address())?;
    if client.force_v1 {
        let cmd = json!({"cmd": "observe", "handle": "w", "name": name});
        let what = "observe under protocol version 1";
        unsupported(&mut holder, cmd, what, V1_UNSUPPORTED)?;
    }
    let initial = observer.observe("w", name)?;
    initially_free(&observer, &initial, name)?;

    let (token, value) = take(&mut holder, name, LEASE_MS)?;
    admin_token_is(&server, name, &holder, token)?;
    told(&mut observer, "w", &Expected::granted(token, &value))?;
    holder.release("h")?;
    told(&mut observer, "w", &Expected::released(token, "released"))?;

    let (token, value) = take(&mut holder, name, LEASE_MS)?;
    admin_token_is(&server, name, &holder, token)?;
    told(&mut observer, "w", &Expected::granted(token, &value))?;
    server.admin.force_release(name)?;
    told(&mut observer, "w", &Expected::released(token, "forced"))?;
    let release = holder.call(json!({"cmd": "release", "handle": "h"}))?;
    ensure!(
        holder.client,
        release.ok() || release.kind() == Some("lost"),
        "{}: release of a force-released lock answered {}",
        holder.label,
        release.0
    );

    let (token, value) = take(&mut killed, name, LEASE_MS)?;
    admin_token_is(&server, name, &killed, token)?;
    told(&mut observer, "w", &Expected::granted(token, &value))?;
    killed.kill()?;
    told(&mut observer, "w", &Expected::released(token, "released"))?;

    let (token, value) = take(&mut stopped, name, EXPIRING_LEASE_MS)?;
    admin_token_is(&server, name, &stopped, token)?;
    told(&mut observer, "w", &Expected::granted(token, &value))?;
    stopped.signal(libc::SIGSTOP)?;
    told(&mut observer, "w", &Expected::released(token, "expired"))?;
    stopped.kill()?;

    nothing_more(&mut observer, "w")?;
    observer.unobserve("w")?;
    observer.exit()?;
    holder.exit()
}

/// A server started with `--max-watches-per-session 2` and `--max-watches
/// 3`: a driver's three `observe`s all succeed, the third on a second
/// session (REFUSED `0x0b` on the first moves the watch, as `0x09` moves a
/// claim, or the client knows the session's bound from FEATURES), and the
/// admin API shows the watches 2 and 1 on two sessions. The fourth fails
/// with kind `server` (REFUSED `0x0c`, the server's bound, a server
/// condition and so temporary), and the admin API still counts three
/// watches. The first three keep working: each is told the GRANTED of a
/// lock another driver then takes with a value. Once one is unobserved
/// (the admin API counts two watches), a fourth `observe` succeeds.
///
/// A run forced to v1 has no observations: its `observe` answers
/// `unsupported` without connecting.
pub fn observer_bound_refused(lab: &Lab, client: &Prepared) -> Check {
    if client.force_v1 {
        let (listener, address) = untouched_listener()?;
        let mut driver = client.driver(lab, 1)?;
        driver.open(&address)?;
        let cmd = json!({"cmd": "observe", "handle": "w", "name": "conformance/bound"});
        let what = "observe under protocol version 1";
        unsupported(&mut driver, cmd, what, V1_UNSUPPORTED)?;
        no_connection(&driver, &listener, what)?;
        return driver.exit();
    }
    let bounds = ["--max-watches-per-session", "2", "--max-watches", "3"];
    let server = Server::start(&lab.monolock, &bounds)?;
    let mut observer = client.driver(lab, 1)?;
    let mut holder = client.driver(lab, 2)?;
    observer.open(&server.address())?;
    holder.open(&server.address())?;
    let names = [
        "conformance/bound-1",
        "conformance/bound-2",
        "conformance/bound-3",
        "conformance/bound-4",
    ];
    let watches = ["w1", "w2", "w3"];
    for (watch, name) in watches.iter().zip(names) {
        let initial = observer.observe(watch, name)?;
        initially_free(&observer, &initial, name)?;
    }
    let per_session = watches_per_session(&server)?;
    ensure!(
        client.name(),
        per_session == [1, 2],
        "three observations on sessions bound to 2 watches: the admin API shows watches \
         {per_session:?} on the sessions that have any, where it must be [1, 2] (two sessions)"
    );
    let fourth = json!({"cmd": "observe", "handle": "w4", "name": names[3]});
    let refused = observer.fails(fourth, &["server"])?;
    temporary_is(
        &observer,
        &refused,
        true,
        "an observation past --max-watches",
    )?;
    let counted = server.admin.watches()?;
    ensure!(
        client.name(),
        counted == 3,
        "after three observations and a refused fourth, the admin API counts {counted} watches"
    );
    for (watch, name) in watches.iter().zip(names) {
        let value = format!("{name} holder");
        let token = holder.lock_with_value(watch, name, LEASE_MS, &value)?;
        told(&mut observer, watch, &Expected::granted(token, &value))?;
    }
    observer.unobserve("w1")?;
    // The client need not wait for UNOBSERVED: the server's count says
    // when the watch is gone.
    server
        .admin
        .until("the unobserved watch gone", PATIENCE, |admin| {
            Ok((admin.watches()? == 2).then_some(()))
        })?;
    let initial = observer.observe("w4", names[3])?;
    initially_free(&observer, &initial, names[3])?;
    for watch in ["w2", "w3", "w4"] {
        observer.unobserve(watch)?;
    }
    for watch in watches {
        holder.release(watch)?;
    }
    observer.exit()?;
    holder.exit()
}

/// The watches of each open session that has any, as the admin API
/// counts them (`GET /api/sessions`), fewest first.
fn watches_per_session(server: &Server) -> Check<Vec<u64>> {
    let mut counts = Vec::new();
    for session in server.admin.sessions()? {
        let Some(watches) = session["watches"].as_u64() else {
            fail!("admin API: a session in /api/sessions without a number of watches: {session}");
        };
        if watches > 0 {
            counts.push(watches);
        }
    }
    counts.sort_unstable();
    Ok(counts)
}

/// Where an election stands, as the scenario saw it through the events.
struct Election<'a> {
    server: &'a Server,
    name: &'a str,
    drivers: Vec<Driver>,
    handles: Vec<&'static str>,
    values: Vec<String>,
    /// Drivers whose process was killed.
    dead: BTreeSet<usize>,
}

impl Election<'_> {
    /// Waits until exactly one of `candidates` starts leading, under a
    /// token above `previous` that the admin API shows, and every one of
    /// `watchers` is told `new_leader` with that token and the leader's
    /// value. No other candidate may start leading, no watcher may be told
    /// an older leader, and nobody may stop leading here.
    fn new_leader(
        &mut self,
        candidates: &[usize],
        watchers: &[usize],
        previous: u64,
    ) -> Check<(usize, u64)> {
        let deadline = std::time::Instant::now() + PATIENCE;
        let mut leader: Option<(usize, u64)> = None;
        let mut last_told: Vec<Option<(u64, String)>> = vec![None; self.drivers.len()];
        let asked: BTreeSet<usize> = candidates.iter().chain(watchers).copied().collect();
        loop {
            if let Some((at, token)) = leader {
                let everyone = watchers
                    .iter()
                    .all(|&w| last_told[w].as_ref() == Some(&(token, self.values[at].clone())));
                if everyone {
                    break;
                }
            }
            if std::time::Instant::now() >= deadline {
                fail!(
                    "no new leader known to all within {PATIENCE:?}: leader {:?}, told {:?}",
                    leader.map(|(at, token)| (self.drivers[at].label.clone(), token)),
                    last_told
                );
            }
            for &i in &asked {
                self.poll(i, candidates, previous, &mut leader, &mut last_told, POLL)?;
            }
        }
        // One more look at every candidate: no second leader.
        for &i in &asked {
            self.poll(i, candidates, previous, &mut leader, &mut last_told, QUIET)?;
        }
        leader.ok_or_else(|| crate::Failure::new("no leader"))
    }

    /// Asks driver `i` for its next election event and judges it.
    fn poll(
        &mut self,
        i: usize,
        candidates: &[usize],
        previous: u64,
        leader: &mut Option<(usize, u64)>,
        last_told: &mut [Option<(u64, String)>],
        wait: Duration,
    ) -> Check {
        let handle = self.handles[i];
        let driver = &mut self.drivers[i];
        match driver.next_election_event(handle, wait)? {
            Next::Timeout => Ok(()),
            Next::Ended(reply) => Err(driver.failure(format!(
                "its election ended where it must go on: {}",
                reply.0
            ))),
            Next::Got(ElectionEvent::StartedLeading(token)) => {
                if !candidates.contains(&i) {
                    return Err(driver.failure(format!(
                        "started leading (token {token}) where it was no candidate"
                    )));
                }
                if let Some((other, _)) = leader {
                    let other = self.drivers[*other].label.clone();
                    return Err(self.drivers[i].failure(format!(
                        "started leading (token {token}) while {other} leads: two leaders"
                    )));
                }
                if token <= previous {
                    return Err(driver.failure(format!(
                        "started leading under token {token}, not above the previous \
                         leader's {previous}"
                    )));
                }
                let shown = self.server.admin.holder_token(self.name)?;
                let driver = &self.drivers[i];
                ensure!(
                    driver.client,
                    shown == Some(token),
                    "{} started leading under token {token}; the admin API shows {shown:?}",
                    driver.label
                );
                *leader = Some((i, token));
                Ok(())
            }
            Next::Got(ElectionEvent::NewLeader { token, value }) => {
                if token <= previous {
                    return Err(driver.failure(format!(
                        "was told new_leader with token {token} (value {value:?}), not above \
                         the previous leader's {previous}"
                    )));
                }
                last_told[i] = Some((token, value));
                Ok(())
            }
            Next::Got(ElectionEvent::StoppedLeading) => Err(driver.failure(
                "stopped leading where it did not lead, or before it resigned or was killed",
            )),
        }
    }

    /// `resign` of the leader at `i`: it returns after `stopped_leading`
    /// fired, so the events queued on the handle (if the driver keeps it)
    /// include it; after it, nothing but `new_leader` of a later leader.
    fn resign_leader(&mut self, i: usize, token: u64) -> Check {
        let handle = self.handles[i];
        let driver = &mut self.drivers[i];
        driver.resign(handle)?;
        let mut stopped = false;
        loop {
            match driver.next_election_event(handle, Duration::ZERO)? {
                Next::Timeout => break,
                Next::Ended(reply) if reply.kind() == Some("unknown_handle") => return Ok(()),
                Next::Ended(reply) => {
                    return Err(driver.failure(format!(
                        "after resign, next_election_event answered {}",
                        reply.0
                    )));
                }
                Next::Got(ElectionEvent::StoppedLeading) if !stopped => stopped = true,
                Next::Got(ElectionEvent::NewLeader { token: later, .. }) if later > token => {}
                Next::Got(event) => {
                    return Err(
                        driver.failure(format!("after resign, an event out of place: {event:?}"))
                    );
                }
            }
        }
        ensure!(
            driver.client,
            stopped,
            "{}: resign returned before stopped_leading fired",
            driver.label
        );
        Ok(())
    }
}

/// Three drivers of the client `elect` on one lock, each with its own
/// value. Exactly one starts leading (its token the admin API's), and
/// every driver, itself included, is told `new_leader` with that token and
/// its value.
///
/// The leader `resign`s: `stopped_leading` fires before `resign` returns,
/// exactly one of the other two starts leading under a greater token, and
/// both are told `new_leader` with its value. The resigned driver then
/// campaigns again (and is told the current leader); the leader's driver
/// process is killed (SIGKILL), and exactly one of the two remaining
/// starts leading, both told of it.
///
/// A run forced to v1 has no elections (they observe the lock): `elect`
/// answers `unsupported`, either as its reply or as the reply to the
/// first `next_election_event`, without connecting.
pub fn election_fails_over(lab: &Lab, client: &Prepared) -> Check {
    let name = "conformance/election";
    if client.force_v1 {
        let (listener, address) = untouched_listener()?;
        let mut driver = client.driver(lab, 1)?;
        driver.open(&address)?;
        let what = "elect under protocol version 1";
        let reply = driver.call(elect_cmd("e", name, LEASE_MS, "10.0.0.1:9000"))?;
        let refused = if reply.ok() {
            match driver.next_election_event("e", PATIENCE)? {
                Next::Ended(reply) => reply,
                other => {
                    return Err(driver.failure(format!(
                        "{what} must be refused as unsupported; its first event is {other:?}"
                    )));
                }
            }
        } else {
            reply
        };
        ensure!(
            client.name(),
            refused.kind() == Some("unsupported"),
            "{}: {what} must fail with unsupported: {}",
            driver.label,
            refused.0
        );
        temporary_is(&driver, &refused, false, what)?;
        message_has(&driver, &refused, &[V1_UNSUPPORTED], what)?;
        no_connection(&driver, &listener, what)?;
        return driver.exit();
    }
    let server = Server::start(&lab.monolock, &[])?;
    let mut drivers = client.drivers(lab, 1, 3)?;
    open_all(&mut drivers, &server.address())?;
    let values: Vec<String> = drivers
        .iter()
        .enumerate()
        .map(|(i, d)| format!("{} at 10.0.0.{}:9000", d.label, i + 1))
        .collect();
    for (driver, value) in drivers.iter_mut().zip(&values) {
        driver.elect("e", name, LEASE_MS, value)?;
    }
    let mut election = Election {
        server: &server,
        name,
        drivers,
        handles: vec!["e"; 3],
        values,
        dead: BTreeSet::new(),
    };
    let all = [0, 1, 2];
    let (first, first_token) = election.new_leader(&all, &all, 0)?;

    election.resign_leader(first, first_token)?;
    let others: Vec<usize> = all.iter().copied().filter(|&i| i != first).collect();
    let (second, second_token) = election.new_leader(&others, &others, first_token)?;

    // The resigned driver campaigns again and learns the current leader.
    election.handles[first] = "e2";
    let value = election.values[first].clone();
    election.drivers[first].elect("e2", name, LEASE_MS, &value)?;
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let driver = &mut election.drivers[first];
        match driver.next_election_event("e2", POLL)? {
            Next::Got(ElectionEvent::NewLeader { token, value })
                if token == second_token && value == election.values[second] =>
            {
                break;
            }
            Next::Timeout if std::time::Instant::now() < deadline => {}
            other => {
                return Err(driver.failure(format!(
                    "campaigning again, it must be told new_leader with token {second_token} \
                     and {:?}; it answered {other:?}",
                    election.values[second]
                )));
            }
        }
    }

    election.drivers[second].kill()?;
    election.dead.insert(second);
    let remaining: Vec<usize> = all.iter().copied().filter(|&i| i != second).collect();
    let (third, _) = election.new_leader(&remaining, &remaining, second_token)?;
    let follower = remaining.iter().copied().find(|&i| i != third);

    election.drivers[third].resign(election.handles[third])?;
    if let Some(follower) = follower {
        election.drivers[follower].resign(election.handles[follower])?;
    }
    let dead = election.dead.clone();
    for (i, driver) in election.drivers.into_iter().enumerate() {
        if !dead.contains(&i) {
            driver.exit()?;
        }
    }
    Ok(())
}
