//! The live event stream behind `GET /api/events` (Server-Sent Events).
//!
//! A subscriber gets a `snapshot` event (the `/api/locks` document), then one
//! event per change: the audit log's events (`granted`, `released`,
//! `denied`, `force_release`, `kick_waiter`) with the audit log's JSON as
//! `data:`, plus `queued` and `dequeued` (a waiter joined or left a queue
//! without being granted), and a keep-alive comment every
//! [`KEEPALIVE_INTERVAL`].
//!
//! `GET /api/events?match=GLOB` narrows both the snapshot and the events to
//! the locks the pattern matches (the glob of `/api/locks?match=`), on the
//! server, so a terminal following one lock is not sent every other lock's
//! traffic.
//!
//! Why the work is split as it is: ownership events reach observers while
//! the lock table is locked, so [`EventHub::observe`] does as little as the
//! audit log does: with no subscriber, one atomic load; with subscribers,
//! one push onto an inbox (bounded, [`MAX_PENDING_EVENTS`]) that the
//! dispatcher thread swaps for an empty one once per batch. The push copies
//! the event's strings rather than sharing the session's reference-counted
//! ones, so no reference count moves between the cores per event. The
//! dispatcher serialises each event once, gathers events for
//! [`FLUSH_INTERVAL`] into one batch per distinct filter, and offers each
//! batch to its subscribers' bounded buffers with `try_send`, never
//! waiting. A subscriber whose buffer is full (a stalled browser tab, a
//! paused terminal) is cut off: its stream ends with a `lagged` event, and
//! a reconnect gets a fresh snapshot. Neither many subscribers nor a
//! stalled one slow a grant (BENCHMARKS.md, "Live event subscribers", has
//! the figures).
//!
//! At shutdown, [`EventHub::flush`] sends what the dispatcher has gathered
//! once the last session has ended, and each stream sends what it has
//! queued before it ends: a subscriber sees the shutdown's releases.
//!
//! The subscription is registered before the snapshot is taken, so no
//! change is lost between the two; a change made while the snapshot was
//! being taken may arrive after a snapshot that already shows it. Events
//! therefore apply idempotently: a `granted` replaces the holder only if
//! its token is higher than the one shown (tokens only grow), a `released`
//! removes the holder only if the token matches, waiters are keyed by
//! `remote_addr` (and, for a protocol v2 claim, by `claim` too: one
//! session's claims share its address). A v2 claim's events carry
//! `protocol`, `session` and `claim` (see `record.rs`); copying them is
//! copying two integers, no allocation.

