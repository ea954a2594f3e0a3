//! The faults, chosen from the seed and injected between steps: delay and
//! reordering across connections, holds, partitions per direction, resets
//! of one end or both, client pauses, server restarts (the process, or the
//! whole machine without a word to its peers), force-release, forced
//! release exactly at a waiter's lease end, and kicks; and, only when
//! named, faults aimed at one planted mistake's boundary each
//! ([`AIMED_FAULTS`]).

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use rand::{Rng, rngs::SmallRng};

use crate::{
    conn::{Conn, End},
    lab::{Admin, SharedLab},
    server::SERVER_HOST,
    stream::Gate,
};

/// How a fault ends.
#[derive(Clone)]
enum Heal {
    /// Let what the server end holds back go, then cut the client's way to
    /// the server.
    LetRepliesGoThenCut {
        conn: Conn,
        client: usize,
    },
    LetGo {
        conn: Conn,
        end: End,
    },
    /// An admin order given later.
    Order(Admin),
    /// Start holding back what an end writes.
    Hold {
        conn: Conn,
        end: End,
    },
    Latency(usize),
    Release(usize),
    Repair {
        client: usize,
        to_server: bool,
    },
    Resume(usize),
    Restart {
        machine: bool,
    },
    /// Have a version 2 host place one more claim.
    Poke(usize),
    /// Cut the way from a client to the server (its link is already
    /// counted busy).
    CutUplink(usize),
    /// Cut the way back too (its link already counted busy), and repair
    /// both at `until`.
    CutDownlinkOf {
        client: usize,
        until: Duration,
    },
    /// Repair both ways of a client's link.
    Reconnect(usize),
    /// Cut the way from the server to a client until then, if its link
    /// has no other fault.
    CutDownlink {
        client: usize,
        until: Duration,
    },
}

