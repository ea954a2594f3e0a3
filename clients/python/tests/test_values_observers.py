"""Values and observers (protocol v2's extension) against the real server
binary, and against a small fake older server written here (one that
answers HELLO with ERROR 0x13, as a server without the extension does)."""

from __future__ import annotations

import asyncio
import gc
import json
import queue
import tempfile
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import monolock
from monolock import InvalidArgument, LockLost, LockState, LossReason, Unsupported
from monolock._core import pool as rules
from support import CLIENT_IDENTITY, PATIENCE, REPO, Server, SharedServer, client_context, pki_dir, tls_args


class Events:
    """An election helper's callbacks, queued in the order they fired."""

    def __init__(self) -> None:
        self.queue: "queue.Queue[Tuple[Any, ...]]" = queue.Queue()

    def started(self, token: int) -> None:
        self.queue.put(("started", token))

    def stopped(self) -> None:
        self.queue.put(("stopped",))

    def new_leader(self, state: LockState) -> None:
        self.queue.put(("new_leader", state.token, state.value))

    def next(self) -> Tuple[Any, ...]:
        return self.queue.get(timeout=PATIENCE)

    def both(self, first: str, second: str) -> Tuple[Tuple[Any, ...], Tuple[Any, ...]]:
        """The next event of each kind, in whichever order they come (a
        candidate's grant and its observation of it ride on two sessions)."""
        found: Dict[str, Tuple[Any, ...]] = {}
        while len(found) < 2:
            event = self.next()
            if event[0] in (first, second) and event[0] not in found:
                found[event[0]] = event
        return found[first], found[second]

    def until(self, kind: str) -> Tuple[Any, ...]:
        """The next event of this kind (others before it are dropped)."""
        while True:
            event = self.next()
            if event[0] == kind:
                return event

    def elector(self, client: monolock.Client, name: str, lease: float, value: str) -> monolock.LeaderElector:
        return monolock.LeaderElector(
            client, name, lease, value,
            on_started_leading=self.started,
            on_stopped_leading=self.stopped,
            on_new_leader=self.new_leader,
        )


def run_in_thread(elector: monolock.LeaderElector) -> threading.Thread:
    thread = threading.Thread(target=elector.run, daemon=True)
    thread.start()
    return thread


