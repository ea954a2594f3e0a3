"""The sans-I/O core on exact instants: frames, the heartbeat schedule,
reply matching and the claim machine (the Rust client's unit tests, ported)."""

from __future__ import annotations

import unittest
from typing import Callable, Dict

from monolock import InvalidArgument, LockLost, LossReason, ProtocolError
from monolock._core import frames as _frames
from monolock._core import frames2 as _frames2
from monolock._core.address import Address, parse
from monolock._core.claim import Claim, Status
from monolock._core.exchange import Event, Exchange, Standing
from monolock._core.frames import Acquired, ServerError, Waiting
from monolock._core.pool import V1Addresses, idle_over
from monolock._core.schedule import Schedule
from monolock._core.session import ClaimState, CStatus, SessionCore, SState

MS = 1_000_000
US = 1_000
LEASE = 2000 * MS
T0 = 10_000 * MS


def acquired(token: int) -> bytes:
    return bytes([0x12]) + token.to_bytes(8, "big")


class Frames(unittest.TestCase):
    def test_acquire_bytes_match_the_protocol_page(self) -> None:
        frame = _frames.acquire(_frames.encode_name("deploy"), 2000)
        self.assertEqual(frame.hex(" "), "01 01 00 00 07 d0 00 06 64 65 70 6c 6f 79")

    def test_decode_whole_frames_only(self) -> None:
        self.assertIsNone(_frames.decode(b""))
        self.assertEqual(_frames.decode(b"\x11"), (Waiting(), 1))
        self.assertIsNone(_frames.decode(acquired(7)[:5]))
        self.assertEqual(_frames.decode(acquired(7)), (Acquired(7), 9))
        self.assertIsNone(_frames.decode(b"\x13\x02\x03ab"))
        self.assertEqual(_frames.decode(b"\x13\x02\x03abc"), (ServerError(2, "abc"), 6))
        self.assertEqual(_frames.decode(b"\x13\x01\x00"), (ServerError(1, ""), 3))
        with self.assertRaises(ProtocolError):
            _frames.decode(b"\x7f")

    def test_names_and_leases_are_checked(self) -> None:
        self.assertEqual(_frames.encode_name("a" * 255), b"a" * 255)
        self.assertEqual(_frames.encode_name(" a"), b" a")
        for bad in ["", "a" * 256, "\u00e9" * 128, "\ud800"]:
            with self.assertRaises(InvalidArgument, msg=repr(bad)):
                _frames.encode_name(bad)
        self.assertEqual(_frames.lease_ms(0.1), 100)
        self.assertEqual(_frames.lease_ms(4.35), 4350)
        self.assertEqual(_frames.lease_ms(3600), 3_600_000)
        for bad_lease in [0, 0.0004, -1, 3600.001, float("nan"), float("inf"), True]:
            with self.assertRaises(InvalidArgument, msg=repr(bad_lease)):
                _frames.lease_ms(bad_lease)
        # The bounds every client shares, each refusal naming the unit.
        for bad_lease, says in [
            (0.01, "lease 0.01 s is below the minimum of 100 ms (leases are in seconds)"),
            (10000, "lease 10000 s is above the maximum of 1 hour (leases are in seconds)"),
            (1.5005, "lease 1.5005 s is not a whole number of milliseconds (leases are in seconds)"),
        ]:
            with self.assertRaises(InvalidArgument) as caught:
                _frames.lease_ms(bad_lease)
            self.assertEqual(str(caught.exception), says)


class Addresses(unittest.TestCase):
    def test_forms(self) -> None:
        self.assertEqual(parse("a:1,b:2"), (Address("a", 1), Address("b", 2)))
        self.assertEqual(parse(["a:1", "[::1]:2"]), (Address("a", 1), Address("::1", 2)))
        self.assertEqual(str(Address("::1", 2)), "[::1]:2")
        for bad in ["a", "a:0", "a:x", ":1", "::1:2", "a:70000", ""]:
            with self.assertRaises(InvalidArgument, msg=bad):
                parse(bad)


