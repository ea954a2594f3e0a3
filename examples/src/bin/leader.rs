//! Leader election: campaign for a lock, lead while it is held, stop leading
//! the moment it is lost, campaign again. Run several; each prints who leads.
//!
//! ```sh
//! leader --node a & leader --node b & leader --node c &
//! ```
//!
//! The lock's token is the leader's term. With `--database-url`, every act
//! of the leader is written to PostgreSQL fenced by its term, so a leader
//! that was paused and resumed after a newer one took over is refused.

use std::{process::ExitCode, time::Duration};

use clap::Parser;
use monolock_client::{Client, LockGuard};
use monolock_examples::{
    cli::{self, LockArgs},
    db,
    exit::{self, Failure},
    leader,
};

const PROGRAM: &str = "leader";

#[derive(Parser)]
#[command(name = PROGRAM, version, about = "Leader election with monolock")]
struct Args {
    /// This instance's name, as printed and recorded.
    #[arg(long)]
    node: String,
    /// The lock the instances campaign for.
    #[arg(long, default_value = "leader")]
    lock: String,
    #[command(flatten)]
    lock_args: LockArgs,
    /// How often the leader acts.
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    every: Duration,
    /// Record every act in PostgreSQL, fenced by the term.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    cli::main(PROGRAM, run).await
}

async fn run(args: Args) -> Result<(), Failure> {
    let db = match &args.database_url {
        Some(url) => Some(db::connect(url).await?),
        None => None,
    };
    let client = Client::new(args.lock_args.server.clone());
    loop {
        let lock = tokio::select! {
            lock = client.acquire_retrying(&args.lock, args.lock_args.lease) => lock.map_err(|err| {
                Failure::new(exit::USAGE, format!("cannot campaign for {:?}: {}", args.lock, exit::chain(&err)))
            })?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        println!("{} leads {} in term {}", args.node, args.lock, lock.token());
        tokio::select! {
            ended = lead(&args, &lock, db.as_ref()) => {
                println!("{} stops leading term {}: {}", args.node, lock.token(), ended?);
            }
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        // Dropping the guard gives the lock up before campaigning again.
        drop(lock);
    }
}

/// Leads until the lock is lost or the database refuses the term; says why.
async fn lead(
    args: &Args,
    lock: &LockGuard,
    db: Option<&tokio_postgres::Client>,
) -> Result<String, Failure> {
    let mut tick = tokio::time::interval(args.every);
    loop {
        tokio::select! {
            reason = lock.lost() => return Ok(reason.to_string()),
            _ = tick.tick() => {}
        }
        // A resumed process reads `false` here before any timer has run.
        if !lock.is_held() {
            continue; // `lost()` resolves next
        }
        if let Some(db) = db {
            let acted = leader::act(db, &args.lock, lock.token(), &args.node)
                .await
                .map_err(|err| {
                    Failure::new(
                        exit::FAILURE,
                        format!("recording an act: {}", exit::chain(&err)),
                    )
                })?;
            if !acted {
                return Ok("a newer term has acted (fenced off)".into());
            }
        }
    }
}
