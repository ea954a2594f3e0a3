"""The sync client's one reactor: a daemon thread with one readiness loop
that reads and heartbeats every connection of the process, v1
connections and v2 sessions alike.

Why one shared thread and not one thread per held lock: both were built
on this class and measured in one run (clients/python/bench/threads.py,
table in docs/client-python.md): a lock cycle p50 of 187 us against 302 us
(a thread per lock starts and ends a thread each time), and per held lock
4.8 KB against 23.8 KB of memory and about a third of the CPU (500 locks
heartbeating: 4.7 % against 13.3 %). Connections never wait on each other
in the loop: reads and writes are non-blocking.

The loop knows no protocol: it serves `Channel`s (`_io/v1.py`,
`_io/sessions.py`), each a socket and its sans-I/O core, through a few
hooks: readable, writable, a timer at the instant the channel names, a
failure, a close. Other threads talk to it through a command queue and a
wake-up socket; they never touch the poller, except to arm and disarm a
v2 session's one-shot readiness around an owner's own read (epoll is
thread-safe).
"""

from __future__ import annotations

import collections
import enum
import heapq
import itertools
import os
import select
import selectors
import socket
import ssl
import threading
import time
from typing import Callable, Deque, Dict, List, Optional, Tuple, Union

#: Bytes read from a socket at a time. Frames are at most 262 bytes.
READ_CHUNK = 4096

#: What a non-blocking socket raises when it cannot go on now.
WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)

_pid = os.getpid()


def current_pid() -> int:
    """This process's id, kept up to date across forks without a system
    call per look (the claim paths check it on every request)."""
    return _pid


def _after_fork_in_child() -> None:
    global _pid
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def shutdown_socket(sock: socket.socket) -> None:
    """Sends FIN now (the server hands the lock on at once) without closing
    the descriptor, which the reactor thread may be polling. The plain
    socket method is used on TLS sockets too: it does not touch the TLS
    state that the reactor thread owns."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def read_available(
    sock: socket.socket, short_read_drains: bool
) -> Tuple[List[bytes], bool, Optional[BaseException]]:
    """Every byte a non-blocking socket has now: the chunks read, whether
    the peer's EOF came, and the failure that ended the reads, if one did.
    `short_read_drains`: a read shorter than asked for means the buffer is
    empty (true of a plain socket; TLS reads until it would block, as a
    record may hold more than one read returns)."""
    chunks: List[bytes] = []
    try:
        while True:
            data = sock.recv(READ_CHUNK)
            if not data:
                return chunks, True, None
            chunks.append(data)
            if short_read_drains and len(data) < READ_CHUNK:
                return chunks, False, None
    except WOULD_BLOCK:
        return chunks, False, None
    except (OSError, ssl.SSLError, ValueError) as err:
        return chunks, False, err


class Channel:
    """What the reactor serves: one socket and the driver of its core.
    The hooks run on the reactor thread only, each guarded: an exception
    in one ends that channel (its claims reported lost), never the thread
    that serves the others."""

    __slots__ = ()

    sock: socket.socket
    #: The instant of this channel's live timer entry, if any (the
    #: reactor's; a newer entry makes older ones stale).
    wake_at: Optional[int]
    #: Closed: nothing more to serve. (Plain attributes rather than
    #: methods: the poller reads them on every lock cycle.)
    closed: bool
    #: Bytes that wait for the socket to accept them (empty: none).
    unsent: Union[bytes, bytearray]

    def attach(self, direct_reads: bool) -> None:
        """Served from now on; `direct_reads`: the poller is one-shot, so an
        owner may read its reply itself between `disarm` and `arm`."""

    def readable(self) -> bool:
        """Reads and feeds the core. True: watch the socket again."""
        raise NotImplementedError

    def writable(self) -> None:
        """Writes what waits."""

    def next_wake(self, now: int) -> Optional[int]:
        """When to call `tick` without input; None: never."""
        raise NotImplementedError

    def tick(self, now: int) -> None:
        """The instant `next_wake` named has come."""
        raise NotImplementedError

    def failed(self, err: Exception) -> None:
        """A hook raised `err`: end the claims (the reactor closes next)."""
        raise NotImplementedError

    def begin_close(self) -> bool:
        """The reactor closes the channel: mark it closed, end its claims.
        False when it was closed already."""
        raise NotImplementedError

    def finish_close(self) -> None:
        """Once the poller let go of the socket: close it, wake the owners."""
        raise NotImplementedError


def _write(channel: Channel) -> None:
    """A channel's `writable` hook, dispatched on its own class (the base
    class's method is only its documentation)."""
    channel.writable()


