"""What one `lock` or `try_lock` call decides, for the sync and the
asyncio client alike: which address and protocol to try next, when a
claim goes on another session, and what the caller is told.

`route` is a generator of steps: the driver performs each step (with
blocking calls or awaits) and sends back its result, or throws back the
exception it raised. So the fallback rules exist once, and the drivers
hold no decision of their own.
"""

from __future__ import annotations

import enum
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Generator,
    Optional,
    TypeVar,
    Union,
)

from ..errors import ConnectError, LockLost, NotAcquired, Unsupported
from . import frames, frames2
from .address import Address
from .claim import Status
from .connect_errors import Failures, first_reply_error
from .pool import (
    PLAIN_ADDRESSES,
    TRIES_PER_ADDRESS,
    V1_ADDRESSES,
    DialFailed,
    NoExtension,
    V1Only,
    pool_key,
    sessions_full,
)
from .session import TOO_MANY_CLAIMS, ClaimState, CStatus, never_seen
from .timeouts import bound_ns

if TYPE_CHECKING:
    from .._io.connect import Endpoints

#: The lease when none is given, in seconds.
DEFAULT_LEASE = 10.0


class Request:
    """One `lock` or `try_lock` call, its arguments checked (a plain class
    with slots: one is made per call, on the lock cycle's path)."""

    __slots__ = (
        "name",
        "raw_name",
        "lease_ms",
        "wait",
        "wait_ns",
        "try_only",
        "mode",
        "value",
        "abandoned",
    )

    def __init__(
        self,
        name: str,
        lease: float,
        wait: Optional[float],
        try_only: bool,
        value: Optional[str] = None,
    ) -> None:
        """Raises InvalidArgument, before anything connects."""
        self.name = name
        self.raw_name = frames.encode_name(name)
        self.lease_ms = frames.lease_ms(lease)
        #: The claim's value (ACQUIRE_VALUE), or None: no value (an empty
        #: one is none, and goes as a plain ACQUIRE).
        raw_value = None if value is None else frames2.encode_value(value)
        self.value = raw_value or None
        #: Asked while the claim waits in the queue: True gives its place up
        #: (the election helper's stop). None: never.
        self.abandoned: Optional[Callable[[], bool]] = None
        #: The bound on the wait in the queue, as given in seconds, and in
        #: nanoseconds (None: no bound).
        self.wait = wait
        self.wait_ns = bound_ns(wait, "wait")
        #: A try: the call gives up at once if the lock is busy.
        self.try_only = try_only
        #: The v2 ACQUIRE's mode.
        self.mode = frames2.MODE_TRY if try_only else frames2.MODE_WAIT

    def v1_frame(self) -> bytes:
        """The v1 ACQUIRE."""
        return frames.acquire(self.raw_name, self.lease_ms)

    def queue_until(self, start: int) -> Optional[int]:
        """The instant a queued claim gives up its place (None: never);
        `start`: when the call began."""
        return None if self.wait_ns is None else start + self.wait_ns

    @property
    def extension(self) -> bool:
        """The claim needs values and observers (it carries a value)."""
        return self.value is not None

    def not_granted(self) -> NotAcquired:
        """The error of a wait in the queue that ran out."""
        return NotAcquired(self.name, self.wait if self.wait is not None else 0.0)


class UseV1:
    """Step: one claim on its own connection to `address` (protocol v1).
    Result: the lock, or None (a try found it busy)."""

    __slots__ = ("address",)

    def __init__(self, address: Address) -> None:
        self.address = address


class OpenSession:
    """Step: a v2 session to `address` with room for one more claim.
    Result: the session; raises DialFailed, V1Only, or the OPEN's LockLost."""

    __slots__ = ("address",)

    def __init__(self, address: Address) -> None:
        self.address = address


class ClaimOn:
    """Step: one claim on `session`. Result: the lock, None (a try found
    it busy), or RETRY (the session could not take it)."""

    __slots__ = ("session",)

    def __init__(self, session: Any) -> None:
        self.session = session


