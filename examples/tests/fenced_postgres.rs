//! The fenced-postgres recipe against a real PostgreSQL, in each of its
//! forms, under the fault that fencing exists for: a holder paused past its
//! lease, a newer holder granted and writing, then the old one resuming and
//! attempting its write. Also: tokens across the whole u64 range, a busy
//! lock with `--no-wait`, and bad input, for every form.

mod common;

use std::process::Command;

use common::{Lab, Proc, java, node, number_after, python, signal, wait_stopped, workspace_binary};
use monolock_examples::fence;

const JOB: &str = "nightly-import";

/// Short, so the server hands the lock on soon after the pause; long
/// enough that the waiting second job's heartbeats keep up on a busy
/// machine.
const LEASE: &str = "2s";

/// What every form exits with when the lock was lost or the write fenced.
const EXIT_LOST: i32 = 79;

/// The psql job that `monolock exec` runs.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fenced-postgres.sh");

/// The Python form, run with the interpreter of [`python::interpreter`].
const PYTHON_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fenced_postgres.py");

/// The forms of the recipe.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// `monolock exec` running `fenced-postgres.sh`, which writes with psql.
    ExecPsql,
    /// The `fenced-postgres` program: the Rust client and tokio-postgres.
    Rust,
    /// `fenced_postgres.py`: the Python client and psycopg.
    Python,
    /// `node/fenced-postgres.mjs`: the Node client and `pg`.
    Node,
    /// `java/`: the Java client and the PostgreSQL JDBC driver.
    Java,
}

impl Form {
    /// The program of this form, with `args` for it (`--job`, `--lease`, ...).
    fn program(self, args: &[&str]) -> Command {
        let mut command = match self {
            Form::ExecPsql => {
                let mut command = Command::new(workspace_binary("monolock"));
                command.arg("exec").args(args).args([JOB, "--", SCRIPT]);
                return command;
            }
            Form::Rust => Command::new(env!("CARGO_BIN_EXE_fenced-postgres")),
            Form::Python => {
                let mut command = python::command();
                command.arg(PYTHON_SCRIPT);
                command
            }
            Form::Node => {
                let mut command = node::command();
                command.arg(node::fenced_postgres_script());
                command
            }
            Form::Java => java::command(java::FENCED_POSTGRES),
        };
        command.args(["--job", JOB]).args(args);
        command
    }

    /// Starts one job of this form; with `pause`, it stops itself right
    /// before its write.
    fn job(self, lab: &Lab, name: &str, pause: bool) -> Proc {
        let mut command = self.program(&["--lease", LEASE]);
        command
            .env("MONOLOCK_ADDRESS", lab.addr.to_string())
            .env("DATABASE_URL", lab.postgres.url())
            .env_remove("PAUSE_BEFORE_WRITE");
        if pause {
            command.env("PAUSE_BEFORE_WRITE", "1");
        }
        Proc::spawn(&format!("{self:?} {name}"), command)
    }
}

