//! Retrying the acquire step: exponential backoff with jitter.

use std::{future::Future, num::NonZeroU32, time::Duration};

use monolock_proto::ErrorCode;
use rand::Rng;
use tracing::debug;

use crate::error::Error;

/// The first backoff delay.
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(100);

/// The largest backoff delay.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(5);

/// When and how often a failed acquire is tried again.
///
/// Only [temporary](Error::is_temporary) failures are retried: server
/// conditions (ERROR codes below 0x10) and connection failures. After
/// 0x01 (server shutting down) the next attempt goes at once, since the
/// address usually answers again right away (a standby, a restart);
/// otherwise the delay starts at [`DEFAULT_INITIAL_BACKOFF`], doubles per
/// failure up to [`DEFAULT_MAX_BACKOFF`], and is jittered to between half
/// and all of that so that a fleet does not reconnect in step. Client
/// errors (0x10 and up), invalid input and protocol violations are
/// returned at once.
///
/// ```
/// use std::time::Duration;
/// use monolock_client::RetryPolicy;
///
/// let policy = RetryPolicy::new()
///     .with_initial_backoff(Duration::from_millis(50))
///     .with_max_backoff(Duration::from_secs(2))
///     .with_max_attempts(10);
/// assert_eq!(policy.max_attempts(), Some(10));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    initial_backoff: Duration,
    max_backoff: Duration,
    max_attempts: Option<NonZeroU32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            max_attempts: None,
        }
    }
}

impl RetryPolicy {
    /// The default policy: 100 ms doubling to 5 s, attempts unlimited.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the first delay.
    pub fn with_initial_backoff(mut self, delay: Duration) -> Self {
        self.initial_backoff = delay;
        self
    }

    /// Sets the largest delay.
    pub fn with_max_backoff(mut self, delay: Duration) -> Self {
        self.max_backoff = delay;
        self
    }

    /// Gives up after `attempts` attempts in all (0 is taken as 1).
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(NonZeroU32::new(attempts).unwrap_or(NonZeroU32::MIN));
        self
    }

    /// The attempt limit, if any.
    pub fn max_attempts(&self) -> Option<u32> {
        self.max_attempts.map(NonZeroU32::get)
    }

    /// The delay before retry number `retry` (0 for the first retry),
    /// before jitter: `initial x 2^retry`, capped.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }

    /// Runs `attempt` until it succeeds, fails with a permanent error, or
    /// runs out of attempts.
    ///
    /// Wrap only steps that are safe to repeat (connecting and acquiring),
    /// never guarded work that may already have run.
    ///
    /// # Errors
    /// The first permanent error, or the last error once the attempts are
    /// used up.
    ///
    /// # Cancel safety
    /// Cancel safe if `attempt`'s futures are (the client's acquire
    /// futures are: dropping one gives its place in the queue up).
    pub async fn retry<T, F, Fut>(&self, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let mut attempts: u32 = 0;
        let mut retries: u32 = 0;
        let mut after_shutdown = false;
        loop {
            let err = match attempt().await {
                Ok(value) => return Ok(value),
                Err(err) => err,
            };
            attempts = attempts.saturating_add(1);
            if !err.is_temporary() || self.max_attempts.is_some_and(|max| attempts >= max.get()) {
                return Err(err);
            }
            // Reconnect at once after the first 0x01 in a row; a server that
            // keeps answering 0x01 is backed off like any other condition.
            let shutdown = err.server_code() == Some(ErrorCode::SHUTTING_DOWN);
            let delay = if shutdown && !after_shutdown {
                Duration::ZERO
            } else {
                let delay = jitter(self.backoff(retries));
                retries = retries.saturating_add(1);
                delay
            };
            after_shutdown = shutdown;
            debug!(error = %err, attempts, ?delay, "acquire failed; retrying");
            tokio::time::sleep(delay).await;
        }
    }
}

/// A delay between half and all of `delay`, uniformly.
fn jitter(delay: Duration) -> Duration {
    let half = delay / 2;
    let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
    half + Duration::from_nanos(rand::rng().random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use monolock_proto::NameError;
    use tokio::time::Instant;

    use super::*;

    fn server(code: u8) -> Error {
        Error::Server {
            code: ErrorCode(code),
            reason: String::new(),
        }
    }

    #[test]
    fn backoff_doubles_to_the_cap() {
        let p = RetryPolicy::new();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(p.backoff(0), ms(100));
        assert_eq!(p.backoff(1), ms(200));
        assert_eq!(p.backoff(5), ms(3200));
        assert_eq!(p.backoff(6), ms(5000));
        assert_eq!(p.backoff(200), ms(5000));
        for _ in 0..100 {
            let d = jitter(ms(400));
            assert!(d >= ms(200) && d <= ms(400), "{d:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn temporary_errors_are_retried_with_backoff() {
        let calls = AtomicU32::new(0);
        let start = Instant::now();
        let result = RetryPolicy::new()
            .retry(|| async {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(server(0x02)),
                    1 => Err(Error::ConnectionClosed),
                    _ => Ok("done"),
                }
            })
            .await;
        assert_eq!(result.unwrap(), "done");
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        // 50..=100ms, then 100..=200ms.
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
        assert!(waited <= Duration::from_millis(300), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn shutting_down_reconnects_at_once_then_backs_off() {
        let calls = AtomicU32::new(0);
        let start = Instant::now();
        let result = RetryPolicy::new()
            .retry(|| async {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(server(0x01)),
                    1 => Ok(start.elapsed()),
                    _ => unreachable!(),
                }
            })
            .await;
        assert_eq!(result.unwrap(), Duration::ZERO);

        let calls = AtomicU32::new(0);
        let start = Instant::now();
        let result = RetryPolicy::new()
            .retry(|| async {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0 | 1 => Err(server(0x01)),
                    _ => Ok(start.elapsed()),
                }
            })
            .await;
        assert!(result.unwrap() >= Duration::from_millis(50));
    }

    #[tokio::test(start_paused = true)]
    async fn client_errors_and_invalid_input_return_at_once() {
        for err in [
            || server(0x18),
            || server(0x7f),
            || Error::InvalidName(NameError::Empty),
        ] {
            let calls = AtomicU32::new(0);
            let result: Result<(), _> = RetryPolicy::new()
                .retry(|| async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err(err())
                })
                .await;
            assert!(result.is_err());
            assert_eq!(calls.load(Ordering::SeqCst), 1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_are_limited() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = RetryPolicy::new()
            .with_max_attempts(3)
            .retry(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(Error::ConnectionClosed)
            })
            .await;
        assert!(matches!(result, Err(Error::ConnectionClosed)));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }
}
