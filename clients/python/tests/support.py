"""The real `monolock serve` as a child process on free loopback ports, its
admin API, and the lab PKI written by the Rust test that runs this suite.

Environment:
- MONOLOCK_BIN: the `monolock` executable (default: target/debug/monolock
  of the repository).
- MONOLOCK_TEST_PKI: a directory with ca.pem (the server CA), server.pem,
  server.key, clients-ca.pem, client.pem, client.key. TLS tests are skipped
  without it (the Rust test runner always sets it and fails on a skip).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Type, TypeVar

import monolock

REPO = Path(__file__).resolve().parents[3]
#: Long enough that only a real hang trips it.
PATIENCE = 20.0


def monolock_bin() -> str:
    return os.environ.get("MONOLOCK_BIN") or str(REPO / "target" / "debug" / "monolock")


def pki_dir() -> Optional[Path]:
    value = os.environ.get("MONOLOCK_TEST_PKI")
    return Path(value) if value else None


class Server:
    """`monolock serve --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0`,
    its addresses learnt from its JSON startup log."""

    def __init__(self, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [
                monolock_bin(),
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
                "--log-format",
                "json",
                *extra,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.log: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        threading.Thread(target=self._follow, daemon=True).start()
        self.addr = ""
        self.admin = ""
        end = time.monotonic() + PATIENCE
        while not (self.addr and self.admin):
            line = self.log.get(timeout=max(end - time.monotonic(), 0.01))
            message = line.get("message")
            if message == "listening":
                self.addr = line["addr"]
            elif message == "admin API listening":
                self.admin = line["addr"]

    def _follow(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            try:
                self.log.put(json.loads(raw))
            except ValueError:
                self.log.put({"message": raw.decode("utf-8", "replace")})

    def wait_log(self, text: str) -> Dict[str, Any]:
        end = time.monotonic() + PATIENCE
        while True:
            line = self.log.get(timeout=max(end - time.monotonic(), 0.01))
            if text in str(line.get("message", "")):
                return line

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def pause(self) -> None:
        """SIGSTOP, returning once the kernel shows the server stopped (a
        signal is delivered asynchronously: until then it may still answer)."""
        self.proc.send_signal(signal.SIGSTOP)
        end = time.monotonic() + PATIENCE
        while True:
            with open(f"/proc/{self.proc.pid}/stat") as stat:
                # The state follows the parenthesised command name.
                if stat.read().rsplit(")", 1)[1].split()[0] == "T":
                    return
            if time.monotonic() > end:
                raise AssertionError("the server did not stop")
            time.sleep(0.001)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(PATIENCE)
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # the admin API (docs/operations.md, "The admin API")

    def _request(self, method: str, path: str) -> Optional[Dict[str, Any]]:
        # X-Requested-By: every change to the admin API needs it.
        request = urllib.request.Request(
            f"http://{self.admin}{path}", method=method, headers={"X-Requested-By": "monolock-tests"}
        )
        try:
            with urllib.request.urlopen(request, timeout=PATIENCE) as response:
                body: Dict[str, Any] = json.load(response)
                return body
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise

    def lock(self, name: str) -> Optional[Dict[str, Any]]:
        """The lock's holder and waiters, or None when it has neither."""
        return self._request("GET", "/api/locks/" + urllib.parse.quote(name, safe=""))

    def force_release(self, name: str) -> Optional[Dict[str, Any]]:
        return self._request("POST", "/api/locks/" + urllib.parse.quote(name, safe="") + "/release")

    def waiters(self, name: str) -> List[Dict[str, Any]]:
        lock = self.lock(name)
        return [] if lock is None else list(lock["waiters"])


class Protocols:
    """Clients of the version a test case runs with: protocol v2 sessions
    (the default), or v1 forced in the copy that `also_v1` makes."""

    force_v1 = False

    def sync_client(self, address: Any = None, **options: Any) -> monolock.Client:
        return monolock.Client(address, force_v1=self.force_v1, **options)

    def async_client(self, address: Any = None, **options: Any) -> monolock.AsyncClient:
        return monolock.AsyncClient(address, force_v1=self.force_v1, **options)


Case = TypeVar("Case", bound=Type[Protocols])


def also_v1(case: Case) -> Case:
    """Runs a test case twice: as written, on protocol v2 sessions, and
    with `force_v1=True` (one connection per lock) in a subclass named
    `<name>V1` that unittest finds in the same module."""
    name = case.__name__ + "V1"
    copy = type(name, (case,), {"force_v1": True, "__module__": case.__module__, "__qualname__": name})
    setattr(sys.modules[case.__module__], name, copy)
    return case


