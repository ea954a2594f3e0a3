//! A host whose reader stalls while its writer goes on (issue 30's
//! reproduction): it takes a free lock, then reads nothing more and keeps
//! writing, a version 1 holder its heartbeats, a version 2 holder
//! try-ACQUIRE/RELEASE pairs on other names and PINGs. The server's
//! replies fill the connection's send window (`stream.rs`), its writes
//! block, and its io-timeout ends the connection; the lock must stay held
//! until the holder's last frame plus its lease.
//!
//! It speaks the protocol itself (frames of `monolock-proto`), since no
//! client library lets a program write without reading. It takes a lock
//! only when its ACQUIRE is answered at once (ACQUIRED), so the instant it
//! counts from is the ACQUIRE's send instant `S`, and it counts on the lock
//! until `S + 0.8 x lease` (docs/protocol.md, the client's deadline), or
//! until a write fails or it gives up. It reports that belief every
//! millisecond like the other hosts, and the deadline to the checker, which
//! holds every grant of the lock to that deadline.

use std::{cell::RefCell, rc::Rc, time::Duration};

use monolock_proto::{ClientFrame, Lease, LockName, ServerFrame, v2};
use rand::{Rng, SeedableRng, rngs::SmallRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{
    client::{LEASES, PROBE_EVERY},
    lab::SharedLab,
    server,
    stream::{Gate, SimStream},
};

/// Which protocol a stalled host speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Version {
    V1,
    V2,
}

/// What one stalled host does.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) id: usize,
    pub(crate) seed: u64,
    pub(crate) locks: Vec<String>,
    /// From then on no fault is injected: the host stops.
    pub(crate) heal_at: Duration,
    pub(crate) version: Version,
}

/// The lock, its token and the deadline the host counts on.
type Held = Rc<RefCell<Option<(String, u64, Duration)>>>;

/// Version 1 heartbeats written per step of the flood (9 bytes of
/// ACQUIRED each in reply).
const HEARTBEATS_PER_WRITE: usize = 16;
/// Version 2 try-ACQUIRE/RELEASE pairs written per step of the flood, with
/// one PING.
const PAIRS_PER_WRITE: u32 = 4;
/// How often the writer writes while the reader stalls.
const WRITE_EVERY: Duration = Duration::from_millis(5);

fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

/// The host process.
pub(crate) async fn process(plan: Plan, lab: SharedLab, gate: Gate) -> turmoil::Result {
    let id = plan.id;
    let held = Held::default();
    let probe = tokio::task::spawn_local(probe(id, held.clone(), lab.clone()));
    let mut rng = SmallRng::seed_from_u64(plan.seed);
    lab.trace(format_args!(
        "c{id} stalled-reader host, version {}",
        if plan.version == Version::V1 { 1 } else { 2 }
    ));
    // Spread the first asks out.
    tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
    while now() < plan.heal_at {
        let lock = plan.locks[rng.random_range(0..plan.locks.len())].clone();
        let lease = LEASES[rng.random_range(0..LEASES.len())];
        if let Err(what) = cycle(&plan, &lab, &gate, &held, &lock, lease, &mut rng).await {
            lab.trace(format_args!("c{id} {what}"));
        }
        held.borrow_mut().take();
        lab.lock().checker.counts_on(id, None);
        let think = rng.random_range(50..500);
        tokio::time::sleep(Duration::from_millis(think)).await;
    }
    probe.abort();
    lab.lock().checker.client_done(id);
    lab.trace(format_args!("c{id} done"));
    Ok(())
}