class ScheduleRules(unittest.TestCase):
    def test_base_interval_without_rtt_is_a_quarter_lease(self) -> None:
        self.assertEqual(Schedule(LEASE).interval(), 500 * MS)

    def test_rtt_shortens_the_interval_by_twice_the_srtt(self) -> None:
        s = Schedule(LEASE)
        s.observe_rtt(50 * MS)
        self.assertEqual(s.interval(), 400 * MS)
        s.observe_rtt(100 * MS)  # EWMA alpha 0.2: 0.8*50 + 0.2*100 = 60
        self.assertEqual(s.srtt, 60 * MS)
        self.assertEqual(s.interval(), 380 * MS)

    def test_interval_never_drops_below_the_floor(self) -> None:
        s = Schedule(LEASE)
        s.observe_rtt(210 * MS)
        self.assertEqual(s.interval(), 100 * MS)
        s = Schedule(200 * MS)
        s.observe_rtt(20 * MS)
        self.assertEqual(s.interval(), 12_500 * US)
        self.assertEqual(Schedule(1 * MS).interval(), 250 * US)

    def test_intervals_are_send_to_send(self) -> None:
        s = Schedule(LEASE)
        s.observe_rtt(50 * MS)
        self.assertEqual(s.next_send(T0, T0 + 50 * MS), T0 + 400 * MS)
        # A reply later than the interval releases the next heartbeat at once.
        self.assertEqual(s.next_send(T0, T0 + 700 * MS), T0 + 700 * MS)

    def test_slow_round_trips_send_on_every_reply(self) -> None:
        s = Schedule(400 * MS)
        s.observe_rtt(50 * MS)
        self.assertEqual(s.next_send(T0, T0 + 50 * MS), T0 + 50 * MS)
        s = Schedule(400 * MS)
        s.observe_rtt(49 * MS)
        self.assertEqual(s.interval(), 25 * MS)
        self.assertEqual(s.next_send(T0, T0 + 10 * MS), T0 + 25 * MS)

    def test_deadline_is_four_fifths_of_the_lease_after_the_confirmed_send(self) -> None:
        self.assertEqual(Schedule(LEASE).deadline(T0), T0 + 1600 * MS)
        self.assertEqual(Schedule(1 * MS).deadline(T0), T0 + 800 * US)


class ReplyMatching(unittest.TestCase):
    def test_acquire_reply_grants_and_is_an_rtt_sample(self) -> None:
        ex = Exchange(LEASE, T0)
        self.assertEqual(ex.deadline(), T0 + 1600 * MS)
        self.assertIsNone(ex.next_heartbeat())
        self.assertEqual(ex.on_frame(Acquired(7), T0 + 20 * MS), Event.GRANTED)
        self.assertEqual(ex.schedule.srtt, 20 * MS)
        self.assertEqual((ex.standing, ex.token), (Standing.HELD, 7))
        self.assertEqual(ex.next_heartbeat(), T0 + 460 * MS)
        self.assertEqual(ex.deadline(), T0 + 1600 * MS)

    def test_heartbeat_reply_moves_the_deadline_to_its_send_instant(self) -> None:
        ex = Exchange(LEASE, T0)
        ex.on_frame(Acquired(7), T0 + 10 * MS)
        ex.heartbeat_sent(T0 + 480 * MS)
        self.assertIsNone(ex.next_heartbeat())
        self.assertEqual(ex.on_frame(Acquired(7), T0 + 500 * MS), Event.CONFIRMED)
        self.assertEqual(ex.deadline(), T0 + 480 * MS + 1600 * MS)

    def test_push_while_a_heartbeat_is_in_flight_confirms_nothing(self) -> None:
        ex = Exchange(LEASE, T0)
        self.assertEqual(ex.on_frame(Waiting(), T0 + 10 * MS), Event.QUEUED)
        ex.heartbeat_sent(T0 + 480 * MS)
        self.assertEqual(ex.on_frame(Acquired(9), T0 + 490 * MS), Event.GRANTED)
        self.assertEqual(ex.deadline(), T0 + 1600 * MS, "a push confirms nothing")
        self.assertIsNone(ex.next_heartbeat(), "the heartbeat is still in flight")
        self.assertEqual(ex.on_frame(Acquired(9), T0 + 500 * MS), Event.CONFIRMED)
        self.assertEqual(ex.deadline(), T0 + 480 * MS + 1600 * MS)

    def test_waiting_reply_to_a_heartbeat_then_push(self) -> None:
        ex = Exchange(LEASE, T0)
        ex.on_frame(Waiting(), T0 + 10 * MS)
        ex.heartbeat_sent(T0 + 480 * MS)
        self.assertEqual(ex.on_frame(Waiting(), T0 + 490 * MS), Event.CONFIRMED)
        self.assertEqual(ex.on_frame(Acquired(3), T0 + 600 * MS), Event.GRANTED)
        with self.assertRaises(ProtocolError):
            ex.on_frame(Acquired(3), T0 + 610 * MS)

    def test_violations(self) -> None:
        ex = Exchange(LEASE, T0)
        ex.on_frame(Acquired(5), T0)
        with self.assertRaisesRegex(ProtocolError, "no request in flight"):
            ex.on_frame(Acquired(5), T0)
        ex.heartbeat_sent(T0 + 400 * MS)
        with self.assertRaisesRegex(ProtocolError, "token 6"):
            ex.on_frame(Acquired(6), T0 + 401 * MS)
        with self.assertRaisesRegex(ProtocolError, "WAITING arrived after"):
            ex.on_frame(Waiting(), T0 + 401 * MS)
        ex = Exchange(LEASE, T0)
        ex.on_frame(Waiting(), T0)
        with self.assertRaises(ProtocolError):
            ex.on_frame(Waiting(), T0)

    def test_error_frames_end_the_session_in_any_state(self) -> None:
        self.assertEqual(Exchange(LEASE, T0).on_frame(ServerError(1, "bye"), T0), Event.CLOSED)


