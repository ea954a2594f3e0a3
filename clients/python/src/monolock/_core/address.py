"""Server addresses: one or several, from the argument or the environment.

Several addresses (a primary and its standby) are tried in order when one
refuses the connection or does not answer in time. Only the connect step
falls through: a claim lives on the one connection that sent its ACQUIRE,
and is never moved to another server behind the caller's back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence, Tuple, Union

from ..errors import InvalidArgument

#: The address used when neither an argument nor the environment names one.
DEFAULT_ADDRESS = "127.0.0.1:7070"
#: The environment variable read when no address is given (comma-separated).
ADDRESS_ENV = "MONOLOCK_ADDRESS"

Addresses = Union[str, Sequence[str], None]


@dataclass(frozen=True)
class Address:
    """One `host:port`."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_one(text: str) -> Address:
    """`host:port`, `[v6]:port`."""
    text = text.strip()
    if "://" in text:
        raise InvalidArgument(f'address "{text}": write host:port, without a scheme')
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise InvalidArgument(f"server address {text!r} must be host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise InvalidArgument(f"server address {text!r}: write an IPv6 host as [addr]:port")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 < number < 65536:
        raise InvalidArgument(f"server address {text!r} has an invalid port {port!r}")
    return Address(host, number)


def parse(addresses: Addresses) -> Tuple[Address, ...]:
    """The addresses to try, in order: the argument (a comma-separated
    string or a sequence of strings), else $MONOLOCK_ADDRESS, else the
    default."""
    if addresses is None:
        addresses = os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS
    if isinstance(addresses, str):
        parts = [part for part in addresses.split(",") if part.strip()]
    else:
        parts = [str(part) for part in addresses]
    if not parts:
        raise InvalidArgument("no server address given")
    return tuple(parse_one(part) for part in parts)