class Values(SharedServer, unittest.TestCase):
    def test_a_value_is_seen_through_holder_of_a_second_client(self) -> None:
        first, second = monolock.Client(self.server.addr), monolock.Client(self.server.addr)
        self.assertEqual(second.holder("v/holder"), second.holder("v/holder"))
        free = second.holder("v/holder")
        self.assertFalse(free.held)
        self.assertEqual((free.event, free.value, free.initial, free.coalesced), ("free", "", False, False))
        with first.lock("v/holder", lease=5.0, value="10.0.0.7:9000") as lock:
            self.assertEqual(lock.value, "10.0.0.7:9000")
            seen = second.holder("v/holder")
            self.assertEqual((seen.held, seen.event, seen.token, seen.value), (True, "held", lock.token, "10.0.0.7:9000"))
            self.assertIsNotNone(seen.since)
            assert seen.since is not None
            self.assertLess(abs(seen.since.timestamp() - time.time()), 60)
            lock.set_value("10.0.0.7:9001")
            self.assertEqual(second.holder("v/holder").value, "10.0.0.7:9001")
            self.assertEqual(lock.value, "10.0.0.7:9001")
        after = second.holder("v/holder")
        self.assertFalse(after.held)
        self.assertEqual(after.value, "")

    def test_an_empty_value_is_none(self) -> None:
        client = monolock.Client(self.server.addr)
        lock = client.try_lock("v/empty", lease=5.0, value="")
        assert lock is not None
        self.assertEqual(client.holder("v/empty").value, "")
        lock.release()

    def test_a_value_over_1024_bytes_is_refused_before_connecting(self) -> None:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            listener.setblocking(False)
            client = monolock.Client("127.0.0.1:%d" % listener.getsockname()[1])
            for value in ["x" * 1025, "é" * 513]:
                with self.assertRaises(InvalidArgument) as raised:
                    client.lock("v/long", lease=5.0, value=value)
                self.assertEqual(str(raised.exception), f"value of {len(value.encode())} bytes is above the maximum of 1024 bytes")
                self.assertFalse(raised.exception.is_temporary)
                with self.assertRaises(InvalidArgument):
                    client.try_lock("v/long", lease=5.0, value=value)
            with self.assertRaises(BlockingIOError):
                listener.accept()  # nothing connected
        with monolock.Client(self.server.addr).lock("v/long", lease=5.0, value="é" * 512) as lock:
            self.assertEqual(len(lock.value.encode()), 1024)
            with self.assertRaises(InvalidArgument):
                lock.set_value("x" * 1025)
            self.assertEqual(lock.value, "é" * 512)

    def test_set_value_on_a_lost_lock_raises_the_loss(self) -> None:
        lock = monolock.Client(self.server.addr).lock("v/lost", lease=5.0, value="a")
        self.server.force_release("v/lost")
        self.assertIsNotNone(lock.wait_lost(PATIENCE))
        with self.assertRaises(LockLost) as raised:
            lock.set_value("b")
        self.assertIs(raised.exception.reason, LossReason.FORCED)

    def test_values_and_observers_under_force_v1_are_unsupported(self) -> None:
        client = monolock.Client(self.server.addr, force_v1=True)
        for call in (
            lambda: client.lock("v/v1", lease=5.0, value="x"),
            lambda: client.observe("v/v1"),
            lambda: client.holder("v/v1"),
        ):
            with self.assertRaises(Unsupported) as raised:
                call()
            self.assertIn("protocol version 1 has no lock values or observers", str(raised.exception))
            self.assertFalse(raised.exception.is_temporary)
        with client.lock("v/v1", lease=5.0) as lock:
            with self.assertRaises(Unsupported):
                lock.set_value("x")


