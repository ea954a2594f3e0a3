"""TLS and mTLS through `ssl.SSLContext`, with the project's lab PKI."""

from __future__ import annotations

import asyncio
import gc
import json
import ssl
import tempfile
import time
import unittest
from pathlib import Path

import monolock
from support import CLIENT_IDENTITY, PATIENCE, Protocols, Server, also_v1, client_context, pki_dir, tls_args


@unittest.skipIf(pki_dir() is None, "MONOLOCK_TEST_PKI is not set")
@also_v1
class Tls(Protocols, unittest.TestCase):
    def test_tls_sync_and_async(self) -> None:
        with Server(*tls_args(mutual=False)) as server:
            context = client_context(with_certificate=False)
            with self.sync_client(server.addr, ssl_context=context).lock("tls", lease=5.0) as lock:
                self.assertTrue(lock.is_held())
                holder = server.lock("tls")
                assert holder is not None
                self.assertEqual(holder["holder"]["token"], lock.token)

            async def use() -> int:
                client = self.async_client(server.addr, ssl_context=context)
                async with client.lock("tls", lease=5.0) as lock:
                    self.assertTrue(lock.is_held())
                    return lock.token

            self.assertGreater(asyncio.run(use()), lock.token)

    def test_an_untrusted_server_is_a_connect_error(self) -> None:
        with Server(*tls_args(mutual=False)) as server:
            context = ssl.create_default_context()  # system roots only
            with self.assertRaises(monolock.ConnectError) as caught:
                self.sync_client(server.addr, ssl_context=context).lock("tls", lease=5.0)
            self.assertIn(server.addr, str(caught.exception))
            self.assertIsInstance(caught.exception.__cause__, ssl.SSLError)
            # A certificate that fails verification fails the same way every
            # time: a retry loop keyed on is_temporary must stop.
            self.assertFalse(caught.exception.is_temporary)
            # The name checked is the address's host unless overridden.
            trusted = client_context(with_certificate=False)
            with self.assertRaises(monolock.ConnectError):
                self.sync_client(server.addr, ssl_context=trusted, server_hostname="elsewhere").lock(
                    "tls", lease=5.0
                )
            with self.sync_client(server.addr, ssl_context=trusted, server_hostname="localhost").lock(
                "tls", lease=5.0
            ) as lock:
                self.assertTrue(lock.is_held())

    def test_a_client_without_ssl_context_is_told_to_pass_one(self) -> None:
        with Server(*tls_args(mutual=False)) as server:
            says = f"{server.addr} expects TLS: the server speaks TLS on this port; pass ssl_context"
            lease = 60.0  # an answer at the deadline could not pass for a prompt one
            start = time.monotonic()
            with self.assertRaises(monolock.ConnectError) as caught:
                self.sync_client(server.addr).lock("tls", lease=lease)
            self.assertIn(says, str(caught.exception))
            self.assertFalse(caught.exception.is_temporary)

            async def use() -> None:
                with self.assertRaises(monolock.ConnectError) as caught:
                    await self.async_client(server.addr).lock("tls", lease=lease)
                self.assertIn(says, str(caught.exception))

            asyncio.run(use())
            self.assertLess(time.monotonic() - start, 0.8 * lease)

    def test_mtls_identity_and_refusal(self) -> None:
        with Server(*tls_args(mutual=True)) as server:
            client = self.sync_client(server.addr, ssl_context=client_context(with_certificate=True))
            with client.lock("mtls", lease=5.0) as lock:
                seen = server.lock("mtls")
                assert seen is not None
                self.assertEqual(seen["holder"]["identity"], CLIENT_IDENTITY)
                self.assertEqual(seen["holder"]["token"], lock.token)
            anonymous = client_context(with_certificate=False)
            with self.assertRaises(monolock.ConnectError) as caught:
                self.sync_client(server.addr, ssl_context=anonymous).lock("mtls", lease=5.0)
            self.assertIn(server.addr, str(caught.exception))
            self.assertIsInstance(caught.exception.__cause__, ssl.SSLError)

            async def use() -> None:
                good = self.async_client(server.addr, ssl_context=client_context(True))
                async with good.lock("mtls", lease=5.0) as lock:
                    seen = await asyncio.to_thread(server.lock, "mtls")
                    assert seen is not None
                    self.assertEqual(seen["holder"]["identity"], CLIENT_IDENTITY)
                    self.assertTrue(lock.is_held())
                with self.assertRaises(monolock.ConnectError):
                    await self.async_client(server.addr, ssl_context=anonymous).lock("mtls", 5.0)

            asyncio.run(use())

    def test_a_lock_dropped_without_release_is_released_at_once_over_tls(self) -> None:
        # The RELEASE of a collected lock is written by the reactor thread
        # (not the owner's), which on TLS is the only writer: it goes at
        # once, not when the session gives up at 0.8 x lease (48 s here).
        with Server(*tls_args(mutual=False)) as server:
            context = client_context(with_certificate=False)
            dropped = self.sync_client(server.addr, ssl_context=context).lock("tls-drop", lease=60.0)
            token = dropped.token
            del dropped
            gc.collect()
            other = self.sync_client(server.addr, ssl_context=context)
            with other.lock("tls-drop", lease=5.0, wait=PATIENCE) as lock:
                self.assertGreater(lock.token, token)

    def test_an_acl_refusal_is_a_permanent_lock_lost(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            acl = Path(tmp) / "acl.json"
            rule = {"identity": CLIENT_IDENTITY, "locks": ["allowed/*"]}
            acl.write_text(json.dumps({"rules": [rule]}))
            with Server(*tls_args(mutual=True), "--acl-file", str(acl)) as server:
                client = self.sync_client(server.addr, ssl_context=client_context(True))
                with client.lock("allowed/job", lease=5.0) as lock:
                    self.assertTrue(lock.is_held())
                with self.assertRaises(monolock.LockLost) as caught:
                    client.lock("denied", lease=5.0)
                self.assertIs(caught.exception.reason, monolock.LossReason.SERVER_ERROR)
                self.assertEqual(caught.exception.code, 0x18)
                self.assertFalse(caught.exception.is_temporary)


if __name__ == "__main__":
    unittest.main()
