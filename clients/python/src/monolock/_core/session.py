"""One protocol v2 session carrying many claims, as a sans-I/O machine:
bytes and instants in; claim states, bytes to send, the deadline and the
next wake-up out (docs/protocol.md, "Writing a version 2 client").

- Every request goes into `outbox` and into the FIFO of requests in
  flight at the same instant, so the order sent is the order matched;
  each reply (0x30..0x36) answers the oldest and must name its claim.
- `S` is the send instant of the latest request whose reply arrived; the
  whole session, every claim on it, is given up at `S + 0.8 x lease`.
  Pushes (GRANTED, REVOKED) confirm nothing.
- PING goes on the v1 schedule, only when nothing is in flight: replies
  come in order, so a PING behind a request in flight could only be
  answered after it.

The drivers (`_io/sessions.py`, `_io/aio_sessions.py`) own the socket
and the clock and serialise access; neither holds protocol logic of its
own.
"""

from __future__ import annotations

import collections
import enum
from typing import Deque, Dict, List, Optional, Tuple, Union

from . import frames, frames2
from .frames2 import (
    ACQUIRED,
    BUSY,
    ERROR,
    FEATURES,
    GRANTED,
    LOCK_STATE,
    OBSERVING,
    OPENED,
    PONG,
    PROCLAIMED,
    REFUSED,
    RELEASED,
    REVOKED,
    STATE,
    UNOBSERVED,
    WAITING,
    WireState,
)
from ..errors import LockLost, ProtocolError
from .claim import Status
from .schedule import MS, Schedule
from .watch import LookupState, WatchState, WStatus

#: ERROR code of a server that speaks only protocol v1, in reply to OPEN.
UNSUPPORTED_VERSION = 0x10
#: REFUSED code: this session has `max_claims` claims in use.
TOO_MANY_CLAIMS = 0x09
#: REFUSED code for a RELEASE of an id that is not in use (after a REVOKED).
UNKNOWN_CLAIM = 0x20
#: ERROR code: the server closed a session that had no claim.
IDLE_CLOSED = 0x03
#: ERROR code of a server without the extension, in reply to HELLO.
UNKNOWN_MESSAGE_TYPE = 0x13
#: REFUSED code: this session has `max_watches` watches in use.
TOO_MANY_WATCHES = 0x0B

_U32 = 1 << 32


class CStatus(enum.Enum):
    """Where one claim stands."""

    #: ACQUIRE sent, no reply yet.
    PENDING = "pending"
    WAITING = "waiting"
    HELD = "held"
    #: RELEASE sent, RELEASED not read yet.
    RELEASING = "releasing"
    #: Ended: released (RELEASED read, or the session ended meanwhile).
    RELEASED = "released"
    #: Ended: a try found the lock busy.
    BUSY = "busy"
    #: Ended: REFUSED (`refused` holds the code).
    REFUSED = "refused"
    #: Ended: lost (`loss` says why).
    LOST = "lost"


#: The statuses in which a claim is still in use at the server (or may be).
_LIVE = (CStatus.PENDING, CStatus.WAITING, CStatus.HELD, CStatus.RELEASING)


class ClaimState:
    """One claim of a session. `watch` is the driver's (its event)."""

    __slots__ = (
        "id",
        "name",
        "status",
        "token",
        "loss",
        "refused",
        "release_wanted",
        "unsent",
        "watch",
        "history",
        "code",
        "value",
        "proclaims_sent",
        "proclaims_done",
        "proclaim_refused",
    )

    def __init__(self, claim_id: int, name: str, value: str = "") -> None:
        self.id = claim_id
        self.name = name
        self.status = CStatus.PENDING
        self.token: Optional[int] = None
        self.loss: Optional[LockLost] = None
        self.refused: Optional[LockLost] = None
        #: Release as soon as the ACQUIRE's reply arrives (a caller gave up
        #: while it was in flight).
        self.release_wanted = False
        #: The session had ended before this ACQUIRE was queued: never sent.
        self.unsent = False
        self.watch: object = None
        #: The status at each of the claim's entries in `changed`, in order:
        #: what its owner is told, step by step, when one read holds several
        #: frames for it. A few entries in a claim's life, never cleared.
        self.history: List[CStatus] = []
        #: The claim code of the REFUSED or REVOKED that ended it, as on the
        #: wire (`refused` and `loss` carry the v1 code of the same meaning).
        self.code: Optional[int] = None
        #: The value the server has for the claim (the latest PROCLAIMED's,
        #: else the ACQUIRE_VALUE's).
        self.value = value
        #: PROCLAIMs written, and answered (PROCLAIMED or REFUSED): the
        #: owner of the n-th waits until `proclaims_done >= n`.
        self.proclaims_sent = 0
        self.proclaims_done = 0
        #: The code of the latest PROCLAIM answered REFUSED, if any.
        self.proclaim_refused: Optional[int] = None

    @property
    def live(self) -> bool:
        return self.status in _LIVE


