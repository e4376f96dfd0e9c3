"""A benchmark's costly intermediate kept in a file between runs, computed once."""

from __future__ import annotations

import hashlib
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

import numpy

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent
# What a cached value can depend on: the simulator, the policy and the peers (all in the
# package), the benches that build the workloads, and the traces they replay (not their
# README); the interpreter and numpy, whose random draws and pickles may change with them.
SOURCES = (("gpuserve", "*.py"), ("bench", "*.py"), ("traces", "*.csv"), ("traces", "*.jsonl"))


def code_digest(repo: Path = REPO) -> str:
    """A digest of every file a cached value may depend on, by path and content. A cache
    kept under it is never read by other code: a stale cache once made a bench's recorded
    figures differ from what the same command printed from an empty one."""
    h = hashlib.sha256(f"{sys.version}\0numpy {numpy.__version__}\0".encode())
    for folder, pattern in SOURCES:
        for path in sorted((repo / folder).rglob(pattern)):
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(path.relative_to(repo).as_posix().encode())
                h.update(b"\0")
                h.update(path.read_bytes())
                h.update(b"\0")
    return h.hexdigest()[:16]


def code_scoped(root: Path | None, repo: Path = REPO) -> Path | None:
    """The folder under ``root`` for this tree's code (None: no cache). Changing any
    source file moves the cache to a new folder; the old ones can be deleted."""
    return root / code_digest(repo) if root is not None else None


def pickled(path: Path | None, compute: Callable[[], T]) -> T:
    """What ``path`` holds from an earlier run, or ``compute()``, stored there for the next
    (no path: computed every time). The caller names the file after everything the value
    depends on but the code, and keeps it in a ``code_scoped`` folder."""
    if path is not None and path.exists():
        return cast(T, pickle.loads(path.read_bytes()))
    value = compute()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(value))
    return value