class ClaimMachine(unittest.TestCase):
    def test_split_and_coalesced_frames(self) -> None:
        claim = Claim("x", 2000, T0)
        claim.receive(b"\x11" + acquired(4)[:3], T0 + MS)
        self.assertEqual(claim.status, Status.WAITING)
        claim.receive(acquired(4)[3:], T0 + 2 * MS)
        self.assertEqual((claim.status, claim.token), (Status.HELD, 4))
        self.assertEqual(claim.deadline(), T0 + 1600 * MS, "the push confirmed nothing")

    def test_the_heartbeat_timer_and_the_deadline(self) -> None:
        claim = Claim("x", 2000, T0)
        claim.receive(acquired(4), T0 + 10 * MS)
        self.assertEqual(claim.next_wake(), T0 + 480 * MS)
        self.assertFalse(claim.heartbeat_due(T0 + 479 * MS))
        self.assertTrue(claim.heartbeat_due(T0 + 480 * MS))
        claim.heartbeat_sent(T0 + 480 * MS)
        self.assertEqual(claim.next_wake(), T0 + 1600 * MS, "in flight: only the deadline")
        claim.check(T0 + 1600 * MS - 1)
        self.assertEqual(claim.status, Status.HELD)
        claim.check(T0 + 1600 * MS)
        self.assertEqual(claim.status, Status.LOST)
        assert claim.loss is not None
        self.assertIs(claim.loss.reason, LossReason.EXPIRED)
        self.assertIsNone(claim.next_wake())

    def test_a_reply_read_after_the_deadline_brings_nothing_back(self) -> None:
        claim = Claim("x", 2000, T0)
        claim.receive(acquired(4), T0 + 1600 * MS)
        self.assertEqual(claim.status, Status.LOST)

    def test_error_and_violation_reasons(self) -> None:
        cases = [
            (b"\x13\x02\x05force", LossReason.FORCED, 2),
            (b"\x13\x01\x00", LossReason.SHUTDOWN, 1),
            (b"\x13\x18\x00", LossReason.SERVER_ERROR, 0x18),
            (b"\x7f", LossReason.PROTOCOL, None),
        ]
        for data, reason, code in cases:
            claim = Claim("x", 2000, T0)
            claim.receive(data, T0 + MS)
            assert claim.loss is not None
            self.assertIs(claim.loss.reason, reason)
            self.assertEqual(claim.loss.code, code)
        claim = Claim("x", 2000, T0)
        claim.receive(b"\x13\x18\x00", T0)
        assert claim.loss is not None
        self.assertFalse(claim.loss.is_temporary)
        claim = Claim("x", 2000, T0)
        claim.receive(acquired(1) + b"\x13\x02\x00", T0)
        assert claim.loss is not None
        self.assertTrue(claim.loss.is_temporary)
        self.assertIn("0x02 (closed by administrator)", str(claim.loss))

    def test_first_bytes_of_another_protocol_name_the_wrong_port(self) -> None:
        cases = [
            (b"HTTP/1.1 400 Bad Request\r\n\r\n", "is not a monolock server: an HTTP server answered"),
            (b"\x15\x03\x03\x00\x02\x02\x32", "expects TLS: the server speaks TLS on this port"),
            (b"\x16\x03\x03", "expects TLS: the server speaks TLS on this port"),
        ]
        for data, says in cases:
            for split in (1, len(data)):
                claim = Claim("x", 2000, T0)
                claim.receive(data[:split], T0 + MS)
                claim.receive(data[split:], T0 + MS)
                assert claim.loss is not None
                self.assertIs(claim.loss.reason, LossReason.PROTOCOL)
                cause = claim.loss.__cause__
                assert isinstance(cause, ProtocolError)
                self.assertTrue(cause.wrong_port, says)
                self.assertIn(says, str(claim.loss))
        # Only the very first byte tells: later, "H" is a plain violation.
        claim = Claim("x", 2000, T0)
        claim.receive(b"\x11H", T0 + MS)
        assert claim.loss is not None
        cause = claim.loss.__cause__
        assert isinstance(cause, ProtocolError)
        self.assertFalse(cause.wrong_port)
        self.assertIn("0x48", str(cause))

    def test_the_first_reason_wins(self) -> None:
        claim = Claim("x", 2000, T0)
        claim.receive(acquired(1) + b"\x13\x01\x00", T0)
        claim.closed(None)
        assert claim.loss is not None
        self.assertIs(claim.loss.reason, LossReason.SHUTDOWN)


