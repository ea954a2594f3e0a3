"""The conformance driver of the Python client: reads commands as JSON
lines on stdin and answers each with one JSON line on stdout, as
clients/conformance/DRIVER.md specifies.

A thin shell around the public, blocking API (`Client.lock`,
`Client.try_lock`, `Lock.is_held/check/wait_lost/release`, `ssl_context`
for TLS): it decides nothing the client should decide, so what the suite
checks is the client itself.

Run with the client importable: `PYTHONPATH=clients/python/src python3
clients/python/conformance/driver.py`.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import threading
from typing import Any, Dict, Optional

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


class Driver:
    """The driver's state: its client and the locks it holds, by handle."""

    def __init__(self) -> None:
        self.client: Optional[monolock.Client] = None
        self.handles: Dict[str, monolock.Lock] = {}

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
        lock = self.need_client().lock(field(cmd, "name", str), lease_seconds(cmd), wait=wait)
        self.handles[handle] = lock
        return {"token": str(lock.token)}

    def cmd_try_lock(self, cmd: Fields) -> Fields:
        handle = field(cmd, "handle", str)
        lock = self.need_client().try_lock(field(cmd, "name", str), lease_seconds(cmd))
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
