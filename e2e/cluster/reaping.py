"""Child-subreaper support for long-lived test and benchmark processes.

`up` leaves its daemons running after the CLI exits, so they are re-parented. On a normal
machine init reaps them once `down` stops them; where PID 1 does not reap (some sandboxes and
containers) they would linger as zombies. A pytest session or benchmark that marks itself a
child subreaper adopts them instead and reaps exactly the PIDs it was told about.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Marks this process as subreaper for its descendants (Linux only). True on success."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def reap(pids: list[int]) -> None:
    """Collects the exit status of these PIDs if they became our zombie children."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
