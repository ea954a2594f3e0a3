"""The extension (values and observers) in the sans-I/O core, on exact
instants, through the same replayer as the shared vectors
(tests/test_vectors.py): vectors written here, in the shared format, for
docs/protocol.md's worked exchange and the rules of the client side
(the `v2x-*` files of clients/conformance/vectors are replayed there too).

The server's frames are built here with `struct`, from the page's
tables, not with the client's own encoder.
"""

from __future__ import annotations

import struct
import unittest
from typing import Any, Dict, List, Optional

from monolock._core import frames2
from monolock._core.session import SessionCore
from monolock._core.watch import MAX_QUEUED_STATES
from test_vectors import Mismatch, replay

TOKEN = 0x0006B49D20000000
SINCE = 1796300000000
EVENTS = {"free": 0, "held": 1, "granted": 2, "value": 3, "released": 4}
REASONS = {None: 0, "released": 1, "expired": 2, "forced": 3, "ended_by_server": 4}


def opened(session: int = 1) -> str:
    return struct.pack(">BQI", 0x30, session, 1024).hex()


def features(granted: int = 1, max_watches: int = 1024) -> str:
    return struct.pack(">BII", 0x39, granted, max_watches).hex()


def reply(kind: int, ident: int) -> str:
    return struct.pack(">BI", kind, ident).hex()


def acquired(claim: int, token: int) -> str:
    return struct.pack(">BIQ", 0x31, claim, token).hex()


def state_bytes(event: str, flags: int, token: int, since: int, reason: Optional[str], value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">BBQQBH", EVENTS[event], flags, token, since, REASONS[reason], len(raw)) + raw


def state(watch: int, event: str, token: int, *, flags: int = 0, since: int = SINCE,
          reason: Optional[str] = None, value: str = "") -> str:
    return (struct.pack(">BI", 0x3E, watch) + state_bytes(event, flags, token, since, reason, value)).hex()


def told(watch: int, event: str, token: int, *, initial: bool = False, coalesced: bool = False,
         since: int = SINCE, reason: Optional[str] = None, value: str = "") -> Dict[str, Any]:
    return {"step": "event", "event": "state", "watch": watch, "state_event": event, "initial": initial,
            "coalesced": coalesced, "token": token, "since_ms": since, "reason": reason, "value": value}


def error(code: int, reason: bytes = b"") -> str:
    return (bytes([0x13, code, len(reason)]) + reason).hex()


OPEN_ASKING: List[Dict[str, Any]] = [
    {"step": "call", "call": "open", "features": 1},
    {"step": "send", "hex": "0102000007d0"},
    {"step": "send", "hex": "2400000001"},
    {"step": "next_heartbeat", "at": None},
    {"step": "advance", "to": 10},
    {"step": "recv", "hex": opened() + features()},
    {"step": "event", "event": "features", "features": 1, "max_watches": 1024},
    {"step": "deadline", "at": 1600},
]


def vector(steps: List[Any]) -> Dict[str, Any]:
    return {"name": "made-here", "protocol": 2, "lease_ms": 2000, "steps": steps}


class Holder(unittest.TestCase):
    """Session A of the worked exchange: a value, PROCLAIM, RELEASE."""

    def test_value_proclaim_release(self) -> None:
        replay(vector(OPEN_ASKING + [
            {"step": "call", "call": "acquire", "claim": 1, "lock": "deploy", "mode": "wait",
             "value": "10.0.0.7:9000"},
            {"step": "send", "hex": "25000000010006" + b"deploy".hex() + "000d" + b"10.0.0.7:9000".hex()},
            {"step": "advance", "to": 20},
            {"step": "recv", "hex": acquired(1, TOKEN)},
            {"step": "event", "event": "granted", "claim": 1, "token": TOKEN},
            {"step": "deadline", "at": 1610},
            {"step": "advance", "to": 30},
            {"step": "call", "call": "proclaim", "claim": 1, "value": "10.0.0.7:9001"},
            {"step": "send", "hex": "2600000001000d" + b"10.0.0.7:9001".hex()},
            {"step": "advance", "to": 40},
            {"step": "recv", "hex": reply(0x3A, 1)},
            {"step": "event", "event": "proclaimed", "claim": 1},
            {"step": "deadline", "at": 1630},
            {"step": "call", "call": "release", "claim": 1},
            {"step": "send", "hex": "2200000001"},
            {"step": "recv", "hex": reply(0x34, 1)},
            {"step": "event", "event": "released", "claim": 1},
        ]))

    def test_an_empty_value_is_still_acquire_value_when_asked(self) -> None:
        replay(vector(OPEN_ASKING + [
            {"step": "call", "call": "acquire", "claim": 1, "lock": "a", "mode": "try", "value": ""},
            {"step": "send", "hex": "25000000010101" + b"a".hex() + "0000"},
            {"step": "recv", "hex": reply(0x33, 1)},
            {"step": "event", "event": "busy", "claim": 1},
        ]))

    def test_nothing_is_sent_before_features(self) -> None:
        core = SessionCore(2000, 0, hello=True)
        core.outbox.clear()
        core.receive(bytes.fromhex(opened()), 1)
        self.assertTrue(core.awaiting_reply(), "OPENED alone does not open an asking session")
        self.assertIsNone(core.next_ping())
        core.receive(bytes.fromhex(features()), 2)
        self.assertFalse(core.awaiting_reply())
        self.assertTrue(core.extended)
        self.assertTrue(core.has_watch_room())


