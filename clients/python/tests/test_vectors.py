"""The shared protocol vectors replayed through the sans-I/O core.

Every `*.json` in clients/conformance/vectors (format and replay rules in
its README.md; `MONOLOCK_VECTORS` names another directory) is fed to the
core, step by step on exact instants: version 1 through `_core.claim`,
version 2 (and its extension, values and observers: the `v2x-*` vectors)
through `_core.session`. What the core leaves to its driver
(writing a heartbeat or PING when due, closing on a loss, the half-close
of a v1 release, what the owner's lock reads) is done here the way the
drivers in `_io` do it. The bytes reported as sent come from the core's
own encoders and outbox, never from the vector.

A missing directory, or one without vectors, fails: it is never a skip.
"""

from __future__ import annotations

import collections
import json
import os
import unittest
from pathlib import Path
from typing import Any, Deque, Dict, List, Optional, Set

from monolock._core import frames, frames2
from monolock._core.claim import Claim, Status
from monolock._core.schedule import MS
from monolock._core.frames2 import EVENT_NAMES, REASON_NAMES, WireState
from monolock._core.session import (
    ClaimState,
    CStatus,
    Note,
    SessionCore,
    SState,
    owner_view,
)
from monolock._core.watch import LookupState, WatchState, WStatus
from support import REPO

#: Where the vectors are: the repository's, unless the environment says.
VECTORS = Path(os.environ.get("MONOLOCK_VECTORS") or REPO / "clients" / "conformance" / "vectors")

#: Instant 0 of every vector on the core's clock (nanoseconds): any origin
#: will do; a large one catches a core that takes 0 for "no instant".
ORIGIN = 1_000_000 * MS

INPUTS = {"call", "recv", "eof", "advance"}
WRITES = {"send", "half_close"}
CHECKS = {"belief", "deadline", "next_heartbeat"}

#: What an output looks like once compared: its step, without the `step` key.
Output = Dict[str, Any]


class Mismatch(AssertionError):
    """The core and the vector disagree."""


def instant(ms: int) -> int:
    return ORIGIN + ms * MS


def in_ms(ns: Optional[int]) -> Optional[float]:
    """A core instant back on the vector's clock (exact when whole)."""
    if ns is None:
        return None
    whole, rest = divmod(ns - ORIGIN, MS)
    return whole if rest == 0 else (ns - ORIGIN) / MS


def v2_client_frames(data: bytes) -> List[bytes]:
    """The frames of a v2 client's outbox, one by one."""
    found = []
    while data:
        kind = data[0]
        if kind == frames2.OPEN:
            length = 6
        elif kind == frames2.ACQUIRE:
            length = 7 + data[6]
        elif kind == frames2.RELEASE:
            length = 5
        elif kind == frames2.PING:
            length = 1
        elif kind == frames2.HELLO:
            length = 5
        elif kind == frames2.ACQUIRE_VALUE:
            name_end = 7 + data[6]
            length = name_end + 2 + int.from_bytes(data[name_end : name_end + 2], "big")
        elif kind == frames2.PROCLAIM:
            length = 7 + int.from_bytes(data[5:7], "big")
        elif kind == frames2.OBSERVE:
            length = 6 + data[5]
        elif kind == frames2.UNOBSERVE:
            length = 5
        elif kind == frames2.LOOKUP:
            length = 2 + data[1]
        else:
            raise Mismatch(f"the core queued an unknown frame type 0x{kind:02x}")
        found.append(data[:length])
        data = data[length:]
    return found


