"""`gpuserve-operator` start-up errors a user can fix, said plainly."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _operator(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controllers.entrypoint", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_taken_liveness_port_is_named_without_a_traceback() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = _operator("--liveness", f"http://127.0.0.1:{port}/healthz")
    assert result.returncode == 2, result.stderr
    assert f"127.0.0.1:{port}" in result.stderr and "in use" in result.stderr
    assert "--liveness" in result.stderr  # how to change it
    assert "Traceback" not in result.stderr


def test_help_shows_the_liveness_default() -> None:
    result = _operator("--help")
    assert result.returncode == 0
    assert "0.0.0.0:8080" in " ".join(result.stdout.split())
