"""The blocking client: `Client`, and the `Lock` it hands out."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any, Callable, Optional, Tuple, Type, Union

from ._core import frames, frames2
from ._core.acquire import (
    DEFAULT_LEASE,
    RETRY,
    Answer,
    ClaimOn,
    OpenSession,
    Request,
    Step,
    UseV1,
    drive,
    first_answer,
    route,
    settled,
)
from ._core.address import Address
from ._core.claim import Status
from ._core.connect_errors import first_reply_error
from ._core.held import HeldLock
from ._core.timeouts import bound_ns
from ._core.watch import LockState
from ._election import Abandoned
from ._io import pool, watches
from ._io.claims import V2Claim
from ._io.connect import Endpoints
from ._io.reactor import Reactor, shared_reactor
from ._io.sessions import SyncSession
from ._io.v1 import Session, first_reply, leave_queue
from ._io.watches import Observation
from .errors import LockLost, Unsupported

#: The lease of a session opened for observations and lookups, in seconds
#: (they share the sessions of locks with this lease).
WATCH_LEASE = DEFAULT_LEASE

#: What a claim of a `Lock` is: its own v1 connection, or a v2 session's claim.
Handle = Union[Session, V2Claim]


class Lock(HeldLock):
    """A held lock: a claim on a protocol v2 session (or, with v1, its own
    connection). While it lives, a background thread heartbeats its
    session; `release()` (or leaving the `with` block) returns once the
    server has confirmed that the lock is free and handed on; a `Lock`
    garbage-collected without a release is released by that thread.

    Hand `token` to everything the lock guards (the fencing token), and
    stop the guarded work when `is_held()` turns False or `lost_event` is set.
    """

    __slots__ = ("__weakref__", "_unsupported")

    _handle: Handle

    def __init__(
        self,
        handle: Handle,
        name: str,
        token: int,
        address: Address,
        unsupported: Optional[Unsupported] = None,
    ) -> None:
        super().__init__(handle, name, token, address)
        #: What `set_value` raises on this lock's connection (v1), if it must.
        self._unsupported = unsupported

    @property
    def value(self) -> str:
        """The lock's value as the server has it ("" for none): the one
        given to `lock`/`try_lock`, or the latest `set_value`."""
        handle = self._handle
        return handle.claim.value if isinstance(handle, V2Claim) else ""

    def set_value(self, value: str) -> None:
        """Replaces the lock's value (what observers and `holder()` see;
        "" for none) and returns once the server has it: every state an
        observer is told after that carries it.

        Raises InvalidArgument (over 1,024 UTF-8 bytes, before anything is
        sent), LockLost when the lock is no longer held, Unsupported on a
        server without values (or with `force_v1=True`).
        """
        raw = frames2.encode_value(value)
        handle = self._handle
        if not isinstance(handle, V2Claim):
            raise (self._unsupported or Unsupported.forced_v1()).with_traceback(None)
        if not handle.session.core.extended:
            raise Unsupported.server(str(self._address))
        loss = handle.proclaim(raw)
        if loss is not None:
            raise loss.with_traceback(None)

    @property
    def lost_event(self) -> threading.Event:
        """A `threading.Event` set the moment the lock is lost (never by a
        plain release): wait on it from any thread."""
        return self._handle.lost_event

    def wait_lost(self, timeout: Optional[float] = None) -> Optional[LockLost]:
        """Blocks until the lock is lost (returns why) or `timeout` seconds
        pass (returns None)."""
        timeout_ns = bound_ns(timeout, "timeout")
        until = None if timeout_ns is None else time.monotonic_ns() + timeout_ns
        status, _ = self._handle.wait_until(lambda _: False, until)
        return self._handle.loss if status is Status.LOST else None

    def release(self) -> None:
        """Releases the lock and returns once the server has confirmed it
        (v2: RELEASED read; v1: the server's EOF), within the client's
        `connect_timeout`. Then the lock is free, or already handed to the
        next waiter. Idempotent.

        Raises LockLost when the lock had been lost before the release was
        confirmed (the guarded work may have run without the lock), or,
        reason `connection`, when no confirmation came in time: the
        connection (v2: the session, and every lock on it) was closed then,
        which releases the lock too, unconfirmed.
        """
        loss = self._handle.release(wait=True)
        if loss is not None:
            raise loss.with_traceback(None)

    def __enter__(self) -> Lock:
        """Raises LockLost when the lock is no longer held (released, or
        lost): a `with` block never runs its body without the lock."""
        self._check_enterable()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        # Leaving on an exception does not wait for the confirmation: the
        # RELEASE is sent at once and the exception goes on.
        loss = self._handle.release(wait=exc is None)
        if loss is not None and exc is None:
            raise loss.with_traceback(None)

    def __repr__(self) -> str:
        return f"<monolock.Lock name={self._name!r} token={self._token} held={self.is_held()}>"


class Client(Endpoints):
    """A monolock client: where the servers are and how to reach them.

    `address` is `"host:port"`, several comma-separated (`"a:7070,b:7070"`)
    or a list; None reads `$MONOLOCK_ADDRESS`, else `127.0.0.1:7070`. Several
    addresses are tried in order when one refuses or does not answer within
    `connect_timeout`; a claim is never moved once its ACQUIRE is sent.
    `ssl_context` turns on TLS (with a client certificate loaded into it:
    mTLS); `server_hostname` overrides the name the server certificate is
    checked against (default: the address's host).

    Locks are claims on protocol v2 sessions that the process shares: one
    session per server address and lease in use, opened on first use and
    kept while it carries claims and for a few seconds after. A server that
    speaks only v1 (ERROR 0x10 to the OPEN) gets one connection per lock,
    remembered per address for 5 minutes or until a connect to it fails.
    `force_v1=True` always uses one connection per lock (see
    docs/client-python.md for when to pick it). A Client can be shared by threads; `connect_timeout` also
    bounds the wait for a release's confirmation.
    """

    #: Where claims are driven (the benchmark and tests swap it; None:
    #: the process's shared reactor).
    _reactor_factory: Optional[Callable[[], Reactor]] = None

    def lock(
        self,
        name: str,
        lease: float = DEFAULT_LEASE,
        *,
        wait: Optional[float] = None,
        value: Optional[str] = None,
    ) -> Lock:
        """Waits for the lock `name` in its FIFO queue and returns it once
        the server grants it (promotion is pushed: no polling). Use the
        result in a `with` block, or call `release()`.

        `lease` (seconds) is the failure detector, not a work deadline: the
        lock heartbeats about four times per lease and may be held for
        hours. `wait` bounds the time in the queue, in seconds (None or
        `float("inf")`: no bound): when it runs out the place is given up
        and NotAcquired is raised.

        `value` (at most 1,024 UTF-8 bytes; "" or None: none) is shown with
        the holder to observers, `holder()`, `monolock locks` and the admin
        API, for example this process's `host:port`; `Lock.set_value`
        replaces it.

        Raises InvalidArgument (before connecting), ConnectError,
        NotAcquired, Unsupported (a value on a server without values, or
        with `force_v1=True`), or LockLost when the place in the queue
        ends first (for example `code` 0x18: the ACL refuses this lock).
        """
        lock = self._acquire(Request(name, lease, wait, try_only=False, value=value))
        assert lock is not None
        return lock

    def try_lock(
        self, name: str, lease: float = DEFAULT_LEASE, *, value: Optional[str] = None
    ) -> Optional[Lock]:
        """Takes the lock if it is free; None if someone holds it (the
        connection is closed at once and leaves no trace in the queue).

        Raises as `lock` does.
        """
        return self._acquire(Request(name, lease, None, try_only=True, value=value))

    def observe(self, name: str) -> Observation:
        """Observes the lock `name` without claiming it: returns once the
        server registered the watch; iterate the result for the lock's
        states, the current one first (`initial`), then one per change,
        in token order. Stop with `close()` or a `with` block:

            with client.observe("leader") as states:
                for state in states:
                    print(state.held, state.token, state.value)

        Raises InvalidArgument, ConnectError, Unsupported (a server without
        observers, or `force_v1=True`), LockLost (the server refused: for
        example `code` 0x18, the ACL).
        """
        raw_name = frames.encode_name(name)
        if self._force_v1:
            raise Unsupported.forced_v1()
        observation: Observation = self._on_extension_session(
            lambda s: watches.observe_on(s, name, raw_name)
        )
        return observation

    def holder(self, name: str) -> LockState:
        """Who holds the lock `name` now, asked once: a LockState with
        `held`, `token`, `value` and `since` (event `held` or `free`).
        Advisory: the holder may already have lost it.

        Raises as `observe` does.
        """
        raw_name = frames.encode_name(name)
        if self._force_v1:
            raise Unsupported.forced_v1()
        state: LockState = self._on_extension_session(lambda s: watches.lookup_on(s, name, raw_name))
        return state

    def _on_extension_session(self, on: Callable[[SyncSession], Any]) -> Any:
        """Runs `on` on a session granted values and observers, address by
        address, as a claim goes (`route`)."""
        start = time.monotonic_ns()
        lease_ms = frames.lease_ms(WATCH_LEASE)

        def perform(step: Step) -> Any:
            if isinstance(step, OpenSession):
                return pool.POOL.session(self, step.address, lease_ms, watch=True)
            assert isinstance(step, ClaimOn)
            result = on(step.session)
            return RETRY if result is watches.RETRY else result

        return drive(route(self, start, extension=True), perform)

    def _acquire(self, request: Request) -> Optional[Lock]:
        start = time.monotonic_ns()
        if self._force_v1:
            if request.extension:
                raise Unsupported.forced_v1()
            return self._acquire_v1(request, start, None)

        def perform(step: Step) -> Any:
            if isinstance(step, UseV1):
                return self._acquire_v1(request, start, (step.address,))
            if isinstance(step, OpenSession):
                return pool.POOL.session(
                    self, step.address, request.lease_ms, extension=request.extension
                )
            assert isinstance(step, ClaimOn)
            return self._acquire_v2(step.session, request, start)

        return drive(route(self, start, request.extension), perform)

    def _acquire_v2(self, session: SyncSession, request: Request, start: int) -> object:
        """One claim on `session`: the Lock, None (a try found it busy), or
        RETRY (the session could not take it: full, or closed as idle)."""
        # This thread reads the reply itself when it can (see _io/sessions.py).
        reader = session.take_reader()
        try:
            with session.cond:
                claim = session.core.acquire(
                    request.name, request.raw_name, request.mode, time.monotonic_ns(), request.value
                )
        except BaseException:
            if reader:
                session.give_reader()
            raise
        handle = V2Claim(session, claim, self._connect_timeout)
        # From here on the claim exists: whatever ends this call without
        # handing a Lock over, an exception included, releases it.
        try:
            try:
                session.submit(reader)
            except BaseException:
                if reader:
                    session.give_reader()
                raise
            # wait_until gives the reader's part back, whatever happens in it.
            status, _ = handle.wait_until(lambda s: s is not Status.UNANSWERED, None, reader)
            answer = first_answer(claim, status)
            if answer is Answer.BUSY:
                return None
            if answer is Answer.FULL:
                session.full = True
                return RETRY
            if answer is Answer.QUEUED:
                status = _granted(handle, request, start)
            if not settled(claim, status):
                return RETRY
            token = claim.token
            assert token is not None
            return Lock(handle, request.name, token, session.address)
        except BaseException:
            handle.release(wait=False)
            raise

    def _acquire_v1(
        self, request: Request, start: int, addresses: Optional[Tuple[Address, ...]]
    ) -> Optional[Lock]:
        """One claim on its own connection (protocol v1)."""
        claim, sock, address = first_reply(self, request, addresses)
        # From here on the connection is a claim: whatever ends this call
        # without handing a Lock over, an exception included, ends it.
        session: Optional[Session] = None
        try:
            if claim.status is Status.LOST:
                loss = claim.loss or LockLost.connection()
                raise first_reply_error(address, loss) or loss
            if claim.status is Status.WAITING and request.try_only:
                # Leaves no trace in the queue by the time it returns.
                leave_queue(sock, self._connect_timeout)
                return None
            # Read before the reactor thread shares the claim: from `add` on
            # it may end the claim at any moment (a queued claim that ends
            # before its grant has no token).
            first_status = claim.status
            session = Session(claim, sock, (self._reactor_factory or shared_reactor)())
            session.io_timeout = self._connect_timeout
            session.reactor.add(session)
            if first_status is Status.WAITING:
                status = _granted(session, request, start)
                if status is not Status.HELD:
                    raise claim.loss or LockLost.connection()
            token = claim.token
            assert token is not None
            unsupported = Unsupported.forced_v1() if self._force_v1 else Unsupported.server(str(address))
            return Lock(session, request.name, token, address, unsupported)
        except BaseException:
            if session is None:
                sock.close()
            else:
                session.release(wait=False)
            raise


#: How often a wait in the queue that may be abandoned (the election
#: helper's campaign) looks whether it was, in nanoseconds.
ABANDON_CHECK_NS = 50_000_000


def _granted(handle: Handle, request: Request, start: int) -> Status:
    """Waits in the queue for the grant (or the claim's end) within the
    request's bound; past it raises NotAcquired (Abandoned when the
    request's owner gave it up)."""
    until = request.queue_until(start)
    abandoned = request.abandoned
    while True:
        limit = until
        if abandoned is not None:
            if abandoned():
                raise Abandoned()
            soon = time.monotonic_ns() + ABANDON_CHECK_NS
            limit = soon if until is None else min(until, soon)
        status, timed_out = handle.wait_until(lambda s: s is Status.HELD, limit)
        if not timed_out:
            return status
        if limit == until:
            raise request.not_granted()
