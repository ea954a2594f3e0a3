//! 8. keepalived VRRP failover between two real servers, for real.
//!
//! The test builds its own network: four namespaces (a switch with a
//! bridge; primary `a`, standby `b` and clients `c`, each on a veth pair to
//! the bridge; the harness itself on a fifth veth, for the checker). Both
//! nodes run `monolock serve` and Debian's `keepalived` with the
//! configuration and health check of `deploy/keepalived/` (only the
//! site-specific definitions replaced); workers in `c` hold and write
//! through the virtual IP with fencing. Then the primary fails:
//!
//! - **kill**: its monolock is SIGKILLed; the health check on `/readyz`
//!   fails, the primary's priority drops below the standby's;
//! - **isolate**: its link to the switch goes down; its adverts stop.
//!
//! keepalived moves the address, and on becoming master the standby
//! starts its monolock (what `systemctl restart` does on a host), which
//! starts its `--startup-grace`; a node that becomes backup or faulty
//! stops its own. Measured: the time from the fault to the
//! standby's first grant, which must stay within the case's bound
//! ([`Case::bound`]; a slower case fails with the timeline of where the
//! time went), and the overlap of the holders' beliefs across the two
//! servers. With a grace >= the lease there must be none; with a
//! grace of 0 after an isolation they overlap (the old holder still
//! believes until 0.8 x lease of silence), and the overlap is reported.
//! Tokens must rise through the fenced resource in every case.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, SystemTime},
};

use rand::rngs::StdRng;

use self::timeline::{Clocks, Timeline};
use super::{Env, Lab, Report, ScenarioError, patience};
use crate::{
    belief::overlaps,
    checker::Checker,
    clock::{mono_ns, ms_between},
};

mod timeline;

/// The scenario's name on the command line and in reports.
pub(super) const NAME: &str = "vrrp-failover";

const LOCK: &str = "faults/vrrp";
const LEASE: Duration = Duration::from_millis(1000);
/// At least the lease: the standby grants nothing before the primary's
/// holders have given up.
const GRACE: Duration = Duration::from_millis(1200);
const PORT: u16 = 7070;
const OPS: &str = "127.0.0.1:9090";
/// The keepalived files as shipped.
const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/keepalived");

/// How long the primary's health check takes to fail once its monolock is
/// dead, from the shipped `vrrp_script`: checks every second (`interval
/// 1`), two failures in a row (`fall 2`), each allowed a second (`timeout
/// 1`; a refused connection fails at once).
const CHECK_FAILS: Duration = Duration::from_secs(3);
/// How long the standby takes to become master once the primary's adverts
/// stop: VRRPv3's master-down interval, three adverts (`advert_int 0.1`)
/// plus the skew of one, (256 - 100) / 256 of it for priority 100.
const MASTER_DOWN: Duration = Duration::from_millis(361);
/// Everything else between the takeover and the grant: the standby's
/// server starting (its takeover script runs it in the background), and a
/// client whose SYN went to the primary's MAC address just before the
/// standby's gratuitous ARP (one SYN retransmission, 1 s).
const SLACK: Duration = Duration::from_millis(1500);

#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill,
    Isolate,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    fault: Fault,
    grace: Duration,
}

impl Case {
    /// The longest a failover may take from the fault to the standby's
    /// first grant: noticing the fault, the takeover, the startup grace,
    /// and the slack.
    fn bound(self) -> Duration {
        let notice = match self.fault {
            Fault::Kill => CHECK_FAILS,
            Fault::Isolate => Duration::ZERO,
        };
        notice + MASTER_DOWN + self.grace + SLACK
    }

    fn label(self) -> String {
        let fault = match self.fault {
            Fault::Kill => "kill",
            Fault::Isolate => "isolate",
        };
        format!("{fault}-grace{}ms", self.grace.as_millis())
    }
}

const CASES: [Case; 3] = [
    Case {
        fault: Fault::Kill,
        grace: GRACE,
    },
    Case {
        fault: Fault::Isolate,
        grace: GRACE,
    },
    Case {
        fault: Fault::Isolate,
        grace: Duration::ZERO,
    },
];

/// Why this machine cannot run the scenario (not root, or a tool
/// missing), as one line; `None` if it can.
pub fn unavailable() -> Option<String> {
    if !monolock_testkit::sys::is_root() {
        return Some(format!(
            "{NAME} needs root (it creates network namespaces and runs keepalived); \
             CI runs it as root, run `sudo -E cargo test -p monolock-faults --test scenarios vrrp` to run it here"
        ));
    }
    for tool in ["ip", "keepalived", "curl"] {
        if find_tool(tool).is_none() {
            return Some(format!(
                "{NAME} needs `{tool}` (Debian: iproute2, keepalived, curl; .ci/setup.d/keepalived.sh installs them)"
            ));
        }
    }
    None
}

fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

pub(super) async fn run(
    env: &Env,
    rounds: u32,
    _rng: &mut StdRng,
    report: &mut Report,
) -> super::Result<()> {
    if let Some(why) = unavailable() {
        return Err(ScenarioError::Unexpected(why));
    }
    report.lease_ms = LEASE.as_millis() as u64;
    for _ in 0..rounds.max(1) {
        for case in CASES {
            run_case(env, case, report)
                .await
                .map_err(ScenarioError::Unexpected)?;
        }
    }
    Ok(())
}

async fn run_case(env: &Env, case: Case, report: &mut Report) -> Result<(), String> {
    let label = case.label();
    let net = Net::create()?;
    let nodes = Nodes::start(env, &net, case).await?;
    nodes.wait_started('a', 1).await?;

    let checker = Checker::start_on(IpAddr::V4(net.ip(254)))
        .await
        .map_err(|e| format!("checker: {e}"))?;
    let worker_env = Env {
        worker_bin: nodes.worker_wrapper(env)?,
        server_bin: env.server_bin.clone(),
    };
    let mut lab = Lab::with_checker(&worker_env, checker);
    let vip = SocketAddr::new(IpAddr::V4(net.ip(100)), PORT);
    // One holder that keeps the lock for three leases (it holds at the
    // fault and believes until its deadline), two that hand over quickly.
    for hold in [
        LEASE * 3,
        Duration::from_millis(100),
        Duration::from_millis(150),
    ] {
        lab.spawn(vip, LOCK, LEASE, hold, false)
            .map_err(|e| e.to_string())?;
    }
    let err = |e: crate::checker::WaitTimeout| e.to_string();
    let wait = patience(LEASE) + case.grace;
    lab.wait_held(LOCK, 0, None, wait).await.map_err(err)?;
    // The long holder (the first worker) holds at the moment of the fault:
    // it is the one that believes longest after its server is gone.
    let mut after = mono_ns();
    for _ in 0..10 {
        let (worker, _, from) = lab.wait_held(LOCK, after, None, wait).await.map_err(err)?;
        if worker == "w1" {
            break;
        }
        after = from;
    }

    let clocks = Clocks::now();
    let fault_at = mono_ns();
    match case.fault {
        Fault::Kill => nodes.kill_server('a')?,
        Fault::Isolate => net.isolate('a')?,
    }
    // The fault is in effect by the time its command returns: a grant
    // before that may still be the primary's.
    let in_effect = mono_ns();
    let mut timeline = Timeline::new(fault_at);
    timeline.add(fault_at, format!("{label}: the fault"));
    timeline.add(in_effect, "the fault's command returned");
    report.maximum(
        &format!("{label}-fault-command-ms"),
        ms_between(fault_at, in_effect),
    );
    report.fault(&label);
    let (first_holder, first_token, granted_at) = lab
        .wait_held(LOCK, in_effect, None, wait + Duration::from_secs(5))
        .await
        .map_err(err)?;
    timeline.add(
        granted_at,
        format!("{first_holder} granted token {first_token}: the first grant after the fault"),
    );
    let fault_to_grant = ms_between(fault_at, granted_at);
    report.fault_to_grant(fault_to_grant);
    nodes.wait_vip(&net, 'b').await?;
    nodes.explain(&mut timeline, clocks, fault_at);
    let records = lab
        .checker
        .wait_for(Duration::ZERO, "the journal", |records| {
            Some(records.to_vec())
        })
        .await
        .map_err(err)?;
    timeline.add_workers(LOCK, &records, granted_at);
    report.maximum(&format!("{label}-fault-to-grant-ms"), fault_to_grant);
    for (step, at) in [
        ("takeover", nodes.took_over_after(clocks, fault_at)),
        ("listening", nodes.listening_after(clocks, fault_at)),
    ] {
        if let Some(at) = at {
            report.maximum(&format!("{label}-{step}-ms"), timeline.ms(at));
        }
    }
    // Bounded from the moment the fault is surely in effect: a slow `ip`
    // is the lab's, not the failover's (its time is a figure of its own).
    let bound = case.bound();
    let in_effect_to_grant = ms_between(in_effect, granted_at);
    report.check(in_effect_to_grant <= bound.as_secs_f64() * 1000.0, || {
        format!(
            "{label}: {in_effect_to_grant:.0} ms from the fault to the standby's first grant, \
             over the bound of {} ms:{timeline}",
            bound.as_millis()
        )
    });
    report.check(nodes.started('b') == 1, || {
        format!("{label}: the standby's monolock was not started once on takeover")
    });
    // The standby serves: a few handovers there.
    lab.wait_held(LOCK, granted_at, None, wait)
        .await
        .map_err(err)?;

    let server_of = move |_: &str, token: u64| {
        if token >= first_token {
            "standby".to_owned()
        } else {
            "primary".to_owned()
        }
    };
    let cross_before = report.cross_server_overlaps;
    lab.finish(report, server_of).await;
    let cross = report.cross_server_overlaps - cross_before;
    let (beliefs, _) = lab.checker.beliefs(server_of);
    let worst = overlaps(&beliefs, false)
        .iter()
        .filter(|o| o.first.server != o.second.server)
        .map(|o| o.overlap_ns)
        .max()
        .unwrap_or(0);
    report.count(&format!("{label}-cross-server-overlaps"), cross);
    report.maximum(&format!("{label}-overlap-ms"), worst as f64 / 1e6);
    if case.grace >= LEASE {
        report.check(cross == 0, || {
            format!("{label}: {cross} beliefs overlapped across the failover (worst {worst} ns) despite a grace >= the lease")
        });
    } else {
        // Expected with grace 0; the figure is the point. Accounted apart
        // so the report's failure rule does not count it.
        report.cross_server_overlaps -= cross;
    }
    let mut nodes = nodes;
    nodes.tidy = report.problems.is_empty();
    drop(nodes);
    drop(net);
    Ok(())
}

