//! Runs the suite and reports it: one line per client and scenario
//! (`rust    fifo_five_waiters ... ok (312 ms)`), the failure's detail
//! indented under a failed line, and the summary `N passed, N failed`.
//!
//! Each client is prepared and then runs its own scenarios in a thread of
//! its own; the cross-language scenarios (every client at once) run once
//! all are prepared, beside them. Every scenario has its own server, so
//! the runs are independent.

use std::{
    io::Write,
    path::PathBuf,
    process::ExitCode,
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use crate::{
    Failure, Lab,
    clients::{CLIENTS, Prepared},
    pki::LabPki,
    scenarios::{Run, SCENARIOS, Scenario},
};

/// What the test hands the runner.
pub struct Setup {
    /// The Rust driver, built by Cargo with the test.
    pub rust_driver: PathBuf,
    /// The repository's root.
    pub repo: PathBuf,
    /// The test's command-line arguments (filters, `--list`, `--skip`).
    pub args: Vec<String>,
}

/// Which lines to run: `cargo test -p monolock-conformance --test
/// conformance -- FILTER` runs the lines (`client scenario`) containing a
/// filter; `--skip TEXT` leaves out the lines containing it.
#[derive(Default)]
struct Selection {
    filters: Vec<String>,
    skips: Vec<String>,
    list: bool,
    ignored: bool,
}

impl Selection {
    fn parse(args: &[String]) -> Self {
        let mut selection = Self::default();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--list" => selection.list = true,
                "--ignored" => selection.ignored = true,
                "--skip" => selection.skips.extend(args.next().cloned()),
                // libtest options that take a value: not filters.
                "--test-threads" | "--format" | "--color" | "--logfile" | "-Z" => {
                    args.next();
                }
                flag if flag.starts_with('-') => {}
                filter => selection.filters.push(filter.to_owned()),
            }
        }
        selection
    }

    fn wants(&self, client: &str, scenario: &str) -> bool {
        let line = format!("{client} {scenario}");
        (self.filters.is_empty() || self.filters.iter().any(|f| line.contains(f.as_str())))
            && !self.skips.iter().any(|s| line.contains(s.as_str()))
    }
}

/// The summary's counts.
#[derive(Default)]
struct Tally {
    passed: AtomicUsize,
    failed: AtomicUsize,
}

impl Tally {
    /// Prints one line (and a failure's detail under it) in one write, so
    /// that lines of clients running side by side never interleave.
    fn record(&self, client: &str, scenario: &str, took: Duration, outcome: Result<(), String>) {
        let ms = took.as_millis();
        let text = match outcome {
            Ok(()) => {
                self.passed.fetch_add(1, Ordering::Relaxed);
                format!("{client:<10}{scenario} ... ok ({ms} ms)\n")
            }
            Err(why) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let detail: String = why.lines().map(|line| format!("    {line}\n")).collect();
                format!("{client:<10}{scenario} ... FAILED ({ms} ms)\n{detail}")
            }
        };
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
}

/// The `monolock` binary: `$MONOLOCK_BIN`, else the one Cargo builds next
/// to the test (`target/<profile>/monolock`; `cargo test --workspace`
/// builds it).
fn monolock_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("MONOLOCK_BIN").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|err| format!("the test's own path: {err}"))?;
    // <target>/<profile>/deps/<test executable>
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("monolock"))
        .ok_or_else(|| format!("{} has no target directory", exe.display()))?;
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "the monolock binary is missing at {}: run `cargo build -p monolock` first \
             (`cargo test --workspace` builds it), or set MONOLOCK_BIN",
            path.display()
        ))
    }
}

