"""The Python client's tests, as a package for a plain `python3 -m
unittest` in clients/python: the test modules import `support` and
`monolock` as top-level modules, so this directory and the source tree
go on the path (the Rust runner, crates/monolock/tests/python_client.rs,
starts discovery in this directory and sets PYTHONPATH itself)."""

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for _path in (_HERE, _HERE.parent / "src"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
