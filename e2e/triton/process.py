"""Process and port helpers shared by the local servers (Triton, Prometheus).

Servers are started in a new session, so each one leads a process group whose id is its own
PID; stopping signals only that PID and then that group, never processes found by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

LOOPBACK = "127.0.0.1"


def free_loopback_port() -> int:
    """Asks the kernel for a free TCP port on 127.0.0.1 (free now; the caller binds it soon)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def port_listening(port: int, *, timeout: float = 0.5) -> bool:
    """Something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        return sock.connect_ex((LOOPBACK, port)) == 0


def free_loopback_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (sockets held together so they differ)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind((LOOPBACK, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


def start_process_group(
    argv: Sequence[str], *, env: dict[str, str] | None, log: IO[bytes], cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Starts ``argv`` as the leader of a new session/process group, output to ``log``."""
    return subprocess.Popen(
        list(argv),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) PIDs whose process group is ``pgid``, read from /proc."""
    members: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state ppid pgrp ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_process_group(
    proc: subprocess.Popen[bytes], *, term_timeout: float = 10.0, group_timeout: float = 10.0
) -> int | None:
    """Stops a process started by :func:`start_process_group` and everything in its group.

    SIGTERM to the leader's PID, wait up to ``term_timeout``, then SIGKILL it. Children it left
    (e.g. Triton's Python stubs) are then given SIGTERM and, after ``group_timeout``, SIGKILL -
    always addressed by the group id this object created. Returns the leader's exit status.
    """
    pgid = proc.pid  # session leader: pgid == pid
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=term_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    for sig, timeout in ((signal.SIGTERM, group_timeout), (signal.SIGKILL, 5.0)):
        if not group_members(pgid):
            break
        _signal_group(pgid, sig)
        wait_until(lambda: not group_members(pgid), timeout=timeout, interval=0.05)
    return proc.returncode


def wait_until(predicate: Callable[[], bool], *, timeout: float, interval: float = 0.05) -> bool:
    """Polls ``predicate`` until it is true or ``timeout`` seconds pass; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def http_status(url: str, *, timeout: float = 2.0, method: str = "GET") -> int | None:
    """HTTP status of ``url`` (None when nothing answers). Loopback URLs only by convention."""
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except (urllib.error.URLError, OSError):
        return None


def http_text(
    url: str, *, timeout: float = 5.0, method: str = "GET", data: bytes | None = None
) -> tuple[int, str]:
    """(status, body) of an HTTP request; raises OSError when nothing answers."""
    request = urllib.request.Request(url, method=method, data=data)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode("utf-8", "replace")
