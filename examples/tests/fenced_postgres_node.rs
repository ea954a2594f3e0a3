//! The Node.js form of the fenced-postgres recipe
//! (`examples/node/fenced-postgres.mjs`: the Node client and `pg`) against
//! a real PostgreSQL, under the fault fencing exists for, across the whole
//! u64 token range, busy with `--no-wait`, and with bad input.
//!
//! The tests install the example's packages (`npm ci` in examples/node,
//! which builds the client through its `prepare` script) when they are
//! missing; `.ci/setup.d/node.sh` installs Node.js and does it ahead.

mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use common::{Lab, Proc, number_after, signal, wait_stopped};
use monolock_examples::fence;

const JOB: &str = "nightly-import";

/// As the other forms' tests: short, but long enough for a busy machine.
const LEASE: &str = "2s";

/// What every form exits with when the lock was lost or the write fenced.
const EXIT_LOST: i32 = 79;

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("node")
}

fn script() -> PathBuf {
    example_dir().join("fenced-postgres.mjs")
}

/// Runs `npm ARGS` in `dir`; panics with what to do when it fails.
fn npm(dir: &Path, args: &[&str]) {
    let status = Command::new("npm")
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap_or_else(|err| {
            panic!(
                "npm could not be run ({err}): bash .ci/setup.d/node.sh installs Node.js and npm"
            )
        });
    assert!(
        status.success(),
        "npm {} in {} failed",
        args.join(" "),
        dir.display()
    );
}

/// `node`, once the client is compiled from the current source and the
/// example's packages (pg, and the client linked from clients/node) are in.
fn node() -> Command {
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/node");
        if client.join("node_modules/typescript").is_dir() {
            npm(&client, &["run", "build"]);
        } else {
            npm(&client, &["ci", "--no-audit", "--no-fund"]);
        }
        if !example_dir().join("node_modules/pg").is_dir() {
            npm(&example_dir(), &["ci", "--no-audit", "--no-fund"]);
        }
    });
    let mut command = Command::new("node");
    command.env_remove("NODE_OPTIONS");
    command
}

fn job(lab: &Lab, name: &str, pause: bool) -> Proc {
    let mut command = node();
    command
        .arg(script())
        .args(["--job", JOB, "--lease", LEASE])
        .env("MONOLOCK_ADDRESS", lab.addr.to_string())
        .env("DATABASE_URL", lab.postgres.url())
        .env_remove("PAUSE_BEFORE_WRITE");
    if pause {
        command.env("PAUSE_BEFORE_WRITE", "1");
    }
    Proc::spawn(&format!("node {name}"), command)
}

/// The fault, as for the other forms: the first job takes the lock and
/// stops itself right before its write; the server hears nothing for a
/// lease and grants the second, which writes under its newer token; the
/// first resumes, its write is refused (0 rows), and it exits 79.
#[test]
fn node_client_paused_holder_is_fenced_off() {
    let lab = Lab::start(fence::SCHEMA);

    let mut first = job(&lab, "first", true);
    let first_token = number_after(&first.expect_line("holding nightly-import"), "token ");
    let pause = first.expect_line("pausing before the write");
    let writer = u32::try_from(number_after(&pause, "kill -CONT ")).expect("pid");
    assert_eq!(writer, first.pid(), "one process holds and writes");
    wait_stopped(writer);

    let mut second = job(&lab, "second", false);
    let wrote = second.expect_line("wrote nightly-import under token");
    let second_token = number_after(&wrote, "token ");
    let status = second.wait();
    assert!(status.success(), "{status}: {}", second.output());
    assert!(second_token > first_token, "{second_token} > {first_token}");

    signal(writer, libc::SIGCONT);
    first.expect_line("fenced off");
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

/// The Node form's `write` orders and stores tokens across the whole u64
/// range (2^63 and above: a bigint column, or a JavaScript number, fails).
#[test]
fn node_tokens_are_fenced_across_the_whole_u64_range() {
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
    let lab = Lab::start(fence::SCHEMA);
    let boundary = [1, (1u64 << 63) - 1, 1 << 63, u64::MAX];
    let mut tokens: Vec<String> = boundary.iter().map(u64::to_string).collect();
    tokens.push((1u64 << 63).to_string());
    let out = node()
        .args(["--input-type=module", "-e", WRITES, &lab.postgres.url()])
        .args(&tokens)
        .env("RECIPE", format!("file://{}", script().display()))
        .current_dir(example_dir())
        .output()
        .expect("run the Node writes");
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let expected: Vec<String> = boundary
        .iter()
        .map(|token| format!("{token} true {token}"))
        .chain([format!("{} false {}", 1u64 << 63, u64::MAX)])
        .collect();
    assert_eq!(lines, expected, "{out:?}");
}

/// `--no-wait` against a held lock: 75 and nothing written.
#[test]
fn node_no_wait_on_a_busy_lock_exits_75() {
    let lab = Lab::start(fence::SCHEMA);
    let client = monolock_client::Client::new(lab.addr.to_string());
    let holder = lab
        .runtime
        .block_on(client.acquire(JOB, std::time::Duration::from_secs(30)))
        .expect("hold the lock");
    let out = node()
        .arg(script())
        .args(["--job", JOB, "--no-wait"])
        .env("MONOLOCK_ADDRESS", lab.addr.to_string())
        .env("DATABASE_URL", lab.postgres.url())
        .env_remove("PAUSE_BEFORE_WRITE")
        .output()
        .expect("run the Node form");
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is busy"),
        "{out:?}"
    );
    let stored: String =
        lab.query("SELECT token::text FROM job_state WHERE job = 'nightly-import'")[0].get(0);
    assert_eq!(stored, "0");
    drop(holder);
}

/// A bad-input case: what, `DATABASE_URL`, extra flags, exit code, message.
type BadInput<'a> = (&'a str, Option<&'a str>, &'a [&'a str], i32, &'a str);

/// Bad input: one clear line and the codes of the other forms, no stack
/// trace, and the URL never repeated.
#[test]
fn node_bad_input_is_one_clear_line() {
    let unreachable = format!("postgres://app@127.0.0.1:{}/app", common::free_port());
    let cases: [BadInput; 4] = [
        (
            "no DATABASE_URL",
            None,
            &[],
            64,
            "no database to write to: set DATABASE_URL",
        ),
        (
            "unreachable database",
            Some(&unreachable),
            &[],
            69,
            "cannot connect to the database",
        ),
        (
            "invalid DATABASE_URL",
            Some("postgres://[nonsense"),
            &[],
            64,
            "invalid DATABASE_URL",
        ),
        (
            "a bad lease",
            Some(&unreachable),
            &["--lease", "soon"],
            64,
            "invalid duration \"soon\"",
        ),
    ];
    for (what, url, extra, code, message) in cases {
        let mut command = node();
        command
            .arg(script())
            .args(["--server", "127.0.0.1:1"])
            .args(extra)
            .env_remove("DATABASE_URL")
            .env_remove("PAUSE_BEFORE_WRITE");
        if let Some(url) = url {
            command.env("DATABASE_URL", url);
        }
        let out = command.output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{what}: {stderr}");
        assert!(
            stderr.contains(&format!("fenced-postgres.mjs: {message}")),
            "{what}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{what}: {stderr}");
        assert!(!stderr.contains("[nonsense"), "{what}: {stderr}");
    }
}
