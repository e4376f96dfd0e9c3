"""Starting, recording, verifying and stopping the cluster's daemons by PID.

Each daemon gets ``run/<name>.pid`` (the PID alone, for humans and shell tools) and
``run/<name>.json`` (PID, executable, kernel start time, port, log). Before any signal we
check that the PID still is the process we started: same argv[0] and same start time in
/proc/<pid>/stat, so a recycled PID is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

TERM_TIMEOUT_S = 15.0
KILL_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ProcessRecord:
    name: str
    pid: int
    exe: str
    start_ticks: int
    port: int
    log: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ProcessRecord:
        data = json.loads(text)
        return cls(name=str(data["name"]), pid=int(data["pid"]), exe=str(data["exe"]),
                   start_ticks=int(data["start_ticks"]), port=int(data["port"]),
                   log=str(data["log"]))


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (which may contain spaces)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    # Field 22 of stat is starttime; after dropping pid and comm it is index 19.
    return int(fields[19]) if fields and len(fields) > 19 else None


def is_alive(pid: int) -> bool:
    """Exists and is not a zombie (a zombie holds no memory, ports or files)."""
    fields = _stat_fields(pid)
    return fields is not None and bool(fields) and fields[0] not in ("Z", "X")


def argv0(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.split(b"\0", 1)[0].decode(errors="replace") if raw else None


def is_ours(record: ProcessRecord) -> bool:
    """The PID is alive and is still the very process `up` started."""
    return (is_alive(record.pid) and start_ticks(record.pid) == record.start_ticks
            and argv0(record.pid) == record.exe)


def reap_if_child(pid: int) -> None:
    """Collects the exit status if the process is our (or our subreaper's) child."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def start(name: str, argv: list[str], log: Path, port: int, run_dir: Path,
          env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """Starts a daemon in its own session (terminal signals don't reach it) and records it."""
    log.parent.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                close_fds=True)
    ticks = start_ticks(proc.pid)
    if ticks is None:  # exited before we could look; still record it so errors point at the log
        ticks = -1
    record = ProcessRecord(name=name, pid=proc.pid, exe=argv[0], start_ticks=ticks, port=port,
                           log=str(log))
    (run_dir / f"{name}.json").write_text(record.to_json())
    (run_dir / f"{name}.pid").write_text(f"{proc.pid}\n")
    return proc, record


def read_record(run_dir: Path, name: str) -> ProcessRecord | None:
    try:
        return ProcessRecord.from_json((run_dir / f"{name}.json").read_text())
    except (OSError, ValueError, KeyError):
        return None


def forget(run_dir: Path, name: str) -> None:
    for suffix in (".json", ".pid"):
        (run_dir / f"{name}{suffix}").unlink(missing_ok=True)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap_if_child(pid)
        if not is_alive(pid):
            return True
        time.sleep(0.05)
    return not is_alive(pid)


def stop(record: ProcessRecord, term_timeout: float = TERM_TIMEOUT_S,
         kill_timeout: float = KILL_TIMEOUT_S) -> str:
    """SIGTERM, then SIGKILL after term_timeout. Returns what happened, for the log line."""
    if not is_ours(record):
        return "not running"
    try:
        os.kill(record.pid, signal.SIGTERM)
    except ProcessLookupError:
        return "not running"
    if _wait_gone(record.pid, term_timeout):
        return "stopped"
    if is_ours(record):
        try:
            os.kill(record.pid, signal.SIGKILL)
        except ProcessLookupError:
            return "stopped"
    if _wait_gone(record.pid, kill_timeout):
        return f"killed (no exit {term_timeout:.0f} s after SIGTERM)"
    raise RuntimeError(f"{record.name} (pid {record.pid}) survived SIGKILL")


def _proc_kib(path: str, field: str) -> int | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_kib(pid: int) -> int | None:
    """Resident set size (VmRSS of /proc/<pid>/status), in KiB."""
    return _proc_kib(f"/proc/{pid}/status", "VmRSS:")


def pss_kib(pid: int) -> int | None:
    """Proportional set size, in KiB: shared pages (the four control-plane daemons run one
    binary) are split between the processes sharing them, so these add up honestly."""
    return _proc_kib(f"/proc/{pid}/smaps_rollup", "Pss:")