class Replay:
    """One vector against one core: inputs applied, outputs compared in
    order within their group (writes, events), checks asked."""

    def __init__(self, vector: Dict[str, Any]) -> None:
        self.vector = vector
        self.lease_ms: int = vector["lease_ms"]
        self.now = 0
        self.writes: Deque[Output] = collections.deque()
        self.events: Deque[Output] = collections.deque()

    @property
    def now_ns(self) -> int:
        return instant(self.now)

    def run(self) -> None:
        for index, step in enumerate(self.vector["steps"]):
            try:
                self.step(step)
            except Mismatch as err:
                raise Mismatch(f"step {index} {json.dumps(step)}: {err}") from None
        try:
            self.nothing_pending()
        except Mismatch as err:
            raise Mismatch(f"at the end: {err}") from None

    def step(self, step: Dict[str, Any]) -> None:
        kind = step["step"]
        fields = {k: v for k, v in step.items() if k != "step"}
        if kind in INPUTS:
            self.nothing_pending()
            if kind == "advance":
                if step["to"] < self.now:
                    raise Mismatch("the vector's clock goes backwards")
                self.now = step["to"]
            getattr(self, "on_" + kind)(step)
        elif kind in WRITES:
            self.match(self.writes, "write", {"step": kind, **fields})
        elif kind == "event":
            self.match(self.events, "event", fields)
        elif kind in CHECKS:
            got = getattr(self, "ask_" + kind)(step)
            want = {k: v for k, v in fields.items() if k != "claim"}
            if got != want:
                raise Mismatch(f"the core answers {got}")
        else:
            raise Mismatch(f"unknown step kind {kind!r}")

    def match(self, pending: Deque[Output], group: str, want: Output) -> None:
        if not pending:
            raise Mismatch(f"the core produced no {group} here")
        got = pending.popleft()
        if got != want:
            raise Mismatch(f"the core produced the {group} {got}")

    def nothing_pending(self) -> None:
        left = list(self.writes) + list(self.events)
        if left:
            raise Mismatch(f"the core produced outputs the vector does not list: {left}")

    def sent(self, frame: bytes) -> None:
        self.writes.append({"step": "send", "hex": frame.hex()})


class V1Replay(Replay):
    """Version 1: one connection, one claim (`_core.claim.Claim`), driven
    as `_io/v1.py` drives it."""

    def __init__(self, vector: Dict[str, Any]) -> None:
        super().__init__(vector)
        self.claim: Optional[Claim] = None
        #: The owner called release (the write side is shut down).
        self.released = False
        #: The client gave the connection up, or the server's EOF came.
        self.closed = False
        self.told = 0

    def the_claim(self) -> Claim:
        if self.claim is None:
            raise Mismatch("no acquire before this step")
        return self.claim

    def tell(self) -> None:
        """Every status the claim took since the last look, as events."""
        claim = self.the_claim()
        for status in claim.history[self.told :]:
            if status is Status.WAITING:
                self.events.append({"event": "waiting"})
            elif status is Status.HELD:
                self.events.append({"event": "granted", "token": claim.token})
            elif status is Status.LOST:
                assert claim.loss is not None
                self.events.append({"event": "lost", "reason": claim.loss.reason.value})
                self.closed = True  # the driver closes on any loss
        self.told = len(claim.history)

    def on_call(self, step: Dict[str, Any]) -> None:
        if step["call"] == "acquire":
            if step["mode"] != "wait":
                raise Mismatch("a v1 acquire is always a wait")
            raw = frames.encode_name(step["lock"])
            self.claim = Claim(step["lock"], self.lease_ms, self.now_ns)
            self.sent(frames.acquire(raw, self.lease_ms))
        elif step["call"] == "release":
            # `Session.release(wait=True)`: the clock is read first; a claim
            # lost by then reports its loss, else the write side is shut.
            claim = self.the_claim()
            claim.check(self.now_ns)
            self.tell()
            if claim.status is not Status.LOST:
                self.writes.append({"step": "half_close"})
            self.released = True
        else:
            raise Mismatch(f"no v1 call {step['call']!r}")

    def on_recv(self, step: Dict[str, Any]) -> None:
        if self.released:
            return  # only the server's EOF is awaited after a release
        self.the_claim().receive(bytes.fromhex(step["hex"]), self.now_ns)
        self.tell()

    def on_eof(self, step: Dict[str, Any]) -> None:
        if self.released:
            self.events.append({"event": "released"})
            self.closed = True
            return
        self.the_claim().closed(None)
        self.tell()

    def on_advance(self, step: Dict[str, Any]) -> None:
        if self.claim is None or self.closed or self.released:
            return
        claim = self.claim
        # The reactor's tick: the deadline first, then a heartbeat if due.
        due = claim.heartbeat_due(self.now_ns)
        self.tell()
        if due:
            self.sent(frames.HEARTBEAT)
            claim.heartbeat_sent(self.now_ns)

    def ask_belief(self, step: Dict[str, Any]) -> Dict[str, Any]:
        # `Lock.is_held()`: the deadline checked against the clock now.
        claim = self.the_claim()
        if not self.released:
            claim.check(self.now_ns)
            self.tell()
        return {"held": claim.status is Status.HELD and not self.released}

    def ask_deadline(self, step: Dict[str, Any]) -> Dict[str, Any]:
        return {"at": in_ms(self.the_claim().deadline())}

    def ask_next_heartbeat(self, step: Dict[str, Any]) -> Dict[str, Any]:
        return {"at": in_ms(self.the_claim().next_heartbeat())}


