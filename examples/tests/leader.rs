//! The leader example: three instances campaign for one lock. The leader is
//! killed: a new one leads within one lease. A leader is paused past its
//! lease: a newer term takes over, and the old one stops leading the moment
//! it resumes and campaigns again. A PostgreSQL table of acts fenced by the
//! term judges that no two leaders ever overlapped.

mod common;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use common::{Lab, Proc, eventually, number_after, signal, wait_stopped};
use monolock_examples::leader;

const LOCK: &str = "leader";
const LEASE: Duration = Duration::from_secs(2);

fn instance(lab: &Lab, node: &str) -> Proc {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leader"));
    command
        .args([
            "--node", node, "--lock", LOCK, "--lease", "2s", "--every", "50ms",
        ])
        .env("MONOLOCK_ADDRESS", lab.addr.to_string())
        .env("DATABASE_URL", lab.postgres.url());
    Proc::spawn(node, command)
}

/// Waits until one of `nodes` prints that it leads; returns its index and term.
fn next_leader(nodes: &mut [Proc], among: &[usize]) -> (usize, u64) {
    eventually("a leader", || {
        among.iter().find_map(|&at| {
            let line = nodes[at].try_line(" leads leader in term ")?;
            Some((at, number_after(&line, "term ")))
        })
    })
}

/// Waits until the leader of `term` has acted at least once.
fn acted(lab: &Lab, term: u64) {
    let sql = format!("SELECT 1 FROM leader_log WHERE term = {term}");
    eventually("an act of the term", || {
        (!lab.query(&sql).is_empty()).then_some(())
    });
}

#[test]
fn one_leader_at_a_time_and_a_new_one_within_a_lease() {
    let lab = Lab::start(leader::SCHEMA);
    let mut nodes: Vec<Proc> = ["a", "b", "c"]
        .iter()
        .map(|node| instance(&lab, node))
        .collect();

    let (first, term1) = next_leader(&mut nodes, &[0, 1, 2]);
    acted(&lab, term1);
    let others: Vec<usize> = (0..3).filter(|&at| at != first).collect();

    // Killed: its connection closes with it and the next is pushed the lock.
    signal(nodes[first].pid(), libc::SIGKILL);
    let killed = Instant::now();
    let (second, term2) = next_leader(&mut nodes, &others);
    let handover = killed.elapsed();
    assert!(handover < LEASE, "a new leader after {handover:?}");
    assert!(term2 > term1);
    acted(&lab, term2);

    // Paused past its lease: the server hands the lock on; on resuming, the
    // old leader stops leading and campaigns again.
    let third = others
        .iter()
        .copied()
        .find(|&at| at != second)
        .expect("third");
    signal(nodes[second].pid(), libc::SIGSTOP);
    wait_stopped(nodes[second].pid());
    let (leader, term3) = next_leader(&mut nodes, &[third]);
    assert_eq!(leader, third);
    acted(&lab, term3);
    signal(nodes[second].pid(), libc::SIGCONT);
    let stopped = nodes[second].expect_line("stops leading term");
    assert_eq!(number_after(&stopped, "term "), term2, "{stopped}");

    // The resumed one campaigned again: it leads once the third is gone.
    signal(nodes[third].pid(), libc::SIGKILL);
    let (again, term4) = next_leader(&mut nodes, &[second]);
    assert_eq!(again, second);
    acted(&lab, term4);
    assert!(term4 > term3);

    // The judge: in commit order, the terms that acted never go down, and
    // each term is one node's.
    let log: Vec<(String, String)> = lab
        .query("SELECT term::text, node FROM leader_log ORDER BY seq")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let terms: Vec<u64> = log
        .iter()
        .map(|(term, _)| term.parse().expect("a u64 term"))
        .collect();
    assert!(
        terms.windows(2).all(|pair| pair[0] <= pair[1]),
        "an older term acted after a newer one: {log:?}"
    );
    for (term, node) in &log {
        assert!(
            log.iter().all(|(t, n)| t != term || n == node),
            "term {term} acted from two nodes: {log:?}"
        );
    }
    for term in [term1, term2, term3, term4] {
        assert!(terms.contains(&term), "term {term} never acted: {log:?}");
    }
}

#[test]
fn an_unreachable_database_is_one_clear_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_leader"))
        .args(["--node", "a", "--server", "127.0.0.1:1"])
        .env(
            "DATABASE_URL",
            format!("postgres://app@127.0.0.1:{}/app", common::free_port()),
        )
        .output()
        .expect("run leader");
    assert_eq!(out.status.code(), Some(69));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("leader: cannot connect to the database"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_missing_node_name_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_leader"))
        .output()
        .expect("run leader");
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--node"), "{stderr}");
}
