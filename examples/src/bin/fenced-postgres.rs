//! A job that takes a lock and writes its result to PostgreSQL, fenced by
//! the lock's token: a holder that was paused past its lease and resumed
//! after a newer holder wrote finds its write refused (0 rows) and stops.
//!
//! ```sh
//! DATABASE_URL=postgres://app@db.internal/app fenced-postgres --job nightly-import
//! ```
//!
//! Exit codes are those of `monolock exec`: 0 written, 64 usage, 69 lock
//! server or database unreachable, 75 busy with `--no-wait`, 79 the lock
//! was lost or the write was fenced off, 1 another database error.

use std::process::ExitCode;

use clap::Parser;
use monolock_client::{Client, LockGuard};
use monolock_examples::{
    cli::{self, LockArgs},
    db,
    exit::{self, Failure},
    fence,
};

const PROGRAM: &str = "fenced-postgres";

#[derive(Parser)]
#[command(name = PROGRAM, version, about = "Take a lock, then write to PostgreSQL fenced by its token")]
struct Args {
    /// The job: the lock's name and the key of its row in `job_state`.
    #[arg(long, default_value = "nightly-import")]
    job: String,
    /// The database, as a `postgres://` URL or libpq `key=value` string.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    #[command(flatten)]
    lock_args: LockArgs,
    /// Give up at once (exit 75) if another holder has the lock.
    #[arg(long)]
    no_wait: bool,
    /// What to write as the job's result.
    #[arg(long)]
    result: Option<String>,
    /// For the fault demonstration: stop (SIGSTOP) right before the write,
    /// as a GC pause or a suspended VM would, until `kill -CONT`.
    #[arg(long, env = "PAUSE_BEFORE_WRITE", value_parser = clap::builder::FalseyValueParser::new())]
    pause_before_write: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    cli::main(PROGRAM, run).await
}

async fn run(args: Args) -> Result<(), Failure> {
    // The database first: a job that cannot write should not take the lock.
    let url = args.database_url.as_deref().ok_or_else(|| {
        Failure::new(
            exit::USAGE,
            "no database to write to: set DATABASE_URL or pass --database-url",
        )
    })?;
    let db = db::connect(url).await?;
    let lock = acquire(&args).await?;
    let token = lock.token();
    println!("holding {} under token {token}", args.job);

    let result = tokio::select! {
        result = work() => result,
        reason = lock.lost() => {
            return Err(Failure::new(exit::LOST, format!("lost the lock before writing: {reason}")));
        }
    };
    let result = args.result.unwrap_or(result);
    // Check right before the write, and fence the write anyway: a pause can
    // strike between the check and the write.
    if let Some(reason) = lock.loss() {
        return Err(Failure::new(
            exit::LOST,
            format!("lost the lock before writing: {reason}"),
        ));
    }
    if args.pause_before_write {
        pause();
    }
    let written = fence::write(&db, &args.job, token, &result)
        .await
        .map_err(|err| {
            Failure::new(
                exit::FAILURE,
                format!("writing {}: {}", args.job, exit::chain(&err)),
            )
        })?;
    if !written {
        return Err(Failure::new(
            exit::LOST,
            format!(
                "fenced off: a newer holder of {} has written; token {token} refused",
                args.job
            ),
        ));
    }
    println!("wrote {} under token {token}", args.job);
    lock.release().await.map_err(|reason| {
        Failure::new(
            exit::LOST,
            format!("the lock was lost before the end (the write itself was fenced): {reason}"),
        )
    })
}

/// Queues for the lock (or only tries, with `--no-wait`).
async fn acquire(args: &Args) -> Result<LockGuard, Failure> {
    let client = Client::new(args.lock_args.server.clone());
    let failed = |err: monolock_client::Error| {
        let code = if err.is_temporary() {
            exit::UNAVAILABLE
        } else {
            exit::USAGE
        };
        Failure::new(
            code,
            format!("cannot acquire lock {:?}: {}", args.job, exit::chain(&err)),
        )
    };
    if args.no_wait {
        client
            .try_acquire(&args.job, args.lock_args.lease)
            .await
            .map_err(failed)?
            .ok_or_else(|| Failure::new(exit::NOT_ACQUIRED, format!("lock {:?} is busy", args.job)))
    } else {
        client
            .acquire(&args.job, args.lock_args.lease)
            .await
            .map_err(failed)
    }
}

/// The job's real work; here, a result to write.
async fn work() -> String {
    format!("imported by pid {}", std::process::id())
}

/// Stops this process as a pause would; returns once it is continued.
fn pause() {
    eprintln!(
        "{PROGRAM}: pausing before the write (kill -CONT {})",
        std::process::id()
    );
    // `kill` runs as a child, so waiting for it returns after SIGCONT.
    let _ = std::process::Command::new("kill")
        .args(["-STOP", &std::process::id().to_string()])
        .status();
}
