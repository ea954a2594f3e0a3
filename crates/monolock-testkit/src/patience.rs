//! How long a test waits for something that should happen, and the waits
//! built on it. One constant for every in-process test: long enough that
//! only a real hang trips it on a loaded 2-core machine, short enough that
//! a hang fails the run quickly. Waiting is always on an event (a reply, a
//! state), never on a duration.

use std::{future::Future, time::Duration};

use tokio::time::{Instant, timeout};

/// The bound on any single wait for an event in an in-process test.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Polls `probe` every millisecond until it holds; panics after
/// [`PATIENCE`]. On a paused clock the poll advances time by a millisecond
/// per round, so `probe` must turn true from the work of other tasks.
pub async fn eventually(what: &str, mut probe: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !probe() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Awaits `fut`, panicking after [`PATIENCE`].
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    timeout(PATIENCE, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for: {what}"))
}