use std::{
    convert::Infallible,
    sync::{
        Arc, Condvar, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    body::Body,
    http::{HeaderValue, header},
    response::Response,
};
use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::{mpsc as tokio_mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::{Event, Glob, Observer, ops::record::Fact};

/// How often an idle stream sends a `: keep-alive` comment, so proxies and
/// load balancers do not close it and a dead peer is noticed.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);

/// The dispatcher gathers events for this long before it sends a batch:
/// at high churn, one write per subscriber per interval instead of one per
/// event, which is most of what many subscribers cost. 20 ms is below what
/// a person watching the page can tell apart; where the admin thread must
/// share the protocol path's only core, shorter batches cost that path
/// more (BENCHMARKS.md, "Live event subscribers", has the figures).
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(20);

/// Events observed but not yet taken by the dispatcher, at most. Beyond
/// this (a dispatcher starved of CPU, or slowed by many costly `match`
/// patterns) events are dropped and every subscriber is cut off as
/// `lagged`, rather than the queue growing without bound; each reconnects
/// for a fresh snapshot. About 100 bytes an event plus its lock name and
/// identity: a few MiB for typical names, under 40 MiB at the longest.
pub const MAX_PENDING_EVENTS: usize = 65_536;

/// Messages' room the dispatcher keeps between batches (a batch at 50,000
/// grants a second holds a few thousand).
const KEPT_INBOX_CAPACITY: usize = 4096;

/// The same for the events' lock names and identities: 64 bytes an event.
const KEPT_TEXT_CAPACITY: usize = KEPT_INBOX_CAPACITY * 64;

/// Batches a subscriber may have queued before it is cut off as `lagged`.
pub const SUBSCRIBER_BUFFER: usize = 16;

/// A batch is sent once it reaches this size even if more events wait; with
/// [`SUBSCRIBER_BUFFER`] this bounds a subscriber's memory to about 1 MiB.
pub const MAX_BATCH_BYTES: usize = 64 * 1024;

/// How the dispatcher gathers events into batches.
#[derive(Clone, Copy, Debug)]
pub struct Batching {
    /// How long events are gathered after the first one of a batch.
    pub flush_interval: Duration,
    /// A batch is sent once it reaches this many bytes.
    pub max_batch_bytes: usize,
}

impl Default for Batching {
    fn default() -> Self {
        Self {
            flush_interval: FLUSH_INTERVAL,
            max_batch_bytes: MAX_BATCH_BYTES,
        }
    }
}

/// What the dispatcher thread receives.
enum Msg {
    /// An event; its lock name and identity follow in [`Inbox::text`].
    Event(Pending),
    Subscribe(Subscriber),
    /// Send every batch gathered so far, then answer.
    Flush(oneshot::Sender<()>),
}

/// An event waiting in the inbox: what happened, and the lengths of its lock
/// name and identity, which lie one after the other in [`Inbox::text`].
///
/// The strings are copied rather than shared as the session's `Arc`s: an
/// `Arc` cloned on the protocol path's core and dropped on the
/// dispatcher's moves its counter's cache line, which also holds the name
/// the lock table compares, between the cores on every event.
struct Pending {
    fact: Fact,
    lock_len: usize,
    identity_len: usize,
    /// The claim's value, after the identity (0 for most events).
    value_len: usize,
}

/// The dispatcher's side of one subscription.
struct Subscriber {
    tx: tokio_mpsc::Sender<Bytes>,
    lagged: Arc<AtomicBool>,
    /// Only events of locks this matches; `None`: every event.
    filter: Option<Glob>,
}

/// Fans the server's events out to live subscribers. Plug it in as an
/// [`Observer`] (see [`ServerConfig::with_observer`](crate::ServerConfig::with_observer))
/// and give it to [`admin::AdminOptions`](crate::ops::admin::AdminOptions).
pub struct EventHub {
    /// Live [`Subscription`]s; 0 makes [`EventHub::observe`] a single load.
    subscribers: Arc<AtomicUsize>,
    /// Subscribers cut off so far.
    lagged: Arc<AtomicU64>,
    mailbox: Arc<Mailbox>,
    max_pending: usize,
    buffer: usize,
    keepalive: Duration,
}

/// What observers hand the dispatcher thread. Observers are called inside
/// the lock table's critical section, so they rarely contend for the
/// mutex; the dispatcher takes it once per batch.
#[derive(Default)]
struct Mailbox {
    inbox: Mutex<Inbox>,
    /// Wakes the dispatcher when it waits for a first message.
    arrived: Condvar,
}

#[derive(Default)]
struct Inbox {
    /// In the order observed: events and subscriptions.
    msgs: Vec<Msg>,
    /// Each event's lock name and identity, in the order of `msgs`.
    text: String,
    /// Events in `msgs` (bounded by the hub's pending limit).
    events: usize,
    /// Set when an event was dropped because `events` was at its limit.
    overflowed: bool,
    /// The dispatcher waits on `arrived` (a push must wake it).
    idle: bool,
    /// The hub is gone: the dispatcher sends what it has and ends.
    closed: bool,
}

impl Mailbox {
    fn inbox(&self) -> MutexGuard<'_, Inbox> {
        // A panic while holding it leaves a Vec and counters: still usable.
        self.inbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends the event `fact` about `lock` and `identity`, or, with
    /// `max_events` waiting already, drops it and marks the overflow.
    fn push_event(&self, fact: Fact, [lock, identity, value]: [&str; 3], max_events: usize) {
        let mut inbox = self.inbox();
        if inbox.events >= max_events {
            inbox.overflowed = true;
            return;
        }
        inbox.events += 1;
        inbox.text.push_str(lock);
        inbox.text.push_str(identity);
        inbox.text.push_str(value);
        inbox.msgs.push(Msg::Event(Pending {
            fact,
            lock_len: lock.len(),
            identity_len: identity.len(),
            value_len: value.len(),
        }));
        self.wake_if_idle(inbox);
    }

    /// Appends a subscription or a flush (never dropped: they are few).
    fn push_control(&self, msg: Msg) {
        let mut inbox = self.inbox();
        inbox.msgs.push(msg);
        self.wake_if_idle(inbox);
    }

    /// Wakes the dispatcher only if it waits (once per batch).
    fn wake_if_idle(&self, mut inbox: MutexGuard<'_, Inbox>) {
        let wake = std::mem::take(&mut inbox.idle);
        drop(inbox);
        if wake {
            self.arrived.notify_one();
        }
    }
}

impl Drop for EventHub {
    fn drop(&mut self) {
        self.mailbox.inbox().closed = true;
        self.mailbox.arrived.notify_one();
    }
}

impl std::fmt::Debug for EventHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventHub")
            .field("subscribers", &self.subscribers.load(Ordering::Relaxed))
            .field("buffer", &self.buffer)
            .finish_non_exhaustive()
    }
}