pub(crate) struct Nemesis {
    rng: SmallRng,
    hosts: Vec<String>,
    ips: Vec<std::net::IpAddr>,
    gates: Vec<Gate>,
    locks: Vec<String>,
    lab: SharedLab,
    base_latency: Duration,
    /// Chance of a new fault at each step.
    rate: f64,
    heals: Vec<(Duration, Heal)>,
    /// A link has at most one network fault at a time.
    link_busy: Vec<bool>,
    paused: Vec<bool>,
    server_down: bool,
    /// One stalled queue head at a time, so that no other force-release
    /// ends its scenario early.
    uplink_stall_until: Duration,
    /// The faults this seed draws from (swarm testing: a seed that leaves
    /// most faults out explores the rest more deeply).
    menu: Vec<(&'static str, u32)>,
    counts: BTreeMap<&'static str, u64>,
    /// The first version 2 host, when they run (hosts from it on).
    v2_from: Option<usize>,
    /// A queue head to stall as soon as the server hears from it: its
    /// lock, its address, its lease, and when to give up waiting.
    armed: Option<(String, SocketAddr, Duration, Duration)>,
    /// A holder whose replies to hold back as soon as the server hears
    /// from it: its address, its lease, and when to give up waiting.
    armed_holder: Option<(SocketAddr, Duration, Duration)>,
}

/// Every fault, by name.
pub const FAULTS: [&str; 16] = {
    let mut names = [""; 16];
    let mut i = 0;
    while i < MENU.len() {
        names[i] = MENU[i].0;
        i += 1;
    }
    names
};

/// The faults aimed at the protocol's timing boundaries, with the pauses
/// and one-way holds that bring clients near them.
/// (With version 2 hosts, their own stalled uplink too.)
pub const BOUNDARY_FAULTS: [&str; 6] = [
    "pause",
    "hold-one-way",
    "stall-queue-head",
    "delay-replies-then-cut",
    "stall-queue-head-uplink",
    "stall-v2-session-uplink",
];

/// The faults that only version 2 sessions meet, drawn (all of them) when
/// version 2 hosts run.
pub const V2_FAULTS: [&str; 2] = [V2_MENU[0].0, V2_MENU[1].0];

/// Version 2 faults by name, as weights: a force-release through the
/// server handle of one held claim of a session with several claims in
/// use (the others must live on); and "stall-queue-head-uplink" aimed at
/// a version 2 session, whatever the seed's half of the menu: its writes
/// stall while one of its claims is first in a queue, it places one more
/// claim, and the holder is force-released, so that a GRANTED arrives
/// with several frames in flight (a push confirms none of them).
const V2_MENU: [(&str, u32); 2] = [("revoke-one-claim", 4), ("stall-v2-session-uplink", 3)];

/// Faults drawn only when named (`--faults`), so that the default and
/// boundary menus, and the seeds pinned on them, stay as they were.
pub const AIMED_FAULTS: [&str; 2] = [AIMED_MENU[0].0, AIMED_MENU[1].0];

/// Named faults aimed at one boundary, as weights. "stall-heard-queue-head"
/// is `push-confirms-heartbeat`'s: of the queue heads with another waiter
/// behind them, the one with the longest lease has its uplink stalled just
/// after the server heard a heartbeat from it, so that its next heartbeat,
/// a quarter lease later, is in flight when the lock is pushed to it; the
/// server expires it at that earlier frame plus its lease and grants the
/// waiter behind. A push taken as that heartbeat's reply moves the
/// client's deadline a quarter lease on, past the 20 % margin.
///
/// "isolate-after-late-reply" is `deadline-from-receive`'s: of the holders
/// with a waiter, one with the longest lease has the server's replies held
/// back just after the server heard a heartbeat from it, for 0.3 to 0.6 of
/// its lease; then the replies go, and once they have arrived the holder
/// is cut off both ways (not even the close of its expired session reaches
/// it). The server expires it at that heartbeat plus its lease; a deadline
/// counted from the late reply's arrival runs past that.
const AIMED_MENU: [(&str, u32); 2] = [
    ("stall-heard-queue-head", 4),
    ("isolate-after-late-reply", 4),
];

/// Faults by name, as weights.
const MENU: [(&str, u32); 16] = [
    ("delay", 6),
    ("hold", 4),
    ("partition-to-server", 3),
    ("partition-to-client", 3),
    ("pause", 5),
    ("reset-client-end", 2),
    ("reset-server-end", 2),
    ("reset-both-ends", 2),
    ("crash-process", 1),
    ("crash-machine", 1),
    ("force-release", 2),
    ("kick", 2),
    ("hold-one-way", 3),
    // Aimed at boundaries: a queue head that goes silent and a
    // force-release exactly when its lease runs out; a holder whose replies
    // are delayed and whose heartbeats then stop reaching the server.
    ("stall-queue-head", 2),
    ("delay-replies-then-cut", 2),
    ("stall-queue-head-uplink", 2),
];

fn ms(rng: &mut SmallRng, from: u64, to: u64) -> Duration {
    Duration::from_millis(rng.random_range(from..=to))
}

impl Nemesis {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        sim: &turmoil::Sim<'_>,
        rng: SmallRng,
        hosts: Vec<String>,
        gates: Vec<Gate>,
        locks: Vec<String>,
        lab: SharedLab,
        base_latency: Duration,
        rate: f64,
        faults: Option<&[&'static str]>,
        v2_from: Option<usize>,
    ) -> Self {
        let v2 = v2_from.is_some();
        let clients = hosts.len();
        let ips = hosts.iter().map(|host| sim.lookup(host.as_str())).collect();
        let mut rng = rng;
        let mut menu: Vec<_> = match faults {
            Some(names) => MENU
                .into_iter()
                .filter(|(name, _)| names.contains(name))
                .collect(),
            None => MENU.into_iter().filter(|_| rng.random_bool(0.5)).collect(),
        };
        menu.extend(
            AIMED_MENU
                .into_iter()
                .filter(|(name, _)| faults.is_some_and(|names| names.contains(name))),
        );
        if menu.is_empty() {
            menu.push(MENU[rng.random_range(0..MENU.len())]);
        }
        if v2 {
            menu.extend(
                V2_MENU
                    .into_iter()
                    .filter(|(name, _)| faults.is_none_or(|names| names.contains(name))),
            );
        }
        Self {
            menu,
            rng,
            ips,
            hosts,
            gates,
            locks,
            lab,
            base_latency,
            rate,
            heals: Vec::new(),
            link_busy: vec![false; clients],
            paused: vec![false; clients],
            server_down: false,
            uplink_stall_until: Duration::ZERO,
            counts: BTreeMap::new(),
            v2_from,
            armed: None,
            armed_holder: None,
        }
    }

