//! What a leader does, fenced by its term: the lock's token. A leader that
//! was paused and resumed after a newer one took over cannot act again: the
//! database refuses its term.

use tokio_postgres::GenericClient;

/// The tables, created once (`examples/sql/leader-schema.sql`).
pub const SCHEMA: &str = include_str!("../sql/leader-schema.sql");

/// One fenced act (`examples/sql/leader-act.sql`): `$1` lock, `$2` term as
/// decimal text, `$3` node.
pub const ACT: &str = include_str!("../sql/leader-act.sql");

/// Records one act of `node` as leader of `lock` in term `term`.
/// `Ok(false)`: a newer term has acted; this node no longer leads.
///
/// # Errors
///
/// Any database error.
pub async fn act(
    db: &impl GenericClient,
    lock: &str,
    term: u64,
    node: &str,
) -> Result<bool, tokio_postgres::Error> {
    let rows = db.execute(ACT, &[&lock, &term.to_string(), &node]).await?;
    Ok(rows == 1)
}