class _Epoll:
    """Readiness by epoll, each socket one-shot: after an event it stays
    disarmed until `arm`, so an owner thread can read its reply itself
    while the reactor thread leaves that socket alone."""

    oneshot = True

    def __init__(self, wake: socket.socket) -> None:
        self._epoll = select.epoll()
        self._wake = wake.fileno()
        self._epoll.register(self._wake, select.EPOLLIN)
        self._channels: Dict[int, Channel] = {}

    def add(self, channel: Channel) -> None:
        fd = channel.sock.fileno()
        self._channels[fd] = channel
        self._epoll.register(fd, select.EPOLLIN | select.EPOLLONESHOT)

    def arm(self, channel: Channel) -> None:
        """From any thread (epoll is the kernel's, and thread-safe)."""
        events = select.EPOLLIN | select.EPOLLONESHOT
        if channel.unsent:
            events |= select.EPOLLOUT
        try:
            fd = channel.sock.fileno()
            if fd >= 0 and not channel.closed:
                self._epoll.modify(fd, events)
        except (OSError, ValueError):
            pass  # closed meanwhile

    def disarm(self, channel: Channel) -> None:
        """From any thread: no event for this socket until `arm`."""
        try:
            fd = channel.sock.fileno()
            if fd >= 0 and not channel.closed:
                self._epoll.modify(fd, 0)
        except (OSError, ValueError):
            pass  # closed meanwhile

    def remove(self, channel: Channel) -> bool:
        fd = channel.sock.fileno()
        if self._channels.get(fd) is not channel:
            return False
        del self._channels[fd]
        try:
            self._epoll.unregister(fd)
        except (OSError, ValueError):
            pass
        return True

    def poll(self, timeout: Optional[float]) -> List[Tuple[Optional[Channel], bool, bool]]:
        ready: List[Tuple[Optional[Channel], bool, bool]] = []
        for fd, events in self._epoll.poll(-1 if timeout is None else timeout):
            if fd == self._wake:
                ready.append((None, True, False))
            elif fd in self._channels:
                readable = bool(events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR))
                ready.append((self._channels[fd], readable, bool(events & select.EPOLLOUT)))
        return ready

    def close(self) -> None:
        self._epoll.close()


class _Selector:
    """Readiness by `selectors` where epoll is missing: level-triggered,
    so only the reactor thread reads (no direct reads by owners)."""

    oneshot = False

    def __init__(self, wake: socket.socket) -> None:
        self._sel = selectors.DefaultSelector()
        self._sel.register(wake, selectors.EVENT_READ, None)

    def add(self, channel: Channel) -> None:
        self._sel.register(channel.sock, selectors.EVENT_READ, channel)

    def arm(self, channel: Channel) -> None:
        """Reactor thread only."""
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if channel.unsent else 0)
        try:
            if not channel.closed:
                self._sel.modify(channel.sock, events, channel)
        except (KeyError, ValueError, OSError):
            pass

    def disarm(self, channel: Channel) -> None:
        """Never called: owners do not read on a level-triggered poller."""

    def remove(self, channel: Channel) -> bool:
        try:
            self._sel.unregister(channel.sock)
        except (KeyError, ValueError):
            return False
        return True

    def poll(self, timeout: Optional[float]) -> List[Tuple[Optional[Channel], bool, bool]]:
        return [
            (key.data, bool(events & selectors.EVENT_READ), bool(events & selectors.EVENT_WRITE))
            for key, events in self._sel.select(timeout)
        ]

    def close(self) -> None:
        self._sel.close()


class _Command(enum.Enum):
    ADD = "add"
    CLOSE = "close"
    #: Write what waits and watch the socket again.
    FLUSH = "flush"
    #: Run a function of the channel on the reactor thread.
    CALL = "call"