class V2Replay(Replay):
    """Version 2: one session, many claims (`_core.session.SessionCore`),
    driven as `_io/sessions.py` and `_io/aio_sessions.py` drive it."""

    def __init__(self, vector: Dict[str, Any]) -> None:
        super().__init__(vector)
        self.core: Optional[SessionCore] = None
        self.claims: Dict[int, ClaimState] = {}
        self.watches: Dict[int, WatchState] = {}
        self.released: Set[int] = set()
        self.told: Dict[int, int] = {}
        #: The session's own events were told (FEATURES, or no extension).
        self.told_opening = False

    def the_core(self) -> SessionCore:
        if self.core is None:
            raise Mismatch("no open before this step")
        return self.core

    def the_claim(self, step: Dict[str, Any]) -> ClaimState:
        claim = self.claims.get(step["claim"])
        if claim is None:
            raise Mismatch(f"claim {step['claim']} was never acquired")
        return claim

    def settle(self) -> None:
        """What a driver does after each step of the core: send what it
        queued, and tell each changed claim's owner, in the order of the
        changes (the status at each change, from the claim's history)."""
        core = self.the_core()
        for frame in v2_client_frames(bytes(core.outbox)):
            self.sent(frame)
        core.outbox.clear()
        if core.asked and not self.told_opening:
            if core.no_extension:
                self.told_opening = True
                self.events.append({"event": "unsupported"})
            elif core.state is SState.OPEN:
                self.told_opening = True
                self.events.append(
                    {"event": "features", "features": core.features, "max_watches": core.max_watches}
                )
        for change in core.changed:
            if isinstance(change, ClaimState):
                told = self.told.get(change.id, 0)
                self.told[change.id] = told + 1
                self.tell(change, change.history[told])
            elif isinstance(change, LookupState):
                self.tell_lookup(change)
            elif isinstance(change[0], ClaimState):
                self.tell(change[0], change[1])
            else:
                self.tell_watch(*change)
        core.changed.clear()

    def tell_watch(self, watch: WatchState, what: object) -> None:
        if isinstance(what, WireState):
            self.events.append({"event": "state", "watch": watch.id, **state_fields(what)})
        elif what is WStatus.OBSERVING:
            self.events.append({"event": "observing", "watch": watch.id})
        elif what is WStatus.UNOBSERVED:
            self.events.append({"event": "unobserved", "watch": watch.id})
        elif what is WStatus.REFUSED:
            self.events.append({"event": "refused", "watch": watch.id, "code": watch.code})
        elif what is WStatus.LOST:
            if not watch.unsent:
                assert watch.loss is not None
                self.events.append(
                    {"event": "watch_lost", "watch": watch.id, "reason": watch.loss.reason.value}
                )

    def tell_lookup(self, found: LookupState) -> None:
        if found.state is not None:
            fields = state_fields(found.state)
            self.events.append(
                {
                    "event": "lock_state",
                    **{k: fields[k] for k in (STATE_EVENT, "token", "since_ms", "value")},
                }
            )
        elif found.code is not None:
            self.events.append({"event": "refused", "lookup": True, "code": found.code})
        # A lookup the session's end cut short: nothing (only claims and watches say so).

    def tell(self, claim: ClaimState, status: object) -> None:
        if status is Note.PROCLAIMED:
            self.events.append({"event": "proclaimed", "claim": claim.id})
        elif status is Note.PROCLAIM_REFUSED:
            self.events.append({"event": "refused", "claim": claim.id, "code": claim.proclaim_refused})
        elif status is CStatus.WAITING:
            self.events.append({"event": "waiting", "claim": claim.id})
        elif status is CStatus.HELD:
            self.events.append({"event": "granted", "claim": claim.id, "token": claim.token})
        elif status is CStatus.BUSY:
            self.events.append({"event": "busy", "claim": claim.id})
        elif status is CStatus.REFUSED:
            self.events.append({"event": "refused", "claim": claim.id, "code": claim.code})
        elif status is CStatus.RELEASED:
            self.events.append({"event": "released", "claim": claim.id})
        elif status is CStatus.LOST:
            assert claim.loss is not None
            self.events.append({"event": "lost", "claim": claim.id, "reason": claim.loss.reason.value})
        # RELEASING: a GRANTED that crossed the claim's RELEASE tells nothing.

    def on_call(self, step: Dict[str, Any]) -> None:
        call = step["call"]
        if call == "open":
            features = step.get("features", 0)
            if features not in (0, frames2.FEATURE_VALUES):
                raise Mismatch(f"the client asks for no features {features!r}")
            self.core = SessionCore(self.lease_ms, self.now_ns, hello=bool(features))
        elif call == "acquire":
            mode = {"wait": frames2.MODE_WAIT, "try": frames2.MODE_TRY}[step["mode"]]
            raw = frames.encode_name(step["lock"])
            value = None if "value" not in step else frames2.encode_value(step["value"])
            claim = self.the_core().acquire(step["lock"], raw, mode, self.now_ns, value)
            if claim.id != step["claim"]:
                raise Mismatch(f"the core chose claim id {claim.id}")
            self.claims[claim.id] = claim
        elif call == "proclaim":
            self.the_core().proclaim(
                self.the_claim(step), frames2.encode_value(step["value"]), self.now_ns
            )
        elif call == "observe":
            raw = frames.encode_name(step["lock"])
            watch = self.the_core().observe(step["lock"], raw, self.now_ns)
            if watch.id != step["watch"]:
                raise Mismatch(f"the core chose watch id {watch.id}")
            self.watches[watch.id] = watch
        elif call == "unobserve":
            watch = self.watches.get(step["watch"])
            if watch is None:
                raise Mismatch(f"watch {step['watch']} was never observed")
            self.the_core().unobserve(watch, self.now_ns)
        elif call == "lookup":
            self.the_core().lookup(step["lock"], frames.encode_name(step["lock"]), self.now_ns)
        elif call == "release":
            # `V2Claim.release`: the clock is read first, then RELEASE queued.
            core = self.the_core()
            claim = self.the_claim(step)
            core.check(self.now_ns)
            self.settle()
            self.released.add(claim.id)
            core.release(claim, self.now_ns)
        else:
            raise Mismatch(f"no v2 call {call!r}")
        self.settle()

    def on_recv(self, step: Dict[str, Any]) -> None:
        self.the_core().receive(bytes.fromhex(step["hex"]), self.now_ns)
        self.settle()

    def on_eof(self, step: Dict[str, Any]) -> None:
        self.the_core().closed(None)
        self.settle()

    def on_advance(self, step: Dict[str, Any]) -> None:
        core = self.core
        if core is None or core.state is SState.CLOSED:
            return
        # The reactor's tick: the deadline first, then a PING if due.
        core.ping_due(self.now_ns)
        self.settle()

    def ask_belief(self, step: Dict[str, Any]) -> Dict[str, Any]:
        # `Lock.is_held()` on a v2 claim: the deadline checked against the
        # clock now while the claim lives, then the owner's view.
        claim = self.the_claim(step)
        released = claim.id in self.released
        if claim.live:
            self.the_core().check(self.now_ns)
            self.settle()
        return {"held": owner_view(claim, released) is Status.HELD and not released}

    def ask_deadline(self, step: Dict[str, Any]) -> Dict[str, Any]:
        return {"at": in_ms(self.the_core().deadline())}

    def ask_next_heartbeat(self, step: Dict[str, Any]) -> Dict[str, Any]:
        return {"at": in_ms(self.the_core().next_ping())}


