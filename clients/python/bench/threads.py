"""One shared selector thread or one thread per held lock: the figures
behind the sync client's v1 driver (docs/client-python.md). The clients
are forced to protocol v1 (a connection per lock), which that driver
serves; bench/versions.py measures v1 against v2.

Runs both designs against one `monolock serve` in the same run:

- lock cycle (connect, ACQUIRE, ACQUIRED, close) p50 / p99, uncontended;
- N locks held at once, each heartbeating (lease 2 s: every ~0.5 s):
  time to take them all, the client process's CPU per second while
  holding, resident memory and threads per held lock.

Usage: python3 clients/python/bench/threads.py [--monolock PATH] [--held N]
(default binary: target/release/monolock). Bounded: a fixed number of
cycles and a fixed holding window.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE.parent / "tests"))

import monolock  # noqa: E402
from monolock._io.reactor import Reactor, dedicated_reactor, shared_reactor  # noqa: E402
import support  # noqa: E402

CYCLES = 2000
HOLD_WINDOW = 5.0
HOLD_LEASE = 2.0


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cycle_latencies(client: monolock.Client) -> List[float]:
    samples = []
    for i in range(CYCLES + 200):
        start = time.perf_counter()
        with client.lock("bench/cycle", lease=60.0):
            pass
        if i >= 200:  # warm-up
            samples.append(time.perf_counter() - start)
    return samples


def hold_many(client: monolock.Client, held: int) -> Dict[str, float]:
    rss0, threads0 = rss_kb(), threading.active_count()
    start = time.perf_counter()
    locks = [client.lock(f"bench/held/{i}", lease=HOLD_LEASE) for i in range(held)]
    take = time.perf_counter() - start
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    time.sleep(HOLD_WINDOW)  # the measured window: heartbeats run meanwhile
    cpu = (cpu_seconds() - cpu0) / (time.perf_counter() - t0)
    all_held = all(lock.is_held() for lock in locks)
    figures = {
        "take_ms": take * 1000,
        "cpu_pct": cpu * 100,
        "rss_kb_per_lock": (rss_kb() - rss0) / held,
        "threads_per_lock": (threading.active_count() - threads0) / held,
        "all_held": float(all_held),
    }
    for lock in locks:
        lock.release()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--monolock", default=str(support.REPO / "target" / "release" / "monolock"))
    parser.add_argument("--held", type=int, default=500)
    args = parser.parse_args()
    os.environ["MONOLOCK_BIN"] = args.monolock
    designs: Dict[str, Callable[[], Reactor]] = {
        "shared selector thread": shared_reactor,
        "thread per lock": dedicated_reactor,
    }
    rows = []
    with support.Server() as server:
        for name, factory in designs.items():
            client = monolock.Client(server.addr, force_v1=True)
            client._reactor_factory = factory  # the design under measurement
            samples = cycle_latencies(client)
            held = hold_many(client, args.held)
            p50 = statistics.median(samples) * 1e6
            p99 = statistics.quantiles(samples, n=100)[98] * 1e6
            rows.append((name, p50, p99, held))
    print(f"python {sys.version.split()[0]}, {CYCLES} cycles, {args.held} locks held for {HOLD_WINDOW}s (lease {HOLD_LEASE}s)")
    print(f"{'design':<24} {'cycle p50':>10} {'cycle p99':>10} {'take all':>9} {'CPU held':>9} {'RSS/lock':>9} {'threads/lock':>13} {'all held':>9}")
    for name, p50, p99, held in rows:
        print(
            f"{name:<24} {p50:>8.0f}us {p99:>8.0f}us {held['take_ms']:>7.0f}ms {held['cpu_pct']:>8.1f}% "
            f"{held['rss_kb_per_lock']:>7.1f}KB {held['threads_per_lock']:>13.2f} {bool(held['all_held'])!s:>9}"
        )


if __name__ == "__main__":
    main()
