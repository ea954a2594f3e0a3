"""The Python client on protocol v1 (one connection per lock, forced with
`force_v1=True`) against v2 sessions (the default), side by side in one
run, next to redis-py's `Lock`.

1. Lock cycle, uncontended, one at a time: p50, p99 and cycles per second
   (the loop's count over its time), sync and asyncio. The versions take
   turns in rounds, so that a change of load on the machine hits both.
   A v1 cycle is connect, ACQUIRE, ACQUIRED, close; a v2 cycle is ACQUIRE,
   ACQUIRED, RELEASE, RELEASED on the process's session. The redis-py
   cycle is `Lock.acquire()` (SET NX PX) and `Lock.release()` (EVALSHA)
   on its pooled connection.
2. A process holding 1,000 locks (lease 2 s, so heartbeats every ~0.5 s),
   each version in a fresh process against a fresh server, twice, the
   versions alternating: time to take them, connections the server
   counts, the client's CPU while holding, the client's and the server's
   resident memory.

Bounded: fixed counts and a fixed holding window. Needs the release
server (built here) and, for the redis-py row, redis-server (Debian's
package) and redis-py in target/python-bench/venv (installed from PyPI on
first use; without them the row is left out and the run says so).

Usage: python3 clients/python/bench/versions.py [--cycles N] [--held N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

import cycle  # noqa: E402
import monolock  # noqa: E402
import support  # noqa: E402

ROUNDS = 5
WARM_UP = 200
HOLD_WINDOW = 5.0
HOLD_LEASE = 2.0

#: The holding process: takes N locks, holds them for the window, prints
#: its figures as JSON.
HOLDER = """
import json, os, resource, sys, time
import monolock
addr, force_v1, count, window, lease = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
def cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
client = monolock.Client(addr, force_v1=force_v1)
base_rss = rss_kb()
start = time.perf_counter()
locks = [client.lock(f"held/{i}", lease=lease) for i in range(count)]
took = time.perf_counter() - start
cpu0, t0 = cpu(), time.perf_counter()
time.sleep(window)  # the measured window: every lock heartbeats meanwhile
cpu_share = (cpu() - cpu0) / (time.perf_counter() - t0)
held = sum(lock.is_held() for lock in locks)
fds = len(os.listdir("/proc/self/fd"))
rss = rss_kb()
print(json.dumps({"took": took, "cpu": cpu_share, "held": held, "fds": fds, "rss_kb": rss, "rss_added_kb": rss - base_rss}), flush=True)
sys.stdin.readline()
for lock in locks:
    lock.release()