/// The fault of the issue, for one form:
/// 1. the first job takes the lock and stops right before its write; the
///    whole job (for `exec`: `exec` itself too) is SIGSTOPped;
/// 2. the server hears nothing for a lease and grants the second job, which
///    writes under its newer token;
/// 3. the first job resumes and attempts its write: PostgreSQL refuses it
///    (0 rows), the row keeps the second token, and the first exits 79.
fn paused_holder_is_fenced_off(form: Form) {
    let lab = Lab::start(fence::SCHEMA);

    let mut first = form.job(&lab, "first", true);
    let first_token = number_after(&first.expect_line("holding nightly-import"), "token ");
    let pause = first.expect_line("pausing before the write");
    let writer = u32::try_from(number_after(&pause, "kill -CONT ")).expect("pid");
    wait_stopped(writer);
    // The job's lock holder stops too (for all but `exec` it is the
    // writer): no heartbeat leaves any more.
    signal(first.pid(), libc::SIGSTOP);
    wait_stopped(first.pid());

    // Granted only once the server has expired the first session, a lease
    // after its last frame: by then the first is past 0.8 x lease.
    let mut second = form.job(&lab, "second", false);
    let wrote = second.expect_line("wrote nightly-import under token");
    let second_token = number_after(&wrote, "token ");
    let status = second.wait();
    assert!(status.success(), "{status}: {}", second.output());
    assert!(second_token > first_token, "{second_token} > {first_token}");

    // The first job resumes where it stopped: at its write.
    signal(writer, libc::SIGCONT);
    first.expect_line("fenced off");
    signal(first.pid(), libc::SIGCONT);
    let status = first.wait();
    assert_eq!(status.code(), Some(EXIT_LOST), "{}", first.output());
    assert!(
        !first.output().contains("wrote nightly-import"),
        "{}",
        first.output()
    );

    let stored = lab.runtime.block_on(fence::current_token(&lab.db, JOB));
    assert_eq!(stored.expect("read the row"), Some(second_token));
}

#[test]
fn exec_with_psql_paused_holder_is_fenced_off() {
    paused_holder_is_fenced_off(Form::ExecPsql);
}

#[test]
fn rust_client_paused_holder_is_fenced_off() {
    paused_holder_is_fenced_off(Form::Rust);
}

#[test]
fn python_client_paused_holder_is_fenced_off() {
    paused_holder_is_fenced_off(Form::Python);
}

#[test]
fn node_client_paused_holder_is_fenced_off() {
    paused_holder_is_fenced_off(Form::Node);
}

#[test]
fn java_client_paused_holder_is_fenced_off() {
    paused_holder_is_fenced_off(Form::Java);
}

/// Tokens are u64: the column and every form's SQL must order and store
/// tokens across the whole range, 2^63 and above included (a `bigint`
/// column fails there).
#[test]
fn tokens_are_fenced_across_the_whole_u64_range() {
    let lab = Lab::start(fence::SCHEMA);
    let boundary = [1, (1 << 63) - 1, 1 << 63, u64::MAX];

    // The Rust form's statement.
    for token in boundary {
        assert!(rust_write(&lab, token), "token {token} refused");
        assert_eq!(stored(&lab), token.to_string());
    }
    assert!(!rust_write(&lab, 1 << 63), "an older token passed");
    assert!(
        rust_write(&lab, u64::MAX),
        "the same token again is refused"
    );

    // The psql form's statement, run as `monolock exec` would run it.
    reset(&lab);
    for token in boundary {
        let out = psql_write(&lab, token);
        assert!(out.status.success(), "token {token}: {out:?}");
        assert_eq!(stored(&lab), token.to_string());
    }
    let out = psql_write(&lab, 1 << 63);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("fenced off"));
    assert_eq!(stored(&lab), u64::MAX.to_string());

    // The Python form's statement, through its `write`.
    reset(&lab);
    let mut tokens: Vec<String> = boundary.iter().map(u64::to_string).collect();
    tokens.push((1u64 << 63).to_string());
    let out = python_writes(&lab, &tokens);
    assert!(out.status.success(), "{out:?}");
    let expected: Vec<String> = boundary
        .iter()
        .map(|token| format!("{token} True {token}"))
        .chain([format!("{} False {}", 1u64 << 63, u64::MAX)])
        .collect();
    assert_eq!(stdout_lines(&out), expected, "{out:?}");
    assert_eq!(stored(&lab), u64::MAX.to_string());

    // The Node form's statement, through its `write` (a JavaScript number
    // would fail above 2^53, a bigint column above 2^63).
    reset(&lab);
    let out = node_writes(&lab, &tokens);
    assert!(out.status.success(), "{out:?}");
    let expected: Vec<String> = expected.iter().map(|line| line.to_lowercase()).collect();
    assert_eq!(stdout_lines(&out), expected, "{out:?}");
    assert_eq!(stored(&lab), u64::MAX.to_string());

    // The Java form's statement, through its `write` (a Java long is
    // signed: the token goes out as unsigned decimal text).
    reset(&lab);
    let out = java::command(java::BOUNDARY_WRITES)
        .arg(lab.postgres.url())
        .args(&tokens)
        .output()
        .expect("run the Java writes");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout_lines(&out), expected, "{out:?}");
    assert_eq!(stored(&lab), u64::MAX.to_string());
}

