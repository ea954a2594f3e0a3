"""Protocol v2 sessions: many claims on one connection, released with a
confirmation, lost together, never shared with a forked child, and v1
for a server that speaks only v1."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
import warnings
import weakref
from typing import List, Optional
from unittest import mock

import monolock
from monolock import LockLost, LossReason
from monolock._core import pool as rules
from support import PATIENCE, REPO, Proxy, Server, SharedServer, confirmed_after, eventually

#: How many release-then-try_lock rounds must all succeed.
ROUNDS = 1000


def holder_addr(server: Server, name: str) -> str:
    """The connection (the session) that holds `name`, as the server says."""
    lock = server.lock(name)
    assert lock is not None, f"nobody holds {name!r}"
    return str(lock["holder"]["remote_addr"])


def sessions(server: Server) -> int:
    """Open protocol connections (each v2 session is one), as the admin API
    counts them."""
    info = server._request("GET", "/api/info")
    assert info is not None
    return int(info["connections"])


def open_session(address: str, lease: float) -> None:
    """Opens the process's session to `address` with this lease, with the
    default bounds: a client with a short `connect_timeout` (meant for the
    release) then finds it open, however long the machine takes to open
    one (the lock taken here is released; the session stays, idle)."""
    monolock.Client(address).lock("session/opener", lease=lease).release()


class Sessions(SharedServer, unittest.TestCase):
    def test_locks_of_one_lease_share_one_session(self) -> None:
        client = monolock.Client(self.server.addr)
        locks = [client.lock(f"shared/{i}", lease=5.0) for i in range(5)]
        self.assertEqual(len({holder_addr(self.server, f"shared/{i}") for i in range(5)}), 1)
        other = monolock.Client(self.server.addr).lock("shared/other-lease", lease=6.0)
        self.assertNotEqual(
            holder_addr(self.server, "shared/other-lease"), holder_addr(self.server, "shared/0")
        )
        for lock in [*locks, other]:
            lock.release()

    def test_release_then_try_lock_always_succeeds_in_this_process(self) -> None:
        # Two leases: two sessions, so the try_lock comes from another
        # connection than the release, as another process's would.
        client = monolock.Client(self.server.addr)
        end = time.monotonic() + 3 * PATIENCE
        for i in range(ROUNDS):
            self.assertLess(time.monotonic(), end, f"{ROUNDS} rounds took too long")
            client.lock("confirmed", lease=5.0).release()
            taken = client.try_lock("confirmed", lease=6.0)
            self.assertIsNotNone(taken, f"round {i}: the released lock was still busy")
            assert taken is not None
            taken.release()

    def test_release_then_try_lock_always_succeeds_in_another_process(self) -> None:
        with subprocess.Popen(
            [sys.executable, "-c", TRY_LOCK_CHILD, self.server.addr],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO / "clients" / "python" / "src")},
            text=True,
        ) as child:
            try:
                assert child.stdin is not None and child.stdout is not None
                client = monolock.Client(self.server.addr)
                end = time.monotonic() + 3 * PATIENCE
                for i in range(ROUNDS):
                    self.assertLess(time.monotonic(), end, f"{ROUNDS} rounds took too long")
                    client.lock("confirmed/child", lease=5.0).release()
                    child.stdin.write("try\n")
                    child.stdin.flush()
                    self.assertEqual(child.stdout.readline().strip(), "taken", f"round {i}")
            finally:
                child.kill()

    def test_a_force_release_ends_only_that_claim(self) -> None:
        client = monolock.Client(self.server.addr)
        forced = client.lock("only/forced", lease=1.0)
        kept = client.lock("only/kept", lease=1.0)
        self.assertEqual(holder_addr(self.server, "only/forced"), holder_addr(self.server, "only/kept"))
        self.server.force_release("only/forced")
        loss = forced.wait_lost(PATIENCE)
        assert loss is not None
        self.assertIs(loss.reason, LossReason.FORCED)
        self.assertEqual(loss.code, 0x02)
        # The session goes on: its next heartbeat is confirmed.
        confirmed_after(lambda: kept.deadline)
        self.assertTrue(kept.is_held())
        self.assertFalse(kept.lost_event.is_set())
        kept.release()
        eventually("the lock to be free", lambda: self.server.lock("only/kept") is None)

    def test_a_garbage_collected_lock_is_released_by_the_session(self) -> None:
        client = monolock.Client(self.server.addr)
        kept = client.lock("gc/kept", lease=5.0)
        lock: Optional[monolock.Lock] = client.lock("gc/dropped", lease=5.0)
        del lock
        eventually("the dropped lock to be released", lambda: self.server.lock("gc/dropped") is None)
        self.assertTrue(kept.is_held())
        kept.release()

    def test_a_session_without_claims_is_closed_after_its_idle_time(self) -> None:
        with mock.patch.object(rules, "KEEP_IDLE_NS", 50_000_000):
            with Server() as server:
                client = monolock.Client(server.addr)
                client.lock("idle", lease=5.0).release()
                eventually("the idle session to close", lambda: sessions(server) == 0)

    def test_sessions_without_idle_time_never_fail_a_claim(self) -> None:
        # No idle time at all: a session closes as soon as its last claim
        # ends, and the next claim races that close. It must go to a new
        # session, which does not close before its first claim.
        with mock.patch.object(rules, "KEEP_IDLE_NS", 0):
            client = monolock.Client(self.server.addr)
            for _ in range(300):
                with client.lock("idle-race", lease=5.0) as lock:
                    self.assertTrue(lock.is_held())

            async def use() -> None:
                client = monolock.AsyncClient(self.server.addr)
                for _ in range(300):
                    async with client.lock("idle-race", lease=5.0) as lock:
                        self.assertTrue(lock.is_held())

            asyncio.run(use())


class SessionBounds(unittest.TestCase):
    def test_a_full_session_sends_the_next_claim_to_another(self) -> None:
        with Server("--max-claims-per-session", "2") as server:
            client = monolock.Client(server.addr)
            locks = [client.lock(f"full/{i}", lease=5.0) for i in range(5)]
            self.assertTrue(all(lock.is_held() for lock in locks))
            self.assertEqual(len({holder_addr(server, f"full/{i}") for i in range(5)}), 3)
            for lock in locks:
                lock.release()

            async def use() -> None:
                client = monolock.AsyncClient(server.addr)
                locks = [await client.lock(f"a-full/{i}", lease=5.0) for i in range(5)]
                addrs = await asyncio.to_thread(
                    lambda: {holder_addr(server, f"a-full/{i}") for i in range(5)}
                )
                self.assertEqual(len(addrs), 3)
                for lock in locks:
                    await lock.release()

            asyncio.run(use())

    def test_a_session_closed_by_the_servers_idle_timeout_is_replaced(self) -> None:
        with Server("--idle-timeout", "100ms") as server:
            client = monolock.Client(server.addr)
            for _ in range(3):
                client.lock("server-idle", lease=5.0).release()
                eventually("the server to close the idle session", lambda: sessions(server) == 0)
                with client.lock("server-idle", lease=5.0) as lock:
                    self.assertTrue(lock.is_held())

    def test_a_stopped_server_loses_every_claim_of_the_session_at_once(self) -> None:
        with Server() as server:
            client = monolock.Client(server.addr)
            locks = [client.lock(f"stopped/{i}", lease=1.0) for i in range(3)]
            server.signal(signal.SIGSTOP)
            try:
                for lock in locks:
                    loss = lock.wait_lost(PATIENCE)
                    assert loss is not None
                    self.assertIs(loss.reason, LossReason.EXPIRED)
                    self.assertFalse(lock.is_held())
                deadlines = {lock.deadline for lock in locks}
                self.assertEqual(len(deadlines), 1, "one session, one deadline")
            finally:
                server.signal(signal.SIGCONT)

    def test_async_locks_share_a_session_and_release_is_confirmed(self) -> None:
        with Server() as server:

            async def use() -> None:
                client = monolock.AsyncClient(server.addr)
                locks = [await client.lock(f"a-shared/{i}", lease=5.0) for i in range(3)]
                addrs = await asyncio.to_thread(
                    lambda: {holder_addr(server, f"a-shared/{i}") for i in range(3)}
                )
                self.assertEqual(len(addrs), 1)
                for i in range(200):
                    await locks[0].release()
                    again = await client.try_lock("a-shared/0", lease=6.0)
                    self.assertIsNotNone(again, f"round {i}")
                    assert again is not None
                    locks[0] = again
                for lock in locks:
                    await lock.release()

            asyncio.run(use())

    def test_asyncio_run_closes_the_loops_sessions_as_it_ends(self) -> None:
        with Server() as server:
            loops: List["weakref.ref[asyncio.AbstractEventLoop]"] = []

            async def use() -> None:
                loops.append(weakref.ref(asyncio.get_running_loop()))
                lock = await monolock.AsyncClient(server.addr).lock("a-run", lease=5.0)
                await lock.release()  # the session stays open, idle, for the next claim
                self.assertEqual(await asyncio.to_thread(sessions, server), 1)

            asyncio.run(use())
            eventually("the session to close with its loop", lambda: sessions(server) == 0)
            gc.collect()
            self.assertIsNone(loops[0](), "the pool kept its event loop alive")

    def test_a_release_without_its_confirmation_is_reported_unconfirmed(self) -> None:
        # Before, the release returned quietly once its bound ran out; the
        # shared rule (and the Rust client) report it: the session is
        # closed, which releases the lock, and the caller learns that the
        # server never confirmed it.
        with Server() as server, Proxy(server.addr) as proxy:
            # A long lease: the session's deadline is far; only the release's
            # bound (connect_timeout) can end the wait.
            open_session(proxy.addr, 60.0)
            client = monolock.Client(proxy.addr, connect_timeout=0.3)
            released = client.lock("unconfirmed/released", lease=60.0)
            other = client.lock("unconfirmed/other", lease=60.0)
            proxy.stall()
            start = time.monotonic()
            with self.assertRaises(LockLost) as raised:
                released.release()
            self.assertGreaterEqual(time.monotonic() - start, 0.3)
            unconfirmed = raised.exception
            self.assertIs(unconfirmed.reason, LossReason.CONNECTION)
            self.assertTrue(unconfirmed.is_temporary)
            self.assertEqual(
                str(unconfirmed),
                'lock "unconfirmed/released" lost (connection): the connection failed: '
                "RELEASE not confirmed within 0.3s; the session was closed",
            )
            self.assertIsInstance(unconfirmed.__cause__, TimeoutError)
            with self.assertRaises(LockLost) as again:
                released.release()  # the lock's end stays what it was
            self.assertIs(again.exception.reason, LossReason.CONNECTION)
            loss = other.wait_lost(PATIENCE)
            assert loss is not None
            self.assertIs(loss.reason, LossReason.CONNECTION)
            self.assertIn('lock "unconfirmed/other" lost (connection)', str(loss))
            self.assertIn("a RELEASE was not confirmed in time; the session was closed", str(loss))
            proxy.stalled.clear()
            eventually("the server to free both", lambda: server.lock("unconfirmed/other") is None)
            self.assertIsNone(server.lock("unconfirmed/released"))

    def test_async_release_without_its_confirmation_is_reported_unconfirmed(self) -> None:
        with Server() as server, Proxy(server.addr) as proxy:

            async def use() -> None:
                # The session is opened with the default bound (0.3 s is for
                # the release only; a loaded machine may take longer to open).
                opener = await monolock.AsyncClient(proxy.addr).lock("a-unconfirmed/open", lease=60.0)
                await opener.release()
                client = monolock.AsyncClient(proxy.addr, connect_timeout=0.3)
                released = await client.lock("a-unconfirmed/released", lease=60.0)
                other = await client.lock("a-unconfirmed/other", lease=60.0)
                proxy.stall()
                start = time.monotonic()
                with self.assertRaises(LockLost) as raised:
                    await released.release()
                self.assertGreaterEqual(time.monotonic() - start, 0.3)
                self.assertIs(raised.exception.reason, LossReason.CONNECTION)
                self.assertIn(
                    "RELEASE not confirmed within 0.3s; the session was closed", str(raised.exception)
                )
                loss = await asyncio.wait_for(other.lost(), PATIENCE)
                self.assertIs(loss.reason, LossReason.CONNECTION)

            asyncio.run(use())

    def test_a_release_in_flight_when_the_client_closes_the_session_is_lost(self) -> None:
        # Two releases on one silent session: the first to run out of time
        # closes the session, and the other RELEASE, still unanswered, is
        # not confirmed by that close either (before, it read as released).
        with Server() as server, Proxy(server.addr) as proxy:
            open_session(proxy.addr, 60.0)
            client = monolock.Client(proxy.addr, connect_timeout=0.3)
            locks = [client.lock(f"closed/{i}", lease=60.0) for i in range(2)]
            proxy.stall()
            outcomes: List[Optional[BaseException]] = [None, None]

            def release(i: int) -> None:
                try:
                    locks[i].release()
                except BaseException as err:  # noqa: B036 - recorded for the assertion
                    outcomes[i] = err

            threads = [threading.Thread(target=release, args=(i,)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(PATIENCE)
                self.assertFalse(thread.is_alive())
            for i, outcome in enumerate(outcomes):
                assert isinstance(outcome, LockLost), repr(outcome)
                self.assertIs(outcome.reason, LossReason.CONNECTION)
                self.assertIn(f'lock "closed/{i}" lost (connection)', str(outcome))
            proxy.stalled.clear()
            for i in range(2):
                eventually("the server to free both", lambda: server.lock(f"closed/{i}") is None)

    def test_a_release_in_flight_when_the_server_shuts_down_is_lost(self) -> None:
        # ERROR 0x01 ends the session before RELEASED: the release was never
        # confirmed, so it is the claim's loss (shutdown), as in the Rust
        # client (before, it read as released).
        with Server() as server, Proxy(server.addr) as proxy:
            client = monolock.Client(proxy.addr)
            lock = client.lock("shutdown/releasing", lease=60.0)
            other = client.lock("shutdown/other", lease=60.0)
            proxy.hold_requests()
            outcome: List[BaseException] = []

            def release() -> None:
                try:
                    lock.release()
                except BaseException as err:  # noqa: B036 - recorded for the assertion
                    outcome.append(err)

            thread = threading.Thread(target=release)
            thread.start()
            server.signal(signal.SIGTERM)
            thread.join(PATIENCE)
            self.assertFalse(thread.is_alive())
            self.assertEqual(len(outcome), 1)
            loss = outcome[0]
            assert isinstance(loss, LockLost), repr(loss)
            self.assertIs(loss.reason, LossReason.SHUTDOWN)
            self.assertEqual(loss.code, 0x01)
            self.assertIn('lock "shutdown/releasing" lost (shutdown)', str(loss))
            other_loss = other.wait_lost(PATIENCE)
            assert other_loss is not None
            self.assertIs(other_loss.reason, LossReason.SHUTDOWN)
            self.assertEqual(server.proc.wait(PATIENCE), 0)


class Fork(SharedServer, unittest.TestCase):
    def test_a_forked_child_opens_its_own_session(self) -> None:
        client = monolock.Client(self.server.addr)
        parent = client.lock("fork/parent", lease=2.0)
        parent_session = holder_addr(self.server, "fork/parent")
        read, write = os.pipe()
        with warnings.catch_warnings():
            # Python 3.12+ warns of fork() in a process with threads (the
            # session thread is one): what the client does about it, at the
            # fork, is the subject of this test.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: report, and never return into the test runner
            status = 1
            try:
                os.close(read)
                with client.lock("fork/child", lease=2.0, wait=PATIENCE) as lock:
                    report = {"held": lock.is_held(), "session": holder_addr(self.server, "fork/child")}
                os.write(write, json.dumps(report).encode())
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        with os.fdopen(read) as pipe:
            report = json.loads(pipe.read() or "{}")
        _, status = os.waitpid(pid, 0)
        self.assertEqual(status, 0)
        self.assertTrue(report["held"])
        self.assertNotEqual(report["session"], parent_session, "the child used its parent's session")
        # The child's exit ended nothing of the parent's.
        confirmed_after(lambda: parent.deadline)
        self.assertTrue(parent.is_held())
        self.assertEqual(holder_addr(self.server, "fork/parent"), parent_session)
        parent.release()
        self.assertIsNone(self.server.lock("fork/parent"))


class Fallback(SharedServer, unittest.TestCase):
    def test_a_v1_server_gets_v1_remembered_per_address(self) -> None:
        with Proxy(self.server.addr, v1_only=True) as proxy:
            address = proxy.addr
            client = monolock.Client(address)
            with client.lock("old/one", lease=5.0) as lock:
                self.assertTrue(lock.is_held())
                self.assertEqual(self.server.lock("old/one")["holder"]["token"], lock.token)  # type: ignore[index]
            free = client.try_lock("old/free", lease=5.0)
            assert free is not None
            free.release()

            async def use() -> int:
                async with monolock.AsyncClient(address).lock("old/async", lease=5.0) as lock:
                    return lock.token

            self.assertGreater(asyncio.run(use()), 0)
            self.assertEqual(proxy.opens, 1, "the fallback is remembered for the address")
        # The address fails to connect: it is tried anew with v2 next time.
        with self.assertRaises(monolock.ConnectError):
            monolock.Client(address).lock("old/gone", lease=5.0)
        self.assertFalse(
            rules.V1_ADDRESSES.is_v1(rules.pool_key(client, client._addresses[0]), time.monotonic_ns())
        )

    def test_a_v1_server_is_asked_for_v2_again_once_its_memory_ends(self) -> None:
        with Proxy(self.server.addr, v1_only=True) as proxy:
            client = monolock.Client(proxy.addr)
            # A memory that ends at once: every lock asks for v2 first (the
            # default, 5 minutes, is pinned by test_core's V1Memory).
            with mock.patch.object(rules, "V1_MEMORY_NS", 0):
                for i in range(2):
                    with client.lock(f"old/again/{i}", lease=5.0) as lock:
                        self.assertTrue(lock.is_held())
                self.assertEqual(proxy.opens, 2, "each lock tried v2 again")
            with client.lock("old/again/remembered", lease=5.0):
                pass
            with client.lock("old/again/remembered", lease=5.0):
                pass
            self.assertEqual(proxy.opens, 3, "remembered again for its 5 minutes")


#: Answers each "try" line with whether try_lock took the lock (and releases it).
TRY_LOCK_CHILD = """
import sys, monolock
client = monolock.Client(sys.argv[1])
for _ in sys.stdin:
    lock = client.try_lock("confirmed/child", lease=5.0)
    print("taken" if lock is not None else "busy", flush=True)
    if lock is not None:
        lock.release()
"""


if __name__ == "__main__":
    unittest.main()