"""


def sync_round(addr: str, force_v1: bool, cycles: int) -> List[float]:
    client = monolock.Client(addr, force_v1=force_v1)
    samples = []
    for _ in range(cycles):
        start = time.perf_counter()
        with client.lock(cycle.NAME, lease=60.0):
            pass
        samples.append(time.perf_counter() - start)
    return samples


def async_round(addr: str, force_v1: bool, cycles: int) -> List[float]:
    async def run() -> List[float]:
        client = monolock.AsyncClient(addr, force_v1=force_v1)
        samples = []
        for _ in range(cycles):
            start = time.perf_counter()
            async with client.lock(cycle.NAME, lease=60.0):
                pass
            samples.append(time.perf_counter() - start)
        return samples

    return asyncio.run(run())


def row(samples: List[float]) -> Tuple[float, float, float]:
    """p50 and p99 in microseconds, and cycles per second."""
    p50 = statistics.median(samples) * 1e6
    p99 = statistics.quantiles(samples, n=100)[98] * 1e6
    return p50, p99, len(samples) / sum(samples)


def cycles(addr: str, count: int) -> Dict[str, List[float]]:
    per_round = max(count // ROUNDS, 100)
    results: Dict[str, List[float]] = {}
    for kind, run in [("sync", sync_round), ("asyncio", async_round)]:
        for force_v1 in (True, False):
            run(addr, force_v1, WARM_UP)
        for _ in range(ROUNDS):
            for force_v1 in (True, False):
                key = f"{kind} v{1 if force_v1 else 2}"
                results.setdefault(key, []).extend(run(addr, force_v1, per_round))
    return results


def session_open(addr: str, count: int) -> Tuple[float, float]:
    """p50 of opening a v2 session (connect, OPEN, OPENED) and of one lock
    cycle on it: what keeping a session idle saves the next claim."""
    from monolock._core import address as _address
    from monolock._core.pool import pool_key
    from monolock._io import pool

    client = monolock.Client(addr)
    address = _address.parse(addr)[0]
    opens, firsts = [], []
    for i in range(count):
        start = time.perf_counter()
        session = pool.POOL._open(client, address, pool_key(client, address), 60_000 + i)
        opens.append(time.perf_counter() - start)
        session.close()
    return statistics.median(opens) * 1e6, statistics.median(sync_round(addr, False, count)) * 1e6


def lab_pki(directory: Path) -> Tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 (ECDSA P-256), made with
    the openssl command: (ca.pem, server.pem, server.key)."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, cwd=directory, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=bench-ca")
    run("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "1", "-extfile", "san.ext")
    return directory / "ca.pem", directory / "server.pem", directory / "server.key"


def tls_cycles(count: int) -> Optional[Dict[str, List[float]]]:
    """Sync lock cycles over TLS, v1 forced against v2, in rounds."""
    if shutil.which("openssl") is None:
        print("TLS rows left out: no openssl command")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        ca, cert, key = lab_pki(Path(tmp))
        context = ssl.create_default_context(cafile=str(ca))
        with support.Server("--tls-cert", str(cert), "--tls-key", str(key)) as server:
            results: Dict[str, List[float]] = {}
            per_round = max(count // ROUNDS, 20)

            def run(force_v1: bool, cycles: int) -> List[float]:
                client = monolock.Client(server.addr, ssl_context=context, force_v1=force_v1)
                samples = []
                for _ in range(cycles):
                    start = time.perf_counter()
                    with client.lock(cycle.NAME, lease=60.0):
                        pass
                    samples.append(time.perf_counter() - start)
                return samples

            for force_v1 in (True, False):
                run(force_v1, 20)
            for _ in range(ROUNDS):
                for force_v1 in (True, False):
                    results.setdefault(f"tls v{1 if force_v1 else 2}", []).extend(run(force_v1, per_round))
            return results


def server_rss_kb(server: support.Server) -> int:
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def holding(force_v1: bool, count: int) -> Dict[str, float]:
    with support.Server() as server:
        server_before = server_rss_kb(server)
        child = subprocess.Popen(
            [sys.executable, "-c", HOLDER, server.addr, "1" if force_v1 else "0", str(count), str(HOLD_WINDOW), str(HOLD_LEASE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(HERE.parent / "src")},
        )
        try:
            assert child.stdout is not None and child.stdin is not None
            line = child.stdout.readline()
            figures: Dict[str, float] = json.loads(line)
            info = server._request("GET", "/api/info") or {}
            figures["connections"] = float(info.get("connections", info.get("sessions", -1)))
            figures["server_rss_added_kb"] = server_rss_kb(server) - server_before
            child.stdin.write("\n")
            child.stdin.flush()
            child.wait(60)
        finally:
            child.kill()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=5000)
    parser.add_argument("--held", type=int, default=1000)
    parser.add_argument("--monolock", help="the server binary (default: build the release one)")
    args = parser.parse_args()
    if args.monolock:
        os.environ["MONOLOCK_BIN"] = args.monolock
    else:
        subprocess.run(
            ["cargo", "build", "--release", "--quiet", "-p", "monolock", "--bin", "monolock"],
            check=True,
            cwd=support.REPO,
        )
        os.environ["MONOLOCK_BIN"] = str(cycle.target_dir() / "release" / "monolock")
    with support.Server() as server:
        results = cycles(server.addr, args.cycles)
        opened, cycled = session_open(server.addr, 500)
    tls = tls_cycles(args.cycles // 5)
    redis = cycle.redis_py(args.cycles)
    print(f"python {sys.version.split()[0]}, server {os.environ['MONOLOCK_BIN']}")
    print(f"lock cycle: {len(results['sync v1'])} cycles per row after {WARM_UP} warm-up, one at a time, "
          f"versions alternating in {ROUNDS} rounds")
    print("| client | cycle p50 | cycle p99 | cycles/s | p50 v1 / v2 |")
    print("|---|---|---|---|---|")
    for kind in ("sync", "asyncio"):
        v1 = row(results[f"{kind} v1"])
        v2 = row(results[f"{kind} v2"])
        print(f"| Python {kind}, v1 forced | {v1[0]:.0f} µs | {v1[1]:.0f} µs | {v1[2]:.0f} | |")
        print(f"| **Python {kind}, v2** | {v2[0]:.0f} µs | {v2[1]:.0f} µs | {v2[2]:.0f} | {v1[0] / v2[0]:.2f} |")
    if tls is not None:
        v1 = row(tls["tls v1"])
        v2 = row(tls["tls v2"])
        print(f"| Python sync over TLS, v1 forced | {v1[0]:.0f} µs | {v1[1]:.0f} µs | {v1[2]:.0f} | |")
        print(f"| **Python sync over TLS, v2** | {v2[0]:.0f} µs | {v2[1]:.0f} µs | {v2[2]:.0f} | {v1[0] / v2[0]:.2f} |")
    if redis is not None:
        p50, p99 = redis
        print(f"| redis-py Lock (SET NX PX + EVALSHA) | {p50:.0f} µs | {p99:.0f} µs | ~{1e6 / p50:.0f} (1/p50) | |")
    print()
    print(f"opening a v2 session (connect, OPEN, OPENED), p50 of 500: {opened:.0f} µs; "
          f"a lock cycle on an open session: {cycled:.0f} µs")
    print()
    print(f"{args.held} locks held by one process, lease {HOLD_LEASE} s, measured over {HOLD_WINDOW} s")
    print("| version | take them | held at the end | connections | client fds | client CPU | client RSS | server RSS added |")
    print("|---|---|---|---|---|---|---|---|")
    for run, force_v1 in [(1, True), (1, False), (2, True), (2, False)]:  # alternating
        f = holding(force_v1, args.held)
        print(
            f"| {'v1 forced' if force_v1 else '**v2**'}, run {run} | {f['took'] * 1000:.0f} ms | {f['held']:.0f} | "
            f"{f['connections']:.0f} | {f['fds']:.0f} | {f['cpu'] * 100:.1f} % | {f['rss_kb'] / 1024:.1f} MB | "
            f"{f['server_rss_added_kb'] / 1024:.1f} MB |"
        )


if __name__ == "__main__":
    main()