def opened(session: int = 1, max_claims: int = 1024) -> bytes:
    return bytes([0x30]) + session.to_bytes(8, "big") + max_claims.to_bytes(4, "big")


def v2(kind: int, claim: int, tail: bytes = b"") -> bytes:
    return bytes([kind]) + claim.to_bytes(4, "big") + tail


def v2_token(kind: int, claim: int, token: int) -> bytes:
    return v2(kind, claim, token.to_bytes(8, "big"))


def v2_code(kind: int, claim: int, code: int, reason: bytes = b"") -> bytes:
    return v2(kind, claim, bytes([code, len(reason)]) + reason)


def open_session(max_claims: int = 1024) -> SessionCore:
    core = SessionCore(2000, T0)
    core.outbox.clear()
    core.receive(opened(7, max_claims), T0 + 1 * MS)
    return core


class V2Frames(unittest.TestCase):
    def test_bytes_match_the_worked_exchange(self) -> None:
        self.assertEqual(_frames2.open_frame(2000).hex(" "), "01 02 00 00 07 d0")
        self.assertEqual(
            _frames2.acquire(1, 0, b"deploy").hex(" "), "21 00 00 00 01 00 06 64 65 70 6c 6f 79"
        )
        self.assertEqual(_frames2.release(9).hex(" "), "22 00 00 00 09")

    def test_decode_whole_frames_only(self) -> None:
        frame = v2_token(0x31, 1, 0x0006B49D20000000)
        for cut in range(len(frame)):
            self.assertIsNone(_frames2.decode(frame[:cut]))
        self.assertEqual(_frames2.decode(frame), ((0x31, 1, 0x0006B49D20000000, 0, ""), 13))
        refused = v2_code(0x36, 9, 0x20, b"unknown claim id: 9")
        self.assertIsNone(_frames2.decode(refused[:-1]))
        self.assertEqual(_frames2.decode(refused), ((0x36, 9, 0, 0x20, "unknown claim id: 9"), len(refused)))
        self.assertEqual(_frames2.decode(opened(1, 1024)), ((0x30, 0, 1, 1024, ""), 13))
        self.assertEqual(_frames2.decode(b"\x35"), ((0x35, 0, 0, 0, ""), 1))
        with self.assertRaises(ProtocolError):
            _frames2.decode(b"\x12")  # a v1 frame on a v2 session


