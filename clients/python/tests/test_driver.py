"""The conformance driver (conformance/driver.py) speaks the extension's
commands of clients/conformance/DRIVER.md against the real server: the
reply shapes the runner reads, from a driver process as the runner starts
it."""

from __future__ import annotations

import json
import subprocess
import sys
import unittest
from typing import Any, Dict, List, Tuple

from support import PATIENCE, REPO, SharedServer

DRIVER = REPO / "clients" / "python" / "conformance" / "driver.py"


class Driver:
    def __init__(self, address: str, **open_fields: Any) -> None:
        env = {"PYTHONPATH": str(REPO / "clients" / "python" / "src"), "PATH": "/usr/bin:/bin"}
        self.proc = subprocess.Popen(
            [sys.executable, str(DRIVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.next_id = 0
        assert self.cmd("open", address=address, **open_fields)["ok"]

    def cmd(self, command: str, /, **fields: Any) -> Dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"id": self.next_id, "cmd": command, **fields}) + "\n")
        self.proc.stdin.flush()
        reply: Dict[str, Any] = json.loads(self.proc.stdout.readline())
        assert reply["id"] == self.next_id, reply
        return reply

    def close(self) -> None:
        self.cmd("exit")
        self.proc.wait(PATIENCE)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


class ExtensionCommands(SharedServer, unittest.TestCase):
    def driver(self, **open_fields: Any) -> Driver:
        driver = Driver(self.server.addr, **open_fields)
        self.addCleanup(driver.close)
        return driver

    def test_values_observations_and_lookups(self) -> None:
        observer, holder = self.driver(), self.driver()
        initial = observer.cmd("observe", handle="w", name="d/x")
        self.assertEqual(initial["state"], {
            "held": False, "token": "0", "value": "", "event": "free",
            "initial": True, "coalesced": False, "reason": None,
        })
        token = holder.cmd("lock", handle="l", name="d/x", lease_ms=5000, value="me:1")["token"]
        granted = observer.cmd("next_state", handle="w", timeout_ms=int(PATIENCE * 1000))["state"]
        self.assertEqual((granted["event"], granted["token"], granted["value"]), ("granted", token, "me:1"))
        self.assertTrue(holder.cmd("set_value", handle="l", value="me:2")["ok"])
        looked = observer.cmd("holder", name="d/x")["state"]
        self.assertEqual((looked["event"], looked["token"], looked["value"]), ("held", token, "me:2"))
        self.assertEqual(observer.cmd("next_state", handle="w", timeout_ms=int(PATIENCE * 1000))["state"]["event"], "value")
        quiet = observer.cmd("next_state", handle="w", timeout_ms=10)
        self.assertEqual((quiet["ok"], quiet["timeout"]), (True, True))
        self.assertTrue(observer.cmd("unobserve", handle="w")["ok"])
        self.assertEqual(observer.cmd("next_state", handle="w", timeout_ms=10)["error"]["kind"], "unknown_handle")
        too_long = holder.cmd("lock", handle="m", name="d/y", lease_ms=5000, value="x" * 1025)["error"]
        self.assertEqual(too_long, {
            "kind": "invalid_argument", "reason": None, "temporary": False,
            "message": "value of 1025 bytes is above the maximum of 1024 bytes",
        })

    def test_an_election_and_its_events(self) -> None:
        first, second = self.driver(), self.driver()
        self.assertTrue(first.cmd("elect", handle="e", name="d/leader", lease_ms=2000, value="first")["ok"])
        events = [first.cmd("next_election_event", handle="e", timeout_ms=int(PATIENCE * 1000))["event"] for _ in range(2)]
        started = next(e for e in events if e["kind"] == "started_leading")
        self.assertIn({"kind": "new_leader", "token": started["token"], "value": "first"}, events)
        self.assertTrue(second.cmd("elect", handle="e", name="d/leader", lease_ms=3000, value="second")["ok"])
        told = second.cmd("next_election_event", handle="e", timeout_ms=int(PATIENCE * 1000))["event"]
        self.assertEqual(told, {"kind": "new_leader", "token": started["token"], "value": "first"})
        self.assertTrue(first.cmd("resign", handle="e")["ok"])
        self.assertEqual(first.cmd("next_election_event", handle="e", timeout_ms=10)["event"], {"kind": "stopped_leading"})
        kinds = {second.cmd("next_election_event", handle="e", timeout_ms=int(PATIENCE * 1000))["event"]["kind"] for _ in range(2)}
        self.assertEqual(kinds, {"started_leading", "new_leader"})

    def test_force_v1_is_unsupported_without_a_loss(self) -> None:
        driver = self.driver(force_v1=True)
        calls: List[Tuple[str, Dict[str, Any]]] = [
            ("observe", {"handle": "w", "name": "d/v1"}),
            ("holder", {"name": "d/v1"}),
            ("elect", {"handle": "e", "name": "d/v1", "lease_ms": 2000, "value": "x"}),
            ("lock", {"handle": "l", "name": "d/v1", "lease_ms": 2000, "value": "x"}),
        ]
        for name, fields in calls:
            error = driver.cmd(name, **fields)["error"]
            self.assertEqual((error["kind"], error["temporary"]), ("unsupported", False), name)
            self.assertIn("protocol version 1 has no lock values or observers", error["message"])


if __name__ == "__main__":
    unittest.main()
