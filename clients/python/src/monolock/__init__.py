"""monolock for Python: locks whose claims die with their connection.

```python
import monolock

client = monolock.Client("127.0.0.1:7070")
with client.lock("deploy", lease=10.0) as lock:
    write_with_fence(lock.token)        # hand the fencing token to the resource
    if not lock.is_held():              # judged against the monotonic clock now
        raise SystemExit("lost the lock; stop")
```

The client contract of docs/protocol.md: claims ride on shared protocol
v2 sessions (v1, a connection per lock, for a server without v2 or with
`force_v1=True`), heartbeated every ~lease/4 from a background thread (or
the event loop); a session is given up at `S + 0.8 x lease` on
`time.monotonic()`, where S is the send instant of its latest confirmed
request, so the holder always learns of a loss before the server could
hand the lock on; `release()` returns once the server confirmed it.

Values and observers (protocol v2's extension): a lock may carry a value
(`value=` on `lock`/`try_lock`, `Lock.set_value`); `client.observe(name)`
iterates a lock's states as the server pushes them, `client.holder(name)`
asks once, and `LeaderElector` / `AsyncLeaderElector` run a leader
election on top of them.
"""

from ._core.address import ADDRESS_ENV, DEFAULT_ADDRESS
from ._asyncio import AsyncClient, AsyncLock
from ._core.frames2 import MAX_VALUE_BYTES
from ._core.watch import LockState
from ._election import AsyncLeaderElector, LeaderElector
from ._io.aio_watches import AsyncObservation
from ._io.connect import DEFAULT_CONNECT_TIMEOUT
from ._io.watches import Observation
from ._sync import DEFAULT_LEASE, Client, Lock
from .errors import (
    ConnectError,
    Error,
    InvalidArgument,
    LockLost,
    LossReason,
    NotAcquired,
    ProtocolError,
    Unsupported,
)

__version__ = "0.1.0"

__all__ = [
    "ADDRESS_ENV",
    "DEFAULT_ADDRESS",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_LEASE",
    "MAX_VALUE_BYTES",
    "AsyncClient",
    "AsyncLeaderElector",
    "AsyncLock",
    "AsyncObservation",
    "Client",
    "ConnectError",
    "Error",
    "InvalidArgument",
    "LeaderElector",
    "Lock",
    "LockLost",
    "LockState",
    "LossReason",
    "NotAcquired",
    "Observation",
    "ProtocolError",
    "Unsupported",
]