class Observations(SharedServer, unittest.TestCase):
    def test_set_value_is_seen_by_an_observer(self) -> None:
        client = monolock.Client(self.server.addr)
        with client.observe("o/value") as states:
            initial = states.get(PATIENCE)
            assert initial is not None
            self.assertEqual((initial.event, initial.held, initial.initial), ("free", False, True))
            lock = client.lock("o/value", lease=5.0, value="a:1")
            granted = states.get(PATIENCE)
            assert granted is not None
            self.assertEqual((granted.event, granted.token, granted.value), ("granted", lock.token, "a:1"))
            lock.set_value("a:2")
            changed = states.get(PATIENCE)
            assert changed is not None
            self.assertEqual((changed.event, changed.held, changed.token, changed.value), ("value", True, lock.token, "a:2"))
            lock.release()
            released = states.get(PATIENCE)
            assert released is not None
            self.assertEqual((released.event, released.held, released.token, released.reason), ("released", False, lock.token, "released"))

    def test_hand_ons_are_observed_in_token_order_released_then_granted(self) -> None:
        holders = monolock.Client(self.server.addr)
        observer = monolock.Client(self.server.addr)
        first = holders.lock("o/order", lease=5.0, value="h0")
        seen: List[LockState] = []
        with observer.observe("o/order") as states:
            initial = states.get(PATIENCE)
            assert initial is not None
            self.assertEqual((initial.event, initial.token, initial.value, initial.initial), ("held", first.token, "h0", True))
            # Four waiters queue behind the holder, each in a thread of its
            # own; each releases as soon as it is granted.
            granted_tokens: "queue.Queue[int]" = queue.Queue()

            def wait_then_release(i: int) -> None:
                lock = holders.lock("o/order", lease=5.0 + i, value=f"h{i}")
                granted_tokens.put(lock.token)
                lock.release()

            threads = [threading.Thread(target=wait_then_release, args=(i,)) for i in range(1, 5)]
            for i, thread in enumerate(threads, 1):
                thread.start()
                # Queue them in order, as the admin API shows them waiting.
                end = time.monotonic() + PATIENCE
                while len(self.server.waiters("o/order")) < i:
                    self.assertLess(time.monotonic(), end)
                    time.sleep(0.002)
            first.release()
            for thread in threads:
                thread.join(PATIENCE)
            # Four hand-ons (RELEASED then GRANTED each), then the last release.
            while len(seen) < 2 * 4 + 1:
                state = states.get(PATIENCE)
                assert state is not None, "an observation stopped early"
                self.assertFalse(state.coalesced)
                seen.append(state)
        self.assertEqual([s.event for s in seen], ["released", "granted"] * 4 + ["released"])
        tokens = [s.token for s in seen]
        self.assertEqual(tokens, sorted(tokens), "never an older holder after a newer one")
        for released, granted in zip(seen[0:8:2], seen[1:8:2]):
            self.assertLess(released.token, granted.token)
            self.assertEqual(released.reason, "released")
            self.assertTrue(granted.held)
        self.assertEqual([s.value for s in seen[1:8:2]], ["h1", "h2", "h3", "h4"])
        self.assertEqual({s.token for s in seen[1:8:2]}, set(granted_tokens.queue))

    def test_breaking_out_of_the_loop_stops_the_observation(self) -> None:
        observation = monolock.Client(self.server.addr).observe("o/break")
        session = observation._session
        self.assertEqual(len(session.core.watches), 1)
        for state in observation:
            self.assertTrue(state.initial)
            break
        del observation
        gc.collect()
        # UNOBSERVE is written when the observation is collected; the watch
        # is gone once UNOBSERVED is read.
        end = time.monotonic() + PATIENCE
        while session.core.watches:
            self.assertLess(time.monotonic(), end, "the watch was never unobserved")
            time.sleep(0.002)

    def test_get_times_out_and_close_ends_the_iteration(self) -> None:
        client = monolock.Client(self.server.addr)
        states = client.observe("o/close")
        self.assertIsNotNone(states.get(PATIENCE))
        started = time.monotonic()
        self.assertIsNone(states.get(0.05))
        self.assertGreaterEqual(time.monotonic() - started, 0.05)
        states.close()
        self.assertEqual(list(states), [])


class ObservationEnds(unittest.TestCase):
    def test_an_observation_ends_with_an_error_when_the_server_is_killed(self) -> None:
        server = Server()
        try:
            states = monolock.Client(server.addr).observe("o/killed")
            self.assertIsNotNone(states.get(PATIENCE))
            server.proc.kill()
            with self.assertRaises(LockLost) as raised:
                states.get(PATIENCE)
            self.assertIs(raised.exception.reason, LossReason.CONNECTION)
            self.assertTrue(str(raised.exception).startswith('observation of lock "o/killed" ended (connection)'), str(raised.exception))
        finally:
            server.stop()


    def test_a_server_shutdown_ends_the_observation_with_shutdown(self) -> None:
        server = Server()
        try:
            states = monolock.Client(server.addr).observe("o/shutdown")
            self.assertIsNotNone(states.get(PATIENCE))
            server.signal(signal.SIGTERM)
            with self.assertRaises(LockLost) as raised:
                for _ in range(3):  # nothing is held: at most the end itself
                    states.get(PATIENCE)
            self.assertIs(raised.exception.reason, LossReason.SHUTDOWN)
            self.assertIn('observation of lock "o/shutdown" ended (shutdown)', str(raised.exception))
        finally:
            server.stop()

    def test_an_async_observation_ends_with_an_error_when_the_server_is_killed(self) -> None:
        server = Server()

        async def scenario() -> None:
            seen: List[LockState] = []
            with self.assertRaises(LockLost) as raised:
                async with monolock.AsyncClient(server.addr).observe("o/a-killed") as states:
                    async for state in states:
                        seen.append(state)
                        server.proc.kill()
            self.assertEqual([s.event for s in seen], ["free"])
            self.assertIs(raised.exception.reason, LossReason.CONNECTION)
            self.assertIn('observation of lock "o/a-killed" ended (connection)', str(raised.exception))

        try:
            asyncio.run(scenario())
        finally:
            server.stop()


