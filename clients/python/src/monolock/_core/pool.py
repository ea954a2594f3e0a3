"""How claims are spread over v2 sessions, and which protocol an address
gets: the rules the sync and the asyncio drivers both follow, as plain
decisions on their state (no socket, no thread, no clock of its own).

- A session per (address, TLS settings, lease) in use, kept while it
  carries claims and for `KEEP_IDLE_NS` after (below the server's
  `--idle-timeout` default of 60 s), at most `MAX_SESSIONS_PER_ADDRESS`
  per address; a full session (its `max_claims`, or REFUSED 0x09) sends
  the next claim to another one.
- An address that answers the OPEN with ERROR 0x10 speaks v1 only: it
  gets a connection per lock for `V1_MEMORY_NS` (5 minutes) from then on,
  or until a connect to it fails; then v2 is tried again (the server
  behind it may have been upgraded).
- Every session asks for values and observers (HELLO with the OPEN). An
  address that answers HELLO with ERROR 0x13 lacks the extension: its
  sessions open without HELLO for the same 5 minutes (or until a connect
  fails), and a value, an observation or a lookup there is `Unsupported`.

Design and figures: docs/client-python.md, "Protocol v2 sessions".
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Tuple, TypeVar

from ..errors import LockLost, LossReason
from .address import Address
from .schedule import MS
from .session import SessionCore, SState

if TYPE_CHECKING:
    from typing import Protocol

    from .._io.connect import Endpoints

    class Pooled(Protocol):
        """What a driver's session shows the pool rules."""

        core: SessionCore
        closed: bool
        full: bool

    S = TypeVar("S", bound=Pooled)
else:
    S = TypeVar("S")

#: How long a session without claims is kept open for the next claim (20 s,
#: as in every monolock client). Read at each use (tests shorten it).
KEEP_IDLE_NS = 20_000 * MS
#: The most sessions one process keeps open to one address.
MAX_SESSIONS_PER_ADDRESS = 16
#: How many sessions one claim may be tried on, per address: a claim the
#: server never saw (its session ended first, or was closed as idle) or
#: refused for the session's claim bound goes again, on another session.
TRIES_PER_ADDRESS = MAX_SESSIONS_PER_ADDRESS + 2

#: How long an address that answered the OPEN with ERROR 0x10 is spoken
#: to in v1 before v2 is tried again. Read at each use (tests shorten it).
V1_MEMORY_NS = 300_000 * MS

#: What makes two sessions interchangeable: the server and how it is reached.
PoolKey = Tuple[str, int, Optional[ssl.SSLContext], Optional[str]]


def pool_key(endpoints: Endpoints, address: Address) -> PoolKey:
    return (address.host, address.port, endpoints._ssl_context, endpoints._server_hostname)


class V1Only(Exception):
    """The address answered the OPEN with ERROR 0x10: it speaks v1 only."""


class NoExtension(Exception):
    """The address answered HELLO with ERROR 0x13: it lacks values and
    observers (plain sessions work)."""


class DialFailed(Exception):
    """The address could not be reached (the cause is chained)."""


class V1Addresses:
    """The addresses that answered the OPEN with ERROR 0x10, for every
    client of the process, sync and asyncio, each until the instant
    (monotonic ns) its memory ends."""

    def __init__(self) -> None:
        self._until: Dict[PoolKey, int] = {}

    def is_v1(self, key: PoolKey, now: int) -> bool:
        """True while `key` is remembered as v1-only at the instant `now`;
        a memory past its end is forgotten."""
        until = self._until.get(key)
        if until is None:
            return False
        if now < until:
            return True
        self._until.pop(key, None)
        return False

    def remember(self, key: PoolKey, now: int) -> None:
        """`key` answered the OPEN with ERROR 0x10 at the instant `now`."""
        self._until[key] = now + V1_MEMORY_NS

    def forget(self, key: PoolKey) -> None:
        """The address failed to connect: the next attempt tries v2 anew
        (the server behind it may have been upgraded)."""
        self._until.pop(key, None)

    def clear(self) -> None:
        self._until.clear()


#: The process's memory of v1-only addresses.
V1_ADDRESSES = V1Addresses()
#: The process's memory of addresses without values and observers (the
#: same rules: 5 minutes, or until a connect to the address fails).
PLAIN_ADDRESSES = V1Addresses()


def with_room(sessions: Sequence[S], lease_ms: int, extension: bool = False) -> Optional[S]:
    """The first session with this lease that can take one more claim
    (`extension`: on a session that was granted values and observers)."""
    for session in sessions:
        if (
            session.core.lease_ms == lease_ms
            and not session.closed
            and not session.full
            and session.core.has_room()
            and (not extension or session.core.extended)
        ):
            return session
    return None


def with_watch_room(sessions: Sequence[S]) -> Optional[S]:
    """The first session, whatever its lease, that can take one more
    watch (granted values and observers, below its `max_watches`)."""
    for session in sessions:
        if not session.closed and session.core.has_watch_room():
            return session
    return None


def to_evict(sessions: Sequence[S], address: Address) -> Optional[S]:
    """Before a new session opens to `address`: the idle session to close
    to make room, if the address has its most. Raises LockLost when every
    one carries claims."""
    if len(sessions) < MAX_SESSIONS_PER_ADDRESS:
        return None
    for session in sessions:
        if session.core.in_use() == 0:
            return session
    raise sessions_full(address)


def sessions_full(address: Address) -> LockLost:
    """No session to `address` can take one more claim, and no more may open."""
    return LockLost(
        LossReason.SERVER_ERROR,
        f"{MAX_SESSIONS_PER_ADDRESS} sessions to {address} are full "
        "(each carries the server's max_claims): release some locks first",
        code=0x09,
    )


def idle_end(core: SessionCore) -> Optional[int]:
    """When an open session without claims is closed; None while it
    carries one."""
    if core.idle_since is None or core.state is not SState.OPEN:
        return None
    return core.idle_since + KEEP_IDLE_NS


def idle_over(core: SessionCore, now: int) -> bool:
    """The session has had no claim for its whole idle time."""
    end = idle_end(core)
    return end is not None and now >= end


def next_wake(core: SessionCore) -> Optional[int]:
    """When the driver must look at the session again without input: the
    next PING, the deadline, or the end of its idle time."""
    wake = core.next_wake()
    if core.idle_since is None:
        return wake  # carries a claim: no idle time (the common case)
    end = idle_end(core)
    if end is None:
        return wake
    return end if wake is None else min(wake, end)