class Note(enum.Enum):
    """What a PROCLAIM's answer tells the claim's owner."""

    PROCLAIMED = "proclaimed"
    PROCLAIM_REFUSED = "proclaim_refused"


#: What a session tells its drivers changed, in the order it happened: a
#: claim (its `history` says how), a claim with a PROCLAIM's answer (a
#: `Note`), a watch with what happened to it (its new WStatus, or the
#: WireState pushed), or a lookup answered. Only the claims' own entries
#: are kept (a few per claim): a long-lived claim or watch adds nothing
#: that stays.
Change = Union[ClaimState, Tuple[object, object], LookupState]


class SState(enum.Enum):
    """Where the session stands."""

    OPENING = "opening"
    OPEN = "open"
    CLOSED = "closed"


# Requests in flight: (type byte, claim or watch id, send instant)
_Request = Tuple[int, int, int]


class SessionCore:
    """The state of one v2 session from the OPEN's send instant on;
    instants are nanoseconds of `time.monotonic_ns()`. Not thread-safe."""

    __slots__ = (
        "lease_ms",
        "schedule",
        "state",
        "session_id",
        "max_claims",
        "loss",
        "v1_only",
        "outbox",
        "claims",
        "changed",
        "idle_since",
        "asked",
        "features",
        "max_watches",
        "no_extension",
        "watches",
        "lookups",
        "_next_watch",
        "_pending",
        "_confirmed_send",
        "_next_ping",
        "_next_id",
        "_buf",
        "_answered",
    )

    def __init__(self, lease_ms: int, now: int, hello: bool = False) -> None:
        """`hello`: ask for the extension (values and observers) with the
        OPEN, and wait for FEATURES before anything else."""
        self.lease_ms = lease_ms
        self.schedule = Schedule(lease_ms * MS)
        self.state = SState.OPENING
        self.session_id = 0
        #: Until OPENED says otherwise: one claim, so that nothing is sent
        #: beyond what any server accepts.
        self.max_claims = 1
        self.loss: Optional[LockLost] = None
        #: The server answered the OPEN with ERROR 0x10: it speaks only v1.
        self.v1_only = False
        #: Bytes to send, in order; the driver writes and clears them.
        self.outbox = bytearray(frames2.open_frame(lease_ms))
        self.claims: Dict[int, ClaimState] = {}
        #: Claims whose status the server changed since the driver last
        #: looked (it wakes their owners and signals their losses).
        self.changed: List[Change] = []
        #: Since when the session has had no claim in use (None: it has one,
        #: or was opened for one that is about to come).
        self.idle_since: Optional[int] = None
        #: HELLO was written with the OPEN.
        self.asked = hello
        #: The features FEATURES granted (0: none, or no HELLO).
        self.features = 0
        self.max_watches = 0
        #: The server answered HELLO with ERROR 0x13: it lacks the extension.
        self.no_extension = False
        #: Watches in use at the server (or possibly so), by watch id.
        self.watches: Dict[int, WatchState] = {}
        #: LOOKUPs in flight, in the order written.
        self.lookups: Deque[LookupState] = collections.deque()
        self._next_watch = 1
        self._pending: Deque[_Request] = collections.deque([(frames2.OPEN, 0, now)])
        if hello:
            self.outbox += frames2.hello()
            self._pending.append((frames2.HELLO, 0, now))
        self._confirmed_send = now
        self._next_ping: Optional[int] = None
        self._next_id = 1
        self._buf = bytearray()
        self._answered = False

    # what the owner asks

    def in_use(self) -> int:
        """Claims and watches in use at the server (or possibly so)."""
        return len(self.claims) + len(self.watches)

    @property
    def extended(self) -> bool:
        """FEATURES granted values and observers on this session."""
        return bool(self.features & frames2.FEATURE_VALUES)

    def has_watch_room(self) -> bool:
        return self.state is SState.OPEN and self.extended and len(self.watches) < self.max_watches

    def is_closed(self) -> bool:
        return self.state is SState.CLOSED

    def awaiting_reply(self) -> bool:
        """The OPEN is unanswered and nothing ended the session yet."""
        return self.state is SState.OPENING

    def unanswered(self, within: float) -> None:
        """No reply to the OPEN came within `within` seconds: the session is
        over (unless something ended it first)."""
        self.fail(LockLost.expired(self.lease_ms, True, "OPEN", within=within))

    def has_room(self) -> bool:
        return self.state is not SState.CLOSED and len(self.claims) < self.max_claims

    def acquire(
        self, name: str, raw_name: bytes, mode: int, now: int, value: Optional[bytes] = None
    ) -> ClaimState:
        """Queues an ACQUIRE (ACQUIRE_VALUE when `value` is given, even
        empty); the claim's status changes as replies arrive."""
        claim_id = self._next_id
        while claim_id in self.claims:
            claim_id = (claim_id + 1) % _U32
        self._next_id = (claim_id + 1) % _U32
        claim = ClaimState(claim_id, name, "" if value is None else value.decode("utf-8"))
        if self.state is SState.CLOSED:
            claim.unsent = True
            self._end(claim, CStatus.LOST, self.loss)
            return claim
        self.claims[claim_id] = claim
        self.idle_since = None
        if value is None:
            frame = frames2.acquire(claim_id, mode, raw_name)
        else:
            frame = frames2.acquire_value(claim_id, mode, raw_name, value)
        self._send(frames2.ACQUIRE, claim_id, frame, now)
        return claim

    def proclaim(self, claim: ClaimState, value: bytes, now: int) -> int:
        """Queues a PROCLAIM of `claim` (held or waiting). Returns the
        count its owner waits for in `claim.proclaims_done`; 0 when the
        claim has ended or is on its way out (nothing is written)."""
        if claim.status not in (CStatus.HELD, CStatus.WAITING) or self.state is SState.CLOSED:
            return 0
        claim.proclaims_sent += 1
        self._send(frames2.PROCLAIM, claim.id, frames2.proclaim(claim.id, value), now)
        return claim.proclaims_sent

    def observe(self, name: str, raw_name: bytes, now: int) -> WatchState:
        """Queues an OBSERVE; the watch's status changes as replies and
        pushes arrive. A session already ended gives a watch that ended
        unsent."""
        watch_id = self._next_watch
        while watch_id in self.watches:
            watch_id = (watch_id + 1) % _U32
        self._next_watch = (watch_id + 1) % _U32
        watch = WatchState(watch_id, name)
        if self.state is SState.CLOSED:
            watch.unsent = True
            watch.end(WStatus.LOST, self.loss)
            self.changed.append((watch, WStatus.LOST))
            return watch
        self.watches[watch_id] = watch
        self.idle_since = None
        self._send(frames2.OBSERVE, watch_id, frames2.observe(watch_id, raw_name), now)
        return watch

    def unobserve(self, watch: WatchState, now: int) -> None:
        """Queues an UNOBSERVE (or, while the OBSERVE is unanswered, asks
        for one as soon as its reply leaves the id in use). Nothing for a
        watch that ended."""
        if watch.status is WStatus.OBSERVING:
            watch.status = WStatus.UNOBSERVING
            self._send(frames2.UNOBSERVE, watch.id, frames2.unobserve(watch.id), now)
        elif watch.status is WStatus.PENDING:
            watch.stop_wanted = True

    def lookup(self, name: str, raw_name: bytes, now: int) -> LookupState:
        """Queues a LOOKUP; the answer lands in the returned object."""
        found = LookupState(name)
        if self.state is SState.CLOSED:
            found.fail(self.loss or LockLost.connection())
            self.changed.append(found)
            return found
        self.lookups.append(found)
        self._send(frames2.LOOKUP, 0, frames2.lookup(raw_name), now)
        return found

    def release(self, claim: ClaimState, now: int) -> None:
        """Queues a RELEASE of `claim` (or of what its ACQUIRE in flight
        brings). Nothing for a claim that has ended."""
        if claim.status in (CStatus.HELD, CStatus.WAITING):
            claim.status = CStatus.RELEASING
            self._send(frames2.RELEASE, claim.id, frames2.release(claim.id), now)
        elif claim.status is CStatus.PENDING:
            claim.release_wanted = True

    def deadline(self) -> int:
        """`S + 0.8 x lease`: every claim is given up at this instant."""
        return self.schedule.deadline(self._confirmed_send)

    def check(self, now: int) -> None:
        """The pessimist's check: past the deadline the session is lost."""
        if self.state is not SState.CLOSED and now >= self.deadline():
            self.fail(LockLost.expired(self.lease_ms, not self._answered, "OPEN"))

    def ping_due(self, now: int) -> bool:
        """Checks the deadline, then queues a PING if one is due. True when
        it did."""
        self.check(now)
        due = self.next_ping()
        if due is None or due > now:
            return False
        self._send(frames2.PING, 0, frames2.PING_FRAME, now)
        return True

    def next_ping(self) -> Optional[int]:
        """When the next PING is due; None while a request is in flight
        (replies come in order: a PING behind it could only be answered
        after it), before the OPEN's reply, and once the session ended."""
        if self.state is SState.CLOSED or self._pending:
            return None
        return self._next_ping

    def next_wake(self) -> Optional[int]:
        """When the driver must look again without input: the next PING or
        the deadline; None once the session has ended."""
        if self.state is SState.CLOSED:
            return None
        deadline = self.deadline()
        ping = None if self._pending else self._next_ping  # `next_ping`, on the hot path
        return deadline if ping is None else min(ping, deadline)

    def fail(self, loss: LockLost) -> None:
        """Ends the session: every claim in use ends with it, in this step,
        lost for `loss`. A claim whose RELEASE is on its way is lost too,
        whatever ended the session (EOF, an ERROR, ERROR 0x01 included, a
        failed connection, the deadline, the client's own close): only
        RELEASED confirms a release, and without it the owner cannot know
        when the server let go (the Rust client reports the same)."""
        if self.state is SState.CLOSED:
            return
        self.state = SState.CLOSED
        self.loss = loss
        claims, self.claims = self.claims, {}
        for claim in sorted(claims.values(), key=lambda c: c.id):
            if claim.live:  # not revoked with its RELEASE's reply still due
                self._end(claim, CStatus.LOST, loss)
        watches, self.watches = self.watches, {}
        for watch in sorted(watches.values(), key=lambda w: w.id):
            watch.end(WStatus.LOST, loss)
            self.changed.append((watch, WStatus.LOST))
        lookups, self.lookups = self.lookups, collections.deque()
        for found in lookups:
            found.fail(loss)
            self.changed.append(found)
        self._pending.clear()
        self.outbox.clear()

    def closed(self, cause: Optional[BaseException] = None) -> None:
        """The connection ended (EOF when `cause` is None, else a failure)."""
        self.fail(LockLost.connection(cause))

    # bytes in

    def receive(self, data: bytes, now: int) -> None:
        """Applies the bytes read at `now`: every whole frame among them."""
        self.check(now)
        if self.state is SState.CLOSED:
            return
        if not self._answered and not self._buf and data:
            foreign = frames.wrong_port(data[0])
            if foreign is not None:
                self.fail(LockLost.protocol(foreign))
                return
        buf = self._buf
        buf += data
        used = 0
        try:
            while not self.is_closed():
                decoded = frames2.decode(buf, used)
                if decoded is None:
                    break
                frame, length = decoded
                used += length
                self._answered = True
                self._on_frame(frame, now)
        except ProtocolError as err:
            self.fail(LockLost.protocol(err))
        del buf[:used]

    def _on_frame(self, frame: frames2.Frame, now: int) -> None:
        kind, _, value, code, reason = frame
        if kind == GRANTED:
            self._on_granted(frame)
            return
        if kind == REVOKED:
            self._on_revoked(frame, now)
            return
        if kind == STATE:
            self._on_state(frame)
            return
        if kind == ERROR:
            if self.state is SState.OPENING and code == UNSUPPORTED_VERSION:
                self.v1_only = True
            elif (
                code == UNKNOWN_MESSAGE_TYPE
                and self._pending
                and self._pending[0][0] == frames2.HELLO
            ):
                self.no_extension = True  # OPENED, then ERROR 0x13 answering HELLO
            self.fail(LockLost.server(code, reason))
            return
        if not self._pending:
            raise ProtocolError(f"a reply (type 0x{kind:02x}) arrived with no request in flight")
        request, request_id, sent_at = self._pending.popleft()
        self._confirm(sent_at, now)
        if kind == OPENED:
            if request != frames2.OPEN:
                raise ProtocolError("OPENED arrived for another request than OPEN")
            self.session_id = value
            self.max_claims = code
            if not self.asked:
                self.state = SState.OPEN
        elif kind == FEATURES:
            if request != frames2.HELLO:
                raise ProtocolError("FEATURES arrived for another request than HELLO")
            self.features = value & frames2.FEATURE_VALUES
            self.max_watches = code
            self.state = SState.OPEN
        elif request == frames2.PROCLAIM and kind in (PROCLAIMED, REFUSED):
            self._on_proclaim_reply(frame, request_id)
        elif request == frames2.OBSERVE and kind in (OBSERVING, REFUSED):
            self._on_observe_reply(frame, request_id, now)
        elif request == frames2.UNOBSERVE and kind in (UNOBSERVED, REFUSED):
            self._on_unobserve_reply(frame, request_id, now)
        elif request == frames2.LOOKUP and kind in (LOCK_STATE, REFUSED):
            self._on_lookup_reply(frame)
        elif kind == PONG:
            if request != frames2.PING:
                raise ProtocolError("PONG arrived for another request than PING")
        elif request == frames2.ACQUIRE and kind in (ACQUIRED, WAITING, BUSY, REFUSED):
            self._on_acquire_reply(frame, request_id, now)
        elif request == frames2.RELEASE and kind in (RELEASED, REFUSED):
            self._on_release_reply(frame, request_id, now)
        else:
            raise ProtocolError(f"reply type 0x{kind:02x} does not answer the request in flight")

    def _on_granted(self, frame: frames2.Frame) -> None:
        """A push: confirms nothing."""
        _, claim_id, token, _, _ = frame
        claim = self._claim(claim_id, frame)
        if claim.status is CStatus.WAITING:
            claim.status = CStatus.HELD
            claim.token = token
        elif claim.status is CStatus.RELEASING and claim.token is None:
            claim.token = token  # crossed our RELEASE: released again next
        else:
            raise ProtocolError(f"GRANTED for claim {claim_id}, which was not waiting")
        self._changed(claim)

    def _on_revoked(self, frame: frames2.Frame, now: int) -> None:
        """A push: ends one claim, confirms nothing."""
        _, claim_id, _, code, reason = frame
        claim = self._claim(claim_id, frame)
        if claim.status is CStatus.PENDING:
            raise ProtocolError(f"REVOKED for claim {claim_id} before its ACQUIRE's reply")
        claim.code = code
        # A claim being released stays in use: our RELEASE's reply is
        # REFUSED 0x20, and the id is free only then.
        keep = claim.status is CStatus.RELEASING
        self._end(claim, CStatus.LOST, LockLost.claim(code, reason), keep=keep)
        self._after_change(now)

    def _on_acquire_reply(self, frame: frames2.Frame, request_id: int, now: int) -> None:
        kind, claim_id, token, code, reason = frame
        claim = self._claim(claim_id, frame, request_id)
        if claim.status is not CStatus.PENDING:
            raise ProtocolError(f"a second reply to the ACQUIRE of claim {claim_id}")
        if kind == ACQUIRED:
            claim.status = CStatus.HELD
            claim.token = token
            self._changed(claim)
        elif kind == WAITING:
            claim.status = CStatus.WAITING
            self._changed(claim)
        elif kind == BUSY:
            self._end(claim, CStatus.BUSY, None)
        else:
            claim.code = code
            claim.refused = LockLost.claim(code, reason)
            self._end(claim, CStatus.REFUSED, None)
        if claim.release_wanted and claim.live:
            self.release(claim, now)
        self._after_change(now)

    def _on_release_reply(self, frame: frames2.Frame, request_id: int, now: int) -> None:
        kind, claim_id, _, code, _ = frame
        claim = self._claim(claim_id, frame, request_id)
        if claim.status is CStatus.LOST and kind == REFUSED and code == UNKNOWN_CLAIM:
            del self.claims[claim_id]  # the REVOKED came first
        elif claim.status is CStatus.RELEASING and kind == RELEASED:
            self._end(claim, CStatus.RELEASED, None)
        else:
            raise ProtocolError(f"unexpected reply 0x{kind:02x} to the RELEASE of claim {claim_id}")
        self._after_change(now)

    def _on_proclaim_reply(self, frame: frames2.Frame, request_id: int) -> None:
        kind, claim_id, _, code, _ = frame
        if claim_id != request_id:
            raise ProtocolError(
                f"reply 0x{kind:02x} names claim {claim_id}, but the PROCLAIM in flight "
                f"names claim {request_id}"
            )
        claim = self.claims.get(claim_id)
        if claim is None:
            # Ended meanwhile (a REVOKED, then the answer): nothing to tell.
            if kind == REFUSED:
                return
            raise ProtocolError(f"PROCLAIMED names claim {claim_id}, not in use")
        claim.proclaims_done += 1
        if kind == PROCLAIMED:
            self.changed.append((claim, Note.PROCLAIMED))
        elif claim.live:
            claim.proclaim_refused = code
            self.changed.append((claim, Note.PROCLAIM_REFUSED))

    def _on_state(self, frame: frames2.Frame) -> None:
        """A push: confirms nothing."""
        _, watch_id, token, _, state = frame
        assert isinstance(state, WireState)
        watch = self.watches.get(watch_id)
        if watch is None or watch.status is WStatus.PENDING:
            raise ProtocolError(f"STATE for watch {watch_id}, not in use")
        if token < watch.last_token:
            raise ProtocolError(
                f"STATE for watch {watch_id} names token {token} after token {watch.last_token}"
            )
        watch.last_token = token
        if watch.status is WStatus.UNOBSERVING:
            return  # UNOBSERVE is on its way: nothing for the owner
        watch.push(state)
        self.changed.append((watch, state))

    def _watch(self, frame: frames2.Frame, request_id: int) -> WatchState:
        kind, watch_id = frame[0], frame[1]
        if watch_id != request_id:
            raise ProtocolError(
                f"reply 0x{kind:02x} names watch {watch_id}, but the request in flight "
                f"names watch {request_id}"
            )
        watch = self.watches.get(watch_id)
        if watch is None:
            raise ProtocolError(f"reply 0x{kind:02x} names watch {watch_id}, not in use")
        return watch

    def _on_observe_reply(self, frame: frames2.Frame, request_id: int, now: int) -> None:
        kind, _, _, code, reason = frame
        watch = self._watch(frame, request_id)
        if watch.status is not WStatus.PENDING:
            raise ProtocolError(f"a second reply to the OBSERVE of watch {watch.id}")
        if kind == OBSERVING:
            watch.status = WStatus.OBSERVING
            self.changed.append((watch, WStatus.OBSERVING))
            if watch.stop_wanted:
                self.unobserve(watch, now)
        else:
            watch.code = code
            del self.watches[watch.id]
            watch.status = WStatus.REFUSED
            watch.loss = LockLost.refused(f'observation of lock "{watch.name}"', code, str(reason))
            self.changed.append((watch, WStatus.REFUSED))
            self._after_change(now)

    def _on_unobserve_reply(self, frame: frames2.Frame, request_id: int, now: int) -> None:
        kind = frame[0]
        watch = self._watch(frame, request_id)
        if watch.status is not WStatus.UNOBSERVING or kind != UNOBSERVED:
            raise ProtocolError(f"unexpected reply 0x{kind:02x} to the UNOBSERVE of watch {watch.id}")
        del self.watches[watch.id]
        watch.end(WStatus.UNOBSERVED, None)
        self.changed.append((watch, WStatus.UNOBSERVED))
        self._after_change(now)

    def _on_lookup_reply(self, frame: frames2.Frame) -> None:
        kind, lookup_id, _, code, payload = frame
        if kind == REFUSED and lookup_id != 0:
            raise ProtocolError(f"REFUSED for a LOOKUP names id {lookup_id}, not 0")
        if not self.lookups:
            raise ProtocolError("a LOOKUP's reply with no LOOKUP in flight")
        found = self.lookups.popleft()
        if kind == LOCK_STATE:
            assert isinstance(payload, WireState)
            found.state = payload
        else:
            found.code = code
            found.fail(LockLost.refused(f'lookup of lock "{found.name}"', code, str(payload)))
        self.changed.append(found)

    def _claim(
        self, claim_id: int, frame: frames2.Frame, expected: Optional[int] = None
    ) -> ClaimState:
        if expected is not None and claim_id != expected:
            raise ProtocolError(
                f"reply 0x{frame[0]:02x} names claim {claim_id}, but the request in flight "
                f"names claim {expected}"
            )
        claim = self.claims.get(claim_id)
        if claim is None:
            raise ProtocolError(f"frame 0x{frame[0]:02x} names claim {claim_id}, not in use")
        return claim

    # internals

    def _send(self, kind: int, claim_id: int, frame: bytes, now: int) -> None:
        self.outbox += frame
        self._pending.append((kind, claim_id, now))

    def _confirm(self, sent_at: int, now: int) -> None:
        self.schedule.observe_rtt(max(now - sent_at, 0))
        if sent_at > self._confirmed_send:
            self._confirmed_send = sent_at
        self._next_ping = self.schedule.next_send(self._confirmed_send, now)

    def _end(
        self, claim: ClaimState, status: CStatus, loss: Optional[LockLost], keep: bool = False
    ) -> None:
        claim.status = status
        # Each claim's loss names its own lock.
        claim.loss = None if loss is None else loss.for_lock(claim.name)
        if not keep:
            self.claims.pop(claim.id, None)
        self._changed(claim)

    def _changed(self, claim: ClaimState) -> None:
        self.changed.append(claim)
        claim.history.append(claim.status)

    def _after_change(self, now: int) -> None:
        if not self.claims and not self.watches and self.idle_since is None:
            self.idle_since = now