impl EventHub {
    /// A hub with the default buffer and keep-alive; starts the dispatcher
    /// thread, which ends when the hub is dropped.
    ///
    /// # Errors
    /// The OS refused to start the thread.
    pub fn new() -> std::io::Result<Self> {
        Self::with_limits(SUBSCRIBER_BUFFER, KEEPALIVE_INTERVAL)
    }

    /// A hub whose subscribers may queue `buffer` batches (at least 1) and
    /// get a keep-alive comment every `keepalive`.
    ///
    /// # Errors
    /// The OS refused to start the thread.
    pub fn with_limits(buffer: usize, keepalive: Duration) -> std::io::Result<Self> {
        Self::with_batching(buffer, keepalive, Batching::default())
    }

    /// As [`EventHub::with_limits`], with batches gathered as `batching`
    /// says (the event-stream bench compares settings with it).
    ///
    /// # Errors
    /// The OS refused to start the thread.
    pub fn with_batching(
        buffer: usize,
        keepalive: Duration,
        batching: Batching,
    ) -> std::io::Result<Self> {
        let lagged = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&lagged);
        let mailbox = Arc::new(Mailbox::default());
        let dispatcher_mailbox = Arc::clone(&mailbox);
        std::thread::Builder::new()
            .name("monolock-events".to_owned())
            .spawn(move || dispatch(&dispatcher_mailbox, &counter, batching))?;
        Ok(Self {
            subscribers: Arc::new(AtomicUsize::new(0)),
            lagged,
            mailbox,
            max_pending: MAX_PENDING_EVENTS,
            buffer: buffer.max(1),
            keepalive,
        })
    }

    /// This hub with at most `limit` events (at least 1) waiting for the
    /// dispatcher (default 65,536).
    #[must_use]
    pub fn with_pending_limit(mut self, limit: usize) -> Self {
        self.max_pending = limit.max(1);
        self
    }

    /// Subscriptions open now.
    pub fn subscribers(&self) -> usize {
        self.subscribers.load(Ordering::Relaxed)
    }

    /// Subscribers cut off (`lagged`) since startup.
    pub fn lagged(&self) -> u64 {
        self.lagged.load(Ordering::Relaxed)
    }

    /// The keep-alive interval of this hub's streams.
    pub fn keepalive(&self) -> Duration {
        self.keepalive
    }

    /// Starts receiving every event observed from now on.
    pub fn subscribe(&self) -> Subscription {
        self.subscribe_matching(None)
    }

    /// Starts receiving the events observed from now on whose lock `filter`
    /// matches (every event if `None`). Subscribers with the same pattern
    /// share one batch: the filter costs once per pattern, not per
    /// subscriber.
    pub fn subscribe_matching(&self, filter: Option<Glob>) -> Subscription {
        let (tx, rx) = tokio_mpsc::channel(self.buffer);
        let lagged = Arc::new(AtomicBool::new(false));
        // Counted before the dispatcher knows it, so no event observed after
        // this call is skipped by the fast path.
        self.subscribers.fetch_add(1, Ordering::AcqRel);
        self.mailbox.push_control(Msg::Subscribe(Subscriber {
            tx,
            lagged: Arc::clone(&lagged),
            filter,
        }));
        Subscription {
            rx,
            lagged,
            count: Arc::clone(&self.subscribers),
        }
    }
}

