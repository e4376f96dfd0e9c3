"""One line per step, prefixed with the seconds elapsed since the command started."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, out: TextIO | None = None) -> None:
        self._out = out if out is not None else sys.stdout
        self._start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def step(self, message: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {message}", file=self._out, flush=True)

    def note(self, message: str) -> None:
        """A line without timing (hints, follow-up commands)."""
        print(message, file=self._out, flush=True)
