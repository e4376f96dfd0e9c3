"""Checks that the cluster's loopback ports are free and names whoever holds one."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

LISTEN_STATE = "0A"  # TCP_LISTEN in /proc/net/tcp


class PortInUse(RuntimeError):
    pass


def is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True if we could bind it now. SO_REUSEADDR ignores TIME_WAIT leftovers of a last run."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[3] != LISTEN_STATE:
                continue
            if int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def _process_name(pid: str) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return " ".join(a.decode(errors="replace") for a in argv[:3] if a)[:120]
    except OSError:
        return "?"


def owner(port: int) -> str | None:
    """'pid 123 (etcd --name ...)' for the process listening on port, if we may see it."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{inode}]" for inode in inodes}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.scandir(f"/proc/{entry.name}/fd")
        except OSError:
            continue
        with fds:
            for fd in fds:
                try:
                    if os.readlink(fd.path) in targets:
                        return f"pid {entry.name} ({_process_name(entry.name)})"
                except OSError:
                    continue
    return "a process this user cannot inspect"


def ensure_free(ports: dict[str, int]) -> None:
    """Raises PortInUse naming the first busy port, what it is for and who holds it."""
    for purpose, port in ports.items():
        if not is_free(port):
            holder = owner(port) or "unknown process"
            raise PortInUse(
                f"port {port} ({purpose}) on 127.0.0.1 is already in use by {holder}; "
                "stop it, or pick other ports with GPUSERVE_PORT_OFFSET=<n>"
            )