impl EventHub {
    /// Resolves once every event observed before the call has been offered
    /// to the subscribers (it is then in their buffers, or they were cut
    /// off), or after `patience` (a dispatcher starved of CPU). At most one
    /// [flush interval](Batching::flush_interval) later than the batch would
    /// have been sent anyway.
    ///
    /// The shutdown calls it after the last session has ended and before
    /// the admin listener ends the streams, so a subscriber sees the end of
    /// the server's life (the `released` events with reason `shutdown`).
    /// True if the dispatcher answered in time.
    pub async fn flush(&self, patience: Duration) -> bool {
        if self.subscribers() == 0 {
            return true;
        }
        let (done, answered) = oneshot::channel();
        self.mailbox.push_control(Msg::Flush(done));
        matches!(tokio::time::timeout(patience, answered).await, Ok(Ok(())))
    }
}

impl Observer for EventHub {
    /// One atomic load without subscribers; else one push onto the inbox,
    /// or, with the [pending limit](EventHub::with_pending_limit) already
    /// waiting, a dropped event that cuts every subscriber off.
    fn observe(&self, event: &Event<'_>) {
        if self.subscribers.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Some((fact, session, value)) = Fact::of_event(event) {
            self.mailbox.push_event(
                fact,
                [session.lock.as_str(), &session.identity, value],
                self.max_pending,
            );
        }
    }
}

/// One subscriber's events, as ready-to-send SSE text.
#[derive(Debug)]
pub struct Subscription {
    rx: tokio_mpsc::Receiver<Bytes>,
    lagged: Arc<AtomicBool>,
    count: Arc<AtomicUsize>,
}

impl Subscription {
    /// The next batch of SSE events; `None` once the subscription ended
    /// (see [`Subscription::lagged`] for why).
    ///
    /// # Cancel safety
    /// Cancel safe: a batch not returned stays queued.
    pub async fn next(&mut self) -> Option<Bytes> {
        self.rx.recv().await
    }

    /// A batch already queued, without waiting.
    fn try_next(&mut self) -> Option<Bytes> {
        self.rx.try_recv().ok()
    }

