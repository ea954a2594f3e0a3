"""The sans-I/O core: everything the client decides, as pure state fed
bytes and instants (integer nanoseconds of `time.monotonic_ns()`), tested
on exact instants (tests/test_core.py) and against the shared protocol
vectors (tests/test_vectors.py). Nothing here opens a socket, starts a
thread, reads the clock or awaits.

- `frames`, `frames2`: the v1 and v2 wire formats.
- `schedule`: heartbeat instants and the `S + 0.8 x lease` deadline.
- `exchange`, `claim`: a v1 connection, one claim.
- `session`: a v2 session, many claims, and the extension's values,
  watches and lookups (`watch`: a watch's state and the `LockState` its
  owner is handed).
- `pool`: how claims spread over sessions; v1 fallback per address.
- `acquire`: the steps of one `lock`/`try_lock` and what the caller is told.
- `connect_errors`, `address`, `timeouts`: arguments and errors.

The drivers in `_io` own sockets, threads and event loops and feed this
package; the sync and asyncio clients share every decision through it.
"""
