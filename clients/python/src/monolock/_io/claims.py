"""A claim on a v2 session of the sync client: what a `Lock` holds when
its session speaks v2. Its owner's thread waits on it, reads its reply
itself where it can (`SyncSession.await_change`), and releases it.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Tuple

from .._core.claim import Status
from .._core.session import (
    ClaimState,
    CStatus,
    owner_view,
    release_unconfirmed,
    session_closed_unconfirmed,
)
from ..errors import LockLost
from .reactor import current_pid
from .sessions import ClaimWatch, SyncSession


class V2Claim(ClaimWatch):
    """A claim on a session: what a `Lock` holds when the session speaks v2."""

    __slots__ = ("session", "claim", "lost_event", "released", "io_timeout", "__weakref__")

    def __init__(self, session: SyncSession, claim: ClaimState, io_timeout: float) -> None:
        self.session = session
        self.claim = claim
        self.lost_event = threading.Event()
        claim.watch = self
        self.released = False
        self.io_timeout = io_timeout

    @property
    def lease_ms(self) -> int:
        return self.session.core.lease_ms

    def deadline_ns(self) -> int:
        with self.session.cond:
            return self.session.core.deadline()

    @property
    def loss(self) -> Optional[LockLost]:
        return self.claim.loss

    def status(self) -> Status:
        """The status after checking the deadline against the clock now."""
        if self.claim.live and current_pid() == self.session.pid:
            self.session.check()
        return owner_view(self.claim, self.released)

    def wait_until(
        self, ready: Callable[[Status], bool], until: Optional[int], reader: bool = False
    ) -> Tuple[Status, bool]:
        """Waits until `ready(status)`, the loss, or the instant `until`
        (monotonic ns). Returns the status and whether `until` passed.
        `reader`: this thread took the session's reader part (and gives it
        back here)."""
        session = self.session
        ended = False
        try:
            while True:
                with session.cond:
                    now = time.monotonic_ns()
                    session.core.check(now)
                    ended = session.settle_locked() or ended
                    status = owner_view(self.claim, self.released)
                    if status is Status.LOST or ready(status):
                        return status, False
                    limit = session.core.deadline()
                    if until is not None:
                        if now >= until:
                            return status, True
                        limit = min(limit, until)
                    gen = session.gen
                    # The reply to this claim's request is due: read it here
                    # rather than wait for the reactor thread to be scheduled.
                    direct = session.direct and self.claim.status is CStatus.PENDING
                    if not direct and not reader:
                        session.cond.wait(max(limit - now, 0) / 1e9)
                        continue
                held, reader = reader, False
                session.await_change(gen, limit, held)
        finally:
            if reader:
                session.give_reader()
            if ended:
                session.close()

    def release(self, wait: bool) -> Optional[LockLost]:
        """Sends RELEASE; with `wait`, returns once RELEASED is read (or the
        session has ended), within `io_timeout`: past it the session is
        closed, which releases every claim on it, and the release is
        reported unconfirmed (a loss, `connection`). Returns the loss that
        ended the claim before RELEASED, if one did."""
        session = self.session
        if current_pid() != session.pid:
            self.released = True  # the parent's claim: never touched here
            return None
        reader = wait and session.take_reader()
        try:
            with session.cond:
                now = time.monotonic_ns()
                session.core.check(now)
                ended = session.settle_locked()
                if not self.released:
                    self.released = True
                    session.core.release(self.claim, now)
            if ended:
                session.close()
            session.submit(reader)
            timed_out = False
            until = time.monotonic_ns() + int(self.io_timeout * 1e9)
            while wait:
                with session.cond:
                    left = until - time.monotonic_ns()
                    if not self.claim.live or left <= 0:
                        timed_out = self.claim.live
                        break
                    gen = session.gen
                    if not session.direct and not reader:
                        session.cond.wait(left / 1e9)
                        continue
                held, reader = reader, False
                session.await_change(gen, until, held)
        finally:
            if reader:
                session.give_reader()
        if timed_out:
            # Closing the session releases the lock too, unconfirmed.
            session.fail(session_closed_unconfirmed())
            return release_unconfirmed(self.io_timeout).for_lock(self.claim.name)
        return self.claim.loss

    def proclaim(self, raw_value: bytes) -> Optional[LockLost]:
        """Sends PROCLAIM of the claim's new value and returns once the
        server answered it (or the claim ended): None when PROCLAIMED was
        read, else why the claim is no longer held."""
        session = self.session
        with session.cond:
            now = time.monotonic_ns()
            session.core.check(now)
            ended = session.settle_locked()
            target = 0 if self.released else session.core.proclaim(self.claim, raw_value, now)
        if ended:
            session.close()
        if target == 0:
            return self.claim.loss or LockLost.released().for_lock(self.claim.name)
        session.submit()
        claim = self.claim
        while True:
            with session.cond:
                now = time.monotonic_ns()
                session.core.check(now)
                ended = session.settle_locked()
                if claim.proclaims_done >= target or not claim.live:
                    break
                session.cond.wait(max(session.core.deadline() - now, 0) / 1e9)
        if ended:
            session.close()
        if claim.status is not CStatus.HELD or self.released:
            return claim.loss or LockLost.released().for_lock(claim.name)
        claim.value = raw_value.decode("utf-8")
        return None

    def release_from_gc(self) -> None:
        """From `__del__`, on any thread, perhaps one holding this session's
        lock: only queues the release for the reactor thread."""
        if self.released or current_pid() != self.session.pid:
            return
        reactor = self.session.reactor
        if reactor is not None:
            reactor.call(self.session, lambda: self.release(wait=False))
