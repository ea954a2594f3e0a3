"""The I/O drivers: sockets, the one reactor thread of the sync client,
and asyncio protocols. They read bytes and the clock, feed the sans-I/O
core (`monolock._core`) and carry out what it decides; none holds
protocol logic of its own.

- `connect`: where the servers are, and the blocking dial.
- `reactor`: one daemon thread and one readiness loop for every
  connection of the process, v1 and v2 alike.
- `v1`, `sessions`: a v1 connection and a v2 session on that reactor.
- `aio_v1`, `aio_sessions`: the same two on an asyncio event loop.
- `watches`, `aio_watches`: observations and holder lookups on those
  sessions, sync and asyncio.
"""
