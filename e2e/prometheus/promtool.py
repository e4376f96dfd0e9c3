"""``promtool check config`` wrapper."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from e2e.prometheus.server import find_prometheus


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    output: str


def check_config(config_path: Path, *, timeout: float = 30.0) -> CheckResult:
    """Runs ``promtool check config FILE`` (bounded by ``timeout``)."""
    done = subprocess.run(
        [str(find_prometheus("promtool")), "check", "config", str(config_path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return CheckResult(done.returncode == 0, (done.stdout + done.stderr).strip())
