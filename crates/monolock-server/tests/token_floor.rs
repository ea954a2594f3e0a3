//! The token floor file: tokens rise across restarts even when the wall
//! clock steps back, a crash at any moment leaves a limit above every token
//! issued, and a bad file fails startup with one line naming it.

mod common;

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use monolock_server::{
    ServerConfig, TOKEN_FLOOR_RESERVE_AHEAD, TokenFloor, TokenFloorError, WallClock,
};

struct SteppingClock(AtomicU64);

impl WallClock for SteppingClock {
    fn unix_seconds(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

fn clock(second: u64) -> Arc<SteppingClock> {
    Arc::new(SteppingClock(AtomicU64::new(second)))
}

/// The limit on disk, read as a restarting server would.
fn limit_on_disk(path: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string(path).expect("read floor");
    text.lines()
        .nth(1)
        .and_then(|l| l.parse().ok())
        .expect("limit")
}

async fn grant_tokens(server: &common::TestServer, count: usize) -> Vec<u64> {
    let mut tokens = Vec::with_capacity(count);
    for _ in 0..count {
        let (peer, token) = server.hold("fence", 10_000).await;
        tokens.push(token);
        drop(peer);
        common::eventually("released", || server.handle.counts().locks == 0).await;
    }
    tokens
}

#[tokio::test]
async fn tokens_rise_across_a_restart_with_the_clock_stepped_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tokens");
    let wall = clock(1_900_000_000);
    let floor = TokenFloor::open(&path, wall.clone()).expect("open");
    let server = common::TestServer::start_with(
        ServerConfig::default()
            .with_wall_clock(wall.clone())
            .with_token_floor(Arc::new(floor)),
    )
    .await;
    let before = grant_tokens(&server, 5).await;
    server.stop().await;

    // The new process's clock is an hour behind the old one's.
    let wall = clock(1_900_000_000 - 3600);
    let floor = Arc::new(TokenFloor::open(&path, wall.clone()).expect("reopen"));
    let without_floor = common::TestServer::start_with(
        ServerConfig::default().with_wall_clock(clock(1_900_000_000 - 3600)),
    )
    .await;
    let (peer, unfenced) = without_floor.hold("fence", 10_000).await;
    assert!(
        unfenced < before[0],
        "without the file the stepped-back clock issues lower tokens"
    );
    without_floor.stop_and_drop(peer).await;
    let server = common::TestServer::start_with(
        ServerConfig::default()
            .with_wall_clock(wall)
            .with_token_floor(floor),
    )
    .await;
    let after = grant_tokens(&server, 5).await;
    let highest = before.iter().max().expect("tokens");
    assert!(
        after.iter().all(|t| t > highest),
        "{after:?} not above {highest}"
    );
    assert!(after.windows(2).all(|w| w[0] < w[1]), "{after:?}");
    server.stop().await;
}

/// Every token is below the limit that is durable on disk at the moment it
/// is issued, so a crash right after any grant (before or after a renewal,
/// or in the middle of one) restarts above it. The clock runs far ahead of
/// the reservation between grants, so renewals happen all along.
#[tokio::test]
async fn a_crash_between_reservations_never_reissues_a_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tokens");
    let wall = clock(1_900_000_000);
    let floor = Arc::new(TokenFloor::open(&path, wall.clone()).expect("open"));
    let server = common::TestServer::start_with(
        ServerConfig::default()
            .with_wall_clock(wall.clone())
            .with_token_floor(floor.clone()),
    )
    .await;
    let mut issued = Vec::new();
    let step = TOKEN_FLOOR_RESERVE_AHEAD.as_secs() / 2 + 1;
    let mut renewals = 0;
    for round in 0..6u64 {
        wall.0
            .store(1_900_000_000 + round * step, Ordering::Relaxed);
        let limit_before = floor.limit();
        for token in grant_tokens(&server, 3).await {
            let durable = limit_on_disk(&path);
            assert!(
                token < durable,
                "token {token} issued at or above the durable limit {durable}"
            );
            issued.push(token);
        }
        // Once the clock has moved past half the reservation, these grants
        // ask for a renewal; wait for it to land.
        if round > 0 {
            common::eventually("the reservation is renewed", || {
                floor.limit() > limit_before
            })
            .await;
            renewals += 1;
        }
    }
    assert!(renewals >= 5);
    // The crash: the process is gone without any further write, and a
    // write of the next reservation was cut short (its temporary file).
    drop(server);
    let highest = *issued.iter().max().expect("tokens");
    std::fs::write(dir.path().join("tokens.tmp"), b"monolock-token-fl").expect("torn write");
    // Restart on a clock stepped back to the first second.
    let wall = clock(1_900_000_000);
    let floor = Arc::new(TokenFloor::open(&path, wall.clone()).expect("reopen after crash"));
    assert!(floor.start() > highest);
    let server = common::TestServer::start_with(
        ServerConfig::default()
            .with_wall_clock(wall)
            .with_token_floor(floor),
    )
    .await;
    let after = grant_tokens(&server, 3).await;
    assert!(after.iter().all(|&t| t > highest), "{after:?} vs {highest}");
    assert!(
        !dir.path().join("tokens.tmp").exists(),
        "the torn write is cleaned up"
    );
    server.stop().await;
}

#[test]
fn a_missing_file_is_created_and_a_bad_one_is_one_line_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tokens");
    let floor = TokenFloor::open(&path, clock(1_900_000_000)).expect("created");
    assert!(limit_on_disk(&path) >= floor.start() + (1 << 20));
    drop(floor);

    std::fs::write(&path, "monolock-token-floor 1\nnot a number\n").expect("corrupt");
    let err = TokenFloor::open(&path, clock(1_900_000_000)).expect_err("corrupt");
    assert!(matches!(err, TokenFloorError::Corrupt { .. }), "{err:?}");
    let line = err.to_string();
    assert!(line.contains(&path.display().to_string()), "{line}");
    assert!(!line.contains('\n'), "{line}");

    // A directory where the file should be: unreadable.
    let err = TokenFloor::open(dir.path(), clock(1_900_000_000)).expect_err("directory");
    assert!(matches!(err, TokenFloorError::Read { .. }), "{err:?}");
    assert!(err.to_string().contains("cannot read"), "{err}");

    // A directory that does not exist: the reservation cannot be written.
    let inside = dir.path().join("missing").join("tokens");
    let err = TokenFloor::open(&inside, clock(1_900_000_000)).expect_err("unwritable");
    assert!(matches!(err, TokenFloorError::Write { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&inside.display().to_string()),
        "{err}"
    );
}

/// The floor's background renewal keeps ahead of a clock that moves on by
/// itself, without any grant asking for it.
#[tokio::test]
async fn the_reservation_follows_the_clock_without_grants() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tokens");
    let wall = clock(1_900_000_000);
    let floor = TokenFloor::open(&path, wall.clone()).expect("open");
    let first = floor.limit();
    wall.0.store(
        1_900_000_000 + TOKEN_FLOOR_RESERVE_AHEAD.as_secs(),
        Ordering::Relaxed,
    );
    common::eventually("a renewal", || floor.limit() > first).await;
    assert_eq!(limit_on_disk(&path), floor.limit());
}
