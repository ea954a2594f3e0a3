"""The blocking client against the real server binary."""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest
from typing import List, Optional, Set

import monolock
from monolock import LockLost, LossReason, NotAcquired
from monolock._core.claim import Claim
from monolock._io.reactor import Reactor
from monolock._io.v1 import Session
from unittest import mock

from support import (
    PATIENCE,
    REPO,
    Protocols,
    Proxy,
    Server,
    SharedServer,
    also_v1,
    assert_gave_up_in_time,
    confirmed_after,
    eventually,
)


def open_descriptors() -> Set[str]:
    """This process's open descriptors, each as what it refers to (a
    socket's inode, a file's path): a closed descriptor's number may be
    reused, an open socket's inode is its own."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.add(f"{fd} {os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            pass  # closed meanwhile (the listing's own descriptor among them)
    return found


def joined(case: unittest.TestCase, thread: threading.Thread) -> None:
    """Joins `thread`, failing the test if it is still running after the
    patience."""
    thread.join(PATIENCE)
    case.assertFalse(thread.is_alive(), f"thread {thread.name} did not end")


class Lockless(unittest.TestCase):
    """A listener that never accepts: any connect shows in its queue."""

    def setUp(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.setblocking(False)
        host, port = self.listener.getsockname()
        self.address = f"{host}:{port}"

    def tearDown(self) -> None:
        with self.assertRaises(BlockingIOError, msg="something connected"):
            self.listener.accept()
        self.listener.close()

    def test_an_address_with_a_scheme_is_refused(self) -> None:
        for scheme in ["http", "tcp"]:
            written = f"{scheme}://{self.address}"
            with self.assertRaises(monolock.InvalidArgument) as caught:
                monolock.Client(written)
            self.assertEqual(
                str(caught.exception), f'address "{written}": write host:port, without a scheme'
            )
            self.assertFalse(caught.exception.is_temporary)

    def test_leases_out_of_bounds_name_the_unit(self) -> None:
        client = monolock.Client(self.address)
        for lease, says in [
            (0.01, "below the minimum of 100 ms (leases are in seconds)"),
            (10000, "above the maximum of 1 hour (leases are in seconds)"),
            (1.5005, "not a whole number of milliseconds (leases are in seconds)"),
        ]:
            for attempt in (client.lock, client.try_lock):
                with self.assertRaises(monolock.InvalidArgument) as caught:
                    attempt("ok", lease)
                self.assertIn(says, str(caught.exception))

    def test_bad_waits_are_rejected_before_connecting(self) -> None:
        client = monolock.Client(self.address)
        for wait in [-1, -0.001, float("nan"), float("-inf"), "30", True, [1.0]]:
            with self.assertRaises(monolock.InvalidArgument, msg=repr(wait)) as caught:
                client.lock("ok", lease=1.0, wait=wait)  # type: ignore[arg-type]
            self.assertIn("wait", str(caught.exception))


@also_v1
class SyncClient(SharedServer, Protocols, unittest.TestCase):
    def client(self) -> monolock.Client:
        return self.sync_client(self.server.addr)

    def test_tokens_strictly_increase_across_holders(self) -> None:
        client = self.client()
        tokens: List[int] = []
        for _ in range(5):
            with client.lock("tokens", lease=5.0) as lock:
                self.assertTrue(lock.is_held())
                self.assertEqual(lock.name, "tokens")
                self.assertEqual(lock.address, self.server.addr)
                lock.check()
                tokens.append(lock.token)
        # A handover to a waiter gets a larger token too.
        first = client.lock("tokens", lease=5.0)
        got: List[int] = []
        waiter = threading.Thread(target=lambda: got.append(client.lock("tokens", 5.0).token))
        waiter.start()
        eventually("the waiter to queue", lambda: len(self.server.waiters("tokens")) == 1)
        tokens.append(first.token)
        first.release()
        first.release()  # idempotent
        self.assertFalse(first.is_held())
        with self.assertRaises(LockLost) as caught:
            first.check()
        self.assertIs(caught.exception.reason, LossReason.RELEASED)
        self.assertIsNone(first.loss)
        joined(self, waiter)
        tokens += got
        self.assertEqual(len(tokens), 7)
        self.assertEqual(tokens, sorted(set(tokens)), "strictly increasing")

    def test_fifo_order_of_five_waiters_in_threads(self) -> None:
        client = self.client()
        holder = client.lock("fifo", lease=5.0)
        order: List[int] = []
        tokens: List[int] = []
        done = threading.Lock()

        def wait_in_line(i: int) -> None:
            with client.lock("fifo", lease=5.0) as lock:
                with done:
                    order.append(i)
                    tokens.append(lock.token)

        threads = []
        for i in range(5):
            thread = threading.Thread(target=wait_in_line, args=(i,))
            thread.start()
            threads.append(thread)
            # The next one starts only once this one is in the queue.
            eventually(f"waiter {i} to queue", lambda: len(self.server.waiters("fifo")) == i + 1)
        holder.release()
        for thread in threads:
            joined(self, thread)
        self.assertEqual(order, [0, 1, 2, 3, 4])
        self.assertEqual(tokens, sorted(set(tokens)))
        self.assertGreater(tokens[0], holder.token)

    def test_try_lock_when_busy_leaves_no_trace_in_the_queue(self) -> None:
        # No trace by the time try_lock returns (v1 half-closes and reads
        # until the server's EOF), and the lock is free once release returns.
        client = self.client()
        holder = client.try_lock("busy", lease=5.0)
        assert holder is not None
        for _ in range(10):
            self.assertIsNone(client.try_lock("busy", lease=5.0))
            self.assertEqual(self.server.waiters("busy"), [])
        holder.release()
        # Had a try_lock stayed queued, it would now hold the lock.
        self.assertIsNone(self.server.lock("busy"))

    def test_a_try_lock_right_after_a_release_succeeds_at_the_first_attempt(self) -> None:
        # The release returns once the server has released (v2: RELEASED;
        # v1: the server's EOF after the client's half-close), so another
        # client's try_lock never finds the lock busy, not even now and then.
        first, second = self.client(), self.sync_client(self.server.addr, connect_timeout=5.0)
        holder = first.lock("handover", lease=5.0)
        for round_ in range(50):
            holder.release()
            taker = (second, first)[round_ % 2]
            taken = taker.try_lock("handover", lease=5.0)
            self.assertIsNotNone(taken, f"busy right after a release returned (round {round_})")
            assert taken is not None
            self.assertGreater(taken.token, holder.token)
            holder = taken
        holder.release()

    def test_loss_messages_name_the_lock_and_reason(self) -> None:
        lock = self.client().lock("named/loss", lease=5.0)
        self.assertIsNotNone(self.server.force_release("named/loss"))
        loss = lock.wait_lost(PATIENCE)
        assert loss is not None
        self.assertTrue(
            str(loss).startswith('lock "named/loss" lost (forced): '), str(loss)
        )
        self.assertEqual(loss.name, "named/loss")
        with self.assertRaises(LockLost) as caught:
            lock.check()
        self.assertTrue(str(caught.exception).startswith('lock "named/loss" lost (forced): '))

    def test_wait_bounds_the_time_in_the_queue(self) -> None:
        client = self.client()
        holder = client.lock("wait", lease=5.0)
        start = time.monotonic()
        with self.assertRaises(NotAcquired) as caught:
            client.lock("wait", lease=5.0, wait=0.3)
        self.assertGreaterEqual(time.monotonic() - start, 0.3)
        self.assertIsInstance(caught.exception, TimeoutError)
        eventually("the queue to be empty", lambda: self.server.waiters("wait") == [])
        holder.release()
        # wait=0 takes a free lock at once.
        with client.lock("wait/free", lease=5.0, wait=0.0) as lock:
            self.assertTrue(lock.is_held())

    def test_force_release_raises_lock_lost_with_the_forced_reason(self) -> None:
        lock = self.client().lock("forced", lease=5.0)
        self.assertFalse(lock.lost_event.is_set())
        self.assertIsNotNone(self.server.force_release("forced"))
        loss = lock.wait_lost(PATIENCE)
        assert loss is not None
        self.assertIs(loss.reason, LossReason.FORCED)
        self.assertEqual(loss.code, 0x02)
        self.assertTrue(lock.lost_event.is_set())
        self.assertFalse(lock.is_held())
        with self.assertRaises(LockLost) as caught:
            lock.check()
        self.assertIs(caught.exception.reason, LossReason.FORCED)
        with self.assertRaises(LockLost):
            lock.release()

    def test_a_released_lock_is_never_reported_lost(self) -> None:
        lock = self.client().lock("released", lease=0.1)
        lock.release()
        time.sleep(max(lock.deadline - time.monotonic(), 0) + 0.01)  # past the deadline
        self.assertIsNone(lock.loss)
        self.assertFalse(lock.lost_event.is_set())
        self.assertIsNone(lock.wait_lost(0))
        start = time.monotonic()
        self.assertIsNone(lock.wait_lost(0.05))  # no loss comes: it waits its time out
        self.assertGreaterEqual(time.monotonic() - start, 0.05)

    def test_leaving_the_block_after_a_loss_raises_it(self) -> None:
        with self.assertRaises(LockLost) as caught:
            with self.client().lock("exit", lease=5.0) as lock:
                self.server.force_release("exit")
                lock.wait_lost(PATIENCE)
        self.assertIs(caught.exception.reason, LossReason.FORCED)

    def test_a_lock_dropped_without_release_closes_its_socket(self) -> None:
        client = self.client()
        lock: Optional[monolock.Lock] = client.lock("dropped", lease=60.0)
        del lock
        gc.collect()
        # The next claim gets it at once, long before a 60 s lease runs out.
        with client.lock("dropped", lease=5.0, wait=PATIENCE / 2) as again:
            self.assertTrue(again.is_held())

    def test_bad_names_and_leases_are_rejected_before_connecting(self) -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        host, port = listener.getsockname()
        client = self.sync_client(f"{host}:{port}")
        bad: List[object] = ["", "n" * 256, "\u00e9" * 128, "\ud800", 5, None]
        for name in bad:
            with self.assertRaises(monolock.InvalidArgument, msg=repr(name)):
                client.lock(name, lease=1.0)  # type: ignore[arg-type]
            with self.assertRaises(ValueError, msg=repr(name)):
                client.try_lock(name, lease=1.0)  # type: ignore[arg-type]
        for lease in [0, 0.0004, 0.099, 1.0005, 3600.001, 10000, -1.0, float("nan"), float("inf"), "10", True]:
            with self.assertRaises(monolock.InvalidArgument, msg=repr(lease)):
                client.lock("ok", lease=lease)  # type: ignore[arg-type]
        with self.assertRaises(BlockingIOError):
            listener.accept()
        listener.close()
        # The limits themselves are valid, and names are raw bytes.
        client = self.client()
        with client.lock("n" * 255, lease=5.0) as lock:
            self.assertTrue(lock.is_held())
            for other in ["N" * 255, " " + "n" * 254]:
                with client.lock(other, lease=3600, wait=PATIENCE) as distinct:
                    self.assertTrue(distinct.is_held())

    def test_wait_inf_waits_forever_and_leaves_no_orphan_claim(self) -> None:
        client = self.client()
        for wait in [float("inf"), None, 1e300]:
            holder = client.lock("orphan", lease=2.0)
            got: List[monolock.Lock] = []
            errors: List[BaseException] = []

            def wait_in_line(wait: Optional[float] = wait) -> None:
                try:
                    got.append(client.lock("orphan", lease=2.0, wait=wait))
                except BaseException as err:  # noqa: B036 - recorded for the assertion
                    errors.append(err)

            waiter = threading.Thread(target=wait_in_line)
            waiter.start()
            eventually("the waiter to queue", lambda: len(self.server.waiters("orphan")) == 1)
            self.assertEqual(errors, [], repr(wait))
            holder.release()
            joined(self, waiter)
            self.assertEqual(errors, [], repr(wait))
            self.assertEqual(len(got), 1)
            with got[0] as lock:
                self.assertTrue(lock.is_held())
            eventually("the lock to be forgotten", lambda: self.server.lock("orphan") is None)

    def test_a_bad_wait_leaves_nothing_queued_behind_a_holder(self) -> None:
        client = self.client()
        with client.lock("no-orphan", lease=2.0):
            for wait in ["30", float("nan"), -1.0]:
                with self.assertRaises(monolock.InvalidArgument):
                    client.lock("no-orphan", lease=2.0, wait=wait)  # type: ignore[arg-type]
                self.assertEqual(self.server.waiters("no-orphan"), [])
        eventually("the lock to be forgotten", lambda: self.server.lock("no-orphan") is None)

    def test_an_exception_after_the_grant_ends_the_claim(self) -> None:
        client = self.client()
        caught: List[BaseException] = []
        with mock.patch.object(monolock.Lock, "__init__", side_effect=RuntimeError("raised")):
            try:
                client.lock("raised", lease=60.0)
            except RuntimeError as err:
                caught.append(err)  # keeps the traceback and its frames alive
        self.assertEqual(len(caught), 1)
        # Released at once, long before a 60 s lease could run out.
        eventually("the claim to end", lambda: self.server.lock("raised") is None)

    def test_an_exception_in_the_with_block_ends_the_claim(self) -> None:
        client = self.client()
        with self.assertRaises(KeyError):
            with client.lock("block-raised", lease=60.0):
                raise KeyError("the guarded work failed")
        with client.lock("block-raised", lease=5.0, wait=PATIENCE / 2) as again:
            self.assertTrue(again.is_held())

    def test_with_on_a_released_or_lost_lock_raises(self) -> None:
        client = self.client()
        lock = client.lock("reenter", lease=5.0)
        lock.release()
        with self.assertRaises(LockLost) as caught:
            with lock:
                self.fail("the body ran without the lock")
        self.assertIs(caught.exception.reason, LossReason.RELEASED)
        self.assertIn("released", str(caught.exception))
        lock = client.lock("reenter", lease=5.0)
        with lock:
            self.assertTrue(lock.is_held())
        with self.assertRaises(LockLost):
            with lock:
                self.fail("the body ran after the block released the lock")
        lost = client.lock("reenter", lease=5.0)
        self.assertIsNotNone(self.server.force_release("reenter"))
        self.assertIsNotNone(lost.wait_lost(PATIENCE))
        with self.assertRaises(LockLost) as caught:
            with lost:
                self.fail("the body ran without the lock")
        self.assertIs(caught.exception.reason, LossReason.FORCED)
        self.assertIn("lost", str(caught.exception))
        with self.assertRaises(LockLost):
            lost.release()

    def test_wait_lost_takes_inf_and_refuses_nan(self) -> None:
        lock = self.client().lock("wait-lost", lease=5.0)
        with self.assertRaises(monolock.InvalidArgument):
            lock.wait_lost(float("nan"))
        self.assertIsNone(lock.wait_lost(0))
        watcher = threading.Thread(target=lambda: lock.wait_lost(float("inf")))
        watcher.start()
        self.server.force_release("wait-lost")
        joined(self, watcher)

    def test_no_thread_or_socket_leaks_after_1000_lock_cycles(self) -> None:
        # Only what this test opens is counted: sessions of earlier tests
        # close on their own time (idle), and garbage-collected locks of
        # theirs are closed by the reactor thread, both maybe while this
        # test runs. A leak is a descriptor or thread that appeared during
        # the cycles and is still there after them.
        client = self.client()
        with client.lock("cycles", lease=5.0):
            pass
        gc.collect()
        threads, fds = set(threading.enumerate()), open_descriptors()
        for _ in range(1000):
            with client.lock("cycles", lease=5.0) as lock:
                self.assertTrue(lock.is_held())
        for i in range(10):
            # A fresh name each time: the server may not have seen the
            # previous close yet (a release has no acknowledgement).
            taken = client.try_lock(f"cycles/{i}", lease=5.0)
            assert taken is not None
            taken.release()
        gc.collect()
        self.assertEqual(set(threading.enumerate()) - threads, set())
        self.assertEqual(open_descriptors() - fds, set())

    def test_a_client_paused_past_its_deadline_reads_not_held_on_resuming(self) -> None:
        # A child process holds the lock; it is SIGSTOPped (every thread
        # frozen, as in a GC pause or a suspended VM) for a whole lease.
        with subprocess.Popen(
            [sys.executable, "-c", PAUSED_CHILD, self.server.addr, str(self.force_v1)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO / "clients" / "python" / "src")},
            text=True,
        ) as child:
            try:
                assert child.stdin is not None and child.stdout is not None
                self.assertEqual(child.stdout.readline().strip(), "held True")
                child.send_signal(signal.SIGSTOP)
                time.sleep(0.5)  # the fault itself: a pause of a whole 0.5 s lease
                child.send_signal(signal.SIGCONT)
                child.stdin.write("?\n")
                child.stdin.flush()
                self.assertEqual(child.stdout.readline().strip(), "held False")
            finally:
                child.kill()


class FrozenReactor(Reactor):
    """A reactor whose thread can be frozen at its next timer, as a
    stalled process would be: nothing heartbeats or reads meanwhile."""

    def __init__(self) -> None:
        self.freeze = threading.Event()
        self.frozen = threading.Event()
        self.thaw = threading.Event()
        super().__init__(dedicated=True)

    def _timers(self, now: int) -> None:
        if self.freeze.is_set():
            self.frozen.set()
            self.thaw.wait(PATIENCE)
        super()._timers(now)


class StalledDriver(unittest.TestCase):
    def test_is_held_reads_the_clock_when_no_thread_has_run(self) -> None:
        with Server() as server:
            reactor = FrozenReactor()
            client = monolock.Client(server.addr, force_v1=True)  # the v1 reactor is frozen
            client._reactor_factory = lambda: reactor
            lock = client.lock("stalled", lease=0.25)
            try:
                reactor.freeze.set()
                self.assertTrue(reactor.frozen.wait(PATIENCE))
                self.assertFalse(lock.lost_event.is_set())
                deadline = lock.deadline
                # Let the clock pass the deadline (the stall itself).
                time.sleep(max(deadline - time.monotonic(), 0) + 0.01)
                self.assertFalse(lock.is_held(), "judged against the clock, not a timer")
                loss = lock.loss
                assert loss is not None
                self.assertIs(loss.reason, LossReason.EXPIRED)
                self.assertTrue(lock.lost_event.is_set())
                with self.assertRaises(LockLost):
                    lock.check()
            finally:
                reactor.thaw.set()
            with self.assertRaises(LockLost):
                lock.release()
            self.assertTrue(reactor.join(PATIENCE), "the lock's reactor thread did not end")


class DedicatedReactor(unittest.TestCase):
    def test_it_ends_when_its_session_was_released_before_it_was_added(self) -> None:
        mine, peer = socket.socketpair()
        try:
            mine.setblocking(False)
            reactor = Reactor(dedicated=True)
            session = Session(Claim("early", 1000, time.monotonic_ns()), mine, reactor)
            session.release(wait=False)
            reactor.add(session)
            self.assertTrue(session.closed_event.wait(PATIENCE))
            self.assertTrue(reactor.join(PATIENCE), "the reactor thread did not end")
        finally:
            peer.close()


class LostOnHandOff(Reactor):
    """A reactor that, on being handed a queued claim, has the server shut
    down and serves the claim until it ends before `add` returns: the
    claim is lost between the first reply and the waiter's first look."""

    def __init__(self, server: Server) -> None:
        self.server = server
        super().__init__(dedicated=True)

    def add(self, session: Session) -> None:
        self.server.signal(signal.SIGTERM)
        super().add(session)
        assert session.closed_event.wait(PATIENCE), "the reactor did not end the claim"


