//! The fenced write: a row that remembers the highest token that wrote it,
//! and an `UPDATE` that only a holder with that token or a newer one passes.

use tokio_postgres::GenericClient;

/// The table, created once (`examples/sql/schema.sql`).
pub const SCHEMA: &str = include_str!("../sql/schema.sql");

/// The fenced write (`examples/sql/fenced-write.sql`): `$1` job, `$2` token
/// as decimal text, `$3` result.
pub const FENCED_WRITE: &str = include_str!("../sql/fenced-write.sql");

/// Writes `result` for `job` under `token`. `Ok(false)`: the row holds a
/// newer token, the write was refused and this holder must stop.
///
/// The token travels as decimal text into a `numeric(20,0)` column:
/// PostgreSQL has no unsigned 64-bit type, and `token as i64` would turn
/// tokens from 2^63 on into negative numbers that compare wrongly.
///
/// # Errors
///
/// Any database error (connection lost, table missing).
pub async fn write(
    db: &impl GenericClient,
    job: &str,
    token: u64,
    result: &str,
) -> Result<bool, tokio_postgres::Error> {
    let rows = db
        .execute(FENCED_WRITE, &[&job, &token.to_string(), &result])
        .await?;
    Ok(rows == 1)
}

/// The highest token that has written `job`, `None` if there is no row.
///
/// # Errors
///
/// Any database error, or a stored value that is not a u64.
pub async fn current_token(
    db: &impl GenericClient,
    job: &str,
) -> Result<Option<u64>, tokio_postgres::Error> {
    let row = db
        .query_opt("SELECT token::text FROM job_state WHERE job = $1", &[&job])
        .await?;
    Ok(row.and_then(|row| row.get::<_, String>(0).parse().ok()))
}
