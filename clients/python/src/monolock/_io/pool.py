"""The sync client's v2 sessions, by server and lease: opened on first use
in the caller's thread, then served by the process's one reactor. Which
session takes a claim, which is evicted and when one is idle are the
core's rules (`_core/pool.py`); this module holds the sessions and the
locks around them.

A session is never shared across a fork: the pool belongs to the process
that made it; a child starts an empty one.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
import time
from typing import Dict, List, Optional, Tuple

from .._core import pool as rules
from .._core.address import Address
from .._core.pool import (
    PLAIN_ADDRESSES,
    V1_ADDRESSES,
    DialFailed,
    NoExtension,
    PoolKey,
    V1Only,
    pool_key,
)
from .._core.session import SessionCore, SState
from ..errors import LockLost
from .connect import Endpoints, dial, read_first_reply
from .reactor import current_pid, shared_reactor
from .sessions import SyncSession


class SessionPool:
    """The process's sessions, by server and lease."""

    def __init__(self) -> None:
        self.pid = current_pid()
        self.lock = threading.Lock()
        self.sessions: Dict[PoolKey, List[SyncSession]] = {}
        self.opening: Dict[Tuple[PoolKey, int], threading.Event] = {}

    def forget(self, session: SyncSession) -> None:
        with self.lock:
            sessions = self.sessions.get(session.key)
            if sessions is not None and session in sessions:
                sessions.remove(session)
                if not sessions:
                    del self.sessions[session.key]

    def session(
        self,
        endpoints: Endpoints,
        address: Address,
        lease_ms: int,
        extension: bool = False,
        watch: bool = False,
    ) -> SyncSession:
        """A session to `address` with this lease that has room for one more
        claim (`extension`: on a session granted values and observers), or,
        with `watch`, any session with room for one more watch: an open
        one, or a new one with this lease. Raises V1Only, NoExtension,
        DialFailed, ConnectError (the wrong port), LockLost (the OPEN's
        loss)."""
        key = pool_key(endpoints, address)
        while True:
            with self.lock:
                sessions = self.sessions.setdefault(key, [])
                if watch:
                    found = rules.with_watch_room(sessions)
                else:
                    found = rules.with_room(sessions, lease_ms, extension)
                if found is not None:
                    return found
                opening = self.opening.get((key, lease_ms))
                evicted: Optional[SyncSession] = None
                if opening is None:
                    evicted = rules.to_evict(sessions, address)
                    if evicted is not None:
                        sessions.remove(evicted)
                    opening = self.opening[(key, lease_ms)] = threading.Event()
                    mine = True
                else:
                    mine = False
            if evicted is not None:
                evicted.close()
            if not mine:
                opening.wait(endpoints._connect_timeout + lease_ms / 1000)
                continue
            try:
                session = self._open(endpoints, address, key, lease_ms)
                with self.lock:
                    self.sessions.setdefault(key, []).append(session)
                return session
            finally:
                with self.lock:
                    del self.opening[(key, lease_ms)]
                opening.set()

    def _open(self, endpoints: Endpoints, address: Address, key: PoolKey, lease_ms: int) -> SyncSession:
        """Dials, sends OPEN and reads OPENED in the caller's thread."""
        try:
            sock = dial(endpoints, address)
        except (OSError, ssl.SSLError) as err:
            raise DialFailed(str(err)) from err
        sent = time.monotonic_ns()
        core = SessionCore(lease_ms, sent, hello=not PLAIN_ADDRESSES.is_v1(key, sent))
        request = bytes(core.outbox)
        core.outbox.clear()
        read_first_reply(sock, request, core, sent, endpoints._connect_timeout)
        if core.state is not SState.OPEN:
            sock.close()
            if core.v1_only:
                V1_ADDRESSES.remember(key, time.monotonic_ns())
                raise V1Only()
            if core.no_extension:
                PLAIN_ADDRESSES.remember(key, time.monotonic_ns())
                raise NoExtension()
            loss = core.loss or LockLost.connection()
            raise loss
        session = SyncSession(core, sock, address, key, self)
        session.reactor = shared_reactor()
        session.reactor.add(session)
        return session


POOL = SessionPool()


def _after_fork_in_child() -> None:
    """A child never shares its parent's sessions: it starts an empty pool
    (the parent's descriptors are closed here without a shutdown, which
    would end the parent's sessions)."""
    global POOL
    old = POOL
    POOL = SessionPool()
    V1_ADDRESSES.clear()
    PLAIN_ADDRESSES.clear()
    for sessions in old.sessions.values():
        for session in sessions:
            session.closed = True
            try:
                socket.socket.close(session.sock)
            except OSError:
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
