"""The Python examples of README.md, docs/client-python.md and the
package's README run as written, one after the other as a reader pastes them, against a real
server. Only what a reader supplies is supplied: the server's address
(the examples say 127.0.0.1:7070), the functions they call for the
guarded work, and the lab PKI in place of /etc/monolock."""

from __future__ import annotations

import os
import re
import sqlite3
import unittest
from pathlib import Path
from typing import Any, Dict, List, Tuple
from unittest import mock

import monolock
from support import REPO, SharedServer, pki_dir

DOCUMENTS = [
    REPO / "README.md",
    REPO / "docs" / "client-python.md",
    REPO / "clients" / "python" / "README.md",
]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def python_blocks(path: Path) -> List[Tuple[int, str]]:
    """Each ```python block of `path` with its first line's number."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


class Examples(SharedServer, unittest.TestCase):
    def reader(self, fences: List[int]) -> Dict[str, Any]:
        """What the examples leave to the reader: the guarded work."""

        def work(fence: int) -> None:
            fences.append(fence)

        async def work_async(fence: int) -> None:
            fences.append(fence)

        return {
            "__name__": "__example__",
            "deploy": work,
            "run_deploy": work,
            "compact": work,
            "deploy_async": work_async,
            # Printing the token is handing it on, as far as this test goes.
            "print": lambda *args, **kwargs: fences.extend(
                a for a in args if isinstance(a, int) and not isinstance(a, bool)
            ),
        }

    def local(self, block: str) -> str:
        block = block.replace("127.0.0.1:7070", self.server.addr)
        pki = pki_dir()
        if pki is not None:
            for name in ["ca.pem", "client.pem", "client.key"]:
                block = block.replace(f"/etc/monolock/{name}", str(pki / name))
        return block

    def test_every_python_example_runs_as_written(self) -> None:
        with mock.patch.dict(os.environ, {"MONOLOCK_ADDRESS": self.server.addr}):
            for path in DOCUMENTS:
                fences: List[int] = []
                namespace = self.reader(fences)
                blocks = python_blocks(path)
                self.assertTrue(blocks, f"{path} has no Python example")
                for line, block in blocks:
                    where = f"{path.relative_to(REPO)}:{line}"
                    with self.subTest(example=where):
                        compile(block, where, "exec")  # as written, before any substitution
                        if "/etc/monolock/" in block and pki_dir() is None:
                            continue  # TLS: needs the lab PKI (the cargo test always sets it)
                        exec(compile(self.local(block), where, "exec"), namespace)
                self.assertTrue(fences, f"{path}: no example handed a token to its work")
                self.assertEqual(fences, sorted(fences), f"{path}: tokens never go back")
                if "save_report" in namespace:
                    self.fenced_write(namespace["save_report"])

    def fenced_write(self, save_report: Any) -> None:
        """The fencing example refuses a write under an older token."""
        db = sqlite3.connect(":memory:")
        db.execute("CREATE TABLE reports (id INTEGER PRIMARY KEY, body TEXT, fence INTEGER)")
        db.execute("INSERT INTO reports VALUES (1, '', 0)")
        client = monolock.Client(self.server.addr)
        with client.lock("reports", lease=5.0) as older:
            pass
        with client.lock("reports", lease=5.0) as newer:
            save_report(db, newer, 1, "new")
        with self.assertRaises(RuntimeError):
            save_report(db, _Stale(older.token), 1, "stale")
        self.assertEqual(db.execute("SELECT body FROM reports").fetchall(), [("new",)])


class _Stale:
    """A lock whose holder paused past its lease and writes anyway."""

    def __init__(self, token: int) -> None:
        self.token = token

    def check(self) -> None:
        pass


if __name__ == "__main__":
    unittest.main()