    /// True if the subscription was cut off because its buffer was full.
    pub fn lagged(&self) -> bool {
        self.lagged.load(Ordering::Acquire)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The dispatcher thread: takes the inbox in order, serialises each event
/// once, and offers each batch to its subscribers without waiting.
///
/// After the first message of a batch it sleeps for the flush interval and
/// then swaps the inbox for an empty one, rather than taking messages one
/// at a time: observers (inside the table's critical section) then pay a
/// push, not a wake-up or a shared counter per event.
fn dispatch(mailbox: &Mailbox, lagged: &AtomicU64, batching: Batching) {
    let mut dispatcher = Dispatcher {
        groups: Vec::new(),
        json: Vec::with_capacity(512),
        max_batch_bytes: batching.max_batch_bytes,
    };
    let mut taken = Vec::new();
    let mut taken_text = String::new();
    loop {
        let mut inbox = mailbox.inbox();
        while inbox.msgs.is_empty() && !inbox.closed {
            inbox.idle = true;
            inbox = mailbox
                .arrived
                .wait(inbox)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        let closed = inbox.closed;
        drop(inbox);
        if !closed {
            std::thread::sleep(batching.flush_interval);
        }
        let overflowed = {
            let mut inbox = mailbox.inbox();
            std::mem::swap(&mut inbox.msgs, &mut taken);
            std::mem::swap(&mut inbox.text, &mut taken_text);
            inbox.events = 0;
            std::mem::take(&mut inbox.overflowed)
        };
        let mut text = taken_text.as_str();
        for msg in taken.drain(..) {
            match msg {
                Msg::Event(event) => {
                    let lock = split_off_front(&mut text, event.lock_len);
                    let identity = split_off_front(&mut text, event.identity_len);
                    let value = split_off_front(&mut text, event.value_len);
                    dispatcher.event(&event.fact, [lock, identity, value], lagged);
                }
                Msg::Subscribe(subscriber) => dispatcher.subscribe(subscriber, lagged),
                Msg::Flush(done) => {
                    dispatcher.offer_all(lagged);
                    let _ = done.send(());
                }
            }
        }
        // A burst's worth of room is not kept for good.
        taken.shrink_to(KEPT_INBOX_CAPACITY);
        taken_text.clear();
        taken_text.shrink_to(KEPT_TEXT_CAPACITY);
        if overflowed {
            // Events were lost: no subscriber's picture can be trusted.
            dispatcher.cut_off_all(lagged);
        }
        dispatcher.offer_all(lagged);
        if closed {
            break;
        }
    }
    debug!("event hub stopped");
}

/// The dispatcher thread's state.
struct Dispatcher {
    /// One per distinct filter with subscribers; usually one or two.
    groups: Vec<Group>,
    json: Vec<u8>,
    max_batch_bytes: usize,
}

/// The subscribers that share a filter, and the batch gathered for them.
struct Group {
    filter: Option<Glob>,
    /// The SSE text gathered so far; sent as one shared [`Bytes`].
    batch: BytesMut,
    subscribers: Vec<Subscriber>,
}

/// The first `len` bytes of `text`, which then starts after them. The
/// inbox appends whole strings and their lengths together, so the split
/// always falls on a character boundary; if it did not, the event would
/// show an empty string rather than stop the dispatcher.
fn split_off_front<'t>(text: &mut &'t str, len: usize) -> &'t str {
    let (front, rest) = text.split_at_checked(len).unwrap_or(("", text));
    *text = rest;
    front
}

impl Dispatcher {
    /// Adds the event `fact` about `lock`, `identity` and the claim's
    /// `value` to the batch of every group whose filter matches `lock`.
    fn event(&mut self, fact: &Fact, [lock, identity, value]: [&str; 3], lagged: &AtomicU64) {
        // Serialised once, and only if some group wants it.
        let mut serialised = false;
        for group in &mut self.groups {
            if !group.filter.as_ref().is_none_or(|f| f.matches(lock)) {
                continue;
            }
            if !serialised {
                self.json.clear();
                fact.write_json(lock, identity, value, &mut self.json);
                if self.json.last() == Some(&b'\n') {
                    self.json.pop();
                }
                serialised = true;
            }
            if group.batch.is_empty() {
                // Room for a whole batch at once, not grown by doubling.
                group.batch.reserve(self.max_batch_bytes);
            }
            write_event(&mut group.batch, fact.event_name(), &self.json);
            if group.batch.len() >= self.max_batch_bytes {
                group.offer(lagged);
            }
        }
    }

    /// Adds `subscriber` to the group of its filter, after sending what the
    /// groups gathered before it (those events precede the subscription).
    fn subscribe(&mut self, subscriber: Subscriber, lagged: &AtomicU64) {
        self.offer_all(lagged);
        match self
            .groups
            .iter_mut()
            .find(|group| group.filter == subscriber.filter)
        {
            Some(group) => group.subscribers.push(subscriber),
            None => self.groups.push(Group {
                filter: subscriber.filter.clone(),
                batch: BytesMut::new(),
                subscribers: vec![subscriber],
            }),
        }
    }

