"""A monolock client pointed at a port that is not monolock's protocol
port: told so at once, in one line, and never as a lost lock."""

from __future__ import annotations

import asyncio
import http.server
import socketserver
import ssl
import threading
import time
import unittest
from contextlib import contextmanager
from typing import Any, Iterator

import monolock
from support import Protocols, SharedServer, also_v1

#: Long, so that an answer after the client's deadline (0.8 x lease) could
#: not pass for a prompt one.
LEASE = 60.0
HTTP_SAYS = "is not a monolock server: an HTTP server answered"


class _BadRequest(socketserver.BaseRequestHandler):
    """Answers what cannot start an HTTP request (a monolock ACQUIRE's
    first byte, 0x01, is no method name) with 400 and closes, as nginx
    and hyper do."""

    def handle(self) -> None:
        if self.request.recv(4096):
            self.request.sendall(
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )


@contextmanager
def http_server() -> Iterator[str]:
    """A plain HTTP server on a free loopback port."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _BadRequest)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.socket.getsockname()
        yield f"{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


@contextmanager
def line_waiting_http_server() -> Iterator[str]:
    """Python's own HTTP server, which answers nothing until it has read a
    request line (a monolock ACQUIRE has no newline)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.socket.getsockname()
        yield f"{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@also_v1
class WrongPorts(SharedServer, Protocols, unittest.TestCase):
    def assert_named(self, address: str, says: str) -> None:
        """Both clients raise a permanent ConnectError naming the address
        and what answered, long before the lease could run out."""
        start = time.monotonic()
        with self.assertRaises(monolock.ConnectError) as caught:
            self.sync_client(address).lock("wrong", lease=LEASE)
        self.assertLess(time.monotonic() - start, 0.8 * LEASE)
        self.assertIn(f"{address} {says}", str(caught.exception))
        self.assertFalse(caught.exception.is_temporary)
        self.assertEqual(caught.exception.addresses, (address,))
        with self.assertRaises(monolock.ConnectError):
            self.sync_client(address).try_lock("wrong", lease=LEASE)

        async def use() -> None:
            with self.assertRaises(monolock.ConnectError) as caught:
                await self.async_client(address).lock("wrong", lease=LEASE)
            self.assertIn(f"{address} {says}", str(caught.exception))
            self.assertFalse(caught.exception.is_temporary)
            with self.assertRaises(monolock.ConnectError):
                await self.async_client(address).try_lock("wrong", lease=LEASE)

        start = time.monotonic()
        asyncio.run(use())
        self.assertLess(time.monotonic() - start, 0.8 * LEASE)

    def test_a_plain_http_server(self) -> None:
        with http_server() as address:
            self.assert_named(address, HTTP_SAYS)

    def test_the_monolock_admin_port(self) -> None:
        self.assert_named(self.server.admin, HTTP_SAYS)

    def test_ssl_context_at_a_plain_port_is_told_to_drop_it(self) -> None:
        context = ssl.create_default_context()  # the handshake fails before any certificate
        says = f"{self.server.addr} does not speak TLS: it answered the TLS handshake in plain text"
        with self.assertRaises(monolock.ConnectError) as caught:
            self.sync_client(self.server.addr, ssl_context=context).lock("tls?", lease=LEASE)
        self.assertIn(says, str(caught.exception))
        self.assertFalse(caught.exception.is_temporary)

        async def use() -> None:
            with self.assertRaises(monolock.ConnectError) as caught:
                await self.async_client(self.server.addr, ssl_context=context).lock("tls?", LEASE)
            self.assertIn(says, str(caught.exception))

        asyncio.run(use())

    def test_a_port_that_never_answers_is_a_connect_error(self) -> None:
        # Nothing to recognise: the claim's own deadline (0.8 x 0.5 s, before
        # the connect timeout) ends the wait, and it is a failed connect
        # naming the address, never a lost lock; a retry may find a server.
        says = f"{{}} did not answer within 0.4 s"
        with line_waiting_http_server() as address:
            with self.assertRaises(monolock.ConnectError) as caught:
                self.sync_client(address).lock("silent", lease=0.5)
            self.assertIn(says.format(address), str(caught.exception))
            self.assertTrue(caught.exception.is_temporary)

            async def use() -> None:
                with self.assertRaises(monolock.ConnectError) as caught:
                    await self.async_client(address).lock("silent", lease=0.5)
                self.assertIn(says.format(address), str(caught.exception))

            asyncio.run(use())

    def test_a_port_that_never_answers_is_given_up_after_the_connect_timeout(self) -> None:
        # With a lease whose deadline is far off, the connect timeout bounds
        # the wait for the first answer.
        with line_waiting_http_server() as address:
            start = time.monotonic()
            with self.assertRaises(monolock.ConnectError) as caught:
                self.sync_client(address, connect_timeout=0.5).lock("silent", lease=60)
            self.assertIn(f"{address} did not answer within 0.5 s", str(caught.exception))
            self.assertTrue(caught.exception.is_temporary)
            self.assertLess(time.monotonic() - start, 30)

            async def use() -> None:
                with self.assertRaises(monolock.ConnectError) as caught:
                    await self.async_client(address, connect_timeout=0.5).lock("silent", lease=60)
                self.assertIn(f"{address} did not answer within 0.5 s", str(caught.exception))

            start = time.monotonic()
            asyncio.run(use())
            self.assertLess(time.monotonic() - start, 30)


if __name__ == "__main__":
    unittest.main()
