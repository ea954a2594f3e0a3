"""What a held lock tells its owner, the same for `Lock` and `AsyncLock`:
its name, fencing token, lease, server and deadline, and whether it is
still held, judged against the clock now. The claim behind it (a v1
connection or a v2 session's claim, sync or asyncio) is the driver's
`Handle`; this class only asks it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ..errors import LockLost, LossReason
from .address import Address
from .claim import Status

if TYPE_CHECKING:
    from typing import Protocol

    class Handle(Protocol):
        """What a lock asks of the claim behind it."""

        released: bool

        @property
        def lease_ms(self) -> int: ...

        @property
        def loss(self) -> Optional[LockLost]: ...

        def deadline_ns(self) -> int: ...

        def status(self) -> Status: ...

        def release_from_gc(self) -> None: ...

else:
    Handle = Any


class HeldLock:
    """The attributes and checks that `Lock` and `AsyncLock` share."""

    __slots__ = ("_handle", "_name", "_token", "_address")

    def __init__(self, handle: Handle, name: str, token: int, address: Address) -> None:
        self._handle = handle
        self._name = name
        self._token = token
        self._address = address

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._name

    @property
    def token(self) -> int:
        """The fencing token of this grant: strictly greater than every
        token issued before it by the same server process."""
        return self._token

    @property
    def lease(self) -> float:
        """The session's lease in seconds (as sent: whole milliseconds)."""
        return self._handle.lease_ms / 1000

    @property
    def address(self) -> str:
        """The server that granted the lock."""
        return str(self._address)

    @property
    def deadline(self) -> float:
        """`S + 0.8 x lease` on `time.monotonic()`: the instant at which the
        claim is given up unless a heartbeat sent after S is confirmed."""
        return self._handle.deadline_ns() / 1e9

    def is_held(self) -> bool:
        """Whether the lock is still held, judged against the clock now:
        False once the claim was lost, and False as soon as the monotonic
        clock passes the deadline, even if nothing has run since (a process
        resumed from a pause reads False before it can act)."""
        return self._handle.status() is Status.HELD and not self._handle.released

    def check(self) -> None:
        """Raises LockLost when the lock is not held (see `is_held`)."""
        if not self.is_held():
            raise (self._handle.loss or LockLost.released()).with_traceback(None)

    @property
    def loss(self) -> Optional[LockLost]:
        """Why the lock was lost, or None while it is held (or after a
        plain release)."""
        self._handle.status()
        return self._handle.loss

    def _check_enterable(self) -> None:
        """Raises LockLost when the lock is no longer held (released, or
        lost): a `with` block never runs its body without the lock."""
        if not self.is_held():
            raise not_enterable(self._name, self._handle.loss)

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None and not handle.released:
            try:
                handle.release_from_gc()
            except Exception:  # at interpreter exit; the kernel closes the socket
                pass


def not_enterable(name: str, loss: Optional[LockLost]) -> LockLost:
    """The error of a `with` (or `async with`) on a lock that is no longer
    held: its loss, or the release, said plainly."""
    if loss is None:
        return LockLost(
            LossReason.RELEASED,
            f"cannot enter a with-block on lock {name!r}: it was released; "
            "take it again with client.lock()",
        )
    entered = LockLost(
        loss.reason,
        f"cannot enter a with-block on lock {name!r}: it was lost ({loss}); "
        "take it again with client.lock()",
        code=loss.code,
        detail=loss.detail,
    )
    entered.__cause__ = loss
    return entered
