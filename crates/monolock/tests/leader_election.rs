//! The leader-election recipe of docs/recipes.md with real processes:
//! three candidates (`monolock exec --value ADDR`) and followers that read
//! the leader's address from `monolock observe`. SIGKILL the leader and
//! every follower names the next one (the close released the lock, well
//! before any lease could have run out); SIGSTOP it and they name the next
//! one only once its lease has run out (RELEASED `expired`); and no
//! follower ever sees two leaders at once.
//!
//! The server is `MONOLOCK_BIN` when set (a server built elsewhere), else
//! the binary under test; the CLI is always the binary under test.

mod common;

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use common::{Follower, MONOLOCK, PATIENCE, ServerProcess, lines_from};
use serde_json::Value;

const NAME: &str = "service/leader";

fn server() -> ServerProcess {
    let bin = std::env::var("MONOLOCK_BIN").unwrap_or_else(|_| MONOLOCK.to_owned());
    ServerProcess::start_with_command(Command::new(bin), &[])
}

/// A candidate: `monolock exec -v --value ADDR NAME -- sleep 600`, its
/// stderr followed (where `-v` says it is queued).
struct Candidate {
    addr: String,
    child: Child,
    stderr: mpsc::Receiver<String>,
}

impl Candidate {
    fn start(server: &ServerProcess, addr: &str, lease: &str) -> Self {
        let mut child = Command::new(MONOLOCK)
            .args(["exec", "-v", "--server", &server.addr.to_string()])
            .args([
                "--lease", lease, "--value", addr, NAME, "--", "sleep", "600",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a candidate");
        let stderr = lines_from(child.stderr.take().expect("stderr"));
        Self {
            addr: addr.to_owned(),
            child,
            stderr,
        }
    }

    /// Waits for `-v`'s line saying the candidate is queued.
    fn wait_queued(&self) {
        loop {
            let line = self
                .stderr
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("{} never said it was queued", self.addr));
            if line.contains("queued") {
                return;
            }
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args(["-s", signal, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s {signal}");
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A follower: `monolock observe NAME`, and the leader it names now.
struct View {
    follower: Follower,
    /// The leader's (value, token) in this follower's view.
    leader: Option<(String, String)>,
}

impl View {
    fn start(server: &ServerProcess) -> Self {
        let follower = Follower::spawn(Command::new(MONOLOCK).args([
            "observe",
            "--server",
            &server.addr.to_string(),
            NAME,
        ]));
        let mut view = Self {
            follower,
            leader: None,
        };
        let first = view.next();
        assert_eq!(
            first["initial"], true,
            "the first line is the initial state"
        );
        view
    }

    /// Reads one line and applies it to the view. A grant while the view
    /// still names a leader would be two leaders at once: it fails here.
    fn next(&mut self) -> Value {
        let line = self.follower.next_line();
        let state: Value = serde_json::from_str(&line).expect("one JSON object per line");
        let value = state["value"].as_str().unwrap_or_default().to_owned();
        let token = state["token"].as_str().unwrap_or_default().to_owned();
        match state["event"].as_str() {
            Some("granted") => {
                assert!(
                    self.leader.is_none(),
                    "two leaders at once: {:?} still leads when {line} arrives",
                    self.leader
                );
                self.leader = Some((value, token));
            }
            Some("held" | "value") => self.leader = Some((value, token)),
            Some("free" | "released") => self.leader = None,
            other => panic!("unknown event {other:?} in {line}"),
        }
        state
    }

    /// Reads until the view names a leader other than `old`; that line's
    /// state, and the RELEASED that ended `old` on the way.
    fn until_new_leader(&mut self, old: &str) -> (Value, Option<Value>) {
        let mut released = None;
        loop {
            let state = self.next();
            if state["event"] == "released" {
                released = Some(state.clone());
            }
            if let Some((value, _)) = &self.leader
                && value != old
            {
                return (state, released);
            }
        }
    }
}

/// The followers and three candidates, the first one leading and the
/// other two queued behind it in order.
fn elected(server: &ServerProcess, lease: &str) -> (Vec<View>, Vec<Candidate>) {
    let mut views: Vec<View> = (0..3).map(|_| View::start(server)).collect();
    let first = Candidate::start(server, "127.0.0.1:9001", lease);
    for view in &mut views {
        let (state, _) = view.until_new_leader("");
        assert_eq!(state["value"], "127.0.0.1:9001");
    }
    let mut candidates = vec![first];
    for addr in ["127.0.0.1:9002", "127.0.0.1:9003"] {
        let candidate = Candidate::start(server, addr, lease);
        candidate.wait_queued();
        candidates.push(candidate);
    }
    (views, candidates)
}

#[test]
fn sigkill_of_the_leader_and_every_follower_names_the_next_before_any_lease_ran_out() {
    let server = server();
    // A long lease: a follower that waited for it would take 10 s.
    let lease = Duration::from_secs(10);
    let (mut views, candidates) = elected(&server, "10s");
    let killed_at = Instant::now();
    candidates[0].signal("KILL");
    let mut slowest = Duration::ZERO;
    let mut named = Vec::new();
    for view in &mut views {
        let (state, released) = view.until_new_leader("127.0.0.1:9001");
        slowest = slowest.max(killed_at.elapsed());
        let released = released.expect("RELEASED before the next GRANTED");
        assert_eq!(released["reason"], "released", "the close released it");
        assert_eq!(state["event"], "granted");
        named.push((state["value"].clone(), state["token"].clone()));
    }
    println!("SIGKILL of the leader to the last of 3 followers naming the next: {slowest:?}");
    assert!(
        named.iter().all(|leader| *leader == named[0]),
        "every follower names the same leader: {named:?}"
    );
    assert_eq!(named[0].0, "127.0.0.1:9002", "the next in FIFO order");
    assert!(
        slowest < lease,
        "named in {slowest:?}: before the lease of {lease:?} could have run out"
    );
}

#[test]
fn sigstop_of_the_leader_and_followers_name_the_next_only_once_its_lease_ran_out() {
    let server = server();
    let lease = Duration::from_millis(1000);
    let (mut views, candidates) = elected(&server, "1s");
    let stopped_at = Instant::now();
    candidates[0].signal("STOP");
    let mut first_named = None;
    let mut named = Vec::new();
    for view in &mut views {
        let (state, released) = view.until_new_leader("127.0.0.1:9001");
        first_named.get_or_insert_with(|| stopped_at.elapsed());
        let released = released.expect("RELEASED before the next GRANTED");
        assert_eq!(
            released["reason"], "expired",
            "a stopped holder's claim ends by its lease"
        );
        named.push((state["value"].clone(), state["token"].clone()));
    }
    candidates[0].signal("CONT");
    let first_named = first_named.unwrap_or_default();
    println!(
        "SIGSTOP of the leader (lease {lease:?}) to the first follower naming the next: {first_named:?}"
    );
    // Its last heartbeat went at most a quarter lease before the stop, and
    // the server waits one lease from it: three quarters at least.
    assert!(
        first_named >= lease * 3 / 4,
        "named after {first_named:?}: before the stopped leader's lease ran out"
    );
    assert!(named.iter().all(|leader| *leader == named[0]), "{named:?}");
    assert_eq!(named[0].0, "127.0.0.1:9002");
}

#[test]
fn observe_once_prints_the_holder_and_its_value() {
    let server = server();
    let candidate = Candidate::start(&server, "127.0.0.1:9100", "2s");
    let mut view = View::start(&server);
    while view.leader.is_none() {
        view.next();
    }
    let output = Command::new(MONOLOCK)
        .args([
            "observe",
            "--once",
            "--server",
            &server.addr.to_string(),
            NAME,
        ])
        .output()
        .expect("run observe --once");
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {text}");
    let state: Value = serde_json::from_str(lines[0]).expect("JSON");
    assert_eq!(
        (&state["event"], &state["held"], &state["value"]),
        (
            &Value::from("held"),
            &Value::from(true),
            &Value::from("127.0.0.1:9100")
        )
    );
    assert_eq!(state["initial"], false);
    drop(candidate);
}

#[test]
fn observe_exits_0_on_sigterm_and_69_with_one_line_when_the_server_goes() {
    let mut server = server();
    let mut sigterm = Command::new(MONOLOCK)
        .args(["observe", "--server", &server.addr.to_string(), NAME])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start observe");
    let mut going = Command::new(MONOLOCK)
        .args(["observe", "--server", &server.addr.to_string(), NAME])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start observe");
    for child in [&mut sigterm, &mut going] {
        let stdout = child.stdout.take().expect("stdout");
        let mut first = String::new();
        BufReader::new(stdout)
            .read_line(&mut first)
            .expect("the initial state");
        assert!(first.contains("\"initial\":true"), "{first}");
    }
    let status = Command::new("kill")
        .args(["-s", "TERM", &sigterm.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let done = sigterm.wait_with_output().expect("exit");
    assert_eq!(done.status.code(), Some(0), "{done:?}");
    server.signal("KILL");
    server.wait_exit();
    let done = going.wait_with_output().expect("exit");
    assert_eq!(done.status.code(), Some(69), "{done:?}");
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("observation of lock \"service/leader\" ended (connection)"),
        "{stderr}"
    );
}
