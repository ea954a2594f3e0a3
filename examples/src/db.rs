//! The PostgreSQL connection of the examples.

use std::time::Duration;

use tokio_postgres::{Client, Config, NoTls};

use crate::exit::{self, Failure};

/// How long connecting to the database may take before the program gives
/// up: an unreachable host fails in seconds, not at the kernel's TCP timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects to the database named by a `postgres://` URL (or a libpq
/// `key=value` string) and drives the connection on its own task.
///
/// # Errors
///
/// A URL that does not parse is a usage error (64); a database that
/// cannot be reached or refuses the login is unavailable (69). The message
/// never repeats the URL, which may hold a password.
pub async fn connect(url: &str) -> Result<Client, Failure> {
    let mut config: Config = url.parse().map_err(|err| {
        Failure::new(
            exit::USAGE,
            format!("invalid DATABASE_URL: {}", exit::chain(&err)),
        )
    })?;
    config.connect_timeout(CONNECT_TIMEOUT);
    let (client, connection) = config.connect(NoTls).await.map_err(|err| {
        Failure::new(
            exit::UNAVAILABLE,
            format!("cannot connect to the database: {}", exit::chain(&err)),
        )
    })?;
    // A broken connection shows up as an error on the next query.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}