class SessionMachine(unittest.TestCase):
    def test_open_then_claims_with_their_replies_in_order(self) -> None:
        core = SessionCore(2000, T0)
        self.assertEqual(bytes(core.outbox), _frames2.open_frame(2000))
        core.outbox.clear()
        core.receive(opened(7, 3), T0 + 1 * MS)
        self.assertIs(core.state, SState.OPEN)
        self.assertEqual((core.session_id, core.max_claims), (7, 3))
        a = core.acquire("a", b"a", _frames2.MODE_WAIT, T0 + 10 * MS)
        b = core.acquire("b", b"b", _frames2.MODE_TRY, T0 + 10 * MS)
        self.assertEqual(bytes(core.outbox), _frames2.acquire(a.id, 0, b"a") + _frames2.acquire(b.id, 1, b"b"))
        core.receive(v2_token(0x31, a.id, 5) + v2(0x33, b.id), T0 + 12 * MS)
        self.assertIs(a.status, CStatus.HELD)
        self.assertEqual(a.token, 5)
        self.assertIs(b.status, CStatus.BUSY)
        self.assertEqual(core.in_use(), 1)
        core.outbox.clear()
        core.release(a, T0 + 20 * MS)
        self.assertEqual(bytes(core.outbox), _frames2.release(a.id))
        self.assertIs(a.status, CStatus.RELEASING)
        core.receive(v2(0x34, a.id), T0 + 21 * MS)
        self.assertIs(a.status, CStatus.RELEASED)
        self.assertEqual(core.in_use(), 0)
        self.assertEqual(core.idle_since, T0 + 21 * MS)

    def test_every_reply_confirms_its_send_instant_and_a_push_confirms_nothing(self) -> None:
        core = open_session()
        self.assertEqual(core.deadline(), T0 + 1600 * MS)
        claim = core.acquire("a", b"a", _frames2.MODE_WAIT, T0 + 100 * MS)
        core.receive(v2(0x32, claim.id), T0 + 101 * MS)
        self.assertEqual(core.deadline(), T0 + 100 * MS + 1600 * MS)
        core.receive(v2_token(0x37, claim.id, 9), T0 + 900 * MS)
        self.assertIs(claim.status, CStatus.HELD)
        self.assertEqual(core.deadline(), T0 + 100 * MS + 1600 * MS, "a push moves nothing")
        core.check(T0 + 1700 * MS - 1)
        self.assertIs(claim.status, CStatus.HELD)
        core.check(T0 + 1700 * MS)
        self.assertIs(claim.status, CStatus.LOST)
        assert claim.loss is not None
        self.assertIs(claim.loss.reason, LossReason.EXPIRED)

    def test_ping_only_when_nothing_is_in_flight(self) -> None:
        core = open_session()
        # OPENED answered the OPEN sent at T0: the next PING is base later.
        self.assertEqual(core.next_wake(), T0 + 500 * MS - 2 * MS)
        claim = core.acquire("a", b"a", _frames2.MODE_WAIT, T0 + 2 * MS)
        core.outbox.clear()
        self.assertFalse(core.ping_due(T0 + 600 * MS), "the ACQUIRE is in flight")
        self.assertEqual(core.next_wake(), core.deadline())
        core.receive(v2_token(0x31, claim.id, 1), T0 + 601 * MS)
        due = core.next_wake()
        assert due is not None
        self.assertTrue(core.ping_due(due))
        self.assertEqual(bytes(core.outbox), _frames2.PING_FRAME)
        self.assertFalse(core.ping_due(due + 1), "one PING in flight")
        core.receive(b"\x35", due + 1 * MS)
        self.assertEqual(core.deadline(), due + 1600 * MS)

    def test_a_session_end_loses_every_claim_a_release_in_flight_included(self) -> None:
        core = open_session()
        held = core.acquire("a", b"a", 0, T0 + 2 * MS)
        waiting = core.acquire("b", b"b", 0, T0 + 2 * MS)
        releasing = core.acquire("c", b"c", 0, T0 + 2 * MS)
        core.receive(v2_token(0x31, held.id, 1) + v2(0x32, waiting.id) + v2_token(0x31, releasing.id, 2), T0 + 3 * MS)
        core.release(releasing, T0 + 4 * MS)
        core.receive(b"\x13\x01\x00", T0 + 5 * MS)
        self.assertIs(core.state, SState.CLOSED)
        for claim in (held, waiting, releasing):
            self.assertIs(claim.status, CStatus.LOST)
            assert claim.loss is not None
            self.assertIs(claim.loss.reason, LossReason.SHUTDOWN)
        self.assertEqual(core.changed[-3:], [held, waiting, releasing])

    def test_no_session_end_confirms_a_release(self) -> None:
        # Only RELEASED confirms a release: whatever ends the session (an
        # EOF, an ERROR, a shutdown, a failure, the deadline, the client's
        # own close), a RELEASE still in flight is lost for that reason,
        # as the Rust client reports it.
        ends = {
            "eof": (lambda core: core.closed(None), LossReason.CONNECTION),
            "error": (lambda core: core.receive(b"\x13\x04\x00", T0 + 5 * MS), LossReason.SERVER_ERROR),
            "failure": (lambda core: core.closed(ConnectionResetError()), LossReason.CONNECTION),
            "deadline": (lambda core: core.check(core.deadline()), LossReason.EXPIRED),
            "shutdown": (lambda core: core.receive(b"\x13\x01\x00", T0 + 5 * MS), LossReason.SHUTDOWN),
            "closing": (lambda core: core.fail(LockLost.connection()), LossReason.CONNECTION),
        }
        for what, (end, reason) in ends.items():
            with self.subTest(end=what):
                core = open_session()
                releasing = core.acquire("c", b"c", 0, T0 + 2 * MS)
                core.receive(v2_token(0x31, releasing.id, 2), T0 + 3 * MS)
                core.release(releasing, T0 + 4 * MS)
                end(core)
                self.assertIs(releasing.status, CStatus.LOST)
                self.assertEqual(releasing.history, [CStatus.HELD, CStatus.LOST])
                assert releasing.loss is not None
                self.assertIs(releasing.loss.reason, reason)
                self.assertIn('lock "c" lost', str(releasing.loss))

    def test_a_release_may_cross_a_grant_and_a_revoke(self) -> None:
        core = open_session()
        crossed = core.acquire("a", b"a", 0, T0 + 2 * MS)
        revoked = core.acquire("b", b"b", 0, T0 + 2 * MS)
        core.receive(v2(0x32, crossed.id) + v2_token(0x31, revoked.id, 3), T0 + 3 * MS)
        core.release(crossed, T0 + 4 * MS)
        core.release(revoked, T0 + 4 * MS)
        core.receive(v2_token(0x37, crossed.id, 4) + v2(0x34, crossed.id), T0 + 5 * MS)
        self.assertIs(crossed.status, CStatus.RELEASED)
        self.assertEqual(crossed.token, 4)
        core.receive(v2_code(0x38, revoked.id, 0x08, b"force-release"), T0 + 6 * MS)
        self.assertIs(revoked.status, CStatus.LOST)
        assert revoked.loss is not None
        self.assertIs(revoked.loss.reason, LossReason.FORCED)
        self.assertEqual(revoked.loss.code, 0x02, "reported under the v1 code")
        self.assertEqual(core.in_use(), 1, "the RELEASE's reply is still due")
        core.receive(v2_code(0x36, revoked.id, 0x20), T0 + 7 * MS)
        self.assertEqual(core.in_use(), 0)
        self.assertIs(core.state, SState.OPEN)

    def test_a_give_up_while_the_acquire_is_in_flight_releases_what_it_brings(self) -> None:
        core = open_session()
        claim = core.acquire("a", b"a", 0, T0 + 2 * MS)
        core.release(claim, T0 + 3 * MS)
        core.outbox.clear()
        core.receive(v2_token(0x31, claim.id, 1), T0 + 4 * MS)
        self.assertIs(claim.status, CStatus.RELEASING)
        self.assertEqual(bytes(core.outbox), _frames2.release(claim.id))

    def test_refusals_leave_the_session_open(self) -> None:
        core = open_session()
        acl = core.acquire("a", b"a", 0, T0 + 2 * MS)
        full = core.acquire("b", b"b", 0, T0 + 2 * MS)
        core.receive(v2_code(0x36, acl.id, 0x24, b"acl") + v2_code(0x36, full.id, 0x09), T0 + 3 * MS)
        assert acl.refused is not None and full.refused is not None
        self.assertEqual(acl.refused.code, 0x18)
        self.assertFalse(acl.refused.is_temporary)
        self.assertEqual(full.refused.code, 0x09)
        self.assertTrue(full.refused.is_temporary)
        self.assertIs(core.state, SState.OPEN)

    def test_violations_close_the_session(self) -> None:
        cases: Dict[str, Callable[[ClaimState], bytes]] = {
            "another claim's reply": lambda a: v2(0x32, a.id + 1),
            "a reply with nothing in flight": lambda a: v2(0x32, a.id) + b"\x35",
            "a grant of a held claim": lambda a: v2_token(0x31, a.id, 1) + v2_token(0x37, a.id, 2),
            "a v1 frame": lambda a: b"\x11",
        }
        for what, data in cases.items():
            core = open_session()
            claim = core.acquire("a", b"a", 0, T0 + 2 * MS)
            core.receive(data(claim), T0 + 3 * MS)
            self.assertIs(core.state, SState.CLOSED, what)
            assert core.loss is not None
            self.assertIs(core.loss.reason, LossReason.PROTOCOL_VIOLATION, what)
            self.assertIs(claim.status, CStatus.LOST, what)

    def test_idle_time_starts_when_the_last_claim_ends(self) -> None:
        core = open_session()
        self.assertIsNone(core.idle_since, "opened for a claim that is about to come")
        claim = core.acquire("a", b"a", 0, T0 + 2 * MS)
        core.receive(v2(0x32, claim.id), T0 + 3 * MS)
        core.release(claim, T0 + 4 * MS)
        core.receive(v2(0x34, claim.id), T0 + 5 * MS)
        self.assertEqual(core.idle_since, T0 + 5 * MS)

    def test_a_claim_on_an_ended_session_was_never_sent(self) -> None:
        core = open_session()
        core.receive(b"\x13\x03\x00", T0 + 2 * MS)
        core.outbox.clear()
        claim = core.acquire("a", b"a", 0, T0 + 3 * MS)
        self.assertIs(claim.status, CStatus.LOST)
        self.assertTrue(claim.unsent)
        self.assertEqual(bytes(core.outbox), b"")

    def test_a_v1_server_answers_the_open_with_0x10(self) -> None:
        core = SessionCore(2000, T0)
        core.receive(b"\x13\x10\x00", T0 + 1 * MS)
        self.assertTrue(core.v1_only)
        self.assertIs(core.state, SState.CLOSED)
        http = SessionCore(2000, T0)
        http.receive(b"HTTP/1.1 400", T0 + 1 * MS)
        assert http.loss is not None and isinstance(http.loss.__cause__, ProtocolError)
        self.assertTrue(http.loss.__cause__.wrong_port)


