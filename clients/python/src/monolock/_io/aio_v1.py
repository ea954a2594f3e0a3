"""A protocol v1 connection on an asyncio event loop: one claim as an
`asyncio.Protocol`. Bytes go straight from `data_received` into the v1
core (`_core/claim.py`), and one `call_later` timer fires at the next
heartbeat or the deadline. Nothing blocks the loop, and no thread is
involved.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Callable, List, Optional, Tuple

from .._core import frames
from .._core.claim import Claim, Status, release_unconfirmed
from ..errors import LockLost


def resolve(future: "asyncio.Future[None]") -> None:
    """Resolves `future` unless it is done already."""
    if not future.done():
        future.set_result(None)


class Driver(asyncio.Protocol):
    """The permanent reader and heartbeat timer of one connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: Optional[asyncio.Transport] = None
        self.claim: Optional[Claim] = None
        self.released = False
        self.lost_event = asyncio.Event()
        #: Futures of tasks waiting for a change, resolved on each one.
        self._waiters: List["asyncio.Future[None]"] = []
        self._timer: Optional[asyncio.TimerHandle] = None
        #: Resolved once the connection is closed (the server's EOF read).
        self._closed: "asyncio.Future[None]" = loop.create_future()
        #: How long a release waits for the server's EOF, in seconds.
        self.io_timeout = 5.0

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        claim = self.claim
        if claim is None or self.released:
            return
        was_lost = claim.status is Status.LOST
        claim.receive(data, time.monotonic_ns())
        self._after(was_lost)

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost reports it

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._cancel_timer()
        resolve(self._closed)
        claim = self.claim
        if claim is None or self.released:
            return
        was_lost = claim.status is Status.LOST
        claim.closed(exc)
        self._after(was_lost)

    # the claim

    def start(self, claim: Claim, acquire: bytes) -> None:
        """Sends the ACQUIRE (its send instant is the claim's)."""
        assert self.transport is not None
        self.claim = claim
        self.transport.write(acquire)
        self._reschedule()

    def status(self) -> Status:
        """The status after checking the deadline against the clock now."""
        claim = self.claim
        assert claim is not None
        if self.released:
            return claim.status  # a released claim is over, not lost
        was_lost = claim.status is Status.LOST
        claim.check(time.monotonic_ns())
        if not was_lost and claim.status is Status.LOST:
            self._after(False)
        return claim.status

    def _after(self, was_lost: bool) -> None:
        """After the claim changed: wake waiters; close on loss."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            resolve(waiter)
        claim = self.claim
        assert claim is not None
        if claim.status is Status.LOST:
            self._cancel_timer()
            if not was_lost:
                self.lost_event.set()
                self.close()
        else:
            self._reschedule()

    def _reschedule(self) -> None:
        self._cancel_timer()
        assert self.claim is not None
        wake = self.claim.next_wake()
        if wake is not None:
            delay = max(wake - time.monotonic_ns(), 0) / 1e9
            self._timer = self.loop.call_later(delay, self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        claim = self.claim
        if claim is None or self.released or self.transport is None:
            return
        was_lost = claim.status is Status.LOST
        now = time.monotonic_ns()
        if claim.heartbeat_due(now):
            # The transport buffers: a write never blocks the loop.
            self.transport.write(frames.HEARTBEAT)
            claim.heartbeat_sent(now)
        self._after(was_lost)

    async def wait_until(self, ready: Callable[[Status], bool], until: Optional[int]) -> Tuple[Status, bool]:
        """Waits until `ready(status)`, the loss, or the instant `until`
        (monotonic ns). Returns the status and whether `until` passed."""
        claim = self.claim
        assert claim is not None
        while True:
            status = self.status()
            if status is Status.LOST or ready(status):
                return status, False
            now = time.monotonic_ns()
            limit = claim.deadline()
            if until is not None:
                if now >= until:
                    return status, True
                limit = min(limit, until)
            # A plain future and a timer rather than `asyncio.wait_for`, whose
            # cancellation races differ between Python versions: cancelling
            # the caller must always give the place up.
            changed = self.loop.create_future()
            self._waiters.append(changed)
            timer = self.loop.call_later(max(limit - now, 0) / 1e9, resolve, changed)
            try:
                await changed
            finally:
                timer.cancel()

    def close(self) -> None:
        """Ends the connection now: FIN at once, from any thread."""
        transport = self.transport
        if transport is None:
            return
        try:
            on_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            transport.close()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            if self.loop.is_closed():
                return
            self.loop.call_soon_threadsafe(transport.close)
        except RuntimeError:
            pass  # the loop is gone; the socket is shut down already

    @property
    def lease_ms(self) -> int:
        assert self.claim is not None
        return self.claim.lease_ms

    def deadline_ns(self) -> int:
        assert self.claim is not None
        return self.claim.deadline()

    @property
    def loss(self) -> Optional[LockLost]:
        return None if self.claim is None else self.claim.loss

    async def release_confirmed(self) -> Optional[LockLost]:
        """v1 has no release frame: shuts the write side down and waits for
        the server's EOF (the server releases before it closes), at most
        `io_timeout`; past it the connection is closed and the release
        reported as unconfirmed (a loss, `connection`)."""
        loss = None
        if self.claim is not None:
            self.status()
            loss = self.claim.loss
        transport = self.transport
        if self.released or loss is not None or transport is None:
            return self.release()
        self.released = True
        self._cancel_timer()
        try:
            if transport.can_write_eof():
                transport.write_eof()
            else:
                # TLS transports cannot half-close: the socket itself can,
                # and the server's EOF still reaches the protocol.
                sock = transport.get_extra_info("socket")
                if sock is None:
                    transport.close()
                else:
                    sock.shutdown(socket.SHUT_WR)
            await asyncio.wait_for(asyncio.shield(self._closed), self.io_timeout)
        except asyncio.TimeoutError:
            self.close()
            assert self.claim is not None
            return release_unconfirmed(self.io_timeout).for_lock(self.claim.name)
        except (OSError, RuntimeError):
            self.close()  # the transport failed: the connection is over anyway
        return None

    def release_from_gc(self) -> None:
        self.released = True
        self.close()

    def release(self) -> Optional[LockLost]:
        """Closes the connection; returns the loss that ended the claim
        before, if one did. Idempotent."""
        if self.claim is not None:
            self.status()
        loss = self.claim.loss if self.claim is not None else None
        if not self.released:
            self.released = True
            self._cancel_timer()
            self.close()
        return loss