_OWNER_STATUS = {
    CStatus.PENDING: Status.UNANSWERED,
    CStatus.WAITING: Status.WAITING,
    CStatus.HELD: Status.HELD,
}


def owner_view(claim: ClaimState, released: bool) -> Status:
    """A claim's status as its lock reads it. A claim its owner released
    is over, not lost: it reads HELD, and the lock adds that it was
    released (as a v1 claim reads after its close)."""
    if released and claim.status in (CStatus.RELEASING, CStatus.RELEASED):
        return Status.HELD
    return _OWNER_STATUS.get(claim.status, Status.LOST)


def never_seen(claim: ClaimState) -> bool:
    """The claim ended before the server could have acted on it: its
    session had ended before the ACQUIRE was queued, or was closed as idle
    (ERROR 0x03: it had no claim, so it never read this ACQUIRE). It may go
    on a new session."""
    if claim.status is not CStatus.LOST or claim.token is not None:
        return False
    return claim.unsent or (claim.loss is not None and claim.loss.code == IDLE_CLOSED)


def release_unconfirmed(io_timeout: float) -> LockLost:
    """What `release` reports when the RELEASE got no reply within
    `io_timeout` seconds: the client closed the session (which releases
    every claim on it at the server), the release unconfirmed. The Rust
    client's words."""
    return LockLost.connection(
        TimeoutError(f"RELEASE not confirmed within {io_timeout:g}s; the session was closed")
    )


def session_closed_unconfirmed() -> LockLost:
    """The loss of every claim of a session the client closed because a
    RELEASE was not confirmed in time."""
    return LockLost.connection(
        TimeoutError("a RELEASE was not confirmed in time; the session was closed")
    )
