"""Bounds a caller passes in seconds (`wait=`, `timeout=`), checked before
anything connects and turned into nanoseconds of `time.monotonic_ns()`.

None and `float("inf")` mean "no bound". A bound too large for a float
number of nanoseconds is no bound either: it is longer than any process
lives.
"""

from __future__ import annotations

import math
from typing import Optional

from ..errors import InvalidArgument


def bound_ns(value: Optional[float], what: str) -> Optional[int]:
    """`value` seconds in nanoseconds, or None for no bound.

    Raises InvalidArgument for a negative number, NaN, or anything that is
    not a number (a bool or a str included)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(
            f"{what} must be a number of seconds or None, not {type(value).__name__} {value!r}"
        )
    if math.isnan(value):
        raise InvalidArgument(f"{what} must be a number of seconds or None, not NaN")
    if value < 0:
        raise InvalidArgument(f"{what} must be 0 or more seconds, not {value}")
    ns = value * 1_000_000_000
    if isinstance(ns, float) and math.isinf(ns):
        return None
    return int(ns)