class AsyncObservations(SharedServer, unittest.IsolatedAsyncioTestCase):
    async def test_async_for_yields_the_states_and_holder_sees_the_value(self) -> None:
        client = monolock.AsyncClient(self.server.addr)
        seen: List[LockState] = []
        async with client.observe("a/observe") as states:
            async for state in states:
                seen.append(state)
                if state.initial:
                    lock = await client.lock("a/observe", lease=5.0, value="a:1")
                    held = await client.holder("a/observe")
                    self.assertEqual((held.held, held.token, held.value), (True, lock.token, "a:1"))
                    await lock.set_value("a:2")
                elif state.event == "value":
                    await lock.release()
                elif state.event == "released":
                    break
        self.assertEqual([s.event for s in seen], ["free", "granted", "value", "released"])
        self.assertEqual([s.value for s in seen], ["", "a:1", "a:2", ""])

    async def test_an_async_observation_closed_early_yields_nothing(self) -> None:
        client = monolock.AsyncClient(self.server.addr)
        never = client.observe("a/early")
        never.close()
        self.assertIsNone(await never.get())
        self.assertEqual([state async for state in never], [])
        states = client.observe("a/early")
        self.assertIs(await states.start(), states)
        self.assertIs(await states.start(), states)  # registered once
        initial = await states.get(PATIENCE)
        assert initial is not None
        self.assertTrue(initial.initial)
        self.assertIsNone(await states.get(0.01))
        with self.assertRaises(InvalidArgument):
            await states.get(-1.0)
        await states.aclose()
        self.assertIsNone(await states.get())

    async def test_async_values_are_checked_before_connecting(self) -> None:
        client = monolock.AsyncClient("127.0.0.1:1")
        with self.assertRaises(InvalidArgument):
            await client.lock("a/long", lease=5.0, value="x" * 1025)
        with self.assertRaises(Unsupported):
            await monolock.AsyncClient(self.server.addr, force_v1=True).holder("a/v1")

    async def test_a_cancelled_async_elector_resigns(self) -> None:
        client = monolock.AsyncClient(self.server.addr)
        started: "asyncio.Queue[int]" = asyncio.Queue()
        stopped: List[str] = []
        elector = monolock.AsyncLeaderElector(
            client, "a/cancelled", 2.0, "x",
            on_started_leading=started.put_nowait,
            on_stopped_leading=lambda: stopped.append("stopped"),
        )
        run = asyncio.ensure_future(elector.run())
        token = await asyncio.wait_for(started.get(), PATIENCE)
        self.assertTrue(elector.leading)
        run.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await run
        self.assertEqual(stopped, ["stopped"])
        after = await client.holder("a/cancelled")
        self.assertFalse(after.held and after.token == token)

    async def test_async_election_hands_over_when_the_leader_resigns(self) -> None:
        client = monolock.AsyncClient(self.server.addr)
        events: Dict[str, "asyncio.Queue[Tuple[Any, ...]]"] = {"a": asyncio.Queue(), "b": asyncio.Queue()}

        def elector(who: str, lease: float) -> monolock.AsyncLeaderElector:
            async def started(token: int) -> None:
                await events[who].put(("started", token))

            return monolock.AsyncLeaderElector(
                client, "a/leader", lease, f"{who}:1",
                on_started_leading=started,
                on_stopped_leading=lambda: events[who].put_nowait(("stopped",)),
                on_new_leader=lambda state: events[who].put_nowait(("new_leader", state.token, state.value)),
            )

        async def until(who: str, kind: str) -> Tuple[Any, ...]:
            while True:
                event = await asyncio.wait_for(events[who].get(), PATIENCE)
                if event[0] == kind:
                    return event

        async def both(who: str, first: str, second: str) -> Tuple[Tuple[Any, ...], Tuple[Any, ...]]:
            found: Dict[str, Tuple[Any, ...]] = {}
            while len(found) < 2:
                event = await asyncio.wait_for(events[who].get(), PATIENCE)
                if event[0] in (first, second) and event[0] not in found:
                    found[event[0]] = event
            return found[first], found[second]

        a, b = elector("a", 2.0), elector("b", 3.0)
        a_run = asyncio.ensure_future(a.run())
        (_, a_token) = await until("a", "started")
        b_run = asyncio.ensure_future(b.run())
        self.assertEqual(await until("b", "new_leader"), ("new_leader", a_token, "a:1"))
        await a.resign()
        await until("a", "stopped")
        (_, b_token), new_leader = await both("b", "started", "new_leader")
        self.assertGreater(b_token, a_token)
        self.assertEqual(new_leader, ("new_leader", b_token, "b:1"))
        await a_run
        await b.resign()
        await until("b", "stopped")
        await b_run


