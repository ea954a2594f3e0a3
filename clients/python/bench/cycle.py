"""Uncontended lock cycle p50/p99, side by side in one run: the Python
client (sync and asyncio), the Rust client, and redis-py's `Lock`.

The Python clients run as users get them: on protocol v2 sessions (ACQUIRE,
ACQUIRED, RELEASE, RELEASED on an open session); bench/versions.py puts
them next to v1 forced. A redis-py cycle is `Lock.acquire()` (SET NX PX) and
`Lock.release()` (the release script, EVALSHA) on the client's pooled
connection, as redis-py users run it.

What it needs, and does itself: `cargo build --release` of the server and
of bench/rust-cycle; `redis-server` from Debian's packages (apt-get install
redis-server; without it the redis-py row is left out); redis-py from PyPI,
installed into target/python-bench/venv (without network the row is left
out). The client suite's tests never need any of this.

Usage: python3 clients/python/bench/cycle.py [--cycles N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE.parent / "tests"))

import monolock  # noqa: E402
import support  # noqa: E402

WARM_UP = 200
NAME = "bench/cycle"

REDIS_CYCLES = """
import statistics, sys, time, redis
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
samples = []
for i in range(200 + int(sys.argv[2])):
    start = time.perf_counter()
    lock = r.lock("bench/cycle", timeout=60)
    assert lock.acquire(blocking=False)
    lock.release()
    if i >= 200:
        samples.append(time.perf_counter() - start)
print(statistics.median(samples) * 1e6, statistics.quantiles(samples, n=100)[98] * 1e6)
"""


def target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR") or support.REPO / "target")


def percentiles(samples: List[float]) -> Tuple[float, float]:
    return statistics.median(samples) * 1e6, statistics.quantiles(samples, n=100)[98] * 1e6


def python_sync(addr: str, cycles: int) -> Tuple[float, float]:
    client = monolock.Client(addr)
    samples = []
    for i in range(WARM_UP + cycles):
        start = time.perf_counter()
        with client.lock(NAME, lease=60.0):
            pass
        if i >= WARM_UP:
            samples.append(time.perf_counter() - start)
    return percentiles(samples)


def python_asyncio(addr: str, cycles: int) -> Tuple[float, float]:
    async def run() -> List[float]:
        client = monolock.AsyncClient(addr)
        samples = []
        for i in range(WARM_UP + cycles):
            start = time.perf_counter()
            async with client.lock(NAME, lease=60.0):
                pass
            if i >= WARM_UP:
                samples.append(time.perf_counter() - start)
        return samples

    return percentiles(asyncio.run(run()))


def rust_client(addr: str, cycles: int) -> Tuple[float, float]:
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "--manifest-path", str(HERE / "rust-cycle" / "Cargo.toml")],
        check=True,
        env={**os.environ, "CARGO_TARGET_DIR": str(target_dir())},
    )
    out = subprocess.run(
        [str(target_dir() / "release" / "monolock-rust-cycle"), addr, str(cycles)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(out[0]), float(out[1])


def redis_python() -> Optional[Path]:
    """A venv with redis-py, made on first use; None when not installable."""
    venv = target_dir() / "python-bench" / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run([str(python), "-c", "import redis"], capture_output=True)
    if probe.returncode != 0:
        install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "redis"])
        if install.returncode != 0:
            return None
    return python


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def redis_py(cycles: int) -> Optional[Tuple[float, float]]:
    server_bin = shutil.which("redis-server")
    python = redis_python()
    if server_bin is None or python is None:
        print("redis-py row left out:", "no redis-server" if server_bin is None else "redis-py not installable")
        return None
    port = free_port()
    server = subprocess.Popen(
        [server_bin, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        end = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
        out = subprocess.run(
            [str(python), "-c", REDIS_CYCLES, str(port), str(cycles)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        return float(out[0]), float(out[1])
    finally:
        server.terminate()
        server.wait(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=5000)
    args = parser.parse_args()
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "-p", "monolock", "--bin", "monolock"],
        check=True,
        cwd=support.REPO,
    )
    os.environ["MONOLOCK_BIN"] = str(target_dir() / "release" / "monolock")
    rows = []
    with support.Server() as server:
        rows.append(("Rust client (monolock-client)", rust_client(server.addr, args.cycles)))
        rows.append(("Python client, sync", python_sync(server.addr, args.cycles)))
        rows.append(("Python client, asyncio", python_asyncio(server.addr, args.cycles)))
    redis = redis_py(args.cycles)
    if redis is not None:
        rows.append(("redis-py Lock (SET NX PX + EVALSHA)", redis))
    rust_p50 = rows[0][1][0]
    print(f"python {sys.version.split()[0]}, {args.cycles} cycles each after {WARM_UP} warm-up, one at a time")
    print("| client | cycle p50 | cycle p99 | p50 / Rust client |")
    print("|---|---|---|---|")
    for name, (p50, p99) in rows:
        print(f"| {name} | {p50:.0f} µs | {p99:.0f} µs | {p50 / rust_p50:.2f} |")


if __name__ == "__main__":
    main()