/// `--no-wait` against a held lock: 75, a line saying so, and nothing
/// written, as `exec`.
fn no_wait_on_a_busy_lock_exits_75(form: Form) {
    let lab = Lab::start(fence::SCHEMA);
    let client = monolock_client::Client::new(lab.addr.to_string());
    let holder = lab
        .runtime
        .block_on(client.acquire(JOB, std::time::Duration::from_secs(30)))
        .expect("hold the lock");
    let out = form
        .program(&["--no-wait"])
        .env("MONOLOCK_ADDRESS", lab.addr.to_string())
        .env("DATABASE_URL", lab.postgres.url())
        .env_remove("PAUSE_BEFORE_WRITE")
        .output()
        .expect("run the form");
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is busy"),
        "{out:?}"
    );
    assert_eq!(stored(&lab), "0");
    drop(holder);
}

#[test]
fn rust_no_wait_on_a_busy_lock_exits_75() {
    no_wait_on_a_busy_lock_exits_75(Form::Rust);
}

#[test]
fn node_no_wait_on_a_busy_lock_exits_75() {
    no_wait_on_a_busy_lock_exits_75(Form::Node);
}

#[test]
fn java_no_wait_on_a_busy_lock_exits_75() {
    no_wait_on_a_busy_lock_exits_75(Form::Java);
}

fn rust_write(lab: &Lab, token: u64) -> bool {
    lab.runtime
        .block_on(fence::write(&lab.db, JOB, token, "boundary"))
        .expect("write")
}

fn psql_write(lab: &Lab, token: u64) -> std::process::Output {
    Command::new(SCRIPT)
        .env("DATABASE_URL", lab.postgres.url())
        .env("MONOLOCK_LOCK", JOB)
        .env("MONOLOCK_TOKEN", token.to_string())
        .env_remove("PAUSE_BEFORE_WRITE")
        .output()
        .expect("run the script")
}

