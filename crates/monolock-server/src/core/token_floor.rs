//! The token floor file: fencing tokens that survive a restart even when the
//! wall clock stepped back.
//!
//! The file holds one number, the *limit*: every token any process using
//! this file has issued or will issue before the next write is below it. A
//! starting server begins at or above the limit it reads, then reserves a
//! range ahead (the new limit is written to a temporary file, fsynced,
//! renamed over the old one, and the directory fsynced) before it issues
//! any token of that range. A crash at any moment, mid-write included,
//! leaves either the old limit or the new one on disk, and both are above
//! everything issued.
//!
//! Grants never wait for the disk in the common case: a background thread
//! renews the reservation when half of it is used up, either by the clock
//! moving on or by grants. If the clock outruns the reservation anyway (a
//! stalled disk), tokens continue from the previous one until the renewal
//! lands. Only a range used up entirely (2^20 grants per reserved second)
//! makes a grant write synchronously; if that write fails the process stops,
//! since issuing on would break the guarantee.
//!
//! A thread and `std::fs`, not tokio: the file is written a few times a
//! minute, must be readable before the runtime exists (startup errors are
//! one line), and a blocking fsync must never sit on a runtime worker.

use std::{
    fs::{self, File},
    io::{self, Write as _},
    path::{Path, PathBuf},
    sync::{
        Arc, Condvar, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    thread,
    time::Duration,
};

use monolock_proto::token_floor_for_unix_seconds;
use tracing::{debug, error, warn};

use crate::core::clock::{WallClock, start_after_restart};

/// How far ahead of the clock a reservation reaches.
pub const TOKEN_FLOOR_RESERVE_AHEAD: Duration = Duration::from_secs(10);

/// How often the background thread compares the clock with the
/// reservation (it is also woken by grants that use up half of it).
const CHECK_EVERY: Duration = Duration::from_millis(2_500);

/// The first line of the file; the second is the limit in decimal.
const MAGIC: &str = "monolock-token-floor 1";

/// Why the token floor file cannot be used. The message is one line naming
/// the file.
#[derive(Debug, thiserror::Error)]
pub enum TokenFloorError {
    /// The file exists but cannot be read.
    #[error("token floor file {}: cannot read: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file does not hold a limit in the expected form.
    #[error("token floor file {}: corrupt ({detail}); expected \"{MAGIC}\" and a number", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The reservation cannot be written (directory missing or read-only,
    /// disk full).
    #[error("token floor file {}: cannot write: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

/// An open token floor file with its reservation; pass it to
/// [`ServerConfig::with_token_floor`](crate::ServerConfig::with_token_floor).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use monolock_server::{ServerConfig, SystemWallClock, TokenFloor};
///
/// let dir = std::env::temp_dir().join(format!("floor-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let floor = TokenFloor::open(dir.join("tokens"), Arc::new(SystemWallClock))?;
/// assert!(floor.limit() > floor.start());
/// let config = ServerConfig::default().with_token_floor(Arc::new(floor));
/// # drop(config);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
pub struct TokenFloor {
    start: u64,
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    clock: Arc<dyn WallClock>,
    /// The limit that is durable on disk: every token issued is below it.
    limit: AtomicU64,
    /// The last token issued, published for the renewing thread.
    issued: AtomicU64,
    /// Serialises writers (the thread and a grant that used up the range),
    /// so the file never goes backwards.
    write: Mutex<()>,
    wake: Condvar,
    /// Whether a renewal is wanted now; `None` once the floor is dropped.
    state: Mutex<Option<bool>>,
}

impl TokenFloor {
    /// Reads the file at `path` (a missing one counts as empty and is
    /// created), reserves the first range and starts renewing it.
    ///
    /// # Errors
    /// The file cannot be read, is corrupt, or the reservation cannot be
    /// written; each a one-line message naming the file.
    pub fn open(
        path: impl Into<PathBuf>,
        clock: Arc<dyn WallClock>,
    ) -> Result<Self, TokenFloorError> {
        let path = path.into();
        let previous = read_limit(&path)?.unwrap_or(0);
        // A temporary file left by a crash mid-write is garbage by design.
        let _ = fs::remove_file(temp_path(&path));
        let start = previous.max(start_after_restart(clock.unix_time()));
        let limit = next_limit(&*clock, start);
        write_limit(&path, limit).map_err(|source| TokenFloorError::Write {
            path: path.clone(),
            source,
        })?;
        debug!(path = %path.display(), previous, start, limit, "token floor reserved");
        let shared = Arc::new(Shared {
            path,
            clock,
            limit: AtomicU64::new(limit),
            issued: AtomicU64::new(start.saturating_sub(1)),
            write: Mutex::new(()),
            wake: Condvar::new(),
            state: Mutex::new(Some(false)),
        });
        let renewing = Arc::clone(&shared);
        thread::Builder::new()
            .name("token-floor".to_owned())
            .spawn(move || renewing.renew_loop())
            .map_err(|source| TokenFloorError::Write {
                path: shared.path.clone(),
                source,
            })?;
        Ok(Self { start, shared })
    }

    /// The lowest token this process may issue: the limit found in the file
    /// (or the clock's start, if higher).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The limit durable on disk now; every token issued is below it.
    pub fn limit(&self) -> u64 {
        self.shared.limit.load(Ordering::Acquire)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Decides the token after `last`, given the one the clock asks for
    /// (`wanted > last`): `wanted` while it is inside the reservation, else
    /// `last + 1`, writing a new reservation first only if even that is
    /// outside.
    pub(crate) fn admit(&self, last: u64, wanted: u64) -> u64 {
        let shared = &*self.shared;
        let mut limit = shared.limit.load(Ordering::Acquire);
        let token = if wanted < limit {
            wanted
        } else {
            let next = last + 1;
            if next >= limit {
                limit = shared.reserve_now(next);
            }
            next
        };
        shared.issued.store(token, Ordering::Relaxed);
        if token >= limit.saturating_sub(half_reserve()) {
            shared.ask_renewal();
        }
        token
    }
}

impl Drop for TokenFloor {
    fn drop(&mut self) {
        *self.shared.lock_state() = None;
        self.shared.wake.notify_one();
    }
}

impl std::fmt::Debug for TokenFloor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenFloor")
            .field("path", &self.shared.path)
            .field("start", &self.start)
            .field("limit", &self.limit())
            .finish()
    }
}

impl Shared {
    fn lock_state(&self) -> MutexGuard<'_, Option<bool>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ask_renewal(&self) {
        let mut state = self.lock_state();
        if let Some(wanted) = state.as_mut()
            && !*wanted
        {
            *wanted = true;
            self.wake.notify_one();
        }
    }

    /// The background thread: renews when asked, or when the clock has used
    /// up half of the reservation; stops when the floor is dropped.
    fn renew_loop(&self) {
        loop {
            let mut state = self.lock_state();
            if *state == Some(false) {
                state = self
                    .wake
                    .wait_timeout(state, CHECK_EVERY)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            match state.as_mut() {
                None => return,
                Some(wanted) => *wanted = false,
            }
            drop(state);
            let issued = self.issued.load(Ordering::Relaxed);
            let now = token_floor_for_unix_seconds(self.clock.unix_seconds());
            let limit = self.limit.load(Ordering::Acquire);
            if now.max(issued) >= limit.saturating_sub(half_reserve()) {
                let target = next_limit(&*self.clock, issued);
                if let Err(err) = self.write_at_least(target) {
                    warn!(path = %self.path.display(), error = %err, "cannot renew the token floor; retrying");
                }
            }
        }
    }

    /// Writes a limit of at least `target` unless one is already durable;
    /// returns the durable limit.
    fn write_at_least(&self, target: u64) -> io::Result<u64> {
        let _writing = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        let limit = self.limit.load(Ordering::Acquire);
        if target <= limit {
            return Ok(limit);
        }
        write_limit(&self.path, target)?;
        self.limit.store(target, Ordering::Release);
        debug!(path = %self.path.display(), limit = target, "token floor renewed");
        Ok(target)
    }

    /// The reservation is used up: write the next one now, on the grant's
    /// path. If it cannot be written the process stops: a token outside a
    /// durable reservation could be issued again after a crash.
    fn reserve_now(&self, next: u64) -> u64 {
        match self.write_at_least(next_limit(&*self.clock, next)) {
            Ok(limit) => limit,
            Err(err) => {
                error!(path = %self.path.display(), error = %err, "token floor used up and cannot be written; stopping");
                eprintln!(
                    "monolock: token floor file {}: cannot write: {err}",
                    self.path.display()
                );
                std::process::exit(1);
            }
        }
    }
}

/// Half a reservation's worth of tokens.
const fn half_reserve() -> u64 {
    token_floor_for_unix_seconds(TOKEN_FLOOR_RESERVE_AHEAD.as_secs()) / 2
}

/// The limit to reserve above `from`: a whole reservation ahead of the
/// clock, and at least a whole reservation's worth of tokens above `from`.
fn next_limit(clock: &dyn WallClock, from: u64) -> u64 {
    let ahead = TOKEN_FLOOR_RESERVE_AHEAD.as_secs();
    let by_clock = token_floor_for_unix_seconds(clock.unix_seconds().saturating_add(ahead));
    let by_count = from.saturating_add(token_floor_for_unix_seconds(ahead));
    by_clock.max(by_count)
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

/// The limit in the file, `None` if there is no file.
fn read_limit(path: &Path) -> Result<Option<u64>, TokenFloorError> {
    let text = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(TokenFloorError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let corrupt = |detail: &str| TokenFloorError::Corrupt {
        path: path.to_owned(),
        detail: detail.to_owned(),
    };
    let text = std::str::from_utf8(&text).map_err(|_| corrupt("not UTF-8"))?;
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err(corrupt("bad first line"));
    }
    let limit = lines
        .next()
        .and_then(|line| line.parse::<u64>().ok())
        .ok_or_else(|| corrupt("no limit on the second line"))?;
    if lines.next().is_some() || !text.ends_with('\n') {
        return Err(corrupt("unexpected content after the limit"));
    }
    Ok(Some(limit))
}

/// Replaces the file atomically: a temporary file, written and fsynced,
/// renamed over it, then the directory fsynced so the rename is durable.
fn write_limit(path: &Path, limit: u64) -> io::Result<()> {
    let temp = temp_path(path);
    let mut file = File::create(&temp)?;
    file.write_all(format!("{MAGIC}\n{limit}\n").as_bytes())?;
    file.sync_all()?;
    drop(file);
    fs::rename(&temp, path)?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_format_round_trips_and_rejects_anything_else() {
        let dir = std::env::temp_dir().join(format!("floor-unit-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("f");
        write_limit(&path, 42).expect("write");
        assert_eq!(read_limit(&path).expect("read"), Some(42));
        for bad in [
            "",
            "42\n",
            "monolock-token-floor 1\n",
            "monolock-token-floor 1\n-1\n",
            "monolock-token-floor 1\n42",
            "monolock-token-floor 1\n42\n7\n",
            "monolock-token-floor 2\n42\n",
        ] {
            fs::write(&path, bad).expect("write");
            let err = read_limit(&path).expect_err(bad);
            assert!(matches!(err, TokenFloorError::Corrupt { .. }), "{bad:?}");
        }
        assert_eq!(read_limit(&dir.join("missing")).expect("read"), None);
        fs::remove_dir_all(&dir).expect("cleanup");
    }
}