/// Runs every selected client and scenario and prints the report; the
/// exit code is a failure if any line failed.
pub fn run(setup: Setup) -> ExitCode {
    let selection = Selection::parse(&setup.args);
    let present: Vec<_> = CLIENTS
        .iter()
        .filter(|spec| spec.present(&setup.repo))
        .collect();
    if selection.list {
        for spec in &present {
            for run_name in [spec.name, spec.name_v1] {
                for scenario in SCENARIOS {
                    if selection.wants(run_name, scenario.name) {
                        println!("{run_name} {}: test", scenario.name);
                    }
                }
            }
        }
        return ExitCode::SUCCESS;
    }
    if selection.ignored {
        // Nothing in this suite is ignored.
        println!("0 passed, 0 failed");
        return ExitCode::SUCCESS;
    }
    let started = Instant::now();
    let monolock = match monolock_binary() {
        Ok(path) => path,
        Err(why) => {
            println!("conformance: {why}");
            println!("0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    let scratch = match tempfile::Builder::new()
        .prefix("monolock-conformance-")
        .tempdir()
    {
        Ok(dir) => dir,
        Err(err) => {
            println!("conformance: cannot make a scratch directory: {err}");
            println!("0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    let repo = setup.repo.canonicalize().unwrap_or(setup.repo);
    let lab = Lab {
        monolock,
        repo,
        rust_driver: setup.rust_driver,
        pki: LabPki::new(),
        scratch,
    };
    let wanted: Vec<_> = present
        .into_iter()
        .filter(|spec| {
            SCENARIOS.iter().any(|scenario| {
                selection.wants(spec.name, scenario.name)
                    || selection.wants(spec.name_v1, scenario.name)
            })
        })
        .collect();
    let tally = Tally::default();
    // Each client is prepared once, in a thread of its own, as soon as it
    // can be (a slow build holds up no other client); then its two runs
    // (protocol v2, and forced to v1) go through their scenarios in two
    // threads side by side. The cross-language scenarios run once every
    // client is prepared, beside them, with both runs of every client.
    std::thread::scope(|scope| {
        let (lab, selection, tally) = (&lab, &selection, &tally);
        let (ready_tx, ready) = mpsc::channel();
        for &spec in &wanted {
            let ready_tx = ready_tx.clone();
            scope.spawn(move || {
                let launch = std::panic::catch_unwind(|| (spec.prepare)(lab))
                    .unwrap_or_else(|_| Err("its preparation panicked".to_owned()));
                let v2 = Prepared {
                    spec,
                    launch: launch.clone(),
                    force_v1: false,
                };
                let v1 = Prepared {
                    spec,
                    launch,
                    force_v1: true,
                };
                // The receiver lives until every sender has sent.
                let _ = ready_tx.send(v2.clone());
                let _ = ready_tx.send(v1.clone());
                std::thread::scope(|runs| {
                    runs.spawn(|| run_each(lab, selection, tally, &v1));
                    run_each(lab, selection, tally, &v2);
                });
            });
        }
        drop(ready_tx);
        let mut prepared: Vec<Prepared> = ready.iter().collect();
        prepared.sort_by_key(|client| {
            (
                CLIENTS.iter().position(|c| c.name == client.spec.name),
                client.force_v1,
            )
        });
        for scenario in SCENARIOS {
            if let Run::Across(run) = scenario.run {
                run_across(lab, selection, tally, scenario, run, &prepared);
            }
        }
    });
    let (passed, failed) = (
        tally.passed.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
    );
    println!("(the suite took {:.1} s)", started.elapsed().as_secs_f64());
    println!("{passed} passed, {failed} failed");
    // A filter that selects nothing (meant for another test of the
    // workspace) passes, as libtest's own filters do.
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs the selected scenarios of one client, one after the other.
/// The scenarios that mostly wait (`Run::Beside`) go in threads of their
/// own, beside the others.
fn run_each(lab: &Lab, selection: &Selection, tally: &Tally, client: &Prepared) {
    std::thread::scope(|scope| {
        for scenario in SCENARIOS {
            if let Run::Beside(run) = scenario.run
                && selection.wants(client.name(), scenario.name)
            {
                scope.spawn(move || run_one(lab, tally, client, scenario, run));
            }
        }
        for scenario in SCENARIOS {
            if let Run::Each(run) = scenario.run
                && selection.wants(client.name(), scenario.name)
            {
                run_one(lab, tally, client, scenario, run);
            }
        }
    });
}

/// Runs one scenario of one client and records its line.
fn run_one(
    lab: &Lab,
    tally: &Tally,
    client: &Prepared,
    scenario: &Scenario,
    run: fn(&Lab, &Prepared) -> crate::Check,
) {
    let start = Instant::now();
    let outcome = match &client.launch {
        Ok(_) => guarded(|| run(lab, client)),
        Err(why) => Err(Failure::of(
            client.name(),
            format!("the {} client could not be prepared: {why}", client.name()),
        )),
    };
    tally.record(
        client.name(),
        scenario.name,
        start.elapsed(),
        outcome.map_err(|failure| failure.message),
    );
}

/// Runs a cross-language scenario with every selected client that was
/// prepared, and reports it on each client's line: a failure pinned on
/// one client fails that line with the detail, the others' lines fail as
/// not completed. A client that could not be prepared fails its line.
fn run_across(
    lab: &Lab,
    selection: &Selection,
    tally: &Tally,
    scenario: &Scenario,
    run: fn(&Lab, &[&Prepared]) -> crate::Check,
    prepared: &[Prepared],
) {
    let selected: Vec<&Prepared> = prepared
        .iter()
        .filter(|client| selection.wants(client.name(), scenario.name))
        .collect();
    let (ready, broken): (Vec<&Prepared>, Vec<&Prepared>) = selected
        .into_iter()
        .partition(|client| client.launch.is_ok());
    for client in broken {
        let why = client.launch.as_ref().err().cloned().unwrap_or_default();
        tally.record(
            client.name(),
            scenario.name,
            Duration::ZERO,
            Err(format!(
                "the {} client could not be prepared: {why}",
                client.name()
            )),
        );
    }
    if ready.is_empty() {
        return;
    }
    let start = Instant::now();
    let outcome = guarded(|| run(lab, &ready));
    let took = start.elapsed();
    for client in ready {
        let line = match &outcome {
            Ok(()) => Ok(()),
            Err(failure) if failure.client.is_none_or(|c| c == client.name()) => {
                Err(failure.message.clone())
            }
            Err(failure) => Err(format!(
                "not completed: the scenario stopped on a failure of the {} client",
                failure.client.unwrap_or_default()
            )),
        };
        tally.record(client.name(), scenario.name, took, line);
    }
}

/// Runs a scenario, turning a panic into a failure.
fn guarded(scenario: impl FnOnce() -> crate::Check) -> crate::Check {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(scenario)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        Err(Failure::new(format!("the scenario panicked: {what}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|arg| (*arg).to_owned()).collect()
    }

    #[test]
    fn filters_select_lines_and_libtest_options_are_not_filters() {
        let all = Selection::parse(&args(&["--nocapture", "--test-threads", "2"]));
        assert!(all.wants("rust", "fifo_five_waiters"));
        let some = Selection::parse(&args(&["python fifo", "--color", "never"]));
        assert!(some.wants("python", "fifo_five_waiters"));
        assert!(!some.wants("rust", "fifo_five_waiters"));
        assert!(!some.wants("python", "tls"));
        let skip = Selection::parse(&args(&["--skip", "paused"]));
        assert!(!skip.wants("go", "paused_server_is_held_false"));
        assert!(skip.wants("go", "tls"));
        assert!(Selection::parse(&args(&["--list"])).list);
    }
}
