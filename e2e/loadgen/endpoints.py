"""Endpoints for the load generator: loopback-only checks and round-robin rotation."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Sequence

EndpointSource = Sequence[str] | Callable[[], Sequence[str]]


def check_loopback(endpoint: str) -> str:
    """Returns ``endpoint`` ("host:port") if host is ``localhost`` or in 127.0.0.0/8.

    The load generator must never send traffic off this machine; anything else raises
    ValueError.
    """
    host, sep, port = endpoint.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"endpoint {endpoint!r} is not host:port")
    if host != "localhost":
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"endpoint {endpoint!r}: only 127.0.0.0/8 or localhost") from None
        if not (address.version == 4 and address in ipaddress.ip_network("127.0.0.0/8")):
            raise ValueError(f"endpoint {endpoint!r}: only 127.0.0.0/8 or localhost")
    return f"{host}:{int(port)}"


class EndpointRotation:
    """Round-robin over endpoints that may change while a run is going.

    ``source`` is a list or a callable returning the current list (e.g. the pods behind a
    service); a callable is re-read at most every ``refresh_s`` seconds. Every endpoint is
    checked with :func:`check_loopback`.
    """

    def __init__(self, source: EndpointSource, *, refresh_s: float = 0.2) -> None:
        self._source = source
        self._refresh_s = refresh_s
        self._current: list[str] = []
        self._read_at = float("-inf")
        self._next = 0
        self.seen: set[str] = set()
        self._refresh(force=True)

    def _refresh(self, force: bool = False) -> None:
        if not callable(self._source):
            if force:
                self._current = [check_loopback(e) for e in self._source]
            return
        now = time.monotonic()
        if force or now - self._read_at >= self._refresh_s:
            self._current = [check_loopback(e) for e in self._source()]
            self._read_at = now

    def current(self) -> list[str]:
        """The endpoint list in use now."""
        self._refresh()
        return list(self._current)

    def pick(self) -> str | None:
        """The next endpoint in rotation, or None when the list is empty."""
        self._refresh()
        if not self._current:
            return None
        endpoint = self._current[self._next % len(self._current)]
        self._next += 1
        self.seen.add(endpoint)
        return endpoint