/// Runs `ip ARGS`, failing with its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The test's network; deleted on drop.
struct Net {
    prefix: String,
    subnet: u8,
}

impl Net {
    /// Namespaces `<prefix>s` (switch), `a`, `b`, `c`, and a veth from the
    /// harness's own namespace into the switch, on 198.18.N.0/24 (a range
    /// reserved for benchmarking, RFC 2544).
    fn create() -> Result<Self, String> {
        let pid = std::process::id();
        let net = Self {
            prefix: format!("mlv{}", pid % 100_000),
            subnet: (20 + pid % 200) as u8,
        };
        net.delete();
        let s = net.ns('s');
        for node in ['s', 'a', 'b', 'c'] {
            ip(&["netns", "add", &net.ns(node)])?;
            ip(&["-n", &net.ns(node), "link", "set", "lo", "up"])?;
        }
        ip(&["-n", &s, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &s, "link", "set", "br0", "up"])?;
        for (node, host) in [('a', 1u8), ('b', 2), ('c', 3)] {
            let ns = net.ns(node);
            let port = format!("{node}-s");
            ip(&[
                "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &port,
                "netns", &s,
            ])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", net.ip(host)),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &s, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &s, "link", "set", &port, "up"])?;
        }
        let host_end = net.ns('r');
        ip(&[
            "link", "add", &host_end, "type", "veth", "peer", "name", "r-s", "netns", &s,
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", net.ip(254)),
            "dev",
            &host_end,
        ])?;
        ip(&["link", "set", &host_end, "up"])?;
        ip(&["-n", &s, "link", "set", "r-s", "master", "br0"])?;
        ip(&["-n", &s, "link", "set", "r-s", "up"])?;
        Ok(net)
    }

    fn ns(&self, node: char) -> String {
        format!("{}{node}", self.prefix)
    }

    fn ip(&self, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.subnet, host)
    }

    /// Takes `node`'s link down at the switch: a cable pulled.
    fn isolate(&self, node: char) -> Result<(), String> {
        ip(&[
            "-n",
            &self.ns('s'),
            "link",
            "set",
            &format!("{node}-s"),
            "down",
        ])
    }

    fn delete(&self) {
        // The harness's veth goes with its peer in the switch namespace.
        for node in ['s', 'a', 'b', 'c'] {
            let _ = ip(&["netns", "del", &self.ns(node)]);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.delete();
    }
}

/// Both nodes: their monolock (started and restarted by a takeover script,
/// as a service manager would) and their keepalived.
struct Nodes {
    dir: PathBuf,
    /// The clients' namespace, where the workers run.
    clients_ns: String,
    keepalived: Vec<std::process::Child>,
    /// Remove the work directory (configurations, logs) on drop: set once
    /// the case passed; a failed case keeps it for diagnosis.
    tidy: bool,
}