Step = Union[UseV1, OpenSession, ClaimOn]

#: The result of a `ClaimOn` the session could not take: try another.
RETRY = object()

L = TypeVar("L")
Route = Generator[Step, Any, Optional[L]]


def route(endpoints: Endpoints, now: int, extension: bool = False) -> Route[Any]:
    """The steps of one acquire over v2 sessions, address by address,
    with the v1 fallback per address (remembered addresses judged at the
    instant `now`, monotonic ns). Returns the lock or None.

    `extension`: the request needs values and observers (a value, a
    watch, a lookup); an address without them, or speaking v1 only,
    raises Unsupported rather than falling back."""
    failures = Failures(endpoints)  # cheap: filled only by failures
    for address in endpoints._addresses:
        key = pool_key(endpoints, address)
        if V1_ADDRESSES.is_v1(key, now):
            if extension:
                raise Unsupported.server(str(address))
            try:
                return (yield UseV1(address))
            except ConnectError as err:
                V1_ADDRESSES.forget(key)
                failures.add(address, err.__cause__ or err)
                continue
        if extension and PLAIN_ADDRESSES.is_v1(key, now):
            raise Unsupported.server(str(address))
        for _ in range(TRIES_PER_ADDRESS):
            try:
                session = yield OpenSession(address)
            except DialFailed as err:
                PLAIN_ADDRESSES.forget(key)
                failures.add(address, err.__cause__ or err)
                break
            except V1Only:
                if extension:
                    raise Unsupported.server(str(address)) from None
                return (yield UseV1(address))
            except NoExtension:
                if extension:
                    raise Unsupported.server(str(address)) from None
                continue  # the next session opens without HELLO
            except LockLost as loss:
                error = first_reply_error(address, loss)
                if error is None:
                    raise
                raise error  # its cause is the TLS alert, or what answered
            result = yield ClaimOn(session)
            if result is not RETRY:
                return result  # type: ignore[no-any-return]
        else:
            raise sessions_full(address)
    raise failures.error()


def drive(steps: Route[L], perform: Callable[[Step], Any]) -> Optional[L]:
    """Runs `steps`, each performed by `perform` (blocking)."""
    result: Any = None
    error: Optional[Exception] = None
    while True:
        try:
            step = steps.send(result) if error is None else steps.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            result, error = perform(step), None
        except Exception as err:  # handed to the route, which decides
            result, error = None, err


async def drive_async(steps: Route[L], perform: Callable[[Step], Awaitable[Any]]) -> Optional[L]:
    """Runs `steps`, each performed by awaiting `perform`."""
    result: Any = None
    error: Optional[Exception] = None
    while True:
        try:
            step = steps.send(result) if error is None else steps.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            result, error = await perform(step), None
        except Exception as err:  # handed to the route, which decides
            result, error = None, err


class Answer(enum.Enum):
    """What the first reply to a v2 ACQUIRE means for the caller."""

    #: A try found the lock busy: the call returns None.
    BUSY = "busy"
    #: The session is full (REFUSED 0x09): the claim goes on another.
    FULL = "full"
    #: Queued: wait for the grant.
    QUEUED = "queued"
    #: Granted, or ended: see `settled`.
    SETTLED = "settled"


def first_answer(claim: ClaimState, status: Status) -> Answer:
    """Judges the claim once its ACQUIRE is answered (`status`: the owner's
    view then). Raises the refusal of any other REFUSED."""
    if claim.status is CStatus.BUSY:
        return Answer.BUSY
    if claim.status is CStatus.REFUSED:
        refused = claim.refused or LockLost.connection()
        if refused.code == TOO_MANY_CLAIMS:
            return Answer.FULL
        raise refused
    return Answer.QUEUED if status is Status.WAITING else Answer.SETTLED



def settled(claim: ClaimState, status: Status) -> bool:
    """After the wait: True when the claim is held; False when it may go
    on another session (the server never saw it). Raises its loss."""
    if status is Status.HELD:
        return True
    if never_seen(claim):
        return False
    raise claim.loss or LockLost.connection()