class HandOff(unittest.TestCase):
    def test_a_waiter_lost_while_handed_to_the_reactor_raises_lock_lost(self) -> None:
        with Server() as server:
            client = monolock.Client(server.addr, force_v1=True)  # the v1 hand-off to a reactor
            holder = client.lock("handoff", lease=5.0)
            client._reactor_factory = lambda: LostOnHandOff(server)
            with self.assertRaises(LockLost) as caught:
                client.lock("handoff", lease=5.0)
            self.assertIs(caught.exception.reason, LossReason.SHUTDOWN)
            loss = holder.wait_lost(PATIENCE)
            assert loss is not None
            self.assertIs(loss.reason, LossReason.SHUTDOWN)
            self.assertEqual(server.proc.wait(PATIENCE), 0)


#: Holds a lock, says so, then answers each stdin line with is_held().
PAUSED_CHILD = """
import sys, monolock
lock = monolock.Client(sys.argv[1], force_v1=sys.argv[2] == "True").lock("paused", lease=0.5)
print("held", lock.is_held(), flush=True)
for _ in sys.stdin:
    print("held", lock.is_held(), flush=True)
"""


@also_v1
class SyncServerFaults(Protocols, unittest.TestCase):
    """Tests that stop or end their own server."""

    def test_a_stopped_server_is_abandoned_before_its_lease_could_expire(self) -> None:
        with Server() as server:
            # The loss must come between 0.8 x lease and 0.9 x lease after S:
            # 4 s leaves 0.4 s for a loaded machine to run the client's timer.
            lease = 4.0
            lock = self.sync_client(server.addr).lock("silent", lease=lease)
            # Stop the server right after a heartbeat is confirmed: then S,
            # the send instant of the last confirmed frame, is known (up to
            # a round trip) without asking the client.
            seen_old = confirmed_after(lambda: lock.deadline)
            server.signal(signal.SIGSTOP)
            try:
                loss = lock.wait_lost(PATIENCE)
                lost_at = time.monotonic()
                assert loss is not None
                self.assertIs(loss.reason, LossReason.EXPIRED)
                self.assertFalse(lock.is_held())
                assert_gave_up_in_time(self, lost_at, seen_old, lock.deadline, lease)
            finally:
                server.signal(signal.SIGCONT)
            eventually("the server to forget the session", lambda: server.lock("silent") is None)

    def test_server_shutdown_reports_the_shutdown_reason(self) -> None:
        with Server() as server:
            client = self.sync_client(server.addr)
            holder = client.lock("bye", lease=5.0)
            waiter_error: List[BaseException] = []

            def wait() -> None:
                try:
                    client.lock("bye", lease=5.0)
                except BaseException as err:  # noqa: B036 - recorded for the assertion
                    waiter_error.append(err)

            thread = threading.Thread(target=wait)
            thread.start()
            eventually("the waiter to queue", lambda: len(server.waiters("bye")) == 1)
            server.signal(signal.SIGTERM)
            loss = holder.wait_lost(PATIENCE)
            assert loss is not None
            self.assertIs(loss.reason, LossReason.SHUTDOWN)
            self.assertEqual(loss.code, 0x01)
            self.assertTrue(loss.is_temporary)
            joined(self, thread)
            self.assertEqual(len(waiter_error), 1)
            err = waiter_error[0]
            assert isinstance(err, LockLost), repr(err)
            self.assertIs(err.reason, LossReason.SHUTDOWN)
            self.assertEqual(server.proc.wait(PATIENCE), 0)