    /// Faults injected so far, by name.
    pub(crate) fn counts(&self) -> &BTreeMap<&'static str, u64> {
        &self.counts
    }

    /// Heals what is due at `now` and perhaps injects a new fault.
    pub(crate) fn step(&mut self, sim: &mut turmoil::Sim<'_>, now: Duration) {
        let due: Vec<Heal> = {
            let (due, later) = self.heals.drain(..).partition(|(at, _)| *at <= now);
            self.heals = later;
            due.into_iter().map(|(_, heal)| heal).collect()
        };
        for heal in due {
            self.heal(sim, now, heal);
        }
        self.fire_armed(now);
        self.fire_armed_holder(now);
        if self.rng.random_bool(self.rate) {
            self.inject(sim, now);
        }
    }

    /// Ends every fault now; none is injected afterwards.
    pub(crate) fn heal_all(&mut self, sim: &mut turmoil::Sim<'_>, now: Duration) {
        // A heal may start another (a cut after a hold): heal until none is
        // left.
        while !self.heals.is_empty() {
            for (_, heal) in std::mem::take(&mut self.heals) {
                self.heal(sim, now, heal);
            }
        }
    }

    fn heal(&mut self, sim: &mut turmoil::Sim<'_>, now: Duration, heal: Heal) {
        let lab = self.lab.clone();
        let note = |what: String| lab.lock().push_trace(now, format_args!("nemesis: {what}"));
        match heal {
            Heal::LetRepliesGoThenCut { conn, client } => {
                conn.hold(End::Server, false);
                let (from, to) = direction(&self.hosts[client], true);
                sim.partition_oneway(from, to);
                let until = now + Duration::from_secs(3);
                self.heals.push((
                    until,
                    Heal::Repair {
                        client,
                        to_server: true,
                    },
                ));
                note(format!(
                    "c{client} replies let go; partition {from} -> {to}"
                ));
            }
            Heal::Order(order) => {
                if lab.admin(order.clone()) {
                    note(format!("{order:?}"));
                }
            }
            Heal::Hold { conn, end } => {
                conn.hold(end, true);
                note(format!("{end:?} end holds its writes"));
            }
            Heal::LetGo { conn, end } => {
                conn.hold(end, false);
                note(format!("{end:?} end's writes let go"));
            }
            Heal::Latency(c) => {
                sim.set_link_max_message_latency(
                    self.hosts[c].as_str(),
                    SERVER_HOST,
                    self.base_latency,
                );
                self.link_busy[c] = false;
                note(format!("c{c} latency back to normal"));
            }
            Heal::Release(c) => {
                sim.release(self.hosts[c].as_str(), SERVER_HOST);
                self.link_busy[c] = false;
                note(format!("c{c} link released"));
            }
            Heal::Repair { client, to_server } => {
                let (from, to) = direction(&self.hosts[client], to_server);
                sim.repair_oneway(from, to);
                self.link_busy[client] = false;
                note(format!("c{client} link repaired {from} -> {to}"));
            }
            Heal::Resume(c) => {
                self.gates[c].resume();
                self.paused[c] = false;
                note(format!("c{c} resumes"));
            }
            Heal::CutDownlink { client, until } => {
                if self.link_busy[client] || self.server_down {
                    return;
                }
                let (from, to) = direction(&self.hosts[client], false);
                sim.partition_oneway(from, to);
                self.link_busy[client] = true;
                self.heals.push((
                    until,
                    Heal::Repair {
                        client,
                        to_server: false,
                    },
                ));
                note(format!("partition {from} -> {to}"));
            }
            Heal::CutUplink(client) => {
                let (from, to) = direction(&self.hosts[client], true);
                sim.partition_oneway(from, to);
                note(format!("partition {from} -> {to}"));
            }
            Heal::CutDownlinkOf { client, until } => {
                let (from, to) = direction(&self.hosts[client], false);
                sim.partition_oneway(from, to);
                self.heals.push((until, Heal::Reconnect(client)));
                note(format!("partition {from} -> {to}"));
            }
            Heal::Reconnect(client) => {
                sim.repair(self.hosts[client].as_str(), SERVER_HOST);
                self.link_busy[client] = false;
                note(format!("c{client} link repaired both ways"));
            }
            Heal::Poke(c) => {
                lab.lock().poke(c);
                note(format!("c{c} asked to place one more claim"));
            }
            Heal::Restart { machine } => {
                sim.bounce(SERVER_HOST);
                if machine {
                    for (c, host) in self.hosts.iter().enumerate() {
                        sim.repair(host.as_str(), SERVER_HOST);
                        self.link_busy[c] = false;
                    }
                }
                self.server_down = false;
                note("server restarts".into());
            }
        }
    }

