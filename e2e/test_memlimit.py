"""The benchmarks' enforced memory limit: a process over it is OOM-killed and counted."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from e2e.memlimit import CgroupUnavailable, MemoryCgroup, parse_bytes


def test_memory_quantities_parse_like_kubernetes() -> None:
    assert parse_bytes("512Mi") == 512 * 2**20
    assert parse_bytes("1G") == 10**9
    assert parse_bytes("300000000") == 300_000_000
    with pytest.raises(ValueError, match="512MB"):
        parse_bytes("512MB")


def run_in(cgroup: MemoryCgroup, allocate_mib: int) -> int:
    """Exit status of a Python child that holds ``allocate_mib`` MiB, inside the cgroup."""
    code = f"b = bytearray({allocate_mib} * 2**20); b[::4096] = b'x' * len(b[::4096])"
    child = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lambda: cgroup.add(os.getpid()),
        timeout=60,
        check=False,
    )
    return child.returncode


def test_a_process_over_the_limit_is_killed_and_counted() -> None:
    cgroup = MemoryCgroup(f"gpuserve-test-{os.getpid()}", parse_bytes("96Mi"))
    try:
        cgroup.create()
    except CgroupUnavailable as exc:
        pytest.skip(str(exc))
    try:
        assert run_in(cgroup, 16) == 0
        assert cgroup.oom_kills() == 0
        assert run_in(cgroup, 256) == -9  # SIGKILL from the kernel's OOM killer
        assert cgroup.oom_kills() == 1
        assert cgroup.peak_bytes() <= cgroup.limit_bytes
    finally:
        cgroup.remove()