@also_v1
class ProxyStalls(SharedServer, Protocols, unittest.TestCase):
    def test_a_stalled_path_is_given_up_before_the_server_hands_the_locks_on(self) -> None:
        lease = 1.0  # short: the server hands on only after a whole lease of silence
        with Proxy(self.server.addr) as proxy:
            client = self.sync_client(proxy.addr)
            names = ["stall/a", "stall/b"]
            locks = [client.lock(name, lease=lease) for name in names]
            granted_at: List[float] = []
            errors: List[BaseException] = []

            def wait_in_line(name: str) -> None:
                try:
                    lock = self.sync_client(self.server.addr).lock(name, lease=5.0, wait=PATIENCE)
                    granted_at.append(time.monotonic())
                    lock.release()
                except BaseException as err:  # noqa: B036 - recorded for the assertion
                    errors.append(err)

            waiters = [threading.Thread(target=wait_in_line, args=(name,)) for name in names]
            for i, waiter in enumerate(waiters):
                waiter.start()
                eventually("the waiter to queue", lambda i=i: len(self.server.waiters(names[i])) == 1)  # type: ignore[misc]
            proxy.stall()
            lost_at = []
            for lock in locks:
                loss = lock.wait_lost(PATIENCE)
                lost_at.append(time.monotonic())
                assert loss is not None
                self.assertIs(loss.reason, LossReason.EXPIRED)
            for waiter in waiters:
                joined(self, waiter)
            self.assertEqual(errors, [])
            self.assertEqual(len(granted_at), 2)
            self.assertLess(max(lost_at), min(granted_at), "a waiter was granted before the holder knew")


if __name__ == "__main__":
    unittest.main()
