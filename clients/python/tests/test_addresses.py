"""Several server addresses: tried in order at connect time only."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
import unittest
from contextlib import contextmanager
from typing import Iterator, List
from unittest import mock

import monolock
from monolock import LossReason
from support import PATIENCE, Protocols, Server, SharedServer, also_v1


@contextmanager
def refusing_address() -> Iterator[str]:
    """A loopback port that refuses connections: bound, never listening
    (and held, so nothing else takes it meanwhile)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        host, port = sock.getsockname()
        yield f"{host}:{port}"
    finally:
        sock.close()


@contextmanager
def silent_address() -> Iterator[str]:
    """A loopback port whose connects time out: a listener whose accept
    queue is full, so the kernel drops further SYNs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers: List[socket.socket] = []
    host, port = listener.getsockname()
    try:
        # Fill the queue until a connect no longer completes at once.
        for _ in range(8):
            filler = socket.socket()
            filler.settimeout(0.2)
            try:
                filler.connect((host, port))
            except (socket.timeout, OSError):
                filler.close()
                break
            fillers.append(filler)
        yield f"{host}:{port}"
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


@also_v1
class AddressLists(SharedServer, Protocols, unittest.TestCase):
    def test_the_first_server_down_the_second_serves(self) -> None:
        with refusing_address() as down:
            for address in [f"{down},{self.server.addr}", [down, self.server.addr]]:
                client = self.sync_client(address)
                self.assertEqual(client.addresses, (down, self.server.addr))
                with client.lock("standby", lease=5.0) as lock:
                    self.assertEqual(lock.address, self.server.addr)
                    self.assertTrue(lock.is_held())

            async def use() -> str:
                async with self.async_client([down, self.server.addr]).lock("standby", 5.0) as lock:
                    return lock.address

            self.assertEqual(asyncio.run(use()), self.server.addr)

    def test_the_environment_names_the_list(self) -> None:
        with refusing_address() as down:
            with mock.patch.dict(os.environ, {"MONOLOCK_ADDRESS": f"{down}, {self.server.addr}"}):
                client = self.sync_client()
            self.assertEqual(client.addresses, (down, self.server.addr))
            with client.lock("env", lease=5.0) as lock:
                self.assertEqual(lock.address, self.server.addr)
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(monolock.Client().addresses, ("127.0.0.1:7070",))

    def test_a_server_that_does_not_answer_is_skipped_after_the_connect_timeout(self) -> None:
        with silent_address() as silent:
            start = time.monotonic()
            client = self.sync_client([silent, self.server.addr], connect_timeout=0.3)
            with client.lock("timeout", lease=5.0) as lock:
                self.assertEqual(lock.address, self.server.addr)
            self.assertGreaterEqual(time.monotonic() - start, 0.3)

    def test_every_address_down_names_them_all(self) -> None:
        with refusing_address() as first, refusing_address() as second:
            with self.assertRaises(monolock.ConnectError) as caught:
                self.sync_client(f"{first},{second}").lock("none", lease=5.0)
            self.assertEqual(caught.exception.addresses, (first, second))
            self.assertIn(first, str(caught.exception))
            self.assertIn(second, str(caught.exception))
            self.assertIsInstance(caught.exception, ConnectionError)

    def test_a_claim_is_never_moved_to_the_next_server(self) -> None:
        with Server() as primary:
            client = self.sync_client([primary.addr, self.server.addr])
            lock = client.lock("moved", lease=5.0)
            self.assertEqual(lock.address, primary.addr)
            primary.signal(signal.SIGTERM)
            loss = lock.wait_lost(PATIENCE)
            assert loss is not None
            self.assertIs(loss.reason, LossReason.SHUTDOWN)
            self.assertFalse(lock.is_held())
            # The loss is reported; nothing re-acquired on the standby.
            self.assertIsNone(self.server.lock("moved"))
            # A new claim, made by the caller, goes to the standby.
            primary.proc.wait(PATIENCE)
            with client.lock("moved", lease=5.0) as again:
                self.assertEqual(again.address, self.server.addr)


if __name__ == "__main__":
    unittest.main()