#: The key of a state's event in a `state` or `lock_state` event (the step's
#: own `event` key names the kind of event).
STATE_EVENT = "state_event"


def state_fields(state: WireState) -> Dict[str, Any]:
    """A state's fields as the vectors write them."""
    return {
        STATE_EVENT: EVENT_NAMES[state.event],
        "initial": bool(state.flags & frames2.FLAG_INITIAL),
        "coalesced": bool(state.flags & frames2.FLAG_COALESCED),
        "token": state.token,
        "since_ms": state.since_ms,
        "reason": REASON_NAMES.get(state.reason) if state.event == frames2.EVENT_RELEASED else None,
        "value": state.value,
    }


def load(path: Path) -> Dict[str, Any]:
    vector: Dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if vector.get("name") != path.stem:
        raise Mismatch(f"the vector's name {vector.get('name')!r} is not its file's")
    return vector


def replay(vector: Dict[str, Any]) -> None:
    protocol = vector["protocol"]
    if protocol == 1:
        V1Replay(vector).run()
    elif protocol == 2:
        V2Replay(vector).run()
    else:
        raise Mismatch(f"protocol {protocol!r} is neither 1 nor 2")


def vector_files() -> List[Path]:
    return sorted(VECTORS.glob("*.json"))


class Vectors(unittest.TestCase):
    def test_the_vectors_are_there(self) -> None:
        self.assertTrue(
            VECTORS.is_dir(), f"no vectors at {VECTORS} (set MONOLOCK_VECTORS to another directory)"
        )
        protocols = {load(path)["protocol"] for path in vector_files()}
        self.assertEqual(protocols, {1, 2}, f"{VECTORS} must hold vectors of both versions")
        self.assertTrue(
            any(path.name.startswith("v2x-") for path in vector_files()),
            f"{VECTORS} must hold the extension's vectors (v2x-*)",
        )

    def test_every_vector_replays_through_the_core(self) -> None:
        paths = vector_files()
        self.assertTrue(paths, f"no *.json vectors in {VECTORS}")
        for path in paths:
            with self.subTest(vector=path.name):
                try:
                    replay(load(path))
                except Mismatch as err:
                    self.fail(f"{path}: {err}")


