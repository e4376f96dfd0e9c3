"""Running `gpuserve simulate` in-process for the CLI tests, with the example classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CLASSES = ROOT / "examples" / "accelerator-classes.yaml"


def simulate(
    capsys: pytest.CaptureFixture[str], service: Path, trace: Path, *extra: str
) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `gpuserve simulate` on ``service`` and ``trace``."""
    code = main(
        ["simulate", "-f", str(service), "--classes", str(CLASSES), "--trace", str(trace), *extra]
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def steady_trace(tmp_path: Path, rows: int = 40) -> Path:
    """An Azure-format trace of ``rows`` requests at 2 req/s, in ``tmp_path``."""
    trace = tmp_path / "t.csv"
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines += [f"{k * 0.5:.1f},100,10" for k in range(rows)]
    trace.write_text("\n".join(lines) + "\n")
    return trace


def burst_trace(
    path: Path, starts: tuple[float, ...], *, per_second: int, context: int, generated: int
) -> Path:
    """An Azure-format trace: 15 minutes at 1 req/s, and 10 s at ``per_second`` req/s from
    each of ``starts``; every request of ``context`` prompt and ``generated`` output tokens."""
    times = [float(k) for k in range(900)]
    for start in starts:
        times += [start + k / per_second for k in range(10 * per_second)]
    rows = (f"{t:.4f},{context},{generated}" for t in sorted(times))
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    return path