class Election(SharedServer, unittest.TestCase):
    def test_the_second_candidate_leads_once_the_first_stops(self) -> None:
        client = monolock.Client(self.server.addr)
        a_events, b_events = Events(), Events()
        # Two leases: two sessions, as two processes would have.
        a = a_events.elector(client, "e/stop", 2.0, "a:1")
        b = b_events.elector(client, "e/stop", 3.0, "b:1")
        a_thread = run_in_thread(a)
        (_, a_token), new_leader = a_events.both("started", "new_leader")
        self.assertEqual(new_leader, ("new_leader", a_token, "a:1"))
        self.assertTrue(a.leading)
        b_thread = run_in_thread(b)
        self.assertEqual(b_events.until("new_leader"), ("new_leader", a_token, "a:1"))
        self.assertFalse(b.leading)
        a.stop()  # resigns; returns once on_stopped_leading fired
        self.assertEqual(a_events.next(), ("stopped",))
        (_, b_token), new_leader = b_events.both("started", "new_leader")
        self.assertGreater(b_token, a_token)
        self.assertEqual(new_leader, ("new_leader", b_token, "b:1"))
        a_thread.join(PATIENCE)
        self.assertFalse(a_thread.is_alive())
        self.assertTrue(a_events.queue.empty(), "a stopped candidate observes no more")
        b.set_value("b:2")
        self.assertEqual(client.holder("e/stop").value, "b:2")
        b.stop()
        self.assertEqual(b_events.until("stopped"), ("stopped",))
        b_thread.join(PATIENCE)
        self.assertFalse(client.holder("e/stop").held)

    def test_a_forced_release_ends_leadership_and_the_next_candidate_leads(self) -> None:
        client = monolock.Client(self.server.addr)
        a_events, b_events = Events(), Events()
        a = a_events.elector(client, "e/forced", 2.0, "a:1")
        b = b_events.elector(client, "e/forced", 3.0, "b:1")
        run_in_thread(a)
        (_, a_token), _ = a_events.both("started", "new_leader")
        run_in_thread(b)
        b_events.until("new_leader")
        end = time.monotonic() + PATIENCE
        while not self.server.waiters("e/forced"):
            self.assertLess(time.monotonic(), end)
            time.sleep(0.002)
        self.server.force_release("e/forced")
        # A's loss and its observation of B ride on two sessions: either first.
        (_, b_token), _ = b_events.both("started", "new_leader")
        self.assertGreater(b_token, a_token)
        self.assertEqual(a_events.both("stopped", "new_leader"), (("stopped",), ("new_leader", b_token, "b:1")))
        # A campaigns again: queued behind B, it never leads while B does.
        b.stop()
        _, a_again = a_events.until("started")
        self.assertGreater(a_again, b_token)
        a.stop()
        self.assertEqual(a_events.until("stopped"), ("stopped",))

    def test_a_killed_leader_is_followed_by_the_next_candidate(self) -> None:
        program = (
            "import sys, monolock\n"
            "e = monolock.LeaderElector(monolock.Client(sys.argv[1]), 'e/killed', 2.0, 'killed:1',\n"
            "    on_started_leading=lambda t: print('started', t, flush=True))\n"
            "e.run()\n"
        )
        env = {"PYTHONPATH": str(REPO / "clients" / "python" / "src"), "PATH": "/usr/bin:/bin"}
        with subprocess.Popen([sys.executable, "-c", program, self.server.addr], stdout=subprocess.PIPE, env=env) as leader:
            try:
                assert leader.stdout is not None
                line = leader.stdout.readline().split()
                self.assertEqual(line[0], b"started")
                killed_token = int(line[1])
                events = Events()
                elector = events.elector(monolock.Client(self.server.addr), "e/killed", 2.0, "follower:1")
                run_in_thread(elector)
                self.assertEqual(events.until("new_leader"), ("new_leader", killed_token, "killed:1"))
                leader.send_signal(signal.SIGKILL)
                (_, token), new_leader = events.both("started", "new_leader")
                self.assertGreater(token, killed_token)
                self.assertEqual(new_leader, ("new_leader", token, "follower:1"))
                elector.stop()
            finally:
                leader.kill()

    def test_a_failing_callback_ends_run_and_releases_the_lock(self) -> None:
        client = monolock.Client(self.server.addr)
        stopped: List[str] = []

        def fail(token: int) -> None:
            raise RuntimeError(f"no leading today ({token})")

        elector = monolock.LeaderElector(
            client, "e/raises", 2.0, "x", on_started_leading=fail,
            on_stopped_leading=lambda: stopped.append("stopped"),
        )
        with self.assertRaises(RuntimeError):
            elector.run()
        self.assertEqual(stopped, ["stopped"])
        self.assertFalse(client.holder("e/raises").held)
        self.assertIsNotNone(client.try_lock("e/raises", 2.0))

    def test_an_elector_on_a_v1_client_is_unsupported(self) -> None:
        elector = monolock.LeaderElector(monolock.Client(self.server.addr, force_v1=True), "e/v1", 2.0, "x")
        with self.assertRaises(Unsupported):
            elector.run()
        with self.assertRaises(InvalidArgument):
            monolock.LeaderElector(monolock.Client(self.server.addr), "e/v1", 2.0, "x" * 1025)