class Observer(unittest.TestCase):
    """Session B of the worked exchange: OBSERVE, pushes, LOOKUP, UNOBSERVE."""

    def test_observe_lookup_unobserve(self) -> None:
        replay(vector(OPEN_ASKING + [
            {"step": "call", "call": "observe", "watch": 1, "lock": "deploy"},
            {"step": "send", "hex": "270000000106" + b"deploy".hex()},
            {"step": "advance", "to": 20},
            {"step": "recv", "hex": reply(0x3B, 1) + state(1, "held", TOKEN, flags=1, value="10.0.0.7:9000")},
            {"step": "event", "event": "observing", "watch": 1},
            told(1, "held", TOKEN, initial=True, value="10.0.0.7:9000"),
            {"step": "deadline", "at": 1610},
            {"step": "advance", "to": 30},
            # pushes confirm nothing
            {"step": "recv", "hex": state(1, "value", TOKEN, value="10.0.0.7:9001")},
            told(1, "value", TOKEN, value="10.0.0.7:9001"),
            {"step": "recv", "hex": state(1, "released", TOKEN, since=SINCE + 5, reason="released")
             + state(1, "granted", TOKEN + 1, since=SINCE + 5, value="10.0.0.8:9000")},
            told(1, "released", TOKEN, since=SINCE + 5, reason="released"),
            told(1, "granted", TOKEN + 1, since=SINCE + 5, value="10.0.0.8:9000"),
            {"step": "deadline", "at": 1610},
            {"step": "call", "call": "lookup", "lock": "deploy"},
            {"step": "send", "hex": "2906" + b"deploy".hex()},
            {"step": "advance", "to": 40},
            {"step": "recv", "hex": "3d" + state_bytes("held", 0, TOKEN + 1, SINCE + 5, None, "10.0.0.8:9000").hex()},
            {"step": "event", "event": "lock_state", "state_event": "held", "token": TOKEN + 1,
             "since_ms": SINCE + 5, "value": "10.0.0.8:9000"},
            {"step": "deadline", "at": 1630},  # the LOOKUP, sent at 30
            {"step": "call", "call": "unobserve", "watch": 1},
            {"step": "send", "hex": "2800000001"},
            # a push after UNOBSERVE was written and before UNOBSERVED: nothing
            {"step": "recv", "hex": state(1, "released", TOKEN + 1, reason="expired")},
            {"step": "recv", "hex": reply(0x3C, 1)},
            {"step": "event", "event": "unobserved", "watch": 1},
        ]))

    def test_an_older_token_ends_the_session_claims_first_then_watches(self) -> None:
        replay(vector(OPEN_ASKING + [
            {"step": "call", "call": "observe", "watch": 1, "lock": "a"},
            {"step": "send", "hex": "270000000101" + b"a".hex()},
            {"step": "call", "call": "observe", "watch": 2, "lock": "b"},
            {"step": "send", "hex": "270000000201" + b"b".hex()},
            {"step": "call", "call": "acquire", "claim": 1, "lock": "c", "mode": "wait"},
            {"step": "send", "hex": "2100000001000163"},
            {"step": "recv", "hex": reply(0x3B, 1) + state(1, "held", TOKEN + 5, flags=1)
             + reply(0x3B, 2) + state(2, "free", 0, flags=1, since=0) + acquired(1, TOKEN + 6)},
            {"step": "event", "event": "observing", "watch": 1},
            told(1, "held", TOKEN + 5, initial=True),
            {"step": "event", "event": "observing", "watch": 2},
            told(2, "free", 0, initial=True, since=0),
            {"step": "event", "event": "granted", "claim": 1, "token": TOKEN + 6},
            {"step": "recv", "hex": state(2, "granted", TOKEN + 7)},
            told(2, "granted", TOKEN + 7),
            {"step": "recv", "hex": state(1, "released", TOKEN + 4, reason="released")},
            {"step": "event", "event": "lost", "claim": 1, "reason": "protocol"},
            {"step": "event", "event": "watch_lost", "watch": 1, "reason": "protocol"},
            {"step": "event", "event": "watch_lost", "watch": 2, "reason": "protocol"},
        ]))

    def test_a_state_for_a_watch_not_in_use_is_a_violation(self) -> None:
        replay(vector(OPEN_ASKING + [
            {"step": "call", "call": "observe", "watch": 1, "lock": "a"},
            {"step": "send", "hex": "270000000101" + b"a".hex()},
            {"step": "recv", "hex": state(1, "free", 0, flags=1)},  # before OBSERVING
            {"step": "event", "event": "watch_lost", "watch": 1, "reason": "protocol"},
        ]))

    def test_refusals_name_the_watch_and_the_lookup(self) -> None:
        refused = "36" + "00000001" + "0b" + "00"
        replay(vector(OPEN_ASKING + [
            {"step": "call", "call": "observe", "watch": 1, "lock": "a"},
            {"step": "send", "hex": "270000000101" + b"a".hex()},
            {"step": "call", "call": "lookup", "lock": "a"},
            {"step": "send", "hex": "2901" + b"a".hex()},
            {"step": "recv", "hex": refused + "36" + "00000000" + "24" + "00"},
            {"step": "event", "event": "refused", "watch": 1, "code": 0x0B},
            {"step": "event", "event": "refused", "lookup": True, "code": 0x24},
            {"step": "call", "call": "observe", "watch": 2, "lock": "a"},
            {"step": "send", "hex": "270000000201" + b"a".hex()},
        ]))

    def test_an_eof_ends_every_watch(self) -> None:
        replay(vector(OPEN_ASKING + [
            {"step": "call", "call": "observe", "watch": 1, "lock": "a"},
            {"step": "send", "hex": "270000000101" + b"a".hex()},
            {"step": "recv", "hex": reply(0x3B, 1) + state(1, "free", 0, flags=1)},
            {"step": "event", "event": "observing", "watch": 1},
            told(1, "free", 0, initial=True),
            {"step": "eof"},
            {"step": "event", "event": "watch_lost", "watch": 1, "reason": "connection"},
        ]))

    def test_a_watch_keeps_the_session_from_idle(self) -> None:
        core = SessionCore(2000, 0, hello=True)
        core.receive(bytes.fromhex(opened() + features()), 1)
        self.assertIsNotNone(core.idle_since is None or core.idle_since)
        watch = core.observe("a", b"a", 2)
        core.receive(bytes.fromhex(reply(0x3B, watch.id) + state(watch.id, "free", 0, flags=1)), 3)
        self.assertIsNone(core.idle_since)
        self.assertEqual(core.in_use(), 1)
        core.unobserve(watch, 4)
        core.receive(bytes.fromhex(reply(0x3C, watch.id)), 5)
        self.assertEqual(core.idle_since, 5)

    def test_a_slow_owner_is_told_the_state_now_coalesced(self) -> None:
        core = SessionCore(2000, 0, hello=True)
        core.receive(bytes.fromhex(opened() + features()), 1)
        watch = core.observe("a", b"a", 2)
        core.receive(bytes.fromhex(reply(0x3B, watch.id) + state(watch.id, "free", 0, flags=1)), 3)
        pushes = "".join(state(watch.id, "granted", TOKEN + i) for i in range(MAX_QUEUED_STATES))
        core.receive(bytes.fromhex(pushes), 4)
        self.assertEqual(len(watch.states), 1)
        only = watch.states[0]
        self.assertEqual((only.event, only.held, only.coalesced), ("held", True, True))
        self.assertEqual(only.token, TOKEN + MAX_QUEUED_STATES - 1)