/// Runs the Python form's `write` once per token, in order, and prints for
/// each: the token, whether it was written, the token the row then holds.
fn python_writes(lab: &Lab, tokens: &[String]) -> std::process::Output {
    const WRITES: &str = "\
import sys
import fenced_postgres as recipe
db = recipe.connect(sys.argv[1])
for token in sys.argv[2:]:
    written = recipe.write(db, 'nightly-import', int(token), 'boundary')
    stored = db.execute(\"SELECT token::text FROM job_state WHERE job = 'nightly-import'\").fetchone()[0]
    print(token, written, stored)
";
    python::command()
        .env("PYTHONPATH", python::path(&[env!("CARGO_MANIFEST_DIR")]))
        .args(["-c", WRITES, &lab.postgres.url()])
        .args(tokens)
        .output()
        .expect("run the Python writes")
}

/// The same through the Node form's `write`.
fn node_writes(lab: &Lab, tokens: &[String]) -> std::process::Output {
    const WRITES: &str = "
const [url, ...tokens] = process.argv.slice(1);
const recipe = await import(process.env.RECIPE);
const db = await recipe.connect(url);
for (const token of tokens) {
  const written = await recipe.write(db, 'nightly-import', BigInt(token), 'boundary');
  const { rows } = await db.query(\"SELECT token::text AS t FROM job_state WHERE job = 'nightly-import'\");
  console.log(token, written, rows[0].t);
}
await db.end();
";
    node::command()
        .args(["--input-type=module", "-e", WRITES, &lab.postgres.url()])
        .args(tokens)
        .env(
            "RECIPE",
            format!("file://{}", node::fenced_postgres_script().display()),
        )
        .current_dir(node::example_dir())
        .output()
        .expect("run the Node writes")
}

fn stdout_lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn stored(lab: &Lab) -> String {
    lab.query("SELECT token::text FROM job_state WHERE job = 'nightly-import'")[0].get(0)
}

fn reset(lab: &Lab) {
    lab.query("UPDATE job_state SET token = 0");
}

/// Bad input: one clear line, a non-zero exit, no panic, and the URL never
/// repeated.
#[test]
fn bad_input_is_one_clear_line() {
    let unreachable = format!("postgres://app@127.0.0.1:{}/app", common::free_port());
    // The Rust, Python and Node programs: the same codes and messages.
    let programs = [
        (Form::Rust, "fenced-postgres"),
        (Form::Python, "fenced_postgres.py"),
        (Form::Node, "fenced-postgres.mjs"),
        (Form::Java, "FencedPostgres"),
    ];
    let mut cases: Vec<(String, Command, i32, String)> = Vec::new();
    for (form, program) in programs {
        let message = |text: &str| format!("{program}: {text}");
        cases.extend([
            (
                message("no DATABASE_URL"),
                database_job(form, None),
                64,
                message("no database to write to: set DATABASE_URL"),
            ),
            (
                message("unreachable database"),
                database_job(form, Some(&unreachable)),
                69,
                message("cannot connect to the database"),
            ),
            (
                message("invalid DATABASE_URL"),
                database_job(form, Some("postgres://[nonsense")),
                64,
                message("invalid DATABASE_URL"),
            ),
        ]);
    }
    let mut bad_lease = Form::Node.program(&["--server", "127.0.0.1:1", "--lease", "soon"]);
    bad_lease.env("DATABASE_URL", &unreachable);
    cases.push((
        "node: a bad lease".into(),
        bad_lease,
        64,
        "fenced-postgres.mjs: invalid duration \"soon\"".into(),
    ));
    cases.push((
        "psql: no DATABASE_URL".into(),
        script_job(None),
        2,
        "set DATABASE_URL".into(),
    ));
    cases.push((
        "psql: unreachable database".into(),
        script_job(Some(&unreachable)),
        2,
        "connection to server at \"127.0.0.1\"".into(),
    ));
    for (what, mut command, code, message) in cases {
        let out = command.output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{what}: {stderr}");
        assert!(stderr.contains(&message), "{what}: {stderr}");
        assert!(!stderr.contains("panicked"), "{what}: {stderr}");
        assert!(!stderr.contains("backtrace"), "{what}: {stderr}");
        assert!(!stderr.contains("Traceback"), "{what}: {stderr}");
        assert!(!stderr.contains("[nonsense"), "{what}: {stderr}");
        if !what.starts_with("psql") {
            assert_eq!(stderr.lines().count(), 1, "{what}: {stderr}");
        }
    }
}

/// A form's program with this `DATABASE_URL` (none: unset); the lock
/// server is never reached, since the database comes first.
fn database_job(form: Form, url: Option<&str>) -> Command {
    let mut command = form.program(&["--server", "127.0.0.1:1", "--lease", "1s"]);
    command
        .env_remove("DATABASE_URL")
        .env_remove("PAUSE_BEFORE_WRITE");
    if let Some(url) = url {
        command.env("DATABASE_URL", url);
    }
    command
}

fn script_job(url: Option<&str>) -> Command {
    let mut command = Command::new(SCRIPT);
    command
        .env("MONOLOCK_TOKEN", "1")
        .env_remove("DATABASE_URL")
        .env_remove("PAUSE_BEFORE_WRITE");
    if let Some(url) = url {
        command.env("DATABASE_URL", url);
    }
    command
}
