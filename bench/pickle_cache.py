"""A benchmark's costly intermediate kept in a file between runs, computed once."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

T = TypeVar("T")


def pickled(path: Path | None, compute: Callable[[], T]) -> T:
    """What ``path`` holds from an earlier run, or ``compute()``, stored there for the next
    (no path: computed every time). The caller names the file after everything the value
    depends on; a stale file is the caller's to delete."""
    if path is not None and path.exists():
        return cast(T, pickle.loads(path.read_bytes()))
    value = compute()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(value))
    return value
