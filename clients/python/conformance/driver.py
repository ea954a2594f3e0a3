"""The conformance driver of the Python client: reads commands as JSON
lines on stdin and answers each with one JSON line on stdout, as
clients/conformance/DRIVER.md specifies.

A thin shell around the public, blocking API (`Client.lock`,
`Client.try_lock`, `Lock.is_held/check/wait_lost/release/set_value`,
`Client.observe`, `Client.holder`, `LeaderElector`, `ssl_context` for
TLS): it decides nothing the client should decide, so what the suite
checks is the client itself.

Run with the client importable: `PYTHONPATH=clients/python/src python3
clients/python/conformance/driver.py`.
"""

from __future__ import annotations

import json
import os
import queue
import ssl
import sys
import threading
from typing import Any, Dict, Optional, Tuple

import monolock

Fields = Dict[str, Any]


class Failure(Exception):
    """A failed command: the `error` object of the reply. `temporary` is
    the client's own `is_temporary` (False for the driver's own errors)."""

    def __init__(
        self, kind: str, message: str, reason: Optional[str] = None, temporary: bool = False
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.reason = reason
        self.temporary = temporary


def classify(err: monolock.Error) -> Failure:
    """The DRIVER.md kind of an error the client raised. Loss reasons are
    the client's own values (`LossReason.value`), passed on as they are."""
    temporary = err.is_temporary
    if isinstance(err, monolock.Unsupported):
        return Failure("unsupported", str(err), temporary=temporary)
    if isinstance(err, monolock.InvalidArgument):
        return Failure("invalid_argument", str(err), temporary=temporary)
    if isinstance(err, monolock.NotAcquired):
        return Failure("not_acquired", str(err), temporary=temporary)
    if isinstance(err, monolock.ConnectError):
        kind = "tls" if isinstance(err.__cause__, ssl.SSLError) else "connect"
        return Failure(kind, str(err), temporary=temporary)
    if isinstance(err, monolock.LockLost):
        if err.code is not None and not err.is_temporary:
            return Failure("server", str(err), temporary=temporary)
        return Failure("lost", str(err), err.reason.value, temporary=temporary)
    return Failure("other", f"{type(err).__name__}: {err}", temporary=temporary)


def field(cmd: Fields, name: str, kind: type) -> Any:
    value = cmd.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise Failure("other", f"the command needs a {kind.__name__} {name!r}")
    return value


def lease_seconds(cmd: Fields) -> float:
    """`lease_ms` (which may carry a fraction) in the client's unit."""
    value = cmd.get("lease_ms")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Failure("other", "the command needs a number 'lease_ms'")
    return value / 1000


def state_fields(state: monolock.LockState) -> Fields:
    """A state as the driver protocol writes it (`since` is not sent)."""
    return {
        "held": state.held,
        "token": str(state.token),
        "value": state.value,
        "event": state.event,
        "initial": state.initial,
        "coalesced": state.coalesced,
        "reason": state.reason,
    }


def timeout_seconds(cmd: Fields) -> float:
    return float(field(cmd, "timeout_ms", int)) / 1000


class Election:
    """An election helper run in the background, its callbacks queued as
    events in the order they fired."""

    def __init__(self, client: monolock.Client, name: str, lease: float, value: str) -> None:
        self.events: "queue.Queue[Fields]" = queue.Queue()
        self.failure: Optional[monolock.Error] = None
        self.elector = monolock.LeaderElector(
            client,
            name,
            lease,
            value,
            on_started_leading=lambda token: self.events.put(
                {"kind": "started_leading", "token": str(token)}
            ),
            on_stopped_leading=lambda: self.events.put({"kind": "stopped_leading"}),
            on_new_leader=lambda state: self.events.put(
                {"kind": "new_leader", "token": str(state.token), "value": state.value}
            ),
        )
        self.ended = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.elector.run()
        except monolock.Error as err:
            self.failure = err
            self.events.put({})  # wakes a reader: the helper's end follows the events
        finally:
            self.ended.set()

    def next_event(self, timeout: float) -> Optional[Fields]:
        """The next event, None after `timeout` seconds; raises the error
        that ended the helper once every event before it was read."""
        try:
            event = self.events.get(timeout=timeout)
        except queue.Empty:
            return None
        if not event:
            self.events.put(event)  # the end stays the answer
            assert self.failure is not None
            raise self.failure
        return event

    def start(self) -> None:
        """Starts the helper; returns once its observation is registered,
        or raises why it could not start (Unsupported, say)."""
        self.thread.start()
        while not self.elector.ready.wait(0.01):
            if self.ended.is_set():
                break
        if self.failure is not None:
            raise self.failure


class Driver:
    """The driver's state: its client, and the locks, observations and
    elections it holds, by handle (one namespace)."""

    def __init__(self) -> None:
        self.client: Optional[monolock.Client] = None
        self.handles: Dict[str, monolock.Lock] = {}
        self.observations: Dict[str, monolock.Observation] = {}
        self.elections: Dict[str, Election] = {}

    def new_handle(self, cmd: Fields) -> str:
        handle: str = field(cmd, "handle", str)
        if handle in self.handles or handle in self.observations or handle in self.elections:
            raise Failure("other", f"handle {handle!r} is in use")
        return handle

    def observation(self, cmd: Fields) -> Tuple[str, monolock.Observation]:
        handle = field(cmd, "handle", str)
        found = self.observations.get(handle)
        if found is None:
            raise Failure("unknown_handle", f"no observation {handle!r}")
        return handle, found

    def election(self, cmd: Fields) -> Tuple[str, Election]:
        handle = field(cmd, "handle", str)
        found = self.elections.get(handle)
        if found is None:
            raise Failure("unknown_handle", f"no election {handle!r}")
        return handle, found

    def need_client(self) -> monolock.Client:
        if self.client is None:
            raise Failure("other", "no client: send `open` first")
        return self.client

    def lock(self, cmd: Fields) -> monolock.Lock:
        handle = field(cmd, "handle", str)
        found = self.handles.get(handle)
        if found is None:
            raise Failure("unknown_handle", f"no handle {handle!r}")
        return found

    def run(self, cmd: Fields) -> Fields:
        name = cmd.get("cmd")
        method = getattr(self, f"cmd_{name}", None) if isinstance(name, str) else None
        if method is None:
            raise Failure("other", f"unknown command {name!r}")
        try:
            fields: Fields = method(cmd)
            return fields
        except monolock.Error as err:
            raise classify(err) from err

    def cmd_open(self, cmd: Fields) -> Fields:
        address = field(cmd, "address", str)
        tls = cmd.get("tls")
        context = None
        server_name = None
        if tls:
            try:
                context = ssl.create_default_context(cafile=field(tls, "ca", str))
                if tls.get("cert") and tls.get("key"):
                    context.load_cert_chain(tls["cert"], tls["key"])
            except (OSError, ssl.SSLError) as err:
                raise Failure("tls", f"unusable TLS settings: {err}") from err
            server_name = tls.get("server_name")
        self.client = monolock.Client(
            address,
            ssl_context=context,
            server_hostname=server_name,
            force_v1=cmd.get("force_v1") is True,
        )
        return {}

    def cmd_lock(self, cmd: Fields) -> Fields:
        handle = field(cmd, "handle", str)
        wait_ms = cmd.get("wait_ms")
        wait = None if wait_ms is None else field(cmd, "wait_ms", int) / 1000
        value = None if cmd.get("value") is None else field(cmd, "value", str)
        lock = self.need_client().lock(
            field(cmd, "name", str), lease_seconds(cmd), wait=wait, value=value
        )
        self.handles[handle] = lock
        return {"token": str(lock.token)}

    def cmd_try_lock(self, cmd: Fields) -> Fields:
        handle = field(cmd, "handle", str)
        value = None if cmd.get("value") is None else field(cmd, "value", str)
        lock = self.need_client().try_lock(field(cmd, "name", str), lease_seconds(cmd), value=value)
        if lock is None:
            return {"acquired": False}
        self.handles[handle] = lock
        return {"acquired": True, "token": str(lock.token)}

    def cmd_release(self, cmd: Fields) -> Fields:
        lock = self.lock(cmd)
        del self.handles[cmd["handle"]]
        lock.release()
        return {}

    def cmd_is_held(self, cmd: Fields) -> Fields:
        return {"held": self.lock(cmd).is_held()}

    def cmd_check(self, cmd: Fields) -> Fields:
        self.lock(cmd).check()
        return {}

    def cmd_token(self, cmd: Fields) -> Fields:
        return {"token": str(self.lock(cmd).token)}

    def cmd_wait_lost(self, cmd: Fields) -> Fields:
        loss = self.lock(cmd).wait_lost(field(cmd, "timeout_ms", int) / 1000)
        if loss is None:
            return {"lost": False}
        return {"lost": True, "reason": loss.reason.value, "message": str(loss)}

    def cmd_set_value(self, cmd: Fields) -> Fields:
        self.lock(cmd).set_value(field(cmd, "value", str))
        return {}

    def cmd_observe(self, cmd: Fields) -> Fields:
        handle = self.new_handle(cmd)
        try:
            observation = self.need_client().observe(field(cmd, "name", str))
        except monolock.LockLost as err:
            # A watch the server refused (its bound, the ACL) is the
            # server's refusal, whether the code is temporary or not:
            # nothing was being observed, so nothing was lost.
            if err.reason is monolock.LossReason.SERVER_ERROR:
                raise Failure("server", str(err), temporary=err.is_temporary) from err
            raise
        try:
            state = observation.get()
        except BaseException:
            observation.close()
            raise
        if state is None:
            observation.close()
            raise Failure("other", "the observation ended before its initial state")
        self.observations[handle] = observation
        return {"state": state_fields(state)}

    def cmd_next_state(self, cmd: Fields) -> Fields:
        _, observation = self.observation(cmd)
        state = observation.get(timeout_seconds(cmd))
        if state is None:
            return {"timeout": True}
        return {"state": state_fields(state)}

    def cmd_unobserve(self, cmd: Fields) -> Fields:
        handle, observation = self.observation(cmd)
        del self.observations[handle]
        observation.close()
        return {}

    def cmd_holder(self, cmd: Fields) -> Fields:
        return {"state": state_fields(self.need_client().holder(field(cmd, "name", str)))}

    def cmd_elect(self, cmd: Fields) -> Fields:
        handle = self.new_handle(cmd)
        election = Election(
            self.need_client(), field(cmd, "name", str), lease_seconds(cmd), field(cmd, "value", str)
        )
        election.start()
        self.elections[handle] = election
        return {}

    def cmd_next_election_event(self, cmd: Fields) -> Fields:
        _, election = self.election(cmd)
        event = election.next_event(timeout_seconds(cmd))
        return {"timeout": True} if event is None else {"event": event}

    def cmd_resign(self, cmd: Fields) -> Fields:
        # The handle stays: the events queued before remain readable.
        _, election = self.election(cmd)
        election.elector.resign()
        return {}

    def cmd_cycles(self, cmd: Fields) -> Fields:
        client = self.need_client()
        name = field(cmd, "name", str)
        lease = field(cmd, "lease_ms", int) / 1000
        count = field(cmd, "count", int)
        for _ in range(count):
            with client.lock(name, lease):
                pass
        return {"count": count}

    def cmd_stats(self, cmd: Fields) -> Fields:
        stats: Fields = {"threads": threading.active_count()}
        try:
            # The listing's own descriptor is counted too.
            stats["fds"] = len(os.listdir("/proc/self/fd")) - 1
        except OSError:
            pass
        return stats

    def close(self) -> None:
        for election in self.elections.values():
            election.elector.stop()
        self.elections.clear()
        for observation in self.observations.values():
            observation.close()
        self.observations.clear()
        for lock in self.handles.values():
            try:
                lock.release()
            except monolock.Error:
                pass
        self.handles.clear()


def reply(cid: Any, fields: Optional[Fields], failure: Optional[Failure]) -> str:
    if failure is None:
        return json.dumps({"id": cid, "ok": True, **(fields or {})})
    error = {
        "kind": failure.kind,
        "reason": failure.reason,
        "message": str(failure),
        "temporary": failure.temporary,
    }
    return json.dumps({"id": cid, "ok": False, "error": error})


def main() -> int:
    driver = Driver()
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                cmd = json.loads(line)
                if not isinstance(cmd, dict):
                    raise ValueError("a command is a JSON object")
            except ValueError as err:
                print(reply(None, None, Failure("other", f"not a JSON command: {err}")), flush=True)
                continue
            cid = cmd.get("id")
            if cmd.get("cmd") == "exit":
                print(reply(cid, {}, None), flush=True)
                break
            try:
                text = reply(cid, driver.run(cmd), None)
            except Failure as failure:
                text = reply(cid, None, failure)
            except Exception as err:  # a driver never exits on a failed command
                text = reply(cid, None, Failure("other", f"{type(err).__name__}: {err}"))
            print(text, flush=True)
    finally:
        driver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
