//! Retrying the acquire step: exponential backoff with jitter.

use std::{future::Future, num::NonZeroU32, time::Duration};

use monolock_proto::ErrorCode;
use rand::Rng;
use tokio::time::Instant;
use tracing::warn;

use crate::error::Error;

/// The first backoff delay.
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(100);

/// The largest backoff delay.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long the server may stay unreachable before retrying stops.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(30);

/// When and how often a failed acquire is tried again.
///
/// Only [temporary](Error::is_temporary) failures are retried: server
/// conditions (ERROR codes below 0x10) and connection failures. After
/// 0x01 (server shutting down) the next attempt goes at once, since the
/// address usually answers again right away (a standby, a restart);
/// otherwise the delay starts at [`DEFAULT_INITIAL_BACKOFF`], doubles per
/// failure up to [`DEFAULT_MAX_BACKOFF`], and is jittered to between half
/// and all of that so that a fleet does not reconnect in step. Client
/// errors (0x10 and up), invalid input, certificate and TLS errors, a
/// malformed address and protocol violations are returned at once: they
/// fail the same way every time.
///
/// Retrying is bounded in time: once the server has been unreachable for
/// [`retry_for`](Self::retry_for) ([`DEFAULT_RETRY_FOR`] unless set), no
/// further attempt is made and the last error is returned. A delay that
/// would end past the bound is shortened to end at it, so the last
/// attempt is made when the bound runs out, not a backoff before. "Unreachable"
/// counts from the first failure after the server last answered (an
/// ERROR frame, such as 0x01 on shutdown, proves it up), so a claim that
/// waited an hour in the queue before the server restarted still gets
/// the whole bound to reconnect. Every retry is logged (`tracing`,
/// level WARN) with its reason and delay.
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
    retry_for: Option<Duration>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            max_attempts: None,
            retry_for: Some(DEFAULT_RETRY_FOR),
        }
    }
}

impl RetryPolicy {
    /// The default policy: 100 ms doubling to 5 s, attempts unlimited,
    /// at most [`DEFAULT_RETRY_FOR`] of an unreachable server.
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

    /// Stops retrying once the server has been unreachable this long
    /// (`None`: retry for as long as it takes, which only a caller that
    /// really means to wait forever should ask for).
    pub fn with_retry_for(mut self, bound: Option<Duration>) -> Self {
        self.retry_for = bound;
        self
    }