class ReplayerCatchesMistakes(unittest.TestCase):
    """The replayer fails a core that disagrees (so a passing vector means
    something): vectors written here, each with one wrong expectation."""

    GRANT = [
        {"step": "call", "call": "acquire", "lock": "deploy", "mode": "wait"},
        {"step": "send", "hex": "0101000007d000066465706c6f79"},
        {"step": "advance", "to": 10},
        {"step": "recv", "hex": "120006b49d20000000"},
        {"step": "event", "event": "granted", "token": 1887436800000000},
    ]

    def vector(self, protocol: int, steps: List[Dict[str, Any]]) -> Dict[str, Any]:
        return {"name": "made-here", "protocol": protocol, "lease_ms": 2000, "steps": steps}

    def test_a_matching_vector_passes(self) -> None:
        replay(self.vector(1, self.GRANT + [{"step": "next_heartbeat", "at": 480}]))

    def test_a_wrong_check_fails(self) -> None:
        with self.assertRaises(Mismatch):
            replay(self.vector(1, self.GRANT + [{"step": "deadline", "at": 1601}]))

    def test_an_unlisted_output_fails(self) -> None:
        with self.assertRaises(Mismatch):
            replay(self.vector(1, self.GRANT[:4] + [{"step": "advance", "to": 20}]))

    def test_a_missing_output_fails(self) -> None:
        steps = self.GRANT + [{"step": "event", "event": "lost", "reason": "expired"}]
        with self.assertRaises(Mismatch):
            replay(self.vector(1, steps))

    def test_a_wrong_frame_fails(self) -> None:
        steps: List[Dict[str, Any]] = [
            {"step": "call", "call": "open"},
            {"step": "send", "hex": "0102000007d1"},
        ]
        with self.assertRaises(Mismatch):
            replay(self.vector(2, steps))


if __name__ == "__main__":
    unittest.main()
