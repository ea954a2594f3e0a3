//! Leader election in the shape of client-go's `leaderelection` and
//! Curator's `LeaderLatch`, over one lock with a value
//! ([`Client::elect`](crate::Client::elect)).
//!
//! One background task campaigns (waits in the lock's FIFO queue with the
//! candidate's value), holds the lock while it leads, and observes the
//! lock to report every new leader. Its events come in the order they
//! happened, as a stream: [`ElectionEvent::StartedLeading`] (with the
//! token and a token cancelled when leadership ends),
//! [`ElectionEvent::StoppedLeading`], [`ElectionEvent::NewLeader`] (the
//! holder's state, value included, itself too). After a loss it campaigns
//! again; a stopped leadership is always reported before the next start.

use std::{
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    sync::{mpsc, oneshot},
    time::sleep,
};
use tokio_util::{
    sync::{CancellationToken, DropGuard, WaitForCancellationFuture},
    task::AbortOnDropHandle,
};
use tracing::debug;

use crate::{
    client::Client,
    connector::Connector,
    error::Error,
    guard::LockGuard,
    observe::Observation,
    retry::{DEFAULT_INITIAL_BACKOFF, DEFAULT_MAX_BACKOFF},
    state::LockState,
};

/// What an election reports, in the order it happened.
#[derive(Debug)]
#[non_exhaustive]
pub enum ElectionEvent {
    /// This candidate holds the lock: it leads until
    /// [`Leadership::ended`] resolves (and `StoppedLeading` follows).
    StartedLeading(Leadership),
    /// This candidate's leadership ended: lost (the lock's loss reason is
    /// in the logs), or given up by [`Election::resign`].
    StoppedLeading,
    /// The lock's holder changed to a new token, with its value: the
    /// leader to forward to (this candidate too, when it leads). Nothing
    /// is reported while nobody leads.
    NewLeader(LockState),
}

/// This candidate's term as leader.
#[derive(Clone, Debug)]
pub struct Leadership {
    token: u64,
    ended: CancellationToken,
}

impl Leadership {
    /// The fencing token of the term: hand it to every write the leader
    /// makes, so that a former leader's writes are refused.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Resolves when the term ends (the lock lost, resigned, or the
    /// election dropped): stop acting as leader then.
    pub fn ended(&self) -> WaitForCancellationFuture<'_> {
        self.ended.cancelled()
    }

    /// Whether the term has ended.
    pub fn is_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// A token cancelled when the term ends, for tasks that must stop then.
    pub fn ended_token(&self) -> CancellationToken {
        self.ended.clone()
    }
}

/// What the election's owner asks of its task.
enum Control {
    SetValue(String, oneshot::Sender<Result<(), Error>>),
    Resign(oneshot::Sender<()>),
}

/// A running election ([`Client::elect`](crate::Client::elect)): one
/// background task campaigns with the candidate's value, holds the lock
/// while it leads, campaigns again after a loss, and observes the lock.
///
/// A `futures_core::Stream` of `Result<ElectionEvent, Error>`;
/// [`next`](Self::next) reads it without an extension trait. Events wait
/// in a queue until read, about one per change of leader: the task never
/// blocks on a slow reader (that would delay what it does on a loss), so
/// keep reading them. An error (a permanent one: an unsupported server, a
/// refused name) ends it.
/// Dropping the election stops it at once: the lock, if held, is
/// released (the guard is dropped).
#[must_use = "dropping an election stops it"]
pub struct Election {
    events: mpsc::UnboundedReceiver<Result<ElectionEvent, Error>>,
    control: mpsc::UnboundedSender<Control>,
    _task: AbortOnDropHandle<()>,
}

impl Election {
    /// The next event, then `None` once the election stopped.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn next(&mut self) -> Option<Result<ElectionEvent, Error>> {
        self.events.recv().await
    }

    /// Replaces this candidate's value: at once on the lock while it
    /// leads (observers are told), and for every later campaign.
    ///
    /// # Errors
    /// [`Error::InvalidValue`] above 1,024 bytes; while leading, as
    /// [`LockGuard::set_value`]; [`Error::Lost`] if the election stopped.
    pub async fn set_value(&self, value: impl Into<String>) -> Result<(), Error> {
        let value = value.into();
        crate::state::checked_value(&value)?;
        let (ack, done) = oneshot::channel();
        self.control
            .send(Control::SetValue(value, ack))
            .map_err(|_| stopped())?;
        done.await.map_err(|_| stopped())?
    }

    /// Stops the election: the lock is released if this candidate leads
    /// (`StoppedLeading` is then the stream's last event), and the
    /// observation ends. Returns once that is done; the stream yields what
    /// was left and then ends.
    pub async fn resign(&mut self) {
        let (ack, done) = oneshot::channel();
        if self.control.send(Control::Resign(ack)).is_ok() {
            let _ = done.await;
        }
    }
}

impl futures_core::Stream for Election {
    type Item = Result<ElectionEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.poll_recv(cx)
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election").finish_non_exhaustive()
    }
}

fn stopped() -> Error {
    Error::Lost(crate::LossReason::ConnectionClosed)
}

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Starts an election (checked by the caller).
pub(crate) fn start<C: Connector>(
    client: Client<C>,
    name: String,
    lease: Duration,
    value: String,
) -> Election {
    let (events_tx, events) = mpsc::unbounded_channel();
    let (control, control_rx) = mpsc::unbounded_channel();
    let campaign = Campaign {
        client,
        name,
        lease,
        value,
        events: events_tx,
    };
    let task = tokio::spawn(campaign.run(control_rx));
    Election {
        events,
        control,
        _task: AbortOnDropHandle::new(task),
    }
}