    fn pick(&mut self) -> &'static str {
        let total: u32 = self.menu.iter().map(|(_, w)| w).sum();
        let mut roll = self.rng.random_range(0..total);
        for &(name, weight) in &self.menu {
            if roll < weight {
                return name;
            }
            roll -= weight;
        }
        self.menu[0].0
    }

    fn inject(&mut self, sim: &mut turmoil::Sim<'_>, now: Duration) {
        let fault = self.pick();
        let c = self.rng.random_range(0..self.hosts.len());
        let host = self.hosts[c].clone();
        let link_free = !self.link_busy[c] && !self.server_down;
        let injected = match fault {
            "delay" if link_free => {
                let max = ms(&mut self.rng, 20, 1500);
                sim.set_link_max_message_latency(host.as_str(), SERVER_HOST, max);
                self.link_busy[c] = true;
                let until = now + ms(&mut self.rng, 200, 5000);
                self.heals.push((until, Heal::Latency(c)));
                Some(format!("c{c} latency up to {max:?}"))
            }
            "hold" if link_free => {
                sim.hold(host.as_str(), SERVER_HOST);
                self.link_busy[c] = true;
                let until = now + ms(&mut self.rng, 50, 3000);
                self.heals.push((until, Heal::Release(c)));
                Some(format!("c{c} link held"))
            }
            "partition-to-server" | "partition-to-client" if link_free => {
                let to_server = fault == "partition-to-server";
                let (from, to) = direction(&host, to_server);
                sim.partition_oneway(from, to);
                self.link_busy[c] = true;
                let until = now + ms(&mut self.rng, 100, 3000);
                self.heals.push((
                    until,
                    Heal::Repair {
                        client: c,
                        to_server,
                    },
                ));
                Some(format!("partition {from} -> {to}"))
            }
            "pause" if !self.paused[c] => {
                self.gates[c].pause();
                self.paused[c] = true;
                let until = now + ms(&mut self.rng, 50, 4000);
                self.heals.push((until, Heal::Resume(c)));
                Some(format!("c{c} pauses"))
            }
            "reset-client-end" | "reset-server-end" | "reset-both-ends" => self.reset(fault),
            "hold-one-way" => {
                let conns = self.lab.conns();
                if conns.is_empty() {
                    None
                } else {
                    let (addr, conn) = conns[self.rng.random_range(0..conns.len())].clone();
                    let end = if self.rng.random_bool(0.5) {
                        End::Client
                    } else {
                        End::Server
                    };
                    conn.hold(end, true);
                    let until = now + ms(&mut self.rng, 50, 3000);
                    self.heals.push((until, Heal::LetGo { conn, end }));
                    Some(format!("{end:?} end of {addr} holds its writes"))
                }
            }
            "stall-queue-head" => self.stall_queue_head(now),
            "delay-replies-then-cut" => self.delay_replies_then_cut(now),
            "stall-queue-head-uplink" => self.stall_queue_head_uplink(now, false),
            "stall-v2-session-uplink" => self.stall_queue_head_uplink(now, true),
            "stall-heard-queue-head" => self.arm_heard_queue_head(now),
            "isolate-after-late-reply" => self.arm_holder(now),
            "crash-process" | "crash-machine" if !self.server_down => {
                let machine = fault == "crash-machine";
                if machine {
                    for (c, host) in self.hosts.iter().enumerate() {
                        sim.partition(host.as_str(), SERVER_HOST);
                        self.link_busy[c] = true;
                    }
                }
                sim.crash(SERVER_HOST);
                self.server_down = true;
                // Today's token rule needs a restart more than a second
                // after the last grant.
                let until = now + ms(&mut self.rng, 1100, 4000);
                self.heals.push((until, Heal::Restart { machine }));
                Some(format!("server crashes ({fault})"))
            }
            "force-release" => {
                let lock = self.locks[self.rng.random_range(0..self.locks.len())].clone();
                let order = if self.rng.random_bool(0.5) {
                    Admin::ForceRelease(lock.clone())
                } else {
                    Admin::ForceReleaseAtLeaseEnd(lock.clone())
                };
                self.lab.admin(order.clone()).then(|| format!("{order:?}"))
            }
            "revoke-one-claim" => {
                let holders = self.lab.lock().checker.multi_holders();
                if holders.is_empty() || self.server_down {
                    None
                } else {
                    let (peer, locks) = holders[self.rng.random_range(0..holders.len())].clone();
                    let lock = locks[self.rng.random_range(0..locks.len())].clone();
                    self.lab
                        .admin(Admin::ForceRelease(lock.clone()))
                        .then(|| format!("force-release {lock}, one of {locks:?} held by {peer}"))
                }
            }
            "kick" => {
                let lock = self.locks[self.rng.random_range(0..self.locks.len())].clone();
                let position = self.rng.random_range(0..3);
                self.lab
                    .admin(Admin::Kick(lock.clone(), position))
                    .then(|| format!("kick position {position} of {lock}"))
            }
            _ => None,
        };
        if let Some(what) = injected {
            *self.counts.entry(fault).or_default() += 1;
            self.lab
                .lock()
                .push_trace(now, format_args!("nemesis: {what}"));
        }
    }

    fn client_of(&self, peer: SocketAddr) -> Option<usize> {
        self.ips.iter().position(|ip| *ip == peer.ip())
    }

    /// Pauses the client first in some queue for longer than any lease, and
    /// has the lock force-released at the very instant that waiter's lease
    /// runs out: promotion must skip it.
    fn stall_queue_head(&mut self, now: Duration) -> Option<String> {
        let heads = self.lab.lock().checker.queue_heads();
        if heads.is_empty() || self.server_down {
            return None;
        }
        let (lock, peer, _) = heads[self.rng.random_range(0..heads.len())].clone();
        let c = self.client_of(peer)?;
        if self.paused[c] {
            return None;
        }
        self.gates[c].pause();
        self.paused[c] = true;
        self.heals
            .push((now + Duration::from_secs(3), Heal::Resume(c)));
        self.lab.admin(Admin::ForceReleaseAtLeaseEnd(lock.clone()));
        Some(format!(
            "c{c}, first in the queue of {lock}, pauses; force-release at its lease end"
        ))
    }

    /// Holds back the server's replies to a holder with waiters behind it,
    /// then lets them go and cuts the holder's way to the server: the
    /// holder must not count from the late reply's arrival.
    fn delay_replies_then_cut(&mut self, now: Duration) -> Option<String> {
        let holders = self.lab.lock().checker.holders_with_waiters();
        if holders.is_empty() || self.server_down {
            return None;
        }
        let (peer, lease) = holders[self.rng.random_range(0..holders.len())];
        let client = self.client_of(peer)?;
        if self.link_busy[client] {
            return None;
        }
        let conn = self.lab.open_conn(peer)?;
        conn.hold(End::Server, true);
        self.link_busy[client] = true;
        // Longer than the 20 % margin, shorter than the client's deadline.
        let until = now + lease.mul_f64(self.rng.random_range(0.25..0.5));
        self.heals
            .push((until, Heal::LetRepliesGoThenCut { conn, client }));
        Some(format!("replies to c{client} ({peer}) held back"))
    }

    /// Stalls what a queue head sends (its heartbeat stays in flight), then
    /// has the holder force-released: the push that follows must not count
    /// as the reply to that heartbeat.
    fn stall_queue_head_uplink(&mut self, now: Duration, v2_only: bool) -> Option<String> {
        let heads = self.lab.lock().checker.queue_heads();
        if heads.is_empty() || self.server_down {
            return None;
        }
        if now < self.uplink_stall_until {
            return None;
        }
        // With version 2 hosts, their sessions first: several claims share
        // one, so more than the heartbeat may be in flight at the push.
        let heads = match self.v2_from {
            Some(first) => {
                let v2: Vec<_> = heads
                    .iter()
                    .filter(|(_, peer, _)| self.client_of(*peer).is_some_and(|c| c >= first))
                    .cloned()
                    .collect();
                if v2.is_empty() && !v2_only { heads } else { v2 }
            }
            None => heads,
        };
        if heads.is_empty() {
            return None;
        }
        let (lock, peer, lease) = heads[self.rng.random_range(0..heads.len())].clone();
        self.stall_uplink_of(now, lock, peer, lease, false)
    }

    /// Picks, of the queue heads with another waiter behind them, the one
    /// with the longest lease, to stall once the server hears from it.
    fn arm_heard_queue_head(&mut self, now: Duration) -> Option<String> {
        if self.armed.is_some() || now < self.uplink_stall_until || self.server_down {
            return None;
        }
        let heads = self.lab.lock().checker.queue_heads_with_followers();
        let longest = heads.iter().map(|(_, _, lease)| *lease).max()?;
        let heads: Vec<_> = heads
            .into_iter()
            .filter(|(_, _, lease)| *lease == longest)
            .collect();
        let (lock, peer, lease) = heads[self.rng.random_range(0..heads.len())].clone();
        let what = format!("{peer}, first in the queue of {lock}, to stall once heard");
        // A heartbeat comes within a quarter lease; wait a whole one.
        self.armed = Some((lock, peer, lease, now + lease));
        Some(what)
    }

    /// Picks, of the holders with a waiter, one with the longest lease, to
    /// hold back the replies to once the server hears from it.
    fn arm_holder(&mut self, now: Duration) -> Option<String> {
        if self.armed_holder.is_some() || self.server_down {
            return None;
        }
        let holders = self.lab.lock().checker.holders_with_waiters();
        let longest = holders.iter().map(|(_, lease)| *lease).max()?;
        let holders: Vec<_> = holders
            .into_iter()
            .filter(|(peer, lease)| {
                *lease == longest && self.client_of(*peer).is_some_and(|c| !self.link_busy[c])
            })
            .collect();
        if holders.is_empty() {
            return None;
        }
        let (peer, lease) = holders[self.rng.random_range(0..holders.len())];
        // A heartbeat comes within a quarter lease; wait a whole one.
        self.armed_holder = Some((peer, lease, now + lease));
        Some(format!(
            "{peer}, a holder with waiters, to isolate once heard"
        ))
    }

    /// Holds back the replies to the armed holder if the server heard from
    /// it within the last step; lets them go 0.3 to 0.6 lease later, then
    /// cuts the holder off both ways.
    fn fire_armed_holder(&mut self, now: Duration) {
        let Some((peer, lease, until)) = self.armed_holder else {
            return;
        };
        if now >= until || self.server_down {
            self.armed_holder = None;
            return;
        }
        let heard = self
            .lab
            .heard_at(peer)
            .is_some_and(|at| at + crate::TICK >= now);
        if !heard {
            return;
        }
        self.armed_holder = None;
        let Some(client) = self.client_of(peer) else {
            return;
        };
        let Some(conn) = self.lab.open_conn(peer) else {
            return;
        };
        if self.link_busy[client] || self.lab.lock().checker.holder_of(peer).is_empty() {
            return;
        }
        conn.hold(End::Server, true);
        self.link_busy[client] = true;
        let let_go_at = now + lease.mul_f64(self.rng.random_range(0.3..0.6));
        self.heals.push((
            let_go_at,
            Heal::LetGo {
                conn,
                end: End::Server,
            },
        ));
        // The uplink at once (what the holder sends after the late reply
        // never arrives); the way back once the replies have arrived.
        self.heals.push((let_go_at, Heal::CutUplink(client)));
        let cut_at = let_go_at + self.base_latency + crate::TICK * 2;
        let until = cut_at + lease * 2;
        self.heals
            .push((cut_at, Heal::CutDownlinkOf { client, until }));
        self.lab.lock().push_trace(
            now,
            format_args!("nemesis: replies to c{client} ({peer}) held back, just heard"),
        );
    }

    /// Stalls the armed queue head's uplink if the server heard from it
    /// within the last step and it is still first in its queue.
    fn fire_armed(&mut self, now: Duration) {
        let Some((lock, peer, lease, until)) = self.armed.clone() else {
            return;
        };
        if now >= until || self.server_down {
            self.armed = None;
            return;
        }
        let heard = self
            .lab
            .heard_at(peer)
            .is_some_and(|at| at + crate::TICK >= now);
        if !heard {
            return;
        }
        self.armed = None;
        let first = self
            .lab
            .lock()
            .checker
            .queue_heads()
            .iter()
            .any(|(l, head, _)| *l == lock && *head == peer);
        if !first || now < self.uplink_stall_until {
            return;
        }
        if let Some(what) = self.stall_uplink_of(now, lock, peer, lease, true) {
            self.lab
                .lock()
                .push_trace(now, format_args!("nemesis: {what}, just heard"));
        }
    }

    /// Stalls what the queue head `peer` of `lock` sends, then has the
    /// holder force-released while a heartbeat of it is in flight, and
    /// stalls the way back once the push has arrived. With `cut_downlink`,
    /// the way back is cut for the stall's length (a partition from the
    /// server), so that not even the close of the session the server
    /// expires reaches the client; else the server end holds its writes
    /// (its close still goes through).
    fn stall_uplink_of(
        &mut self,
        now: Duration,
        lock: String,
        peer: SocketAddr,
        lease: Duration,
        cut_downlink: bool,
    ) -> Option<String> {
        let conn = self.lab.open_conn(peer)?;
        conn.hold(End::Client, true);
        let end = End::Client;
        // Past the waiter's lease, so the server expires it.
        self.uplink_stall_until = now + lease.mul_f64(1.5);
        let heal = Heal::LetGo {
            conn: conn.clone(),
            end,
        };
        self.heals.push((self.uplink_stall_until, heal));
        // Once its next heartbeat has gone out (a quarter lease at most).
        let order_at = now + lease.mul_f64(self.rng.random_range(0.3..0.6));
        self.heals
            .push((order_at, Heal::Order(Admin::ForceRelease(lock.clone()))));
        // A version 2 session places one more claim just before: its
        // ACQUIRE is the latest frame in flight when the push arrives.
        if let Some(c) = self.client_of(peer)
            && self.v2_from.is_some_and(|first| c >= first)
        {
            let poke_at = order_at.saturating_sub(Duration::from_millis(10));
            self.heals.push((poke_at, Heal::Poke(c)));
        }
        // Once the push has arrived, the way back stalls too (a partition in
        // both directions): the session's end does not reach the client.
        let both_at = order_at + ms(&mut self.rng, 20, 100);
        if cut_downlink && let Some(client) = self.client_of(peer) {
            let until = self.uplink_stall_until;
            self.heals
                .push((both_at, Heal::CutDownlink { client, until }));
            return Some(format!(
                "{peer}, first in the queue of {lock}, stalls its writes"
            ));
        }
        let end = End::Server;
        self.heals.push((
            both_at,
            Heal::Hold {
                conn: conn.clone(),
                end,
            },
        ));
        self.heals.push((
            self.uplink_stall_until,
            Heal::LetGo {
                conn: conn.clone(),
                end,
            },
        ));
        Some(format!(
            "{peer}, first in the queue of {lock}, stalls its writes"
        ))
    }

    /// Resets one open connection at one end or both. A holder whose
    /// connection the server saw reset may believe until its own end sees it
    /// (a documented exception), so its token is excused.
    fn reset(&mut self, fault: &str) -> Option<String> {
        let conns = self.lab.conns();
        if conns.is_empty() || self.server_down {
            return None;
        }
        let (addr, conn): (SocketAddr, _) = conns[self.rng.random_range(0..conns.len())].clone();
        if fault != "reset-client-end" {
            let mut lab = self.lab.lock();
            for token in lab.checker.holder_of(addr) {
                lab.checker.excuse(token);
            }
        }
        match fault {
            "reset-client-end" => conn.reset(End::Client),
            "reset-server-end" => conn.reset(End::Server),
            _ => {
                conn.reset(End::Server);
                conn.reset(End::Client);
            }
        }
        Some(format!("{fault} of {addr}"))
    }
}

fn direction(host: &str, to_server: bool) -> (&str, &str) {
    if to_server {
        (host, SERVER_HOST)
    } else {
        (SERVER_HOST, host)
    }
}