    /// The bound on an unreachable server, if any.
    pub fn retry_for(&self) -> Option<Duration> {
        self.retry_for
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
    /// runs out of attempts or time.
    ///
    /// Wrap only steps that are safe to repeat (connecting and acquiring),
    /// never guarded work that may already have run.
    ///
    /// # Errors
    /// The first permanent error, or the last error once the attempts or
    /// the time are used up.
    ///
    /// # Cancel safety
    /// Cancel safe if `attempt`'s futures are (the client's acquire
    /// futures are: dropping one gives its place in the queue up).
    pub async fn retry<T, F, Fut>(&self, attempt: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        self.retry_notify(attempt, |err, delay| {
            warn!(error = %err, ?delay, "acquire failed; retrying");
        })
        .await
    }

    /// [`retry`](Self::retry), calling `notify` with the error and the
    /// delay before each retry (to log it where the program logs).
    ///
    /// # Errors
    /// As for [`retry`](Self::retry).
    ///
    /// # Cancel safety
    /// As for [`retry`](Self::retry).
    pub async fn retry_notify<T, F, Fut, N>(
        &self,
        mut attempt: F,
        mut notify: N,
    ) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
        N: FnMut(&Error, Duration),
    {
        let mut attempts: u32 = 0;
        let mut retries: u32 = 0;
        let mut after_shutdown = false;
        let mut unreachable_since: Option<Instant> = None;
        loop {
            let err = match attempt().await {
                Ok(value) => return Ok(value),
                Err(err) => err,
            };
            let now = Instant::now();
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
            let since = if err.server_answered() {
                unreachable_since = None;
                now
            } else {
                *unreachable_since.get_or_insert(now)
            };
            // No attempt may start after the bound, and the last one
            // starts at it: a delay that would cross the bound is cut
            // short, so the whole bound is used and no later attempt made.
            let delay = match self.retry_for {
                Some(bound) => match bound.checked_sub(now - since) {
                    Some(left) if !left.is_zero() => delay.min(left),
                    _ => return Err(err),
                },
                None => delay,
            };
            notify(&err, delay);
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

    use super::*;
    use crate::error::LossReason;

    fn server(code: u8) -> Error {
        Error::from(LossReason::Server {
            code: ErrorCode(code),
            reason: String::new(),
        })
    }

    fn refused() -> Error {
        Error::Connect {
            addr: "127.0.0.1:1".into(),
            source: std::io::ErrorKind::ConnectionRefused.into(),
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
                    1 => Err(Error::from(LossReason::ConnectionClosed)),
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
                Err(Error::from(LossReason::ConnectionClosed))
            })
            .await;
        assert!(matches!(
            result,
            Err(Error::Lost(LossReason::ConnectionClosed))
        ));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_server_is_retried_for_a_bounded_time() {
        let calls = AtomicU32::new(0);
        let start = Instant::now();
        let mut notified = Vec::new();
        let result: Result<(), _> = RetryPolicy::new()
            .retry_notify(
                || async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err(refused())
                },
                |err, delay| notified.push((err.to_string(), delay)),
            )
            .await;
        assert!(matches!(result, Err(Error::Connect { .. })));
        // The last attempt is made exactly when the bound runs out.
        assert_eq!(start.elapsed(), DEFAULT_RETRY_FOR);
        // Every retry was announced, with its delay.
        assert_eq!(notified.len() + 1, calls.load(Ordering::SeqCst) as usize);
        assert!(
            notified
                .iter()
                .all(|(text, _)| text.contains("could not connect"))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_attempt_is_made_when_the_bound_runs_out() {
        for bound_ms in [100, 2_500, 5_000, 10_000, 30_000] {
            let bound = Duration::from_millis(bound_ms);
            let start = Instant::now();
            let mut attempts = Vec::new();
            let result: Result<(), _> = RetryPolicy::new()
                .with_retry_for(Some(bound))
                .retry_notify(
                    || {
                        attempts.push(start.elapsed());
                        async { Err(refused()) }
                    },
                    |_, _| {},
                )
                .await;
            assert!(result.is_err());
            assert_eq!(attempts.last(), Some(&bound), "{bound:?}: {attempts:?}");
            assert_eq!(start.elapsed(), bound, "no attempt after the bound");
        }
        // A server that comes up just before the bound is found.
        let start = Instant::now();
        let up_at = Duration::from_millis(4_200);
        let result = RetryPolicy::new()
            .with_retry_for(Some(Duration::from_secs(5)))
            .retry(|| async {
                if start.elapsed() >= up_at {
                    Ok(start.elapsed())
                } else {
                    Err(refused())
                }
            })
            .await;
        let found = result.expect("the server came up within the bound");
        assert!(found <= Duration::from_secs(5), "{found:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_answer_restarts_the_bound() {
        let calls = AtomicU32::new(0);
        let start = Instant::now();
        // Delays of 50 to 100 ms: five failures in a row fit in the bound,
        // eleven do not, unless the answer in between restarts it.
        let result = RetryPolicy::new()
            .with_initial_backoff(Duration::from_millis(100))
            .with_max_backoff(Duration::from_millis(100))
            .with_retry_for(Some(Duration::from_millis(500)))
            .retry(|| async {
                let call = calls.fetch_add(1, Ordering::SeqCst);
                match call {
                    0..=4 | 6..=10 => Err(refused()),
                    5 => Err(server(0x02)),
                    _ => Ok(call),
                }
            })
            .await;
        assert_eq!(result.unwrap(), 11);
        assert!(start.elapsed() > Duration::from_millis(500));
        let result: Result<(), _> = RetryPolicy::new()
            .with_retry_for(None)
            .with_max_attempts(50)
            .retry(|| async { Err(refused()) })
            .await;
        assert!(result.is_err(), "unbounded in time, bounded in attempts");
    }
}