@unittest.skipIf(pki_dir() is None, "MONOLOCK_TEST_PKI is not set")
class OverMutualTls(unittest.TestCase):
    def test_observing_needs_the_permission_to_acquire(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            acl = Path(tmp) / "acl.json"
            acl.write_text(json.dumps({"rules": [{"identity": CLIENT_IDENTITY, "locks": ["allowed/*"]}]}))
            with Server(*tls_args(mutual=True), "--acl-file", str(acl)) as server:
                client = monolock.Client(server.addr, ssl_context=client_context(True))
                with client.observe("allowed/leader") as states:
                    with client.lock("allowed/leader", lease=5.0, value="me:1") as lock:
                        self.assertEqual(client.holder("allowed/leader").value, "me:1")
                    seen = [states.get(PATIENCE) for _ in range(3)]
                self.assertEqual([s.event if s else None for s in seen], ["free", "granted", "released"])
                self.assertEqual(seen[1].token if seen[1] else None, lock.token)
                for call in (lambda: client.observe("denied"), lambda: client.holder("denied")):
                    with self.assertRaises(LockLost) as caught:
                        call()
                    self.assertEqual(caught.exception.code, 0x18)
                    self.assertFalse(caught.exception.is_temporary)


class OlderServer:
    """A fake server of the protocol before the extension, on a free
    loopback port: OPEN is answered OPENED; a HELLO then gets ERROR 0x13
    and the close, as such a server answers any unknown frame; a plain
    session takes ACQUIRE, RELEASE and PING."""

    def __init__(self) -> None:
        self.hellos = 0
        self.opens = 0
        self._token = 1 << 40
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.addr = "127.0.0.1:%d" % self._listener.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _read(conn: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                head = self._read(conn, 6)
                assert head[:2] == b"\x01\x02", head
                self.opens += 1
                conn.sendall(struct.pack(">BQI", 0x30, self.opens, 1024))
                while True:
                    kind = self._read(conn, 1)[0]
                    if kind == 0x21:
                        claim, _mode, length = struct.unpack(">IBB", self._read(conn, 6))
                        self._read(conn, length)
                        self._token += 1
                        conn.sendall(struct.pack(">BIQ", 0x31, claim, self._token))
                    elif kind == 0x22:
                        conn.sendall(b"\x34" + self._read(conn, 4))
                    elif kind == 0x23:
                        conn.sendall(b"\x35")
                    else:
                        if kind == 0x24:
                            self.hellos += 1
                        reason = f"unknown message type: 0x{kind:02x}".encode()
                        conn.sendall(bytes([0x13, 0x13, len(reason)]) + reason)
                        conn.shutdown(socket.SHUT_WR)
                        while conn.recv(4096):
                            pass
                        return
            except (EOFError, OSError):
                return


class WithoutTheExtension(unittest.TestCase):
    def setUp(self) -> None:
        self.server = OlderServer()
        rules.PLAIN_ADDRESSES.clear()

    def tearDown(self) -> None:
        self.server.close()
        rules.PLAIN_ADDRESSES.clear()

    def assert_unsupported(self, call: Callable[[], Any]) -> None:
        with self.assertRaises(Unsupported) as raised:
            call()
        self.assertEqual(
            str(raised.exception),
            f"{self.server.addr} does not support lock values and observers "
            "(the server is older than this client): upgrade the server",
        )
        self.assertFalse(raised.exception.is_temporary)
        self.assertNotIsInstance(raised.exception, LockLost)

    def test_values_and_observers_are_unsupported_and_plain_locks_work(self) -> None:
        client = monolock.Client(self.server.addr)
        self.assert_unsupported(lambda: client.lock("old/a", lease=5.0, value="x"))
        self.assertEqual(self.server.hellos, 1)
        with client.lock("old/a", lease=5.0) as lock:
            self.assertTrue(lock.is_held())
            self.assertEqual(lock.value, "")
            self.assert_unsupported(lambda: lock.set_value("x"))
        self.assert_unsupported(lambda: client.observe("old/a"))
        self.assert_unsupported(lambda: client.holder("old/a"))
        self.assertEqual(self.server.hellos, 1, "the address is remembered: no HELLO again")

    def test_a_plain_lock_first_falls_back_without_an_error(self) -> None:
        client = monolock.Client(self.server.addr)
        lock = client.try_lock("old/b", lease=5.0)
        assert lock is not None
        lock.release()
        self.assertEqual(self.server.hellos, 1)
        self.assertEqual(self.server.opens, 2, "one session asked, the next one did not")

    def test_the_asyncio_client_is_told_the_same(self) -> None:
        async def scenario() -> None:
            client = monolock.AsyncClient(self.server.addr)
            with self.assertRaises(Unsupported):
                await client.holder("old/c")
            with self.assertRaises(Unsupported):
                await client.observe("old/c").start()
            lock = await client.lock("old/c", lease=5.0)
            with self.assertRaises(Unsupported):
                await lock.set_value("x")
            await lock.release()
            with self.assertRaises(Unsupported):
                await monolock.AsyncLeaderElector(client, "old/c", 2.0, "x").run()

        asyncio.run(scenario())
        self.assertEqual(self.server.hellos, 1)


if __name__ == "__main__":
    unittest.main()