class WithoutTheExtension(unittest.TestCase):
    def test_opened_then_error_0x13_is_unsupported(self) -> None:
        replay(vector([
            {"step": "call", "call": "open", "features": 1},
            {"step": "send", "hex": "0102000007d0"},
            {"step": "send", "hex": "2400000001"},
            {"step": "recv", "hex": opened() + error(0x13, b"unknown message type: 0x24")},
            {"step": "event", "event": "unsupported"},
        ]))
        core = SessionCore(2000, 0, hello=True)
        core.receive(bytes.fromhex(opened() + error(0x13)), 1)
        self.assertTrue(core.no_extension)
        self.assertFalse(core.v1_only)

    def test_error_0x13_later_is_a_plain_server_error(self) -> None:
        core = SessionCore(2000, 0, hello=True)
        core.receive(bytes.fromhex(opened() + features()), 1)
        core.receive(bytes.fromhex(error(0x13)), 2)
        self.assertFalse(core.no_extension)

    def test_a_plain_session_sends_no_hello(self) -> None:
        core = SessionCore(2000, 0)
        self.assertEqual(bytes(core.outbox), frames2.open_frame(2000))
        core.receive(bytes.fromhex(opened()), 1)
        self.assertFalse(core.awaiting_reply())
        self.assertFalse(core.extended)


class ReplayerCatchesExtensionMistakes(unittest.TestCase):
    def test_a_wrong_state_fails(self) -> None:
        with self.assertRaises(Mismatch):
            replay(vector(OPEN_ASKING + [
                {"step": "call", "call": "observe", "watch": 1, "lock": "a"},
                {"step": "send", "hex": "270000000101" + b"a".hex()},
                {"step": "recv", "hex": reply(0x3B, 1) + state(1, "free", 0, flags=1)},
                {"step": "event", "event": "observing", "watch": 1},
                told(1, "free", 0, initial=False),
            ]))


if __name__ == "__main__":
    unittest.main()