impl Nodes {
    /// Starts the primary's keepalived, waits until it holds the address,
    /// then the standby's (so the initial election never races).
    async fn start(env: &Env, net: &Net, case: Case) -> Result<Self, String> {
        let grace = case.grace;
        let monolock = env.server_bin().map_err(|e| e.to_string())?;
        let base = env
            .worker_bin
            .parent()
            .map_or_else(std::env::temp_dir, Path::to_path_buf);
        // Not under /tmp: keepalived refuses scripts in a directory others
        // can write to.
        let dir = base.join(format!("vrrp-{}-{}", net.prefix, case.label()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut nodes = Self {
            dir,
            clients_ns: net.ns('c'),
            keepalived: Vec::new(),
            tidy: false,
        };
        let shipped = std::fs::read_to_string(Path::new(DEPLOY).join("keepalived.conf"))
            .map_err(|e| format!("{DEPLOY}/keepalived.conf: {e}"))?;
        let check = Path::new(DEPLOY).join("monolock-check.sh");
        for (node, role) in [('a', "primary"), ('b', "standby")] {
            let (start, stop) = nodes.write_service(node, &monolock, grace)?;
            let conf = nodes.dir.join(format!("keepalived-{node}.conf"));
            let site = [
                ("$IFACE=", "eth0".to_owned()),
                ("$VIP=", format!("{}/24", net.ip(100))),
                ("$ROUTER_ID=", net.subnet.to_string()),
                (
                    "$CHECK=",
                    format!("{} {OPS} {}", check.display(), net.ip(100)),
                ),
                ("$START=", start.display().to_string()),
                ("$STOP=", stop.display().to_string()),
            ];
            let text: String = shipped
                .lines()
                .map(
                    |line| match site.iter().find(|(key, _)| line.starts_with(key)) {
                        Some((key, value)) => format!("{key}{value}\n"),
                        None => format!("{line}\n"),
                    },
                )
                .collect();
            write(&conf, &text, 0o644)?;
            let pid = |what: &str| nodes.dir.join(format!("keepalived-{node}{what}.pid"));
            let child = Command::new("ip")
                .args(["netns", "exec", &net.ns(node), "keepalived"])
                .args(["--dont-fork", "--log-console", "--log-detail"])
                .args(["--config-id", role, "--use-file"])
                .arg(&conf)
                .arg("--pid")
                .arg(pid(""))
                .arg("--vrrp_pid")
                .arg(pid("-vrrp"))
                .arg("--checkers_pid")
                .arg(pid("-checkers"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(
                    std::fs::File::create(nodes.dir.join(format!("keepalived-{node}.log")))
                        .map_err(|e| e.to_string())?,
                )
                .spawn()
                .map_err(|e| format!("keepalived: {e}"))?;
            nodes.keepalived.push(child);
            if node == 'a' {
                nodes.wait_vip(net, 'a').await?;
            }
        }
        Ok(nodes)
    }

    /// The node's START and STOP scripts: what `systemctl restart` and
    /// `systemctl stop` do on a host. SIGKILL, so the ops port is free at
    /// once (a server that is stopped holds nothing anyone can reach).
    fn write_service(
        &self,
        node: char,
        monolock: &Path,
        grace: Duration,
    ) -> Result<(PathBuf, PathBuf), String> {
        let dir = self.dir.display();
        let stop = format!(
            "#!/bin/sh\n\
             pidfile={dir}/monolock-{node}.pid\n\
             if [ -s \"$pidfile\" ]; then\n\
             \tpid=$(cat \"$pidfile\")\n\
             \tkill -KILL \"$pid\" 2>/dev/null\n\
             \tn=0\n\
             \twhile [ -d /proc/$pid ] && ! grep -q '^State:.*Z' /proc/$pid/status 2>/dev/null && [ $n -lt 500 ]; do sleep 0.01; n=$((n+1)); done\n\
             \t: > \"$pidfile\"\n\
             fi\n"
        );
        let stop_path = self.dir.join(format!("stop-{node}.sh"));
        write(&stop_path, &stop, 0o755)?;
        let start = format!(
            "#!/bin/sh\n\
             {stop}\n\
             {monolock} serve --listen 0.0.0.0:{PORT} --ops-listen {OPS} --startup-grace {grace}ms --log-format json >>{dir}/monolock-{node}.log 2>&1 &\n\
             echo $! > {dir}/monolock-{node}.pid\n\
             echo \"started $(date +%s%N)\" >> {dir}/started-{node}.log\n",
            stop = stop_path.display(),
            monolock = monolock.display(),
            grace = grace.as_millis(),
        );
        let start_path = self.dir.join(format!("start-{node}.sh"));
        write(&start_path, &start, 0o755)?;
        Ok((start_path, stop_path))
    }

    /// A script that runs the worker inside the clients' namespace.
    fn worker_wrapper(&self, env: &Env) -> Result<PathBuf, String> {
        let path = self.dir.join("worker.sh");
        let script = format!(
            "#!/bin/sh\nexec ip netns exec {} {} \"$@\"\n",
            self.clients_ns,
            env.worker_bin.display()
        );
        write(&path, &script, 0o755)?;
        Ok(path)
    }

    /// How many times keepalived started `node`'s monolock.
    fn started(&self, node: char) -> usize {
        std::fs::read_to_string(self.dir.join(format!("started-{node}.log")))
            .map_or(0, |text| text.lines().count())
    }

    /// When keepalived started `node`'s monolock (its takeover script's
    /// stamps, wall clock).
    fn started_at(&self, node: char) -> Vec<SystemTime> {
        std::fs::read_to_string(self.dir.join(format!("started-{node}.log")))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.strip_prefix("started ")?.trim().parse::<u64>().ok())
            .map(|ns| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns))
            .collect()
    }

    /// When `node`'s monolock logged "listening" (wall clock, from its JSON
    /// log).
    fn listening_at(&self, node: char) -> Vec<SystemTime> {
        std::fs::read_to_string(self.dir.join(format!("monolock-{node}.log")))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|entry| entry["message"] == "listening")
            .filter_map(|entry| humantime::parse_rfc3339(entry["timestamp"].as_str()?).ok())
            .collect()
    }

    /// The first instant after `fault_at` (monotonic) among `stamps`.
    fn first_after(stamps: &[SystemTime], clocks: Clocks, fault_at: u64) -> Option<u64> {
        stamps
            .iter()
            .map(|&wall| clocks.mono_of(wall))
            .filter(|&at| at >= fault_at)
            .min()
    }

    /// When keepalived made the standby master after the fault.
    fn took_over_after(&self, clocks: Clocks, fault_at: u64) -> Option<u64> {
        Self::first_after(&self.started_at('b'), clocks, fault_at)
    }

    /// When the standby's server listened after the fault.
    fn listening_after(&self, clocks: Clocks, fault_at: u64) -> Option<u64> {
        Self::first_after(&self.listening_at('b'), clocks, fault_at)
    }

    /// Adds both nodes' takeovers and servers' starts after the fault.
    fn explain(&self, timeline: &mut Timeline, clocks: Clocks, fault_at: u64) {
        for node in ['a', 'b'] {
            for (stamps, what) in [
                (
                    self.started_at(node),
                    "became master: its takeover script ran",
                ),
                (self.listening_at(node), "monolock listening"),
            ] {
                for wall in stamps {
                    let at = clocks.mono_of(wall);
                    if at >= fault_at {
                        timeline.add(at, format!("{node}: {what}"));
                    }
                }
            }
        }
    }

    /// Waits until keepalived has started `node`'s monolock `times` times.
    async fn wait_started(&self, node: char, times: usize) -> Result<(), String> {
        poll(&format!("keepalived to start monolock on {node}"), || {
            self.started(node) >= times
        })
        .await
    }

    async fn wait_vip(&self, net: &Net, node: char) -> Result<(), String> {
        let vip = net.ip(100).to_string();
        let ns = net.ns(node);
        poll(&format!("the virtual IP on {node}"), || {
            Command::new("ip")
                .args(["-n", &ns, "-o", "addr", "show", "dev", "eth0"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(&format!(" {vip}/")))
        })
        .await
    }

    fn pid(&self, node: char) -> Option<String> {
        std::fs::read_to_string(self.dir.join(format!("monolock-{node}.pid")))
            .ok()
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
    }

    fn kill_server(&self, node: char) -> Result<(), String> {
        let pid = self.pid(node).ok_or("no monolock pid")?;
        let status = Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .map_err(|e| e.to_string())?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill -KILL {pid} failed"))
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in &mut self.keepalived {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        for child in &mut self.keepalived {
            let _ = child.wait();
        }
        for node in ['a', 'b'] {
            if let Some(pid) = self.pid(node) {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
            }
        }
        if self.tidy {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn write(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Polls `probe` every 20 ms for up to 20 s (the state lives in other
/// processes: addresses, files).
async fn poll(what: &str, mut probe: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !probe() {
        if tokio::time::Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