class SharedServer:
    """A mixin for test cases that share one server per class."""

    server: Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = Server()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()


class Proxy:
    """A TCP proxy on a free loopback port in front of `upstream`.

    `stall()` stops it forwarding anything, both ways, as a network path
    that goes silent does; `hold_requests()` stops only what the client
    sends (the server's frames still arrive); with `v1_only` it plays a
    server that speaks only v1: an OPEN is answered ERROR 0x10 (and
    counted in `opens`)."""

    def __init__(self, upstream: str, *, v1_only: bool = False) -> None:
        self.upstream = upstream
        self.v1_only = v1_only
        self.opens = 0
        self.stalled = threading.Event()
        self.requests_held = threading.Event()
        self._stop = threading.Event()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.05)
        self.addr = "127.0.0.1:%d" % self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def stall(self) -> None:
        self.stalled.set()

    def hold_requests(self) -> None:
        self.requests_held.set()

    def close(self) -> None:
        self._stop.set()
        self.stalled.clear()
        self.requests_held.clear()
        self._thread.join(PATIENCE)
        self._listener.close()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                while (
                    self.stalled.is_set() or (requests and self.requests_held.is_set())
                ) and not self._stop.is_set():
                    self._stop.wait(0.01)  # the fault: nothing passes
                if not data or self._stop.is_set():
                    break
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while len(head) < 2:
                data = conn.recv(2 - len(head))
                if not data:
                    return
                head += data
            if self.v1_only and head == b"\x01\x02":
                self.opens += 1
                reason = b"unsupported protocol version: 2"
                conn.sendall(bytes([0x13, 0x10, len(reason)]) + reason)
                conn.shutdown(socket.SHUT_WR)
                return
            host, port = self.upstream.rsplit(":", 1)
            with socket.create_connection((host, int(port))) as up:
                up.sendall(head)
                back = threading.Thread(target=self._pipe, args=(up, conn, False), daemon=True)
                back.start()
                self._pipe(conn, up, True)
                back.join(PATIENCE)


def eventually(what: str, condition: Callable[[], bool], patience: float = PATIENCE) -> None:
    """Polls `condition` (for state only visible by asking, such as the
    admin API) until it holds, at most `patience` seconds."""
    end = time.monotonic() + patience
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def confirmed_after(deadline: Callable[[], float]) -> float:
    """Waits for a confirmed heartbeat (the lock's deadline moves on) and
    returns the instant of the last look that still saw the old deadline.
    The confirmed heartbeat's send instant S is at most one round trip
    before that instant, whatever the client computes: a bound on S that
    does not trust the client's own arithmetic."""
    first = deadline()
    end = time.monotonic() + PATIENCE
    while True:
        before = time.monotonic()
        if deadline() != first:
            return before
        if before > end:
            raise AssertionError("no heartbeat was confirmed")
        time.sleep(0.002)


def assert_gave_up_in_time(
    case: unittest.TestCase, lost_at: float, seen_old: float, deadline: float, lease: float
) -> None:
    """The loss came between S + 0.8 x lease and S + lease: after the
    client's deadline, before the server could expire the session. S is
    bounded by `seen_old` (see `confirmed_after`) and, reported by the
    client, by `deadline` - 0.8 x lease."""
    case.assertLess(lost_at - seen_old, 0.9 * lease, "gave up too late")
    last_confirmed_send = deadline - 0.8 * lease
    case.assertLessEqual(last_confirmed_send, seen_old + 0.01)
    case.assertLess(lost_at - last_confirmed_send, lease, "gave up too late")
    case.assertGreaterEqual(lost_at - last_confirmed_send, 0.8 * lease - 0.001, "gave up early")


def client_context(with_certificate: bool) -> ssl.SSLContext:
    """Trusts the lab server CA; presents the lab client certificate if asked."""
    pki = pki_dir()
    assert pki is not None
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if with_certificate:
        context.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    return context


def tls_args(mutual: bool) -> List[str]:
    pki = pki_dir()
    assert pki is not None
    args = ["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key")]
    if mutual:
        args += ["--tls-client-ca", str(pki / "clients-ca.pem")]
    return args


#: The identity in the lab client certificate.
CLIENT_IDENTITY = "spiffe://test/python-client"