/// The election's task.
struct Campaign<C> {
    client: Client<C>,
    name: String,
    lease: Duration,
    value: String,
    events: mpsc::UnboundedSender<Result<ElectionEvent, Error>>,
}

/// The delay before the next attempt after `failures` temporary failures.
fn backoff(failures: u32) -> Duration {
    DEFAULT_INITIAL_BACKOFF
        .saturating_mul(1u32 << failures.min(8))
        .min(DEFAULT_MAX_BACKOFF)
}

impl<C: Connector> Campaign<C> {
    fn emit(&self, event: ElectionEvent) {
        let _ = self.events.send(Ok(event));
    }

    fn acquire(&self, delay: Duration) -> Boxed<Result<LockGuard, Error>> {
        let client = self.client.clone();
        let (name, value, lease) = (self.name.clone(), self.value.clone(), self.lease);
        Box::pin(async move {
            sleep(delay).await;
            client.acquire_with_value(name, lease, value).await
        })
    }

    fn observe(&self, delay: Duration) -> Boxed<Result<Observation, Error>> {
        let client = self.client.clone();
        let name = self.name.clone();
        Box::pin(async move {
            sleep(delay).await;
            client.observe(name).await
        })
    }

    async fn run(mut self, mut control: mpsc::UnboundedReceiver<Control>) {
        let mut campaign = Some(self.acquire(Duration::ZERO));
        let mut observing = Some(self.observe(Duration::ZERO));
        let mut observation: Option<Observation> = None;
        // The term's token is cancelled when its guard here is dropped: at
        // the end of the term, and if this task is aborted (the election
        // dropped).
        let mut leading: Option<(LockGuard, DropGuard)> = None;
        let mut last_leader: Option<u64> = None;
        let (mut campaign_failures, mut observe_failures) = (0u32, 0u32);
        loop {
            tokio::select! {
                command = control.recv() => match command {
                    Some(Control::SetValue(value, ack)) => {
                        let result = match &leading {
                            Some((guard, _)) => guard.set_value(&value).await,
                            None => Ok(()),
                        };
                        if result.is_ok() {
                            self.value = value;
                        }
                        let _ = ack.send(result);
                    }
                    Some(Control::Resign(ack)) => {
                        self.stop(leading.take()).await;
                        let _ = ack.send(());
                        return;
                    }
                    None => {
                        self.stop(leading.take()).await;
                        return;
                    }
                },
                acquired = async { campaign.as_mut()?.await.into() }, if campaign.is_some() => {
                    campaign = None;
                    match acquired {
                        Some(Ok(guard)) => {
                            campaign_failures = 0;
                            // Cancelled the moment the lock is lost, by the
                            // guard's session, or when this task resigns.
                            let ended = guard.loss_token().child_token();
                            self.emit(ElectionEvent::StartedLeading(Leadership {
                                token: guard.token(),
                                ended: ended.clone(),
                            }));
                            leading = Some((guard, ended.drop_guard()));
                        }
                        Some(Err(err)) if err.is_temporary() => {
                            debug!(error = %err, "campaign failed; trying again");
                            campaign = Some(self.acquire(backoff(campaign_failures)));
                            campaign_failures += 1;
                        }
                        Some(Err(err)) => {
                            let _ = self.events.send(Err(err));
                            return;
                        }
                        None => {}
                    }
                }
                reason = async { leading.as_ref()?.0.lost().await.into() }, if leading.is_some() => {
                    if let Some(reason) = reason {
                        debug!(%reason, "leadership lost");
                    }
                    self.stop(leading.take()).await;
                    campaign = Some(self.acquire(Duration::ZERO));
                }
                opened = async { observing.as_mut()?.await.into() }, if observing.is_some() => {
                    observing = None;
                    match opened {
                        Some(Ok(opened)) => {
                            observe_failures = 0;
                            observation = Some(opened);
                        }
                        Some(Err(err)) if err.is_temporary() => {
                            observing = Some(self.observe(backoff(observe_failures)));
                            observe_failures += 1;
                        }
                        Some(Err(err)) => {
                            self.stop(leading.take()).await;
                            let _ = self.events.send(Err(err));
                            return;
                        }
                        None => {}
                    }
                }
                state = async { observation.as_mut()?.next().await }, if observation.is_some() => {
                    match state {
                        Some(Ok(state)) => {
                            if state.held && last_leader != Some(state.token) {
                                last_leader = Some(state.token);
                                self.emit(ElectionEvent::NewLeader(state));
                            }
                        }
                        // The session ended: observe anew.
                        Some(Err(_)) | None => {
                            observation = None;
                            observing = Some(self.observe(Duration::ZERO));
                        }
                    }
                }
            }
        }
    }

    /// Ends a term, if there is one: releases the lock (a loss was
    /// already final) and reports it.
    async fn stop(&self, leading: Option<(LockGuard, DropGuard)>) {
        let Some((guard, ended)) = leading else {
            return;
        };
        drop(ended); // cancels the term's token
        if guard.loss().is_none()
            && let Err(err) = guard.release().await
        {
            debug!(error = %err, "release at the end of the term");
        }
        self.emit(ElectionEvent::StoppedLeading);
    }
}