class PoolRules(unittest.TestCase):
    def test_a_session_without_claims_is_closed_after_20_s(self) -> None:
        core = open_session()
        claim = core.acquire("a", b"a", 0, T0 + 2 * MS)
        core.receive(v2_token(0x31, claim.id, 1), T0 + 3 * MS)
        self.assertFalse(idle_over(core, T0 + 60_000 * MS), "a session carrying a claim is kept")
        core.release(claim, T0 + 4 * MS)
        core.receive(v2(0x34, claim.id), T0 + 5 * MS)
        self.assertFalse(idle_over(core, T0 + 5 * MS + 20_000 * MS - 1))
        self.assertTrue(idle_over(core, T0 + 5 * MS + 20_000 * MS))


class V1Memory(unittest.TestCase):
    def test_a_v1_only_address_is_remembered_for_five_minutes(self) -> None:
        memory = V1Addresses()
        key = ("127.0.0.1", 7070, None, None)
        other = ("127.0.0.1", 7071, None, None)
        memory.remember(key, T0)
        self.assertTrue(memory.is_v1(key, T0))
        self.assertFalse(memory.is_v1(other, T0))
        self.assertTrue(memory.is_v1(key, T0 + 300_000 * MS - 1))
        self.assertFalse(memory.is_v1(key, T0 + 300_000 * MS), "v2 is tried again after 5 minutes")
        self.assertFalse(memory.is_v1(key, T0), "an ended memory is forgotten")
        memory.remember(key, T0)
        memory.forget(key)  # the address failed to connect
        self.assertFalse(memory.is_v1(key, T0 + 1))


if __name__ == "__main__":
    unittest.main()