/// Connects, takes `lock` if it is free, then stalls its reader and floods
/// for one to two leases; gives the connection up at the end.
async fn cycle(
    plan: &Plan,
    lab: &SharedLab,
    gate: &Gate,
    held: &Held,
    lock: &str,
    lease: Duration,
    rng: &mut SmallRng,
) -> Result<(), String> {
    let id = plan.id;
    let wire_lease = Lease::from_duration(lease).ok_or("lease out of range")?;
    let name = LockName::new(lock).map_err(|err| err.to_string())?;
    let connect = turmoil::net::TcpStream::connect(server::address());
    let stream = tokio::time::timeout(Duration::from_millis(500), connect)
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|err| format!("connect: {err}"))?;
    let local = stream.local_addr().map_err(|err| err.to_string())?;
    let mut stream = SimStream::client(stream, local, gate.clone(), lab.clone(), None);
    // Every answer it waits for comes within a lease, or never.
    let patience = lease;
    let (sent, token) = match plan.version {
        Version::V1 => {
            let sent = now();
            write(
                &mut stream,
                &ClientFrame::acquire(wire_lease, name).to_bytes(),
            )
            .await?;
            match read_v1(&mut stream, patience).await? {
                ServerFrame::Acquired { token } => (sent, token),
                other => return Err(format!("gives up {lock}: {other:?}")),
            }
        }
        Version::V2 => {
            write(
                &mut stream,
                &v2::ClientFrame::Open { lease: wire_lease }.to_bytes(),
            )
            .await?;
            match read_v2(&mut stream, patience).await? {
                v2::ServerFrame::Opened { .. } => {}
                other => return Err(format!("no session: {other:?}")),
            }
            let acquire = v2::ClientFrame::Acquire {
                claim: 1,
                mode: v2::Mode::Try,
                name,
            };
            let sent = now();
            write(&mut stream, &acquire.to_bytes()).await?;
            match read_v2(&mut stream, patience).await? {
                v2::ServerFrame::Acquired { claim: 1, token } => (sent, token),
                other => return Err(format!("gives up {lock}: {other:?}")),
            }
        }
    };
    let deadline = sent + lease * 4 / 5;
    lab.trace(format_args!(
        "c{id} holds {lock} token {token}; its reader stalls, it counts on the lock until {:.3} s",
        deadline.as_secs_f64()
    ));
    *held.borrow_mut() = Some((lock.to_owned(), token, deadline));
    {
        let mut lab = lab.lock();
        lab.checker
            .counts_on(id, Some((lock.to_owned(), token, deadline)));
        lab.count_v2("reader stalled with a lock held");
    }
    let flood_until = now() + lease.mul_f64(rng.random_range(1.0..2.0));
    let batch = flood(plan, lock);
    while now() < flood_until {
        // A paused process writes nothing; its clock goes on.
        let wrote = tokio::time::timeout(WRITE_EVERY, stream.write_all(&batch)).await;
        if let Ok(Err(err)) = wrote {
            return Err(format!("gives {lock} up: its write failed: {err}"));
        }
        tokio::time::sleep(WRITE_EVERY).await;
    }
    Err(format!("gives {lock} up and closes"))
}

/// What the writer writes at each step while the reader stalls.
fn flood(plan: &Plan, held: &str) -> Vec<u8> {
    let mut out = Vec::new();
    match plan.version {
        Version::V1 => {
            for _ in 0..HEARTBEATS_PER_WRITE {
                ClientFrame::Heartbeat.encode(&mut out);
            }
        }
        Version::V2 => {
            // Other names: the run's other locks (taken and given back at
            // once when free), and one of its own.
            let mut names: Vec<String> = plan
                .locks
                .iter()
                .filter(|lock| *lock != held)
                .cloned()
                .collect();
            names.push(format!("c{}-side", plan.id));
            for pair in 0..PAIRS_PER_WRITE {
                let name = &names[pair as usize % names.len()];
                let Ok(name) = LockName::new(name) else {
                    continue;
                };
                // Claim ids are reused: each is freed by its RELEASE (or
                // its BUSY) before the next pair names it again.
                let claim = 2 + pair;
                v2::ClientFrame::Acquire {
                    claim,
                    mode: v2::Mode::Try,
                    name,
                }
                .encode(&mut out);
                v2::ClientFrame::Release { claim }.encode(&mut out);
            }
            v2::ClientFrame::Ping.encode(&mut out);
        }
    }
    out
}

async fn write(stream: &mut SimStream, bytes: &[u8]) -> Result<(), String> {
    stream
        .write_all(bytes)
        .await
        .map_err(|err| format!("write: {err}"))
}

/// Reads one version 1 frame within `patience`.
async fn read_v1(stream: &mut SimStream, patience: Duration) -> Result<ServerFrame, String> {
    read_frame(stream, patience, |buf| {
        monolock_proto::decode_response(buf).map_err(|err| err.to_string())
    })
    .await
}

/// Reads one version 2 frame within `patience`.
async fn read_v2(stream: &mut SimStream, patience: Duration) -> Result<v2::ServerFrame, String> {
    read_frame(stream, patience, |buf| {
        v2::decode_response(buf).map_err(|err| err.to_string())
    })
    .await
}

/// Reads one frame, byte by byte so that nothing after it is consumed.
async fn read_frame<F>(
    stream: &mut SimStream,
    patience: Duration,
    decode: impl Fn(&[u8]) -> Result<Option<(F, usize)>, String>,
) -> Result<F, String> {
    let mut buf = Vec::new();
    let read = async {
        loop {
            let mut byte = [0u8; 1];
            let n = stream
                .read(&mut byte)
                .await
                .map_err(|err| format!("read: {err}"))?;
            if n == 0 {
                return Err("the server closed".to_owned());
            }
            buf.push(byte[0]);
            if let Some((frame, _)) = decode(&buf)? {
                return Ok(frame);
            }
        }
    };
    tokio::time::timeout(patience, read)
        .await
        .map_err(|_| "no answer within a lease".to_owned())?
}

/// Reports the host's belief every millisecond: the lock it holds, until
/// its deadline.
async fn probe(id: usize, held: Held, lab: SharedLab) {
    let mut tick = tokio::time::interval(PROBE_EVERY);
    loop {
        tick.tick().await;
        let at = now();
        let belief = held
            .borrow()
            .as_ref()
            .filter(|(_, _, deadline)| at < *deadline)
            .map(|(lock, token, _)| (lock.clone(), *token));
        lab.lock().checker.probe(id, at, belief);
    }
}
