"""An enforced memory limit for one process, as the kubelet sets for a container.

The chart gives the operator ``resources.limits.memory``; in a cluster the kernel OOM-kills
a container that goes over it. Benchmarks put the operator in a cgroup of its own with the
same limit, so an overrun is a kill the benchmark sees, not a figure to read. Both cgroup
versions are handled: v1 (``memory.limit_in_bytes``, ``oom_kill`` in ``memory.oom_control``)
and v2 (``memory.max``, ``oom_kill`` in ``memory.events``). Creating a cgroup needs write
access to the hierarchy (root in a container that mounts it read-write); when that is not
possible, ``MemoryCgroup.create`` says why.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_UNITS = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}


class CgroupUnavailable(RuntimeError):
    """No memory cgroup can be made here (read-only hierarchy, no memory controller)."""


def parse_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity ("512Mi", "1G", "300000000") in bytes."""
    match = re.fullmatch(r"(\d+)([KMG]i?)?", quantity.strip())
    if not match:
        raise ValueError(f"not a memory quantity: {quantity!r} (e.g. 512Mi)")
    return int(match.group(1)) * _UNITS[match.group(2) or ""]


def _own_memory_cgroup() -> tuple[Path, int]:
    """This process's memory cgroup directory and the hierarchy's version."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    for line in lines:  # v1: "4:memory:/path"
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return CGROUP_ROOT / "memory" / path.lstrip("/"), 1
    for line in lines:  # v2: "0::/path"
        if line.startswith("0::") and (CGROUP_ROOT / "cgroup.controllers").exists():
            return CGROUP_ROOT / line[3:].lstrip("/"), 2
    raise CgroupUnavailable("no memory cgroup controller in /proc/self/cgroup")


class MemoryCgroup:
    """A child cgroup of this process's own with a hard memory limit."""

    def __init__(self, name: str, limit_bytes: int) -> None:
        self.name = name
        self.limit_bytes = limit_bytes
        self.path: Path | None = None
        self.version = 0

    def create(self) -> MemoryCgroup:
        parent, self.version = _own_memory_cgroup()
        path = parent / self.name
        try:
            path.mkdir(exist_ok=True)
            if self.version == 1:
                (path / "memory.limit_in_bytes").write_text(str(self.limit_bytes))
            else:
                (path / "memory.max").write_text(str(self.limit_bytes))
                swap = path / "memory.swap.max"  # absent without swap accounting
                if swap.exists():
                    swap.write_text("0")
        except OSError as exc:
            raise CgroupUnavailable(
                f"cannot create a memory cgroup at {path}: {exc.strerror} (needs write access "
                "to the cgroup hierarchy, e.g. root with /sys/fs/cgroup mounted read-write)"
            ) from exc
        self.path = path
        return self

    def add(self, pid: int) -> None:
        """Moves ``pid`` into the cgroup: its later allocations count against the limit."""
        assert self.path is not None, "create() first"
        (self.path / "cgroup.procs").write_text(str(pid))

    def _read(self, v1: str, v2: str) -> str:
        assert self.path is not None, "create() first"
        target = self.path / (v1 if self.version == 1 else v2)
        try:
            return target.read_text()
        except OSError:
            return ""

    def oom_kills(self) -> int:
        """Processes the kernel killed for going over the limit."""
        text = self._read("memory.oom_control", "memory.events")
        match = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        return int(match.group(1)) if match else 0

    def peak_bytes(self) -> int:
        """The most memory charged to the cgroup (RSS plus page cache the process caused)."""
        text = self._read("memory.max_usage_in_bytes", "memory.peak").strip()
        return int(text) if text.isdigit() else 0

    def remove(self) -> None:
        """Removes the cgroup once its processes have exited (the kernel refuses before)."""
        if self.path is None:
            return
        for _ in range(20):  # a killed process leaves the cgroup a moment after it is reaped
            try:
                os.rmdir(self.path)
                break
            except OSError:
                time.sleep(0.5)
        self.path = None
