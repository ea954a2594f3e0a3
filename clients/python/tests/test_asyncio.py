"""The asyncio client against the real server binary."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import threading
import time
import unittest
from typing import List

import monolock
from monolock import LockLost, LossReason, NotAcquired
from support import PATIENCE, Protocols, Server, SharedServer, also_v1, assert_gave_up_in_time


async def eventually(what: str, condition: "object") -> None:
    """Polls an admin-API condition without blocking the loop for long."""
    end = time.monotonic() + PATIENCE
    while not await asyncio.to_thread(condition):  # type: ignore[arg-type]
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


@also_v1
class AsyncClient(SharedServer, Protocols, unittest.IsolatedAsyncioTestCase):
    def client(self) -> monolock.AsyncClient:
        return self.async_client(self.server.addr)

    async def test_tokens_strictly_increase_across_holders(self) -> None:
        client = self.client()
        tokens: List[int] = []
        for _ in range(5):
            async with client.lock("a-tokens", lease=5.0) as lock:
                self.assertTrue(lock.is_held())
                self.assertEqual(lock.name, "a-tokens")
                lock.check()
                tokens.append(lock.token)
        lock = await client.lock("a-tokens", lease=5.0)
        tokens.append(lock.token)
        await lock.release()
        self.assertEqual(tokens, sorted(set(tokens)))

    async def test_fifo_order_of_five_waiters_in_tasks(self) -> None:
        client = self.client()
        holder = await client.lock("a-fifo", lease=5.0)
        order: List[int] = []
        tokens: List[int] = []

        async def wait_in_line(i: int) -> None:
            async with client.lock("a-fifo", lease=5.0) as lock:
                order.append(i)
                tokens.append(lock.token)

        tasks = []
        for i in range(5):
            tasks.append(asyncio.create_task(wait_in_line(i)))
            await eventually(f"waiter {i}", lambda i=i: len(self.server.waiters("a-fifo")) == i + 1)
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), PATIENCE)
        self.assertEqual(order, [0, 1, 2, 3, 4])
        self.assertEqual(tokens, sorted(set(tokens)))
        self.assertGreater(tokens[0], holder.token)

    async def test_try_lock_when_busy_leaves_no_trace_in_the_queue(self) -> None:
        client = self.client()
        holder = await client.try_lock("a-busy", lease=5.0)
        assert holder is not None
        self.assertIsNone(await client.try_lock("a-busy", lease=5.0))
        await eventually("an empty queue", lambda: self.server.waiters("a-busy") == [])
        await holder.release()
        await eventually("the lock forgotten", lambda: self.server.lock("a-busy") is None)

    async def test_wait_bounds_the_time_in_the_queue(self) -> None:
        client = self.client()
        holder = await client.lock("a-wait", lease=5.0)
        start = time.monotonic()
        with self.assertRaises(NotAcquired):
            await client.lock("a-wait", lease=5.0, wait=0.3)
        self.assertGreaterEqual(time.monotonic() - start, 0.3)
        await eventually("an empty queue", lambda: self.server.waiters("a-wait") == [])
        await holder.release()

    async def test_cancelling_the_wait_gives_the_place_up(self) -> None:
        client = self.client()
        holder = await client.lock("a-cancel", lease=5.0)
        waiter = asyncio.ensure_future(client.lock("a-cancel", lease=5.0))
        await eventually("the waiter", lambda: len(self.server.waiters("a-cancel")) == 1)
        waiter.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await waiter
        await eventually("an empty queue", lambda: self.server.waiters("a-cancel") == [])
        await holder.release()
        await eventually("the lock forgotten", lambda: self.server.lock("a-cancel") is None)

    async def test_force_release_resolves_lost_with_the_forced_reason(self) -> None:
        lock = await self.client().lock("a-forced", lease=5.0)
        watchers = [asyncio.create_task(lock.lost()) for _ in range(3)]
        await asyncio.to_thread(self.server.force_release, "a-forced")
        losses = await asyncio.wait_for(asyncio.gather(*watchers), PATIENCE)
        for loss in losses:
            self.assertIs(loss.reason, LossReason.FORCED)
            self.assertEqual(loss.code, 0x02)
        self.assertTrue(lock.lost_event.is_set())
        self.assertFalse(lock.is_held())
        with self.assertRaises(LockLost):
            lock.check()
        with self.assertRaises(LockLost):
            await lock.release()

    async def test_cancelling_the_task_in_the_block_ends_the_claim(self) -> None:
        client = self.client()
        entered = asyncio.Event()

        async def hold() -> None:
            async with client.lock("a-cancelled", lease=60.0):
                entered.set()
                await asyncio.sleep(3600)  # cancelled below

        task = asyncio.create_task(hold())
        await asyncio.wait_for(entered.wait(), PATIENCE)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        again = await client.lock("a-cancelled", lease=5.0, wait=PATIENCE / 2)
        self.assertTrue(again.is_held())
        await again.release()

    async def test_an_exception_in_the_block_ends_the_claim(self) -> None:
        client = self.client()
        with self.assertRaises(KeyError):
            async with client.lock("a-raised", lease=60.0):
                raise KeyError("the guarded work failed")
        again = await client.lock("a-raised", lease=5.0, wait=PATIENCE / 2)
        self.assertTrue(again.is_held())
        await again.release()

    async def test_a_lock_dropped_without_release_closes_its_socket(self) -> None:
        client = self.client()
        lock = await client.lock("a-dropped", lease=60.0)
        del lock
        gc.collect()
        again = await client.lock("a-dropped", lease=5.0, wait=PATIENCE / 2)
        self.assertTrue(again.is_held())
        await again.release()

    async def test_bad_names_and_leases_are_rejected_before_connecting(self) -> None:
        client = monolock.AsyncClient("127.0.0.1:9")  # nothing is ever dialled
        for name in ["", "n" * 256, "\ud800"]:
            with self.assertRaises(monolock.InvalidArgument):
                client.lock(name, lease=1.0)
            with self.assertRaises(monolock.InvalidArgument):
                await client.try_lock(name, lease=1.0)
        for lease in [0, -1.0, float("nan"), 4294967.296]:
            with self.assertRaises(monolock.InvalidArgument):
                client.lock("ok", lease=lease)

    async def test_bad_waits_are_rejected_before_connecting(self) -> None:
        client = monolock.AsyncClient("127.0.0.1:9")  # nothing is ever dialled
        for wait in [-1, float("nan"), float("-inf"), "30", True]:
            with self.assertRaises(monolock.InvalidArgument, msg=repr(wait)):
                client.lock("ok", lease=1.0, wait=wait)  # type: ignore[arg-type]

    async def test_wait_inf_waits_forever(self) -> None:
        client = self.client()
        for wait in [float("inf"), 1e300]:
            holder = await client.lock("a-inf", lease=2.0)
            waiter = asyncio.ensure_future(client.lock("a-inf", lease=2.0, wait=wait))
            await eventually("the waiter", lambda: len(self.server.waiters("a-inf")) == 1)
            self.assertFalse(waiter.done(), repr(wait))
            await holder.release()
            lock = await asyncio.wait_for(waiter, PATIENCE)
            async with lock:
                self.assertTrue(lock.is_held())
            await eventually("the lock forgotten", lambda: self.server.lock("a-inf") is None)

    async def test_async_with_on_a_released_or_lost_lock_raises(self) -> None:
        client = self.client()
        lock = await client.lock("a-reenter", lease=5.0)
        await lock.release()
        with self.assertRaises(LockLost) as caught:
            async with lock:
                self.fail("the body ran without the lock")
        self.assertIs(caught.exception.reason, LossReason.RELEASED)
        self.assertIn("released", str(caught.exception))
        lost = await client.lock("a-reenter", lease=5.0)
        await asyncio.to_thread(self.server.force_release, "a-reenter")
        await asyncio.wait_for(lost.lost(), PATIENCE)
        with self.assertRaises(LockLost) as caught:
            async with lost:
                self.fail("the body ran without the lock")
        self.assertIs(caught.exception.reason, LossReason.FORCED)

    async def test_no_task_thread_or_socket_leaks_after_1000_lock_cycles(self) -> None:
        # asyncio's debug mode (on in this test case) records a stack for
        # every callback: twenty times slower, and nothing to check here.
        asyncio.get_running_loop().set_debug(False)
        client = self.client()
        async with client.lock("a-cycles", lease=5.0):
            pass
        await asyncio.sleep(0)
        gc.collect()
        threads, fds = threading.active_count(), len(os.listdir("/proc/self/fd"))
        tasks = len(asyncio.all_tasks())
        for _ in range(1000):
            async with client.lock("a-cycles", lease=5.0) as lock:
                self.assertTrue(lock.is_held())
        # Transports close on the next loop iterations.
        for _ in range(100):
            await asyncio.sleep(0)
            if len(os.listdir("/proc/self/fd")) == fds:
                break
        gc.collect()
        self.assertEqual(threading.active_count(), threads)
        self.assertEqual(len(os.listdir("/proc/self/fd")), fds)
        self.assertEqual(len(asyncio.all_tasks()), tasks)


@also_v1
class AsyncServerFaults(Protocols, unittest.IsolatedAsyncioTestCase):
    async def test_a_stopped_server_is_abandoned_before_its_lease_could_expire(self) -> None:
        with Server() as server:
            # The loss must come between 0.8 x lease and 0.9 x lease after S:
            # 4 s leaves 0.4 s for a loaded machine to run the client's timer.
            lease = 4.0
            lock = await self.async_client(server.addr).lock("a-silent", lease=lease)
            # As in the sync test: stop the server right after a confirmed
            # heartbeat, so S is known without asking the client.
            first = lock.deadline
            end = time.monotonic() + PATIENCE
            while True:
                seen_old = time.monotonic()
                if lock.deadline != first:
                    break
                self.assertLess(seen_old, end, "no heartbeat was confirmed")
                await asyncio.sleep(0.002)
            server.signal(signal.SIGSTOP)
            try:
                loss = await asyncio.wait_for(lock.lost(), PATIENCE)
                lost_at = time.monotonic()
                self.assertIs(loss.reason, LossReason.EXPIRED)
                self.assertFalse(lock.is_held())
                assert_gave_up_in_time(self, lost_at, seen_old, lock.deadline, lease)
            finally:
                server.signal(signal.SIGCONT)

    async def test_a_stalled_server_never_blocks_the_event_loop(self) -> None:
        # Every wait on a server that stopped answering (a new session's
        # OPEN, a claim's reply, a release's confirmation) is a wait of the
        # loop, never a block of it: asyncio's debug mode logs any callback
        # that runs for a second, against waits of 1.5 s (connect_timeout).
        # Only the client's calls are watched: starting, pausing and
        # stopping the server block this test's own task (half a second or
        # more on a loaded machine) and are no callback of the client's.
        loop = asyncio.get_running_loop()
        slow: List[str] = []

        class SlowCallbacks(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if "Executing" in record.getMessage():
                    slow.append(record.getMessage())

        handler = SlowCallbacks(level=logging.WARNING)
        logger = logging.getLogger("asyncio")
        with Server() as server:
            client = self.async_client(server.addr, connect_timeout=1.5)
            # A lease long enough for a loaded machine to take the lock
            # before its deadline; the waits below are bounded by the
            # connect_timeout (1.5 s) all the same.
            held = await client.lock("a-loop-held", lease=5.0)
            server.pause()
            logger.addHandler(handler)
            loop.set_debug(True)
            loop.slow_callback_duration = 1.0
            try:
                start = time.monotonic()
                outcomes = await asyncio.wait_for(
                    asyncio.gather(
                        client.try_lock("a-loop-same-lease", lease=5.0),
                        client.try_lock("a-loop-new-session", lease=2.5),
                        held.release(),
                        return_exceptions=True,
                    ),
                    PATIENCE,
                )
                waited = time.monotonic() - start
            finally:
                loop.set_debug(False)
                logger.removeHandler(handler)
                server.signal(signal.SIGCONT)
        self.assertEqual(slow, [])
        # The fault took hold: nothing was answered, each call gave up.
        self.assertGreaterEqual(waited, 1.0, outcomes)
        self.assertFalse(held.is_held())
        for outcome in outcomes[:2]:
            self.assertIsInstance(outcome, (monolock.Error, type(None)), outcomes)

    async def test_a_blocked_loop_reads_not_held_after_the_deadline(self) -> None:
        with Server() as server:
            lock = await self.async_client(server.addr).lock("a-blocked", lease=0.25)
            self.assertTrue(lock.is_held())
            deadline = lock.deadline
            time.sleep(0.25)  # the fault: a loop blocked for a whole lease
            self.assertGreater(time.monotonic(), deadline)
            # Checked before the loop runs any timer or reads any reply.
            self.assertFalse(lock.is_held())
            loss = lock.loss
            assert loss is not None
            self.assertIs(loss.reason, LossReason.EXPIRED)

    async def test_server_shutdown_reports_the_shutdown_reason(self) -> None:
        with Server() as server:
            client = self.async_client(server.addr)
            holder = await client.lock("a-bye", lease=5.0)
            waiter = asyncio.ensure_future(client.lock("a-bye", lease=5.0))
            await eventually("the waiter", lambda: len(server.waiters("a-bye")) == 1)
            server.signal(signal.SIGTERM)
            loss = await asyncio.wait_for(holder.lost(), PATIENCE)
            self.assertIs(loss.reason, LossReason.SHUTDOWN)
            self.assertEqual(loss.code, 0x01)
            with self.assertRaises(LockLost) as caught:
                await asyncio.wait_for(waiter, PATIENCE)
            self.assertIs(caught.exception.reason, LossReason.SHUTDOWN)


if __name__ == "__main__":
    unittest.main()