class Reactor:
    """A readiness loop over channels on one daemon thread.

    `dedicated` reactors serve until their channels have ended, then end
    their thread (the thread-per-lock design, kept for the measurement)."""

    def __init__(self, dedicated: bool = False) -> None:
        self.dedicated = dedicated
        self.pid = current_pid()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._poller = _Epoll(self._wake_r) if hasattr(select, "epoll") else _Selector(self._wake_r)
        self._commands: Deque[Tuple[_Command, Channel, Optional[Callable[[], object]]]] = (
            collections.deque()
        )
        self._heap: List[Tuple[int, int, Channel]] = []
        self._seq = itertools.count()
        self._channels = 0
        self._served = False
        self._thread = threading.Thread(target=self._run, name="monolock-reactor", daemon=True)
        self._thread.start()

    @property
    def direct_reads(self) -> bool:
        """Owners may read their replies themselves (one-shot readiness)."""
        return self._poller.oneshot

    def alive(self) -> bool:
        return self._thread.is_alive() and self.pid == current_pid()

    def join(self, timeout: float) -> bool:
        """Waits for the thread to end; True if it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def add(self, channel: Channel) -> None:
        """Starts serving `channel` (its socket is non-blocking)."""
        self._command(_Command.ADD, channel)

    def remove(self, channel: Channel) -> None:
        """Stops serving `channel` and closes its socket."""
        self._command(_Command.CLOSE, channel)

    def flush(self, channel: Channel) -> None:
        """Has the reactor thread write what `channel` queued."""
        self._command(_Command.FLUSH, channel)

    def call(self, channel: Channel, step: Callable[[], object]) -> None:
        """Runs `step` on the reactor thread, guarded as `channel`'s."""
        self._command(_Command.CALL, channel, step)

    def arm(self, channel: Channel) -> None:
        """After an owner's direct read: the reactor watches the socket
        again (one-shot readiness only)."""
        if self._poller.oneshot:
            self._poller.arm(channel)

    def disarm(self, channel: Channel) -> None:
        """Before an owner's direct read (one-shot readiness only)."""
        if self._poller.oneshot:
            self._poller.disarm(channel)

    def _command(
        self, what: _Command, channel: Channel, step: Optional[Callable[[], object]] = None
    ) -> None:
        """Queues work for the reactor thread (a deque append and a one-byte
        write: safe from any thread, from `__del__` too)."""
        self._commands.append((what, channel, step))
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass  # a full wake-up buffer already wakes the loop

    # Everything below runs on the reactor thread only.

    def _run(self) -> None:
        while self._take_commands():
            heap = self._heap
            while heap and heap[0][2].wake_at != heap[0][0]:
                heapq.heappop(heap)
            timeout = None
            if heap:
                timeout = max(heap[0][0] - time.monotonic_ns(), 0) / 1e9
            for channel, readable, writable in self._poller.poll(timeout):
                if channel is None:
                    self._drain_wake()
                    continue
                if writable:
                    self._guarded(_write, channel)
                if readable:
                    self._guarded(self._readable, channel)
                elif self._poller.oneshot or writable:
                    self._poller.arm(channel)
            self._timers(time.monotonic_ns())
        self._poller.close()
        self._wake_r.close()
        self._wake_w.close()

    def _take_commands(self) -> bool:
        """Applies queued commands. False when a dedicated reactor is done."""
        while self._commands:
            what, channel, step = self._commands.popleft()
            if what is _Command.ADD:
                # A dedicated reactor has had its channel, served or not.
                self._served = True
                if channel.closed:
                    continue
                channel.attach(self._poller.oneshot)
                self._poller.add(channel)
                self._channels += 1
                self._schedule(channel)
                self._guarded(self._readable, channel)  # TLS may have read ahead
            elif what is _Command.CLOSE:
                self._close(channel)
            elif what is _Command.CALL and step is not None:
                self._guarded(lambda _: step(), channel)
            elif not channel.closed:  # FLUSH
                self._guarded(_write, channel)
                self._poller.arm(channel)
        return not (self.dedicated and self._served and self._channels == 0)

    def _guarded(self, step: Callable[[Channel], object], channel: Channel) -> None:
        """Runs one channel's step; a failure in it ends that channel (its
        claims reported lost), never the thread that serves the rest."""
        try:
            step(channel)
        except Exception as err:  # noqa: BLE001 - reported as the claims' loss
            channel.failed(err)
            self._close(channel)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _schedule(self, channel: Channel) -> None:
        wake = channel.next_wake(time.monotonic_ns())
        if wake is None:
            channel.wake_at = None
        elif wake != channel.wake_at:
            channel.wake_at = wake
            heapq.heappush(self._heap, (wake, next(self._seq), channel))

    def _readable(self, channel: Channel) -> None:
        if channel.closed:
            return
        if channel.readable() and not channel.closed:
            self._poller.arm(channel)
            self._schedule(channel)

    def _timers(self, now: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            wake, _, channel = heapq.heappop(heap)
            if channel.wake_at != wake or channel.closed:
                continue
            channel.wake_at = None
            self._guarded(lambda c: self._tick(c, now), channel)

    def _tick(self, channel: Channel, now: int) -> None:
        channel.tick(now)
        if not channel.closed:
            self._schedule(channel)

    def watch(self, channel: Channel) -> None:
        """Reactor thread only (a channel's hook): watches the socket again,
        for writing too while bytes wait."""
        self._poller.arm(channel)

    def close_now(self, channel: Channel) -> None:
        """Reactor thread only (a channel's hook): closes it at once."""
        self._close(channel)

    def _close(self, channel: Channel) -> None:
        if not channel.begin_close():
            return
        channel.wake_at = None
        if self._poller.remove(channel):
            self._channels -= 1
        channel.finish_close()


_shared: Optional[Reactor] = None
_shared_lock = threading.Lock()


def shared_reactor() -> Reactor:
    """The process's reactor, started on first use (and again in a forked
    child, where the parent's thread does not exist)."""
    reactor = _shared
    if reactor is not None and reactor.alive():
        return reactor
    return _start_shared()


def _start_shared() -> Reactor:
    global _shared
    with _shared_lock:
        if _shared is None or not _shared.alive():
            _shared = Reactor()
        return _shared


def dedicated_reactor() -> Reactor:
    """A reactor with a thread of its own for one connection."""
    return Reactor(dedicated=True)