    /// Ends every subscription as `lagged`, sending nothing more.
    fn cut_off_all(&mut self, lagged: &AtomicU64) {
        for subscriber in self.groups.drain(..).flat_map(|group| group.subscribers) {
            subscriber.lagged.store(true, Ordering::Release);
            lagged.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sends every group's batch and forgets subscribers that left and
    /// groups nobody follows any more (a group whose pattern matches no
    /// event would otherwise keep its departed subscribers forever).
    fn offer_all(&mut self, lagged: &AtomicU64) {
        for group in &mut self.groups {
            group.offer(lagged);
            group
                .subscribers
                .retain(|subscriber| !subscriber.tx.is_closed());
        }
        self.groups.retain(|group| !group.subscribers.is_empty());
    }
}

impl Group {
    /// Sends the batch to every subscriber that has room; cuts off those
    /// that do not and forgets those that left. The batch's buffer itself
    /// becomes the shared bytes (no copy); each subscriber gets a
    /// reference to it, never an allocation of its own.
    fn offer(&mut self, lagged: &AtomicU64) {
        if self.batch.is_empty() {
            return;
        }
        let bytes = self.batch.split().freeze();
        self.subscribers
            .retain(|subscriber| match subscriber.tx.try_send(bytes.clone()) {
                Ok(()) => true,
                Err(tokio_mpsc::error::TrySendError::Full(_)) => {
                    subscriber.lagged.store(true, Ordering::Release);
                    lagged.fetch_add(1, Ordering::Relaxed);
                    false
                }
                Err(tokio_mpsc::error::TrySendError::Closed(_)) => false,
            });
    }
}

/// Appends one SSE event. `data` is one line of JSON (serde_json never
/// writes a raw newline), so one `data:` field carries it.
fn write_event(out: &mut impl BufMut, name: &str, data: &[u8]) {
    out.put_slice(b"event: ");
    out.put_slice(name.as_bytes());
    out.put_slice(b"\ndata: ");
    out.put_slice(data);
    out.put_slice(b"\n\n");
}

/// What the stream sends last when a subscriber is cut off.
const LAGGED_EVENT: &[u8] = b"event: lagged\ndata: {\"error\":\"this subscriber fell too far behind and was cut off; reconnect for a fresh snapshot\"}\n\n";

/// The keep-alive comment.
const KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// The body of `GET /api/events`: the snapshot, then the subscription,
/// with keep-alives, until the subscription ends or `stop` is cancelled
/// (then what is queued already is sent, and the stream ends).
/// The body is pulled by hyper only as fast as the socket takes it, so a
/// slow client holds back only its own subscription (which then lags).
pub(crate) fn sse_response(
    subscription: Subscription,
    snapshot_json: &[u8],
    keepalive: Duration,
    stop: CancellationToken,
) -> Response {
    let mut first = Vec::with_capacity(snapshot_json.len() + 32);
    write_event(&mut first, "snapshot", snapshot_json);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let state = StreamState {
        first: Some(Bytes::from(first)),
        subscription,
        ticks,
        stop,
        done: false,
    };
    let stream = futures_util::stream::unfold(state, |mut state| async move {
        let chunk = state.next_chunk().await?;
        Some((Ok::<_, Infallible>(chunk), state))
    });
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Tells nginx-style proxies not to buffer the stream.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// One `GET /api/events` body in progress.
struct StreamState {
    first: Option<Bytes>,
    subscription: Subscription,
    ticks: tokio::time::Interval,
    stop: CancellationToken,
    done: bool,
}

impl StreamState {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        if let Some(first) = self.first.take() {
            return Some(first);
        }
        if self.stop.is_cancelled() {
            return self.queued_before_the_stop();
        }
        tokio::select! {
            () = self.stop.cancelled() => self.queued_before_the_stop(),
            _ = self.ticks.tick() => Some(Bytes::from_static(KEEPALIVE)),
            next = self.subscription.next() => match next {
                Some(batch) => Some(batch),
                None if self.subscription.lagged() => {
                    debug!("event subscriber cut off: its buffer was full");
                    self.done = true;
                    Some(Bytes::from_static(LAGGED_EVENT))
                }
                None => None,
            },
        }
    }

    /// Once the listener stops: the batches already queued (the shutdown
    /// flushes the hub first, so they hold its last events), then the end.
    fn queued_before_the_stop(&mut self) -> Option<Bytes> {
        let batch = self.subscription.try_next();
        self.done = batch.is_none();
        batch
    }
}
